//! Runtime controls of a sandbox: resources, timeout, retries, environment,
//! secrets, network, hardening and the output cache mode.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::engine::ContainerSpec;
use crate::error::{Error, Result};

/// Default memory limit: 1 GiB.
pub const DEFAULT_MEMORY: i64 = 1 << 30;
/// Default CPU limit: one CPU.
pub const DEFAULT_CPUS: f64 = 1.0;
/// Default process limit: enough for real programs, too few for a fork bomb to hurt.
pub const DEFAULT_PIDS: i64 = 256;
/// Default size of the writable `/tmp`.
pub const DEFAULT_TMP_SIZE: &str = "512m";
/// The unprivileged user sandboxes run as (`nobody`).
pub const UNPRIVILEGED_USER: &str = "65534:65534";

/// CPU, memory and process limits.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
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

/// Parses a memory size: bytes (`1048576`), binary units (`512Mi`, `1Gi`,
/// `64Ki`) or decimal units (`500M`, `2G`, `100k`).
///
/// ```
/// assert_eq!(dockhand::sandbox::parse_memory("512Mi").unwrap(), 512 * 1024 * 1024);
/// assert_eq!(dockhand::sandbox::parse_memory("2G").unwrap(), 2_000_000_000);
/// assert!(dockhand::sandbox::parse_memory("lots").is_err());
/// ```
pub fn parse_memory(text: &str) -> Result<i64> {
    let t = text.trim();
    let split = t
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let factor: f64 = match unit.trim() {
        "" | "b" | "B" => 1.0,
        "k" | "K" | "kB" | "KB" => 1e3,
        "M" | "MB" | "m" => 1e6,
        "G" | "GB" | "g" => 1e9,
        "Ki" | "KiB" => 1024.0,
        "Mi" | "MiB" => 1024.0 * 1024.0,
        "Gi" | "GiB" => 1024.0 * 1024.0 * 1024.0,
        _ => {
            return Err(Error::spec(
                "memory size",
                format!("`{text}`: unknown unit `{unit}` (use bytes, Ki, Mi, Gi, k, M or G)"),
            ))
        }
    };
    let value: f64 = num.parse().map_err(|_| {
        Error::spec(
            "memory size",
            format!("`{text}` is not a number with a unit, e.g. 512Mi"),
        )
    })?;
    let bytes = (value * factor).round();
    // Docker refuses limits under 6 MB.
    if bytes < 6.0 * 1024.0 * 1024.0 || bytes > i64::MAX as f64 {
        return Err(Error::spec(
            "memory size",
            format!("`{text}` must be at least 6Mi"),
        ));
    }
    Ok(bytes as i64)
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
        format!("rw,nosuid,nodev,exec,size={},mode=1777", hardening.tmp_size),
    )]
    .into();
}

/// Which network a sandbox may use.
///
/// None by default: untrusted code gets no network at all. This is the knob an
/// egress allow-list will extend (allowed hosts on a filtered network).
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
}

impl Network {
    pub(crate) fn mode(&self) -> Option<String> {
        match self {
            Network::None => None,
            Network::Bridge => Some("bridge".into()),
            Network::Named(n) => Some(n.clone()),
        }
    }
}

/// Security settings; safe by default, each relaxable on its own.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Hardening {
    /// Drop every Linux capability (default on).
    pub drop_all_capabilities: bool,
    /// Capabilities added back (e.g. `CHOWN` for some package managers).
    pub add_capabilities: Vec<String>,
    /// Forbid gaining privileges through setuid binaries (default on).
    pub no_new_privileges: bool,
    /// The user to run as (default `65534:65534`, nobody); `None` = the image's user (often root).
    pub user: Option<String>,
    /// Mount the root filesystem read-only (default on); `/tmp`,
    /// `/var/outputs` and `/run/secrets` stay writable.
    pub read_only_root: bool,
    /// Size of the writable `/tmp` (tmpfs).
    pub tmp_size: String,
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
}

/// How the output cache is used.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CacheMode {
    /// Return stored outputs for identical runs; store successful runs.
    #[default]
    Auto,
    /// Always run, and store the result (replacing a stored one).
    Override,
    /// Neither read nor write the cache.
    Disable,
}

/// How a secret reaches the code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SecretMount {
    /// As an environment variable of the secret's name.
    Env,
    /// As the file `/run/secrets/<name>` (mode 0400 for the sandbox user).
    File,
}

/// A secret value: never printed, logged, stored in a spec's JSON, put in an
/// image or used in a cache key.
#[derive(Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Secret {
    pub(crate) name: String,
    pub(crate) source: SecretSource,
    pub(crate) mount: SecretMount,
}

