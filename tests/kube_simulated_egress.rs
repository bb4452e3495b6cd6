//! Egress allow-lists on the Kubernetes backend, against the SIMULATED API
//! server (tests/kube/fake_api): the NetworkPolicy of the pod's own and its
//! host names, what a policy cannot say refused before anything is made,
//! and nothing left after the run. A simulation: no CNI enforces anything
//! here; the objects are what a cluster's CNI would enforce.

#[path = "kube/mod.rs"]
mod sim;

use std::time::Duration;

use dockhand::session::SessionConfig;
use dockhand::{CacheMode, Egress, Error, ImageSpec, Sandbox};
use serde_json::{json, Value};
use sim::fake_api::{Script, Shared};
use sim::{assert_no_pods_left, with_script, IMAGE};

fn job(policy: Egress) -> Sandbox {
    Sandbox::command("fetch", "true")
        .image(ImageSpec::prebuilt(IMAGE))
        .network(policy)
        .cache(CacheMode::Disable)
        .build()
        .unwrap()
}

/// The pod's own policies the backend created, as sent.
fn own_policies(fake: &Shared) -> Vec<Value> {
    fake.record(|r| {
        r.companions_created
            .iter()
            .filter(|(kind, _)| *kind == "networkpolicies")
            .map(|(_, p)| p.clone())
            .collect()
    })
}

