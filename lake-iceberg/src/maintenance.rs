//! Table maintenance, as a lake service runs it: snapshot expiry that deletes the files no kept
//! snapshot needs, and compaction that rewrites the table keeping each key's newest version.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use futures::TryStreamExt;
use iceberg::spec::{
    MAIN_BRANCH, ManifestListWriter, ManifestWriterBuilder, Operation, Snapshot, Summary,
};
use iceberg::table::Table;
use iceberg::transaction::{ApplyTransactionAction, Transaction};
use tidemark_bucket::{Error, Result};

use crate::catalog::local_path;
use crate::data_files;
use crate::durable;
use crate::error::lake_error;
use crate::lake::IcebergLake;
use crate::offsets::OFFSETS_PROPERTY;
use crate::rows::{self, Row};
use crate::snapshots;

/// What [`IcebergLake::expire_snapshots`] removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Expiry {
    /// Snapshots removed from the table's metadata.
    pub snapshots: usize,
    /// Files deleted: data files, manifests and manifest lists no kept snapshot refers to, and
    /// metadata files older than the current one.
    pub files: usize,
}

impl IcebergLake {
    /// Keeps only the newest `newest` snapshots (at least 1) and deletes every file the kept
    /// ones do not need, as a lake's snapshot expiry does: a lookuper still serving an expired
    /// snapshot fails its next read and moves forward (see [`crate::IcebergLookuper`]).
    pub async fn expire_snapshots(&self, newest: usize) -> Result<Expiry> {
        if newest == 0 {
            return Err(Error::invalid(
                "a lake keeps at least its newest snapshot (expire_snapshots(0))",
            ));
        }
        let _writes = self.lock_writes().await;
        let table = self.table().await?;
        let all = snapshots::by_sequence(table.metadata());
        let expired: Vec<i64> = all
            .iter()
            .take(all.len().saturating_sub(newest))
            .map(|s| s.snapshot_id())
            .collect();
        let table = if expired.is_empty() {
            table
        } else {
            let tx = Transaction::new(&table);
            let action = tx.expire_snapshots().expire_snapshot_ids(expired.clone());
            action
                .apply(tx)
                .map_err(|e| lake_error("cannot stage the lake's snapshot expiry", e))?
                .commit(self.catalog())
                .await
                .map_err(|e| lake_error("the lake's snapshot expiry failed", e))?
        };
        let files = self.delete_unreferenced(&table).await?;
        Ok(Expiry {
            snapshots: expired.len(),
            files,
        })
    }

    /// Rewrites the current snapshot's rows keeping each key's newest version (dropping keys
    /// whose newest version is a delete) into new data files, committed as a `replace` snapshot
    /// at the same end offsets. Returns its sequence number, or `None` for a table with no
    /// snapshot. The old files stay until their snapshots expire.
    pub async fn compact(&self) -> Result<Option<u64>> {
        let _writes = self.lock_writes().await;
        let table = self.table().await?;
        let Some(current) = table.metadata().current_snapshot().cloned() else {
            return Ok(None);
        };
        let mut newest: BTreeMap<(u64, Vec<u8>), Row> = BTreeMap::new();
        let batches: Vec<arrow_array::RecordBatch> = table
            .scan()
            .snapshot_id(current.snapshot_id())
            .build()
            .map_err(|e| lake_error("cannot plan the lake's compaction", e))?
            .to_arrow()
            .await
            .map_err(|e| lake_error("cannot read the lake for compaction", e))?
            .try_collect()
            .await
            .map_err(|e| lake_error("cannot read the lake for compaction", e))?;
        for batch in &batches {
            for row in rows::from_batch(batch)? {
                let slot = (row.bucket, row.key.clone());
                let older = newest.get(&slot).is_some_and(|r| r.offset > row.offset);
                if !older {
                    newest.insert(slot, row);
                }
            }
        }
        let rows: Vec<Row> = newest.into_values().filter(|r| r.value.is_some()).collect();
        let files = if rows.is_empty() {
            Vec::new()
        } else {
            data_files::write(&table, &rows, "compact").await?
        };

        let metadata = table.metadata();
        let sequence = metadata.next_sequence_number();
        let snapshot_id = fresh_snapshot_id(&table);
        let file_io = table.file_io();
        let metadata_dir = format!("{}/metadata", metadata.location());
        let commit_uuid = uuid::Uuid::now_v7();

        let manifest_path = format!("{metadata_dir}/{commit_uuid}-m0.avro");
        let output = file_io
            .new_output(&manifest_path)
            .map_err(|e| lake_error("cannot create a lake manifest", e))?;
        let mut manifest = ManifestWriterBuilder::new(
            output,
            Some(snapshot_id),
            Arc::clone(metadata.current_schema()),
            (**metadata.default_partition_spec()).clone(),
        )
        .build_v2_data();
        for file in files {
            manifest
                .add_file(file, sequence)
                .map_err(|e| lake_error("cannot list a data file in a lake manifest", e))?;
        }
        let manifest = manifest
            .write_manifest_file()
            .await
            .map_err(|e| lake_error("cannot write a lake manifest", e))?;
        durable::sync_file(&manifest_path)?;

        let list_path = format!("{metadata_dir}/snap-{snapshot_id}-1-{commit_uuid}.avro");
        let list_output = file_io
            .new_output(&list_path)
            .map_err(|e| lake_error("cannot create a lake manifest list", e))?;
        let list_writer = list_output
            .writer()
            .await
            .map_err(|e| lake_error("cannot create a lake manifest list", e))?;
        let mut list = ManifestListWriter::v2(
            list_writer,
            snapshot_id,
            Some(current.snapshot_id()),
            sequence,
        );
        list.add_manifests(std::iter::once(manifest))
            .map_err(|e| lake_error("cannot write a lake manifest list", e))?;
        list.close()
            .await
            .map_err(|e| lake_error("cannot write a lake manifest list", e))?;
        durable::sync_file(&list_path)?;

        let mut properties = std::collections::HashMap::new();
        if let Some(ends) = current
            .summary()
            .additional_properties
            .get(OFFSETS_PROPERTY)
        {
            properties.insert(OFFSETS_PROPERTY.to_owned(), ends.clone());
        }
        let snapshot = Snapshot::builder()
            .with_snapshot_id(snapshot_id)
            .with_parent_snapshot_id(Some(current.snapshot_id()))
            .with_sequence_number(sequence)
            .with_timestamp_ms(now_ms().max(current.timestamp_ms()))
            .with_manifest_list(list_path)
            .with_summary(Summary {
                operation: Operation::Replace,
                additional_properties: properties,
            })
            .with_schema_id(metadata.current_schema_id())
            .build();
        let location = table
            .metadata_location()
            .map(str::to_owned)
            .ok_or_else(|| Error::lake("the lake table handle has no metadata location"))?;
        let next = metadata
            .clone()
            .into_builder(Some(location))
            .set_branch_snapshot(snapshot, MAIN_BRANCH)
            .and_then(|b| b.build())
            .map_err(|e| lake_error("cannot build the compacted lake metadata", e))?
            .metadata;
        let committed = self.catalog().commit(&table, next).await?;
        Ok(committed
            .metadata()
            .current_snapshot()
            .map(snapshots::sequence))
    }

