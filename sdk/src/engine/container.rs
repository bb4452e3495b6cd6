//! Container operations: create, upload, start, wait, logs, download, remove, list.

use std::collections::HashMap;

use bollard::container::LogOutput;
use bollard::models::{
    ContainerCreateBody, HostConfig, HostConfigLogConfig, Mount as VolumeMount, MountType,
    MountVolumeOptions, MountVolumeOptionsDriverConfig, ResourcesUlimits,
};
use bollard::query_parameters::{
    AttachContainerOptionsBuilder, CreateContainerOptionsBuilder,
    DownloadFromContainerOptionsBuilder, EventsOptionsBuilder, ListContainersOptionsBuilder,
    RemoveContainerOptionsBuilder, UploadToContainerOptionsBuilder, WaitContainerOptionsBuilder,
};
use futures::{Stream, StreamExt};

use super::{docker_err, is_not_found, labels, ContainerGuard, Engine};
use crate::error::Result;

/// The unprivileged user sandboxes run as (`nobody`).
pub const UNPRIVILEGED_USER: &str = "65534:65534";

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
    /// DNS servers (instead of the daemon's).
    pub dns: Vec<String>,
    /// Namespaced kernel settings (`net.ipv4.ip_unprivileged_port_start`).
    pub sysctls: HashMap<String, String>,
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
    /// Scratch volumes held in memory (tmpfs) of at most so many bytes, and
    /// one file per [`BYTES_PER_FILE`] of them: a write or a file past either
    /// fails with `ENOSPC`. Only what is put there while the container runs
    /// stays (an upload before the start is lost).
    pub memory_volumes: Vec<(String, u64)>,
    /// The OCI runtime (`runsc`); `None` is the daemon's default.
    pub runtime: Option<String>,
    /// Bind mounts.
    pub mounts: Vec<Mount>,
    /// Keep stdin open (for attached programs).
    pub open_stdin: bool,
    /// Do not keep a log of the output (for programs spoken to through
    /// attach, whose every message would otherwise also be written to disk).
    pub no_log: bool,
    /// Have the daemon remove the container (and its anonymous volumes) when
    /// its main process exits. For attached programs that exit when their
    /// stdin closes: when the owning process dies, its connection closes, and
    /// the container goes without anyone's help.
    pub auto_remove: bool,
    /// Run a minimal init as PID 1, so the program is not PID 1: the kernel
    /// ignores signals PID 1 has no handler for, SIGKILL from inside included,
    /// and an init reaps orphans and reports a signal death as 128 + signal.
    pub init: bool,
    /// Largest file any process may write (`RLIMIT_FSIZE`): past it a write
    /// fails with `EFBIG` (or `SIGXFSZ` for programs that do not ignore it).
    pub max_file_bytes: Option<i64>,
    /// Outlives this process: no owner labels (so no watchdog or `reap`
    /// removes it), and the [`labels::KEPT`] label. Its stdin stays open
    /// when an attach ends, so a later process can attach to the same
    /// running program.
    pub kept: bool,
    /// Named volumes (Docker's names) mounted at paths: `(name, path, read_only)`.
    pub volumes: Vec<(String, String, bool)>,
}

/// A memory volume holds one file (or directory) per so many bytes of its
/// size: files cost kernel memory beyond their bytes, which the size does not
/// count, so their number is bounded too.
pub const BYTES_PER_FILE: u64 = 4096;

/// The tmpfs options of a memory volume of `size` bytes.
fn memory_volume_options(size: u64) -> String {
    let files = (size / BYTES_PER_FILE).max(64);
    format!("size={size},nr_inodes={files},mode=0755")
}

/// A container's attached standard streams: a Docker container's, or a
/// container's of a pod on a cluster (`Cluster::attach_interactive`).
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
    /// Whether the container was removed from outside (it no longer exists).
    pub gone: bool,
}

/// An exited container as the daemon reports it.
#[derive(Debug, Default)]
struct EndedState {
    oom_killed: bool,
    /// Removed from outside.
    gone: bool,
    memory_limited: bool,
    /// When it started, as the daemon writes times.
    started_at: Option<String>,
}

