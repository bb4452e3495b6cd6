//! One attempt of a run as a pod on a Kubernetes cluster: the inputs
//! archive over the `inputs` init container's stdin, the program's log
//! followed while it runs, its end read from the kubelet's status, and
//! `/var/outputs` back as a tar over the `outputs` container's stream.

use std::sync::Arc;
use std::time::Instant;

use futures::AsyncBufReadExt;

use super::capture::{StreamBuffer, StreamKind};
use super::run::{
    collect_streamed, conclude, within, JobDelivery, Prepared, RunOptions, RunOutput,
};
use super::runtime::Network;
use super::spec::Sandbox;
use crate::cluster::{Cluster, PodView};
use crate::engine::ExitStatus;
use crate::error::{Error, Result};
use crate::k8s::Object;

/// The label of pods the namespace's offline NetworkPolicy selects.
pub(crate) const NETWORK_LABEL: &str = "dev.dockhand.network";

/// Refuses, before anything is made, what runs on Docker only.
pub(super) fn check(sandbox: &Sandbox) -> Result<()> {
    let rt = &sandbox.runtime;
    let refuse = |feature: &str, hint: &str| Err(crate::cluster::unsupported(feature, hint));
    if rt.secrets.iter().any(|s| s.hosts().is_some()) {
        return refuse(
            "secrets bound to hosts",
            "bound secrets need dockhand's egress gateway, which runs on Docker only; pass the secret unbound, or run on Docker",
        );
    }
    match &rt.network {
        Network::None | Network::Bridge => Ok(()),
        Network::Named(_) => refuse(
            "a named Docker network",
            "use `.network(true)` (the cluster's pod network) or none",
        ),
        Network::Egress(_) => refuse(
            "an egress allow-list",
            "use `.network(true)` with a NetworkPolicy of your own, or run on Docker",
        ),
    }
}

