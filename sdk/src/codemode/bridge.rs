//! The code host's container and the bridge program attached to it.
//!
//! The bridge runs Monty, pydantic's sandboxed Python interpreter, in the
//! hardened, offline container; the host speaks JSON lines with it over the
//! container's attach stream (or a Unix socket it offers). Every code host
//! image carries the compiled bridge (`sdk/images/codehost/bridge`, see
//! [`crate::image::bridge`]): an image dockhand builds gets it as one copy step, and
//! a prebuilt image gets an image of its own made from it with that one
//! copy step.

use std::collections::VecDeque;
use std::time::Duration;

use futures::{Stream, StreamExt};
use tokio::io::{AsyncWrite, AsyncWriteExt};

use super::channel::Channel;
use super::protocol::{self, BridgeConfig, FromRunner, ToRunner};
use crate::backend::Held;
use crate::client::Client;
use crate::engine::{ContainerSpec, LogChunk};
use crate::error::{Error, Result};
use crate::image::ImageSpec;
use crate::sandbox::{confine, Hardening, Network, Resources};
use crate::util::push_tail;
use crate::util::LineBuffer;

/// What a code host's container runs, and its limits.
pub(crate) struct Launch<'a> {
    pub image: &'a ImageSpec,
    pub resources: Resources,
    pub isolation: &'a crate::Isolation,
    pub bridge: BridgeConfig,
    pub start_timeout: std::time::Duration,
    pub mounts: &'a [super::mounts::Mount],
    /// The most the mounts' copies and what the code writes may hold.
    pub mounts_size: u64,
    /// On a cluster, the agent-sandbox pool to claim the pod from.
    pub claims: Option<&'a crate::backend::AgentPool>,
}

/// The code host's container: the bridge under Monty, always fully
/// hardened and offline (the code is a model's).
pub(crate) fn host_spec(how: &Launch<'_>, image: &str) -> Result<ContainerSpec> {
    host_spec_with(how, image, &how.bridge)
}

/// [`host_spec`] with the bridge's settings `bridge` instead of `how`'s.
pub(crate) fn host_spec_with(
    how: &Launch<'_>,
    image: &str,
    bridge: &BridgeConfig,
) -> Result<ContainerSpec> {
    let config = serde_json::to_string(bridge)
        .map_err(|e| Error::spec("code host settings", e.to_string()))?;
    let mut spec = ContainerSpec {
        image: image.to_string(),
        cmd: vec![crate::image::bridge::BINARY.into(), config],
        entrypoint: Some(Vec::new()),
        env: vec!["HOME=/tmp".into(), "PYTHONDONTWRITEBYTECODE=1".into()],
        working_dir: Some("/tmp".into()),
        kind: "code-host",
        // The mounted directories' copies (see `mounts`), in memory and
        // bounded: the code may write a read-write mount.
        memory_volumes: if how.mounts.is_empty() {
            Vec::new()
        } else {
            vec![(super::mounts::MOUNTS_DIR.into(), how.mounts_size)]
        },
        open_stdin: true,
        no_log: true,
        // The program exits when its stdin closes, as it does when the owner dies.
        auto_remove: true,
        ..Default::default()
    };
    // Always fully hardened and offline: the code is a model's.
    let hardening = Hardening::default().tmp_size("64Mi");
    confine(&mut spec, &how.resources, &hardening, &Network::None);
    spec.runtime = how.isolation.runtime_name().map(String::from);
    Ok(spec)
}

/// The attached bridge.
pub(crate) struct Runner {
    pub container: Held,
    /// The direct channel, once the bridge connected to it; the attach
    /// stream carries everything otherwise (and stderr always).
    fast: Option<Channel>,
    fast_lines: LineBuffer,
    input: std::pin::Pin<Box<dyn AsyncWrite + Send>>,
    output: std::pin::Pin<Box<dyn Stream<Item = Result<LogChunk>> + Send>>,
    lines: LineBuffer,
    queue: VecDeque<FromRunner>,
    pub stderr: String,
    /// An execution whose caller stopped waiting (its future was dropped):
    /// the bridge may still be running it, so the next caller cancels it first.
    pub in_flight: Option<String>,
}

impl Runner {
    /// A runner speaking over `input` and `output` (an attach stream) with
    /// the bridge in `container`.
    pub(crate) fn attached(
        container: Held,
        input: std::pin::Pin<Box<dyn AsyncWrite + Send>>,
        output: std::pin::Pin<Box<dyn Stream<Item = Result<LogChunk>> + Send>>,
    ) -> Runner {
        Runner {
            container,
            fast: None,
            fast_lines: LineBuffer::default(),
            input,
            output,
            lines: LineBuffer::default(),
            queue: VecDeque::new(),
            stderr: String::new(),
            in_flight: None,
        }
    }
    /// Speaks over `channel` from now on (the bridge connected to it).
    pub(super) fn use_channel(&mut self, channel: Channel) {
        self.fast = Some(channel);
    }

    pub async fn send(&mut self, message: &ToRunner) -> Result<()> {
        self.send_lines(&protocol::encode(message)).await
    }

