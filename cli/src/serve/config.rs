//! What `dockhand serve` is told: API keys and templates.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{bail, Context as _};
use dockhand::kernel::{KernelConfig, Language};
use dockhand::session::SessionConfig;
use dockhand::ImageSpec;
use serde::Deserialize;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// The home of E2B's default user, and the sandbox's workspace.
pub const HOME: &str = "/home/user";
/// The code interpreter SDK's default template.
pub const CODE_INTERPRETER: &str = "code-interpreter-v1";
/// The plain SDK's default template.
pub const BASE: &str = "base";

/// The API keys; each is a tenant of its own.
pub struct Keys {
    keys: Vec<Vec<u8>>,
    /// Each key's hash, as a state directory or a volume's label holds it.
    hashes: Vec<String>,
}

impl Keys {
    /// Keys from `DOCKHAND_SERVE_API_KEYS` (comma- or space-separated) and
    /// from a file (one per line, `#` comments).
    pub fn load(from_env: Option<&str>, file: Option<&Path>) -> anyhow::Result<Keys> {
        let mut keys: Vec<Vec<u8>> = Vec::new();
        if let Some(list) = from_env {
            keys.extend(
                list.split([',', ' ', '\n'])
                    .map(str::trim)
                    .filter(|k| !k.is_empty())
                    .map(|k| k.as_bytes().to_vec()),
            );
        }
        if let Some(path) = file {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading the API keys file {}", path.display()))?;
            keys.extend(
                text.lines()
                    .map(str::trim)
                    .filter(|k| !k.is_empty() && !k.starts_with('#'))
                    .map(|k| k.as_bytes().to_vec()),
            );
        }
        if keys.is_empty() {
            bail!(
                "no API key: set DOCKHAND_SERVE_API_KEYS or pass --api-keys-file (clients send one as E2B_API_KEY)"
            );
        }
        if let Some(short) = keys.iter().find(|k| k.len() < 16) {
            bail!(
                "an API key of {} characters is too short to guess-proof; use 16 or more",
                short.len()
            );
        }
        let hashes = keys.iter().map(|k| key_hash(k)).collect();
        Ok(Keys { keys, hashes })
    }

    /// The tenant whose key has this hash (a state directory's record).
    pub fn tenant_of_hash(&self, hash: &str) -> Option<usize> {
        self.hashes.iter().position(|h| same_secret(h, hash))
    }

    /// The hash a tenant's key is stored as.
    pub fn hash_of(&self, tenant: usize) -> String {
        self.hashes.get(tenant).cloned().unwrap_or_default()
    }

    /// A name for a tenant's key in logs: the start of its hash, which
    /// says nothing of the key.
    pub fn key_id(&self, tenant: usize) -> String {
        let hash = self.hashes.get(tenant).map(String::as_str).unwrap_or("");
        format!("key-{}", &hash[..hash.len().min(12)])
    }

    /// The token of a volume's content API for `tenant`: a hash of the key
    /// and the volume, which only that key's holder is given.
    pub fn volume_token(&self, tenant: usize, volume: &str) -> String {
        let mut hasher = Sha256::new();
        hasher.update(b"dockhand serve volume token\0");
        hasher.update(self.keys.get(tenant).map(Vec::as_slice).unwrap_or_default());
        hasher.update(b"\0");
        hasher.update(volume.as_bytes());
        hex(&hasher.finalize())
    }

    /// The tenant a key belongs to. Every key is compared, in constant
    /// time, so the answer's timing tells nothing about which came close.
    pub fn tenant(&self, presented: &[u8]) -> Option<usize> {
        let mut found = None;
        for (index, key) in self.keys.iter().enumerate() {
            if bool::from(key.as_slice().ct_eq(presented)) {
                found = Some(index);
            }
        }
        found
    }
}

/// The hash a key is stored as (the key itself never is).
pub fn key_hash(key: &[u8]) -> String {
    hex(&Sha256::digest(key))
}

/// Lower-case hexadecimal.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Compares two secrets in constant time.
pub fn same_secret(a: &str, b: &str) -> bool {
    bool::from(a.as_bytes().ct_eq(b.as_bytes()))
}

/// What a template starts: a Jupyter kernel (with envd's services beside
/// it) or a plain session.
#[derive(Debug, Clone)]
pub enum TemplateKind {
    /// A kernel container: `/execute` and `/contexts` work.
    Kernel(Box<KernelConfig>),
    /// A session container: commands and files only.
    Session(Box<SessionConfig>),
}

