//! `list_devices`: the device registry as agents see it, with the class label from the
//! config and the lock state of each device's key. The unfiltered answer is kept per
//! caller until something it shows changes (`list_cache.rs`).

use rmcp::handler::server::tool::schema_for_output;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::CallToolResult;
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, tool, tool_router};

use crate::calls::answer::{refusal, structured};
use crate::calls::device_filter::DeviceFilter;
use crate::handler::{GatecmdServer, answers_at_once};
use crate::views::list_cache::{ListCache, Stamp};
use crate::views::{DeviceList, DeviceView, render_device};
use gatecmd_domain::config::Config;
use gatecmd_domain::state::AppState;

#[tool_router(router = list_devices_router, vis = "pub(crate)")]
impl GatecmdServer {
    /// Lists attached USB devices.
    #[tool(
        description = "List the USB devices attached to the host: id (physical port path, stable across \
                       re-enumeration), vid/pid, Rockchip SoC and mode (maskrom/loader), strings, bus and \
                       device numbers, the config's device class and who holds the device's lock. \
                       Optional filters: id, vid, pid, class, mode. Use it to find a device id for \
                       execute_command or lock_device.",
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
        Ok(list(&self.state, &self.lists, &who.name, filter))
    }
}

/// `list_devices`. The unfiltered answer comes from `lists` while nothing it shows has
/// changed.
pub fn list(
    state: &AppState,
    lists: &ListCache,
    caller: &str,
    filter: DeviceFilter,
) -> CallToolResult {
    if !filter.is_empty() {
        return build_list(state, &state.config(), caller, filter);
    }
    let stamp = Stamp::now(state.config(), &state.registry, &state.locks);
    if let Some(answer) = lists.get(&stamp, caller) {
        return answer;
    }
    let answer = build_list(state, &stamp.config().clone(), caller, filter);
    lists.put(stamp, caller, &answer);
    answer
}

fn build_list(
    state: &AppState,
    config: &Config,
    caller: &str,
    filter: DeviceFilter,
) -> CallToolResult {
    if let Err(e) = filter.validate(config) {
        return refusal(e.into());
    }
    let devices: Vec<DeviceView> = state
        .registry
        .snapshot()
        .into_iter()
        .filter(|d| filter.matches(config, d))
        .map(|d| DeviceView::new(state, config, d, caller))
        .collect();
    let mut text = if devices.is_empty() {
        format!("No device matches ({}).\n", filter.describe())
    } else {
        devices
            .iter()
            .map(render_device)
            .collect::<Vec<_>>()
            .join("\n")
            + "\n"
    };
    let source = state.registry.source().to_string();
    text.push_str(&format!("(event source: {source})\n"));
    structured(
        &DeviceList {
            devices,
            event_source: source,
        },
        text,
    )
}
