//! The Kubernetes manifests of real one-shots, sessions and code hosts, as
//! [`crate::k8s`] renders them.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, PodSpec};

use crate::codemode::CodeHostConfig;
use crate::k8s::*;
use crate::sandbox::{Isolation, Network, Sandbox, Secret, Type};
use crate::session::SessionConfig;

fn opts() -> KubeOptions {
    KubeOptions::new("registry.example/dh/job:1").namespace("sandboxes")
}

fn job(network: Network, isolation: Isolation) -> Sandbox {
    Sandbox::command("count", "wc")
        .args(["-c", "{{path}}", "{{label}}"])
        .input("path", Type::Str)
        .input("label", Type::Str)
        .output("n", Type::Int)
        .network(network)
        .isolation(isolation)
        .cpus(0.5)
        .memory("256Mi")
        .timeout(Duration::from_secs(30))
        .env("MODE", "fast")
        .secret(Secret::value("API_KEY", "s3cret-value"))
        .secret(Secret::value("CERT", "cert-value").as_file())
        .build()
        .unwrap()
}

fn all_containers(pod: &PodSpec) -> Vec<&Container> {
    pod.containers
        .iter()
        .chain(pod.init_containers.iter().flatten())
        .collect()
}

/// Every container carries the same hardening as the Docker backend's.
fn assert_hardened(pod: &PodSpec) {
    assert_hardened_with(pod, true)
}

fn assert_hardened_with(pod: &PodSpec, read_only_root: bool) {
    assert_eq!(pod.automount_service_account_token, Some(false));
    assert_eq!(pod.restart_policy.as_deref(), Some("Never"));
    assert_eq!(pod.host_network, Some(false));
    for c in all_containers(pod) {
        let sc = c.security_context.as_ref().expect("security context");
        assert_eq!(sc.run_as_non_root, Some(true), "{}", c.name);
        assert_eq!(sc.run_as_user, Some(65534), "{}", c.name);
        assert_eq!(
            sc.read_only_root_filesystem,
            Some(read_only_root),
            "{}",
            c.name
        );
        assert_eq!(sc.allow_privilege_escalation, Some(false), "{}", c.name);
        assert_eq!(sc.privileged, Some(false), "{}", c.name);
        let caps = sc.capabilities.as_ref().unwrap();
        assert_eq!(
            caps.drop.as_deref(),
            Some(&["ALL".to_string()][..]),
            "{}",
            c.name
        );
        assert_eq!(caps.add, None, "{}", c.name);
        assert_eq!(sc.seccomp_profile.as_ref().unwrap().type_, "RuntimeDefault");
        let limits = c.resources.as_ref().unwrap().limits.as_ref().unwrap();
        assert!(
            limits.contains_key("memory") && limits.contains_key("cpu"),
            "{}",
            c.name
        );
    }
}

fn mount_of<'a>(
    c: &'a Container,
    path: &str,
) -> Option<&'a k8s_openapi::api::core::v1::VolumeMount> {
    c.volume_mounts
        .iter()
        .flatten()
        .find(|m| m.mount_path == path)
}

