//! Table maintenance, as a lake service runs it: snapshot expiry that deletes the files no kept
//! snapshot needs, and compaction that rewrites the table keeping each key's newest version.

use std::collections::HashSet;
use std::sync::Arc;

use futures::TryStreamExt;
use iceberg::spec::{
    MAIN_BRANCH, ManifestFile, ManifestListWriter, ManifestWriterBuilder, Operation, Snapshot,
    SnapshotRef, Summary,
};
use iceberg::table::Table;
use iceberg::transaction::{ApplyTransactionAction, Transaction};
use tidemark_bucket::{Error, Result};

use crate::catalog::Commit;
use crate::data_files;
use crate::durable;
use crate::error::lake_error;
use crate::lake::IcebergLake;
use crate::offsets::OFFSETS_PROPERTY;
use crate::retry;
use crate::rows::{self, Newest, Row};
use crate::snapshots;
use crate::warehouse::Warehouse;

/// What [`IcebergLake::expire_snapshots`] removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Expiry {
    /// Snapshots removed from the table's metadata.
    pub snapshots: usize,
    /// Files deleted: the data files, manifests and manifest lists only expired snapshots
    /// needed, the metadata files the table's metadata log names, and table files nothing
    /// names that are [`ORPHAN_AGE`] old.
    pub files: usize,
}

impl IcebergLake {
    /// Keeps only the newest `newest` snapshots (at least 1) and deletes the files only the
    /// expired ones needed (and table files nothing names, once [`ORPHAN_AGE`] old), as a lake's
    /// snapshot expiry does: a lookuper still serving an expired snapshot fails its next read and moves to a newer one at its end if there is one (see
    /// [`crate::IcebergLookuper`]).
    pub async fn expire_snapshots(&self, newest: usize) -> Result<Expiry> {
        if newest == 0 {
            return Err(Error::invalid(
                "a lake keeps at least its newest snapshot (expire_snapshots(0))",
            ));
        }
        let _maintenance = self.lock_maintenance().await;
        let mut attempt = 0;
        let (old, table) = loop {
            if attempt > 0 {
                retry::pause(attempt).await;
            }
            attempt += 1;
            let writes = self.lock_writes().await?;
            let tried = self.try_expire(newest).await;
            writes.release().await;
            match tried? {
                Some(done) => break done,
                None if attempt < retry::MAX_ATTEMPTS => continue,
                None => return Err(retry::gave_up("a snapshot expiry")),
            }
        };
        // This handle's commits wait; other processes' need not: the sweep deletes only what
        // the expired snapshots needed and files older than any commit in flight, and listing
        // and deleting a large table's objects would hold every writer up.
        let _writes = self.lock_local_writes().await;
        let files = self.delete_unreferenced(&old, &table).await?;
        Ok(Expiry {
            snapshots: old
                .metadata()
                .snapshots()
                .len()
                .saturating_sub(table.metadata().snapshots().len()),
            files,
        })
    }

    /// One attempt of [`Self::expire_snapshots`] over the table as it is now: the table before
    /// and after it, or `None` when another writer committed first (nothing changed). The
    /// caller holds the write lock.
    async fn try_expire(&self, newest: usize) -> Result<Option<(Table, Table)>> {
        let table = self.table().await?;
        let all = snapshots::by_sequence(table.metadata());
        let expired: Vec<i64> = all
            .iter()
            .take(all.len().saturating_sub(newest))
            .map(|s| s.snapshot_id())
            .collect();
        if expired.is_empty() {
            return Ok(Some((table.clone(), table)));
        }
        let tx = Transaction::new(&table);
        // Only the snapshots named: without a cutoff of its own, Iceberg's action also expires
        // every snapshot older than the table's maximum age (5 days by default).
        let action = tx
            .expire_snapshots()
            .expire_snapshot_ids(expired)
            .expire_older_than_ms(i64::MIN)
            .retain_last(newest);
        let committed = action
            .apply(tx)
            .map_err(|e| lake_error("cannot stage the lake's snapshot expiry", e))?
            .commit(&self.catalog().pinned(&table))
            .await;
        match committed {
            Ok(committed) => Ok(Some((table, committed))),
            Err(e) if retry::lost(&e) => Ok(None),
            Err(e) => Err(lake_error("the lake's snapshot expiry failed", e)),
        }
    }

