//! The MCP handler: the tool list (rmcp's `#[tool_router]` is the single list), server info,
//! and who the caller is. Each tool's logic lives in its own file under `tools/`.

mod boards;
mod caller;
mod jobs;
mod shell;

pub use caller::session_id;

use std::borrow::Cow;
use std::sync::Arc;

use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::tool::schema_for_output;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{
    CallToolResponse, CallToolResult, CancelTaskParams, GetTaskParams, GetTaskResult,
    Implementation, ListResourceTemplatesResult, ListResourcesResult, MetaObject,
    PaginatedRequestParams, ProtocolVersion, ReadResourceRequestParams, ReadResourceResponse,
    ServerCapabilities, ServerConfig, SubscribeRequestParams, SubscriptionFilter,
    UnsubscribeRequestParams,
};
use rmcp::service::{NotificationContext, RequestContext, SubscriptionContext};
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler, tool, tool_handler, tool_router};

use crate::device_filter::DeviceFilter;
use crate::list_cache::ListCache;
use crate::notify::{self, Subscriptions};
use crate::resources;
use crate::tools::console::{
    ConsoleReadRequest, ConsoleReadResult, ConsoleWriteRequest, ConsoleWriteResult,
};
use crate::tools::devices::{WaitRequest, WaitResult};
use crate::tools::files::{
    ListFilesRequest, ListFilesResult, RemoveFileRequest, RemoveFileResult, StatFileRequest,
    StatFileResult, WriteFileRequest, WriteFileResult,
};
use crate::tools::locks::{LeaseResult, LockRequest, UnlockRequest, UnlockResult};
use crate::tools::{self, execute::ExecuteRequest, execute::ExecuteResult};
use crate::views::{CommandList, DeviceList, LockList};
use gatecmd_core::identity::ClientIdentity;
use gatecmd_domain::state::AppState;

/// One MCP handler; rmcp makes one per session (legacy) or per request (stateless).
#[derive(Clone)]
pub struct GatecmdServer {
    pub(crate) state: Arc<AppState>,
    /// Kept `list_devices` answers, shared by every handler of one transport.
    lists: Arc<ListCache>,
    /// Who the stdio transport's client is (HTTP clients are identified per request).
    local_identity: Option<ClientIdentity>,
    /// URIs this (legacy) session subscribed to with `resources/subscribe`.
    subscriptions: Subscriptions,
    tool_router: ToolRouter<Self>,
}

impl GatecmdServer {
    /// A handler for HTTP: the caller's identity comes from each request. `lists` lives as
    /// long as the transport (rmcp makes a handler per stateless request).
    pub fn new(state: Arc<AppState>, lists: Arc<ListCache>) -> Self {
        GatecmdServer {
            state,
            lists,
            local_identity: None,
            subscriptions: Subscriptions::default(),
            tool_router: Self::shared_router(),
        }
    }

    /// A handler for stdio: the local user is the client `stdio`.
    pub fn new_stdio(state: Arc<AppState>) -> Self {
        GatecmdServer {
            local_identity: Some(ClientIdentity::local("stdio")),
            ..Self::new(state, Arc::default())
        }
    }
}

/// The `_meta` key that marks a tool answering at once (no waiting, no child process, no
/// hashing of a whole file). A 2026-07-28 call to such a tool is answered by rmcp directly
/// as JSON (`is_quick` in `src/transport/json_answer.rs`); every other call streams, so that a long
/// one is never silent. A tool left unmarked is only slower; a slow tool marked could sit
/// silent past a client's read timeout. Clients see the mark in `tools/list` too.
pub const ANSWERS_AT_ONCE: &str = "gatecmd/answersAtOnce";

/// The `meta` of a `#[tool]` that answers at once. It also says that the tool never
/// becomes an MCP task (rmcp 3.11's `Tool` has no 2025-11-25 `execution.taskSupport`
/// field, so the same word travels in `_meta`; docs/TOOLS.md).
fn answers_at_once() -> MetaObject {
    let mut meta = MetaObject::new();
    meta.0.insert(ANSWERS_AT_ONCE.into(), true.into());
    meta.0.insert(
        rmcp::model::TASKS_EXTENSION_ID.into(),
        serde_json::json!({ "taskSupport": "forbidden" }),
    );
    meta
}

impl GatecmdServer {
    /// The tool list, built once: rmcp makes a handler per stateless request, and building
    /// the router (every tool's schemas) for each would be wasted work on the hot path.
    /// Every schema in it is standard JSON Schema (`standardize` in src/tools/schema.rs).
    fn shared_router() -> ToolRouter<Self> {
        static ROUTER: std::sync::OnceLock<ToolRouter<GatecmdServer>> = std::sync::OnceLock::new();
        ROUTER
            .get_or_init(|| {
                crate::schema::standardize(
                    Self::tool_router()
                        + Self::board_router()
                        + Self::job_router()
                        + Self::shell_router(),
                )
            })
            .clone()
    }

