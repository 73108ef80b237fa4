//! The command line: `serve`, `stdio`, `check`, `devices`, `approve`/`deny` (in
//! `approve.rs`), `leases` (in `leases.rs`; both MCP clients of the running server through
//! `mcp_client.rs`), `audit key|verify` and `evidence` (in `audit.rs`). Parsing and logging
//! here; the start-up wiring in `startup.rs`, the servers in `serve.rs`, signals and SIGHUP
//! reload in `reload.rs`, `check` in `check.rs`, `devices` in `devices.rs`.

mod approve;
mod audit;
mod check;
mod devices;
mod leases;
mod mcp_client;
mod reload;
mod serve;
mod startup;
mod trim;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};

pub use check::summary;

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
    /// Approve a pending approval request (gatecmd://approvals, the bench page) as the
    /// approver client whose token is in $GATECMD_TOKEN or --token-file.
    Approve {
        /// The request's id (apr-N).
        id: String,
        #[command(flatten)]
        decision: DecisionArgs,
    },
    /// Deny a pending approval request, with a note the requester is shown.
    Deny {
        id: String,
        #[command(flatten)]
        decision: DecisionArgs,
    },
    /// The signed audit log: `key` prints its public key, `verify` checks its chain.
    Audit {
        #[command(subcommand)]
        command: audit::AuditCommand,
    },
    /// Write the signed evidence bundle of a job (`evidence JOB [--out FILE]`), or check
    /// one offline (`evidence verify FILE [--key FILE]`).
    Evidence(audit::EvidenceArgs),
    /// List the running server's leases, or end one (`leases end LEASE_ID`), as the
    /// client whose token is in $GATECMD_TOKEN or --token-file (an admin client sees and
    /// ends every lease).
    Leases {
        #[command(subcommand)]
        action: Option<LeasesAction>,
        /// JSON output (the list_locks answer).
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        server: ServerArgs,
    },
}

#[derive(Subcommand)]
enum LeasesAction {
    /// End a lease (its board's on_release runs, as for any lease end).
    End {
        /// The lease's id (lease-…), as `gatecmd leases` lists it.
        lease: String,
    },
}

/// Where the server is and whose token to use.
#[derive(clap::Args)]
struct ServerArgs {
    /// The server's MCP endpoint (default: from the configuration's bind, http://127.0.0.1:9222/mcp).
    #[arg(long, global = true)]
    url: Option<String>,
    /// Configuration file to read `bind` from.
    #[arg(long, global = true)]
    config: Option<PathBuf>,
    /// An owner-only file holding the client's token (else $GATECMD_TOKEN). Never pass a
    /// token itself on the command line.
    #[arg(long, global = true)]
    token_file: Option<PathBuf>,
}

impl ServerArgs {
    fn target(self) -> mcp_client::Target {
        mcp_client::Target {
            url: self.url,
            config: self.config,
            token_file: self.token_file,
        }
    }
}

/// What `approve` and `deny` take besides the id.
#[derive(clap::Args)]
struct DecisionArgs {
    /// Why; shown to the requester and kept in the audit log.
    #[arg(long)]
    note: Option<String>,
    /// The server's MCP endpoint (default: from the configuration's bind, http://127.0.0.1:9222/mcp).
    #[arg(long)]
    url: Option<String>,
    /// Configuration file to read `bind` from.
    #[arg(long)]
    config: Option<PathBuf>,
    /// An owner-only file holding the approver client's token (else $GATECMD_TOKEN). Never
    /// pass a token itself on the command line.
    #[arg(long)]
    token_file: Option<PathBuf>,
}

impl DecisionArgs {
    fn run(self, id: String, approve: bool) -> ExitCode {
        let target = mcp_client::Target {
            url: self.url,
            config: self.config,
            token_file: self.token_file,
        };
        run_async(approve::decide(id, self.note, approve, target))
    }
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
        Command::Check { config } => check::check(config),
        Command::Serve {
            config,
            bind,
            no_auth,
            log_format,
        } => {
            init_logging(log_format);
            run_async(serve::serve(config, bind, no_auth))
        }
        Command::Stdio { config } => {
            init_logging(LogFormat::Pretty);
            run_async(serve::stdio(config))
        }
        Command::Devices {
            config,
            json,
            watch,
        } => {
            init_logging(LogFormat::Pretty);
            run_async(devices::devices(config, json, watch))
        }
        Command::Approve { id, decision } => decision.run(id, true),
        Command::Deny { id, decision } => decision.run(id, false),
        Command::Leases {
            action,
            json,
            server,
        } => match action {
            None => run_async(leases::list(server.target(), json)),
            Some(LeasesAction::End { lease }) => run_async(leases::end(server.target(), lease)),
        },
        Command::Audit { command } => audit::audit(command),
        Command::Evidence(args) => audit::evidence(args),
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
