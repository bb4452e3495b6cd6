//! File requests: read, write, list, remove, stat, mkdir, move.

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

use serde_json::{json, Map, Value};

use crate::paths::{base_name, is_root, name_text, resolve, text};
use crate::reply::{b64, unb64, Refused};

type Reply = Result<Map<String, Value>, Refused>;

fn field<'a>(req: &'a Value, name: &str) -> Result<&'a str, Refused> {
    req.get(name)
        .and_then(Value::as_str)
        .ok_or_else(|| Refused::missing(name))
}

fn object(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(map) => map,
        _ => Map::new(),
    }
}

const NOT_A_FILE: &str =
    "is not a regular file (a FIFO, socket or device); only regular files are read";

pub fn read(req: &Value) -> Reply {
    let asked = field(req, "path")?;
    let path = resolve(asked)?;
    let limit = req
        .get("max_bytes")
        .and_then(Value::as_u64)
        .filter(|n| *n > 0)
        .unwrap_or(64 << 20);
    // Sockets cannot be opened at all: tell them apart first. The type is
    // checked again on the open descriptor, which is what is read.
    let meta = fs::metadata(&path).map_err(|e| Refused::os(asked, &e))?;
    if !meta.is_file() && !meta.is_dir() {
        return Err(Refused::new("not_a_file", format!("{asked} {NOT_A_FILE}")));
    }
    // Non-blocking, so a FIFO swapped in meanwhile cannot hold the request.
    let mut file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(&path)
        .map_err(|e| Refused::os(asked, &e))?;
    let meta = file.metadata().map_err(|e| Refused::os(asked, &e))?;
    if meta.is_dir() {
        return Err(Refused::new(
            "is_a_directory",
            format!("{asked} is a directory"),
        ));
    }
    if !meta.is_file() {
        return Err(Refused::new("not_a_file", format!("{asked} {NOT_A_FILE}")));
    }
    if meta.len() > limit {
        return Err(Refused::new(
            "too_large",
            format!(
                "{asked} is {} bytes; the limit is {limit} bytes",
                meta.len()
            ),
        ));
    }
    if let Some(length) = req.get("length").and_then(Value::as_u64) {
        let offset = req.get("offset").and_then(Value::as_u64).unwrap_or(0);
        let data =
            read_piece(&file, offset, length.min(MAX_PIECE)).map_err(|e| Refused::os(asked, &e))?;
        return Ok(object(json!({"data": b64(&data), "size": meta.len()})));
    }
    let mut data = Vec::with_capacity(meta.len() as usize);
    // One byte past the limit tells a file that grew while it was read.
    (&mut file)
        .take(limit + 1)
        .read_to_end(&mut data)
        .map_err(|e| Refused::os(asked, &e))?;
    if data.len() as u64 > limit {
        return Err(Refused::new(
            "too_large",
            format!("{asked} grew past the limit of {limit} bytes while being read"),
        ));
    }
    Ok(object(json!({"data": b64(&data)})))
}

/// The most one piece of a streamed read carries: its reply is one line
/// on the agent's stdout, which every other reply waits behind.
const MAX_PIECE: u64 = 4 << 20;

/// Up to `length` bytes at `offset` (fewer only at the end of the file).
fn read_piece(file: &File, offset: u64, length: u64) -> std::io::Result<Vec<u8>> {
    let mut data = vec![0; length as usize];
    let mut filled = 0;
    while filled < data.len() {
        match file.read_at(&mut data[filled..], offset + filled as u64) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    data.truncate(filled);
    Ok(data)
}

pub fn write(req: &Value) -> Reply {
    let asked = field(req, "path")?;
    let path = resolve(asked)?;
    let data = unb64(field(req, "data")?)?;
    let parent = path.parent().unwrap_or(Path::new("/")).to_path_buf();
    if let Some(offset) = req.get("offset").and_then(Value::as_u64) {
        // A piece of a streamed upload, at its place in the file: pieces may
        // arrive in any order (each request runs on a thread of its own).
        // Only the first makes the file: a piece still on its way when an
        // upload was abandoned (and its file removed) does not bring it back.
        let first = offset == 0;
        let done = (|| {
            if first {
                fs::create_dir_all(&parent)?;
            }
            let file = OpenOptions::new()
                .write(true)
                .create(first)
                .truncate(first)
                .mode(0o644)
                .custom_flags(libc::O_NOFOLLOW)
                .open(&path)?;
            file.write_all_at(&data, offset)
        })();
        done.map_err(|e| Refused::os(asked, &e))?;
        return Ok(Map::new());
    }
    let tmp = parent.join(format!(".{}.dockhand-{}", base_name(&path), random_hex()));
    let done = (|| {
        fs::create_dir_all(&parent)?;
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o644)
            .open(&tmp)?;
        file.write_all(&data)?;
        drop(file);
        if let Some(mode) = req.get("mode").and_then(Value::as_u64) {
            fs::set_permissions(&tmp, fs::Permissions::from_mode(mode as u32))?;
        } else if let Ok(old) = fs::metadata(&path) {
            fs::set_permissions(&tmp, fs::Permissions::from_mode(old.mode() & 0o7777))?;
        }
        fs::rename(&tmp, &path)
    })();
    if let Err(e) = done {
        let _ = fs::remove_file(&tmp);
        return Err(Refused::os(asked, &e));
    }
    Ok(Map::new())
}

