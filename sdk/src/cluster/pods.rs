//! Pods: owned from before their create request, watched until a state is
//! reached (or the cluster ends them), and spoken to over attach streams.

use bytes::Bytes;
use futures::{Stream, StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ContainerStatus, Pod};
use kube::api::{AttachParams, DeleteParams, LogParams, PostParams};
use kube::Api;
use tokio::io::{AsyncRead, AsyncWriteExt};

use super::api::{is_not_found, Call};
use super::Cluster;
use crate::engine::LogChunk;
use crate::error::{ClusterError, Error, Result};

/// Owns a pod from before its create request: dropping it deletes the pod
/// (in the background, without a grace period) unless it was removed.
pub(crate) struct PodGuard {
    pods: Api<Pod>,
    name: String,
    namespace: String,
    armed: bool,
}

impl PodGuard {
    /// The pod's name.
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// Deletes the pod now; one already gone is fine.
    pub(crate) async fn remove(mut self) -> Result<()> {
        self.armed = false;
        delete(&self.pods, &self.namespace, &self.name).await
    }
}

impl Drop for PodGuard {
    fn drop(&mut self) {
        if self.armed {
            super::api::delete_in_background(
                self.pods.clone(),
                self.name.clone(),
                DeleteParams::default().grace_period(0),
            );
        }
    }
}

async fn delete(pods: &Api<Pod>, namespace: &str, name: &str) -> Result<()> {
    match pods
        .delete(name, &DeleteParams::default().grace_period(0))
        .await
    {
        Ok(_) => Ok(()),
        Err(e) if is_not_found(&e) => Ok(()),
        Err(e) => Err(Call::new("delete", "pods", namespace, name).error(e)),
    }
}

/// A pod's state, as far as a run cares.
pub(crate) struct PodView<'a> {
    pod: &'a Pod,
}

impl<'a> PodView<'a> {
    pub(crate) fn new(pod: &'a Pod) -> Self {
        PodView { pod }
    }

    fn name(&self) -> String {
        self.pod.metadata.name.clone().unwrap_or_default()
    }

    /// The status of container `name` (init containers included).
    pub(crate) fn container(&self, name: &str) -> Option<&'a ContainerStatus> {
        let status = self.pod.status.as_ref()?;
        status
            .init_container_statuses
            .iter()
            .flatten()
            .chain(status.container_statuses.iter().flatten())
            .find(|c| c.name == name)
    }

    pub(crate) fn running(&self, name: &str) -> bool {
        self.container(name)
            .and_then(|c| c.state.as_ref())
            .is_some_and(|s| s.running.is_some())
    }

    /// The scheduler's message while it cannot place the pod
    /// (`PodScheduled` false for `Unschedulable`: "0/2 nodes are available:
    /// 2 Insufficient cpu.").
    pub(crate) fn unschedulable(&self) -> Option<String> {
        let status = self.pod.status.as_ref()?;
        status.conditions.iter().flatten().find_map(|c| {
            (c.type_ == "PodScheduled"
                && c.status == "False"
                && c.reason.as_deref() == Some("Unschedulable"))
            .then(|| c.message.clone().unwrap_or_else(|| "Unschedulable".into()))
        })
    }

    /// `(exit code, reason)` once container `name` has ended.
    pub(crate) fn terminated(&self, name: &str) -> Option<(i32, String)> {
        let ended = self.container(name)?.state.as_ref()?.terminated.as_ref()?;
        Some((ended.exit_code, ended.reason.clone().unwrap_or_default()))
    }

    /// Why the cluster ended (or cannot start) this pod, when it did: an
    /// eviction, a lost node, an image it cannot pull, a container it
    /// cannot create, a pod that failed before `program` ended.
    pub(crate) fn failure(&self, program: &str) -> Option<ClusterError> {
        let pod = self.name();
        let status = self.pod.status.as_ref()?;
        let reason = status.reason.clone().unwrap_or_default();
        let message = status.message.clone().unwrap_or_default();
        if reason == "Evicted" {
            return Some(ClusterError::Evicted { pod, message });
        }
        if reason == "NodeLost" || status.phase.as_deref() == Some("Unknown") {
            return Some(ClusterError::NodeLost { pod, message });
        }
        for c in status
            .init_container_statuses
            .iter()
            .flatten()
            .chain(status.container_statuses.iter().flatten())
        {
            let Some(waiting) = c.state.as_ref().and_then(|s| s.waiting.as_ref()) else {
                continue;
            };
            let why = waiting.reason.clone().unwrap_or_default();
            let said = waiting.message.clone().unwrap_or_default();
            match why.as_str() {
                "ErrImagePull" | "ImagePullBackOff" | "InvalidImageName" | "ErrImageNeverPull" => {
                    return Some(ClusterError::ImagePull {
                        pod,
                        image: c.image.clone(),
                        reason: why,
                        message: said,
                    })
                }
                "CreateContainerConfigError" | "CreateContainerError" | "RunContainerError" => {
                    return Some(ClusterError::PodFailed {
                        pod,
                        reason: why,
                        message: said,
                    })
                }
                _ => {}
            }
        }
        // A node drained or a pod preempted is marked before it goes.
        for condition in status.conditions.iter().flatten() {
            if condition.type_ == "DisruptionTarget" && condition.status == "True" {
                let why = condition.reason.clone().unwrap_or_default();
                let said = condition.message.clone().unwrap_or_default();
                return Some(if why.contains("Taint") || why.contains("PodGC") {
                    ClusterError::NodeLost { pod, message: said }
                } else {
                    ClusterError::Evicted { pod, message: said }
                });
            }
        }
        if status.phase.as_deref() == Some("Failed") && self.terminated(program).is_none() {
            return Some(ClusterError::PodFailed {
                pod,
                reason: if reason.is_empty() {
                    "Failed".into()
                } else {
                    reason
                },
                message,
            });
        }
        None
    }
}

