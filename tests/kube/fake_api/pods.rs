//! Pods in the simulated API server: create (and the kubelet's first
//! steps), get, list, watch, delete, attach and log.

use std::collections::BTreeMap;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::ws::WebSocketUpgrade;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

use super::kubelet::{give_outputs, running, take_inputs, waiting};
use super::{agent, bridge, docker_kubelet, image_of, list, matches_labels, status_body, Shared};

pub(super) async fn create_pod(
    State(fake): State<Shared>,
    Path(ns): Path<String>,
    Json(pod): Json<Value>,
) -> Response {
    add_pod(fake, ns, pod)
}

/// Creates `pod` as the API server would, and starts its kubelet.
pub(super) fn add_pod(fake: Shared, ns: String, mut pod: Value) -> Response {
    let name = pod["metadata"]["name"].as_str().unwrap_or("").to_string();
    let image = image_of(&pod);
    // A session's or code host's pod (a one-shot's waits in its `inputs`
    // init container): its containers start at once (after its own init
    // containers, which end by themselves) and live until stopped.
    let long_lived = !pod["spec"]["initContainers"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["name"] == json!("inputs"));
    let containers: Vec<String> = pod["spec"]["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["name"].as_str().map(String::from))
        .collect();
    let exists = fake.record(|r| r.pods.contains_key(&name));
    if exists {
        return status_body(
            409,
            "AlreadyExists",
            &format!("pods \"{name}\" already exists"),
        );
    }
    let rv = fake.record(|r| {
        r.created.push(pod.clone());
        r.rv += 1;
        r.uid += 1;
        pod["metadata"]["uid"] = json!(format!("00000000-0000-0000-0000-{:012}", r.uid));
        pod["metadata"]["namespace"] = json!(ns);
        pod["metadata"]["resourceVersion"] = json!(r.rv.to_string());
        pod["metadata"]["creationTimestamp"] = json!("2026-11-26T12:00:00Z");
        pod["status"] = if long_lived {
            json!({"phase": "Pending", "qosClass": "Guaranteed",
                   "containerStatuses": containers.iter()
                       .map(|c| waiting(c, &image, "ContainerCreating", None))
                       .collect::<Vec<_>>()})
        } else {
            json!({
                "phase": "Pending", "qosClass": "Guaranteed",
                "initContainerStatuses": [waiting("inputs", &image, "PodInitializing", None)],
                "containerStatuses": [waiting("program", &image, "PodInitializing", None),
                                      waiting("outputs", &image, "PodInitializing", None)],
            })
        };
        r.pods.insert(name.clone(), pod.clone());
        r.events.push((r.rv, name.clone(), "ADDED", pod.clone()));
        r.rv
    });
    fake.changed.send_replace(rv);
    // The scheduler finds no node with room: the pod stays Pending, as a
    // real scheduler leaves it, with its reason.
    if fake.script.unschedulable {
        let scheduler = fake.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(20)).await;
            scheduler.update(&name, |pod| {
                pod["status"]["conditions"] = json!([{
                    "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                    "lastTransitionTime": "2026-11-26T12:00:00Z",
                    "message": "0/1 nodes are available: 1 Insufficient cpu. preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod.",
                }]);
            });
        });
        return (StatusCode::CREATED, Json(pod)).into_response();
    }
    // The scheduler and kubelet: the first container starts, or its image
    // cannot be pulled.
    if long_lived && fake.script.on_docker && !fake.script.image_pull_fails {
        docker_kubelet::start(fake.clone(), name.clone(), pod.clone());
        return (StatusCode::CREATED, Json(pod)).into_response();
    }
    let kubelet = fake.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(20)).await;
        // With an expiring first watch, the pod waits for that watch, so
        // the backend must live through it whatever the machine's load.
        if kubelet.script.expire_first_watch {
            for _ in 0..500 {
                if kubelet.record(|r| r.watches >= 1) {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
        let fails = kubelet.script.image_pull_fails;
        let pull_failure = |container: &str| {
            waiting(
                container,
                &image,
                "ErrImagePull",
                Some(&format!(
                    "failed to pull and unpack image \"{image}\": not found"
                )),
            )
        };
        kubelet.update(&name, |pod| {
            if long_lived {
                let statuses: Vec<Value> = containers
                    .iter()
                    .map(|c| {
                        if fails {
                            pull_failure(c)
                        } else {
                            running(c, &image)
                        }
                    })
                    .collect();
                pod["status"]["phase"] = json!(if fails { "Pending" } else { "Running" });
                pod["status"]["containerStatuses"] = json!(statuses);
                return;
            }
            pod["status"]["phase"] = json!("Pending");
            pod["status"]["initContainerStatuses"] = json!([if fails {
                pull_failure("inputs")
            } else {
                running("inputs", &image)
            }]);
        });
    });
    (StatusCode::CREATED, Json(pod)).into_response()
}

