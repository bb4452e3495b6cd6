//! A Docker [`ContainerSpec`] as a Kubernetes container and pod: the same
//! command, user, capabilities, read-only root, limits and scratch space,
//! so both backends harden alike by construction.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Capabilities, Container, EmptyDirVolumeSource, EnvVar, PodSecurityContext, PodSpec,
    ResourceRequirements, SeccompProfile, SecurityContext, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::KubeOptions;
use crate::engine::ContainerSpec;
use crate::error::{Error, Result};

/// A Kubernetes name (DNS label): lower-case alphanumerics and `-`, at most
/// 63 characters, alphanumeric at both ends.
pub(crate) fn dns_name(raw: &str) -> String {
    let mut name: String = raw
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect();
    name.truncate(63);
    let name = name.trim_matches('-').to_string();
    if name.is_empty() {
        "dockhand".into()
    } else {
        name
    }
}

/// A volume name for a path: `/var/inputs` → `var-inputs`.
pub(super) fn volume_name(path: &str) -> String {
    dns_name(path)
}

/// `uid[:gid]` as numbers; names cannot be checked by the kubelet, so they are refused.
fn user_ids(user: &str) -> Result<(i64, Option<i64>)> {
    let mut parts = user.splitn(2, ':');
    let parse = |s: &str| {
        s.parse::<i64>().map_err(|_| {
            Error::spec(
                "kubernetes",
                format!("user `{user}`: Kubernetes needs numeric ids (runAsUser), not names"),
            )
        })
    };
    let uid = parse(parts.next().unwrap_or(""))?;
    let gid = parts.next().map(parse).transpose()?;
    Ok((uid, gid))
}

/// The security context every container of a pod gets from `spec`.
pub(super) fn security_context(spec: &ContainerSpec) -> Result<SecurityContext> {
    let (uid, gid) = match &spec.user {
        Some(user) => {
            let (uid, gid) = user_ids(user)?;
            (Some(uid), gid)
        }
        None => (None, None),
    };
    Ok(SecurityContext {
        run_as_user: uid,
        run_as_group: gid,
        // Root inside would be refused by the kubelet rather than run.
        run_as_non_root: Some(uid.is_some_and(|u| u != 0)),
        read_only_root_filesystem: Some(spec.read_only_rootfs),
        allow_privilege_escalation: Some(!spec.no_new_privileges),
        privileged: Some(false),
        capabilities: Some(Capabilities {
            drop: spec.cap_drop_all.then(|| vec!["ALL".to_string()]),
            add: (!spec.cap_add.is_empty()).then(|| spec.cap_add.clone()),
        }),
        seccomp_profile: Some(SeccompProfile {
            type_: "RuntimeDefault".into(),
            ..Default::default()
        }),
        ..Default::default()
    })
}

/// Limits equal to requests: the pod is `Guaranteed`, as a Docker limit is a hard cap.
pub(super) fn resources(spec: &ContainerSpec) -> ResourceRequirements {
    let mut limits = BTreeMap::new();
    if let Some(nano) = spec.nano_cpus {
        limits.insert(
            "cpu".to_string(),
            Quantity(format!("{}m", (nano / 1_000_000).max(1))),
        );
    }
    if let Some(bytes) = spec.memory_bytes {
        limits.insert("memory".to_string(), Quantity(bytes.to_string()));
    }
    ResourceRequirements {
        requests: Some(limits.clone()),
        limits: Some(limits),
        ..Default::default()
    }
}

/// `K=V` pairs as env vars.
fn env(spec: &ContainerSpec) -> Vec<EnvVar> {
    spec.env
        .iter()
        .map(|pair| {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            EnvVar {
                name: name.to_string(),
                value: Some(value.to_string()),
                ..Default::default()
            }
        })
        .collect()
}

