//! Skills: functions code saved with `save_skill(fn)`, kept by the host in
//! a [`SkillStore`] and imported by later executions (`from skills import
//! summarize_issues`), in this process or another.
//!
//! A skill is code a model wrote. Saving one never runs it on the host: the
//! bridge cuts the function (with the helpers it uses and the code's
//! imports) out of the execution's code and type-checks it against the
//! tools' stubs in a Monty session that only defines it. A call of a skill
//! runs it as an execution of its own in the same code host, under the
//! same limits and policy as any code, with the tools of the execution
//! that calls it (except those that need approval).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::error::{Error, Result};
use crate::util::is_identifier;

/// The module skills are imported from.
pub const SKILLS_MODULE: &str = "skills";
/// The function code saves a skill with.
pub const SAVE_SKILL: &str = "save_skill";

/// Largest skill source kept, in bytes (the bridge refuses larger first).
const MAX_SOURCE: usize = 64 * 1024;
/// Largest skill file read back, in bytes.
const MAX_FILE: u64 = 256 * 1024;
/// Skills one store keeps.
const MAX_SKILLS: usize = 1_000;
/// Longest skill name.
const MAX_NAME: usize = 64;

/// One version of a skill.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Skill {
    /// Its name: the function's, as the code imports it.
    pub name: String,
    /// 1 for the first save, one more for each save after it.
    pub version: u32,
    /// What it does: the `description` given to `save_skill`, or its
    /// docstring's first paragraph.
    pub description: String,
    /// Its source: the code's imports, the helpers it uses, the function.
    pub source: String,
    /// Its signature and docstring, as a stub.
    pub stub: String,
    /// Whether the function is `async def`.
    pub is_async: bool,
    /// When it was saved, in seconds since the Unix epoch.
    pub saved_unix: u64,
}

/// Where skills are kept: a directory, one subdirectory per skill and one
/// file per version. Several processes may share it; two saves of one name
/// at once get two versions.
///
/// ```
/// # fn demo() -> dockhand::Result<()> {
/// use dockhand::codemode::{SkillStore, Toolset};
/// let store = SkillStore::at(std::env::temp_dir().join("dockhand-skills-doc"))?;
/// let tools = Toolset::new().skills(store.clone());
/// for skill in store.list()? {
///     println!("{} v{}: {}", skill.name, skill.version, skill.description);
/// }
/// # let _ = tools; Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkillStore {
    dir: PathBuf,
}

