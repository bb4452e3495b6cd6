//! `dockhand doctor`: what this machine has for dockhand, each check with
//! the fix when it fails.

use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Result;
use serde::Serialize;

#[derive(Serialize)]
struct Check {
    name: &'static str,
    /// `ok`, `warn` or `fail`.
    status: &'static str,
    detail: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    fix: Option<String>,
}

fn check(name: &'static str, status: &'static str, detail: String, fix: Option<String>) -> Check {
    Check {
        name,
        status,
        detail,
        fix,
    }
}

/// What a cluster gives that dockhand cannot check from outside: claims
/// that bind (for volumes and pausable sessions), and a network plugin
/// that enforces NetworkPolicy (else pods are not held offline, nor to
/// their allow-lists).
fn cluster_checks(client: &dockhand::Client) -> Vec<Check> {
    let class = std::env::var("DOCKHAND_KUBE_STORAGE_CLASS")
        .ok()
        .filter(|c| !c.trim().is_empty());
    vec![
        check("cluster", "ok", client.endpoint().to_string(), None),
        check(
            "storage",
            "ok",
            format!(
                "volumes and pausable, kept or forked sessions keep their files on PersistentVolumeClaims of {}; they wait until the cluster binds them",
                class.map_or("the cluster's default StorageClass".to_string(), |c| format!("StorageClass `{c}`"))
            ),
            Some("`kubectl get storageclass` should show one (default); else name one with --kube-storage-class".into()),
        ),
        check(
            "network policy",
            "warn",
            "dockhand cannot tell whether this cluster's network plugin enforces NetworkPolicy: where it does not (kindnet, flannel alone), pods without a network reach anything, and allow-lists allow everything".into(),
            Some("run a plugin that enforces NetworkPolicy (Calico, Cilium), or check yours: a pod under a deny-all policy must not reach the outside".into()),
        ),
    ]
}

/// A TCP connection to Docker Hub's registry within a few seconds.
async fn registry_reachable() -> bool {
    let connect = tokio::net::TcpStream::connect("registry-1.docker.io:443");
    matches!(
        tokio::time::timeout(Duration::from_secs(3), connect).await,
        Ok(Ok(_))
    )
}

fn debootstrap_path() -> Option<String> {
    ["/usr/sbin/debootstrap", "/usr/bin/debootstrap"]
        .iter()
        .find(|p| Path::new(p).exists())
        .map(|p| p.to_string())
}

/// Free space where `path` lives, in bytes, by `df`.
fn free_bytes(path: &Path) -> Option<u64> {
    let out = std::process::Command::new("df")
        .args(["-Pk"])
        .arg(path)
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let kib: u64 = text
        .lines()
        .nth(1)?
        .split_whitespace()
        .nth(3)?
        .parse()
        .ok()?;
    Some(kib * 1024)
}

