//! Secrets: values that reach the code as an env var or a file and never
//! appear in Debug output, JSON, logs, images, errors or cache keys.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

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

#[cfg(test)]
mod tests {
    use super::*;
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