impl SkillStore {
    /// A store in `dir`, created (owner-only) if missing.
    pub fn at(dir: impl Into<PathBuf>) -> Result<Self> {
        let dir = dir.into();
        create_private_dir(&dir)?;
        Ok(SkillStore { dir })
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The latest version of every skill, by name.
    pub fn list(&self) -> Result<Vec<Skill>> {
        let mut skills = Vec::new();
        for name in self.names()? {
            if let Some(skill) = self.get(&name)? {
                skills.push(skill);
            }
        }
        Ok(skills)
    }

    /// The latest version of skill `name`, if it exists.
    pub fn get(&self, name: &str) -> Result<Option<Skill>> {
        // Newest first, past anything that is not a skill file.
        for v in self.versions(name)?.iter().rev() {
            if let Some(skill) = self.version(name, *v)? {
                return Ok(Some(skill));
            }
        }
        Ok(None)
    }

    /// Version `version` of skill `name`, if it exists.
    pub fn version(&self, name: &str, version: u32) -> Result<Option<Skill>> {
        if !valid_name(name) {
            return Ok(None);
        }
        let path = self.dir.join(name).join(format!("{version}.json"));
        let Some(bytes) = read_regular(&path)? else {
            return Ok(None);
        };
        let skill: Skill = serde_json::from_slice(&bytes).map_err(|e| {
            Error::spec(
                "skill store",
                format!("{} is not a skill: {e}", path.display()),
            )
        })?;
        Ok((skill.name == name).then_some(skill))
    }

    /// The versions of skill `name` kept, oldest first.
    pub fn versions(&self, name: &str) -> Result<Vec<u32>> {
        if !valid_name(name) {
            return Ok(Vec::new());
        }
        let dir = self.dir.join(name);
        let entries = match std::fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(Error::io(format!("reading {}", dir.display()), e)),
        };
        let mut versions: Vec<u32> = entries
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.strip_suffix(".json")?.parse().ok())
            .collect();
        versions.sort_unstable();
        Ok(versions)
    }

    /// Removes skill `name`, every version; whether it existed.
    pub fn remove(&self, name: &str) -> Result<bool> {
        if !valid_name(name) {
            return Ok(false);
        }
        let dir = self.dir.join(name);
        match std::fs::remove_dir_all(&dir) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(Error::io(format!("removing {}", dir.display()), e)),
        }
    }

    fn names(&self) -> Result<Vec<String>> {
        let entries = std::fs::read_dir(&self.dir)
            .map_err(|e| Error::io(format!("reading {}", self.dir.display()), e))?;
        let mut names: Vec<String> = entries
            .flatten()
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .filter_map(|e| e.file_name().to_str().map(String::from))
            .filter(|n| valid_name(n))
            .collect();
        names.sort();
        names.truncate(MAX_SKILLS);
        Ok(names)
    }

    /// Keeps a new version of a skill the bridge checked; the answer to
    /// the code's `save_skill` call, or why not.
    pub(crate) fn save(&self, call: &Map<String, Value>) -> std::result::Result<Value, String> {
        let text = |key: &str| call.get(key).and_then(Value::as_str).unwrap_or_default();
        let name = text("name");
        if !valid_name(name) {
            return Err(format!(
                "save_skill: `{name}` cannot be a skill's name (an ASCII identifier of up to \
                 {MAX_NAME} characters, not starting with `_`)"
            ));
        }
        let source = text("source");
        if source.len() > MAX_SOURCE {
            return Err(format!(
                "save_skill({name}): the source is {} bytes; the limit is {MAX_SOURCE}",
                source.len()
            ));
        }
        let mut description: String = text("description").chars().take(1000).collect();
        description = description.split_whitespace().collect::<Vec<_>>().join(" ");
        let known = self.names().map_err(|e| e.to_string())?;
        if known.len() >= MAX_SKILLS && !known.iter().any(|n| n == name) {
            return Err(format!(
                "save_skill({name}): the store keeps {MAX_SKILLS} skills; remove one first"
            ));
        }
        let mut skill = Skill {
            name: name.to_string(),
            version: 0,
            description,
            source: source.to_string(),
            stub: text("stub").chars().take(8 * 1024).collect(),
            is_async: call.get("is_async").and_then(Value::as_bool) == Some(true),
            saved_unix: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
        };
        self.claim_version(&mut skill)
            .map_err(|e| format!("save_skill({name}): {e}"))?;
        Ok(serde_json::json!({"name": skill.name, "version": skill.version}))
    }

    /// Writes the skill as the next free version: written whole to a
    /// temporary file, then linked under its version's name, which fails if
    /// another save took that version first.
    fn claim_version(&self, skill: &mut Skill) -> Result<()> {
        let dir = self.dir.join(&skill.name);
        create_private_dir(&dir)?;
        let temp = dir.join(format!(".saving-{}", uuid::Uuid::new_v4().simple()));
        let mut version = self.versions(&skill.name)?.last().copied().unwrap_or(0);
        let result = loop {
            version += 1;
            skill.version = version;
            let bytes = serde_json::to_vec_pretty(&*skill)
                .map_err(|e| Error::spec("skill store", e.to_string()))?;
            let mut file = std::fs::File::create(&temp)
                .map_err(|e| Error::io(format!("writing {}", temp.display()), e))?;
            file.write_all(&bytes)
                .and_then(|()| file.sync_all())
                .map_err(|e| Error::io(format!("writing {}", temp.display()), e))?;
            let target = dir.join(format!("{version}.json"));
            match std::fs::hard_link(&temp, &target) {
                Ok(()) => break Ok(()),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => break Err(Error::io(format!("writing {}", target.display()), e)),
            }
        };
        let _ = std::fs::remove_file(&temp);
        result
    }
}

