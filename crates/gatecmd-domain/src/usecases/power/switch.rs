//! Switching a leased board's power off, on, or off-wait-on, for every surface that does
//! (the `power_board` call, the labgrid bridge's power port): the command lines checked
//! once on the caller's configuration snapshot ([`plan`]), the board taken under the
//! caller's lease for the whole action ([`take`]: no other command of the lease runs
//! between off and on), each command through the one power runner
//! (`crate::power_run::run_power`), the power-on marked as the start of a boot
//! ([`switch_held`]); `power_board`'s [`run`] is both, with one audit line for the whole
//! action.
//!
//! A surface that holds the call for an approval checks the lease before it waits
//! ([`lease_held`]) and the command lines after it ([`unchanged`]); [`run`] then takes the
//! board, which checks the lease again. Each surface words the failures ([`SwitchError`]).

use std::time::{Duration, Instant};

use gatecmd_core::refusal::common::{LeaseMissing, UnknownBoard};
use tokio_util::sync::CancellationToken;

use crate::audit::{PowerOutcome, PowerRecord};
use crate::boards::PowerState;
use crate::boards::boot_reports::Trigger;
use crate::config::power::{SpecError, switch_spec};
use crate::config::{BoardConfig, Config};
use crate::exec::Spec;
use crate::locks::{LockError, LockKey};
use crate::power_run::{Audited, argv, run_power};
use crate::state::AppState;
use crate::usecases::take::{Caller, TakeError, Taken, check_lease, take_leased_board_as};

/// Longest wait between off and on of a cycle, in seconds.
pub const MAX_OFF_SECS: u64 = 300;
/// The wait between off and on of a cycle when none is given, in seconds.
pub const DEFAULT_OFF_SECS: u64 = 2;

/// What to do with a board's power.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Switch {
    On,
    Off,
    /// Off, wait, on.
    Cycle,
}

impl Switch {
    /// `on`, `off`, `cycle`: the audit log's and the lock table's word for it.
    pub fn as_str(self) -> &'static str {
        match self {
            Switch::On => "on",
            Switch::Off => "off",
            Switch::Cycle => "cycle",
        }
    }

    /// The switch positions it runs through, in order (`true` is on).
    fn positions(self) -> &'static [bool] {
        match self {
            Switch::On => &[true],
            Switch::Off => &[false],
            Switch::Cycle => &[false, true],
        }
    }
}

/// A switch checked on one configuration snapshot: the board, the command lines to run.
#[derive(Debug)]
pub struct Plan {
    pub board: BoardConfig,
    pub switch: Switch,
    /// The wait between off and on of a cycle.
    pub off: Duration,
    specs: Vec<Spec>,
    /// The command lines, in order (two for a cycle): what an approver is shown.
    pub argv: Vec<Vec<String>>,
}

/// Why a switch was not made (the surface words it).
#[derive(Debug)]
pub enum SwitchError {
    /// No board of that name (the names there are, from the same snapshot).
    UnknownBoard(UnknownBoard),
    /// A cycle's wait is above [`MAX_OFF_SECS`].
    OffTooLong { off_secs: u64, max: u64 },
    /// The board's switch cannot be run now (none, or its command changed since load).
    Spec(SpecError),
    /// The caller holds no lease on the board, or did not pass it.
    Lease(LeaseMissing),
    /// The board's key could not be taken (someone else's lease, a call running on it).
    Lock(LockError),
    /// The board's command lines are not those approved (a reload in between).
    Changed { board: String },
}

/// What a switch did: the state it left, the last exit code, the commands' output.
#[derive(Debug)]
pub struct Switched {
    /// The board's power state now: the one asked for on success, else `unknown` (or
    /// `off` when cancelled between off and on).
    pub state: PowerState,
    /// The exit code of the last command that ran.
    pub exit_code: Option<i32>,
    /// The commands' stdout and stderr, cleaned, and why a command did not start.
    pub output: String,
    /// Every command ran and succeeded.
    pub ok: bool,
    /// Cancelled while the board was off between the two halves of a cycle.
    pub cancelled_while_off: bool,
    pub took: Duration,
}

