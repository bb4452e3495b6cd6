//! Starting a code host where its client runs: a container on Docker
//! (`bridge`), a pod on a cluster (`on_cluster`); either way the bridge
//! under Monty, spoken to over its attach stream.

use super::bridge::{Launch, Runner};
use crate::client::Client;
use crate::error::Result;

/// Starts a code host's bridge and waits for its `ready`, within the start
/// timeout. Returns the runner and the image reference.
pub(super) async fn launch(client: &Client, how: Launch<'_>) -> Result<(Runner, String)> {
    #[cfg(feature = "kubernetes")]
    if let Some(cluster) = client.cluster() {
        return super::on_cluster::launch(cluster, how).await;
    }
    super::bridge::launch_on_docker(client, how).await
}
