//! One watch over every pod this process owns, shared by every wait.
//!
//! A wait used to open a watch of its own (a read, then a watch by name);
//! with thousands of sandboxes that is thousands of open watches on the
//! API server. Here one `kube::runtime::watcher` over the owner label keeps
//! the latest state of each pod, and a wait is woken when its pod changes.
//! A pod the watch has not seen (not labelled as ours, or the watch is
//! failing) is read directly, and waited on through a watch by name.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use kube::Api;

use super::api::{is_not_found, Call};
use super::owner::OWNER_LABEL;
use crate::error::{Error, Result};

/// How long a wait trusts the shared watch to show a pod it has not seen
/// yet (one just created) before reading it directly.
const FIRST_SIGHT: Duration = Duration::from_secs(2);
/// How long a wait goes without news of its pod before reading it directly:
/// a safety net, never the way a wait normally ends.
const QUIET: Duration = Duration::from_secs(30);
/// Names of deleted pods remembered, so a wait starting late still sees
/// the deletion (names are never reused).
const GONE_KEPT: usize = 4096;

/// The latest state of this process's pods, kept by one watch.
pub(super) struct PodWatch {
    known: Arc<Mutex<Known>>,
    pods: Api<Pod>,
    selector: String,
    /// Started by the first wait, on its runtime; started again by a later
    /// wait when that runtime has ended (a client kept across runtimes).
    pump: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl Drop for PodWatch {
    fn drop(&mut self) {
        if let Some(pump) = self.pump.get_mut().ok().and_then(Option::take) {
            pump.abort();
        }
    }
}

/// Marks the watch failing when its task ends however it ends (aborted,
/// its runtime shut down), so waits stop counting on it.
struct PumpEnded(Arc<Mutex<Known>>);

impl Drop for PumpEnded {
    fn drop(&mut self) {
        let mut known = lock(&self.0);
        known.failing = true;
        known.changed_all();
    }
}

#[derive(Default)]
struct Known {
    pods: HashMap<String, Arc<Pod>>,
    gone: HashSet<String>,
    gone_order: VecDeque<String>,
    /// Names seen during a re-list (after the watch restarted): the pods
    /// not among them were deleted while it was away.
    relisting: Option<HashSet<String>>,
    /// The watch's last attempt failed (RBAC, the server away): waits read
    /// their pods directly until it works again.
    failing: bool,
    /// One channel per pod somebody waits on; its value changes with the pod.
    waiters: HashMap<String, tokio::sync::watch::Sender<u64>>,
}

impl Known {
    fn changed(&self, name: &str) {
        if let Some(tx) = self.waiters.get(name) {
            tx.send_modify(|n| *n += 1);
        }
    }

    fn changed_all(&self) {
        for tx in self.waiters.values() {
            tx.send_modify(|n| *n += 1);
        }
    }

    fn deleted(&mut self, name: &str) {
        self.pods.remove(name);
        if self.gone.insert(name.to_string()) {
            self.gone_order.push_back(name.to_string());
            if self.gone_order.len() > GONE_KEPT {
                if let Some(old) = self.gone_order.pop_front() {
                    self.gone.remove(&old);
                }
            }
        }
        self.changed(name);
    }

    fn applied(&mut self, pod: Pod) {
        let Some(name) = pod.metadata.name.clone() else {
            return;
        };
        if let Some(seen) = &mut self.relisting {
            seen.insert(name.clone());
        }
        self.pods.insert(name.clone(), Arc::new(pod));
        self.changed(&name);
    }

    fn relisted(&mut self) {
        let Some(seen) = self.relisting.take() else {
            return;
        };
        let vanished: Vec<String> = self
            .pods
            .keys()
            .filter(|name| !seen.contains(*name))
            .cloned()
            .collect();
        for name in vanished {
            self.deleted(&name);
        }
    }
}

/// What the shared watch knows of one pod.
enum Sight {
    Seen(Arc<Pod>),
    Gone,
    Unknown,
}

fn lock(known: &Mutex<Known>) -> std::sync::MutexGuard<'_, Known> {
    known.lock().unwrap_or_else(|p| p.into_inner())
}

impl PodWatch {
    /// A watch over the pods labelled as `owner`'s in `pods`' namespace,
    /// started by the first wait.
    pub(super) fn new(pods: Api<Pod>, owner: &str) -> PodWatch {
        PodWatch {
            known: Arc::new(Mutex::new(Known::default())),
            pods,
            selector: format!("{OWNER_LABEL}={owner}"),
            pump: Mutex::new(None),
        }
    }

