//! Container operations: create, upload, start, wait, logs, kill, download, remove, list.

use std::collections::HashMap;

use bollard::container::LogOutput;
use bollard::models::{
    ContainerCreateBody, HostConfig, HostConfigLogConfig, Mount as VolumeMount, MountType,
    MountVolumeOptions,
};
use bollard::query_parameters::{
    AttachContainerOptionsBuilder, CreateContainerOptionsBuilder,
    DownloadFromContainerOptionsBuilder, KillContainerOptionsBuilder, ListContainersOptionsBuilder,
    LogsOptionsBuilder, RemoveContainerOptionsBuilder, UploadToContainerOptionsBuilder,
    WaitContainerOptionsBuilder,
};
use futures::{Stream, StreamExt, TryStreamExt};

use super::{docker_err, is_not_found, labels, ContainerGuard, Engine};
use crate::error::Result;

/// A host path made visible inside a container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    /// Absolute path on the daemon's host.
    pub host_path: String,
    /// Absolute path inside the container.
    pub container_path: String,
    /// Whether the container may only read it.
    pub read_only: bool,
}

/// Everything needed to create one container. Engine-neutral on purpose.
#[derive(Debug, Clone, Default)]
pub struct ContainerSpec {
    /// Image reference.
    pub image: String,
    /// Command (after the image's entrypoint).
    pub cmd: Vec<String>,
    /// Replaces the image's entrypoint when set.
    pub entrypoint: Option<Vec<String>>,
    /// `KEY=value` pairs.
    pub env: Vec<String>,
    /// Working directory.
    pub working_dir: Option<String>,
    /// `uid[:gid]` or a user name.
    pub user: Option<String>,
    /// Value of the `kind` label.
    pub kind: &'static str,
    /// Labels besides the SDK's own.
    pub extra_labels: HashMap<String, String>,
    /// Memory limit in bytes (swap is set equal, so no swap is used).
    pub memory_bytes: Option<i64>,
    /// CPU limit in billionths of a CPU.
    pub nano_cpus: Option<i64>,
    /// Maximum number of processes.
    pub pids_limit: Option<i64>,
    /// Network mode; `None` means no network at all.
    pub network: Option<String>,
    /// Drop every Linux capability.
    pub cap_drop_all: bool,
    /// Capabilities added back.
    pub cap_add: Vec<String>,
    /// Set `no-new-privileges`.
    pub no_new_privileges: bool,
    /// Mount the root filesystem read-only.
    pub read_only_rootfs: bool,
    /// tmpfs mounts: path -> options (e.g. `size=64m`).
    pub tmpfs: HashMap<String, String>,
    /// Paths backed by fresh, labelled anonymous volumes: writable under a
    /// read-only root, kept after exit (so outputs can be downloaded), and
    /// removed with the container.
    pub scratch_volumes: Vec<String>,
    /// Bind mounts.
    pub mounts: Vec<Mount>,
    /// Keep stdin open (for attached programs).
    pub open_stdin: bool,
    /// Do not keep a log of the output (for programs spoken to through
    /// attach, whose every message would otherwise also be written to disk).
    pub no_log: bool,
}

/// A container's attached standard streams.
pub struct Attached {
    /// stdout and stderr chunks as they come.
    pub output: std::pin::Pin<Box<dyn Stream<Item = Result<LogChunk>> + Send>>,
    /// The container's stdin.
    pub input: std::pin::Pin<Box<dyn tokio::io::AsyncWrite + Send>>,
}

/// How a container ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExitStatus {
    /// Exit code (128 + signal when killed by one).
    pub code: i64,
    /// Whether the kernel OOM killer ended it.
    pub oom_killed: bool,
}

/// One piece of a container's output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogChunk {
    /// Bytes written to standard output.
    Stdout(bytes::Bytes),
    /// Bytes written to standard error.
    Stderr(bytes::Bytes),
}

