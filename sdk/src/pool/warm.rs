//! A bounded set of things made ahead of need (started containers, started
//! sessions, started code hosts), refilled in the background.
//!
//! Each item is handed out once and never comes back: the pool only ever
//! makes new ones. A failing refill is reported and retried with backoff;
//! takers then get `None` and start cold. Closing the pool (drop or
//! [`WarmPool::shutdown`]) discards what is ready and whatever a refill still
//! in flight brings back.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use futures::future::BoxFuture;
use tokio::sync::Notify;

use crate::error::Result;
use crate::progress::{Reporter, Stage};
use crate::util::lock;

/// Makes one item.
pub(crate) type Fill<T> = Arc<dyn Fn() -> BoxFuture<'static, Result<T>> + Send + Sync>;
/// Disposes of one item on shutdown (dropping it must also clean up).
pub(crate) type Discard<T> = Arc<dyn Fn(T) -> BoxFuture<'static, ()> + Send + Sync>;

const FIRST_BACKOFF: Duration = Duration::from_millis(200);
const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// What a pool has done so far; see [`SandboxPool::stats`](super::SandboxPool::stats).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PoolStats {
    /// The most items the pool holds or is making at once.
    pub size: usize,
    /// Items ready now.
    pub ready: usize,
    /// Items being made now.
    pub starting: usize,
    /// Items handed out.
    pub handed_over: u64,
    /// Takes that found nothing ready (the caller started cold).
    pub misses: u64,
    /// Items made.
    pub filled: u64,
    /// Refills that failed.
    pub fill_failures: u64,
    /// Why the last refill failed, if one did.
    pub last_failure: Option<String>,
}

struct Slots<T> {
    ready: VecDeque<T>,
    starting: usize,
    closed: bool,
}

struct Shared<T> {
    name: String,
    size: usize,
    slots: Mutex<Slots<T>>,
    /// Wakes the refill loop (after a take) and shutdown (after a fill);
    /// shared with the loop so it can wait without keeping the pool alive.
    changed: Arc<Notify>,
    handed_over: AtomicU64,
    misses: AtomicU64,
    filled: AtomicU64,
    fill_failures: AtomicU64,
    last_failure: Mutex<Option<String>>,
}

/// The pool; dropping it closes it.
pub(crate) struct WarmPool<T: Send + 'static> {
    shared: Arc<Shared<T>>,
    discard: Discard<T>,
}

