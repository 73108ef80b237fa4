//! The unfiltered `list_devices` answer, kept per caller until the devices, the lock
//! table or the config change.
//!
//! Agents poll `list_devices` far more often than boards come and go, and building the
//! answer (every device as a JSON value, plus its lock view) was most of the call's
//! cost (docs/PERFORMANCE.md). An answer is stamped with the registry's and the lock
//! table's versions and the config it was built from; a stamp that no longer matches
//! means the answer is rebuilt. Answers are per caller because a lease id is shown only
//! to its holder.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use rmcp::model::CallToolResult;

use gatecmd_devices::Registry;
use gatecmd_domain::config::Config;
use gatecmd_domain::locks::LockManager;

/// What an answer was built from.
#[derive(Clone)]
pub struct Stamp {
    config: Arc<Config>,
    registry: u64,
    locks: u64,
}

impl Stamp {
    /// The stamp of the state as it is now. Take it before building an answer: a change
    /// during the build moves a version, so the answer is not served again. (Given the
    /// parts, not `AppState`, which holds the cache: the state sits below the tools.)
    pub fn now(config: Arc<Config>, registry: &Registry, locks: &LockManager) -> Stamp {
        Stamp {
            config,
            registry: registry.version(),
            locks: locks.version(),
        }
    }

    /// The config the answer is built from.
    pub fn config(&self) -> &Arc<Config> {
        &self.config
    }

    fn matches(&self, other: &Stamp) -> bool {
        // The cache holds the Arc, so its address cannot be reused by a newer config.
        Arc::ptr_eq(&self.config, &other.config)
            && self.registry == other.registry
            && self.locks == other.locks
    }
}

#[derive(Default)]
struct Entries {
    stamp: Option<Stamp>,
    answers: HashMap<String, CallToolResult>,
}

/// Answers by caller name; all share one stamp.
#[derive(Default)]
pub struct ListCache {
    entries: Mutex<Entries>,
}

impl ListCache {
    /// The answer for `caller` if it was built from the state `stamp` describes.
    pub fn get(&self, stamp: &Stamp, caller: &str) -> Option<CallToolResult> {
        let entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        match &entries.stamp {
            Some(s) if s.matches(stamp) => entries.answers.get(caller).cloned(),
            _ => None,
        }
    }

    /// Keeps `answer`, built for `caller` from the state `stamp` describes. Answers built
    /// from another stamp are dropped; there is at most one per configured client.
    pub fn put(&self, stamp: Stamp, caller: &str, answer: &CallToolResult) {
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        if !entries.stamp.as_ref().is_some_and(|s| s.matches(&stamp)) {
            entries.answers.clear();
            entries.stamp = Some(stamp);
        }
        entries.answers.insert(caller.to_string(), answer.clone());
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::Value;

    use super::*;
    use crate::calls::device_filter::DeviceFilter;
    use crate::tools::list_devices::list;
    use gatecmd_devices::Device;
    use gatecmd_domain::locks::{ClientName, LeaseRequest, LockKey};
    use gatecmd_domain::state::AppState;

    fn config(class: &str) -> Config {
        let yaml = format!("devices:\n  - name: {class}\n    match: {{vid: \"2207\"}}\n");
        Config::parse(&yaml, "t.yaml").expect("config")
    }

    fn devices(r: &CallToolResult) -> Vec<Value> {
        r.structured_content.as_ref().expect("structured")["devices"]
            .as_array()
            .expect("devices array")
            .clone()
    }

    fn all(state: &AppState, lists: &ListCache, caller: &str) -> Vec<Value> {
        devices(&list(state, lists, caller, DeviceFilter::default()))
    }

    #[tokio::test]
    async fn an_answer_is_reused_until_what_it_shows_changes() {
        let state = AppState::new(config("rockusb"));
        let lists = ListCache::default();
        state.registry.upsert(Device::sample("1-2", 2));
        assert_eq!(all(&state, &lists, "a").len(), 1);
        // Kept for its caller only.
        let stamp = Stamp::now(state.config(), &state.registry, &state.locks);
        assert!(lists.get(&stamp, "a").is_some());
        assert!(lists.get(&stamp, "b").is_none());

        // A device arrives, changes, leaves.
        state.registry.upsert(Device::sample("1-3", 3));
        assert_eq!(all(&state, &lists, "a").len(), 2);
        state.registry.upsert(Device::sample("1-3", 7));
        assert_eq!(all(&state, &lists, "a")[1]["devnum"], 7);
        state.registry.remove(&"1-3".parse().expect("id"));
        assert_eq!(all(&state, &lists, "a").len(), 1);

        // A lease: both see it held; only the holder sees its id.
        let lease = state
            .locks
            .lock(LeaseRequest {
                key: LockKey::usb(0x2207, 0x350b),
                client: ClientName("a".into()),
                session: None,
                ttl: None,
                note: None,
                wait: Duration::ZERO,
                shared: vec![],
            })
            .await
            .expect("lease");
        let mine = &all(&state, &lists, "a")[0]["lock"];
        assert_eq!(mine["held"], true);
        assert_eq!(mine["lease_id"], lease.lease_id.0.as_str());
        let theirs = &all(&state, &lists, "b")[0]["lock"];
        assert_eq!(theirs["holder"], "a");
        assert!(theirs.get("lease_id").is_none(), "{theirs}");
        state
            .locks
            .unlock(&lease.lease_id, &ClientName("a".into()))
            .expect("unlock");
        assert_eq!(all(&state, &lists, "b")[0]["lock"]["held"], false);

        // A reloaded config relabels the device.
        state.replace_config(config("board"));
        assert_eq!(all(&state, &lists, "a")[0]["class"], "board");

        // A filtered call is built fresh and does not replace the cached answer.
        let stamp = Stamp::now(state.config(), &state.registry, &state.locks);
        let filter = DeviceFilter {
            id: Some("9-9".into()),
            ..Default::default()
        };
        assert!(devices(&list(&state, &lists, "a", filter)).is_empty());
        assert_eq!(lists.get(&stamp, "a").map(|r| devices(&r).len()), Some(1));
    }

    #[tokio::test]
    async fn a_change_while_an_answer_is_built_is_not_hidden() {
        let state = AppState::new(config("rockusb"));
        let lists = ListCache::default();
        state.registry.upsert(Device::sample("1-2", 2));
        // A stamp taken before a change, with an answer built after it: the answer is
        // stored under the old stamp and so is not served for the new state.
        let before = Stamp::now(state.config(), &state.registry, &state.locks);
        state.registry.upsert(Device::sample("1-3", 3));
        let answer = list(&state, &lists, "a", DeviceFilter::default());
        lists.put(before, "a", &answer);
        let now = Stamp::now(state.config(), &state.registry, &state.locks);
        assert!(lists.get(&now, "a").is_none());
        assert_eq!(all(&state, &lists, "a").len(), 2);
    }
}
