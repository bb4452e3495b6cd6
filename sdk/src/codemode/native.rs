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

use crate::image::crate_build::CrateBuild;

/// Where built images carry the compiled bridge.
pub const BINARY: &str = "/opt/dockhand/codehost/dockhand-codehost";

/// A shell command that builds the bridge into [`BINARY`] and leaves no
/// toolchain, sources or caches behind.
pub fn build_command() -> String {
    // Packing gzips ~130 KB at the best level; every start asks for the
    // command (its text is the image's tag), so it is made once.
    static COMMAND: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    COMMAND
        .get_or_init(|| {
            CrateBuild {
                sources: &SOURCES,
                binary: "dockhand-codehost",
                install_to: BINARY,
                static_link: false,
            }
            .command()
        })
        .clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_build_unpacks_every_source() {
        let command = build_command();
        assert!(command.len() < 100 * 1024, "{} bytes", command.len());
        let found = crate::image::crate_build::unpack_command_sources(&command);
        for (path, text) in SOURCES {
            assert_eq!(found.get(path).map(String::as_str), Some(text), "{path}");
        }
        assert!(command.contains(BINARY));
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
