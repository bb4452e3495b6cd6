//! File operations beyond [`SessionApi`]: describe, make a directory, rename.

use super::*;
use crate::session::protocol::FileInfo;

impl Session {
    /// Describes a path without following a final symbolic link.
    pub async fn stat(&self, path: &str) -> Result<FileInfo> {
        let reply = self
            .file_request(path, |id, path| Request::Stat { id, path })
            .await?;
        entry_of(reply, path)
    }

    /// Makes a directory and its parents; `Ok(false)` when it was there.
    pub async fn make_dir(&self, path: &str) -> Result<bool> {
        match self
            .file_request(path, |id, path| Request::Mkdir { id, path })
            .await?
        {
            Reply::Ok { created, .. } => Ok(created.unwrap_or(true)),
            other => Err(unexpected(other)),
        }
    }

    /// Renames `from` to `to` (both within the session's allowed paths),
    /// making `to`'s parents; returns what `to` is now.
    pub async fn rename(&self, from: &str, to: &str) -> Result<FileInfo> {
        let destination = self.resolve_path(to, "outside")?;
        let reply = self
            .file_request(from, |id, path| Request::Move {
                id,
                path,
                destination,
            })
            .await?;
        entry_of(reply, to)
    }
}

fn entry_of(reply: Reply, path: &str) -> Result<FileInfo> {
    match reply {
        Reply::Ok {
            entry: Some(entry), ..
        } => Ok(entry),
        Reply::Ok { .. } => Err(Error::SessionUnavailable {
            reason: format!("the session agent described nothing for {path}"),
        }),
        other => Err(unexpected(other)),
    }
}

fn unexpected(reply: Reply) -> Error {
    Error::SessionUnavailable {
        reason: format!("unexpected reply from the session agent: {reply:?}"),
    }
}
