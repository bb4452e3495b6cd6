//! [`SessionConfig`]: what a session's container looks like.

use crate::volume::VolumeMount;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::engine::Mount;
use crate::error::Result;
use crate::image::ImageSpec;
use crate::sandbox::{Hardening, Network, Resources, Secret};
use crate::settings::Memory;

/// A value resolved when the session is created (a token fetched just in
/// time, say), not when it is configured.
pub type LazyValue = Arc<dyn Fn() -> String + Send + Sync>;

#[derive(Clone)]
pub(crate) enum EnvValue {
    Plain(String),
    Lazy(LazyValue),
}

#[derive(Clone)]
pub(crate) enum SetupStep {
    Command(String),
    /// A [`SetupHook`](super::SetupHook), kept without its type: the hook
    /// takes the live session this config is made into, which is defined
    /// above it (`live`). Only `live` puts one here and calls it.
    Hook(Arc<dyn std::any::Any + Send + Sync>),
}

/// A snapshot of a session: an image committed from its container, or on
/// a cluster, a kept copy of a pausable session's claim (its files) and
/// the image its pod ran.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    /// The image reference (`dockhand/snapshot:...`; on a cluster, the
    /// session's image).
    pub image: String,
    /// The image id (on a cluster, the claim's name).
    pub id: String,
    /// On a cluster, the PersistentVolumeClaim holding the snapshot's
    /// files (a session from it starts on a copy); `None` on Docker, where
    /// the image holds them.
    pub files: Option<String>,
}

/// Options of an interactive session, validated when it starts.
///
/// ```
/// use dockhand::session::SessionConfig;
/// let config = SessionConfig::new()
///     .workspace("/workspace")
///     .env("MODE", "test")
///     .env_lazy("TOKEN", || "fetched-at-start".to_string())
///     .memory("512Mi")
///     .network(false)
///     .timeout(std::time::Duration::from_secs(60))
///     .setup_command("mkdir -p src tests");
/// assert_eq!(config.workspace_dir(), "/workspace");
/// ```
#[derive(Clone)]
pub struct SessionConfig {
    pub(crate) image: ImageSpec,
    pub(crate) workspace: String,
    pub(crate) mounts: Vec<Mount>,
    pub(crate) env: Vec<(String, EnvValue)>,
    pub(crate) resources: Resources,
    pub(crate) memory: Option<Memory>,
    pub(crate) isolation: crate::Isolation,
    pub(crate) secrets: Vec<Secret>,
    pub(crate) network: Network,
    pub(crate) hardening: Hardening,
    pub(crate) setup: Vec<SetupStep>,
    pub(crate) persist: bool,
    /// A snapshot's claim a session starts on a copy of (a cluster's).
    pub(crate) from_files: Option<String>,
    pub(crate) exec_timeout: Option<Duration>,
    pub(crate) output_limit: usize,
    pub(crate) read_limit: u64,
    pub(crate) request_timeout: Duration,
    pub(crate) start_timeout: Duration,
    pub(crate) name: Option<String>,
    /// Programs installed beside the agent (root-owned, read-only, where
    /// the session's code cannot write), by file name: what a capability
    /// runs in the container to judge the code there (a kernel's relay).
    pub(crate) helpers: Vec<(&'static str, &'static str)>,
    pub(crate) pausable: bool,
    pub(crate) keep: bool,
    pub(crate) volumes: Vec<VolumeMount>,
    pub(crate) auto_pause: Option<(Duration, super::PauseMode)>,
}

impl fmt::Debug for SessionConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let env: Vec<&str> = self.env.iter().map(|(k, _)| k.as_str()).collect();
        f.debug_struct("SessionConfig")
            .field("image", &self.image)
            .field("workspace", &self.workspace)
            .field("mounts", &self.mounts)
            .field("env (values hidden)", &env)
            .field("resources", &self.resources)
            .field("memory", &self.memory)
            .field("secrets", &self.secrets)
            .field("network", &self.network)
            .field("hardening", &self.hardening)
            .field("setup_steps", &self.setup.len())
            .field("persist", &self.persist)
            .field("pausable", &self.pausable)
            .field("keep", &self.keep)
            .field("volumes", &self.volumes)
            .finish()
    }
}

impl Default for SessionConfig {
    fn default() -> Self {
        SessionConfig {
            image: ImageSpec::default(),
            workspace: "/workspace".into(),
            mounts: Vec::new(),
            env: Vec::new(),
            resources: Resources::default(),
            memory: None,
            isolation: crate::Isolation::Default,
            secrets: Vec::new(),
            network: Network::None,
            // Agents install and change things; a snapshot must capture the
            // root filesystem, so it stays writable. Everything else is hardened.
            hardening: Hardening::default().writable_root(),
            setup: Vec::new(),
            persist: false,
            from_files: None,
            exec_timeout: Some(Duration::from_secs(120)),
            output_limit: 1 << 20,
            read_limit: 64 << 20,
            request_timeout: Duration::from_secs(30),
            start_timeout: Duration::from_secs(60),
            name: None,
            helpers: Vec::new(),
            pausable: false,
            keep: false,
            volumes: Vec::new(),
            auto_pause: None,
        }
    }
}

