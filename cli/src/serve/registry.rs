//! The sandboxes a server holds: who owns each, when each ends, and the
//! reaper that ends them on time.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use dockhand::kernel::Kernel;
use dockhand::session::{PauseMode, Session};
use dockhand::State;

use super::contexts::Contexts;
use super::lock;
use super::process_table::Processes;
use super::state::{Row, Store};
use super::usage::Series;
use super::watchers::Watchers;

/// One sandbox: a session (and, for kernel templates, its kernel).
pub struct Sandbox {
    /// Its id, as clients name it.
    pub id: String,
    /// The key that made it; no other key sees it.
    pub tenant: usize,
    /// That key's hash, as a state directory stores the owner.
    pub key_hash: String,
    /// The template it came from.
    pub template: String,
    /// The token in-sandbox calls must carry (`X-Access-Token`).
    pub envd_token: String,
    /// The token of calls that carry no envd token (the interpreter's
    /// `/contexts`): `E2B-Traffic-Access-Token`.
    pub traffic_token: String,
    /// The client's labels.
    pub metadata: BTreeMap<String, String>,
    /// Environment for every command and run.
    pub envs: BTreeMap<String, String>,
    /// Whether it may reach the internet (some hosts, or all).
    pub internet: bool,
    /// Whether its ports are reached without its traffic token
    /// (`network.allowPublicTraffic` at its create).
    pub public: bool,
    /// Reported resources.
    pub cpus: u32,
    /// Reported memory.
    pub memory_mb: u32,
    /// When it was handed over.
    pub started_at: DateTime<Utc>,
    end_at: Mutex<DateTime<Utc>>,
    /// Its container.
    pub session: Session,
    /// Its kernel, for kernel templates.
    pub kernel: Option<Kernel>,
    /// Commands started through envd's process service.
    pub processes: Processes,
    /// The interpreter's contexts.
    pub contexts: Contexts,
    /// Directory watchers of the sync SDK.
    pub watchers: Watchers,
    /// Its CPU, memory and disk over time.
    pub usage: Series,
    /// What its timeout does: pause it (keeping memory, or files only)
    /// instead of killing it.
    pub on_timeout_pause: Option<Option<PauseMode>>,
    /// A call into it while it is paused resumes it first.
    pub auto_resume: bool,
    /// One pause or resume at a time.
    transition: tokio::sync::Mutex<()>,
}

/// What a new sandbox is made of.
pub struct NewSandbox {
    pub id: String,
    pub tenant: usize,
    pub key_hash: String,
    pub template: String,
    pub metadata: BTreeMap<String, String>,
    pub envs: BTreeMap<String, String>,
    pub internet: bool,
    pub public: bool,
    pub cpus: u32,
    pub memory_mb: u32,
    pub timeout: Duration,
    pub session: Session,
    pub kernel: Option<Kernel>,
    pub on_timeout_pause: Option<Option<PauseMode>>,
    pub auto_resume: bool,
}

impl Sandbox {
    /// A sandbox from its parts, with fresh tokens.
    pub fn new(parts: NewSandbox) -> Sandbox {
        let now = Utc::now();
        Sandbox {
            id: parts.id,
            tenant: parts.tenant,
            key_hash: parts.key_hash,
            template: parts.template,
            envd_token: token(),
            traffic_token: token(),
            metadata: parts.metadata,
            envs: parts.envs,
            internet: parts.internet,
            public: parts.public,
            cpus: parts.cpus,
            memory_mb: parts.memory_mb,
            started_at: now,
            end_at: Mutex::new(now + to_chrono(parts.timeout)),
            session: parts.session,
            kernel: parts.kernel,
            processes: Processes::default(),
            contexts: Contexts::default(),
            watchers: Watchers::default(),
            usage: Series::default(),
            on_timeout_pause: parts.on_timeout_pause,
            auto_resume: parts.auto_resume,
            transition: tokio::sync::Mutex::new(()),
        }
    }

    /// The sandbox as a state directory keeps it.
    pub fn row(&self) -> Row {
        let paused = self.is_paused();
        Row {
            id: self.id.clone(),
            key_hash: self.key_hash.clone(),
            template: self.template.clone(),
            envd_token: self.envd_token.clone(),
            traffic_token: self.traffic_token.clone(),
            metadata: serde_json::to_string(&self.metadata).unwrap_or_default(),
            envs: serde_json::to_string(&self.envs).unwrap_or_default(),
            cpus: self.cpus,
            memory_mb: self.memory_mb,
            started_at: self.started_at,
            end_at: self.end_at(),
            container_id: self.session.describe().container_id.unwrap_or_default(),
            on_timeout_pause: match self.on_timeout_pause {
                None => String::new(),
                Some(None) => "auto".into(),
                Some(Some(mode)) => mode.to_string(),
            },
            auto_resume: self.auto_resume,
            paused,
            public: self.public,
        }
    }