    /// Sends encoded lines in one write (one wake-up for the bridge).
    pub async fn send_lines(&mut self, lines: &[u8]) -> Result<()> {
        if let Some(fast) = &mut self.fast {
            return fast
                .write(lines)
                .await
                .map_err(|e| Error::io("writing to the code host", e));
        }
        self.input
            .write_all(lines)
            .await
            .map_err(|e| Error::io("writing to the code host", e))?;
        self.input
            .flush()
            .await
            .map_err(|e| Error::io("writing to the code host", e))
    }

    /// The next message; `None` when the bridge's output ended (it died).
    pub async fn next(&mut self) -> Option<Result<FromRunner>> {
        loop {
            if let Some(m) = self.queue.pop_front() {
                return Some(Ok(m));
            }
            let chunk = match &mut self.fast {
                Some(fast) => tokio::select! {
                    read = fast.read() => match read {
                        Ok(bytes) if !bytes.is_empty() => {
                            queue_messages(&mut self.queue, self.fast_lines.push(bytes));
                            continue;
                        }
                        // The bridge closed its end: it is gone.
                        _ => return None,
                    },
                    chunk = self.output.next() => chunk?,
                },
                None => self.output.next().await?,
            };
            match chunk {
                Err(e) => return Some(Err(e)),
                Ok(LogChunk::Stderr(b)) => {
                    push_tail(&mut self.stderr, &b, 8192);
                }
                Ok(LogChunk::Stdout(b)) => queue_messages(&mut self.queue, self.lines.push(&b)),
            }
        }
    }
}

/// Decodes the bridge's complete lines (from either channel) into `queue`.
fn queue_messages(queue: &mut VecDeque<FromRunner>, lines: Vec<Vec<u8>>) {
    for line in lines {
        match protocol::decode(&line) {
            Ok(m) => queue.push_back(m),
            Err(e) => tracing::warn!(error = %e, "unreadable line from the code host"),
        }
    }
}

impl Client {
    /// The code host image for `config` on this Docker daemon, made if
    /// missing (the bridge is compiled once per machine). A cluster cannot
    /// build images: push this one where its nodes pull from and name it
    /// there with [`ImageSpec::prebuilt`].
    ///
    /// ```no_run
    /// # async fn demo() -> dockhand::Result<()> {
    /// use dockhand::codemode::CodeHostConfig;
    /// let docker = dockhand::Client::connect().await?;
    /// let image = docker.code_host_image(&CodeHostConfig::new()).await?;
    /// println!("docker tag {} registry.example/dockhand/code-host:1", image.reference);
    /// # Ok(()) }
    /// ```
    pub async fn code_host_image(
        &self,
        config: &super::CodeHostConfig,
    ) -> Result<crate::image::ResolvedImage> {
        let spec =
            crate::image::bridge::code_host_image(self.engine()?, self.images()?, &config.image)
                .await?;
        self.images()?.resolve(&spec).await
    }
}

/// Why the bridge did not come up, with the fix where it is known.
pub(super) fn bridge_exited(stderr: &str) -> Error {
    let stderr = stderr.trim();
    // The bridge is static; Monty's worker is a manylinux program.
    let hint = if stderr.contains("worker") && stderr.contains("No such file") {
        "; Monty's worker needs the GNU C library (glibc 2.17 or later) in the image"
    } else {
        ""
    };
    Error::CodeHostUnavailable {
        reason: format!("the bridge exited: {stderr}{hint}"),
    }
}

/// Ends an execution whose caller stopped waiting: asks the bridge to cancel
/// it and reads up to its result, refusing the tool calls it still makes.
pub(super) async fn cancel_stale(runner: &mut Runner, id: &str) -> Result<()> {
    let drain = async {
        runner.send(&ToRunner::Cancel { id: id.into() }).await?;
        loop {
            match runner.next().await {
                None => {
                    return Err(Error::CodeHostUnavailable {
                        reason: "the bridge's output ended".into(),
                    })
                }
                Some(Err(e)) => return Err(e),
                Some(Ok(FromRunner::Result(r))) if r.id == id => return Ok(()),
                Some(Ok(FromRunner::ToolCall { call, .. })) => {
                    let refused = ToRunner::ToolResult {
                        call,
                        ok: false,
                        value: None,
                        error: Some("the execution was cancelled".into()),
                    };
                    runner.send(&refused).await?;
                }
                Some(Ok(_)) => {}
            }
        }
    };
    match tokio::time::timeout(Duration::from_secs(5), drain).await {
        Ok(done) => done,
        Err(_) => Err(Error::CodeHostUnavailable {
            reason: "an abandoned execution did not end within 5s of being cancelled".into(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_worker_that_cannot_load_is_explained() {
        let e =
            bridge_exited("no interpreter could be started: worker: No such file or directory\n");
        assert!(e.to_string().contains("glibc"), "{e}");
        let e = bridge_exited("something else");
        assert!(!e.to_string().contains("glibc"), "{e}");
    }
}
