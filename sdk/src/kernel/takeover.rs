//! A kernel whose relay another host started: taken over after a restart
//! of its owner (a kept kernel) or in a memory fork, so its contexts go on
//! with their variables; and [`Kernel::fork`].

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use super::link::Link;
use super::live::{Context, Inner, Kernel};
use super::wire::Listed;
use crate::error::Result;
use crate::session::{PauseMode, Session};
use crate::util::lock;

impl Kernel {
    /// The relay running in this kernel's container that an earlier host
    /// left (its contexts routed here), if any; `None` leaves the contexts
    /// to start afresh.
    pub(super) async fn take_over_relay(&self) -> Option<Arc<Link>> {
        match Link::adopt(&self.inner.session).await {
            Ok(Some((running, listed))) => {
                self.route_contexts(&running, listed);
                Some(running)
            }
            Ok(None) => None,
            // The contexts start afresh, as after a restart.
            Err(e) => {
                tracing::warn!(error = %e, "taking over a kernel's relay");
                None
            }
        }
    }

    fn route_contexts(&self, link: &Arc<Link>, listed: Vec<Listed>) {
        let mut contexts = lock(&self.inner.contexts);
        for found in listed {
            let Some(events) = link.route(&found.ctx) else {
                return;
            };
            let context = Context {
                run: None,
                name: found.ctx.clone(),
                cwd: found.cwd,
                language: found.language,
                events: Some(events),
                link: Some(link.clone()),
                history: Vec::new(),
                abandoned: Arc::default(),
            };
            contexts.insert(found.ctx, Arc::new(tokio::sync::Mutex::new(context)));
        }
    }

    /// `n` kernels that start from this one's state and then diverge (see
    /// [`Session::fork`]): in [`PauseMode::Memory`] every context goes on in
    /// each fork with its variables and imports (gVisor with checkpoints);
    /// in [`PauseMode::Filesystem`] the forks have the files, and a fresh
    /// default context.
    ///
    /// ```no_run
    /// # async fn demo(client: dockhand::Client) -> dockhand::Result<()> {
    /// use dockhand::kernel::KernelConfig;
    /// use dockhand::session::PauseMode;
    /// let kernel = client.kernel(KernelConfig::new().session(|s| s.pausable(true)));
    /// kernel.start().await?;
    /// kernel.run("open('base.txt', 'w').write('base')").await?;
    /// let forks = kernel.fork(2, PauseMode::Filesystem).await?;
    /// let read = forks[0].run("open('base.txt').read()").await?;
    /// assert_eq!(read.text(), Some("'base'"));
    /// for fork in forks { fork.close().await?; }
    /// kernel.close().await?;
    /// # Ok(()) }
    /// ```
    pub async fn fork(&self, n: usize, mode: PauseMode) -> Result<Vec<Kernel>> {
        let sessions = {
            // No run starts while the container is checkpointed or committed.
            let _link = self.inner.link.lock().await;
            self.inner.session.fork(n, mode).await?
        };
        let mut forks = Vec::with_capacity(sessions.len());
        for session in sessions {
            forks.push(self.around(session));
        }
        for fork in &forks {
            let link = match mode {
                PauseMode::Memory => fork.take_over_relay().await,
                PauseMode::Filesystem => None,
            };
            *fork.inner.link.lock().await = link;
            if fork.contexts().is_empty() {
                let cwd = self.inner.config.session.workspace_dir().to_string();
                if let Err(e) = fork
                    .create_context_in(super::live::DEFAULT_CONTEXT, &cwd)
                    .await
                {
                    for f in forks {
                        let _ = f.close().await;
                    }
                    return Err(e);
                }
            }
        }
        Ok(forks)
    }

    /// A kernel of this one's configuration around a started `session`.
    fn around(&self, session: Session) -> Kernel {
        Kernel {
            inner: Arc::new(Inner {
                config: self.inner.config.clone(),
                session,
                link: tokio::sync::Mutex::new(None),
                contexts: Mutex::new(BTreeMap::new()),
            }),
        }
    }
}
