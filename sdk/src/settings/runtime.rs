//! Runtime controls of a sandbox: resources, timeout, retries, environment,
//! secrets, network, hardening and the output cache mode.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::secret::Secret;
use super::Memory;
use crate::engine::ContainerSpec;
use crate::error::{Error, Result};

/// Default memory limit: 1 GiB.
pub const DEFAULT_MEMORY: i64 = 1 << 30;
/// Default CPU limit: one CPU.
pub const DEFAULT_CPUS: f64 = 1.0;
/// Default process limit: enough for real programs, too few for a fork bomb to hurt.
pub const DEFAULT_PIDS: i64 = 256;
/// Default size of the writable `/tmp`.
pub const DEFAULT_TMP_SIZE: &str = "512Mi";
const DEFAULT_TMP_BYTES: i64 = 512 << 20;
pub use crate::engine::UNPRIVILEGED_USER;

/// CPU, memory and process limits, as a configuration's `cpus`, `memory`
/// and `pids` methods set them.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Resources {
    /// CPUs (fractional: 0.5 is half a CPU).
    pub cpus: f64,
    /// Memory in bytes (swap is not allowed beyond it).
    pub memory_bytes: i64,
    /// Maximum number of processes and threads.
    pub pids: i64,
}

impl Default for Resources {
    fn default() -> Self {
        Resources {
            cpus: DEFAULT_CPUS,
            memory_bytes: DEFAULT_MEMORY,
            pids: DEFAULT_PIDS,
        }
    }
}

// f64 has no Eq/Hash; compare the bits, which is what a spec's identity needs.
impl Eq for Resources {}
impl std::hash::Hash for Resources {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.cpus.to_bits().hash(state);
        self.memory_bytes.hash(state);
        self.pids.hash(state);
    }
}

/// Puts limits, hardening and network on a container spec; every kind of
/// container (sandbox, code host, session) is confined the same way. `/tmp` is
/// a tmpfs of `hardening.tmp_size`.
pub(crate) fn confine(
    spec: &mut ContainerSpec,
    resources: &Resources,
    hardening: &Hardening,
    network: &Network,
) {
    spec.memory_bytes = Some(resources.memory_bytes);
    spec.nano_cpus = Some((resources.cpus * 1e9) as i64);
    spec.pids_limit = Some(resources.pids);
    spec.network = network.mode();
    spec.user = hardening.user.clone();
    spec.cap_drop_all = hardening.drop_all_capabilities;
    spec.cap_add = hardening.add_capabilities.clone();
    spec.no_new_privileges = hardening.no_new_privileges;
    spec.read_only_rootfs = hardening.read_only_root;
    spec.tmpfs = [(
        "/tmp".to_string(),
        format!(
            "rw,nosuid,nodev,exec,size={},mode=1777",
            // Checked when the configuration was validated.
            hardening.tmp_size.bytes().unwrap_or(DEFAULT_TMP_BYTES)
        ),
    )]
    .into();
}

/// Which kernel boundary a container runs behind.
///
/// Containers share the host's kernel by default (`runc`). gVisor (`runsc`)
/// puts a user-space kernel between the code and the host's: one more wall
/// for untrusted code, at some cost in start time and system calls. The
/// daemon must have the runtime registered; a request for one it lacks
/// fails at once with [`Error::RuntimeUnavailable`](crate::Error::RuntimeUnavailable).
///
/// ```
/// use dockhand::{Isolation, Sandbox};
/// let sb = Sandbox::code("job", "print(1)").isolation(Isolation::Gvisor).build().unwrap();
/// assert_eq!(sb.runtime().isolation.runtime_name(), Some("runsc"));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Isolation {
    /// The daemon's default runtime (runc): the host's kernel.
    #[default]
    Default,
    /// gVisor's `runsc`: a user-space kernel in front of the host's.
    Gvisor,
    /// Any runtime the daemon has registered, by name.
    Runtime(String),
}

impl Isolation {
    /// The OCI runtime name to ask the daemon for (`None`: its default).
    pub fn runtime_name(&self) -> Option<&str> {
        match self {
            Isolation::Default => None,
            Isolation::Gvisor => Some("runsc"),
            Isolation::Runtime(name) => Some(name),
        }
    }
}