    /// The tools marked [`ANSWERS_AT_ONCE`] in the tool list.
    pub fn quick_tools() -> Vec<String> {
        Self::shared_router()
            .list_all()
            .into_iter()
            .filter(|t| {
                t.meta
                    .as_ref()
                    .and_then(|m| m.0.get(ANSWERS_AT_ONCE))
                    .is_some_and(|v| v.as_bool() == Some(true))
            })
            .map(|t| t.name.into_owned())
            .collect()
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
        output_schema = schema_for_output::<CommandList>(),
        meta = answers_at_once()
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
                       (see list_commands). No shell is involved. A command that touches a device class \
                       locks that device while it runs: pass lease (from lock_device) if you hold one, \
                       wait_secs to queue if it is busy, device to pick one board. Returns exit code, \
                       stdout, stderr and timing. With dry_run: true, validates and shows the exact argv \
                       and lock keys without running.",
        annotations(read_only_hint = false, destructive_hint = true, idempotent_hint = false, open_world_hint = false),
        output_schema = schema_for_output::<ExecuteResult>()
    )]
    async fn execute_command(
        &self,
        Parameters(req): Parameters<ExecuteRequest>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let who = self.identity(&ctx)?;
        let task = jobs::wants_task(&ctx);
        Ok(tools::execute::run(&self.state, &who, session_id(&ctx), req, &ctx, task).await)
    }

    /// Lists attached USB devices.
    #[tool(
        description = "List the USB devices attached to the host: id (physical port path, stable across \
                       re-enumeration), vid/pid, Rockchip SoC and mode (maskrom/loader), strings, bus and \
                       device numbers, the config's device class and who holds the device's lock. \
                       Optional filters: id, vid, pid, class, mode.",
        annotations(read_only_hint = true, destructive_hint = false, idempotent_hint = true, open_world_hint = false),
        output_schema = schema_for_output::<DeviceList>(),
        meta = answers_at_once()
    )]
    async fn list_devices(
        &self,
        Parameters(filter): Parameters<DeviceFilter>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let who = self.identity(&ctx)?;
        Ok(tools::devices::list(
            &self.state,
            &self.lists,
            &who.name,
            filter,
        ))
    }

    /// Waits until a matching device is attached or detached.
    #[tool(
        description = "Wait until a device matching {id?, vid?, pid?, class?, mode?} is attached, or until none \
                       is (state: attached|detached), up to timeout_secs (default 30). Use it after a command \
                       that makes a board re-enumerate (rkdeveloptool db, rd). Returns the device.",
        annotations(read_only_hint = true, destructive_hint = false, idempotent_hint = true, open_world_hint = false),
        output_schema = schema_for_output::<WaitResult>()
    )]
    async fn wait_for_device(
        &self,
        Parameters(req): Parameters<WaitRequest>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let who = self.identity(&ctx)?;
        Ok(tools::devices::wait(&self.state, &who.name, req, &ctx).await)
    }

    /// Takes a lease on a device's lock.
    #[tool(
        description = "Lease a device (by device id, or by lock key such as usb:2207:350b) so that only you \
                       run commands on it across several calls, e.g. db → re-enumeration → wl → rd. Pass \
                       the returned lease_id as `lease` to execute_command. The lease renews with each \
                       command and expires after ttl_secs of inactivity. wait_secs queues fairly if busy.",
        annotations(read_only_hint = false, destructive_hint = false, idempotent_hint = false, open_world_hint = false),
        output_schema = schema_for_output::<LeaseResult>()
    )]
    async fn lock_device(
        &self,
        Parameters(req): Parameters<LockRequest>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let who = self.identity(&ctx)?;
        Ok(tools::locks::lock(&self.state, &who, session_id(&ctx), req, &ctx).await)
    }

    /// Releases a lease.
    #[tool(
        description = "Release a lease taken with lock_device; the next waiter gets the device.",
        annotations(read_only_hint = false, destructive_hint = false, idempotent_hint = true, open_world_hint = false),
        output_schema = schema_for_output::<UnlockResult>(),
        meta = answers_at_once()
    )]
    async fn unlock_device(
        &self,
        Parameters(req): Parameters<UnlockRequest>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let who = self.identity(&ctx)?;
        Ok(tools::locks::unlock(&self.state, &who, req))
    }

    /// Lists leases, running commands and waiters.
    #[tool(
        description = "List every device lock that is leased, in use or waited for: holder, note, since, \
                       lease expiry, running command and queue length.",
        annotations(read_only_hint = true, destructive_hint = false, idempotent_hint = true, open_world_hint = false),
        output_schema = schema_for_output::<LockList>(),
        meta = answers_at_once()
    )]
    async fn list_locks(
        &self,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let who = self.identity(&ctx)?;
        Ok(tools::locks::list(&self.state, &who.name))
    }

    /// Reads a board's serial console.
    #[tool(
        description = "Read a board's serial console (captured continuously by the server): text since \
                       cursor (default: the last 4 KiB), ANSI codes and \\r overwrites cleaned. wait_for \
                       (a regex, e.g. \"Hit any key\" or \"login:\") waits up to timeout_secs for it in \
                       new output. Pass next_cursor as cursor to read on; dropped_bytes says what the \
                       buffer lost. Needs the board's lease (lock_board) unless you are admin.",
        annotations(read_only_hint = true, destructive_hint = false, idempotent_hint = false, open_world_hint = false),
        output_schema = schema_for_output::<ConsoleReadResult>()
    )]
    async fn console_read(
        &self,
        Parameters(req): Parameters<ConsoleReadRequest>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let who = self.identity(&ctx)?;
        Ok(tools::console::read_for(&self.state, &who, req, &ctx.ct).await)
    }

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
        Ok(
            tools::console::write(&self.state.consoles, &boards, &self.state.audit, &who, req)
                .await,
        )
    }

    // File staging: agents have no shared folder, so images travel through these tools.

    /// Lists a directory inside a file root.
    #[tool(
        description = "List a directory inside a file root (the directories where command file \
                       arguments live): name, type, size, modified; symlinks are shown, never followed. \
                       Also returns the roots (which you may write) and your upload limits.",
        annotations(read_only_hint = true, destructive_hint = false, idempotent_hint = true, open_world_hint = false),
        output_schema = schema_for_output::<ListFilesResult>(),
        meta = answers_at_once()
    )]
    async fn list_files(
        &self,
        Parameters(req): Parameters<ListFilesRequest>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let who = self.identity(&ctx)?;
        Ok(tools::files::list(self.state.clone(), &who, req).await)
    }

    /// Size and SHA-256 of a file inside a file root.
    #[tool(
        description = "Size, modification time and SHA-256 of a regular file inside a file root: \
                       confirm the host has exactly the image you built before flashing it.",
        annotations(read_only_hint = true, destructive_hint = false, idempotent_hint = true, open_world_hint = false),
        output_schema = schema_for_output::<StatFileResult>()
    )]
    async fn stat_file(
        &self,
        Parameters(req): Parameters<StatFileRequest>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let who = self.identity(&ctx)?;
        Ok(tools::files::stat(self.state.clone(), &who, req).await)
    }

    /// Uploads one chunk of a file.
    #[tool(
        description = "Upload a file into a file root in base64 chunks: offset 0 starts (truncate: true \
                       restarts an unfinished upload), each next chunk at the returned next_offset; give \
                       sha256 of the whole file with the last chunk: it is verified, then the file appears \
                       under its name (never before). Chunk size limit: see list_files.",
        annotations(read_only_hint = false, destructive_hint = true, idempotent_hint = false, open_world_hint = false),
        output_schema = schema_for_output::<WriteFileResult>()
    )]
    async fn write_file(
        &self,
        Parameters(req): Parameters<WriteFileRequest>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let who = self.identity(&ctx)?;
        Ok(tools::files::write(self.state.clone(), &who, req).await)
    }

    /// Removes a file.
    #[tool(
        description = "Remove a regular file inside a file root you may write (files only; also aborts \
                       an unfinished upload when given its .<name>.gatecmd-upload name).",
        annotations(read_only_hint = false, destructive_hint = true, idempotent_hint = false, open_world_hint = false),
        output_schema = schema_for_output::<RemoveFileResult>(),
        meta = answers_at_once()
    )]
    async fn remove_file(
        &self,
        Parameters(req): Parameters<RemoveFileRequest>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let who = self.identity(&ctx)?;
        Ok(tools::files::remove(self.state.clone(), &who, req).await)
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
            ProtocolVersion::V_2024_11_05,
        ])
    }

    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_resources()
                .enable_resources_list_changed()
                .enable_resources_subscribe()
                .enable_tasks()
                .build(),
        )
        .with_server_info(
            Implementation::new("gatecmd", env!("CARGO_PKG_VERSION"))
                .with_title("gatecmd: USB board bench")
                .with_description("Allowlisted host commands (flashing tools, lsusb) on USB development boards."),
        )
        .with_instructions(
            "gatecmd runs allowlisted host commands on USB development boards for you. Call list_devices \
             to see the boards, list_commands to see what you may run, then execute_command. Hold a board \
             across several commands with lock_device/unlock_device. Subscribe to gatecmd://devices for \
             hotplug notifications. To get a file (e.g. an image) onto the host, upload it with \
             write_file into a file root (list_files shows them), then pass its path as the \
             command's file argument.",
        )
    }

    async fn on_initialized(&self, ctx: NotificationContext<RoleServer>) {
        // Only legacy sessions initialize; they get their notifications from a forwarder.
        notify::spawn_legacy_forwarder(
            self.state.clone(),
            ctx.peer.clone(),
            self.subscriptions.clone(),
        );
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, McpError> {
        Ok(ListResourcesResult::with_all_items(resources::list(
            &self.state,
        )))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, McpError> {
        Ok(ListResourceTemplatesResult::with_all_items(
            resources::templates(),
        ))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, McpError> {
        let who = self.identity(&ctx)?;
        resources::read(&self.state, &who, &request.uri).map(Into::into)
    }

    #[allow(deprecated)]
    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let who = self.identity(&ctx)?;
        self.subscriptions.add(&self.state, &who.name, request.uri)
    }

    #[allow(deprecated)]
    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.subscriptions.remove(&request.uri);
        Ok(())
    }

    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        let mut accepted = requested.supported_by(&self.get_info().capabilities);
        if let Some(uris) = &mut accepted.resource_subscriptions {
            uris.retain(|u| crate::subscriptions::check_uri(&self.state, u).is_ok());
        }
        Some(accepted)
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, McpError> {
        let who = self.identity(&ctx)?;
        crate::tasks::get(&self.state, &who, &request.task_id)
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let who = self.identity(&ctx)?;
        crate::tasks::cancel(&self.state, &who, &request.task_id)
    }

    async fn listen(&self, context: SubscriptionContext) -> Result<(), McpError> {
        let who = self.identity(context.request_context())?;
        let share = crate::subscriptions::admit_listen(&self.state, &who.name, &context)?;
        notify::listen(self.state.clone(), context, share).await;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every format left in any tool's input or output schema is a JSON Schema format:
    /// schemars' `uint64` and friends make SDK validators warn (tests/ts/schemas.test.mjs).
    #[test]
    fn every_tool_schema_is_standard_json_schema() {
        fn walk(v: &serde_json::Value, at: &str, bad: &mut Vec<String>) {
            match v {
                serde_json::Value::Object(o) => {
                    if let Some(serde_json::Value::String(f)) = o.get("format")
                        && !crate::schema::STANDARD_FORMATS.contains(&f.as_str())
                    {
                        bad.push(format!("{at}: format {f:?}"));
                    }
                    for (k, v) in o {
                        walk(v, &format!("{at}/{k}"), bad);
                    }
                }
                serde_json::Value::Array(a) => {
                    for (i, v) in a.iter().enumerate() {
                        walk(v, &format!("{at}/{i}"), bad);
                    }
                }
                _ => {}
            }
        }
        let tools = GatecmdServer::shared_router().list_all();
        assert!(tools.len() >= 10, "{} tools", tools.len());
        let mut bad = Vec::new();
        let mut unsigned = 0;
        for t in &tools {
            let input = serde_json::Value::Object((*t.input_schema).clone());
            walk(&input, &format!("{}/input", t.name), &mut bad);
            let output = t
                .output_schema
                .as_ref()
                .expect("every tool has an output schema");
            let output = serde_json::Value::Object((**output).clone());
            walk(&output, &format!("{}/output", t.name), &mut bad);
            unsigned += input.to_string().matches("\"minimum\":0").count();
        }
        assert!(bad.is_empty(), "non-standard formats: {bad:#?}");
        // The check can fail: the router as the macros build it has schemars' formats.
        let raw = GatecmdServer::tool_router() + GatecmdServer::board_router();
        let mut raw_bad = Vec::new();
        for t in raw.list_all() {
            let input = serde_json::Value::Object((*t.input_schema).clone());
            walk(&input, &t.name, &mut raw_bad);
        }
        assert!(!raw_bad.is_empty(), "schemars wrote no integer format");
        // What the formats meant survives as bounds (`wait_secs`, `timeout_secs`, …).
        assert!(
            unsigned > 5,
            "{unsigned} unsigned integers in the input schemas"
        );
    }

    #[test]
    fn quick_tools_come_from_the_tool_list() {
        let router = GatecmdServer::shared_router();
        let quick = GatecmdServer::quick_tools();
        for name in &quick {
            assert!(
                router.has_route(name),
                "{name} is marked quick but is no tool"
            );
        }
        let mut quick: Vec<&str> = quick.iter().map(String::as_str).collect();
        quick.sort_unstable();
        assert_eq!(
            quick,
            [
                "list_boards",
                "list_commands",
                "list_devices",
                "list_files",
                "list_jobs",
                "list_locks",
                "remove_file",
                "unlock_device"
            ]
        );
    }
}