/// Eight hex digits no other writer picks at the same moment.
fn random_hex() -> String {
    let mut bytes = [0u8; 4];
    if File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .is_err()
    {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        bytes = (nanos ^ std::process::id().rotate_left(16)).to_le_bytes();
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn kind_of(meta: &fs::Metadata) -> &'static str {
    let t = meta.file_type();
    if t.is_symlink() {
        "link"
    } else if t.is_dir() {
        "dir"
    } else if t.is_file() {
        "file"
    } else {
        "other"
    }
}

pub fn list(req: &Value) -> Reply {
    let asked = req
        .get("path")
        .and_then(Value::as_str)
        .filter(|p| !p.is_empty())
        .unwrap_or(".");
    let path = resolve(asked)?;
    let mut names: Vec<_> = fs::read_dir(&path)
        .map_err(|e| Refused::os(asked, &e))?
        .filter_map(|e| e.ok().map(|e| e.file_name()))
        .collect();
    names.sort();
    let entries: Vec<Value> = names
        .iter()
        .filter_map(|name| {
            let meta = fs::symlink_metadata(path.join(name)).ok()?;
            Some(json!({
                "name": name_text(name),
                "kind": kind_of(&meta),
                "size": meta.size(),
                "mtime_ns": (meta.mtime() as i128 * 1_000_000_000 + meta.mtime_nsec() as i128).max(0),
            }))
        })
        .collect();
    Ok(object(json!({ "entries": entries })))
}

pub fn remove(req: &Value) -> Reply {
    let asked = field(req, "path")?;
    let path = resolve(asked)?;
    if is_root(&path) {
        return Err(Refused::new(
            "outside",
            format!("refusing to remove the root {asked} itself"),
        ));
    }
    let recursive = req.get("recursive").and_then(Value::as_bool) == Some(true);
    let meta = fs::symlink_metadata(&path).map_err(|e| Refused::os(asked, &e))?;
    let done = if meta.is_dir() {
        if recursive {
            fs::remove_dir_all(&path)
        } else {
            fs::remove_dir(&path)
        }
    } else {
        fs::remove_file(&path)
    };
    done.map_err(|e| Refused::os(asked, &e))?;
    Ok(Map::new())
}

fn entry_of(path: &Path) -> Result<Value, std::io::Error> {
    let meta = fs::symlink_metadata(path)?;
    let kind = kind_of(&meta);
    let mut entry = json!({
        "name": base_name(path),
        "path": text(path),
        "kind": kind,
        "size": meta.size(),
        "mode": meta.mode() & 0o7777,
        "uid": meta.uid(),
        "gid": meta.gid(),
        "mtime": meta.mtime() as f64 + meta.mtime_nsec() as f64 / 1e9,
    });
    if kind == "link" {
        if let Ok(target) = fs::read_link(path) {
            entry["target"] = json!(text(&target));
        }
    }
    Ok(entry)
}

pub fn stat(req: &Value) -> Reply {
    let asked = field(req, "path")?;
    let path = resolve(asked)?;
    let entry = entry_of(&path).map_err(|e| Refused::os(asked, &e))?;
    Ok(object(json!({ "entry": entry })))
}

pub fn mkdir(req: &Value) -> Reply {
    let asked = field(req, "path")?;
    let path = resolve(asked)?;
    let created = match fs::metadata(&path) {
        Ok(meta) if meta.is_dir() => false,
        Ok(_) => {
            return Err(Refused::new(
                "exists",
                format!("{asked} exists and is not a directory"),
            ))
        }
        Err(_) => {
            fs::create_dir_all(&path).map_err(|e| Refused::os(asked, &e))?;
            true
        }
    };
    let entry = entry_of(&path).map_err(|e| Refused::os(asked, &e))?;
    Ok(object(json!({ "created": created, "entry": entry })))
}

pub fn rename(req: &Value) -> Reply {
    let asked = field(req, "path")?;
    let source = resolve(asked)?;
    let destination = resolve(field(req, "destination")?)?;
    if is_root(&source) {
        return Err(Refused::new(
            "outside",
            format!("refusing to move the root {asked} itself"),
        ));
    }
    let done = (|| {
        if let Some(parent) = destination.parent() {
            fs::create_dir_all(parent)?;
        }
        fs::rename(&source, &destination)?;
        entry_of(&destination)
    })();
    let entry = done.map_err(|e| Refused::os(asked, &e))?;
    Ok(object(json!({ "entry": entry })))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(reply: Reply) -> Map<String, Value> {
        reply.unwrap_or_else(|e| panic!("{}: {}", e.kind, e.message))
    }

    #[test]
    fn files_written_whole_or_in_pieces_read_back() {
        crate::testing::workspace();
        ok(write(&json!({"path": "f/one.txt", "data": b64(b"hello")})));
        let read_back = ok(read(&json!({"path": "f/one.txt"})));
        assert_eq!(read_back["data"], b64(b"hello"));
        ok(write(
            &json!({"path": "f/two", "data": b64(b"abc"), "offset": 0}),
        ));
        ok(write(
            &json!({"path": "f/two", "data": b64(b"def"), "offset": 3}),
        ));
        assert_eq!(ok(read(&json!({"path": "f/two"})))["data"], b64(b"abcdef"));
        let big = read(&json!({"path": "f/two", "max_bytes": 4})).unwrap_err();
        assert_eq!(big.kind, "too_large");
        let listed = ok(list(&json!({"path": "f"})));
        let names: Vec<&str> = listed["entries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["one.txt", "two"]);
    }

    #[test]
    fn a_file_reads_in_pieces_with_its_size() {
        crate::testing::workspace();
        let data: Vec<u8> = (0..=255u8).cycle().take(10_000).collect();
        ok(write(&json!({"path": "p/data", "data": b64(&data)})));
        let mut back = Vec::new();
        let mut offset = 0u64;
        loop {
            let piece = ok(read(
                &json!({"path": "p/data", "offset": offset, "length": 4096}),
            ));
            assert_eq!(piece["size"], 10_000);
            let bytes = unb64(piece["data"].as_str().unwrap()).unwrap();
            if bytes.is_empty() {
                break;
            }
            offset += bytes.len() as u64;
            back.extend(bytes);
        }
        assert_eq!(back, data);
        // A piece is never larger than the most one line carries.
        let huge = ok(read(
            &json!({"path": "p/data", "offset": 9_000, "length": u64::MAX}),
        ));
        assert_eq!(
            unb64(huge["data"].as_str().unwrap()).unwrap(),
            data[9_000..]
        );
        // The whole file's limit holds for its pieces too.
        let refused = read(&json!({"path": "p/data", "length": 1, "max_bytes": 100})).unwrap_err();
        assert_eq!(refused.kind, "too_large");
    }

    #[test]
    fn file_errors_carry_their_kind() {
        crate::testing::workspace();
        assert_eq!(
            read(&json!({"path": "none"})).unwrap_err().kind,
            "not_found"
        );
        ok(mkdir(&json!({"path": "d/e"})));
        assert_eq!(ok(mkdir(&json!({"path": "d/e"})))["created"], false);
        assert_eq!(
            read(&json!({"path": "d"})).unwrap_err().kind,
            "is_a_directory"
        );
        assert_eq!(remove(&json!({"path": "d"})).unwrap_err().kind, "not_empty");
        let moved = ok(rename(&json!({"path": "d", "destination": "g/h"})));
        assert_eq!(moved["entry"]["kind"], "dir");
        ok(remove(&json!({"path": "g", "recursive": true})));
        assert_eq!(stat(&json!({"path": "g"})).unwrap_err().kind, "not_found");
        assert_eq!(remove(&json!({"path": "."})).unwrap_err().kind, "outside");
        assert_eq!(read(&json!({})).unwrap_err().kind, "protocol");
    }
}