/// Waits (bounded) until the namespace holds no policy but the shared one.
async fn assert_only_the_shared_policy_left(fake: &Shared) {
    for _ in 0..300 {
        let left: Vec<String> = fake.record(|r| r.policies.keys().cloned().collect());
        if left == ["dockhand-offline"] {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let left: Vec<String> = fake.record(|r| r.policies.keys().cloned().collect());
    panic!("policies left behind: {left:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn simulated_one_shot_with_an_allow_list_gets_a_policy_of_its_own() {
    let (client, fake) = with_script(Script::idle()).await;
    let policy =
        Egress::allow(["localhost:8080", "203.0.113.7", "10.0.0.0/8"]).deny(["10.9.0.0/16"]);
    client
        .run(&job(policy), dockhand::NO_INPUTS)
        .await
        .expect("a run with an allow-list");
    let pod = fake.record(|r| r.created[0].clone());
    let object = pod["metadata"]["labels"]["dev.dockhand.object"].clone();
    // The namespace's deny-all selects the pod from its creation.
    assert_eq!(pod["metadata"]["labels"]["dev.dockhand.network"], "none");
    // Allowed names reach the pod as host names, resolved where dockhand runs.
    let aliases = pod["spec"]["hostAliases"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(
        aliases
            .iter()
            .any(|a| a["ip"] == "127.0.0.1" && a["hostnames"] == json!(["localhost"])),
        "{aliases:?}"
    );
    let policies = own_policies(&fake);
    assert_eq!(policies.len(), 1, "one policy of the pod's own");
    let policy = &policies[0];
    assert_eq!(
        policy["spec"]["podSelector"]["matchLabels"],
        json!({"dev.dockhand.object": object})
    );
    assert_eq!(policy["spec"]["policyTypes"], json!(["Egress"]));
    let rules = policy["spec"]["egress"].as_array().unwrap();
    let rule_for = |cidr: &str| {
        rules
            .iter()
            .find(|r| r["to"][0]["ipBlock"]["cidr"] == cidr)
            .unwrap_or_else(|| panic!("no rule for {cidr} in {rules:?}"))
            .clone()
    };
    assert_eq!(
        rule_for("10.0.0.0/8")["to"][0]["ipBlock"]["except"],
        json!(["10.9.0.0/16"])
    );
    assert!(rule_for("203.0.113.7/32")["ports"].is_null(), "every port");
    assert_eq!(
        rule_for("127.0.0.1/32")["ports"],
        json!([{"protocol": "TCP", "port": 8080}, {"protocol": "UDP", "port": 8080}])
    );
    assert!(
        rules
            .iter()
            .all(|r| r["to"][0]["ipBlock"]["cidr"] != "0.0.0.0/0"),
        "nothing else is allowed"
    );
    // Made before the pod, handed to it after, gone with it.
    let requests = fake.record(|r| r.requests.clone());
    let post_policy =
        |r: &str| r.starts_with("POST /apis/networking.k8s.io/v1/namespaces/sim/networkpolicies");
    // The first is the namespace's shared one, made at connect.
    let shared = sim::position(&requests, 0, post_policy);
    let made = sim::position(&requests, shared + 1, |r| {
        r.starts_with("POST /apis/networking.k8s.io/v1/namespaces/sim/networkpolicies")
    });
    let pod_made = sim::position(&requests, made, |r| {
        r.starts_with("POST /api/v1/namespaces/sim/pods")
    });
    sim::position(&requests, pod_made, |r| {
        r.starts_with("PATCH /apis/networking.k8s.io/v1/namespaces/sim/networkpolicies/")
    });
    assert_no_pods_left(&fake).await;
    assert_only_the_shared_policy_left(&fake).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn simulated_allow_lists_a_policy_cannot_say_are_refused_before_anything_is_made() {
    let (client, fake) = with_script(Script::idle()).await;
    for policy in [
        Egress::allow(["*.example.com"]),
        Egress::allow(["*"]).deny(["10.0.0.1:22"]),
    ] {
        let err = client
            .run(&job(policy.clone()), dockhand::NO_INPUTS)
            .await
            .unwrap_err();
        assert!(
            matches!(
                &err,
                Error::Unsupported {
                    backend: "kubernetes",
                    ..
                }
            ),
            "{policy:?}: {err:?}"
        );
    }
    let err = client
        .run(
            &job(Egress::allow(["no-such-host.invalid"])),
            dockhand::NO_INPUTS,
        )
        .await
        .unwrap_err();
    assert!(err.to_string().contains("no-such-host.invalid"), "{err}");
    let session = client.session(
        SessionConfig::new()
            .image(ImageSpec::prebuilt(IMAGE))
            .network(Egress::allow(["*.example.com"])),
    );
    let err = session.start().await.unwrap_err();
    assert!(matches!(err, Error::Unsupported { .. }), "{err:?}");
    assert!(
        fake.record(|r| r.created.is_empty() && r.companions_created.is_empty()),
        "nothing was made"
    );
    // The next run, with a policy it can say, is unaffected.
    client
        .run(&job(Egress::allow(["192.0.2.10:443"])), dockhand::NO_INPUTS)
        .await
        .expect("a run after the refusals");
    assert_eq!(own_policies(&fake).len(), 1);
    assert_no_pods_left(&fake).await;
    assert_only_the_shared_policy_left(&fake).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn simulated_session_and_pool_pods_with_an_allow_list() {
    let (client, fake) = with_script(Script::idle()).await;
    let session = client.session(
        SessionConfig::new()
            .image(ImageSpec::prebuilt(IMAGE))
            .network(Egress::allow(["localhost"])),
    );
    session.start().await.expect("a session with an allow-list");
    let pod = fake.record(|r| r.created[0].clone());
    assert_eq!(pod["metadata"]["labels"]["dev.dockhand.network"], "none");
    assert_eq!(own_policies(&fake).len(), 1);
    session.close().await.unwrap();
    assert_no_pods_left(&fake).await;
    assert_only_the_shared_policy_left(&fake).await;

    // A pool's pods each carry their own, made with them.
    let pool = client
        .pool(
            &job(Egress::allow(["192.0.2.10"])),
            dockhand::pool::PoolConfig::new(2),
        )
        .await
        .unwrap();
    assert!(pool.wait_ready(Duration::from_secs(30)).await);
    assert_eq!(
        own_policies(&fake).len(),
        3,
        "the session's and two pool pods'"
    );
    pool.run(dockhand::NO_INPUTS).await.expect("a pooled run");
    pool.shutdown().await;
    assert_no_pods_left(&fake).await;
    assert_only_the_shared_policy_left(&fake).await;
}
