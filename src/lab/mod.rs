//! gatecmd in a labgrid lab (docs/LAB.md): an exporter of the lab's coordinator, so that
//! people with `labgrid-client` and agents with MCP share one lock per board.
//!
//! - `proto`: the coordinator messages used, as hand-written prost derives.
//! - `resources`: a board as labgrid resources (USB loader, serial port, power port).
//! - `holds`: the place ↔ lease bridge (holder `labgrid:<place>`).
//! - `names`: place and user names from labgrid, checked or cleaned and bounded.
//! - `mirror`: agent leases mirrored as place acquisitions (`EXPORTER/gatecmd:CLIENT`).
//! - `reservations`: a listed person's reservation allocated to a place of a board here
//!   holds the board (as `labgrid:<place>`) until it is cancelled or expires; its owner
//!   from the coordinator's `GetReservations`.
//! - `session`: one connection: the exporter stream and the place updates.
//! - `directory_feed`: the coordinator's resource and place updates written into the lab's
//!   directory (`gatecmd_domain::lab`), where the lab-wide tools find boards.
//! - `admission`: who may use a board's ports: a person of `labgrid.people` who acquired
//!   its place, from one of their listed accounts (the peer's socket owner, from the
//!   kernel), checked per byte and per switch.
//! - `console`: each board's captured console on a TCP port, for the place that holds it.
//! - `power`: labgrid's `rest` power model served through the board's power backend.
//! - `error`: why a session, a mirror call or a port failed (`LabError`).
//! - `peers`: what `gatecmd check` says of `labgrid.peers` (which answer, which refuse).
//!
//! This module: start-up (listeners first, so a bad `console_bind` stops the start), the
//! reconnect loop with bounded backoff, and the watchdog that releases labgrid-held
//! boards once the coordinator has been gone for `labgrid.hold_secs`.

mod admission;
mod console;
mod directory_feed;
mod error;
mod holds;
mod mirror;
mod names;
pub mod peers;
mod power;
mod proto;
mod reservations;
mod resources;
mod session;

pub use error::LabError;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use gatecmd_domain::audit::{LabgridEvent, LabgridRecord};
use gatecmd_domain::config::LabSettings;
use gatecmd_domain::state::AppState;

pub use holds::HOLDER_PREFIX;

/// First wait before reconnecting; doubled after each failed attempt up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(250);
/// Longest wait between two connection attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(5);
/// A session that lasted this long resets the backoff.
const STABLE: Duration = Duration::from_secs(10);

/// The bridge's shared parts.
pub(crate) struct Lab {
    state: Arc<AppState>,
    settings: LabSettings,
    ports: resources::Ports,
    holds: holds::Holds,
    mirrors: mirror::Mirrors,
    reservations: reservations::Reservations,
    /// Place → `HOST/USER` who acquired it, from the coordinator's place updates.
    users: Mutex<HashMap<String, String>>,
    /// Since when the coordinator is lost (`None` while a session is registered).
    lost_since: Mutex<Option<Instant>>,
}

/// A TCP port for one served resource (a console, the power port), bound where the config
/// says (`console_bind`, loopback by default); its number is what labgrid is told.
async fn bind_port(lab: &LabSettings) -> Result<(tokio::net::TcpListener, u16), LabError> {
    let listener = tokio::net::TcpListener::bind(lab.listen_addr())
        .await
        .map_err(|error| LabError::Listen {
            bind: lab.console_bind.to_string(),
            error,
        })?;
    let port = listener.local_addr()?.port();
    Ok((listener, port))
}

