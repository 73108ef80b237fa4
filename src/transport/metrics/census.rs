//! The gauges that are state, read from the state at each scrape: leases and waiters (the
//! lock table), devices attached (the registry), open sessions (the session manager), and
//! the lease TTL ceiling in force. Nothing keeps them by hand, so they cannot drift.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::{Registry, Unit};

use gatecmd_core::metrics::PREFIX;
use gatecmd_domain::state::AppState;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ClientLabels {
    client: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DeviceLabels {
    kind: &'static str,
    /// A family of the families table (`rockusb`, `fastboot`, `dfu`, …) or `none`: bounded
    /// by the table, never device text.
    family: &'static str,
    /// A mode of the families table (`maskrom`, `loader`, `fastboot`, …) or `none`.
    mode: &'static str,
}

/// A registry of the state's gauges as they are now.
pub fn registry(state: &AppState) -> Registry {
    let mut r = Registry::with_prefix(PREFIX);
    let config = state.config();
    let locks = state.locks.census();

    let leases = Family::<ClientLabels, Gauge>::default();
    for (client, n) in &locks.leases {
        set(&leases, client, *n);
    }
    r.register("leases_held", "Live leases by holder", leases);
    let waiters = Family::<ClientLabels, Gauge>::default();
    for (client, n) in &locks.waiters {
        set(&waiters, client, *n);
    }
    r.register(
        "lock_waiters",
        "Requests (commands and leases) queued for a busy key, by client",
        waiters,
    );
    let running = Gauge::<i64>::default();
    running.set(to_i64(locks.running));
    r.register(
        "lock_keys_running",
        "Lock keys with a command running on them",
        running,
    );
    let oldest = Gauge::<f64, std::sync::atomic::AtomicU64>::default();
    if let Some(at) = locks.oldest_lease {
        let age = chrono::Utc::now().signed_duration_since(at);
        oldest.set(age.num_milliseconds().max(0) as f64 / 1000.0);
    }
    r.register_with_unit(
        "lease_oldest_age",
        "How long the oldest live lease has been held (0 with none); compare with gatecmd_lease_max_ttl_seconds",
        Unit::Seconds,
        oldest,
    );
    let max_ttl = Gauge::<i64>::default();
    max_ttl.set(to_i64(config.leases.max_ttl_secs));
    r.register_with_unit(
        "lease_max_ttl",
        "The largest lease TTL a client may ask for (leases.max_ttl_secs)",
        Unit::Seconds,
        max_ttl,
    );

    let devices = Family::<DeviceLabels, Gauge>::default();
    for d in state.registry.snapshot() {
        devices
            .get_or_create(&DeviceLabels {
                kind: d.kind.label(),
                family: d.family.unwrap_or("none"),
                mode: d.mode.unwrap_or("none"),
            })
            .inc();
    }
    r.register(
        "devices_attached",
        "USB devices attached now, by kind (rockusb, rockchip_other, other), family and mode",
        devices,
    );

    let sessions = Family::<ClientLabels, Gauge>::default();
    for (client, n) in state.metrics.sessions() {
        set(&sessions, &client, n);
    }
    r.register(
        "sessions_open",
        "Open 2025-11-25 MCP sessions by client (2026-07-28 requests have none)",
        sessions,
    );
    r
}

fn set(family: &Family<ClientLabels, Gauge>, client: &str, n: u64) {
    family
        .get_or_create(&ClientLabels {
            client: client.to_string(),
        })
        .set(to_i64(n));
}

fn to_i64(n: impl TryInto<i64>) -> i64 {
    n.try_into().unwrap_or(i64::MAX)
}
