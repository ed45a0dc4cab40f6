//! The layer over a small in-memory storage whose "files" outlive its instances (a map per
//! directory, held by the context) and which, like a file lock, refuses a second instance of
//! one directory: the bound is counted exactly.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tidemark_engine_api::covered::MetaRow;
use tidemark_engine_api::{
    Engine, EngineOptions, Error, LocalLookup, ReclaimCost, Result, Verifier, WriteBatch, codec,
};

use super::checks::{self, Released};
use super::{OpenStores, Releasable};
use crate::budget::{BucketBudget, BucketLease, ResourceBounds};
use crate::context::BackendContext;
use crate::meta::{MetaKey, encode_u64};
use crate::storage::{
    CommitRequest, LiveEntries, ReadStored, ReclaimRequest, ReclaimWork, Storage, StorageInit,
};

const BACKEND: &str = "mock";

#[derive(Debug, Clone, Default)]
struct MockOptions {
    max_open_stores: usize,
}

#[derive(Default)]
struct Disk {
    data: BTreeMap<Vec<u8>, Vec<u8>>,
    meta: BTreeMap<String, Vec<u8>>,
    open: bool,
}

struct MockInner {
    options: MockOptions,
    budget: BucketBudget,
    stores: OpenStores,
    disks: Mutex<HashMap<PathBuf, Arc<Mutex<Disk>>>>,
    open_now: AtomicUsize,
    most_open: AtomicUsize,
}

#[derive(Clone)]
struct MockContext(Arc<MockInner>);

impl std::fmt::Debug for MockContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MockContext")
    }
}

impl MockContext {
    fn with_bound(max_open_stores: usize) -> Self {
        Self::new(MockOptions { max_open_stores }).unwrap()
    }

    fn most_open(&self) -> usize {
        self.0.most_open.load(Ordering::Acquire)
    }
}

impl BackendContext for MockContext {
    type Options = MockOptions;

    fn new(options: MockOptions) -> Result<Self> {
        Ok(MockContext(Arc::new(MockInner {
            budget: BucketBudget::new(BACKEND, 1000, 0),
            stores: OpenStores::new(BACKEND, options.max_open_stores, 1),
            options,
            disks: Mutex::new(HashMap::new()),
            open_now: AtomicUsize::new(0),
            most_open: AtomicUsize::new(0),
        })))
    }

    fn for_buckets(_: usize) -> Result<Self> {
        Ok(Self::with_bound(2))
    }

    fn settings(&self) -> &MockOptions {
        &self.0.options
    }

    fn budget(&self) -> &BucketBudget {
        &self.0.budget
    }

    fn bounds(&self, _: usize) -> ResourceBounds {
        ResourceBounds {
            threads: 0,
            fds: 0,
            fds_reserved: 0,
            memory_bytes: 0,
        }
    }

    fn open_stores(&self) -> Option<&OpenStores> {
        Some(&self.0.stores)
    }
}

struct MockStorage {
    disk: Arc<Mutex<Disk>>,
    context: MockContext,
    failed: AtomicBool,
    busy: AtomicBool,
    rebuilds: AtomicU64,
    _lease: BucketLease,
}

impl Drop for MockStorage {
    fn drop(&mut self) {
        self.disk.lock().unwrap().open = false;
        self.context.0.open_now.fetch_sub(1, Ordering::AcqRel);
    }
}

impl MockStorage {
    fn disk(&self) -> std::sync::MutexGuard<'_, Disk> {
        self.disk.lock().unwrap()
    }
}

impl Releasable for MockStorage {
    fn background_work_pending(&self) -> bool {
        self.busy.load(Ordering::Acquire)
    }
}

impl Storage for MockStorage {
    const BACKEND: &'static str = BACKEND;
    const RECLAIM_COST: ReclaimCost = ReclaimCost::Proportional;
    type Context = MockContext;

    fn open(context: &MockContext, init: StorageInit<'_>, lease: BucketLease) -> Result<Self> {
        let disk = Arc::clone(
            context
                .0
                .disks
                .lock()
                .unwrap()
                .entry(init.dir.to_path_buf())
                .or_default(),
        );
        {
            let mut disk = disk.lock().unwrap();
            if disk.open {
                return Err(Error::backend(BACKEND, "already open (its lock is held)"));
            }
            disk.open = true;
        }
        let now = context.0.open_now.fetch_add(1, Ordering::AcqRel) + 1;
        context.0.most_open.fetch_max(now, Ordering::AcqRel);
        Ok(MockStorage {
            disk,
            context: context.clone(),
            failed: AtomicBool::new(false),
            busy: AtomicBool::new(false),
            rebuilds: AtomicU64::new(0),
            _lease: lease,
        })
    }

    fn read_meta(&self, key: MetaKey) -> Result<Option<Vec<u8>>> {
        Ok(self.disk().meta.get(key.name()).cloned())
    }

    fn persist_meta(&self, key: MetaKey, value: u64) -> Result<()> {
        self.check_usable()?;
        let bytes = encode_u64(value).to_vec();
        self.disk().meta.insert(key.name().to_owned(), bytes);
        Ok(())
    }

