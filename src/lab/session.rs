//! One connection to the coordinator: the exporter stream (register every board's
//! resources, answer set-acquired requests, publish changes) and a client stream beside it
//! (place updates: who acquired a place, and places no longer acquired; and every
//! exporter's resources and places for the lab's directory). Returns when
//! either stream ends; `mod.rs` reconnects.

use super::error::LabError;
use std::collections::HashMap;
use std::time::Duration;

use tokio::sync::mpsc;

use super::proto::{
    CLIENT_STREAM, ClientIn, ClientInMessage, ClientOutMessage, EXPORTER_STREAM, ExporterIn,
    ExporterInMessage, ExporterOut, ExporterOutMessage, ExporterResponse, Resource, SetAcquired,
    StartupDone, Subscribe, SubscribeKind, Sync, Update, open_stream,
};
use super::{Lab, directory_feed, mirror, reservations};
use gatecmd_domain::audit::{LabgridEvent, PlaceChange};

/// How long to wait for the coordinator's TCP and HTTP/2 handshake.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// HTTP/2 pings on an idle connection, so a coordinator host that vanished without
/// closing the connection is noticed within interval + timeout.
const KEEPALIVE: Duration = Duration::from_secs(10);
const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(5);
/// Outbound messages queued per stream; a coordinator that reads nothing stops the session.
const QUEUE: usize = 1024;
/// How often the published state is compared with the lock table even when no event
/// came (an expiry, a console that opened), and held leases renewed.
const TICK: Duration = Duration::from_secs(1);
/// The Sync id that marks the end of the first place listing.
const FIRST_SYNC: u64 = 1;

/// What a session tells its caller when it ends.
pub struct Ended {
    /// Whether the exporter stream was registered (the coordinator said hello).
    pub registered: bool,
    pub why: String,
}

/// Runs one session until a stream ends; `on_registered` is called once the exporter
/// stream is up and every resource is sent.
pub async fn run(lab: &Lab, on_registered: impl FnOnce()) -> Ended {
    let mut registered = false;
    let why = match session(lab, &mut registered, on_registered).await {
        Ok(()) => "the coordinator ended the stream".to_string(),
        Err(e) => e.to_string(),
    };
    Ended { registered, why }
}