    /// Whether it is paused.
    pub fn is_paused(&self) -> bool {
        self.session.state() == State::Paused
    }

    /// E2B's name of its state.
    pub fn state_name(&self) -> &'static str {
        if self.is_paused() {
            "paused"
        } else {
            "running"
        }
    }

    /// Pauses it: with `mode`, or (`None`) with its memory where the
    /// daemon can save it and on its files elsewhere. `Ok(false)` when it
    /// was paused already.
    pub async fn pause(&self, mode: Option<PauseMode>) -> dockhand::Result<bool> {
        let _one = self.transition.lock().await;
        if self.is_paused() {
            return Ok(false);
        }
        let attempt = |mode| async move {
            match &self.kernel {
                Some(kernel) => kernel.pause(mode).await.map(drop),
                None => self.session.pause(mode).await.map(drop),
            }
        };
        match mode {
            Some(mode) => attempt(mode).await?,
            None => match attempt(PauseMode::Memory).await {
                Err(dockhand::Error::PauseUnsupported { .. }) => {
                    attempt(PauseMode::Filesystem).await?
                }
                other => other?,
            },
        }
        if self.session.paused_mode() == Some(PauseMode::Filesystem) {
            // Its processes ended with it.
            self.processes.clear();
            self.watchers.clear();
        }
        Ok(true)
    }

    /// Resumes it; `Ok(false)` when it was running.
    pub async fn resume(&self) -> dockhand::Result<bool> {
        let _one = self.transition.lock().await;
        if !self.is_paused() {
            return Ok(false);
        }
        match &self.kernel {
            Some(kernel) => kernel.resume().await?,
            None => self.session.resume().await?,
        }
        self.usage.restart();
        Ok(true)
    }

    /// When it will be killed.
    pub fn end_at(&self) -> DateTime<Utc> {
        *lock(&self.end_at)
    }

    /// Sets its end (a restored sandbox's, as stored).
    pub fn set_end(&self, end: DateTime<Utc>) {
        *lock(&self.end_at) = end;
    }

    /// Sets its end to `timeout` from now (shorter or longer).
    pub fn set_timeout(&self, timeout: Duration) {
        *lock(&self.end_at) = Utc::now() + to_chrono(timeout);
    }

    /// Moves its end to `timeout` from now unless it is later already.
    pub fn extend(&self, timeout: Duration) {
        let mut end = lock(&self.end_at);
        *end = (*end).max(Utc::now() + to_chrono(timeout));
    }

    /// Removes its container (and kernel), ending what runs in it.
    pub async fn close(&self) {
        self.processes.clear();
        self.watchers.clear();
        // A kernel closes the session it runs in.
        let closed = match &self.kernel {
            Some(kernel) => kernel.close().await,
            None => self.session.close().await.map(drop),
        };
        if let Err(e) = closed {
            tracing::warn!(sandbox = %self.id, error = %e, "closing a sandbox");
        }
    }
}

fn to_chrono(d: Duration) -> chrono::Duration {
    chrono::Duration::from_std(d).unwrap_or(chrono::Duration::MAX)
}

/// A random token of 32 hex characters (128 bits from the OS's generator).
pub fn token() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

/// A new sandbox id: short, like E2B's, and unguessable enough not to
/// matter (access needs the key or the sandbox's token anyway).
pub fn sandbox_id() -> String {
    let raw = uuid::Uuid::new_v4().simple().to_string();
    format!("i{}", &raw[..19])
}

/// Every live sandbox by id, and the slots of those being created; with a
/// state directory, each change written through to it.
#[derive(Default)]
pub struct Registry {
    sandboxes: Mutex<Live>,
    store: Option<Arc<Store>>,
}

#[derive(Default)]
struct Live {
    by_id: HashMap<String, Arc<Sandbox>>,
    /// Slots taken by creates not finished yet, by tenant.
    creating: HashMap<usize, usize>,
}

/// Why a create was refused a slot.
#[derive(Debug, PartialEq, Eq)]
pub enum Full {
    /// The key has its limit of sandboxes (running and being created).
    Key(usize),
    /// The server has its limit, all keys together.
    Server(usize),
}

