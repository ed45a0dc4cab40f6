//! What every bucket scenario shares: a generated WAL with its model answers, a store directory
//! that can be reopened, a runtime, and the checks.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tempfile::TempDir;
use tidemark_bucket::Error;
use tidemark_bucket::lake::{LakeSnapshot, MemoryLake};
use tidemark_bucket::{BucketId, ReclaimScheduler, SchedulerConfig};
use tidemark_bucket::{HistoricalBucket, Progress};
use tidemark_engine_api::{EngineOptions, Record, WriteBatch};

use super::lakes::TestLake;
use crate::EngineFactory;

/// The bucket type a scenario drives (any factory: the bucket holds an `EngineHandle`).
pub type Bucket = HistoricalBucket;

/// The workload generator every scenario uses, so every backend sees the same workload.
pub use tidemark_test_support::rng::SplitMix64 as Rng;

/// The key with index `i`.
pub fn key(i: u64) -> Vec<u8> {
    format!("key-{i:03}").into_bytes()
}

/// A key no record ever writes.
pub const ABSENT: &[u8] = b"never-written";

/// Per key, every write in offset order: `(offset, value)`, `None` for a delete.
type History = BTreeMap<Vec<u8>, Vec<(u64, Option<Vec<u8>>)>>;

/// A write-ahead log with consecutive offsets from 0, and the model: per key, the history of
/// `(offset, value)` with `None` for a delete.
#[derive(Debug, Clone)]
pub struct Wal {
    records: Vec<Record>,
    history: History,
}

impl Wal {
    /// `len` records over `keys` keys: the first `cold` keys are written once at the start
    /// (so they end up in the lake only), the rest are rewritten and deleted at random.
    pub fn generate(seed: u64, len: u64, keys: u64, cold: u64) -> Self {
        let mut rng = Rng::new(seed);
        let records = (0..len)
            .map(|offset| {
                let k = if offset < cold {
                    key(offset)
                } else {
                    key(cold + rng.below(keys - cold))
                };
                if offset >= cold && rng.below(6) == 0 {
                    Record::delete(k, offset)
                } else {
                    let mut value = k.clone();
                    value.extend_from_slice(format!("@{offset}").as_bytes());
                    Record::put(k, value, offset)
                }
            })
            .collect();
        Self::from_records(records)
    }

    /// A WAL of hand-written records (offsets must be consecutive from 0).
    pub fn from_records(records: Vec<Record>) -> Self {
        let mut history = History::new();
        for (i, record) in records.iter().enumerate() {
            assert_eq!(record.offset(), i as u64, "WAL offsets must be consecutive");
            let value = match record {
                Record::Put { value, .. } => Some(value.clone()),
                Record::Delete { .. } => None,
            };
            history
                .entry(record.key().to_vec())
                .or_default()
                .push((record.offset(), value));
        }
        Wal { records, history }
    }

    /// Number of records (the WAL end).
    pub fn len(&self) -> u64 {
        self.records.len() as u64
    }

    /// Whether the WAL is empty.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// Every key written, plus [`ABSENT`].
    pub fn keys(&self) -> Vec<Vec<u8>> {
        let mut keys: Vec<Vec<u8>> = self.history.keys().cloned().collect();
        keys.push(ABSENT.to_vec());
        keys
    }

    /// The records with offsets in `from..to`.
    pub fn records(&self, from: u64, to: u64) -> &[Record] {
        let to = to.min(self.len());
        &self.records[from.min(to) as usize..to as usize]
    }

    /// The records with offsets in `from..to`, cut into batches of 1 to 8 records.
    pub fn batches(&self, from: u64, to: u64) -> Vec<WriteBatch> {
        let mut rng = Rng::new(from ^ (to << 20));
        let mut out = Vec::new();
        let mut rest = self.records(from, to);
        while !rest.is_empty() {
            let n = (1 + rng.below(8) as usize).min(rest.len());
            let (head, tail) = rest.split_at(n);
            out.push(head.iter().cloned().collect());
            rest = tail;
        }
        out
    }

    /// The model's answer for `key` after the records below `end`: the latest value, or `None`
    /// when the latest record is a delete or there is none.
    pub fn answer_at(&self, key: &[u8], end: u64) -> Option<Vec<u8>> {
        self.history
            .get(key)?
            .iter()
            .rev()
            .find(|(offset, _)| *offset < end)
            .and_then(|(_, v)| v.clone())
    }

    /// Every answer the model gives for `key` at some end in `lo..=hi`.
    pub fn answers_between(&self, key: &[u8], lo: u64, hi: u64) -> Vec<Option<Vec<u8>>> {
        let mut answers = vec![self.answer_at(key, lo)];
        if let Some(history) = self.history.get(key) {
            answers.extend(
                history
                    .iter()
                    .filter(|(offset, _)| *offset >= lo && *offset < hi)
                    .map(|(_, v)| v.clone()),
            );
        }
        answers
    }

