//! The output cache: a local content-addressed store of successful runs.
//!
//! The key hashes everything that decides a run's result: the image's id,
//! the program and mode, every input value (and the content of File and Dir
//! inputs), the declared outputs, env vars, the network and the *names* of
//! secrets. Secret values never enter the key. An entry is written into a
//! temporary directory and renamed into place, so concurrent runs never see a
//! half-written entry. The store holds at most a set number of bytes
//! (1 GiB by default) and evicts the least recently used entries past it.

mod key;
mod store;

pub(crate) use key::key;
pub(crate) use store::Store;

use std::path::PathBuf;

use crate::error::Result;

pub use crate::paths::DEFAULT_CACHE_LIMIT;

impl crate::client::Client {
    /// The output cache: its size, and a way to clear it.
    pub fn output_cache(&self) -> OutputCache {
        OutputCache::new(self.cache_dir().to_path_buf(), self.cache_limit())
    }
}

/// What the output cache holds (or, from [`OutputCache::clear`], what was removed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct CacheStats {
    /// Stored runs.
    pub entries: usize,
    /// Bytes they take on disk.
    pub bytes: u64,
    /// The cache's size limit.
    pub limit_bytes: u64,
}

/// The output cache of a [`Client`](crate::Client): inspect and clear it.
///
/// ```no_run
/// # async fn demo() -> dockhand::Result<()> {
/// let client = dockhand::Client::connect().await?;
/// let cache = client.output_cache();
/// println!("{:?}", cache.stats()?);
/// cache.clear()?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct OutputCache {
    dir: PathBuf,
    limit: u64,
}

impl OutputCache {
    pub(crate) fn new(dir: PathBuf, limit: u64) -> Self {
        OutputCache { dir, limit }
    }

    pub(crate) fn store(&self) -> Store {
        Store::new(&self.dir, self.limit)
    }

    /// How many runs are stored and how many bytes they take.
    pub fn stats(&self) -> Result<CacheStats> {
        self.store().stats()
    }

    /// Removes every stored run; returns what was removed.
    pub fn clear(&self) -> Result<CacheStats> {
        self.store().evict(0)
    }
}