/// Which network a sandbox may use.
///
/// None by default: untrusted code gets no network at all. An
/// [`Egress`](crate::egress::Egress) policy lets it reach listed hosts only, through
/// dockhand's egress gateway.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Network {
    /// No network interface but loopback.
    #[default]
    None,
    /// Docker's default bridge network (outbound access as the host allows).
    Bridge,
    /// A named Docker network (created by you).
    Named(String),
    /// Listed hosts only, through dockhand's egress gateway (see
    /// [`Egress`](crate::egress::Egress)).
    Egress(crate::egress::Egress),
}

impl From<crate::egress::Egress> for Network {
    fn from(policy: crate::egress::Egress) -> Self {
        Network::Egress(policy)
    }
}

/// `true` is [`Network::Bridge`], `false` is [`Network::None`], so
/// `.network(true)` reads as it should on every configuration.
impl From<bool> for Network {
    fn from(on: bool) -> Self {
        if on {
            Network::Bridge
        } else {
            Network::None
        }
    }
}

impl Network {
    pub(crate) fn mode(&self) -> Option<String> {
        match self {
            Network::None => None,
            Network::Bridge => Some("bridge".into()),
            Network::Named(n) => Some(n.clone()),
            // None until the sandbox's lease gives it its own network: a
            // container made without one reaches nothing.
            Network::Egress(_) => None,
        }
    }
}

/// Security settings; safe by default, each relaxable on its own with a
/// builder method.
///
/// ```
/// use dockhand::Hardening;
/// // Root inside, to install into system paths; everything else stays hardened.
/// let h = Hardening::default().image_user().writable_root().tmp_size("1Gi");
/// assert!(h.check().is_ok());
/// assert!(Hardening::default().tmp_size("tiny").check().is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Hardening {
    pub(crate) drop_all_capabilities: bool,
    pub(crate) add_capabilities: Vec<String>,
    pub(crate) no_new_privileges: bool,
    pub(crate) user: Option<String>,
    pub(crate) read_only_root: bool,
    pub(crate) tmp_size: Memory,
}

impl Default for Hardening {
    fn default() -> Self {
        Hardening {
            drop_all_capabilities: true,
            add_capabilities: Vec::new(),
            no_new_privileges: true,
            user: Some(UNPRIVILEGED_USER.into()),
            read_only_root: true,
            tmp_size: DEFAULT_TMP_SIZE.into(),
        }
    }
}

impl Hardening {
    /// Everything relaxed: root user, writable root, capabilities kept. For
    /// trusted code that needs to install or change system files.
    pub fn relaxed() -> Self {
        Hardening {
            drop_all_capabilities: false,
            add_capabilities: Vec::new(),
            no_new_privileges: false,
            user: None,
            read_only_root: false,
            tmp_size: DEFAULT_TMP_SIZE.into(),
        }
    }

    /// Runs as this user: `uid:gid`, `uid` or a user name from the image
    /// (default `65534:65534`, nobody). Files the SDK puts in the container
    /// are owned by it when it is numeric.
    pub fn user(mut self, user: impl Into<String>) -> Self {
        self.user = Some(user.into());
        self
    }

    /// Runs as the image's own user (often root).
    pub fn image_user(mut self) -> Self {
        self.user = None;
        self
    }

    /// Makes the root filesystem writable (it is read-only by default;
    /// `/tmp`, `/var/outputs` and `/run/secrets` are writable either way).
    pub fn writable_root(mut self) -> Self {
        self.read_only_root = false;
        self
    }

    /// Mounts the root filesystem read-only.
    pub fn read_only_root(mut self) -> Self {
        self.read_only_root = true;
        self
    }

    /// Adds back one Linux capability, e.g. `"CHOWN"` (all are dropped by default).
    pub fn add_capability(mut self, capability: impl Into<String>) -> Self {
        self.add_capabilities.push(capability.into());
        self
    }

    /// Keeps Docker's default capability set instead of dropping them all.
    pub fn keep_default_capabilities(mut self) -> Self {
        self.drop_all_capabilities = false;
        self
    }

    /// Lets setuid binaries raise privileges (forbidden by default).
    pub fn allow_new_privileges(mut self) -> Self {
        self.no_new_privileges = false;
        self
    }

    /// Size of the writable `/tmp` (a tmpfs; default 512m), as a
    /// [`Memory`] size: text with a unit or bytes.
    pub fn tmp_size(mut self, size: impl Into<Memory>) -> Self {
        self.tmp_size = size.into();
        self
    }

