//! Syncing what a commit adds before the commit's pointer names it, so a crash after a commit
//! never leaves a snapshot whose files were lost with the page cache.

use std::collections::HashSet;
use std::fs;

use iceberg::io::FileIO;
use iceberg::spec::{FormatVersion, ManifestFile, ManifestList, Snapshot, TableMetadata};
use tidemark_bucket::Result;

use crate::error::lake_error;
use crate::location::local_path;

/// Syncs the file at `location` and its directory.
pub(crate) fn sync_file(location: &str) -> Result<()> {
    let path = local_path(location);
    sync_path(&path)?;
    match path.parent() {
        Some(dir) => sync_path(dir),
        None => Ok(()),
    }
}

/// Syncs the file or directory at `path` (a directory: the entries created in it).
pub(crate) fn sync_path(path: &std::path::Path) -> Result<()> {
    fs::File::open(path)
        .and_then(|f| f.sync_all())
        .map_err(|e| lake_error(format!("cannot sync {}", path.display()), e))
}

/// Syncs the manifest lists, manifests and data files of the snapshots `new` has and `old` has
/// not.
pub(crate) async fn sync_new_files(new: &TableMetadata, old: &TableMetadata) -> Result<()> {
    let file_io = FileIO::new_with_fs();
    let known: HashSet<i64> = old.snapshots().map(|s| s.snapshot_id()).collect();
    for snapshot in new.snapshots() {
        if known.contains(&snapshot.snapshot_id()) {
            continue;
        }
        sync_file(snapshot.manifest_list())?;
        for manifest in manifests(&file_io, snapshot, new.format_version()).await? {
            if manifest.added_snapshot_id != snapshot.snapshot_id() {
                continue;
            }
            sync_file(&manifest.manifest_path)?;
            let entries = manifest
                .load_manifest(&file_io)
                .await
                .map_err(|e| lake_error("cannot read a lake manifest", e))?;
            for entry in entries.entries() {
                if entry.snapshot_id() == Some(snapshot.snapshot_id()) {
                    sync_file(entry.file_path())?;
                }
            }
        }
    }
    Ok(())
}

/// The manifests a snapshot's manifest list names.
pub(crate) async fn manifests(
    file_io: &FileIO,
    snapshot: &Snapshot,
    version: FormatVersion,
) -> Result<Vec<ManifestFile>> {
    let bytes = file_io
        .new_input(snapshot.manifest_list())
        .map_err(|e| lake_error("cannot open a lake manifest list", e))?
        .read()
        .await
        .map_err(|e| lake_error("cannot read a lake manifest list", e))?;
    let list = ManifestList::parse_with_version(&bytes, version)
        .map_err(|e| lake_error("cannot parse a lake manifest list", e))?;
    Ok(list.entries().to_vec())
}
