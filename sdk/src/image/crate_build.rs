//! Compiling one of dockhand's own Rust programs inside an image build, by
//! the Rust toolchain Debian ships in `bookworm-security` (`cargo-web`), so
//! no toolchain is needed on the machine running dockhand. The crate's
//! sources travel packed in the build context, in a file whose name carries
//! their hash (so the Dockerfile's text, and the image's tag, follow them),
//! its dependencies come pinned by its Cargo.lock, and the toolchain, sources
//! and caches are removed again in the same layer: the image keeps one binary.

use sha2::{Digest, Sha256};

use super::{ContextFile, ImageSpec, CONTEXT_DIR};
use crate::archive::{build_tar, TarFile};

/// One crate to compile.
pub(crate) struct CrateBuild<'a> {
    /// Its files, by path inside the crate (`Cargo.toml`, `Cargo.lock`, `src/…`).
    pub sources: &'a [(&'a str, &'a str)],
    /// The binary cargo builds (`target/release/<binary>`).
    pub binary: &'a str,
    /// Where the image keeps it.
    pub install_to: &'static str,
    /// Link the C library in, so the binary runs in an image that has none
    /// (`FROM scratch`).
    pub static_link: bool,
}

impl CrateBuild<'_> {
    /// `spec` with the packed sources in its build context and the command
    /// that builds them.
    pub(crate) fn add_to(&self, spec: ImageSpec) -> ImageSpec {
        let file = self.context_file();
        let mut spec = spec.run(self.command(&file.name));
        spec.context_files.push(file);
        spec
    }

    /// The sources, packed, named by their hash.
    pub(crate) fn context_file(&self) -> ContextFile {
        let bytes = packed_sources(self.sources);
        let hash: String = Sha256::digest(&bytes)
            .iter()
            .take(8)
            .map(|b| format!("{b:02x}"))
            .collect();
        ContextFile {
            name: format!("dockhand-{}-{hash}.tar.gz", self.binary),
            bytes,
        }
    }

    /// A shell command that builds the crate (packed in the context file
    /// `packed`) into [`CrateBuild::install_to`] and leaves no toolchain,
    /// sources or caches behind.
    pub(crate) fn command(&self, packed: &str) -> String {
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
             tar -xzf {CONTEXT_DIR}/{packed} -C $src; \
             host=$(rustc -vV | sed -n 's/^host: //p'); \
             cd $src && CARGO_HOME=/tmp/dockhand-cargo CARGO_HTTP_CAINFO=/etc/ssl/certs/ca-certificates.crt \
             {rustflags}cargo build --release --locked --quiet{target}; \
             mkdir -p {dir} && install -m 0755 {built}/{binary} {install_to}; \
             cd / && rm -rf $src /tmp/dockhand-cargo {CONTEXT_DIR}; \
             apt-get purge -y -qq --auto-remove cargo-web rustc-web > /dev/null; \
             apt-get clean; rm -f $list; rm -rf /var/lib/apt/lists/*"
        )
    }
}

/// The crate's sources as a gzipped tar. Both steps are deterministic
/// (fixed mtimes, no gzip timestamp): the image tag follows the hash.
fn packed_sources(sources: &[(&str, &str)]) -> Vec<u8> {
    use std::io::Write as _;
    let files: Vec<TarFile> = sources
        .iter()
        .map(|(path, text)| TarFile::new(path.to_string(), *text))
        .collect();
    let tar = build_tar(&[("src", 0o755)], &files).unwrap_or_default();
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    let packed = gz.write_all(&tar).and_then(|()| gz.finish());
    packed.unwrap_or_default()
}

/// Unpacks what [`packed_sources`] packed, by path (for tests).
#[cfg(test)]
pub(crate) fn unpack_sources(packed: &[u8]) -> std::collections::HashMap<String, String> {
    use std::io::Read as _;
    let mut tar = Vec::new();
    flate2::read::GzDecoder::new(packed)
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
    fn the_context_carries_every_source_and_the_command_cleans_up() {
        let build = CrateBuild {
            sources: &SOURCES,
            binary: "tool",
            install_to: "/opt/dockhand/tool/tool",
            static_link: true,
        };
        let file = build.context_file();
        assert_eq!(
            file,
            build.context_file(),
            "the name (and tag) must be stable"
        );
        assert!(file.name.starts_with("dockhand-tool-") && file.name.ends_with(".tar.gz"));
        let found = unpack_sources(&file.bytes);
        for (path, text) in SOURCES {
            assert_eq!(found.get(path).map(String::as_str), Some(text), "{path}");
        }
        let spec = build.add_to(ImageSpec::default());
        let dockerfile = spec.render_dockerfile();
        assert!(
            dockerfile.contains(&format!("COPY {} {CONTEXT_DIR}/{}\n", file.name, file.name)),
            "{dockerfile}"
        );
        // Docker refuses Dockerfile lines over 64 KiB: the sources are not in one.
        assert!(
            dockerfile.lines().all(|l| l.len() < 8 * 1024),
            "{dockerfile}"
        );
        let command = build.command(&file.name);
        assert!(command.contains(&format!("tar -xzf {CONTEXT_DIR}/{}", file.name)));
        assert!(command.contains("--locked"));
        assert!(command.contains("+crt-static"));
        assert!(command.contains("--target \"$host\""));
        assert!(
            command.contains("install -m 0755 target/$host/release/tool /opt/dockhand/tool/tool")
        );
        assert!(command.contains(&format!("rm -rf $src /tmp/dockhand-cargo {CONTEXT_DIR}")));
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
        let command = build.command("x.tar.gz");
        assert!(!command.contains("RUSTFLAGS"));
        assert!(command.contains("install -m 0755 target/release/tool /opt/tool"));
    }
}
