//! The command line: `serve`, `stdio`, `check`, and the start-up wiring of each.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::{Parser, Subcommand, ValueEnum};
use tokio_util::sync::CancellationToken;

use crate::audit::Audit;
use crate::auth::{self, Credentials, OriginPolicy};
use crate::config::{Config, ConfigLocation, TokenSource, find_config};
use crate::devices::{Backend, MonitorHandle, MonitorOptions, Registry, start_monitor};
use crate::http::{self, Access, Gate};
use crate::server::GatecmdServer;
use crate::state::AppState;

#[derive(Parser)]
#[command(
    name = "gatecmd",
    version,
    about = "Allowlisted host commands on USB development boards, over MCP"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve MCP over Streamable HTTP at /mcp (and /health).
    Serve {
        /// Configuration file (default: $GATECMD_CONFIG, /etc/gatecmd/allowed_commands.yaml, then the bundled one).
        #[arg(long)]
        config: Option<PathBuf>,
        /// Address to listen on (overrides `bind` in the config), e.g. 127.0.0.1:9222.
        #[arg(long)]
        bind: Option<SocketAddr>,
        /// Serve without authentication. Only allowed on a loopback address.
        #[arg(long)]
        no_auth: bool,
        /// Log format on stderr.
        #[arg(long, value_enum, default_value_t = LogFormat::Pretty)]
        log_format: LogFormat,
    },
    /// Serve MCP over stdin/stdout (for a local MCP host).
    Stdio {
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// Validate a configuration and print every command line it allows.
    Check {
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// Print the attached USB devices as MCP clients see them; --watch streams hotplug events.
    Devices {
        #[arg(long)]
        config: Option<PathBuf>,
        /// JSON output (one document; with --watch, one JSON line per event).
        #[arg(long)]
        json: bool,
        /// Keep running and print each add/remove/change with a timestamp and the live event source.
        #[arg(long)]
        watch: bool,
    },
}

#[derive(Clone, Copy, ValueEnum)]
enum LogFormat {
    Pretty,
    Json,
}

/// Entry point of the binary.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Check { config } => check(config),
        Command::Serve {
            config,
            bind,
            no_auth,
            log_format,
        } => {
            init_logging(log_format);
            run_async(serve(config, bind, no_auth))
        }
        Command::Stdio { config } => {
            init_logging(LogFormat::Pretty);
            run_async(stdio(config))
        }
        Command::Devices {
            config,
            json,
            watch,
        } => {
            init_logging(LogFormat::Pretty);
            run_async(devices(config, json, watch))
        }
    }
}

fn run_async(fut: impl Future<Output = Result<(), String>>) -> ExitCode {
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("gatecmd: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    match rt.block_on(fut) {
        Ok(()) => ExitCode::SUCCESS,
        Err(msg) => {
            eprintln!("gatecmd: {msg}");
            ExitCode::from(2)
        }
    }
}

/// The log filter without `GATECMD_LOG`. rmcp logs every stateless request at info.
pub const DEFAULT_LOG_FILTER: &str = "info,rmcp=warn";

fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("GATECMD_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(DEFAULT_LOG_FILTER));
    use std::io::IsTerminal;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    match format {
        LogFormat::Pretty => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

fn load(explicit: Option<PathBuf>) -> Result<(Config, ConfigLocation), String> {
    let location = find_config(explicit.as_deref());
    let config = location.load().map_err(|e| {
        format!(
            "invalid configuration:\n{e}\n(fix the lines above; `gatecmd check` shows the same)"
        )
    })?;
    Ok((config, location))
}

async fn serve(
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
    let policy = OriginPolicy::new(&config, bind, !no_auth);
    let audit = open_audit(&config)?;
    let (state, _monitor) = start_state(config, audit).await?;
    let gate = Gate::new(access, policy);
    let shutdown = CancellationToken::new();
    let router = http::router(state.clone(), gate.clone(), shutdown.clone());
    let listener = tokio::net::TcpListener::bind(bind)
        .await
        .map_err(|e| format!("cannot listen on {bind}: {e}"))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    tracing::info!(%addr, "leases and locks are in memory: a restart releases them all");
    // Tests and scripts wait for this line; it carries no secret.
    eprintln!("gatecmd: listening on http://{addr}/mcp");
    tokio::spawn(signals(
        state.clone(),
        gate,
        location,
        bind,
        no_auth,
        shutdown.clone(),
    ));
    let limits = http::ConnLimits::from_config(&state.config().limits);
    let served = http::serve(listener, router, limits, shutdown.clone()).await;
    state.executor.shutdown().await;
    tracing::info!("stopped");
    served.map_err(|e| format!("server error: {e}"))
}

/// Opens `<state_dir>/audit.log` and records the start (a restart releases every lease,
/// so readers of the log need to see where one happened).
fn open_audit(config: &Config) -> Result<Audit, String> {
    let audit = Audit::open(&config.state_dir, &config.audit).map_err(|e| e.to_string())?;
    if let Some(path) = audit.path() {
        tracing::info!(path = %path.display(), "audit log");
    }
    audit.record(&serde_json::json!({
        "event": "server_started", "version": env!("CARGO_PKG_VERSION"), "config": config.source,
    }));
    Ok(audit)
}

/// Decides who may call: tokens (configured, or generated once into the state directory)
/// or, with `--no-auth` on loopback only, anyone.
fn access_for(config: &Config, bind: SocketAddr, no_auth: bool) -> Result<Access, String> {
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

async fn signals(
    state: Arc<AppState>,
    gate: Arc<Gate>,
    location: ConfigLocation,
    bind: SocketAddr,
    no_auth: bool,
    shutdown: CancellationToken,
) {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int), Ok(mut hup)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
        signal(SignalKind::hangup()),
    ) else {
        tracing::error!("cannot install signal handlers");
        return;
    };
    loop {
        tokio::select! {
            _ = term.recv() => break,
            _ = int.recv() => break,
            _ = hup.recv() => reload(&state, &gate, &location, bind, no_auth),
        }
    }
    tracing::info!("shutting down: stopping running commands");
    shutdown.cancel();
    state.executor.shutdown().await;
}

/// SIGHUP: validate the new configuration first; on any error keep the old one.
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
            state.audit.record(&serde_json::json!({
                "event": "config_reload_refused", "config": location.to_string(), "reason": e.to_string(),
            }));
            return;
        }
    };
    let access = match access_for(&config, bind, no_auth) {
        Ok(a) => a,
        Err(e) => {
            tracing::error!(error = %e, "reload refused: the old configuration stays in force");
            return;
        }
    };
    if config.bind != state.config().bind {
        tracing::warn!("`bind` changed; it takes effect at the next restart");
    }
    let policy = OriginPolicy::new(&config, bind, !no_auth);
    gate.replace(access, policy);
    state.replace_config(config);
    tracing::info!(config = %location, "configuration reloaded");
    state
        .audit
        .record(&serde_json::json!({"event": "config_reloaded", "config": location.to_string()}));
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
async fn start_state(
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

async fn devices(config: Option<PathBuf>, json: bool, watch: bool) -> Result<(), String> {
    use crate::tools::devices::{DeviceList, DeviceView, render_device};
    let (config, _) = load(config)?;
    let config = Arc::new(config);
    // `devices` only looks: it decides nothing, so it records nothing.
    let (state, monitor) = start_state((*config).clone(), Audit::disabled()).await?;
    let view = |d| DeviceView::new(&state, &config, d, "");
    let list = DeviceList {
        devices: state.registry.snapshot().into_iter().map(view).collect(),
        event_source: monitor.source().to_string(),
    };
    if json && !watch {
        println!(
            "{}",
            serde_json::to_string_pretty(&list).map_err(|e| e.to_string())?
        );
        return Ok(());
    }
    if !json {
        for d in &list.devices {
            println!("{}", render_device(d));
        }
        if list.devices.is_empty() {
            println!("(no USB devices)");
        }
        println!("event source: {}", list.event_source);
    }
    if !watch {
        return Ok(());
    }
    let mut events = state.registry.subscribe();
    if json {
        let hello = serde_json::json!({"event": "watching", "event_source": list.event_source, "devices": list.devices});
        println!("{hello}");
    } else {
        println!("watching for hotplug events (Ctrl-C to stop)");
    }
    loop {
        let ev = tokio::select! {
            ev = events.recv() => ev,
            _ = tokio::signal::ctrl_c() => return Ok(()),
        };
        let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
        match ev {
            Ok(ev) => {
                if json {
                    let line = serde_json::json!({"at": now, "source": monitor.source().to_string(), "event": ev});
                    println!("{line}");
                } else {
                    let (what, d) = match &ev {
                        crate::devices::DeviceEvent::Added(d) => ("added  ", d),
                        crate::devices::DeviceEvent::Removed(d) => ("removed", d),
                        crate::devices::DeviceEvent::Changed { new, .. } => ("changed", new),
                    };
                    println!("{now} {what} {}", render_device(&view(d.clone())));
                }
            }
            Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
                println!("{now} (missed {n} events)")
            }
            Err(tokio::sync::broadcast::error::RecvError::Closed) => return Ok(()),
        }
    }
}

async fn stdio(config: Option<PathBuf>) -> Result<(), String> {
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
    let service = GatecmdServer::new_stdio(state.clone())
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|e| format!("stdio session failed to start: {e}"))?;
    let _ = service.waiting().await;
    state.executor.shutdown().await;
    Ok(())
}

/// Says at start whether isolated commands can run here (each call says it again if not),
/// and warns when children inherit umockdev's preload.
fn log_isolation(config: &Config) {
    if !crate::exec::umockdev_env().is_empty() {
        tracing::warn!(
            "gatecmd runs under umockdev's preload: children inherit LD_PRELOAD and UMOCKDEV_DIR (emulated devices; never on a real bench)"
        );
    }
    if !config.commands.iter().any(|c| c.may_isolate()) {
        return;
    }
    match crate::isolation::probe(&config.isolation.roots()) {
        Ok(p) => tracing::info!(privilege = ?p, "isolated commands can run here"),
        Err(e) => {
            tracing::warn!(error = %e, "isolated commands cannot run here; each call will be refused")
        }
    }
}

