//! One sandbox's rules: which hosts it may reach, and which secrets the
//! gateway puts into its requests to which hosts. The SDK parses and checks
//! the user's text; what arrives here is already structured.

use std::net::IpAddr;

use ipnet::IpNet;
use serde::Deserialize;

/// Which hosts a rule names.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Hosts {
    /// Every host.
    Any,
    /// One name (lowercase, no trailing dot).
    Exact(String),
    /// Every name under this one (`*.example.com`: not `example.com` itself).
    Suffix(String),
    /// Addresses in a network (one address is a /32 or /128).
    Net(IpNet),
}

/// A host pattern, and the one port it is limited to, if any.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Rule {
    pub hosts: Hosts,
    #[serde(default)]
    pub port: Option<u16>,
}

/// Where a connection or request goes: a name or an address, and a port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    Name(String),
    Ip(IpAddr),
}

impl Target {
    /// A host as a client wrote it (`Example.COM.`, `10.0.0.1`, `[::1]`).
    pub fn parse(host: &str) -> Target {
        let trimmed = host.trim_start_matches('[').trim_end_matches(']');
        match trimmed.parse::<IpAddr>() {
            Ok(ip) => Target::Ip(ip),
            Err(_) => Target::Name(normalize(host)),
        }
    }
}

/// Lowercase, without the root's trailing dot: how names are compared.
pub fn normalize(name: &str) -> String {
    name.trim_end_matches('.').to_ascii_lowercase()
}

impl Rule {
    fn port_matches(&self, port: u16) -> bool {
        self.port.is_none_or(|p| p == port)
    }

    /// Whether the rule names this host, ignoring its port.
    pub fn names(&self, target: &Target) -> bool {
        match (&self.hosts, target) {
            (Hosts::Any, _) => true,
            (Hosts::Exact(name), Target::Name(t)) => name == t,
            (Hosts::Suffix(suffix), Target::Name(t)) => t
                .strip_suffix(suffix.as_str())
                .is_some_and(|head| head.ends_with('.') && head.len() > 1),
            (Hosts::Net(net), Target::Ip(ip)) => net.contains(ip),
            _ => false,
        }
    }

    pub fn matches(&self, target: &Target, port: u16) -> bool {
        self.port_matches(port) && self.names(target)
    }
}

/// What a sandbox may reach. Deny wins over allow; nothing is allowed
/// unless a rule allows it.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct Policy {
    #[serde(default)]
    pub allow: Vec<Rule>,
    #[serde(default)]
    pub deny: Vec<Rule>,
}

impl Policy {
    /// Whether `target:port` may be reached, before its name is resolved.
    pub fn allows(&self, target: &Target, port: u16) -> bool {
        !self.deny.iter().any(|r| r.matches(target, port))
            && self.allow.iter().any(|r| r.matches(target, port))
    }

    /// Whether a name the policy allows may be reached at the address it
    /// resolved to: an address rule that denies it wins (so an allowed name
    /// cannot be pointed at a denied network).
    pub fn allows_address(&self, ip: IpAddr, port: u16) -> bool {
        let target = Target::Ip(ip);
        !self
            .deny
            .iter()
            .any(|r| matches!(r.hosts, Hosts::Net(_)) && r.matches(&target, port))
    }

    /// Whether DNS should answer for this name: some port of it is allowed.
    pub fn answers(&self, name: &str) -> bool {
        let target = Target::Name(normalize(name));
        !self
            .deny
            .iter()
            .any(|r| r.port.is_none() && r.names(&target))
            && self.allow.iter().any(|r| r.names(&target))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(hosts: Hosts, port: Option<u16>) -> Rule {
        Rule { hosts, port }
    }

    fn name(n: &str) -> Target {
        Target::parse(n)
    }

    #[test]
    fn exact_names_and_wildcards() {
        let policy = Policy {
            allow: vec![
                rule(Hosts::Exact("api.example.com".into()), None),
                rule(Hosts::Suffix("example.org".into()), Some(443)),
            ],
            deny: vec![],
        };
        assert!(policy.allows(&name("API.example.com."), 80));
        assert!(!policy.allows(&name("example.com"), 80));
        assert!(!policy.allows(&name("evilapi.example.com"), 80));
        assert!(policy.allows(&name("a.b.example.org"), 443));
        assert!(!policy.allows(&name("a.example.org"), 80), "port");
        assert!(!policy.allows(&name("example.org"), 443), "apex");
        assert!(!policy.allows(&name("badexample.org"), 443));
        assert!(policy.answers("x.example.org"));
        assert!(!policy.answers("other.test"));
    }

    #[test]
    fn deny_wins_over_allow() {
        let policy = Policy {
            allow: vec![rule(Hosts::Any, None)],
            deny: vec![
                rule(Hosts::Suffix("internal.test".into()), None),
                rule(Hosts::Net("169.254.0.0/16".parse().unwrap()), None),
                rule(Hosts::Exact("db.test".into()), Some(5432)),
            ],
        };
        assert!(policy.allows(&name("a.test"), 443));
        assert!(!policy.allows(&name("x.internal.test"), 443));
        assert!(!policy.answers("x.internal.test"));
        assert!(!policy.allows(&name("169.254.169.254"), 80));
        assert!(!policy.allows_address("169.254.169.254".parse().unwrap(), 80));
        assert!(policy.allows_address("10.0.0.1".parse().unwrap(), 80));
        assert!(!policy.allows(&name("db.test"), 5432));
        assert!(policy.allows(&name("db.test"), 80));
        assert!(policy.answers("db.test"), "only one port of it is denied");
    }

    #[test]
    fn addresses_match_networks_not_names() {
        let policy = Policy {
            allow: vec![rule(Hosts::Net("10.1.0.0/16".parse().unwrap()), None)],
            deny: vec![],
        };
        assert!(policy.allows(&name("10.1.2.3"), 80));
        assert!(policy.allows(&name("[10.1.2.3]"), 80));
        assert!(!policy.allows(&name("10.2.0.1"), 80));
        assert!(!policy.allows(&name("ten.example"), 80));
        assert!(!policy.answers("10.1.2.3.nip.io"));
    }

    #[test]
    fn the_empty_policy_allows_nothing() {
        let policy = Policy::default();
        assert!(!policy.allows(&name("example.com"), 443));
        assert!(!policy.answers("example.com"));
    }
}
