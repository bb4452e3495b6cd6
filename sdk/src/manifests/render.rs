//! Rendering: a one-shot as a Job, a code host and a session as Pods, a
//! pool as agent-sandbox objects.

use std::collections::BTreeMap;

use k8s_openapi::api::batch::v1::{Job, JobSpec};
use k8s_openapi::api::core::v1::{
    ConfigMapVolumeSource, Container, EnvVar, EnvVarSource, PersistentVolumeClaimVolumeSource, Pod,
    PodSpec, PodTemplateSpec, ResourceRequirements, SecretKeySelector, SecretVolumeSource, Volume,
    VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::objects::{self, PodMetadata, PodTemplate, TemplateNetworkPolicy, TemplateRef};
use super::pod::{self, dns_name, mount, volume_name};
use super::{KubeOptions, Manifests, Object, AGENT_SANDBOX_API};
use crate::engine::{labels, ContainerSpec};
use crate::error::Result;
use crate::settings::{Secret, SecretMount, SECRETS_DIR};

const INPUTS: &str = "/var/inputs";
const OUTPUTS: &str = "/var/outputs";
/// Where dockhand's programs are mounted (the Docker backend uploads them there).
const PROGRAMS_DIR: &str = "/var/inputs/.dockhand";

/// A label value: at most 63 of `[A-Za-z0-9._-]`, alphanumeric at both ends.
fn label_value(raw: &str) -> String {
    let mut v: String = raw
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "._-".contains(c) {
                c
            } else {
                '-'
            }
        })
        .collect();
    v.truncate(63);
    v.trim_matches(|c: char| !c.is_ascii_alphanumeric())
        .to_string()
}

struct Naming {
    name: String,
    labels: BTreeMap<String, String>,
    namespace: String,
}

impl Naming {
    fn new(kind: &str, what: &str, spec: &ContainerSpec, opts: &KubeOptions) -> Naming {
        let name = opts
            .name
            .as_deref()
            .map(dns_name)
            .unwrap_or_else(|| dns_name(&format!("dockhand-{kind}-{what}")));
        let mut labels = BTreeMap::from([
            (labels::MANAGED.to_string(), "true".to_string()),
            (labels::KIND.to_string(), kind.to_string()),
            ("dev.dockhand.object".to_string(), label_value(&name)),
            (
                labels::VERSION.to_string(),
                env!("CARGO_PKG_VERSION").to_string(),
            ),
        ]);
        for (k, v) in &spec.extra_labels {
            labels.insert(k.clone(), label_value(v));
        }
        if let Some(owner) = &opts.owner {
            labels.insert("dev.dockhand.owner".into(), label_value(owner));
        }
        Naming {
            name,
            labels,
            namespace: opts.namespace.clone(),
        }
    }

    fn meta(&self, suffix: &str) -> ObjectMeta {
        ObjectMeta {
            name: Some(if suffix.is_empty() {
                self.name.clone()
            } else {
                dns_name(&format!("{}-{suffix}", self.name))
            }),
            namespace: Some(self.namespace.clone()),
            labels: Some(self.labels.clone()),
            ..Default::default()
        }
    }

    /// Selects this object's pods (for its NetworkPolicy).
    fn selector(&self) -> BTreeMap<String, String> {
        BTreeMap::from([("dev.dockhand.object".to_string(), label_value(&self.name))])
    }

    fn finish(self, mut objects: Vec<Object>, egress: bool) -> Manifests {
        objects.push(Object::NetworkPolicy(objects::network_policy(
            self.meta("deny"),
            self.selector(),
            egress,
        )));
        Manifests {
            objects,
            name: self.name,
            labels: self.labels,
            egress,
        }
    }
}

