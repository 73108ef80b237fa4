//! Agent leases mirrored as labgrid place acquisitions (docs/LAB.md "Agents seen by
//! labgrid"): while an MCP client holds a board, gatecmd acquires, as a labgrid client
//! named `EXPORTER/gatecmd:CLIENT`, every place whose matches can only resolve to that
//! board's resources here, so that `labgrid-client acquire` says who holds it and labgrid's
//! reservation scheduler (which only looks at places) allocates another place.
//!
//! The lock table stays the arbiter: a mirror follows a lease, never the other way. The
//! coordinator's set-acquired requests for a mirrored place are answered here (success,
//! no labgrid hold); its requests for any other place go to `holds.rs` as before, which
//! refuses them while the agent holds the board.

use super::error::LabError;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;
use std::time::Duration;

use tonic::codegen::http::uri::PathAndQuery;
use tonic::transport::Channel;

use super::holds::{HOLDER_PREFIX, Hold};
use super::proto::{
    ACQUIRE_PLACE, AcquirePlaceRequest, CLIENT_STREAM, ClientIn, ClientInMessage, ClientOutMessage,
    Empty, Place, RELEASE_PLACE, ReleasePlaceRequest, StartupDone, Sync as SyncMsg, open_stream,
};
use gatecmd_domain::locks::{LeaseId, LockKey};
use gatecmd_domain::state::AppState;

/// How long one mirror call (connect, client start-up, acquire or release) may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// The labgrid client name a mirror acquires under: `EXPORTER/gatecmd:CLIENT`
/// (`labgrid-client` prints it: "Place P is already acquired by bench-1/gatecmd:vm-a").
/// An agent of another host acting through a lab peer, `HOST/CLIENT`, is written
/// `HOST:CLIENT` there (`bench-1/gatecmd:bench-0:vm-a`): labgrid-client splits a holder's
/// name at its one `/` and fails on a second. Client names hold no `:`, so
/// [`agent_of_user`] reads it back.
pub fn mirror_user(exporter: &str, agent: &str) -> String {
    format!("{exporter}/gatecmd:{}", agent.replace('/', ":"))
}

/// The agent a mirror's labgrid user name (after `EXPORTER/gatecmd:`) stands for.
fn agent_of_user(written: &str) -> String {
    written.replace(':', "/")
}

/// One place acquired (or being acquired) for an agent's lease.
#[derive(Debug, Clone)]
struct Mirror {
    board: String,
    agent: String,
    lease: LeaseId,
    /// Resources the coordinator marked acquired for the place.
    resources: BTreeSet<String>,
    /// `None` while the acquire call runs; `Some(answered)` tells whether a set-acquired
    /// request was answered during it (a person's acquire may have raced it).
    pending: Option<bool>,
}

/// A mirror call to start, or one that ended.
pub enum Call {
    Acquire {
        place: String,
        board: String,
        agent: String,
    },
    Release {
        place: String,
        user: Option<String>,
        why: &'static str,
    },
}

/// What a finished call reports.
pub struct Outcome {
    pub call: Call,
    pub result: Result<(), LabError>,
}

pub type CallFuture = Pin<Box<dyn Future<Output = Outcome> + Send>>;

#[derive(Default)]
struct Inner {
    /// The coordinator's places, as its place updates last said.
    places: HashMap<String, Place>,
    mirrors: HashMap<String, Mirror>,
    /// Places whose release call runs.
    releasing: HashSet<String>,
    /// (place, lease) whose acquire failed: not retried for the same lease.
    failed: HashSet<(String, LeaseId)>,
    /// The session's first place listing arrived (nothing is planned before).
    listed: bool,
}

/// The mirror table of one exporter.
#[derive(Default)]
pub struct Mirrors {
    inner: Mutex<Inner>,
}

/// The MCP client whose lease holds `board` (not a labgrid place's), with the lease.
fn agent_of(state: &AppState, board: &str) -> Option<(String, LeaseId)> {
    let l = state
        .locks
        .key_state(&LockKey::Board(board.to_string()))?
        .lease?;
    (!l.holder.0.starts_with(HOLDER_PREFIX)).then_some((l.holder.0, l.lease_id))
}

fn literal(pattern: &str) -> bool {
    !pattern.contains(['*', '?', '['])
}

/// The board whose resources here are the only ones `place` can match: every match names
/// this exporter and one configured board literally (fnmatch patterns in the exporter or
/// group could match another exporter's resources, so such places are not mirrored, and
/// their reservations take no board: `reservations.rs`).
pub(super) fn board_of(state: &AppState, exporter: &str, place: &Place) -> Option<String> {
    let first = place.matches.first()?;
    let board = first.group.clone();
    let only_here = place
        .matches
        .iter()
        .all(|m| m.exporter == exporter && m.group == board && literal(&m.group));
    (only_here && state.config().board(&board).is_some()).then_some(board)
}

