//! Syncing what a commit adds before the commit's pointer names it, so a crash after a commit
//! never leaves a snapshot whose files were lost with the page cache.

use std::collections::HashSet;

use iceberg::io::FileIO;
use iceberg::spec::{FormatVersion, ManifestFile, ManifestList, Snapshot, TableMetadata};
use tidemark_bucket::Result;

use crate::error::lake_error;
use crate::warehouse::Warehouse;

/// Syncs the manifest lists, manifests and data files of the snapshots `new` has and `old` has
/// not.
pub(crate) async fn sync_new_files(
    warehouse: &Warehouse,
    new: &TableMetadata,
    old: &TableMetadata,
) -> Result<()> {
    if warehouse.local_dir().is_none() {
        // An object is durable once its write returned.
        return Ok(());
    }
    let file_io = warehouse.file_io();
    let known: HashSet<i64> = old.snapshots().map(|s| s.snapshot_id()).collect();
    for snapshot in new.snapshots() {
        if known.contains(&snapshot.snapshot_id()) {
            continue;
        }
        warehouse.sync(snapshot.manifest_list())?;
        for manifest in manifests(file_io, snapshot, new.format_version()).await? {
            if manifest.added_snapshot_id != snapshot.snapshot_id() {
                continue;
            }
            warehouse.sync(&manifest.manifest_path)?;
            let entries = manifest
                .load_manifest(file_io)
                .await
                .map_err(|e| lake_error("cannot read a lake manifest", e))?;
            for entry in entries.entries() {
                if entry.snapshot_id() == Some(snapshot.snapshot_id()) {
                    warehouse.sync(entry.file_path())?;
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