/// One piece of a container's output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogChunk {
    /// Bytes written to standard output.
    Stdout(bytes::Bytes),
    /// Bytes written to standard error.
    Stderr(bytes::Bytes),
}

/// How long to wait for a late OOM event before reporting a SIGKILL as a kill.
const OOM_EVENT_GRACE: std::time::Duration = std::time::Duration::from_millis(1000);

/// gVisor's runtime name as daemons register it.
const GVISOR_RUNTIME: &str = "runsc";

/// The least pids limit gVisor starts with (its sentry and gofer threads).
const GVISOR_MIN_PIDS: i64 = 128;

impl Engine {
    /// Creates a container and returns the guard that owns it. The guard
    /// exists before the request is sent, so a dropped call leaves nothing.
    pub async fn create_container(&self, spec: &ContainerSpec) -> Result<ContainerGuard> {
        if let Some(runtime) = &spec.runtime {
            // gVisor's own host threads count toward the pids limit: below
            // this, `runsc start` fails or hangs instead of running the code.
            if runtime == GVISOR_RUNTIME && spec.pids_limit.is_some_and(|p| p < GVISOR_MIN_PIDS) {
                return Err(crate::Error::spec(
                    "isolation",
                    format!("under gVisor the pids limit counts gVisor's own threads too; give at least {GVISOR_MIN_PIDS}"),
                ));
            }
            self.check_runtime(runtime, spec.network.is_some()).await?;
        }
        if spec.kind != super::watchdog::KIND {
            super::watchdog::ensure(self);
        }
        let mut guard = ContainerGuard::before_create(self.clone());
        let owner = |kind| {
            if spec.kept {
                let mut labels = labels::durable(kind);
                labels.insert(labels::KEPT.into(), "true".into());
                labels
            } else {
                labels::owned(kind)
            }
        };
        let mut all_labels = owner(spec.kind);
        all_labels.extend(spec.extra_labels.clone());
        all_labels.insert(labels::SCRATCH.into(), guard.token().to_string());
        let mut volume_labels = owner(spec.kind);
        volume_labels.insert(labels::SCRATCH.into(), guard.token().to_string());
        let host_config = HostConfig {
            memory: spec.memory_bytes,
            memory_swap: spec.memory_bytes,
            nano_cpus: spec.nano_cpus,
            pids_limit: spec.pids_limit,
            network_mode: Some(spec.network.clone().unwrap_or_else(|| "none".into())),
            dns: (!spec.dns.is_empty()).then(|| spec.dns.clone()),
            sysctls: (!spec.sysctls.is_empty()).then(|| spec.sysctls.clone()),
            cap_drop: spec.cap_drop_all.then(|| vec!["ALL".to_string()]),
            cap_add: (!spec.cap_add.is_empty()).then(|| spec.cap_add.clone()),
            security_opt: spec
                .no_new_privileges
                .then(|| vec!["no-new-privileges".to_string()]),
            readonly_rootfs: Some(spec.read_only_rootfs),
            tmpfs: (!spec.tmpfs.is_empty()).then(|| spec.tmpfs.clone()),
            binds: (!spec.mounts.is_empty() || !spec.volumes.is_empty()).then(|| {
                let mode = |read_only| if read_only { "ro" } else { "rw" };
                spec.mounts
                    .iter()
                    .map(|m| format!("{}:{}:{}", m.host_path, m.container_path, mode(m.read_only)))
                    .chain(
                        spec.volumes
                            .iter()
                            .map(|(name, path, ro)| format!("{name}:{path}:{}", mode(*ro))),
                    )
                    .collect()
            }),
            mounts: (!spec.scratch_volumes.is_empty() || !spec.memory_volumes.is_empty()).then(
                || {
                    let on_disk = spec.scratch_volumes.iter().map(|t| (t, None));
                    let in_memory = spec.memory_volumes.iter().map(|(t, size)| {
                        let options = HashMap::from([
                            ("type".to_string(), "tmpfs".to_string()),
                            ("device".to_string(), "tmpfs".to_string()),
                            ("o".to_string(), memory_volume_options(*size)),
                        ]);
                        (t, Some(options))
                    });
                    on_disk
                        .chain(in_memory)
                        .map(|(target, options)| VolumeMount {
                            target: Some(target.clone()),
                            typ: Some(MountType::VOLUME),
                            volume_options: Some(MountVolumeOptions {
                                labels: Some(volume_labels.clone()),
                                driver_config: options.map(|options| {
                                    MountVolumeOptionsDriverConfig {
                                        name: Some("local".into()),
                                        options: Some(options),
                                    }
                                }),
                                ..Default::default()
                            }),
                            ..Default::default()
                        })
                        .collect()
                },
            ),
            log_config: spec.no_log.then(|| HostConfigLogConfig {
                typ: Some("none".into()),
                config: None,
            }),
            // One-shots are removed explicitly, after their outputs are read.
            auto_remove: Some(spec.auto_remove),
            init: spec.init.then_some(true),
            runtime: spec.runtime.clone(),
            ulimits: spec.max_file_bytes.map(|bytes| {
                vec![ResourcesUlimits {
                    name: Some("fsize".into()),
                    soft: Some(bytes),
                    hard: Some(bytes),
                }]
            }),
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
            stdin_once: Some(spec.open_stdin && !spec.kept),
            attach_stdin: Some(spec.open_stdin),
            tty: Some(false),
            host_config: Some(host_config),
            ..Default::default()
        };
        let options = CreateContainerOptionsBuilder::default()
            .name(&guard.name())
            .build();
        match self.docker.create_container(Some(options), body).await {
            Ok(created) => {
                guard.created(created.id);
                Ok(guard)
            }
            Err(e) => {
                guard.not_created();
                Err(self.docker_err("create container", e))
            }
        }
    }

