//! The Kubernetes backend's one-shots against a SIMULATED API server
//! (tests/kube/fake_api); sessions are in kube_simulated_session.rs.
//!
//! These are simulations: no control plane can run on this machine. The
//! server speaks real HTTP and real attach WebSockets and answers as an API
//! server does (its `Status` bodies, watch events, 410 on an expired watch),
//! while a scripted kubelet moves pods through their states. What is checked
//! is the backend's request flow, what it sends, how it reads the cluster's
//! answers into typed errors, and that it leaves nothing behind. The same
//! scenarios run on a real cluster in tests/kube_cluster.rs.

#[path = "kube/mod.rs"]
mod sim;

use std::sync::Arc;
use std::time::Duration;

use dockhand::error::ForbiddenBy;
use dockhand::{Client, ClusterError, Error, ImageSpec, Sandbox, Secret, Type};
use serde_json::{json, Value};
use sim::fake_api::{self, Outcome, Script, Shared};
use sim::{
    assert_no_pods_left, connect, count_lines, count_lines_with, counting, position, text_file,
    with_script, IMAGE,
};

#[tokio::test(flavor = "multi_thread")]
async fn simulated_one_shot_with_file_io_goes_through_attach_streams_and_leaves_nothing() {
    let (client, fake) = with_script(Script::exits(0, "counted\n", counting())).await;
    assert_eq!(client.backend(), "kubernetes");
    let dir = tempfile::tempdir().unwrap();
    let job = count_lines();

    let out = client
        .run(&job, [("text", text_file(&dir, "one\n\ntwo\nthree\n"))])
        .await
        .expect("the run");
    assert_eq!(out.get::<i64>("lines").unwrap(), 3);
    assert!(out.stdout.text.contains("counted"), "{:?}", out.stdout.text);
    assert_eq!(out.exit_code, 0);
    assert_no_pods_left(&fake).await;
    assert!(client.live_containers().await.unwrap().is_empty());

    // The next run on the same client is unaffected, and sees its own input.
    let again = client
        .run(&job, [("text", text_file(&dir, "a\nb\n"))])
        .await
        .unwrap();
    assert_eq!(again.get::<i64>("lines").unwrap(), 2);
    assert_no_pods_left(&fake).await;

    // The calls, in order: the owner lease and offline policy at connect,
    // then per run: create, attach to `inputs`, the log, attach to
    // `outputs`, delete.
    let requests = fake.record(|r| r.requests.clone());
    let lease = position(&requests, 0, |r| {
        r.starts_with("POST /apis/coordination.k8s.io/v1/namespaces/sim/leases")
    });
    let policy = position(&requests, lease, |r| {
        r.starts_with("POST /apis/networking.k8s.io/v1/namespaces/sim/networkpolicies")
    });
    let create = position(&requests, policy, |r| {
        r.starts_with("POST /api/v1/namespaces/sim/pods")
    });
    let inputs = position(&requests, create, |r| {
        r.contains("/attach?") && r.contains("container=inputs")
    });
    let log = position(&requests, inputs, |r| {
        r.contains("/log?") && r.contains("container=program")
    });
    let outputs = position(&requests, log, |r| {
        r.contains("/attach?") && r.contains("container=outputs")
    });
    position(&requests, outputs, |r| {
        r.starts_with("DELETE /api/v1/namespaces/sim/pods/")
    });
    assert!(
        !requests.iter().any(|r| r.contains("/exec")),
        "nothing is exec'd: {requests:#?}"
    );
    // The `outputs` container lost its first answer (as containerd's attach
    // can): the backend pinged again before it said `go`.
    let pings = fake.record(|r| r.output_pings.clone());
    assert_eq!(pings.len(), 2, "{pings:?}");
    assert!(pings.iter().all(|(_, n)| *n >= 2), "{pings:?}");

    // What the backend sent: the inputs archive, and a hardened pod owned by the lease.
    let (created, inputs, lease) = fake.record(|r| {
        (
            r.created[0].clone(),
            r.inputs.clone(),
            r.leases.values().next().cloned().unwrap(),
        )
    });
    let first = created["metadata"]["name"].as_str().unwrap();
    let sent = &inputs[first];
    let text = sent
        .iter()
        .find(|(p, _)| p.trim_start_matches("./") == "text")
        .unwrap()
        .1;
    assert_eq!(text, b"one\n\ntwo\nthree\n");
    let spec = &created["spec"];
    let program = spec["containers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "program")
        .unwrap();
    assert_eq!(
        program["command"],
        json!([
            "sh",
            "-c",
            "grep -c . /var/inputs/text > /var/outputs/lines"
        ])
    );
    assert_eq!(program["image"], json!(IMAGE));
    assert_eq!(program["securityContext"]["runAsNonRoot"], json!(true));
    assert_eq!(
        program["securityContext"]["readOnlyRootFilesystem"],
        json!(true)
    );
    assert_eq!(
        program["securityContext"]["capabilities"]["drop"],
        json!(["ALL"])
    );
    assert_eq!(spec["automountServiceAccountToken"], json!(false));
    assert_eq!(spec["restartPolicy"], json!("Never"));
    // No timeout: a day, plus the pod's default start limit (5 min).
    assert_eq!(spec["activeDeadlineSeconds"], json!(24 * 3600 + 300));
    let owner = &created["metadata"]["ownerReferences"][0];
    assert_eq!(owner["kind"], json!("Lease"));
    assert_eq!(owner["uid"], lease["metadata"]["uid"]);
    assert_eq!(
        created["metadata"]["labels"]["dev.dockhand.network"],
        json!("none")
    );
    let policy = fake.record(|r| r.policies["dockhand-offline"].clone());
    assert_eq!(
        policy["spec"]["podSelector"]["matchLabels"],
        json!({"dev.dockhand.network": "none"})
    );
    assert_eq!(policy["spec"]["policyTypes"], json!(["Ingress", "Egress"]));
}

#[tokio::test(flavor = "multi_thread")]
async fn simulated_403_on_pod_create_is_a_typed_forbidden_naming_the_rbac_rule() {
    let mut script = Script::exits(0, "", counting());
    script.refuse = Some(("POST", "pods", 403));
    let (client, fake) = with_script(script).await;
    let dir = tempfile::tempdir().unwrap();
    let err = client
        .run(&count_lines(), [("text", text_file(&dir, "x\n"))])
        .await
        .unwrap_err();
    match &err {
        Error::Cluster(ClusterError::Forbidden {
            verb,
            resource,
            namespace,
            message,
            by,
        }) => {
            assert_eq!(*by, ForbiddenBy::Rbac);
            assert_eq!(
                (*verb, *resource, namespace.as_str()),
                ("create", "pods", "sim")
            );
            assert!(
                message.contains("cannot create resource \"pods\""),
                "{message}"
            );
        }
        other => panic!("expected Forbidden, got {other:?}"),
    }
    assert!(err.to_string().contains("RBAC"), "{err}");
    assert_no_pods_left(&fake).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn simulated_missing_namespace_fails_connect_with_not_found() {
    let mut script = Script::exits(0, "", counting());
    script.refuse = Some(("POST", "leases", 404));
    let (url, _fake) = fake_api::start("sim", script).await;
    let err = connect(&url).await.unwrap_err();
    assert!(
        matches!(&err, Error::Cluster(ClusterError::NotFound { resource: "leases", namespace, .. }) if namespace == "sim"),
        "{err:?}"
    );
    assert!(err.to_string().contains("KubeConfig::namespace"), "{err}");
}

#[tokio::test(flavor = "multi_thread")]
async fn simulated_409_on_pod_create_is_a_typed_conflict() {
    let mut script = Script::exits(0, "", counting());
    script.refuse = Some(("POST", "pods", 409));
    let (client, fake) = with_script(script).await;
    let dir = tempfile::tempdir().unwrap();
    let err = client
        .run(&count_lines(), [("text", text_file(&dir, "x\n"))])
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::Cluster(ClusterError::Conflict {
                resource: "pods",
                ..
            })
        ),
        "{err:?}"
    );
    assert_no_pods_left(&fake).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn simulated_410_on_watch_reads_the_pod_again_and_the_run_goes_on() {
    let mut script = Script::exits(0, "", counting());
    script.expire_first_watch = true;
    let (client, fake) = with_script(script).await;
    let dir = tempfile::tempdir().unwrap();
    let out = client
        .run(&count_lines(), [("text", text_file(&dir, "1\n2\n3\n4\n"))])
        .await
        .expect("a run past an expired watch");
    assert_eq!(out.get::<i64>("lines").unwrap(), 4);
    // After the expired watch, the pod was read again.
    let requests = fake.record(|r| r.requests.clone());
    let expired = position(&requests, 0, |q| q.contains("watch=true"));
    position(&requests, expired + 1, |q| {
        q.starts_with("GET /api/v1/namespaces/sim/pods/") && !q.contains("watch")
    });
    assert_no_pods_left(&fake).await;
}

async fn failing_run(script: Script, job: &Sandbox) -> (Error, Shared) {
    let (client, fake) = with_script(script).await;
    let dir = tempfile::tempdir().unwrap();
    let err = client
        .run(job, [("text", text_file(&dir, "x\n"))])
        .await
        .unwrap_err();
    assert_no_pods_left(&fake).await;
    // The client is still usable: a good run on a fresh script would pass,
    // and this one lists no pod of its own.
    assert!(client.live_containers().await.unwrap().is_empty());
    (err, fake)
}

#[tokio::test(flavor = "multi_thread")]
async fn simulated_eviction_is_a_typed_eviction_not_an_exit_code() {
    let (err, _) = failing_run(Script::ending(Outcome::Evicted), &count_lines()).await;
    match err {
        Error::Cluster(ClusterError::Evicted { message, .. }) => {
            assert!(message.contains("low on resource: memory"), "{message}")
        }
        other => panic!("expected Evicted, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn simulated_image_pull_failure_names_the_image_and_nothing_runs() {
    let mut script = Script::exits(0, "", counting());
    script.image_pull_fails = true;
    let (err, fake) = failing_run(script, &count_lines()).await;
    match &err {
        Error::Cluster(ClusterError::ImagePull { image, reason, .. }) => {
            assert_eq!(image, IMAGE);
            assert_eq!(reason, "ErrImagePull");
        }
        other => panic!("expected ImagePull, got {other:?}"),
    }
    assert!(err.to_string().contains("push the image"), "{err}");
    assert!(fake.record(|r| r.inputs.is_empty()), "no inputs were sent");
}

#[tokio::test(flavor = "multi_thread")]
async fn simulated_node_lost_mid_run_is_typed() {
    let (err, _) = failing_run(Script::ending(Outcome::NodeLost), &count_lines()).await;
    assert!(
        matches!(&err, Error::Cluster(ClusterError::NodeLost { message, .. }) if message.contains("unresponsive")),
        "{err:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn simulated_pod_deleted_from_outside_is_container_gone() {
    let (err, _) = failing_run(Script::ending(Outcome::Deleted), &count_lines()).await;
    assert!(matches!(err, Error::ContainerGone { .. }), "{err:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn simulated_exit_codes_and_oom_come_from_the_kubelet_status() {
    let (err, _) = failing_run(Script::exits(3, "boom\n", counting()), &count_lines()).await;
    match err {
        Error::NonZeroExit { exit_code, .. } => assert_eq!(exit_code, 3),
        other => panic!("expected NonZeroExit, got {other:?}"),
    }
    let mut oom = Script::exits(137, "", counting());
    if let Outcome::Exit { reason, .. } = &mut oom.outcome {
        *reason = "OOMKilled";
    }
    let (err, _) = failing_run(oom, &count_lines()).await;
    assert!(matches!(err, Error::OutOfMemory { .. }), "{err:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn simulated_timeout_and_a_dropped_run_delete_their_pods() {
    let (client, fake) = with_script(Script::ending(Outcome::Hang)).await;
    let dir = tempfile::tempdir().unwrap();
    let slow = Sandbox::command("hang", "sleep")
        .args(["infinity"])
        .input("text", Type::File)
        .image(ImageSpec::prebuilt(IMAGE))
        .timeout(Duration::from_secs(1))
        .build()
        .unwrap();
    let err = client
        .run(&slow, [("text", text_file(&dir, "x\n"))])
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Timeout { .. }), "{err:?}");
    assert_no_pods_left(&fake).await;

    // Dropped while its pod runs: the guard deletes it.
    let job = count_lines();
    let input = text_file(&dir, "x\n");
    let run = client.run(&job, [("text", input)]);
    let watcher = fake.clone();
    tokio::select! {
        _ = run => panic!("a hanging run ended"),
        _ = async {
            while watcher.record(|r| r.inputs.is_empty() || r.pods.is_empty()) {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        } => {}
    }
    assert_no_pods_left(&fake).await;
    // And the client goes on.
    assert!(client.live_containers().await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn simulated_what_the_cluster_cannot_do_is_refused_before_anything_is_made() {
    let (client, fake) = with_script(Script::exits(0, "", counting())).await;
    let dir = tempfile::tempdir().unwrap();
    let with_secret = Sandbox::command("s", "true")
        .input("text", Type::File)
        .image(ImageSpec::prebuilt(IMAGE))
        .network(dockhand::Egress::allow(["api.example.com"]))
        .secret(Secret::for_hosts(
            "TOKEN",
            "s3cr3t-value",
            ["api.example.com"],
        ))
        .build()
        .unwrap();
    let err = client
        .run(&with_secret, [("text", text_file(&dir, "x\n"))])
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::Unsupported {
                backend: "kubernetes",
                ..
            }
        ),
        "{err:?}"
    );
    assert!(!format!("{err} {err:?}").contains("s3cr3t"));

    let to_build = Sandbox::code("b", "result = 1")
        .output("result", Type::Int)
        .build()
        .unwrap();
    let err = client
        .run(&to_build, dockhand::NO_INPUTS)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("ImageSpec::prebuilt"), "{err}");

    let session = client.session(dockhand::session::SessionConfig::new());
    let err = session.start().await.unwrap_err();
    assert!(
        matches!(
            err,
            Error::Unsupported {
                backend: "kubernetes",
                ..
            }
        ),
        "{err:?}"
    );
    let host = client.code_host(dockhand::codemode::CodeHostConfig::new());
    let err = host.start().await.unwrap_err();
    assert!(
        matches!(
            err,
            Error::Unsupported {
                backend: "kubernetes",
                ..
            }
        ),
        "{err:?}"
    );
    assert!(fake.record(|r| r.created.is_empty()), "nothing was created");
}

#[tokio::test(flavor = "multi_thread")]
async fn simulated_secrets_travel_in_a_secret_object_owned_by_the_pod_and_are_redacted() {
    // The program prints its secret: what comes back must not hold it.
    let (client, fake) = with_script(Script::exits(
        0,
        "token=s3cr3t-value-1234\n",
        Arc::new(|_| vec![("lines".to_string(), b"1\n".to_vec())]),
    ))
    .await;
    let dir = tempfile::tempdir().unwrap();
    let job = Sandbox::command("count", "sh")
        .args([
            "-c",
            "echo token=$TOKEN; grep -c . {{text}} > /var/outputs/lines",
        ])
        .input("text", Type::File)
        .output("lines", Type::Int)
        .image(ImageSpec::prebuilt(IMAGE))
        .secret(Secret::value("TOKEN", "s3cr3t-value-1234"))
        .secret(Secret::value("KEY", "another-s3cr3t").as_file())
        .build()
        .unwrap();
    let out = client
        .run(&job, [("text", text_file(&dir, "x\n"))])
        .await
        .expect("a run with secrets");
    assert_eq!(out.get::<i64>("lines").unwrap(), 1);
    assert!(!out.stdout.text.contains("s3cr3t"), "{:?}", out.stdout.text);
    assert!(!format!("{out:?}").contains("s3cr3t"));

    let (pod, secret) = fake.record(|r| (r.created[0].clone(), r.companions_created[0].1.clone()));
    let pod_text = pod.to_string();
    assert!(!pod_text.contains("s3cr3t"), "values never in the pod spec");
    let object = secret["metadata"]["name"].as_str().unwrap().to_string();
    assert_eq!(secret["stringData"]["TOKEN"], json!("s3cr3t-value-1234"));
    assert_eq!(secret["stringData"]["KEY"], json!("another-s3cr3t"));
    assert_eq!(
        secret["metadata"]["ownerReferences"][0]["kind"],
        json!("Lease")
    );
    let program = &pod["spec"]["containers"][0];
    let token = program["env"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "TOKEN")
        .unwrap();
    assert_eq!(
        token["valueFrom"]["secretKeyRef"],
        json!({"name": object, "key": "TOKEN", "optional": false})
    );
    assert!(pod_text.contains("/run/secrets"));
    // Handed to the pod, and gone with it.
    let requests = fake.record(|r| r.requests.clone());
    let create = position(&requests, 0, |r| {
        r.starts_with("POST /api/v1/namespaces/sim/secrets")
    });
    let pod_made = position(&requests, create, |r| {
        r.starts_with("POST /api/v1/namespaces/sim/pods")
    });
    position(&requests, pod_made, |r| {
        r.starts_with(&format!("PATCH /api/v1/namespaces/sim/secrets/{object}"))
    });
    assert_no_pods_left(&fake).await;
    assert!(
        fake.record(|r| r.secrets.is_empty()),
        "the Secret went with its pod"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn simulated_reap_removes_pods_of_a_lapsed_owner_and_keeps_its_own() {
    let (client, fake) = with_script(Script::exits(0, "", counting())).await;
    let dead = "0123456789abcdef0123456789abcdef";
    fake.seed(
        Some(json!({
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": format!("dockhand-owner-{dead}"), "uid": "dead-lease",
                "labels": {"dev.dockhand.managed": "true", "dev.dockhand.kind": "owner-lease", "dev.dockhand.owner": dead}},
            "spec": {"holderIdentity": "gone/1", "leaseDurationSeconds": 30,
                "renewTime": "2026-01-01T00:00:00.000000Z"}
        })),
        Some(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "dockhand-count-left", "uid": "p1", "resourceVersion": "1",
                "labels": {"dev.dockhand.managed": "true", "dev.dockhand.owner": dead}},
            "spec": {"containers": [{"name": "program", "image": IMAGE}]}
        })),
    );
    fake.seed(
        None,
        Some(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "not-dockhands", "uid": "p2", "resourceVersion": "1",
                "labels": {"app": "web"}},
            "spec": {"containers": [{"name": "web", "image": "nginx"}]}
        })),
    );
    let report = client.reap().await.unwrap();
    assert_eq!(report.containers, vec!["dockhand-count-left".to_string()]);
    let (leases, pods) = fake.record(|r| (r.leases.clone(), r.pods.clone()));
    assert!(!leases.contains_key(&format!("dockhand-owner-{dead}")));
    assert_eq!(
        leases.len(),
        1,
        "this process's own lease stays: {leases:?}"
    );
    assert!(
        pods.contains_key("not-dockhands"),
        "a pod dockhand did not make stays"
    );

    // Dropping the client deletes its lease (and so, by garbage collection, its pods).
    drop(client);
    for _ in 0..100 {
        if fake.record(|r| r.leases.is_empty()) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("the owner lease outlived its client");
}