impl SessionConfig {
    /// Installs `text` as `HELPERS_DIR/<name>` beside the agent.
    pub(crate) fn helper(mut self, name: &'static str, text: &'static str) -> Self {
        self.helpers.retain(|(n, _)| *n != name);
        self.helpers.push((name, text));
        self
    }

    /// Defaults: the Python base image, `/workspace`, no network, 1 CPU, 1 GiB,
    /// the unprivileged user, all capabilities dropped, 120 s per command.
    pub fn new() -> Self {
        Self::default()
    }

    /// The image: any Linux image with `/bin/sh` (on a daemon of another
    /// platform than the SDK's, or on a cluster, it also needs `python3`).
    pub fn image(mut self, image: ImageSpec) -> Self {
        self.image = image;
        self
    }

    /// The image as configured.
    pub fn image_spec(&self) -> &ImageSpec {
        &self.image
    }

    /// Starts from a snapshot: the files are as they were when it was taken.
    pub fn from_snapshot(mut self, snapshot: &Snapshot) -> Self {
        self.image = ImageSpec::prebuilt(snapshot.image.clone());
        if let Some(files) = &snapshot.files {
            // Its files come on a claim of its own, copied from the snapshot's.
            self.from_files = Some(files.clone());
            self.pausable = true;
        }
        self
    }

    /// The workspace directory (created; commands run there; relative paths start there).
    pub fn workspace(mut self, dir: impl Into<String>) -> Self {
        self.workspace = dir.into();
        self
    }

    /// The workspace directory.
    pub fn workspace_dir(&self) -> &str {
        &self.workspace
    }

    /// Makes a host directory visible at `container_path`.
    pub fn mount(
        mut self,
        host_path: impl Into<String>,
        container_path: impl Into<String>,
        read_only: bool,
    ) -> Self {
        self.mounts.push(Mount {
            host_path: host_path.into(),
            container_path: container_path.into(),
            read_only,
        });
        self
    }

    /// Sets an environment variable.
    pub fn env(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.push((name.into(), EnvValue::Plain(value.into())));
        self
    }

    /// Sets an environment variable whose value is computed when the session starts.
    pub fn env_lazy(
        mut self,
        name: impl Into<String>,
        value: impl Fn() -> String + Send + Sync + 'static,
    ) -> Self {
        self.env
            .push((name.into(), EnvValue::Lazy(Arc::new(value))));
        self
    }

    crate::settings::resource_methods!(resources: resources, memory: memory, isolation: isolation);

    /// Adds a secret: an env var, or the file `/run/secrets/<name>` with
    /// [`Secret::as_file`]. Its value is read when the session starts and is
    /// redacted from command output and errors.
    pub fn secret(mut self, secret: Secret) -> Self {
        self.secrets.push(secret);
        self
    }

    /// Network access: `false`/[`Network::None`] (the default), `true`/
    /// [`Network::Bridge`], a [`Network::Named`] network, or an
    /// [`Egress`](crate::Egress) policy (listed hosts only, changeable while
    /// the session runs with [`Session::set_network`](crate::session::Session::set_network)).
    pub fn network(mut self, network: impl Into<Network>) -> Self {
        self.network = network.into();
        self
    }

    /// Security settings (see [`Hardening`]; the root filesystem is writable by default).
    pub fn hardening(mut self, hardening: Hardening) -> Self {
        self.hardening = hardening;
        self
    }

    /// A shell command run once after start (in the workspace); a failure fails the start.
    pub fn setup_command(mut self, command: impl Into<String>) -> Self {
        self.setup.push(SetupStep::Command(command.into()));
        self
    }

    /// Snapshot the session when it is closed.
    pub fn persist(mut self, on: bool) -> Self {
        self.persist = on;
        self
    }