    /// Rewrites the current snapshot's rows keeping each key's newest version (dropping keys
    /// whose newest version is a delete) into new data files, committed as a `replace` snapshot.
    /// Returns its sequence number, or `None` for a table with no snapshot. The old files stay
    /// until their snapshots expire.
    ///
    /// Commits go on while the rewrite reads and writes: only its own commit waits for them.
    /// The files they added after the snapshot it rewrote are kept as they are, and its snapshot
    /// records the newest ends.
    pub async fn compact(&self) -> Result<Option<u64>> {
        let _maintenance = self.lock_maintenance().await;
        match self.rewrite().await? {
            Some(rewrite) => self.commit_rewrite(rewrite).await.map(Some),
            None => Ok(None),
        }
    }

    /// A compaction's first half: reads the current snapshot and writes its rows' newest
    /// versions and their manifest, committing nothing. The caller holds the maintenance lock.
    async fn rewrite(&self) -> Result<Option<Rewrite>> {
        let started = std::time::Instant::now();
        let table = self.table().await?;
        let Some(base) = table.metadata().current_snapshot().cloned() else {
            return Ok(None);
        };
        let rows = newest_versions(&table, base.snapshot_id()).await?;
        let files = if rows.is_empty() {
            Vec::new()
        } else {
            data_files::write(&table, &rows, "compact", self.layout()).await?
        };
        // The compaction commits its metadata itself, past the catalog's sync of what a
        // transaction adds: its files are synced here.
        for file in &files {
            self.warehouse().sync(file.file_path())?;
        }
        let metadata = table.metadata();
        let file_io = table.file_io();
        let metadata_dir = format!("{}/metadata", metadata.location());
        let commit_uuid = uuid::Uuid::now_v7();
        let snapshot_id = fresh_snapshot_id(&table);

        // The rewritten rows keep the data sequence number of the snapshot they were read from.
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
                .add_file(file, base.sequence_number())
                .map_err(|e| lake_error("cannot list a data file in a lake manifest", e))?;
        }
        let manifest = manifest
            .write_manifest_file()
            .await
            .map_err(|e| lake_error("cannot write a lake manifest", e))?;
        self.warehouse().sync(&manifest_path)?;

        Ok(Some(Rewrite {
            base: base.snapshot_id(),
            snapshot_id,
            commit_uuid,
            manifest,
            started,
        }))
    }

    /// A compaction's second half: commits the rewrite as a `replace` snapshot over the current
    /// one, keeping the files committed since the rewritten snapshot. Returns its sequence
    /// number.
    async fn commit_rewrite(&self, rewrite: Rewrite) -> Result<u64> {
        for attempt in 0..retry::MAX_ATTEMPTS {
            if attempt > 0 {
                retry::pause(attempt).await;
            }
            let writes = self.lock_writes().await?;
            let tried = self.try_commit_rewrite(&rewrite, attempt).await;
            writes.release().await;
            if let Some(sequence) = tried? {
                return Ok(sequence);
            }
        }
        Err(retry::gave_up("a compaction's commit"))
    }

    /// One attempt of [`Self::commit_rewrite`] over the table as it is now: `None` when another
    /// writer committed first (nothing changed). The caller holds the write lock.
    async fn try_commit_rewrite(&self, rewrite: &Rewrite, attempt: u32) -> Result<Option<u64>> {
        let Rewrite {
            base,
            snapshot_id,
            commit_uuid,
            manifest,
            started,
        } = rewrite;
        let (base, snapshot_id) = (*base, *snapshot_id);
        if started.elapsed() > ORPHAN_AGE / 2 {
            return Err(Error::lake(
                "a compaction took over half the orphan age to write its files: an expiry \
                 elsewhere may have deleted them as orphans; compact again",
            ));
        }
        let table = self.table().await?;
        let metadata = table.metadata();
        let file_io = table.file_io();
        let metadata_dir = format!("{}/metadata", metadata.location());
        let current = metadata
            .current_snapshot()
            .cloned()
            .ok_or_else(|| Error::lake("the lake table lost its current snapshot"))?;
        if metadata.snapshot_by_id(snapshot_id).is_some() {
            return Err(Error::lake(
                "a lake snapshot id was taken twice; compact again",
            ));
        }
        let mut manifests = vec![manifest.clone()];
        manifests.extend(added_since(&table, &current, base).await?);
        let sequence = metadata.next_sequence_number();
        let list_path = format!(
            "{metadata_dir}/snap-{snapshot_id}-{}-{commit_uuid}.avro",
            attempt + 1
        );
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
        list.add_manifests(manifests.into_iter())
            .map_err(|e| lake_error("cannot write a lake manifest list", e))?;
        list.close()
            .await
            .map_err(|e| lake_error("cannot write a lake manifest list", e))?;
        self.warehouse().sync(&list_path)?;

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
            .with_manifest_list(list_path.clone())
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
        let committed = match self.catalog().commit(&table, next).await? {
            Commit::Done(committed) => *committed,
            Commit::Lost => {
                // Its list names files another attempt lists again; nothing refers to it.
                let _ = self.warehouse().delete(&list_path).await;
                return Ok(None);
            }
        };
        committed
            .metadata()
            .current_snapshot()
            .map(snapshots::sequence)
            .map(Some)
            .ok_or_else(|| Error::lake("the compaction left no current snapshot"))
    }

    /// Deletes the files under the table's `data` and `metadata` directories that `table` (as an
    /// expiry left it, from `old`) does not need: at once the ones `old` needed (files of the
    /// expired snapshots, and metadata files `table` superseded); others that nothing names only
    /// once they are [`ORPHAN_AGE`] old, since in a table several processes write such a file
    /// may be one a writer is about to commit.
    async fn delete_unreferenced(&self, old: &Table, table: &Table) -> Result<usize> {
        let warehouse = self.warehouse();
        let mut keep = reachable(warehouse, table, Missing::Error).await?;
        // Whatever was committed since (in another process too) is needed as well.
        keep.extend(reachable(warehouse, &self.table().await?, Missing::Error).await?);
        // Another process's expiry of the same snapshots may have deleted their files already.
        let mut garbage = reachable(warehouse, old, Missing::Skip).await?;
        garbage.extend(
            table
                .metadata()
                .metadata_log()
                .iter()
                .map(|log| warehouse.key(&log.metadata_file)),
        );
        delete_unneeded(warehouse, &keep, &garbage).await
    }
}