    /// Extracts a tar archive into `dir` of a (created or running) container.
    pub async fn upload_archive(&self, id: &str, dir: &str, tar: bytes::Bytes) -> Result<()> {
        let options = UploadToContainerOptionsBuilder::default().path(dir).build();
        self.docker
            .upload_to_container(id, Some(options), bollard::body_full(tar))
            .await
            .map_err(|e| self.docker_err("upload archive", e))
    }

    /// Extracts the tar at `path` on this machine into `dir` of a container,
    /// streamed from disk (host memory stays flat whatever its size).
    pub async fn upload_archive_file(
        &self,
        id: &str,
        dir: &str,
        path: &std::path::Path,
    ) -> Result<()> {
        let file = tokio::fs::File::open(path)
            .await
            .map_err(|e| crate::error::Error::io("reading the inputs archive", e))?;
        let body = tokio_util::io::ReaderStream::with_capacity(file, 256 << 10);
        let options = UploadToContainerOptionsBuilder::default().path(dir).build();
        self.docker
            .upload_to_container(id, Some(options), bollard::body_try_stream(body))
            .await
            .map_err(|e| self.docker_err("upload archive", e))
    }

    /// Starts a created container.
    pub async fn start_container(&self, id: &str) -> Result<()> {
        self.docker
            .start_container(id, None)
            .await
            .map_err(|e| self.docker_err("start container", e))
    }

    /// Waits until the container stops and reports how it ended.
    ///
    /// A SIGKILL under a memory limit costs one more inspect after
    /// [`OOM_EVENT_GRACE`], so an OOM kill is not reported as a plain kill.
    pub async fn wait_container(&self, id: &str) -> Result<ExitStatus> {
        let options = WaitContainerOptionsBuilder::default()
            .condition("not-running")
            .build();
        let mut stream = self.docker.wait_container(id, Some(options));
        let code = match stream.next().await {
            Some(Ok(resp)) => resp.status_code,
            // bollard reports a non-zero exit as an error; it is an exit status.
            Some(Err(bollard::errors::Error::DockerContainerWaitError { code, .. })) => code,
            Some(Err(e)) => return Err(self.docker_err("wait container", e)),
            None => {
                return Err(crate::Error::Docker {
                    operation: "wait container",
                    message: "the daemon closed the wait without a status".into(),
                    status: None,
                })
            }
        };
        // Only a killed process can have been OOM-killed or removed from
        // outside; spare the inspect call on the common path.
        if code == 0 {
            return Ok(ExitStatus {
                code,
                oom_killed: false,
                gone: false,
            });
        }
        let mut ended = self.ended_state(id).await;
        // Docker 20.10 sets the OOM flag only if containerd's OOM event came
        // before the exit; one that lands after (seen under gVisor) is kept in
        // the daemon's event history alone. For a SIGKILL under a memory
        // limit, look there (and for one still coming) before calling it a kill.
        if code == 137 && ended.memory_limited && !ended.oom_killed {
            ended.oom_killed = self.oom_event(id, ended.started_at.as_deref()).await;
        }
        Ok(ExitStatus {
            code,
            oom_killed: ended.oom_killed,
            gone: ended.gone,
        })
    }

