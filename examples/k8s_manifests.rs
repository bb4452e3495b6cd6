//! Prints the Kubernetes manifests dockhand renders: a one-shot Job, a code
//! host Pod, a session Pod and a session warm pool (agent-sandbox), each with
//! its deny-all NetworkPolicy, as one YAML stream.
//!
//! ```text
//! cargo run --example k8s_manifests [IMAGE] | kubectl apply --dry-run=client -f -
//! ```

use std::time::Duration;

use dockhand::codemode::CodeHostConfig;
use dockhand::k8s::{self, KubeOptions};
use dockhand::session::SessionConfig;
use dockhand::{Isolation, Sandbox, Secret, Type};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let image = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "registry.example/dockhand/base:python3.11".into());
    let opts = KubeOptions::new(image)
        .namespace("sandboxes")
        .owner("k8s-manifests-example");

    let double = Sandbox::code("double", "result = x * 2")
        .input("x", Type::Int)
        .output("result", Type::Int)
        .isolation(Isolation::Gvisor)
        .timeout(Duration::from_secs(60))
        .secret(Secret::from_env("API_KEY", "API_KEY"))
        .build()?;
    let mut yaml = k8s::one_shot(&double, [("x", 21)], &opts)?.to_yaml()?;
    yaml += &k8s::code_host(&CodeHostConfig::new(), &opts)?.to_yaml()?;
    let session = k8s::session(&SessionConfig::new().name("analysis"), &opts)?;
    yaml += &session.to_yaml()?;
    yaml += &session.warm_pool(3)?.to_yaml()?;
    print!("{yaml}");
    Ok(())
}
