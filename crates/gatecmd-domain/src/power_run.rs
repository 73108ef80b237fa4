//! Running one of a board's power actions: its command line (`Spec`, from the board's
//! power backend, `crate::config::power`) through the executor like any command, the
//! audit line of a step, and the board's power state after it. The one runner behind
//! `power_board`, `boot_board`'s power steps, `flash_board`'s MaskROM action and labgrid's
//! power port; each caller holds its own lease and lock and words its own failure.
//!
//! Below the use cases rather than among them: the flash's orchestration (`crate::flash`)
//! runs the MaskROM action through it, and the use cases run the flash, so a runner among
//! the use cases made the two modules import each other.

use tokio_util::sync::CancellationToken;

use crate::audit::{PowerStepRecord, PowerVia};
use crate::boards::PowerState;
use crate::exec::{ExecError, Outcome, Spec};
use crate::state::AppState;

/// Whose audit line a power action gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Audited {
    /// A step of a larger action: one `power_board` line with `via`, written here.
    Step(PowerVia),
    /// The caller writes one line for its whole action (`power_board`, labgrid's
    /// `labgrid_power`).
    ByCaller,
}

/// What one power action did.
#[derive(Debug)]
pub struct PowerRun {
    /// The command line run.
    pub argv: Vec<String>,
    /// How it ended, or why it did not start.
    pub outcome: Result<Outcome, ExecError>,
    /// The board's power state now: the one asked for after a success, else `unknown`.
    pub state: PowerState,
}

/// A power action that did not succeed, as the callers word it.
#[derive(Debug)]
pub enum PowerFailure {
    /// It ran and failed (exit code not 0, or stopped).
    Failed {
        /// The command line, space-joined.
        argv: String,
        exit_code: Option<i32>,
        /// Its stdout and stderr, cleaned.
        output: String,
    },
    /// It did not start.
    NotStarted { argv: String, error: ExecError },
}

impl PowerRun {
    /// Exit code 0 and not stopped.
    pub fn ok(&self) -> bool {
        succeeded(&self.outcome)
    }

    /// The exit code, when it ran and exited.
    pub fn exit_code(&self) -> Option<i32> {
        self.outcome.as_ref().ok().and_then(|o| o.exit_code)
    }

    /// Its stdout then its stderr, cleaned for an agent to read (empty when it did not
    /// start).
    pub fn output(&self) -> String {
        match &self.outcome {
            Ok(o) => {
                gatecmd_core::output::clean(&o.stdout) + &gatecmd_core::output::clean(&o.stderr)
            }
            Err(_) => String::new(),
        }
    }

    /// `Ok` on success, else what failed.
    pub fn into_result(self) -> Result<(), PowerFailure> {
        if self.ok() {
            return Ok(());
        }
        let output = self.output();
        let argv = self.argv.join(" ");
        match self.outcome {
            Ok(o) => Err(PowerFailure::Failed {
                argv,
                exit_code: o.exit_code,
                output,
            }),
            Err(error) => Err(PowerFailure::NotStarted { argv, error }),
        }
    }
}

/// A spec's command line: the binary, then its arguments.
pub fn argv(spec: &Spec) -> Vec<String> {
    std::iter::once(spec.binary.display().to_string())
        .chain(spec.args.iter().cloned())
        .collect()
}

fn succeeded(outcome: &Result<Outcome, ExecError>) -> bool {
    matches!(outcome, Ok(o) if o.exit_code == Some(0) && o.stopped.is_none())
}

