//! A kubelet that runs a long-lived pod's init containers (each to its end)
//! and then its container as real Docker containers (`Script::on_docker`): the session agent, the code host's
//! bridge and a kernel's relay are then dockhand's real programs, spoken to
//! through the simulated API server's attach WebSocket.
//!
//! What it takes from the pod spec: the image (a local tag), command, args,
//! env (`secretKeyRef` values read from the simulated Secrets), working
//! directory, user and group, `fsGroup`, read-only root, dropped
//! capabilities, and its volumes: emptyDirs as directories of its own, ConfigMaps and
//! Secrets as read-only bind mounts of their files, claims as the simulated
//! node's directory of each. Like a kubelet it
//! starts the container before anyone attaches: what the container prints
//! before the attach goes to the log, not to the stream. Its stdin is
//! taken by the first attach and closed when that attach ends (`stdinOnce`).
//! Containers carry the label `dev.dockhand.kube-sim` and go with their pod.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::ws::{Message, WebSocket};
use serde_json::{json, Value};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::ChildStdin;
use tokio::sync::mpsc;

use super::kubelet::{running, terminated};
use super::{image_of, Shared};

/// Where a running container's output goes: nowhere until an attach.
type Tap = Arc<Mutex<Option<mpsc::UnboundedSender<(u8, Bytes)>>>>;

/// A pod's container on Docker.
pub struct DockerPod {
    stdin: Option<ChildStdin>,
    tap: Tap,
    _files: tempfile::TempDir,
}

fn container_name(pod: &str) -> String {
    format!("kubesim-{pod}")
}

