//! Rendering an [`ImageSpec`] into a Dockerfile and a content-addressed tag.
//! Pure: no Docker and no I/O besides reading CA files in [`ImageSpec::plan`].

use sha2::{Digest, Sha256};

use super::base::{self, CA_ENV, IO_DIRS, SETUP_ENV};
use super::spec::{ImageSpec, CA_CERTS_ENV};
use crate::error::{Error, Result};

/// Repository of images built from specs; the tag is the content hash.
pub const IMAGE_REPOSITORY: &str = "dockhand/image";

/// Name of the CA bundle inside the build context.
const CA_CONTEXT_FILE: &str = "dockhand-ca.pem";

/// Where the system CA bundle lives in Debian-based images; the extra
/// certificates are appended there, and every TLS client is pointed at it.
const SYSTEM_CA_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";

/// Everything needed to build one spec: the Dockerfile, the files it copies and
/// the tag, which hashes both.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuildPlan {
    /// `dockhand/image:<hash>`.
    pub tag: String,
    /// The full content hash (hex).
    pub hash: String,
    /// The image the Dockerfile starts from.
    pub base: String,
    /// Dockerfile text.
    pub dockerfile: String,
    /// Concatenated PEM certificates to trust, if any.
    pub ca_bundle: Option<Vec<u8>>,
}

impl ImageSpec {
    /// The Dockerfile for this spec (with a CA step if the spec names CA files).
    pub fn render_dockerfile(&self) -> String {
        let with_ca = !self.ca_files.is_empty();
        render(self, &self.base_reference(), with_ca)
    }

    /// The image this spec builds on: its `base_image`, or dockhand's pulled
    /// Python base. Where the base is made from Debian packages instead,
    /// builds name that base (`dockhand/base:python<X.Y>-debian-...`).
    pub fn base_reference(&self) -> String {
        self.base_image
            .clone()
            .unwrap_or_else(|| base::base_tag(&self.python_version, base::BaseSource::Slim))
    }

    /// Reads the CA files (the spec's and `DOCKHAND_CA_CERTS`'s) and renders the plan.
    pub fn plan(&self) -> Result<BuildPlan> {
        self.plan_on(&self.base_reference())
    }

    /// [`ImageSpec::plan`] on the base image `base` (the one present here).
    pub fn plan_on(&self, base: &str) -> Result<BuildPlan> {
        self.validate()?;
        let mut files = self.ca_files.clone();
        if self.ca_from_env {
            if let Ok(list) = std::env::var(CA_CERTS_ENV) {
                files.extend(std::env::split_paths(&list).filter(|p| !p.as_os_str().is_empty()));
            }
        }
        let mut bundle = Vec::new();
        for path in &files {
            let pem = std::fs::read(path).map_err(|e| {
                Error::io(
                    format!("reading CA certificates from {}", path.display()),
                    e,
                )
            })?;
            if !pem.windows(27).any(|w| w == b"-----BEGIN CERTIFICATE-----") {
                return Err(Error::spec(
                    "image spec",
                    format!("{} holds no PEM certificate", path.display()),
                ));
            }
            bundle.extend_from_slice(&pem);
            if !bundle.ends_with(b"\n") {
                bundle.push(b'\n');
            }
        }
        Ok(self.plan_with_ca(base, (!bundle.is_empty()).then_some(bundle)))
    }

    /// The plan for this spec on `base` with the given CA bundle (pure).
    pub fn plan_with_ca(&self, base: &str, ca_bundle: Option<Vec<u8>>) -> BuildPlan {
        let base = base.to_string();
        let dockerfile = render(self, &base, ca_bundle.is_some());
        let mut hasher = Sha256::new();
        hasher.update(dockerfile.as_bytes());
        if let Some(ca) = &ca_bundle {
            hasher.update(b"\0ca\0");
            hasher.update(ca);
        }
        let hash = hex::encode(hasher.finalize());
        BuildPlan {
            tag: format!("{IMAGE_REPOSITORY}:{}", &hash[..20]),
            hash,
            base,
            dockerfile,
            ca_bundle,
        }
    }
}

/// Sorted and deduplicated: the order packages are listed in does not change
/// what gets installed, so it must not change the tag either.
fn canonical(packages: &[String]) -> Vec<String> {
    let mut list: Vec<String> = packages.iter().map(|p| p.trim().to_string()).collect();
    list.sort();
    list.dedup();
    list
}

fn quote(word: &str) -> String {
    shlex::try_quote(word)
        .map(|q| q.into_owned())
        // Only a NUL byte fails to quote, and validation rejects control characters.
        .unwrap_or_else(|_| format!("'{}'", word.replace('\0', "")))
}

