//! `serve` (Streamable HTTP) and `stdio`: the shared state, the transport, and a clean stop.

use std::net::SocketAddr;
use std::path::PathBuf;

use tokio_util::sync::CancellationToken;

use super::reload::Signals;
use super::startup::{access_for, load, open_audit, start_state};
use crate::transport::auth::OriginPolicy;
use crate::transport::http::{self, Gate};
use gatecmd_domain::audit::Audit;
use gatecmd_mcp::server::GatecmdServer;

/// Serves MCP over HTTP until SIGTERM or SIGINT; SIGHUP reloads the configuration.
pub(super) async fn serve(
    config: Option<PathBuf>,
    bind: Option<SocketAddr>,
    no_auth: bool,
) -> Result<(), String> {
    let (config, location) = load(config)?;
    tracing::info!(config = %location, "configuration loaded");
    let bind = bind.unwrap_or(config.bind);
    let access = access_for(&config, bind, no_auth)?;
    for (c, why) in config.unavailable_commands() {
        tracing::warn!(command = %c.name, reason = %why, "command unavailable; it is listed but cannot run");
    }
    for note in super::check::password_notes(&config) {
        tracing::warn!("{note}");
    }
    let policy = OriginPolicy::new(&config, bind, !no_auth);
    let audit = open_audit(&config)?;
    let (state, _monitor) = start_state(config, audit).await?;
    let gate = Gate::new(access, policy);
    let shutdown = CancellationToken::new();
    let router = http::router(state.clone(), gate.clone(), shutdown.clone())
        // Beside `/mcp`'s guard, not under it: the page checks its own sessions.
        .merge(crate::page::routes(state.clone(), gate.clone()))
        // Its own admission (the same tokens) and no request body limit: a whole image.
        .merge(crate::transport::upload::routes(
            state.clone(),
            gate.clone(),
        ))
        // Outermost, after every route is in: each answer is counted, the guard's 401/403
        // and the page's included.
        .layer(axum::middleware::from_fn(
            crate::transport::metrics::count_status,
        ));
    let listener = tokio::net::TcpListener::bind(bind)
        .await
        .map_err(|e| format!("cannot listen on {bind}: {e}"))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    tracing::info!(%addr, "leases and locks are in memory: a restart releases them all");
    let metrics = serve_metrics_bind(&state, &gate, no_auth, &shutdown).await?;
    // The labgrid exporter (docs/LAB.md), when configured: its ports are bound here.
    crate::lab::start(state.clone(), shutdown.clone())
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(gatecmd_domain::state::watch_lost_devices(state.clone()));
    tokio::spawn(gatecmd_domain::usecases::power::on_release::watch(
        state.clone(),
    ));
    let signals = Signals::install()?;
    // Ready: what only start-up used goes back before the first request, and requests'
    // allocations go to mimalloc from here on (src/allocator.rs).
    super::trim::after_start();
    crate::allocator::start_serving();
    // Tests and scripts wait for this line; it carries no secret.
    eprintln!("gatecmd: listening on http://{addr}/mcp");
    tokio::spawn(signals.run(
        state.clone(),
        gate,
        location,
        bind,
        no_auth,
        shutdown.clone(),
    ));
    // Read once: the accept loop's caps and timeouts are restart-only (RESTART_ONLY).
    let limits = http::ConnLimits::from_config(&state.config().limits);
    let served = http::serve(listener, router, limits, shutdown.clone()).await;
    if let Some(m) = metrics {
        let _ = m.await;
    }
    state.executor.shutdown().await;
    // Open refusal windows' summaries, and the file synced to disk.
    state.audit.flush();
    tracing::info!("stopped");
    served.map_err(|e| format!("server error: {e}"))
}

/// Opens `metrics.bind` when configured: `/metrics` to the same tokens as the main bind
/// (under `--no-auth` only on a loopback address, as the main bind); its task ends with
/// `shutdown`.
async fn serve_metrics_bind(
    state: &std::sync::Arc<gatecmd_domain::state::AppState>,
    gate: &std::sync::Arc<Gate>,
    no_auth: bool,
    shutdown: &CancellationToken,
) -> Result<Option<tokio::task::JoinHandle<std::io::Result<()>>>, String> {
    let Some(bind) = state.config().metrics.bind else {
        return Ok(None);
    };
    if no_auth && !crate::transport::auth::is_loopback(&bind) {
        return Err(format!(
            "--no-auth is refused with metrics.bind on {bind}: without a token only a loopback \
             address may be served. Configure a client token, or bind metrics on 127.0.0.1."
        ));
    }
    let listener = tokio::net::TcpListener::bind(bind)
        .await
        .map_err(|e| format!("cannot listen on {bind} (metrics.bind): {e}"))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    // Tests and scripts wait for this line.
    eprintln!("gatecmd: metrics on http://{addr}/metrics");
    let router = crate::transport::metrics::bind_router(state.clone(), gate.clone(), addr);
    let limits = http::ConnLimits::from_config(&state.config().limits);
    Ok(Some(tokio::spawn(http::serve(
        listener,
        router,
        limits,
        shutdown.clone(),
    ))))
}

/// Serves one local MCP host over stdin/stdout.
pub(super) async fn stdio(config: Option<PathBuf>) -> Result<(), String> {
    use rmcp::ServiceExt;
    let (config, location) = load(config)?;
    tracing::info!(config = %location, "configuration loaded (stdio)");
    // stdio serves the local user only: an unwritable state directory is a warning there,
    // not a reason to refuse (for `serve` it is).
    let audit = open_audit(&config).unwrap_or_else(|e| {
        tracing::warn!(error = %e, "audit log off for this stdio session");
        Audit::disabled()
    });
    let (state, _monitor) = start_state(config, audit).await?;
    crate::allocator::start_serving();
    let service = GatecmdServer::new_stdio(state.clone())
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|e| format!("stdio session failed to start: {e}"))?;
    let _ = service.waiting().await;
    state.executor.shutdown().await;
    state.audit.flush();
    Ok(())
}