fn valid_name(name: &str) -> bool {
    is_identifier(name) && !name.starts_with('_') && name.len() <= MAX_NAME
}

fn create_private_dir(dir: &Path) -> Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder
        .create(dir)
        .map_err(|e| Error::io(format!("creating {}", dir.display()), e))
}

/// A regular file's bytes (not a link, not past [`MAX_FILE`]), or `None`.
fn read_regular(path: &Path) -> Result<Option<Vec<u8>>> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io(format!("reading {}", path.display()), e)),
    };
    if !meta.is_file() || meta.len() > MAX_FILE {
        return Ok(None);
    }
    std::fs::read(path)
        .map(Some)
        .map_err(|e| Error::io(format!("reading {}", path.display()), e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn store() -> (tempfile::TempDir, SkillStore) {
        let dir = tempfile::tempdir().unwrap();
        let store = SkillStore::at(dir.path().join("skills")).unwrap();
        (dir, store)
    }

    fn call(name: &str, source: &str) -> Map<String, Value> {
        json!({"name": name, "source": source, "stub": format!("def {name}() -> int:\n    ...\n"),
               "is_async": false, "description": "  Adds   one. "})
        .as_object()
        .unwrap()
        .clone()
    }

    #[test]
    fn saves_are_versions_and_the_latest_is_listed() {
        let (_dir, store) = store();
        assert_eq!(
            store.save(&call("inc", "def inc(): return 1")).unwrap()["version"],
            1
        );
        assert_eq!(
            store.save(&call("inc", "def inc(): return 2")).unwrap()["version"],
            2
        );
        store.save(&call("dec", "def dec(): return 0")).unwrap();
        let listed = store.list().unwrap();
        let names: Vec<(&str, u32)> = listed
            .iter()
            .map(|s| (s.name.as_str(), s.version))
            .collect();
        assert_eq!(names, [("dec", 1), ("inc", 2)]);
        assert_eq!(listed[1].source, "def inc(): return 2");
        assert_eq!(listed[1].description, "Adds one.");
        assert_eq!(
            store.version("inc", 1).unwrap().unwrap().source,
            "def inc(): return 1"
        );
        assert_eq!(store.versions("inc").unwrap(), [1, 2]);
        assert!(store.remove("inc").unwrap());
        assert!(store.get("inc").unwrap().is_none());
        assert!(!store.remove("inc").unwrap());
    }

    #[test]
    fn names_and_sizes_are_checked_and_paths_stay_inside() {
        let (_dir, store) = store();
        for bad in ["../x", "a/b", "_private", "", "1x", &"n".repeat(65)] {
            assert!(store.save(&call(bad, "x")).is_err(), "{bad}");
            assert!(store.get(bad).unwrap().is_none());
            assert!(!store.remove(bad).unwrap());
        }
        let big = call("big", &"#".repeat(MAX_SOURCE + 1));
        assert!(store.save(&big).unwrap_err().contains("limit"));
    }

    #[cfg(unix)]
    #[test]
    fn a_planted_link_is_not_read() {
        let (dir, store) = store();
        store.save(&call("s", "def s(): return 1")).unwrap();
        let secret = dir.path().join("secret.json");
        std::fs::write(&secret, b"{}").unwrap();
        std::os::unix::fs::symlink(&secret, store.dir().join("s").join("9.json")).unwrap();
        assert_eq!(store.version("s", 9).unwrap(), None);
        assert_eq!(
            store.get("s").unwrap().unwrap().version,
            1,
            "the link is skipped"
        );
    }
}
