//! [`MemoryLake`]: an in-memory lake table with numbered snapshots built by replaying a WAL, plus
//! a lookuper over it that tests can make fail or stall.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock};

use async_trait::async_trait;

use super::faults::LakeFaults;
use super::{LakeLookuper, LakeSnapshot};
use crate::error::{Error, Result};
use tidemark_engine_api::{Record, WriteBatch};

/// One committed snapshot: the latest value of every live key among the records below its end.
#[derive(Debug, Default)]
struct Snapshot {
    meta: LakeSnapshot,
    rows: BTreeMap<Vec<u8>, Vec<u8>>,
}

#[derive(Debug, Default)]
struct TableState {
    /// Every record the tiering service can read, in offset order.
    wal: Vec<Record>,
    /// Committed snapshots by id; ids start at 1 (0 is the empty lake) and end offsets never
    /// decrease. Only the retained ones: older ones have expired.
    snapshots: BTreeMap<u64, Arc<Snapshot>>,
    /// How many snapshots the table keeps (`None`: every one).
    retain: Option<usize>,
}

impl TableState {
    /// Expires the oldest snapshots beyond the retention; returns the first id still kept.
    fn expire(&mut self, expired_below: &AtomicU64) {
        let Some(retain) = self.retain else {
            return;
        };
        while self.snapshots.len() > retain {
            if let Some((id, _)) = self.snapshots.pop_first() {
                expired_below.fetch_max(id.saturating_add(1), Ordering::SeqCst);
            }
        }
    }
}

/// The lake table shared by every [`MemoryLake`] handle made with [`MemoryLake::reader`].
#[derive(Debug, Default)]
struct Table {
    state: Mutex<TableState>,
    /// Snapshot ids below this have expired (their files are gone); read without the lock by
    /// every lookup.
    expired_below: AtomicU64,
}

impl Table {
    fn lock(&self) -> MutexGuard<'_, TableState> {
        // Nothing panics while the lock is held, so a poisoned state is still consistent.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// [`Error::Lake`] when snapshot `id` has expired (the empty lake, id 0, never does).
    fn check_live(&self, id: u64) -> Result<()> {
        let expired_below = self.expired_below.load(Ordering::SeqCst);
        if id != 0 && id < expired_below {
            return Err(Error::lake(format!(
                "lake snapshot {id} has expired (its files are gone; the oldest snapshot kept is \
                 {expired_below}): refresh to a newer snapshot"
            )));
        }
        Ok(())
    }
}

/// What a [`MemoryLake`] handle has done (successes and failures are counted apart).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LakeCounters {
    /// Successful refreshes.
    pub refreshes: u64,
    /// Failed refreshes (injected or invalid snapshot).
    pub refresh_failures: u64,
    /// Keys looked up successfully.
    pub lookups: u64,
    /// Successful `lookup` and `lookup_many` calls (a batch counts once).
    pub lookup_calls: u64,
    /// Failed lookups (injected, or through an expired snapshot).
    pub lookup_failures: u64,
}

#[derive(Debug, Default)]
struct AtomicLakeCounters {
    refreshes: AtomicU64,
    refresh_failures: AtomicU64,
    lookups: AtomicU64,
    lookup_calls: AtomicU64,
    lookup_failures: AtomicU64,
}