async fn session(
    lab: &Lab,
    registered: &mut bool,
    on_registered: impl FnOnce(),
) -> Result<(), LabError> {
    let channel = connect(lab).await?;
    let version = format!("gatecmd {}", env!("CARGO_PKG_VERSION"));

    // The exporter stream: startup first, as labgrid's exporter does.
    let (ex_tx, ex_rx) = mpsc::channel::<ExporterInMessage>(QUEUE);
    send(
        &ex_tx,
        ExporterIn::Startup(StartupDone {
            version: version.clone(),
            name: lab.settings.name.clone(),
        }),
    )?;
    let mut exporter =
        open_stream::<_, ExporterOutMessage>(&channel, ex_rx, EXPORTER_STREAM, "exporter").await?;

    // The client stream, for place updates.
    let (cl_tx, cl_rx) = mpsc::channel::<ClientInMessage>(QUEUE);
    let client_msg = |k| ClientInMessage { kind: Some(k) };
    for m in [
        ClientIn::Startup(StartupDone {
            version,
            name: format!("{}/gatecmd", lab.settings.name),
        }),
        ClientIn::Subscribe(Subscribe {
            is_unsubscribe: None,
            kind: Some(SubscribeKind::AllPlaces(true)),
        }),
        // Every exporter's resources: the lab's directory (`directory_feed`).
        ClientIn::Subscribe(Subscribe {
            is_unsubscribe: None,
            kind: Some(SubscribeKind::AllResources(true)),
        }),
        ClientIn::Sync(Sync { id: FIRST_SYNC }),
    ] {
        cl_tx
            .try_send(client_msg(m))
            .map_err(|_| LabError::ClientQueueFull)?;
    }
    let mut places =
        open_stream::<_, ClientOutMessage>(&channel, cl_rx, CLIENT_STREAM, "client").await?;
    lab.state.lab.directory.listing(&lab.settings.coordinator);

    let mut published: HashMap<(String, String), Resource> = HashMap::new();
    lab.mirrors.new_session();
    publish(lab, &ex_tx, &mut published)?;
    // Mirror calls (mirror.rs) run beside the loop: an acquire waits for the coordinator,
    // which waits for this loop's answers on the exporter stream.
    let mut calls = futures::stream::FuturesUnordered::<mirror::CallFuture>::new();
    // Reservation owner lookups (reservations.rs), beside the loop for the same reason.
    let mut lookups = futures::stream::FuturesUnordered::<reservations::LookupFuture>::new();
    let mut on_registered = Some(on_registered);
    // Places seen acquired in the first listing; holds of any other place are stale.
    let mut first_listing: Option<HashMap<String, Option<String>>> = Some(HashMap::new());
    let mut locks = lab.state.locks.subscribe();
    let mut devices = lab.state.registry.subscribe();
    let mut tick = tokio::time::interval(TICK);
    let mut ticks: u64 = 0;
    loop {
        for c in lab.mirrors.plan(&lab.state, &lab.settings.name) {
            calls.push(lab.start_call(c, &channel));
        }
        lookups.extend(lab.reservations.lookup(&channel));
        tokio::select! {
            msg = exporter.message() => {
                let msg = msg.map_err(|e| LabError::Stream { which: "exporter", message: e.message().to_string() })?;
                let Some(msg) = msg else { return Ok(()) };
                match msg.kind {
                    Some(ExporterOut::Hello(h)) => {
                        *registered = true;
                        lab.audit(LabgridEvent::Registered { coordinator_version: &h.version });
                        if let Some(f) = on_registered.take() { f(); }
                    }
                    Some(ExporterOut::SetAcquired(req)) => {
                        let answer = lab.set_acquired(&req).await;
                        // The resource's new state goes out before the answer, as labgrid's
                        // exporter does: the coordinator checks it when the answer arrives.
                        publish(lab, &ex_tx, &mut published)?;
                        send(&ex_tx, ExporterIn::Response(answer))?;
                    }
                    None => {}
                }
            }
            msg = places.message() => {
                let msg = msg.map_err(|e| LabError::Stream { which: "client", message: e.message().to_string() })?;
                let Some(msg) = msg else { return Ok(()) };
                directory_feed::feed(&lab.state.lab.directory, &msg);
                if msg.sync.as_ref().is_some_and(|s| s.id == FIRST_SYNC) {
                    lab.state.lab.directory.listed();
                }
                place_updates(lab, msg, &mut first_listing);
                publish(lab, &ex_tx, &mut published)?;
            }
            Some(out) = futures::StreamExt::next(&mut calls), if !calls.is_empty() => {
                lab.report_call(&out);
                if let Some(c) = lab.mirrors.finished(&out) {
                    calls.push(lab.start_call(c, &channel));
                }
                publish(lab, &ex_tx, &mut published)?;
            }
            Some(found) = futures::StreamExt::next(&mut lookups), if !lookups.is_empty() => {
                lab.reservations_found(found).await;
                publish(lab, &ex_tx, &mut published)?;
            }
            ev = locks.recv() => {
                if let Err(gatecmd_core::events::RecvError::Closed) = ev {
                    return Err(LabError::Stopped("lock manager"));
                }
                publish(lab, &ex_tx, &mut published)?;
            }
            ev = devices.recv() => {
                if let Err(gatecmd_core::events::RecvError::Closed) = ev {
                    return Err(LabError::Stopped("device registry"));
                }
                publish(lab, &ex_tx, &mut published)?;
            }
            _ = tick.tick() => {
                ticks += 1;
                lab.forget_lost();
                lab.release_unnamed();
                lab.reservations_apply().await;
                // Leases live max_ttl: renewed three times per max_ttl (at most every minute).
                let every = (lab.state.locks.settings().max_ttl.as_secs() / 3).clamp(1, 60);
                if ticks.is_multiple_of(every) { lab.holds.renew_all(&lab.state); }
                publish(lab, &ex_tx, &mut published)?;
            }
        }
    }
}