impl Engine {
    /// Creates a container and returns the guard that owns it.
    pub async fn create_container(&self, spec: &ContainerSpec) -> Result<ContainerGuard> {
        let mut all_labels = labels::owned(spec.kind);
        all_labels.extend(spec.extra_labels.clone());
        let host_config = HostConfig {
            memory: spec.memory_bytes,
            memory_swap: spec.memory_bytes,
            nano_cpus: spec.nano_cpus,
            pids_limit: spec.pids_limit,
            network_mode: Some(spec.network.clone().unwrap_or_else(|| "none".into())),
            cap_drop: spec.cap_drop_all.then(|| vec!["ALL".to_string()]),
            cap_add: (!spec.cap_add.is_empty()).then(|| spec.cap_add.clone()),
            security_opt: spec
                .no_new_privileges
                .then(|| vec!["no-new-privileges".to_string()]),
            readonly_rootfs: Some(spec.read_only_rootfs),
            tmpfs: (!spec.tmpfs.is_empty()).then(|| spec.tmpfs.clone()),
            binds: (!spec.mounts.is_empty()).then(|| {
                spec.mounts
                    .iter()
                    .map(|m| {
                        let mode = if m.read_only { "ro" } else { "rw" };
                        format!("{}:{}:{mode}", m.host_path, m.container_path)
                    })
                    .collect()
            }),
            mounts: (!spec.scratch_volumes.is_empty()).then(|| {
                spec.scratch_volumes
                    .iter()
                    .map(|target| VolumeMount {
                        target: Some(target.clone()),
                        typ: Some(MountType::VOLUME),
                        volume_options: Some(MountVolumeOptions {
                            labels: Some(labels::owned(spec.kind)),
                            ..Default::default()
                        }),
                        ..Default::default()
                    })
                    .collect()
            }),
            log_config: spec.no_log.then(|| HostConfigLogConfig {
                typ: Some("none".into()),
                config: None,
            }),
            // Containers are removed explicitly, after their outputs are read.
            auto_remove: Some(false),
            ..Default::default()
        };
        let body = ContainerCreateBody {
            image: Some(spec.image.clone()),
            cmd: Some(spec.cmd.clone()),
            entrypoint: spec.entrypoint.clone(),
            env: Some(spec.env.clone()),
            working_dir: spec.working_dir.clone(),
            user: spec.user.clone(),
            labels: Some(all_labels),
            network_disabled: Some(spec.network.is_none()),

            open_stdin: Some(spec.open_stdin),
            stdin_once: Some(spec.open_stdin),
            attach_stdin: Some(spec.open_stdin),
            tty: Some(false),
            host_config: Some(host_config),
            ..Default::default()
        };
        let options = CreateContainerOptionsBuilder::default().build();
        let created = self
            .docker
            .create_container(Some(options), body)
            .await
            .map_err(|e| docker_err("create container", e))?;
        Ok(ContainerGuard::new(self.clone(), created.id))
    }

    /// Extracts a tar archive into `dir` of a (created or running) container.
    pub async fn upload_archive(&self, id: &str, dir: &str, tar: bytes::Bytes) -> Result<()> {
        let options = UploadToContainerOptionsBuilder::default().path(dir).build();
        self.docker
            .upload_to_container(id, Some(options), bollard::body_full(tar))
            .await
            .map_err(|e| docker_err("upload archive", e))
    }

    /// Puts one file at `dir/path` in a container (its parent directories
    /// created world-readable), e.g. a program its main process runs.
    pub async fn upload_file(
        &self,
        id: &str,
        dir: &str,
        path: &str,
        data: impl Into<Vec<u8>>,
    ) -> Result<()> {
        let parents: Vec<&str> = path.rmatch_indices('/').map(|(i, _)| &path[..i]).collect();
        let dirs: Vec<(&str, u32)> = parents.iter().rev().map(|p| (*p, 0o755)).collect();
        let tar = crate::archive::build_tar(&dirs, &[crate::archive::TarFile::new(path, data)])?;
        self.upload_archive(id, dir, bytes::Bytes::from(tar)).await
    }

    /// Starts a created container.
    pub async fn start_container(&self, id: &str) -> Result<()> {
        self.docker
            .start_container(id, None)
            .await
            .map_err(|e| docker_err("start container", e))
    }

    /// Waits until the container stops and reports how it ended.
    pub async fn wait_container(&self, id: &str) -> Result<ExitStatus> {
        let options = WaitContainerOptionsBuilder::default()
            .condition("not-running")
            .build();
        let mut stream = self.docker.wait_container(id, Some(options));
        let code = match stream.next().await {
            Some(Ok(resp)) => resp.status_code,
            // bollard reports a non-zero exit as an error; it is an exit status.
            Some(Err(bollard::errors::Error::DockerContainerWaitError { code, .. })) => code,
            Some(Err(e)) => return Err(docker_err("wait container", e)),
            None => {
                return Err(crate::Error::Docker {
                    operation: "wait container",
                    message: "the daemon closed the wait without a status".into(),
                })
            }
        };
        // Only a killed process can have been OOM-killed; spare the inspect
        // call on the common path.
        let oom_killed = code != 0
            && self
                .docker
                .inspect_container(id, None)
                .await
                .ok()
                .and_then(|c| c.state)
                .and_then(|s| s.oom_killed)
                .unwrap_or(false);
        Ok(ExitStatus { code, oom_killed })
    }

