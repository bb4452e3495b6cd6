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

use tokio::time::Instant;

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

/// What a pool has done so far; see [`SandboxPool::stats`](crate::pool::SandboxPool::stats).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PoolStats {
    /// How many items the pool aims to hold now (ready or being made):
    /// its size, or more while demand has grown it toward its maximum.
    pub size: usize,
    /// Items ready now.
    pub ready: usize,
    /// Items being made now.
    pub starting: usize,
    /// Items handed out (those a take waited for included).
    pub handed_over: u64,
    /// Of those, items a take waited for: none was ready, one was being
    /// made, and it came sooner than a cold start.
    pub waited: u64,
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
    /// How many items the pool aims to hold (ready or starting): its size,
    /// grown toward its maximum by misses, shrunk back when idle.
    target: usize,
    /// When a take last found the pool short.
    last_short: Instant,
    /// No new fill before this (a fill failed: back off).
    retry_at: Option<Instant>,
    backoff: Duration,
}

struct Shared<T> {
    name: String,
    config: PoolConfig,
    slots: Mutex<Slots<T>>,
    /// Wakes waiters for an item (after a fill, on close).
    changed: Notify,
    /// Wakes the refill loop (after a take, a fill, a close); shared with
    /// the loop so it can wait without keeping the pool alive. Apart from
    /// `changed`, so a take never wakes its own wait.
    wanted: Arc<Notify>,
    handed_over: AtomicU64,
    waited: AtomicU64,
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
    /// A pool as `config` says, filling at once in the background.
    pub(crate) fn new(
        name: String,
        config: PoolConfig,
        fill: Fill<T>,
        discard: Discard<T>,
        reporter: Reporter,
    ) -> Self {
        let shared = Arc::new(Shared {
            name,
            config,
            slots: Mutex::new(Slots {
                ready: VecDeque::with_capacity(config.max_size),
                starting: 0,
                closed: false,
                target: config.size,
                last_short: Instant::now(),
                retry_at: None,
                backoff: FIRST_BACKOFF,
            }),
            changed: Notify::new(),
            wanted: Arc::new(Notify::new()),
            handed_over: AtomicU64::new(0),
            waited: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            filled: AtomicU64::new(0),
            fill_failures: AtomicU64::new(0),
            last_failure: Mutex::new(None),
        });
        if config.max_size > 0 {
            let wanted = shared.wanted.clone();
            tokio::spawn(refill(
                Arc::downgrade(&shared),
                wanted,
                fill,
                discard.clone(),
                reporter,
            ));
        }
        WarmPool { shared, discard }
    }

    /// A ready item; if none is ready but some are being made, waits up to
    /// `limit` for one (it comes no later than a cold start would, and a
    /// cold start would compete with it for the daemon). `None` when
    /// nothing is on the way or the wait ran out: the caller starts cold.
    pub(crate) async fn take_or_wait(&self, limit: Duration) -> Option<T> {
        let until = tokio::time::Instant::now() + limit;
        let mut waited = false;
        loop {
            let changed = self.shared.changed.notified();
            let mut changed = std::pin::pin!(changed);
            changed.as_mut().enable();
            if let Some(item) = self.try_take() {
                let counter = if waited {
                    &self.shared.waited
                } else {
                    &self.shared.handed_over
                };
                counter.fetch_add(1, Ordering::Relaxed);
                return Some(item);
            }
            let on_the_way = {
                let slots = lock(&self.shared.slots);
                let coming = slots.starting > 0 || slots.ready.len() < slots.target;
                !slots.closed && coming && slots.retry_at.is_none()
            };
            if !on_the_way || tokio::time::timeout_at(until, changed).await.is_err() {
                // A cold start: demand outgrew the pool; grow it toward its
                // maximum. (A take that waited does not: the fills in
                // flight, not the size, held it up.)
                self.shared.misses.fetch_add(1, Ordering::Relaxed);
                let mut slots = lock(&self.shared.slots);
                slots.target = (slots.target + 1).min(self.shared.config.max_size);
                drop(slots);
                self.shared.wanted.notify_one();
                return None;
            }
            waited = true;
        }
    }