pub(super) async fn list_or_watch_pods(
    State(fake): State<Shared>,
    Query(q): Query<BTreeMap<String, String>>,
) -> Response {
    if q.get("watch").map(String::as_str) != Some("true") {
        let (items, rv) = fake.record(|r| {
            let items = r
                .pods
                .values()
                .filter(|p| matches_labels(p, q.get("labelSelector")))
                .cloned()
                .collect();
            (items, r.rv)
        });
        return list("PodList", items, rv).into_response();
    }
    // A watch names one pod (`fieldSelector`), or every pod its labels
    // select (the shared watch of a client's pods).
    let name = q
        .get("fieldSelector")
        .and_then(|f| f.strip_prefix("metadata.name="))
        .map(str::to_string);
    let selector = q.get("labelSelector").cloned();
    let since: u64 = q
        .get("resourceVersion")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let first = fake.record(|r| {
        r.watches += 1;
        r.watches == 1
    });
    if first && fake.script.expire_first_watch {
        let line = json!({"type": "ERROR", "object": {"kind": "Status", "apiVersion": "v1", "metadata": {},
            "status": "Failure", "message": format!("too old resource version: {since} (999)"),
            "reason": "Expired", "code": 410}});
        return Body::from(format!("{line}\n")).into_response();
    }
    let changed = fake.changed.subscribe();
    let wanted = move |n: &str, pod: &serde_json::Value| match &name {
        Some(name) => n == name,
        None => matches_labels(pod, selector.as_ref()),
    };
    Body::from_stream(events_after(fake.clone(), wanted, since, changed)).into_response()
}

/// The watch's events of the pods `wanted` picks after version `since`,
/// then each new one.
pub(super) fn events_after(
    fake: Shared,
    wanted: impl Fn(&str, &serde_json::Value) -> bool + Clone + Send + 'static,
    since: u64,
    changed: tokio::sync::watch::Receiver<u64>,
) -> impl futures::Stream<Item = Result<Bytes, std::convert::Infallible>> {
    futures::stream::unfold(
        (fake, since, changed),
        move |(fake, mut seen, mut changed)| {
            let wanted = wanted.clone();
            async move {
                loop {
                    let next = fake.record(|r| {
                        r.events
                            .iter()
                            .find(|(rv, n, _, pod)| *rv > seen && wanted(n, pod))
                            .map(|(rv, _, kind, pod)| (*rv, json!({"type": kind, "object": pod})))
                    });
                    if let Some((rv, event)) = next {
                        seen = rv;
                        let line = Bytes::from(format!("{event}\n"));
                        return Some((Ok(line), (fake, seen, changed)));
                    }
                    tokio::select! {
                        _ = changed.changed() => {}
                        _ = tokio::time::sleep(Duration::from_millis(50)) => {}
                    }
                }
            }
        },
    )
}

pub(super) async fn get_pod(
    State(fake): State<Shared>,
    Path((_, name)): Path<(String, String)>,
) -> Response {
    match fake.record(|r| r.pods.get(&name).cloned()) {
        Some(pod) => Json(pod).into_response(),
        None => status_body(404, "NotFound", &format!("pods \"{name}\" not found")),
    }
}

pub(super) async fn delete_pod(
    State(fake): State<Shared>,
    Path((_, name)): Path<(String, String)>,
) -> Response {
    match fake.remove_pod(&name) {
        Some(pod) => Json(pod).into_response(),
        None => status_body(404, "NotFound", &format!("pods \"{name}\" not found")),
    }
}

pub(super) async fn attach(
    State(fake): State<Shared>,
    Path((_, name)): Path<(String, String)>,
    Query(q): Query<BTreeMap<String, String>>,
    upgrade: WebSocketUpgrade,
) -> Response {
    let container = q.get("container").cloned().unwrap_or_default();
    let state = fake.record(|r| r.pods.get(&name).cloned());
    let Some(pod) = state else {
        return status_body(404, "NotFound", &format!("pods \"{name}\" not found"));
    };
    let is_running = [
        &pod["status"]["initContainerStatuses"],
        &pod["status"]["containerStatuses"],
    ]
    .iter()
    .filter_map(|list| list.as_array())
    .flatten()
    .any(|c| c["name"] == json!(container) && c["state"]["running"].is_object());
    if !is_running {
        return status_body(
            400,
            "BadRequest",
            &format!("container {container} is not running"),
        );
    }
    upgrade
        .protocols(["v5.channel.k8s.io", "v4.channel.k8s.io"])
        .on_upgrade(move |socket| async move {
            if fake.script.on_docker && fake.docker.lock().unwrap().contains_key(&name) {
                return docker_kubelet::attach(fake, name, socket).await;
            }
            match container.as_str() {
                "inputs" => take_inputs(fake, name, socket).await,
                "outputs" => give_outputs(fake, name, socket).await,
                "agent" => agent::converse(fake, name, socket).await,
                "bridge" => bridge::converse(fake, name, socket).await,
                _ => {}
            }
        })
}

pub(super) async fn log(
    State(fake): State<Shared>,
    Path((_, name)): Path<(String, String)>,
) -> Response {
    // As with `follow=true`: the body ends when the container does.
    loop {
        let (done, text) = fake.record(|r| {
            let pod = r.pods.get(&name);
            let ended = pod.is_none_or(|p| {
                let phase = p["status"]["phase"].as_str().unwrap_or("");
                phase == "Failed"
                    || phase == "Unknown"
                    || p["status"]["containerStatuses"][0]["state"]["terminated"].is_object()
            });
            (ended, r.logs.get(&name).cloned().unwrap_or_default())
        });
        if done {
            return text.into_response();
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
