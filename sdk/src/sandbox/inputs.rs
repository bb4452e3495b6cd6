//! Input validation and the archive that carries inputs into a container.

use std::path::Path;

use super::preamble::{
    self, CONTROL_DIR, INPUTS_DIR, MAIN_FILE, OUTPUTS_DIR, RUNNER_FILE, VERBATIM_FILE,
};
use super::spec::{Param, Program, Sandbox};
use super::value::Value;
use crate::archive;
use crate::error::{Error, Result};

/// Inputs as the public API takes them (`[("x", 21)]`, `inputs!{..}`), named values.
pub fn named<I, K, V>(inputs: I) -> Vec<(String, Value)>
where
    I: IntoIterator<Item = (K, V)>,
    K: Into<String>,
    V: Into<Value>,
{
    inputs
        .into_iter()
        .map(|(k, v)| (k.into(), v.into()))
        .collect()
}

/// Checks given inputs against the declaration: every declared input given
/// once, nothing undeclared, each of its type (ints widen to floats and JSON).
/// Returns them in declared order.
pub fn validate(sandbox: &Sandbox, given: Vec<(String, Value)>) -> Result<Vec<(Param, Value)>> {
    let declared = || {
        sandbox
            .inputs
            .iter()
            .map(|p| p.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut given = given;
    if let Some((name, _)) = given
        .iter()
        .find(|(n, _)| !sandbox.inputs.iter().any(|p| p.name == *n))
    {
        return Err(Error::UnknownInput {
            name: name.clone(),
            declared: declared(),
        });
    }
    let mut out = Vec::with_capacity(sandbox.inputs.len());
    for p in &sandbox.inputs {
        let pos = given
            .iter()
            .position(|(n, _)| *n == p.name)
            .ok_or_else(|| Error::MissingInput {
                name: p.name.clone(),
            })?;
        let (_, value) = given.swap_remove(pos);
        if given.iter().any(|(n, _)| *n == p.name) {
            return Err(Error::InputType {
                name: p.name.clone(),
                expected: format!("one {}", p.ty),
                got: "several values".into(),
            });
        }
        let value = value.coerce(p.ty).map_err(|v| Error::InputType {
            name: p.name.clone(),
            expected: p.ty.to_string(),
            got: v.type_of().to_string(),
        })?;
        if let Value::File(path) | Value::Dir(path) = &value {
            check_host_path(&p.name, path, matches!(value, Value::Dir(_)))?;
        }
        out.push((p.clone(), value));
    }
    Ok(out)
}

fn check_host_path(name: &str, path: &Path, want_dir: bool) -> Result<()> {
    let meta = std::fs::metadata(path)
        .map_err(|e| Error::io(format!("input `{name}`: cannot read {}", path.display()), e))?;
    if want_dir != meta.is_dir() {
        return Err(Error::InputType {
            name: name.into(),
            expected: if want_dir {
                "Dir".into()
            } else {
                "File".into()
            },
            got: format!(
                "{} (a {})",
                path.display(),
                if meta.is_dir() { "directory" } else { "file" }
            ),
        });
    }
    Ok(())
}

/// The command line the container runs.
pub fn command_line(sandbox: &Sandbox, inputs: &[(Param, Value)]) -> Vec<String> {
    let control = format!("{INPUTS_DIR}/{CONTROL_DIR}");
    match &sandbox.program {
        Program::Code { auto_io: true, .. } => {
            vec!["python3".into(), format!("{control}/{RUNNER_FILE}")]
        }
        Program::Code { auto_io: false, .. } => vec![
            "python3".into(),
            format!("{control}/{VERBATIM_FILE}"),
            format!("{control}/{MAIN_FILE}"),
        ],
        Program::Command { program, args } => {
            let lookup = |name: &str| {
                inputs.iter().find(|(p, _)| p.name == name).map(|(p, v)| {
                    v.to_text()
                        .unwrap_or_else(|| format!("{INPUTS_DIR}/{}", p.name))
                })
            };
            std::iter::once(program.clone())
                .chain(args.iter().map(|a| super::spec::substitute(a, lookup)))
                .collect()
        }
    }
}

/// The archive extracted into `/var/inputs`: each input as `<name>` (text,
/// file or tree) and dockhand's control files under `.dockhand/`.
///
/// With `frame_marker`, the auto-IO runner also reports its outputs on
/// stdout after that marker (see [`preamble::with_frame`]).
pub fn archive(
    sandbox: &Sandbox,
    inputs: &[(Param, Value)],
    cmd: &[String],
    frame_marker: Option<&str>,
) -> Result<InputsTar> {
    // What a warm container's waiter runs once handed the job (see `pool`);
    // a cold container is created with the command instead.
    let mut files = vec![archive::TarFile::new(
        format!("{CONTROL_DIR}/{HANDOVER_FILE}"),
        handover_script(cmd),
    )];
    if let Program::Code { source, auto_io } = &sandbox.program {
        files.push(archive::TarFile::new(
            format!("{CONTROL_DIR}/{MAIN_FILE}"),
            source.clone(),
        ));
        if !*auto_io {
            files.push(archive::TarFile::new(
                format!("{CONTROL_DIR}/{VERBATIM_FILE}"),
                preamble::VERBATIM_LAUNCHER,
            ));
        }
        if *auto_io {
            let mut runner =
                preamble::render(&sandbox.inputs, &sandbox.outputs, INPUTS_DIR, OUTPUTS_DIR);
            if let Some(marker) = frame_marker {
                runner = preamble::with_frame(runner, Some(marker));
            }
            files.push(archive::TarFile::new(
                format!("{CONTROL_DIR}/{RUNNER_FILE}"),
                runner,
            ));
        }
    }
    let mut from_disk: Vec<(&str, &Path, bool)> = Vec::new();
    let mut disk_bytes = 0u64;
    for (p, value) in inputs {
        match value {
            Value::File(path) => {
                disk_bytes += std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
                from_disk.push((&p.name, path, false));
            }
            Value::Dir(path) => {
                // A tree's size is only known by walking it: spool it.
                disk_bytes = u64::MAX;
                from_disk.push((&p.name, path, true));
            }
            other => files.push(archive::TarFile::new(
                p.name.clone(),
                other.to_text().unwrap_or_default(),
            )),
        }
    }
    // Root-owned and not writable by others (as /var/inputs itself is in the
    // images dockhand builds): the code reads its inputs and cannot change
    // them or add files beside them.
    let head = archive::build_tar(&[(CONTROL_DIR, 0o755)], &files)?;
    if from_disk.is_empty() {
        return Ok(InputsTar::Memory(head.into()));
    }
    // Continue the archive: drop its two end-of-archive blocks, append the
    // files and trees from disk.
    let head = &head[..head.len().saturating_sub(1024)];
    let wrap = |e| Error::io("building the inputs archive", e);
    if disk_bytes <= IN_MEMORY_LIMIT {
        let builder = tar::Builder::new(head.to_vec());
        let tar = append_from_disk(builder, &from_disk)?
            .into_inner()
            .map_err(wrap)?;
        return Ok(InputsTar::Memory(tar.into()));
    }
    // Large inputs go to a file and stream from there to the daemon: host
    // memory stays flat whatever their size.
    let mut spool = tempfile::Builder::new()
        .prefix("dockhand-inputs-")
        .tempfile()
        .map_err(wrap)?;
    std::io::Write::write_all(spool.as_file_mut(), head).map_err(wrap)?;
    let (file, path) = spool.into_parts();
    let builder = tar::Builder::new(std::io::BufWriter::with_capacity(1 << 20, file));
    let writer = append_from_disk(builder, &from_disk)?
        .into_inner()
        .map_err(wrap)?;
    writer
        .into_inner()
        .map_err(|e| wrap(e.into_error()))?
        .sync_data()
        .map_err(wrap)?;
    Ok(InputsTar::Spooled(std::sync::Arc::new(path)))
}

/// File and Dir inputs up to this many bytes in all are archived in memory;
/// more are spooled to a temporary file.
const IN_MEMORY_LIMIT: u64 = 8 << 20;

/// Appends File and Dir inputs (`name`, host path, is a dir) to `builder`.
fn append_from_disk<W: std::io::Write>(
    mut builder: tar::Builder<W>,
    inputs: &[(&str, &Path, bool)],
) -> Result<tar::Builder<W>> {
    for (name, path, is_dir) in inputs {
        let appended = if *is_dir {
            archive::append_tree(&mut builder, name, path)
        } else {
            archive::append_file(&mut builder, name, path)
        };
        appended
            .map_err(|e| Error::io(format!("input `{name}`: reading {}", path.display()), e))?;
    }
    builder
        .finish()
        .map_err(|e| Error::io("building the inputs archive", e))?;
    Ok(builder)
}

pub use crate::backend::InputsTar;

/// The most bytes an inline job may have: well under the kernel's 128 KiB
/// limit on one environment string.
const INLINE_LIMIT: usize = 96 << 10;

/// The environment variable a pool's warm container keeps the inline
/// runner in, for its waiter to run once handed a job.
pub const INLINE_RUNNER_ENV: &str = "DOCKHAND_RUNNER";

/// The runner for inline jobs of `sandbox`: auto-IO code whose inputs are
/// all values. It reads the job from `DOCKHAND_JOB` and sends the
/// outputs frame when the job names a marker.
pub fn inline_runner(sandbox: &Sandbox) -> Option<String> {
    let auto_io = matches!(sandbox.program, Program::Code { auto_io: true, .. });
    if !auto_io || sandbox.inputs.iter().any(|p| p.ty.is_path()) {
        return None;
    }
    let runner = preamble::render(&sandbox.inputs, &sandbox.outputs, INPUTS_DIR, OUTPUTS_DIR);
    Some(preamble::with_frame(runner, None))
}

/// A job that needs no upload: auto-IO code whose inputs are all values
/// travels as `python3 -c <runner>` with the code, the inputs' texts and the
/// frame marker as JSON in `DOCKHAND_JOB` (a cold container's
/// environment, or a warm one's stdin), which saves the inputs upload (an
/// Engine API call that re-executes dockerd to extract). File and Dir
/// inputs, other modes and big jobs are uploaded as before. Returns the
/// command and the job.
pub fn inline_job(
    sandbox: &Sandbox,
    inputs: &[(Param, Value)],
    frame_marker: Option<&str>,
) -> Option<(Vec<String>, String)> {
    let runner = inline_runner(sandbox)?;
    let Program::Code { source, .. } = &sandbox.program else {
        return None;
    };
    let mut texts = serde_json::Map::new();
    for (p, value) in inputs {
        texts.insert(p.name.clone(), value.to_text()?.into());
    }
    let job =
        serde_json::json!({"main": source, "inputs": texts, "frame": frame_marker}).to_string();
    if job.len() > INLINE_LIMIT {
        return None;
    }
    Some((vec!["python3".into(), "-c".into(), runner], job))
}

/// A fresh marker for the outputs frame, when `sandbox` can use one: auto-IO
/// code whose outputs are all values (File and Dir outputs are files to
/// download anyway). Random per run, so output that merely looks like a
/// frame is not taken for one.
pub fn frame_marker(sandbox: &Sandbox) -> Option<String> {
    let values_only = sandbox.outputs.iter().all(|p| !p.ty.is_path());
    match &sandbox.program {
        Program::Code { auto_io: true, .. } if values_only => Some(format!(
            "\u{1e}dockhand-outputs-{}\u{1e}",
            uuid::Uuid::new_v4().simple()
        )),
        _ => None,
    }
}

/// The script a warm container's waiter runs once handed an uploaded job.
pub const HANDOVER_FILE: &str = "cmd.sh";

/// `exec`s the command as a cold container would run it: as the process the
/// init reaps, with stdin empty (the waiter's stdin is the handover pipe).
fn handover_script(cmd: &[String]) -> String {
    // An argument with a NUL byte cannot reach a program at all (a cold
    // create would be refused too); it is dropped here rather than run wrong.
    let quoted =
        shlex::try_join(cmd.iter().map(String::as_str)).unwrap_or_else(|_| "false".to_string());
    format!("exec {quoted} </dev/null\n")
}

/// The archive extracted into `/run/secrets`: one file per secret, readable
/// only by the sandbox's user.
pub fn secrets_archive(secrets: &[(String, String)], owner: (u64, u64)) -> Result<Vec<u8>> {
    let files: Vec<archive::TarFile> = secrets
        .iter()
        .map(|(name, value)| {
            archive::TarFile::new(name.clone(), value.clone()).private_to(owner.0, owner.1)
        })
        .collect();
    archive::build_tar(&[(".", 0o755)], &files)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::value::Type;
    use std::io::Read;

    fn sb() -> Sandbox {
        Sandbox::code("t", "r = x")
            .input("x", Type::Float)
            .input("name", Type::Str)
            .output("r", Type::Float)
            .build()
            .unwrap()
    }

    #[test]
    fn missing_unknown_and_mistyped_inputs_are_named() {
        let err = validate(&sb(), vec![("x".into(), 1.into())]).unwrap_err();
        assert!(
            matches!(err, Error::MissingInput { ref name } if name == "name"),
            "{err}"
        );
        let err = validate(
            &sb(),
            vec![
                ("x".into(), 1.into()),
                ("name".into(), "a".into()),
                ("y".into(), 2.into()),
            ],
        )
        .unwrap_err();
        assert!(
            matches!(err, Error::UnknownInput { ref name, .. } if name == "y"),
            "{err}"
        );
        let err = validate(
            &sb(),
            vec![("x".into(), "1".into()), ("name".into(), "a".into())],
        )
        .unwrap_err();
        assert!(
            matches!(err, Error::InputType { ref name, .. } if name == "x"),
            "{err}"
        );
        let ok = validate(
            &sb(),
            vec![("name".into(), "a".into()), ("x".into(), 2.into())],
        )
        .unwrap();
        assert_eq!(
            ok[0].1,
            Value::Float(2.0),
            "ints widen to floats, order is declared order"
        );
    }

    #[test]
    fn file_inputs_must_exist_and_be_files() {
        let s = Sandbox::code("t", "1")
            .input("f", Type::File)
            .build()
            .unwrap();
        let err = validate(&s, vec![("f".into(), Value::file("/no/such/file"))]).unwrap_err();
        assert!(err.to_string().contains("input `f`"), "{err}");
        let err = validate(&s, vec![("f".into(), Value::file("/tmp"))]).unwrap_err();
        assert!(matches!(err, Error::InputType { .. }), "{err}");
    }

    /// The archive's entries, by path, as text.
    fn entries(tar: &InputsTar) -> std::collections::BTreeMap<String, String> {
        let bytes = match tar {
            InputsTar::Memory(b) => b.to_vec(),
            InputsTar::Spooled(path) => std::fs::read(path.to_path_buf()).unwrap(),
        };
        let mut a = tar::Archive::new(bytes.as_slice());
        let mut found = std::collections::BTreeMap::new();
        for e in a.entries().unwrap() {
            let mut e = e.unwrap();
            let path = e.path().unwrap().to_string_lossy().into_owned();
            let mut data = String::new();
            e.read_to_string(&mut data).unwrap_or_default();
            found.insert(path, data);
        }
        found
    }

    #[test]
    fn small_files_stay_in_memory_and_large_ones_are_spooled() {
        let dir = tempfile::tempdir().unwrap();
        let small = dir.path().join("small");
        std::fs::write(&small, "tiny").unwrap();
        let large = dir.path().join("large");
        let big_text = "x".repeat((IN_MEMORY_LIMIT + 1) as usize);
        std::fs::write(&large, &big_text).unwrap();
        let s = Sandbox::code("t", "print(1)")
            .input("f", Type::File)
            .build()
            .unwrap();
        for (path, spooled) in [(&small, false), (&large, true)] {
            let inputs = validate(&s, vec![("f".into(), Value::file(path))]).unwrap();
            let tar = archive(&s, &inputs, &command_line(&s, &inputs), None).unwrap();
            assert_eq!(matches!(tar, InputsTar::Spooled(_)), spooled);
            let found = entries(&tar);
            assert_eq!(
                found["f"].len(),
                std::fs::metadata(path).unwrap().len() as usize
            );
            assert_eq!(found[".dockhand/main.py"], "print(1)");
            if let InputsTar::Spooled(spool) = &tar {
                let spool = spool.to_path_buf();
                drop(tar);
                assert!(!spool.exists(), "the spool goes with the archive");
            }
        }
    }

    #[test]
    fn archive_layout() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::fs::write(dir.path().join("sub/a.txt"), "A").unwrap();
        let s = Sandbox::code("t", "print(1)")
            .input("n", Type::Int)
            .input("d", Type::Dir)
            .build()
            .unwrap();
        let inputs = validate(
            &s,
            vec![("n".into(), 5.into()), ("d".into(), Value::dir(dir.path()))],
        )
        .unwrap();
        let tar = archive(&s, &inputs, &command_line(&s, &inputs), None).unwrap();
        assert!(matches!(tar, InputsTar::Spooled(_)), "trees are spooled");
        let found = entries(&tar);
        assert_eq!(found["n"], "5");
        assert_eq!(found[".dockhand/main.py"], "print(1)");
        assert!(found[".dockhand/run.py"].contains("_dh_ns[\"n\"] = int("));
        assert_eq!(found["d/sub/a.txt"], "A");
        assert!(found.contains_key("d/"));
    }

    #[test]
    fn command_placeholders_become_values_and_paths() {
        let s = Sandbox::command("c", "grep")
            .args(["-c", "{{pattern}}", "{{data}}"])
            .input("pattern", Type::Str)
            .input("data", Type::File)
            .build()
            .unwrap();
        let f = tempfile::NamedTempFile::new().unwrap();
        let inputs = validate(
            &s,
            vec![
                ("pattern".into(), "a b".into()),
                ("data".into(), Value::file(f.path())),
            ],
        )
        .unwrap();
        assert_eq!(
            command_line(&s, &inputs),
            ["grep", "-c", "a b", "/var/inputs/data"]
        );
    }
}

#[cfg(test)]
mod handover_tests {
    use super::*;

    #[test]
    fn the_handover_script_quotes_every_argument() {
        let cmd = ["sh", "-c", "echo 'a' \"$HOME\"; rm -rf /", "x\ny"].map(String::from);
        let script = handover_script(&cmd);
        assert!(
            script.starts_with("exec ") && script.ends_with(" </dev/null\n"),
            "{script}"
        );
        // sh reads it back as the same four arguments.
        let out = std::process::Command::new("sh")
            .args([
                "-c",
                &format!("set -- ; {}", script.replace("exec ", "printf '[%s]' ")),
            ])
            .output()
            .unwrap();
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "[sh][-c][echo 'a' \"$HOME\"; rm -rf /][x\ny]"
        );
    }
}