/// How often `start_printing` pings until the container answers, and how
/// many times (10 s in all).
const PING_EVERY: std::time::Duration = std::time::Duration::from_millis(250);
const PINGS: u32 = 40;

impl Cluster {
    /// Deletes pod `name` now; one already gone is fine.
    pub(crate) async fn delete_pod(&self, name: &str) -> Result<()> {
        delete(&self.pods(), self.namespace(), name).await
    }

    /// Creates `pod`, owned by a guard made before the request.
    pub(crate) async fn create_pod(&self, pod: &Pod) -> Result<(PodGuard, String)> {
        let name = pod.metadata.name.clone().unwrap_or_default();
        let api = self.pods();
        let guard = PodGuard {
            pods: api.clone(),
            name: name.clone(),
            namespace: self.namespace().to_string(),
            armed: true,
        };
        let made = api
            .create(&PostParams::default(), pod)
            .await
            .map_err(|e| Call::new("create", "pods", self.namespace(), &name).error(e))?;
        Ok((guard, made.metadata.uid.unwrap_or_default()))
    }

    /// Waits until `decide` answers for pod `name` (seen through a
    /// [`PodView`], so no caller outside this module names a kube type), on
    /// the shared watch of this process's pods (see `pod_watch`); a deleted
    /// pod is [`Error::ContainerGone`].
    pub(crate) async fn wait_pod<T>(
        &self,
        name: &str,
        mut decide: impl FnMut(&PodView<'_>) -> Option<Result<T>>,
    ) -> Result<T> {
        self.pod_watch
            .wait(self.namespace(), name, |pod| decide(&PodView::new(pod)))
            .await
    }

    /// Why pod `name` did not start in time: the scheduler's reason when it
    /// could not place the pod ([`ClusterError::Unschedulable`]), else
    /// `otherwise`. Read from the shared watch, else from the pod; call it
    /// while the pod still exists.
    pub(crate) async fn why_not_started(&self, name: &str, otherwise: Error) -> Error {
        let pod = match self.pod_watch.latest(name) {
            Some(pod) => Some(pod),
            None => self.pods().get(name).await.ok().map(std::sync::Arc::new),
        };
        match pod.and_then(|p| PodView::new(&p).unschedulable()) {
            Some(message) => ClusterError::Unschedulable {
                pod: name.to_string(),
                message,
            }
            .into(),
            None => otherwise,
        }
    }

    /// [`Cluster::wait_pod`] for at most `limit`. Past it, the error says
    /// what held the pod up: the scheduler's reason when it could not place
    /// the pod ([`ClusterError::Unschedulable`]), else that it was not ready.
    pub(crate) async fn wait_pod_within<T>(
        &self,
        name: &str,
        limit: std::time::Duration,
        decide: impl FnMut(&PodView<'_>) -> Option<Result<T>>,
    ) -> Result<T> {
        match tokio::time::timeout(limit, self.wait_pod(name, decide)).await {
            Ok(done) => done,
            Err(_) => Err(self
                .why_not_started(
                    name,
                    ClusterError::PodFailed {
                        pod: name.to_string(),
                        reason: "NotReady".into(),
                        message: format!("it was not ready within {limit:?}"),
                    }
                    .into(),
                )
                .await),
        }
    }

    /// Waits until container `container` of pod `name` runs. What the
    /// cluster reports as a failure (an image it cannot pull, say) is its
    /// typed error; the container ending first is `ended(exit code, reason)`.
    pub(crate) async fn wait_running(
        &self,
        name: &str,
        container: &str,
        ended: impl Fn(i32, &str) -> Error,
    ) -> Result<()> {
        self.wait_pod(name, |p| {
            let view = p;
            if let Some(failure) = view.failure(container) {
                return Some(Err(failure.into()));
            }
            if view.running(container) {
                return Some(Ok(()));
            }
            view.terminated(container)
                .map(|(code, reason)| Err(ended(code, &reason)))
        })
        .await
    }

    /// Writes `data` to the stdin of container `container` of pod `name`,
    /// then closes it.
    pub(crate) async fn send_stdin(
        &self,
        name: &str,
        container: &str,
        mut data: impl AsyncRead + Unpin,
    ) -> Result<()> {
        let call = Call::new("attach", "pods/attach", self.namespace(), name);
        let mut attached = self.attach_to(&call, container, false, false).await?;
        let mut stdin = attached.stdin().ok_or_else(|| lost(&call, "no stdin"))?;
        tokio::io::copy(&mut data, &mut stdin)
            .await
            .map_err(|e| lost(&call, &e.to_string()))?;
        stdin
            .shutdown()
            .await
            .map_err(|e| lost(&call, &e.to_string()))?;
        drop(stdin);
        attached
            .join()
            .await
            .map_err(|e| lost(&call, &e.to_string()))
    }

    /// Has container `container` (a one-shot's `outputs`) start printing,
    /// and streams what it prints on stdout until it ends.
    ///
    /// An attach wires the container's stdin before its stdout (containerd
    /// copies stdin first), so what it prints right after a line arrives
    /// can reach its log and not the stream. So the backend pings with
    /// numbered lines, each answered `ready <n>`, until an answer arrives
    /// (stdout is then on the stream), reads the answers to the pings
    /// still in flight, and only then says `go`.
    pub(crate) async fn start_printing(
        &self,
        name: &str,
        container: &str,
    ) -> Result<impl Stream<Item = Result<Bytes>> + Send + Unpin + 'static> {
        use tokio::io::AsyncBufReadExt;
        let call = Call::new("attach", "pods/attach", self.namespace(), name);
        let mut attached = self.attach_to(&call, container, true, false).await?;
        let mut stdin = attached.stdin().ok_or_else(|| lost(&call, "no stdin"))?;
        let stdout = attached.stdout().ok_or_else(|| lost(&call, "no stdout"))?;
        let mut reader = tokio::io::BufReader::new(stdout);
        let broken = |e: std::io::Error| lost(&call, &e.to_string());
        let answer = |line: &str| -> Result<u32> {
            line.trim_end()
                .strip_prefix("ready ")
                .and_then(|n| n.parse().ok())
                .ok_or_else(|| lost(&call, &format!("it answered {line:?}, not `ready <n>`")))
        };
        let mut sent = 0u32;
        let mut line = String::new();
        let got = {
            let read = reader.read_line(&mut line);
            let mut read = std::pin::pin!(read);
            let mut ping = tokio::time::interval(PING_EVERY);
            loop {
                tokio::select! {
                    got = &mut read => break got.map_err(broken)?,
                    _ = ping.tick() => {
                        if sent == PINGS {
                            return Err(lost(&call, "it never answered on stdout"));
                        }
                        sent += 1;
                        stdin.write_all(format!("{sent}\n").as_bytes()).await.map_err(broken)?;
                    }
                }
            }
        };
        if got == 0 {
            return Err(lost(&call, "it ended before it answered"));
        }
        let mut answered = answer(&line)?;
        // Each ping sent after the one answered is answered before `go`.
        while answered < sent {
            line.clear();
            if reader.read_line(&mut line).await.map_err(broken)? == 0 {
                return Err(lost(&call, "it ended before it answered every ping"));
            }
            answered = answer(&line)?;
        }
        stdin.write_all(b"go\n").await.map_err(broken)?;
        stdin.shutdown().await.map_err(broken)?;
        let failed = stream_failed(&call);
        // The attached process lives as long as its output is read.
        let stream = tokio_util::io::ReaderStream::new(reader).map(move |chunk| {
            let _keep = (&attached, &stdin);
            chunk.map_err(&failed)
        });
        Ok(Box::pin(stream))
    }

    /// Attaches to container `container` of pod `name` for a conversation:
    /// its stdin to write to, and its stdout and stderr as one stream of
    /// chunks. The stream ends when the container or the connection does.
    pub(crate) async fn attach_interactive(
        &self,
        name: &str,
        container: &str,
    ) -> Result<crate::engine::Attached> {
        let call = Call::new("attach", "pods/attach", self.namespace(), name);
        let mut attached = self.attach_to(&call, container, true, true).await?;
        let input = attached.stdin().ok_or_else(|| lost(&call, "no stdin"))?;
        let stdout = attached.stdout().ok_or_else(|| lost(&call, "no stdout"))?;
        let stderr = attached.stderr().ok_or_else(|| lost(&call, "no stderr"))?;
        let failed = stream_failed(&call);
        let out = tokio_util::io::ReaderStream::new(stdout)
            .map(|c| c.map(LogChunk::Stdout))
            .map_err(failed.clone());
        let err = tokio_util::io::ReaderStream::new(stderr)
            .map(|c| c.map(LogChunk::Stderr))
            .map_err(failed);
        // The attached process lives as long as its output is read.
        let output = futures::stream::select(out, err).map(move |chunk| {
            let _keep = &attached;
            chunk
        });
        Ok(crate::engine::Attached {
            input: Box::pin(input),
            output: Box::pin(output),
        })
    }

    /// Attaches to container `container` of the pod `call` names, its stdin
    /// open and its stdout and stderr as asked.
    async fn attach_to(
        &self,
        call: &Call<'_>,
        container: &str,
        stdout: bool,
        stderr: bool,
    ) -> Result<kube::api::AttachedProcess> {
        let params = AttachParams::default()
            .container(container)
            .stdin(true)
            .stdout(stdout)
            .stderr(stderr);
        self.pods()
            .attach(call.name, &params)
            .await
            .map_err(|e| call.error(e))
    }

    /// Streams the kubelet's log of container `container` (stdout and
    /// stderr as one stream) until the container ends.
    pub(crate) async fn follow_log(
        &self,
        name: &str,
        container: &str,
    ) -> Result<impl futures::AsyncBufRead + Send + Unpin + 'static> {
        let params = LogParams {
            container: Some(container.into()),
            follow: true,
            ..Default::default()
        };
        let log = self
            .pods()
            .log_stream(name, &params)
            .await
            .map_err(|e| Call::new("get", "pods/log", self.namespace(), name).error(e))?;
        Ok(Box::pin(log))
    }
}

/// `lost` for an attach stream's read errors, owning what it names.
fn stream_failed(call: &Call<'_>) -> impl Fn(std::io::Error) -> Error + Clone + Send + 'static {
    let (verb, what) = (call.verb, format!("{} {}", call.resource, call.name));
    move |e| {
        ClusterError::Api {
            operation: verb,
            status: None,
            reason: "StreamFailed".into(),
            message: format!("{what}: {e}"),
        }
        .into()
    }
}

fn lost(call: &Call<'_>, why: &str) -> Error {
    ClusterError::Api {
        operation: call.verb,
        status: None,
        reason: "StreamFailed".into(),
        message: format!("{} {}: {why}", call.resource, call.name),
    }
    .into()
}