pub async fn run(host: Option<String>, json: bool) -> Result<ExitCode> {
    let mut checks = Vec::new();
    let client = match crate::connect(host, true).await {
        Ok(client) => Some(client),
        Err(e) => {
            let fix = "start the daemon (`sudo systemctl start docker` or `dockerd &`), or point DOCKER_HOST / --host at one";
            checks.push(check("daemon", "fail", format!("{e:#}"), Some(fix.into())));
            None
        }
    };
    let mut base_present = false;
    let on_cluster = client.as_ref().is_some_and(|c| c.backend() == "kubernetes");
    if let Some(client) = client.as_ref().filter(|_| on_cluster) {
        checks.extend(cluster_checks(client));
    }
    if let Some(client) = client.as_ref().filter(|_| !on_cluster) {
        match client.daemon_info().await {
            Ok(info) => {
                // gVisor is optional: say whether `--runtime gvisor` would work, and how to make it.
                checks.push(if info.runtimes.iter().any(|r| r == "runsc") {
                    check("gvisor", "ok", "runsc is registered".into(), None)
                } else {
                    check(
                        "gvisor",
                        "ok",
                        "not registered (optional: only `--runtime gvisor` needs it)".into(),
                        Some(
                            "apt-get install runsc, then add {\"runtimes\": {\"runsc\": {\"path\": \"/usr/bin/runsc\", \"runtimeArgs\": [\"--network=none\"]}}} to daemon.json and restart the daemon".into(),
                        ),
                    )
                });
                checks.insert(
                    checks.len() - 1,
                    check(
                        "daemon",
                        "ok",
                        format!(
                            "{} at {} (API {}, {}, storage {}, runtimes {})",
                            info.version,
                            client.endpoint(),
                            info.api_version,
                            info.platform,
                            info.storage_driver,
                            info.runtimes.join(", ")
                        ),
                        None,
                    ),
                );
            }
            Err(e) => checks.push(check("daemon", "fail", format!("{e:#}"), None)),
        }
        let images = client.managed_images().await.unwrap_or_default();
        let python = dockhand::image::DEFAULT_PYTHON;
        let prefix = format!("dockhand/base:python{python}-");
        let base = images
            .iter()
            .flat_map(|i| i.tags.iter())
            .find(|t| t.starts_with(&prefix));
        base_present = base.is_some();
        checks.push(match base {
            Some(tag) => check("base image", "ok", tag.clone(), None),
            None => check(
                "base image",
                "ok",
                format!("python {python} base not made yet: the first run makes it (pulled, or bootstrapped from Debian packages in about 90 s)"),
                None,
            ),
        });
    }
    let registry = registry_reachable().await;
    checks.push(if registry {
        check(
            "registry",
            "ok",
            "registry-1.docker.io answers: base images are pulled".into(),
            None,
        )
    } else {
        check(
            "registry",
            "ok",
            "no registry answers: base images are made from Debian packages".into(),
            None,
        )
    });
    let debootstrap = debootstrap_path();
    checks.push(match (&debootstrap, registry || base_present) {
        (Some(path), _) => check("debootstrap", "ok", path.clone(), None),
        (None, true) => check(
            "debootstrap",
            "ok",
            "not installed (not needed here)".into(),
            None,
        ),
        (None, false) if on_cluster => check(
            "debootstrap",
            "ok",
            "not installed (only images built here for --kube-registry may need it)".into(),
            None,
        ),
        (None, false) => check(
            "debootstrap",
            "fail",
            "not installed, and the base image can be neither pulled nor found".into(),
            Some("sudo apt-get install -y debootstrap".into()),
        ),
    });
    let env_ca = std::env::var(dockhand::image::CA_CERTS_ENV).ok();
    checks.push(match (dockhand::image::host_ca_bundle(), env_ca) {
        (Some(bundle), extra) => check(
            "CA bundle",
            "ok",
            format!(
                "{}{}",
                bundle.display(),
                extra
                    .map(|e| format!(" and {}={e}", dockhand::image::CA_CERTS_ENV))
                    .unwrap_or_default()
            ),
            None,
        ),
        (None, _) => check(
            "CA bundle",
            "warn",
            "no system CA bundle found: builds behind a TLS-intercepting proxy will fail".into(),
            Some(format!(
                "install ca-certificates, or set {} to your proxy's CA file",
                dockhand::image::CA_CERTS_ENV
            )),
        ),
    });
    let disk_path = Path::new("/var/lib/docker");
    let disk_path = if disk_path.exists() {
        disk_path
    } else {
        Path::new("/")
    };
    checks.push(match free_bytes(disk_path) {
        Some(free) if free < 5 << 30 => check(
            "disk",
            "warn",
            format!(
                "{:.1} GiB free at {}",
                free as f64 / (1u64 << 30) as f64,
                disk_path.display()
            ),
            Some("free some space: `dockhand images prune`, `docker system prune`".into()),
        ),
        Some(free) => check(
            "disk",
            "ok",
            format!(
                "{:.1} GiB free at {}",
                free as f64 / (1u64 << 30) as f64,
                disk_path.display()
            ),
            None,
        ),
        None => check(
            "disk",
            "warn",
            "could not read free space (df)".into(),
            None,
        ),
    });
    let failed = checks.iter().any(|c| c.status == "fail");
    if json {
        println!("{}", serde_json::json!({ "checks": checks, "ok": !failed }));
    } else {
        for c in &checks {
            println!("{:<5} {:<12} {}", c.status, c.name, c.detail);
            if let Some(fix) = &c.fix {
                println!("{:<5} {:<12} fix: {fix}", "", "");
            }
        }
    }
    Ok(if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}
