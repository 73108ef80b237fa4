//! `gatecmd check`: validate a configuration and print every command line it allows.

use std::path::PathBuf;
use std::process::ExitCode;

use crate::transport::auth;
use gatecmd_domain::config::{Config, ConfigLocation, TokenSource, find_config};

/// `gatecmd check`'s line on isolation: `Err` when isolated commands cannot run here.
fn check_isolation(config: &Config) -> Option<Result<String, String>> {
    let names: Vec<&str> = config
        .commands
        .iter()
        .filter(|c| c.may_isolate())
        .map(|c| c.name.as_str())
        .collect();
    if names.is_empty() {
        return None;
    }
    let roots = config.isolation.roots();
    Some(match gatecmd_domain::exec::probe_isolation(&roots) {
        Ok(gatecmd_domain::exec::isolation::Privilege::Root) => Ok(format!(
            "isolation: OK for {} (root: a mount namespace per command; views of {} and {})",
            names.join(", "),
            roots.listing().display(),
            roots.usbfs().display()
        )),
        Ok(gatecmd_domain::exec::isolation::Privilege::UserNamespace) => Ok(format!(
            "isolation: OK for {} (unprivileged: a user + mount namespace per command; views of {} and {})",
            names.join(", "),
            roots.listing().display(),
            roots.usbfs().display()
        )),
        Err(e) => Err(format!(
            "isolated commands ({}) cannot run on this host: {e}",
            names.join(", ")
        )),
    })
}

/// Validates the configuration; exit 2 when invalid, 1 when a command cannot run here.
pub(super) fn check(explicit: Option<PathBuf>) -> ExitCode {
    let location = find_config(explicit.as_deref());
    let config = match location.load() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{e}");
            eprintln!("gatecmd check: {} error(s) in {location}", e.0.len());
            return ExitCode::from(2);
        }
    };
    print!("{}", summary(&config, &location));
    for rule in &config.approvals {
        println!(
            "approval: {} waits for {} (at most {} s)",
            rule.describe(),
            rule.by,
            rule.timeout.as_secs()
        );
    }
    if let Some(lab) = &config.labgrid {
        for line in crate::lab::check_lines(lab) {
            println!("{line}");
        }
    }
    for line in crate::lab::peers::check_lines(&config.lab_peers) {
        println!("{line}");
    }
    for note in password_notes(&config) {
        println!("{note}");
    }
    match check_isolation(&config) {
        Some(Ok(line)) => println!("{line}"),
        Some(Err(why)) => {
            eprintln!("error: {why}");
            return ExitCode::from(1);
        }
        None => {}
    }
    let missing = config.unavailable_commands();
    if missing.is_empty() {
        println!(
            "OK: {} command(s), configuration valid",
            config.commands.len()
        );
        ExitCode::SUCCESS
    } else {
        for (c, why) in &missing {
            eprintln!("error: command {:?}: {why}", c.name);
        }
        eprintln!(
            "gatecmd check: {} command(s) cannot run on this host (`serve` would list them as unavailable)",
            missing.len()
        );
        ExitCode::from(1)
    }
}

/// Who may read `/metrics`, and where (docs/METRICS.md).
fn metrics_line(m: &gatecmd_domain::config::MetricsSettings) -> String {
    let main = match (m.enabled, m.clients.is_empty()) {
        (false, _) => "off on the main bind".to_string(),
        (true, true) => "on the main bind to every client's token".to_string(),
        (true, false) => format!("on the main bind to the tokens of {}", m.clients.join(", ")),
    };
    match m.bind {
        Some(b) => format!("metrics: {main}; on {b} to the same tokens\n"),
        None => format!("metrics: {main}\n"),
    }
}