/// Secrets as references into `opts.secrets_object`: env vars for
/// env-mounted ones, a read-only Secret volume at `/run/secrets` for files.
fn secret_refs(
    secrets: &[Secret],
    opts: &KubeOptions,
    container: &mut Container,
    volumes: &mut Vec<Volume>,
) {
    let env = container.env.get_or_insert_with(Vec::new);
    let mut files = Vec::new();
    for s in secrets {
        match s.mount() {
            SecretMount::Env => env.push(EnvVar {
                name: s.name().to_string(),
                value_from: Some(EnvVarSource {
                    secret_key_ref: Some(SecretKeySelector {
                        name: opts.secrets_object.clone(),
                        key: s.name().to_string(),
                        optional: Some(false),
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            SecretMount::File => files.push(s.name().to_string()),
        }
    }
    if files.is_empty() {
        return;
    }
    volumes.push(Volume {
        name: volume_name(SECRETS_DIR),
        secret: Some(SecretVolumeSource {
            secret_name: Some(opts.secrets_object.clone()),
            items: Some(
                files
                    .iter()
                    .map(|f| k8s_openapi::api::core::v1::KeyToPath {
                        key: f.clone(),
                        path: f.clone(),
                        mode: Some(0o440),
                        ..Default::default()
                    })
                    .collect(),
            ),
            default_mode: Some(0o440),
            optional: Some(false),
            ..Default::default()
        }),
        ..Default::default()
    });
    container
        .volume_mounts
        .get_or_insert_with(Vec::new)
        .push(mount(SECRETS_DIR, true));
}

/// A small helper container sharing the main one's hardening.
fn helper(
    name: &str,
    command: &[&str],
    mounts: Vec<VolumeMount>,
    spec: &ContainerSpec,
    opts: &KubeOptions,
) -> Result<Container> {
    let limits = BTreeMap::from([
        ("cpu".to_string(), Quantity("100m".into())),
        ("memory".to_string(), Quantity("64Mi".into())),
    ]);
    Ok(Container {
        name: name.into(),
        image: Some(opts.image.clone()),
        image_pull_policy: Some("IfNotPresent".into()),
        command: Some(command.iter().map(|s| s.to_string()).collect()),
        security_context: Some(pod::security_context(spec)?),
        resources: Some(ResourceRequirements {
            requests: Some(limits.clone()),
            limits: Some(limits),
            ..Default::default()
        }),
        volume_mounts: Some(mounts),
        stdin: Some(true),
        stdin_once: Some(true),
        ..Default::default()
    })
}

/// A one-shot's pod as its sandbox describes it: what the capability knows
/// (its container, secrets, limits), in terms this module renders.
pub(crate) struct OneShotShape<'a> {
    /// The sandbox's name.
    pub name: &'a str,
    /// Its container, with the command the pod runs.
    pub spec: ContainerSpec,
    /// Its secrets (as references into `KubeOptions::secrets_object`).
    pub secrets: &'a [Secret],
    /// The run's timeout.
    pub timeout: Option<std::time::Duration>,
    /// Whether it may reach anything (an allow-list).
    pub egress: bool,
}

/// A one-shot run as a Job.
///
/// The pod has three containers: `inputs` (an init container that extracts
/// the inputs archive the backend streams to its stdin into `/var/inputs`),
/// `program` (the sandbox's own command, `/var/inputs` read-only), and
/// `outputs` (which, once the backend has seen `program` end, streams
/// `/var/outputs` as a tar on its stdout). How `program` ended is read from
/// the pod's status, which the kubelet writes, not the code.
pub(crate) fn one_shot_job(shape: OneShotShape<'_>, opts: &KubeOptions) -> Result<Manifests> {
    let timeout = shape.timeout;
    let (naming, pod, egress) = one_shot_parts(shape, 1, opts)?;
    let job = Job {
        metadata: naming.meta(""),
        spec: Some(JobSpec {
            // Retries are new Jobs, each attempt in a fresh pod, as on Docker.
            backoff_limit: Some(0),
            active_deadline_seconds: timeout.map(|t| t.as_secs().max(1) as i64),
            ttl_seconds_after_finished: Some(600),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(naming.labels.clone()),
                    ..Default::default()
                }),
                spec: Some(pod),
            },
            ..Default::default()
        }),
        ..Default::default()
    };
    Ok(naming.finish(vec![Object::Job(job)], egress))
}

/// One attempt of a one-shot run as a bare Pod (what the backend creates:
/// it watches and attaches to the pod itself, so a Job's controller would
/// only add a hop), with `command` already bound to the inputs, plus its
/// NetworkPolicy. The pod's deadline is the run's timeout, so a pod whose
/// owner died still ends.
pub(crate) fn one_shot_pod(
    shape: OneShotShape<'_>,
    attempt: u32,
    opts: &KubeOptions,
) -> Result<Manifests> {
    let timeout = shape.timeout;
    let (naming, mut spec, egress) = one_shot_parts(shape, attempt, opts)?;
    // Counted from the pod's start: its getting ready comes first.
    spec.active_deadline_seconds = Some(
        timeout
            .map_or(24 * 3600, |t| t.as_secs().max(1) as i64 + 60)
            .saturating_add(opts.start_allowance),
    );
    let pod = Pod {
        metadata: naming.meta(""),
        spec: Some(spec),
        ..Default::default()
    };
    Ok(naming.finish(vec![Object::Pod(pod)], egress))
}

/// What a pool's pod runs once its inputs are in: the attempt number the
/// inputs container wrote, then the command the inputs brought (the
/// handover script a warm Docker container runs too).
const WARM_PROGRAM: &str = "read -r DOCKHAND_ATTEMPT < /var/inputs/.dockhand/attempt; \
    export DOCKHAND_ATTEMPT; . /var/inputs/.dockhand/cmd.sh";

/// What a pool's pod's `inputs` container runs: the attempt number on the
/// first line (the shell's `read` takes one byte at a time from a pipe, so
/// the archive after it stays whole), then the inputs archive.
const WARM_INPUTS: &str = "IFS= read -r attempt && mkdir -p /var/inputs/.dockhand && \
    printf '%s\\n' \"$attempt\" > /var/inputs/.dockhand/attempt && exec tar -x -f - -C /var/inputs";

/// A pool's one-shot pod, made before its job is known: it waits in its
/// `inputs` container until a run sends the attempt number and the inputs
/// archive, whose handover script says what to run. No secrets: sandboxes
/// with secrets are not pooled. Its deadline is a day past the run's
/// timeout, as the pod may wait in the pool first.
pub(crate) fn warm_one_shot_pod(
    mut shape: OneShotShape<'_>,
    opts: &KubeOptions,
) -> Result<Manifests> {
    shape.spec.cmd = ["/bin/sh", "-c", WARM_PROGRAM].map(String::from).to_vec();
    let timeout = shape.timeout;
    let (naming, mut spec, egress) = one_shot_parts(shape, 0, opts)?;
    for program in &mut spec.containers {
        if let Some(env) = &mut program.env {
            env.retain(|e| e.name != "DOCKHAND_ATTEMPT");
        }
    }
    for inputs in spec.init_containers.iter_mut().flatten() {
        inputs.command = Some(["sh", "-c", WARM_INPUTS].map(String::from).to_vec());
    }
    spec.active_deadline_seconds =
        Some(24 * 3600 + timeout.map_or(0, |t| t.as_secs().max(1) as i64 + 60));
    let pod = Pod {
        metadata: naming.meta(""),
        spec: Some(spec),
        ..Default::default()
    };
    Ok(naming.finish(vec![Object::Pod(pod)], egress))
}

/// The pod of a one-shot: `inputs` (init), `program`, `outputs`.
fn one_shot_parts(
    shape: OneShotShape<'_>,
    attempt: u32,
    opts: &KubeOptions,
) -> Result<(Naming, PodSpec, bool)> {
    let spec = shape.spec;
    let naming = Naming::new("sandbox", shape.name, &spec, opts);

    let (mut volumes, mounts) = pod::scratch(&spec, opts);
    let mut program = pod::container("program", &spec, mounts, opts)?;
    program.env.get_or_insert_with(Vec::new).push(EnvVar {
        name: "DOCKHAND_ATTEMPT".into(),
        value: Some(attempt.to_string()),
        ..Default::default()
    });
    // The code reads its inputs, never writes them.
    for m in program.volume_mounts.iter_mut().flatten() {
        if m.mount_path == INPUTS {
            m.read_only = Some(true);
        }
    }
    secret_refs(shape.secrets, opts, &mut program, &mut volumes);
    let inputs = helper(
        "inputs",
        &["tar", "-x", "-f", "-", "-C", INPUTS],
        vec![mount(INPUTS, false)],
        &spec,
        opts,
    )?;
    let outputs = helper(
        "outputs",
        &[
            "sh",
            "-c",
            // Each line but `go` is answered `ready <line>`: an attach wires
            // stdin before stdout (containerd), so what the container prints
            // at once can miss the stream; the backend pings until an
            // answer arrives, then says `go`. The tar has the same layout
            // as Docker's archive of /var/outputs: one `outputs/` top.
            "while read -r line; do if [ \"$line\" = go ]; then exec tar -c -f - -C /var outputs; fi; echo \"ready $line\"; done",
        ],
        vec![mount(OUTPUTS, true)],
        &spec,
        opts,
    )?;
    let pod = pod::pod_spec(&spec, vec![program, outputs], vec![inputs], volumes, opts);
    Ok((naming, pod, shape.egress))
}

/// A Pod with `main` as its one container (after the `init` containers),
/// plus the ConfigMap of dockhand's programs mounted where Docker would have
/// uploaded them.
fn long_lived(
    naming: Naming,
    spec: &ContainerSpec,
    (mut main, init): (Container, Vec<Container>),
    mut volumes: Vec<Volume>,
    programs: &[(&str, &str)],
    egress: bool,
    opts: &KubeOptions,
) -> Manifests {
    let mut objects = Vec::new();
    if !programs.is_empty() {
        let config_map = naming.meta("programs");
        volumes.push(Volume {
            name: "dockhand-programs".into(),
            config_map: Some(ConfigMapVolumeSource {
                name: config_map.name.clone().unwrap_or_default(),
                default_mode: Some(0o444),
                ..Default::default()
            }),
            ..Default::default()
        });
        main.volume_mounts
            .get_or_insert_with(Vec::new)
            .push(VolumeMount {
                name: "dockhand-programs".into(),
                mount_path: PROGRAMS_DIR.into(),
                read_only: Some(true),
                ..Default::default()
            });
        objects.push(Object::ConfigMap(objects::programs(config_map, programs)));
    }
    let pod = Pod {
        metadata: naming.meta(""),
        spec: Some(pod::pod_spec(spec, vec![main], init, volumes, opts)),
        ..Default::default()
    };
    objects.push(Object::Pod(pod));
    naming.finish(objects, egress)
}

/// A code host as a Pod from its container (`spec`, the bridge under
/// Monty), spoken to over its attach stream as on Docker; always offline.
/// The image carries the compiled bridge: a code host image dockhand made,
/// pushed where the cluster pulls from.
pub(crate) fn code_host_pod(spec: ContainerSpec, opts: &KubeOptions) -> Result<Manifests> {
    let naming = Naming::new("code-host", "monty", &spec, opts);
    let (volumes, mounts) = pod::scratch(&spec, opts);
    let main = pod::container("bridge", &spec, mounts, opts)?;
    Ok(long_lived(
        naming,
        &spec,
        (main, Vec::new()),
        volumes,
        &[],
        false,
        opts,
    ))
}

/// A session's pod as its config describes it.
pub(crate) struct SessionShape<'a> {
    /// The session's name.
    pub name: &'a str,
    /// Its container (the command is the agent's).
    pub spec: ContainerSpec,
    /// Where the agent is run from, inside [`SessionShape::agent_dir`].
    pub agent_path: String,
    /// The directory the agent is installed in.
    pub agent_dir: &'a str,
    /// What the agent's image is run with to copy the agent there.
    pub install_args: Vec<String>,
    /// The workspace directory.
    pub workspace: &'a str,
    /// Its secrets (as references into `KubeOptions::secrets_object`).
    pub secrets: &'a [Secret],
    /// Its helper programs, by name.
    pub helpers: &'a [(&'static str, &'static str)],
    /// Whether it may reach anything (an allow-list).
    pub egress: bool,
    /// The claim its workspace is kept on (a pausable or kept session on
    /// a cluster); `None`: a volume of the pod's own, gone with it.
    pub files_claim: Option<&'a str>,
}

/// A session as a Pod: dockhand's static session agent, which an init
/// container copies from the agent's image into a volume of the pod, run in
/// the workspace and spoken to over its attach stream as on Docker; the
/// session's helpers (if any) in a ConfigMap.
pub(crate) fn session_pod(shape: SessionShape<'_>, opts: &KubeOptions) -> Result<Manifests> {
    let mut spec = shape.spec;
    spec.cmd = vec![shape.agent_path.clone()];
    let naming = Naming::new("session", shape.name, &spec, opts);
    let (mut volumes, mounts) = pod::scratch(&spec, opts);
    let mut main = pod::container("agent", &spec, mounts, opts)?;
    {
        // Docker writes the workspace into the container (owned by the
        // session's user); here it is a volume, writable whatever the image
        // has: the pod's own, or the claim a pausable session keeps it on.
        volumes.push(Volume {
            name: "workspace".into(),
            empty_dir: shape.files_claim.is_none().then(Default::default),
            persistent_volume_claim: shape.files_claim.map(|claim| {
                PersistentVolumeClaimVolumeSource {
                    claim_name: claim.to_string(),
                    read_only: Some(false),
                }
            }),
            ..Default::default()
        });
        main.volume_mounts
            .get_or_insert_with(Vec::new)
            .push(VolumeMount {
                name: "workspace".into(),
                mount_path: shape.workspace.to_string(),
                ..Default::default()
            });
    }
    // Named volumes: each its claim (the same name as Docker's volume).
    for (i, (claim, path, read_only)) in spec.volumes.iter().enumerate() {
        let name = format!("volume-{i}");
        volumes.push(Volume {
            name: name.clone(),
            persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                claim_name: claim.clone(),
                read_only: Some(*read_only),
            }),
            ..Default::default()
        });
        main.volume_mounts
            .get_or_insert_with(Vec::new)
            .push(VolumeMount {
                name,
                mount_path: path.clone(),
                read_only: Some(*read_only),
                ..Default::default()
            });
    }
    secret_refs(shape.secrets, opts, &mut main, &mut volumes);
    volumes.push(Volume {
        name: AGENT_VOLUME.into(),
        empty_dir: Some(Default::default()),
        ..Default::default()
    });
    main.volume_mounts
        .get_or_insert_with(Vec::new)
        .push(agent_mount(shape.agent_dir, true));
    let install = agent_installer(&spec, &shape.install_args, shape.agent_dir, opts)?;
    Ok(long_lived(
        naming,
        &spec,
        (main, vec![install]),
        volumes,
        shape.helpers,
        shape.egress,
        opts,
    ))
}

