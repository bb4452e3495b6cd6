//! `--network`, `--allow-host`, `--deny-host` and host-bound `--secret`s:
//! what a sandbox, session or kernel made from the command line may reach.

use anyhow::{bail, Result};
use clap::Args;
use dockhand::{Egress, Network};

/// Network options shared by `run`, `session start` and `mcp`.
#[derive(Args, Debug, Clone, Default)]
pub struct NetworkArgs {
    /// Full network access (off by default).
    #[arg(long, conflicts_with_all = ["allow_hosts", "deny_hosts"])]
    pub network: bool,
    /// Let it reach this host, and no other, through dockhand's egress
    /// gateway (repeatable): a name, `*.domain`, an address or a CIDR,
    /// optionally with `:port`; `*` is every host.
    #[arg(long = "allow-host", value_name = "HOST")]
    pub allow_hosts: Vec<String>,
    /// Never let it reach this host, even if allowed (repeatable; deny wins).
    #[arg(long = "deny-host", value_name = "HOST")]
    pub deny_hosts: Vec<String>,
}

impl NetworkArgs {
    /// The network these options ask for.
    pub fn network(&self) -> Result<Network> {
        if self.network {
            return Ok(Network::Bridge);
        }
        if self.allow_hosts.is_empty() && !self.deny_hosts.is_empty() {
            bail!(
                "--deny-host alone allows nothing: add --allow-host for what may be reached \
                 (--allow-host '*' for every host but the denied ones)"
            );
        }
        if self.allow_hosts.is_empty() {
            return Ok(Network::None);
        }
        let policy = Egress::allow(self.allow_hosts.clone()).deny(self.deny_hosts.clone());
        policy.check()?;
        Ok(Network::Egress(policy))
    }

    /// The same options as command-line arguments (for a process started
    /// to hold a session).
    pub fn to_args(&self) -> Vec<String> {
        let mut args = Vec::new();
        if self.network {
            args.push("--network".into());
        }
        for host in &self.allow_hosts {
            args.extend(["--allow-host".into(), host.clone()]);
        }
        for host in &self.deny_hosts {
            args.extend(["--deny-host".into(), host.clone()]);
        }
        args
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(allow: &[&str], deny: &[&str]) -> NetworkArgs {
        NetworkArgs {
            network: false,
            allow_hosts: allow.iter().map(|s| s.to_string()).collect(),
            deny_hosts: deny.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn hosts_make_an_egress_policy() {
        assert_eq!(args(&[], &[]).network().unwrap(), Network::None);
        let net = args(&["pypi.org", "*.pythonhosted.org"], &["10.0.0.0/8"])
            .network()
            .unwrap();
        let Network::Egress(policy) = net else {
            panic!("{net:?}")
        };
        assert_eq!(policy.allowed(), ["pypi.org", "*.pythonhosted.org"]);
        assert_eq!(policy.denied(), ["10.0.0.0/8"]);
        let open = NetworkArgs {
            network: true,
            ..Default::default()
        };
        assert_eq!(open.network().unwrap(), Network::Bridge);
        assert!(args(&[], &["x.test"])
            .network()
            .unwrap_err()
            .to_string()
            .contains("--allow-host"));
        assert!(args(&["bad host"], &[]).network().is_err());
        let round = args(&["a.test"], &["b.test"]).to_args();
        assert_eq!(round, ["--allow-host", "a.test", "--deny-host", "b.test"]);
    }
}
