//! Ownership of one container and its scratch volumes: removed exactly once,
//! whatever happens.
//!
//! The guard exists before the create request is sent: the container is
//! created under a name the guard already holds, so a create whose caller
//! went away (a dropped future) is still found and removed. Its scratch
//! volumes carry a label with the same token, so they are removed even when
//! the container was removed from outside without them (`docker rm -f`).

use std::time::Duration;

use super::{container::remove_with, Engine};
use crate::error::Result;
pub(crate) use remover::submit_job;

/// Owns a container. Call [`ContainerGuard::remove`] on the normal path; if the
/// guard is dropped instead (an error returned early, the future cancelled, a
/// panic), the container and its volumes are force-removed.
#[derive(Debug)]
pub struct ContainerGuard {
    engine: Engine,
    /// The container's id once created; its name before.
    id: String,
    /// The token in its name and on its volumes' labels.
    token: String,
    /// A create request was sent and has not answered yet.
    creating: bool,
    removed: bool,
}

impl ContainerGuard {
    /// A guard for a container about to be created under [`Self::name`].
    pub(super) fn before_create(engine: Engine) -> Self {
        let token = uuid::Uuid::new_v4().simple().to_string();
        ContainerGuard {
            engine,
            id: format!("dockhand-{token}"),
            token,
            creating: true,
            removed: false,
        }
    }

    /// The name the container is created under.
    pub(super) fn name(&self) -> String {
        format!("dockhand-{}", self.token)
    }

    /// The token its scratch volumes are labelled with.
    pub(super) fn token(&self) -> &str {
        &self.token
    }

    /// The create request answered: this is the container's id.
    pub(super) fn created(&mut self, id: String) {
        self.id = id;
        self.creating = false;
    }

    /// The create request answered with an error: no container exists.
    pub(super) fn not_created(&mut self) {
        self.creating = false;
    }

    /// Owns an existing container (one kept by another process), whose
    /// scratch volumes carry `token`.
    pub(crate) fn adopt(engine: Engine, id: String, token: String) -> Self {
        ContainerGuard {
            engine,
            id,
            token,
            creating: false,
            removed: false,
        }
    }

    /// Lets the container outlive this guard (a kept session's owner
    /// going away): nothing is removed.
    pub(crate) fn release(mut self) {
        self.removed = true;
    }

    /// The container id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Removes the container and its volumes on a thread of its own, without
    /// waiting: for answering at a time limit. Independent of the caller's
    /// runtime, which may be busy or about to end.
    pub fn remove_in_background(self) {
        std::thread::spawn(move || drop(self));
    }

    /// Removes the container and its volumes now. If the daemon cannot be
    /// reached, the removal is also handed to the remover, which makes it
    /// once the daemon answers again.
    pub async fn remove(mut self) -> Result<()> {
        let result = remove_with(&self.engine.docker, &self.id, &self.token).await;
        if !result.as_ref().is_err_and(is_outage) {
            self.removed = true;
        }
        result
    }
}

impl Drop for ContainerGuard {
    fn drop(&mut self) {
        if self.removed {
            return;
        }
        let removal = Removal {
            engine: self.engine.clone(),
            id: std::mem::take(&mut self.id),
            token: std::mem::take(&mut self.token),
            creating: self.creating,
        };
        // Inside a runtime the drop returns at once: a dropped future (a
        // caller's `timeout`) must not wait for the daemon. The removal goes
        // on in the background; process exit waits for it (a bounded time),
        // and the watchdog covers a process killed outright. Outside any
        // runtime nothing can stall: wait, so the container is gone when the
        // drop returns.
        let wait = tokio::runtime::Handle::try_current().is_err() && !removal.creating;
        let done = remover::submit(removal);
        if wait {
            let _ = done.recv();
        }
    }
}

/// A container (and its volumes) to remove in the background.
struct Removal {
    engine: Engine,
    id: String,
    token: String,
    /// Its create request had not answered: look again for a late create.
    creating: bool,
}

impl Removal {
    async fn run(self) {
        // A client of its own: the guard's belongs to a runtime that may be
        // the one shutting down (a panicking test, a dropped future at exit).
        let docker = match self.engine.reconnect() {
            Ok(docker) => docker,
            Err(e) => {
                tracing::warn!(container = %self.id, error = %e, "cannot reconnect to remove container");
                return;
            }
        };
        let (id, token) = (&self.id, &self.token);
        match remove_with(&docker, id, token).await {
            Ok(()) => {}
            Err(e) if is_outage(&e) => {
                tracing::warn!(container = %id, error = %e, "the daemon does not answer: the container is removed once it does");
                tokio::spawn(sweep(self.engine.clone(), id.clone(), token.clone()));
                return;
            }
            Err(e) => {
                tracing::warn!(container = %id, error = %e, "removing container on drop failed")
            }
        }
        // A create still in flight may land after that removal: look
        // again, by name, once the daemon has had time to finish it.
        if self.creating {
            for wait in [200, 800, 2000] {
                tokio::time::sleep(Duration::from_millis(wait)).await;
                let _ = remove_with(&docker, id, token).await;
            }
        }
    }
}

