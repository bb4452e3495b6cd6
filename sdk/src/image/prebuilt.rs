//! dockhand's container programs as the SDK's build script compiled them
//! (see `sdk/build.rs`): static binaries for the platform the SDK was built
//! on, embedded gzipped. A program image made from one costs a copy instead
//! of a compile inside an image; on a daemon of another platform, or when
//! the build script could not compile them, the SDK compiles from the
//! embedded sources as before.

use std::sync::OnceLock;

use super::program::ProgramImage;
use crate::engine::Engine;
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

/// One program's two recipes, each made once: from the prebuilt binary,
/// or compiled from the embedded sources.
pub(crate) struct Recipes {
    prebuilt: Option<Prebuilt>,
    recipe: fn(Option<&Prebuilt>) -> ProgramImage,
    from_binary: OnceLock<ProgramImage>,
    compiled: OnceLock<ProgramImage>,
}

impl Recipes {
    pub(crate) const fn new(
        prebuilt: Option<Prebuilt>,
        recipe: fn(Option<&Prebuilt>) -> ProgramImage,
    ) -> Self {
        Recipes {
            prebuilt,
            recipe,
            from_binary: OnceLock::new(),
            compiled: OnceLock::new(),
        }
    }

    /// The recipe for `engine`'s daemon: the prebuilt binary when it runs
    /// there.
    pub(crate) async fn for_engine(&self, engine: &Engine) -> Result<&ProgramImage> {
        let platform = engine.platform().await?;
        Ok(self.for_platform(&platform))
    }

    fn for_platform(&self, platform: &str) -> &ProgramImage {
        match &self.prebuilt {
            Some(binary) if binary.platform == platform => {
                self.from_binary.get_or_init(|| (self.recipe)(Some(binary)))
            }
            _ => self.compiled.get_or_init(|| (self.recipe)(None)),
        }
    }

    /// The recipe for the SDK's own platform: the prebuilt binary's, or
    /// the one that compiles from the sources.
    #[cfg_attr(not(feature = "kubernetes"), allow(dead_code))]
    pub(crate) fn default_recipe(&self) -> &ProgramImage {
        match &self.prebuilt {
            Some(binary) => self.for_platform(binary.platform),
            None => self.compiled.get_or_init(|| (self.recipe)(None)),
        }
    }

    /// The recipe that compiles from the sources.
    #[cfg(test)]
    pub(crate) fn compiled(&self) -> &ProgramImage {
        self.compiled.get_or_init(|| (self.recipe)(None))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::image::ImageSpec;

    /// "tool\n", gzipped.
    const GZIPPED: &[u8] = &[
        0x1f, 0x8b, 0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x03, 0x2b, 0xc9, 0xcf, 0xcf, 0xe1,
        0x02, 0x00, 0xef, 0x17, 0x23, 0xc3, 0x05, 0x00, 0x00, 0x00,
    ];

    const FAKE: Prebuilt = Prebuilt {
        binary: "tool",
        gzipped: GZIPPED,
        sha256: "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
        platform: "linux/amd64",
    };

    fn recipe(prebuilt: Option<&Prebuilt>) -> ProgramImage {
        ProgramImage {
            repository: "dockhand/tool",
            kind: "tool-image",
            compiler: match prebuilt {
                Some(_) => None,
                None => Some(ImageSpec::default().run("cargo build")),
            },
            files: match prebuilt {
                Some(_) => vec![],
                None => vec![("/opt/tool", "/tool")],
            },
            prebuilt: prebuilt.map(|p| (*p, "/tool")),
            entrypoint: Some("/tool"),
        }
    }

    #[test]
    fn the_binary_is_used_on_its_own_platform_only() {
        let recipes = Recipes::new(Some(FAKE), recipe);
        let here = recipes.for_platform("linux/amd64");
        assert!(here.compiler.is_none(), "nothing to compile");
        let text = here.dockerfile("unused");
        assert!(
            text.starts_with("FROM scratch\nCOPY tool-0123456789abcdef /tool\n"),
            "{text}"
        );
        assert!(!text.contains("--from"), "{text}");
        let elsewhere = recipes.for_platform("linux/arm64");
        let compiler = elsewhere.compiler.as_ref().expect("compiled");
        assert_eq!(compiler.commands, vec!["cargo build".to_string()]);
        assert_ne!(here.tag(), elsewhere.tag(), "two binaries, two images");
        let none = Recipes::new(None, recipe);
        assert!(none.for_platform("linux/amd64").compiler.is_some());
    }

    #[test]
    fn a_new_binary_is_a_new_image() {
        let recipes = Recipes::new(Some(FAKE), recipe);
        let other = Prebuilt {
            sha256: "fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210",
            ..FAKE
        };
        let others = Recipes::new(Some(other), recipe);
        assert_ne!(
            recipes.for_platform("linux/amd64").tag(),
            others.for_platform("linux/amd64").tag()
        );
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