/// A client of this process that was dropped as its runtime ended could
/// not delete its lease: once that lease lapses, a live client's sweep in
/// the same process removes it and the pods it owns, and keeps its own.
#[tokio::test(flavor = "multi_thread")]
async fn simulated_reap_removes_a_dropped_clients_lapsed_lease_in_the_same_process() {
    let (client, fake) = with_script(Script::exits(0, "", counting())).await;
    let (own_name, own) = fake.record(|r| {
        let lease = r.leases.values().next().unwrap().clone();
        (lease["metadata"]["name"].clone(), lease)
    });
    let process = own["metadata"]["labels"]["dev.dockhand.owner"].clone();
    let lapsed = format!("dockhand-owner-{}-dropped1", process.as_str().unwrap());
    let pod = |name: &str, lease: &Value| {
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "uid": format!("uid-{name}"), "resourceVersion": "1",
                "labels": {"dev.dockhand.managed": "true", "dev.dockhand.owner": process},
                "ownerReferences": [{"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                    "name": lease["metadata"]["name"], "uid": lease["metadata"]["uid"]}]},
            "spec": {"containers": [{"name": "program", "image": IMAGE}]}
        })
    };
    let dropped = json!({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": lapsed, "uid": "dropped-lease",
            "labels": {"dev.dockhand.managed": "true", "dev.dockhand.kind": "owner-lease",
                       "dev.dockhand.owner": process}},
        "spec": {"holderIdentity": "here/1", "leaseDurationSeconds": 30,
            "renewTime": "2026-01-01T00:00:00.000000Z"}
    });
    fake.seed(
        Some(dropped.clone()),
        Some(pod("dockhand-count-orphan", &dropped)),
    );
    fake.seed(None, Some(pod("dockhand-count-mine", &own)));
    let report = client.reap().await.unwrap();
    assert_eq!(report.containers, vec!["dockhand-count-orphan".to_string()]);
    let (leases, pods) = fake.record(|r| (r.leases.clone(), r.pods.clone()));
    assert!(!leases.contains_key(&lapsed), "{leases:?}");
    assert!(
        leases.contains_key(own_name.as_str().unwrap()),
        "{leases:?}"
    );
    assert!(
        pods.contains_key("dockhand-count-mine"),
        "a live client's pod stays"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn simulated_dropping_one_client_leaves_another_clients_runs_alone() {
    let (url, fake) = fake_api::start("sim", Script::exits(0, "", counting())).await;
    let first = connect(&url).await.unwrap();
    let second = connect(&url).await.unwrap();
    assert_eq!(fake.record(|r| r.leases.len()), 2, "a lease per connection");
    drop(first);
    for _ in 0..100 {
        if fake.record(|r| r.leases.len()) == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(fake.record(|r| r.leases.len()), 1);
    let dir = tempfile::tempdir().unwrap();
    let out = second
        .run(&count_lines(), [("text", text_file(&dir, "a\nb\n"))])
        .await
        .expect("the other client runs on");
    assert_eq!(out.get::<i64>("lines").unwrap(), 2);
    assert_no_pods_left(&fake).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn simulated_dockhand_backend_env_picks_the_cluster_from_the_kubeconfig() {
    let (url, fake) = fake_api::start("from-env", Script::exits(0, "ok\n", counting())).await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("config");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: sim\n  cluster:\n    server: {url}\n\
             users:\n- name: sim\n  user: {{}}\ncontexts:\n- name: other\n  context:\n    cluster: sim\n    user: sim\n\
             - name: sim\n  context:\n    cluster: sim\n    user: sim\n    namespace: from-env\ncurrent-context: other\n"
        ),
    )
    .unwrap();
    // This test alone reads these variables; the others name their cluster in code.
    std::env::set_var("KUBECONFIG", &kubeconfig);
    std::env::set_var("DOCKHAND_BACKEND", "kubernetes");
    std::env::set_var("DOCKHAND_KUBE_CONTEXT", "sim");
    let client = Client::builder()
        .cache_dir(dir.path().join("cache"))
        .connect()
        .await
        .expect("DOCKHAND_BACKEND=kubernetes");
    std::env::set_var("DOCKHAND_BACKEND", "swarm");
    let bad = Client::connect().await.unwrap_err();
    std::env::remove_var("DOCKHAND_BACKEND");
    assert!(matches!(bad, Error::InvalidSpec { .. }), "{bad:?}");
    assert_eq!(client.backend(), "kubernetes");
    assert_eq!(client.endpoint().trim_end_matches('/'), url);
    let out = client
        .run(&count_lines(), [("text", text_file(&dir, "a\n"))])
        .await
        .unwrap();
    assert_eq!(out.get::<i64>("lines").unwrap(), 1);
    // The context's namespace was used.
    let requests = fake.record(|r| r.requests.clone());
    assert!(
        requests
            .iter()
            .any(|r| r.starts_with("POST /api/v1/namespaces/from-env/pods")),
        "{requests:#?}"
    );
}

/// A 403 that is not RBAC's (here a ResourceQuota's, as the API server
/// words it) says what refused it, with its own hint and not the Role's.
/// Simulated: the fake API server answers the pod's create with it.
#[tokio::test(flavor = "multi_thread")]
async fn simulated_quota_refusal_is_told_apart_from_rbac() {
    let mut script = Script::exits(0, "", counting());
    script.refuse = Some(("POST", "pods", 403));
    script.refuse_message = Some(
        "pods \"dockhand-x\" is forbidden: exceeded quota: compute-resources, requested: limits.cpu=1, used: limits.cpu=4, limited: limits.cpu=4",
    );
    let (err, _) = failing_run(script, &count_lines()).await;
    match &err {
        Error::Cluster(ClusterError::Forbidden { by, message, .. }) => {
            assert_eq!(*by, ForbiddenBy::Quota);
            assert!(message.contains("exceeded quota"), "{message}");
        }
        other => panic!("expected Forbidden, got {other:?}"),
    }
    let shown = err.to_string();
    assert!(shown.contains("ResourceQuota"), "{shown}");
    assert!(!shown.contains("RBAC"), "{shown}");
}

/// With `.retries(2)`, a pod the cluster evicts is run again in a new pod:
/// three attempts, each an eviction, then `RetriesExhausted`, no pod left.
/// A refusal is not retried. Simulated: the fake kubelet evicts every pod.
#[tokio::test(flavor = "multi_thread")]
async fn simulated_evictions_are_retried_and_refusals_are_not() {
    let job = count_lines_with(|b| b.retries(2));
    let (err, fake) = failing_run(Script::ending(Outcome::Evicted), &job).await;
    let (attempts, last) = attempts_of(&err);
    assert_eq!(attempts.len(), 3, "{attempts:?}");
    assert!(
        matches!(last, Error::Cluster(ClusterError::Evicted { .. })),
        "{last:?}"
    );
    let creates = pod_creates(&fake);
    assert_eq!(creates, 3, "one pod per attempt");

    let mut script = Script::exits(0, "", counting());
    script.refuse = Some(("POST", "pods", 403));
    let (err, _) = failing_run(script, &job).await;
    let (attempts, last) = attempts_of(&err);
    assert_eq!(attempts.len(), 1, "a refusal is not retried: {attempts:?}");
    assert!(
        matches!(last, Error::Cluster(ClusterError::Forbidden { .. })),
        "{last:?}"
    );
}

/// An API server that answers 429 or 503 for a while is asked again by
/// the client's own retry layer, request by request, with backoff: the run
/// succeeds without a retry of its own (`.retries(0)`), and the log shows
/// each refused request made again.
#[tokio::test]
async fn simulated_api_server_throttling_is_retried_per_request() {
    for code in [429, 503] {
        let mut script = Script::exits(0, "counted\n", counting());
        script.refuse = Some(("POST", "pods", code));
        script.refuse_times = Some(2);
        let (client, fake) = with_script(script).await;
        let dir = tempfile::tempdir().unwrap();
        let out = client
            .run(&count_lines(), [("text", text_file(&dir, "a\nb\nc\n"))])
            .await
            .unwrap_or_else(|e| panic!("{code}: {e}"));
        assert_eq!(out.get::<i64>("lines").unwrap(), 3, "{code}");
        let (refused, creates) = (fake.record(|r| r.refused), pod_creates(&fake));
        assert_eq!(refused, 2, "{code}");
        assert_eq!(creates, 3, "{code}: twice refused, then made");
        assert_no_pods_left(&fake).await;
    }
}

/// A one-shot whose pod the scheduler cannot place fails within the pod's
/// start limit with the scheduler's reason, not at the run's timeout, and
/// its pod is deleted.
#[tokio::test]
async fn simulated_one_shot_the_cluster_cannot_place_fails_at_its_start_limit() {
    let script = Script {
        unschedulable: true,
        ..Script::exits(0, "counted\n", counting())
    };
    let (url, fake) = fake_api::start("sim", script).await;
    let client = Client::builder()
        .kubernetes(
            dockhand::KubeConfig::url(&url)
                .namespace("sim")
                .pod_start_limit(Duration::from_secs(2)),
        )
        .cache_dir(std::env::temp_dir().join("dockhand-kube-sim-cache"))
        .connect()
        .await
        .unwrap();
    let job = count_lines_with(|b| b.timeout(Duration::from_secs(60)));
    let dir = tempfile::tempdir().unwrap();
    let started = std::time::Instant::now();
    let err = client
        .run(&job, [("text", text_file(&dir, "a\n"))])
        .await
        .unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
    match &err {
        Error::Cluster(ClusterError::Unschedulable { message, .. }) => {
            assert!(message.contains("Insufficient cpu"), "{message}")
        }
        other => panic!("{other:?}"),
    }
    assert!(err.to_string().contains("could not place pod"), "{err}");
    assert_no_pods_left(&fake).await;
}

/// How many pod creations the simulated server was asked for.
fn pod_creates(fake: &Shared) -> usize {
    fake.record(|r| {
        r.requests
            .iter()
            .filter(|q| {
                q.starts_with("POST ") && q.split('?').next().is_some_and(|p| p.ends_with("/pods"))
            })
            .count()
    })
}

/// The attempts and the last error of a `RetriesExhausted`.
fn attempts_of(err: &Error) -> (&[String], &Error) {
    match err {
        Error::RetriesExhausted { attempts, last } => (attempts, last),
        other => panic!("expected RetriesExhausted, got {other:?}"),
    }
}

/// Twelve runs at once on one client share one watch of the client's pods
/// (by its owner label), instead of a watch each; each run's own requests
/// are its create, two attaches, its log and its delete.
#[tokio::test(flavor = "multi_thread")]
async fn simulated_concurrent_runs_share_one_watch_of_the_clients_pods() {
    let (client, fake) = with_script(Script::exits(0, "counted\n", counting())).await;
    let job = count_lines();
    let before = fake.record(|r| r.requests.len());
    let runs = (0..12).map(|i| {
        let (client, job) = (client.clone(), job.clone());
        async move {
            let dir = tempfile::tempdir().unwrap();
            let text = "x\n".repeat(i + 1);
            let out = client
                .run(&job, [("text", text_file(&dir, &text))])
                .await
                .expect("the run");
            assert_eq!(out.get::<i64>("lines").unwrap(), i as i64 + 1);
        }
    });
    futures::future::join_all(runs).await;
    assert_no_pods_left(&fake).await;

    let requests: Vec<String> = fake.record(|r| r.requests[before..].to_vec());
    let watches: Vec<&String> = requests
        .iter()
        .filter(|r| r.starts_with("GET /api/v1/namespaces/sim/pods?") && r.contains("watch=true"))
        .collect();
    assert!(
        watches
            .iter()
            .all(|w| w.contains("labelSelector=dev.dockhand.owner")),
        "no watch by pod name: {watches:#?}"
    );
    // One watch, and the list it starts from (a server ending a watch may
    // make it two).
    assert!(
        (1..=2).contains(&watches.len()),
        "one shared watch: {watches:#?}"
    );
    let gets = requests
        .iter()
        .filter(|r| r.starts_with("GET /api/v1/namespaces/sim/pods/") && !r.contains('?'))
        .count();
    assert_eq!(gets, 0, "no pod read one by one: {requests:#?}");
    let per_run = |wanted: &dyn Fn(&str) -> bool| requests.iter().filter(|r| wanted(r)).count();
    assert_eq!(
        per_run(&|r| r.starts_with("POST /api/v1/namespaces/sim/pods")),
        12
    );
    assert_eq!(per_run(&|r| r.contains("/attach?")), 24);
    assert_eq!(per_run(&|r| r.contains("/log?")), 12);
    assert_eq!(
        per_run(&|r| r.starts_with("DELETE /api/v1/namespaces/sim/pods/")),
        12
    );
    let pod_requests = requests.iter().filter(|r| r.contains("/pods")).count();
    eprintln!(
        "12 runs: {pod_requests} pod requests in all ({} per run, the shared watch's included)",
        pod_requests as f64 / 12.0
    );
}