    /// Pops a ready item; a take that empties the pool marks it short.
    fn try_take(&self) -> Option<T> {
        let taken = {
            let mut slots = lock(&self.shared.slots);
            if slots.closed {
                None
            } else {
                let taken = slots.ready.pop_front();
                if slots.ready.is_empty() {
                    // Demand caught up with the pool.
                    slots.last_short = Instant::now();
                }
                taken
            }
        };
        self.shared.wanted.notify_one();
        taken
    }

    pub(crate) fn stats(&self) -> PoolStats {
        let s = &self.shared;
        let slots = lock(&s.slots);
        PoolStats {
            size: slots.target,
            ready: slots.ready.len(),
            starting: slots.starting,
            handed_over: s.handed_over.load(Ordering::Relaxed) + s.waited.load(Ordering::Relaxed),
            waited: s.waited.load(Ordering::Relaxed),
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
            let mut changed = std::pin::pin!(changed);
            changed.as_mut().enable();
            {
                let slots = lock(&self.shared.slots);
                if slots.ready.len() >= n.min(slots.target) {
                    return true;
                }
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
        self.shared.wanted.notify_one();
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
        self.shared.wanted.notify_one();
        drop(items);
    }
}

/// Keeps `ready + starting` at the pool's target, with at most
/// `max_starting` fills in flight, each on its own (a slow fill holds up no
/// other); backs off while fills fail; gives back what an idle pool holds
/// past its size.
async fn refill<T: Send + 'static>(
    shared: Weak<Shared<T>>,
    wanted: Arc<Notify>,
    fill: Fill<T>,
    discard: Discard<T>,
    reporter: Reporter,
) {
    loop {
        let notified = wanted.notified();
        let mut notified = std::pin::pin!(notified);
        notified.as_mut().enable();
        let Some(pool) = shared.upgrade() else {
            return;
        };
        let config = pool.config;
        let (wanted, surplus, retry_at) = {
            let mut slots = lock(&pool.slots);
            if slots.closed {
                return;
            }
            let mut surplus = Vec::new();
            if slots.target > config.size && slots.last_short.elapsed() >= config.shrink_after {
                slots.target = config.size;
                while slots.ready.len() + slots.starting > slots.target {
                    match slots.ready.pop_back() {
                        Some(item) => surplus.push(item),
                        None => break,
                    }
                }
            }
            let retry_at = slots.retry_at.filter(|at| *at > Instant::now());
            slots.retry_at = retry_at;
            let wanted = if retry_at.is_some() {
                0
            } else {
                let short = slots
                    .target
                    .saturating_sub(slots.ready.len() + slots.starting);
                let room = config.max_starting.saturating_sub(slots.starting);
                short.min(room)
            };
            slots.starting += wanted;
            (wanted, surplus, retry_at)
        };
        for item in surplus {
            tokio::spawn(discard(item));
        }
        for _ in 0..wanted {
            tokio::spawn(fill_one(
                Arc::downgrade(&pool),
                fill.clone(),
                discard.clone(),
                reporter.clone(),
            ));
        }
        // Wake at the next change, the end of a backoff, or when an idle
        // pool may shrink.
        let wake = match retry_at {
            Some(at) => at,
            None => {
                tokio::time::Instant::now() + config.shrink_after.max(Duration::from_millis(100))
            }
        };
        drop(pool);
        let _ = tokio::time::timeout_at(wake, notified).await;
    }
}

/// Makes one item and puts it in the pool (or disposes of it, if the pool
/// closed meanwhile).
async fn fill_one<T: Send + 'static>(
    shared: Weak<Shared<T>>,
    fill: Fill<T>,
    discard: Discard<T>,
    reporter: Reporter,
) {
    let result = fill().await;
    let Some(pool) = shared.upgrade() else {
        // Disposed of as the pool would have (a kept session is closed, not
        // left behind by being dropped).
        if let Ok(item) = result {
            discard(item).await;
        }
        return;
    };
    // Made after the pool closed: disposed of before it counts as done,
    // so a shutdown waiting for fills in flight waits for this too.
    let closed = lock(&pool.slots).closed;
    let result = match result {
        Ok(item) if closed => {
            discard(item).await;
            lock(&pool.slots).starting -= 1;
            pool.changed.notify_waiters();
            return;
        }
        other => other,
    };
    let mut late = None;
    let mut failed = None;
    {
        let mut slots = lock(&pool.slots);
        slots.starting -= 1;
        match result {
            Ok(item) if slots.closed => late = Some(item),
            Ok(item) => {
                pool.filled.fetch_add(1, Ordering::Relaxed);
                slots.ready.push_back(item);
                slots.backoff = FIRST_BACKOFF;
            }
            Err(e) => {
                let backoff = slots.backoff;
                slots.retry_at = Some(Instant::now() + backoff);
                slots.backoff = (backoff * 2).min(MAX_BACKOFF);
                failed = Some((e.to_string(), backoff));
            }
        }
    }
    pool.changed.notify_waiters();
    pool.wanted.notify_one();
    if let Some(item) = late {
        discard(item).await;
    }
    if let Some((why, backoff)) = failed {
        pool.fill_failures.fetch_add(1, Ordering::Relaxed);
        *lock(&pool.last_failure) = Some(why.clone());
        reporter.report(
            &pool.name,
            Stage::PoolRefill,
            format!("refilling the pool failed (next try in {backoff:?}); runs start cold meanwhile: {why}"),
        );
    }
}

