//! Where a table file is on the local filesystem: Iceberg names files by location (a path or a
//! `file:` URL), while syncing and deleting them take a path.

use std::path::PathBuf;

/// Where the local-filesystem file IO keeps `location` (a path or a `file:` URL).
pub(crate) fn local_path(location: &str) -> PathBuf {
    let path = location
        .strip_prefix("file://")
        .or_else(|| location.strip_prefix("file:"))
        .unwrap_or(location);
    if path.starts_with('/') {
        PathBuf::from(path)
    } else {
        PathBuf::from(format!("/{path}"))
    }
}
