//! The sandboxes a server holds: who owns each, when each ends, and the
//! reaper that ends them on time.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use dockhand::kernel::Kernel;
use dockhand::session::Session;

use super::interpreter::Contexts;
use super::lock;
use super::process::Processes;
use super::watch::Watchers;

/// One sandbox: a session (and, for kernel templates, its kernel).
pub struct Sandbox {
    /// Its id, as clients name it.
    pub id: String,
    /// The key that made it; no other key sees it.
    pub tenant: usize,
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
}

/// What a new sandbox is made of.
pub struct NewSandbox {
    pub id: String,
    pub tenant: usize,
    pub template: String,
    pub metadata: BTreeMap<String, String>,
    pub envs: BTreeMap<String, String>,
    pub internet: bool,
    pub cpus: u32,
    pub memory_mb: u32,
    pub timeout: Duration,
    pub session: Session,
    pub kernel: Option<Kernel>,
}

impl Sandbox {
    /// A sandbox from its parts, with fresh tokens.
    pub fn new(parts: NewSandbox) -> Sandbox {
        let now = Utc::now();
        Sandbox {
            id: parts.id,
            tenant: parts.tenant,
            template: parts.template,
            envd_token: token(),
            traffic_token: token(),
            metadata: parts.metadata,
            envs: parts.envs,
            internet: parts.internet,
            cpus: parts.cpus,
            memory_mb: parts.memory_mb,
            started_at: now,
            end_at: Mutex::new(now + to_chrono(parts.timeout)),
            session: parts.session,
            kernel: parts.kernel,
            processes: Processes::default(),
            contexts: Contexts::default(),
            watchers: Watchers::default(),
        }
    }

    /// When it will be killed.
    pub fn end_at(&self) -> DateTime<Utc> {
        *lock(&self.end_at)
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

/// Every live sandbox by id, and the slots of those being created.
#[derive(Default)]
pub struct Registry {
    sandboxes: Mutex<Live>,
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
        let mut live = lock(&self.sandboxes);
        let map = &mut live.by_id;
        if map.get(id).is_some_and(|s| s.tenant == tenant) {
            return map.remove(id);
        }
        None
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

    /// Takes out every sandbox past its end.
    pub fn take_expired(&self) -> Vec<Arc<Sandbox>> {
        let now = Utc::now();
        let mut live = lock(&self.sandboxes);
        let map = &mut live.by_id;
        let expired: Vec<String> = map
            .values()
            .filter(|s| s.end_at() <= now)
            .map(|s| s.id.clone())
            .collect();
        expired.iter().filter_map(|id| map.remove(id)).collect()
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

/// Ends sandboxes at their timeout, checking twice a second.
pub async fn reap_forever(registry: Arc<Registry>) {
    let mut tick = tokio::time::interval(Duration::from_millis(500));
    loop {
        tick.tick().await;
        for sandbox in registry.take_expired() {
            tracing::info!(sandbox = %sandbox.id, "timeout reached: killing the sandbox");
            tokio::spawn(async move { sandbox.close().await });
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