fn render(spec: &ImageSpec, base: &str, with_ca: bool) -> String {
    let mut d = String::new();
    d.push_str("# Rendered by dockhand from an ImageSpec. The image tag is a hash of this text.\n");
    d.push_str(&super::step::render_stages(&spec.steps));
    d.push_str(&format!("FROM {base}\n"));
    // One ENV and one RUN for all of dockhand's own setup that the base
    // lacks, before the spec's own steps and dockhand's programs, so that
    // these layers are shared by every spec on the same base.
    let base_has_setup = base == base::base_tag(&spec.python_version, base::BaseSource::Debian);
    let mut setup = Vec::new();
    if !base_has_setup {
        let ca_env = if with_ca {
            format!(" {CA_ENV}")
        } else {
            String::new()
        };
        d.push_str(&format!("ENV {SETUP_ENV}{ca_env}\n"));
    }
    if with_ca {
        // Appended to the system bundle (what apt, curl and Debian's pip
        // read) and also placed where update-ca-certificates looks, so a
        // later package that regenerates the bundle keeps them.
        d.push_str(&format!(
            "COPY {CA_CONTEXT_FILE} /usr/local/share/ca-certificates/dockhand-extra.crt\n"
        ));
        setup.push(format!(
            "mkdir -p /etc/ssl/certs && cat /usr/local/share/ca-certificates/dockhand-extra.crt >> {SYSTEM_CA_BUNDLE}"
        ));
    }
    if !base_has_setup {
        setup.push(IO_DIRS.to_string());
    }
    if !setup.is_empty() {
        d.push_str(&format!("RUN {}\n", setup.join(" && ")));
    }
    for copy in &spec.copies {
        d.push_str(&format!(
            "COPY --from={} {} {}\n",
            copy.image, copy.source, copy.target
        ));
    }
    let apt = canonical(&spec.apt_packages);
    if !apt.is_empty() {
        let words: Vec<String> = apt.iter().map(|p| quote(p)).collect();
        d.push_str(&format!(
            "RUN apt-get update && apt-get install -y --no-install-recommends {} && rm -rf /var/lib/apt/lists/*\n",
            words.join(" ")
        ));
    }
    let pip = canonical(&spec.pip_packages);
    if !pip.is_empty() {
        let words: Vec<String> = pip.iter().map(|p| quote(p)).collect();
        d.push_str(&format!("RUN python3 -m pip install {}\n", words.join(" ")));
    }
    for file in &spec.context_files {
        d.push_str(&format!(
            "COPY {} {}/{}\n",
            file.name,
            super::CONTEXT_DIR,
            file.name
        ));
    }
    for command in &spec.commands {
        // The JSON form keeps newlines and quotes of multi-line commands intact.
        let json = serde_json::to_string(command).unwrap_or_default();
        d.push_str(&format!("RUN [\"/bin/sh\", \"-c\", {json}]\n"));
    }
    d.push_str(&super::step::render_steps(&spec.steps));
    d
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tag(spec: &ImageSpec) -> String {
        spec.plan_with_ca(&spec.base_reference(), None).tag
    }

    #[test]
    fn equal_specs_render_the_same_text_and_tag() {
        let a = ImageSpec::default()
            .pip(["numpy"])
            .apt(["jq"])
            .run("echo hi");
        let b = ImageSpec::default()
            .pip(["numpy"])
            .apt(["jq"])
            .run("echo hi");
        assert_eq!(a.render_dockerfile(), b.render_dockerfile());
        assert_eq!(tag(&a), tag(&b));
        assert!(tag(&a).starts_with("dockhand/image:"));
    }

    #[test]
    fn tag_is_stable_across_releases() {
        // Same spec -> same tag on every machine and in every process. If this
        // changes, every user's cached images are rebuilt: change it on purpose.
        let spec = ImageSpec::default().pip(["numpy"]);
        assert_eq!(tag(&spec), tag(&spec.clone()));
        assert_eq!(tag(&spec).len(), "dockhand/image:".len() + 20);
    }

    #[test]
    fn package_order_does_not_change_the_tag() {
        let a = ImageSpec::default()
            .pip(["numpy", "pandas"])
            .apt(["jq", "curl"]);
        let b = ImageSpec::default()
            .pip(["pandas", "numpy", "numpy"])
            .apt(["curl", "jq"]);
        assert_eq!(tag(&a), tag(&b));
    }

    #[test]
    fn every_field_changes_the_tag() {
        let base = ImageSpec::default();
        let variants = [
            ImageSpec::python("3.13"),
            base.clone().pip(["numpy"]),
            base.clone().apt(["jq"]),
            base.clone().run("echo hi"),
            base.clone().base_image("debian:bookworm"),
        ];
        let base_tag = tag(&base);
        let mut seen = std::collections::HashSet::from([base_tag.clone()]);
        for v in &variants {
            assert!(seen.insert(tag(v)), "spec {v:?} collides");
        }
        // Certificates are content: a different bundle is a different image.
        let with_ca = base.plan_with_ca(
            &base.base_reference(),
            Some(b"-----BEGIN CERTIFICATE-----\nA\n".to_vec()),
        );
        let other_ca = base.plan_with_ca(
            &base.base_reference(),
            Some(b"-----BEGIN CERTIFICATE-----\nB\n".to_vec()),
        );
        assert_ne!(with_ca.tag, base_tag);
        assert_ne!(with_ca.tag, other_ca.tag);
        // Command order matters (later steps see earlier ones).
        assert_ne!(
            tag(&base.clone().run("a").run("b")),
            tag(&base.clone().run("b").run("a"))
        );
    }

    #[test]
    fn dockerfile_has_each_step() {
        let text = ImageSpec::default()
            .apt(["jq"])
            .pip(["pandas>=2"])
            .run("echo 'multi\nline'")
            .plan_with_ca("dockhand/base:python3.11-slim", Some(b"pem".to_vec()))
            .dockerfile;
        assert!(text.starts_with("# Rendered by dockhand"));
        assert!(text.contains(&format!(
            "FROM {}\n",
            base::base_tag("3.11", base::BaseSource::Slim)
        )));
        assert!(text.contains("apt-get install -y --no-install-recommends jq &&"));
        assert!(text.contains("RUN python3 -m pip install 'pandas>=2'\n"));
        assert!(text.contains(r#"RUN ["/bin/sh", "-c", "echo 'multi\nline'"]"#));
        assert!(text.contains("COPY dockhand-ca.pem"));
        assert!(text.contains("PIP_CERT=/etc/ssl/certs/ca-certificates.crt"));
        // The CA step comes before anything that downloads.
        assert!(text.find("COPY dockhand-ca.pem").unwrap() < text.find("apt-get").unwrap());
    }

    #[test]
    fn on_dockhands_own_base_only_the_specs_steps_remain() {
        let debian = base::base_tag("3.11", base::BaseSource::Debian);
        let plain = ImageSpec::default()
            .pip(["numpy"])
            .plan_with_ca(&debian, None);
        let steps: Vec<&str> = plain
            .dockerfile
            .lines()
            .filter(|l| !l.starts_with('#'))
            .collect();
        assert_eq!(
            steps,
            [
                format!("FROM {debian}").as_str(),
                "RUN python3 -m pip install numpy"
            ]
        );
        // With certificates: their copy and one RUN that appends them.
        let with_ca = ImageSpec::default().plan_with_ca(&debian, Some(b"pem".to_vec()));
        assert!(
            !with_ca.dockerfile.contains("ENV "),
            "{}",
            with_ca.dockerfile
        );
        assert!(with_ca.dockerfile.contains("COPY dockhand-ca.pem"));
        assert!(!with_ca.dockerfile.contains("/var/inputs"));
        // What the base carries instead, and what other bases still get.
        let setup = base::base_setup();
        let slim = ImageSpec::default().render_dockerfile();
        for part in [
            "PIP_BREAK_SYSTEM_PACKAGES=1",
            "mkdir -p /var/inputs /var/outputs",
        ] {
            assert!(setup.contains(part) && slim.contains(part), "{part}");
        }
        assert!(setup.contains("PIP_CERT=/etc/ssl/certs/ca-certificates.crt"));
        assert_eq!(setup.lines().count(), 2, "one ENV and one RUN: {setup}");
    }

    #[test]
    fn without_ca_there_is_no_ca_step() {
        let text = ImageSpec::default().pip(["numpy"]).render_dockerfile();
        assert!(!text.contains("dockhand-ca.pem"));
        assert!(!text.contains("PIP_CERT"));
    }

    #[test]
    fn validation_rejects_option_injection_and_bad_versions() {
        assert!(ImageSpec::default()
            .apt(["--allow-unauthenticated"])
            .validate()
            .is_err());
        assert!(ImageSpec::default()
            .apt(["jq; rm -rf /"])
            .validate()
            .is_err());
        assert!(ImageSpec::default().pip(["-e ."]).validate().is_err());
        assert!(ImageSpec::default()
            .pip(["numpy\nRUN evil"])
            .validate()
            .is_err());
        assert!(ImageSpec::python("3").validate().is_err());
        assert!(ImageSpec::python("three.eleven").validate().is_err());
        assert!(ImageSpec::prebuilt("x").pip(["numpy"]).validate().is_err());
        assert!(ImageSpec::default()
            .apt(["libc6=2.36-9"])
            .pip(["numpy==2.1"])
            .validate()
            .is_ok());
    }

    #[test]
    fn plan_reads_ca_files_and_rejects_non_pem() {
        let dir = tempfile::tempdir().unwrap();
        let pem = dir.path().join("ca.pem");
        std::fs::write(
            &pem,
            "-----BEGIN CERTIFICATE-----\nabc\n-----END CERTIFICATE-----",
        )
        .unwrap();
        let plan = ImageSpec::default()
            .without_env_ca()
            .trust_ca_file(&pem)
            .plan()
            .unwrap();
        assert!(plan.ca_bundle.unwrap().ends_with(b"\n"));
        let junk = dir.path().join("junk.pem");
        std::fs::write(&junk, "not a cert").unwrap();
        let err = ImageSpec::default()
            .without_env_ca()
            .trust_ca_file(&junk)
            .plan()
            .unwrap_err();
        assert!(err.to_string().contains("no PEM certificate"), "{err}");
        let missing = ImageSpec::default()
            .without_env_ca()
            .trust_ca_file(dir.path().join("nope"));
        assert!(matches!(missing.plan(), Err(Error::Io { .. })));
    }
}
