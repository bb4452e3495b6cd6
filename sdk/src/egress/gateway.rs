//! The egress gateway's image and container, and the JSON lines spoken
//! with it over its attach stream.
//!
//! One gateway serves every sandbox with a policy that a [`Client`] runs;
//! it starts with the first and is removed with the last (each sandbox's
//! lease holds it). Its program is dockhand's own (`sdk/images/gateway`,
//! Rust, compiled once per machine into an image `FROM scratch` with the
//! host's CA bundle), never anything from a caller's image. It holds no
//! Docker socket, runs as nobody with every capability dropped and a
//! read-only root, and exits when its stdin closes, as it does when the
//! owning process dies; the watchdog then removes its networks.

use std::sync::{Arc, Weak};
use std::time::Duration;

use futures::{Stream, StreamExt};
use serde_json::{json, Value};
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::Mutex;

use crate::codemode::protocol::LineBuffer;
use crate::engine::{ContainerGuard, ContainerSpec, Engine, LogChunk};
use crate::error::{Error, Result};
use crate::image::crate_build::CrateBuild;
use crate::image::program::ProgramImage;
use crate::image::ImageSpec;
use crate::progress::Reporter;

/// The gateway crate's files, by path inside the crate.
const SOURCES: [(&str, &str); 11] = [
    (
        "Cargo.toml",
        include_str!("../../images/gateway/Cargo.toml.in"),
    ),
    (
        "Cargo.lock",
        include_str!("../../images/gateway/Cargo.lock"),
    ),
    (
        "src/main.rs",
        include_str!("../../images/gateway/src/main.rs"),
    ),
    (
        "src/dns.rs",
        include_str!("../../images/gateway/src/dns.rs"),
    ),
    (
        "src/policy.rs",
        include_str!("../../images/gateway/src/policy.rs"),
    ),
    (
        "src/prefixed.rs",
        include_str!("../../images/gateway/src/prefixed.rs"),
    ),
    (
        "src/proxy.rs",
        include_str!("../../images/gateway/src/proxy.rs"),
    ),
    (
        "src/secrets.rs",
        include_str!("../../images/gateway/src/secrets.rs"),
    ),
    (
        "src/state.rs",
        include_str!("../../images/gateway/src/state.rs"),
    ),
    (
        "src/tls.rs",
        include_str!("../../images/gateway/src/tls.rs"),
    ),
    (
        "src/upstream.rs",
        include_str!("../../images/gateway/src/upstream.rs"),
    ),
];

const COMPILED_AT: &str = "/opt/dockhand/gateway/dockhand-gateway";
const PROGRAM: &str = "/dockhand-gateway";
const BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";
/// `kind` label of the gateway's container.
pub const KIND: &str = "egress-gateway";
/// How long the gateway may take to start, or to answer one command.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(15);

fn program() -> &'static ProgramImage {
    static PROGRAM_IMAGE: std::sync::OnceLock<ProgramImage> = std::sync::OnceLock::new();
    PROGRAM_IMAGE.get_or_init(|| ProgramImage {
        repository: "dockhand/egress-gateway",
        kind: "egress-gateway-image",
        compiler: CrateBuild {
            sources: &SOURCES,
            binary: "dockhand-gateway",
            install_to: COMPILED_AT,
            static_link: true,
        }
        .add_to(ImageSpec::default().trust_host_certificates()),
        // The host's bundle, which its image build trusted: the gateway's
        // own connections out trust what builds trust.
        files: vec![(COMPILED_AT, PROGRAM), (BUNDLE, BUNDLE)],
        entrypoint: Some(PROGRAM),
    })
}

/// The gateway's container: its program alone, as nobody, with nothing
/// but the network it reaches the outside through.
fn container_spec(image: &str, outside: &str) -> ContainerSpec {
    ContainerSpec {
        image: image.to_string(),
        kind: KIND,
        network: Some(outside.to_string()),
        sysctls: [
            // Ports 53, 80 and 443 without any capability.
            ("net.ipv4.ip_unprivileged_port_start", "0"),
            // Never a router between a sandbox's network and the outside:
            // a frame a sandbox addressed to the gateway (given NET_RAW)
            // must not be passed on.
            ("net.ipv4.ip_forward", "0"),
            ("net.ipv6.conf.all.forwarding", "0"),
        ]
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .into(),
        user: Some(crate::sandbox::UNPRIVILEGED_USER.to_string()),
        cap_drop_all: true,
        no_new_privileges: true,
        read_only_rootfs: true,
        memory_bytes: Some(256 << 20),
        nano_cpus: Some(1_000_000_000),
        pids_limit: Some(256),
        open_stdin: true,
        no_log: true,
        auto_remove: true,
        ..Default::default()
    }
}