/// A new connection to the coordinator.
async fn connect(lab: &Lab) -> Result<tonic::transport::Channel, LabError> {
    let uri = format!("http://{}", lab.settings.coordinator);
    // A new connection each time: the coordinator keys sessions by peer address, and
    // refuses a second exporter stream from a peer it still knows.
    tonic::transport::Endpoint::from_shared(uri)
        .map_err(LabError::BadAddress)?
        .connect_timeout(CONNECT_TIMEOUT)
        .http2_keep_alive_interval(KEEPALIVE)
        .keep_alive_timeout(KEEPALIVE_TIMEOUT)
        .keep_alive_while_idle(true)
        .connect()
        .await
        .map_err(|error| LabError::Connect {
            to: lab.settings.coordinator.clone(),
            error,
        })
}

/// The places the coordinator lists or updates, mirrored; their reservations noted (a
/// reservation gone ends its hold before the acquisition is looked at, so that a release
/// of a still-reserved place keeps the board); at the end of the first listing, holds of
/// places it did not list as acquired or reserved are released.
fn place_updates(
    lab: &Lab,
    msg: ClientOutMessage,
    first_listing: &mut Option<HashMap<String, Option<String>>>,
) {
    for u in msg.updates {
        match u.kind {
            Some(Update::Place(mut p)) => {
                // labgrid 26 sends a free place's `acquired` as "" (set, empty).
                p.acquired = p.acquired.filter(|a| !a.is_empty());
                if let Some(seen) = first_listing.as_mut() {
                    seen.insert(p.name.clone(), p.acquired.clone());
                }
                lab.reservations
                    .set_place(&lab.state, &lab.settings.name, &p);
                lab.reservations_ended(Some(&p.name));
                lab.place_update(&p.name, p.acquired.as_deref());
                lab.mirrors.set_place(p);
            }
            Some(Update::DelPlace(name)) => {
                lab.reservations.del_place(&name);
                lab.reservations_ended(Some(&name));
                lab.place_update(&name, None);
                lab.mirrors.del_place(&name);
            }
            _ => {}
        }
    }
    if msg.sync.is_some_and(|s| s.id == FIRST_SYNC)
        && let Some(seen) = first_listing.take()
    {
        lab.reservations.listed(|p| seen.contains_key(p));
        lab.reservations_ended(None);
        lab.release_unlisted(&seen);
        lab.mirrors.listed();
    }
}

fn send(tx: &mpsc::Sender<ExporterInMessage>, kind: ExporterIn) -> Result<(), LabError> {
    tx.try_send(ExporterInMessage { kind: Some(kind) })
        .map_err(|_| LabError::ExporterQueueFull)
}

/// Sends every resource whose state differs from what the coordinator last heard.
fn publish(
    lab: &Lab,
    tx: &mpsc::Sender<ExporterInMessage>,
    published: &mut HashMap<(String, String), Resource>,
) -> Result<(), LabError> {
    let mut acquired = lab.holds.snapshot();
    // A board is held by a place or by an agent, never both: no key collides.
    acquired.extend(lab.mirrors.as_holds());
    let now = super::resources::all(&lab.state, &lab.settings, &lab.ports, &acquired);
    for (key, r) in now {
        if published.get(&key) != Some(&r) {
            send(tx, ExporterIn::Resource(r.clone()))?;
            published.insert(key, r);
        }
    }
    Ok(())
}

