//! The egress gateway's image and container, and the JSON lines spoken
//! with it over its attach stream.
//!
//! One gateway serves every sandbox with a policy that a [`Client`] runs;
//! it starts with the first and is removed with the last (each sandbox's
//! lease holds it). Its program is dockhand's own (`sdk/images/gateway`,
//! Rust, compiled by the SDK's build script, or once per machine in an
//! image, then copied alone into an image `FROM scratch`), never anything from a caller's image. It holds no
//! Docker socket, runs as nobody with every capability dropped and a
//! read-only root, and exits when its stdin closes, as it does when the
//! owning process dies; the watchdog then removes its networks.

use std::sync::{Arc, Weak};

use serde_json::json;
use tokio::sync::Mutex;

use crate::engine::{ContainerGuard, ContainerSpec, Engine};
use crate::error::{Error, Result};
use crate::image::crate_build::CrateBuild;
use crate::image::prebuilt::{Prebuilt, Recipes};
use crate::image::program::ProgramImage;
use crate::progress::Reporter;

/// The gateway crate's files, by path inside the crate.
const SOURCES: [(&str, &str); 12] = [
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
        "src/redact.rs",
        include_str!("../../images/gateway/src/redact.rs"),
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
/// `kind` label of the gateway's container.
pub const KIND: &str = "egress-gateway";

/// The recipe: the binary the SDK's build script made, or the program
/// compiled from its sources.
fn recipe(prebuilt: Option<&Prebuilt>) -> ProgramImage {
    let build = CrateBuild {
        sources: &SOURCES,
        binary: "dockhand-gateway",
        install_to: COMPILED_AT,
        static_link: true,
    };
    // The program alone: what it trusts is given when it starts (the
    // host's bundle as it is then, not as it was at the build).
    ProgramImage::alone(
        "dockhand/egress-gateway",
        "egress-gateway-image",
        &build,
        PROGRAM,
        prebuilt,
    )
}

static RECIPES: Recipes = Recipes::new(crate::image::prebuilt::GATEWAY, recipe);

/// The gateway's container: its program alone, as nobody, with nothing
/// but the network it reaches the outside through.
fn container_spec(image: &str, outside: &str) -> ContainerSpec {
    ContainerSpec {
        image: image.to_string(),
        kind: KIND,
        network: Some(outside.to_string()),
        sysctls: not_a_router([
            // Ports 53, 80 and 443 without any capability.
            ("net.ipv4.ip_unprivileged_port_start", "0"),
        ]),
        memory_bytes: Some(256 << 20),
        nano_cpus: Some(1_000_000_000),
        pids_limit: Some(256),
        open_stdin: true,
        auto_remove: true,
        ..locked_down()
    }
}

/// What the gateway's and the holders' containers share: dockhand's own
/// program, as nobody, with no capability, a read-only root and no log.
fn locked_down() -> ContainerSpec {
    ContainerSpec {
        user: Some(crate::sandbox::UNPRIVILEGED_USER.to_string()),
        cap_drop_all: true,
        no_new_privileges: true,
        read_only_rootfs: true,
        no_log: true,
        ..Default::default()
    }
}

/// Namespaced settings with forwarding off: never a router between a
/// sandbox's network and the outside (a frame a sandbox addressed to the
/// gateway, given NET_RAW, must not be passed on).
fn not_a_router<const N: usize>(
    extra: [(&str, &str); N],
) -> std::collections::HashMap<String, String> {
    [
        ("net.ipv4.ip_forward", "0"),
        ("net.ipv6.conf.all.forwarding", "0"),
    ]
    .into_iter()
    .chain(extra)
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

/// `kind` label of the containers holding sandboxes' network namespaces.
pub const HOLDER_KIND: &str = "egress-holder";

/// A container that holds a sandbox's network namespace on its own network
/// (`network`), with the gateway (at `gateway`) as its DNS server: the
/// gateway's program, doing nothing, as nobody. The sandbox joins it
/// (`container:<id>`), so its start sets up no network endpoint.
pub(crate) fn holder_spec(image: &str, network: &str, gateway: std::net::IpAddr) -> ContainerSpec {
    ContainerSpec {
        image: image.to_string(),
        cmd: vec!["--hold".into()],
        kind: HOLDER_KIND,
        network: Some(network.to_string()),
        dns: vec![gateway.to_string()],
        sysctls: not_a_router([]),
        memory_bytes: Some(16 << 20),
        pids_limit: Some(8),
        ..locked_down()
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

/// Certificate files (`:`-separated) the gateway trusts and builds do not:
/// a private CA of hosts the sandboxes may reach.
pub const TRUST_ENV: &str = "DOCKHAND_EGRESS_CA";

/// What builds trust (the host's CA bundle and the files `DOCKHAND_CA_CERTS`
/// names) and the files `DOCKHAND_EGRESS_CA` names, read now.
async fn host_certificates() -> Result<Vec<String>> {
    let builds = std::env::var(crate::image::CA_CERTS_ENV).unwrap_or_default();
    let gateway = std::env::var(TRUST_ENV).unwrap_or_default();
    crate::util::blocking("reading the host's CA certificates", move || {
        let listed = [builds, gateway];
        crate::image::host_ca_bundle()
            .into_iter()
            .chain(
                listed
                    .iter()
                    .flat_map(std::env::split_paths)
                    .filter(|p| !p.as_os_str().is_empty()),
            )
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

/// How long the gateway may take to give its figures.
const STATS_LIMIT: std::time::Duration = std::time::Duration::from_secs(5);

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

    /// The running gateway's figures; `None` if none runs (or one is
    /// starting), or it did not answer within 5 s.
    pub async fn stats(&self) -> Result<Option<super::EgressStats>> {
        let Ok(current) = self.current.try_lock() else {
            return Ok(None);
        };
        let Some(gateway) = current.upgrade().filter(|g| !g.is_dead()) else {
            return Ok(None);
        };
        drop(current);
        let asked = gateway.control.request(json!({"op": "stats"}));
        let Ok(answer) = tokio::time::timeout(STATS_LIMIT, asked).await else {
            return Ok(None);
        };
        Ok(Some(super::EgressStats::from_answer(&answer?)))
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

/// One running gateway.
pub(crate) struct Gateway {
    engine: Engine,
    /// The gateway's image: holders run it too.
    image: String,
    container: ContainerGuard,
    control: super::control::Control,
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
        let image = RECIPES
            .for_engine(engine)
            .await?
            .ensure(engine, reporter)
            .await?;
        let mut trust = settings.trust.clone();
        trust.extend(host_certificates().await?);
        let from_env = std::env::var(NETWORK_ENV).ok().filter(|n| !n.is_empty());
        let outside = settings.outside.clone().or(from_env);
        let outside = outside.as_deref().unwrap_or("bridge");
        let container = engine
            .create_container(&container_spec(&image, outside))
            .await?;
        let attached = engine.attach(container.id()).await?;
        engine.start_container(container.id()).await?;
        let control = super::control::Control::start(attached).await?;
        control
            .request(json!({"op": "config", "trust": trust}))
            .await?;
        Ok(Gateway {
            engine: engine.clone(),
            image: image.clone(),
            spares: Default::default(),
            container,
            control,
        })
    }

    pub fn container_id(&self) -> &str {
        self.container.id()
    }

    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    pub fn image(&self) -> &str {
        &self.image
    }

    pub fn spares(&self) -> &super::spares::Spares {
        &self.spares
    }

    fn is_dead(&self) -> bool {
        self.control.is_dead()
    }

    /// The channel to it.
    pub fn control(&self) -> &super::control::Control {
        &self.control
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
        let recipe = RECIPES.compiled();
        assert!(recipe.tag().starts_with("dockhand/egress-gateway:"));
        assert!(recipe.dockerfile("compiler").starts_with("FROM scratch\n"));
        // Nothing it trusts is baked in: the host's bundle comes when it starts.
        assert_eq!(recipe.files, [(COMPILED_AT, PROGRAM)]);
    }
}
