//! Driving a leased board to a state (the `boot_board` call): what the board shows now
//! ([`look`]: the device at its usb port, its console's answer to a newline), the plan of
//! steps from there (`crate::boards::boot::plan`), and each step run as a normal gatecmd
//! action under the board's key, taken by the caller for the whole call: power and
//! recovery actions through the power runner (`super::power::run_power`, each a step's
//! audit line), waits for a USB device at the board's port ([`wait`]) or for a prompt on
//! its console. A boot that panics or resets fails the wait for its shell at once.
//!
//! It writes the audit lines of what it did (each step that ran, the state reached); the
//! surface writes those that carry its own words (a refusal, a step's failure), and
//! words every [`BootError`].

mod wait;

use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use crate::audit::{BootOutcome, BootRecord, BootStep, PowerVia};
use crate::boards::PowerState;
use crate::boards::boot::{Now, Step, Target, Unreachable, plan};
use crate::boards::boot_reports::{BootSummary, Trigger};
use crate::config::power::{SpecError, action_spec, switch_spec};
use crate::config::{BoardConfig, Config};
use crate::console::session::{self, TalkError, Wait};
use crate::console::shell::{Prompts, Seen};
use crate::console::{Console, ConsoleState, uboot};
use crate::exec::Spec;
use crate::locks::CommandGuard;
use crate::power_run::{Audited, PowerFailure, run_power};
use crate::state::AppState;

/// How long a newline is answered before the console counts as showing no prompt.
const PROBE_WAIT: Duration = Duration::from_secs(2);

/// A board taken for a boot: its configuration, console and prompts, and the guard of its
/// key (`crate::usecases::take::take_leased_board`), released when the boot ends.
pub struct OnBoard {
    pub board: BoardConfig,
    pub console: Option<Console>,
    pub prompts: Prompts,
    pub guard: CommandGuard,
}

/// What the caller asks.
pub struct Ask<'a> {
    /// Who asks (the boot record's and the audit line's client).
    pub client: &'a str,
    /// The surface's name for the action: what a boot record says triggered it.
    pub action: &'a str,
    pub to: Target,
    /// Longest wait; the board's `console.boot_timeout_secs` when none.
    pub timeout: Option<Duration>,
}

/// Why a step failed (the surface words it).
#[derive(Debug)]
pub enum BootError {
    /// The board's configuration lacks what the step needs.
    CannotReach(Unreachable),
    /// A MaskROM step on a board without `power.maskrom`.
    NoMaskrom,
    /// The board's power or recovery command cannot be run now.
    Spec(SpecError),
    /// A power or recovery command ran and failed, or did not start.
    Power(PowerFailure),
    CancelledWaitingMaskrom,
    CancelledWaitingRecovery,
    /// No rockusb device in MaskROM mode at the port by the deadline; `shows` is what is.
    NoMaskromInTime {
        usb: String,
        shows: String,
    },
    /// No device of `family` (and `mode`) at the port by the deadline.
    NoRecoveryInTime {
        usb: String,
        family: &'static str,
        mode: Option<&'static str>,
        shows: String,
    },
    /// A console step on a board without a console.
    NoConsole,
    /// The console conversation failed (a timeout, cancelled, the console gone).
    Talk(TalkError),
    /// The boot this call started panicked or reset before its shell.
    BootFailed(Box<BootSummary>),
}

/// Where a boot got: the state (the one asked for on success), the steps done.
#[derive(Debug)]
pub struct Booted {
    pub state: Target,
    pub took: Duration,
    /// The console cursor where this call's console output begins; none without a console.
    pub console_cursor: Option<u64>,
    /// What was done, in order; empty when the board was there already.
    pub steps: Vec<Step>,
    /// The report of the boot this call's power-on started.
    pub boot: Option<BootSummary>,
}

/// Why a boot did not reach its state.
#[derive(Debug)]
pub enum BootFailure {
    /// Nothing was done: the configuration cannot reach the state from where the board is.
    Unplanned(Unreachable),
    /// A step failed.
    Step(Box<StepFailed>),
}