    /// Whether the daemon reports an `oom` event for the container since it
    /// started, from its history or within [`OOM_EVENT_GRACE`].
    async fn oom_event(&self, id: &str, started_at: Option<&str>) -> bool {
        let filters = HashMap::from([
            ("container", vec![id.to_string()]),
            ("type", vec!["container".to_string()]),
            ("event", vec!["oom".to_string()]),
        ]);
        // The API takes Unix times only; without a start time, the last
        // ten minutes (the history holds the latest events anyway).
        let since = started_at
            .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
            .map(|t| format!("{}.{:09}", t.timestamp(), t.timestamp_subsec_nanos()))
            .unwrap_or_else(|| (chrono::Utc::now().timestamp() - 600).to_string());
        let options = EventsOptionsBuilder::default()
            .since(&since)
            .filters(&filters)
            .build();
        let mut events = self.docker.events(Some(options));
        matches!(
            tokio::time::timeout(OOM_EVENT_GRACE, events.next()).await,
            Ok(Some(Ok(_)))
        )
    }

    /// What the daemon says now of a container that has exited.
    async fn ended_state(&self, id: &str) -> EndedState {
        match self.docker.inspect_container(id, None).await {
            Ok(c) => {
                let host = c.host_config.unwrap_or_default();
                let state = c.state.unwrap_or_default();
                EndedState {
                    oom_killed: state.oom_killed.unwrap_or(false),
                    gone: false,
                    memory_limited: host.memory.is_some_and(|m| m > 0),
                    started_at: state.started_at,
                }
            }
            Err(e) if is_not_found(&e) => EndedState {
                gone: true,
                ..EndedState::default()
            },
            Err(_) => EndedState::default(),
        }
    }

    /// Attaches to a created container's stdin, stdout and stderr (call before
    /// starting it, so no output is missed). The container must have been
    /// created with `open_stdin`.
    pub async fn attach(&self, id: &str) -> Result<Attached> {
        self.attach_with(id, true).await
    }

    /// Attaches to a created container's stdout and stderr only: the raw
    /// bytes, binary-safe and unsplit (a log driver would rewrite invalid
    /// UTF-8 and split long lines). Attach before starting to miss nothing.
    pub async fn attach_output(
        &self,
        id: &str,
    ) -> Result<std::pin::Pin<Box<dyn Stream<Item = Result<LogChunk>> + Send>>> {
        Ok(self.attach_with(id, false).await?.output)
    }

    async fn attach_with(&self, id: &str, stdin: bool) -> Result<Attached> {
        let options = AttachContainerOptionsBuilder::default()
            .stdin(stdin)
            .stdout(true)
            .stderr(true)
            .stream(true)
            .build();
        let attached = self
            .docker
            .attach_container(id, Some(options))
            .await
            .map_err(|e| self.docker_err("attach container", e))?;
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

    /// Streams `path` out of a container as a tar archive; `None` when it
    /// (or the container) does not exist.
    pub async fn download_stream(
        &self,
        id: &str,
        path: &str,
    ) -> Result<Option<impl Stream<Item = Result<bytes::Bytes>> + Send + Unpin + 'static>> {
        let options = DownloadFromContainerOptionsBuilder::default()
            .path(path)
            .build();
        let mut stream = Box::pin(self.docker.download_from_container(id, Some(options)));
        // The daemon says "not found" before the first byte, or never.
        let first = match stream.next().await {
            None => bytes::Bytes::new(),
            Some(Ok(bytes)) => bytes,
            Some(Err(e)) if is_not_found(&e) => return Ok(None),
            Some(Err(e)) => return Err(self.docker_err("download archive", e)),
        };
        let rest = stream.map(|chunk| chunk.map_err(|e| docker_err("download archive", e)));
        Ok(Some(Box::pin(
            futures::stream::once(async move { Ok(first) }).chain(rest),
        )))
    }

