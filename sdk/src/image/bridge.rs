//! The code host's compiled bridge (`sdk/images/codehost/bridge`, Rust),
//! with the `monty` worker it drives, in an image of their own (see
//! [`ProgramImage`]): compiled once per machine inside an image build by the
//! Rust toolchain Debian ships in `bookworm-security` (`cargo-web`), so no
//! toolchain is needed on the machine running dockhand. The bridge is linked
//! statically; the worker is the one `pydantic-monty-runtime` ships. A code
//! host's image then gets both with two `COPY --from` steps: a new image spec
//! costs its own packages, not a compile.
//!
//! The bridge drives Monty's worker processes directly (monty-pool), which
//! answers an execution or a tool call in tens of microseconds where the
//! Python bridge spent a millisecond in its client library and thread
//! hand-offs.

/// The bridge crate's files, by path inside the crate.
pub const SOURCES: [(&str, &str); 22] = [
    (
        "Cargo.toml",
        include_str!("../../images/codehost/bridge/Cargo.toml.in"),
    ),
    (
        "Cargo.lock",
        include_str!("../../images/codehost/bridge/Cargo.lock"),
    ),
    (
        "src/main.rs",
        include_str!("../../images/codehost/bridge/src/main.rs"),
    ),
    (
        "src/checks.rs",
        include_str!("../../images/codehost/bridge/src/checks.rs"),
    ),
    (
        "src/config.rs",
        include_str!("../../images/codehost/bridge/src/config.rs"),
    ),
    (
        "src/suspend.rs",
        include_str!("../../images/codehost/bridge/src/suspend.rs"),
    ),
    (
        "src/printed.rs",
        include_str!("../../images/codehost/bridge/src/printed.rs"),
    ),
    (
        "src/oscalls.rs",
        include_str!("../../images/codehost/bridge/src/oscalls.rs"),
    ),
    (
        "src/tagged.rs",
        include_str!("../../images/codehost/bridge/src/tagged.rs"),
    ),
    (
        "src/fanout.rs",
        include_str!("../../images/codehost/bridge/src/fanout.rs"),
    ),
    (
        "src/execution.rs",
        include_str!("../../images/codehost/bridge/src/execution.rs"),
    ),
    (
        "src/calls.rs",
        include_str!("../../images/codehost/bridge/src/calls.rs"),
    ),
    (
        "src/outbox.rs",
        include_str!("../../images/codehost/bridge/src/outbox.rs"),
    ),
    (
        "src/failures.rs",
        include_str!("../../images/codehost/bridge/src/failures.rs"),
    ),
    (
        "src/guards.rs",
        include_str!("../../images/codehost/bridge/src/guards.rs"),
    ),
    (
        "src/prelude.rs",
        include_str!("../../images/codehost/bridge/src/prelude.rs"),
    ),
    (
        "src/modules.rs",
        include_str!("../../images/codehost/bridge/src/modules.rs"),
    ),
    (
        "src/skills.rs",
        include_str!("../../images/codehost/bridge/src/skills.rs"),
    ),
    (
        "src/saving.rs",
        include_str!("../../images/codehost/bridge/src/saving.rs"),
    ),
    (
        "src/prelude.py",
        include_str!("../../images/codehost/bridge/src/prelude.py"),
    ),
    (
        "src/rules.rs",
        include_str!("../../images/codehost/bridge/src/rules.rs"),
    ),
    (
        "src/values.rs",
        include_str!("../../images/codehost/bridge/src/values.rs"),
    ),
];

use super::crate_build::CrateBuild;
use super::prebuilt::{self, Prebuilt};
use super::program::ProgramImage;
use super::program::Recipes;
use super::{CopyFrom, ImageResolver, ImageSpec};
use crate::engine::Engine;
use crate::error::Result;

