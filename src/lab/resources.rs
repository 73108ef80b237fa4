//! A board as labgrid resources, in labgrid's own classes so that an unmodified
//! `labgrid-client` uses them (docs/LAB.md): group = the board's name;
//! `usb` = `NetworkRKUSBLoader` (what labgrid's exporter makes of a local `RKUSBLoader`:
//! host, busnum, devnum, path, vendor_id, model_id), `console` = `NetworkSerialPort`
//! (gatecmd's TCP port for the captured console, protocol raw), `power` =
//! `NetworkPowerPort` (model `rest`: GET/PUT `0`/`1` on gatecmd's power port).

use std::collections::HashMap;

use super::holds::{Hold, Holder, holder};
use super::proto::{MapValue, Resource, ResourcePath};
use gatecmd_domain::config::{BoardConfig, LabSettings};
use gatecmd_domain::state::AppState;

/// Resource names within a board's group.
pub const USB: &str = "usb";
pub const CONSOLE: &str = "console";
pub const POWER: &str = "power";

/// Where gatecmd serves what it exports: a console port per board that has one, and the
/// power port with each board's index on it.
#[derive(Debug, Clone, Default)]
pub struct Ports {
    pub console: HashMap<String, u16>,
    pub power: Option<u16>,
    /// Board name → its index on the power port (its place in `boards:` at start).
    pub power_index: HashMap<String, u64>,
}

/// The resource names `board` exports.
pub fn names(board: &BoardConfig) -> Vec<&'static str> {
    let mut v = vec![USB];
    if board.console.is_some() {
        v.push(CONSOLE);
    }
    if board.power.is_some() {
        v.push(POWER);
    }
    v
}

/// Every configured board's resources as they should show at the coordinator now,
/// keyed by (group, name).
pub fn all(
    state: &AppState,
    lab: &LabSettings,
    ports: &Ports,
    holds: &HashMap<String, Hold>,
) -> HashMap<(String, String), Resource> {
    let config = state.config();
    let mut out = HashMap::new();
    for board in &config.boards {
        let who = holder(state, &board.name, false);
        let busy = match &who {
            Holder::Other(why) => Some(why.clone()),
            _ => None,
        };
        let hold = holds.get(&board.name);
        for name in names(board) {
            let (cls, params, avail) = match name {
                USB => usb(state, lab, board),
                CONSOLE => console(lab, ports, board),
                _ => power(lab, ports, board),
            };
            let mut extra = HashMap::from([
                ("proxy".to_string(), MapValue::text(&lab.proxy)),
                (
                    "proxy_required".to_string(),
                    MapValue::boolean(lab.proxy_required),
                ),
                ("gatecmd".to_string(), MapValue::boolean(true)),
            ]);
            // labgrid-client shows `extra` (`show`, `resources -v`): why a board an agent
            // holds cannot be acquired.
            if let Some(why) = &busy {
                extra.insert("held_by".into(), MapValue::text(why));
            }
            // The board's tags, so that the other hosts of the lab find it by tag at the
            // coordinator (`directory_feed`; labgrid-client shows them too).
            for (k, v) in &board.tags {
                extra.insert(
                    format!("{}{k}", super::directory_feed::TAG_PREFIX),
                    MapValue::text(v),
                );
            }
            let r = Resource {
                path: Some(ResourcePath {
                    exporter_name: None,
                    group_name: board.name.clone(),
                    resource_name: name.to_string(),
                }),
                cls: cls.to_string(),
                params,
                extra,
                acquired: hold
                    .filter(|h| h.resources.contains(name))
                    .map(|h| h.place.clone())
                    .unwrap_or_default(),
                avail: avail && busy.is_none(),
            };
            out.insert((board.name.clone(), name.to_string()), r);
        }
    }
    out
}

type Params = HashMap<String, MapValue>;

fn usb(state: &AppState, lab: &LabSettings, board: &BoardConfig) -> (&'static str, Params, bool) {
    let dev = state.registry.get(&board.usb);
    let num = |f: fn(&gatecmd_devices::Device) -> u64| {
        dev.as_ref()
            .map(|d| MapValue::uint(f(d)))
            .unwrap_or_else(MapValue::none)
    };
    let params = HashMap::from([
        ("host".to_string(), MapValue::text(&lab.host)),
        ("busnum".to_string(), num(|d| d.busnum.into())),
        ("devnum".to_string(), num(|d| d.devnum.into())),
        (
            "path".to_string(),
            dev.as_ref()
                .map(|d| MapValue::text(d.id.to_string()))
                .unwrap_or_else(MapValue::none),
        ),
        ("vendor_id".to_string(), num(|d| d.vid.into())),
        ("model_id".to_string(), num(|d| d.pid.into())),
    ]);
    ("NetworkRKUSBLoader", params, dev.is_some())
}

fn console(lab: &LabSettings, ports: &Ports, board: &BoardConfig) -> (&'static str, Params, bool) {
    let port = ports.console.get(&board.name).copied();
    let baud = board.console.as_ref().map(|c| c.baud).unwrap_or(115_200);
    let params = HashMap::from([
        ("host".to_string(), MapValue::text(&lab.host)),
        (
            "port".to_string(),
            port.map(|p| MapValue::uint(p.into()))
                .unwrap_or_else(MapValue::none),
        ),
        ("speed".to_string(), MapValue::uint(baud.into())),
        // Bytes as they are: the console port speaks no RFC 2217 (its telnet commands from
        // a client are dropped, so labgrid-client's microcom -t or telnet work).
        ("protocol".to_string(), MapValue::text("raw")),
    ]);
    ("NetworkSerialPort", params, port.is_some())
}

fn power(lab: &LabSettings, ports: &Ports, board: &BoardConfig) -> (&'static str, Params, bool) {
    let index = ports.power_index.get(&board.name).copied().unwrap_or(0);
    let url = match ports.power {
        // labgrid's rest model formats {index} into the URL itself.
        Some(p) => format!("http://{}:{p}/power/{{index}}/value", url_host(&lab.host)),
        None => String::new(),
    };
    let params = HashMap::from([
        ("model".to_string(), MapValue::text("rest")),
        ("host".to_string(), MapValue::text(url)),
        ("index".to_string(), MapValue::uint(index)),
    ]);
    ("NetworkPowerPort", params, ports.power.is_some())
}

/// An IPv6 literal in brackets, for a URL.
fn url_host(host: &str) -> String {
    if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]")
    } else {
        host.to_string()
    }
}
