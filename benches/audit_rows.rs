//! The audit log's rows (issue 50, docs/PERFORMANCE.md "Signed audit log"): records per
//! second written through `Audit::record` with the chain and signature (as gatecmd runs)
//! and without (`Audit::open_unsigned`, the baseline), one thread writing the typical
//! `execute_finished`-sized record, timed to the last line written (`flush`); the caller's
//! own time in `Audit::record` with the queue empty (the writer thread seals, issue 50
//! "Signing off the request path"); and `gatecmd audit verify`'s rate over what was written.

use std::time::{Duration, Instant};

use gatecmd_domain::audit::{Audit, FILE_NAME, Signer, verify};
use gatecmd_domain::config::AuditSettings;
use serde_json::json;

use super::{Row, Sizes};

/// Records per run: the full run writes enough to rotate a few times at the default 10 MiB.
fn records(z: &Sizes) -> usize {
    if z.calls < 100 { 2_000 } else { 100_000 }
}

/// A record the size of an `execute_finished` line for `/bin/true`.
fn record(n: usize) -> serde_json::Value {
    json!({
        "event": "execute_finished", "client": "bench-a", "session": "0d1c6a3e-5b8e-4bd5-9a57-3a9c8f6e2b11",
        "command": "true", "run_id": n, "argv": ["/bin/true"], "lock_keys": [], "timeout_secs": 60,
        "outcome": "exited", "exit_code": 0, "duration_ms": 1, "timed_out": false,
        "cancelled": false, "stdout_bytes": 0, "stderr_bytes": 0
    })
}

fn rate_row(figure: &str, n: usize, took: Duration, per_record: Duration) -> Row {
    Row {
        figure: figure.to_string(),
        median: format!("{:.0} records/s", n as f64 / took.as_secs_f64()),
        p99: format!("{:.1} µs/record", per_record.as_secs_f64() * 1e6),
        samples: n,
        target: String::new(),
        verdict: String::new(),
    }
}

fn write(z: &Sizes, signed: bool) -> (Row, Option<(tempfile::TempDir, Duration)>) {
    let dir = tempfile::tempdir().expect("tmp");
    let s = AuditSettings::default();
    let audit = if signed {
        Audit::open(dir.path(), &s)
    } else {
        Audit::open_unsigned(dir.path(), &s)
    }
    .expect("open");
    let n = records(z);
    let t = Instant::now();
    for i in 0..n {
        audit.record(&record(i));
    }
    // Every line written: the writer thread's work is in the figure.
    audit.flush();
    let took = t.elapsed();
    let label = if signed {
        "audit records written, chained and signed (1 thread)"
    } else {
        "audit records written, unsigned baseline (1 thread)"
    };
    let row = rate_row(label, n, took, took / n as u32);
    (row, signed.then_some((dir, took)))
}

/// What a caller waits for in `Audit::record` (a request's cost), the queue empty each
/// time (drained outside the timed part), median and p99.
fn caller(z: &Sizes, signed: bool) -> Row {
    let dir = tempfile::tempdir().expect("tmp");
    let s = AuditSettings::default();
    let audit = if signed {
        Audit::open(dir.path(), &s)
    } else {
        Audit::open_unsigned(dir.path(), &s)
    }
    .expect("open");
    let n = if z.calls < 100 { 200 } else { 5_000 };
    let mut took = Vec::with_capacity(n);
    for i in 0..n {
        let t = Instant::now();
        audit.record(&record(i));
        took.push(t.elapsed());
        audit.flush();
    }
    took.sort();
    let at = |p: f64| took[((n as f64 * p) as usize).min(n - 1)];
    Row {
        figure: if signed {
            "  the caller's time in record(), signed (the writer thread seals)"
        } else {
            "  the caller's time in record(), unsigned baseline"
        }
        .to_string(),
        median: format!("{:.1} µs", at(0.5).as_secs_f64() * 1e6),
        p99: format!("{:.1} µs", at(0.99).as_secs_f64() * 1e6),
        samples: n,
        target: String::new(),
        verdict: String::new(),
    }
}

/// The rows: unsigned, signed, the caller's share of a signed record; verify's rate.
pub fn rows(z: &Sizes) -> Vec<Row> {
    // Warm the page cache and the allocator once.
    let _ = write(z, false);
    let (unsigned, _) = write(z, false);
    let (signed, kept) = write(z, true);
    let mut rows = vec![unsigned, signed, caller(z, false), caller(z, true)];
    let Some((dir, _)) = kept else { return rows };
    let key = Signer::load_or_create(dir.path()).expect("key").public();
    let files = verify::with_rotated(&dir.path().join(FILE_NAME));
    let t = Instant::now();
    let checked = verify::verify(&files, &key).expect("the bench's own log verifies");
    let took = t.elapsed();
    let n = checked.records as usize;
    rows.push(rate_row(
        "gatecmd audit verify (hash, signature, chain)",
        n,
        took,
        took / n.max(1) as u32,
    ));
    rows
}
