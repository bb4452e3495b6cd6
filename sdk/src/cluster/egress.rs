//! Egress allow-lists on a cluster: a NetworkPolicy of the pod's own,
//! allowing the listed addresses and networks, and the pod's `/etc/hosts`
//! naming each listed host's addresses as this machine resolved them.
//!
//! The pod also keeps the offline label, so the namespace's deny-all policy
//! selects it from its creation: until its own policy is enforced, nothing
//! goes out. NetworkPolicy rules name addresses, not names, so wildcards
//! (`*.example.com`) cannot be expressed and are refused; a listed name is
//! resolved here, once, and the pod reaches it under that name through its
//! `/etc/hosts` (no DNS query leaves the pod for it).

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::Duration;

use k8s_openapi::api::core::v1::HostAlias;
use k8s_openapi::api::networking::v1::{
    IPBlock, NetworkPolicy, NetworkPolicyEgressRule, NetworkPolicyPeer, NetworkPolicyPort,
    NetworkPolicySpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::owned::Companion;
use super::plan::PodPlan;
use super::unsupported;
use crate::egress::rules::{Hosts, Rule};
use crate::error::{Error, Result};

/// How long resolving one listed name may take.
const RESOLVE_LIMIT: Duration = Duration::from_secs(10);

/// An allow-list made concrete: the egress rules of the pod's policy and
/// the names its `/etc/hosts` gives.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct AllowList {
    rules: Vec<NetworkPolicyEgressRule>,
    aliases: Vec<HostAlias>,
}

/// An address or network, with the port it is allowed on (all without one).
type Block = (IpAddr, u8, Option<u16>);

/// Refuses what a NetworkPolicy cannot say: wildcards, and deny entries
/// with a port.
pub(super) fn expressible(policy: &crate::Egress) -> Result<()> {
    let (allow, deny) = policy.rules()?;
    for rule in allow.iter().chain(&deny) {
        if let Hosts::Suffix(name) = &rule.hosts {
            return Err(unsupported(
                format!("the wildcard `*.{name}` in an egress allow-list"),
                "a NetworkPolicy names addresses: list each host by name (it is resolved when the pod is made), or run on Docker",
            ));
        }
    }
    if deny.iter().any(|r| r.port.is_some()) {
        return Err(unsupported(
            "a deny entry with a port in an egress allow-list",
            "deny the host on every port, or run on Docker",
        ));
    }
    Ok(())
}

/// Resolves `policy` into an [`AllowList`]; what a NetworkPolicy cannot say
/// is refused, and a listed name that does not resolve is an error naming it.
pub(crate) async fn allow_list(policy: &crate::Egress) -> Result<AllowList> {
    expressible(policy)?;
    let (allow, deny) = policy.rules()?;
    let mut denied: Vec<(IpAddr, u8)> = Vec::new();
    for rule in &deny {
        match &rule.hosts {
            Hosts::Any => return Ok(AllowList::nothing()),
            Hosts::Net(ip, len) => denied.push((*ip, *len)),
            Hosts::Exact(name) => {
                for ip in resolve(name, 443).await? {
                    denied.push((ip, full_length(ip)));
                }
            }
            Hosts::Suffix(_) => {}
        }
    }
    let mut blocks: Vec<Block> = Vec::new();
    let mut names: BTreeMap<IpAddr, Vec<String>> = BTreeMap::new();
    for Rule { hosts, port } in &allow {
        match hosts {
            Hosts::Any => {
                blocks.push((IpAddr::from([0u8; 4]), 0, *port));
                blocks.push((IpAddr::from([0u16; 8]), 0, *port));
            }
            Hosts::Net(ip, len) => blocks.push((*ip, *len, *port)),
            Hosts::Exact(name) => {
                for ip in resolve(name, port.unwrap_or(443)).await? {
                    if denied.iter().any(|(net, len)| contains(*net, *len, ip)) {
                        continue;
                    }
                    blocks.push((ip, full_length(ip), *port));
                    let listed = names.entry(ip).or_default();
                    if !listed.contains(name) {
                        listed.push(name.clone());
                    }
                }
            }
            Hosts::Suffix(_) => {}
        }
    }
    blocks.dedup();
    let rules = blocks
        .into_iter()
        .filter(|(ip, len, _)| {
            !denied
                .iter()
                .any(|(d, dl)| contains(*d, *dl, *ip) && dl <= len)
        })
        .map(|(ip, len, port)| rule(ip, len, port, &denied))
        .collect();
    let aliases = names
        .into_iter()
        .map(|(ip, hostnames)| HostAlias {
            ip: ip.to_string(),
            hostnames: Some(hostnames),
        })
        .collect();
    Ok(AllowList { rules, aliases })
}

