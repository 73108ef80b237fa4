//! `gatecmd audit key|verify` and `gatecmd evidence [verify]` (docs/AUDIT.md): the audit
//! log's public key, a check of the log's chain and signatures, and the signed bundle of
//! one job. The work is the audit module's (`audit::chain`, `verify`, `evidence`).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use gatecmd_domain::audit::chain::{self, VerifyingKey};
use gatecmd_domain::audit::{FILE_NAME, KEY_FILE, Signer, evidence, verify};
use gatecmd_domain::config::find_config;

/// Where the state directory is: `--state-dir`, else the configuration's `state_dir`.
#[derive(clap::Args)]
pub(super) struct StateArgs {
    /// Configuration file to read `state_dir` from.
    #[arg(long)]
    config: Option<PathBuf>,
    /// The state directory (holds audit.log and audit.key); overrides the configuration's.
    #[arg(long)]
    state_dir: Option<PathBuf>,
}

impl StateArgs {
    fn dir(&self) -> Result<PathBuf, String> {
        if let Some(d) = &self.state_dir {
            return Ok(d.clone());
        }
        let location = find_config(self.config.as_deref());
        let config = location.load().map_err(|e| {
            format!("cannot read {location} for its state_dir:\n{e}\n(or pass --state-dir)")
        })?;
        Ok(config.state_dir.clone())
    }

    /// The host's key: beside the first `--log` when one is there (a log read where it
    /// was written), else in the state directory.
    fn signer(&self, logs: &[PathBuf]) -> Result<Signer, String> {
        let beside = (logs.first())
            .and_then(|l| l.parent())
            .map(|d| d.join(KEY_FILE))
            .filter(|k| k.exists());
        let path = match beside {
            Some(k) => k,
            None => self.dir()?.join(KEY_FILE),
        };
        Signer::load(&path).map_err(|e| e.to_string())
    }

    /// The files to read: each `--log` as given when several, one `--log` with its
    /// rotated files, else `<state_dir>/audit.log` with its rotated files.
    fn files(&self, logs: &[PathBuf]) -> Result<Vec<PathBuf>, String> {
        Ok(match logs {
            [] => verify::with_rotated(&self.dir()?.join(FILE_NAME)),
            [one] => verify::with_rotated(one),
            many => many.to_vec(),
        })
    }

    /// `--key FILE`, else the public half of the host's key ([`StateArgs::signer`]).
    fn key(&self, file: Option<&Path>, logs: &[PathBuf]) -> Result<VerifyingKey, String> {
        match file {
            Some(f) => read_key(f),
            None => Ok(self.signer(logs)?.public()),
        }
    }
}

/// `gatecmd audit …`.
#[derive(clap::Subcommand)]
pub(super) enum AuditCommand {
    /// Print the audit log's public key (hex), for `verify --key` elsewhere.
    Key {
        #[command(flatten)]
        state: StateArgs,
    },
    /// Check the audit log's chain and signatures: exit 0 with the number of records, or
    /// 1 naming the first line (file:line) altered, removed, reordered or inserted.
    Verify {
        /// A log file (default <state_dir>/audit.log). One --log is read with its rotated
        /// files (PATH.N … PATH.1, PATH); several are read as given, oldest first.
        #[arg(long = "log")]
        logs: Vec<PathBuf>,
        /// A file holding the trusted public key (`gatecmd audit key`'s output); default:
        /// the audit.key beside the first --log, else the state directory's.
        #[arg(long)]
        key: Option<PathBuf>,
        #[command(flatten)]
        state: StateArgs,
    },
}

/// `gatecmd evidence JOB` or `gatecmd evidence verify FILE`.
#[derive(clap::Args)]
#[command(args_conflicts_with_subcommands = true)]
pub(super) struct EvidenceArgs {
    #[command(subcommand)]
    verify: Option<EvidenceCommand>,
    /// The job (as flash_board or run_test_plan answered it).
    job: Option<String>,
    /// Write the bundle here (default: stdout).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Log files, as for `gatecmd audit verify`.
    #[arg(long = "log")]
    logs: Vec<PathBuf>,
    #[command(flatten)]
    state: StateArgs,
}

