//! [`IcebergLookuper`]: a bucket's point lookups against the lake table at the snapshot it was
//! refreshed to.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{PoisonError, RwLock};

use async_trait::async_trait;
use futures::{StreamExt, TryStreamExt};
use iceberg::expr::{Predicate, Reference};
use iceberg::scan::FileScanTask;
use iceberg::spec::Datum;
use iceberg::table::Table;
use tidemark_bucket::{Error, LakeLookuper, LakeSnapshot, Result};

use crate::error::lake_error;
use crate::key_reads::{self, WantedKeys};
use crate::lake::IcebergLake;
use crate::rows::{self, BUCKET, KEY, Newest};
use crate::snapshots;

/// Point lookups of one bucket's keys in the lake table.
///
/// [`refresh`](LakeLookuper::refresh) takes a [`LakeSnapshot`] whose id is a snapshot's sequence
/// number and whose end is the bucket's end in it; a snapshot the table no longer keeps is an
/// [`Error::Lake`] that says it expired. A lookup reads the files of the served snapshot that may
/// hold the key (Iceberg plans them by their key bounds), and in each only the pages whose key
/// bounds hold it, in the row groups whose bounds and key bloom filter admit it; it answers the
/// newest version: its value, or `None` for a delete or a key never tiered.
/// [`lookup_many`](LakeLookuper::lookup_many) reads all its keys in one pass over the files.
///
/// When a lookup fails (the snapshot's files were removed by a compaction and an expiry), the
/// lookuper moves to the newest live snapshot with the same end for its bucket (a compaction's,
/// or another bucket's commit) and retries once; with none, the lookup fails until the bucket
/// refreshes it to a newer snapshot.
#[derive(Debug)]
pub struct IcebergLookuper {
    lake: IcebergLake,
    bucket: u64,
    served: RwLock<Served>,
    counters: AtomicCounters,
}

/// The served snapshot: the empty lake, or a table handle at one snapshot.
#[derive(Debug, Clone, Default)]
struct Served {
    snapshot: LakeSnapshot,
    /// The table and the Iceberg snapshot id; `None` for the empty lake.
    at: Option<(Table, i64)>,
}

/// What an [`IcebergLookuper`] has done.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LookuperCounters {
    /// Keys looked up successfully.
    pub lookups: u64,
    /// Successful `lookup` and `lookup_many` calls (a batch counts once).
    pub lookup_calls: u64,
    /// Calls that failed (after the retry, if one was made).
    pub lookup_failures: u64,
    /// Times a failed read moved the lookuper to a newer snapshot and retried.
    pub retries: u64,
    /// Successful refreshes.
    pub refreshes: u64,
}

#[derive(Debug, Default)]
struct AtomicCounters {
    lookups: AtomicU64,
    lookup_calls: AtomicU64,
    lookup_failures: AtomicU64,
    retries: AtomicU64,
    refreshes: AtomicU64,
}

impl IcebergLake {
    /// A lookuper for `bucket`'s keys, serving the empty lake until refreshed.
    pub fn lookuper(&self, bucket: u64) -> IcebergLookuper {
        IcebergLookuper {
            lake: self.clone(),
            bucket,
            served: RwLock::new(Served::default()),
            counters: AtomicCounters::default(),
        }
    }
}

impl IcebergLookuper {
    /// The bucket whose keys this lookuper reads.
    pub fn bucket(&self) -> u64 {
        self.bucket
    }

    /// The snapshot served (the empty lake before the first refresh).
    pub fn served(&self) -> LakeSnapshot {
        self.served_now().snapshot
    }

    /// What this lookuper has done so far.
    pub fn counters(&self) -> LookuperCounters {
        let c = &self.counters;
        LookuperCounters {
            lookups: c.lookups.load(Ordering::Relaxed),
            lookup_calls: c.lookup_calls.load(Ordering::Relaxed),
            lookup_failures: c.lookup_failures.load(Ordering::Relaxed),
            retries: c.retries.load(Ordering::Relaxed),
            refreshes: c.refreshes.load(Ordering::Relaxed),
        }
    }

