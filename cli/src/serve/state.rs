//! What `serve --state-dir` keeps across its own restarts: each sandbox's
//! owner (a hash of its key), tokens, template, settings, timeout,
//! container and whether it is paused, in an SQLite database
//! (`<dir>/serve.db`).
//!
//! A directory that held a database and lost it, or a database that cannot
//! be read, is an error naming the path: never a silent empty state.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use super::config::hex;
use anyhow::{bail, Context, Result};
use chrono::{DateTime, Utc};
use rusqlite::{params, Connection, OptionalExtension};

/// The database's file name in the state directory.
const DB: &str = "serve.db";
/// What the schema is; a database of a later one is refused, an earlier
/// one is brought up to it.
const SCHEMA: i64 = 3;

/// One sandbox as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub id: String,
    pub key_hash: String,
    pub template: String,
    pub envd_token: String,
    pub traffic_token: String,
    pub metadata: String,
    pub envs: String,
    pub cpus: u32,
    pub memory_mb: u32,
    pub started_at: DateTime<Utc>,
    pub end_at: DateTime<Utc>,
    pub container_id: String,
    /// `memory`, `filesystem`, `auto` (either), or empty (a timeout kills).
    pub on_timeout_pause: String,
    pub auto_resume: bool,
    pub paused: bool,
    /// Its ports are reached without its traffic token.
    pub public: bool,
}

/// The store; every write goes to disk before the call answers.
pub struct Store {
    db: Mutex<Connection>,
    path: PathBuf,
    /// This state directory's own id: the name its sandboxes carry, so one
    /// left by a crash and in no row is found and removed.
    pub id: String,
}

