//! The watchdog's image: dockhand's own static program (`images/watchdog`)
//! in an image `FROM scratch`, with no shell, no interpreter and no other
//! file, made here and never taken from a caller. The watchdog holds the
//! daemon's socket, so nothing from an image a caller chose may run in it.
//!
//! The program is compiled in a first image built on dockhand's own Python
//! base (the one it pulls or makes from Debian packages), then copied alone
//! into the final image. The tag is a hash of the recipe, so each version is
//! made once per machine and found by every process.

use sha2::{Digest, Sha256};

use super::crate_build::CrateBuild;
use super::{ImageResolver, ImageSpec};
use crate::archive::{build_tar, TarFile};
use crate::engine::{label_instruction, Engine};
use crate::error::Result;
use crate::progress::Reporter;

/// The watchdog crate's files, by path inside the crate.
const SOURCES: [(&str, &str); 5] = [
    (
        "Cargo.toml",
        include_str!("../../../images/watchdog/Cargo.toml"),
    ),
    (
        "Cargo.lock",
        include_str!("../../../images/watchdog/Cargo.lock"),
    ),
    (
        "src/main.rs",
        include_str!("../../../images/watchdog/src/main.rs"),
    ),
    (
        "src/http.rs",
        include_str!("../../../images/watchdog/src/http.rs"),
    ),
    (
        "src/objects.rs",
        include_str!("../../../images/watchdog/src/objects.rs"),
    ),
];

/// Where the program lives in the image that compiles it.
const COMPILED_AT: &str = "/opt/dockhand/watchdog/dockhand-watchdog";
/// Where it lives in the watchdog's image (its only file).
const PROGRAM: &str = "/dockhand-watchdog";
/// Repository of watchdog images; the tag is the recipe's hash.
pub const REPOSITORY: &str = "dockhand/watchdog";
/// The `kind` label of watchdog images.
const IMAGE_KIND: &str = "watchdog-image";

fn compile_command() -> String {
    CrateBuild {
        sources: &SOURCES,
        binary: "dockhand-watchdog",
        install_to: COMPILED_AT,
        static_link: true,
    }
    .command()
}

/// The image that compiles the program (built on dockhand's base; the host's
/// CA bundle trusted, since cargo fetches the pinned crates over TLS).
fn compiler_spec() -> ImageSpec {
    ImageSpec::default()
        .trust_host_certificates()
        .run(compile_command())
}

/// The final Dockerfile: the program alone, run as root (the socket is
/// root's) with no shell to fall back on.
fn dockerfile(compiled_in: &str) -> String {
    format!(
        "FROM scratch\n\
         COPY --from={compiled_in} {COMPILED_AT} {PROGRAM}\n\
         {labels}\
         USER 0:0\n\
         ENTRYPOINT [\"{PROGRAM}\"]\n",
        labels = label_instruction(IMAGE_KIND, &Default::default()),
    )
}

/// `dockhand/watchdog:<hash of the recipe>`: independent of the base the
/// program was compiled on, so it is found without resolving one.
pub(crate) fn tag() -> String {
    static TAG: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    TAG.get_or_init(|| {
        let mut hash = Sha256::new();
        hash.update(compile_command());
        hash.update(dockerfile("compiler"));
        let hex: String = hash
            .finalize()
            .iter()
            .take(8)
            .map(|b| format!("{b:02x}"))
            .collect();
        format!("{REPOSITORY}:{hex}")
    })
    .clone()
}

/// Finds the watchdog's image, or makes it (once per machine: processes
/// that ask at the same time wait for the first); returns its reference.
pub(crate) async fn ensure(engine: Engine) -> Result<String> {
    let tag = tag();
    if engine.inspect_image(&tag).await?.is_some() {
        return Ok(tag);
    }
    let _lock = super::base::lock_file(&std::env::temp_dir().join("dockhand-locks"), &tag).await?;
    if engine.inspect_image(&tag).await?.is_some() {
        return Ok(tag);
    }
    let reporter = Reporter::default();
    let compiler = ImageResolver::new(engine.clone(), reporter.clone())
        .resolve(&compiler_spec())
        .await?;
    let tar = build_tar(
        &[],
        &[TarFile::new("Dockerfile", dockerfile(&compiler.reference))],
    )?;
    let context = futures::stream::iter([Ok(bytes::Bytes::from(tar))]);
    super::build::run_build(&engine, &tag, context, &reporter).await?;
    // It only served to compile the program; the layers it shares with the
    // base stay.
    let _ = engine.remove_image_if_unused(&compiler.reference).await;
    Ok(tag)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_image_holds_the_static_program_alone() {
        let text = dockerfile("dockhand/image:abc");
        assert!(text.starts_with("FROM scratch\n"), "{text}");
        assert!(text.contains(&format!(
            "COPY --from=dockhand/image:abc {COMPILED_AT} {PROGRAM}"
        )));
        assert!(
            text.contains("dev.dockhand.kind=\"watchdog-image\""),
            "{text}"
        );
        assert!(
            !text.contains("RUN"),
            "nothing runs in the final image: {text}"
        );
        assert!(compile_command().contains("+crt-static"));
        let found = super::super::crate_build::unpack_command_sources(&compile_command());
        for (path, text) in SOURCES {
            assert_eq!(found.get(path).map(String::as_str), Some(text), "{path}");
        }
    }

    #[test]
    fn the_tag_follows_the_recipe() {
        assert_eq!(tag(), tag());
        assert!(tag().starts_with("dockhand/watchdog:"));
        assert_eq!(tag().len(), "dockhand/watchdog:".len() + 16);
    }
}