/// How old a file that no metadata names must be before an expiry deletes it: a tiering commit
/// or compaction in another process writes its files minutes at most before it commits them.
pub const ORPHAN_AGE: std::time::Duration = std::time::Duration::from_secs(3600);

/// What [`reachable`] does with a manifest list or manifest it cannot read.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Missing {
    /// The table needs it: an error.
    Error,
    /// Leave it out (the files of snapshots already expired elsewhere).
    Skip,
}

/// Every file `table` needs: its metadata file, and its snapshots' manifest lists, manifests
/// and data files.
async fn reachable(
    warehouse: &Warehouse,
    table: &Table,
    missing: Missing,
) -> Result<HashSet<String>> {
    let metadata = table.metadata();
    let mut keep: HashSet<String> = HashSet::new();
    if let Some(current) = table.metadata_location() {
        keep.insert(warehouse.key(current));
    }
    for snapshot in metadata.snapshots() {
        keep.insert(warehouse.key(snapshot.manifest_list()));
        let manifests =
            match durable::manifests(table.file_io(), snapshot, metadata.format_version()).await {
                Ok(manifests) => manifests,
                Err(_) if missing == Missing::Skip => continue,
                Err(e) => return Err(e),
            };
        for manifest in manifests {
            keep.insert(warehouse.key(&manifest.manifest_path));
            let entries = match manifest.load_manifest(table.file_io()).await {
                Ok(entries) => entries,
                Err(_) if missing == Missing::Skip => continue,
                Err(e) => return Err(lake_error("cannot read a lake manifest", e)),
            };
            for entry in entries.entries() {
                keep.insert(warehouse.key(entry.file_path()));
            }
        }
    }
    Ok(keep)
}

/// A compaction's rewrite, written but not committed.
struct Rewrite {
    /// The snapshot it read.
    base: i64,
    /// The id its snapshot will have.
    snapshot_id: i64,
    commit_uuid: uuid::Uuid,
    /// The manifest of its data files.
    manifest: ManifestFile,
    /// When it began writing its files: an expiry in another process deletes them once they
    /// are [`ORPHAN_AGE`] old and still unnamed.
    started: std::time::Instant,
}

/// Each key's newest version in snapshot `snapshot_id`, keys whose newest version is a delete
/// left out, sorted by (bucket, key).
async fn newest_versions(table: &Table, snapshot_id: i64) -> Result<Vec<Row>> {
    let mut newest = Newest::default();
    let mut stream = table
        .scan()
        .snapshot_id(snapshot_id)
        .build()
        .map_err(|e| lake_error("cannot plan the lake's compaction", e))?
        .to_arrow()
        .await
        .map_err(|e| lake_error("cannot read the lake for compaction", e))?;
    while let Some(batch) = stream
        .try_next()
        .await
        .map_err(|e| lake_error("cannot read the lake for compaction", e))?
    {
        for row in rows::from_batch(&batch)? {
            newest.add(row);
        }
    }
    Ok(newest.into_rows().filter(|r| r.value.is_some()).collect())
}