/// A place for one sandbox, counted from before its container exists: two
/// creates racing for a key's last place cannot both get it. Dropped
/// unfilled (the create failed, or its request went away), it is free again.
pub struct Slot<'a> {
    registry: &'a Registry,
    tenant: usize,
    filled: bool,
}

impl Slot<'_> {
    /// Puts the created sandbox in its place.
    pub fn fill(mut self, sandbox: Arc<Sandbox>) {
        let mut live = lock(&self.registry.sandboxes);
        release(&mut live, self.tenant);
        live.by_id.insert(sandbox.id.clone(), sandbox);
        self.filled = true;
    }
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        if !self.filled {
            release(&mut lock(&self.registry.sandboxes), self.tenant);
        }
    }
}

fn release(live: &mut Live, tenant: usize) {
    if let Some(n) = live.creating.get_mut(&tenant) {
        *n -= 1;
        if *n == 0 {
            live.creating.remove(&tenant);
        }
    }
}

impl Registry {
    /// A registry that writes through to `store`.
    pub fn with_store(store: Option<Arc<Store>>) -> Registry {
        Registry {
            store,
            ..Registry::default()
        }
    }

    /// The state directory's store, if the server has one.
    pub fn store(&self) -> Option<&Arc<Store>> {
        self.store.as_ref()
    }

    /// Writes a sandbox's current state to the store (kept sandboxes only:
    /// one that cannot outlive the server, under an egress policy, is not
    /// promised to). A failed write is logged: the sandbox works on.
    pub fn persist(&self, sandbox: &Sandbox) {
        let Some(store) = &self.store else { return };
        if !sandbox.session.config().is_kept() {
            return;
        }
        if let Err(e) = store.put(&sandbox.row()) {
            tracing::error!(sandbox = %sandbox.id, path = %store.path().display(), error = %e, "writing the state database");
        }
    }

    fn forget(&self, id: &str) {
        if let Some(store) = &self.store {
            if let Err(e) = store.remove(id) {
                tracing::error!(sandbox = %id, path = %store.path().display(), error = %e, "writing the state database");
            }
        }
    }

    /// Puts a sandbox restored from the state directory in place.
    pub fn adopt(&self, sandbox: Arc<Sandbox>) {
        lock(&self.sandboxes)
            .by_id
            .insert(sandbox.id.clone(), sandbox);
    }

    /// Takes a slot for one more sandbox of `tenant`, if neither the key's
    /// limit nor the server's is reached (creates in flight count).
    pub fn reserve(&self, tenant: usize, per_key: usize, total: usize) -> Result<Slot<'_>, Full> {
        let mut live = lock(&self.sandboxes);
        let creating: usize = live.creating.values().sum();
        if live.by_id.len() + creating >= total {
            return Err(Full::Server(total));
        }
        let mine = live.by_id.values().filter(|s| s.tenant == tenant).count()
            + live.creating.get(&tenant).copied().unwrap_or(0);
        if mine >= per_key {
            return Err(Full::Key(per_key));
        }
        *live.creating.entry(tenant).or_default() += 1;
        Ok(Slot {
            registry: self,
            tenant,
            filled: false,
        })
    }

    /// The sandbox `id` if `tenant` owns it.
    pub fn owned(&self, tenant: usize, id: &str) -> Option<Arc<Sandbox>> {
        lock(&self.sandboxes)
            .by_id
            .get(id)
            .filter(|s| s.tenant == tenant)
            .cloned()
    }

    /// The sandbox `id`, whoever owns it (in-sandbox calls prove access
    /// with its token instead).
    pub fn get(&self, id: &str) -> Option<Arc<Sandbox>> {
        lock(&self.sandboxes).by_id.get(id).cloned()
    }

    /// Takes the sandbox `id` out if `tenant` owns it.
    pub fn remove_owned(&self, tenant: usize, id: &str) -> Option<Arc<Sandbox>> {
        let removed = {
            let mut live = lock(&self.sandboxes);
            let map = &mut live.by_id;
            if map.get(id).is_none_or(|s| s.tenant != tenant) {
                return None;
            }
            map.remove(id)
        };
        self.forget(id);
        removed
    }

    /// `tenant`'s sandboxes.
    pub fn of(&self, tenant: usize) -> Vec<Arc<Sandbox>> {
        let mut list: Vec<_> = lock(&self.sandboxes)
            .by_id
            .values()
            .filter(|s| s.tenant == tenant)
            .cloned()
            .collect();
        list.sort_by_key(|s| s.started_at);
        list
    }

    /// Every sandbox, whoever owns it.
    pub fn all(&self) -> Vec<Arc<Sandbox>> {
        lock(&self.sandboxes).by_id.values().cloned().collect()
    }

    /// Every sandbox past its end: those to kill taken out, those to
    /// pause left in (with no end while paused).
    pub fn take_expired(&self) -> Expired {
        let now = Utc::now();
        let mut live = lock(&self.sandboxes);
        let map = &mut live.by_id;
        // A paused sandbox has no timeout: it waits for `connect` or a kill.
        let due: Vec<Arc<Sandbox>> = map
            .values()
            .filter(|s| s.end_at() <= now && !s.is_paused())
            .cloned()
            .collect();
        let mut expired = Expired::default();
        for sandbox in due {
            if let Some(mode) = sandbox.on_timeout_pause {
                // Not due again while the pause is under way; once paused
                // it has no end (reported a pause's lifetime ahead).
                *lock(&sandbox.end_at) = now + chrono::Duration::days(PAUSED_DAYS);
                expired.to_pause.push((sandbox, mode));
            } else if let Some(s) = map.remove(&sandbox.id) {
                expired.to_kill.push(s);
            }
        }
        drop(live);
        for s in &expired.to_kill {
            self.forget(&s.id);
        }
        expired
    }

    /// Takes out every sandbox.
    pub fn take_all(&self) -> Vec<Arc<Sandbox>> {
        lock(&self.sandboxes)
            .by_id
            .drain()
            .map(|(_, s)| s)
            .collect()
    }
}

