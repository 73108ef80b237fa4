//! Running one child: no shell, absolute binary, cleared environment, own process group,
//! timeout → SIGTERM → SIGKILL of the whole group, capped output, line streaming.
//!
//! The child is the leader of a new process group, so signals reach its grandchildren
//! too. A [`GroupGuard`] kills the group when the run ends for any reason — including the
//! caller dropping the future — so no child outlives its request.
//!
//! Beside the executor: `capture` (what a running child prints, read into capped captures
//! and, when someone watches, into lines), `progress` (the percentage a command's output
//! line reports, from its `progress:` regex) and `isolation` (an isolated command's mount
//! namespace, in which the USB view holds only its board).

pub mod capture;
pub mod isolation;
pub mod progress;

use std::collections::{BTreeMap, HashSet};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::process::Command;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::exec::capture::{CHUNK_QUEUE, Lines, finish_reader, spawn_reader};
pub use crate::exec::capture::{LineTap, StreamKind};
use crate::exec::isolation::{IsolationError, Privilege, Roots, Setup};
use crate::limits::permits::Permits;

/// The working directory every child starts in.
pub const CHILD_DIR: &str = "/";

/// The PATH every child gets: the environment is cleared, so this is all it sees.
pub const CHILD_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// What to run.
#[derive(Debug, Clone)]
pub struct Spec {
    pub binary: PathBuf,
    pub args: Vec<String>,
    /// Added to the fixed PATH and LANG.
    pub env: BTreeMap<String, String>,
    pub timeout: Duration,
    /// For an isolated command: the view to build between fork and exec.
    pub isolation: Option<Arc<Setup>>,
    /// Open files the child inherits under the same numbers: the file arguments the
    /// sanitizer opened, named in `args` as `/proc/self/fd/N`. Everything else the server
    /// holds stays close-on-exec.
    pub inherit: Vec<Arc<OwnedFd>>,
    /// Make the child's output arrive as it prints it (see [`LIVE_OUTPUT_LIB`]): set for
    /// commands whose progress someone watches.
    pub live_output: bool,
}

/// coreutils' library behind `stdbuf -o0 -e0`: preloaded into a dynamically linked glibc
/// program, it turns its stdout unbuffered before `main`, so a tool that prints progress
/// with `printf` and no `fflush` (rkdeveloptool: lines end in `\r\n`, 4 KiB blocks reach a
/// pipe only when full) is read as it prints. A pseudo-terminal was measured and rejected:
/// glibc line-buffers a tty, and a `\r`-only progress line is not flushed by that either
/// (docs/DECISIONS.md, "Live progress"). Programs that are statically linked, not C, or set
/// their own buffering are not changed; they are as live as they make themselves.
pub const LIVE_OUTPUT_LIB: &str = "/usr/libexec/coreutils/libstdbuf.so";

/// The environment that makes a child's output live: the library above with its two
/// settings, and Python's own switch (esptool is Python).
fn live_output_env(preload: Option<&str>) -> Vec<(String, String)> {
    let mut env = vec![
        ("_STDBUF_O".to_owned(), "0".to_owned()),
        ("_STDBUF_E".to_owned(), "0".to_owned()),
        ("PYTHONUNBUFFERED".to_owned(), "1".to_owned()),
    ];
    if Path::new(LIVE_OUTPUT_LIB).exists() {
        // Beside a preload the server itself runs under (umockdev's, in tests): both load.
        let list = match preload {
            Some(p) if !p.is_empty() => format!("{p} {LIVE_OUTPUT_LIB}"),
            _ => LIVE_OUTPUT_LIB.to_owned(),
        };
        env.push(("LD_PRELOAD".to_owned(), list));
    }
    env
}

/// Why a run was stopped before the child exited by itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    Timeout,
    Cancelled,
    Shutdown,
}

/// How a run ended.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// Exit code; `None` when a signal ended the child.
    pub exit_code: Option<i32>,
    /// The signal that ended the child, if one did.
    pub signal: Option<i32>,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    /// Bytes produced beyond the cap (dropped).
    pub stdout_dropped: u64,
    pub stderr_dropped: u64,
    pub duration: Duration,
    pub stopped: Option<StopReason>,
}

/// Errors before the child ran.
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    #[error("could not start {binary}: {source}")]
    Spawn {
        binary: String,
        source: std::io::Error,
    },
    #[error("the server is shutting down; no new commands are started")]
    ShuttingDown,
    #[error("{0}; nothing was run")]
    Isolation(#[from] IsolationError),
}

/// Runs children under a global concurrency cap and kills them all at shutdown.
#[derive(Clone)]
pub struct Executor {
    inner: Arc<Inner>,
}

