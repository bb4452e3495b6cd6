//! Forking a session: new sessions that start from its state (its memory
//! and processes, or its files) and then diverge, each in a container of
//! its own made from an image of the parent's files.

use std::sync::atomic::AtomicUsize;

use futures::future::join_all;

use super::commit::Lifetime;
use super::launch::{connect_container, prepare_restore, Carry};
use super::pause::PauseMode;
use super::*;
use crate::engine::Engine;

/// The most forks one call makes.
pub const MAX_FORKS: usize = 64;

/// The image forks were made from: removed when the last of them closes,
/// or, when forks are dropped unclosed (a dropped `fork`, say), once the
/// last of them is gone and their containers with it.
pub(super) struct ForkImage {
    image: String,
    engine: Engine,
    live: AtomicUsize,
    removed: std::sync::atomic::AtomicBool,
}

impl ForkImage {
    fn new(engine: &Engine, image: String, forks: usize) -> Arc<Self> {
        Arc::new(ForkImage {
            image,
            engine: engine.clone(),
            live: AtomicUsize::new(forks),
            removed: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// One fork closed; the last one removes the image.
    pub(super) async fn release(&self) {
        if self.live.fetch_sub(1, Ordering::SeqCst) != 1 {
            return;
        }
        match self.engine.remove_image_if_unused(&self.image).await {
            Ok(true) => self.removed.store(true, Ordering::SeqCst),
            // A kept fork still runs from it: the owner's labels let a
            // later `reap` remove it once unused.
            Ok(false) => {}
            Err(e) => {
                tracing::warn!(image = %self.image, error = %e, "removing a fork image failed")
            }
        }
    }
}

impl Drop for ForkImage {
    fn drop(&mut self) {
        if !self.removed.load(Ordering::SeqCst) {
            // The forks' containers are being removed meanwhile: tried
            // again while they still use it.
            self.engine
                .remove_image_later(self.image.clone(), Duration::from_secs(30));
        }
    }
}

impl Session {
    /// `n` new sessions that start from this one's state and then diverge
    /// (a write in one is seen by no other). [`PauseMode::Memory`] carries
    /// processes and memory (a kernel's variables, a server it started):
    /// it needs what a memory pause needs, and a daemon on this machine
    /// (the checkpoint is copied into each fork); a running parent is
    /// paused for the copy and resumed. [`PauseMode::Filesystem`] carries
    /// files, and the parent runs on.
    ///
    /// Forks have the parent's settings; close each (the image they were
    /// made from goes with the last).
    ///
    /// ```no_run
    /// # async fn demo() -> dockhand::Result<()> {
    /// use dockhand::session::{PauseMode, SessionApi, SessionConfig};
    /// let client = dockhand::Client::connect().await?;
    /// let s = client.session(SessionConfig::new().pausable(true));
    /// s.start().await?;
    /// s.write_file("state.txt", b"base").await?;
    /// let forks = s.fork(2, PauseMode::Filesystem).await?;
    /// forks[0].write_file("state.txt", b"one").await?;
    /// assert_eq!(forks[1].read_file("state.txt").await?, b"base");
    /// for f in forks { f.close().await?; }
    /// s.close().await?;
    /// # Ok(()) }
    /// ```
    pub async fn fork(&self, n: usize, mode: PauseMode) -> Result<Vec<Session>> {
        if n == 0 || n > MAX_FORKS {
            return Err(Error::spec(
                "session",
                format!("a fork makes 1 to {MAX_FORKS} sessions, not {n}"),
            ));
        }
        // Files on a claim (a cluster's): each fork on a copy of it.
        if self.files_claim().is_some() {
            return match mode {
                PauseMode::Filesystem => Box::pin(self.fork_stored(n)).await,
                PauseMode::Memory => Err(Error::PauseUnsupported {
                    reason: super::stored::MEMORY_ON_CLUSTER.into(),
                }),
            };
        }
        match mode {
            PauseMode::Filesystem => self.fork_files(n).await,
            PauseMode::Memory => self.fork_memory(n).await,
        }
    }

    async fn fork_files(&self, n: usize) -> Result<Vec<Session>> {
        let engine = self.inner.client.engine()?.clone();
        let snapshot = self.commit_snapshot(Lifetime::Owned).await?;
        let image = ForkImage::new(&engine, snapshot.image.clone(), n);
        self.start_forks(n, &snapshot.image, |fork| {
            *lock(&fork.inner.fork_image) = Some(image.clone());
        })
        .await
    }

    /// Starts `n` sessions with this one's settings on `image`, each
    /// prepared by `prepare` first; all of them, or none.
    pub(super) async fn start_forks(
        &self,
        n: usize,
        image: &str,
        prepare: impl Fn(&Session),
    ) -> Result<Vec<Session>> {
        let mut config = self.inner.config.clone();
        config.image = crate::image::ImageSpec::prebuilt(image);
        // The parent's setup made the files the forks start from.
        config.setup.clear();
        let forks: Vec<Session> = (0..n)
            .map(|_| {
                let fork = self.inner.client.session(config.clone());
                prepare(&fork);
                fork
            })
            .collect();
        let started = join_all(forks.iter().map(|f| f.start())).await;
        self.keep_all_or_none(forks, started).await
    }

    async fn fork_memory(&self, n: usize) -> Result<Vec<Session>> {
        let engine = self.inner.client.engine()?.clone();
        let launched =
            lock(&self.inner.launched)
                .clone()
                .ok_or_else(|| Error::PauseUnsupported {
                    reason: "a memory fork needs a session this process started (one resumed by id has no launch settings here); fork in filesystem mode".into(),
                })?;
        if matches!(self.inner.config.network, crate::Network::Egress(_)) {
            return Err(Error::spec(
                "session",
                "a session under an egress policy forks in filesystem mode only (each fork needs a gateway registration of its own)",
            ));
        }
        let was_running = match self.state() {
            State::Paused if self.paused_mode() == Some(PauseMode::Memory) => false,
            State::Paused => return Err(Error::spec(
                "session",
                "this session was paused on its files: its memory is gone; fork in filesystem mode",
            )),
            _ => {
                self.pause(PauseMode::Memory).await?;
                true
            }
        };
        let made = self.forks_from_checkpoint(&engine, &launched, n).await;
        if was_running {
            self.resume().await?;
        }
        made
    }

    /// Makes `n` forks of this (memory-paused) session.
    async fn forks_from_checkpoint(
        &self,
        engine: &Engine,
        launched: &launch::Launched,
        n: usize,
    ) -> Result<Vec<Session>> {
        let (parent, checkpoint) = {
            let parked = lock(&self.inner.parked);
            let parked = parked.as_ref().ok_or_else(|| self.gone())?;
            let name = parked.checkpoint.clone().ok_or_else(|| self.gone())?;
            (parked.held.id().to_string(), name)
        };
        let from = engine.checkpoint_path(&parent, &checkpoint).await?;
        let stamp = chrono::Utc::now().format("%Y%m%d%H%M%S%3f");
        let image_ref = format!("dockhand/fork:{}-{stamp}", &parent[..12.min(parent.len())]);
        self.relocation_image(engine, &parent, &launched.spec.image, &image_ref)
            .await?;
        let image = ForkImage::new(engine, image_ref.clone(), n);
        let mut config = self.inner.config.clone();
        config.image = crate::image::ImageSpec::prebuilt(image_ref.clone());
        config.setup.clear();
        let next_id = lock(&self.inner.parked)
            .as_ref()
            .and_then(|p| p.carry.as_ref().map(|c| c.next_id))
            .unwrap_or(1);
        let forks: Vec<Session> = (0..n)
            .map(|_| {
                let fork = self.inner.client.session(config.clone());
                *lock(&fork.inner.fork_image) = Some(image.clone());
                *lock(&fork.inner.secrets) = lock(&self.inner.secrets).clone();
                fork
            })
            .collect();
        let started = join_all(forks.iter().map(|fork| {
            let mut launched = launched.clone();
            launched.spec.image = image_ref.clone();
            fork.start_restored(engine, launched, &from, &checkpoint, next_id)
        }))
        .await;
        // The links to its checkpoint's files changed their change times:
        // the parent's seal is taken again (nothing else touched them).
        if let Ok(resealed) = crate::engine::seal(&from) {
            self.keep_seal(&parent, &checkpoint, &resealed);
            if let Some(parked) = lock(&self.inner.parked).as_mut() {
                parked.seal = Some(resealed);
            }
        }
        self.keep_all_or_none(forks, started).await
    }

    /// Forks when all started; otherwise none (each closed) and the error.
    async fn keep_all_or_none(
        &self,
        forks: Vec<Session>,
        started: Vec<Result<()>>,
    ) -> Result<Vec<Session>> {
        let failed = started.into_iter().find_map(|r| r.err());
        let Some(e) = failed else {
            return Ok(forks);
        };
        // Each close counts itself off the image; the last removes it.
        for fork in forks {
            let _ = fork.close().await;
        }
        Err(e)
    }

    /// Starts this (new) session in a container made as `launched` says,
    /// restored from a copy of the checkpoint at `from`.
    async fn start_restored(
        &self,
        engine: &Engine,
        launched: launch::Launched,
        from: &std::path::Path,
        checkpoint: &str,
        next_id: u64,
    ) -> Result<()> {
        let _one_at_a_time = self.inner.start_lock.lock().await;
        self.set_state(State::Running)?;
        let c = &self.inner.config;
        let started = async {
            let container = prepare_restore(engine, &launched, c, from, checkpoint).await?;
            let id = container.id().to_string();
            let attached = engine.attach(&id).await?;
            engine
                .start_from_checkpoint(&id, checkpoint)
                .await
                .map_err(|e| Error::Checkpoint {
                    operation: "fork",
                    reason: e.to_string(),
                    state: "the parent is unchanged".into(),
                })?;
            connect_container(
                engine,
                Held::Container(container),
                attached,
                None,
                Some(Carry {
                    routes: Arc::new(Mutex::new(Some(HashMap::new()))),
                    next_id,
                }),
            )
            .await
        };
        let conn = self.come_up("a fork", started).await?;
        self.forget_runtime_copies(engine, &conn.container_id, checkpoint)
            .await;
        *lock(&self.inner.launched) = Some(launched);
        self.runs_in(conn, Some(checkpoint.to_string()))
    }
}
