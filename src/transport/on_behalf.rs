//! A peer acting for its host's agent (docs/LAB.md, "One lab for agents"): a request whose
//! token is a `peer: true` client's may carry `Gatecmd-On-Behalf-Of: CLIENT`, the agent's
//! name on the peer's host; it then acts as `HOST/CLIENT` (the peer's configured client
//! name is the `HOST`), and that is the name every lease, audit line, page row and labgrid
//! `held_by` records. Any other client's token with the header is refused (403): a normal
//! client's token never acts as a peer.
//!
//! Every per-client limit here (command slots, lock waiters, staging quotas, jobs) counts
//! per acting name, so a peer that invented names would multiply them. A peer acts for at
//! most [`MAX_AGENTS_PER_PEER`] distinct agents: a name counts from its first request until
//! [`AGENT_IDLE`] after its last (far longer than a lease or job it could still hold with
//! the default `leases.max_ttl_secs` and `limits.max_timeout_secs`, an hour), and a new name
//! beyond the bound is refused (403) naming the bound. A real host acts for its own
//! configured clients, far fewer.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use axum::http::HeaderValue;

use crate::transport::auth::{AuthError, Credentials};
use gatecmd_core::identity::ClientIdentity;

/// The header a peer names its agent in.
pub const ON_BEHALF_OF: &str = "gatecmd-on-behalf-of";

/// The identity a request acts as: the authenticated client's, or `HOST/CLIENT` for a peer
/// acting for its agent (with the peer's command list, never admin).
pub fn acting_identity(
    creds: &Credentials,
    id: ClientIdentity,
    header: Option<&HeaderValue>,
) -> Result<ClientIdentity, AuthError> {
    let Some(value) = header else {
        return Ok(id);
    };
    if !creds.is_peer(&id.name) {
        return Err(AuthError::NotPeer(id.name));
    }
    let agent = value.to_str().map_err(|_| AuthError::OnBehalf)?;
    if !is_client_name(agent) {
        return Err(AuthError::OnBehalf);
    }
    admit_agent(&id.name, agent, Instant::now())?;
    Ok(ClientIdentity {
        name: format!("{}/{agent}", id.name),
        commands: id.commands,
        admin: false,
    })
}

/// Most distinct agents one peer acts for (within [`AGENT_IDLE`] of each one's last request).
pub const MAX_AGENTS_PER_PEER: usize = 256;
/// How long an agent's name counts against its peer after its last request.
pub const AGENT_IDLE: Duration = Duration::from_secs(25 * 3600);

/// Each peer's agents and when each last acted.
fn agents() -> &'static Mutex<HashMap<String, HashMap<String, Instant>>> {
    static AGENTS: OnceLock<Mutex<HashMap<String, HashMap<String, Instant>>>> = OnceLock::new();
    AGENTS.get_or_init(Default::default)
}

/// Notes that `peer` acts for `agent` at `now`; refused when that would be one agent more
/// than [`MAX_AGENTS_PER_PEER`] in use.
fn admit_agent(peer: &str, agent: &str, now: Instant) -> Result<(), AuthError> {
    let mut all = match agents().lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    };
    let known = all.entry(peer.to_string()).or_default();
    if !known.contains_key(agent) && known.len() >= MAX_AGENTS_PER_PEER {
        known.retain(|_, last| now.saturating_duration_since(*last) < AGENT_IDLE);
        if known.len() >= MAX_AGENTS_PER_PEER {
            return Err(AuthError::TooManyAgents {
                peer: peer.to_string(),
                max: MAX_AGENTS_PER_PEER,
            });
        }
    }
    known.insert(agent.to_string(), now);
    Ok(())
}

/// A client name as `clients[].name` allows: 1-64 of `[A-Za-z0-9_.-]` (so never `/`: a
/// peer cannot pass on what another peer asked).
fn is_client_name(s: &str) -> bool {
    (1..=64).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use gatecmd_domain::config::{ClientConfig, TokenSource};

    fn creds() -> Credentials {
        let c = |name: &str, t: &str, peer| ClientConfig {
            name: name.into(),
            token: TokenSource::Inline(t.into()),
            commands: None,
            admin: true,
            peer,
        };
        Credentials::load(&[c("vm-a", "alpha", false), c("bench-1", "peer", true)]).expect("load")
    }

    #[test]
    fn only_a_peer_acts_for_an_agent() {
        let c = creds();
        let peer = c.authenticate(Some(b"Bearer peer")).expect("peer");
        let v = HeaderValue::from_static("vm-b");
        let acting = acting_identity(&c, peer.clone(), Some(&v)).expect("peer may");
        assert_eq!(acting.name, "bench-1/vm-b");
        assert!(
            !acting.admin,
            "an agent acting through a peer is never admin"
        );
        assert_eq!(
            acting_identity(&c, peer.clone(), None).map(|i| i.name),
            Ok("bench-1".into())
        );
        let normal = c.authenticate(Some(b"Bearer alpha")).expect("vm-a");
        assert_eq!(
            acting_identity(&c, normal, Some(&v)),
            Err(AuthError::NotPeer("vm-a".into()))
        );
        for bad in ["", "a/b", "bench-2/vm-c", "a b", &"x".repeat(65)] {
            let v = HeaderValue::from_str(bad).expect("header");
            assert_eq!(
                acting_identity(&c, peer.clone(), Some(&v)),
                Err(AuthError::OnBehalf),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn a_peer_acts_for_a_bounded_number_of_agents() {
        let t0 = Instant::now();
        for i in 0..MAX_AGENTS_PER_PEER {
            assert_eq!(admit_agent("bench-bound", &format!("a{i}"), t0), Ok(()));
        }
        let more = admit_agent("bench-bound", "one-more", t0);
        assert!(
            matches!(
                more,
                Err(AuthError::TooManyAgents {
                    max: MAX_AGENTS_PER_PEER,
                    ..
                })
            ),
            "{more:?}"
        );
        // A known name goes on acting; another peer has its own bound.
        assert_eq!(admit_agent("bench-bound", "a0", t0), Ok(()));
        assert_eq!(admit_agent("bench-other", "one-more", t0), Ok(()));
        // Once the others were idle long enough, a new name takes a place.
        let later = t0 + AGENT_IDLE + Duration::from_secs(1);
        assert_eq!(admit_agent("bench-bound", "one-more", later), Ok(()));
    }
}
