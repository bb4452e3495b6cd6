//! Every Kubernetes object dockhand renders or sends, validated against the
//! Kubernetes OpenAPI schema of the version k8s-openapi's `latest` feature
//! targets (1.37), by `kubernetes-validate --strict` from PyPI: unknown
//! fields, wrong types and missing required fields are errors.
//!
//! Two sources: the manifests of `dockhand::k8s` (what users apply), and
//! what the Kubernetes backend itself sends (pods, Secrets, ConfigMaps,
//! its Lease, the offline NetworkPolicy, PersistentVolumeClaims), captured by the SIMULATED API
//! server (tests/kube/fake_api) during a one-shot and a session. The
//! agent-sandbox objects are custom resources with no schema in the
//! Kubernetes API; the pod each one holds is validated as a Pod.

mod common;
#[path = "kube/mod.rs"]
mod sim;

use std::path::{Path, PathBuf};

use dockhand::codemode::CodeHostConfig;
use dockhand::k8s::{self, KubeOptions};
use dockhand::kernel::KernelConfig;
use dockhand::session::{SessionApi, SessionConfig};
use dockhand::{CacheMode, Egress, ImageSpec, Isolation, Sandbox, Secret, Type};
use serde_json::{json, Value};
use sim::fake_api::Script;
use sim::{with_script, IMAGE};

/// The Kubernetes version k8s-openapi's `latest` feature targets.
const KUBERNETES_VERSION: &str = "1.37.0";

fn validator() -> PathBuf {
    let python = common::venv_python(&["kubernetes-validate==1.37.0"]);
    python.with_file_name("kubernetes-validate")
}