    /// The newest offset below `end` that wrote `key`.
    pub fn last_write_below(&self, key: &[u8], end: u64) -> Option<u64> {
        self.history
            .get(key)?
            .iter()
            .rev()
            .map(|(offset, _)| *offset)
            .find(|offset| *offset < end)
    }
}

/// A store directory for one scenario, reopenable by backends that persist.
pub struct Site<F: EngineFactory> {
    factory: F,
    options: EngineOptions,
    path: PathBuf,
    // Dropped last, after every engine has closed its files.
    _tmp: TempDir,
}

impl<F: EngineFactory> Site<F> {
    /// A fresh directory (not created yet: opening creates it). Writes are not synced: the
    /// scenarios close engines cleanly, and the watermark is durable either way.
    pub fn new(factory: F) -> Self {
        Self::with_retention_distance(factory, 0)
    }

    /// Like [`new`](Self::new), with retention distance `distance` for every open.
    pub fn with_retention_distance(factory: F, distance: u64) -> Self {
        let tmp = tempfile::Builder::new()
            .prefix(&format!("tidemark-bucket-{}-", F::NAME))
            .tempdir()
            .expect("create temporary directory");
        Site {
            factory,
            options: EngineOptions::default()
                .with_sync_writes(false)
                .with_retention_distance(distance),
            path: tmp.path().join("bucket"),
            _tmp: tmp,
        }
    }

    /// The factory the site opens engines with.
    pub fn factory(&self) -> &F {
        &self.factory
    }

    /// Opens (or reopens) the engine in the directory.
    pub fn open(&self) -> Arc<F::Engine> {
        let engine = self
            .factory
            .open(&self.path, self.options.clone())
            .unwrap_or_else(|e| panic!("{}: open {}: {e}", F::NAME, self.path.display()));
        Arc::new(engine)
    }
}

/// A multi-threaded runtime for one scenario (the stamped tests are plain `#[test]`s).
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("build tokio runtime")
}

/// A single-threaded runtime whose clock is paused: when every task waits, tokio jumps to the
/// next timer, so a scenario can let a lake call hang until its timeout fires without sleeping
/// for real and without depending on how fast the machine is.
pub fn paused_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .expect("build paused tokio runtime")
}

/// A scheduler that reclaims eagerly, for scenarios that let it run. Call inside the runtime.
pub fn scheduler() -> ReclaimScheduler {
    let config = SchedulerConfig::default()
        .with_min_interval(Duration::from_millis(2))
        .with_max_concurrent(2)
        .with_min_reclaimable(1)
        .with_retry_backoff(Duration::from_millis(1), Duration::from_millis(20));
    ReclaimScheduler::new(config).expect("inside a runtime")
}

/// The id every scenario's bucket has in its scheduler.
pub const BUCKET: BucketId = BucketId(7);

/// Applies every record in `from..to`, batch by batch, also appending them to the lake's WAL
/// first (the host commits a record to its WAL before applying it).
pub async fn write<F: EngineFactory>(
    bucket: &Bucket,
    lake: &impl TestLake,
    wal: &Wal,
    from: u64,
    to: u64,
) {
    for batch in wal.batches(from, to) {
        lake.append(batch.records()).await;
        bucket.apply(batch).await.unwrap();
    }
}

/// Writes the whole WAL (as [`write()`]), tells the bucket of a lake snapshot ending at `confirmed`
/// and reclaims what it covers: where most scenarios stand before their first check. Returns
/// the snapshot.
pub async fn write_all_and_reclaim<F: EngineFactory>(
    bucket: &Bucket,
    lake: &impl TestLake,
    wal: &Wal,
    confirmed: u64,
) -> LakeSnapshot {
    write::<F>(bucket, lake, wal, 0, wal.len()).await;
    let snapshot = progress::<F>(bucket, lake, confirmed).await;
    reclaim::<F>(bucket).await;
    snapshot
}

/// Applies `from..to` to the bucket only (a replay: the lake already has these records).
pub async fn replay<F: EngineFactory>(bucket: &Bucket, wal: &Wal, from: u64, to: u64) {
    for batch in wal.batches(from, to) {
        bucket.apply(batch).await.unwrap();
    }
}

/// Commits a lake snapshot ending at `end` and tells the bucket; returns the snapshot.
pub async fn progress<F: EngineFactory>(
    bucket: &Bucket,
    lake: &impl TestLake,
    end: u64,
) -> LakeSnapshot {
    let snapshot = lake.commit(end).await;
    bucket
        .on_lake_progress(snapshot)
        .await
        .unwrap_or_else(|e| panic!("{}: lake progress to {end}: {e}", F::NAME));
    snapshot
}

/// Runs `Engine::reclaim` on a blocking thread.
pub async fn reclaim<F: EngineFactory>(bucket: &Bucket) -> tidemark_engine_api::ReclaimReport {
    let engine = bucket.engine().clone();
    tokio::task::spawn_blocking(move || tidemark_engine_api::Engine::reclaim(&*engine))
        .await
        .unwrap()
        .unwrap_or_else(|e| panic!("{}: reclaim: {e}", F::NAME))
}

