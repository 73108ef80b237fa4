//! `labgrid:`: a coordinator address, a name labgrid accepts as an exporter name, an IP to
//! bind the console and power ports on, a bounded hold.

use std::net::IpAddr;
use std::time::Duration;

use super::super::lab::{LabPerson, LabSettings, MAX_LAB_HOLD_SECS, RawLab, RawLabPerson};
use super::validator::Validator;

/// `[A-Za-z0-9_.-]`, 1-64: a path segment of labgrid's `EXPORTER/GROUP/CLASS/NAME`.
fn valid_name(s: &str) -> bool {
    (1..=64).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

/// A person's name as labgrid's `HOST/USER` carries it: 1-64 of `[A-Za-z0-9_.@+-]`.
fn valid_person(s: &str) -> bool {
    (1..=64).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'@' | b'+' | b'-'))
}

/// A local account name: 1-32 of `[A-Za-z0-9_.-]`, the first a letter or `_` (so never a
/// bare uid, which is what a socket owner without an account is shown as).
fn valid_account(s: &str) -> bool {
    (1..=32).contains(&s.len())
        && s.bytes()
            .next()
            .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

/// This machine's host name, or `localhost` where it has none.
fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is writable for its length; gethostname NUL-terminates within it
    // (the last byte stays 0 either way).
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len() - 1) };
    let end = buf.iter().position(|&b| b == 0).unwrap_or(0);
    match std::str::from_utf8(&buf[..end]) {
        Ok(h) if rc == 0 && !h.is_empty() => h.to_string(),
        _ => "localhost".into(),
    }
}

impl Validator {
    pub(super) fn lab(&mut self, raw: RawLab) -> Option<LabSettings> {
        let coordinator = raw.coordinator.clone()?;
        let at = self.at("labgrid.coordinator");
        let valid_addr = coordinator
            .rsplit_once(':')
            .is_some_and(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok_and(|p| p != 0));
        if !valid_addr || coordinator.contains('/') {
            self.err(
                at,
                "labgrid.coordinator".into(),
                format!(
                    "{coordinator:?} is not HOST:PORT; write the coordinator's address as labgrid-client -x takes it, e.g. \"coordinator.lab:20408\" or \"127.0.0.1:20408\""
                ),
            );
        }
        let name = raw.name.clone().unwrap_or_else(hostname);
        if !valid_name(&name) {
            let at = self.at("labgrid.name");
            self.err(
                at,
                "labgrid.name".into(),
                format!(
                    "{name:?} cannot be an exporter name: use 1-64 of [A-Za-z0-9_.-] (it is the first part of labgrid's EXPORTER/GROUP/CLASS/NAME)"
                ),
            );
        }
        let console_bind = match raw.console_bind.parse::<IpAddr>() {
            Ok(ip) => ip,
            Err(_) => {
                let at = self.at("labgrid.console_bind");
                self.err(
                    at,
                    "labgrid.console_bind".into(),
                    format!(
                        "{:?} is not an IP address; write e.g. 127.0.0.1 (the default: people reach it through labgrid's SSH proxy) or this host's lab address",
                        raw.console_bind
                    ),
                );
                IpAddr::from([127, 0, 0, 1])
            }
        };
        let people = self.lab_people(&raw.people);
        // Checked only when the bridge is on, as the keys above.
        self.declared(&raw, "labgrid");
        Some(LabSettings {
            coordinator,
            name,
            console_bind,
            host: raw.host.unwrap_or_else(|| console_bind.to_string()),
            proxy: raw.proxy.unwrap_or_else(hostname),
            proxy_required: raw.proxy_required.unwrap_or(console_bind.is_loopback()),
            hold: Duration::from_secs(raw.hold_secs.clamp(1, MAX_LAB_HOLD_SECS)),
            people,
        })
    }