    fn holds_data(&self) -> Result<bool> {
        Ok(!self.disk().data.is_empty())
    }

    fn read_meta_rows(&self, prefix: &str) -> Result<Vec<(String, Vec<u8>)>> {
        Ok(self
            .disk()
            .meta
            .iter()
            .filter(|(name, _)| name.starts_with(prefix))
            .map(|(name, value)| (name.clone(), value.clone()))
            .collect())
    }

    fn write_meta_rows(&self, rows: &[MetaRow]) -> Result<()> {
        let mut disk = self.disk();
        for row in rows {
            match &row.value {
                Some(value) => disk.meta.insert(row.name.clone(), value.clone()),
                None => disk.meta.remove(&row.name),
            };
        }
        Ok(())
    }

    fn commit(&self, commit: CommitRequest<'_>) -> Result<()> {
        let mut disk = self.disk();
        for record in commit.writes {
            disk.data
                .insert(record.key().to_vec(), record.encoded_value());
        }
        let end = encode_u64(commit.applied_end).to_vec();
        disk.meta.insert(MetaKey::AppliedEnd.name().to_owned(), end);
        drop(disk);
        self.write_meta_rows(commit.rows)
    }

    fn get<T>(&self, key: &[u8], read: impl ReadStored<T>) -> Result<T> {
        let stored = self.disk().data.get(key).cloned();
        read(stored.as_deref())
    }

    fn get_inline<T>(&self, key: &[u8], read: impl ReadStored<T>) -> Result<Option<T>> {
        self.get(key, read).map(Some)
    }

    fn reclaim(&self, request: ReclaimRequest<'_>) -> Result<ReclaimWork> {
        let mut work = ReclaimWork::default();
        self.disk().data.retain(|key, stored| {
            let Ok(decoded) = codec::decode(key, stored) else {
                work.corrupt_kept += 1;
                return true;
            };
            if decoded.offset() >= request.threshold {
                return true;
            }
            if decoded.is_tombstone() {
                work.tombstones_removed += 1;
            } else {
                work.values_removed += 1;
            }
            false
        });
        self.rebuilds.fetch_add(1, Ordering::AcqRel);
        Ok(work)
    }

    fn bytes_on_disk(&self) -> Result<u64> {
        Ok(self
            .disk()
            .data
            .iter()
            .map(|(k, v)| (k.len() + v.len()) as u64)
            .sum())
    }

    fn live_entries(&self) -> Result<LiveEntries> {
        Ok(LiveEntries {
            count: self.disk().data.len() as u64,
            exact: true,
        })
    }

    fn flush(&self) -> Result<()> {
        self.check_usable()
    }

    fn verify(&self, _: &mut Verifier) -> Result<()> {
        Ok(())
    }

    fn check_usable(&self) -> Result<()> {
        if self.failed.load(Ordering::Acquire) {
            return Err(Error::store_failed(PathBuf::from("mock"), None));
        }
        Ok(())
    }

    fn space_rebuilds(&self) -> u64 {
        self.rebuilds.load(Ordering::Acquire)
    }
}

type Mock = Released<MockStorage>;

fn open_all(context: &MockContext, root: &Path, n: usize) -> Vec<Mock> {
    (0..n)
        .map(|i| {
            Mock::open_in(
                context,
                &root.join(format!("b{i}")),
                EngineOptions::default(),
            )
            .unwrap()
        })
        .collect()
}

fn put(engine: &Mock, key: &str, offset: u64) {
    let mut batch = WriteBatch::new();
    batch.put(key, "v", offset);
    engine.apply(&batch).unwrap();
}

#[test]
fn five_buckets_under_a_bound_of_two_keep_everything() {
    let root = tempfile::tempdir().unwrap();
    let context = MockContext::with_bound(2);
    checks::round_trip::<MockStorage>(&context, root.path(), 5);
    assert_eq!(
        context.most_open(),
        2,
        "the bound was exceeded or never reached"
    );
}

#[test]
fn readers_and_writers_on_more_buckets_than_the_bound() {
    let root = tempfile::tempdir().unwrap();
    let context = MockContext::with_bound(2);
    checks::concurrent::<MockStorage>(&context, root.path(), 6, 200);
    assert!(
        context.most_open() <= 2,
        "{} open at once",
        context.most_open()
    );
}

