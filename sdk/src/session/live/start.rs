//! Starting a session: what it cannot have on its backend refused, its
//! image and secrets resolved, its container (or pod) made by the backend
//! from a [`SessionStart`] recipe, and its agent greeted until it is ready.

use super::launch::{connect, owned_dir_tar, programs_tar, start_tar, Launched};
use super::spec::{container_spec, refuse_on, validate};
use super::*;
use crate::engine::Engine;
use crate::sandbox::{secrets_archive, SecretMount, SECRETS_DIR};

/// How a session's container or pod is made, for the backend to start.
pub(super) struct SessionStart<'s> {
    pub(super) session: &'s Session,
    /// The image reference, resolved.
    pub(super) image: String,
    /// The secrets' names and values, resolved.
    pub(super) resolved: Vec<(String, String)>,
}

impl crate::backend::Recipe for SessionStart<'_> {
    async fn container(&self, engine: &Engine) -> Result<crate::backend::InContainer> {
        let inner = &self.session.inner;
        let (c, client) = (&inner.config, &inner.client);
        let agent = AgentProgram::for_engine(engine).await?;
        let mut spec = container_spec(c, &self.image)?;
        spec.cmd = agent.command();
        // Under a policy: the session's network and gateway registration;
        // secrets bound to hosts become placeholders here.
        let (egress, secrets) = crate::gateway::open_for(
            client.gateway_access()?,
            &c.network,
            &c.secrets,
            self.resolved.clone(),
        )
        .await?;
        // Secrets given as variables reach the commands through the agent,
        // not the container's configuration (see `SECRET_ENV_FILE`).
        let (mut file_secrets, mut env_secrets) = (Vec::new(), Vec::new());
        for (secret, (name, value)) in c.secrets.iter().zip(&secrets) {
            match secret.mount() {
                SecretMount::Env => env_secrets.push((name.clone(), value.clone())),
                SecretMount::File => file_secrets.push((name.clone(), value.clone())),
            }
        }
        if let Some(lease) = &egress {
            lease.apply(&mut spec);
        }
        if !file_secrets.is_empty() {
            spec.scratch_volumes.push(SECRETS_DIR.into());
        }
        let h = &c.hardening;
        if !h.read_only_root {
            // A writable root keeps /tmp in the filesystem, so snapshots hold it.
            spec.tmpfs.clear();
        }
        // One archive, the agent's volume reached through `/`: the daemon
        // runs a process of its own for each upload (85 ms of host CPU
        // each, measured on Docker 20.10).
        let mut uploads = vec![match h.read_only_root {
            true => (
                AGENT_DIR.to_string(),
                programs_tar(agent, &c.helpers, &env_secrets)?,
            ),
            false => (
                "/".to_string(),
                start_tar(agent, &c.helpers, &env_secrets, &c.workspace, h.owner_ids())?,
            ),
        }];
        // A new volume's root is root's: the session's user is given the
        // ones it may write (an upload reaches mounted volumes).
        if !h.read_only_root {
            for v in c.volumes.iter().filter(|v| !v.read_only) {
                uploads.push(owned_dir_tar(&v.path, h.owner_ids())?);
            }
        }
        if !file_secrets.is_empty() {
            let tar = secrets_archive(&file_secrets, h.owner_ids())?;
            uploads.push((SECRETS_DIR.to_string(), tar));
        }
        // What a fork is made from.
        *lock(&inner.launched) = Some(Launched {
            spec: spec.clone(),
            file_secrets,
            env_secrets,
        });
        Ok(crate::backend::InContainer {
            spec,
            uploads: uploads
                .into_iter()
                .map(|(dir, tar)| (dir, Bytes::from(tar)))
                .collect(),
            egress,
            slow_hint: agent.needs().to_string(),
        })
    }
}

impl Session {
    pub(super) async fn launch(&self) -> Result<Arc<Conn>> {
        let c = &self.inner.config;
        validate(c)?;
        let client = &self.inner.client;
        let backend = client.runs_on();
        refuse_on(backend.offers(), c)?;
        backend.refuse_network(&c.network, &c.secrets)?;
        // Only a backend that offers volumes and host paths gets here with
        // either (`refuse_on`).
        if !c.volumes.is_empty() {
            crate::volume::check_mounted(client, &c.volumes).await?;
        }
        // A host path means nothing to a daemon on another machine: say so
        // before anything is created, not as a confusing mount failure.
        for m in &c.mounts {
            client.engine()?.require_shared_filesystem(
                format!("session mount {} -> {}", m.host_path, m.container_path),
                "copy the files in with write_file (or a snapshot image) instead of a mount",
            )?;
        }
        let image = backend.resolve_image(&c.image, None).await?;
        lock(&self.inner.status).life.image = Some(image.reference.clone());
        // Boxed: a claim's copy would grow every start's future (Docker's too).
        let files_made = Box::pin(self.ensure_files(&image.reference)).await?;
        let resolved = c
            .secrets
            .iter()
            .map(|s| Ok((s.name().to_string(), s.resolve()?)))
            .collect::<Result<Vec<_>>>()?;
        // What comes back is redacted of the values, not of placeholders.
        *lock(&self.inner.secrets) = resolved.clone();
        let recipe = SessionStart {
            session: self,
            image: image.reference,
            resolved,
        };
        let limit = c.start_timeout;
        let handshake = |started: crate::backend::Started| async move {
            let crate::backend::Started {
                held,
                attached,
                regreet,
                egress,
            } = started;
            let mut input = attached.input;
            if regreet.is_some() {
                // Started before the attach: its first `ready` went to the log.
                let hello = async {
                    input.write_all(b"{\"type\":\"hello\"}\n").await?;
                    input.flush().await
                };
                hello.await.map_err(|e| Error::SessionUnavailable {
                    reason: format!("the session agent's stdin closed: {e}"),
                })?;
            }
            let exited = {
                let (client, id) = (client.clone(), held.id().to_string());
                async move { client.runs_on().wait_ended(&id, "agent").await }
            };
            connect(held, input, attached.output, exited, egress, None, regreet).await
        };
        let too_slow = |hint: &str| Error::SessionUnavailable {
            reason: format!(
                "the session did not start within {limit:?} ({hint} \
                 `SessionConfig::start_timeout` allows more, for a first pull too)"
            ),
        };
        let started = backend
            .start_program(&recipe, limit, handshake, too_slow)
            .await;
        if started.is_err() && files_made {
            // Made for this start, which failed: nothing of it is kept.
            let files = lock(&self.inner.files).take();
            if let Some(files) = files {
                let _ = files.remove().await;
            }
        }
        started
    }
}