#[test]
fn a_one_shot_is_a_hardened_job_wired_through_inputs_and_outputs() {
    let m = one_shot(
        &job(Network::None, Isolation::Default),
        [("path", "/var/inputs/data"), ("label", "x y")],
        &opts(),
    )
    .unwrap();
    let Object::Job(job) = &m.objects()[0] else {
        panic!("{:?}", m.objects())
    };
    assert_eq!(job.metadata.namespace.as_deref(), Some("sandboxes"));
    assert_eq!(job.metadata.name.as_deref(), Some("dockhand-sandbox-count"));
    let spec = job.spec.as_ref().unwrap();
    assert_eq!(spec.backoff_limit, Some(0));
    assert_eq!(spec.active_deadline_seconds, Some(30));
    let pod = m.pod_spec().unwrap();
    assert_hardened(pod);
    assert_eq!(pod.runtime_class_name, None);

    let program = &pod.containers[0];
    assert_eq!(program.name, "program");
    assert_eq!(program.image.as_deref(), Some("registry.example/dh/job:1"));
    // The command line as on Docker, inputs substituted.
    assert_eq!(
        program.command.as_deref().unwrap(),
        ["wc", "-c", "/var/inputs/data", "x y"]
    );
    let limits = program.resources.as_ref().unwrap().limits.as_ref().unwrap();
    assert_eq!(limits["cpu"].0, "500m");
    assert_eq!(limits["memory"].0, (256u64 << 20).to_string());
    assert_eq!(
        mount_of(program, "/var/inputs").unwrap().read_only,
        Some(true)
    );
    assert_eq!(
        mount_of(program, "/var/outputs").unwrap().read_only,
        Some(false)
    );
    assert!(mount_of(program, "/tmp").is_some());
    let inputs = &pod.init_containers.as_ref().unwrap()[0];
    assert_eq!(inputs.name, "inputs");
    assert_eq!(inputs.stdin, Some(true));
    assert_eq!(
        mount_of(inputs, "/var/inputs").unwrap().read_only,
        Some(false)
    );
    let outputs = &pod.containers[1];
    assert_eq!(outputs.name, "outputs");
    assert_eq!(
        mount_of(outputs, "/var/outputs").unwrap().read_only,
        Some(true)
    );
    let tmp = pod
        .volumes
        .iter()
        .flatten()
        .find(|v| v.name == "tmp")
        .unwrap();
    assert_eq!(
        tmp.empty_dir.as_ref().unwrap().medium.as_deref(),
        Some("Memory")
    );

    // Secrets are references, never values.
    let env = program.env.as_ref().unwrap();
    let key = env.iter().find(|e| e.name == "API_KEY").unwrap();
    assert_eq!(key.value, None);
    let reference = key
        .value_from
        .as_ref()
        .unwrap()
        .secret_key_ref
        .as_ref()
        .unwrap();
    assert_eq!(
        (reference.name.as_str(), reference.key.as_str()),
        ("dockhand-secrets", "API_KEY")
    );
    assert_eq!(
        mount_of(program, "/run/secrets").unwrap().read_only,
        Some(true)
    );
    assert!(env
        .iter()
        .any(|e| e.name == "MODE" && e.value.as_deref() == Some("fast")));
    let yaml = m.to_yaml().unwrap();
    assert!(
        !yaml.contains("s3cret-value") && !yaml.contains("cert-value"),
        "{yaml}"
    );
}

#[test]
fn the_network_policy_denies_all_unless_the_network_was_asked_for() {
    let policy = |network| {
        let m = one_shot(
            &job(network, Isolation::Default),
            [("path", "p"), ("label", "l")],
            &opts(),
        )
        .unwrap();
        let Some(Object::NetworkPolicy(p)) = m.objects().last() else {
            panic!("no policy")
        };
        let spec = p.spec.clone().unwrap();
        let selected = spec.pod_selector.unwrap().match_labels.unwrap();
        let pod_labels = match &m.objects()[0] {
            Object::Job(j) => j
                .spec
                .clone()
                .unwrap()
                .template
                .metadata
                .unwrap()
                .labels
                .unwrap(),
            other => panic!("{other:?}"),
        };
        for (k, v) in &selected {
            assert_eq!(
                pod_labels.get(k),
                Some(v),
                "the policy selects the job's pods"
            );
        }
        assert_eq!(spec.ingress, None);
        assert_eq!(spec.egress, None);
        spec.policy_types.unwrap()
    };
    assert_eq!(policy(Network::None), ["Ingress", "Egress"]);
    assert_eq!(policy(Network::Bridge), ["Ingress"]);
}

#[test]
fn gvisor_becomes_a_runtime_class() {
    let sandbox = job(Network::None, Isolation::Gvisor);
    let inputs = [("path", "p"), ("label", "l")];
    let m = one_shot(&sandbox, inputs, &opts()).unwrap();
    assert_eq!(
        m.pod_spec().unwrap().runtime_class_name.as_deref(),
        Some("gvisor")
    );
    let m = one_shot(
        &sandbox,
        inputs,
        &opts().gvisor_runtime_class("gvisor-ptrace"),
    )
    .unwrap();
    assert_eq!(
        m.pod_spec().unwrap().runtime_class_name.as_deref(),
        Some("gvisor-ptrace")
    );
}

