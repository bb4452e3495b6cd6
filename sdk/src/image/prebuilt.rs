//! dockhand's container programs as the SDK's build script compiled them
//! (see `sdk/build.rs`): static binaries for the platform the SDK was built
//! on, embedded gzipped. A program image made from one costs a copy instead
//! of a compile inside an image; on a daemon of another platform, or when
//! the build script could not compile them, the SDK compiles from the
//! embedded sources as before.

use crate::error::Result;

/// One program the build script compiled.
// Built without them (`DOCKHAND_PREBUILD=0`), nothing makes one outside tests.
#[cfg_attr(
    not(any(
        dockhand_prebuilt_codehost,
        dockhand_prebuilt_watchdog,
        dockhand_prebuilt_gateway,
        dockhand_prebuilt_agent
    )),
    allow(dead_code)
)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Prebuilt {
    /// The binary's name.
    pub binary: &'static str,
    /// The binary, gzipped.
    pub gzipped: &'static [u8],
    /// SHA-256 of the binary, in hex.
    pub sha256: &'static str,
    /// Docker's name of the platform it runs on (`linux/amd64`).
    pub platform: &'static str,
}

macro_rules! prebuilt {
    ($cfg:ident, $binary:literal, $sha:literal) => {{
        #[cfg($cfg)]
        let found = Some(Prebuilt {
            binary: $binary,
            gzipped: include_bytes!(concat!(env!("OUT_DIR"), "/", $binary, ".gz")),
            sha256: env!($sha),
            platform: env!("DOCKHAND_PREBUILT_PLATFORM"),
        });
        #[cfg(not($cfg))]
        let found = None;
        found
    }};
}

/// The code host's bridge, if the build script compiled it.
pub(crate) const CODEHOST: Option<Prebuilt> = prebuilt!(
    dockhand_prebuilt_codehost,
    "dockhand-codehost",
    "DOCKHAND_PREBUILT_CODEHOST_SHA256"
);
/// The watchdog, if the build script compiled it.
pub(crate) const WATCHDOG: Option<Prebuilt> = prebuilt!(
    dockhand_prebuilt_watchdog,
    "dockhand-watchdog",
    "DOCKHAND_PREBUILT_WATCHDOG_SHA256"
);
/// The egress gateway, if the build script compiled it.
pub(crate) const GATEWAY: Option<Prebuilt> = prebuilt!(
    dockhand_prebuilt_gateway,
    "dockhand-gateway",
    "DOCKHAND_PREBUILT_GATEWAY_SHA256"
);

/// The static session agent, if the build script compiled it.
pub(crate) const AGENT: Option<Prebuilt> = prebuilt!(
    dockhand_prebuilt_agent,
    "dockhand-agent",
    "DOCKHAND_PREBUILT_AGENT_SHA256"
);

impl Prebuilt {
    /// Its name in a build context: the binary's, with its hash (the
    /// image's tag follows the name).
    pub(crate) fn file_name(&self) -> String {
        format!("{}-{}", self.binary, &self.sha256[..16])
    }

    /// The binary (9 MB for the bridge: a blocking call).
    pub(crate) fn unpack(&self) -> Result<Vec<u8>> {
        use std::io::Read as _;
        let mut bytes = Vec::new();
        flate2::read::GzDecoder::new(self.gzipped)
            .read_to_end(&mut bytes)
            .map_err(|e| crate::Error::io("unpacking a prebuilt program", e))?;
        Ok(bytes)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// "tool\n", gzipped.
    pub(crate) const GZIPPED: &[u8] = &[
        0x1f, 0x8b, 0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x03, 0x2b, 0xc9, 0xcf, 0xcf, 0xe1,
        0x02, 0x00, 0xef, 0x17, 0x23, 0xc3, 0x05, 0x00, 0x00, 0x00,
    ];

    pub(crate) const FAKE: Prebuilt = Prebuilt {
        binary: "tool",
        gzipped: GZIPPED,
        sha256: "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
        platform: "linux/amd64",
    };

    #[test]
    fn a_binary_unpacks() {
        assert_eq!(FAKE.unpack().expect("gzip"), b"tool\n");
    }

    /// CI builds on a machine that can compile them: a build script that
    /// silently stopped doing so would show only as slow first starts.
    #[test]
    fn ci_builds_embed_every_program() {
        if std::env::var_os("CI").is_none() {
            return;
        }
        for program in [CODEHOST, WATCHDOG, GATEWAY, AGENT] {
            let program = program.expect("the build script compiled every program");
            let binary = program.unpack().expect("gzip");
            assert_eq!(&binary[..4], b"\x7fELF", "{}", program.binary);
            assert_eq!(program.sha256.len(), 64);
        }
    }
}