/// The reference [`LakeLookuper`]: a lake table holding a WAL and numbered snapshots, each the
/// key → value state of every record with `offset < end_offset`, and a lookuper that serves the
/// snapshot it was last refreshed to (an empty table before the first refresh).
///
/// Every handle made by [`MemoryLake::reader`] shares the table but has its own served snapshot,
/// fault settings and counters, like a restarted process opening a new lookuper on the same lake.
///
/// Like a real lake table (Paimon and Iceberg expire old snapshots and delete their files), the
/// table can keep only its newest snapshots ([`MemoryLake::retain_snapshots`]); a refresh to an
/// expired snapshot, or a lookup through a lookuper still serving one, fails with
/// [`Error::Lake`]. [`MemoryLake::compact`] commits a new snapshot at the same end offset, as a
/// lake compaction or rewrite does.
///
/// ```
/// use tidemark_bucket::lake::{LakeLookuper, MemoryLake};
/// use tidemark_engine_api::WriteBatch;
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().build()?.block_on(async {
/// let lake = MemoryLake::new();
/// let mut batch = WriteBatch::new();
/// batch.put("k", "v1", 0).put("k", "v2", 1).delete("gone", 2);
/// lake.append_batch(&batch)?;
/// let first = lake.commit(1)?; // only offset 0
/// lake.refresh(first).await?;
/// assert_eq!(lake.lookup(b"k").await?, Some(b"v1".to_vec()));
/// # Ok::<(), tidemark_bucket::Error>(())
/// # })?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Default)]
pub struct MemoryLake {
    table: Arc<Table>,
    served: RwLock<Arc<Snapshot>>,
    refreshed: AtomicBool,
    faults: LakeFaults,
    counters: AtomicLakeCounters,
}

impl MemoryLake {
    /// A new, empty lake table and a lookuper over it.
    pub fn new() -> Self {
        Self::default()
    }

    /// Another lookuper over the same table, serving nothing until refreshed, with no faults.
    pub fn reader(&self) -> MemoryLake {
        MemoryLake {
            table: Arc::clone(&self.table),
            ..MemoryLake::default()
        }
    }

    /// Appends WAL records the lake may later commit. Offsets must not go backwards.
    pub fn append(&self, records: impl IntoIterator<Item = Record>) -> Result<()> {
        let mut state = self.table.lock();
        let mut last = state.wal.last().map(Record::offset);
        let records: Vec<Record> = records.into_iter().collect();
        for record in &records {
            let offset = record.offset();
            if let Some(prev) = last
                && offset < prev
            {
                return Err(Error::invalid(format!(
                    "lake WAL offsets go backwards: {offset} after {prev}"
                )));
            }
            last = Some(offset);
        }
        state.wal.extend(records);
        Ok(())
    }

    /// Appends the records of a batch.
    pub fn append_batch(&self, batch: &WriteBatch) -> Result<()> {
        self.append(batch.records().iter().cloned())
    }

    /// `1 +` the highest offset appended, 0 when the WAL is empty.
    pub fn wal_end(&self) -> u64 {
        wal_end(&self.table.lock().wal)
    }

    /// Commits a new snapshot holding every WAL record with `offset < end_offset`. The end may
    /// not go below the latest snapshot's end nor beyond the WAL end.
    pub fn commit(&self, end_offset: u64) -> Result<LakeSnapshot> {
        let mut state = self.table.lock();
        let end_of_wal = wal_end(&state.wal);
        if end_offset > end_of_wal {
            return Err(Error::invalid(format!(
                "lake snapshot end {end_offset} is beyond the WAL end {end_of_wal}"
            )));
        }
        let base = state
            .snapshots
            .values()
            .next_back()
            .cloned()
            .unwrap_or_default();
        if end_offset < base.meta.end_offset {
            return Err(Error::invalid(format!(
                "lake snapshot end {end_offset} is below the latest snapshot's end {}",
                base.meta.end_offset
            )));
        }
        // Replay only what the previous snapshot did not hold (the WAL is in offset order).
        let from = state
            .wal
            .partition_point(|r| r.offset() < base.meta.end_offset);
        let to = state.wal.partition_point(|r| r.offset() < end_offset);
        let mut rows = base.rows.clone();
        for record in state.wal.get(from..to).unwrap_or_default() {
            match record {
                Record::Put { key, value, .. } => {
                    rows.insert(key.clone(), value.clone());
                }
                Record::Delete { key, .. } => {
                    rows.remove(key);
                }
            }
        }
        let id = base
            .meta
            .id
            .checked_add(1)
            .ok_or_else(|| Error::lake("lake snapshot ids exhausted"))?;
        let meta = LakeSnapshot::new(id, end_offset);
        state
            .snapshots
            .insert(meta.id, Arc::new(Snapshot { meta, rows }));
        state.expire(&self.table.expired_below);
        Ok(meta)
    }

    /// Commits a new snapshot at the latest snapshot's end offset (0 before any commit): the lake
    /// rewrote its files (compaction, a schema change) without taking in new records.
    pub fn compact(&self) -> Result<LakeSnapshot> {
        let end = self.latest().map_or(0, |s| s.end_offset);
        self.commit(end)
    }

    /// Keeps only the newest `newest` snapshots from now on, expiring older ones at once and
    /// after every commit. `newest` must be at least 1.
    pub fn retain_snapshots(&self, newest: usize) -> Result<()> {
        if newest == 0 {
            return Err(Error::invalid(
                "a lake keeps at least its newest snapshot (retain_snapshots(0))",
            ));
        }
        let mut state = self.table.lock();
        state.retain = Some(newest);
        state.expire(&self.table.expired_below);
        Ok(())
    }

    /// The newest committed snapshot.
    pub fn latest(&self) -> Option<LakeSnapshot> {
        self.table
            .lock()
            .snapshots
            .values()
            .next_back()
            .map(|s| s.meta)
    }

    /// The committed snapshot with this id.
    pub fn snapshot(&self, id: u64) -> Option<LakeSnapshot> {
        self.table.lock().snapshots.get(&id).map(|s| s.meta)
    }

    /// Reads `key` straight from committed snapshot `id`, bypassing the lookuper.
    pub fn value_at(&self, id: u64, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.table.check_live(id)?;
        let state = self.table.lock();
        let snapshot = state
            .snapshots
            .get(&id)
            .ok_or_else(|| Error::lake(format!("unknown lake snapshot {id}")))?;
        Ok(snapshot.rows.get(key).cloned())
    }

    /// The snapshot this handle serves, `None` before its first successful refresh.
    pub fn served(&self) -> Option<LakeSnapshot> {
        if !self.refreshed.load(Ordering::SeqCst) {
            return None;
        }
        Some(self.served_snapshot().meta)
    }

    /// What this handle has done so far.
    pub fn counters(&self) -> LakeCounters {
        let c = &self.counters;
        LakeCounters {
            refreshes: c.refreshes.load(Ordering::Relaxed),
            refresh_failures: c.refresh_failures.load(Ordering::Relaxed),
            lookups: c.lookups.load(Ordering::Relaxed),
            lookup_calls: c.lookup_calls.load(Ordering::Relaxed),
            lookup_failures: c.lookup_failures.load(Ordering::Relaxed),
        }
    }

    fn served_snapshot(&self) -> Arc<Snapshot> {
        // Only an `Arc` swap happens under the lock, so a poisoned lock still holds a snapshot.
        Arc::clone(&self.served.read().unwrap_or_else(PoisonError::into_inner))
    }

    async fn try_refresh(&self, snapshot: LakeSnapshot) -> Result<()> {
        self.faults.before_refresh(snapshot.id).await?;
        self.table.check_live(snapshot.id)?;
        let found = if snapshot.id == 0 {
            // The empty lake, before anything was committed.
            Some(Arc::default())
        } else {
            self.table.lock().snapshots.get(&snapshot.id).cloned()
        };
        let found =
            found.ok_or_else(|| Error::lake(format!("unknown lake snapshot {}", snapshot.id)))?;
        if found.meta != snapshot {
            return Err(Error::lake(format!(
                "lake snapshot {} ends at {}, not {}",
                snapshot.id, found.meta.end_offset, snapshot.end_offset
            )));
        }
        *self.served.write().unwrap_or_else(PoisonError::into_inner) = found;
        self.refreshed.store(true, Ordering::SeqCst);
        Ok(())
    }
}

/// Fault and latency injection (cargo feature `testing`): for tests, never for production.
#[cfg(any(test, feature = "testing"))]
impl MemoryLake {
    /// Makes the next `n` refreshes fail (without changing what is served).
    pub fn fail_next_refreshes(&self, n: u64) {
        self.faults.fail_next_refreshes(n);
    }

    /// Makes every refresh fail (`true`) or none (`false`).
    pub fn fail_refreshes(&self, fail: bool) {
        let n = if fail { u64::MAX } else { 0 };
        self.faults.fail_next_refreshes(n);
    }

    /// Makes every lookup fail (`true`) or none (`false`).
    pub fn fail_lookups(&self, fail: bool) {
        self.faults.fail_lookups(fail);
    }

    /// Makes every refresh sleep this long (tokio time) before switching snapshots.
    pub fn set_refresh_delay(&self, delay: std::time::Duration) {
        self.faults.set_refresh_delay(delay);
    }

    /// Makes every lookup sleep this long (tokio time) before reading the served snapshot.
    pub fn set_lookup_delay(&self, delay: std::time::Duration) {
        self.faults.set_lookup_delay(delay);
    }

    /// Holds later refreshes open (before they switch snapshots) until
    /// [`MemoryLake::release_refreshes`].
    pub fn hold_refreshes(&self) {
        self.faults.gate().hold();
    }

    /// Lets held refreshes continue.
    pub fn release_refreshes(&self) {
        self.faults.gate().release();
    }

    /// How many refreshes are held open right now.
    pub fn held_refreshes(&self) -> usize {
        self.faults.gate().waiting()
    }

    /// Waits until at least `n` refreshes are held open.
    pub async fn wait_for_held_refreshes(&self, n: usize) -> Result<()> {
        self.faults.gate().parked(n).await
    }
}

#[async_trait]
impl LakeLookuper for MemoryLake {
    async fn refresh(&self, snapshot: LakeSnapshot) -> Result<()> {
        let result = self.try_refresh(snapshot).await;
        let counter = match result {
            Ok(()) => &self.counters.refreshes,
            Err(_) => &self.counters.refresh_failures,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        result
    }

    async fn lookup(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let mut values = self.lookup_many(&[key.to_vec()]).await?;
        values
            .pop()
            .ok_or_else(|| Error::Internal("memory lake answered no key".to_owned()))
    }

    /// One read of the served snapshot for every key (one injected delay, one failure check);
    /// each key counts as one lookup.
    async fn lookup_many(&self, keys: &[Vec<u8>]) -> Result<Vec<Option<Vec<u8>>>> {
        let n = u64::try_from(keys.len()).unwrap_or(u64::MAX);
        if let Err(e) = self.faults.before_lookup().await {
            self.counters
                .lookup_failures
                .fetch_add(n, Ordering::Relaxed);
            return Err(e);
        }
        let snapshot = self.served_snapshot();
        if let Err(e) = self.table.check_live(snapshot.meta.id) {
            self.counters
                .lookup_failures
                .fetch_add(n, Ordering::Relaxed);
            return Err(e);
        }
        self.counters.lookups.fetch_add(n, Ordering::Relaxed);
        self.counters.lookup_calls.fetch_add(1, Ordering::Relaxed);
        Ok(keys
            .iter()
            .map(|key| snapshot.rows.get(key).cloned())
            .collect())
    }
}

fn wal_end(wal: &[Record]) -> u64 {
    // Offsets are at most `MAX_OFFSET` in validated batches; saturate for anything else.
    wal.last().map_or(0, |r| r.offset().saturating_add(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lake_with(records: &[Record]) -> MemoryLake {
        let lake = MemoryLake::new();
        lake.append(records.iter().cloned()).unwrap();
        lake
    }

    #[tokio::test]
    async fn snapshots_replay_the_wal_up_to_their_end() {
        let lake = lake_with(&[
            Record::put("a", "a0", 0),
            Record::put("b", "b1", 1),
            Record::delete("a", 2),
            Record::put("b", "b3", 3),
        ]);
        let s1 = lake.commit(2).unwrap();
        let s2 = lake.commit(4).unwrap();
        assert_eq!((s1.id, s2.id), (1, 2));
        assert_eq!(lake.value_at(1, b"a").unwrap(), Some(b"a0".to_vec()));
        assert_eq!(lake.value_at(2, b"a").unwrap(), None);
        assert_eq!(lake.value_at(2, b"b").unwrap(), Some(b"b3".to_vec()));

        assert_eq!(lake.served(), None);
        assert_eq!(lake.lookup(b"b").await.unwrap(), None);
        lake.refresh(s1).await.unwrap();
        assert_eq!(lake.lookup(b"b").await.unwrap(), Some(b"b1".to_vec()));
        lake.refresh(s2).await.unwrap();
        assert_eq!(lake.served(), Some(s2));
        assert_eq!(lake.lookup(b"b").await.unwrap(), Some(b"b3".to_vec()));
        assert_eq!(lake.counters().refreshes, 2);
    }

    #[tokio::test]
    async fn invalid_commits_and_refreshes_are_rejected() {
        let lake = lake_with(&[Record::put("a", "a0", 0), Record::put("a", "a1", 5)]);
        assert!(matches!(lake.commit(7), Err(Error::InvalidInput(_))));
        let s = lake.commit(6).unwrap();
        assert!(matches!(lake.commit(3), Err(Error::InvalidInput(_))));
        assert!(matches!(
            lake.append([Record::put("b", "", 4)]),
            Err(Error::InvalidInput(_))
        ));
        assert!(lake.refresh(LakeSnapshot::new(9, 6)).await.is_err());
        assert!(lake.refresh(LakeSnapshot::new(0, 1)).await.is_err());
        assert!(lake.refresh(LakeSnapshot::new(s.id, 5)).await.is_err());
        assert_eq!(lake.served(), None);
        assert_eq!(lake.counters().refresh_failures, 3);
        lake.refresh(LakeSnapshot::default()).await.unwrap();
        assert_eq!(lake.lookup(b"a").await.unwrap(), None);
    }

    #[tokio::test]
    async fn injected_failures_keep_the_served_snapshot() {
        let lake = lake_with(&[Record::put("a", "a0", 0), Record::put("a", "a1", 1)]);
        let s1 = lake.commit(1).unwrap();
        let s2 = lake.commit(2).unwrap();
        lake.refresh(s1).await.unwrap();
        lake.fail_next_refreshes(1);
        assert!(matches!(lake.refresh(s2).await, Err(Error::Lake { .. })));
        assert_eq!(lake.served(), Some(s1));
        lake.refresh(s2).await.unwrap();
        lake.fail_lookups(true);
        assert!(lake.lookup(b"a").await.is_err());
        lake.fail_lookups(false);
        assert_eq!(lake.lookup(b"a").await.unwrap(), Some(b"a1".to_vec()));
    }

    #[tokio::test]
    async fn expired_snapshots_refuse_refreshes_and_lookups() {
        let lake = lake_with(&[Record::put("a", "a0", 0), Record::put("a", "a1", 1)]);
        assert!(matches!(
            lake.retain_snapshots(0),
            Err(Error::InvalidInput(_))
        ));
        let s1 = lake.commit(1).unwrap();
        lake.refresh(s1).await.unwrap();
        lake.retain_snapshots(2).unwrap();
        let s2 = lake.compact().unwrap();
        assert_eq!((s2.id, s2.end_offset), (2, 1));
        assert_eq!(lake.lookup(b"a").await.unwrap(), Some(b"a0".to_vec()));

        // A third snapshot expires the first: the lookuper still serving it fails, clearly.
        let s3 = lake.commit(2).unwrap();
        assert_eq!(lake.snapshot(s1.id), None);
        let err = lake.lookup(b"a").await.unwrap_err();
        assert!(err.to_string().contains("expired"), "{err}");
        assert!(lake.value_at(s1.id, b"a").is_err());
        let err = lake.refresh(s1).await.unwrap_err();
        assert!(err.to_string().contains("expired"), "{err}");
        assert_eq!(lake.served(), Some(s1));
        assert_eq!(lake.counters().lookup_failures, 1);

        // A retained snapshot still serves; compaction keeps the rows.
        lake.refresh(s2).await.unwrap();
        assert_eq!(lake.lookup(b"a").await.unwrap(), Some(b"a0".to_vec()));
        lake.refresh(s3).await.unwrap();
        let s4 = lake.compact().unwrap();
        lake.refresh(s4).await.unwrap();
        assert_eq!(lake.lookup(b"a").await.unwrap(), Some(b"a1".to_vec()));
        assert!(lake.refresh(s2).await.is_err());
        // The empty lake has no files to lose.
        lake.refresh(LakeSnapshot::default()).await.unwrap();
        assert_eq!(lake.lookup(b"a").await.unwrap(), None);
    }

    #[tokio::test]
    async fn readers_share_the_table_but_not_the_served_snapshot() {
        let lake = lake_with(&[Record::put("a", "a0", 0)]);
        let s1 = lake.commit(1).unwrap();
        lake.refresh(s1).await.unwrap();
        let reader = lake.reader();
        assert_eq!(reader.latest(), Some(s1));
        assert_eq!(reader.served(), None);
        assert_eq!(reader.lookup(b"a").await.unwrap(), None);
    }

    #[tokio::test]
    async fn a_held_refresh_serves_the_old_snapshot_until_released() {
        let lake = Arc::new(lake_with(&[
            Record::put("a", "a0", 0),
            Record::put("a", "a1", 1),
        ]));
        let s1 = lake.commit(1).unwrap();
        let s2 = lake.commit(2).unwrap();
        lake.refresh(s1).await.unwrap();
        lake.hold_refreshes();
        let task = tokio::spawn({
            let lake = Arc::clone(&lake);
            async move { lake.refresh(s2).await }
        });
        lake.wait_for_held_refreshes(1).await.unwrap();
        assert_eq!(lake.lookup(b"a").await.unwrap(), Some(b"a0".to_vec()));
        lake.release_refreshes();
        task.await.unwrap().unwrap();
        assert_eq!(lake.held_refreshes(), 0);
        assert_eq!(lake.lookup(b"a").await.unwrap(), Some(b"a1".to_vec()));
    }
}
