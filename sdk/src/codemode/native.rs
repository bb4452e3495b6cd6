//! The code host's compiled bridge (`images/codehost/bridge`, Rust): built
//! inside the code host image, from its pinned Cargo.lock, by the Rust
//! toolchain Debian ships in `bookworm-security` (`cargo-web`, Rust 1.96), so
//! no toolchain is needed on the machine running dockhand. The toolchain is
//! removed again in the same layer; the image keeps one binary, linked
//! against the image's own C library.
//!
//! It drives Monty's worker processes directly (monty-pool), which answers an
//! execution or a tool call in tens of microseconds where the Python bridge
//! spent a millisecond in its client library and thread hand-offs.

/// The bridge crate's files, by path inside the crate.
pub const SOURCES: [(&str, &str); 11] = [
    (
        "Cargo.toml",
        include_str!("../../../images/codehost/bridge/Cargo.toml"),
    ),
    (
        "Cargo.lock",
        include_str!("../../../images/codehost/bridge/Cargo.lock"),
    ),
    (
        "src/main.rs",
        include_str!("../../../images/codehost/bridge/src/main.rs"),
    ),
    (
        "src/fanout.rs",
        include_str!("../../../images/codehost/bridge/src/fanout.rs"),
    ),
    (
        "src/execution.rs",
        include_str!("../../../images/codehost/bridge/src/execution.rs"),
    ),
    (
        "src/failures.rs",
        include_str!("../../../images/codehost/bridge/src/failures.rs"),
    ),
    (
        "src/guards.rs",
        include_str!("../../../images/codehost/bridge/src/guards.rs"),
    ),
    (
        "src/prelude.rs",
        include_str!("../../../images/codehost/bridge/src/prelude.rs"),
    ),
    (
        "src/prelude.py",
        include_str!("../../../images/codehost/bridge/src/prelude.py"),
    ),
    (
        "src/rules.rs",
        include_str!("../../../images/codehost/bridge/src/rules.rs"),
    ),
    (
        "src/values.rs",
        include_str!("../../../images/codehost/bridge/src/values.rs"),
    ),
];

use crate::archive::{build_tar, TarFile};

/// Where built images carry the compiled bridge.
pub const BINARY: &str = "/opt/dockhand/codehost/dockhand-codehost";

/// The crate's sources as a gzipped tar, base64-encoded: small enough for
/// one shell argument (the plain text is over Linux's 128 KiB limit).
fn packed_sources() -> String {
    use base64::Engine as _;
    use std::io::Write as _;
    let files: Vec<TarFile> = SOURCES
        .iter()
        .map(|(path, text)| TarFile::new(path.to_string(), *text))
        .collect();
    // Both steps are deterministic (fixed mtimes, no gzip timestamp): the
    // image tag is a hash of the command.
    let tar = build_tar(&[("src", 0o755)], &files).unwrap_or_default();
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    let packed = gz.write_all(&tar).and_then(|()| gz.finish());
    base64::engine::general_purpose::STANDARD.encode(packed.unwrap_or_default())
}

/// A shell command that builds the bridge into [`BINARY`] and leaves no
/// toolchain, sources or caches behind.
pub fn build_command() -> String {
    // Packing gzips ~130 KB at the best level; every start asks for the
    // command (its text is the image's tag), so it is made once.
    static COMMAND: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    COMMAND.get_or_init(render_build_command).clone()
}

fn render_build_command() -> String {
    let packed = packed_sources();
    format!(
        "set -e; . /etc/os-release; \
         list=/etc/apt/sources.list.d/dockhand-rust.list; \
         echo \"deb http://deb.debian.org/debian-security ${{VERSION_CODENAME}}-security main\" > $list; \
         apt-get update -qq && apt-get install -y -qq --no-install-recommends cargo-web rustc-web > /dev/null; \
         src=/tmp/dockhand-bridge; mkdir -p $src; \
         printf %s '{packed}' | base64 -d | tar -xz -C $src; \
         cd $src && CARGO_HOME=/tmp/dockhand-cargo CARGO_HTTP_CAINFO=/etc/ssl/certs/ca-certificates.crt \
         cargo build --release --locked --quiet; \
         mkdir -p /opt/dockhand/codehost && install -m 0755 target/release/dockhand-codehost {BINARY}; \
         cd / && rm -rf $src /tmp/dockhand-cargo; \
         apt-get purge -y -qq --auto-remove cargo-web rustc-web > /dev/null; \
         apt-get clean; rm -f $list; rm -rf /var/lib/apt/lists/*"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_build_unpacks_every_source_and_cleans_up() {
        use base64::Engine as _;
        use std::io::Read as _;
        let command = build_command();
        assert!(command.len() < 100 * 1024, "{} bytes", command.len());
        assert_eq!(
            command,
            build_command(),
            "the command (and tag) must be stable"
        );
        let packed = base64::engine::general_purpose::STANDARD
            .decode(packed_sources())
            .expect("base64");
        let mut tar = Vec::new();
        flate2::read::GzDecoder::new(&packed[..])
            .read_to_end(&mut tar)
            .expect("gzip");
        let mut archive = tar::Archive::new(&tar[..]);
        let mut found = std::collections::HashMap::new();
        for entry in archive.entries().expect("tar") {
            let mut entry = entry.expect("entry");
            let path = entry.path().expect("path").to_string_lossy().into_owned();
            let mut text = String::new();
            entry.read_to_string(&mut text).expect("text");
            found.insert(path, text);
        }
        for (path, text) in SOURCES {
            assert_eq!(found.get(path).map(String::as_str), Some(text), "{path}");
        }
        assert!(command.contains("--locked"));
        assert!(command.contains("apt-get purge"));
        assert!(command.ends_with("rm -rf /var/lib/apt/lists/*"));
    }

    #[test]
    fn the_bridge_pins_the_monty_it_drives() {
        let manifest = SOURCES[0].1;
        let pinned = super::super::bridge::MONTY_PACKAGE
            .split("==")
            .nth(1)
            .unwrap_or_default();
        assert!(
            manifest.contains(&format!("monty-pool = \"={pinned}\"")),
            "the bridge's monty-pool must match {}",
            super::super::bridge::MONTY_PACKAGE
        );
    }
}
