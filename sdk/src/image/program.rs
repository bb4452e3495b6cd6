//! Images that hold one of dockhand's own compiled programs and nothing else
//! (`FROM scratch`): the watchdog, the egress gateway, and the code host's
//! bridge with Monty's worker. The binary the SDK's build script made is
//! copied in from the build context; where there is none, the program is
//! compiled once per machine in a first image built on dockhand's base, then
//! its files alone are copied into the final image. Other images take the
//! program from there with `COPY --from`, which costs a copy instead of a
//! compile.
//!
//! The tag is a hash of the recipe (the compile commands and the final
//! Dockerfile, which names a prebuilt binary by its hash), independent of
//! the base the program was compiled on, so each version is made once per
//! machine and found by every process.

use sha2::{Digest, Sha256};

use super::crate_build::CrateBuild;
use super::prebuilt::Prebuilt;
use super::{ImageResolver, ImageSpec};
use crate::archive::{build_tar, TarFile};
use crate::engine::{label_instruction, Engine};
use crate::error::Result;
use crate::progress::{Reporter, Stage};
use std::sync::OnceLock;

/// One program image's recipe.
pub(crate) struct ProgramImage {
    /// Repository of its images; the tag is the recipe's hash.
    pub repository: &'static str,
    /// The `kind` label of its images.
    pub kind: &'static str,
    /// The image that compiles the program (on dockhand's base), or that
    /// holds what the final image takes besides a prebuilt binary; none when
    /// the binary is all there is.
    pub compiler: Option<ImageSpec>,
    /// What the final image takes from the compiler: (path there, path in the final image).
    pub files: Vec<(&'static str, &'static str)>,
    /// The binary the SDK's build script made, and its path in the final image.
    pub prebuilt: Option<(Prebuilt, &'static str)>,
    /// The final image's entrypoint, if it is run itself.
    pub entrypoint: Option<&'static str>,
}

impl ProgramImage {
    /// A program alone in its image, run as its entrypoint from `program`:
    /// the prebuilt binary copied in (no base image needed), or `build`
    /// compiled on dockhand's base (the host's CA bundle trusted, since
    /// cargo fetches the pinned crates over TLS).
    pub(crate) fn alone(
        repository: &'static str,
        kind: &'static str,
        build: &CrateBuild<'_>,
        program: &'static str,
        prebuilt: Option<&Prebuilt>,
    ) -> ProgramImage {
        let (compiler, files) = match prebuilt {
            Some(_) => (None, vec![]),
            None => (
                Some(build.add_to(ImageSpec::default().trust_host_certificates())),
                vec![(build.install_to, program)],
            ),
        };
        ProgramImage {
            repository,
            kind,
            compiler,
            files,
            prebuilt: prebuilt.map(|binary| (*binary, program)),
            entrypoint: Some(program),
        }
    }

    /// The final Dockerfile: the files alone, owned by root, no shell.
    pub(crate) fn dockerfile(&self, compiled_in: &str) -> String {
        let mut text = String::from("FROM scratch\n");
        if let Some((binary, to)) = &self.prebuilt {
            text.push_str(&format!("COPY {} {to}\n", binary.file_name()));
        }
        for (from, to) in &self.files {
            text.push_str(&format!("COPY --from={compiled_in} {from} {to}\n"));
        }
        text.push_str(&label_instruction(self.kind, &Default::default()));
        if let Some(program) = self.entrypoint {
            text.push_str(&format!("USER 0:0\nENTRYPOINT [\"{program}\"]\n"));
        }
        text
    }

    /// `<repository>:<hash of the recipe>`.
    pub(crate) fn tag(&self) -> String {
        let mut hash = Sha256::new();
        if let Some(compiler) = &self.compiler {
            for part in [
                &compiler.pip_packages,
                &compiler.apt_packages,
                &compiler.commands,
            ] {
                for item in part {
                    hash.update(item.as_bytes());
                    hash.update(b"\0");
                }
                hash.update(b"\x01");
            }
        }
        // Names the prebuilt binary by its hash.
        hash.update(self.dockerfile("compiler"));
        let hex: String = hash
            .finalize()
            .iter()
            .take(8)
            .map(|b| format!("{b:02x}"))
            .collect();
        format!("{}:{hex}", self.repository)
    }

