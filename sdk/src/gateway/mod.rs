//! dockhand's egress gateway: the container that is a policy's only way
//! out ([`Egress`](crate::Egress) says how it behaves), the leases that put a
//! sandbox behind it, and the binding of a sandbox's secrets to hosts.

mod control;
mod lease;
mod program;
mod running;

pub(crate) use lease::{HostSecret, Lease};
pub(crate) use running::{GatewaySettings, Gateways};

use crate::engine::Engine;
use crate::error::Result;
use crate::progress::Reporter;
use crate::settings::{check_secrets, Network, Secret};

/// What opening a lease needs of a client on Docker: its gateways, its
/// daemon and where build progress goes.
#[derive(Clone, Copy)]
pub(crate) struct Access<'a> {
    pub gateways: &'a Gateways,
    pub engine: &'a Engine,
    pub reporter: &'a Reporter,
}

/// For a sandbox with a policy: its lease, and its secrets with the values
/// of those bound to hosts replaced by their placeholders (which are all the
/// container ever gets). Others get no lease and their secrets as they are.
pub(crate) async fn open_for(
    access: Access<'_>,
    network: &Network,
    declared: &[Secret],
    resolved: Vec<(String, String)>,
) -> Result<(Option<Lease>, Vec<(String, String)>)> {
    let Network::Egress(policy) = network else {
        check_secrets(network, declared)?;
        return Ok((None, resolved));
    };
    let bound: Vec<HostSecret> = declared
        .iter()
        .zip(&resolved)
        .filter_map(|(s, (name, value))| {
            Some(HostSecret {
                name: name.clone(),
                value: value.clone(),
                hosts: s.hosts()?.to_vec(),
            })
        })
        .collect();
    let lease = Lease::open(access, policy, bound).await?;
    let secrets = resolved
        .into_iter()
        .map(|(name, value)| match lease.placeholder(&name) {
            Some(placeholder) => (name, placeholder.to_string()),
            None => (name, value),
        })
        .collect();
    Ok((Some(lease), secrets))
}