/// Runs the validator on `files`; returns (success, what it printed).
fn validate(files: &[PathBuf]) -> (bool, String) {
    let out = std::process::Command::new(validator())
        .args(["--strict", "-k", KUBERNETES_VERSION])
        .args(files)
        .output()
        .expect("kubernetes-validate runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// Writes `objects` as JSON files in `dir`, the pods inside agent-sandbox
/// objects as Pods of their own.
fn write_all(dir: &Path, objects: &[Value]) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for (i, object) in objects.iter().enumerate() {
        let object = match object["apiVersion"].as_str() {
            Some(api) if api == k8s::AGENT_SANDBOX_API => {
                let Some(template) = object["spec"].get("podTemplate") else {
                    continue;
                };
                json!({"apiVersion": "v1", "kind": "Pod",
                       "metadata": {"name": object["metadata"]["name"], "labels": template["metadata"]["labels"]},
                       "spec": template["spec"]})
            }
            _ => object.clone(),
        };
        let kind = object["kind"].as_str().unwrap_or("unknown").to_lowercase();
        let path = dir.join(format!("{i:02}-{kind}.json"));
        std::fs::write(&path, serde_json::to_vec_pretty(&object).unwrap()).unwrap();
        files.push(path);
    }
    files
}

fn rendered() -> Vec<Value> {
    let opts = KubeOptions::new(IMAGE)
        .namespace("sandboxes")
        .owner("schema-test");
    let double = Sandbox::code("double", "result = x * 2")
        .input("x", Type::Int)
        .output("result", Type::Int)
        .isolation(Isolation::Gvisor)
        .timeout(std::time::Duration::from_secs(60))
        .memory("512Mi")
        .secret(Secret::value("API_KEY", "rendered-key"))
        .secret(Secret::value("CERT", "rendered-cert").as_file())
        .build()
        .unwrap();
    let mut manifests = vec![
        k8s::one_shot(&double, [("x", 21)], &opts).unwrap(),
        k8s::code_host(&CodeHostConfig::new(), &opts).unwrap(),
    ];
    let session = k8s::session(
        &SessionConfig::new()
            .name("analysis")
            .network(true)
            .secret(Secret::value("TOKEN", "rendered-token")),
        &opts,
    )
    .unwrap();
    manifests.push(session.warm_pool(3).unwrap());
    manifests.push(session);
    manifests
        .iter()
        .flat_map(|m| m.objects().iter().map(|o| serde_json::to_value(o).unwrap()))
        .collect()
}

/// What the backend sends for a one-shot with secrets (an env and a file
/// one) and a session with a secret and an egress allow-list, as the
/// simulated server received it.
async fn sent() -> Vec<Value> {
    let (client, fake) = with_script(Script::idle()).await;
    let job = Sandbox::command("probe", "true")
        .input("data", Type::File)
        .image(ImageSpec::prebuilt(IMAGE))
        .cache(CacheMode::Disable)
        .secret(Secret::value("API_KEY", "sent-key"))
        .secret(Secret::value("CERT", "sent-cert").as_file())
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data.txt");
    std::fs::write(&data, "x").unwrap();
    client
        .run(&job, [("data", dockhand::Value::file(&data))])
        .await
        .expect("the simulated run");
    // With an allow-list: the pod's host names and its own NetworkPolicy.
    let session = client.session(
        SessionConfig::new()
            .image(ImageSpec::prebuilt(IMAGE))
            .secret(Secret::value("TOKEN", "sent-token"))
            .network(Egress::allow(["localhost:8080", "10.0.0.0/8"]).deny(["10.9.0.0/16"])),
    );
    session.start().await.expect("the simulated session");
    session.exec("echo ok").await.unwrap();
    session.close().await.unwrap();
    // A volume's claim, and a pausable session's claim and pod mounting both.
    dockhand::Volume::create(&client, "schema-data")
        .await
        .expect("the simulated claim");
    let stored = client.session(
        SessionConfig::new()
            .image(ImageSpec::prebuilt(IMAGE))
            .pausable(true)
            .volume_read_only("schema-data", "/data"),
    );
    stored
        .start()
        .await
        .expect("the simulated pausable session");
    stored.close().await.unwrap();
    // A kernel's pod carries its helpers in a ConfigMap. The scripted agent
    // runs no kernel relay, so the start fails once the objects are sent.
    let kernel = client.kernel(KernelConfig::new().image(ImageSpec::prebuilt(IMAGE)));
    assert!(
        kernel.start().await.is_err(),
        "no relay in the scripted agent"
    );
    fake.record(|r| {
        let mut objects: Vec<Value> = r.created.clone();
        objects.extend(r.companions_created.iter().map(|(_, o)| o.clone()));
        objects.extend(r.leases.values().cloned());
        objects.extend(r.policies.values().cloned());
        objects.extend(r.claims_created.iter().cloned());
        objects
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn every_manifest_and_every_object_the_backend_sends_fits_the_openapi_schema() {
    let mut objects = rendered();
    let sent = sent().await;
    let kinds: std::collections::BTreeSet<&str> =
        sent.iter().filter_map(|o| o["kind"].as_str()).collect();
    for kind in [
        "Pod",
        "Secret",
        "ConfigMap",
        "Lease",
        "NetworkPolicy",
        "PersistentVolumeClaim",
    ] {
        assert!(kinds.contains(kind), "the backend sent a {kind}: {kinds:?}");
    }
    objects.extend(sent);
    let dir = tempfile::tempdir().unwrap();
    let files = write_all(dir.path(), &objects);
    let (ok, report) = validate(&files);
    assert!(ok, "{report}");
    let passed = report.lines().filter(|l| l.contains(" passed ")).count();
    assert_eq!(passed, files.len(), "every file was checked: {report}");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_schema_check_rejects_an_unknown_field_and_a_wrong_type() {
    // The control: the same validator, on a rendered pod spoiled two ways.
    let pod = rendered()
        .into_iter()
        .find(|o| o["kind"] == json!("Pod"))
        .expect("a rendered pod");
    let mut unknown = pod.clone();
    unknown["spec"]["restartPolicyy"] = json!("Never");
    let mut wrong_type = pod;
    wrong_type["spec"]["containers"][0]["stdin"] = json!("yes");
    let dir = tempfile::tempdir().unwrap();
    for (name, spoiled, expected) in [
        ("unknown", unknown, "restartPolicyy"),
        ("wrong-type", wrong_type, "'yes' is not of type 'boolean'"),
    ] {
        let path = dir.path().join(format!("{name}.json"));
        std::fs::write(&path, serde_json::to_vec(&spoiled).unwrap()).unwrap();
        let (ok, report) = validate(&[path]);
        assert!(!ok, "{name} passed: {report}");
        assert!(report.contains(expected), "{report}");
    }
}
