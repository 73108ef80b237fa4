//! What `serve`, `stdio` and `devices` share at start: the configuration, the audit log,
//! who may call, and the shared state with its device monitor.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::transport::auth::{self, Credentials};
use crate::transport::http::Access;
use gatecmd_devices::{Backend, MonitorHandle, MonitorOptions, Registry, start_monitor};
use gatecmd_domain::audit::{Audit, ServerRecord};
use gatecmd_domain::config::{Config, ConfigLocation, find_config};
use gatecmd_domain::state::AppState;

/// The configuration at `explicit` (or where `find_config` finds one), validated.
pub(super) fn load(explicit: Option<PathBuf>) -> Result<(Config, ConfigLocation), String> {
    let location = find_config(explicit.as_deref());
    let config = location.load().map_err(|e| {
        format!(
            "invalid configuration:\n{e}\n(fix the lines above; `gatecmd check` shows the same)"
        )
    })?;
    Ok((config, location))
}

/// Opens `<state_dir>/audit.log` and records the start (a restart releases every lease,
/// so readers of the log need to see where one happened).
pub(super) fn open_audit(config: &Config) -> Result<Audit, String> {
    let audit = Audit::open(&config.state_dir, &config.audit).map_err(|e| e.to_string())?;
    if let Some(path) = audit.path() {
        tracing::info!(path = %path.display(), "audit log");
    }
    audit.record(&ServerRecord::ServerStarted {
        version: env!("CARGO_PKG_VERSION"),
        config: &config.source,
    });
    Ok(audit)
}

/// Decides who may call: tokens (configured, or generated once into the state directory)
/// or, with `--no-auth` on loopback only, anyone.
pub(super) fn access_for(
    config: &Config,
    bind: SocketAddr,
    no_auth: bool,
) -> Result<Access, String> {
    if no_auth {
        if !auth::is_loopback(&bind) {
            return Err(format!(
                "--no-auth is refused on {bind}: without a token only a loopback address \
                 (127.0.0.1 or [::1]) may be served. Configure a client token for other addresses."
            ));
        }
        tracing::warn!(%bind, "authentication is OFF (--no-auth); any local process can run the allowed commands");
        return Ok(Access::Open);
    }
    let mut clients = config.clients.clone();
    if clients.is_empty() {
        let (client, path, created) =
            auth::ensure_generated_token(&config.state_dir).map_err(|e| e.to_string())?;
        if created {
            eprintln!(
                "gatecmd: no client token is configured, so one was generated into {} (owner-only).\n\
                 gatecmd: read it with `cat {}` and send it as `Authorization: Bearer <token>`.",
                path.display(),
                path.display()
            );
        } else {
            tracing::info!(path = %path.display(), "using the generated token");
        }
        clients.push(client);
    }
    let creds = Credentials::load(&clients).map_err(|e| e.to_string())?;
    let names: Vec<&str> = clients.iter().map(|c| c.name.as_str()).collect();
    tracing::info!(clients = ?names, "authentication on");
    Ok(Access::Tokens(creds))
}

/// Monitor options from the configuration.
fn monitor_options(config: &Config) -> Result<MonitorOptions, String> {
    let m = &config.monitor;
    Ok(MonitorOptions {
        sysfs_root: m.sysfs_root.clone(),
        backend: m.backend.parse::<Backend>().map_err(|e| e.to_string())?,
        poll_interval: Duration::from_millis(m.poll_interval_ms.max(50)),
        removal_grace: Duration::from_millis(m.removal_grace_ms),
    })
}

/// The shared state with its device monitor running (the registry is full when this returns).
pub(super) async fn start_state(
    config: Config,
    audit: Audit,
) -> Result<(Arc<AppState>, MonitorHandle), String> {
    let opts = monitor_options(&config)?;
    let registry = Registry::new();
    let monitor = start_monitor(registry.clone(), opts)
        .await
        .map_err(|e| format!("cannot start the device monitor: {e:#}"))?;
    tracing::info!(source = %monitor.source(), devices = registry.len(), "device monitor running");
    log_isolation(&config);
    Ok((AppState::with_audit(config, registry, audit), monitor))
}

/// Says at start whether isolated commands can run here (each call says it again if not),
/// and warns when children inherit umockdev's preload.
fn log_isolation(config: &Config) {
    if !gatecmd_domain::exec::umockdev_env().is_empty() {
        tracing::warn!(
            "gatecmd runs under umockdev's preload: children inherit LD_PRELOAD and UMOCKDEV_DIR (emulated devices; never on a real bench)"
        );
    }
    if !config.commands.iter().any(|c| c.may_isolate()) {
        return;
    }
    match gatecmd_domain::exec::probe_isolation(&config.isolation.roots()) {
        Ok(p) => tracing::info!(privilege = ?p, "isolated commands can run here"),
        Err(e) => {
            tracing::warn!(error = %e, "isolated commands cannot run here; each call will be refused")
        }
    }
}