/// Checks a switch of `board` on `config`: the board, the cycle's wait and the command
/// lines its power backend gives.
pub fn plan(
    config: &Config,
    board: &str,
    switch: Switch,
    off_secs: Option<u64>,
) -> Result<Plan, SwitchError> {
    let Some(b) = config.board(board) else {
        return Err(SwitchError::UnknownBoard(UnknownBoard {
            name: board.to_string(),
            known: config.board_names(),
        }));
    };
    let off_secs = off_secs.unwrap_or(DEFAULT_OFF_SECS);
    if off_secs > MAX_OFF_SECS {
        return Err(SwitchError::OffTooLong {
            off_secs,
            max: MAX_OFF_SECS,
        });
    }
    let specs = specs(config, b, switch).map_err(SwitchError::Spec)?;
    Ok(Plan {
        board: b.clone(),
        switch,
        off: Duration::from_secs(off_secs),
        argv: specs.iter().map(argv).collect(),
        specs,
    })
}

fn specs(config: &Config, board: &BoardConfig, switch: Switch) -> Result<Vec<Spec>, SpecError> {
    switch
        .positions()
        .iter()
        .map(|on| switch_spec(config, board, *on))
        .collect()
}

/// The caller holds the board's lease and passed it (checked without taking the key:
/// what a call checks before it waits for an approval).
pub fn lease_held(state: &AppState, plan: &Plan, caller: &Caller<'_>) -> Result<(), SwitchError> {
    check_lease(state, &LockKey::Board(plan.board.name.clone()), caller).map_err(|e| match e {
        TakeError::Lease(e) => SwitchError::Lease(e),
        TakeError::Lock(e) => SwitchError::Lock(e),
        TakeError::UnknownBoard => SwitchError::UnknownBoard(UnknownBoard {
            name: plan.board.name.clone(),
            known: state.config().board_names(),
        }),
    })
}

/// The board's command lines on the configuration now are still the planned ones (after
/// an approval: only what was approved may run).
pub fn unchanged(state: &AppState, plan: &Plan) -> Result<(), SwitchError> {
    let now = state.config();
    let same = now.board(&plan.board.name).is_some_and(|b| {
        specs(&now, b, plan.switch)
            .is_ok_and(|s| s.iter().map(argv).collect::<Vec<_>>() == plan.argv)
    });
    if same {
        Ok(())
    } else {
        Err(SwitchError::Changed {
            board: plan.board.name.clone(),
        })
    }
}

/// A board taken for a switch under its caller's lease: its key is held until the switch
/// ends (or this is dropped).
pub struct Held<'c> {
    taken: Taken,
    client: &'c str,
    tool: &'c str,
}

/// Takes the board under `caller`'s lease (on `config`, the snapshot `plan` was made on),
/// for the whole action: no command of the same lease runs between off and on. A surface
/// with a check of its own to make where nothing can change it (the labgrid bridge's hold)
/// makes it between this and [`switch_held`].
pub async fn take<'c>(
    state: &AppState,
    config: &Config,
    plan: &Plan,
    caller: Caller<'c>,
) -> Result<Held<'c>, SwitchError> {
    let (client, tool) = (caller.client, caller.tool);
    let command = format!("{tool} {}", plan.switch.as_str());
    let name = &plan.board.name;
    let taken = take_leased_board_as(state, config, caller, name, command)
        .await
        .map_err(|e| match e {
            TakeError::UnknownBoard => SwitchError::UnknownBoard(UnknownBoard {
                name: name.clone(),
                known: config.board_names(),
            }),
            TakeError::Lease(e) => SwitchError::Lease(e),
            TakeError::Lock(e) => SwitchError::Lock(e),
        })?;
    Ok(Held {
        taken,
        client,
        tool,
    })
}