impl Store {
    /// Opens (or, in an empty or new directory, creates) the store.
    pub fn open(dir: &Path) -> Result<Store> {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("creating the state directory {}", dir.display()))?;
        let path = dir.join(DB);
        if !path.exists() {
            let others: Vec<String> = std::fs::read_dir(dir)
                .with_context(|| format!("reading the state directory {}", dir.display()))?
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| !n.starts_with('.'))
                .collect();
            if !others.is_empty() {
                bail!(
                    "the state directory {} holds {} but no {DB}: its state is missing (restore it, or give an empty directory to start afresh)",
                    dir.display(),
                    others.join(", ")
                );
            }
        }
        let db = Connection::open(&path)
            .with_context(|| format!("opening the state database {}", path.display()))?;
        let store = Store {
            db: Mutex::new(db),
            path: path.clone(),
            id: String::new(),
        };
        let id = store
            .migrate()
            .with_context(|| format!("the state database {} cannot be used", path.display()))?;
        Ok(Store { id, ..store })
    }

    /// Creates the tables in a new database, checks an old one's schema;
    /// returns the directory's id.
    fn migrate(&self) -> Result<String> {
        let db = self.lock();
        db.execute_batch(
            "PRAGMA journal_mode = WAL;
             PRAGMA synchronous = FULL;
             CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
             CREATE TABLE IF NOT EXISTS sandboxes (
                 id TEXT PRIMARY KEY,
                 key_hash TEXT NOT NULL,
                 template TEXT NOT NULL,
                 envd_token TEXT NOT NULL,
                 traffic_token TEXT NOT NULL,
                 metadata TEXT NOT NULL,
                 envs TEXT NOT NULL,
                 cpus INTEGER NOT NULL,
                 memory_mb INTEGER NOT NULL,
                 started_at TEXT NOT NULL,
                 end_at TEXT NOT NULL,
                 container_id TEXT NOT NULL,
                 on_timeout_pause TEXT NOT NULL,
                 auto_resume INTEGER NOT NULL,
                 paused INTEGER NOT NULL,
                 public INTEGER NOT NULL DEFAULT 0
             );
             CREATE TABLE IF NOT EXISTS snapshots (
                 id TEXT PRIMARY KEY,
                 key_hash TEXT NOT NULL,
                 template TEXT NOT NULL,
                 image TEXT NOT NULL,
                 names TEXT NOT NULL,
                 source TEXT NOT NULL,
                 created TEXT NOT NULL,
                 files TEXT
             );
             CREATE TABLE IF NOT EXISTS templates (
                 id TEXT PRIMARY KEY,
                 key_hash TEXT NOT NULL,
                 data TEXT NOT NULL
             );",
        )?;
        let schema: Option<String> = db
            .query_row("SELECT value FROM meta WHERE key = 'schema'", [], |r| {
                r.get(0)
            })
            .optional()?;
        match schema {
            None => {
                let id = hex(&uuid::Uuid::new_v4().as_bytes()[..8]);
                db.execute(
                    "INSERT INTO meta (key, value) VALUES ('schema', ?1), ('id', ?2)",
                    params![SCHEMA.to_string(), id],
                )?;
                Ok(id)
            }
            // Schema 1 knew no public sandboxes: each of its sandboxes
            // keeps asking for its traffic token. Schema 2 knew no
            // snapshots on claims: each of its snapshots is an image.
            Some(s) if s == "1" || s == "2" => {
                if s == "1" {
                    db.execute_batch(
                        "ALTER TABLE sandboxes ADD COLUMN public INTEGER NOT NULL DEFAULT 0;",
                    )?;
                }
                db.execute_batch(
                    "ALTER TABLE snapshots ADD COLUMN files TEXT;
                     UPDATE meta SET value = '3' WHERE key = 'schema';",
                )?;
                Ok(db.query_row("SELECT value FROM meta WHERE key = 'id'", [], |r| r.get(0))?)
            }
            Some(s) if s == SCHEMA.to_string() => {
                Ok(db.query_row("SELECT value FROM meta WHERE key = 'id'", [], |r| r.get(0))?)
            }
            Some(other) => bail!("its schema is {other}; this dockhand reads schema {SCHEMA}"),
        }
    }

    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, Connection> {
        self.db.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Where it is.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Every stored sandbox.
    pub fn all(&self) -> Result<Vec<Row>> {
        let db = self.lock();
        let mut query = db.prepare(
            "SELECT id, key_hash, template, envd_token, traffic_token, metadata, envs, cpus,
                    memory_mb, started_at, end_at, container_id, on_timeout_pause, auto_resume, paused, public
             FROM sandboxes",
        )?;
        let rows = query.query_map([], |r| {
            let time = |i: usize| -> rusqlite::Result<DateTime<Utc>> {
                let text: String = r.get(i)?;
                DateTime::parse_from_rfc3339(&text)
                    .map(|t| t.with_timezone(&Utc))
                    .map_err(|e| {
                        rusqlite::Error::FromSqlConversionFailure(
                            i,
                            rusqlite::types::Type::Text,
                            Box::new(e),
                        )
                    })
            };
            Ok(Row {
                id: r.get(0)?,
                key_hash: r.get(1)?,
                template: r.get(2)?,
                envd_token: r.get(3)?,
                traffic_token: r.get(4)?,
                metadata: r.get(5)?,
                envs: r.get(6)?,
                cpus: r.get(7)?,
                memory_mb: r.get(8)?,
                started_at: time(9)?,
                end_at: time(10)?,
                container_id: r.get(11)?,
                on_timeout_pause: r.get(12)?,
                auto_resume: r.get(13)?,
                paused: r.get(14)?,
                public: r.get(15)?,
            })
        })?;
        rows.collect::<rusqlite::Result<Vec<Row>>>()
            .with_context(|| format!("reading {}", self.path.display()))
    }

    /// Stores a sandbox (or replaces its row).
    pub fn put(&self, row: &Row) -> Result<()> {
        self.lock().execute(
            "INSERT OR REPLACE INTO sandboxes (id, key_hash, template, envd_token, traffic_token,
                 metadata, envs, cpus, memory_mb, started_at, end_at, container_id,
                 on_timeout_pause, auto_resume, paused, public)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16)",
            params![
                row.id,
                row.key_hash,
                row.template,
                row.envd_token,
                row.traffic_token,
                row.metadata,
                row.envs,
                row.cpus,
                row.memory_mb,
                row.started_at.to_rfc3339(),
                row.end_at.to_rfc3339(),
                row.container_id,
                row.on_timeout_pause,
                row.auto_resume,
                row.paused,
                row.public,
            ],
        )?;
        Ok(())
    }

    /// Forgets a sandbox.
    pub fn remove(&self, id: &str) -> Result<()> {
        self.lock()
            .execute("DELETE FROM sandboxes WHERE id = ?1", params![id])?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(id: &str) -> Row {
        let now = DateTime::parse_from_rfc3339("2026-01-02T03:04:05Z")
            .unwrap()
            .with_timezone(&Utc);
        Row {
            id: id.into(),
            key_hash: super::super::config::key_hash(b"k"),
            template: "base".into(),
            envd_token: "e".into(),
            traffic_token: "t".into(),
            metadata: "{}".into(),
            envs: "{}".into(),
            cpus: 1,
            memory_mb: 1024,
            started_at: now,
            end_at: now,
            container_id: "c1".into(),
            on_timeout_pause: String::new(),
            auto_resume: false,
            paused: false,
            public: false,
        }
    }

    #[test]
    fn a_schema_one_directory_is_brought_up_and_its_sandboxes_stay_private() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        store.put(&row("a")).unwrap();
        drop(store);
        let db = Connection::open(dir.path().join(DB)).unwrap();
        db.execute_batch(
            "ALTER TABLE sandboxes DROP COLUMN public;
             ALTER TABLE snapshots DROP COLUMN files;
             UPDATE meta SET value = '1' WHERE key = 'schema';",
        )
        .unwrap();
        drop(db);
        let again = Store::open(dir.path()).unwrap();
        assert_eq!(again.all().unwrap(), vec![row("a")]);
        again
            .put(&Row {
                public: true,
                ..row("b")
            })
            .unwrap();
        assert!(again.all().unwrap().iter().any(|r| r.id == "b" && r.public));
    }

    #[test]
    fn rows_survive_reopening_and_updates_land() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        store.put(&row("a")).unwrap();
        store.put(&row("b")).unwrap();
        store
            .put(&Row {
                container_id: "c2".into(),
                paused: true,
                ..row("a")
            })
            .unwrap();
        store.remove("b").unwrap();
        let id = store.id.clone();
        drop(store);
        let again = Store::open(dir.path()).unwrap();
        assert_eq!(again.id, id, "the directory keeps its id");
        let rows = again.all().unwrap();
        assert_eq!(rows.len(), 1);
        assert_eq!(
            (rows[0].container_id.as_str(), rows[0].paused),
            ("c2", true)
        );
        assert_ne!(rows[0].key_hash, "k", "keys are stored hashed");
    }

    #[test]
    fn a_lost_or_corrupt_database_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        Store::open(dir.path()).unwrap().put(&row("a")).unwrap();
        // Lost: the directory has its other files but no database.
        for f in ["serve.db", "serve.db-wal", "serve.db-shm"] {
            let _ = std::fs::remove_file(dir.path().join(f));
        }
        std::fs::write(dir.path().join("notes"), b"x").unwrap();
        let lost = Store::open(dir.path()).err().unwrap().to_string();
        assert!(
            lost.contains("no serve.db") && lost.contains(&dir.path().display().to_string()),
            "{lost}"
        );
        // Corrupt: not a database at all.
        std::fs::write(dir.path().join("serve.db"), b"not a database, just bytes").unwrap();
        let corrupt = format!("{:#}", Store::open(dir.path()).err().unwrap());
        assert!(corrupt.contains("serve.db"), "{corrupt}");
    }
}