/// How long a take waits for an item being made when none is ready: a
/// cold start would take about as long, and compete with it for the daemon.
pub(crate) const WAIT_LIMIT: std::time::Duration = std::time::Duration::from_secs(10);

/// How big a pool is, and how it follows demand.
///
/// ```
/// use std::time::Duration;
/// use dockhand::pool::PoolConfig;
/// // Four ready, up to sixteen while runs keep finding it empty, back to
/// // four after a minute without; at most eight being made at once.
/// let config = PoolConfig::new(4)
///     .max_size(16)
///     .max_starting(8)
///     .shrink_after(Duration::from_secs(60));
/// assert_eq!(config.size, 4);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct PoolConfig {
    /// Items kept ready (started and waiting) when demand is low.
    pub size: usize,
    /// The most items the pool grows to under sustained demand: each take
    /// that has to start cold (none ready, none on its way in time) adds
    /// one, up to this (default: `size`).
    pub max_size: usize,
    /// The most items made at once, each on its own (default: `size`, at
    /// least 2 and at most 16).
    pub max_starting: usize,
    /// A pool grown past `size` that was not found short for this long
    /// gives the extra items back (default 30 s).
    pub shrink_after: std::time::Duration,
    /// How long making one item may take before that fill counts as failed
    /// (default 60 s). On a cluster this is the pod's scheduling, image pull
    /// and start; a pod the scheduler could not place fails with its reason
    /// ([`ClusterError::Unschedulable`](crate::ClusterError::Unschedulable),
    /// in [`PoolStats::last_failure`]). A session's or kernel's own
    /// `start_timeout` still applies when shorter; a code host's is its own
    /// (its first start may build its image).
    pub start_limit: std::time::Duration,
}

impl PoolConfig {
    /// A pool of `size` items.
    pub fn new(size: usize) -> Self {
        PoolConfig {
            size,
            max_size: size,
            max_starting: size.clamp(2, 16),
            shrink_after: std::time::Duration::from_secs(30),
            start_limit: std::time::Duration::from_secs(60),
        }
    }

    /// How long making one item may take (see [`PoolConfig::start_limit`]).
    pub fn start_limit(mut self, limit: std::time::Duration) -> Self {
        self.start_limit = limit;
        self
    }

    /// Lets the pool grow to `max` items under sustained demand (not below `size`).
    pub fn max_size(mut self, max: usize) -> Self {
        self.max_size = max;
        self
    }