/// One attempt on `cluster`; the pod is deleted whatever happens.
pub(super) async fn attempt(
    cluster: &Cluster,
    sandbox: &Sandbox,
    prepared: &Prepared,
    number: u32,
    options: &RunOptions,
) -> Result<RunOutput> {
    let started = Instant::now();
    let rt = &sandbox.runtime;
    let JobDelivery::Upload { command, tar } = &prepared.job else {
        return Err(Error::spec(
            "kubernetes",
            "a cluster run takes its job as an archive",
        ));
    };
    let name = crate::k8s::pod_name(&format!(
        "dockhand-{}-{}",
        sandbox.name,
        &uuid::Uuid::new_v4().simple().to_string()[..10]
    ));
    let secret_object = format!("{name}-secrets");
    let mut opts = cluster.render_options(&prepared.image.reference, &name);
    if !prepared.secrets.is_empty() {
        opts = opts.secrets_object(secret_object.clone());
    }
    let manifests = crate::k8s::one_shot_pod(sandbox, command.clone(), number, &opts)?;
    let mut pod = manifests
        .objects()
        .iter()
        .find_map(|o| match o {
            Object::Pod(p) => Some(p.clone()),
            _ => None,
        })
        .ok_or_else(|| Error::spec("kubernetes", "no pod was rendered"))?;
    pod.metadata.owner_references = Some(vec![cluster.owner_reference()]);
    if rt.network == Network::None {
        pod.metadata
            .labels
            .get_or_insert_with(Default::default)
            .insert(NETWORK_LABEL.into(), "none".into());
    }
    let deadline = rt
        .timeout
        .map(|limit| (tokio::time::Instant::now() + limit, limit));

    let secrets: Arc<[(String, String)]> = prepared.redactions.clone().into();
    let handler = options.on_output.clone();
    let mut stdout = StreamBuffer::new(StreamKind::Stdout, sandbox.output_limit, secrets.clone());
    let stderr = StreamBuffer::new(StreamKind::Stderr, sandbox.output_limit, secrets);

    // The values travel in a Secret object only, never in the pod spec: owned
    // by this process's lease until the pod exists, then by the pod, so the
    // garbage collector removes it with whichever goes first.
    if !prepared.secrets.is_empty() {
        let made = cluster.create_secret(&secret_object, &prepared.secrets, &pod.metadata);
        within(deadline, made).await?;
    }
    let (guard, uid) = match within(deadline, cluster.create_pod(&pod)).await {
        Ok(made) => made,
        Err(e) => {
            if !prepared.secrets.is_empty() {
                cluster.delete_secret_in_background(&secret_object);
            }
            return Err(e);
        }
    };
    if !prepared.secrets.is_empty() {
        within(
            deadline,
            cluster.give_secret_to_pod(&secret_object, &name, &uid),
        )
        .await?;
    }
    let ran = async {
        // Inputs first: until they are in, nothing of the program runs.
        cluster
            .wait_pod(&name, |p| {
                let view = PodView::new(p);
                if let Some(failure) = view.failure("program") {
                    return Some(Err(failure.into()));
                }
                if view.running("inputs") {
                    return Some(Ok(()));
                }
                view.terminated("inputs").map(|(code, reason)| {
                    Err(Error::spec(
                        "kubernetes",
                        format!("the inputs container ended before its inputs came ({reason}, exit {code}); does the image have `tar`?"),
                    ))
                })
            })
            .await?;
        cluster
            .send_stdin(&name, "inputs", tar.reader().await?)
            .await?;
        cluster
            .wait_pod(&name, |p| {
                let view = PodView::new(p);
                if view.running("program") || view.terminated("program").is_some() {
                    return Some(Ok(()));
                }
                view.failure("program").map(|f| Err(f.into()))
            })
            .await?;
        // The kubelet keeps one log per container: stdout and stderr in one stream.
        let mut log = cluster.follow_log(&name, "program").await?;
        loop {
            let piece = log.fill_buf().await.map_err(|e| {
                Error::from(crate::error::ClusterError::Api {
                    operation: "follow log",
                    status: None,
                    reason: "StreamFailed".into(),
                    message: e.to_string(),
                })
            })?;
            if piece.is_empty() {
                break;
            }
            let n = piece.len();
            stdout.push(piece, handler.as_ref());
            log.consume_unpin(n);
        }
        let (code, reason) = cluster
            .wait_pod(&name, |p| {
                let view = PodView::new(p);
                // An evicted or lost pod's program shows an exit too (137):
                // the cluster's reason comes first, it is the truth.
                if let Some(failure) = view.failure("program") {
                    return Some(Err(failure.into()));
                }
                view.terminated("program").map(Ok)
            })
            .await?;
        let status = ExitStatus {
            code: i64::from(code),
            oom_killed: reason == "OOMKilled",
            gone: false,
        };
        let tar = cluster.ask(&name, "outputs", b"\n").await?;
        let collected = collect_streamed(tar, &sandbox.outputs, rt.outputs_limit).await?;
        Ok::<_, Error>((status, collected))
    };
    let (status, collected) = match within(deadline, ran).await {
        Ok(done) => {
            guard.remove_in_background();
            done
        }
        Err(Error::Timeout { timeout, .. }) => {
            guard.remove_in_background();
            let (out, err) = (
                stdout.finish(handler.as_ref()),
                stderr.finish(handler.as_ref()),
            );
            return Err(Error::Timeout {
                timeout,
                stdout: out.text,
                stderr: err.text,
            });
        }
        Err(e) => {
            if let Err(removal) = guard.remove().await {
                tracing::warn!(error = %removal, "deleting a failed run's pod");
            }
            return Err(e);
        }
    };
    let stdout = stdout.finish(handler.as_ref());
    let stderr = stderr.finish(handler.as_ref());
    conclude(
        sandbox,
        prepared,
        &status,
        collected,
        (stdout, stderr),
        started,
    )
}