/// What gatecmd promises about a board's console password (docs/SECURITY.md, "The board
/// login password"): it is typed into a board whose holder controls what the board runs,
/// so every client that may lease the board can learn it.
pub fn password_notes(config: &Config) -> Vec<String> {
    config
        .boards
        .iter()
        .filter_map(|b| {
            let var = b.shell.login.as_ref()?.password_env.as_ref()?;
            Some(format!(
                "note: board {}: the console password from ${var} is typed into the board, which \
                 its lease holder controls (it chose the image); every client that may lease {} \
                 can learn it. Use a password that guards nothing but this board's console.",
                b.name, b.name
            ))
        })
        .collect()
}

/// What a configuration allows, for people.
pub fn summary(config: &Config, location: &ConfigLocation) -> String {
    let mut s = format!("config: {location}\nbind: {}\n", config.bind);
    if config.clients.is_empty() {
        s.push_str(&format!(
            "clients: none configured; `serve` generates a token into {}\n",
            auth::generated_token_path(&config.state_dir).display()
        ));
    } else {
        s.push_str("clients:\n");
        for c in &config.clients {
            let src = match &c.token {
                TokenSource::Inline(_) => "token in config".to_string(),
                TokenSource::File(p) => format!("token_file {}", p.display()),
                TokenSource::Env(v) => format!("token_env {v}"),
                TokenSource::Sha256(_) => "token_sha256".to_string(),
            };
            let cmds = c
                .commands
                .as_ref()
                .map(|c| c.iter().cloned().collect::<Vec<_>>().join(", "))
                .unwrap_or_else(|| "all commands".into());
            s.push_str(&format!(
                "  {} ({src}; {cmds}{})\n",
                c.name,
                if c.admin { "; admin" } else { "" }
            ));
        }
    }
    s.push_str(&metrics_line(&config.metrics));
    if !config.file_roots.is_empty() {
        s.push_str("file roots:\n");
        for r in &config.file_roots {
            s.push_str(&format!("  {}\n", r.display()));
        }
    }
    if !config.devices.is_empty() {
        s.push_str("device classes:\n");
        for d in &config.devices {
            let group = d
                .lock_group
                .as_ref()
                .map(|g| format!(" (lock group {g})"))
                .unwrap_or_default();
            s.push_str(&format!("  {}: {}{group}\n", d.name, d.describe()));
        }
    }
    if !config.boards.is_empty() {
        s.push_str("boards:\n");
        for b in &config.boards {
            s.push_str(&format!("  {}: usb {}", b.name, b.usb));
            for (k, v) in &b.tags {
                s.push_str(&format!(", {k}={v}"));
            }
            if let Some(c) = &b.console {
                let at = match (&c.port, &c.path) {
                    (Some(p), _) => format!("port {p}"),
                    (None, Some(p)) => p.display().to_string(),
                    (None, None) => String::new(),
                };
                s.push_str(&format!(", console {at} at {} baud", c.baud));
                if c.buffer_bytes != gatecmd_domain::config::DEFAULT_CONSOLE_BUFFER_BYTES {
                    s.push_str(&format!(", ring {} bytes", c.buffer_bytes));
                }
            }
            if let Some(p) = &b.power {
                s.push_str(&format!(", power {}", p.describe()));
            }
            s.push('\n');
        }
    }
    s.push_str("allowed command lines:\n");
    for c in &config.commands {
        let dev = c
            .device
            .as_ref()
            .map(|d| format!(", device {d}"))
            .unwrap_or_default();
        let dev = match (c.isolate, c.may_isolate()) {
            (true, _) => format!("{dev}, isolated"),
            (false, true) => format!("{dev}, isolated for some patterns"),
            _ => dev,
        };
        s.push_str(&format!(
            "  {} (timeout {} s{dev}){}\n",
            c.name,
            c.timeout.as_secs(),
            if c.unavailable.is_some() {
                " UNAVAILABLE"
            } else {
                ""
            }
        ));
        for line in c.command_lines() {
            s.push_str(&format!("    {line}\n"));
        }
    }
    s
}
