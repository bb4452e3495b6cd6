//! Compiles dockhand's own container programs (the code host's bridge, the
//! watchdog, the egress gateway and the session agent, under `images/`) on
//! this machine while the SDK itself is compiled, so that the first code
//! host, watchdog or gateway on a fresh machine costs an image copy instead
//! of a compile inside an image (minutes: the bridge links all of Monty),
//! and a session's container needs no interpreter for its agent.
//!
//! Each program is linked statically for the host's own `*-linux-*` triple
//! and embedded gzipped; at run time the SDK uses it when the Docker daemon
//! runs on the same platform, and otherwise compiles the program in an image
//! from the embedded sources, as it does when this script could not build
//! it. So nothing here is required: a failure is a warning.
//!
//! Skipped when `DOCKHAND_PREBUILD=0`, on docs.rs (`DOCS_RS`), and when the
//! host is not Linux or the SDK is cross-compiled. The nested builds share
//! `<target dir>/dockhand-programs`, so debug, release and check builds
//! compile each program once.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use sha2::{Digest, Sha256};

/// (name used in cfg and env, crate directory, binary).
const PROGRAMS: [(&str, &str, &str); 4] = [
    ("codehost", "images/codehost/bridge", "dockhand-codehost"),
    ("watchdog", "images/watchdog", "dockhand-watchdog"),
    ("gateway", "images/gateway", "dockhand-gateway"),
    ("agent", "images/agent", "dockhand-agent"),
];

fn main() {
    for (name, dir, _) in PROGRAMS {
        println!("cargo::rustc-check-cfg=cfg(dockhand_prebuilt_{name})");
        println!("cargo::rerun-if-changed={dir}");
    }
    for var in ["DOCKHAND_PREBUILD", "DOCS_RS", "RUSTC"] {
        println!("cargo::rerun-if-env-changed={var}");
    }
    let Some(triple) = host_triple() else { return };
    let Some(platform) = docker_platform(&triple) else {
        return;
    };
    let out_dir = PathBuf::from(std::env::var_os("OUT_DIR").unwrap_or_default());
    let shared = shared_dir(&out_dir);
    println!("cargo::rustc-env=DOCKHAND_PREBUILT_PLATFORM={platform}");
    for (name, dir, binary) in PROGRAMS {
        match prebuild(&shared, &triple, dir, binary, &out_dir) {
            Ok(sha256) => {
                println!("cargo::rustc-cfg=dockhand_prebuilt_{name}");
                println!(
                    "cargo::rustc-env=DOCKHAND_PREBUILT_{}_SHA256={sha256}",
                    name.to_uppercase()
                );
            }
            Err(reason) => println!(
                "cargo::warning=dockhand: {binary} was not prebuilt, so it will be compiled \
                 inside an image on first use (minutes): {reason}"
            ),
        }
    }
}

/// The host's triple, when the programs can be prebuilt for it.
fn host_triple() -> Option<String> {
    let wanted = std::env::var("DOCKHAND_PREBUILD").unwrap_or_default();
    if wanted == "0" || std::env::var_os("DOCS_RS").is_some() {
        return None;
    }
    let host = std::env::var("HOST").ok()?;
    let target = std::env::var("TARGET").ok()?;
    // The binary is embedded in what is being compiled; it is only of use
    // if that runs on the machine it was made for.
    (host == target && host.contains("-linux-")).then_some(host)
}

/// Docker's name for the triple's platform.
fn docker_platform(triple: &str) -> Option<&'static str> {
    match triple.split('-').next()? {
        "x86_64" => Some("linux/amd64"),
        "aarch64" => Some("linux/arm64"),
        _ => None,
    }
}

/// `<target dir>/dockhand-programs`: `OUT_DIR` is
/// `<target dir>/[<triple>/]<profile>/build/dockhand-<hash>/out`.
fn shared_dir(out_dir: &Path) -> PathBuf {
    if let Some(dir) = std::env::var_os("CARGO_TARGET_DIR") {
        return PathBuf::from(dir).join("dockhand-programs");
    }
    out_dir
        .ancestors()
        .find(|p| p.file_name().is_some_and(|n| n == "build"))
        .and_then(|build| build.parent()?.parent())
        .map_or_else(|| out_dir.join("programs"), |t| t.join("dockhand-programs"))
}