/// Runs `spec`, one power action of `board`, through the executor; on success the board's
/// power state becomes `after`, otherwise `unknown` (a switch that failed half-way leaves
/// nobody sure). The caller holds the board's lease and command lock.
pub async fn run_power(
    state: &AppState,
    board: &str,
    spec: &Spec,
    after: PowerState,
    cancel: CancellationToken,
    audited: Audited,
) -> PowerRun {
    let argv = argv(spec);
    let outcome = state.executor.run_with(spec, cancel, None).await;
    if let Audited::Step(via) = audited {
        state.audit.record(&PowerStepRecord {
            via,
            board,
            argv: &argv,
            exit_code: outcome.as_ref().ok().and_then(|o| o.exit_code),
        });
    }
    let now = if succeeded(&outcome) {
        after
    } else {
        PowerState::Unknown
    };
    state.boards.set_power_state(board, now);
    PowerRun {
        argv,
        outcome,
        state: now,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::Audit;
    use crate::config::{AuditSettings, Config};
    use std::time::Duration;

    fn spec(binary: &str, args: &[&str]) -> Spec {
        Spec {
            binary: binary.into(),
            args: args.iter().map(|a| a.to_string()).collect(),
            env: Default::default(),
            timeout: Duration::from_secs(10),
            isolation: None,
            inherit: vec![],
            live_output: false,
        }
    }

    fn lines(dir: &std::path::Path) -> Vec<serde_json::Value> {
        std::fs::read_to_string(dir.join(crate::audit::FILE_NAME))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .filter(|v: &serde_json::Value| v["event"] == "power_board")
            .collect()
    }

    /// A success sets the state asked for, a failure or a command that cannot start sets
    /// `unknown`; a step is audited with its `via`, a caller's own action is not.
    #[tokio::test]
    async fn one_runner_sets_the_power_state_and_audits_a_step() {
        let dir = tempfile::tempdir().expect("tempdir");
        let audit = Audit::open(dir.path(), &AuditSettings::default()).expect("audit");
        let config = Config::parse("", "t.yaml").expect("config");
        let state = AppState::with_audit(config, gatecmd_devices::Registry::new(), audit);
        let cancel = CancellationToken::new;

        let run = run_power(
            &state,
            "b1",
            &spec("/bin/sh", &["-c", "echo on"]),
            PowerState::On,
            cancel(),
            Audited::Step(PowerVia::BootBoard),
        )
        .await;
        assert!(run.ok() && run.exit_code() == Some(0), "{run:?}");
        assert_eq!(run.state, PowerState::On);
        assert_eq!(run.output(), "on\n");
        assert_eq!(state.boards.power_state("b1"), PowerState::On);
        assert!(run.into_result().is_ok());

        let run = run_power(
            &state,
            "b1",
            &spec("/bin/sh", &["-c", "echo stuck >&2; exit 3"]),
            PowerState::Off,
            cancel(),
            Audited::ByCaller,
        )
        .await;
        assert_eq!(run.state, PowerState::Unknown);
        assert_eq!(state.boards.power_state("b1"), PowerState::Unknown);
        match run.into_result() {
            Err(PowerFailure::Failed {
                argv,
                exit_code,
                output,
            }) => {
                assert_eq!(argv, "/bin/sh -c echo stuck >&2; exit 3");
                assert_eq!(exit_code, Some(3));
                assert_eq!(output, "stuck\n");
            }
            other => panic!("{other:?}"),
        }

        state.boards.set_power_state("b1", PowerState::On);
        let run = run_power(
            &state,
            "b1",
            &spec("/nonexistent/relay", &["off"]),
            PowerState::Off,
            cancel(),
            Audited::Step(PowerVia::FlashBoard),
        )
        .await;
        assert_eq!(state.boards.power_state("b1"), PowerState::Unknown);
        assert!(matches!(
            run.into_result(),
            Err(PowerFailure::NotStarted { .. })
        ));

        state.audit.flush();
        let got = lines(dir.path());
        assert_eq!(got.len(), 2, "{got:?}");
        assert_eq!(got[0]["via"], "boot_board");
        assert_eq!(
            got[0]["argv"],
            serde_json::json!(["/bin/sh", "-c", "echo on"])
        );
        assert_eq!(got[0]["exit_code"], 0);
        assert_eq!(got[1]["via"], "flash_board");
        assert_eq!(got[1]["exit_code"], serde_json::Value::Null);
    }
}
