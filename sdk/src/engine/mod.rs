//! The engine layer: the only module that talks to the Docker Engine API (bollard):
//! containers (create, upload, attach, start, wait, logs, download, remove,
//! list), images (inspect, build, pull, tag, commit, list, remove).
//!
//! Everything above it (images, sandboxes, code mode, sessions) speaks in the
//! plain types defined here, so the choice of Docker client stays in one place.
//! Every object created here carries the labels of [`labels`], and every
//! container is owned by a [`ContainerGuard`] that removes it even when the
//! caller's future is dropped or panics.

mod checkpoint;
mod container;
mod daemon;
mod endpoint;
mod guard;
mod image;
pub mod labels;
mod network;
mod usage;
mod volume;
pub(crate) use volume::VolumeRecord;
mod watchdog;

pub(crate) use checkpoint::{
    checkpoint_name, copy_checkpoint, end_orphaned_shims, mark_unique, remove_runtime_copies, seal,
    KeptSeals, Seal,
};
pub use container::{
    Attached, ContainerSpec, ExitStatus, LogChunk, Mount, BYTES_PER_FILE, UNPRIVILEGED_USER,
};
pub use daemon::{DaemonInfo, ManagedImage};
pub use endpoint::TlsFiles;
pub(crate) use endpoint::{Choice, Environment, Target};
pub(crate) use guard::submit_job;
pub use guard::ContainerGuard;
pub(crate) use image::split_reference;
pub use image::{label_instruction, BuildLine};
pub use usage::ResourceUsage;

use std::time::Duration;

use bollard::Docker;

use crate::error::{Error, Result};

/// How long `connect` waits for the daemon to answer a ping, unless told.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Covers requests up to their response headers; image builds and big uploads
/// send their whole body first, so the default 120 s is too short for them.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(3600);

/// A connection to one Docker daemon. Cheap to clone.
#[derive(Clone)]
pub struct Engine {
    docker: Docker,
    target: std::sync::Arc<Target>,
    /// The daemon's registered OCI runtimes, read on first need.
    runtimes:
        std::sync::Arc<tokio::sync::OnceCell<std::collections::BTreeMap<String, Vec<String>>>>,
    /// The daemon's platform (`linux/amd64`), read on first need.
    platform: std::sync::Arc<tokio::sync::OnceCell<String>>,
    /// What checkpoints need of the daemon (its settings and data root),
    /// read on first need.
    checkpoint_facts: std::sync::Arc<tokio::sync::OnceCell<DaemonInfo>>,
    /// Finds or makes the watchdog's image; without it no watchdog starts.
    /// The image layer provides it (the engine builds no images of its own).
    watchdog_image: Option<WatchdogImage>,
}

/// Finds or makes the watchdog's image and returns its reference.
pub(crate) type WatchdogImage = fn(Engine) -> futures::future::BoxFuture<'static, Result<String>>;

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("endpoint", &self.target.host)
            .finish()
    }
}