/// The tmpfs and scratch paths of `spec`, as memory-backed (tmpfs) and
/// disk-backed emptyDir volumes, with their mounts.
pub(super) fn scratch(spec: &ContainerSpec, opts: &KubeOptions) -> (Vec<Volume>, Vec<VolumeMount>) {
    let mut volumes = Vec::new();
    let mut mounts = Vec::new();
    let mut tmpfs: Vec<_> = spec.tmpfs.iter().collect();
    tmpfs.sort();
    for (path, options) in tmpfs {
        let size = options
            .split(',')
            .find_map(|o| o.strip_prefix("size="))
            .map(|s| Quantity(s.to_string()));
        volumes.push(Volume {
            name: volume_name(path),
            empty_dir: Some(EmptyDirVolumeSource {
                medium: Some("Memory".into()),
                size_limit: size,
                ..Default::default()
            }),
            ..Default::default()
        });
        mounts.push(mount(path, false));
    }
    for (path, size) in &spec.memory_volumes {
        volumes.push(Volume {
            name: volume_name(path),
            empty_dir: Some(EmptyDirVolumeSource {
                medium: Some("Memory".into()),
                size_limit: Some(Quantity(size.to_string())),
                ..Default::default()
            }),
            ..Default::default()
        });
        mounts.push(mount(path, false));
    }
    for path in &spec.scratch_volumes {
        volumes.push(Volume {
            name: volume_name(path),
            empty_dir: Some(EmptyDirVolumeSource {
                size_limit: Some(Quantity(opts.scratch_limit.clone())),
                ..Default::default()
            }),
            ..Default::default()
        });
        mounts.push(mount(path, false));
    }
    (volumes, mounts)
}

pub(super) fn mount(path: &str, read_only: bool) -> VolumeMount {
    VolumeMount {
        name: volume_name(path),
        mount_path: path.to_string(),
        read_only: Some(read_only),
        ..Default::default()
    }
}

/// The container for `spec`, named `name`, running `opts.image`, with the
/// `mounts` of its [`scratch`] volumes.
pub(super) fn container(
    name: &str,
    spec: &ContainerSpec,
    mounts: Vec<VolumeMount>,
    opts: &KubeOptions,
) -> Result<Container> {
    if let Some(m) = spec.mounts.first() {
        return Err(Error::spec(
            "kubernetes",
            format!(
                "mount {} -> {}: a host path has no meaning on a cluster node; put the files \
                 in the image or write them into the pod",
                m.host_path, m.container_path
            ),
        ));
    }
    // Docker's empty entrypoint plus a command is Kubernetes' `command`;
    // a command after the image's own entrypoint is `args`.
    let (command, args) = match &spec.entrypoint {
        Some(entry) if entry.is_empty() => (Some(spec.cmd.clone()), None),
        Some(entry) => (Some(entry.clone()), Some(spec.cmd.clone())),
        None => (None, Some(spec.cmd.clone())),
    };
    Ok(Container {
        name: name.to_string(),
        image: Some(opts.image.clone()),
        image_pull_policy: Some("IfNotPresent".into()),
        command,
        args: args.filter(|a| !a.is_empty()),
        env: Some(env(spec)),
        working_dir: spec.working_dir.clone(),
        security_context: Some(security_context(spec)?),
        resources: Some(resources(spec)),
        volume_mounts: Some(mounts),
        stdin: spec.open_stdin.then_some(true),
        stdin_once: spec.open_stdin.then_some(true),
        ..Default::default()
    })
}

/// A pod around `containers`: no service account token, no service links,
/// never restarted, the runtime class for gVisor or another named runtime.
pub(super) fn pod_spec(
    spec: &ContainerSpec,
    containers: Vec<Container>,
    init: Vec<Container>,
    volumes: Vec<Volume>,
    opts: &KubeOptions,
) -> PodSpec {
    let runtime_class = spec.runtime.as_deref().map(|r| match r {
        "runsc" => opts.gvisor_runtime_class.clone(),
        other => other.to_string(),
    });
    let mut pod = PodSpec {
        containers,
        init_containers: (!init.is_empty()).then_some(init),
        volumes: Some(volumes),
        restart_policy: Some("Never".into()),
        automount_service_account_token: Some(false),
        enable_service_links: Some(false),
        host_network: Some(false),
        host_pid: Some(false),
        host_ipc: Some(false),
        share_process_namespace: Some(false),
        runtime_class_name: runtime_class,
        security_context: Some(PodSecurityContext {
            // Secret files are root:fsGroup; the program reads them through its group.
            fs_group: spec
                .user
                .as_deref()
                .and_then(|u| user_ids(u).ok())
                .and_then(|(_, gid)| gid),
            seccomp_profile: Some(SeccompProfile {
                type_: "RuntimeDefault".into(),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    };
    opts.placement.apply(&mut pod);
    pod
}