    fn served_now(&self) -> Served {
        // Only a clone and an assignment happen under the lock.
        self.served
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Serves `next` unless a concurrent refresh already moved past it.
    fn serve(&self, next: Served) {
        let mut served = self.served.write().unwrap_or_else(PoisonError::into_inner);
        if next.snapshot.id >= served.snapshot.id {
            *served = next;
        }
    }

    /// The table at the snapshot with sequence number `snapshot.id`, checked against the bucket's
    /// end.
    async fn resolve(&self, snapshot: LakeSnapshot) -> Result<Served> {
        if snapshot.id == 0 {
            if snapshot != LakeSnapshot::default() {
                return Err(Error::lake(format!(
                    "the empty lake (snapshot 0) ends at 0, not {}",
                    snapshot.end_offset
                )));
            }
            return Ok(Served::default());
        }
        let table = self.lake.table().await?;
        let metadata = table.metadata();
        let Some(found) = snapshots::with_sequence(metadata, snapshot.id) else {
            let newest = u64::try_from(metadata.last_sequence_number()).unwrap_or(0);
            return Err(if snapshot.id <= newest {
                Error::lake(format!(
                    "lake snapshot {} has expired (the table no longer keeps it): refresh to a \
                     newer snapshot",
                    snapshot.id
                ))
            } else {
                Error::lake(format!(
                    "unknown lake snapshot {} (the newest is {newest})",
                    snapshot.id
                ))
            });
        };
        let seen = snapshots::for_bucket(&found, self.bucket)?;
        if seen != snapshot {
            return Err(Error::lake(format!(
                "lake snapshot {} ends at {} for bucket {}, not {}",
                snapshot.id, seen.end_offset, self.bucket, snapshot.end_offset
            )));
        }
        let id = found.snapshot_id();
        Ok(Served {
            snapshot,
            at: Some((table, id)),
        })
    }

    /// The newest live snapshot at `from`'s end for this bucket and no older a commit: the same
    /// records, rewritten (a compaction) or committed again with other buckets' progress.
    ///
    /// Never a larger end: the bucket decides which local entries to trust from the end it
    /// refreshed to, and answers from records past it (possibly not applied yet) could be
    /// followed by an older local version once the host applies it.
    async fn successor(&self, from: LakeSnapshot) -> Result<Option<Served>> {
        let table = self.lake.table().await?;
        let mut best: Option<LakeSnapshot> = None;
        for snapshot in snapshots::by_sequence(table.metadata()) {
            let seen = snapshots::for_bucket(&snapshot, self.bucket)?;
            if seen.id >= from.id && seen.end_offset == from.end_offset {
                best = Some(seen);
            }
        }
        match best {
            Some(snapshot) => self.resolve(snapshot).await.map(Some),
            None => Ok(None),
        }
    }

    /// One scan of the served snapshot for `keys`.
    async fn read(&self, served: &Served, keys: &[Vec<u8>]) -> Result<Vec<Option<Vec<u8>>>> {
        let Some((table, snapshot_id)) = &served.at else {
            return Ok(vec![None; keys.len()]);
        };
        // Iceberg plans the files whose key bounds may hold a key; each is read with a
        // set-membership filter of its own.
        let tasks: Vec<FileScanTask> = table
            .scan()
            .snapshot_id(*snapshot_id)
            .with_filter(key_filter(self.bucket, keys))
            .build()
            .map_err(|e| lake_error("cannot plan a lake lookup", e))?
            .plan_files()
            .await
            .map_err(|e| lake_error("cannot plan a lake lookup", e))?
            .try_collect()
            .await
            .map_err(|e| lake_error("cannot plan a lake lookup", e))?;
        let wanted = WantedKeys::new(self.bucket, keys);
        // The files are read concurrently: on an object store each read is a request whose
        // round trip dominates, and a batch's keys are in many files.
        let (file_io, indexes) = (table.file_io(), self.lake.file_indexes());
        let reads: Vec<_> = tasks
            .iter()
            .map(|task| key_reads::versions(file_io, indexes, task, &wanted))
            .collect();
        let per_file: Vec<Vec<crate::rows::Row>> = futures::stream::iter(reads)
            .buffered(FILES_READ_AT_ONCE)
            .try_collect()
            .await?;
        let versions = per_file.into_iter().flatten();
        // The newest version of each key below the served end wins.
        let mut newest = Newest::default();
        for row in versions {
            if row.offset < served.snapshot.end_offset {
                newest.add(row);
            }
        }
        Ok(keys
            .iter()
            .map(|k| newest.get(self.bucket, k).and_then(|row| row.value.clone()))
            .collect())
    }
}

/// Data files a lookup reads at once.
const FILES_READ_AT_ONCE: usize = 8;

/// Batches up to this many keys plan their files key by key; larger ones by their key range.
const KEYS_FILTERED_ONE_BY_ONE: usize = 8;

/// The filter Iceberg plans a lookup's files with: the files of `bucket` whose key bounds may
/// hold one of `keys`. (Each file is then read for exactly these keys, by
/// [`key_reads`](crate::key_reads).)
///
/// A few keys are a disjunction of equalities, not an `IN` list: Iceberg prunes a file for `IN`
/// only when every key is below its lower bound or every key above its upper bound, so keys far
/// apart would plan every file. A larger batch plans by the range from its smallest to its
/// largest key: a disjunction nests one level per key, which Iceberg's predicate visitors
/// recurse through, and a batch spread over the key space spans most files either way. A file
/// the range adds costs its index lookups: its bloom filters rule out the keys it lacks.
fn key_filter(bucket: u64, keys: &[Vec<u8>]) -> Predicate {
    let bucket = Reference::new(BUCKET).equal_to(Datum::long(rows::to_i64(bucket)));
    let key = |k: &Vec<u8>| Reference::new(KEY).equal_to(Datum::binary(k.clone()));
    if keys.len() > KEYS_FILTERED_ONE_BY_ONE
        && let (Some(lowest), Some(highest)) = (keys.iter().min(), keys.iter().max())
    {
        return bucket
            .and(Reference::new(KEY).greater_than_or_equal_to(Datum::binary(lowest.clone())))
            .and(Reference::new(KEY).less_than_or_equal_to(Datum::binary(highest.clone())));
    }
    let any_key = keys.iter().skip(1).fold(keys.first().map(key), |any, k| {
        Some(match any {
            Some(any) => any.or(key(k)),
            None => key(k),
        })
    });
    match any_key {
        Some(any_key) => bucket.and(any_key),
        None => bucket,
    }
}

#[async_trait]
impl LakeLookuper for IcebergLookuper {
    async fn refresh(&self, snapshot: LakeSnapshot) -> Result<()> {
        let next = self.resolve(snapshot).await?;
        // Switch in one step at the end: a dropped or failed refresh serves what it served.
        *self.served.write().unwrap_or_else(PoisonError::into_inner) = next;
        self.counters.refreshes.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    async fn lookup(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let mut values = self.lookup_many(&[key.to_vec()]).await?;
        values
            .pop()
            .ok_or_else(|| Error::Internal("the Iceberg lake answered no key".to_owned()))
    }

    async fn lookup_many(&self, keys: &[Vec<u8>]) -> Result<Vec<Option<Vec<u8>>>> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let served = self.served_now();
        let result = match self.read(&served, keys).await {
            Ok(values) => Ok(values),
            Err(first) => {
                // The served snapshot's files may be gone (compacted and expired): move to a newer
                // snapshot at the same end and retry once.
                match self.successor(served.snapshot).await {
                    Ok(Some(next)) => {
                        self.counters.retries.fetch_add(1, Ordering::Relaxed);
                        let values = self.read(&next, keys).await;
                        if values.is_ok() {
                            self.serve(next);
                        }
                        values
                    }
                    Ok(None) | Err(_) => Err(first),
                }
            }
        };
        let n = u64::try_from(keys.len()).unwrap_or(u64::MAX);
        match &result {
            Ok(_) => {
                self.counters.lookups.fetch_add(n, Ordering::Relaxed);
                self.counters.lookup_calls.fetch_add(1, Ordering::Relaxed);
            }
            Err(_) => {
                self.counters
                    .lookup_failures
                    .fetch_add(1, Ordering::Relaxed);
            }
        }
        result
    }
}

#[cfg(test)]
mod tests {
    use tidemark_engine_api::Record;

