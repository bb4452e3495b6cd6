//! The scripted kubelet: container states, the inputs it takes over the
//! `inputs` container's stdin, the outputs it gives over `outputs`' stdout.

use std::time::Duration;

use axum::body::Bytes;
use axum::extract::ws::{Message, WebSocket};
use serde_json::{json, Value};

use super::{image_of, Files, Outcome, Shared};

pub(super) fn waiting(name: &str, image: &str, reason: &str, message: Option<&str>) -> Value {
    let mut state = json!({"reason": reason});
    if let Some(m) = message {
        state["message"] = json!(m);
    }
    json!({"name": name, "image": image, "imageID": "", "ready": false, "restartCount": 0,
           "state": {"waiting": state}})
}

pub(super) fn running(name: &str, image: &str) -> Value {
    json!({"name": name, "image": image, "imageID": "", "ready": true, "restartCount": 0,
           "started": true, "state": {"running": {"startedAt": "2026-11-26T12:00:00Z"}}})
}

pub(super) fn terminated(name: &str, image: &str, code: i32, reason: &str) -> Value {
    json!({"name": name, "image": image, "imageID": "", "ready": false, "restartCount": 0,
           "state": {"terminated": {"exitCode": code, "reason": reason,
             "startedAt": "2026-11-26T12:00:00Z", "finishedAt": "2026-11-26T12:00:01Z"}}})
}

/// Reads stdin until the client closes it.
async fn read_stdin(socket: &mut WebSocket, until_newline: bool) -> Vec<u8> {
    let mut data = Vec::new();
    while let Some(Ok(message)) = socket.recv().await {
        match message {
            Message::Binary(b) if b.first() == Some(&0) => {
                data.extend_from_slice(&b[1..]);
                if until_newline && data.contains(&b'\n') {
                    break;
                }
            }
            // v5: stdin closed.
            Message::Binary(b) if b.as_ref() == [255, 0] => break,
            Message::Close(_) => break,
            _ => {}
        }
    }
    data
}

pub(super) async fn take_inputs(fake: Shared, name: String, mut socket: WebSocket) {
    let sent = read_stdin(&mut socket, false).await;
    let _ = socket.send(Message::Close(None)).await;
    // A pool's pod reads the attempt number on a line of its own first,
    // as its `inputs` command says, and writes it where its program reads it.
    let warm = fake.record(|r| {
        r.raw_inputs.insert(name.clone(), sent.clone());
        r.pods.get(&name).is_some_and(|p| {
            p["spec"]["initContainers"][0]["command"]
                .to_string()
                .contains("read -r attempt")
        })
    });
    let mut files = Files::new();
    let tar = match warm {
        true => {
            let end = sent
                .iter()
                .position(|b| *b == b'\n')
                .map_or(sent.len(), |i| i + 1);
            files.insert(".dockhand/attempt".into(), sent[..end].to_vec());
            &sent[end..]
        }
        false => &sent[..],
    };
    let mut archive = tar::Archive::new(tar);
    for entry in archive.entries().unwrap() {
        let mut entry = entry.unwrap();
        if entry.header().entry_type().is_file() {
            let path = entry.path().unwrap().to_string_lossy().into_owned();
            let mut bytes = Vec::new();
            std::io::Read::read_to_end(&mut entry, &mut bytes).unwrap();
            files.insert(path, bytes);
        }
    }
    fake.record(|r| r.inputs.insert(name.clone(), files.clone()));
    let image = fake
        .record(|r| r.pods.get(&name).map(image_of))
        .unwrap_or_default();
    fake.update(&name, |pod| {
        pod["status"]["phase"] = json!("Running");
        pod["status"]["initContainerStatuses"] =
            json!([terminated("inputs", &image, 0, "Completed")]);
        pod["status"]["containerStatuses"] =
            json!([running("program", &image), running("outputs", &image)]);
    });
    tokio::time::sleep(Duration::from_millis(30)).await;
    match fake.script.outcome.clone() {
        Outcome::Exit {
            code,
            reason,
            log,
            produce,
        } => {
            let outputs = produce(&files);
            fake.record(|r| {
                r.logs.insert(name.clone(), log);
                r.inputs
                    .insert(format!("{name}/outputs"), outputs.into_iter().collect());
            });
            fake.update(&name, |pod| {
                pod["status"]["containerStatuses"] = json!([
                    terminated("program", &image, code, reason),
                    running("outputs", &image)
                ]);
            });
        }
        Outcome::Evicted => fake.update(&name, |pod| {
            pod["status"]["phase"] = json!("Failed");
            pod["status"]["reason"] = json!("Evicted");
            pod["status"]["message"] = json!(
                "The node was low on resource: memory. Threshold quantity: 100Mi, available: 20Mi."
            );
            pod["status"]["containerStatuses"] = json!([
                terminated("program", &image, 137, "Error"),
                terminated("outputs", &image, 137, "Error")
            ]);
        }),
        Outcome::NodeLost => fake.update(&name, |pod| {
            pod["status"]["phase"] = json!("Unknown");
            pod["status"]["reason"] = json!("NodeLost");
            pod["status"]["message"] = json!(format!(
                "Node kind-worker which was running pod {name} is unresponsive"
            ));
        }),
        Outcome::Deleted => {
            fake.remove_pod(&name);
        }
        Outcome::Hang => {}
    }
}

