//! The control socket: one request line, one answer line (`ok …` / `err …`), then close.
//! `power BOARD on|on recovery|off` (`on maskrom` is the Rockchip board's word for
//! `on recovery`) and `status`; docs/VBOARD.md has the protocol.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use crate::family::Powered;

/// A request line longer than this is refused (the longest real one is ~30 bytes).
const MAX_LINE: u64 = 256;

pub fn serve(path: &Path, boards: Vec<Arc<dyn Powered>>) -> Result<(), String> {
    let _ = std::fs::remove_file(path);
    let listener =
        UnixListener::bind(path).map_err(|e| format!("control socket {}: {e}", path.display()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .map_err(|e| format!("chmod {}: {e}", path.display()))?;
    let boards = Arc::new(boards);
    thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            let boards = boards.clone();
            thread::spawn(move || handle(conn, &boards));
        }
    });
    Ok(())
}

fn handle(mut conn: UnixStream, boards: &[Arc<dyn Powered>]) {
    let _ = conn.set_read_timeout(Some(Duration::from_secs(5)));
    let mut line = String::new();
    let read = BufReader::new((&conn).take(MAX_LINE)).read_line(&mut line);
    let answer = match read {
        Ok(_) if line.ends_with('\n') => answer(line.trim(), boards),
        Ok(_) => format!("err request longer than {MAX_LINE} bytes or not ended by a newline"),
        Err(e) => format!("err reading the request: {e}"),
    };
    let _ = conn.write_all(format!("{answer}\n").as_bytes());
}

fn answer(req: &str, boards: &[Arc<dyn Powered>]) -> String {
    let words: Vec<&str> = req.split_whitespace().collect();
    match words.as_slice() {
        ["status"] => format!("ok {}", status(boards)),
        ["power", name, rest @ ..] => {
            let Some(b) = boards.iter().find(|b| b.name() == *name) else {
                let names: Vec<&str> = boards.iter().map(|b| b.name()).collect();
                return format!("err no such board {name:?} (boards: {})", names.join(", "));
            };
            let r = match rest {
                ["on"] => b.power_on(false),
                ["on", "recovery" | "maskrom"] => b.power_on(true),
                ["off"] => b.power_off(),
                _ => return "err usage: power BOARD on|on recovery|off".to_string(),
            };
            match r {
                Ok(s) => format!("ok {s}"),
                Err(e) => format!("err {e}"),
            }
        }
        _ => "err unknown request (expected `power BOARD on|on recovery|off` or `status`)"
            .to_string(),
    }
}

pub fn status(boards: &[Arc<dyn Powered>]) -> serde_json::Value {
    let list: Vec<serde_json::Value> = boards.iter().map(|b| b.status()).collect();
    serde_json::json!({ "boards": list })
}

/// The client side: sends `req`, returns the answer after `ok ` or the reason after `err `.
pub fn request(path: &Path, req: &str) -> Result<String, String> {
    let mut s = UnixStream::connect(path).map_err(|e| {
        format!(
            "cannot reach gatecmd-vboard at {} ({e}): is `gatecmd-vboard serve` running?",
            path.display()
        )
    })?;
    // A power change waits for enumeration (10 s per gadget at most) and a boot log.
    let _ = s.set_read_timeout(Some(Duration::from_secs(60)));
    s.write_all(format!("{req}\n").as_bytes())
        .map_err(|e| format!("control socket: {e}"))?;
    let mut line = String::new();
    BufReader::new(s)
        .read_line(&mut line)
        .map_err(|e| format!("control socket: no answer ({e})"))?;
    let line = line.trim_end();
    if let Some(ok) = line.strip_prefix("ok") {
        Ok(ok.trim_start().to_string())
    } else if let Some(err) = line.strip_prefix("err ") {
        Err(err.to_string())
    } else {
        Err(format!("control socket: unexpected answer {line:?}"))
    }
}
