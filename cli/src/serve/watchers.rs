//! A sandbox's directory watchers (the sync SDK's `CreateWatcher`), by
//! id: each a task following the session's file events and the events it
//! keeps for the next poll.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use serde_json::Value;

use super::connect::ConnectError;
use super::lock;

/// Events kept for a watcher nobody asks; the oldest go first.
const MAX_PENDING: usize = 10_000;

/// A sandbox's watchers by id.
#[derive(Default)]
pub struct Watchers {
    pub(super) by_id: Mutex<HashMap<String, Arc<Watcher>>>,
}

pub(super) struct Watcher {
    pub(super) pending: Mutex<VecDeque<Value>>,
    pub(super) failed: Mutex<Option<ConnectError>>,
    pub(super) task: tokio::task::AbortHandle,
}

impl Watcher {
    /// Keeps `events` for the next `GetWatcherEvents`; past the bound the
    /// oldest go.
    pub(super) fn queue(&self, events: impl IntoIterator<Item = Value>) {
        let mut pending = lock(&self.pending);
        pending.extend(events);
        while pending.len() > MAX_PENDING {
            pending.pop_front();
        }
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Watchers {
    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Watcher>>> {
        lock(&self.by_id)
    }

    /// Stops every watcher.
    pub fn clear(&self) {
        self.lock().clear();
    }
}