    /// At most `n` items made at once (at least 1).
    pub fn max_starting(mut self, n: usize) -> Self {
        self.max_starting = n;
        self
    }

    /// How long a grown pool must go without being found short before it
    /// shrinks back to `size`.
    pub fn shrink_after(mut self, idle: std::time::Duration) -> Self {
        self.shrink_after = idle;
        self
    }

    /// The config with its bounds made consistent.
    pub(crate) fn normalized(self) -> Self {
        PoolConfig {
            max_size: self.max_size.max(self.size),
            max_starting: self.max_starting.max(1),
            ..self
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::FutureExt;
    use std::sync::atomic::AtomicUsize;

    /// A pool of numbers whose fills take `delay`; counts fills in flight
    /// and the most at once.
    fn pool(
        config: PoolConfig,
        delay: Duration,
    ) -> (WarmPool<usize>, Arc<(AtomicUsize, AtomicUsize)>) {
        let counts = Arc::new((AtomicUsize::new(0), AtomicUsize::new(0)));
        let made = Arc::new(AtomicUsize::new(0));
        let c = counts.clone();
        let fill: Fill<usize> = Arc::new(move || {
            let (c, made) = (c.clone(), made.clone());
            async move {
                let now = c.0.fetch_add(1, Ordering::SeqCst) + 1;
                c.1.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(delay).await;
                c.0.fetch_sub(1, Ordering::SeqCst);
                Ok(made.fetch_add(1, Ordering::SeqCst))
            }
            .boxed()
        });
        let discard: Discard<usize> = Arc::new(|_| async {}.boxed());
        let warm = WarmPool::new(
            "test".into(),
            config.normalized(),
            fill,
            discard,
            Reporter::default(),
        );
        (warm, counts)
    }

    #[tokio::test(start_paused = true)]
    async fn fills_run_concurrently_up_to_their_bound() {
        let (warm, counts) = pool(
            PoolConfig::new(6).max_starting(3),
            Duration::from_millis(100),
        );
        assert!(warm.wait_ready(6, Duration::from_secs(5)).await);
        assert_eq!(counts.1.load(Ordering::SeqCst), 3, "at most 3 at once");
        // Each take starts its replacement at once, not after a batch.
        for _ in 0..3 {
            assert!(warm.take_or_wait(Duration::ZERO).await.is_some());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert_eq!(warm.stats().starting, 3);
    }

    #[tokio::test(start_paused = true)]
    async fn a_take_waits_for_an_item_on_the_way_and_counts_it() {
        let (warm, _) = pool(PoolConfig::new(1), Duration::from_millis(300));
        let taken = warm.take_or_wait(Duration::from_secs(1)).await;
        assert!(taken.is_some(), "the fill in flight came within the wait");
        let stats = warm.stats();
        assert_eq!((stats.handed_over, stats.waited, stats.misses), (1, 1, 0));
        // A wait shorter than the fill is a miss: the caller starts cold.
        assert!(warm.take_or_wait(Duration::from_millis(10)).await.is_none());
        assert_eq!(warm.stats().misses, 1);
    }

    #[tokio::test(start_paused = true)]
    async fn demand_grows_the_pool_and_idleness_shrinks_it() {
        let config = PoolConfig::new(2)
            .max_size(5)
            .shrink_after(Duration::from_secs(10));
        let (warm, _) = pool(config, Duration::from_millis(50));
        assert!(warm.wait_ready(2, Duration::from_secs(5)).await);
        // Sustained demand: takes keep finding it empty and start cold.
        for _ in 0..20 {
            let _ = warm.take_or_wait(Duration::ZERO).await;
        }
        assert_eq!(warm.stats().size, 5, "grown to its maximum");
        assert!(warm.wait_ready(5, Duration::from_secs(5)).await);
        assert_eq!(warm.stats().ready, 5);
        // No demand for longer than `shrink_after`: back to its size.
        tokio::time::sleep(Duration::from_secs(11)).await;
        let stats = warm.stats();
        assert_eq!((stats.size, stats.ready), (2, 2));
    }
}