#[derive(Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum SecretSource {
    /// Given in code; not serialised (a replayed spec must be given it again).
    Value(#[serde(skip)] Option<String>),
    /// Read from the host's environment when the sandbox runs.
    HostEnv(String),
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let source = match &self.source {
            SecretSource::Value(_) => "value".to_string(),
            SecretSource::HostEnv(var) => format!("host env {var}"),
        };
        f.debug_struct("Secret")
            .field("name", &self.name)
            .field("source", &source)
            .field("mount", &self.mount)
            .field("value", &"<redacted>")
            .finish()
    }
}

impl Secret {
    /// A secret with a value given here, exposed as env var `name`.
    pub fn value(name: impl Into<String>, value: impl Into<String>) -> Self {
        Secret {
            name: name.into(),
            source: SecretSource::Value(Some(value.into())),
            mount: SecretMount::Env,
        }
    }

    /// A secret read from the host's environment variable `var` when the
    /// sandbox runs, exposed as env var `name`.
    pub fn from_env(name: impl Into<String>, var: impl Into<String>) -> Self {
        Secret {
            name: name.into(),
            source: SecretSource::HostEnv(var.into()),
            mount: SecretMount::Env,
        }
    }

    /// Exposes it as the file `/run/secrets/<name>` instead of an env var.
    pub fn as_file(mut self) -> Self {
        self.mount = SecretMount::File;
        self
    }

    /// The secret's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// How it is exposed.
    pub fn mount(&self) -> SecretMount {
        self.mount
    }

    /// The value, read now.
    pub(crate) fn resolve(&self) -> Result<String> {
        match &self.source {
            SecretSource::Value(Some(v)) => Ok(v.clone()),
            SecretSource::Value(None) => Err(Error::spec(
                "secret",
                format!("secret `{}` has no value (specs read back from JSON do not carry secret values; set it again)", self.name),
            )),
            SecretSource::HostEnv(var) => std::env::var(var).map_err(|_| {
                Error::spec("secret", format!("secret `{}`: host environment variable `{var}` is not set", self.name))
            }),
        }
    }
}

/// Replaces every secret value in `text` with `[redacted:<name>]`.
pub(crate) fn redact(text: &str, secrets: &[(String, String)]) -> String {
    let mut out = text.to_string();
    for (name, value) in secrets {
        // Very short values would redact ordinary text and say little anyway.
        if value.len() >= 3 && out.contains(value.as_str()) {
            out = out.replace(value.as_str(), &format!("[redacted:{name}]"));
        }
    }
    out
}

/// All runtime controls of a sandbox.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
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
            cache: CacheMode::Auto,
            cache_with_secrets: false,
            cache_with_network: false,
            outputs_limit: DEFAULT_OUTPUTS_LIMIT,
            accepted_exit_codes: default_accepted_exit_codes(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_units() {
        assert_eq!(parse_memory("1Gi").unwrap(), 1 << 30);
        assert_eq!(parse_memory("512Mi").unwrap(), 512 << 20);
        assert_eq!(parse_memory("1.5Gi").unwrap(), 3 << 29);
        assert_eq!(parse_memory("100M").unwrap(), 100_000_000);
        assert_eq!(parse_memory("67108864").unwrap(), 64 << 20);
        assert!(parse_memory("1Zi").is_err());
        assert!(parse_memory("1Ki").is_err(), "below Docker's minimum");
        assert!(parse_memory("Gi").is_err());
    }

    #[test]
    fn secrets_never_show_their_value() {
        let s = Secret::value("API_KEY", "s3cr3t-value");
        let debug = format!("{s:?}");
        assert!(!debug.contains("s3cr3t"), "{debug}");
        let json = serde_json::to_string(&s).unwrap();
        assert!(!json.contains("s3cr3t"), "{json}");
        let back: Secret = serde_json::from_str(&json).unwrap();
        assert!(back
            .resolve()
            .unwrap_err()
            .to_string()
            .contains("set it again"));
        assert_eq!(s.resolve().unwrap(), "s3cr3t-value");
    }

    #[test]
    fn redaction_replaces_every_occurrence() {
        let secrets = vec![("TOKEN".to_string(), "abc123".to_string())];
        assert_eq!(
            redact("x abc123 y abc123", &secrets),
            "x [redacted:TOKEN] y [redacted:TOKEN]"
        );
        assert_eq!(redact("nothing", &secrets), "nothing");
    }

    #[test]
    fn host_env_secrets_name_the_missing_variable() {
        let s = Secret::from_env("TOKEN", "DOCKHAND_TEST_SURELY_UNSET_VAR");
        let err = s.resolve().unwrap_err().to_string();
        assert!(err.contains("DOCKHAND_TEST_SURELY_UNSET_VAR"), "{err}");
    }
}