impl Engine {
    /// Connects to the daemon `choice` resolves to (see [`Target::resolve`])
    /// and pings it.
    pub(crate) async fn connect(choice: &Choice) -> Result<Self> {
        // Reads the docker config, context store and TLS files: off the async threads.
        let resolve = {
            let choice = choice.clone();
            move || {
                let target = Target::resolve(&choice, &Environment::current())?;
                if let Some(tls) = &target.tls {
                    tls.check(&target.host, &target.origin)?;
                }
                Ok::<_, Error>(target)
            }
        };
        let target = tokio::task::spawn_blocking(resolve)
            .await
            .map_err(|e| Error::io("resolving the daemon", std::io::Error::other(e)))??;
        let docker = Self::client_for(&target).map_err(|e| connect_error(&target, &e))?;
        let limit = choice.connect_timeout.unwrap_or(DEFAULT_CONNECT_TIMEOUT);
        match tokio::time::timeout(limit, docker.ping()).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => return Err(connect_error(&target, &e)),
            Err(_) => {
                return Err(Error::DaemonUnreachable {
                    hint: unreachable_hint(&target),
                    endpoint: target.host.clone(),
                    reason: format!("no answer within {limit:?}"),
                })
            }
        }
        Ok(Engine {
            docker,
            target: std::sync::Arc::new(target),
            runtimes: Default::default(),
            platform: Default::default(),
            checkpoint_facts: Default::default(),
            watchdog_image: None,
        })
    }

    /// Lets this engine start the per-process watchdog, from the image
    /// `image` finds or makes.
    pub(crate) fn with_watchdog(mut self, image: WatchdogImage) -> Self {
        self.watchdog_image = Some(image);
        self
    }

    fn client_for(target: &Target) -> std::result::Result<Docker, bollard::errors::Error> {
        let timeout = REQUEST_TIMEOUT.as_secs();
        let version = bollard::API_DEFAULT_VERSION;
        let host = target.host.as_str();
        let docker = if let Some(tls) = &target.tls {
            Docker::connect_with_ssl(host, tls.key(), tls.cert(), tls.ca(), timeout, version)?
        } else if host.starts_with("tcp://") || host.starts_with("http://") {
            // Not `connect_with_host`: it would switch to TLS on DOCKER_TLS_VERIFY
            // behind our back; that choice was made in `Target::resolve`.
            Docker::connect_with_http(host, timeout, version)?
        } else if host.starts_with("ssh://") {
            let identity = target
                .ssh_identity
                .as_ref()
                .map(|p| p.display().to_string());
            Docker::connect_with_ssh(host, timeout, version, identity)?
        } else {
            Docker::connect_with_host(host)?
        };
        Ok(docker.with_timeout(REQUEST_TIMEOUT))
    }

    /// A second, independent client to the same daemon. Cleanup on drop uses
    /// one on a helper thread, because the original's connection pool belongs to
    /// a runtime that may be shutting down.
    fn reconnect(&self) -> std::result::Result<Docker, bollard::errors::Error> {
        Self::client_for(&self.target)
    }

    /// The endpoint this engine talks to.
    pub fn endpoint(&self) -> &str {
        &self.target.host
    }

    /// Whether paths on this machine are paths on the daemon's machine (a
    /// local socket, unless the client was told otherwise).
    pub fn shares_filesystem(&self) -> bool {
        self.target.shares_filesystem
    }

    /// Fails with [`Error::NeedsLocalDaemon`] when the daemon cannot see this
    /// machine's files.
    pub(crate) fn require_shared_filesystem(&self, feature: String, hint: &str) -> Result<()> {
        if self.shares_filesystem() {
            return Ok(());
        }
        Err(Error::NeedsLocalDaemon {
            feature,
            endpoint: self.target.host.clone(),
            hint: format!(
                "{hint}; if the daemon does run on this machine, say so with \
                 ClientBuilder::daemon_shares_filesystem(true)"
            ),
        })
    }
}

/// A failed connection as a typed error: certificate problems are
/// [`Error::DaemonTls`], everything else [`Error::DaemonUnreachable`].
fn connect_error(target: &Target, e: &bollard::errors::Error) -> Error {
    // The TLS cause sits deep in the chain (hyper → rustls); read all of it.
    let mut reason = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(inner) = source {
        let text = inner.to_string();
        if !reason.contains(&text) {
            reason = format!("{reason}: {text}");
        }
        source = inner.source();
    }
    let lower = reason.to_lowercase();
    let tls_failed = target.tls.is_some()
        && ["certificate", "handshake", "tls", "alert", "unknownissuer"]
            .iter()
            .any(|w| lower.contains(w));
    if tls_failed {
        return Error::DaemonTls {
            endpoint: target.host.clone(),
            reason,
            hint: format!(
                "the daemon's certificate must be signed by the CA in {} and name the host you \
                 connect to, and the daemon must trust the client certificate {} (TLS files \
                 from {})",
                target
                    .tls
                    .as_ref()
                    .map(|t| t.ca().display().to_string())
                    .unwrap_or_default(),
                target
                    .tls
                    .as_ref()
                    .map(|t| t.cert().display().to_string())
                    .unwrap_or_default(),
                target.origin
            ),
        };
    }
    Error::DaemonUnreachable {
        hint: unreachable_hint(target),
        endpoint: target.host.clone(),
        reason,
    }
}

