//! The text of allow and deny entries, checked and put in the structured
//! form the gateway matches on.
//!
//! An entry is a host and, optionally, `:port`:
//! - `api.example.com`: that name exactly;
//! - `*.example.com`: every name under it (not `example.com` itself);
//! - `203.0.113.7`, `10.0.0.0/8`, `[2001:db8::/32]`: an address or a network;
//! - `*`: every host.

use std::net::IpAddr;

use serde_json::{json, Value};

use crate::error::{Error, Result};

/// One checked entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Rule {
    pub hosts: Hosts,
    pub port: Option<u16>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Hosts {
    Any,
    Exact(String),
    Suffix(String),
    /// An address and its prefix length.
    Net(IpAddr, u8),
}

impl Rule {
    /// Reads one entry; the error says what is wrong with it.
    pub fn parse(text: &str) -> Result<Rule> {
        let bad = |why: &str| Error::spec("network", format!("`{text}`: {why}"));
        let entry = text.trim();
        if entry.is_empty() {
            return Err(bad("an empty host"));
        }
        let (host, port) = split_port(entry).map_err(|why| bad(&why))?;
        let hosts = if host == "*" {
            Hosts::Any
        } else if let Some((ip, len)) = parse_net(host).map_err(|why| bad(&why))? {
            Hosts::Net(ip, len)
        } else if let Some(rest) = host.strip_prefix("*.") {
            Hosts::Suffix(check_name(rest).map_err(|why| bad(&why))?)
        } else {
            Hosts::Exact(check_name(host).map_err(|why| bad(&why))?)
        };
        Ok(Rule { hosts, port })
    }

    /// The form the gateway reads.
    pub fn to_json(&self) -> Value {
        let hosts = match &self.hosts {
            Hosts::Any => json!("any"),
            Hosts::Exact(name) => json!({ "exact": name }),
            Hosts::Suffix(name) => json!({ "suffix": name }),
            Hosts::Net(ip, len) => json!({ "net": format!("{ip}/{len}") }),
        };
        json!({ "hosts": hosts, "port": self.port })
    }
}

/// `host[:port]`, where an IPv6 host is in brackets.
fn split_port(entry: &str) -> std::result::Result<(&str, Option<u16>), String> {
    let (host, port) = if let Some(rest) = entry.strip_prefix('[') {
        let (inside, after) = rest
            .split_once(']')
            .ok_or("an IPv6 address opened with `[` is not closed")?;
        match after {
            "" => (inside, None),
            _ => (
                inside,
                Some(
                    after
                        .strip_prefix(':')
                        .ok_or("after `]` only `:port` may follow")?,
                ),
            ),
        }
    } else if entry.matches(':').count() == 1 {
        let (host, port) = entry.split_once(':').unwrap_or((entry, ""));
        (host, Some(port))
    } else {
        (entry, None)
    };
    let port = match port {
        None => None,
        Some(p) => match p.parse::<u16>() {
            Ok(n) if n > 0 => Some(n),
            _ => return Err(format!("`{p}` is not a port (1 to 65535)")),
        },
    };
    Ok((host, port))
}

/// An address or `address/prefix`; `None` when it is not one.
fn parse_net(host: &str) -> std::result::Result<Option<(IpAddr, u8)>, String> {
    let (addr, len) = match host.split_once('/') {
        Some((a, l)) => (a, Some(l)),
        None => (host, None),
    };
    let Ok(ip) = addr.parse::<IpAddr>() else {
        if len.is_some() || host.contains(':') {
            return Err(format!("`{addr}` is not an IP address"));
        }
        return Ok(None);
    };
    let max = if ip.is_ipv4() { 32 } else { 128 };
    let len = match len {
        None => max,
        Some(l) => match l.parse::<u8>() {
            Ok(n) if n <= max => n,
            _ => return Err(format!("`/{l}` is not a prefix length (0 to {max})")),
        },
    };
    Ok(Some((ip, len)))
}

/// A DNS name: labels of letters, digits, `-` and `_`, lowercased, without
/// the root's trailing dot.
fn check_name(name: &str) -> std::result::Result<String, String> {
    let name = name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase();
    if name.is_empty() || name.len() > 253 {
        return Err("a host name must have 1 to 253 characters".into());
    }
    if name.contains('*') {
        return Err("`*` may only begin a name, as in `*.example.com`".into());
    }
    for label in name.split('.') {
        let ok = (1..=63).contains(&label.len())
            && label
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
            && !label.starts_with('-')
            && !label.ends_with('-');
        if !ok {
            return Err(format!("`{label}` is not a valid part of a host name"));
        }
    }
    Ok(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(text: &str) -> Rule {
        Rule::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    #[test]
    fn names_wildcards_addresses_networks_and_ports() {
        assert_eq!(
            parsed("API.Example.com.").hosts,
            Hosts::Exact("api.example.com".into())
        );
        let r = parsed("*.example.com:443");
        assert_eq!(
            (r.hosts, r.port),
            (Hosts::Suffix("example.com".into()), Some(443))
        );
        assert_eq!(
            parsed("10.0.0.0/8").hosts,
            Hosts::Net("10.0.0.0".parse().unwrap(), 8)
        );
        assert_eq!(
            parsed("203.0.113.7:80").hosts,
            Hosts::Net("203.0.113.7".parse().unwrap(), 32)
        );
        assert_eq!(
            parsed("2001:db8::1").hosts,
            Hosts::Net("2001:db8::1".parse().unwrap(), 128)
        );
        let v6 = parsed("[2001:db8::/32]:443");
        assert_eq!(
            (v6.hosts, v6.port),
            (Hosts::Net("2001:db8::".parse().unwrap(), 32), Some(443))
        );
        assert_eq!(parsed("*").hosts, Hosts::Any);
        assert_eq!(parsed("*:53").port, Some(53));
        assert_eq!(
            parsed("*.x.test").to_json(),
            json!({"hosts": {"suffix": "x.test"}, "port": null})
        );
        assert_eq!(
            parsed("10.1.0.0/16:5432").to_json()["hosts"],
            json!({"net": "10.1.0.0/16"})
        );
    }

    #[test]
    fn bad_entries_say_what_is_wrong() {
        for (text, says) in [
            ("", "empty"),
            ("a.*.com", "`*` may only begin"),
            ("*example.com", "`*` may only begin"),
            ("example.com:0", "not a port"),
            ("example.com:99999", "not a port"),
            ("example.com:http", "not a port"),
            ("10.0.0.0/33", "prefix length"),
            ("exa mple.com", "not a valid part"),
            ("-bad.com", "not a valid part"),
            ("[::1", "not closed"),
            ("nothost/8", "not an IP address"),
        ] {
            let e = Rule::parse(text).expect_err(text).to_string();
            assert!(e.contains(says), "{text}: {e}");
        }
    }
}
