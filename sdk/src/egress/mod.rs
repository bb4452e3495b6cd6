//! Egress allow-lists: a sandbox that may reach some hosts and nothing else,
//! and secrets that only the gateway ever holds.
//!
//! A sandbox with an [`Egress`] policy sits alone on an internal Docker
//! network that has no route out. The only other thing on it is dockhand's
//! egress gateway, a container of dockhand's own (labelled, removed with
//! its last sandbox, by [`Client::reap`](crate::Client::reap) and by the
//! watchdog when the owner dies), attached to that network and to the
//! outside. On the sandbox's network the gateway:
//!
//! - answers DNS: names the policy allows resolve to the gateway, every
//!   other name does not exist (nothing is asked upstream, so nothing leaks
//!   through DNS);
//! - is the HTTP proxy `HTTP_PROXY` and `HTTPS_PROXY` name (port 3128), for
//!   clients that honour them (pip, curl, requests);
//! - intercepts ports 80 and 443 transparently, by the `Host` header and
//!   the TLS server name, for clients that ignore the proxy.
//!
//! Whatever the way in, it connects out only to hosts the policy allows;
//! deny entries win over allow entries; anything else gets 403 (or a closed
//! connection where no HTTP is spoken). A raw socket to any address has no
//! route. If the gateway dies, the sandbox reaches nothing (fail closed).
//!
//! A secret bound to hosts ([`Secret::for_hosts`](crate::Secret::for_hosts))
//! reaches the code as a random placeholder; the gateway puts the real
//! value in its place in the headers of requests to those hosts only,
//! terminating their TLS with a certificate authority of the sandbox's own,
//! which the sandbox trusts (`SSL_CERT_FILE` and the like point at it).
//!
//! ```
//! use dockhand::{Egress, Sandbox};
//! let fetch = Sandbox::command("fetch", "curl")
//!     .args(["-fsS", "https://pypi.org/simple/"])
//!     .network(Egress::allow(["pypi.org", "*.pythonhosted.org"]).deny(["*.internal.example.com"]))
//!     .build()?;
//! # Ok::<(), dockhand::Error>(())
//! ```

pub(crate) mod rules;

use serde::{Deserialize, Serialize};

use crate::error::Result;

/// What a client's egress gateway has done since it started
/// ([`crate::Client::egress_stats`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct EgressStats {
    /// Sandboxes it serves now.
    pub sandboxes: u64,
    /// Connections from sandboxes open through it now.
    pub open_connections: u64,
    /// Connections from sandboxes it took.
    pub connections_accepted: u64,
    /// Connections closed at once because their sandbox held its share
    /// (512) open.
    pub connections_turned_away: u64,
    /// Requests a sandbox's network policy refused.
    pub requests_denied: u64,
}

impl EgressStats {
    pub(crate) fn from_answer(answer: &serde_json::Value) -> EgressStats {
        let n = |key: &str| answer[key].as_u64().unwrap_or(0);
        EgressStats {
            sandboxes: n("sandboxes"),
            open_connections: n("open"),
            connections_accepted: n("accepted"),
            connections_turned_away: n("turned_away"),
            requests_denied: n("denied"),
        }
    }
}
use rules::Rule;

/// The port of the gateway's HTTP proxy on a sandbox's network.
pub const PROXY_PORT: u16 = 3128;

/// Which hosts a sandbox may reach through dockhand's egress gateway.
///
/// Entries are host names (`api.example.com`), wildcards (`*.example.com`:
/// every name under it), addresses (`203.0.113.7`), networks
/// (`10.0.0.0/8`, `[2001:db8::/32]`) or `*` (every host), each optionally
/// with `:port`. A deny entry wins over any allow entry. Names are matched on
/// what the client asked for (the proxy request, the `Host` header or the TLS
/// server name); an address entry in the deny list also applies to the
/// addresses an allowed name resolves to.
///
/// ```
/// use dockhand::Egress;
/// let policy = Egress::allow(["api.example.com", "*.cdn.example.com:443"])
///     .deny(["10.0.0.0/8"]);
/// assert!(policy.check().is_ok());
/// assert!(Egress::allow(["bad host"]).check().is_err());
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Egress {
    allow: Vec<String>,
    deny: Vec<String>,
}

impl Egress {
    /// A policy allowing these hosts (and nothing else).
    pub fn allow<I, S>(hosts: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Egress {
            allow: hosts.into_iter().map(Into::into).collect(),
            deny: Vec::new(),
        }
    }

    /// Also allows these hosts.
    pub fn and_allow<I, S>(mut self, hosts: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.allow.extend(hosts.into_iter().map(Into::into));
        self
    }

    /// Denies these hosts, whatever the allow entries say.
    pub fn deny<I, S>(mut self, hosts: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.deny.extend(hosts.into_iter().map(Into::into));
        self
    }

    /// The allow entries, as given.
    pub fn allowed(&self) -> &[String] {
        &self.allow
    }

    /// The deny entries, as given.
    pub fn denied(&self) -> &[String] {
        &self.deny
    }

    /// Checks every entry; the error names the first bad one and says why.
    pub fn check(&self) -> Result<()> {
        self.rules().map(drop)
    }

    pub(crate) fn rules(&self) -> Result<(Vec<Rule>, Vec<Rule>)> {
        let parse = |list: &[String]| {
            list.iter()
                .map(|t| Rule::parse(t))
                .collect::<Result<Vec<_>>>()
        };
        Ok((parse(&self.allow)?, parse(&self.deny)?))
    }

    /// The policy as the gateway reads it.
    pub(crate) fn to_json(&self) -> Result<serde_json::Value> {
        let (allow, deny) = self.rules()?;
        Ok(serde_json::json!({
            "allow": allow.iter().map(Rule::to_json).collect::<Vec<_>>(),
            "deny": deny.iter().map(Rule::to_json).collect::<Vec<_>>(),
        }))
    }
}
