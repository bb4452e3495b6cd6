//! Networks: the internal, labelled networks egress sandboxes sit on, and
//! the gateway's attachment to them.

use std::collections::HashMap;
use std::net::IpAddr;

use bollard::models::{NetworkConnectRequest, NetworkCreateRequest, NetworkDisconnectRequest};
use bollard::query_parameters::ListNetworksOptionsBuilder;

use super::{docker_err, is_not_found, labels, Engine};
use crate::error::{Error, Result};

/// `kind` label of the networks dockhand makes.
pub const NETWORK_KIND: &str = "egress-network";

impl Engine {
    /// Creates an internal network (no route out, no outside DNS) named `name`,
    /// labelled as this process's. The host takes no address on it either:
    /// on an ordinary internal network the bridge's address is the host
    /// itself, and its services would answer there.
    pub async fn create_internal_network(&self, name: &str) -> Result<()> {
        let request = NetworkCreateRequest {
            name: name.to_string(),
            driver: Some("bridge".into()),
            internal: Some(true),
            options: Some(HashMap::from([(
                "com.docker.network.bridge.inhibit_ipv4".to_string(),
                "true".to_string(),
            )])),
            labels: Some(labels::owned(NETWORK_KIND)),
            ..Default::default()
        };
        self.docker
            .create_network(request)
            .await
            .map(drop)
            .map_err(|e| self.docker_err("create network", e))
    }

    /// Attaches a running container to a network and returns its address there.
    pub async fn connect_network(&self, network: &str, container: &str) -> Result<IpAddr> {
        let request = NetworkConnectRequest {
            container: container.to_string(),
            endpoint_config: None,
        };
        self.docker
            .connect_network(network, request)
            .await
            .map_err(|e| self.docker_err("connect a container to a network", e))?;
        let inspected = self
            .docker
            .inspect_container(container, None)
            .await
            .map_err(|e| self.docker_err("inspect container", e))?;
        let address = inspected
            .network_settings
            .and_then(|s| s.networks)
            .and_then(|mut n| n.remove(network))
            .and_then(|e| e.ip_address)
            .unwrap_or_default();
        address.parse().map_err(|_| Error::Docker {
            operation: "connect a container to a network",
            message: format!("the daemon gave no address on {network} (got {address:?})"),
            status: None,
        })
    }

    /// Removes a network; gone already is fine.
    pub async fn remove_network(&self, network: &str) -> Result<()> {
        remove_network_with(&self.docker, network).await
    }

    /// Names and labels of the networks dockhand made.
    pub async fn list_managed_networks(&self) -> Result<Vec<(String, HashMap<String, String>)>> {
        let filters = HashMap::from([("label", vec![labels::MANAGED.to_string()])]);
        let options = ListNetworksOptionsBuilder::default()
            .filters(&filters)
            .build();
        let listed = self
            .docker
            .list_networks(Some(options))
            .await
            .map_err(|e| self.docker_err("list networks", e))?;
        Ok(listed
            .into_iter()
            .filter_map(|n| Some((n.name?, n.labels.unwrap_or_default())))
            .collect())
    }

    /// Removes the networks of processes that are gone; returns their names.
    pub async fn reap_networks(&self) -> Result<Vec<String>> {
        let mut removed = Vec::new();
        for (name, labels) in self.list_managed_networks().await? {
            // A failure means a container still uses it: its owner is alive.
            if labels::owner_is_gone(&labels) && self.remove_network(&name).await.is_ok() {
                removed.push(name);
            }
        }
        Ok(removed)
    }

    /// Detaches `container` (if given) and removes `network` in the
    /// background, retrying while a container being removed still holds it.
    pub fn remove_network_in_background(&self, network: String, container: Option<String>) {
        let engine = self.clone();
        super::guard::submit_job(
            format!("network {network}"),
            Box::pin(async move {
                let Ok(docker) = engine.reconnect() else {
                    return;
                };
                // A create (or a connect) whose caller went away may still be
                // on its way: a network not there yet is looked for again
                // for a few seconds, and only one seen and removed is done.
                let mut seen = false;
                for wait in [0, 200, 800, 2000, 5000] {
                    tokio::time::sleep(std::time::Duration::from_millis(wait)).await;
                    match docker.inspect_network(&network, None).await {
                        Err(e) if is_not_found(&e) => {
                            if seen || wait >= 2000 {
                                return;
                            }
                            continue;
                        }
                        _ => seen = true,
                    }
                    if let Some(container) = &container {
                        let _ = disconnect_with(&docker, &network, container).await;
                    }
                    if remove_network_with(&docker, &network).await.is_ok() {
                        return;
                    }
                }
                tracing::warn!(%network, "could not remove network; reap() will");
            }),
        );
    }
}

async fn disconnect_with(docker: &bollard::Docker, network: &str, container: &str) -> Result<()> {
    let request = NetworkDisconnectRequest {
        container: container.to_string(),
        force: Some(true),
    };
    match docker.disconnect_network(network, request).await {
        Ok(()) => Ok(()),
        Err(e) if is_not_found(&e) => Ok(()),
        Err(e) => Err(docker_err("disconnect a container from a network", e)),
    }
}

async fn remove_network_with(docker: &bollard::Docker, network: &str) -> Result<()> {
    match docker.remove_network(network).await {
        Ok(()) => Ok(()),
        Err(e) if is_not_found(&e) => Ok(()),
        Err(e) => Err(docker_err("remove network", e)),
    }
}