impl Lab {
    /// The answer to one set-acquired request (acquire with a place, release without).
    async fn set_acquired(&self, req: &SetAcquired) -> ExporterResponse {
        let board = req.group_name.as_str();
        let resource = req.resource_name.as_str();
        let known = self
            .state
            .config()
            .board(board)
            .is_some_and(|b| super::resources::names(b).contains(&resource));
        let result = if !known {
            Err(format!(
                "gatecmd: no resource {board}/{resource} on exporter {}",
                self.settings.name
            ))
        } else if let Some(()) =
            self.mirrors
                .set_acquired(&self.state, board, resource, req.place_name.as_deref())
        {
            // The place is an agent's lease mirrored (mirror.rs): no labgrid hold.
            Ok(())
        } else {
            match &req.place_name {
                Some(place) => {
                    let user = self.user_of(place);
                    // Only a listed person's place takes a board. The acquirer is usually
                    // not known yet (the coordinator names them once this answer is in):
                    // the hold is then taken, and given up when the name comes and is not
                    // a listed person's (`Lab::place_update`).
                    let served = !self.settings.people.is_empty()
                        && user.as_deref().is_none_or(|u| self.serves(u));
                    if served {
                        self.holds
                            .acquire(&self.state, board, resource, place, user)
                            .await
                            .map(|_| ())
                            .map_err(|e| e.to_string())
                    } else {
                        Err(super::holds::HoldError::NotServed(place.clone()).to_string())
                    }
                }
                None => self
                    .holds
                    .release(&self.state, board, resource, None)
                    .map(|ended| {
                        // Whoever acquires the place next is not known until the
                        // coordinator says so; the last acquirer's name must not stand in.
                        if let Some(h) = ended {
                            super::lock(&self.users).remove(&h.place);
                        }
                    })
                    .map_err(|e| e.to_string()),
            }
        };
        let change = PlaceChange {
            place: req.place_name.as_deref(),
            board,
            resource,
            ok: result.is_ok(),
            reason: result.as_ref().err().map(String::as_str),
            user: req
                .place_name
                .as_deref()
                .and_then(|p| self.user_of(p))
                .map(|u| super::names::user_label(&u)),
        };
        self.audit(if req.place_name.is_some() {
            LabgridEvent::Acquire(change)
        } else {
            LabgridEvent::Release(change)
        });
        match result {
            Ok(()) => ExporterResponse {
                success: true,
                reason: None,
            },
            Err(reason) => ExporterResponse {
                success: false,
                reason: Some(reason),
            },
        }
    }
}

impl Lab {
    fn start_call(
        &self,
        call: mirror::Call,
        channel: &tonic::transport::Channel,
    ) -> mirror::CallFuture {
        mirror::start(
            call,
            self.settings.coordinator.clone(),
            self.settings.name.clone(),
            channel.clone(),
        )
    }

    /// Every mirror acquire and release is audited and logged.
    fn report_call(&self, out: &mirror::Outcome) {
        let reason = out.result.as_ref().err().map(|e| e.to_string());
        match &out.call {
            mirror::Call::Acquire {
                place,
                board,
                agent,
            } => {
                let user = mirror::mirror_user(&self.settings.name, agent);
                if let Some(why) = &reason {
                    tracing::warn!(place = %place, board = %board, agent = %agent, why = %why, "labgrid: cannot mirror the agent's lease as a place acquisition (the lease stands)");
                } else {
                    tracing::info!(place = %place, board = %board, as_user = %user, "labgrid: place acquired for the agent's lease");
                }
                self.audit(LabgridEvent::MirrorAcquire {
                    place,
                    board,
                    agent,
                    as_user: &user,
                    ok: reason.is_none(),
                    reason: reason.as_deref(),
                });
            }
            mirror::Call::Release { place, user, why } => {
                tracing::info!(place = %place, why = %why, ok = reason.is_none(), "labgrid: mirrored place released");
                self.audit(LabgridEvent::MirrorRelease {
                    place,
                    as_user: user.as_deref(),
                    why,
                    ok: reason.is_none(),
                    reason: reason.as_deref(),
                });
            }
        }
    }
}
