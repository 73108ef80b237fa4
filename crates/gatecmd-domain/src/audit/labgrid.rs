//! The audit lines of the labgrid exporter (docs/LAB.md, docs/AUDIT.md): its coordinator
//! session, the places' holds on boards, the mirrored agent leases, and the console and
//! power ports. Each names the exporter; places, users and peers arrive as text.

use serde::Serialize;

/// One labgrid line: the exporter's name and what happened.
#[derive(Debug, Serialize)]
pub struct LabgridRecord<'a> {
    pub exporter: &'a str,
    #[serde(flatten)]
    pub event: LabgridEvent<'a>,
}

/// What happened, serialised as its `event` and fields.
#[derive(Debug, Serialize)]
#[serde(tag = "event")]
pub enum LabgridEvent<'a> {
    /// Registered with the coordinator.
    #[serde(rename = "labgrid_registered")]
    Registered { coordinator_version: &'a str },
    /// The coordinator session ended after it had registered.
    #[serde(rename = "labgrid_lost")]
    Lost {
        coordinator: &'a str,
        why: &'a str,
        held_boards: usize,
    },
    /// The coordinator asked to mark a board's resource acquired for a place.
    #[serde(rename = "labgrid_acquire")]
    Acquire(PlaceChange<'a>),
    /// The coordinator asked to release it.
    #[serde(rename = "labgrid_release")]
    Release(PlaceChange<'a>),
    /// An agent's lease mirrored as a place acquisition.
    #[serde(rename = "labgrid_mirror_acquire")]
    MirrorAcquire {
        place: &'a str,
        board: &'a str,
        agent: &'a str,
        #[serde(rename = "as")]
        as_user: &'a str,
        ok: bool,
        reason: Option<&'a str>,
    },
    /// A mirrored place released.
    #[serde(rename = "labgrid_mirror_release")]
    MirrorRelease {
        place: &'a str,
        #[serde(rename = "as")]
        as_user: Option<&'a str>,
        why: &'a str,
        ok: bool,
        reason: Option<&'a str>,
    },
    /// gatecmd ended a place's hold itself.
    #[serde(rename = "labgrid_hold_released")]
    HoldReleased {
        board: &'a str,
        place: &'a str,
        user: Option<&'a str>,
        why: &'a str,
    },
    /// A person's labgrid reservation allocated to a place took the place's board
    /// (holder `labgrid:<place>`) before the person acquired it.
    #[serde(rename = "labgrid_reservation_hold")]
    ReservationHold {
        board: &'a str,
        place: &'a str,
        token: &'a str,
        owner: &'a str,
    },
    /// A reservation allocated to a place of this exporter took no board: its owner is not
    /// named in `labgrid.people`, or the board is held (`retrying`: taken once it frees).
    #[serde(rename = "labgrid_reservation_refused")]
    ReservationRefused {
        board: &'a str,
        place: &'a str,
        token: &'a str,
        owner: &'a str,
        why: &'a str,
        retrying: bool,
    },
    /// A reservation's hold ended (the reservation cancelled or expired, the place no longer
    /// listed, the coordinator gone for `hold_secs`, the lease ended on gatecmd's side).
    #[serde(rename = "labgrid_reservation_ended")]
    ReservationEnded {
        board: &'a str,
        place: &'a str,
        token: &'a str,
        owner: &'a str,
        why: &'a str,
    },
    /// A connection to a board's console port ended.
    #[serde(rename = "labgrid_console")]
    Console {
        board: &'a str,
        peer: String,
        user: &'a str,
        place: &'a str,
        bytes_written: u64,
        closed: &'a str,
    },
    /// A connection to a console port was refused at admission.
    #[serde(rename = "labgrid_console_refused")]
    ConsoleRefused {
        board: &'a str,
        peer: String,
        reason: &'a str,
    },
    /// A power switch through labgrid's `rest` model.
    #[serde(rename = "labgrid_power")]
    Power {
        board: &'a str,
        on: bool,
        place: &'a str,
        user: &'a str,
        ok: bool,
        reason: Option<String>,
    },
    /// A power request refused at admission.
    #[serde(rename = "labgrid_power_refused")]
    PowerRefused {
        board: &'a str,
        peer: String,
        reason: &'a str,
    },
}

/// A place's resource marked acquired or released at the coordinator's request.
#[derive(Debug, Serialize)]
pub struct PlaceChange<'a> {
    pub place: Option<&'a str>,
    pub board: &'a str,
    pub resource: &'a str,
    pub ok: bool,
    pub reason: Option<&'a str>,
    /// The place's acquirer, when known.
    pub user: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn labgrid_lines_keep_their_shape() {
        let v = |event| {
            serde_json::to_value(LabgridRecord {
                exporter: "bench",
                event,
            })
            .unwrap()
        };
        assert_eq!(
            v(LabgridEvent::Acquire(PlaceChange {
                place: Some("p"),
                board: "b1",
                resource: "r",
                ok: false,
                reason: Some("no"),
                user: None,
            })),
            json!({"event": "labgrid_acquire", "exporter": "bench", "place": "p", "board": "b1",
                "resource": "r", "ok": false, "reason": "no", "user": null})
        );
        assert_eq!(
            v(LabgridEvent::MirrorRelease {
                place: "p",
                as_user: Some("h/u"),
                why: "w",
                ok: true,
                reason: None,
            }),
            json!({"event": "labgrid_mirror_release", "exporter": "bench", "place": "p",
                "as": "h/u", "why": "w", "ok": true, "reason": null})
        );
        assert_eq!(
            v(LabgridEvent::ReservationRefused {
                board: "b1",
                place: "p1",
                token: "T1",
                owner: "desk/bob",
                why: "w",
                retrying: false,
            }),
            json!({"event": "labgrid_reservation_refused", "exporter": "bench", "board": "b1",
                "place": "p1", "token": "T1", "owner": "desk/bob", "why": "w", "retrying": false})
        );
        assert_eq!(
            v(LabgridEvent::Registered {
                coordinator_version: "24.0"
            }),
            json!({"event": "labgrid_registered", "exporter": "bench",
                "coordinator_version": "24.0"})
        );
    }
}