/// A step that failed: `left` says where the board was left and what was done before.
#[derive(Debug)]
pub struct StepFailed {
    pub step: Step,
    pub error: BootError,
    pub left: Booted,
}

/// A step's name (`power_off`, `await_shell`…), as the audit log and the answer say it.
pub fn step_name(s: Step) -> &'static str {
    match s {
        Step::PowerOff => "power_off",
        Step::PowerOn => "power_on",
        Step::Maskrom => "maskrom",
        Step::AwaitMaskrom => "await_maskrom",
        Step::Recovery => "recovery",
        Step::AwaitRecovery => "await_recovery",
        Step::StopAutoboot => "stop_autoboot",
        Step::AwaitShell => "await_shell",
    }
}

/// Drives `on` to `ask.to` with what its configuration (`config`, the caller's snapshot)
/// offers; `cancel` stops it at the next wait. The board's key is released before the
/// answer.
pub async fn boot(
    state: &AppState,
    config: &Config,
    on: OnBoard,
    ask: &Ask<'_>,
    cancel: &CancellationToken,
) -> Result<Booted, BootFailure> {
    let started = Instant::now();
    let name = on.board.name.clone();
    let timeout = ask.timeout.unwrap_or(on.board.shell.boot_timeout);
    let deadline = tokio::time::Instant::now() + timeout;
    let now = look(state, &on, ask.to, cancel).await;
    let steps = plan(&on.board, ask.to, now).map_err(BootFailure::Unplanned)?;
    let cursor = on.console.as_ref().map(|c| c.bounds().1);
    let mut done = Vec::new();
    // What a boot prints is looked for from just before the power comes on: an answer to
    // the probe arriving late must not pass for the new boot's prompt.
    let mut from = cursor.unwrap_or(0);
    let mut boot_n = None;
    let left = |done, boot_n: Option<u64>, reached| Booted {
        state: reached,
        took: started.elapsed(),
        console_cursor: cursor,
        steps: done,
        boot: boot_n.and_then(|n| state.boots.summary(&name, Some(n)).ok()),
    };
    for step in steps {
        if step == Step::PowerOn {
            if let Some(c) = &on.console {
                from = c.bounds().1;
            }
            let trigger =
                Trigger::action(ask.action, ask.client, &format!("to {}", ask.to.as_str()));
            boot_n = state.boots.power_on(&name, trigger);
        }
        let r = match (step, boot_n) {
            // A boot that panics or resets fails the wait for its shell at once, naming why.
            (Step::AwaitShell, Some(n)) => tokio::select! {
                r = run_step(state, config, &on, step, from, deadline, cancel) => r,
                s = state.boots.failed(&name, n) => Err(BootError::BootFailed(Box::new(s))),
            },
            _ => run_step(state, config, &on, step, from, deadline, cancel).await,
        };
        match r {
            Ok(()) => {
                record(
                    state,
                    ask.client,
                    &name,
                    ask.to,
                    BootOutcome::Step(BootStep {
                        step: step_name(step),
                        error: None,
                    }),
                );
                done.push(step);
            }
            Err(error) => {
                drop(on.guard);
                let reached = match state.boards.power_state(&name) {
                    PowerState::Off => Target::Off,
                    _ => ask.to,
                };
                let left = left(done, boot_n, reached);
                return Err(BootFailure::Step(Box::new(StepFailed {
                    step,
                    error,
                    left,
                })));
            }
        }
    }
    drop(on.guard);
    let booted = left(done, boot_n, ask.to);
    let steps: Vec<String> = booted
        .steps
        .iter()
        .map(|s| step_name(*s).to_string())
        .collect();
    record(
        state,
        ask.client,
        &name,
        ask.to,
        BootOutcome::Reached {
            took_ms: booted.took.as_millis() as u64,
            steps: &steps,
        },
    );
    Ok(booted)
}

/// Writes one `boot_board` audit line of `client`'s boot of `board` to `to`: what the use
/// case did (a step, the state reached), or what the surface refused or a step failed
/// with, in the surface's words.
pub fn record(state: &AppState, client: &str, board: &str, to: Target, outcome: BootOutcome<'_>) {
    state.audit.record(&BootRecord {
        client,
        board,
        to: to.as_str(),
        outcome,
    });
}