/// The network the gateway reaches the outside through, when the client
/// does not say (`bridge` when neither does).
pub const NETWORK_ENV: &str = "DOCKHAND_EGRESS_NETWORK";

/// Where a client's gateway reaches the outside, and what it trusts there.
#[derive(Debug, Clone, Default)]
pub(crate) struct GatewaySettings {
    /// The Docker network it reaches hosts through (`bridge` unless told).
    pub outside: Option<String>,
    /// Certificates (PEM) it trusts besides the host's bundle.
    pub trust: Vec<String>,
}

/// The certificates `DOCKHAND_CA_CERTS` names, which builds trust too.
async fn env_certificates() -> Result<Vec<String>> {
    let Ok(list) = std::env::var(crate::image::CA_CERTS_ENV) else {
        return Ok(Vec::new());
    };
    crate::util::blocking("reading DOCKHAND_CA_CERTS", move || {
        std::env::split_paths(&list)
            .filter(|p| !p.as_os_str().is_empty())
            .map(|path| {
                std::fs::read_to_string(&path).map_err(|e| {
                    Error::io(
                        format!("reading CA certificates from {}", path.display()),
                        e,
                    )
                })
            })
            .collect()
    })
    .await
}

/// A client's gateway, started on first need.
pub(crate) struct Gateways {
    settings: GatewaySettings,
    current: Mutex<Weak<Gateway>>,
}

impl Gateways {
    pub fn new(settings: GatewaySettings) -> Self {
        Gateways {
            settings,
            current: Mutex::new(Weak::new()),
        }
    }

    /// The running gateway, or a new one.
    pub async fn get(&self, engine: &Engine, reporter: &Reporter) -> Result<Arc<Gateway>> {
        let mut current = self.current.lock().await;
        if let Some(gateway) = current.upgrade().filter(|g| !g.is_dead()) {
            return Ok(gateway);
        }
        let gateway = Arc::new(Gateway::start(engine, reporter, &self.settings).await?);
        *current = Arc::downgrade(&gateway);
        Ok(gateway)
    }
}

type Output = std::pin::Pin<Box<dyn Stream<Item = Result<LogChunk>> + Send>>;

struct Control {
    input: std::pin::Pin<Box<dyn AsyncWrite + Send>>,
    output: Output,
    lines: LineBuffer,
    next_id: u64,
}

/// One running gateway.
pub(crate) struct Gateway {
    engine: Engine,
    container: ContainerGuard,
    control: Mutex<Control>,
    dead: std::sync::atomic::AtomicBool,
    spares: super::spares::Spares,
}

impl Drop for Gateway {
    fn drop(&mut self) {
        self.spares.remove_all(&self.engine, self.container.id());
    }
}

impl Gateway {
    async fn start(
        engine: &Engine,
        reporter: &Reporter,
        settings: &GatewaySettings,
    ) -> Result<Gateway> {
        let image = program().ensure(engine, reporter).await?;
        let mut trust = settings.trust.clone();
        trust.extend(env_certificates().await?);
        let from_env = std::env::var(NETWORK_ENV).ok().filter(|n| !n.is_empty());
        let outside = settings.outside.clone().or(from_env);
        let outside = outside.as_deref().unwrap_or("bridge");
        let container = engine
            .create_container(&container_spec(&image, outside))
            .await?;
        let attached = engine.attach(container.id()).await?;
        engine.start_container(container.id()).await?;
        let gateway = Gateway {
            engine: engine.clone(),
            spares: Default::default(),
            container,
            control: Mutex::new(Control {
                input: attached.input,
                output: attached.output,
                lines: LineBuffer::default(),
                next_id: 0,
            }),
            dead: false.into(),
        };
        {
            let mut control = gateway.control.lock().await;
            gateway.read_until(&mut control, "op", "started").await?;
        }
        gateway
            .request(json!({"op": "config", "trust": trust}))
            .await?;
        Ok(gateway)
    }

