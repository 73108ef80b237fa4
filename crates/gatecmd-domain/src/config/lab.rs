//! The `labgrid:` section: gatecmd as an exporter of a labgrid coordinator (docs/LAB.md,
//! docs/CONFIG.md). Off unless `coordinator` is set; restart-only.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use serde::Deserialize;

use super::declare::settings;

settings! {
    /// `labgrid:` as written in YAML; the defaults that depend on this host or on other keys
    /// are the validator's (`validate/lab.rs`).
    #[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
    #[serde(deny_unknown_fields, default)]
    pub struct RawLab {
        coordinator: Option<String> {
            default: None,
            note: "(off)",
            docs: "the coordinator's address, `HOST:PORT`, as `labgrid-client -x` takes it.",
        },
        name: Option<String> {
            default: None,
            shown: "this host's name",
            docs: "the exporter name: resources show as `NAME/BOARD/CLASS/RESOURCE`. 1-64 of \
                `[A-Za-z0-9_.-]`; two exporters may not share one.",
        },
        console_bind: String {
            default: "127.0.0.1".into(),
            docs: "the IP the console TCP ports (one per board with a console, ephemeral) and \
                the power port (labgrid's `rest` power model) listen on. Not a boundary (NAT \
                guests reach loopback): the ports serve only the local user who acquired the \
                board's place (docs/LAB.md, \"Who may use the ports\").",
        },
        host: Option<String> {
            default: None,
            shown: "`console_bind`",
            docs: "the host the resources name (`NetworkSerialPort.host`, the power URL's \
                host).",
        },
        proxy: Option<String> {
            default: None,
            shown: "this host's name",
            docs: "the host labgrid-client opens its SSH forwards through (`extra.proxy`).",
        },
        proxy_required: Option<bool> {
            default: None,
            shown: "`true` when `console_bind` is loopback",
            docs: "whether labgrid-client must use that SSH proxy (`extra.proxy_required`); set \
                `false` when people run labgrid-client on this host, or when `console_bind` \
                is a lab address.",
        },
        hold_secs: u64 {
            default: DEFAULT_LAB_HOLD_SECS,
            note: "(1-3600)",
            check: hold_in_range,
            docs: "once the coordinator is lost, how long boards held by labgrid places stay \
                held; then they are released (audited) so agents are not locked out by a \
                coordinator that is gone.",
        },
    }
}

/// Longest `hold_secs`: a board a person held through a lost coordinator is not kept
/// from the agents for more than an hour.
pub const MAX_LAB_HOLD_SECS: u64 = 3600;

/// How long labgrid-held boards stay held while the coordinator is unreachable, unless
/// the config says otherwise.
pub const DEFAULT_LAB_HOLD_SECS: u64 = 60;

fn hold_in_range(v: &u64) -> Option<String> {
    (*v == 0 || *v > MAX_LAB_HOLD_SECS).then(|| {
        format!(
            "{v} is outside 1-{MAX_LAB_HOLD_SECS}: it is how long boards held by labgrid places stay held once the coordinator is lost"
        )
    })
}

/// gatecmd's part in a labgrid lab (docs/LAB.md).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LabSettings {
    /// The coordinator's gRPC address, `HOST:PORT` (labgrid's `-x`/`LG_COORDINATOR`).
    pub coordinator: String,
    /// The exporter's name at the coordinator (default: this host's name); resources are
    /// `NAME/BOARD/CLASS/RESOURCE`.
    pub name: String,
    /// Where the console TCP ports and the power port listen (loopback by default).
    pub console_bind: IpAddr,
    /// The `host` the resources name, as a person's labgrid-client reaches it through
    /// `proxy` (default: the console bind address).
    pub host: String,
    /// The host people's labgrid-client opens its SSH forwards through (default: this
    /// host's name).
    pub proxy: String,
    /// Whether labgrid must go through `proxy` (default: when `console_bind` is loopback).
    pub proxy_required: bool,
    /// How long boards held by a labgrid place stay held once the coordinator is lost.
    pub hold: Duration,
}

impl LabSettings {
    /// The address a console or power listener binds (an ephemeral port on `console_bind`).
    pub fn listen_addr(&self) -> SocketAddr {
        SocketAddr::new(self.console_bind, 0)
    }
}