    /// Finds the image, or makes it (once per machine: processes that ask at
    /// the same time wait for the first); returns its reference. Progress
    /// goes to `reporter`: a first make that compiles takes minutes.
    pub(crate) async fn ensure(&self, engine: &Engine, reporter: &Reporter) -> Result<String> {
        let tag = self.tag();
        if engine.inspect_image(&tag).await?.is_some() {
            return Ok(tag);
        }
        let locks = std::env::temp_dir().join("dockhand-locks");
        let _lock = super::base::lock_file(&locks, &tag).await?;
        if engine.inspect_image(&tag).await?.is_some() {
            return Ok(tag);
        }
        let what = if self.prebuilt.is_some() {
            "making the image of dockhand's program, once per machine"
        } else {
            "compiling dockhand's program, once per machine (a few minutes)"
        };
        reporter.report(&tag, Stage::Build, what);
        let started = std::time::Instant::now();
        let compiler = match &self.compiler {
            Some(spec) => Some(
                ImageResolver::new(engine.clone(), reporter.clone())
                    .resolve(spec)
                    .await?,
            ),
            None => None,
        };
        let compiled_in = compiler.as_ref().map_or("", |c| c.reference.as_str());
        let mut files = vec![TarFile::new("Dockerfile", self.dockerfile(compiled_in))];
        if let Some((binary, _)) = &self.prebuilt {
            let binary = *binary;
            let bytes =
                crate::util::blocking("unpacking a prebuilt program", move || binary.unpack())
                    .await?;
            files.push(TarFile {
                mode: 0o755,
                ..TarFile::new(binary.file_name(), bytes)
            });
        }
        let tar = build_tar(&[], &files)?;
        let context = futures::stream::iter([Ok(bytes::Bytes::from(tar))]);
        super::build::run_build(engine, &tag, context, reporter).await?;
        // One that compiled served only that; the layers it shares with the
        // base stay. One beside a prebuilt binary holds packages alone, and
        // its first steps are those of every image made on dockhand's base:
        // kept, it saves their layer commits to the next build.
        if let (Some(compiler), None) = (compiler, &self.prebuilt) {
            let _ = engine.remove_image_if_unused(&compiler.reference).await;
        }
        reporter.report(
            &tag,
            Stage::Ready,
            format!("made in {:.1}s", started.elapsed().as_secs_f64()),
        );
        Ok(tag)
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

    fn program() -> ProgramImage {
        ProgramImage {
            repository: "dockhand/tool",
            kind: "tool-image",
            compiler: Some(ImageSpec::default().run("make tool")),
            files: vec![("/build/tool", "/tool"), ("/build/helper", "/helper")],
            prebuilt: None,
            entrypoint: Some("/tool"),
        }
    }

    #[test]
    fn the_final_image_holds_the_files_alone() {
        let text = program().dockerfile("dockhand/image:abc");
        assert!(text.starts_with("FROM scratch\n"), "{text}");
        assert!(text.contains("COPY --from=dockhand/image:abc /build/tool /tool\n"));
        assert!(text.contains("COPY --from=dockhand/image:abc /build/helper /helper\n"));
        assert!(text.contains("dev.dockhand.kind=\"tool-image\""), "{text}");
        assert!(text.ends_with("ENTRYPOINT [\"/tool\"]\n"), "{text}");
        assert!(!text.contains("RUN"), "nothing runs in it: {text}");
    }

    #[test]
    fn the_tag_follows_the_recipe_not_the_base() {
        let a = program();
        assert_eq!(a.tag(), program().tag());
        assert!(a.tag().starts_with("dockhand/tool:"));
        assert_eq!(a.tag().len(), "dockhand/tool:".len() + 16);
        let mut other_base = program();
        other_base.compiler = Some(
            ImageSpec::default()
                .run("make tool")
                .base_image("debian:bookworm"),
        );
        assert_eq!(a.tag(), other_base.tag());
        let mut changed = program();
        changed.compiler = Some(ImageSpec::default().run("make tool2"));
        assert_ne!(a.tag(), changed.tag());
        let mut moved = program();
        moved.files.pop();
        assert_ne!(a.tag(), moved.tag());
    }

    mod recipes {
        use super::super::*;
        use crate::image::prebuilt::tests::FAKE;
        use crate::image::ImageSpec;

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
        }
    }
}