/// The executor's limits; [`Executor::set_limits`] replaces them (config reload).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExecLimits {
    /// Children running at once.
    pub max_children: usize,
    /// Bytes kept of each of stdout and stderr.
    pub max_output: usize,
    /// Between SIGTERM and SIGKILL.
    pub grace: Duration,
}

struct Inner {
    permits: Permits,
    // A std mutex: read once per run (a run keeps the limits it started with).
    limits: Mutex<ExecLimits>,
    /// Process groups alive now, so shutdown can kill them.
    // A std mutex: held only to insert/remove/copy, never across an await.
    groups: Mutex<HashSet<i32>>,
    shutdown: CancellationToken,
}

impl Executor {
    /// `max_children` runs at once; output capped at `max_output` bytes per stream;
    /// `grace` between SIGTERM and SIGKILL.
    pub fn new(max_children: usize, max_output: usize, grace: Duration) -> Self {
        let limits = ExecLimits {
            max_children: max_children.max(1),
            max_output,
            grace,
        };
        Executor {
            inner: Arc::new(Inner {
                permits: Permits::new(limits.max_children),
                limits: Mutex::new(limits),
                groups: Mutex::new(HashSet::new()),
                shutdown: CancellationToken::new(),
            }),
        }
    }

    /// Grace period between SIGTERM and SIGKILL.
    pub fn grace(&self) -> Duration {
        self.limits().grace
    }