/// The volume a session's pod keeps the agent in.
const AGENT_VOLUME: &str = "dockhand-agent";

fn agent_mount(dir: &str, read_only: bool) -> VolumeMount {
    VolumeMount {
        name: AGENT_VOLUME.into(),
        mount_path: dir.into(),
        read_only: Some(read_only),
        ..Default::default()
    }
}

/// The init container that copies the agent (its image's entrypoint) to
/// its path, as the session's user, under the session's hardening.
fn agent_installer(
    spec: &ContainerSpec,
    install_args: &[String],
    agent_dir: &str,
    opts: &KubeOptions,
) -> Result<Container> {
    let limits = BTreeMap::from([
        ("cpu".to_string(), Quantity("100m".into())),
        ("memory".to_string(), Quantity("32Mi".into())),
    ]);
    Ok(Container {
        name: "install-agent".into(),
        image: Some(opts.agent_image.clone()),
        image_pull_policy: Some("IfNotPresent".into()),
        args: Some(install_args.to_vec()),
        security_context: Some(pod::security_context(spec)?),
        resources: Some(ResourceRequirements {
            requests: Some(limits.clone()),
            limits: Some(limits),
            ..Default::default()
        }),
        volume_mounts: Some(vec![agent_mount(agent_dir, false)]),
        ..Default::default()
    })
}