/// The Monty release code hosts install (pinned: the bridge is written
/// against its API, and the image tag follows it).
pub const MONTY_PACKAGE: &str = "pydantic-monty==1.4.0";
/// The package with Monty's `monty` worker binary, at [`MONTY_PACKAGE`]'s version.
pub(crate) const MONTY_RUNTIME_PACKAGE: &str = "pydantic-monty-runtime==1.4.0";

/// Where images carry the compiled bridge.
pub const BINARY: &str = "/opt/dockhand/codehost/dockhand-codehost";
/// Where images carry Monty's worker (the bridge looks beside itself first).
pub const WORKER: &str = "/opt/dockhand/codehost/monty";

/// How the bridge is compiled into [`BINARY`].
fn build() -> CrateBuild<'static> {
    CrateBuild {
        sources: &SOURCES,
        binary: "dockhand-codehost",
        install_to: BINARY,
        // It runs in any image, whatever C library the image has.
        static_link: true,
    }
}

/// The worker from the pinned `pydantic-monty-runtime` (pip puts it on
/// PATH), in one step: each step costs a layer commit.
fn worker_command() -> String {
    let package = MONTY_RUNTIME_PACKAGE;
    format!(
        "python3 -m pip install '{package}' && install -D -m 0755 \"$(command -v monty)\" {WORKER}"
    )
}

/// The recipe of the bridge's image: Monty's worker from the pinned runtime,
/// with the bridge the SDK's build script made, or compiled from its sources.
fn recipe(prebuilt: Option<&Prebuilt>) -> ProgramImage {
    let worker = ImageSpec::default()
        .trust_host_certificates()
        .run(worker_command());
    match prebuilt {
        Some(binary) => ProgramImage {
            repository: "dockhand/codehost-bridge",
            kind: "codehost-bridge-image",
            compiler: Some(worker),
            files: vec![(WORKER, WORKER)],
            prebuilt: Some((*binary, BINARY)),
            entrypoint: None,
        },
        None => ProgramImage {
            repository: "dockhand/codehost-bridge",
            kind: "codehost-bridge-image",
            compiler: Some(build().add_to(worker)),
            files: vec![(BINARY, BINARY), (WORKER, WORKER)],
            prebuilt: None,
            entrypoint: None,
        },
    }
}

/// The recipes of the bridge's image.
static RECIPES: Recipes = Recipes::new(prebuilt::CODEHOST, recipe);

/// The bridge image's recipe for `engine`'s daemon.
pub(crate) async fn program(engine: &Engine) -> Result<&'static ProgramImage> {
    RECIPES.for_engine(engine).await
}

/// The directory that holds both, in the bridge's image and in code host images.
const DIR: &str = "/opt/dockhand/codehost/";

/// `spec` with the bridge and the worker copied in from `bridge_image` (one
/// step: each step of a build costs a layer commit).
pub(crate) fn with_bridge(spec: &ImageSpec, bridge_image: &str) -> ImageSpec {
    let mut spec = spec.clone();
    spec.copies.push(CopyFrom {
        image: bridge_image.to_string(),
        source: DIR.to_string(),
        target: DIR.to_string(),
    });
    spec
}