    pub fn container_id(&self) -> &str {
        self.container.id()
    }

    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    pub fn spares(&self) -> &super::spares::Spares {
        &self.spares
    }

    fn is_dead(&self) -> bool {
        self.dead.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn died(&self, reason: String) -> Error {
        self.dead.store(true, std::sync::atomic::Ordering::Relaxed);
        Error::EgressGateway { reason }
    }

    /// Sends one command (given an `id` here) without waiting for its
    /// answer, which a later request skips: for forgetting a sandbox, which
    /// nobody needs to wait for (an answer over attach takes tens of ms).
    pub async fn tell(&self, command: Value) -> Result<()> {
        let mut control = self.control.lock().await;
        self.send(&mut control, command).await.map(drop)
    }

    /// Sends one command (given an `id` here) and returns its answer. Each
    /// answer names its command, so an answer a dropped caller never read
    /// is skipped, not taken for the next one's.
    pub async fn request(&self, command: Value) -> Result<Value> {
        let mut control = self.control.lock().await;
        let id = self.send(&mut control, command).await?;
        // The lock is held until the answer: answers come in command order.
        let answer = self.read_until(&mut control, "id", &id).await?;
        if answer["op"] == "error" {
            return Err(Error::EgressGateway {
                reason: answer["message"]
                    .as_str()
                    .unwrap_or("it refused")
                    .to_string(),
            });
        }
        Ok(answer)
    }

    /// Writes one command line; returns the id it was given.
    async fn send(&self, control: &mut Control, mut command: Value) -> Result<String> {
        control.next_id += 1;
        let id = format!("c{}", control.next_id);
        command["id"] = json!(id);
        let mut line = command.to_string();
        line.push('\n');
        let sent = async {
            control.input.write_all(line.as_bytes()).await?;
            control.input.flush().await
        };
        match tokio::time::timeout(ANSWER_TIMEOUT, sent).await {
            Ok(Ok(())) => Ok(id),
            // The line carries secrets: the error names neither it nor them.
            Ok(Err(e)) => Err(self.died(format!("writing to it: {e}"))),
            Err(_) => Err(self.died("it stopped reading its commands".into())),
        }
    }

    /// Reads answers until one whose `field` is `value` comes.
    async fn read_until(&self, control: &mut Control, field: &str, value: &str) -> Result<Value> {
        let read = async {
            loop {
                match control.output.next().await {
                    Some(Ok(LogChunk::Stdout(bytes))) => {
                        for line in control.lines.push(&bytes) {
                            let Ok(answer) = serde_json::from_slice::<Value>(&line) else {
                                continue;
                            };
                            if answer[field] == value {
                                return Ok(answer);
                            }
                        }
                    }
                    Some(Ok(LogChunk::Stderr(bytes))) => {
                        tracing::warn!(gateway = %String::from_utf8_lossy(&bytes).trim(), "egress gateway");
                    }
                    Some(Err(e)) => return Err(e.to_string()),
                    None => return Err("it exited".to_string()),
                }
            }
        };
        match tokio::time::timeout(ANSWER_TIMEOUT, read).await {
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(reason)) => Err(self.died(reason)),
            Err(_) => Err(self.died(format!("it did not answer within {ANSWER_TIMEOUT:?}"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_source_file_of_the_gateway_is_embedded() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("images/gateway/src");
        for entry in std::fs::read_dir(&dir)
            .expect("the gateway's sources")
            .flatten()
        {
            let path = format!("src/{}", entry.file_name().to_string_lossy());
            assert!(
                SOURCES.iter().any(|(p, _)| *p == path),
                "{path} is not embedded"
            );
        }
    }

    #[test]
    fn the_gateway_runs_unprivileged_and_its_image_is_its_own() {
        let spec = container_spec("dockhand/egress-gateway:x", "bridge");
        assert!(spec.cap_drop_all && spec.read_only_rootfs && spec.no_new_privileges);
        assert_eq!(spec.user.as_deref(), Some("65534:65534"));
        assert!(spec.mounts.is_empty(), "no socket, no host path");
        assert!(spec.env.is_empty(), "secrets travel on its stdin only");
        assert_eq!(spec.sysctls["net.ipv4.ip_forward"], "0", "not a router");
        let recipe = program();
        assert!(recipe.tag().starts_with("dockhand/egress-gateway:"));
        assert!(recipe.dockerfile("compiler").starts_with("FROM scratch\n"));
    }
}
