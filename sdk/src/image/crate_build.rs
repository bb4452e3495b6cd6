//! Compiling one of dockhand's own Rust programs inside an image build, by
//! the Rust toolchain Debian ships in `bookworm-security` (`cargo-web`), so
//! no toolchain is needed on the machine running dockhand. The crate's
//! sources travel packed in the build command (its text is the image's tag),
//! its dependencies come pinned by its Cargo.lock, and the toolchain, sources
//! and caches are removed again in the same layer: the image keeps one binary.

use crate::archive::{build_tar, TarFile};

/// One crate to compile.
pub(crate) struct CrateBuild<'a> {
    /// Its files, by path inside the crate (`Cargo.toml`, `Cargo.lock`, `src/…`).
    pub sources: &'a [(&'a str, &'a str)],
    /// The binary cargo builds (`target/release/<binary>`).
    pub binary: &'a str,
    /// Where the image keeps it.
    pub install_to: &'a str,
    /// Link the C library in, so the binary runs in an image that has none
    /// (`FROM scratch`).
    pub static_link: bool,
}

impl CrateBuild<'_> {
    /// A shell command that builds the crate into [`CrateBuild::install_to`]
    /// and leaves no toolchain, sources or caches behind.
    pub(crate) fn command(&self) -> String {
        let packed = packed_sources(self.sources);
        let install_to = self.install_to;
        let dir = std::path::Path::new(install_to)
            .parent()
            .map_or_else(|| "/".to_string(), |p| p.display().to_string());
        let binary = self.binary;
        // With an explicit target, RUSTFLAGS apply to the program only, not
        // to the proc-macros cargo builds for the host (which cannot be
        // static).
        let (rustflags, target, built) = if self.static_link {
            (
                "RUSTFLAGS='-C target-feature=+crt-static' ",
                " --target \"$host\"",
                "target/$host/release",
            )
        } else {
            ("", "", "target/release")
        };
        format!(
            "set -e; . /etc/os-release; \
             list=/etc/apt/sources.list.d/dockhand-rust.list; \
             echo \"deb http://deb.debian.org/debian-security ${{VERSION_CODENAME}}-security main\" > $list; \
             apt-get update -qq && apt-get install -y -qq --no-install-recommends cargo-web rustc-web > /dev/null; \
             src=/tmp/dockhand-{binary}; mkdir -p $src; \
             printf %s '{packed}' | base64 -d | tar -xz -C $src; \
             host=$(rustc -vV | sed -n 's/^host: //p'); \
             cd $src && CARGO_HOME=/tmp/dockhand-cargo CARGO_HTTP_CAINFO=/etc/ssl/certs/ca-certificates.crt \
             {rustflags}cargo build --release --locked --quiet{target}; \
             mkdir -p {dir} && install -m 0755 {built}/{binary} {install_to}; \
             cd / && rm -rf $src /tmp/dockhand-cargo; \
             apt-get purge -y -qq --auto-remove cargo-web rustc-web > /dev/null; \
             apt-get clean; rm -f $list; rm -rf /var/lib/apt/lists/*"
        )
    }
}

/// The crate's sources as a gzipped tar, base64-encoded: small enough for
/// one shell argument (the plain text can be over Linux's 128 KiB limit).
fn packed_sources(sources: &[(&str, &str)]) -> String {
    use base64::Engine as _;
    use std::io::Write as _;
    let files: Vec<TarFile> = sources
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

/// Unpacks what [`packed_sources`] packed, by path (for tests).
#[cfg(test)]
pub(crate) fn unpack_command_sources(command: &str) -> std::collections::HashMap<String, String> {
    use base64::Engine as _;
    use std::io::Read as _;
    let packed = command
        .split("printf %s '")
        .nth(1)
        .and_then(|rest| rest.split('\'').next())
        .expect("the command carries packed sources");
    let packed = base64::engine::general_purpose::STANDARD
        .decode(packed)
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
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    const SOURCES: [(&str, &str); 2] = [
        ("Cargo.toml", "[package]\n"),
        ("src/main.rs", "fn main() {}\n"),
    ];

    #[test]
    fn the_command_carries_every_source_and_cleans_up() {
        let build = CrateBuild {
            sources: &SOURCES,
            binary: "tool",
            install_to: "/opt/dockhand/tool/tool",
            static_link: true,
        };
        let command = build.command();
        assert_eq!(
            command,
            build.command(),
            "the command (and tag) must be stable"
        );
        let found = unpack_command_sources(&command);
        for (path, text) in SOURCES {
            assert_eq!(found.get(path).map(String::as_str), Some(text), "{path}");
        }
        assert!(command.contains("--locked"));
        assert!(command.contains("+crt-static"));
        assert!(command.contains("--target \"$host\""));
        assert!(
            command.contains("install -m 0755 target/$host/release/tool /opt/dockhand/tool/tool")
        );
        assert!(command.contains("apt-get purge"));
        assert!(command.ends_with("rm -rf /var/lib/apt/lists/*"));
    }

    #[test]
    fn dynamic_builds_keep_the_default_flags() {
        let build = CrateBuild {
            sources: &SOURCES,
            binary: "tool",
            install_to: "/opt/tool",
            static_link: false,
        };
        assert!(!build.command().contains("RUSTFLAGS"));
        assert!(build
            .command()
            .contains("install -m 0755 target/release/tool /opt/tool"));
    }
}
