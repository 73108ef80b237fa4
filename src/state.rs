//! The state every session shares: the configuration in force, the executor, the device
//! registry, the lock manager, the audit log and staging. It sits below the tools and the
//! MCP handler so that they all read it without importing each other.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use dashmap::DashMap;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::audit::Audit;
use crate::config::Config;
use crate::devices::Registry;
use crate::exec::Executor;
use crate::locks::{LockManager, LockSettings};

/// State shared by every session: the one source of truth the handlers read.
pub struct AppState {
    // A std lock: readers clone the Arc and never hold it across an await.
    config: RwLock<Arc<Config>>,
    pub executor: Executor,
    /// Attached devices; written only by the device monitor.
    pub registry: Registry,
    pub locks: LockManager,
    /// Where decisions are recorded (src/audit.rs); disabled unless set with `with_audit`.
    pub audit: Audit,
    /// Per-client command slots (`limits.max_concurrent_per_client`).
    client_slots: DashMap<String, Arc<Semaphore>>,
    /// File staging's per-file and per-root locks.
    pub staging: crate::staging::Staging,
    /// Ticks when the configuration is replaced (the commands resource changed).
    config_changed: tokio::sync::broadcast::Sender<()>,
    /// Unfiltered `list_devices` answers while nothing they show has changed.
    pub device_lists: crate::tools::list_cache::ListCache,
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
        let executor = Executor::new(
            config.limits.max_concurrent_children,
            config.limits.max_output_bytes,
            Duration::from_secs(config.limits.kill_grace_secs),
        );
        let locks = LockManager::new(lock_settings(&config.leases));
        if audit.is_enabled() {
            // Every lease event into the audit log; the task ends with the lock manager.
            tokio::spawn(crate::audit::record_lock_events(
                audit.clone(),
                locks.subscribe(),
            ));
        }
        Arc::new(AppState {
            config: RwLock::new(Arc::new(config)),
            executor,
            registry,
            locks,
            audit,
            client_slots: DashMap::new(),
            staging: crate::staging::Staging::default(),
            config_changed: tokio::sync::broadcast::channel(16).0,
            device_lists: Default::default(),
        })
    }

    /// A command slot for `client`, or `None` when it already runs its maximum.
    pub fn client_slot(&self, client: &str) -> Option<OwnedSemaphorePermit> {
        let max = self.config().limits.max_concurrent_per_client;
        let sem = self
            .client_slots
            .entry(client.to_string())
            .or_insert_with(|| Arc::new(Semaphore::new(max)))
            .clone();
        sem.try_acquire_owned().ok()
    }

    /// The configuration in force now.
    pub fn config(&self) -> Arc<Config> {
        match self.config.read() {
            Ok(c) => c.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// Replaces the configuration (after it was validated).
    pub fn replace_config(&self, config: Config) {
        // New rotation limits apply at once; a new `state_dir` only at restart.
        self.audit.configure(&config.audit);
        match self.config.write() {
            Ok(mut c) => *c = Arc::new(config),
            Err(poisoned) => *poisoned.into_inner() = Arc::new(config),
        }
        // An error only means nobody listens.
        let _ = self.config_changed.send(());
    }

    /// Ticks each time the configuration is replaced.
    pub fn config_changes(&self) -> tokio::sync::broadcast::Receiver<()> {
        self.config_changed.subscribe()
    }
}

/// The lock manager's settings from the config's `leases:` section (at start, and
/// again for `LockManager::set_settings` on reload).
pub(crate) fn lock_settings(leases: &crate::config::LeaseSettings) -> LockSettings {
    LockSettings {
        default_ttl: Duration::from_secs(leases.default_ttl_secs),
        max_ttl: Duration::from_secs(leases.max_ttl_secs),
        max_leases_per_client: leases.max_leases_per_client,
        max_waiters_per_client: leases.max_waiters_per_client,
        max_note_bytes: leases.max_note_bytes,
        max_listed: leases.max_listed,
    }
}