impl AllowList {
    /// Nothing allowed (a deny entry of `*`).
    fn nothing() -> Self {
        AllowList {
            rules: Vec::new(),
            aliases: Vec::new(),
        }
    }

    /// Adds to `plan` its policy (a companion, so it goes with the pod),
    /// the pod's host names, and the offline label: the namespace's deny-all
    /// policy holds until this one is enforced.
    pub(crate) fn apply(self, plan: &mut PodPlan) {
        let labels = plan
            .pod
            .metadata
            .labels
            .get_or_insert_with(Default::default);
        labels.insert(super::NETWORK_LABEL.into(), "none".into());
        let selector = labels
            .get("dev.dockhand.object")
            .map(|object| BTreeMap::from([("dev.dockhand.object".to_string(), object.clone())]));
        if let Some(spec) = plan.pod.spec.as_mut() {
            if !self.aliases.is_empty() {
                spec.host_aliases = Some(self.aliases);
            }
        }
        let policy = NetworkPolicy {
            spec: Some(NetworkPolicySpec {
                pod_selector: Some(LabelSelector {
                    match_labels: selector,
                    ..Default::default()
                }),
                policy_types: Some(vec!["Egress".into()]),
                egress: Some(self.rules),
                ..Default::default()
            }),
            ..Default::default()
        };
        let name = crate::manifests::pod_name(&format!("{}-egress", plan.name));
        plan.companions.push(Companion::NetworkPolicy(name, policy));
    }
}

/// One egress rule: `ip/len` less the denied networks inside it, on `port`
/// (TCP and UDP) or on every port.
fn rule(
    ip: IpAddr,
    len: u8,
    port: Option<u16>,
    denied: &[(IpAddr, u8)],
) -> NetworkPolicyEgressRule {
    let except: Vec<String> = denied
        .iter()
        .filter(|(d, dl)| *dl > len && contains(ip, len, *d))
        .map(|(d, dl)| format!("{d}/{dl}"))
        .collect();
    NetworkPolicyEgressRule {
        to: Some(vec![NetworkPolicyPeer {
            ip_block: Some(IPBlock {
                cidr: format!("{ip}/{len}"),
                except: (!except.is_empty()).then_some(except),
            }),
            ..Default::default()
        }]),
        ports: port.map(|p| {
            ["TCP", "UDP"]
                .into_iter()
                .map(|protocol| NetworkPolicyPort {
                    protocol: Some(protocol.into()),
                    port: Some(IntOrString::Int(i32::from(p))),
                    ..Default::default()
                })
                .collect()
        }),
    }
}

fn full_length(ip: IpAddr) -> u8 {
    if ip.is_ipv4() {
        32
    } else {
        128
    }
}

/// Whether network `net/len` holds address `ip` (of the same family).
fn contains(net: IpAddr, len: u8, ip: IpAddr) -> bool {
    let bits = |a: IpAddr| -> u128 {
        match a {
            IpAddr::V4(v4) => u128::from(u32::from(v4)) << 96,
            IpAddr::V6(v6) => u128::from(v6),
        }
    };
    if net.is_ipv4() != ip.is_ipv4() {
        return false;
    }
    let len = u32::from(len).min(if net.is_ipv4() { 32 } else { 128 });
    let mask = if len == 0 {
        0
    } else {
        u128::MAX << (128 - len)
    };
    bits(net) & mask == bits(ip) & mask
}

