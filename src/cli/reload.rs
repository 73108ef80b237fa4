//! Signals: SIGTERM/SIGINT stop the server; SIGHUP reloads the configuration and applies
//! it, except the restart-only keys (`RESTART_ONLY` in crates/gatecmd-domain/src/state/reload.rs), which the log
//! line and the audit record name.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::signal::unix::{Signal, SignalKind, signal};
use tokio_util::sync::CancellationToken;

use super::startup::access_for;
use crate::transport::auth::OriginPolicy;
use crate::transport::http::Gate;
use gatecmd_domain::audit::ServerRecord;
use gatecmd_domain::config::ConfigLocation;
use gatecmd_domain::state::AppState;

/// The signals `serve` handles, installed before it says it listens: a SIGHUP sent as
/// soon as the "listening" line appears must reload, not end the process (SIGHUP's
/// default action).
pub(super) struct Signals {
    term: Signal,
    int: Signal,
    hup: Signal,
}

impl Signals {
    pub(super) fn install() -> Result<Signals, String> {
        let install = |kind: SignalKind| {
            signal(kind).map_err(|e| format!("cannot install signal handlers: {e}"))
        };
        Ok(Signals {
            term: install(SignalKind::terminate())?,
            int: install(SignalKind::interrupt())?,
            hup: install(SignalKind::hangup())?,
        })
    }

    /// Reloads on SIGHUP until SIGTERM or SIGINT, then stops the running commands.
    pub(super) async fn run(
        mut self,
        state: Arc<AppState>,
        gate: Arc<Gate>,
        location: ConfigLocation,
        bind: SocketAddr,
        no_auth: bool,
        shutdown: CancellationToken,
    ) {
        loop {
            tokio::select! {
                _ = self.term.recv() => break,
                _ = self.int.recv() => break,
                _ = self.hup.recv() => reload(&state, &gate, &location, bind, no_auth),
            }
        }
        tracing::info!("shutting down: stopping running commands");
        shutdown.cancel();
        state.executor.shutdown().await;
    }
}

/// SIGHUP: validate the new configuration first; on any error keep the old one. A valid
/// one is applied whole, except the restart-only keys, which the log and audit name.
fn reload(
    state: &AppState,
    gate: &Gate,
    location: &ConfigLocation,
    bind: SocketAddr,
    no_auth: bool,
) {
    let config = match location.load() {
        Ok(c) => c,
        Err(e) => {
            tracing::error!(errors = %e, "reload refused: the new configuration is invalid; the old one stays in force");
            state.audit.record(&ServerRecord::ConfigReloadRefused {
                config: &location.to_string(),
                reason: &e.to_string(),
            });
            return;
        }
    };
    let access = match access_for(&config, bind, no_auth) {
        Ok(a) => a,
        Err(e) => {
            tracing::error!(error = %e, "reload refused: the old configuration stays in force");
            state.audit.record(&ServerRecord::ConfigReloadRefused {
                config: &location.to_string(),
                reason: &e,
            });
            return;
        }
    };
    let stranded = gatecmd_domain::state::stranded_leases(&state.config(), &config, &state.locks);
    if !stranded.is_empty() {
        let reason = stranded.join("; ");
        tracing::error!(reason = %reason, "reload refused: the old configuration stays in force");
        state.audit.record(&ServerRecord::ConfigReloadRefused {
            config: &location.to_string(),
            reason: &reason,
        });
        return;
    }
    for (c, why) in config.unavailable_commands() {
        tracing::warn!(command = %c.name, reason = %why, "command unavailable; it is listed but cannot run");
    }
    let policy = OriginPolicy::new(&config, bind, !no_auth);
    gate.replace(access, policy);
    let reloaded = state.replace_config(config);
    if reloaded.restart_only.is_empty() {
        tracing::info!(config = %location, "configuration reloaded");
    } else {
        let keys = reloaded.restart_only.join(", ");
        tracing::warn!(
            config = %location,
            restart_only = %keys,
            "configuration reloaded; the new values of these restart-only keys take effect at the next restart: {keys}"
        );
    }
    state.audit.record(&ServerRecord::ConfigReloaded {
        config: &location.to_string(),
        restart_only: &reloaded.restart_only,
    });
}
