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

/// Every live sandbox by id.
#[derive(Default)]
pub struct Registry {
    sandboxes: Mutex<HashMap<String, Arc<Sandbox>>>,
}

impl Registry {
    /// Adds a sandbox.
    pub fn insert(&self, sandbox: Arc<Sandbox>) {
        lock(&self.sandboxes).insert(sandbox.id.clone(), sandbox);
    }

    /// The sandbox `id` if `tenant` owns it.
    pub fn owned(&self, tenant: usize, id: &str) -> Option<Arc<Sandbox>> {
        lock(&self.sandboxes)
            .get(id)
            .filter(|s| s.tenant == tenant)
            .cloned()
    }

    /// The sandbox `id`, whoever owns it (in-sandbox calls prove access
    /// with its token instead).
    pub fn get(&self, id: &str) -> Option<Arc<Sandbox>> {
        lock(&self.sandboxes).get(id).cloned()
    }

    /// Takes the sandbox `id` out if `tenant` owns it.
    pub fn remove_owned(&self, tenant: usize, id: &str) -> Option<Arc<Sandbox>> {
        let mut map = lock(&self.sandboxes);
        if map.get(id).is_some_and(|s| s.tenant == tenant) {
            return map.remove(id);
        }
        None
    }

    /// `tenant`'s sandboxes.
    pub fn of(&self, tenant: usize) -> Vec<Arc<Sandbox>> {
        let mut list: Vec<_> = lock(&self.sandboxes)
            .values()
            .filter(|s| s.tenant == tenant)
            .cloned()
            .collect();
        list.sort_by_key(|s| s.started_at);
        list
    }

    /// How many sandboxes `tenant` has.
    pub fn count(&self, tenant: usize) -> usize {
        lock(&self.sandboxes)
            .values()
            .filter(|s| s.tenant == tenant)
            .count()
    }

    /// Takes out every sandbox past its end.
    pub fn take_expired(&self) -> Vec<Arc<Sandbox>> {
        let now = Utc::now();
        let mut map = lock(&self.sandboxes);
        let expired: Vec<String> = map
            .values()
            .filter(|s| s.end_at() <= now)
            .map(|s| s.id.clone())
            .collect();
        expired.iter().filter_map(|id| map.remove(id)).collect()
    }

    /// Takes out every sandbox.
    pub fn take_all(&self) -> Vec<Arc<Sandbox>> {
        lock(&self.sandboxes).drain().map(|(_, s)| s).collect()
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