/// The manifests the snapshots after `base` (up to and including `current`) added: the files of
/// the commits a compaction of `base` must keep.
async fn added_since(table: &Table, current: &SnapshotRef, base: i64) -> Result<Vec<ManifestFile>> {
    let metadata = table.metadata();
    let mut added = Vec::new();
    let mut at = current.clone();
    while at.snapshot_id() != base {
        if at.summary().operation == Operation::Replace {
            // Its files hold the rows this compaction rewrote too: keeping both would list every
            // row twice.
            return Err(Error::lake(
                "another compaction committed after the snapshot this one rewrote; compact again",
            ));
        }
        for manifest in durable::manifests(table.file_io(), &at, metadata.format_version()).await? {
            if manifest.added_snapshot_id == at.snapshot_id() {
                added.push(manifest);
            }
        }
        at = at
            .parent_snapshot_id()
            .and_then(|parent| metadata.snapshot_by_id(parent))
            .cloned()
            .ok_or_else(|| {
                Error::lake("the snapshot a compaction read is no longer in the lake's history")
            })?;
    }
    Ok(added)
}

/// Deletes the table files not in `keep` that are in `garbage` or older than [`ORPHAN_AGE`];
/// other files (a local catalog's, temporary ones) stay.
async fn delete_unneeded(
    warehouse: &Warehouse,
    keep: &HashSet<String>,
    garbage: &HashSet<String>,
) -> Result<usize> {
    let mut deleted = 0;
    for file in warehouse.table_files().await? {
        if keep.contains(&file.key) {
            continue;
        }
        if !garbage.contains(&file.key) {
            let age = file.modified.and_then(|modified| modified.elapsed().ok());
            if age.is_none_or(|age| age < ORPHAN_AGE) {
                continue;
            }
        }
        // One another process's expiry took first is not an error.
        warehouse.delete(&file.key).await?;
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

#[cfg(test)]
mod tests {
    use tidemark_bucket::{LakeLookuper, LakeSnapshot};
    use tidemark_engine_api::Record;

    use super::*;

    /// Commits that land between a compaction's rewrite and its commit are kept: their puts and
    /// deletes win over the rewritten versions, and the compaction's snapshot has their ends.
    #[tokio::test]
    async fn commits_during_a_compaction_are_kept_by_it() {
        let (_dir, lake, writer) = crate::testing::new_lake(data_files::FileLayout::Indexed).await;
        writer
            .append(
                1,
                [
                    Record::put("a", "a0", 0),
                    Record::put("b", "b1", 1),
                    Record::put("c", "c2", 2),
                ],
            )
            .await
            .unwrap();
        writer.commit(&[(1, 3)]).await.unwrap();

        let _maintenance = lake.lock_maintenance().await;
        let rewrite = lake.rewrite().await.unwrap().unwrap();
        writer
            .append(
                1,
                [
                    Record::put("a", "a3", 3),
                    Record::delete("b", 4),
                    Record::put("d", "d5", 5),
                ],
            )
            .await
            .unwrap();
        writer.commit(&[(1, 5)]).await.unwrap();
        writer.commit(&[(1, 6), (2, 0)]).await.unwrap();
        let sequence = lake.commit_rewrite(rewrite).await.unwrap();

        assert_eq!(
            lake.latest(1).await.unwrap(),
            LakeSnapshot::new(sequence, 6)
        );
        let lookuper = lake.lookuper(1);
        lookuper
            .refresh(LakeSnapshot::new(sequence, 6))
            .await
            .unwrap();
        let keys: Vec<Vec<u8>> = ["a", "b", "c", "d"]
            .iter()
            .map(|k| k.as_bytes().to_vec())
            .collect();
        let want = vec![
            Some(b"a3".to_vec()),
            None,
            Some(b"c2".to_vec()),
            Some(b"d5".to_vec()),
        ];
        assert_eq!(lookuper.lookup_many(&keys).await.unwrap(), want);
        // Only what the compacted snapshot needs survives an expiry to it alone.
        drop(_maintenance);
        lake.expire_snapshots(1).await.unwrap();
        assert_eq!(lookuper.lookup_many(&keys).await.unwrap(), want);
    }
}