/// Removes a pod's container (deleted pod, or the server going away).
pub fn remove_container(pod: &str) {
    let _ = std::process::Command::new("docker")
        .args(["rm", "-f", &container_name(pod)])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

/// `docker run` arguments for `container` of the pod, as the Docker
/// container `name`; files of its volumes go under `files` (one directory
/// per volume, so an init container and the main one share emptyDirs).
fn run_args(
    fake: &Shared,
    pod: &Value,
    container: &Value,
    name: &str,
    files: &std::path::Path,
) -> Vec<String> {
    let security = &container["securityContext"];
    let mut args: Vec<String> = [
        "run",
        "-i",
        "--rm",
        "--network",
        "none",
        "--cap-drop",
        "ALL",
        "--security-opt",
        "no-new-privileges",
        "--label",
        "dev.dockhand.kube-sim=true",
        "--name",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.push(name.to_string());
    // A kubelet names a pod's host after the pod.
    if let Some(pod_name) = pod["metadata"]["name"].as_str() {
        args.extend(["--hostname".into(), pod_name.to_string()]);
    }
    if let Some(uid) = security["runAsUser"].as_i64() {
        let gid = security["runAsGroup"].as_i64().unwrap_or(uid);
        args.extend(["--user".into(), format!("{uid}:{gid}")]);
    }
    if let Some(group) = pod["spec"]["securityContext"]["fsGroup"].as_i64() {
        args.extend(["--group-add".into(), group.to_string()]);
    }
    if security["readOnlyRootFilesystem"] == json!(true) {
        args.push("--read-only".into());
    }
    if let Some(dir) = container["workingDir"].as_str() {
        args.extend(["-w".into(), dir.into()]);
    }
    for env in container["env"].as_array().into_iter().flatten() {
        let key = env["name"].as_str().unwrap_or("");
        let value = match env["value"].as_str() {
            Some(v) => v.to_string(),
            None => {
                let r = &env["valueFrom"]["secretKeyRef"];
                secret_value(
                    fake,
                    r["name"].as_str().unwrap_or(""),
                    r["key"].as_str().unwrap_or(""),
                )
            }
        };
        args.extend(["-e".into(), format!("{key}={value}")]);
    }
    let volumes: BTreeMap<&str, &Value> = pod["spec"]["volumes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| Some((v["name"].as_str()?, v)))
        .collect();
    let group = pod["spec"]["securityContext"]["fsGroup"].as_u64();
    for mount in container["volumeMounts"].as_array().into_iter().flatten() {
        let path = mount["mountPath"].as_str().unwrap_or("");
        let Some(volume) = mount["name"].as_str().and_then(|n| volumes.get(n)) else {
            continue;
        };
        if let Some(claim) = volume["persistentVolumeClaim"]["claimName"].as_str() {
            let dir = fake.claim_dir(claim);
            let read_only = mount["readOnly"] == json!(true)
                || volume["persistentVolumeClaim"]["readOnly"] == json!(true);
            let mode = if read_only { ":ro" } else { "" };
            args.extend(["-v".into(), format!("{}:{path}{mode}", dir.display())]);
            continue;
        }
        let dir = files.join(mount["name"].as_str().unwrap_or("volume"));
        let made = dir.exists();
        std::fs::create_dir_all(&dir).unwrap();
        if volume.get("emptyDir").is_some() {
            // A directory of the node's, writable by every user, as an
            // emptyDir is (a tmpfs would take the mode of a working
            // directory Docker made under it).
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o1777)).unwrap();
            let mode = if mount["readOnly"] == json!(true) {
                ":ro"
            } else {
                ""
            };
            args.extend(["-v".into(), format!("{}:{path}{mode}", dir.display())]);
            continue;
        }
        if made {
            args.extend(["-v".into(), format!("{}:{path}:ro", dir.display())]);
            continue;
        }
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        if let Some(map) = volume.get("configMap") {
            let data = fake.record(|r| {
                r.config_maps
                    .get(map["name"].as_str().unwrap_or(""))
                    .map(|m| m["data"].clone())
                    .unwrap_or_default()
            });
            for (file, text) in data.as_object().into_iter().flatten() {
                let path = dir.join(file);
                std::fs::write(&path, text.as_str().unwrap_or("")).unwrap();
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o444)).unwrap();
            }
        } else if let Some(secret) = volume.get("secret") {
            let object = secret["secretName"].as_str().unwrap_or("");
            for item in secret["items"].as_array().into_iter().flatten() {
                let value = secret_value(fake, object, item["key"].as_str().unwrap_or(""));
                let path = dir.join(item["path"].as_str().unwrap_or(""));
                std::fs::write(&path, value).unwrap();
                let mode = item["mode"].as_u64().unwrap_or(0o440) as u32;
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
                if let Some(gid) = group {
                    std::os::unix::fs::chown(&path, Some(0), Some(gid as u32)).unwrap();
                }
            }
        }
        args.extend(["-v".into(), format!("{}:{path}:ro", dir.display())]);
    }
    let mut command: Vec<String> = container["command"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c.as_str().map(String::from))
        .collect();
    if !command.is_empty() {
        args.extend(["--entrypoint".into(), command.remove(0)]);
    }
    args.push(container["image"].as_str().unwrap_or("").to_string());
    args.extend(command);
    args.extend(
        container["args"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| c.as_str().map(String::from)),
    );
    args
}

fn secret_value(fake: &Shared, object: &str, key: &str) -> String {
    fake.record(|r| {
        r.secrets
            .get(object)
            .and_then(|s| s["stringData"][key].as_str().map(String::from))
            .unwrap_or_default()
    })
}

/// Copies what `from` gives to the tap (on `channel`) while one is set.
async fn pump(mut from: impl AsyncRead + Unpin, channel: u8, tap: Tap) {
    let mut buffer = vec![0u8; 64 * 1024];
    loop {
        match from.read(&mut buffer).await {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                if let Some(tx) = tap.lock().unwrap().as_ref() {
                    let _ = tx.send((channel, Bytes::copy_from_slice(&buffer[..n])));
                }
            }
        }
    }
}