    /// The limits new runs start with.
    pub fn limits(&self) -> ExecLimits {
        *self.inner.limits.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Replaces the limits for runs that start from now on. Runs already going keep their
    /// output cap and grace; a lower cap on children is reached as they finish.
    pub fn set_limits(&self, limits: ExecLimits) {
        let limits = ExecLimits {
            max_children: limits.max_children.max(1),
            ..limits
        };
        self.inner.permits.resize(limits.max_children);
        *self.inner.limits.lock().unwrap_or_else(|p| p.into_inner()) = limits;
    }

    /// Cancelled once [`shutdown`](Self::shutdown) began: work that is not a child (a
    /// flash's image check on a blocking thread) stops on it too.
    pub fn stopping(&self) -> CancellationToken {
        self.inner.shutdown.clone()
    }

    /// Stops every running child (SIGTERM, then SIGKILL after the grace) and refuses new ones.
    pub async fn shutdown(&self) {
        self.inner.shutdown.cancel();
        self.inner.permits.close();
        let deadline = tokio::time::Instant::now() + self.grace() + Duration::from_secs(1);
        while !self.live_groups().is_empty() && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        for g in self.live_groups() {
            let _ = killpg(Pid::from_raw(g), Signal::SIGKILL);
        }
    }

    fn live_groups(&self) -> Vec<i32> {
        self.inner
            .groups
            .lock()
            .map(|g| g.iter().copied().collect())
            .unwrap_or_default()
    }

    /// Runs `spec` to its end, its timeout, or `cancel`. Each output line (split on `\n`
    /// and `\r`) is passed to `on_line` as it arrives.
    pub async fn run(
        &self,
        spec: &Spec,
        cancel: CancellationToken,
        mut on_line: impl FnMut(StreamKind, &str) + Send,
    ) -> Result<Outcome, ExecError> {
        self.run_with(spec, cancel, Some(LineTap::Every(&mut on_line)))
            .await
    }

    /// [`Executor::run`], with lines split and passed on only when someone wants them: a
    /// command nobody watches line by line costs no allocation per line.
    ///
    /// Memory stays bounded whatever the child prints: the captured output is capped, the
    /// line queue between the pipe readers and `on_line` is bounded (a full queue makes the
    /// readers wait, so the pipe pushes back on the child), and lines are never kept.
    pub async fn run_with(
        &self,
        spec: &Spec,
        cancel: CancellationToken,
        mut on_line: Option<LineTap<'_>>,
    ) -> Result<Outcome, ExecError> {
        if self.inner.shutdown.is_cancelled() {
            return Err(ExecError::ShuttingDown);
        }
        let _permit = self
            .inner
            .permits
            .acquire()
            .await
            .map_err(|_| ExecError::ShuttingDown)?;
        let limits = self.limits();
        let mut cmd = command(spec);
        let report = match &spec.isolation {
            Some(setup) => {
                let (read, write) =
                    isolation::report_pipe().map_err(|source| ExecError::Spawn {
                        binary: spec.binary.display().to_string(),
                        source,
                    })?;
                let setup = Arc::clone(setup);
                let fd = write.as_raw_fd();
                // SAFETY: `apply` makes raw syscalls on memory allocated before the fork
                // and nothing else (no allocation, no locks), as a forked child of a
                // multithreaded process must.
                unsafe { cmd.pre_exec(move || setup.apply(fd)) };
                Some((read, write))
            }
            None => None,
        };
        let started = Instant::now();
        let spawned = cmd.spawn();
        // The parent's copy of the write end goes now, so a read sees only the child's.
        let report = report.map(|(read, _write)| read);
        let mut child = match spawned {
            Ok(child) => child,
            Err(source) => {
                if let (Some(setup), Some(read)) = (&spec.isolation, &report)
                    && let Some(e) = setup.spawn_error(read, &source)
                {
                    return Err(ExecError::Isolation(e));
                }
                return Err(ExecError::Spawn {
                    binary: spec.binary.display().to_string(),
                    source,
                });
            }
        };
        let pgid = child.id().map(|p| p as i32).unwrap_or(0);
        let guard = GroupGuard::new(self.inner.clone(), pgid, limits.grace);

        let (tx, mut rx) = mpsc::channel::<(StreamKind, Vec<u8>)>(CHUNK_QUEUE);
        let tx = on_line.is_some().then_some(tx);
        let max = limits.max_output;
        let out_task = spawn_reader(child.stdout.take(), StreamKind::Stdout, max, tx.as_ref());
        let err_task = spawn_reader(child.stderr.take(), StreamKind::Stderr, max, tx.as_ref());
        drop(tx);
        let mut splitter = Lines::default();
        let mut deliver = |kind: StreamKind, chunk: &[u8]| {
            if let Some(tap) = on_line.as_mut() {
                splitter.feed(kind, chunk, tap);
            }
        };

        let deadline = tokio::time::sleep(spec.timeout);
        tokio::pin!(deadline);
        let mut stopped = None;
        let mut lines_open = true;
        let status = loop {
            tokio::select! {
                status = child.wait() => break status,
                line = rx.recv(), if lines_open => match line {
                    Some((kind, l)) => deliver(kind, &l),
                    None => lines_open = false,
                },
                _ = &mut deadline, if stopped.is_none() => stopped = Some(StopReason::Timeout),
                _ = cancel.cancelled(), if stopped.is_none() => stopped = Some(StopReason::Cancelled),
                _ = self.inner.shutdown.cancelled(), if stopped.is_none() => stopped = Some(StopReason::Shutdown),
            }
            if stopped.is_some() {
                break guard.terminate(&mut child).await;
            }
        };
        // Whatever the leader left behind in its group goes with it.
        guard.kill();
        // The readers may still wait on a full line queue: keep draining it while they
        // finish, or they would sit out the whole grace and lose what they had left.
        let grace = limits.grace;
        let readers = async {
            (
                finish_reader(out_task, grace).await,
                finish_reader(err_task, grace).await,
            )
        };
        tokio::pin!(readers);
        let ((stdout, stdout_dropped), (stderr, stderr_dropped)) = loop {
            tokio::select! {
                done = &mut readers => break done,
                Some((kind, l)) = rx.recv(), if lines_open => deliver(kind, &l),
            }
        };
        while let Ok((kind, l)) = rx.try_recv() {
            deliver(kind, &l);
        }
        if let Some(tap) = on_line.as_mut() {
            splitter.finish(tap);
        }
        drop(guard);
        let (exit_code, signal) = match status {
            Ok(s) => {
                use std::os::unix::process::ExitStatusExt;
                (s.code(), s.signal())
            }
            Err(_) => (None, None),
        };
        Ok(Outcome {
            exit_code,
            signal,
            stdout,
            stderr,
            stdout_dropped,
            stderr_dropped,
            duration: started.elapsed(),
            stopped,
        })
    }
}

/// The child's command: `spec`'s argv and environment (nothing of the server's but
/// umockdev's two variables), no stdin, piped output, its own process group, and its
/// working directory ([`CHILD_DIR`], or `/` set by raw syscalls after the fork when
/// descriptors are inherited or an isolation applies).
fn command(spec: &Spec) -> Command {
    let mut cmd = Command::new(&spec.binary);
    cmd.args(&spec.args)
        .env_clear()
        .env("PATH", CHILD_PATH)
        .env("LANG", "C.UTF-8")
        .envs(umockdev_env().iter().map(|(k, v)| (k, v)))
        .envs(&spec.env)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    if spec.live_output {
        let preload = umockdev_env()
            .iter()
            .find(|(k, _)| k == "LD_PRELOAD")
            .map(|(_, v)| v.as_str());
        cmd.envs(live_output_env(preload));
    }
    if spec.isolation.is_none() && spec.inherit.is_empty() {
        // A fixed, documented directory: a relative name in an argument never reaches
        // the server's own working directory. (Here std can still use posix_spawn,
        // which changes directory inside glibc.)
        cmd.current_dir(CHILD_DIR);
    } else {
        // This child is forked and runs our code before exec: raw syscalls only. A libc
        // `chdir` may be interposed (umockdev's preload wraps it with a lock another
        // thread may have held at the fork: the child then never execs).
        let fds: Vec<RawFd> = spec.inherit.iter().map(|f| f.as_raw_fd()).collect();
        // SAFETY: chdir(2) on a static string and fcntl(2) on descriptors that stay
        // open in the parent until the spawn returns (the Arcs live in `spec`):
        // async-signal-safe, no allocation, no lock.
        unsafe {
            cmd.pre_exec(move || {
                if libc::syscall(libc::SYS_chdir, c"/".as_ptr()) == -1 {
                    return Err(std::io::Error::last_os_error());
                }
                for &fd in &fds {
                    if libc::syscall(libc::SYS_fcntl, fd, libc::F_SETFD, 0) == -1 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                Ok(())
            })
        };
    }
    cmd
}

/// The umockdev variables a child inherits when the server itself runs under umockdev's
/// preload (tests and demos of emulated boards): the child then sees the same emulated
/// devices. Only these two, only with exactly umockdev's preload library, and only from
/// the server's own environment — which its operator controls, not the config or an
/// agent (the config's `env:` still refuses `LD_*`). The start-up log warns when it
/// applies.
pub fn umockdev_env() -> &'static [(String, String)] {
    static ENV: std::sync::OnceLock<Vec<(String, String)>> = std::sync::OnceLock::new();
    ENV.get_or_init(|| {
        let preload = std::env::var("LD_PRELOAD").unwrap_or_default();
        let dir = std::env::var("UMOCKDEV_DIR").unwrap_or_default();
        let is_umockdev = preload.rsplit('/').next().is_some_and(|lib| {
            lib == "libumockdev-preload.so.0" || lib == "libumockdev-preload.so"
        });
        if is_umockdev && !dir.is_empty() {
            vec![
                ("LD_PRELOAD".to_owned(), preload),
                ("UMOCKDEV_DIR".to_owned(), dir),
            ]
        } else {
            Vec::new()
        }
    })
}

/// Whether this host lets gatecmd build isolated views with `roots`: a throw-away child
/// builds an empty view (no entries, no node) and exits right after, running nothing.
/// `gatecmd check` and the start-up log use it to say exactly what is missing. It lives
/// here, not in `src/isolation/`, because only the executor spawns processes.
pub fn probe_isolation(roots: &Roots) -> Result<Privilege, IsolationError> {
    use std::os::unix::process::CommandExt;
    let privilege = Privilege::current();
    let setup = Arc::new(Setup::empty(roots, privilege)?);
    let (read, write) = isolation::report_pipe()
        .map_err(|e| IsolationError::Setup(format!("isolation: cannot create a pipe: {e}")))?;
    let report = write.as_raw_fd();
    let child_setup = Arc::clone(&setup);
    // Never executed: the child ends in `pre_exec`.
    let mut cmd = std::process::Command::new("/");
    // SAFETY: the closure makes raw syscalls on memory prepared before the fork, then
    // ends the child without returning to std's exec path.
    unsafe {
        cmd.pre_exec(move || {
            child_setup.apply(report)?;
            libc::_exit(0)
        });
    }
    let spawned = cmd.spawn();
    drop(write);
    match spawned {
        Ok(mut child) => {
            let _ = child.wait();
            Ok(privilege)
        }
        Err(e) => Err(setup.spawn_error(&read, &e).unwrap_or_else(|| {
            IsolationError::Setup(format!("isolation: the probe could not start: {e}"))
        })),
    }
}

/// Owns a child's process group while it may be alive: kills it on drop.
struct GroupGuard {
    inner: Arc<Inner>,
    pgid: i32,
    /// The grace of the run's limits.
    grace: Duration,
}

impl GroupGuard {
    fn new(inner: Arc<Inner>, pgid: i32, grace: Duration) -> Self {
        if pgid > 0
            && let Ok(mut g) = inner.groups.lock()
        {
            g.insert(pgid);
        }
        GroupGuard { inner, pgid, grace }
    }

    fn kill(&self) {
        if self.pgid > 0 {
            let _ = killpg(Pid::from_raw(self.pgid), Signal::SIGKILL);
        }
    }

    /// SIGTERM to the group; SIGKILL if the leader is still there after the grace.
    async fn terminate(
        &self,
        child: &mut tokio::process::Child,
    ) -> std::io::Result<std::process::ExitStatus> {
        if self.pgid > 0 {
            let _ = killpg(Pid::from_raw(self.pgid), Signal::SIGTERM);
        }
        match tokio::time::timeout(self.grace, child.wait()).await {
            Ok(status) => status,
            Err(_) => {
                self.kill();
                child.wait().await
            }
        }
    }
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        self.kill();
        if let Ok(mut g) = self.inner.groups.lock() {
            g.remove(&self.pgid);
        }
    }
}