/// Compiles one program and embeds it gzipped in `OUT_DIR`; returns the
/// SHA-256 of the binary.
fn prebuild(
    shared: &Path,
    triple: &str,
    dir: &str,
    binary: &str,
    out_dir: &Path,
) -> Result<String, String> {
    let manifest_dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default());
    let crate_dir = shared.join(binary);
    copy_crate(&manifest_dir.join(dir), &crate_dir).map_err(|e| format!("copying it: {e}"))?;
    let target_dir = shared.join("target");
    let log_path = out_dir.join(format!("{binary}.log"));
    let log = std::fs::File::create(&log_path).map_err(|e| e.to_string())?;
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = Command::new(cargo);
    command
        .current_dir(&crate_dir)
        .args(["build", "--release", "--locked", "--target", triple])
        // Monty declares 1.96 for a macro its debug assertions use; a
        // release build compiles with older toolchains, and a toolchain
        // that cannot is a warning like any other failure.
        .arg("--ignore-rust-version")
        .stdout(log.try_clone().map_err(|e| e.to_string())?)
        .stderr(log);
    // What the outer build set for itself must not reach the nested one
    // (clippy's wrapper, its flags, its package metadata); the toolchain,
    // the registry settings and the jobserver must.
    for (key, _) in std::env::vars_os() {
        let key = key.to_string_lossy();
        let keep = key == "CARGO_HOME"
            || key == "CARGO_MAKEFLAGS"
            || key.starts_with("CARGO_HTTP_")
            || key.starts_with("CARGO_NET_")
            || key.starts_with("CARGO_REGISTRIES_")
            || key.starts_with("CARGO_REGISTRY_");
        if (key.starts_with("CARGO_") && !keep)
            || matches!(
                key.as_ref(),
                "RUSTFLAGS" | "RUSTDOCFLAGS" | "RUSTC_WORKSPACE_WRAPPER" | "TARGET" | "HOST"
            )
        {
            command.env_remove(key.as_ref());
        }
    }
    command
        .env("CARGO_TARGET_DIR", &target_dir)
        // A static binary runs in any image, whatever C library it has.
        .env("CARGO_ENCODED_RUSTFLAGS", "-Ctarget-feature=+crt-static");
    let status = command
        .status()
        .map_err(|e| format!("running cargo: {e}"))?;
    if !status.success() {
        let text = std::fs::read_to_string(&log_path).unwrap_or_default();
        let tail: Vec<&str> = text.lines().rev().take(6).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        return Err(format!(
            "cargo build failed ({status}): {}",
            tail.join(" | ")
        ));
    }
    let built = target_dir.join(triple).join("release").join(binary);
    let bytes = std::fs::read(&built).map_err(|e| format!("{}: {e}", built.display()))?;
    let sha256: String = Sha256::digest(&bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(&bytes).map_err(|e| e.to_string())?;
    let packed = gz.finish().map_err(|e| e.to_string())?;
    std::fs::write(out_dir.join(format!("{binary}.gz")), packed).map_err(|e| e.to_string())?;
    Ok(sha256)
}

/// The crate as cargo wants it: `Cargo.toml.in` as `Cargo.toml`, its lock
/// and sources. Only files whose text changed are written, so the nested
/// build's fingerprints hold from one outer build to the next.
fn copy_crate(from: &Path, to: &Path) -> std::io::Result<()> {
    let mut manifest = std::fs::read_to_string(from.join("Cargo.toml.in"))?;
    // An empty [workspace] keeps cargo from taking the crate for a member of
    // a workspace above the target directory.
    if !manifest.lines().any(|l| l.trim() == "[workspace]") {
        manifest.push_str("\n[workspace]\n");
    }
    write_if_changed(&to.join("Cargo.toml"), manifest.as_bytes())?;
    write_if_changed(
        &to.join("Cargo.lock"),
        &std::fs::read(from.join("Cargo.lock"))?,
    )?;
    let mut wanted = std::collections::BTreeSet::new();
    for entry in std::fs::read_dir(from.join("src"))? {
        let entry = entry?;
        if entry.file_type()?.is_file() {
            let name = entry.file_name();
            write_if_changed(&to.join("src").join(&name), &std::fs::read(entry.path())?)?;
            wanted.insert(name);
        }
    }
    // Sources removed from the crate go from the copy too.
    for entry in std::fs::read_dir(to.join("src"))? {
        let entry = entry?;
        if !wanted.contains(&entry.file_name()) {
            std::fs::remove_file(entry.path())?;
        }
    }
    Ok(())
}

fn write_if_changed(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    if std::fs::read(path).is_ok_and(|old| old == bytes) {
        return Ok(());
    }
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::write(path, bytes)
}
