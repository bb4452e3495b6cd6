//! What every kind of container is configured with, spelled the same way
//! everywhere: [`Memory`] sizes, and the builder methods shared by
//! [`SandboxBuilder`](crate::SandboxBuilder),
//! [`SessionConfig`](crate::session::SessionConfig) and
//! [`CodeHostConfig`](crate::codemode::CodeHostConfig).
//!
//! The same concept has the same method and argument type on each:
//!
//! ```
//! use std::time::Duration;
//! use dockhand::codemode::CodeHostConfig;
//! use dockhand::session::SessionConfig;
//! use dockhand::{Hardening, ImageSpec, Sandbox, Secret};
//!
//! let image = ImageSpec::default().pip(["pyyaml"]);
//! let one_shot = Sandbox::code("job", "print(1)")
//!     .image(image.clone())
//!     .cpus(0.5).memory("512Mi").pids(64)
//!     .timeout(Duration::from_secs(30))
//!     .network(false)
//!     .env("MODE", "test")
//!     .secret(Secret::from_env("TOKEN", "MY_TOKEN"))
//!     .hardening(Hardening::default().tmp_size("64Mi"))
//!     .build()
//!     .unwrap();
//! let session = SessionConfig::new()
//!     .image(image.clone())
//!     .cpus(0.5).memory(512u64 << 20).pids(64)
//!     .timeout(Duration::from_secs(30))
//!     .network(true)
//!     .env("MODE", "test")
//!     .secret(Secret::from_env("TOKEN", "MY_TOKEN"))
//!     .hardening(Hardening::default().writable_root());
//! let code_host = CodeHostConfig::new()
//!     .image(image)
//!     .cpus(0.5).memory("512Mi").pids(64)
//!     .timeout(Duration::from_secs(30));
//! # let _ = (one_shot, session, code_host);
//! ```
//!
//! Code hosts have no env, secrets, network or hardening settings: the code
//! they run is a model's, so their container is always offline and fully
//! hardened, and Monty gives it no environment to read.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

mod runtime;
mod secret;

pub(crate) use runtime::confine;
pub use runtime::{
    CacheMode, Hardening, Isolation, Network, Resources, Runtime, DEFAULT_CPUS, DEFAULT_MEMORY,
    DEFAULT_PIDS, UNPRIVILEGED_USER,
};
pub(crate) use secret::{lookahead, redact, redact_cut, Cut};
pub use secret::{Secret, SecretMount, SECRETS_DIR};

/// A memory size: text with a unit (`"512Mi"`, `"1Gi"`, `"500M"`) or a byte
/// count. Every `memory(..)`-like builder method takes `impl Into<Memory>`,
/// so both spellings work wherever a size is asked for; text is checked when
/// the configuration is validated (at `build()` or `start()`).
///
/// ```
/// use dockhand::Memory;
/// assert_eq!(Memory::from("512Mi").bytes().unwrap(), 512 << 20);
/// assert_eq!(Memory::from(2u64 << 30).bytes().unwrap(), 2 << 30);
/// assert!(Memory::from("lots").bytes().is_err());
/// ```
///
/// Byte counts are unsigned (`u64` or `usize`): an unsuffixed literal would
/// be an `i32`, where `2 << 30` is already negative, so it does not compile.
///
/// ```compile_fail
/// let two_gib = dockhand::Memory::from(2 << 30);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Memory {
    /// A byte count.
    Bytes(u64),
    /// Text with a unit, as [`parse_memory`] reads it.
    Text(String),
}

impl Memory {
    /// The size in bytes, or why the text is not a size (at least 6Mi: Docker's minimum).
    pub fn bytes(&self) -> Result<i64> {
        match self {
            Memory::Text(text) => parse_memory(text),
            Memory::Bytes(b) if *b < MIN_MEMORY as u64 => Err(Error::spec(
                "memory size",
                format!("{b} bytes is less than 6Mi, Docker's minimum"),
            )),
            Memory::Bytes(b) => i64::try_from(*b).map_err(|_| {
                Error::spec(
                    "memory size",
                    format!("{b} bytes is more than Docker takes"),
                )
            }),
        }
    }
}

const MIN_MEMORY: i64 = 6 * 1024 * 1024;

impl From<&str> for Memory {
    fn from(text: &str) -> Self {
        Memory::Text(text.to_string())
    }
}

impl From<String> for Memory {
    fn from(text: String) -> Self {
        Memory::Text(text)
    }
}

impl From<u64> for Memory {
    fn from(bytes: u64) -> Self {
        Memory::Bytes(bytes)
    }
}

