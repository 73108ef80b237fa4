//! Signed-in page sessions: a random id in an `HttpOnly` cookie, never the token.
//!
//! The store keeps only the SHA-256 of each id (a lookup by a guessed id learns nothing
//! from timing, and the saved file holds no usable cookie), the client it belongs to, its
//! CSRF token and when it was last used. A session unused for `page.session_idle_secs` is
//! gone; past `page.max_sessions` the one unused longest is ended. The table is saved
//! (owner-only, in the state directory) when a session starts or ends and at most once a
//! minute while in use, so an open page reconnects after a server restart without a new
//! sign-in.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The cookie's name.
pub const COOKIE: &str = "gatecmd_page";
/// The saved table's file name in the state directory.
pub const FILE_NAME: &str = "page-sessions.json";
/// Last-use times are saved at most this often (idle expiry is counted in hours).
const SAVE_EVERY: Duration = Duration::from_secs(60);

/// One session as the handlers see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    pub client: String,
    /// The fingerprint of the client's token at sign-in (`Credentials::fingerprint`): a
    /// session whose token has since changed or gone is ended.
    pub credential: String,
    /// Sent back with every state-changing request (form field or header).
    pub csrf: String,
}

#[derive(Clone, Serialize, Deserialize)]
struct Entry {
    client: String,
    /// Absent in tables saved before issue 22: such a session matches no token and ends.
    #[serde(default)]
    credential: String,
    csrf: String,
    /// Seconds since the epoch.
    last_seen: u64,
}

#[derive(Serialize, Deserialize, Default)]
struct Saved {
    /// By hex SHA-256 of the session id.
    sessions: HashMap<String, Entry>,
}

/// The session table.
pub struct Sessions {
    // A std mutex: a map operation (and, rarely, a small file write) under it, no await.
    table: Mutex<Table>,
    path: Option<PathBuf>,
}

struct Table {
    by_digest: HashMap<String, Entry>,
    saved_at: SystemTime,
}

impl Sessions {
    /// A table saved to (and first loaded from) `<state_dir>/page-sessions.json`; `None`
    /// keeps it in memory only. Sessions idle longer than `idle` are dropped on load.
    pub fn open(state_dir: Option<&Path>, idle: Duration) -> Sessions {
        let path = state_dir.map(|d| d.join(FILE_NAME));
        let now = now_secs();
        let by_digest = path
            .as_deref()
            .and_then(|p| std::fs::read(p).ok())
            .and_then(|b| serde_json::from_slice::<Saved>(&b).ok())
            .map(|s| s.sessions)
            .unwrap_or_default()
            .into_iter()
            .filter(|(_, e)| now.saturating_sub(e.last_seen) < idle.as_secs())
            .collect();
        Sessions {
            table: Mutex::new(Table {
                by_digest,
                saved_at: SystemTime::now(),
            }),
            path,
        }
    }

    /// Starts a session for `client` signed in with the token whose fingerprint is
    /// `credential`; returns the cookie value (the id) and the session. A client at
    /// `per_client` sessions loses its own longest-unused one; at `max` in all, the
    /// longest-unused session of the client holding the most goes. So no client's
    /// sign-ins end another's sessions while it holds fewer, and a sign-in always succeeds
    /// (the admin can always get in).
    pub fn create(
        &self,
        client: &str,
        credential: &str,
        max: usize,
        per_client: usize,
    ) -> Result<(String, Session), getrandom::Error> {
        let id = random_hex()?;
        let csrf = random_hex()?;
        let entry = Entry {
            client: client.to_string(),
            credential: credential.to_string(),
            csrf: csrf.clone(),
            last_seen: now_secs(),
        };
        let mut t = self.lock();
        while t.by_digest.values().filter(|e| e.client == client).count() >= per_client.max(1) {
            if !t.evict_oldest_of(Some(client)) {
                break;
            }
        }
        while t.by_digest.len() >= max.max(1) {
            if !t.evict_oldest_of(None) {
                break;
            }
        }
        t.by_digest.insert(digest(&id), entry);
        self.save(&mut t);
        Ok((
            id,
            Session {
                client: client.to_string(),
                credential: credential.to_string(),
                csrf,
            },
        ))
    }

    /// Ends every session that `keep` (client, credential fingerprint) says no to: a
    /// reload that removes or changes a token ends the page sessions made with it.
    pub fn retain(&self, keep: impl Fn(&str, &str) -> bool) -> usize {
        let mut t = self.lock();
        let before = t.by_digest.len();
        t.by_digest.retain(|_, e| keep(&e.client, &e.credential));
        let ended = before - t.by_digest.len();
        if ended > 0 {
            self.save(&mut t);
        }
        ended
    }

    /// The live session with cookie value `id`, marked as used now; an idle one is ended.
    pub fn get(&self, id: &str, idle: Duration) -> Option<Session> {
        let key = digest(id);
        let now = now_secs();
        let mut t = self.lock();
        let live = t
            .by_digest
            .get(&key)
            .is_some_and(|e| now.saturating_sub(e.last_seen) < idle.as_secs());
        if !live {
            if t.by_digest.remove(&key).is_some() {
                self.save(&mut t);
            }
            return None;
        }
        let e = t.by_digest.get_mut(&key)?;
        e.last_seen = now;
        let s = Session {
            client: e.client.clone(),
            credential: e.credential.clone(),
            csrf: e.csrf.clone(),
        };
        if t.saved_at.elapsed().unwrap_or_default() >= SAVE_EVERY {
            self.save(&mut t);
        }
        Some(s)
    }

    /// Ends the session with cookie value `id` (sign-out).
    pub fn remove(&self, id: &str) {
        let mut t = self.lock();
        if t.by_digest.remove(&digest(id)).is_some() {
            self.save(&mut t);
        }
    }

