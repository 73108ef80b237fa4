//! A lease on a device or a lock key (`lock_device`): which key a device id or a key names,
//! the keys the lease holds shared with it, and the lease taken, queueing up to the wait.
//!
//! - `key: "port:1-2"` leases that board; when a board is attached there, its VID:PID
//!   (or group) key is held shared, so nobody takes the whole VID:PID meanwhile.
//! - `key: "board:NAME"` holds what a board's lease holds (`super::board`), so that both
//!   ways lease the same thing.
//! - `device: "1-2"` leases the board (`port:1-2`, as above) when its class is used by
//!   an isolated command (such commands lock per board); otherwise the device's VID:PID
//!   (or group) key, which covers every board of that VID:PID.
//! - `key: "usb:…"` / `"group:…"` as given.

use gatecmd_core::refusal::common::UnknownBoard;
use gatecmd_devices::{DeviceError, DeviceId};
use tokio_util::sync::CancellationToken;

use super::{Ask, request};
use crate::boards::lease_shared_keys;
use crate::locks::{LeaseInfo, LockError, LockKey, ParseLockKeyError, class_of, lock_key_of};
use crate::state::AppState;

/// What to lease: an attached device by id, or a lock key as written.
#[derive(Debug, Clone, Copy)]
pub enum Target<'a> {
    Device(&'a str),
    Key(&'a str),
}

/// Why no lease was taken (the surface words it).
#[derive(Debug)]
pub enum KeyError {
    BadKey(ParseLockKeyError),
    BadDevice(DeviceError),
    /// No device is attached at that id (a key leases one not plugged in yet).
    NotAttached(String),
    UnknownBoard(UnknownBoard),
    Cancelled,
    Lock(LockError),
}

/// A lease taken, with the keys it holds shared.
#[derive(Debug)]
pub struct KeyLease {
    pub info: LeaseInfo,
    pub shared: Vec<LockKey>,
}

/// Takes a lease on `target` for `ask`; `cancel` ends a wait (the waiter leaves the queue).
pub async fn lease_key(
    state: &AppState,
    ask: &Ask<'_>,
    target: Target<'_>,
    cancel: &CancellationToken,
) -> Result<KeyLease, KeyError> {
    let (key, shared) = resolve(state, target)?;
    let lease = request(key, shared.clone(), ask, ask.wait);
    tokio::select! {
        r = state.locks.lock(lease) => match r {
            Ok(info) => Ok(KeyLease { info, shared }),
            Err(e) => Err(KeyError::Lock(e)),
        },
        _ = cancel.cancelled() => Err(KeyError::Cancelled),
    }
}

/// The key `target` names and the keys its lease holds shared.
fn resolve(state: &AppState, target: Target<'_>) -> Result<(LockKey, Vec<LockKey>), KeyError> {
    let config = state.config();
    let board_shared = |id: &DeviceId| -> Vec<LockKey> {
        state
            .registry
            .get(id)
            .map(|dev| vec![lock_key_of(&config, &dev)])
            .unwrap_or_default()
    };
    match target {
        Target::Key(k) => {
            let key = k.parse::<LockKey>().map_err(KeyError::BadKey)?;
            let shared = match &key {
                LockKey::Port(id) => id
                    .parse::<DeviceId>()
                    .map(|id| board_shared(&id))
                    .unwrap_or_default(),
                LockKey::Board(name) => {
                    let Some(b) = config.board(name) else {
                        return Err(KeyError::UnknownBoard(UnknownBoard {
                            name: name.clone(),
                            known: config.board_names(),
                        }));
                    };
                    lease_shared_keys(&config, b, state.registry.get(&b.usb).as_ref())
                }
                _ => vec![],
            };
            Ok((key, shared))
        }
        Target::Device(d) => {
            let id: DeviceId = d.parse().map_err(KeyError::BadDevice)?;
            let Some(dev) = state.registry.get(&id) else {
                return Err(KeyError::NotAttached(d.to_string()));
            };
            let isolated =
                class_of(&config, &dev).is_some_and(|c| config.class_is_isolated(&c.name));
            if isolated {
                Ok((LockKey::Port(id.to_string()), board_shared(&id)))
            } else {
                Ok((lock_key_of(&config, &dev), vec![]))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use std::time::Duration;

    fn ask(client: &str, wait: Duration) -> Ask<'_> {
        Ask {
            client,
            session: None,
            ttl: None,
            note: Some(" "),
            wait,
        }
    }

    /// A key as written (a board's key holding what `lock_board`'s lease holds), a device
    /// not attached and a bad key refused, a busy key refused at once, and a wait ended by
    /// the cancel.
    #[tokio::test]
    async fn a_key_is_leased_as_written_and_a_wait_can_be_cancelled() {
        let config =
            Config::parse("boards:\n  - name: b1\n    usb: \"1-2\"\n", "t.yaml").expect("config");
        let state = AppState::new(config);
        let cancel = CancellationToken::new();
        let a = ask("a", Duration::ZERO);
        let got = lease_key(&state, &a, Target::Key("board:b1"), &cancel)
            .await
            .expect("leased");
        assert_eq!(got.info.key, LockKey::Board("b1".into()));
        assert_eq!(got.info.note, None, "a blank note is none");
        assert_eq!(got.shared, [LockKey::Port("1-2".into())]);
        assert!(matches!(
            lease_key(&state, &a, Target::Key("board:nope"), &cancel).await,
            Err(KeyError::UnknownBoard(u)) if u.known == ["b1"]
        ));
        assert!(matches!(
            lease_key(&state, &a, Target::Key("nonsense"), &cancel).await,
            Err(KeyError::BadKey(_))
        ));
        assert!(matches!(
            lease_key(&state, &a, Target::Device("1-9"), &cancel).await,
            Err(KeyError::NotAttached(d)) if d == "1-9"
        ));
        let b = ask("b", Duration::ZERO);
        assert!(matches!(
            lease_key(&state, &b, Target::Key("board:b1"), &cancel).await,
            Err(KeyError::Lock(_))
        ));
        let waiting = ask("b", Duration::from_secs(60));
        let stop = CancellationToken::new();
        let later = stop.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(100)).await;
            later.cancel();
        });
        assert!(matches!(
            lease_key(&state, &waiting, Target::Key("board:b1"), &stop).await,
            Err(KeyError::Cancelled)
        ));
    }
}