fn unreachable_hint(target: &Target) -> String {
    let host = &target.host;
    if host.starts_with("unix://") {
        "start the Docker daemon (`sudo systemctl start docker`, or `sudo dockerd &`), \
         check that your user may open the socket (group `docker`), \
         or point DOCKER_HOST at a running daemon"
            .to_string()
    } else if host.starts_with("ssh://") {
        "check that `ssh` reaches the host without a prompt (keys, known_hosts) and that \
         `docker system dial-stdio` works there"
            .to_string()
    } else if target.tls.is_none() {
        format!(
            "check that the daemon listens at {host} (chosen by {}); for TLS set \
             DOCKER_TLS_VERIFY=1 and DOCKER_CERT_PATH to the folder with ca.pem, cert.pem \
             and key.pem",
            target.origin
        )
    } else {
        format!(
            "check that the daemon listens at {host} (chosen by {}) with TLS",
            target.origin
        )
    }
}

/// Maps a bollard error to [`Error::Docker`] for `operation`.
pub(crate) fn docker_err(operation: &'static str, e: bollard::errors::Error) -> Error {
    let (message, status) = match e {
        bollard::errors::Error::DockerResponseServerError {
            message,
            status_code,
        } => (message, Some(status_code)),
        other => (other.to_string(), None),
    };
    Error::Docker {
        operation,
        message,
        status,
    }
}

/// Whether a bollard error says the daemon could not be talked to at all
/// (its socket gone, the connection refused or cut, no answer in time),
/// rather than that it answered with a refusal.
pub(crate) fn is_outage(e: &bollard::errors::Error) -> bool {
    use bollard::errors::Error as E;
    matches!(
        e,
        E::HyperResponseError { .. }
            | E::IOError { .. }
            | E::RequestTimeoutError
            | E::SocketNotFoundError(_)
            | E::HyperLegacyError { .. }
    )
}

impl Engine {
    /// [`docker_err`], except that a daemon that could not be talked to is
    /// [`Error::DaemonUnreachable`], naming this engine's endpoint.
    pub(crate) fn docker_err(&self, operation: &'static str, e: bollard::errors::Error) -> Error {
        if !is_outage(&e) {
            return docker_err(operation, e);
        }
        Error::DaemonUnreachable {
            endpoint: self.target.host.clone(),
            reason: format!("{operation}: {e}"),
            hint: "the daemon stopped answering (stopped, restarting, or the connection to it \
                   was lost); what this process made there is removed once it answers again"
                .into(),
        }
    }
}

/// Whether a bollard error is a 404 from the daemon.
fn is_not_found(e: &bollard::errors::Error) -> bool {
    matches!(
        e,
        bollard::errors::Error::DockerResponseServerError {
            status_code: 404,
            ..
        }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn docker_host_from_the_environment_is_used() {
        // Serialised by being the only test in the crate that touches DOCKER_HOST.
        let previous = std::env::var("DOCKER_HOST").ok();
        std::env::set_var("DOCKER_HOST", "unix:///nonexistent/from-env.sock");
        let err = Engine::connect(&Choice::default()).await.unwrap_err();
        match previous {
            Some(v) => std::env::set_var("DOCKER_HOST", v),
            None => std::env::remove_var("DOCKER_HOST"),
        }
        assert!(
            err.to_string().contains("/nonexistent/from-env.sock"),
            "{err}"
        );
    }
}
