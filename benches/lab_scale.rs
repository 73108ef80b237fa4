//! The lab at scale (issue 49): `GATECMD_LAB_HOSTS` gatecmd hosts (default 20) on loopback,
//! 8 boards each from config (no console: nothing to open), every host listing every other
//! as its peer (set by a reload once all listen), and `GATECMD_LAB_AGENTS` agents (default
//! 200) spread over the hosts, each its own MCP client of its own host. Measured:
//! `list_boards {scope: "lab"}` from one agent; then every agent, the first (as many as there are boards) arriving 5 ms apart,
//! `lock_board {match: {soc: rk3588}, scope: "lab", wait_secs: 120}`, holds its board for
//! 8 s and releases it (those that must queue arrive 100 ms apart, all before the first
//! release): allocation time (arrival to lease) of those served at once and of
//! those that queued, whether the queued ones were served in arrival order, and each
//! host's memory after. With the repository's `.venv` (labgrid 26), one real
//! `labgrid-coordinator` serves the lab: every host is its exporter (`labgrid.coordinator`),
//! and its CPU time and memory over the lock phase are measured. Bounded: every call is
//! bounded by the peer link, the whole run by a 300 s limit.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::harness::*;
use crate::{Row, latency_row, rss_kib, serve};

const BOARDS: usize = 8;
/// How long each agent holds its board: past the last queued agent's arrival, so that
/// every queued agent is in the queues before the first release.
const HOLD: Duration = Duration::from_secs(8);
/// Between two agents that find a board free.
const STAGGER: Duration = Duration::from_millis(5);
/// Between two agents that must queue: well above the link's jitter on a loaded machine,
/// so that their order is theirs, not the scheduler's.
const QUEUE_STAGGER: Duration = Duration::from_millis(100);

