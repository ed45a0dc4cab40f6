//! [`TieringWriter`]: takes buckets' WAL records and commits them to the lake table, one
//! snapshot per commit, recording every bucket's exclusive end offset in the snapshot.

use std::collections::{BTreeMap, HashMap};

use iceberg::transaction::{ApplyTransactionAction, Transaction};
use tidemark_bucket::{Error, LakeSnapshot, Result};
use tidemark_engine_api::Record;

use crate::data_files;
use crate::error::lake_error;
use crate::lake::IcebergLake;
use crate::offsets::{BucketEnds, OFFSETS_PROPERTY};
use crate::retry;
use crate::rows::Row;
use crate::snapshots;

/// Writes buckets' WAL records into the lake table.
///
/// Records are [`append`](TieringWriter::append)ed as the log produces them and
/// [`commit`](TieringWriter::commit)ted up to an end offset per bucket: every appended record
/// below the end becomes a row of one new Parquet data file (sorted by bucket, key and offset)
/// and one snapshot records the new ends. A commit that fails changes nothing: the table keeps
/// its last snapshot and the records stay appended for the next try.
///
/// The writer learns each bucket's committed end from the table when it opens, so after a
/// restart the log is replayed from there; appended records below it are already in the table
/// and are skipped.
#[derive(Debug)]
pub struct TieringWriter {
    lake: IcebergLake,
    /// Held only to read or change the state, never across a commit's I/O, so appends go on
    /// while a commit writes.
    state: tokio::sync::Mutex<State>,
    /// Commits, one at a time (the committed ends change only under it).
    commits: tokio::sync::Mutex<()>,
}

#[derive(Debug, Default)]
struct State {
    /// Each bucket's end in the table's current snapshot.
    committed: BucketEnds,
    /// Appended records not yet committed, per bucket, in offset order.
    pending: BTreeMap<u64, Vec<Record>>,
}

/// What a commit made: one snapshot, seen by each bucket as its own [`LakeSnapshot`].
#[derive(Debug, Clone)]
pub struct LakeCommit {
    sequence: u64,
    ends: BucketEnds,
    rows: usize,
}

impl LakeCommit {
    /// The snapshot as `bucket` sees it (its end is 0 if the bucket was never tiered).
    pub fn snapshot(&self, bucket: u64) -> LakeSnapshot {
        LakeSnapshot::new(self.sequence, self.ends.get(bucket))
    }

    /// The snapshot's sequence number (a [`LakeSnapshot`]'s id).
    pub fn sequence_number(&self) -> u64 {
        self.sequence
    }

    /// Rows the commit wrote (one per record).
    pub fn rows(&self) -> usize {
        self.rows
    }
}

impl IcebergLake {
    /// The tiering writer, which knows every bucket's committed end from the table.
    pub async fn tiering_writer(&self) -> Result<TieringWriter> {
        let table = self.table().await?;
        let committed = snapshots::current_ends(table.metadata())?;
        Ok(TieringWriter {
            lake: self.clone(),
            state: tokio::sync::Mutex::new(State {
                committed,
                pending: BTreeMap::new(),
            }),
            commits: tokio::sync::Mutex::new(()),
        })
    }
}

impl TieringWriter {
    /// `bucket`'s exclusive end offset in the table: every record below it is committed.
    pub async fn committed_end(&self, bucket: u64) -> u64 {
        self.state.lock().await.committed.get(bucket)
    }

    /// Appends `bucket`'s WAL records, in offset order. Records below the bucket's committed end
    /// are skipped (a replay after a restart); an offset below one appended before is refused.
    pub async fn append(
        &self,
        bucket: u64,
        records: impl IntoIterator<Item = Record>,
    ) -> Result<()> {
        check_bucket(bucket)?;
        let mut state = self.state.lock().await;
        let committed = state.committed.get(bucket);
        let pending = state.pending.entry(bucket).or_default();
        let mut last = pending.last().map(Record::offset);
        let mut accepted = Vec::new();
        for record in records {
            let offset = record.offset();
            if offset < committed {
                continue;
            }
            if let Some(prev) = last
                && offset < prev
            {
                return Err(Error::invalid(format!(
                    "bucket {bucket}'s WAL offsets go backwards: {offset} after {prev}"
                )));
            }
            last = Some(offset);
            accepted.push(record);
        }
        pending.extend(accepted);
        Ok(())
    }