/// Starts pod `name`'s container and moves the pod's status along with it.
pub(super) fn start(fake: Shared, name: String, pod: Value) {
    let container = pod["spec"]["containers"][0]["name"]
        .as_str()
        .unwrap_or("main")
        .to_string();
    let image = image_of(&pod);
    tokio::spawn(async move {
        let files = tempfile::tempdir().unwrap();
        std::fs::set_permissions(files.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        // Init containers first, each to its end, as a kubelet runs them.
        let inits = pod["spec"]["initContainers"].as_array().cloned();
        for (i, init) in inits.iter().flatten().enumerate() {
            let args = run_args(
                &fake,
                &pod,
                init,
                &format!("{}-init{i}", container_name(&name)),
                files.path(),
            );
            let ran = tokio::process::Command::new("docker")
                .args(&args)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .kill_on_drop(true)
                .status()
                .await;
            let code = ran.ok().and_then(|s| s.code()).unwrap_or(137);
            if code != 0 {
                fake.update(&name, |p| {
                    p["status"]["phase"] = json!("Failed");
                    p["status"]["initContainerStatuses"] = json!([terminated(
                        init["name"].as_str().unwrap_or("init"),
                        init["image"].as_str().unwrap_or(""),
                        code,
                        "Error"
                    )]);
                });
                return;
            }
        }
        let main = pod["spec"]["containers"][0].clone();
        let args = run_args(&fake, &pod, &main, &container_name(&name), files.path());
        let mut child = tokio::process::Command::new("docker")
            .args(&args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("the docker CLI runs");
        let tap: Tap = Arc::new(Mutex::new(None));
        let out = tokio::spawn(pump(child.stdout.take().unwrap(), 1, tap.clone()));
        let err = tokio::spawn(pump(child.stderr.take().unwrap(), 2, tap.clone()));
        let ended = tap.clone();
        fake.docker.lock().unwrap().insert(
            name.clone(),
            DockerPod {
                stdin: child.stdin.take(),
                tap,
                _files: files,
            },
        );
        // Running once Docker says so (or ended, if it ended first).
        let id = container_name(&name);
        for _ in 0..600 {
            let state = tokio::process::Command::new("docker")
                .args(["inspect", "-f", "{{.State.Running}}", &id])
                .output()
                .await
                .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "true")
                .unwrap_or(false);
            if state {
                fake.update(&name, |p| {
                    p["status"]["phase"] = json!("Running");
                    p["status"]["containerStatuses"] = json!([running(&container, &image)]);
                });
                break;
            }
            if let Ok(Some(_)) = child.try_wait() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let code = child
            .wait()
            .await
            .ok()
            .and_then(|s| s.code())
            .unwrap_or(137);
        // Its last words reach the attach, then the attach ends.
        let _ = tokio::join!(out, err);
        ended.lock().unwrap().take();
        fake.update(&name, |p| {
            p["status"]["phase"] = json!(if code == 0 { "Succeeded" } else { "Failed" });
            let reason = if code == 0 { "Completed" } else { "Error" };
            p["status"]["containerStatuses"] =
                json!([terminated(&container, &image, code, reason)]);
        });
    });
}

/// An attach to a Docker-backed pod: the WebSocket's stdin frames to the
/// container's stdin (taken once), its output to the WebSocket.
pub(super) async fn attach(fake: Shared, name: String, mut socket: WebSocket) {
    let (stdin, tap) = {
        let mut pods = fake.docker.lock().unwrap();
        let Some(pod) = pods.get_mut(&name) else {
            return;
        };
        (pod.stdin.take(), pod.tap.clone())
    };
    let (tx, mut rx) = mpsc::unbounded_channel();
    *tap.lock().unwrap() = Some(tx);
    let mut stdin = stdin;
    loop {
        tokio::select! {
            out = rx.recv() => {
                let Some((channel, data)) = out else { break };
                let mut frame = vec![channel];
                frame.extend_from_slice(&data);
                if socket.send(Message::Binary(Bytes::from(frame))).await.is_err() {
                    break;
                }
            }
            message = socket.recv() => match message {
                Some(Ok(Message::Binary(b))) if b.first() == Some(&0) => {
                    if let Some(input) = stdin.as_mut() {
                        if input.write_all(&b[1..]).await.is_err() {
                            stdin = None;
                        }
                    }
                }
                // v5: stdin closed.
                Some(Ok(Message::Binary(b))) if b.as_ref() == [255, 0] => stdin = None,
                Some(Ok(Message::Close(_))) | None | Some(Err(_)) => break,
                _ => {}
            },
        }
    }
    // stdinOnce: the attach that took stdin closes it when it ends.
    drop(stdin);
    *tap.lock().unwrap() = None;
    let _ = socket.send(Message::Close(None)).await;
}
