//! Which daemon to talk to, and how: an explicit endpoint, `DOCKER_HOST`, a
//! Docker context or the local socket, with TLS material and an SSH identity,
//! resolved the way the docker CLI resolves them.
//!
//! Resolution is pure (it reads files and the [`Environment`] it is given), so
//! its precedence rules are unit-tested without a daemon.

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::error::{Error, Result};

/// The default daemon endpoint when nothing else names one.
pub const DEFAULT_ENDPOINT: &str = "unix:///var/run/docker.sock";

/// A daemon's TLS material: the CA that signed the daemon's certificate, and
/// the client certificate and key the daemon checks (`--tlsverify`).
///
/// ```
/// let tls = dockhand::TlsFiles::from_dir("/home/me/.docker/remote");
/// assert!(tls.ca().ends_with("ca.pem"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    ca: PathBuf,
    cert: PathBuf,
    key: PathBuf,
}

impl TlsFiles {
    /// The three files, named as the docker CLI names them.
    pub fn new(ca: impl Into<PathBuf>, cert: impl Into<PathBuf>, key: impl Into<PathBuf>) -> Self {
        TlsFiles {
            ca: ca.into(),
            cert: cert.into(),
            key: key.into(),
        }
    }

    /// `ca.pem`, `cert.pem` and `key.pem` in `dir` (what `DOCKER_CERT_PATH` points at).
    pub fn from_dir(dir: impl AsRef<Path>) -> Self {
        let dir = dir.as_ref();
        TlsFiles::new(
            dir.join("ca.pem"),
            dir.join("cert.pem"),
            dir.join("key.pem"),
        )
    }

    /// The CA certificate the daemon's certificate must chain to.
    pub fn ca(&self) -> &Path {
        &self.ca
    }

    /// The client certificate.
    pub fn cert(&self) -> &Path {
        &self.cert
    }

    /// The client key.
    pub fn key(&self) -> &Path {
        &self.key
    }

    /// Fails with [`Error::DaemonTls`] naming the first file that cannot be
    /// read or holds no PEM block, so a typo shows before any connection.
    pub(crate) fn check(&self, endpoint: &str, origin: &str) -> Result<()> {
        for (what, path, marker) in [
            ("CA certificate", &self.ca, "CERTIFICATE"),
            ("client certificate", &self.cert, "CERTIFICATE"),
            ("client key", &self.key, "PRIVATE KEY"),
        ] {
            let problem = match std::fs::read_to_string(path) {
                Err(e) => format!("cannot read the {what} {}: {e}", path.display()),
                Ok(text) if !text.contains("-----BEGIN ") || !text.contains(marker) => {
                    format!("the {what} {} holds no PEM {marker}", path.display())
                }
                Ok(_) => continue,
            };
            return Err(Error::DaemonTls {
                endpoint: endpoint.to_string(),
                reason: problem,
                hint: format!(
                    "the TLS files came from {origin}; point DOCKER_CERT_PATH (or the context's \
                     TLS material, or ClientBuilder::tls) at a folder with ca.pem, cert.pem and key.pem"
                ),
            });
        }
        Ok(())
    }
}

/// What the caller chose on [`ClientBuilder`](crate::ClientBuilder).
#[derive(Debug, Clone, Default)]
pub(crate) struct Choice {
    pub endpoint: Option<String>,
    pub context: Option<String>,
    pub tls: Option<TlsFiles>,
    pub ssh_identity: Option<PathBuf>,
    pub shares_filesystem: Option<bool>,
    pub connect_timeout: Option<std::time::Duration>,
}

/// The environment variables and folders resolution reads.
#[derive(Debug, Clone, Default)]
pub(crate) struct Environment {
    pub docker_host: Option<String>,
    pub docker_context: Option<String>,
    pub tls_verify: Option<String>,
    pub cert_path: Option<PathBuf>,
    /// `DOCKER_CONFIG`, else `~/.docker`.
    pub config_dir: Option<PathBuf>,
}

impl Environment {
    /// The process's own environment.
    pub fn current() -> Self {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        Environment {
            docker_host: var("DOCKER_HOST"),
            docker_context: var("DOCKER_CONTEXT"),
            tls_verify: var("DOCKER_TLS_VERIFY"),
            cert_path: var("DOCKER_CERT_PATH").map(PathBuf::from),
            config_dir: var("DOCKER_CONFIG")
                .map(PathBuf::from)
                .or_else(|| dirs::home_dir().map(|h| h.join(".docker"))),
        }
    }
}

/// A resolved daemon: where it is, how to secure the connection, and where
/// that came from (for error messages).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Target {
    /// `unix:///path`, `tcp://host:port`, `https://…` or `ssh://user@host`.
    pub host: String,
    pub tls: Option<TlsFiles>,
    pub ssh_identity: Option<PathBuf>,
    /// Where the choice came from: "DOCKER_HOST", "context `x`", ….
    pub origin: String,
    /// Whether paths on this machine are paths on the daemon's machine.
    pub shares_filesystem: bool,
}