    /// Streams stdout and stderr from the start of the container until it stops.
    pub fn follow_logs(&self, id: &str) -> impl Stream<Item = Result<LogChunk>> + Send + 'static {
        let options = LogsOptionsBuilder::default()
            .follow(true)
            .stdout(true)
            .stderr(true)
            .build();
        self.docker
            .logs(id, Some(options))
            .map_err(|e| docker_err("read logs", e))
            .try_filter_map(|out| async move {
                Ok(match out {
                    LogOutput::StdOut { message } | LogOutput::Console { message } => {
                        Some(LogChunk::Stdout(message))
                    }
                    LogOutput::StdErr { message } => Some(LogChunk::Stderr(message)),
                    LogOutput::StdIn { .. } => None,
                })
            })
    }

    /// Attaches to a created container's stdin, stdout and stderr (call before
    /// starting it, so no output is missed). The container must have been
    /// created with `open_stdin`.
    pub async fn attach(&self, id: &str) -> Result<Attached> {
        let options = AttachContainerOptionsBuilder::default()
            .stdin(true)
            .stdout(true)
            .stderr(true)
            .stream(true)
            .build();
        let attached = self
            .docker
            .attach_container(id, Some(options))
            .await
            .map_err(|e| docker_err("attach container", e))?;
        let output = attached.output.filter_map(|item| async move {
            match item {
                Ok(LogOutput::StdOut { message } | LogOutput::Console { message }) => {
                    Some(Ok(LogChunk::Stdout(message)))
                }
                Ok(LogOutput::StdErr { message }) => Some(Ok(LogChunk::Stderr(message))),
                Ok(LogOutput::StdIn { .. }) => None,
                Err(e) => Some(Err(docker_err("read attached output", e))),
            }
        });
        Ok(Attached {
            output: Box::pin(output),
            input: attached.input,
        })
    }

    /// Sends SIGKILL; a container that already stopped is not an error.
    pub async fn kill_container(&self, id: &str) -> Result<()> {
        let options = KillContainerOptionsBuilder::default()
            .signal("SIGKILL")
            .build();
        match self.docker.kill_container(id, Some(options)).await {
            Ok(()) => Ok(()),
            Err(bollard::errors::Error::DockerResponseServerError {
                status_code: 404 | 409,
                ..
            }) => Ok(()),
            Err(e) => Err(docker_err("kill container", e)),
        }
    }

    /// Reads `path` out of a container as a tar archive; `None` when it does not exist.
    pub async fn download_archive(&self, id: &str, path: &str) -> Result<Option<Vec<u8>>> {
        let options = DownloadFromContainerOptionsBuilder::default()
            .path(path)
            .build();
        let mut stream = self.docker.download_from_container(id, Some(options));
        let mut tar = Vec::new();
        while let Some(chunk) = stream.next().await {
            match chunk {
                Ok(bytes) => tar.extend_from_slice(&bytes),
                Err(e) if is_not_found(&e) => return Ok(None),
                Err(e) => return Err(docker_err("download archive", e)),
            }
        }
        Ok(Some(tar))
    }

    /// Force-removes a container and its anonymous volumes; a missing one is fine.
    pub async fn remove_container(&self, id: &str) -> Result<()> {
        remove_with(&self.docker, id).await
    }

    /// Lists containers (running or not) carrying the SDK's labels:
    /// `(id, labels)` pairs.
    pub async fn list_managed_containers(&self) -> Result<Vec<(String, HashMap<String, String>)>> {
        let filters = HashMap::from([("label", vec![labels::MANAGED.to_string()])]);
        let options = ListContainersOptionsBuilder::default()
            .all(true)
            .filters(&filters)
            .build();
        let list = self
            .docker
            .list_containers(Some(options))
            .await
            .map_err(|e| docker_err("list containers", e))?;
        Ok(list
            .into_iter()
            .filter_map(|c| Some((c.id?, c.labels.unwrap_or_default())))
            .collect())
    }
}

/// Removal shared by the async path and the drop path (which uses its own client).
pub(super) async fn remove_with(docker: &bollard::Docker, id: &str) -> Result<()> {
    let options = RemoveContainerOptionsBuilder::default()
        .force(true)
        .v(true)
        .build();
    match docker.remove_container(id, Some(options)).await {
        Ok(()) => Ok(()),
        Err(e) if is_not_found(&e) => Ok(()),
        // 409 "removal already in progress": someone else is on it.
        Err(bollard::errors::Error::DockerResponseServerError {
            status_code: 409, ..
        }) => Ok(()),
        Err(e) => Err(docker_err("remove container", e)),
    }
}
