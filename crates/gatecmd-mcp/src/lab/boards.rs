//! `list_boards {scope: "lab"}`: this host's boards and every peer's, asked of all peers
//! at once, joined to the coordinator's listing (`directory`), each within [`LIST_TIMEOUT`](super::peer_link::LIST_TIMEOUT). A remote board
//! is named `HOST/BOARD` with `host` and `reachable`; a host that does not answer is listed
//! in `hosts` with its error, and its boards as last seen (if ever), `reachable: false`.

use std::collections::BTreeMap;
use std::sync::{Mutex, OnceLock};

use serde::Serialize;
use serde_json::Value;

use super::hosts::HostView;
use super::names::qualify;
use super::peer_link::{self, LIST_TIMEOUT};
use crate::views::boards_view;
use gatecmd_domain::config::LabPeer;
use gatecmd_domain::state::AppState;

/// The lab's boards: each as `list_boards` shows it, plus `host` (and, for a remote one,
/// its qualified `name` and `reachable`), and each host's state.
#[derive(Debug, Serialize)]
pub struct LabBoards {
    pub boards: Vec<Value>,
    pub hosts: Vec<HostView>,
    /// The lab's coordinator as this host sees it (whether its listing is current), when
    /// this host has one (`labgrid.coordinator`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub directory: Option<gatecmd_domain::lab::DirectoryStatus>,
}

/// The last board list each peer gave, for showing its boards when it stops answering.
fn last_seen() -> &'static Mutex<BTreeMap<String, Vec<Value>>> {
    static SEEN: OnceLock<Mutex<BTreeMap<String, Vec<Value>>>> = OnceLock::new();
    SEEN.get_or_init(Default::default)
}

/// This host's name in the lab: its exporter name, else `local`.
pub fn this_host(state: &AppState) -> String {
    state
        .config()
        .labgrid
        .as_ref()
        .map_or_else(|| "local".into(), |l| l.name.clone())
}

/// Every board of the lab as `caller` (an agent of this host) may see it.
pub async fn lab_boards(state: &AppState, caller: &str) -> LabBoards {
    let here = this_host(state);
    let mut boards: Vec<Value> = boards_view(state, caller)
        .boards
        .iter()
        .filter_map(|b| serde_json::to_value(b).ok())
        .map(|mut b| {
            b["host"] = here.clone().into();
            b["reachable"] = true.into();
            b
        })
        .collect();
    let mut hosts = vec![HostView {
        host: here,
        reachable: true,
        error: None,
        boards: boards.len(),
    }];
    let peers = state.config().lab_peers.clone();
    let asked = futures::future::join_all(peers.iter().map(|p| peer_boards(p, caller))).await;
    for (peer, answer) in peers.iter().zip(asked) {
        let (found, view) = match answer {
            Ok(found) => {
                if let Ok(mut seen) = last_seen().lock() {
                    seen.insert(peer.name.clone(), found.clone());
                }
                let n = found.len();
                (
                    found,
                    HostView {
                        host: peer.name.clone(),
                        reachable: true,
                        error: None,
                        boards: n,
                    },
                )
            }
            Err(why) => {
                let found: Vec<Value> = last_seen()
                    .lock()
                    .ok()
                    .and_then(|s| s.get(&peer.name).cloned())
                    .unwrap_or_default()
                    .into_iter()
                    .map(|mut b| {
                        b["reachable"] = false.into();
                        b
                    })
                    .collect();
                let n = found.len();
                (
                    found,
                    HostView {
                        host: peer.name.clone(),
                        reachable: false,
                        error: Some(why),
                        boards: n,
                    },
                )
            }
        };
        boards.extend(found);
        hosts.push(view);
    }
    let here = this_host(state);
    super::directory::join(state, &here, &mut boards, &mut hosts);
    let directory = state
        .config()
        .labgrid
        .as_ref()
        .map(|_| state.lab.directory.status());
    LabBoards {
        boards,
        hosts,
        directory,
    }
}

/// A peer's boards, qualified, or why it did not answer (the refusal's message).
async fn peer_boards(peer: &LabPeer, caller: &str) -> Result<Vec<Value>, String> {
    let r = peer_link::call(
        peer,
        Some(caller),
        "list_boards",
        serde_json::json!({}),
        LIST_TIMEOUT,
    )
    .await
    .map_err(|e| e.to_string())?;
    let list = r
        .structured_content
        .as_ref()
        .and_then(|v| v.get("boards"))
        .and_then(Value::as_array)
        .ok_or_else(|| {
            format!(
                "lab host {:?} answered list_boards without boards",
                peer.name
            )
        })?;
    Ok(list
        .iter()
        .take(1024)
        .cloned()
        .map(|mut b| {
            // A peer's board name is shown as one clean line of at most 64 characters.
            let name = gatecmd_core::output::one_line(
                b.get("name").and_then(Value::as_str).unwrap_or_default(),
                64,
            );
            b["name"] = qualify(&peer.name, &name).into();
            b["host"] = peer.name.clone().into();
            b["reachable"] = true.into();
            b
        })
        .collect())
}

/// `list_boards {scope: "lab"}` as an answer: the boards, and a line per board and host.
pub async fn list(state: &AppState, caller: &str) -> rmcp::model::CallToolResult {
    let lab = lab_boards(state, caller).await;
    let mut text = String::new();
    if let Some(d) = &lab.directory {
        match &d.error {
            None => text.push_str(&format!(
                "directory: coordinator {} (current)\n",
                d.coordinator
            )),
            Some(e) => text.push_str(&format!(
                "directory: coordinator {} NOT REACHABLE ({e}); its boards as last listed\n",
                d.coordinator
            )),
        }
    }
    for h in &lab.hosts {
        match &h.error {
            None => text.push_str(&format!("host {}: {} board(s)\n", h.host, h.boards)),
            Some(e) => text.push_str(&format!(
                "host {}: UNREACHABLE ({e}); {} board(s) as last seen\n",
                h.host, h.boards
            )),
        }
    }
    for b in &lab.boards {
        let s = |k: &str| {
            b.get(k)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string()
        };
        let tags: Vec<String> = b
            .get("tags")
            .and_then(Value::as_object)
            .map(|t| {
                t.iter()
                    .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
                    .collect()
            })
            .unwrap_or_default();
        let holder = b.pointer("/lock/holder").and_then(Value::as_str);
        let unreachable = if b.get("reachable") == Some(&Value::Bool(false)) {
            ", unreachable"
        } else {
            ""
        };
        let tags = if tags.is_empty() {
            String::new()
        } else {
            format!(", {}", tags.join(" "))
        };
        let held = holder.map_or_else(|| "free".to_string(), |h| format!("held by {h}"));
        text.push_str(&format!(
            "{} (host {}{tags}{unreachable}): {held}\n",
            s("name"),
            s("host")
        ));
    }
    crate::calls::answer::structured(&lab, text)
}
