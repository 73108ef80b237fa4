//! The MCP handler: the tool list (rmcp's `#[tool_router]` is the single list), server info,
//! and who the caller is. Each tool's logic lives in its own file under `tools/`.

use std::borrow::Cow;
use std::sync::{Arc, RwLock};

use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::tool::schema_for_output;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{
    CallToolResult, Implementation, ProtocolVersion, ServerCapabilities, ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler, tool, tool_handler, tool_router};

use crate::audit::Audit;
use crate::auth::ClientIdentity;
use crate::config::Config;
use crate::exec::Executor;
use crate::tools::{self, commands::CommandList, execute::ExecuteRequest, execute::ExecuteResult};

/// State shared by every session: the one source of truth the handlers read.
pub struct AppState {
    // A std lock: readers clone the Arc and never hold it across an await.
    config: RwLock<Arc<Config>>,
    pub executor: Executor,
    /// Where decisions are recorded (src/audit.rs); disabled unless the caller opened one.
    pub audit: Audit,
}

impl AppState {
    /// State for `config`, with an executor sized by its limits.
    pub fn new(config: Config) -> Arc<Self> {
        Self::with_audit(config, Audit::disabled())
    }

    /// State for `config` that records its decisions in `audit`.
    pub fn with_audit(config: Config, audit: Audit) -> Arc<Self> {
        let executor = Executor::new(
            config.limits.max_concurrent_children,
            config.limits.max_output_bytes,
            std::time::Duration::from_secs(config.limits.kill_grace_secs),
        );
        Arc::new(AppState {
            config: RwLock::new(Arc::new(config)),
            executor,
            audit,
        })
    }

    /// The configuration in force now.
    pub fn config(&self) -> Arc<Config> {
        match self.config.read() {
            Ok(c) => c.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// Replaces the configuration (after it was validated).
    pub fn replace_config(&self, config: Config) {
        // New rotation limits apply at once; a new `state_dir` only at restart.
        self.audit.configure(&config.audit);
        match self.config.write() {
            Ok(mut c) => *c = Arc::new(config),
            Err(poisoned) => *poisoned.into_inner() = Arc::new(config),
        }
    }
}

/// One MCP handler; rmcp makes one per session (legacy) or per request (stateless).
#[derive(Clone)]
pub struct GatecmdServer {
    pub(crate) state: Arc<AppState>,
    /// Who the stdio transport's client is (HTTP clients are identified per request).
    local_identity: Option<ClientIdentity>,
    tool_router: ToolRouter<Self>,
}

impl GatecmdServer {
    /// A handler for HTTP: the caller's identity comes from each request.
    pub fn new(state: Arc<AppState>) -> Self {
        GatecmdServer {
            state,
            local_identity: None,
            tool_router: Self::tool_router(),
        }
    }

    /// A handler for stdio: the local user is the client `stdio`.
    pub fn new_stdio(state: Arc<AppState>) -> Self {
        GatecmdServer {
            state,
            local_identity: Some(ClientIdentity::local("stdio")),
            tool_router: Self::tool_router(),
        }
    }

    /// The authenticated caller of a request.
    pub(crate) fn identity(
        &self,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<ClientIdentity, McpError> {
        if let Some(id) = ctx
            .extensions
            .get::<http::request::Parts>()
            .and_then(|p| p.extensions.get::<ClientIdentity>())
        {
            return Ok(id.clone());
        }
        self.local_identity
            .clone()
            .ok_or_else(|| McpError::internal_error("request carries no client identity", None))
    }
}

#[tool_router]
impl GatecmdServer {
    /// Lists the allowlisted commands with every allowed argument pattern.
    #[tool(
        description = "List the host commands you may run, each with its allowed argument patterns \
                       ({slot} = a value you choose), timeout and the device class it touches. \
                       Call this before execute_command.",
        annotations(read_only_hint = true, destructive_hint = false, idempotent_hint = true, open_world_hint = false),
        output_schema = schema_for_output::<CommandList>()
    )]
    async fn list_commands(
        &self,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let who = self.identity(&ctx)?;
        Ok(tools::commands::list(&self.state.config(), &who))
    }

    /// Runs one allowlisted command.
    #[tool(
        description = "Run one allowlisted host command with arguments that match one of its patterns \
                       (see list_commands). No shell is involved. Returns exit code, stdout, stderr and \
                       timing. With dry_run: true, validates and shows the exact argv without running.",
        annotations(read_only_hint = false, destructive_hint = true, idempotent_hint = false, open_world_hint = false),
        output_schema = schema_for_output::<ExecuteResult>()
    )]
    async fn execute_command(
        &self,
        Parameters(req): Parameters<ExecuteRequest>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let who = self.identity(&ctx)?;
        Ok(tools::execute::run(&self.state, &who, req, &ctx).await)
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for GatecmdServer {
    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(&[
            ProtocolVersion::V_2026_07_28,
            ProtocolVersion::V_2025_11_25,
            ProtocolVersion::V_2025_06_18,
            ProtocolVersion::V_2025_03_26,
        ])
    }

    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(
                Implementation::new("gatecmd", env!("CARGO_PKG_VERSION"))
                    .with_title("gatecmd: USB board bench")
                    .with_description(
                        "Allowlisted host commands (flashing tools, lsusb) on USB development boards.",
                    ),
            )
            .with_instructions(
                "gatecmd runs allowlisted host commands for you. Call list_commands to see what you \
                 may run and with which arguments, then execute_command.",
            )
    }
}