impl Mirrors {
    fn with<R>(&self, f: impl FnOnce(&mut Inner) -> R) -> R {
        let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut g)
    }

    /// A new session: the coordinator is asked afresh (its first listing says which
    /// mirrors survived).
    pub fn new_session(&self) {
        self.with(|i| *i = Inner::default());
    }

    pub fn set_place(&self, place: Place) {
        self.with(|i| i.places.insert(place.name.clone(), place));
    }

    pub fn del_place(&self, name: &str) {
        self.with(|i| {
            i.places.remove(name);
            i.mirrors.remove(name);
        });
    }

    pub fn listed(&self) {
        self.with(|i| i.listed = true);
    }

    /// Mirrored boards as holds, for the published resources' `acquired`.
    pub fn as_holds(&self) -> HashMap<String, Hold> {
        self.with(|i| {
            let mut out: HashMap<String, Hold> = HashMap::new();
            for (place, m) in &i.mirrors {
                if m.resources.is_empty() {
                    continue;
                }
                out.insert(
                    m.board.clone(),
                    Hold {
                        place: place.clone(),
                        lease: m.lease.clone(),
                        resources: m.resources.clone(),
                        user: None,
                        reserved: None,
                        // Shown only (resources.rs); never in the holds table.
                        since: std::time::Instant::now(),
                    },
                );
            }
            out
        })
    }

    /// The calls that bring the coordinator in line with the lock table: acquire places
    /// of boards agents hold, release mirrors of boards no longer held by their agent
    /// (also those found acquired under gatecmd's name after a reconnect or a restart).
    pub fn plan(&self, state: &AppState, exporter: &str) -> Vec<Call> {
        let prefix = format!("{exporter}/gatecmd:");
        self.with(|i| {
            if !i.listed {
                return Vec::new();
            }
            let mut calls = Vec::new();
            let ended: Vec<String> = i
                .mirrors
                .iter()
                .filter(|(_, m)| {
                    m.pending.is_none()
                        && agent_of(state, &m.board).is_none_or(|(a, _)| a != m.agent)
                })
                .map(|(p, _)| p.clone())
                .collect();
            for place in ended {
                if let Some(m) = i.mirrors.remove(&place) {
                    i.releasing.insert(place.clone());
                    calls.push(Call::Release {
                        place,
                        user: Some(mirror_user(exporter, &m.agent)),
                        why: "the agent's lease ended",
                    });
                }
            }
            for (name, p) in &i.places {
                if i.mirrors.contains_key(name) || i.releasing.contains(name) {
                    continue;
                }
                let board = board_of(state, exporter, p);
                let held = board.as_ref().and_then(|b| agent_of(state, b));
                match (&p.acquired, board, held) {
                    // Acquired under gatecmd's name, not mirrored in this session.
                    (Some(user), board, held) if user.starts_with(&prefix) => {
                        let agent = agent_of_user(&user[prefix.len()..]);
                        match (board, held) {
                            (Some(board), Some((a, lease))) if a == agent => {
                                i.mirrors.insert(
                                    name.clone(),
                                    Mirror {
                                        board,
                                        agent: a,
                                        lease,
                                        resources: BTreeSet::new(),
                                        pending: None,
                                    },
                                );
                            }
                            _ => {
                                i.releasing.insert(name.clone());
                                calls.push(Call::Release {
                                    place: name.clone(),
                                    user: Some(user.clone()),
                                    why: "no agent holds the board any more",
                                });
                            }
                        }
                    }
                    (None, Some(board), Some((agent, lease)))
                        if !i.failed.contains(&(name.clone(), lease.clone())) =>
                    {
                        i.mirrors.insert(
                            name.clone(),
                            Mirror {
                                board: board.clone(),
                                agent: agent.clone(),
                                lease,
                                resources: BTreeSet::new(),
                                pending: Some(false),
                            },
                        );
                        calls.push(Call::Acquire {
                            place: name.clone(),
                            board,
                            agent,
                        });
                    }
                    _ => {}
                }
            }
            calls
        })
    }

    /// The answer to a set-acquired request when it concerns a mirror: acquire for a
    /// mirrored place of `board` whose agent still holds it, or release of a resource a
    /// mirror has. `None`: not a mirror's business.
    pub fn set_acquired(
        &self,
        state: &AppState,
        board: &str,
        resource: &str,
        place: Option<&str>,
    ) -> Option<()> {
        self.with(|i| match place {
            Some(place) => {
                let m = i.mirrors.get_mut(place)?;
                let holds = agent_of(state, board).is_some_and(|(a, _)| a == m.agent);
                if m.board != board || !holds {
                    return None;
                }
                m.resources.insert(resource.to_string());
                if let Some(answered) = m.pending.as_mut() {
                    *answered = true;
                }
                Some(())
            }
            None => {
                let m = i
                    .mirrors
                    .values_mut()
                    .find(|m| m.board == board && m.resources.contains(resource))?;
                m.resources.remove(resource);
                Some(())
            }
        })
    }

    /// Records a finished call; returns a release to make when a failed mirror acquire
    /// had answered a set-acquired request (someone else's acquire took that answer).
    pub fn finished(&self, out: &Outcome) -> Option<Call> {
        self.with(|i| match &out.call {
            Call::Acquire { place, .. } => {
                let answered = match i.mirrors.get_mut(place) {
                    Some(m) if out.result.is_ok() => {
                        m.pending = None;
                        return None;
                    }
                    Some(_) => i.mirrors.remove(place).and_then(|m| {
                        if m.pending != Some(true) {
                            i.failed.insert((place.clone(), m.lease.clone()));
                        }
                        m.pending
                    }),
                    None => None,
                };
                (answered == Some(true)).then(|| {
                    i.releasing.insert(place.clone());
                    Call::Release {
                        place: place.clone(),
                        user: None,
                        why: "an acquire by someone else took the agent's board while the mirror was being acquired",
                    }
                })
            }
            Call::Release { place, user, .. } => {
                i.releasing.remove(place);
                // The place update may come after the answer: not released twice meanwhile.
                if let Some(p) = i.places.get_mut(place)
                    && out.result.is_ok()
                    && (user.is_none() || p.acquired == *user)
                {
                    p.acquired = None;
                }
                None
            }
        })
    }
}