    /// `labgrid.people`: each name once, each with at least one account, each account
    /// under one person (an account shared by two people would act as either).
    fn lab_people(&mut self, raw: &[RawLabPerson]) -> Vec<LabPerson> {
        let mut out: Vec<LabPerson> = Vec::new();
        for (i, p) in raw.iter().enumerate() {
            let field = format!("labgrid.people[{i}].name");
            if !valid_person(&p.name) {
                let at = self.at(&field);
                self.err(
                    at,
                    field.clone(),
                    format!(
                        "{:?} cannot be a labgrid user name: use 1-64 of [A-Za-z0-9_.@+-], the USER of the HOST/USER labgrid-client acquires under (LG_USERNAME, or the login name)",
                        p.name
                    ),
                );
            } else if out.iter().any(|o| o.name == p.name) {
                let at = self.at(&field);
                self.err(
                    at,
                    field.clone(),
                    format!(
                        "{:?} is listed twice; list each person once, with all their accounts",
                        p.name
                    ),
                );
            }
            if p.accounts.is_empty() {
                let field = format!("labgrid.people[{i}].accounts");
                let at = self
                    .at(&field)
                    .or_else(|| self.at(&format!("labgrid.people[{i}]")));
                self.err(
                    at,
                    field,
                    "no accounts: list the local accounts on this host that this person's labgrid-client (or SSH login, for labgrid's proxy) runs as, e.g. accounts: [alice]".into(),
                );
            }
            for (j, a) in p.accounts.iter().enumerate() {
                let field = format!("labgrid.people[{i}].accounts[{j}]");
                let listed_for = out
                    .iter()
                    .find(|o| o.accounts.contains(a))
                    .map(|o| o.name.clone())
                    .or_else(|| p.accounts[..j].contains(a).then(|| p.name.clone()));
                let problem = if !valid_account(a) {
                    Some(format!(
                        "{a:?} is not a local account name: use 1-32 of [A-Za-z0-9_.-], the first a letter or _ (the name, not the uid)"
                    ))
                } else {
                    listed_for.map(|other| format!(
                        "account {a:?} is listed already (for {other:?}); an account belongs to one person, or its connections could act for either"
                    ))
                };
                if let Some(message) = problem {
                    let at = self.at(&field);
                    self.err(at, field, message);
                }
            }
            out.push(LabPerson {
                name: p.name.clone(),
                accounts: p.accounts.clone(),
            });
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use crate::config::Config;

    #[test]
    fn off_by_default_and_checked_when_set() {
        let ok = Config::parse("{}", "t.yaml").expect("valid");
        assert!(ok.labgrid.is_none());
        let ok = Config::parse(
            "labgrid:\n  coordinator: 127.0.0.1:20408\n  name: bench-1\n",
            "t.yaml",
        )
        .expect("valid");
        let lab = ok.labgrid.expect("on");
        assert_eq!(lab.name, "bench-1");
        assert!(lab.console_bind.is_loopback() && lab.proxy_required);
        assert_eq!(lab.hold.as_secs(), 60);
        let e = Config::parse(
            "labgrid:\n  coordinator: nowhere\n  name: a/b\n  console_bind: lab\n  hold_secs: 0\n",
            "t.yaml",
        )
        .expect_err("refused")
        .to_string();
        for field in [
            "labgrid.coordinator",
            "labgrid.name",
            "labgrid.console_bind",
            "labgrid.hold_secs",
        ] {
            assert!(e.contains(field), "{field}: {e}");
        }
        assert!(e.contains("t.yaml:2"), "{e}");
    }

    #[test]
    fn people_default_to_nobody_and_are_checked_with_their_lines() {
        let on = "labgrid:\n  coordinator: 127.0.0.1:20408\n  name: bench-1\n";
        let lab = Config::parse(on, "t.yaml")
            .expect("valid")
            .labgrid
            .expect("on");
        assert!(lab.people.is_empty(), "nobody unless named");
        let ok = format!(
            "{on}  people:\n    - name: alice\n      accounts: [alice, alice-lab]\n    - {{name: bob.s, accounts: [bob]}}\n"
        );
        let lab = Config::parse(&ok, "t.yaml")
            .expect("valid")
            .labgrid
            .expect("on");
        let alice = lab.person("alice").expect("listed");
        assert_eq!(alice.accounts, ["alice", "alice-lab"]);
        assert!(lab.person("bob.s").is_some() && lab.person("mallory").is_none());
        let bad = format!(
            "{on}  people:\n    - name: alice\n      accounts: [alice]\n    - name: \"a/b\"\n      accounts: [\"1000\", alice]\n    - name: alice\n      accounts: []\n"
        );
        let e = Config::parse(&bad, "t.yaml")
            .expect_err("refused")
            .to_string();
        for (field, line) in [
            ("labgrid.people[1].name", "t.yaml:7"),
            ("labgrid.people[1].accounts[0]", "t.yaml:8"),
            ("labgrid.people[1].accounts[1]", "t.yaml:8"),
            ("labgrid.people[2].name", "t.yaml:9"),
            ("labgrid.people[2].accounts", "t.yaml:10"),
        ] {
            let at = e
                .lines()
                .find(|l| l.contains(&format!("{field}:")) || l.contains(&format!("{field} ")));
            assert!(
                at.is_some_and(|l| l.contains(line)),
                "{field} at {line}: {e}"
            );
        }
        assert!(e.contains("listed already"), "{e}");
    }
}