    fn ensure_running(&self) {
        let mut pump = self.pump.lock().unwrap_or_else(|p| p.into_inner());
        if pump.as_ref().is_some_and(|p| !p.is_finished()) {
            return;
        }
        let config = watcher::Config::default().labels(&self.selector);
        let stream = watcher::watcher(self.pods.clone(), config).default_backoff();
        let state = self.known.clone();
        *pump = Some(tokio::spawn(async move {
            let _ended = PumpEnded(state.clone());
            let mut stream = std::pin::pin!(stream);
            while let Some(event) = stream.next().await {
                let mut known = lock(&state);
                let was_failing = std::mem::replace(&mut known.failing, false);
                match event {
                    Ok(Event::Apply(pod) | Event::InitApply(pod)) => known.applied(pod),
                    Ok(Event::Delete(pod)) => {
                        if let Some(name) = pod.metadata.name {
                            known.deleted(&name);
                        }
                    }
                    Ok(Event::Init) => known.relisting = Some(HashSet::new()),
                    Ok(Event::InitDone) => known.relisted(),
                    Err(e) => {
                        if !was_failing {
                            tracing::debug!(error = %e, "the shared pod watch failed; waits read their pods directly");
                        }
                        known.failing = true;
                        known.changed_all();
                    }
                }
            }
        }));
    }

    /// The latest state of pod `name` the watch has seen.
    pub(super) fn latest(&self, name: &str) -> Option<Arc<Pod>> {
        lock(&self.known).pods.get(name).cloned()
    }

    fn sight(&self, name: &str) -> (Sight, bool) {
        let known = lock(&self.known);
        let sight = match known.pods.get(name) {
            Some(pod) => Sight::Seen(pod.clone()),
            None if known.gone.contains(name) => Sight::Gone,
            None => Sight::Unknown,
        };
        (sight, known.failing)
    }

    fn subscribe(&self, name: &str) -> Subscription<'_> {
        let mut known = lock(&self.known);
        let rx = known
            .waiters
            .entry(name.to_string())
            .or_insert_with(|| tokio::sync::watch::channel(0).0)
            .subscribe();
        Subscription {
            watch: self,
            name: name.to_string(),
            rx,
        }
    }

    /// Waits until `decide` answers for pod `name`; a deleted pod is
    /// [`Error::ContainerGone`].
    pub(super) async fn wait<T>(
        &self,
        namespace: &str,
        name: &str,
        mut decide: impl FnMut(&Pod) -> Option<Result<T>>,
    ) -> Result<T> {
        let gone = || Error::ContainerGone {
            id: name.to_string(),
        };
        self.ensure_running();
        let mut subscription = self.subscribe(name);
        let mut seen = false;
        loop {
            let (sight, failing) = self.sight(name);
            match sight {
                Sight::Seen(pod) => {
                    seen = true;
                    if let Some(done) = decide(&pod) {
                        return done;
                    }
                }
                Sight::Gone => return Err(gone()),
                Sight::Unknown => {}
            }
            let patience = if failing {
                Duration::ZERO
            } else if seen {
                QUIET
            } else {
                FIRST_SIGHT
            };
            if tokio::time::timeout(patience, subscription.rx.changed())
                .await
                .is_ok()
            {
                continue;
            }
            // No news: read the pod itself.
            let pod = match self.pods.get(name).await {
                Ok(pod) => pod,
                Err(e) if is_not_found(&e) => return Err(gone()),
                Err(e) => return Err(Call::new("get", "pods", namespace, name).error(e)),
            };
            if let Some(done) = decide(&pod) {
                return done;
            }
            let (sight, failing) = self.sight(name);
            if failing || matches!(sight, Sight::Unknown) {
                // Not a pod the shared watch sees (not labelled as ours),
                // or it cannot watch now: a watch of its own, by name.
                drop(subscription);
                return super::watch::watch_until(&self.pods, "pods", namespace, name, decide)
                    .await;
            }
        }
    }
}

/// A wait's interest in one pod; the last one gone removes its channel.
struct Subscription<'a> {
    watch: &'a PodWatch,
    name: String,
    rx: tokio::sync::watch::Receiver<u64>,
}

impl Drop for Subscription<'_> {
    fn drop(&mut self) {
        let mut known = lock(&self.watch.known);
        // Our own receiver still counts here.
        if known
            .waiters
            .get(&self.name)
            .is_some_and(|tx| tx.receiver_count() <= 1)
        {
            known.waiters.remove(&self.name);
        }
    }
}
