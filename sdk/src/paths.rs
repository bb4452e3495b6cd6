//! Where dockhand keeps files on the host.

use std::path::PathBuf;

/// Environment variable that overrides the cache directory.
pub const CACHE_DIR_ENV: &str = "DOCKHAND_CACHE_DIR";

/// The default size limit of the output cache.
pub const DEFAULT_CACHE_LIMIT: u64 = 1 << 30;

/// The cache directory: `$DOCKHAND_CACHE_DIR`, else the user's cache dir
/// (`~/.cache/dockhand` on Linux), else the temp dir.
pub fn default_cache_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os(CACHE_DIR_ENV).filter(|d| !d.is_empty()) {
        return PathBuf::from(dir);
    }
    dirs::cache_dir()
        .unwrap_or_else(std::env::temp_dir)
        .join("dockhand")
}
