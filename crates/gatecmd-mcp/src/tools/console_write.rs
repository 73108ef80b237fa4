//! `console_write`: text to a board's serial console as given, control characters
//! included, under the board's lease; audited by length and SHA-256, never the bytes.

use rmcp::handler::server::tool::schema_for_output;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::CallToolResult;
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, tool, tool_router};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::answer::{refusal, structured};
use crate::console_access::{ConsoleError, console_of};
use crate::handler::GatecmdServer;
use gatecmd_core::identity::ClientIdentity;
use gatecmd_core::refusal::Refusal;
use gatecmd_domain::audit::{Audit, ConsoleWriteRecord};
use gatecmd_domain::console::Consoles;

/// Most bytes one `console_write` sends (a command line, a few keystrokes, a short script).
pub const MAX_WRITE_BYTES: usize = 16 * 1024;

/// Arguments of `console_write`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ConsoleWriteRequest {
    /// Board name; you must hold its lease (lock_board).
    pub board: String,
    /// Sent as given, control characters included: "\u0003" (Ctrl-C) stops U-Boot's
    /// autoboot; end a command line with "\n" (or "\r" where the board expects it).
    pub text: String,
}

/// Result of `console_write`.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(transform = crate::answer::or_refusal)]
pub struct ConsoleWriteResult {
    pub board: String,
    pub bytes_written: usize,
    /// Read the board's answer from here (console_read cursor).
    pub cursor: u64,
}

#[tool_router(router = console_write_router, vis = "pub(crate)")]
impl GatecmdServer {
    /// Writes to a board's serial console.
    #[tool(
        description = "Write text to a board's serial console as given, control characters included \
                       (\"\\u0003\" = Ctrl-C stops U-Boot's autoboot; end a command with \"\\n\"). Needs \
                       the board's lease (lock_board). Returns the cursor to read the answer from.",
        annotations(read_only_hint = false, destructive_hint = true, idempotent_hint = false, open_world_hint = false),
        output_schema = schema_for_output::<ConsoleWriteResult>()
    )]
    async fn console_write(
        &self,
        Parameters(req): Parameters<ConsoleWriteRequest>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let who = self.identity(&ctx)?;
        let boards = self.state.config().board_names();
        Ok(write(&self.state.consoles, &boards, &self.state.audit, &who, req).await)
    }
}

/// `console_write`: needs the board's lease; audited by length and SHA-256, never the bytes.
pub async fn write(
    consoles: &Consoles,
    boards: &[String],
    audit: &Audit,
    who: &ClientIdentity,
    req: ConsoleWriteRequest,
) -> CallToolResult {
    let bytes = req.text.as_bytes();
    let sha256 = hex::encode(Sha256::digest(bytes));
    let record = |outcome: &str, detail: Option<&str>| {
        audit.record(&ConsoleWriteRecord {
            client: &who.name,
            board: &req.board,
            bytes: bytes.len(),
            sha256: &sha256,
            outcome,
            detail,
        });
    };
    let refuse = |e: ConsoleError| {
        let r = Refusal::of(&e);
        record("refused", Some(r.reason.as_str()));
        refusal(r)
    };
    if bytes.is_empty() {
        return refuse(ConsoleError::EmptyText);
    }
    if bytes.len() > MAX_WRITE_BYTES {
        return refuse(ConsoleError::TextTooLong {
            bytes: bytes.len(),
            max: MAX_WRITE_BYTES,
        });
    }
    let console = match console_of(consoles, boards, &req.board) {
        Ok(c) => c,
        Err(e) => return refuse(e),
    };
    if let Err(e) = consoles.access().check_lease(&who.name, &req.board) {
        return refuse(ConsoleError::NoLease(e));
    }
    let cursor = console.bounds().1;
    match console.write(bytes).await {
        Ok(()) => {
            record("written", None);
            let result = ConsoleWriteResult {
                board: req.board.clone(),
                bytes_written: bytes.len(),
                cursor,
            };
            let text = format!(
                "wrote {} bytes to the console of {}; read the answer with console_read cursor {cursor}",
                bytes.len(),
                req.board
            );
            structured(&result, text)
        }
        Err(e) => refuse(e.into()),
    }
}