    /// Commits, for every `(bucket, end)`, the bucket's appended records below `end` as one
    /// snapshot recording the new ends (other buckets keep theirs). An end may not go below the
    /// bucket's committed end; it may go beyond the records appended (offsets the log skipped).
    pub async fn commit(&self, ends: &[(u64, u64)]) -> Result<LakeCommit> {
        let _commit = self.commits.lock().await;
        let (known, rows) = self.plan(ends).await?;
        let n = rows.len();
        // Written once, before any attempt (and outside the write lock): every attempt
        // commits the same files.
        let files = if rows.is_empty() {
            Vec::new()
        } else {
            let table = self.lake.table().await?;
            data_files::write(&table, &rows, "tier", self.lake.layout()).await?
        };
        let mut attempt = 0;
        let (sequence, new_ends) = loop {
            if attempt > 0 {
                retry::pause(attempt).await;
            }
            attempt += 1;
            let writes = self.lake.lock_writes().await?;
            let tried = self.try_commit(ends, &known, &files).await;
            writes.release().await;
            match tried? {
                Some(done) => break done,
                None if attempt < retry::MAX_ATTEMPTS => continue,
                None => return Err(retry::gave_up("a tiering commit")),
            }
        };

        // Committed: drop what the table now holds.
        let mut state = self.state.lock().await;
        for &(bucket, end) in ends {
            if let Some(pending) = state.pending.get_mut(&bucket) {
                let done = pending.partition_point(|r| r.offset() < end);
                pending.drain(..done);
            }
        }
        state.committed = new_ends.clone();
        Ok(LakeCommit {
            sequence,
            ends: new_ends,
            rows: n,
        })
    }

    /// One attempt of [`Self::commit`] over the table as it is now, committing `files`: the
    /// new snapshot's sequence number and ends, or `None` when another writer committed first
    /// (nothing changed). The caller holds the write lock.
    async fn try_commit(
        &self,
        ends: &[(u64, u64)],
        known: &BucketEnds,
        files: &[iceberg::spec::DataFile],
    ) -> Result<Option<(u64, BucketEnds)>> {
        let table = self.lake.table().await?;
        // Other writers' buckets keep the ends the table has; this writer's buckets must still
        // be where this writer left them.
        let mut new_ends = snapshots::current_ends(table.metadata())?;
        for &(bucket, end) in ends {
            let at = new_ends.get(bucket);
            if at != known.get(bucket) {
                return Err(Error::lake(format!(
                    "bucket {bucket}'s lake end is {at}, not the {} this writer committed: \
                     another writer commits it too (each bucket has one tiering writer); \
                     reopen the tiering writer",
                    known.get(bucket)
                )));
            }
            new_ends.set(bucket, end);
        }
        let properties = HashMap::from([(OFFSETS_PROPERTY.to_owned(), new_ends.encode())]);
        let tx = Transaction::new(&table);
        let append = tx
            .fast_append()
            .add_data_files(files.to_vec())
            .set_snapshot_properties(properties);
        let committed = append
            .apply(tx)
            .map_err(|e| lake_error("cannot stage the lake commit", e))?
            .commit(&self.lake.catalog().pinned(&table))
            .await;
        match committed {
            Ok(committed) => {
                let sequence = committed
                    .metadata()
                    .current_snapshot()
                    .map(snapshots::sequence)
                    .ok_or_else(|| Error::lake("the lake commit left no current snapshot"))?;
                Ok(Some((sequence, new_ends)))
            }
            Err(e) if retry::lost(&e) => Ok(None),
            Err(e) => Err(lake_error("the lake commit failed", e)),
        }
    }

    /// What a commit of `ends` writes: the committed ends this writer knows, and the rows,
    /// sorted by (bucket, key, offset).
    async fn plan(&self, ends: &[(u64, u64)]) -> Result<(BucketEnds, Vec<Row>)> {
        let state = self.state.lock().await;
        let mut named = std::collections::HashSet::new();
        // Keyed by (bucket, key, offset): sorted as data files are written, and a record that
        // repeats an offset for its key replaces the one before it, as it does in the engine.
        let mut rows = BTreeMap::new();
        for &(bucket, end) in ends {
            check_bucket(bucket)?;
            let committed = state.committed.get(bucket);
            if end < committed {
                return Err(Error::invalid(format!(
                    "bucket {bucket}'s lake end {end} is below its committed end {committed}"
                )));
            }
            if !named.insert(bucket) {
                return Err(Error::invalid(format!(
                    "bucket {bucket} is named twice in one lake commit"
                )));
            }
            let pending = state.pending.get(&bucket).map_or(&[][..], Vec::as_slice);
            for record in pending.iter().take_while(|r| r.offset() < end) {
                let row = Row::from_record(bucket, record);
                rows.insert((bucket, row.key.clone(), row.offset), row);
            }
        }
        Ok((state.committed.clone(), rows.into_values().collect()))
    }
}

/// Bucket ids are `long` in the table.
fn check_bucket(bucket: u64) -> Result<()> {
    if i64::try_from(bucket).is_err() {
        return Err(Error::invalid(format!(
            "bucket id {bucket} does not fit the lake table's `long` bucket column"
        )));
    }
    Ok(())
}