fn env_usize(key: &str, default: usize) -> usize {
    std::env::var(key)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn host(i: usize) -> String {
    format!("h{i:02}")
}
fn agent_token(i: usize, k: usize) -> String {
    format!("agent-token-{i:02}-{k:03}-0123456789")
}
/// The token host `i` presents at every other host.
fn peer_token(i: usize) -> String {
    format!("peer-token-of-host-{i:02}-0123456789")
}

/// Host `i`'s configuration: its agents, every other host as a peer client, its boards, and
/// (`peers`) every other host as its peer.
fn host_yaml(
    i: usize,
    hosts: usize,
    agents: usize,
    urls: Option<&[String]>,
    coordinator: Option<&str>,
) -> String {
    let conns = env_usize("GATECMD_LAB_CONNS", 256);
    // Every host and agent of this lab shares one address (loopback); in a lab each host
    // has its own, so the per-address cap on connections not yet authenticated (32, for
    // NAT guests that all arrive as 127.0.0.1) is raised to the total cap here.
    let mut y = format!(
        "limits:\n  max_concurrent_per_client: 4\n  max_connections: {conns}\n  max_unauthenticated_connections: {conns}\n  max_unauthenticated_per_peer: {conns}\nclients:\n"
    );
    for k in 0..agents {
        y.push_str(&format!(
            "  - {{name: agent-{k:03}, token: {}}}\n",
            agent_token(i, k)
        ));
    }
    for j in (0..hosts).filter(|&j| j != i) {
        y.push_str(&format!(
            "  - {{name: {}, token: {}, peer: true}}\n",
            host(j),
            peer_token(j)
        ));
    }
    y.push_str("boards:\n");
    for b in 0..BOARDS {
        y.push_str(&format!(
            "  - {{name: b{b}, usb: \"1-{}\", tags: {{soc: rk3588}}}}\n",
            b + 1
        ));
    }
    if urls.is_some() || coordinator.is_some() {
        y.push_str("labgrid:\n");
    }
    if let Some(address) = coordinator {
        y.push_str(&format!("  coordinator: {address}\n  name: {}\n", host(i)));
    }
    if let Some(urls) = urls {
        y.push_str("  peers:\n");
        for j in (0..hosts).filter(|&j| j != i) {
            y.push_str(&format!(
                "    - {{name: {}, url: \"{}\", token: {}}}\n",
                host(j),
                urls[j],
                peer_token(i)
            ));
        }
    }
    y
}

/// The lab's labgrid coordinator (`.venv/bin/labgrid-coordinator` on a free loopback port),
/// when the repository's venv has it; killed when dropped.
struct Coordinator {
    child: std::process::Child,
    address: String,
    _dir: tempfile::TempDir,
}

impl Coordinator {
    fn start() -> Option<Coordinator> {
        let exe =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(".venv/bin/labgrid-coordinator");
        if !exe.exists() {
            eprintln!(
                "lab-scale: no {} (scripts/venv.sh makes it): no coordinator",
                exe.display()
            );
            return None;
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .ok()?;
        let address = format!("127.0.0.1:{port}");
        let dir = tempfile::tempdir().ok()?;
        let child = std::process::Command::new(exe)
            .args(["-l", &address])
            .current_dir(dir.path())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .ok()?;
        let up = eventually(Duration::from_secs(20), || {
            std::net::TcpStream::connect(&address).is_ok()
        });
        up.then_some(Coordinator {
            child,
            address,
            _dir: dir,
        })
    }

    /// Its CPU time so far (user + system), from /proc.
    fn cpu(&self) -> Duration {
        let stat =
            std::fs::read_to_string(format!("/proc/{}/stat", self.child.id())).unwrap_or_default();
        // The fields after the command's name: utime and stime are the 12th and 13th.
        let ticks: u64 = (stat.rsplit_once(')').map(|(_, rest)| rest).unwrap_or(""))
            .split_whitespace()
            .skip(11)
            .take(2)
            .filter_map(|t| t.parse::<u64>().ok())
            .sum();
        let hz = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
            .ok()
            .flatten()
            .filter(|&h| h > 0)
            .unwrap_or(100) as u64;
        Duration::from_millis(ticks * 1000 / hz)
    }
}

impl Drop for Coordinator {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One agent's lab lock: arrival, lease, release.
struct Served {
    arrived: Instant,
    leased: Instant,
    released: Instant,
}

async fn one_agent(url: String, token: String, start: Instant) -> Option<Served> {
    tokio::time::sleep_until(start.into()).await;
    let c = connect(&url, Some(&token), Era::Modern).await.ok()?;
    let arrived = Instant::now();
    let r = call(
        &c,
        "lock_board",
        json!({"match": {"soc": "rk3588"}, "scope": "lab", "wait_secs": 120, "ttl_secs": 300}),
    )
    .await;
    let leased = Instant::now();
    if is_error(&r) {
        eprintln!("lab-scale: an agent got no board: {}", text(&r));
        return None;
    }
    let lease = structured(&r)["lease_id"].as_str()?.to_string();
    tokio::time::sleep(HOLD).await;
    let released = Instant::now();
    let u = call(&c, "unlock_device", json!({"lease": lease})).await;
    if is_error(&u) {
        eprintln!("lab-scale: a release failed: {}", text(&u));
    }
    Some(Served {
        arrived,
        leased,
        released,
    })
}

/// The scale rows.
pub async fn rows() -> Vec<Row> {
    let hosts = env_usize("GATECMD_LAB_HOSTS", 20).clamp(2, 40);
    let agents = env_usize("GATECMD_LAB_AGENTS", 200).clamp(1, 400);
    let per_host = agents.div_ceil(hosts);
    let t_start = Instant::now();
    let coordinator = Coordinator::start();
    let address = coordinator.as_ref().map(|c| c.address.as_str());
    let servers: Vec<Server> = (0..hosts)
        .map(|i| serve(&host_yaml(i, hosts, per_host, None, address), &[]))
        .collect();
    let urls: Vec<String> = servers.iter().map(|s| s.url.clone()).collect();
    for (i, s) in servers.iter().enumerate() {
        std::fs::write(
            s.path("config.yaml"),
            host_yaml(i, hosts, per_host, Some(&urls), address),
        )
        .expect("rewrite config");
        s.signal(nix::sys::signal::Signal::SIGHUP);
    }
    let reloaded = |s: &Server| s.log_text().contains("configuration reloaded");
    assert!(
        eventually(Duration::from_secs(60), || servers.iter().all(reloaded)),
        "not every host reloaded its peers"
    );
    eprintln!(
        "lab-scale: {hosts} hosts x {BOARDS} boards up and peered in {:.1} s",
        t_start.elapsed().as_secs_f64()
    );
    let mut rows = Vec::new();

    let c = connect(&urls[0], Some(&agent_token(0, 0)), Era::Modern)
        .await
        .expect("agent");
    let mut list = Vec::new();
    for _ in 0..30 {
        let t0 = Instant::now();
        let l = call(&c, "list_boards", json!({"scope": "lab"})).await;
        list.push(t0.elapsed());
        let n = structured(&l)["boards"].as_array().map_or(0, Vec::len);
        assert_eq!(n, hosts * BOARDS, "{}", text(&l));
    }
    rows.push(latency_row(
        &format!(
            "list_boards {{scope: lab}}, {hosts} hosts x {BOARDS} boards (each peer asked at once)"
        ),
        &mut list,
        "",
        None,
    ));

    let start = Instant::now() + Duration::from_millis(500);
    let cpu_before = coordinator.as_ref().map(Coordinator::cpu);
    let tasks: Vec<_> = (0..agents)
        .map(|n| {
            let (i, k) = (n % hosts, n / hosts);
            let free = hosts * BOARDS;
            let at = if n < free {
                start + STAGGER * n as u32
            } else {
                start + STAGGER * free as u32 + QUEUE_STAGGER * (n - free + 1) as u32
            };
            tokio::spawn(one_agent(urls[i].clone(), agent_token(i, k), at))
        })
        .collect();
    let mut served = Vec::new();
    let all = futures::future::join_all(tasks);
    let done = tokio::time::timeout(Duration::from_secs(300), all)
        .await
        .expect("the lab lock phase ends within 300 s");
    for s in done.into_iter().flatten().flatten() {
        served.push(s);
    }
    let phase = start.elapsed();
    let coordinator_cpu = coordinator
        .as_ref()
        .zip(cpu_before)
        .map(|(c, before)| (c.cpu().saturating_sub(before), rss_kib(c.child.id())));
    // A board still held once every agent released its own was leased to a waiter that had
    // been served elsewhere and left (until the lease's expiry).
    tokio::time::sleep(Duration::from_secs(1)).await;
    let l = call(&c, "list_boards", json!({"scope": "lab"})).await;
    let stray = structured(&l)["boards"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|b| {
            !b.pointer("/lock/holder")
                .is_none_or(serde_json::Value::is_null)
        })
        .count();
    let threshold = HOLD / 2;
    let (at_once, mut queued): (Vec<_>, Vec<_>) = served
        .iter()
        .partition(|s| s.leased - s.arrived < threshold);
    let mut fast: Vec<Duration> = at_once.iter().map(|s| s.leased - s.arrived).collect();
    let mut slow: Vec<Duration> = queued.iter().map(|s| s.leased - s.arrived).collect();
    rows.push(latency_row(
        &format!(
            "lock_board {{scope: lab}} served at once ({} of {agents} agents, {} boards)",
            fast.len(),
            hosts * BOARDS
        ),
        &mut fast,
        "",
        None,
    ));
    rows.push(latency_row(
        &format!(
            "lock_board {{scope: lab}} queued then served ({}; boards held {} s)",
            slow.len(),
            HOLD.as_secs()
        ),
        &mut slow,
        "",
        None,
    ));
    // Release to next holder: the n-th lease given to a queued agent against the n-th
    // release of the lab.
    let mut releases: Vec<Instant> = served.iter().map(|s| s.released).collect();
    releases.sort_unstable();
    let mut grants: Vec<Instant> = queued.iter().map(|s| s.leased).collect();
    grants.sort_unstable();
    let mut handover: Vec<Duration> = grants
        .iter()
        .zip(&releases)
        .map(|(g, r)| g.saturating_duration_since(*r))
        .collect();
    rows.push(latency_row(
        "release to next holder (n-th queued lease after the n-th release)",
        &mut handover,
        "",
        None,
    ));
    // Order: of every two queued agents, did the earlier arrival get its lease first?
    queued.sort_by_key(|s| s.arrived);
    if std::env::var_os("GATECMD_LAB_TRACE").is_some() {
        for q in &queued {
            eprintln!(
                "lab-scale: queued agent arrived +{} ms, leased +{} ms",
                (q.arrived - start).as_millis(),
                (q.leased - start).as_millis()
            );
        }
    }
    let mut pairs = 0usize;
    let mut inverted = 0usize;
    for (a, s) in queued.iter().enumerate() {
        for t in &queued[a + 1..] {
            pairs += 1;
            if t.leased < s.leased {
                inverted += 1;
            }
        }
    }
    let mut rss: Vec<u64> = servers.iter().map(|s| rss_kib(s.pid())).collect();
    rss.sort_unstable();
    rows.push(Row {
        figure: format!(
            "queued agents ({} ms apart) served in arrival order: {inverted} of {pairs} pairs inverted; boards still held after every release: {stray}; host RSS",
            QUEUE_STAGGER.as_millis()
        ),
        median: format!("{} KiB", rss[rss.len() / 2]),
        p99: format!("{} KiB (max)", rss[rss.len() - 1]),
        samples: served.len(),
        target: String::new(),
        verdict: String::new(),
    });
    rows.push(match coordinator_cpu {
        Some((cpu, rss)) => Row {
            figure: format!(
                "labgrid coordinator, {hosts} exporters x {BOARDS} boards: CPU over the lock phase ({:.1} s); RSS",
                phase.as_secs_f64()
            ),
            median: format!(
                "{:.2} s ({:.1} % of a core)",
                cpu.as_secs_f64(),
                100.0 * cpu.as_secs_f64() / phase.as_secs_f64().max(0.001)
            ),
            p99: format!("{rss} KiB"),
            samples: 1,
            target: String::new(),
            verdict: String::new(),
        },
        None => Row {
            figure: "labgrid coordinator: not run (no .venv/bin/labgrid-coordinator)".into(),
            median: String::new(),
            p99: String::new(),
            samples: 0,
            target: String::new(),
            verdict: String::new(),
        },
    });
    drop(servers);
    drop(coordinator);
    rows
}