/// One template by name.
#[derive(Debug, Clone)]
pub struct Template {
    /// Its name, as clients ask for it.
    pub name: String,
    /// What it starts.
    pub kind: TemplateKind,
    /// Warm containers kept ready.
    pub pool: usize,
    /// Reported CPUs.
    pub cpus: u32,
    /// Reported memory.
    pub memory_mb: u32,
}

/// A template as the file gives it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TemplateFile {
    /// `kernel` or `session`.
    #[serde(default = "default_kind")]
    kind: String,
    /// A prebuilt image instead of a recipe.
    image: Option<String>,
    python: Option<String>,
    #[serde(default)]
    pip: Vec<String>,
    #[serde(default)]
    apt: Vec<String>,
    #[serde(default)]
    run: Vec<String>,
    /// A kernel's languages beside Python (`javascript`, `typescript`,
    /// `bash`, `r`).
    #[serde(default)]
    languages: Vec<String>,
    pool: Option<usize>,
    cpus: Option<u32>,
    memory_mb: Option<u32>,
}

fn default_kind() -> String {
    "session".into()
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ConfigFile {
    #[serde(default)]
    templates: BTreeMap<String, TemplateFile>,
}

/// Sessions as serve starts them: E2B's user home as the workspace, no
/// default limit on commands (the client sets one per command).
/// A login shell runs once as each container starts (in the pool, before
/// anyone waits): the SDKs run every command with `bash -l`, and the first
/// one in a fresh container otherwise pays for the files it opens.
/// `pausable`: E2B's pause needs the container to outlive its stopped
/// agent, or on a cluster its files on a claim of its own (without one,
/// pause is refused there instead).
pub fn serve_session(session: SessionConfig, pausable: bool) -> SessionConfig {
    session
        .workspace(HOME)
        .env("HOME", HOME)
        .no_timeout()
        .pausable(pausable)
        .setup_command("bash -l -c true >/dev/null 2>&1 || true")
}

/// The built-in templates, then those of the file (which may replace them).
/// `transfer_limit` is the largest file a download reads (an upload's limit
/// is checked as it streams in).
pub fn templates(
    file: Option<&Path>,
    pool: usize,
    transfer_limit: u64,
    kept_as: Option<String>,
    gvisor: bool,
    languages: &[Language],
    unpausable: bool,
) -> anyhow::Result<BTreeMap<String, Template>> {
    // With a state directory, containers outlive the server, named as its.
    let prepare = move |session: SessionConfig| {
        let mut session = serve_session(session, !unpausable).read_limit(transfer_limit);
        if gvisor {
            session = session.isolation(dockhand::Isolation::Gvisor);
        }
        match &kept_as {
            Some(name) => session.keep(true).name(name.clone()),
            None => session,
        }
    };
    let mut out = BTreeMap::new();
    // Images trust the host's CA bundle, as the CLI's do: builds then work
    // behind a TLS-intercepting proxy.
    let science = KernelConfig::data_science();
    let image = science.image_spec().clone().trust_host_certificates();
    let kernel = science
        .image(image)
        .languages(languages.iter().copied())
        .session(prepare.clone());
    out.insert(
        CODE_INTERPRETER.to_string(),
        Template {
            name: CODE_INTERPRETER.into(),
            kind: TemplateKind::Kernel(Box::new(kernel)),
            pool,
            cpus: 2,
            memory_mb: 1024,
        },
    );
    out.insert(
        BASE.to_string(),
        Template {
            name: BASE.into(),
            kind: TemplateKind::Session(Box::new(prepare(
                SessionConfig::new().image(ImageSpec::default().trust_host_certificates()),
            ))),
            pool,
            cpus: 2,
            memory_mb: 1024,
        },
    );
    let Some(path) = file else {
        return Ok(out);
    };
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading the templates file {}", path.display()))?;
    let parsed: ConfigFile = serde_json::from_str(&text)
        .with_context(|| format!("parsing the templates file {}", path.display()))?;
    for (name, t) in parsed.templates {
        let mut image = match &t.image {
            Some(reference) => ImageSpec::prebuilt(reference.clone()),
            None => match &t.python {
                Some(version) => ImageSpec::python(version.clone()),
                None => ImageSpec::default(),
            },
        };
        image = image.pip(t.pip.clone()).apt(t.apt.clone());
        if t.image.is_none() {
            image = image.trust_host_certificates();
        }
        for command in &t.run {
            image = image.run(command.clone());
        }
        image
            .validate()
            .with_context(|| format!("template `{name}` in {}", path.display()))?;
        let mut extra = Vec::new();
        for name_of in &t.languages {
            let language = name_of
                .parse::<Language>()
                .with_context(|| format!("template `{name}` in {}", path.display()))?;
            extra.push(language);
        }
        if !extra.is_empty() && t.kind != "kernel" {
            bail!("template `{name}`: `languages` needs kind `kernel`");
        }
        let kind = match t.kind.as_str() {
            "kernel" => TemplateKind::Kernel(Box::new(
                KernelConfig::new()
                    .image(image)
                    .languages(extra)
                    .session(prepare.clone()),
            )),
            "session" => {
                TemplateKind::Session(Box::new(prepare(SessionConfig::new().image(image))))
            }
            other => bail!("template `{name}`: kind `{other}` is neither `kernel` nor `session`"),
        };
        out.insert(
            name.clone(),
            Template {
                name,
                kind,
                pool: t.pool.unwrap_or(pool),
                cpus: t.cpus.unwrap_or(2),
                memory_mb: t.memory_mb.unwrap_or(1024),
            },
        );
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(text: &str) -> tempfile::NamedTempFile {
        let f = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(f.path(), text).unwrap();
        f
    }

    #[test]
    fn the_built_in_templates_are_the_sdks_defaults() {
        let t = templates(None, 3, 1 << 20, None, false, &[], false).unwrap();
        assert!(matches!(t[CODE_INTERPRETER].kind, TemplateKind::Kernel(_)));
        assert!(matches!(t[BASE].kind, TemplateKind::Session(_)));
        assert_eq!(t[BASE].pool, 3);
    }

    #[test]
    fn a_file_adds_and_replaces_templates() {
        let f = file(
            r#"{"templates": {
                "analysis": {"kind": "kernel", "pip": ["polars"], "pool": 0},
                "base": {"apt": ["jq"], "cpus": 4}
            }}"#,
        );
        let t = templates(Some(f.path()), 2, 1 << 20, None, false, &[], false).unwrap();
        assert!(matches!(t["analysis"].kind, TemplateKind::Kernel(_)));
        assert_eq!(t["analysis"].pool, 0);
        assert_eq!((t["base"].cpus, t["base"].pool), (4, 2));
        let TemplateKind::Session(base) = &t["base"].kind else {
            panic!("base stays a session");
        };
        assert_eq!(base.workspace_dir(), HOME);
    }

    #[test]
    fn bad_template_files_are_refused_with_the_reason() {
        let kind = file(r#"{"templates": {"x": {"kind": "vm"}}}"#);
        let e = templates(Some(kind.path()), 1, 1 << 20, None, false, &[], false)
            .unwrap_err()
            .to_string();
        assert!(e.contains("kind `vm`"), "{e}");
        let unknown = file(r#"{"templates": {"x": {"packages": ["a"]}}}"#);
        let e = format!(
            "{:#}",
            templates(Some(unknown.path()), 1, 1 << 20, None, false, &[], false).unwrap_err()
        );
        assert!(e.contains("packages"), "{e}");
    }

    #[test]
    fn keys_are_required_long_and_each_a_tenant() {
        assert!(Keys::load(None, None).is_err());
        assert!(Keys::load(Some("short"), None).is_err());
        let keys = Keys::load(Some("aaaaaaaaaaaaaaaa, bbbbbbbbbbbbbbbb"), None).unwrap();
        assert_eq!(keys.tenant(b"aaaaaaaaaaaaaaaa"), Some(0));
        assert_eq!(keys.tenant(b"bbbbbbbbbbbbbbbb"), Some(1));
        assert_eq!(keys.tenant(b"aaaaaaaaaaaaaaab"), None);
        assert_eq!(keys.tenant(b""), None);
        let f = file("# ours\ncccccccccccccccc\n\n");
        let keys = Keys::load(None, Some(f.path())).unwrap();
        assert_eq!(keys.tenant(b"cccccccccccccccc"), Some(0));
    }
}
