//! Starting a code host's bridge where its client runs: the backend makes
//! its container (or pod) from a [`HostStart`] recipe and attaches to it;
//! here the bridge is waited for until it says `ready`, over its attach
//! stream or the direct channel it was offered.

use std::sync::Mutex;

use super::bridge::{bridge_exited, host_spec, host_spec_with, Launch, Runner};
use super::channel::Offer;
use super::protocol::{FromRunner, ToRunner};
use crate::backend::{InContainer, Started};
use crate::client::Client;
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::util::lock;

/// How a code host's container or pod is made, for the backend to start.
pub(super) struct HostStart<'a> {
    pub(super) how: Launch<'a>,
    /// The code host image's reference, resolved.
    pub(super) image: String,
    /// The direct channel offered to the bridge (Docker, on this machine).
    offer: Mutex<Option<Offer>>,
    /// The mounted directories' copies, packed, to go in once it runs.
    mounts: Mutex<Option<super::mounts::Packed>>,
}

impl crate::backend::Recipe for HostStart<'_> {
    async fn container(&self, engine: &Engine) -> Result<InContainer> {
        let how = &self.how;
        // The direct channel needs the daemon's filesystem to be this one;
        // gVisor does not pass host sockets through.
        let offer = if engine.shares_filesystem() && how.isolation.runtime_name().is_none() {
            Some(Offer::new()?)
        } else {
            None
        };
        let spec = match &offer {
            Some(offer) => {
                let mut bridge = how.bridge.clone();
                bridge.socket = Some(offer.socket_path());
                bridge.token = Some(offer.token().to_string());
                let mut spec = host_spec_with(how, &self.image, &bridge)?;
                spec.mounts.push(offer.mount());
                spec
            }
            None => host_spec(how, &self.image)?,
        };
        // The mounted directories first: one that is missing is the
        // caller's error, before any container exists.
        if !how.mounts.is_empty() {
            let mounts = how.mounts.to_vec();
            let packed = crate::util::blocking("packing the mounted directories", move || {
                super::mounts::archive(&mounts)
            })
            .await?;
            super::mounts::check_size(&packed, how.mounts_size)?;
            *lock(&self.mounts) = Some(packed);
        }
        *lock(&self.offer) = offer;
        Ok(InContainer {
            spec,
            uploads: Vec::new(),
            egress: None,
            slow_hint: String::new(),
        })
    }
}

/// Starts a code host's bridge and waits for its `ready`, within the start
/// timeout. Returns the runner and the image reference.
pub(super) async fn launch(client: &Client, how: Launch<'_>) -> Result<(Runner, String)> {
    let backend = client.runs_on();
    refuse_mounts(backend.offers(), &how)?;
    // The image first, outside the start limit: the first build on a
    // machine compiles the bridge (minutes), under the builder's own limits.
    let image = backend.resolve_code_host_image(how.image).await?.reference;
    let limit = how.start_timeout;
    let recipe = HostStart {
        how,
        image: image.clone(),
        offer: Mutex::new(None),
        mounts: Mutex::new(None),
    };
    let handshake = |started: Started| async {
        let offer = lock(&recipe.offer).take();
        let mounts = lock(&recipe.mounts).take();
        let mut runner = ready(started, offer).await?;
        if let Some(tar) = &mounts {
            open_mounts(client, &mut runner, tar).await?;
        }
        Ok(runner)
    };
    let too_slow = |hint: &str| {
        Error::CodeHostUnavailable {
        reason: format!(
            "the code host did not become ready within {limit:?} ({hint} `CodeHostConfig::start_timeout` allows more)"
        ),
    }
    };
    let runner = backend
        .start_program(&recipe, limit, handshake, too_slow)
        .await?;
    Ok((runner, image))
}

/// Mounted directories, refused before anything is made where the backend
/// has no paths of this machine's (a cluster's nodes).
pub(super) fn refuse_mounts(offers: crate::backend::Offers, how: &Launch<'_>) -> Result<()> {
    if offers.host_paths || how.mounts.is_empty() {
        return Ok(());
    }
    Err(offers.unsupported(
        "mounted directories on a code host",
        "give the data as inputs or read it through a tool",
    ))
}

/// Waits for the bridge's `ready`: on the direct channel if it was offered
/// one and connects, else on the attach stream, greeting it again as often
/// as the backend says (its first `ready` can miss a late attach).
async fn ready(started: Started, offer: Option<Offer>) -> Result<Runner> {
    let Started {
        held,
        attached,
        regreet,
        ..
    } = started;
    let mut runner = Runner::attached(held, attached.input, attached.output);
    if regreet.is_some() {
        runner.send(&ToRunner::Hello).await?;
    }
    let mut accepting = offer.map(|offer| Box::pin(offer.accept()));
    loop {
        let next = match &mut accepting {
            Some(accept) => tokio::select! {
                channel = accept => {
                    accepting = None;
                    match channel {
                        Ok(channel) => {
                            tracing::debug!("the code host's bridge is on the direct channel");
                            runner.use_channel(channel);
                        }
                        Err(e) => tracing::debug!(error = %e, "the bridge's socket failed; using the attach stream"),
                    }
                    continue;
                }
                next = runner.next() => next,
            },
            None => match regreet {
                Some(every) => match tokio::time::timeout(every, runner.next()).await {
                    Ok(next) => next,
                    Err(_) => {
                        runner.send(&ToRunner::Hello).await?;
                        continue;
                    }
                },
                None => runner.next().await,
            },
        };
        match next {
            Some(Ok(FromRunner::Ready { .. })) => return Ok(runner),
            Some(Ok(_)) => continue,
            Some(Err(e)) => return Err(e),
            None => return Err(bridge_exited(&runner.stderr)),
        }
    }
}

/// Puts the mounted directories' copies in and has the bridge open them.
/// Their volume is in memory: what is uploaded before the start is gone
/// when the container starts, so they go in once it runs. Only a backend
/// that offers host paths gets here (see `launch`).
async fn open_mounts(
    client: &Client,
    runner: &mut Runner,
    tar: &super::mounts::Packed,
) -> Result<()> {
    let id = runner.container.id().to_string();
    client
        .engine()?
        .upload_archive_file(&id, super::mounts::MOUNTS_DIR, &tar.path)
        .await?;
    runner.send(&ToRunner::OpenMounts).await?;
    loop {
        match runner.next().await {
            Some(Ok(FromRunner::MountsOpened { error: None })) => return Ok(()),
            Some(Ok(FromRunner::MountsOpened { error: Some(e) })) => {
                return Err(Error::spec("code host mounts", e))
            }
            Some(Ok(_)) => continue,
            Some(Err(e)) => return Err(e),
            None => return Err(bridge_exited(&runner.stderr)),
        }
    }
}
