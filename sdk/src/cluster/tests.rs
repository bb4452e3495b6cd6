//! How the backend reads pods and leases: pure logic, no API server.

use k8s_openapi::api::core::v1::Pod;
use serde_json::json;

use super::PodView;
use crate::error::ClusterError;

fn pod(status: serde_json::Value) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": "p"},
        "spec": {"containers": [{"name": "program", "image": "img:1"}]},
        "status": status,
    }))
    .unwrap()
}

fn waiting(reason: &str) -> serde_json::Value {
    json!({"name": "program", "image": "img:1", "imageID": "", "ready": false, "restartCount": 0,
           "state": {"waiting": {"reason": reason, "message": "m"}}})
}

#[test]
fn a_running_pod_has_no_failure_and_its_exit_is_read_from_the_kubelet() {
    let p = pod(json!({"phase": "Running", "containerStatuses": [
        {"name": "program", "image": "img:1", "imageID": "", "ready": false, "restartCount": 0,
         "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}]}));
    let view = PodView::new(&p);
    assert!(view.failure("program").is_none());
    assert_eq!(view.terminated("program"), Some((137, "OOMKilled".into())));
    assert!(!view.running("program"));
}

#[test]
fn image_pull_and_create_errors_are_told_apart() {
    for reason in ["ErrImagePull", "ImagePullBackOff", "InvalidImageName"] {
        let p = pod(json!({"phase": "Pending", "containerStatuses": [waiting(reason)]}));
        match PodView::new(&p).failure("program") {
            Some(ClusterError::ImagePull {
                image, reason: r, ..
            }) => {
                assert_eq!((image.as_str(), r.as_str()), ("img:1", reason))
            }
            other => panic!("{reason}: {other:?}"),
        }
    }
    let p = pod(
        json!({"phase": "Pending", "containerStatuses": [waiting("CreateContainerConfigError")]}),
    );
    assert!(matches!(
        PodView::new(&p).failure("program"),
        Some(ClusterError::PodFailed { .. })
    ));
    // Still starting: no failure.
    let p = pod(json!({"phase": "Pending", "containerStatuses": [waiting("ContainerCreating")]}));
    assert!(PodView::new(&p).failure("program").is_none());
}

#[test]
fn the_clusters_reasons_come_before_an_exit_code() {
    let evicted = pod(
        json!({"phase": "Failed", "reason": "Evicted", "message": "low on memory",
        "containerStatuses": [{"name": "program", "image": "img:1", "imageID": "", "ready": false,
            "restartCount": 0, "state": {"terminated": {"exitCode": 137}}}]}),
    );
    assert!(matches!(
        PodView::new(&evicted).failure("program"),
        Some(ClusterError::Evicted { .. })
    ));
    let unknown = pod(json!({"phase": "Unknown"}));
    assert!(matches!(
        PodView::new(&unknown).failure("program"),
        Some(ClusterError::NodeLost { .. })
    ));
    let tainted = pod(json!({"phase": "Running", "conditions": [
        {"type": "DisruptionTarget", "status": "True", "reason": "DeletionByTaintManager", "message": "node gone"}]}));
    assert!(matches!(
        PodView::new(&tainted).failure("program"),
        Some(ClusterError::NodeLost { .. })
    ));
    let preempted = pod(json!({"phase": "Running", "conditions": [
        {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}]}));
    assert!(matches!(
        PodView::new(&preempted).failure("program"),
        Some(ClusterError::Evicted { .. })
    ));
    let deadline =
        pod(json!({"phase": "Failed", "reason": "DeadlineExceeded", "message": "too long"}));
    match PodView::new(&deadline).failure("program") {
        Some(ClusterError::PodFailed { reason, .. }) => assert_eq!(reason, "DeadlineExceeded"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn backend_env_values() {
    // Read through a helper so the process environment is not touched.
    assert!(super::config::backend_choice("").unwrap().is_none());
    assert!(super::config::backend_choice("docker").unwrap().is_none());
    assert!(super::config::backend_choice("kubernetes")
        .unwrap()
        .is_some());
    assert!(super::config::backend_choice("k8s").unwrap().is_some());
    let err = super::config::backend_choice("nomad").unwrap_err();
    assert!(
        err.to_string().contains("`nomad` is not a backend"),
        "{err}"
    );
}
