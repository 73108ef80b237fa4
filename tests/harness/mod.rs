//! Test harness: the real `gatecmd` binary on an ephemeral loopback port, real MCP clients
//! (rmcp) in both protocol revisions, and fake tools written as real executables.
#![allow(dead_code)]

pub mod hints;

use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rmcp::model::{CallToolRequestParams, CallToolResult, ClientConfig, ProtocolVersion};
use rmcp::service::RunningService;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientLifecycleMode, ClientServiceExt, RoleClient};
use serde_json::{Value, json};

pub const TOKEN_A: &str = "token-for-vm-a-0123456789";
pub const TOKEN_B: &str = "token-for-vm-b-9876543210";

/// A running `gatecmd serve`, killed on drop.
pub struct Server {
    pub url: String,
    pub base: String,
    child: Child,
    pub log: Arc<Mutex<Vec<String>>>,
    pub dir: tempfile::TempDir,
}

impl Server {
    /// Writes `yaml` (owner-only) into a fresh directory and serves it on 127.0.0.1:0.
    pub fn start(yaml: &str) -> Server {
        Self::start_with(yaml, &[], &[])
    }

    /// Like [`Server::start`] with extra arguments and environment.
    pub fn start_with(yaml: &str, args: &[&str], env: &[(&str, &str)]) -> Server {
        let dir = tempfile::tempdir().expect("tempdir");
        let yaml = yaml.replace("$DIR", dir.path().to_str().expect("utf8 path"));
        let cfg = dir.path().join("config.yaml");
        std::fs::write(&cfg, yaml).expect("write config");
        std::fs::set_permissions(&cfg, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        // GATECMD_BIN: the binary of this worktree when several share one target directory
        // (the uplifted target/debug/gatecmd is whichever worktree linked last).
        let bin = std::env::var_os("GATECMD_BIN")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_gatecmd")));
        let mut cmd = Command::new(bin);
        cmd.arg("serve")
            .arg("--config")
            .arg(&cfg)
            .arg("--bind")
            .arg("127.0.0.1:0")
            .args(args)
            .env("GATECMD_LOG", "info")
            .env("STATE_DIRECTORY", dir.path().join("state"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("spawn gatecmd");
        let stderr = child.stderr.take().expect("stderr");
        let log = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        let log2 = log.clone();
        std::thread::spawn(move || {
            let mut tx = Some(tx);
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(url) = line.strip_prefix("gatecmd: listening on ")
                    && let Some(tx) = tx.take()
                {
                    let _ = tx.send(url.to_string());
                }
                log2.lock().expect("log").push(line);
            }
        });
        let url = match rx.recv_timeout(Duration::from_secs(20)) {
            Ok(u) => u,
            Err(_) => {
                let _ = child.kill();
                panic!(
                    "gatecmd did not start:\n{}",
                    log.lock().expect("log").join("\n")
                );
            }
        };
        let base = url.trim_end_matches("/mcp").to_string();
        Server {
            url,
            base,
            child,
            log,
            dir,
        }
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    pub fn log_text(&self) -> String {
        self.log.lock().expect("log").join("\n")
    }

    /// Waits until a log line satisfies `pred` and returns it; fails the test naming `what`
    /// (and showing the log) if none does within `timeout`.
    pub async fn wait_for_log(
        &self,
        what: &str,
        timeout: Duration,
        pred: impl Fn(&str) -> bool,
    ) -> String {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if let Some(line) = self.log_lines(&pred).into_iter().next() {
                return line;
            }
            if tokio::time::Instant::now() >= deadline {
                panic!(
                    "the server never logged {what} within {timeout:?}; its log:\n{}",
                    self.log_text()
                );
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// The log lines satisfying `pred`.
    pub fn log_lines(&self, pred: impl Fn(&str) -> bool) -> Vec<String> {
        self.log
            .lock()
            .expect("log")
            .iter()
            .filter(|line| pred(line))
            .cloned()
            .collect()
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends a signal to the server.
    pub fn signal(&self, sig: nix::sys::signal::Signal) {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.child.id() as i32), sig)
            .expect("kill");
    }

    /// Waits for the server to exit.
    pub fn wait(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Ok(Some(s)) = self.child.try_wait() {
                return Some(s);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // SIGTERM first, as systemd does, so the server stops its commands' process groups;
        // SIGKILL only if it does not exit. (A SIGKILLed server cannot clean up: its children
        // would outlive the test.)
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        if self.wait(Duration::from_secs(5)).is_none() {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

/// The two protocol eras a client may speak.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Era {
    /// 2025-11-25: initialize, Mcp-Session-Id, GET stream.
    Legacy,
    /// 2026-07-28: stateless, server/discover.
    Modern,
}

pub const ERAS: [Era; 2] = [Era::Legacy, Era::Modern];

pub type Client = RunningService<RoleClient, ClientConfig>;

/// Connects an rmcp client with `token` (None: no header) in `era`.
pub async fn connect(url: &str, token: Option<&str>, era: Era) -> anyhow::Result<Client> {
    connect_with(url, token, era, ClientConfig::default()).await
}

/// Like [`connect`] with a given client handler configuration.
pub async fn connect_with(
    url: &str,
    token: Option<&str>,
    era: Era,
    cfg: ClientConfig,
) -> anyhow::Result<Client> {
    let mut tc = StreamableHttpClientTransportConfig::with_uri(url.to_string());
    if let Some(t) = token {
        tc = tc.auth_header(t.to_string());
    }
    let transport = StreamableHttpClientTransport::from_config(tc);
    let mode = match era {
        Era::Legacy => ClientLifecycleMode::Initialize,
        Era::Modern => ClientLifecycleMode::Discover {
            preferred_versions: vec![ProtocolVersion::V_2026_07_28],
        },
    };
    let mut cfg = cfg;
    if era == Era::Legacy {
        cfg.protocol_version = ProtocolVersion::V_2025_11_25;
    }
    Ok(cfg.serve_with_lifecycle(transport, mode).await?)
}

/// Calls a tool with JSON arguments.
pub async fn call(client: &Client, tool: &str, args: Value) -> CallToolResult {
    let obj = args.as_object().cloned().unwrap_or_default();
    client
        .call_tool(CallToolRequestParams::new(tool.to_string()).with_arguments(obj))
        .await
        .expect("tools/call")
}

/// The text content of a result.
pub fn text(r: &CallToolResult) -> String {
    r.content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The structured content of a result.
pub fn structured(r: &CallToolResult) -> Value {
    r.structured_content.clone().unwrap_or(Value::Null)
}

pub fn is_error(r: &CallToolResult) -> bool {
    r.is_error == Some(true)
}

/// Writes an executable script into `dir`.
pub fn script(dir: &Path, name: &str, body: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).expect("write script");
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    p
}

/// Polls `f` until it is true or `timeout` passes.
pub fn eventually(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    f()
}

/// Waits (without blocking the runtime) until `f` is true; fails the test naming `what` if it
/// is not within `timeout`. For waiting on an observable state instead of sleeping.
pub async fn wait_until(what: &str, timeout: Duration, mut f: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + timeout;
    while !f() {
        if tokio::time::Instant::now() >= deadline {
            panic!("timed out after {timeout:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The pid in a pid file a fake tool writes with `echo $! > FILE`, once the line is complete
/// (the shell creates the file before it writes the number).
pub fn read_pid_file(path: &Path) -> Option<i32> {
    let text = std::fs::read_to_string(path).ok()?;
    text.strip_suffix('\n')?.trim().parse().ok()
}

/// Whether a process is gone (no such pid, or a zombie nobody reaped yet).
pub fn process_gone(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(s) => s
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('Z')),
    }
}

/// What a recording client heard from the server.
#[derive(Debug, Clone)]
pub enum Heard {
    Progress(rmcp::model::ProgressNotificationParam),
    ResourceUpdated(String),
    ResourceListChanged,
}

/// A client handler that records notifications.
#[derive(Clone)]
pub struct Recorder {
    pub tx: tokio::sync::mpsc::UnboundedSender<Heard>,
    pub legacy: bool,
}

impl rmcp::ClientHandler for Recorder {
    fn get_info(&self) -> ClientConfig {
        let mut c = ClientConfig::default();
        if self.legacy {
            c.protocol_version = ProtocolVersion::V_2025_11_25;
        }
        c
    }

    async fn on_progress(
        &self,
        params: rmcp::model::ProgressNotificationParam,
        _ctx: rmcp::service::NotificationContext<RoleClient>,
    ) {
        let _ = self.tx.send(Heard::Progress(params));
    }

    async fn on_resource_updated(
        &self,
        params: rmcp::model::ResourceUpdatedNotificationParam,
        _ctx: rmcp::service::NotificationContext<RoleClient>,
    ) {
        let _ = self.tx.send(Heard::ResourceUpdated(params.uri.to_string()));
    }

    async fn on_resource_list_changed(&self, _ctx: rmcp::service::NotificationContext<RoleClient>) {
        let _ = self.tx.send(Heard::ResourceListChanged);
    }
}

pub type RecordingClient = RunningService<RoleClient, Recorder>;

/// Connects a recording client.
pub async fn connect_recorder(
    url: &str,
    token: Option<&str>,
    era: Era,
) -> anyhow::Result<(RecordingClient, tokio::sync::mpsc::UnboundedReceiver<Heard>)> {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let mut tc = StreamableHttpClientTransportConfig::with_uri(url.to_string());
    if let Some(t) = token {
        tc = tc.auth_header(t.to_string());
    }
    let transport = StreamableHttpClientTransport::from_config(tc);
    let mode = match era {
        Era::Legacy => ClientLifecycleMode::Initialize,
        Era::Modern => ClientLifecycleMode::Discover {
            preferred_versions: vec![ProtocolVersion::V_2026_07_28],
        },
    };
    let client = Recorder {
        tx,
        legacy: era == Era::Legacy,
    }
    .serve_with_lifecycle(transport, mode)
    .await?;
    Ok((client, rx))
}

/// Sends `tools/call` as a cancellable request.
pub async fn start_call<H: rmcp::ClientHandler>(
    client: &RunningService<RoleClient, H>,
    tool: &str,
    args: Value,
) -> rmcp::service::RequestHandle<RoleClient> {
    let obj = args.as_object().cloned().unwrap_or_default();
    let req = rmcp::model::ClientRequest::CallToolRequest(rmcp::model::Request::new(
        CallToolRequestParams::new(tool.to_string()).with_arguments(obj),
    ));
    client
        .send_cancellable_request(req, rmcp::service::PeerRequestOptions::no_options())
        .await
        .expect("send tools/call")
}

/// The fake flashing tool shipped in tests/tools.
pub fn fake_rk() -> String {
    format!(
        "{}/tests/tools/fake-rkdeveloptool",
        env!("CARGO_MANIFEST_DIR")
    )
}

/// The name libtest gives the test function `name` of the module `module` (the caller's
/// `module_path!()`): its path without the test binary's crate name, `topic::name` or
/// `topic::inner::name`, as `TEST --exact` wants it when a test re-runs itself in a child
/// process (under a preload, as another user, in a guest).
pub fn test_path(module: &str, name: &str) -> String {
    match module.split_once("::") {
        Some((_crate, path)) => format!("{path}::{name}"),
        None => name.to_string(),
    }
}

/// Why a test cannot run on this machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unavailable {
    /// Something `scripts/setup.sh --test` installs (umockdev, systemd, the Python venv,
    /// Node): in CI (`CI=true`) its absence fails the test instead, so CI cannot go green by
    /// skipping.
    InstalledByCi,
    /// What CI's machine is (`.ci/run` runs `make test` as root on Debian 12, whose kernel
    /// allows unprivileged user namespaces): in CI its absence fails the test, so the root
    /// and user-namespace tests cannot pass there without running.
    CiMachine,
    /// A property of the machine that CI does not promise (the usbvm harness beside the
    /// repository, a real USB bus).
    HostProperty,
    /// The code under test cannot do this by design (a backend without the event it needs).
    BackendCannot,
}

/// True when the environment says it is CI (`CI=true`, as CI services set it).
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v.eq_ignore_ascii_case("true") || v == "1")
}

/// Makes a skip visible: writes `SKIP: <test>: <why>` to stderr (uncaptured), so a test that returns
/// early does not pass silently. In CI a missing [`Unavailable::InstalledByCi`] panics.
/// Call it right before returning from the test.
pub fn skip(test: &str, what: Unavailable, why: &str) {
    if in_ci() {
        match what {
            Unavailable::InstalledByCi => panic!(
                "{test}: {why}; CI installs this (scripts/setup.sh --test), so it may not skip"
            ),
            Unavailable::CiMachine => panic!(
                "{test}: {why}; CI runs as root on a kernel with user namespaces, so it may not skip"
            ),
            Unavailable::HostProperty | Unavailable::BackendCannot => {}
        }
    }
    // Straight to the stderr file descriptor: libtest captures `eprintln!` of a passing test
    // and would hide the line.
    use std::io::Write as _;
    let _ = writeln!(std::io::stderr(), "SKIP: {test}: {why}");
}

/// A copy of the executable `bin` that uid 65534 can run: in a fresh 0755 directory under
/// /tmp, since the build directory may sit under a home only its owner can enter (/root, in
/// CI). Keep the directory while the copy is in use.
pub fn reachable_by_nobody(bin: &Path) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::Builder::new()
        .prefix("gatecmd-nobody-")
        .tempdir_in("/tmp")
        .expect("tempdir in /tmp");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let copy = dir.path().join(bin.file_name().expect("a file name"));
    // A hard link when /tmp is the same file system (no 200 MB copy of a debug binary).
    if std::fs::hard_link(bin, &copy).is_err() {
        std::fs::copy(bin, &copy).expect("copy the executable");
    }
    std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    (dir, copy)
}

/// One 2026-07-28 request declaring the tasks extension; the answer's JSON-RPC message.
pub async fn task_rpc(s: &Server, token: &str, method: &str, params: Value) -> Value {
    let mut params = params;
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}}
    });
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    let mut req = reqwest::Client::new()
        .post(&s.url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("authorization", format!("Bearer {token}"))
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", method);
    // Mcp-Name: the tool of a tools/call, the task of a tasks/* request.
    if let Some(name) = params
        .get("name")
        .or_else(|| params.get("taskId"))
        .and_then(Value::as_str)
    {
        req = req.header("mcp-name", name);
    }
    let text = req
        .body(body.to_string())
        .send()
        .await
        .expect("http")
        .text()
        .await
        .expect("body");
    // One JSON body, or an SSE stream whose last `data:` line is the answer.
    let msg = text
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
        .rfind(|v| v.get("id").is_some())
        .or_else(|| serde_json::from_str(&text).ok());
    msg.unwrap_or_else(|| panic!("{method}: no answer in {text:?}"))
}

/// The audit log's text once its writer has caught up. gatecmd writes each line a moment
/// after the call that made it, on its writer thread (docs/AUDIT.md, "Writing"): a reader
/// right after an answer waits until the file has stopped growing for 50 ms (at most 5 s).
#[allow(dead_code)] // not every test binary reads an audit log
pub fn settled_audit(path: impl AsRef<std::path::Path>) -> std::io::Result<String> {
    let path = path.as_ref();
    let size = || std::fs::metadata(path).map(|m| m.len()).ok();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let mut last = size();
    while std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(50));
        let now = size();
        if now.is_some() && now == last {
            break;
        }
        last = now;
    }
    std::fs::read_to_string(path)
}