/// The `outputs` container: each line but `go` answered `ready <line>`,
/// then the tar. As containerd can, it loses what it prints at first (the
/// answer to the first line): stdout is wired after stdin.
pub(super) async fn give_outputs(fake: Shared, name: String, mut socket: WebSocket) {
    let mut pending = Vec::new();
    let mut lines = 0;
    'go: loop {
        let more = read_stdin(&mut socket, true).await;
        if more.is_empty() {
            return;
        }
        pending.extend_from_slice(&more);
        while let Some(end) = pending.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = pending.drain(..=end).collect();
            let line = String::from_utf8_lossy(&line[..end]).to_string();
            if line == "go" {
                break 'go;
            }
            lines += 1;
            if lines > 1 {
                let mut frame = vec![1u8];
                frame.extend_from_slice(format!("ready {line}\n").as_bytes());
                let _ = socket.send(Message::Binary(frame.into())).await;
            }
        }
    }
    fake.record(|r| r.output_pings.push((name.clone(), lines)));
    let files = fake
        .record(|r| r.inputs.get(&format!("{name}/outputs")).cloned())
        .unwrap_or_default();
    // As `tar -c -f - -C /var outputs` writes it.
    let mut builder = tar::Builder::new(Vec::new());
    let mut dir = tar::Header::new_gnu();
    dir.set_entry_type(tar::EntryType::Directory);
    dir.set_mode(0o777);
    dir.set_size(0);
    builder
        .append_data(&mut dir, "outputs/", std::io::empty())
        .unwrap();
    for (path, bytes) in &files {
        let mut header = tar::Header::new_gnu();
        header.set_mode(0o644);
        header.set_size(bytes.len() as u64);
        builder
            .append_data(&mut header, format!("outputs/{path}"), &bytes[..])
            .unwrap();
    }
    let tar = builder.into_inner().unwrap();
    for chunk in tar.chunks(4096) {
        let mut frame = vec![1u8];
        frame.extend_from_slice(chunk);
        let _ = socket.send(Message::Binary(frame.into())).await;
    }
    let status = format!("\u{3}{}", json!({"metadata": {}, "status": "Success"}));
    let _ = socket
        .send(Message::Binary(Bytes::from(status.into_bytes())))
        .await;
    let _ = socket.send(Message::Close(None)).await;
}

/// Serves a JSON-lines program (a scripted agent or bridge) on an attach
/// stream: each request goes to `answer`, each answer back on stdout. When
/// stdin closes the program ends, and with `stdinOnce` so does `container`.
pub(super) async fn converse_lines(
    fake: &Shared,
    pod: &str,
    container: &str,
    mut socket: WebSocket,
    mut answer: impl FnMut(&Value) -> Option<Value>,
) {
    let mut pending = Vec::new();
    'talk: while let Some(Ok(message)) = socket.recv().await {
        match message {
            Message::Binary(b) if b.first() == Some(&0) => {
                pending.extend_from_slice(&b[1..]);
                while let Some(end) = pending.iter().position(|&c| c == b'\n') {
                    let line: Vec<u8> = pending.drain(..=end).collect();
                    let Ok(request) = serde_json::from_slice::<Value>(&line) else {
                        continue;
                    };
                    let first = fake.record(|r| {
                        r.agent_requests.push((pod.to_string(), request.clone()));
                        r.agent_requests.iter().filter(|(p, _)| p == pod).count() == 1
                    });
                    // As containerd's attach can, the first answer is lost
                    // (stdout is wired after stdin).
                    if let Some(reply) = answer(&request).filter(|_| !first) {
                        let mut frame = vec![1u8];
                        frame.extend_from_slice(format!("{reply}\n").as_bytes());
                        if socket
                            .send(Message::Binary(Bytes::from(frame)))
                            .await
                            .is_err()
                        {
                            break 'talk;
                        }
                    }
                }
            }
            // v5: stdin closed.
            Message::Binary(b) if b.as_ref() == [255, 0] => break,
            Message::Close(_) => break,
            _ => {}
        }
    }
    let _ = socket.send(Message::Close(None)).await;
    let image = fake
        .record(|r| r.pods.get(pod).map(image_of))
        .unwrap_or_default();
    fake.update(pod, |p| {
        p["status"]["phase"] = json!("Succeeded");
        p["status"]["containerStatuses"] = json!([terminated(container, &image, 0, "Completed")]);
    });
}