/// The addresses `name` resolves to here, within [`RESOLVE_LIMIT`].
async fn resolve(name: &str, port: u16) -> Result<Vec<IpAddr>> {
    let failed = |why: String| {
        Error::spec(
            "network",
            format!("`{name}` in the egress allow-list: {why} (names are resolved where dockhand runs, when the pod is made)"),
        )
    };
    let found = tokio::time::timeout(RESOLVE_LIMIT, tokio::net::lookup_host((name, port)))
        .await
        .map_err(|_| failed(format!("no answer within {RESOLVE_LIMIT:?}")))?
        .map_err(|e| failed(format!("it does not resolve ({e})")))?;
    let mut ips: Vec<IpAddr> = found.map(|a| a.ip()).collect();
    ips.sort();
    ips.dedup();
    if ips.is_empty() {
        return Err(failed("it resolves to no address".into()));
    }
    Ok(ips)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cidrs(list: &AllowList) -> Vec<(String, Option<Vec<String>>, usize)> {
        list.rules
            .iter()
            .map(|r| {
                let block = r.to.as_ref().unwrap()[0].ip_block.clone().unwrap();
                (
                    block.cidr,
                    block.except,
                    r.ports.as_ref().map_or(0, Vec::len),
                )
            })
            .collect()
    }

    #[tokio::test]
    async fn addresses_networks_and_names_become_blocks_and_host_names() {
        let policy = crate::Egress::allow(["10.0.0.0/8", "203.0.113.7:443", "localhost:8080"])
            .deny(["10.1.0.0/16"]);
        let list = allow_list(&policy).await.unwrap();
        let got = cidrs(&list);
        assert_eq!(
            got[0],
            ("10.0.0.0/8".into(), Some(vec!["10.1.0.0/16".into()]), 0)
        );
        assert_eq!(got[1], ("203.0.113.7/32".into(), None, 2));
        // localhost resolves to loopback here, on port 8080 only.
        assert!(got[2..]
            .iter()
            .any(|(cidr, _, ports)| cidr == "127.0.0.1/32" && *ports == 2));
        let alias = list
            .aliases
            .iter()
            .find(|a| a.ip == "127.0.0.1")
            .expect("localhost named in /etc/hosts");
        assert_eq!(
            alias.hostnames.as_deref(),
            Some(&["localhost".to_string()][..])
        );
    }

    #[tokio::test]
    async fn deny_entries_take_addresses_out() {
        // A denied network that covers an allowed address drops it.
        let list = allow_list(&crate::Egress::allow(["192.0.2.1"]).deny(["192.0.2.0/24"]))
            .await
            .unwrap();
        assert!(list.rules.is_empty());
        let list = allow_list(&crate::Egress::allow(["*"]).deny(["*"]))
            .await
            .unwrap();
        assert!(list.rules.is_empty());
        // `*` is every address of both families.
        let list = allow_list(&crate::Egress::allow(["*"]).deny(["172.16.0.0/12"]))
            .await
            .unwrap();
        assert_eq!(
            cidrs(&list),
            [
                ("0.0.0.0/0".into(), Some(vec!["172.16.0.0/12".into()]), 0),
                ("::/0".into(), None, 0)
            ]
        );
    }

    #[tokio::test]
    async fn what_a_network_policy_cannot_say_is_refused() {
        for policy in [
            crate::Egress::allow(["*.example.com"]),
            crate::Egress::allow(["example.com"]).deny(["*.example.com"]),
            crate::Egress::allow(["*"]).deny(["10.0.0.1:22"]),
        ] {
            let err = allow_list(&policy).await.unwrap_err();
            assert!(
                matches!(err, Error::Unsupported { .. }),
                "{policy:?}: {err:?}"
            );
        }
        let err = allow_list(&crate::Egress::allow(["no-such-host.invalid"]))
            .await
            .unwrap_err();
        assert!(err.to_string().contains("no-such-host.invalid"), "{err}");
    }

    #[test]
    fn containment_is_by_prefix_and_family() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert!(contains(ip("10.0.0.0"), 8, ip("10.200.1.1")));
        assert!(!contains(ip("10.0.0.0"), 8, ip("11.0.0.1")));
        assert!(contains(ip("0.0.0.0"), 0, ip("8.8.8.8")));
        assert!(!contains(ip("0.0.0.0"), 0, ip("::1")));
        assert!(contains(ip("2001:db8::"), 32, ip("2001:db8:1::5")));
    }
}
