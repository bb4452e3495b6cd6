//! One sandbox's rules: which hosts it may reach, and which secrets the
//! gateway puts into its requests to which hosts. The SDK parses and checks
//! the user's text; what arrives here is already structured.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

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
    /// A host as a client wrote it (`Example.COM.`, `10.0.0.1`, `[::1]`,
    /// `0x7f.1`, `[::ffff:10.0.0.1]`). Every spelling of an address becomes
    /// the address itself, an IPv4 address carried inside an IPv6 one
    /// becomes that IPv4 address: rules are written for what the connection
    /// reaches, not for how the client spelled it.
    pub fn parse(host: &str) -> Target {
        let trimmed = host.trim_start_matches('[').trim_end_matches(']');
        let trimmed = trimmed.strip_suffix('.').unwrap_or(trimmed);
        match trimmed
            .parse::<IpAddr>()
            .ok()
            .or_else(|| legacy_ipv4(trimmed).map(IpAddr::V4))
        {
            Some(ip) => Target::Ip(canonical(ip)),
            None => Target::Name(normalize(host)),
        }
    }
}

/// The IPv4 address an IPv6 address carries, where it carries one a
/// network would deliver to: IPv4-mapped (`::ffff:a.b.c.d`), IPv4-compatible
/// (`::a.b.c.d`), NAT64 (`64:ff9b::/96`, `64:ff9b:1::/48`) and 6to4
/// (`2002:AABB:CCDD::/16`). Other addresses are returned as they are.
pub fn canonical(address: IpAddr) -> IpAddr {
    match address {
        IpAddr::V6(v6) => embedded_ipv4(v6).map_or(address, IpAddr::V4),
        v4 => v4,
    }
}

fn embedded_ipv4(v6: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = v6.segments();
    let low = |hi: u16, lo: u16| Ipv4Addr::from(((hi as u32) << 16) | lo as u32);
    if let Some(v4) = v6.to_ipv4_mapped() {
        return Some(v4);
    }
    // `::` and `::1` are IPv6's own, not IPv4-compatible spellings.
    if s[..6] == [0; 6] && (s[6] != 0 || s[7] > 1) {
        return Some(low(s[6], s[7]));
    }
    if s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        return Some(low(s[6], s[7]));
    }
    if s[..3] == [0x64, 0xff9b, 1] {
        return Some(low(s[6], s[7]));
    }
    if s[0] == 0x2002 {
        return Some(low(s[1], s[2]));
    }
    None
}

/// The IPv6 networks that carry IPv4 addresses (those `canonical` reads),
/// with the bit at which the IPv4 address starts.
const IPV4_CARRIERS: [(Ipv6Addr, u8, u8); 5] = [
    // IPv4-mapped, `::ffff:0:0/96`.
    (Ipv6Addr::new(0, 0, 0, 0, 0, 0xffff, 0, 0), 96, 96),
    // IPv4-compatible, `::/96`.
    (Ipv6Addr::new(0, 0, 0, 0, 0, 0, 0, 0), 96, 96),
    // NAT64, `64:ff9b::/96` and `64:ff9b:1::/48` (the address at the end).
    (Ipv6Addr::new(0x64, 0xff9b, 0, 0, 0, 0, 0, 0), 96, 96),
    (Ipv6Addr::new(0x64, 0xff9b, 1, 0, 0, 0, 0, 0), 48, 96),
    // 6to4, `2002::/16` (the address right after the prefix).
    (Ipv6Addr::new(0x2002, 0, 0, 0, 0, 0, 0, 0), 16, 16),
];

/// The IPv4 networks whose addresses some address of `net` carries: an
/// IPv6 entry written over a range of IPv4-carrying addresses names those
/// IPv4 addresses too (`::ffff:a9fe:0/112` is `169.254.0.0/16`; `2002::/16`
/// or `::/0` hold a spelling of every IPv4 address).
fn embedded_ipv4_nets(net: &ipnet::Ipv6Net) -> impl Iterator<Item = ipnet::Ipv4Net> + '_ {
    IPV4_CARRIERS
        .iter()
        .filter_map(move |&(base, base_len, start)| {
            let carrier = ipnet::Ipv6Net::new(base, base_len).ok()?;
            if net.contains(&carrier) {
                // Wider than the carrier: every IPv4 address.
                return ipnet::Ipv4Net::new(Ipv4Addr::UNSPECIFIED, 0).ok();
            }
            if !carrier.contains(net) {
                return None;
            }
            let bits = u128::from(net.network());
            let v4 = ((bits >> (128 - start as u32 - 32)) & 0xffff_ffff) as u32;
            let fixed = net.prefix_len().saturating_sub(start).min(32);
            ipnet::Ipv4Net::new(Ipv4Addr::from(v4), fixed)
                .ok()
                .map(|n| n.trunc())
        })
}

