//! What the simulated Kubernetes tests share: the SIMULATED API server and
//! a client connected to it.
#![allow(dead_code)]

pub mod fake_api;

use std::sync::Arc;
use std::time::Duration;

use dockhand::{CacheMode, Client, ImageSpec, KubeConfig, Sandbox, SandboxBuilder, Type, Value};
use fake_api::{Files, Script, Shared};

/// The image the simulated pods "run" (nothing is pulled).
pub const IMAGE: &str = "registry.example/tools:1";

/// A client of the simulated server's namespace `sim`.
pub async fn connect(url: &str) -> dockhand::Result<Client> {
    Client::builder()
        .kubernetes(KubeConfig::url(url).namespace("sim"))
        .cache_dir(std::env::temp_dir().join("dockhand-kube-sim-cache"))
        .connect()
        .await
}

/// A simulated server acting out `script`, and a client of it.
pub async fn with_script(script: Script) -> (Client, Shared) {
    let (url, fake) = fake_api::start("sim", script).await;
    let client = connect(&url)
        .await
        .expect("connect to the simulated API server");
    (client, fake)
}

/// Waits (bounded: 6 s, past the guards' retried deletes at 1 s and 5 s)
/// until the simulated namespace holds no pod.
pub async fn assert_no_pods_left(fake: &Shared) {
    for _ in 0..300 {
        if fake.record(|r| r.pods.is_empty()) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let left: Vec<String> = fake.record(|r| r.pods.keys().cloned().collect());
    panic!("pods left behind: {left:?}");
}

/// The index of the first request at or after `from` that `wanted` accepts.
pub fn position(requests: &[String], from: usize, wanted: impl Fn(&str) -> bool) -> usize {
    requests[from..]
        .iter()
        .position(|r| wanted(r))
        .map(|i| i + from)
        .unwrap_or_else(|| panic!("no request after #{from} as expected in {requests:#?}"))
}

/// A host tool that adds its two int arguments.
pub fn add_tool() -> dockhand::codemode::Toolset {
    use dockhand::codemode::{ParamType, Tool, Toolset};
    Toolset::new().tool(
        Tool::new("add", "Adds.")
            .param("a", ParamType::Int, "")
            .param("b", ParamType::Int, "")
            .handler(|args| async move {
                Ok(serde_json::json!(
                    args["a"].as_i64().unwrap_or(0) + args["b"].as_i64().unwrap_or(0)
                ))
            }),
    )
}

/// Counts the non-empty lines of its File input, as `grep -c .` would.
pub fn count_lines() -> Sandbox {
    count_lines_with(|b| b)
}

/// [`count_lines`] with more settings (retries, a timeout).
pub fn count_lines_with(more: impl FnOnce(SandboxBuilder) -> SandboxBuilder) -> Sandbox {
    more(
        Sandbox::command("count", "sh")
            .args(["-c", "grep -c . {{text}} > /var/outputs/lines"])
            .input("text", Type::File)
            .output("lines", Type::Int)
            .image(ImageSpec::prebuilt(IMAGE))
            .cache(CacheMode::Disable),
    )
    .build()
    .unwrap()
}

/// The scripted program: what `count_lines` would write, from the inputs it got.
pub fn counting() -> fake_api::Produce {
    Arc::new(|files: &Files| {
        let text = files
            .iter()
            .find(|(path, _)| path.trim_start_matches("./") == "text")
            .map(|(_, bytes)| bytes.clone())
            .unwrap_or_default();
        let n = String::from_utf8_lossy(&text)
            .lines()
            .filter(|l| !l.is_empty())
            .count();
        vec![("lines".to_string(), format!("{n}\n").into_bytes())]
    })
}

pub fn text_file(dir: &tempfile::TempDir, text: &str) -> Value {
    let path = dir.path().join("notes.txt");
    std::fs::write(&path, text).unwrap();
    Value::file(path)
}