    /// How many sessions are kept.
    pub fn len(&self) -> usize {
        self.lock().by_digest.len()
    }

    /// Whether no session is kept.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn save(&self, t: &mut Table) {
        t.saved_at = SystemTime::now();
        let Some(path) = &self.path else { return };
        let saved = Saved {
            sessions: t.by_digest.clone(),
        };
        if let Err(e) = write_private(path, &saved) {
            // Sessions still work; only a restart would sign everyone out.
            tracing::warn!(path = %path.display(), error = %e, "page sessions not saved");
        }
    }

    fn lock(&self) -> MutexGuard<'_, Table> {
        match self.table.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }
}

impl Table {
    /// Ends the longest-unused session of `client`, or (`None`) of the client holding
    /// the most sessions (of those, the one unused longest); whether one was ended.
    fn evict_oldest_of(&mut self, client: Option<&str>) -> bool {
        let mut counts: HashMap<&str, usize> = HashMap::new();
        for e in self.by_digest.values() {
            *counts.entry(e.client.as_str()).or_insert(0) += 1;
        }
        let oldest = self
            .by_digest
            .iter()
            .filter(|(_, e)| client.is_none_or(|c| e.client == c))
            .min_by_key(|(_, e)| {
                let n = counts.get(e.client.as_str()).copied().unwrap_or(0);
                (std::cmp::Reverse(n), e.last_seen)
            })
            .map(|(k, _)| k.clone());
        oldest.is_some_and(|k| self.by_digest.remove(&k).is_some())
    }
}

/// Writes `saved` owner-only, whole or not at all (a temporary file renamed over).
fn write_private(path: &Path, saved: &Saved) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = path.with_extension("json.tmp");
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    f.write_all(&serde_json::to_vec(saved).map_err(std::io::Error::other)?)?;
    drop(f);
    std::fs::rename(&tmp, path)
}

fn digest(id: &str) -> String {
    hex::encode(Sha256::digest(id.as_bytes()))
}

fn random_hex() -> Result<String, getrandom::Error> {
    let mut b = [0u8; 32];
    getrandom::fill(&mut b)?;
    Ok(hex::encode(b))
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The session cookie's value in a `Cookie` header, if any.
pub fn cookie_value(header: &str) -> Option<&str> {
    header.split(';').find_map(|pair| {
        let (name, value) = pair.trim().split_once('=')?;
        (name == COOKIE).then_some(value)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOUR: Duration = Duration::from_secs(3600);

    #[test]
    fn a_session_is_found_by_its_id_only_and_ends_on_sign_out() {
        let s = Sessions::open(None, HOUR);
        let (id, session) = s.create("vm-a", "c", 8, 8).expect("random");
        assert_eq!(id.len(), 64);
        assert_eq!(s.get(&id, HOUR), Some(session));
        assert_eq!(s.get("0000", HOUR), None);
        s.remove(&id);
        assert_eq!(s.get(&id, HOUR), None);
    }

    #[test]
    fn an_idle_session_is_gone() {
        let s = Sessions::open(None, HOUR);
        let (id, _) = s.create("vm-a", "c", 8, 8).expect("random");
        assert_eq!(s.get(&id, Duration::ZERO), None);
        assert!(s.is_empty());
    }

    #[test]
    fn past_the_cap_the_longest_unused_goes() {
        let s = Sessions::open(None, HOUR);
        let (first, _) = s.create("vm-a", "c", 2, 2).expect("random");
        s.lock()
            .by_digest
            .get_mut(&digest(&first))
            .expect("kept")
            .last_seen -= 10;
        let (second, _) = s.create("vm-b", "c", 2, 2).expect("random");
        let (third, _) = s.create("vm-b", "c", 2, 2).expect("random");
        assert_eq!(s.len(), 2);
        assert!(s.get(&first, HOUR).is_none());
        assert!(s.get(&second, HOUR).is_some() && s.get(&third, HOUR).is_some());
    }

    #[test]
    fn one_client_cannot_sign_another_out() {
        let s = Sessions::open(None, HOUR);
        let (ops, _) = s.create("ops", "c", 8, 4).expect("random");
        // 64 sign-ins of vm-a (the finding in issue 22) end only vm-a's own sessions.
        for _ in 0..64 {
            s.create("vm-a", "c", 8, 4).expect("random");
        }
        assert!(s.get(&ops, HOUR).is_some(), "ops is still signed in");
        assert_eq!(s.len(), 5);
        // At the global cap the heaviest client gives way, so ops always gets in.
        let s = Sessions::open(None, HOUR);
        for _ in 0..4 {
            s.create("vm-a", "c", 4, 4).expect("random");
        }
        let (ops, _) = s.create("ops", "c", 4, 4).expect("random");
        assert!(s.get(&ops, HOUR).is_some());
        assert_eq!(s.len(), 4);
    }

    #[test]
    fn sessions_survive_a_restart_in_an_owner_only_file_without_ids() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let (id, session) = Sessions::open(Some(dir.path()), HOUR)
            .create("vm-a", "c", 8, 8)
            .expect("random");
        let file = dir.path().join(FILE_NAME);
        let text = std::fs::read_to_string(&file).expect("saved");
        assert!(!text.contains(&id), "the file holds digests, not ids");
        let mode = std::fs::metadata(&file).expect("meta").permissions().mode();
        assert_eq!(mode & 0o077, 0);
        let again = Sessions::open(Some(dir.path()), HOUR);
        assert_eq!(again.get(&id, HOUR), Some(session));
    }

    #[test]
    fn the_cookie_is_found_among_others() {
        assert_eq!(cookie_value("a=1; gatecmd_page=abc; b=2"), Some("abc"));
        assert_eq!(cookie_value("gatecmd_pagex=abc"), None);
    }
}
