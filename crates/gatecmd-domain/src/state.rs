//! The state every session shares: the configuration in force, the executor, the device
//! registry, the lock manager, the audit log and staging. It sits below the tools and the
//! MCP handler so that they all read it without importing each other.

mod leased_boards;
mod lost_devices;
mod reload;

use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use dashmap::DashMap;

use crate::audit::Audit;
use crate::config::Config;
use crate::exec::{ExecLimits, Executor};
use crate::limits::permits::{Permit, Permits};
use crate::locks::{LockManager, LockSettings};
use gatecmd_devices::Registry;

pub use leased_boards::stranded_leases;
pub use lost_devices::watch_lost_devices;
pub use reload::{RESTART_ONLY, RestartOnly, restart_only_changes};

/// State shared by every session: the one source of truth the handlers read.
pub struct AppState {
    // Every request reads it; a reload replaces it whole. Readers never block the reload
    // nor each other, and a reader keeps the snapshot it loaded for its whole call.
    config: ArcSwap<Config>,
    pub executor: Executor,
    /// Attached devices; written only by the device monitor.
    pub registry: Registry,
    pub locks: LockManager,
    /// Where decisions are recorded (src/audit.rs); disabled unless set with `with_audit`.
    pub audit: Audit,
    /// Per-client command slots (`limits.max_concurrent_per_client`), resized on reload.
    client_slots: DashMap<String, Permits>,
    /// File staging's per-file and per-root locks.
    pub staging: crate::staging::Staging,
    /// Ticks when the configuration is replaced (the commands resource changed).
    config_changed: tokio::sync::broadcast::Sender<()>,
    /// Board match queue, power states and the console hook (src/boards/).
    pub boards: crate::boards::Boards,
    /// Board serial consoles (src/console/): capture, reading, writing.
    pub consoles: crate::console::Consoles,
    /// Boot reports, fed by the consoles and started by the power actions (src/boots/).
    pub boots: crate::boards::boot_reports::Boots,
    /// Commands running now, for the bench page (src/running.rs).
    pub running: crate::jobs::running::Running,
    /// What the `/metrics` scrape reads beyond this state (the open sessions).
    pub metrics: gatecmd_core::metrics::Probes,
    /// Commands that outlive their call (src/jobs/).
    pub jobs: crate::jobs::Jobs,
    /// Requests waiting for an approver's yes, and the last decisions (src/approvals/).
    pub approvals: crate::approvals::Approvals,
    /// Per-client shares of subscriptions, streams, unread answers, waiting reads.
    pub quotas: crate::limits::quotas::Quotas,
    /// The lab beyond this host: its directory (from the labgrid coordinator) and the
    /// lab waiters of other hosts queued here (withdrawable).
    pub lab: crate::lab::Lab,
}

/// What a reload applied, and what it could not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reloaded {
    /// Restart-only keys whose new value waits for the next restart ([`RESTART_ONLY`]).
    pub restart_only: Vec<&'static str>,
}

impl AppState {
    /// State for `config`, with an empty registry (start a monitor on it to fill it).
    pub fn new(config: Config) -> Arc<Self> {
        Self::with_registry(config, Registry::new())
    }

    /// State for `config` reading devices from `registry`.
    pub fn with_registry(config: Config, registry: Registry) -> Arc<Self> {
        Self::with_audit(config, registry, Audit::disabled())
    }

    /// State for `config` reading devices from `registry` and recording its decisions and
    /// every lock event in `audit` (src/audit.rs).
    pub fn with_audit(config: Config, registry: Registry, audit: Audit) -> Arc<Self> {
        let limits = exec_limits(&config);
        let executor = Executor::new(limits.max_children, limits.max_output, limits.grace);
        let locks = LockManager::new(LockSettings::from(&config.leases));
        // Every lease event into the audit log (or, with the file off, into the bench
        // page's recent decisions only); the task ends with the lock manager.
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(crate::audit::record_lock_events(
                audit.clone(),
                locks.subscribe(),
            ));
        }
        // Consoles are captured from the start; their users are the boards' lease holders.
        let consoles = crate::console::Consoles::new(
            Default::default(),
            crate::boards::consoles::access(locks.clone()),
        );
        // Every captured byte also goes to the boot reports, from the first one on.
        let boots = crate::boards::boot_reports::Boots::new(config.boots);
        boots.configure(&config);
        let tap = boots.clone();
        consoles.set_tap(std::sync::Arc::new(move |board: &str, bytes: &[u8]| {
            tap.feed(board, bytes)
        }));
        if tokio::runtime::Handle::try_current().is_ok() {
            boots.spawn_ticker();
        }
        consoles.start(crate::boards::consoles::wanted(&config), Some(&registry));
        let boards = crate::boards::Boards::default();
        let config_jobs = config.jobs;
        crate::boards::consoles::show_in(&boards, &consoles);
        Arc::new(AppState {
            config: ArcSwap::from_pointee(config),
            executor,
            registry,
            locks,
            audit,
            client_slots: DashMap::new(),
            staging: crate::staging::Staging::default(),
            config_changed: tokio::sync::broadcast::channel(16).0,
            boards,
            consoles,
            boots,
            running: Default::default(),
            metrics: Default::default(),
            jobs: crate::jobs::Jobs::new(config_jobs),
            approvals: Default::default(),
            quotas: Default::default(),
            lab: Default::default(),
        })
    }

    /// A command slot for `client`, or `None` when it already runs its maximum.
    pub fn client_slot(&self, client: &str) -> Option<Permit> {
        self.client_slots
            .entry(client.to_string())
            // Read under the map's lock, so a reload that swapped the config before
            // resizing every client's slots either finds this entry or made it new-sized.
            .or_insert_with(|| Permits::new(self.config().limits.max_concurrent_per_client))
            .clone()
            .try_acquire()
    }

    /// The configuration in force now.
    pub fn config(&self) -> Arc<Config> {
        self.config.load_full()
    }

    /// Replaces the configuration (after it was validated) and applies it: executor
    /// limits, lease TTLs, client slots and audit rotation at once; everything read per
    /// call with the next call. Returns the restart-only keys that changed.
    pub fn replace_config(&self, config: Config) -> Reloaded {
        let restart_only = restart_only_changes(&self.config(), &config);
        self.audit.configure(&config.audit);
        self.executor.set_limits(exec_limits(&config));
        self.locks.set_settings(LockSettings::from(&config.leases));
        self.jobs.set_settings(config.jobs);
        // A board that keeps its console keeps its boots; the patterns follow the config.
        self.boots.configure(&config);
        // An unchanged console keeps its capture and ring; a changed one starts over.
        self.consoles.start(
            crate::boards::consoles::wanted(&config),
            Some(&self.registry),
        );
        let per_client = config.limits.max_concurrent_per_client;
        self.config.store(Arc::new(config));
        // After the store: a slot made from now on reads the new size itself.
        for slots in self.client_slots.iter() {
            slots.resize(per_client);
        }
        // An error only means nobody listens.
        let _ = self.config_changed.send(());
        Reloaded { restart_only }
    }

    /// Ticks each time the configuration is replaced.
    pub fn config_changes(&self) -> tokio::sync::broadcast::Receiver<()> {
        self.config_changed.subscribe()
    }
}

fn exec_limits(config: &Config) -> ExecLimits {
    ExecLimits {
        max_children: config.limits.max_concurrent_children,
        max_output: config.limits.max_output_bytes,
        grace: Duration::from_secs(config.limits.kill_grace_secs),
    }
}
