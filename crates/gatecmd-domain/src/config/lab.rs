//! The `labgrid:` section: gatecmd as an exporter of a labgrid coordinator (docs/LAB.md,
//! docs/CONFIG.md). Off unless `coordinator` is set; restart-only but for `peers`, which a
//! reload changes (each call on a peer reads the configuration in force).

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
            restart: "the labgrid exporter connects, binds its console and power ports and \
                registers its boards once, at start (docs/LAB.md)",
        },
        name: Option<String> {
            default: None,
            shown: "this host's name",
            docs: "the exporter name: resources show as `NAME/BOARD/CLASS/RESOURCE`. 1-64 of \
                `[A-Za-z0-9_.-]`; two exporters may not share one.",
            restart: "the labgrid exporter connects, binds its console and power ports and \
                registers its boards once, at start (docs/LAB.md)",
        },
        console_bind: String {
            default: "127.0.0.1".into(),
            docs: "the IP the console TCP ports (one per board with a console, ephemeral) and \
                the power port (labgrid's `rest` power model) listen on. Not a boundary (NAT \
                guests reach loopback): the ports serve only a person of `people` who \
                acquired the board's place, from one of their accounts (docs/LAB.md, \"Who \
                may use the ports\").",
            restart: "the labgrid exporter connects, binds its console and power ports and \
                registers its boards once, at start (docs/LAB.md)",
        },
        host: Option<String> {
            default: None,
            shown: "`console_bind`",
            docs: "the host the resources name (`NetworkSerialPort.host`, the power URL's \
                host).",
            restart: "the labgrid exporter connects, binds its console and power ports and \
                registers its boards once, at start (docs/LAB.md)",
        },
        proxy: Option<String> {
            default: None,
            shown: "this host's name",
            docs: "the host labgrid-client opens its SSH forwards through (`extra.proxy`).",
            restart: "the labgrid exporter connects, binds its console and power ports and \
                registers its boards once, at start (docs/LAB.md)",
        },
        proxy_required: Option<bool> {
            default: None,
            shown: "`true` when `console_bind` is loopback",
            docs: "whether labgrid-client must use that SSH proxy (`extra.proxy_required`); set \
                `false` when people run labgrid-client on this host, or when `console_bind` \
                is a lab address.",
            restart: "the labgrid exporter connects, binds its console and power ports and \
                registers its boards once, at start (docs/LAB.md)",
        },
        hold_secs: u64 {
            default: DEFAULT_LAB_HOLD_SECS,
            note: "(1-3600)",
            check: hold_in_range,
            docs: "once the coordinator is lost, how long boards held by labgrid places stay \
                held; then they are released (audited) so agents are not locked out by a \
                coordinator that is gone.",
            restart: "the labgrid exporter connects, binds its console and power ports and \
                registers its boards once, at start (docs/LAB.md)",
        },
        people: Vec<RawLabPerson> {
            default: Vec::new(),
            docs: "who may hold boards through labgrid, and from which local accounts their \
                connections to the console and power ports come: `[{name: alice, accounts: \
                [alice]}]`. `name` is the `USER` of the place's `HOST/USER` (`LG_USERNAME`, \
                or the login name), 1-64 of `[A-Za-z0-9_.@+-]`; `accounts`, at least one, \
                are accounts on this host (1-32 of `[A-Za-z0-9_.-]`, the first a letter or \
                `_`), each under one person. A place acquired by anyone else takes no board, \
                and the ports serve no other connection. Empty: labgrid acquisitions take no \
                board and the ports serve nobody. Never list an account VMs run under \
                (docs/LAB.md, \"Who may use the ports\").",
            restart: "the labgrid exporter connects, binds its console and power ports and \
                registers its boards once, at start (docs/LAB.md)",
        },
        peers: Vec<super::peers::RawLabPeer> {
            default: Vec::new(),
            docs: "the other gatecmd hosts of this lab, for agents here to find and use their \
                boards (`list_boards`/`lock_board` with `scope: lab`, tools on `HOST/BOARD`): \
                `[{name: bench-2, url: \"http://bench-2.lab:9222/mcp\", token_file: \
                /etc/gatecmd/bench-2.token}]`. `name` is that host's exporter name (the \
                `HOST` of `HOST/BOARD`), `url` its MCP endpoint (http), and exactly one of \
                `token` or an owner-only `token_file` (absolute; read at each use) the token \
                of a client with `peer: true` in that host's config. Read with or without \
                `coordinator` (docs/LAB.md, \"One lab for agents\").",
        },
    }
}

/// One entry of `labgrid.people` as written.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawLabPerson {
    pub name: String,
    #[serde(default)]
    pub accounts: Vec<String>,
}

/// A person who may hold boards through labgrid (`labgrid.people`): the name their places
/// are acquired under and the local accounts their port connections come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LabPerson {
    /// The `USER` of labgrid's `HOST/USER`: a claim anyone can make at the coordinator.
    pub name: String,
    /// Local accounts on this host (the kernel's owner of a connection's socket); the
    /// credential that a claim of `name` is checked against.
    pub accounts: Vec<String>,
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
    /// Who may hold boards through labgrid, and from which local accounts (empty: nobody).
    pub people: Vec<LabPerson>,
}

impl LabSettings {
    /// The address a console or power listener binds (an ephemeral port on `console_bind`).
    pub fn listen_addr(&self) -> SocketAddr {
        SocketAddr::new(self.console_bind, 0)
    }

    /// The listed person named `name` (the `USER` part of a place's `HOST/USER`).
    pub fn person(&self, name: &str) -> Option<&LabPerson> {
        self.people.iter().find(|p| p.name == name)
    }
}