/// What the board shows now: the rockusb mode at its port, the family and mode of the
/// device there, and its console's answer to a newline (for a console target only).
async fn look(state: &AppState, on: &OnBoard, target: Target, cancel: &CancellationToken) -> Now {
    let device = state.registry.get(&on.board.usb);
    let mut now = Now {
        rockusb: device.as_ref().and_then(|d| d.rockusb_mode()),
        device: device.as_ref().and_then(|d| d.family.map(|f| (f, d.mode))),
        ..Now::default()
    };
    let wants_console = matches!(target, Target::Shell | Target::Uboot);
    if let Some(c) = on
        .console
        .as_ref()
        .filter(|c| wants_console && c.view().state == ConsoleState::Open)
    {
        let wait = Wait {
            deadline: tokio::time::Instant::now() + PROBE_WAIT,
            cancel,
        };
        match session::probe(c, &on.prompts, &wait).await {
            Ok(Seen::Uboot) => now.at_uboot = true,
            Ok(Seen::Shell(_) | Seen::Login) => now.at_shell = true,
            _ => {}
        }
    }
    now
}

async fn run_step(
    state: &AppState,
    config: &Config,
    on: &OnBoard,
    step: Step,
    from: u64,
    deadline: tokio::time::Instant,
    cancel: &CancellationToken,
) -> Result<(), BootError> {
    let b = &on.board;
    let wait = Wait { deadline, cancel };
    let console = || on.console.as_ref().ok_or(BootError::NoConsole);
    let power = |spec: Result<Spec, SpecError>, after| async move {
        let spec = spec.map_err(BootError::Spec)?;
        let via = Audited::Step(PowerVia::BootBoard);
        let run = run_power(state, &b.name, &spec, after, cancel.clone(), via).await;
        run.into_result().map_err(BootError::Power)
    };
    match step {
        Step::PowerOff => power(switch_spec(config, b, false), PowerState::Off).await,
        Step::PowerOn => power(switch_spec(config, b, true), PowerState::On).await,
        Step::Maskrom => {
            let action = b.maskrom.as_ref().ok_or(BootError::NoMaskrom)?;
            power(action_spec(config, action), PowerState::On).await
        }
        Step::AwaitMaskrom => wait::maskrom(state, &b.usb, &wait).await,
        Step::Recovery => {
            let Some(r) = b.recovery() else {
                return Err(BootError::CannotReach(Unreachable {
                    board: b.name.clone(),
                    target: "recovery",
                    needs: vec!["power.recovery or power.maskrom"],
                }));
            };
            power(action_spec(config, &r.action), PowerState::On).await
        }
        Step::AwaitRecovery => match b.recovery() {
            Some(r) => wait::recovery(state, &b.usb, r.family, r.mode, &wait).await,
            None => Ok(()),
        },
        Step::StopAutoboot => {
            let interrupt = &b.shell.uboot.interrupt;
            uboot::stop_autoboot(console()?, &on.prompts, interrupt, from, &wait)
                .await
                .map_err(BootError::Talk)
        }
        Step::AwaitShell => wait::shell(console()?, &on.prompts, from, &wait)
            .await
            .map_err(BootError::Talk),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::Audit;
    use crate::config::AuditSettings;
    use crate::locks::{ClientName, LeaseRequest, LockKey};
    use crate::usecases::take::{Caller, take_leased_board};

    const CONFIG: &str = "commands:\n  - name: relay\n    binary: /bin/true\n    allowed_args:\n      - pattern: \"on\"\n      - pattern: \"off\"\n      - pattern: \"maskrom\"\nboards:\n  - name: b1\n    usb: \"1-2\"\n    power:\n      on: {command: relay, args: \"on\"}\n      off: {command: relay, args: \"off\"}\n      maskrom: {command: relay, args: \"maskrom\"}\n  - name: bare\n    usb: \"1-3\"\n";

    async fn on_board(state: &AppState, config: &Config, board: &str) -> OnBoard {
        let req = LeaseRequest {
            key: LockKey::Board(board.into()),
            client: ClientName("a".into()),
            session: None,
            ttl: None,
            note: None,
            wait: Duration::ZERO,
            shared: vec![],
        };
        let held = state.locks.key_state(&req.key).and_then(|s| s.lease);
        let id = match held {
            Some(l) => l.lease_id.0,
            None => state.locks.lock(req).await.expect("lease").lease_id.0,
        };
        let caller = Caller {
            client: "a",
            session: None,
            lease: Some(&id),
            tool: "boot_board",
        };
        let t = take_leased_board(state, config, caller, board)
            .await
            .expect("taken");
        OnBoard {
            prompts: Prompts::new(&t.board.shell).expect("prompts"),
            board: t.board,
            console: t.console,
            guard: t.guard,
        }
    }

    fn ask(to: Target) -> Ask<'static> {
        Ask {
            client: "a",
            action: "boot_board",
            to,
            timeout: Some(Duration::from_millis(300)),
        }
    }

    /// `off` runs the power switch's off action (its audit line a `boot_board` step) and
    /// audits the step and the state reached; a board that lacks what the state needs is
    /// refused before anything runs; a step that times out says where and what the port
    /// shows, and lets the board's key go.
    #[tokio::test]
    async fn a_boot_runs_its_steps_and_says_where_one_failed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let audit = Audit::open(dir.path(), &AuditSettings::default()).expect("audit");
        let config = Config::parse(CONFIG, "t.yaml").expect("config");
        let state = AppState::with_audit(config, gatecmd_devices::Registry::new(), audit);
        let config = state.config();
        let cancel = CancellationToken::new();

        let on = on_board(&state, &config, "b1").await;
        let got = boot(&state, &config, on, &ask(Target::Off), &cancel)
            .await
            .expect("off");
        assert_eq!(
            (got.state, got.steps.as_slice()),
            (Target::Off, &[Step::PowerOff][..])
        );
        assert_eq!(state.boards.power_state("b1"), PowerState::Off);

        let on = on_board(&state, &config, "bare").await;
        assert!(matches!(
            boot(&state, &config, on, &ask(Target::Maskrom), &cancel).await,
            Err(BootFailure::Unplanned(u)) if u.board == "bare"
        ));

        let on = on_board(&state, &config, "b1").await;
        match boot(&state, &config, on, &ask(Target::Maskrom), &cancel).await {
            Err(BootFailure::Step(f)) => {
                let StepFailed { step, error, left } = *f;
                assert_eq!(step, Step::AwaitMaskrom);
                assert!(
                    matches!(&error, BootError::NoMaskromInTime { usb, shows } if usb == "1-2" && shows == "nothing"),
                    "{error:?}"
                );
                assert_eq!(left.steps, [Step::Maskrom]);
                assert_eq!(left.state, Target::Maskrom);
            }
            other => panic!("{other:?}"),
        }
        assert!(
            state
                .locks
                .key_state(&LockKey::Board("b1".into()))
                .and_then(|s| s.running)
                .is_none(),
            "the failed boot let the board's key go"
        );

        state.audit.flush();
        let text =
            std::fs::read_to_string(dir.path().join(crate::audit::FILE_NAME)).unwrap_or_default();
        let lines: Vec<serde_json::Value> = text
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect();
        let of = |event: &str| -> Vec<&serde_json::Value> {
            lines.iter().filter(|v| v["event"] == event).collect()
        };
        let boots = of("boot_board");
        let outcomes: Vec<_> = boots
            .iter()
            .map(|v| v["outcome"].as_str().unwrap_or(""))
            .collect();
        assert_eq!(outcomes, ["step", "reached", "step"], "{boots:?}");
        assert_eq!(boots[0]["detail"]["step"], "power_off");
        assert_eq!(boots[2]["detail"]["step"], "maskrom");
        let power = of("power_board");
        assert_eq!(power.len(), 2, "{power:?}");
        assert!(power.iter().all(|v| v["via"] == "boot_board"));
    }
}