/// Starts the bridge when `labgrid:` is configured: binds the console and power ports
/// (an error stops the start), then connects in the background and keeps reconnecting
/// until `shutdown`.
pub async fn start(state: Arc<AppState>, shutdown: CancellationToken) -> Result<(), LabError> {
    let Some(settings) = state.config().labgrid.clone() else {
        return Ok(());
    };
    if settings.people.is_empty() {
        tracing::warn!(
            "labgrid: labgrid.people is empty: no labgrid acquisition takes a board and the console and power ports serve nobody until the operator names people (docs/LAB.md)"
        );
        eprintln!(
            "gatecmd: warning: labgrid.people is empty: labgrid acquisitions take no board and the labgrid console and power ports are closed until people are named (docs/LAB.md, \"Who may use the ports\")"
        );
    }
    let consoles = console::bind(&state, &settings).await?;
    let power = power::bind(&settings).await?;
    // Every port gatecmd opens is named where it opens (docs/SECURITY.md, "Listeners"); a
    // NAT guest reaches them all, so each is keyed (`admission.rs`).
    for l in consoles.values() {
        eprintln!(
            "gatecmd: labgrid console of {} on {}:{}",
            l.board, settings.console_bind, l.port
        );
    }
    eprintln!(
        "gatecmd: labgrid power on {}:{}",
        settings.console_bind, power.port
    );
    let mut ports = resources::Ports {
        console: consoles.iter().map(|(b, l)| (b.clone(), l.port)).collect(),
        power: Some(power.port),
        ..Default::default()
    };
    for (i, b) in state.config().boards.iter().enumerate() {
        ports.power_index.insert(b.name.clone(), i as u64);
    }
    let lab = Arc::new(Lab {
        state,
        settings,
        ports,
        holds: holds::Holds::default(),
        mirrors: mirror::Mirrors::default(),
        reservations: reservations::Reservations::default(),
        users: Mutex::new(HashMap::new()),
        lost_since: Mutex::new(Some(Instant::now())),
    });
    for l in consoles.into_values() {
        tokio::spawn(console::serve(lab.clone(), l, shutdown.clone()));
    }
    tokio::spawn(power::serve(lab.clone(), power, shutdown.clone()));
    tokio::spawn(watchdog(lab.clone(), shutdown.clone()));
    tokio::spawn(connect_loop(lab, shutdown));
    Ok(())
}

