//! A sandbox that may reach one API and nothing else, with a key it cannot
//! read.
//!
//! A local test API (a container on a network of this example's own, with a
//! certificate from a throwaway CA) stands in for a real one. The sandbox is
//! allowed `api.example.test` only; its `API_KEY` holds a placeholder, which
//! dockhand's egress gateway swaps for the real key on requests to that host
//! alone. The code prints what it sees: the placeholder, a 200 from the API
//! (which says it got the real key), and a refusal for any other host.
//!
//! ```text
//! cargo run --example egress
//! ```

#[path = "../tests/common/egress_servers.rs"]
mod egress_servers;

use dockhand::{Client, Egress, ImageSpec, Sandbox, Secret};

const CODE: &str = r#"
import hashlib, json, os, urllib.request, urllib.error
key = os.environ["API_KEY"]
print("API_KEY inside the sandbox:", key)
request = urllib.request.Request("https://api.example.test/v1/models", headers={"Authorization": "Bearer " + key})
with urllib.request.urlopen(request, timeout=10) as r:
    answer = json.loads(r.read())
print("api.example.test answered", r.status)
print("the API received the real key:", answer["auth_sha256"] == os.environ["REAL_KEY_SHA256"])
for url in ["https://other.example.test/", "https://pypi.org/simple/"]:
    try:
        urllib.request.urlopen(url, timeout=10)
        print(url, "reached (it should not be)")
    except urllib.error.HTTPError as e:
        print(url, "refused:", e.code, e.read().decode().strip())
    except Exception as e:
        print(url, "refused:", e)
"#;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let base = Client::connect().await?;
    let image = base.resolve_image(&ImageSpec::default()).await?;
    let api = egress_servers::TestServers::start(&image.reference);
    // The gateway reaches the test API on its network, and trusts its CA.
    let client = Client::builder()
        .egress_network(&api.network)
        .egress_trust(&api.ca_pem)
        .connect()
        .await?;

    let real_key = "sk-example-not-for-the-sandbox";
    let real_sha = sha256_hex(&format!("Bearer {real_key}"));
    let call = Sandbox::code("egress-example", CODE)
        .verbatim()
        .env("REAL_KEY_SHA256", real_sha)
        .network(Egress::allow(["api.example.test"]))
        .secret(Secret::for_hosts("API_KEY", real_key, ["api.example.test"]))
        .build()?;
    let out = client.run(&call, dockhand::NO_INPUTS).await?;
    print!("{}", out.stdout.text);
    assert!(
        !out.stdout.text.contains(real_key),
        "the key reached the sandbox"
    );
    Ok(())
}

fn sha256_hex(text: &str) -> String {
    use std::io::Write;
    let mut child = std::process::Command::new("sha256sum")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("sha256sum");
    if let Some(mut stdin) = child.stdin.take() {
        let _ = stdin.write_all(text.as_bytes());
    }
    let out = child.wait_with_output().expect("sha256sum");
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_string()
}
