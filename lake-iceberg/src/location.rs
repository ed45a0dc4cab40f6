//! Where a table is: [`TableLocation`], a local directory or a prefix on an S3-protocol object
//! store; and where a local table's file is on disk (Iceberg names files by location, a path or
//! a `file:` URL, while syncing and deleting them take a path).

use std::fmt;
use std::path::{Path, PathBuf};

/// Where a lake table keeps its `data` and `metadata`.
///
/// Converts from a path, and from a string: `s3://bucket/prefix` (also `s3a://`) is a prefix
/// on an S3-protocol object store, `file:///dir` or anything without a scheme a local
/// directory.
///
/// ```
/// use tidemark_lake_iceberg::TableLocation;
///
/// assert_eq!(
///     TableLocation::from("s3://lake/tables/orders"),
///     TableLocation::ObjectStore("s3://lake/tables/orders".to_owned())
/// );
/// assert_eq!(
///     TableLocation::from("/var/lib/lake"),
///     TableLocation::Local("/var/lib/lake".into())
/// );
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TableLocation {
    /// A local directory, created when missing. Every file is synced before a commit names it.
    Local(PathBuf),
    /// `s3://bucket/prefix` on an S3-protocol object store (settings in
    /// [`LakeConfig::storage`](crate::LakeConfig::storage)). An object is durable once its
    /// write returns.
    ObjectStore(String),
}

impl From<&Path> for TableLocation {
    fn from(path: &Path) -> Self {
        TableLocation::Local(path.to_path_buf())
    }
}

impl From<PathBuf> for TableLocation {
    fn from(path: PathBuf) -> Self {
        TableLocation::Local(path)
    }
}

impl From<&PathBuf> for TableLocation {
    fn from(path: &PathBuf) -> Self {
        TableLocation::Local(path.clone())
    }
}

impl From<&str> for TableLocation {
    fn from(location: &str) -> Self {
        let lower = location.to_ascii_lowercase();
        if lower.starts_with("s3://") || lower.starts_with("s3a://") {
            TableLocation::ObjectStore(location.trim_end_matches('/').to_owned())
        } else if location.starts_with("file:") {
            TableLocation::Local(local_path(location))
        } else {
            TableLocation::Local(PathBuf::from(location))
        }
    }
}

impl From<String> for TableLocation {
    fn from(location: String) -> Self {
        TableLocation::from(location.as_str())
    }
}

impl fmt::Display for TableLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TableLocation::Local(dir) => write!(f, "{}", dir.display()),
            TableLocation::ObjectStore(url) => f.write_str(url),
        }
    }
}

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
