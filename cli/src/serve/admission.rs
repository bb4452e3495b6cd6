//! How many sandboxes start at once. A burst of creates that finds the
//! warm pool empty would otherwise start every container together: the
//! daemon then shares two cores among a hundred starts, each takes as
//! long as all of them, and clients time out. Starts run a few at a time
//! instead, the rest wait their turn in order, and a create that would
//! wait too long (or finds too many waiting) is told to come back later
//! (429) at once, never left hanging.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::{Semaphore, SemaphorePermit};

/// Why a create was not let in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Busy {
    /// So many creates wait already.
    Queue(usize),
    /// It waited this long without its turn coming.
    Waited(Duration),
}

impl std::fmt::Display for Busy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Busy::Queue(n) => write!(
                f,
                "the server is starting sandboxes at its limit and {n} creates wait already; try again shortly"
            ),
            Busy::Waited(d) => write!(
                f,
                "no start came free within {}s (the server is starting sandboxes at its limit); try again shortly",
                d.as_secs()
            ),
        }
    }
}

/// Turns for starting a sandbox.
pub struct Admission {
    turns: Semaphore,
    waiting: AtomicUsize,
    max_waiting: usize,
    max_wait: Duration,
}

/// A create's turn to start; the next waiting one goes when it drops.
pub struct Turn<'a> {
    _permit: SemaphorePermit<'a>,
}

impl Admission {
    /// `at_once` starts at a time; up to `max_waiting` more wait, each at
    /// most `max_wait`.
    pub fn new(at_once: usize, max_waiting: usize, max_wait: Duration) -> Admission {
        Admission {
            turns: Semaphore::new(at_once.max(1)),
            waiting: AtomicUsize::new(0),
            max_waiting,
            max_wait,
        }
    }

    /// Waits for a turn (in arrival order), or says why not.
    pub async fn turn(&self) -> Result<Turn<'_>, Busy> {
        if let Ok(permit) = self.turns.try_acquire() {
            return Ok(Turn { _permit: permit });
        }
        let ahead = self.waiting.fetch_add(1, Ordering::AcqRel);
        let _waiting = Waiting(&self.waiting);
        if ahead >= self.max_waiting {
            return Err(Busy::Queue(ahead));
        }
        match tokio::time::timeout(self.max_wait, self.turns.acquire()).await {
            Ok(Ok(permit)) => Ok(Turn { _permit: permit }),
            // The semaphore is never closed; read it as a wait run out.
            Ok(Err(_)) | Err(_) => Err(Busy::Waited(self.max_wait)),
        }
    }

    /// Creates waiting for a turn now.
    pub fn waiting(&self) -> usize {
        self.waiting.load(Ordering::Relaxed)
    }
}

/// Counts a create among the waiting until it has its turn or gives up.
struct Waiting<'a>(&'a AtomicUsize);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn turns_go_in_order_and_the_rest_are_told_to_come_back() {
        let admission = Admission::new(1, 1, Duration::from_millis(200));
        let first = admission.turn().await.expect("a free turn");
        // One may wait; the next is refused at once.
        let second = admission.turn();
        tokio::pin!(second);
        assert!(
            tokio::time::timeout(Duration::from_millis(20), second.as_mut())
                .await
                .is_err(),
            "the second waits"
        );
        assert_eq!(admission.waiting(), 1);
        assert_eq!(admission.turn().await.err(), Some(Busy::Queue(1)));
        drop(first);
        assert!(second.await.is_ok(), "the second gets the freed turn");
        assert_eq!(admission.waiting(), 0);
        // A turn held past the wait limit: the waiter gives up, typed.
        let held = admission.turn().await.expect("free again");
        assert_eq!(
            admission.turn().await.err(),
            Some(Busy::Waited(Duration::from_millis(200)))
        );
        drop(held);
        assert_eq!(admission.waiting(), 0);
    }
}
