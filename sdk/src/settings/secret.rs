//! Secrets: values that reach the code as an env var or a file and never
//! appear in Debug output, JSON, logs, images, errors or cache keys.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// Where file secrets are mounted.
pub const SECRETS_DIR: &str = "/run/secrets";

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
    /// The hosts it is for: the sandbox then holds a placeholder, and only
    /// the egress gateway the value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) hosts: Option<Vec<String>>,
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
            .field("hosts", &self.hosts)
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
            hosts: None,
        }
    }

    /// A secret that never enters the sandbox: its variable `name` holds a
    /// random placeholder, and dockhand's egress gateway puts `value` in its
    /// place in the headers of requests to `hosts` only (entries as in
    /// [`Egress`](crate::Egress): names, `*.` wildcards, addresses). The
    /// sandbox needs an egress policy that allows those hosts.
    ///
    /// ```
    /// use dockhand::{Egress, Sandbox, Secret};
    /// let call = Sandbox::command("call", "sh")
    ///     .args(["-c", "curl -fsS -H \"Authorization: Bearer $API_KEY\" https://api.example.com/v1/models"])
    ///     .network(Egress::allow(["api.example.com"]))
    ///     .secret(Secret::for_hosts("API_KEY", "sk-real-value", ["api.example.com"]))
    ///     .build()?;
    /// assert!(!format!("{call:?}").contains("sk-real-value"));
    /// # Ok::<(), dockhand::Error>(())
    /// ```
    pub fn for_hosts<I, S>(name: impl Into<String>, value: impl Into<String>, hosts: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Secret::value(name, value).only_for(hosts)
    }

    /// Binds the secret to hosts (see [`Secret::for_hosts`]): the sandbox
    /// gets a placeholder, and the gateway the value.
    pub fn only_for<I, S>(mut self, hosts: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.hosts = Some(hosts.into_iter().map(Into::into).collect());
        self
    }

    /// The hosts it is bound to, if it is.
    pub fn hosts(&self) -> Option<&[String]> {
        self.hosts.as_deref()
    }

    /// A secret read from the host's environment variable `var` when the
    /// sandbox runs, exposed as env var `name`.
    pub fn from_env(name: impl Into<String>, var: impl Into<String>) -> Self {
        Secret {
            name: name.into(),
            source: SecretSource::HostEnv(var.into()),
            mount: SecretMount::Env,
            hosts: None,
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

/// Values shorter than this are not redacted: they would redact ordinary
/// text and say little anyway.
const MIN_REDACTED: usize = 3;
/// The shortest part of a value that is redacted where text was cut.
const MIN_REDACTED_PART: usize = 4;

/// Replaces every secret value in `text` with `[redacted:<name>]`.
pub(crate) fn redact(text: &str, secrets: &[(String, String)]) -> String {
    let mut out = text.to_string();
    for (name, value) in secrets {
        if value.len() >= MIN_REDACTED && out.contains(value.as_str()) {
            out = out.replace(value.as_str(), &marker(name));
        }
    }
    out
}

fn marker(name: &str) -> String {
    format!("[redacted:{name}]")
}

/// Where a piece of text was cut from a longer one.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Cut {
    /// Something came before it.
    pub start: bool,
    /// Something came after it.
    pub end: bool,
}

/// [`redact`], and where the text was cut, also the part of a value that
/// the cut left: a prefix of 4 or more characters at a cut end, a suffix of
/// 4 or more at a cut start. A cap that ends in the middle of a value must
/// not hand out half of it.
pub(crate) fn redact_cut(text: &str, secrets: &[(String, String)], cut: Cut) -> String {
    let mut out = redact(text, secrets);
    if cut.end {
        if let Some((name, len)) = longest_part(secrets, |part| out.ends_with(part), Part::Prefix) {
            out.truncate(out.len() - len);
            out.push_str(&marker(name));
        }
    }
    if cut.start {
        if let Some((name, len)) = longest_part(secrets, |part| out.starts_with(part), Part::Suffix)
        {
            out.replace_range(..len, &marker(name));
        }
    }
    out
}

#[derive(Clone, Copy)]
enum Part {
    Prefix,
    Suffix,
}

/// The secret with the longest proper prefix (or suffix) of at least
/// [`MIN_REDACTED_PART`] characters that `found` accepts, and its length in bytes.
fn longest_part(
    secrets: &[(String, String)],
    found: impl Fn(&str) -> bool,
    which: Part,
) -> Option<(&str, usize)> {
    let mut best: Option<(&str, usize)> = None;
    for (name, value) in secrets {
        let starts: Vec<usize> = value.char_indices().map(|(i, _)| i).collect();
        let chars = starts.len();
        // Longest first: the first part found is the one to redact.
        for k in (MIN_REDACTED_PART..chars).rev() {
            let part = match which {
                Part::Prefix => &value[..starts[k]],
                Part::Suffix => &value[starts[chars - k]..],
            };
            if best.is_some_and(|(_, len)| len >= part.len()) {
                break;
            }
            if found(part) {
                best = Some((name, part.len()));
                break;
            }
        }
    }
    best
}

/// How many bytes past a cap a capture keeps so that a value which starts
/// before the cap is seen whole, and redacted, before the text is cut.
pub(crate) fn lookahead(secrets: &[(String, String)]) -> usize {
    secrets
        .iter()
        .map(|(_, value)| value.len().saturating_sub(1))
        .max()
        .unwrap_or(0)
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
    fn a_cut_never_leaves_four_characters_of_a_value() {
        let secret = "AZq7Kx9WmPL3vR8tNc";
        let secrets = vec![("TOKEN".to_string(), secret.to_string())];
        let text = format!("key={secret} done");
        // The value cut at every offset, from either side.
        for at in 0..=text.len() {
            let (head, tail) = text.split_at(at);
            let head = redact_cut(
                head,
                &secrets,
                Cut {
                    start: false,
                    end: true,
                },
            );
            let tail = redact_cut(
                tail,
                &secrets,
                Cut {
                    start: true,
                    end: false,
                },
            );
            for piece in [&head, &tail] {
                for window in secret.as_bytes().windows(MIN_REDACTED_PART) {
                    let window = std::str::from_utf8(window).unwrap();
                    assert!(
                        !piece.contains(window),
                        "cut at {at}: {piece:?} holds {window:?}"
                    );
                }
            }
        }
        // Text that was not cut keeps what only looks like a part.
        assert_eq!(
            redact_cut("ends AZq7", &secrets, Cut::default()),
            "ends AZq7"
        );
        assert_eq!(
            redact_cut(
                "ends AZq7",
                &secrets,
                Cut {
                    start: false,
                    end: true
                }
            ),
            "ends [redacted:TOKEN]"
        );
        assert_eq!(
            redact_cut(
                "tNc and",
                &secrets,
                Cut {
                    start: true,
                    end: false
                }
            ),
            "tNc and",
            "three characters are not a part"
        );
    }

    #[test]
    fn the_lookahead_covers_the_longest_value() {
        let secrets = vec![
            ("A".to_string(), "short".to_string()),
            ("B".to_string(), "a-longer-value".to_string()),
        ];
        assert_eq!(lookahead(&secrets), 13);
        assert_eq!(lookahead(&[]), 0);
    }

    #[test]
    fn host_env_secrets_name_the_missing_variable() {
        let s = Secret::from_env("TOKEN", "DOCKHAND_TEST_SURELY_UNSET_VAR");
        let err = s.resolve().unwrap_err().to_string();
        assert!(err.contains("DOCKHAND_TEST_SURELY_UNSET_VAR"), "{err}");
    }
}
