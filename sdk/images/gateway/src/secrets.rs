//! Secrets bound to hosts: the sandbox holds a placeholder, and the gateway
//! puts the real value in its place in the headers of requests to those
//! hosts only. Request bodies are passed on as they are; what those hosts
//! send back has the values swapped back for placeholders (`redact`).

use hyper::header::{HeaderMap, HeaderValue};
use serde::Deserialize;

use crate::policy::{Rule, Target};

/// One secret: its placeholder, its value and the hosts it is for.
#[derive(Clone, Deserialize)]
pub struct Secret {
    pub placeholder: String,
    pub value: String,
    pub hosts: Vec<Rule>,
}

// The value must never be printed, even by a debugging line.
impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Secret")
            .field("hosts", &self.hosts)
            .finish_non_exhaustive()
    }
}

impl Secret {
    pub fn applies_to(&self, target: &Target, port: u16) -> bool {
        self.hosts.iter().any(|r| r.matches(target, port))
    }
}

/// Whether any secret is for this host: its TLS must then be terminated
/// here so that the headers can be read.
pub fn any_for(secrets: &[Secret], target: &Target, port: u16) -> bool {
    secrets.iter().any(|s| s.applies_to(target, port))
}

/// The values to take back out of what `target` answers: those of every
/// secret bound to it (none: nothing to redact).
pub fn swaps_for(secrets: &[Secret], target: &Target, port: u16) -> Option<crate::redact::Swaps> {
    crate::redact::Swaps::new(
        secrets
            .iter()
            .filter(|s| s.applies_to(target, port))
            .map(|s| (s.value.as_str(), s.placeholder.as_str())),
    )
}

/// Replaces the placeholders of the secrets that are for `target` in every
/// header value; others' placeholders stay as they are.
pub fn substitute(headers: &mut HeaderMap, secrets: &[Secret], target: &Target, port: u16) {
    let mine: Vec<&Secret> = secrets
        .iter()
        .filter(|s| s.applies_to(target, port) && !s.placeholder.is_empty())
        .collect();
    if mine.is_empty() {
        return;
    }
    for value in headers.values_mut() {
        let Ok(text) = value.to_str() else { continue };
        if !mine.iter().any(|s| text.contains(&s.placeholder)) {
            continue;
        }
        let mut replaced = text.to_string();
        for secret in &mine {
            replaced = replaced.replace(&secret.placeholder, &secret.value);
        }
        if let Ok(mut new) = HeaderValue::from_str(&replaced) {
            new.set_sensitive(true);
            *value = new;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Hosts;

    fn secret() -> Secret {
        Secret {
            placeholder: "dh-ph-1234".into(),
            value: "real-key".into(),
            hosts: vec![Rule {
                hosts: Hosts::Exact("api.test".into()),
                port: None,
            }],
        }
    }

    #[test]
    fn only_requests_to_its_hosts_get_the_value() {
        let secrets = [secret()];
        let mut headers = HeaderMap::new();
        headers.insert(
            "authorization",
            HeaderValue::from_static("Bearer dh-ph-1234"),
        );
        headers.insert("x-other", HeaderValue::from_static("none"));
        let mut elsewhere = headers.clone();
        substitute(&mut headers, &secrets, &Target::parse("api.test"), 443);
        assert_eq!(headers["authorization"], "Bearer real-key");
        assert_eq!(headers["x-other"], "none");
        substitute(&mut elsewhere, &secrets, &Target::parse("evil.test"), 443);
        assert_eq!(elsewhere["authorization"], "Bearer dh-ph-1234");
        assert!(any_for(&secrets, &Target::parse("API.test."), 443));
        assert!(!any_for(&secrets, &Target::parse("evil.test"), 443));
    }

    #[test]
    fn debug_output_has_no_value() {
        let text = format!("{:?}", secret());
        assert!(
            !text.contains("real-key") && !text.contains("dh-ph"),
            "{text}"
        );
    }
}