    /// The user it runs as (`None`: the image's user).
    pub fn user_name(&self) -> Option<&str> {
        self.user.as_deref()
    }

    /// Whether the root filesystem is read-only.
    pub fn is_read_only_root(&self) -> bool {
        self.read_only_root
    }

    /// Checks the settings that can be wrong: the `/tmp` size and the user.
    pub fn check(&self) -> Result<()> {
        self.tmp_size
            .bytes()
            .map_err(|e| Error::spec("hardening", format!("the /tmp size: {e}")))?;
        if self.user.as_deref().is_some_and(|u| u.trim().is_empty()) {
            return Err(Error::spec(
                "hardening",
                "the user is empty; use image_user() for the image's own user",
            ));
        }
        Ok(())
    }

    /// The numeric `uid:gid` of the user, for owning files the container gets
    /// (a user name maps to root: only numeric ids are known without reading
    /// the image).
    pub(crate) fn owner_ids(&self) -> (u64, u64) {
        let Some(user) = self.user.as_deref() else {
            return (0, 0);
        };
        let mut parts = user.split(':');
        let uid = parts.next().and_then(|u| u.parse().ok()).unwrap_or(0);
        let gid = parts.next().and_then(|g| g.parse().ok()).unwrap_or(uid);
        (uid, gid)
    }
}

/// How the output cache is used.
///
/// Off by default: a run runs. Turn it on for sandboxes whose result depends
/// only on their code, inputs and image (no clock, no randomness, no
/// network), where a hit saves a container start:
///
/// ```
/// use dockhand::{CacheMode, Sandbox, Type};
/// let square = Sandbox::code("square", "y = x * x")
///     .input("x", Type::Int)
///     .output("y", Type::Int)
///     .cache(CacheMode::Auto)
///     .build()?;
/// # Ok::<(), dockhand::Error>(())
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CacheMode {
    /// Return stored outputs for identical runs; store successful runs. For
    /// deterministic sandboxes only: a hit replays `random()` and `time()`.
    Auto,
    /// Always run, and store the result (replacing a stored one).
    Override,
    /// Neither read nor write the cache (the default).
    #[default]
    Disable,
}

/// All runtime controls of a sandbox.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Runtime {
    /// Limits.
    pub resources: Resources,
    /// Wall-clock limit of one attempt, from start to exit.
    pub timeout: Option<Duration>,
    /// Extra attempts after a failed one.
    pub retries: u32,
    /// Plain environment variables.
    pub env: Vec<(String, String)>,
    /// Secrets.
    pub secrets: Vec<Secret>,
    /// Network access.
    pub network: Network,
    /// Security settings.
    pub hardening: Hardening,
    /// Output cache mode.
    pub cache: CacheMode,
    /// Whether runs with secrets may be cached (their values never enter the key).
    pub cache_with_secrets: bool,
    /// Whether runs with network access may be cached (what they fetched
    /// would be replayed from the cache).
    #[serde(default)]
    pub cache_with_network: bool,
    /// Exit codes that count as success (`[0]` unless the sandbox says more).
    #[serde(default = "default_accepted_exit_codes")]
    pub accepted_exit_codes: Vec<i64>,
    /// Bytes `/var/outputs` may hold when it is collected.
    #[serde(default = "default_outputs_limit")]
    pub outputs_limit: u64,
    /// The kernel boundary (runc by default, or gVisor).
    #[serde(default)]
    pub isolation: Isolation,
}

/// 1 GiB: what `/var/outputs` may hold unless a sandbox says otherwise.
pub const DEFAULT_OUTPUTS_LIMIT: u64 = 1 << 30;

fn default_accepted_exit_codes() -> Vec<i64> {
    vec![0]
}

fn default_outputs_limit() -> u64 {
    DEFAULT_OUTPUTS_LIMIT
}

impl Default for Runtime {
    fn default() -> Self {
        Runtime {
            resources: Resources::default(),
            timeout: None,
            retries: 0,
            env: Vec::new(),
            secrets: Vec::new(),
            network: Network::None,
            hardening: Hardening::default(),
            cache: CacheMode::Disable,
            cache_with_secrets: false,
            cache_with_network: false,
            outputs_limit: DEFAULT_OUTPUTS_LIMIT,
            accepted_exit_codes: default_accepted_exit_codes(),
            isolation: Isolation::Default,
        }
    }
}