    /// Wall-clock limit of each command unless its
    /// [`ExecOptions`](super::ExecOptions) say otherwise (default 120 s); on
    /// expiry the command's processes are killed and the session lives on.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.exec_timeout = Some(timeout);
        self
    }

    /// No default limit on commands.
    pub fn no_timeout(mut self) -> Self {
        self.exec_timeout = None;
        self
    }

    /// The largest file `read_file` returns (default 64 MiB); larger ones
    /// fail with [`FileErrorKind::TooLarge`](crate::FileErrorKind::TooLarge).
    pub fn read_limit(mut self, bytes: u64) -> Self {
        self.read_limit = bytes;
        self
    }

    /// The largest file `read_file` returns (see [`read_limit`](Self::read_limit)).
    pub fn read_limit_bytes(&self) -> u64 {
        self.read_limit
    }

    /// How long a file operation may go unanswered before the session is
    /// taken to have stopped answering (default 30 s); commands get their
    /// own timeout plus 5 s.
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// How long `start` may take from creating the container (or pod) to
    /// the agent's first answer (default 60 s). The image is made before
    /// this limit starts; on a cluster, where a node pulls the image, allow
    /// for the pull.
    pub fn start_timeout(mut self, timeout: Duration) -> Self {
        self.start_timeout = timeout;
        self
    }

    /// Bytes of stdout and stderr kept per command.
    pub fn output_limit(mut self, bytes: usize) -> Self {
        self.output_limit = bytes;
        self
    }

    /// Lets the session be paused ([`Session::pause`](super::Session::pause)) and forked: its
    /// container is not removed by the daemon when its agent stops, only by
    /// dockhand (on close, or when this process goes).
    pub fn pausable(mut self, on: bool) -> Self {
        self.pausable = on;
        self
    }

    /// The session outlives this process (implies [`pausable`](Self::pausable)):
    /// dropping it, or this process ending, leaves its container as it is
    /// (running, with its processes, or paused), for
    /// [`Client::resume_session`](crate::Client::resume_session) by id in
    /// any later process; only [`Session::close`](super::Session::close) removes it. A running
    /// kept session keeps costing what it uses: pause it first to leave it
    /// costing nothing.
    /// [`Client::kept_sessions`](crate::Client::kept_sessions) lists them.
    pub fn keep(mut self, on: bool) -> Self {
        self.keep = on;
        if on {
            self.pausable = true;
        }
        self
    }

    /// Mounts the named volume `name` (made with
    /// [`Volume::create`](crate::Volume::create)) read-write at `path`.
    pub fn volume(mut self, name: impl Into<String>, path: impl Into<String>) -> Self {
        self.volumes.push(VolumeMount {
            name: name.into(),
            path: path.into(),
            read_only: false,
        });
        self
    }

    /// Mounts the named volume `name` read-only at `path`: many sessions
    /// may read one volume that another writes.
    pub fn volume_read_only(mut self, name: impl Into<String>, path: impl Into<String>) -> Self {
        self.volumes.push(VolumeMount {
            name: name.into(),
            path: path.into(),
            read_only: true,
        });
        self
    }

    /// Pauses the session (in `mode`) once no request has come for
    /// `idle`, and resumes it at the next request, which waits for the
    /// resume (implies [`pausable`](Self::pausable)). A pause the daemon
    /// refuses (memory mode without gVisor) stops the timer, once, with a
    /// warning; the session runs on.
    pub fn auto_pause(mut self, idle: Duration, mode: super::PauseMode) -> Self {
        self.auto_pause = Some((idle, mode));
        self.pausable = true;
        self
    }

    /// Whether sessions of this configuration outlive their process
    /// ([`keep`](Self::keep)).
    pub fn is_kept(&self) -> bool {
        self.keep
    }

    /// A name used in snapshot tags and labels.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// Checks what can be wrong before anything is created; returns the
    /// limits with the memory size resolved.
    pub(crate) fn checked_resources(&self) -> Result<Resources> {
        let bad = |msg: String| crate::Error::spec("session", msg);
        let mut resources = self.resources;
        crate::settings::settle_resources(&mut resources, &mut self.memory.clone()).map_err(bad)?;
        crate::settings::check_env_and_secrets(
            self.env.iter().map(|(name, _)| name.as_str()),
            &self.secrets,
        )
        .map_err(bad)?;
        if self.exec_timeout.is_some_and(|t| t.is_zero()) {
            return Err(bad("the timeout must be longer than zero".into()));
        }
        if self.start_timeout.is_zero() {
            return Err(bad("the start timeout must be longer than zero".into()));
        }
        self.hardening.check()?;
        crate::settings::check_network(&self.network, &self.secrets)?;
        if self.keep && matches!(self.network, Network::Egress(_)) {
            return Err(bad(
                "a kept session cannot use an egress policy: its gateway registration ends with this process; use network off or a named network".into(),
            ));
        }
        for v in &self.volumes {
            crate::volume::check_name(&v.name).map_err(bad)?;
            if !v.path.starts_with('/') || v.path == "/" {
                return Err(bad(format!(
                    "volume {} must be mounted at an absolute path other than /, not `{}`",
                    v.name, v.path
                )));
            }
        }
        Ok(resources)
    }

    /// Paths the session's files may be under: the workspace, mounts,
    /// volumes and `/tmp`.
    pub(crate) fn roots(&self) -> Vec<String> {
        let mut roots = vec![self.workspace.clone(), "/tmp".to_string()];
        roots.extend(self.mounts.iter().map(|m| m.container_path.clone()));
        roots.extend(self.volumes.iter().map(|v| v.path.clone()));
        roots
    }
}
