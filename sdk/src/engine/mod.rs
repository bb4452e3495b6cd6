//! The engine layer: the only module that talks to the Docker Engine API (bollard):
//! containers (create, upload, attach, start, wait, logs, download, remove,
//! list), images (inspect, build, pull, tag, commit, list, remove).
//!
//! Everything above it (images, sandboxes, code mode, sessions) speaks in the
//! plain types defined here, so the choice of Docker client stays in one place.
//! Every object created here carries the labels of [`labels`], and every
//! container is owned by a [`ContainerGuard`] that removes it even when the
//! caller's future is dropped or panics.

mod container;
mod daemon;
mod guard;
mod image;
pub mod labels;
mod watchdog;

pub use container::{ContainerSpec, ExitStatus, LogChunk, Mount};
pub use daemon::{DaemonInfo, ManagedImage};
pub use guard::ContainerGuard;
pub use image::{label_instruction, BuildLine};

use std::time::Duration;

use bollard::Docker;

use crate::error::{Error, Result};

/// The default daemon endpoint when `DOCKER_HOST` is unset.
pub const DEFAULT_ENDPOINT: &str = "unix:///var/run/docker.sock";

/// How long `connect` waits for the daemon to answer a ping.
const PING_TIMEOUT: Duration = Duration::from_secs(5);

/// Covers requests up to their response headers; image builds and big uploads
/// send their whole body first, so the default 120 s is too short for them.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(3600);

/// A connection to one Docker daemon. Cheap to clone.
#[derive(Clone)]
pub struct Engine {
    docker: Docker,
    endpoint: String,
    /// The daemon's registered OCI runtimes, read on first need.
    runtimes:
        std::sync::Arc<tokio::sync::OnceCell<std::collections::BTreeMap<String, Vec<String>>>>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("endpoint", &self.endpoint)
            .finish()
    }
}

impl Engine {
    /// Connects to `endpoint` (or `DOCKER_HOST`, or the default socket) and pings it.
    ///
    /// `tcp://` endpoints use TLS when `DOCKER_TLS_VERIFY` is set, with the
    /// certificates in `DOCKER_CERT_PATH`, as the docker CLI does.
    pub async fn connect(endpoint: Option<&str>) -> Result<Self> {
        let endpoint = choose_endpoint(endpoint, std::env::var("DOCKER_HOST").ok());
        let unreachable = |reason: String| Error::DaemonUnreachable {
            hint: unreachable_hint(&endpoint),
            endpoint: endpoint.clone(),
            reason,
        };
        let docker = Self::client_for(&endpoint).map_err(|e| unreachable(e.to_string()))?;
        match tokio::time::timeout(PING_TIMEOUT, docker.ping()).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => return Err(unreachable(e.to_string())),
            Err(_) => return Err(unreachable(format!("no answer within {PING_TIMEOUT:?}"))),
        }
        Ok(Engine {
            docker,
            endpoint,
            runtimes: Default::default(),
        })
    }

    fn client_for(endpoint: &str) -> std::result::Result<Docker, bollard::errors::Error> {
        // A bare path is what some tools put in DOCKER_HOST; treat it as a socket.
        let host = if endpoint.starts_with('/') {
            format!("unix://{endpoint}")
        } else {
            endpoint.to_string()
        };
        Ok(Docker::connect_with_host(&host)?.with_timeout(REQUEST_TIMEOUT))
    }

    /// A second, independent client to the same daemon. Cleanup on drop uses
    /// one on a helper thread, because the original's connection pool belongs to
    /// a runtime that may be shutting down.
    fn reconnect(&self) -> std::result::Result<Docker, bollard::errors::Error> {
        Self::client_for(&self.endpoint)
    }

    /// The endpoint this engine talks to.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }
}

/// The endpoint to use: the explicit one, else `DOCKER_HOST`, else the default socket.
fn choose_endpoint(explicit: Option<&str>, docker_host: Option<String>) -> String {
    explicit
        .map(str::to_string)
        .or(docker_host.filter(|h| !h.trim().is_empty()))
        .unwrap_or_else(|| DEFAULT_ENDPOINT.to_string())
}

fn unreachable_hint(endpoint: &str) -> String {
    if endpoint.starts_with("unix://") || endpoint.starts_with('/') {
        "start the Docker daemon (`sudo systemctl start docker`, or `sudo dockerd &`), \
         check that your user may open the socket (group `docker`), \
         or point DOCKER_HOST at a running daemon"
            .to_string()
    } else {
        "check that the daemon listens there and is reachable; for TLS set DOCKER_TLS_VERIFY=1 \
         and DOCKER_CERT_PATH to the folder with ca.pem, cert.pem and key.pem"
            .to_string()
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

    #[test]
    fn endpoint_precedence() {
        assert_eq!(choose_endpoint(None, None), DEFAULT_ENDPOINT);
        assert_eq!(choose_endpoint(None, Some(String::new())), DEFAULT_ENDPOINT);
        assert_eq!(
            choose_endpoint(None, Some("tcp://h:2376".into())),
            "tcp://h:2376"
        );
        assert_eq!(
            choose_endpoint(Some("unix:///x"), Some("tcp://h:2376".into())),
            "unix:///x"
        );
    }

    #[tokio::test]
    async fn docker_host_from_the_environment_is_used() {
        // Serialised by being the only test in the crate that touches DOCKER_HOST.
        let previous = std::env::var("DOCKER_HOST").ok();
        std::env::set_var("DOCKER_HOST", "unix:///nonexistent/from-env.sock");
        let err = Engine::connect(None).await.unwrap_err();
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