/// Reads every running sandbox's resource use each `interval`, a few at
/// a time.
pub async fn sample_forever(registry: Arc<Registry>, interval: Duration) {
    use futures::StreamExt;
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        futures::stream::iter(registry.all())
            .for_each_concurrent(super::usage::AT_ONCE, |s| async move {
                super::usage::read(&s.usage, &s.session).await;
            })
            .await;
    }
}

/// How far ahead a paused sandbox's end is reported (it has none).
const PAUSED_DAYS: i64 = 30;

/// What the timeouts ended.
#[derive(Default)]
pub struct Expired {
    pub to_kill: Vec<Arc<Sandbox>>,
    pub to_pause: Vec<(Arc<Sandbox>, Option<PauseMode>)>,
}

/// Ends (or pauses) sandboxes at their timeout, checking twice a second.
pub async fn reap_forever(registry: Arc<Registry>) {
    let mut tick = tokio::time::interval(Duration::from_millis(500));
    loop {
        tick.tick().await;
        let expired = registry.take_expired();
        for sandbox in expired.to_kill {
            tracing::info!(sandbox = %sandbox.id, "timeout reached: killing the sandbox");
            tokio::spawn(async move { sandbox.close().await });
        }
        for (sandbox, mode) in expired.to_pause {
            tracing::info!(sandbox = %sandbox.id, "timeout reached: pausing the sandbox");
            let registry = registry.clone();
            tokio::spawn(async move {
                let paused = sandbox.pause(mode).await;
                registry.persist(&sandbox);
                if let Err(e) = paused {
                    // A sandbox that cannot pause is killed, as without the setting.
                    tracing::warn!(sandbox = %sandbox.id, error = %e, "pausing at the timeout failed: killing it");
                    if let Some(s) = registry.remove_owned(sandbox.tenant, &sandbox.id) {
                        s.close().await;
                    }
                }
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_count_creates_in_flight_and_free_when_dropped() {
        let registry = Registry::default();
        let a1 = registry.reserve(1, 2, 3).unwrap();
        let a2 = registry.reserve(1, 2, 3).unwrap();
        // The key's places are taken by creates that have not finished.
        assert_eq!(registry.reserve(1, 2, 3).err(), Some(Full::Key(2)));
        let b1 = registry.reserve(2, 2, 3).unwrap();
        // The server's are too, whoever asks.
        assert_eq!(registry.reserve(2, 2, 3).err(), Some(Full::Server(3)));
        drop(a1);
        let a3 = registry.reserve(1, 2, 3).unwrap();
        drop((a2, a3, b1));
        assert!(lock(&registry.sandboxes).creating.is_empty());
        assert!(registry.reserve(1, 2, 3).is_ok());
    }
}