/// Runs the plan's commands on the board `held`, waiting `plan.off` between off and on; a
/// power-on starts a boot record triggered by the caller's tool. The key is let go at the
/// end. Writes no audit line: [`run`] writes `power_board`'s, the labgrid bridge its own.
pub async fn switch_held(
    state: &AppState,
    plan: &Plan,
    held: Held<'_>,
    cancel: CancellationToken,
) -> Switched {
    let name = &plan.board.name;
    let started = Instant::now();
    let mut done = Switched {
        state: state.boards.power_state(name),
        exit_code: None,
        output: String::new(),
        ok: true,
        cancelled_while_off: false,
        took: Duration::ZERO,
    };
    let positions = plan.switch.positions();
    for (i, (spec, on)) in plan.specs.iter().zip(positions).enumerate() {
        if i > 0 {
            tokio::select! {
                _ = tokio::time::sleep(plan.off) => {}
                _ = cancel.cancelled() => {
                    done.ok = false;
                    done.cancelled_while_off = true;
                    break;
                }
            }
        }
        let after = if *on { PowerState::On } else { PowerState::Off };
        if *on {
            // The bytes from here on are the boot this switch starts (docs/BOARDS.md).
            let trigger = Trigger::action(held.tool, held.client, plan.switch.as_str());
            state.boots.power_on(name, trigger);
        }
        let run = run_power(state, name, spec, after, cancel.clone(), Audited::ByCaller).await;
        done.state = run.state;
        match &run.outcome {
            Ok(o) => {
                done.exit_code = o.exit_code;
                done.output.push_str(&run.output());
            }
            Err(e) => done.output.push_str(&format!("{e}\n")),
        }
        if !run.ok() {
            done.ok = false;
            break;
        }
    }
    drop(held.taken);
    done.took = started.elapsed();
    done
}

/// `power_board`'s switch: [`take`] then [`switch_held`], and the action's one audit line
/// when it ran.
pub async fn run(
    state: &AppState,
    config: &Config,
    plan: &Plan,
    caller: Caller<'_>,
    cancel: CancellationToken,
) -> Result<Switched, SwitchError> {
    let client = caller.client;
    let held = take(state, config, plan, caller).await?;
    let done = switch_held(state, plan, held, cancel).await;
    state.audit.record(&PowerRecord {
        client,
        board: &plan.board.name,
        action: plan.switch.as_str(),
        outcome: PowerOutcome::Ran {
            argv: &plan.argv,
            exit_code: done.exit_code,
            state: state_name(done.state),
            ok: done.ok,
            duration_ms: done.took.as_millis() as u64,
        },
    });
    Ok(done)
}

