//! A peer acting for its host's agent (docs/LAB.md, "One lab for agents"): a request whose
//! token is a `peer: true` client's may carry `Gatecmd-On-Behalf-Of: CLIENT`, the agent's
//! name on the peer's host; it then acts as `HOST/CLIENT` (the peer's configured client
//! name is the `HOST`), and that is the name every lease, audit line, page row and labgrid
//! `held_by` records. Any other client's token with the header is refused (403): a normal
//! client's token never acts as a peer.

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
    Ok(ClientIdentity {
        name: format!("{}/{agent}", id.name),
        commands: id.commands,
        admin: false,
    })
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
}