/// An IPv4 address in the spellings `inet_aton` accepts and
/// `Ipv4Addr::from_str` does not: one to four parts, each decimal, `0x`
/// hexadecimal or `0`-prefixed octal, the last part filling the bytes left
/// (`2130706433`, `0x7f000001`, `0177.0.0.1`, `127.1`). Resolvers and
/// HTTP clients accept them, so the policy must read them as addresses.
fn legacy_ipv4(text: &str) -> Option<Ipv4Addr> {
    let parts: Vec<&str> = text.split('.').collect();
    if parts.is_empty() || parts.len() > 4 {
        return None;
    }
    let mut values = Vec::with_capacity(parts.len());
    for part in &parts {
        let lower = part.to_ascii_lowercase();
        let value = if let Some(hex) = lower.strip_prefix("0x") {
            if hex.is_empty() {
                0
            } else {
                u64::from_str_radix(hex, 16).ok()?
            }
        } else if lower.len() > 1 && lower.starts_with('0') {
            u64::from_str_radix(&lower[1..], 8).ok()?
        } else {
            if lower.is_empty() || !lower.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            lower.parse::<u64>().ok()?
        };
        values.push(value);
    }
    let (last, head) = values.split_last()?;
    if head.iter().any(|v| *v > 0xff) {
        return None;
    }
    let room = 8 * (4 - head.len() as u32);
    if *last >= 1u64 << room {
        return None;
    }
    let mut address = 0u64;
    for (i, v) in head.iter().enumerate() {
        address |= v << (24 - 8 * i as u32);
    }
    Some(Ipv4Addr::from((address | last) as u32))
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
            (Hosts::Net(net), Target::Ip(ip)) => {
                net.contains(ip)
                    || match (net, ip) {
                        // An IPv4 address (every spelling of one is read as
                        // the address itself) is in an IPv6 network that
                        // holds a spelling of it.
                        (IpNet::V6(net), IpAddr::V4(v4)) => {
                            embedded_ipv4_nets(net).any(|within| within.contains(v4))
                        }
                        _ => false,
                    }
            }
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
        // Both spellings: a deny entry written for the IPv6 form holds too.
        let forms = [Target::Ip(ip), Target::Ip(canonical(ip))];
        !self
            .deny
            .iter()
            .any(|r| matches!(r.hosts, Hosts::Net(_)) && forms.iter().any(|t| r.matches(t, port)))
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
    fn every_spelling_of_a_denied_address_is_denied() {
        let policy = Policy {
            allow: vec![rule(Hosts::Any, None)],
            deny: vec![
                rule(Hosts::Net("10.9.0.0/16".parse().unwrap()), None),
                rule(Hosts::Net("127.0.0.0/8".parse().unwrap()), None),
            ],
        };
        let spellings = [
            "10.9.1.2",
            "[::ffff:10.9.1.2]",
            "::ffff:a09:102",
            "[::ffff:0a09:0102]",
            "[::10.9.1.2]",
            "[64:ff9b::10.9.1.2]",
            "[64:ff9b::a09:102]",
            "[64:ff9b:1::a09:102]",
            "[2002:a09:102::1]",
            "[2002:0a09:0102:ffff::]",
            "168362242",
            "0xa090102",
            "0XA090102",
            "012.011.01.02",
            "10.9.258",
            "10.0x90102",
            "0xa.0x9.0x1.0x2",
            "10.9.1.2.",
            "2130706433",
            "0x7f000001",
            "0177.0.0.1",
            "127.1",
            "0x7f.1",
            "[::ffff:127.0.0.1]",
        ];
        for spelling in spellings {
            let target = Target::parse(spelling);
            assert!(
                matches!(target, Target::Ip(IpAddr::V4(_))),
                "{spelling}: {target:?}"
            );
            assert!(
                !policy.allows(&target, 80),
                "{spelling} passed the deny entry"
            );
        }
        for (raw, port) in [
            ("::ffff:10.9.1.2", 443),
            ("2002:a09:102::1", 80),
            ("64:ff9b::a09:102", 80),
        ] {
            assert!(!policy.allows_address(raw.parse().unwrap(), port), "{raw}");
        }
        // Neighbours stay allowed, and what is not an address stays a name.
        for open in ["10.10.0.1", "[::ffff:10.10.0.1]", "[2001:db8::1]", "[::1]"] {
            assert!(policy.allows(&Target::parse(open), 80), "{open}");
        }
        for name in [
            "1.2.3.4.5",
            "08.1.1.1",
            "0xg1",
            "256.1.1.1",
            "1.2.3.256",
            "example.com",
            "1e3",
            "-1",
            "1..2",
        ] {
            assert!(matches!(Target::parse(name), Target::Name(_)), "{name}");
        }
        assert_eq!(Target::parse("[::]"), Target::Ip("::".parse().unwrap()));
        assert_eq!(Target::parse("[::1]"), Target::Ip("::1".parse().unwrap()));
    }

    #[test]
    fn ipv6_entries_deny_the_ipv4_addresses_spelled_inside_them() {
        for (entry, denied, open) in [
            ("::ffff:0:0/96", "[::ffff:169.254.169.254]", "[2001:db8::1]"),
            ("::ffff:0:0/96", "169.254.169.254", "[::1]"),
            ("64:ff9b::/96", "[64:ff9b::a9fe:a9fe]", "[2001:db8::1]"),
            ("64:ff9b::/96", "10.0.0.1", "[64:ff9b:2::1]"),
            ("2002::/16", "[2002:a9fe:a9fe::1]", "[2003::1]"),
            ("2002::/16", "127.0.0.1", "[2001:db8::1]"),
            (
                "::ffff:169.254.169.254/128",
                "169.254.169.254",
                "169.254.169.253",
            ),
            ("::ffff:a9fe:0/112", "[::ffff:169.254.1.2]", "169.255.0.1"),
            ("::ffff:a9fe:0/112", "0xa9fe0102", "[::ffff:169.255.0.1]"),
            (
                "2002:a9fe::/32",
                "[2002:a9fe:a9fe:1234::]",
                "[2002:a9ff::1]",
            ),
            ("2002:a9fe::/32", "169.254.9.9", "169.253.9.9"),
            ("64:ff9b:1::/48", "[64:ff9b:1::a00:1]", "[64:ff9b:2::a00:1]"),
            ("::/0", "10.1.2.3", "example.com"),
        ] {
            let policy = Policy {
                allow: vec![rule(Hosts::Any, None)],
                deny: vec![rule(Hosts::Net(entry.parse().unwrap()), None)],
            };
            let target = Target::parse(denied);
            assert!(!policy.allows(&target, 80), "{denied} passed {entry}");
            if let Target::Ip(ip) = target {
                assert!(
                    !policy.allows_address(ip, 80),
                    "{denied} resolved, past {entry}"
                );
            }
            assert!(
                policy.allows(&Target::parse(open), 80),
                "{open} under {entry}"
            );
        }
        // The same holds for allow entries: an IPv6 entry allows the IPv4
        // addresses spelled inside it, and nothing else.
        let policy = Policy {
            allow: vec![rule(
                Hosts::Net("::ffff:10.0.0.0/104".parse().unwrap()),
                None,
            )],
            deny: vec![],
        };
        assert!(policy.allows(&Target::parse("10.9.9.9"), 80));
        assert!(policy.allows(&Target::parse("[::ffff:10.1.1.1]"), 80));
        assert!(!policy.allows(&Target::parse("11.0.0.1"), 80));
    }

    #[test]
    fn the_empty_policy_allows_nothing() {
        let policy = Policy::default();
        assert!(!policy.allows(&name("example.com"), 443));
        assert!(!policy.answers("example.com"));
    }
}