/// What `gatecmd check` says of the labgrid bridge: who may hold boards through it and from
/// which accounts, or that nobody may; a listed account this host does not have.
pub fn check_lines(settings: &LabSettings) -> Vec<String> {
    if settings.people.is_empty() {
        return vec![
            "labgrid: warning: labgrid.people is empty: labgrid acquisitions take no board and the labgrid console and power ports are closed until people are named (docs/LAB.md, \"Who may use the ports\")".into(),
        ];
    }
    let mut out = Vec::new();
    for p in &settings.people {
        out.push(format!(
            "labgrid: {} may hold boards through labgrid; the console and power ports serve them from account(s) {}",
            p.name,
            p.accounts.join(", ")
        ));
        for a in &p.accounts {
            if !matches!(nix::unistd::User::from_name(a), Ok(Some(_))) {
                out.push(format!(
                    "labgrid: warning: account {a} (listed for {}) does not exist on this host: no connection can come from it",
                    p.name
                ));
            }
        }
    }
    out
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

async fn connect_loop(lab: Arc<Lab>, shutdown: CancellationToken) {
    let mut backoff = FIRST_BACKOFF;
    let mut was_registered = false;
    loop {
        let began = Instant::now();
        let ended = tokio::select! {
            e = session::run(&lab, || {
                *lock(&lab.lost_since) = None;
                tracing::info!(coordinator = %lab.settings.coordinator, name = %lab.settings.name, "labgrid: registered with the coordinator");
                eprintln!("gatecmd: labgrid exporter {} registered", lab.settings.name);
            }) => e,
            _ = shutdown.cancelled() => return,
        };
        lab.state
            .lab
            .directory
            .down(&lab.settings.coordinator, &ended.why);
        // Reservations are taken or ended again only once the next session lists places.
        lab.reservations.new_session();
        if ended.registered {
            lock(&lab.lost_since).get_or_insert_with(Instant::now);
            tracing::warn!(why = %ended.why, "labgrid: coordinator lost; reconnecting (local leases work meanwhile)");
            lab.audit(LabgridEvent::Lost {
                coordinator: &lab.settings.coordinator,
                why: &ended.why,
                held_boards: lab.holds.snapshot().len(),
            });
        } else if was_registered || backoff == FIRST_BACKOFF {
            // The first failed attempt after a loss or at start; the rest only at debug.
            tracing::warn!(why = %ended.why, "labgrid: cannot register with the coordinator; retrying with backoff up to 5 s (local leases work meanwhile)");
        } else {
            tracing::debug!(why = %ended.why, "labgrid: connection attempt failed");
        }
        was_registered = ended.registered;
        if began.elapsed() >= STABLE {
            backoff = FIRST_BACKOFF;
        }
        tokio::select! {
            _ = tokio::time::sleep(backoff) => {}
            _ = shutdown.cancelled() => return,
        }
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

/// Releases labgrid-held boards once the coordinator has been gone for `hold_secs`: a
/// lost coordinator never leaves a board held for a person nobody can reach.
async fn watchdog(lab: Arc<Lab>, shutdown: CancellationToken) {
    let mut tick = tokio::time::interval(Duration::from_millis(500));
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shutdown.cancelled() => return,
        }
        let overdue = lock(&lab.lost_since).is_some_and(|t| t.elapsed() >= lab.settings.hold);
        if overdue {
            let ended = lab.holds.release_where(&lab.state, |_, _| true);
            lab.report_released(
                ended,
                &format!(
                    "the coordinator was unreachable for {} s (labgrid.hold_secs)",
                    lab.settings.hold.as_secs()
                ),
            );
        }
    }
}

impl Lab {
    fn audit(&self, event: LabgridEvent<'_>) {
        self.state.audit.record(&LabgridRecord {
            exporter: &self.settings.name,
            event,
        });
    }

    /// Holds ended: each audited as a place's (`labgrid_hold_released`, when acquired or
    /// not reserved) and as a reservation's (`labgrid_reservation_ended`, when reserved).
    fn report_released(&self, ended: Vec<(String, holds::Hold)>, why: &str) {
        for (board, h) in ended {
            tracing::info!(board = %board, place = %h.place, why, "labgrid: board released");
            if h.reserved.is_none() || !h.resources.is_empty() {
                self.audit(LabgridEvent::HoldReleased {
                    board: &board,
                    place: &h.place,
                    user: h.user.as_deref(),
                    why,
                });
            }
            if let Some(r) = &h.reserved {
                let (token, owner) = reservations::labels(r);
                self.audit(LabgridEvent::ReservationEnded {
                    board: &board,
                    place: &h.place,
                    token: &token,
                    owner: &owner,
                    why,
                });
            }
        }
    }

    fn user_of(&self, place: &str) -> Option<String> {
        lock(&self.users).get(place).cloned()
    }

    /// A place update: who acquired it now (`None`: nobody, or the place is gone). A place
    /// acquired by someone `labgrid.people` does not name gives up the board it was
    /// holding (its set-acquired arrives before its acquirer is known): the acquisition
    /// is not honoured, and the operator's log and audit line say so, naming the acquirer.
    /// A hold a reservation still stands for stays either way (`reservations.rs` ends it
    /// with the reservation; the caller has brought the reservations up to date first).
    fn place_update(&self, place: &str, acquired: Option<&str>) {
        match acquired {
            // No board is ever held for such a place (`names::valid_place`).
            Some(_) if !names::valid_place(place) => {}
            Some(user) => {
                {
                    let mut users = lock(&self.users);
                    if users.len() < names::MAX_REMEMBERED_PLACES || users.contains_key(place) {
                        users.insert(place.to_string(), user.to_string());
                    } else {
                        // Not remembered: a later set-acquired for it may hold the board
                        // for `holds::UNNAMED_HOLD` at most.
                        tracing::warn!(
                            place,
                            "labgrid: too many acquired places to remember; this one's user is not kept"
                        );
                    }
                }
                if self.serves(user) {
                    self.holds.set_user(&self.state, place, user);
                } else {
                    let ended = self.holds.release_where(&self.state, |_, h| {
                        h.place == place && h.reserved.is_none()
                    });
                    self.report_not_served(ended, user);
                }
            }
            None => {
                lock(&self.users).remove(place);
                let ended = self
                    .holds
                    .release_where(&self.state, |_, h| h.place == place && h.reserved.is_none());
                self.report_released(ended, "the place is no longer acquired at the coordinator");
            }
        }
    }

    /// Holds given up because their place's acquirer is not a listed person.
    fn report_not_served(&self, ended: Vec<(String, holds::Hold)>, user: &str) {
        let user = names::user_label(user);
        for (board, h) in ended {
            let why = format!(
                "place {} was acquired by {user}, who is not named in labgrid.people: the acquisition takes no board",
                h.place
            );
            tracing::warn!(board = %board, place = %h.place, "labgrid: {why}");
            self.audit(LabgridEvent::HoldReleased {
                board: &board,
                place: &h.place,
                user: Some(&user),
                why: &why,
            });
        }
    }

    /// Holds whose acquirer the coordinator did not name in time (`holds::UNNAMED_HOLD`).
    fn release_unnamed(&self) {
        let ended = self.holds.release_unnamed(&self.state);
        self.report_released(
            ended,
            "the coordinator did not say who acquired the place within 5 s; a board is held only for a person named in labgrid.people",
        );
    }

    /// After the first place listing of a session: holds of places the coordinator does
    /// not list as acquired (it restarted, or they were released while gatecmd was away).
    /// Holds of places it lists reserved stay (`reservations_ended`, called first, has
    /// ended the reservations it no longer lists).
    fn release_unlisted(&self, seen: &HashMap<String, Option<String>>) {
        let ended = self.holds.release_where(&self.state, |_, h| {
            h.reserved.is_none() && seen.get(&h.place).is_none_or(|a| a.is_none())
        });
        self.report_released(ended, "the coordinator does not list the place as acquired");
    }

    /// Holds whose lease ended on gatecmd's side. A reservation's is not taken again (the
    /// operator's release stands until the reservation ends).
    fn forget_lost(&self) {
        let lost = self.holds.forget_lost(&self.state);
        for (_, h) in &lost {
            if let Some(r) = &h.reserved {
                self.reservations.drop_token(&r.token);
            }
        }
        self.report_released(
            lost,
            "its gatecmd lease ended (expired or released by an operator)",
        );
    }
}

#[cfg(test)]
mod tests {
    use super::check_lines;
    use gatecmd_domain::config::Config;

    fn lab(people: &str) -> gatecmd_domain::config::LabSettings {
        let yaml = format!("labgrid:\n  coordinator: 127.0.0.1:20408\n  name: bench-1\n{people}");
        Config::parse(&yaml, "t.yaml")
            .expect("valid")
            .labgrid
            .expect("on")
    }

    #[test]
    fn check_says_when_nobody_is_named_and_which_accounts_are_missing() {
        let none = check_lines(&lab(""));
        assert_eq!(none.len(), 1);
        assert!(
            none[0].contains("warning: labgrid.people is empty"),
            "{none:?}"
        );
        // `root` exists on every host; the other account name is made up.
        let some = check_lines(&lab(
            "  people:\n    - {name: alice, accounts: [root, no-such-account-gc37]}\n",
        ));
        assert!(
            some[0].contains("alice may hold boards")
                && some[0].contains("root, no-such-account-gc37")
        );
        let missing: Vec<&String> = some
            .iter()
            .filter(|l| l.contains("does not exist"))
            .collect();
        assert_eq!(missing.len(), 1, "{some:?}");
        assert!(missing[0].contains("no-such-account-gc37"), "{some:?}");
    }
}