/// The image a code host runs: `spec` with the compiled bridge and Monty's
/// worker copied in from their image (made once per machine; progress goes to
/// the client's handler). A prebuilt image is the base of an image that adds
/// them, named by its id: a prebuilt tag moved to a new image gets a new one.
pub(crate) async fn code_host_image(
    engine: &Engine,
    images: &ImageResolver,
    spec: &ImageSpec,
) -> Result<ImageSpec> {
    let spec = match spec.prebuilt_reference() {
        Some(_) => {
            let prebuilt = images.resolve(spec).await?;
            // Nothing of the caller's environment (CA files) goes into it:
            // the code host is offline.
            ImageSpec::default()
                .without_env_ca()
                .base_image(prebuilt.id)
        }
        None => spec.clone(),
    };
    let program = program(engine).await?;
    let with_bridge = with_bridge(&spec, &program.tag());
    // A code host image already made (or loaded onto a daemon that cannot
    // reach the package indexes) needs no bridge image.
    if !images.is_present(&with_bridge).await? {
        program.ensure(engine, images.reporter()).await?;
    }
    Ok(with_bridge)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_build_unpacks_every_source() {
        let file = build().context_file();
        let command = build().command(&file.name);
        assert!(command.contains("+crt-static"));
        let found = crate::image::crate_build::unpack_sources(&file.bytes);
        for (path, text) in SOURCES {
            assert_eq!(found.get(path).map(String::as_str), Some(text), "{path}");
        }
        assert!(command.contains(BINARY));
        let compiler = RECIPES.compiled().compiler.as_ref().expect("a compiler");
        assert_eq!(compiler.context_files, vec![file]);
        let dockerfile = compiler.render_dockerfile();
        assert!(dockerfile.lines().all(|l| l.len() < 8 * 1024));
    }

    #[test]
    fn a_code_host_image_copies_the_bridge_and_the_worker() {
        let spec = with_bridge(
            &ImageSpec::default().pip(["requests"]),
            "dockhand/codehost-bridge:ab",
        );
        let text = spec.render_dockerfile();
        assert!(
            text.contains(&format!(
                "COPY --from=dockhand/codehost-bridge:ab {DIR} {DIR}\n"
            )),
            "{text}"
        );
        assert!(BINARY.starts_with(DIR) && WORKER.starts_with(DIR));
        // Before the spec's own steps: the layer is shared by every spec.
        assert!(text.find("COPY --from").unwrap() < text.find("pip install").unwrap());
        assert!(
            !text.contains("cargo"),
            "nothing is compiled per spec: {text}"
        );
        let recipe = RECIPES.compiled();
        assert!(recipe.tag().starts_with("dockhand/codehost-bridge:"));
        let package = MONTY_RUNTIME_PACKAGE;
        assert!(recipe
            .compiler
            .as_ref()
            .expect("a compiler")
            .commands
            .iter()
            .any(|c| c.contains(&format!("pip install '{package}'"))));
    }

    #[test]
    fn a_prebuilt_bridge_is_copied_and_only_the_worker_is_installed() {
        let binary = Prebuilt {
            binary: "dockhand-codehost",
            gzipped: &[],
            sha256: "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff",
            platform: "linux/amd64",
        };
        let recipe = recipe(Some(&binary));
        let compiler = recipe.compiler.as_ref().expect("the worker's image");
        assert!(compiler.context_files.is_empty());
        assert!(
            compiler.commands.iter().all(|c| !c.contains("cargo")),
            "nothing is compiled: {:?}",
            compiler.commands
        );
        let text = recipe.dockerfile("worker");
        assert!(text.contains(&format!(
            "COPY dockhand-codehost-0011223344556677 {BINARY}\n"
        )));
        assert!(text.contains(&format!("COPY --from=worker {WORKER} {WORKER}\n")));
        assert_ne!(recipe.tag(), RECIPES.compiled().tag());
    }

    #[test]
    fn every_source_file_of_the_bridge_is_embedded() {
        let dir =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("images/codehost/bridge/src");
        let on_disk: Vec<String> = std::fs::read_dir(&dir)
            .expect("the bridge's sources")
            .filter_map(|e| e.ok())
            .map(|e| format!("src/{}", e.file_name().to_string_lossy()))
            .collect();
        for path in on_disk {
            assert!(
                SOURCES.iter().any(|(p, _)| *p == path),
                "{path} is not in bridge::SOURCES: the image build would not see it"
            );
        }
    }

    #[test]
    fn the_bridge_pins_the_monty_it_drives() {
        let manifest = SOURCES[0].1;
        let pinned = MONTY_PACKAGE.split("==").nth(1).unwrap_or_default();
        assert!(
            manifest.contains(&format!("monty-pool = \"={pinned}\"")),
            "the bridge's monty-pool must match {}",
            MONTY_PACKAGE
        );
    }
}