#[test]
fn a_store_in_use_or_with_background_work_is_not_released() {
    let root = tempfile::tempdir().unwrap();
    let context = MockContext::with_bound(2);
    let engines = open_all(&context, root.path(), 4);
    let held = engines[0].storage().inner().unwrap();
    engines[1]
        .storage()
        .inner()
        .unwrap()
        .busy
        .store(true, Ordering::Release);
    for (i, engine) in engines.iter().enumerate().skip(2) {
        // Both open stores are unavailable: this call waits for one...
        let freed = std::thread::scope(|scope| {
            let waiting = scope.spawn(|| put(engine, "k", 0));
            std::thread::sleep(Duration::from_millis(50));
            assert!(!waiting.is_finished(), "bucket {i} opened beyond the bound");
            // ...until bucket 1's background work is over.
            engines[1]
                .storage()
                .inner()
                .unwrap()
                .busy
                .store(false, Ordering::Release);
            waiting.join().unwrap();
            !engines[1].storage().is_open()
        });
        assert!(freed, "the idle store made room");
        assert!(
            engines[0].storage().is_open(),
            "a store in use was released"
        );
        assert!(context.most_open() <= 2);
        if i == 2 {
            // Bucket 1 back, busy again, for bucket 3's turn.
            engines[1]
                .storage()
                .inner()
                .unwrap()
                .busy
                .store(true, Ordering::Release);
        }
    }
    drop(held);
}

#[test]
fn a_failed_store_stays_failed_after_its_release() {
    let root = tempfile::tempdir().unwrap();
    let context = MockContext::with_bound(1);
    let engines = open_all(&context, root.path(), 2);
    put(&engines[0], "k", 0);
    engines[0]
        .storage()
        .inner()
        .unwrap()
        .failed
        .store(true, Ordering::Release);
    put(&engines[1], "k", 0);
    assert!(!engines[0].storage().is_open(), "released");
    assert!(
        engines[0].is_failed(),
        "a release laundered the failed store"
    );
    let mut batch = WriteBatch::new();
    batch.put("k2", "v", 1);
    let err = engines[0].apply(&batch).unwrap_err();
    assert!(matches!(err, Error::StoreFailed { .. }), "{err}");
    assert!(engines[0].advance_watermark(1).is_err());
    // Reads go on (reopening it), and it stays failed.
    assert_eq!(
        engines[0].lookup(b"k").unwrap(),
        LocalLookup::Value {
            offset: 0,
            bytes: b"v".to_vec()
        }
    );
    assert!(engines[0].is_failed());
    // A reopen of the engine restores a working store.
    let mut engines = engines;
    drop(engines.remove(0));
    let engine =
        Mock::open_in(&context, &root.path().join("b0"), EngineOptions::default()).unwrap();
    engine.apply(&batch).unwrap();
}

#[test]
fn space_rebuilds_add_up_across_releases() {
    let root = tempfile::tempdir().unwrap();
    let context = MockContext::with_bound(1);
    let engines = open_all(&context, root.path(), 2);
    for round in 0..5u64 {
        put(&engines[0], &format!("k{round}"), round);
        engines[0].reclaim().unwrap();
        assert_eq!(
            engines[0].stats().unwrap().counters.space_rebuilds,
            round + 1
        );
        put(&engines[1], &format!("k{round}"), round);
        assert!(!engines[0].storage().is_open());
        assert_eq!(
            engines[0].stats().unwrap().counters.space_rebuilds,
            round + 1
        );
    }
    // Once when bucket 1 opened, then once a round.
    assert_eq!(engines[0].storage().releases(), 6);
}

#[test]
fn a_store_rolled_back_while_released_is_refused() {
    let root = tempfile::tempdir().unwrap();
    let context = MockContext::with_bound(1);
    let engines = open_all(&context, root.path(), 2);
    put(&engines[0], "k", 0);
    put(&engines[0], "k", 1);
    put(&engines[1], "k", 0);
    assert!(!engines[0].storage().is_open());
    // Its "files" replaced by an older copy behind its back.
    let disk = Arc::clone(&context.0.disks.lock().unwrap()[&root.path().join("b0")]);
    disk.lock().unwrap().meta.insert(
        MetaKey::AppliedEnd.name().to_owned(),
        encode_u64(1).to_vec(),
    );
    let err = engines[0].lookup(b"k").unwrap_err();
    assert!(matches!(err, Error::RolledBack { .. }), "{err}");
    assert!(!engines[0].storage().is_open());
}

/// A place given back between a full bound's refusal and the caller's next look is a reason to
/// try again, never an error: threads that each go round all the buckets, under a bound of
/// one, take the one place from each other thousands of times and no call fails.
#[test]
fn callers_contending_for_one_place_wait_for_it_and_never_fail() {
    const THREADS: usize = 4;
    const BUCKETS: usize = 8;
    const CALLS: usize = 1_000;
    let root = tempfile::tempdir().unwrap();
    let context = MockContext::with_bound(1);
    let engines = open_all(&context, root.path(), BUCKETS);
    for engine in &engines {
        put(engine, "k", 0);
    }
    std::thread::scope(|scope| {
        for t in 0..THREADS {
            let engines = &engines;
            scope.spawn(move || {
                for n in 0..CALLS {
                    let engine = &engines[(t * 3 + n) % BUCKETS];
                    let found = engine.lookup(b"k").unwrap();
                    assert!(matches!(found, LocalLookup::Value { offset: 0, .. }));
                }
            });
        }
    });
    let stores = context.open_stores().unwrap();
    assert!(
        stores.releases() >= CALLS as u64,
        "the buckets hardly contended: {} releases",
        stores.releases()
    );
    assert_eq!(context.most_open(), 1);
}
