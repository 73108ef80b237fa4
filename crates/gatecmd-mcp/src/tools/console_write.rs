//! `console_write`: text to a board's serial console as given, control characters
//! included, under the board's lease; audited by length and SHA-256, never the bytes.
//! When an `approvals:` rule holds (`tool: console_write`, or a rule on the board), the
//! call waits for a yes after every check and before a byte is written; the approver sees
//! the text (escaped, bounded), its length and SHA-256.

use rmcp::handler::server::tool::schema_for_output;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::CallToolResult;
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, tool, tool_router};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::calls::answer::{refusal, structured};
use crate::calls::approvals;
use crate::console::console_access::{ConsoleError, console_of};
use crate::handler::GatecmdServer;
use gatecmd_core::identity::ClientIdentity;
use gatecmd_core::refusal::Refusal;
use gatecmd_domain::approvals::NewRequest;
use gatecmd_domain::audit::{Audit, ConsoleWriteRecord};
use gatecmd_domain::config::{Gated, GatedTool, approval_rule};
use gatecmd_domain::console::{Console, Consoles};
use gatecmd_domain::state::AppState;

/// Most bytes one `console_write` sends (a command line, a few keystrokes, a short script).
pub const MAX_WRITE_BYTES: usize = 16 * 1024;
/// Most characters of the (escaped) text an approver is shown; its length and SHA-256
/// cover the whole.
pub const SHOWN_CHARS: usize = 1024;

/// Arguments of `console_write`.
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ConsoleWriteRequest {
    /// Board name; your client must hold its lease (lock_board).
    pub board: String,
    /// Sent as given, control characters included: "\u0003" (Ctrl-C) stops U-Boot's
    /// autoboot; end a command line with "\n" (or "\r" where the board expects it).
    pub text: String,
}

/// Result of `console_write`.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(transform = crate::calls::answer::or_refusal)]
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
                       (\"\\u0003\" = Ctrl-C stops U-Boot's autoboot; end a command with \"\\n\"). Only the \
                       client holding the board's lease (lock_board) may write; it is known by your client, \
                       no lease argument. Returns the cursor to read the answer from (console_read). When an approvals rule \
                       holds, nothing is written until an approver says yes (the call waits).",
        annotations(read_only_hint = false, destructive_hint = true, idempotent_hint = false, open_world_hint = false),
        output_schema = schema_for_output::<ConsoleWriteResult>()
    )]
    async fn console_write(
        &self,
        Parameters(req): Parameters<ConsoleWriteRequest>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let who = self.identity(&ctx)?;
        if let Some(r) =
            crate::lab::forward::remote_call(&self.state, &who, "console_write", &req, 0).await
        {
            return Ok(r);
        }
        if let Err(r) = approved(&self.state, &who, &req, &ctx).await {
            return Ok(r);
        }
        let boards = self.state.config().board_names();
        Ok(write(&self.state.consoles, &boards, &self.state.audit, &who, req).await)
    }
}

/// The text as an approver sees it: JSON-escaped (`\u0003`, `\n`), at most
/// [`SHOWN_CHARS`] characters, with the length and SHA-256 of the whole.
pub fn shown(text: &str) -> String {
    let escaped = serde_json::to_string(text).unwrap_or_default();
    let mut out: String = escaped.chars().take(SHOWN_CHARS).collect();
    if out.len() < escaped.len() {
        out.push('…');
    }
    format!(
        "{out} ({} bytes, SHA-256 {})",
        text.len(),
        hex::encode(Sha256::digest(text.as_bytes()))
    )
}

/// When an `approvals:` rule holds for the write: after the checks `write` makes (so a
/// call refused anyway asks nobody), waits in the call for a yes, holding nothing. `Ok`
/// when no rule holds or the yes came; the refusal (audited like `write`'s) otherwise.
/// `write` then checks everything again, the lease included.
async fn approved(
    state: &AppState,
    who: &ClientIdentity,
    req: &ConsoleWriteRequest,
    ctx: &RequestContext<RoleServer>,
) -> Result<(), CallToolResult> {
    let config = state.config();
    if config.approvals.is_empty() {
        return Ok(());
    }
    let Some(board) = config.board(&req.board) else {
        return Ok(()); // `write` refuses it, naming the boards
    };
    let held = Gated::Tool {
        tool: GatedTool::ConsoleWrite,
        action: "",
    };
    let Some(rule) = approval_rule(&config.approvals, held, &[board]) else {
        return Ok(());
    };
    if checked(&state.consoles, &config.board_names(), who, req).is_err() {
        return Ok(()); // `write` refuses it, audited
    }
    let spec = NewRequest {
        client: who.name.clone(),
        note: None,
        tool: "console_write".into(),
        what: format!("console_write {}: {}", req.board, shown(&req.text)),
        argv: None,
        board: Some(req.board.clone()),
        holder: approvals::board_holder(state, &req.board),
        files: vec![],
        rule: rule.describe(),
        approvers: rule.by.clone(),
        timeout: rule.timeout,
        job: None,
    };
    approvals::wait_in_call(state, spec, None, ctx)
        .await
        .map_err(|r| {
            state.audit.record(&ConsoleWriteRecord {
                client: &who.name,
                board: &req.board,
                bytes: req.text.len(),
                sha256: &hex::encode(Sha256::digest(req.text.as_bytes())),
                outcome: "refused",
                detail: Some(r.reason.as_str()),
            });
            refusal(r)
        })
}

/// Every check of a write but the writing: the text's size, the board's console, the
/// caller's lease.
fn checked(
    consoles: &Consoles,
    boards: &[String],
    who: &ClientIdentity,
    req: &ConsoleWriteRequest,
) -> Result<Console, ConsoleError> {
    let bytes = req.text.as_bytes();
    if bytes.is_empty() {
        return Err(ConsoleError::EmptyText);
    }
    if bytes.len() > MAX_WRITE_BYTES {
        return Err(ConsoleError::TextTooLong {
            bytes: bytes.len(),
            max: MAX_WRITE_BYTES,
        });
    }
    let console = console_of(consoles, boards, &req.board)?;
    consoles
        .access()
        .check_lease(&who.name, &req.board)
        .map_err(ConsoleError::NoLease)?;
    Ok(console)
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
    let console = match checked(consoles, boards, who, &req) {
        Ok(c) => c,
        Err(e) => return refuse(e),
    };
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_approver_sees_control_characters_escaped_and_a_long_text_bounded() {
        let s = shown("\u{3}dd if=/dev/zero of=/dev/mmcblk0\n");
        assert!(
            s.starts_with(r#""\u0003dd if=/dev/zero of=/dev/mmcblk0\n""#),
            "{s}"
        );
        assert!(s.contains("(33 bytes, SHA-256 "), "{s}");
        let long = "x".repeat(MAX_WRITE_BYTES);
        let s = shown(&long);
        let digest = hex::encode(Sha256::digest(long.as_bytes()));
        assert!(s.contains(&digest), "the digest covers the whole text");
        assert!(s.contains("…"), "cut where it is bounded");
        assert!(s.len() < SHOWN_CHARS + 200, "{} bytes shown", s.len());
    }
}