#[derive(clap::Subcommand)]
enum EvidenceCommand {
    /// Check a bundle offline: its records' signatures and the bundle's own, with the
    /// bundle's key or (better) a trusted key file.
    Verify {
        file: PathBuf,
        /// A file holding the trusted public key (`gatecmd audit key`'s output).
        #[arg(long)]
        key: Option<PathBuf>,
    },
}

pub(super) fn audit(cmd: AuditCommand) -> ExitCode {
    let result = match cmd {
        AuditCommand::Key { state } => (state.signer(&[])).map(|s| println!("{}", s.public_hex())),
        AuditCommand::Verify { logs, key, state } => return audit_verify(&state, &logs, key),
    };
    finish("audit", result)
}

fn audit_verify(state: &StateArgs, logs: &[PathBuf], key: Option<PathBuf>) -> ExitCode {
    let prepared = state
        .files(logs)
        .and_then(|files| Ok((files, state.key(key.as_deref(), logs)?)));
    let (files, key) = match prepared {
        Ok(p) => p,
        Err(e) => return finish("audit verify", Err(e)),
    };
    match verify::verify(&files, &key) {
        Ok(ok) => {
            let names: Vec<String> = ok.files.iter().map(|f| f.display().to_string()).collect();
            let start = if ok.from_genesis {
                "from the first record ever written"
            } else {
                "from a record whose predecessor is no longer in these files (rotated out)"
            };
            println!(
                "{} records verified in {} ({start}), signed by {}",
                ok.records,
                names.join(", "),
                hex::encode(key.as_bytes())
            );
            ExitCode::SUCCESS
        }
        Err(broken) => {
            eprintln!("gatecmd audit verify: {broken}");
            ExitCode::from(1)
        }
    }
}

pub(super) fn evidence(args: EvidenceArgs) -> ExitCode {
    if let Some(EvidenceCommand::Verify { file, key }) = args.verify {
        return evidence_verify(&file, key.as_deref());
    }
    let Some(job) = args.job else {
        return finish(
            "evidence",
            Err("name a job (`gatecmd evidence JOB`) or `gatecmd evidence verify FILE`".into()),
        );
    };
    let made = (args.state.files(&args.logs))
        .and_then(|files| Ok((files, args.state.signer(&args.logs)?)))
        .and_then(|(files, signer)| {
            evidence::make(&files, &signer, &job).map_err(|e| e.to_string())
        });
    let result = made.and_then(|bundle| match &args.out {
        Some(path) => std::fs::write(path, &bundle)
            .map_err(|e| format!("cannot write {}: {e}", path.display())),
        None => {
            use std::io::Write;
            std::io::stdout()
                .write_all(&bundle)
                .map_err(|e| e.to_string())
        }
    });
    finish("evidence", result)
}

fn evidence_verify(file: &Path, key: Option<&Path>) -> ExitCode {
    let trusted = match key.map(read_key).transpose() {
        Ok(k) => k,
        Err(e) => return finish("evidence verify", Err(e)),
    };
    match evidence::verify_file(file, trusted.as_ref()) {
        Ok(v) => {
            let whose = if v.trusted {
                "the trusted key"
            } else {
                "the bundle's own key (pass --key to check it is the host's)"
            };
            println!(
                "evidence of job {}: {} records verified ({} linked to the one before), signed by {} {}",
                v.job, v.records, v.linked, v.public_key, whose
            );
            println!(
                "{}",
                serde_json::to_string_pretty(&v.facts).unwrap_or_default()
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("gatecmd evidence verify: {e}");
            ExitCode::from(1)
        }
    }
}

fn read_key(path: &Path) -> Result<VerifyingKey, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read the key file {}: {e}", path.display()))?;
    chain::public_key(&text).map_err(|e| format!("{}: {e}", path.display()))
}

fn finish(what: &str, result: Result<(), String>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gatecmd {what}: {e}");
            ExitCode::from(2)
        }
    }
}