    /// Whether a container exists (running or not).
    pub async fn container_exists(&self, id: &str) -> Result<bool> {
        match self.docker.inspect_container(id, None).await {
            Ok(_) => Ok(true),
            Err(e) if is_not_found(&e) => Ok(false),
            Err(e) => Err(self.docker_err("inspect container", e)),
        }
    }

    /// Force-removes a container (and its volumes, also when it is already
    /// gone, given the token its labels carry); a missing one is fine.
    pub async fn remove_container(&self, id: &str, labels: &HashMap<String, String>) -> Result<()> {
        let token = labels
            .get(labels::SCRATCH)
            .map(String::as_str)
            .unwrap_or("");
        remove_with(&self.docker, id, token).await
    }

    /// Removes managed volumes whose owner process is gone (left behind when
    /// their container was removed without them): their names.
    pub async fn reap_volumes(&self) -> Result<Vec<String>> {
        let mut removed = Vec::new();
        for volume in self.volumes_labelled(labels::MANAGED).await? {
            // A kept container's scratch volumes have no owner to outlive:
            // they go once no container uses them (the removal below fails
            // while one does), as when the container was removed from
            // outside without them.
            let kept = volume.labels.get(labels::KEPT).map(String::as_str) == Some("true");
            if !kept && !labels::owner_is_gone(&volume.labels) {
                continue;
            }
            // A failure means in use (its container still exists) or gone already.
            let options = None::<bollard::query_parameters::RemoveVolumeOptions>;
            if self
                .docker
                .remove_volume(&volume.name, options)
                .await
                .is_ok()
            {
                removed.push(volume.name);
            }
        }
        Ok(removed)
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
            .map_err(|e| self.docker_err("list containers", e))?;
        Ok(list
            .into_iter()
            .filter_map(|c| Some((c.id?, c.labels.unwrap_or_default())))
            .collect())
    }
}

/// Removal shared by the async path and the drop path (which uses its own
/// client): the container with its anonymous volumes, or, when the container
/// is already gone, the volumes labelled with its `token`.
pub(super) async fn remove_with(docker: &bollard::Docker, id: &str, token: &str) -> Result<()> {
    let options = RemoveContainerOptionsBuilder::default()
        .force(true)
        .v(true)
        .build();
    match docker.remove_container(id, Some(options)).await {
        Ok(()) => Ok(()),
        Err(e) if is_not_found(&e) && !token.is_empty() => {
            remove_scratch_volumes(docker, token).await
        }
        Err(e) if is_not_found(&e) => Ok(()),
        // 409 "removal already in progress": someone else is on it.
        Err(bollard::errors::Error::DockerResponseServerError {
            status_code: 409, ..
        }) => Ok(()),
        Err(e) => Err(docker_err("remove container", e)),
    }
}

/// Removes the volumes a container left when it was removed without them.
async fn remove_scratch_volumes(docker: &bollard::Docker, token: &str) -> Result<()> {
    let filter = format!("{}={token}", labels::SCRATCH);
    let filters = HashMap::from([("label", vec![filter.as_str()])]);
    let options = bollard::query_parameters::ListVolumesOptionsBuilder::default()
        .filters(&filters)
        .build();
    let listed = docker
        .list_volumes(Some(options))
        .await
        .map_err(|e| docker_err("list volumes", e))?;
    for volume in listed.volumes.unwrap_or_default() {
        match docker
            .remove_volume(
                &volume.name,
                None::<bollard::query_parameters::RemoveVolumeOptions>,
            )
            .await
        {
            Ok(()) => {}
            Err(e) if is_not_found(&e) => {}
            Err(e) => return Err(docker_err("remove volume", e)),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_memory_volume_bounds_its_bytes_and_its_files() {
        assert_eq!(
            memory_volume_options(256 << 20),
            "size=268435456,nr_inodes=65536,mode=0755"
        );
        assert_eq!(
            memory_volume_options(4096),
            "size=4096,nr_inodes=64,mode=0755"
        );
    }
}