/// agent-sandbox objects keeping `pod` warm (see [`Manifests::warm_pool`]).
pub(super) fn warm_pool(of: &Manifests, pod: PodSpec, size: i32) -> Result<Manifests> {
    let mut labels = of.labels.clone();
    labels.insert(labels::KIND.into(), "pool".into());
    let namespace = of.objects.iter().find_map(|o| match o {
        Object::Pod(p) => p.metadata.namespace.clone(),
        Object::Job(j) => j.metadata.namespace.clone(),
        _ => None,
    });
    let meta = |name: String| ObjectMeta {
        name: Some(name),
        namespace: namespace.clone(),
        labels: Some(labels.clone()),
        ..Default::default()
    };
    let template_name = dns_name(&format!("{}-template", of.name));
    let pool_name = dns_name(&format!("{}-pool", of.name));
    let mut objects: Vec<Object> = of
        .objects
        .iter()
        .filter(|o| matches!(o, Object::ConfigMap(_)))
        .cloned()
        .collect();
    let (template, pool) = agent_pool(
        meta(template_name),
        meta(pool_name.clone()),
        labels.clone(),
        pod,
        of.egress,
        size,
    );
    objects.push(Object::SandboxTemplate(template));
    objects.push(Object::SandboxWarmPool(pool));
    Ok(Manifests {
        objects,
        name: pool_name,
        labels,
        egress: of.egress,
    })
}