    /// Deletes the files under the table's `data` and `metadata` directories that `table` does
    /// not need: not a kept snapshot's manifest list, manifest or data file, not the current
    /// metadata file or the pointer.
    async fn delete_unreferenced(&self, table: &Table) -> Result<usize> {
        let metadata = table.metadata();
        let mut keep: HashSet<PathBuf> = HashSet::new();
        if let Some(current) = table.metadata_location() {
            keep.insert(local_path(current));
        }
        for snapshot in metadata.snapshots() {
            keep.insert(local_path(snapshot.manifest_list()));
            let manifests =
                durable::manifests(table.file_io(), snapshot, metadata.format_version()).await?;
            for manifest in manifests {
                keep.insert(local_path(&manifest.manifest_path));
                let entries = manifest
                    .load_manifest(table.file_io())
                    .await
                    .map_err(|e| lake_error("cannot read a lake manifest", e))?;
                for entry in entries.entries() {
                    keep.insert(local_path(entry.file_path()));
                }
            }
        }
        let mut deleted = 0;
        for dir in [self.dir().join("data"), self.dir().join("metadata")] {
            deleted += delete_all_but(&dir, &keep)?;
        }
        Ok(deleted)
    }
}

/// Deletes the table files in `dir` not in `keep`; the pointer and temporary files stay.
fn delete_all_but(dir: &Path, keep: &HashSet<PathBuf>) -> Result<usize> {
    let entries = std::fs::read_dir(dir)
        .map_err(|e| lake_error(format!("cannot list {}", dir.display()), e))?;
    let mut deleted = 0;
    for entry in entries {
        let entry = entry.map_err(|e| lake_error(format!("cannot list {}", dir.display()), e))?;
        let path = entry.path();
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let table_file = name.ends_with(".parquet")
            || name.ends_with(".avro")
            || name.ends_with(".metadata.json");
        if !table_file || keep.contains(&path) {
            continue;
        }
        std::fs::remove_file(&path)
            .map_err(|e| lake_error(format!("cannot delete {}", path.display()), e))?;
        deleted += 1;
    }
    Ok(deleted)
}

/// A snapshot id the table does not have: random, positive, as Iceberg's are.
fn fresh_snapshot_id(table: &Table) -> i64 {
    loop {
        let bytes = uuid::Uuid::now_v7().into_bytes();
        let mut low = [0u8; 8];
        low.copy_from_slice(&bytes[8..]);
        let id = i64::from_le_bytes(low) & i64::MAX;
        if id != 0 && table.metadata().snapshot_by_id(id).is_none() {
            return id;
        }
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}