/// Asserts every key (and one never written) answers what the model says after `end`.
pub async fn assert_model<F: EngineFactory>(bucket: &Bucket, wal: &Wal, end: u64, when: &str) {
    for key in wal.keys() {
        let got = bucket
            .lookup(&key)
            .await
            .unwrap_or_else(|e| panic!("{}: {when}: lookup {}: {e}", F::NAME, show(&key)));
        assert_answer::<F>(bucket, wal, &key, got, end, when);
    }
}

/// Asserts that `got`, the bucket's answer for `key`, is the model's after the records below
/// `end`.
#[track_caller]
pub fn assert_answer<F: EngineFactory>(
    bucket: &Bucket,
    wal: &Wal,
    key: &[u8],
    got: Option<Vec<u8>>,
    end: u64,
    when: &str,
) {
    assert_eq!(
        got.as_deref().map(show),
        wal.answer_at(key, end).as_deref().map(show),
        "{}: {when}: key {} (model at end {end}, W = {}, lake end {})",
        F::NAME,
        show(key),
        bucket.watermark(),
        bucket.lake_end(),
    );
}

/// Reclaims (as [`reclaim`]), then asserts every key answers what the model says after `end`
/// (as [`assert_model`]): a reclaim removes only what the lake answers for.
pub async fn reclaim_and_assert_model<F: EngineFactory>(
    bucket: &Bucket,
    wal: &Wal,
    end: u64,
    when: &str,
) {
    reclaim::<F>(bucket).await;
    assert_model::<F>(bucket, wal, end, when).await;
}

/// Whether an error is the bucket refusing to answer from a lake behind the watermark.
pub fn is_lake_error(e: &Error) -> bool {
    matches!(e, Error::Lake { .. })
}

/// Bytes as text for messages.
pub fn show(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Runs `scenario` on [`runtime`] in a new directory with a bucket over a new engine there and a
/// new memory lake, recovered from the empty lake, as most scenarios start: it gets the engine,
/// the lake and the bucket.
pub fn run_fresh<F: EngineFactory>(
    factory: F,
    scenario: impl AsyncFnOnce(Arc<F::Engine>, Arc<MemoryLake>, Bucket),
) {
    let site = Site::new(factory);
    runtime().block_on(async {
        let (engine, lake, bucket) = fresh_with(&site, None).await;
        scenario(engine, lake, bucket).await;
    });
}

/// [`run_fresh`] over a new lake of kind `L`: the scenario also gets the bucket's lookuper.
pub fn run_fresh_on<F: EngineFactory, L: TestLake>(
    factory: F,
    scenario: impl AsyncFnOnce(Arc<F::Engine>, L, Arc<L::Reader>, Bucket),
) {
    let site = Site::new(factory);
    runtime().block_on(async {
        let engine = site.open();
        let lake = L::create().await;
        let reader = lake.reader();
        let bucket = HistoricalBucket::new(Arc::clone(&engine), reader.clone());
        recover_new::<F>(&bucket).await;
        scenario(engine, lake, reader, bucket).await;
    });
}

/// Recovers a bucket over a new engine from the empty lake.
async fn recover_new<F: EngineFactory>(bucket: &Bucket) {
    bucket
        .recover(LakeSnapshot::default())
        .await
        .unwrap_or_else(|e| panic!("{}: recover a new bucket: {e}", F::NAME));
}

/// A bucket over a new engine in `site` and a new memory lake, recovered from the empty lake
/// and registered with `scheduler` under [`BUCKET`] when one is given.
pub async fn fresh_with<F: EngineFactory>(
    site: &Site<F>,
    scheduler: Option<&ReclaimScheduler>,
) -> (Arc<F::Engine>, Arc<MemoryLake>, Bucket) {
    let engine = site.open();
    let lake = Arc::new(MemoryLake::new());
    let bucket = HistoricalBucket::new(Arc::clone(&engine), lake.clone());
    let bucket = match scheduler {
        Some(scheduler) => bucket
            .with_scheduler(scheduler, BUCKET)
            .unwrap_or_else(|e| panic!("{}: register with the scheduler: {e}", F::NAME)),
        None => bucket,
    };
    recover_new::<F>(&bucket).await;
    (engine, lake, bucket)
}

/// `(refreshed, W, moved)` of a published notification; panics on an ignored one.
pub fn published(p: Progress) -> (bool, u64, bool) {
    match p {
        Progress::Published {
            refreshed, update, ..
        } => (refreshed, update.current, update.moved),
        Progress::Ignored { watermark } => panic!("ignored at W = {watermark}"),
    }
}

/// The watermark of an ignored notification; panics on a published one.
pub fn ignored(p: Progress) -> u64 {
    match p {
        Progress::Ignored { watermark } => watermark,
        Progress::Published { update, .. } => panic!("published {update:?}"),
    }
}
