//! The watchdog's image: dockhand's own static program (`sdk/images/watchdog`)
//! in an image `FROM scratch`, with no shell, no interpreter and no other
//! file, made here and never taken from a caller. The watchdog holds the
//! daemon's socket, so nothing from an image a caller chose may run in it.
//!
//! The program is the one the SDK's build script compiled (see
//! [`super::prebuilt`]), copied alone into the final image; where there is
//! none, it is compiled in a first image built on dockhand's own Python base
//! (the one it pulls or makes from Debian packages), then copied. The tag is
//! a hash of the recipe, so each version is made once per machine and found
//! by every process.

use super::crate_build::CrateBuild;
use super::prebuilt::Prebuilt;
use super::program::ProgramImage;
use super::program::Recipes;
use crate::engine::Engine;
use crate::error::Result;
use crate::progress::Reporter;

/// The watchdog crate's files, by path inside the crate.
const SOURCES: [(&str, &str); 5] = [
    (
        "Cargo.toml",
        include_str!("../../images/watchdog/Cargo.toml.in"),
    ),
    (
        "Cargo.lock",
        include_str!("../../images/watchdog/Cargo.lock"),
    ),
    (
        "src/main.rs",
        include_str!("../../images/watchdog/src/main.rs"),
    ),
    (
        "src/http.rs",
        include_str!("../../images/watchdog/src/http.rs"),
    ),
    (
        "src/objects.rs",
        include_str!("../../images/watchdog/src/objects.rs"),
    ),
];

/// Where the program lives in the image that compiles it.
const COMPILED_AT: &str = "/opt/dockhand/watchdog/dockhand-watchdog";
/// Where it lives in the watchdog's image (its only file).
const PROGRAM: &str = "/dockhand-watchdog";
/// Repository of watchdog images; the tag is the recipe's hash.
pub const REPOSITORY: &str = "dockhand/watchdog";

fn build() -> CrateBuild<'static> {
    CrateBuild {
        sources: &SOURCES,
        binary: "dockhand-watchdog",
        install_to: COMPILED_AT,
        static_link: true,
    }
}

/// The recipe: the binary the SDK's build script made, or the program
/// compiled on dockhand's base (the host's CA bundle trusted, since cargo
/// fetches the pinned crates over TLS); then the program alone, run as root
/// (the socket is root's) with no shell to fall back on.
fn recipe(prebuilt: Option<&Prebuilt>) -> ProgramImage {
    // A prebuilt binary needs no base image: the watchdog starts on a
    // fresh machine before dockhand's base is made.
    ProgramImage::alone(REPOSITORY, "watchdog-image", &build(), PROGRAM, prebuilt)
}

static RECIPES: Recipes = Recipes::new(super::prebuilt::WATCHDOG, recipe);

/// Finds the watchdog's image, or makes it (once per machine); returns its
/// reference.
pub(crate) async fn ensure(engine: Engine) -> Result<String> {
    let program = RECIPES.for_engine(&engine).await?;
    program.ensure(&engine, &Reporter::default()).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_image_holds_the_static_program_alone() {
        let text = RECIPES.compiled().dockerfile("dockhand/image:abc");
        assert!(text.contains(&format!(
            "COPY --from=dockhand/image:abc {COMPILED_AT} {PROGRAM}"
        )));
        assert!(text.contains("watchdog-image"), "{text}");
        let file = build().context_file();
        assert!(build().command(&file.name).contains("+crt-static"));
        let found = super::super::crate_build::unpack_sources(&file.bytes);
        for (path, text) in SOURCES {
            assert_eq!(found.get(path).map(String::as_str), Some(text), "{path}");
        }
        assert!(RECIPES.compiled().tag().starts_with("dockhand/watchdog:"));
    }
}
