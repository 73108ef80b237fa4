//! Serving MCP: a handler for each transport (`GatecmdServer::new`, `new_stdio`), the tool
//! list built once from the tools' routers (`tools::router`, every schema standardized and
//! made lean),
//! which tools answer at once (`GatecmdServer::quick_tools`, read from that list), and the
//! rest of the protocol in the `ServerHandler` impl: server info, resources and their
//! subscriptions in both protocol eras, tasks. The tools are under `tools/`, one file each;
//! the handler's state and what the tools ask of it are `handler.rs`.

pub mod lean;
pub mod schema;
pub mod tasks;

use std::borrow::Cow;
use std::sync::Arc;

use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::model::{
    CancelTaskParams, GetTaskParams, GetTaskResult, Implementation, ListResourceTemplatesResult,
    ListResourcesResult, PaginatedRequestParams, ProtocolVersion, ReadResourceRequestParams,
    ReadResourceResponse, ServerCapabilities, ServerConfig, SubscribeRequestParams,
    SubscriptionFilter, UnsubscribeRequestParams,
};
use rmcp::service::{NotificationContext, RequestContext, SubscriptionContext};
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler, tool_handler};

use crate::handler::ANSWERS_AT_ONCE;
use crate::resources::notify::{self, Subscriptions};
use crate::views::list_cache::ListCache;
use crate::{resources, tools};
use gatecmd_core::identity::ClientIdentity;
use gatecmd_domain::state::AppState;

/// The handler (defined in `handler.rs`, where the tools reach it), served from here.
pub use crate::handler::GatecmdServer;

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

impl GatecmdServer {
    /// The tool list, built once from the tools' routers (`tools::router`, summed from the
    /// one list in `tools/mod.rs`): rmcp makes a handler per stateless request, and building
    /// the router (every tool's schemas) for each would be wasted work on the hot path.
    /// Every schema in it is standard JSON Schema (`standardize` in `schema.rs`), and lean
    /// enough for an agent's budget (`lean` in `lean.rs`).
    fn shared_router() -> ToolRouter<Self> {
        static ROUTER: std::sync::OnceLock<ToolRouter<GatecmdServer>> = std::sync::OnceLock::new();
        ROUTER
            .get_or_init(|| lean::lean(schema::standardize(tools::router())))
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
            uris.retain(|u| crate::resources::subscriptions::check_uri(&self.state, u).is_ok());
        }
        Some(accepted)
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, McpError> {
        let who = self.identity(&ctx)?;
        crate::server::tasks::get(&self.state, &who, &request.task_id)
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let who = self.identity(&ctx)?;
        crate::server::tasks::cancel(&self.state, &who, &request.task_id)
    }

    async fn listen(&self, context: SubscriptionContext) -> Result<(), McpError> {
        let who = self.identity(context.request_context())?;
        let share =
            crate::resources::subscriptions::admit_listen(&self.state, &who.name, &context)?;
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
                        && !crate::server::schema::STANDARD_FORMATS.contains(&f.as_str())
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
        let raw = tools::router();
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
                "boot_report",
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

    /// One tool, one file: each module of the list in `tools/mod.rs` registers exactly one
    /// tool, named after it, and every file or folder under `src/tools/` is on the list (a
    /// file left off it is never compiled, so its tool would silently be missing).
    #[test]
    fn each_module_of_the_tool_list_is_one_tool_named_after_it() {
        // `power.rs` keeps its name until its logic moves to the domain (issue 30).
        let tool_of = |module: &str| match module {
            "power" => "power_board".to_string(),
            m => m.to_string(),
        };
        for (module, router) in tools::TOOLS {
            let names: Vec<String> = router()
                .list_all()
                .into_iter()
                .map(|t| t.name.into_owned())
                .collect();
            assert_eq!(
                names,
                [tool_of(module)],
                "tools/{module}: one tool, named after it"
            );
        }
        let served = GatecmdServer::shared_router().list_all().len();
        assert_eq!(
            served,
            tools::TOOLS.len(),
            "a tool registered outside the list"
        );
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/tools");
        let mut on_disk: Vec<String> = std::fs::read_dir(&dir)
            .expect("src/tools")
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n != "mod.rs")
            .map(|n| n.trim_end_matches(".rs").to_string())
            .collect();
        on_disk.sort();
        let mut listed: Vec<String> = tools::TOOLS.iter().map(|(m, _)| m.to_string()).collect();
        listed.sort();
        assert_eq!(on_disk, listed, "src/tools/ and the list in tools/mod.rs");
    }
}
