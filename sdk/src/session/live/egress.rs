//! Changing a running session's egress policy.

use super::*;

impl Session {
    /// Changes the egress policy of the running session: the next
    /// connection and the next DNS answer follow it; connections already
    /// open stay as they are. Secrets bound to hosts keep their hosts.
    ///
    /// The session must have started with an [`Egress`](crate::Egress)
    /// policy (its container sits on a network of its own); one started
    /// without network, or on another network, cannot be given one while
    /// it runs.
    ///
    /// ```no_run
    /// # async fn demo(session: &dockhand::session::Session) -> dockhand::Result<()> {
    /// session.set_network(dockhand::Egress::allow(["pypi.org", "files.pythonhosted.org"])).await?;
    /// # Ok(()) }
    /// ```
    pub async fn set_network(&self, policy: crate::Egress) -> Result<()> {
        policy.check()?;
        let conn = self.conn()?;
        let mut egress = conn.egress.lock().await;
        let Some(lease) = egress.as_mut() else {
            return Err(Error::spec(
                "network",
                "this session did not start with an egress policy, so its network cannot change \
                 while it runs; start it with `.network(Egress::allow([...]))` (an empty list \
                 allows nothing)",
            ));
        };
        let secrets = self.host_secrets()?;
        lease.update(&policy, secrets).await
    }

    /// The session's secrets bound to hosts, their values read again.
    fn host_secrets(&self) -> Result<Vec<crate::gateway::HostSecret>> {
        let mut bound = Vec::new();
        for secret in &self.inner.config.secrets {
            if let Some(hosts) = secret.hosts() {
                bound.push(crate::gateway::HostSecret {
                    name: secret.name().to_string(),
                    value: secret.resolve()?,
                    hosts: hosts.to_vec(),
                });
            }
        }
        Ok(bound)
    }
}