/// A `SandboxTemplate` (`template`) of a pod labelled `pod_labels` running
/// `pod`, with its network rules, and a `SandboxWarmPool` (`pool`) keeping
/// `size` of them started.
pub(crate) fn agent_pool(
    template: ObjectMeta,
    pool: ObjectMeta,
    pod_labels: BTreeMap<String, String>,
    pod: PodSpec,
    egress: bool,
    size: i32,
) -> (objects::SandboxTemplate, objects::SandboxWarmPool) {
    let template_name = template.name.clone().unwrap_or_default();
    let template = objects::SandboxTemplate {
        api_version: AGENT_SANDBOX_API.into(),
        kind: "SandboxTemplate".into(),
        metadata: template,
        spec: objects::SandboxTemplateSpec {
            pod_template: PodTemplate {
                metadata: PodMetadata { labels: pod_labels },
                spec: pod,
            },
            network_policy: TemplateNetworkPolicy::new(egress),
        },
    };
    let pool = objects::SandboxWarmPool {
        api_version: AGENT_SANDBOX_API.into(),
        kind: "SandboxWarmPool".into(),
        metadata: pool,
        spec: objects::SandboxWarmPoolSpec {
            replicas: size,
            sandbox_template_ref: TemplateRef {
                name: template_name,
            },
        },
    };
    (template, pool)
}
