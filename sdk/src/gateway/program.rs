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

use crate::engine::ContainerSpec;
use crate::image::crate_build::CrateBuild;
use crate::image::prebuilt::Prebuilt;
use crate::image::program::ProgramImage;
use crate::image::program::Recipes;

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

pub(super) static RECIPES: Recipes = Recipes::new(crate::image::prebuilt::GATEWAY, recipe);

/// The gateway's container: its program alone, as nobody, with nothing
/// but the network it reaches the outside through.
pub(super) fn container_spec(image: &str, outside: &str) -> ContainerSpec {
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
        user: Some(crate::engine::UNPRIVILEGED_USER.to_string()),
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