impl From<usize> for Memory {
    fn from(bytes: usize) -> Self {
        Memory::Bytes(bytes as u64)
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
    if bytes < MIN_MEMORY as f64 || bytes > i64::MAX as f64 {
        return Err(Error::spec(
            "memory size",
            format!("`{text}` must be at least 6Mi"),
        ));
    }
    Ok(bytes as i64)
}

/// The builder methods for a container's limits, generated from this one
/// place so that every configuration spells them alike. `$res` is the path to
/// the [`Resources`](Resources) and `$mem` to the
/// `Option<Memory>` that is resolved when the configuration is validated.
macro_rules! resource_methods {
    (resources: $($res:ident).+, memory: $($mem:ident).+, isolation: $($iso:ident).+) => {
        /// The kernel boundary: the host's (default) or gVisor's; see
        /// [`Isolation`](crate::Isolation).
        pub fn isolation(mut self, isolation: $crate::Isolation) -> Self {
            self.$($iso).+ = isolation;
            self
        }

        /// CPU limit, fractional: `0.5` is half a CPU (default 1.0).
        pub fn cpus(mut self, cpus: f64) -> Self {
            self.$($res).+.cpus = cpus;
            self
        }

        /// Memory limit of the container: `"512Mi"`, `"1Gi"`, `"500M"` or a
        /// byte count (default 1 GiB; see [`Memory`](crate::Memory)). Going
        /// over it kills the process that allocates.
        pub fn memory(mut self, size: impl Into<$crate::Memory>) -> Self {
            self.$($mem).+ = Some(size.into());
            self
        }

        /// Maximum number of processes and threads (default 256).
        pub fn pids(mut self, pids: i64) -> Self {
            self.$($res).+.pids = pids;
            self
        }
    };
}
pub(crate) use resource_methods;

/// Checks limits every kind of container shares, after resolving a pending
/// memory size into `resources`.
pub(crate) fn settle_resources(
    resources: &mut Resources,
    memory: &mut Option<Memory>,
) -> std::result::Result<(), String> {
    if let Some(size) = memory.take() {
        resources.memory_bytes = size.bytes().map_err(|e| e.to_string())?;
    }
    let r = resources;
    if !(r.cpus.is_finite() && r.cpus >= 0.01) {
        return Err(format!("cpus must be at least 0.01, got {}", r.cpus));
    }
    if r.memory_bytes < MIN_MEMORY {
        return Err("memory must be at least 6Mi (Docker's minimum)".into());
    }
    if r.pids < 8 {
        return Err(format!(
            "pids must be at least 8 (an interpreter needs a few), got {}",
            r.pids
        ));
    }
    Ok(())
}

/// Env var and secret names are variable names, each set once.
pub(crate) fn check_env_and_secrets<'a>(
    env: impl Iterator<Item = &'a str>,
    secrets: &[Secret],
) -> std::result::Result<(), String> {
    let mut names = std::collections::HashSet::new();
    for name in env {
        if !crate::util::is_identifier(name) {
            return Err(format!(
                "env var name `{name}` is not a valid variable name"
            ));
        }
        if !names.insert(name) {
            return Err(format!("env var `{name}` is set twice"));
        }
    }
    for s in secrets {
        if !crate::util::is_identifier(s.name()) {
            return Err(format!(
                "secret name `{}` must be a variable name (letters, digits, `_`)",
                s.name()
            ));
        }
        if !names.insert(s.name()) {
            return Err(format!(
                "`{}` is both a secret and an env var, or a secret twice",
                s.name()
            ));
        }
    }
    Ok(())
}

/// Checks a policy's entries, and that secrets bound to hosts have a
/// policy to go through.
pub(crate) fn check_network(network: &Network, secrets: &[Secret]) -> Result<()> {
    if let Network::Egress(policy) = network {
        policy.check()?;
    }
    check_secrets(network, secrets)
}

/// Checks that secrets bound to hosts have a policy to go through.
pub(crate) fn check_secrets(network: &Network, secrets: &[Secret]) -> Result<()> {
    for secret in secrets {
        let Some(hosts) = secret.hosts() else {
            continue;
        };
        if !matches!(network, Network::Egress(_)) {
            return Err(Error::spec(
                "secret",
                format!(
                    "secret `{}` is bound to hosts, so it needs an egress policy that allows them \
                     (`.network(Egress::allow([...]))`): only the gateway can put its value in",
                    secret.name()
                ),
            ));
        }
        for host in hosts {
            crate::egress::rules::Rule::parse(host)?;
        }
    }
    Ok(())
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
    fn memory_takes_text_or_bytes() {
        assert_eq!(Memory::from(512u64 << 20).bytes().unwrap(), 512 << 20);
        assert_eq!(Memory::from(1usize << 30).bytes().unwrap(), 1 << 30);
        assert_eq!(Memory::from("1Gi".to_string()).bytes().unwrap(), 1 << 30);
        let small = Memory::from(1024u64).bytes().unwrap_err().to_string();
        assert!(small.contains("6Mi"), "{small}");
        assert!(Memory::from(u64::MAX).bytes().is_err());
    }

    #[test]
    fn env_and_secret_names_are_checked_alike() {
        use Secret;
        let ok = check_env_and_secrets(["A", "B_2"].into_iter(), &[Secret::value("C", "v")]);
        assert!(ok.is_ok());
        let twice = check_env_and_secrets(["A", "A"].into_iter(), &[]).unwrap_err();
        assert!(twice.contains("twice"), "{twice}");
        let clash = check_env_and_secrets(["A"].into_iter(), &[Secret::value("A", "v")]);
        assert!(clash.unwrap_err().contains("both"));
        let bad = check_env_and_secrets(["a-b"].into_iter(), &[]).unwrap_err();
        assert!(bad.contains("a-b"), "{bad}");
    }

    #[test]
    fn shared_limits_are_checked_alike() {
        let mut r = Resources::default();
        let mut pending = Some(Memory::from("256Mi"));
        settle_resources(&mut r, &mut pending).unwrap();
        assert_eq!(r.memory_bytes, 256 << 20);
        assert!(pending.is_none());
        r.cpus = 0.0;
        assert!(settle_resources(&mut r, &mut None)
            .unwrap_err()
            .contains("cpus"));
        r.cpus = 1.0;
        r.pids = 2;
        assert!(settle_resources(&mut r, &mut None)
            .unwrap_err()
            .contains("pids"));
        let err = settle_resources(&mut r, &mut Some(Memory::from("lots"))).unwrap_err();
        assert!(err.contains("lots"), "{err}");
    }
}