impl Target {
    /// Picks the daemon as the docker CLI does: an explicit endpoint, else an
    /// explicit context, else `DOCKER_HOST`, else `DOCKER_CONTEXT`, else the
    /// config's current context, else the local socket. TLS for `tcp://`
    /// comes from the caller, else the context, else `DOCKER_TLS_VERIFY` with
    /// `DOCKER_CERT_PATH`.
    pub fn resolve(choice: &Choice, env: &Environment) -> Result<Target> {
        let (host, origin, context_tls) = if let Some(endpoint) = &choice.endpoint {
            (endpoint.clone(), "the endpoint given".to_string(), None)
        } else if let Some(name) = &choice.context {
            context_endpoint(name, env)?
        } else if let Some(host) = &env.docker_host {
            (host.clone(), "DOCKER_HOST".to_string(), None)
        } else if let Some(name) = env.docker_context.clone().or_else(|| current_context(env)) {
            context_endpoint(&name, env)?
        } else {
            (
                DEFAULT_ENDPOINT.to_string(),
                "the default socket".into(),
                None,
            )
        };
        // A bare path is what some tools put in DOCKER_HOST; treat it as a socket.
        let host = if host.starts_with('/') {
            format!("unix://{host}")
        } else {
            host
        };
        if let Some(rest) = host.strip_prefix("ssh://") {
            check_ssh_destination(rest, &host)?;
        }
        let is_tcp = host.starts_with("tcp://") || host.starts_with("https://");
        let tls = if !is_tcp {
            None
        } else if let Some(tls) = &choice.tls {
            Some(tls.clone())
        } else if context_tls.is_some() {
            context_tls
        } else if env.tls_verify.is_some() || host.starts_with("https://") {
            let dir = env
                .cert_path
                .clone()
                .or_else(|| env.config_dir.clone())
                .unwrap_or_else(|| PathBuf::from(".docker"));
            Some(TlsFiles::from_dir(dir))
        } else {
            None
        };
        let shares_filesystem = choice
            .shares_filesystem
            .unwrap_or_else(|| host.starts_with("unix://"));
        Ok(Target {
            host,
            tls,
            ssh_identity: choice.ssh_identity.clone(),
            origin,
            shares_filesystem,
        })
    }
}

/// `ssh://` endpoints reach `ssh` as a plain destination (`user@host`): a
/// port or a path in the URL would be taken as part of the host name, so
/// they are refused here with the way to say them instead.
fn check_ssh_destination(rest: &str, host: &str) -> Result<()> {
    let after_user = rest.rsplit('@').next().unwrap_or(rest);
    let problem = if after_user.is_empty() {
        Some("no host")
    } else if after_user.contains(':') {
        Some("a port")
    } else if after_user.contains('/') {
        Some("a path")
    } else {
        None
    };
    match problem {
        None => Ok(()),
        Some(what) => Err(Error::DaemonUnreachable {
            endpoint: host.to_string(),
            reason: format!("the ssh endpoint has {what}"),
            hint: "write ssh://user@host; give a port or other options to a Host entry in \
                   ~/.ssh/config (`Host box` / `HostName …` / `Port 2222`) and use ssh://user@box"
                .to_string(),
        }),
    }
}

/// The `currentContext` of the docker CLI's `config.json`, unless it is `default`.
fn current_context(env: &Environment) -> Option<String> {
    let config = env.config_dir.as_ref()?.join("config.json");
    let text = std::fs::read_to_string(config).ok()?;
    let json: serde_json::Value = serde_json::from_str(&text).ok()?;
    json.get("currentContext")?
        .as_str()
        .filter(|name| !name.is_empty())
        .map(str::to_string)
}

/// A context's docker endpoint and TLS material, from the docker CLI's
/// context store (`contexts/meta/<sha256 of name>/meta.json`, TLS files in
/// `contexts/tls/<sha256 of name>/docker/`). `default` means `DOCKER_HOST` or
/// the local socket.
fn context_endpoint(name: &str, env: &Environment) -> Result<(String, String, Option<TlsFiles>)> {
    let origin = format!("context `{name}`");
    if name == "default" {
        let host = env
            .docker_host
            .clone()
            .unwrap_or_else(|| DEFAULT_ENDPOINT.to_string());
        return Ok((host, origin, None));
    }
    let unusable = |reason: String| Error::DaemonUnreachable {
        endpoint: format!("context `{name}`"),
        reason,
        hint: "list the contexts with `docker context ls`; create one with `docker context create`"
            .to_string(),
    };
    let store = env
        .config_dir
        .clone()
        .ok_or_else(|| unusable("no docker config folder (set DOCKER_CONFIG)".into()))?
        .join("contexts");
    let id = hex::encode(Sha256::digest(name.as_bytes()));
    let meta_path = store.join("meta").join(&id).join("meta.json");
    let text = std::fs::read_to_string(&meta_path).map_err(|e| {
        unusable(format!(
            "no such context ({} could not be read: {e})",
            meta_path.display()
        ))
    })?;
    let meta: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| unusable(format!("{} is not valid JSON: {e}", meta_path.display())))?;
    let docker = meta
        .pointer("/Endpoints/docker")
        .ok_or_else(|| unusable(format!("{} has no docker endpoint", meta_path.display())))?;
    let host = docker
        .get("Host")
        .and_then(|h| h.as_str())
        .filter(|h| !h.is_empty())
        .ok_or_else(|| unusable(format!("{} has no docker Host", meta_path.display())))?
        .to_string();
    if docker.get("SkipTLSVerify").and_then(|v| v.as_bool()) == Some(true) {
        return Err(Error::DaemonTls {
            endpoint: host,
            reason: format!("context `{name}` skips TLS verification"),
            hint: "dockhand always verifies the daemon's certificate: give the context its CA \
                   (`docker context update --docker \"host=…,ca=…,cert=…,key=…\"`)"
                .to_string(),
        });
    }
    let tls_dir = store.join("tls").join(&id).join("docker");
    let tls = tls_dir
        .join("ca.pem")
        .exists()
        .then(|| TlsFiles::from_dir(&tls_dir));
    Ok((host, origin, tls))
}

#[cfg(test)]
#[path = "endpoint_tests.rs"]
mod tests;
