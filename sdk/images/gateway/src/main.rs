//! dockhand's egress gateway: the only way out of sandboxes that have a
//! network allow-list.
//!
//! Each such sandbox sits alone on an internal Docker network with no route
//! out; this gateway is attached to it and to the outside. On each of those
//! networks it answers DNS (listed names resolve to the gateway itself,
//! others do not exist), proxies HTTP (port 3128, for proxy-aware clients),
//! and intercepts ports 80 and 443 transparently (by Host header and TLS
//! server name, for clients that ignore the proxy). Whatever the way in, a
//! connection goes out only to a host the sandbox's policy allows, and the
//! sandbox's placeholders for secrets are replaced in requests to those
//! secrets' hosts only.
//!
//! Run with `--hold`, it only waits: the container holding a sandbox's
//! network namespace (see `hold`).
//!
//! The owner speaks JSON lines with it over stdin and stdout (its attach
//! stream): `config`, `set` and `drop`. Secret values arrive that way only,
//! and are never printed. When stdin closes (the owner exited or died), the
//! gateway exits.

mod dns;
mod policy;
mod prefixed;
mod proxy;
mod redact;
mod secrets;
mod state;
mod tls;
mod upstream;

use std::io::Write;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Weak};

use serde::Deserialize;
use serde_json::json;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::net::UdpSocket;

use proxy::Listener;
use state::{Sandbox, State};

/// The proxy's port, for clients that honour `HTTP_PROXY`/`HTTPS_PROXY`.
const PROXY_PORT: u16 = 3128;

#[derive(Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
enum Command {
    /// Certificates the gateway trusts upstream, beside its image's bundle.
    Config { id: String, trust: Vec<String> },
    /// Serve sandbox `key`, reached at `address`, or change its rules.
    Set {
        id: String,
        key: String,
        address: IpAddr,
        policy: policy::Policy,
        #[serde(default)]
        secrets: Vec<secrets::Secret>,
    },
    /// Stop serving sandbox `key`.
    Drop { id: String, key: String },
    /// The gateway's figures (its owner's metrics).
    Stats { id: String },
}

fn say(message: serde_json::Value) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{message}");
    let _ = out.flush();
}

// One thread: a proxy waits on sockets, and hand-offs between worker
// threads cost more per request than the work itself.
#[tokio::main(flavor = "current_thread")]
async fn main() {
    if std::env::args().nth(1).as_deref() == Some("--hold") {
        hold();
    }
    let _ = rustls::crypto::ring::default_provider().install_default();
    let state = Arc::new(State::new());
    for (port, kind) in [
        (PROXY_PORT, Listener::Proxy),
        (80, Listener::Http),
        (443, Listener::Tls),
    ] {
        match proxy::bind(port).await {
            Ok(listener) => {
                tokio::spawn(proxy::serve(listener, kind, state.clone()));
            }
            Err(e) => {
                eprintln!("dockhand gateway: cannot listen on port {port}: {e}");
                std::process::exit(1);
            }
        }
    }
    say(json!({"op": "started"}));
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        let command: Command = match serde_json::from_str(&line) {
            Ok(c) => c,
            Err(e) => {
                // The line may hold a secret: say only where it failed.
                say(
                    json!({"op": "error", "message": format!("unreadable command (line {}, column {})", e.line(), e.column())}),
                );
                continue;
            }
        };
        match command {
            Command::Config { id, trust } => {
                state.trust(&trust);
                say(json!({"op": "configured", "id": id}));
            }
            Command::Set {
                id,
                key,
                address,
                policy,
                secrets,
            } => match state.set(&key, address, policy, secrets).await {
                Ok(bundle) => say(json!({"op": "ready", "id": id, "bundle": bundle})),
                Err(message) => say(json!({"op": "error", "id": id, "message": message})),
            },
            Command::Drop { id, key } => {
                state.drop_sandbox(&key);
                say(json!({"op": "dropped", "id": id}));
            }
            Command::Stats { id } => {
                let mut stats = state.stats();
                stats["op"] = json!("stats");
                stats["id"] = json!(id);
                say(stats);
            }
        }
    }
    // The owner is gone: so are its sandboxes.
    std::process::exit(0);
}

/// `--hold`: does nothing, for ever. A sandbox's network namespace is made
/// ahead in a container running this (dockhand's own program, never one
/// from a caller's image), and the sandbox joins it when it starts: Docker
/// then sets up no network for the sandbox itself.
fn hold() -> ! {
    loop {
        std::thread::park();
    }
}

/// Answers DNS for one sandbox on the gateway's address on its network.
pub(crate) async fn serve_dns(socket: UdpSocket, address: IpAddr, sandbox: Weak<Sandbox>) {
    let mut packet = vec![0u8; 4096];
    loop {
        let Ok((n, from)) = socket.recv_from(&mut packet).await else {
            continue;
        };
        let Some(sandbox) = sandbox.upgrade() else {
            return;
        };
        if let Some(reply) = dns::answer(&packet[..n], &sandbox.policy(), address) {
            let _ = socket.send_to(&reply, from).await;
        }
        let _: SocketAddr = from;
    }
}