async fn timed<T>(what: &str, f: impl Future<Output = Result<T, LabError>>) -> Result<T, LabError> {
    tokio::time::timeout(CALL_TIMEOUT, f)
        .await
        .unwrap_or_else(|_| {
            Err(LabError::NoAnswer {
                what: what.to_string(),
                secs: CALL_TIMEOUT.as_secs(),
            })
        })
}

/// Starts `call`: an acquire on a connection of its own whose client stream announces the
/// mirror's name (the coordinator takes the acquirer's name from the stream of the same
/// peer), a release on the session's connection.
pub fn start(call: Call, coordinator: String, exporter: String, channel: Channel) -> CallFuture {
    Box::pin(async move {
        let result = match &call {
            Call::Acquire { place, agent, .. } => {
                let user = mirror_user(&exporter, agent);
                timed("acquire", acquire(&coordinator, place, &user)).await
            }
            Call::Release { place, user, .. } => {
                let req = ReleasePlaceRequest {
                    placename: place.clone(),
                    fromuser: user.clone(),
                };
                timed("release", unary::<_, Empty>(channel, RELEASE_PLACE, req))
                    .await
                    .map(|_| ())
            }
        };
        Outcome { call, result }
    })
}

/// One unary call of the coordinator's (`path`), its answer decoded as `R`.
pub(super) async fn unary<M, R>(channel: Channel, path: &'static str, req: M) -> Result<R, LabError>
where
    M: prost::Message + Send + Sync + 'static,
    R: prost::Message + Default + Send + 'static,
{
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.map_err(LabError::Coordinator)?;
    let codec = tonic_prost::ProstCodec::<M, R>::default();
    grpc.unary(
        tonic::Request::new(req),
        PathAndQuery::from_static(path),
        codec,
    )
    .await
    .map(tonic::Response::into_inner)
    .map_err(|e| LabError::Call(e.message().to_string()))
}

async fn acquire(coordinator: &str, place: &str, user: &str) -> Result<(), LabError> {
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{coordinator}"))
        .map_err(LabError::BadAddress)?
        .connect_timeout(CALL_TIMEOUT)
        .connect()
        .await
        .map_err(|error| LabError::Connect {
            to: coordinator.to_string(),
            error,
        })?;
    let (tx, rx) = tokio::sync::mpsc::channel::<ClientInMessage>(4);
    for m in [
        ClientIn::Startup(StartupDone {
            version: format!("gatecmd {}", env!("CARGO_PKG_VERSION")),
            name: user.to_string(),
        }),
        ClientIn::Sync(SyncMsg { id: 1 }),
    ] {
        let _ = tx.try_send(ClientInMessage { kind: Some(m) });
    }
    let mut stream =
        open_stream::<_, ClientOutMessage>(&channel, rx, CLIENT_STREAM, "client").await?;
    // The sync's echo comes after the start-up is handled: the name is known from then on.
    loop {
        match stream.message().await {
            Ok(Some(m)) if m.sync.as_ref().is_some_and(|s| s.id == 1) => break,
            Ok(Some(_)) => {}
            Ok(None) => return Err(LabError::ClientStreamEnded),
            Err(e) => {
                return Err(LabError::Stream {
                    which: "client",
                    message: e.message().to_string(),
                });
            }
        }
    }
    let result = unary::<_, Empty>(
        channel,
        ACQUIRE_PLACE,
        AcquirePlaceRequest {
            placename: place.to_string(),
        },
    )
    .await
    .map(|_| ());
    drop(tx);
    result
}