impl<T: Send + 'static> WarmPool<T> {
    /// A pool of `size` items, filling at once in the background.
    pub(crate) fn new(
        name: String,
        size: usize,
        fill: Fill<T>,
        discard: Discard<T>,
        reporter: Reporter,
    ) -> Self {
        let shared = Arc::new(Shared {
            name,
            size,
            slots: Mutex::new(Slots {
                ready: VecDeque::with_capacity(size),
                starting: 0,
                closed: false,
            }),
            changed: Arc::new(Notify::new()),
            handed_over: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            filled: AtomicU64::new(0),
            fill_failures: AtomicU64::new(0),
            last_failure: Mutex::new(None),
        });
        if size > 0 {
            let changed = shared.changed.clone();
            tokio::spawn(refill(Arc::downgrade(&shared), changed, fill, reporter));
        }
        WarmPool { shared, discard }
    }

    /// A ready item, or `None` (the caller starts one cold).
    pub(crate) fn take(&self) -> Option<T> {
        let taken = {
            let mut slots = lock(&self.shared.slots);
            if slots.closed {
                None
            } else {
                slots.ready.pop_front()
            }
        };
        let counter = match taken {
            Some(_) => &self.shared.handed_over,
            None => &self.shared.misses,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        self.shared.changed.notify_waiters();
        self.shared.changed.notify_one();
        taken
    }

    pub(crate) fn stats(&self) -> PoolStats {
        let s = &self.shared;
        let slots = lock(&s.slots);
        PoolStats {
            size: s.size,
            ready: slots.ready.len(),
            starting: slots.starting,
            handed_over: s.handed_over.load(Ordering::Relaxed),
            misses: s.misses.load(Ordering::Relaxed),
            filled: s.filled.load(Ordering::Relaxed),
            fill_failures: s.fill_failures.load(Ordering::Relaxed),
            last_failure: lock(&s.last_failure).clone(),
        }
    }

    /// Waits until `n` items are ready (or `timeout` passes); for callers
    /// that want a warm start from the first take.
    pub(crate) async fn wait_ready(&self, n: usize, timeout: Duration) -> bool {
        let until = tokio::time::Instant::now() + timeout;
        loop {
            let changed = self.shared.changed.notified();
            if lock(&self.shared.slots).ready.len() >= n.min(self.shared.size) {
                return true;
            }
            if tokio::time::timeout_at(until, changed).await.is_err() {
                return false;
            }
        }
    }

    /// Closes the pool and disposes of every item, waiting for refills in
    /// flight to come back and be disposed of too.
    pub(crate) async fn shutdown(&self) {
        lock(&self.shared.slots).closed = true;
        self.shared.changed.notify_waiters();
        loop {
            let changed = self.shared.changed.notified();
            let (items, starting) = {
                let mut slots = lock(&self.shared.slots);
                (slots.ready.drain(..).collect::<Vec<_>>(), slots.starting)
            };
            futures::future::join_all(items.into_iter().map(|item| (self.discard)(item))).await;
            if starting == 0 {
                return;
            }
            // A fill in flight returns within its own time limits.
            let _ = tokio::time::timeout(Duration::from_secs(1), changed).await;
        }
    }
}

impl<T: Send + 'static> Drop for WarmPool<T> {
    fn drop(&mut self) {
        // Ready items go when the last reference to the slots does: here, or
        // when a refill in flight finishes and finds the pool closed.
        let items: Vec<T> = {
            let mut slots = lock(&self.shared.slots);
            slots.closed = true;
            slots.ready.drain(..).collect()
        };
        self.shared.changed.notify_waiters();
        self.shared.changed.notify_one();
        drop(items);
    }
}

/// Keeps `ready + starting` at the pool's size; backs off while fills fail.
async fn refill<T: Send + 'static>(
    shared: Weak<Shared<T>>,
    changed: Arc<Notify>,
    fill: Fill<T>,
    reporter: Reporter,
) {
    let mut backoff = FIRST_BACKOFF;
    loop {
        let Some(pool) = shared.upgrade() else {
            return;
        };
        let wanted = {
            let mut slots = lock(&pool.slots);
            if slots.closed {
                return;
            }
            let wanted = pool.size.saturating_sub(slots.ready.len() + slots.starting);
            slots.starting += wanted;
            wanted
        };
        if wanted == 0 {
            drop(pool);
            changed.notified().await;
            continue;
        }
        let results = futures::future::join_all((0..wanted).map(|_| fill())).await;
        let mut failed = None;
        let mut late = Vec::new();
        {
            let mut slots = lock(&pool.slots);
            slots.starting -= wanted;
            for result in results {
                match result {
                    Ok(item) if slots.closed => late.push(item),
                    Ok(item) => {
                        pool.filled.fetch_add(1, Ordering::Relaxed);
                        slots.ready.push_back(item);
                    }
                    Err(e) => failed = Some(e.to_string()),
                }
            }
        }
        pool.changed.notify_waiters();
        drop(late);
        match failed {
            None => backoff = FIRST_BACKOFF,
            Some(why) => {
                pool.fill_failures.fetch_add(1, Ordering::Relaxed);
                *lock(&pool.last_failure) = Some(why.clone());
                reporter.report(
                    &pool.name,
                    Stage::PoolRefill,
                    format!("refilling the pool failed (next try in {backoff:?}); runs start cold meanwhile: {why}"),
                );
                drop(pool);
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
        }
    }
}