#[test]
fn placement_reaches_every_pod_and_gvisor_keeps_its_class() {
    use crate::k8s::{Placement, Toleration};
    let placement = Placement::new()
        .node_selector("pool", "sandboxes")
        .toleration("sandboxes", "NoSchedule")
        .toleration_of(Toleration {
            key: Some("spot".into()),
            operator: Some("Equal".into()),
            value: Some("yes".into()),
            effect: Some("NoExecute".into()),
            toleration_seconds: Some(30),
        })
        .priority_class("sandbox-low")
        .runtime_class("kata")
        .image_pull_secret("registry-credentials");
    let with = opts().placement(placement);
    let inputs = [("path", "p"), ("label", "l")];
    let plain = one_shot(&job(Network::None, Isolation::Default), inputs, &with).unwrap();
    let pod = plain.pod_spec().unwrap();
    assert_eq!(pod.node_selector.as_ref().unwrap()["pool"], "sandboxes");
    let tolerations = pod.tolerations.as_ref().unwrap();
    assert_eq!(tolerations.len(), 2);
    assert_eq!(tolerations[0].operator.as_deref(), Some("Exists"));
    assert_eq!(tolerations[1].toleration_seconds, Some(30));
    assert_eq!(pod.priority_class_name.as_deref(), Some("sandbox-low"));
    assert_eq!(pod.runtime_class_name.as_deref(), Some("kata"));
    assert_eq!(
        pod.image_pull_secrets.as_ref().unwrap()[0].name,
        "registry-credentials"
    );
    let yaml = plain.to_yaml().unwrap();
    assert!(yaml.contains("priorityClassName: sandbox-low"), "{yaml}");
    assert!(yaml.contains("imagePullSecrets:"), "{yaml}");
    // Under gVisor the pod keeps gVisor's class; the rest still applies.
    let gvisor = one_shot(&job(Network::None, Isolation::Gvisor), inputs, &with).unwrap();
    let pod = gvisor.pod_spec().unwrap();
    assert_eq!(pod.runtime_class_name.as_deref(), Some("gvisor"));
    assert_eq!(pod.priority_class_name.as_deref(), Some("sandbox-low"));
    // Without placement nothing is set.
    let bare = one_shot(&job(Network::None, Isolation::Default), inputs, &opts()).unwrap();
    let pod = bare.pod_spec().unwrap();
    assert!(pod.node_selector.is_none() && pod.tolerations.is_none());
    assert!(pod.priority_class_name.is_none() && pod.image_pull_secrets.is_none());
}