/// `on`, `off`, `unknown`: a power state's wire name.
pub fn state_name(s: PowerState) -> &'static str {
    match s {
        PowerState::On => "on",
        PowerState::Off => "off",
        PowerState::Unknown => "unknown",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::Audit;
    use crate::config::AuditSettings;
    use crate::locks::{ClientName, LeaseRequest};
    use std::sync::Arc;

    const RELAY: &str = "commands:\n  - name: relay\n    binary: /bin/true\n    allowed_args:\n      - pattern: \"on {n}\"\n      - pattern: \"off {n}\"\n    params:\n      n: \"^[0-9]$\"\n";

    fn config(n: u8) -> Config {
        let text = format!(
            "{RELAY}boards:\n  - name: b1\n    usb: \"1-2\"\n    power:\n      on: {{command: relay, args: \"on {n}\"}}\n      off: {{command: relay, args: \"off {n}\"}}\n  - name: bare\n    usb: \"1-3\"\n"
        );
        Config::parse(&text, "t.yaml").expect("config")
    }

    fn caller(lease: Option<&str>) -> Caller<'_> {
        Caller {
            client: "a",
            session: None,
            lease,
            tool: "power_board",
        }
    }

    async fn lease(state: &AppState) -> String {
        let req = LeaseRequest {
            key: LockKey::Board("b1".into()),
            client: ClientName("a".into()),
            session: None,
            ttl: None,
            note: None,
            wait: Duration::ZERO,
            shared: vec![],
        };
        state.locks.lock(req).await.expect("lease").lease_id.0
    }

    fn audit_lines(dir: &std::path::Path) -> Vec<serde_json::Value> {
        std::fs::read_to_string(dir.join(crate::audit::FILE_NAME))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .filter(|v: &serde_json::Value| v["event"] == "power_board")
            .collect()
    }

    /// The checks before anything runs: the board, the cycle's wait, its switch, the
    /// lease; then a cycle runs off and on under the lease, one audit line for the whole
    /// action, and the command lines are checked against a reload.
    #[tokio::test]
    async fn a_cycle_runs_under_the_lease_with_one_audit_line() {
        let dir = tempfile::tempdir().expect("tempdir");
        let audit = Audit::open(dir.path(), &AuditSettings::default()).expect("audit");
        let state: Arc<AppState> =
            AppState::with_audit(config(3), gatecmd_devices::Registry::new(), audit);
        let config = state.config();
        assert!(matches!(
            plan(&config, "nope", Switch::On, None),
            Err(SwitchError::UnknownBoard(u)) if u.known == ["b1", "bare"]
        ));
        assert!(matches!(
            plan(&config, "b1", Switch::Cycle, Some(MAX_OFF_SECS + 1)),
            Err(SwitchError::OffTooLong {
                off_secs: 301,
                max: 300
            })
        ));
        assert!(matches!(
            plan(&config, "bare", Switch::Off, None),
            Err(SwitchError::Spec(SpecError::NoSwitch { .. }))
        ));
        let p = plan(&config, "b1", Switch::Cycle, Some(0)).expect("plan");
        assert_eq!(
            p.argv,
            [["/bin/true", "off", "3"], ["/bin/true", "on", "3"]]
        );
        let cancel = CancellationToken::new;
        assert!(matches!(
            lease_held(&state, &p, &caller(None)),
            Err(SwitchError::Lease(LeaseMissing::Missing { .. }))
        ));
        assert!(matches!(
            run(&state, &config, &p, caller(None), cancel()).await,
            Err(SwitchError::Lease(LeaseMissing::Missing { .. }))
        ));
        let id = lease(&state).await;
        assert!(matches!(
            lease_held(&state, &p, &caller(None)),
            Err(SwitchError::Lease(LeaseMissing::NotPassed { .. }))
        ));
        assert!(lease_held(&state, &p, &caller(Some(&id))).is_ok());
        assert!(unchanged(&state, &p).is_ok());

        let done = run(&state, &config, &p, caller(Some(&id)), cancel())
            .await
            .expect("switched");
        assert!(done.ok && !done.cancelled_while_off, "{done:?}");
        assert_eq!((done.state, done.exit_code), (PowerState::On, Some(0)));
        assert_eq!(state.boards.power_state("b1"), PowerState::On);
        state.audit.flush();
        let lines = audit_lines(dir.path());
        assert_eq!(lines.len(), 1, "one line for the whole action: {lines:?}");
        assert_eq!(lines[0]["action"], "cycle");
        assert_eq!(lines[0]["ok"], true);
        assert_eq!(lines[0]["state"], "on");
        assert_eq!(lines[0]["argv"][1][1], "on");

        state.replace_config(super::tests::config(4));
        assert!(matches!(
            unchanged(&state, &p),
            Err(SwitchError::Changed { board }) if board == "b1"
        ));
    }

    /// Cancelled between off and on: the board stays off, the action failed, and the key
    /// is free again at once.
    #[tokio::test]
    async fn cancelled_while_off_leaves_the_board_off() {
        let state = AppState::new(config(3));
        let config = state.config();
        let id = lease(&state).await;
        let p = plan(&config, "b1", Switch::Cycle, Some(MAX_OFF_SECS)).expect("plan");
        let cancel = CancellationToken::new();
        let stop = cancel.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(200)).await;
            stop.cancel();
        });
        let started = Instant::now();
        let done = run(&state, &config, &p, caller(Some(&id)), cancel)
            .await
            .expect("ran");
        assert!(started.elapsed() < Duration::from_secs(30));
        assert!(!done.ok && done.cancelled_while_off, "{done:?}");
        assert_eq!(done.state, PowerState::Off);
        let again = plan(&config, "b1", Switch::On, None).expect("plan");
        let on = run(
            &state,
            &config,
            &again,
            caller(Some(&id)),
            CancellationToken::new(),
        )
        .await;
        assert!(on.is_ok_and(|s| s.ok), "the board's key was let go");
    }
}