/// `gatecmd check`'s line on isolation: `Err` when isolated commands cannot run here.
fn check_isolation(config: &Config) -> Option<Result<String, String>> {
    let names: Vec<&str> = config
        .commands
        .iter()
        .filter(|c| c.may_isolate())
        .map(|c| c.name.as_str())
        .collect();
    if names.is_empty() {
        return None;
    }
    let roots = config.isolation.roots();
    Some(match crate::isolation::probe(&roots) {
        Ok(crate::isolation::Privilege::Root) => Ok(format!(
            "isolation: OK for {} (root: a mount namespace per command; views of {} and {})",
            names.join(", "),
            roots.listing().display(),
            roots.usbfs().display()
        )),
        Ok(crate::isolation::Privilege::UserNamespace) => Ok(format!(
            "isolation: OK for {} (unprivileged: a user + mount namespace per command; views of {} and {})",
            names.join(", "),
            roots.listing().display(),
            roots.usbfs().display()
        )),
        Err(e) => Err(format!(
            "isolated commands ({}) cannot run on this host: {e}",
            names.join(", ")
        )),
    })
}

fn check(explicit: Option<PathBuf>) -> ExitCode {
    let location = find_config(explicit.as_deref());
    let config = match location.load() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{e}");
            eprintln!("gatecmd check: {} error(s) in {location}", e.0.len());
            return ExitCode::from(2);
        }
    };
    print!("{}", summary(&config, &location));
    match check_isolation(&config) {
        Some(Ok(line)) => println!("{line}"),
        Some(Err(why)) => {
            eprintln!("error: {why}");
            return ExitCode::from(1);
        }
        None => {}
    }
    let missing = config.unavailable_commands();
    if missing.is_empty() {
        println!(
            "OK: {} command(s), configuration valid",
            config.commands.len()
        );
        ExitCode::SUCCESS
    } else {
        for (c, why) in &missing {
            eprintln!("error: command {:?}: {why}", c.name);
        }
        eprintln!(
            "gatecmd check: {} command(s) cannot run on this host (`serve` would list them as unavailable)",
            missing.len()
        );
        ExitCode::from(1)
    }
}

/// What a configuration allows, for people.
pub fn summary(config: &Config, location: &ConfigLocation) -> String {
    let mut s = format!("config: {location}\nbind: {}\n", config.bind);
    if config.clients.is_empty() {
        s.push_str(&format!(
            "clients: none configured; `serve` generates a token into {}\n",
            auth::generated_token_path(&config.state_dir).display()
        ));
    } else {
        s.push_str("clients:\n");
        for c in &config.clients {
            let src = match &c.token {
                TokenSource::Inline(_) => "token in config".to_string(),
                TokenSource::File(p) => format!("token_file {}", p.display()),
                TokenSource::Env(v) => format!("token_env {v}"),
                TokenSource::Sha256(_) => "token_sha256".to_string(),
            };
            let cmds = c
                .commands
                .as_ref()
                .map(|c| c.iter().cloned().collect::<Vec<_>>().join(", "))
                .unwrap_or_else(|| "all commands".into());
            s.push_str(&format!(
                "  {} ({src}; {cmds}{})\n",
                c.name,
                if c.admin { "; admin" } else { "" }
            ));
        }
    }
    if !config.file_roots.is_empty() {
        s.push_str("file roots:\n");
        for r in &config.file_roots {
            s.push_str(&format!("  {}\n", r.display()));
        }
    }
    if !config.devices.is_empty() {
        s.push_str("device classes:\n");
        for d in &config.devices {
            let pid = d
                .pid
                .map(|p| format!("{p:04x}"))
                .unwrap_or_else(|| "*".into());
            let group = d
                .lock_group
                .as_ref()
                .map(|g| format!(" (lock group {g})"))
                .unwrap_or_default();
            s.push_str(&format!("  {}: {:04x}:{pid}{group}\n", d.name, d.vid));
        }
    }
    s.push_str("allowed command lines:\n");
    for c in &config.commands {
        let dev = c
            .device
            .as_ref()
            .map(|d| format!(", device {d}"))
            .unwrap_or_default();
        let dev = match (c.isolate, c.may_isolate()) {
            (true, _) => format!("{dev}, isolated"),
            (false, true) => format!("{dev}, isolated for some patterns"),
            _ => dev,
        };
        s.push_str(&format!(
            "  {} (timeout {} s{dev}){}\n",
            c.name,
            c.timeout.as_secs(),
            if c.unavailable.is_some() {
                " UNAVAILABLE"
            } else {
                ""
            }
        ));
        for line in c.command_lines() {
            s.push_str(&format!("    {line}\n"));
        }
    }
    s
}