/// How long a removal waits for a daemon that stopped answering.
const SWEEP_FOR: Duration = Duration::from_secs(3600);

/// Whether removal failed because the daemon could not be talked to (as
/// opposed to refusing): worth trying again once it answers.
fn is_outage(e: &crate::Error) -> bool {
    matches!(
        e,
        crate::Error::DaemonUnreachable { .. } | crate::Error::Docker { status: None, .. }
    )
}

/// Removes a container (and its volumes) that could not be removed because
/// the daemon was down, once it answers again: a daemon restart must not
/// leave a long-running process's containers behind (`dockhand serve`, an
/// MCP server). Runs on the remover's runtime; it does not hold up exit.
async fn sweep(engine: Engine, id: String, token: String) {
    let give_up = std::time::Instant::now() + SWEEP_FOR;
    let mut wait = Duration::from_millis(500);
    loop {
        tokio::time::sleep(wait).await;
        wait = (wait * 2).min(Duration::from_secs(10));
        let Ok(docker) = engine.reconnect() else {
            continue;
        };
        match remove_with(&docker, &id, &token).await {
            Ok(()) => {
                tracing::info!(container = %id, "the daemon answers again: container removed");
                return;
            }
            Err(e) if is_outage(&e) && std::time::Instant::now() < give_up => {}
            Err(e) => {
                tracing::warn!(container = %id, error = %e, "removing a container after the daemon came back failed");
                return;
            }
        }
    }
}

/// One thread per process, with a runtime of its own, removes what dropped
/// guards leave: a drop only hands the job over (microseconds), whatever
/// the state of the caller's runtime.
mod remover {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{mpsc, Condvar, Mutex, OnceLock};
    use std::time::Duration;

    use futures::future::BoxFuture;

    use super::Removal;
    use crate::util::lock;

    /// Removals handed over and not finished, which process exit waits for.
    /// A count apart from the lock: a drop only adds to it, and never waits
    /// for a remover thread that holds the lock and was preempted.
    static PENDING: AtomicUsize = AtomicUsize::new(0);
    /// What process exit waits on; the remover takes the lock to wake it.
    static FINISHED: (Mutex<()>, Condvar) = (Mutex::new(()), Condvar::new());
    /// How long process exit waits for removals still under way.
    const EXIT_WAIT: Duration = Duration::from_secs(10);

    type Job = (BoxFuture<'static, ()>, mpsc::Sender<()>);

    /// Hands `removal` to the remover; the receiver hears when it is done
    /// (or that it never will be, if no thread could run it).
    pub(super) fn submit(removal: Removal) -> mpsc::Receiver<()> {
        let what = format!("container {}", removal.id);
        submit_job(what, Box::pin(removal.run()))
    }

    /// Hands any removal (`what` names it in warnings) to the remover.
    pub(crate) fn submit_job(what: String, job: BoxFuture<'static, ()>) -> mpsc::Receiver<()> {
        static QUEUE: OnceLock<Option<tokio::sync::mpsc::UnboundedSender<Job>>> = OnceLock::new();
        let (done_tx, done_rx) = mpsc::channel();
        let Some(queue) = QUEUE.get_or_init(start) else {
            tracing::warn!(%what, "no thread to remove objects on");
            return done_rx;
        };
        PENDING.fetch_add(1, Ordering::SeqCst);
        if queue.send((job, done_tx)).is_err() {
            finished();
            tracing::warn!(%what, "the remover is gone");
        }
        done_rx
    }

    fn start() -> Option<tokio::sync::mpsc::UnboundedSender<Job>> {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Job>();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .ok()?;
        std::thread::Builder::new()
            .name("dockhand-remover".into())
            .spawn(move || {
                runtime.block_on(async move {
                    while let Some((job, done)) = rx.recv().await {
                        tokio::spawn(async move {
                            job.await;
                            finished();
                            let _ = done.send(());
                        });
                    }
                })
            })
            .ok()?;
        // SAFETY: `wait_at_exit` is a plain `extern "C" fn` that takes no
        // arguments and never unwinds; registering it has no other effect.
        unsafe {
            libc::atexit(wait_at_exit);
        }
        Some(tx)
    }

    fn finished() {
        let _ = PENDING.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
        // Under the lock: the exit waiter checks the count and waits under
        // it, so this wake cannot fall between its check and its wait.
        let _held = lock(&FINISHED.0);
        FINISHED.1.notify_all();
    }

    /// Runs at process exit (a return from `main`, `std::process::exit`):
    /// gives removals under way a bounded time to finish, so a program that
    /// ends right after dropping a run leaves nothing behind.
    extern "C" fn wait_at_exit() {
        let Ok(held) = FINISHED.0.lock() else { return };
        let _ = FINISHED
            .1
            .wait_timeout_while(held, EXIT_WAIT, |_| PENDING.load(Ordering::SeqCst) > 0);
    }
}