#[test]
fn bad_inputs_and_host_mounts_are_refused() {
    let sandbox = job(Network::None, Isolation::Default);
    assert!(matches!(
        one_shot(&sandbox, [("path", "p")], &opts()),
        Err(crate::Error::MissingInput { .. })
    ));
    let mounted = SessionConfig::new().mount("/etc", "/host-etc", true);
    match session(&mounted, &opts()) {
        Err(e @ crate::Error::InvalidSpec { .. }) => assert!(e.to_string().contains("/etc"), "{e}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_code_host_is_an_offline_hardened_pod_with_an_open_stdin() {
    let m = code_host(&CodeHostConfig::new(), &opts()).unwrap();
    let Object::Pod(pod) = &m.objects()[0] else {
        panic!("{:?}", m.objects())
    };
    let spec = pod.spec.as_ref().unwrap();
    assert_hardened(spec);
    let bridge = &spec.containers[0];
    assert_eq!(bridge.stdin, Some(true));
    // dockhand's own image has the compiled bridge built in.
    assert_eq!(
        bridge.command.as_ref().unwrap()[0],
        "/opt/dockhand/codehost/dockhand-codehost"
    );
    let Some(Object::NetworkPolicy(p)) = m.objects().last() else {
        panic!()
    };
    assert_eq!(
        p.spec.clone().unwrap().policy_types.unwrap(),
        ["Ingress", "Egress"]
    );
}

#[test]
fn a_session_installs_its_agent_from_the_agent_image_and_gets_a_workspace() {
    let config = SessionConfig::new().name("analysis").network(true);
    let m = session(&config, &opts().agent_image("registry.example/dh/agent:7")).unwrap();
    assert!(
        !m.objects()
            .iter()
            .any(|o| matches!(o, Object::ConfigMap(_))),
        "no helpers, no ConfigMap"
    );
    let Object::Pod(pod) = &m.objects()[0] else {
        panic!("{:?}", m.objects())
    };
    assert_eq!(
        pod.metadata.name.as_deref(),
        Some("dockhand-session-analysis")
    );
    let spec = pod.spec.as_ref().unwrap();
    // Sessions keep a writable root by default (as on Docker, for snapshots).
    assert_hardened_with(spec, config.hardening.read_only_root);
    let agent = &spec.containers[0];
    assert_eq!(
        agent.command.as_deref().unwrap(),
        ["/.dockhand-agent/session-agent"]
    );
    let agent_mount = mount_of(agent, "/.dockhand-agent").unwrap();
    assert_eq!(agent_mount.read_only, Some(true));
    assert!(mount_of(agent, config.workspace_dir()).is_some());
    // The init container: the agent's image, copying itself into the
    // volume, as hardened as the session (its user, no capabilities).
    let install = &spec.init_containers.as_ref().unwrap()[0];
    assert_eq!(
        install.image.as_deref(),
        Some("registry.example/dh/agent:7")
    );
    assert_eq!(
        install.args.as_deref().unwrap(),
        ["--install-to", "/.dockhand-agent/session-agent"]
    );
    assert_eq!(install.security_context, agent.security_context);
    assert_eq!(
        mount_of(install, "/.dockhand-agent").unwrap().read_only,
        Some(false)
    );
    let volume = spec
        .volumes
        .as_ref()
        .unwrap()
        .iter()
        .find(|v| v.name == agent_mount.name)
        .unwrap();
    assert!(volume.empty_dir.is_some());
    let Some(Object::NetworkPolicy(p)) = m.objects().last() else {
        panic!()
    };
    assert_eq!(p.spec.clone().unwrap().policy_types.unwrap(), ["Ingress"]);
    // Unless told another, the agent's image by the name this SDK makes.
    let default = session(&config, &opts()).unwrap();
    let Object::Pod(pod) = &default.objects()[0] else {
        panic!()
    };
    let image = pod.spec.as_ref().unwrap().init_containers.as_ref().unwrap()[0]
        .image
        .clone()
        .unwrap();
    assert!(image.starts_with("dockhand/agent:"), "{image}");
}

#[test]
fn pools_are_agent_sandbox_templates_and_warm_pools() {
    let m = session(&SessionConfig::new(), &opts()).unwrap();
    let pool = m.warm_pool(4).unwrap();
    let kinds: Vec<&str> = pool
        .objects()
        .iter()
        .map(|o| match o {
            Object::ConfigMap(_) => "ConfigMap",
            Object::SandboxTemplate(_) => "SandboxTemplate",
            Object::SandboxWarmPool(_) => "SandboxWarmPool",
            _ => "other",
        })
        .collect();
    // The agent comes from its image: a plain session has no ConfigMap.
    assert_eq!(kinds, ["SandboxTemplate", "SandboxWarmPool"]);
    let (Object::SandboxTemplate(t), Object::SandboxWarmPool(w)) =
        (&pool.objects()[0], &pool.objects()[1])
    else {
        panic!()
    };
    assert_eq!(w.spec.replicas, 4);
    assert_eq!(
        Some(&w.spec.sandbox_template_ref.name),
        t.metadata.name.as_ref()
    );
    assert_eq!(&t.spec.pod_template.spec, m.pod_spec().unwrap());
    assert!(t.spec.network_policy.ingress.is_empty() && t.spec.network_policy.egress.is_empty());
    assert!(matches!(
        m.warm_pool(0),
        Err(crate::Error::InvalidSpec { .. })
    ));

    // A one-shot pool keeps the Job's pod waiting in its `inputs` init container.
    let one = one_shot(
        &job(Network::None, Isolation::Default),
        [("path", "p"), ("label", "l")],
        &opts(),
    )
    .unwrap();
    let pool = one.warm_pool(2).unwrap();
    let Object::SandboxTemplate(t) = &pool.objects()[0] else {
        panic!()
    };
    assert_eq!(
        t.spec.pod_template.spec.init_containers.as_ref().unwrap()[0].name,
        "inputs"
    );
}

#[test]
fn yaml_holds_every_object_with_its_kind_and_api_version() {
    let m = session(&SessionConfig::new(), &opts())
        .unwrap()
        .warm_pool(2)
        .unwrap();
    let yaml = m.to_yaml().unwrap();
    let docs: Vec<serde_json::Value> = yaml
        .split("---\n")
        .filter(|d| !d.trim().is_empty())
        .map(|d| serde_norway::from_str(d).unwrap())
        .collect();
    let kinds: Vec<(&str, &str)> = docs
        .iter()
        .map(|d| {
            (
                d["apiVersion"].as_str().unwrap(),
                d["kind"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        kinds,
        [
            (AGENT_SANDBOX_API, "SandboxTemplate"),
            (AGENT_SANDBOX_API, "SandboxWarmPool")
        ]
    );
    assert_eq!(
        docs[1]["spec"]["sandboxTemplateRef"]["name"],
        docs[0]["metadata"]["name"]
    );
    assert_eq!(
        docs[0]["spec"]["podTemplate"]["spec"]["containers"][0]["securityContext"]["capabilities"]
            ["drop"][0],
        "ALL"
    );
}