    use super::*;
    use crate::data_files::FileLayout;

    /// Files whose key range cannot hold a key are not read: a lookup plans only the files of
    /// the commits that wrote keys in its range.
    #[tokio::test]
    async fn a_lookup_reads_only_the_files_whose_key_bounds_may_hold_it() {
        let (_dir, lake, writer) = crate::testing::new_lake(FileLayout::Indexed).await;
        let mut offset = 0;
        for prefix in ["a", "m", "x"] {
            let records: Vec<Record> = (0..50)
                .map(|i| {
                    offset += 1;
                    Record::put(format!("{prefix}-{i:03}"), "v", offset - 1)
                })
                .collect();
            writer.append(1, records).await.unwrap();
            writer.commit(&[(1, offset)]).await.unwrap();
        }
        let table = lake.table().await.unwrap();
        let planned = |keys: Vec<Vec<u8>>, bucket: u64| {
            let table = table.clone();
            async move {
                crate::testing::planned_files(&table, Some(key_filter(bucket, &keys)))
                    .await
                    .len()
            }
        };
        assert_eq!(planned(vec![b"m-007".to_vec()], 1).await, 1);
        assert_eq!(
            planned(vec![b"a-001".to_vec(), b"x-049".to_vec()], 1).await,
            2
        );
        assert_eq!(planned(vec![b"q".to_vec()], 1).await, 0);
        // A large batch reads by its key range: every file between its lowest and highest key.
        let spread: Vec<Vec<u8>> = (0..10).map(|i| format!("a-{i:03}").into_bytes()).collect();
        assert_eq!(planned(spread.clone(), 1).await, 1);
        let mut wide = spread;
        wide.push(b"x-049".to_vec());
        assert_eq!(planned(wide, 1).await, 3);
        assert_eq!(
            planned(vec![b"m-007".to_vec()], 2).await,
            0,
            "another bucket"
        );
    }
}
