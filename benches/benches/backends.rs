//! Tagged buckets against each engine's raw baseline, one group per operation.
//!
//! Every ID is `<backend>/<param>` for a tagged bucket (`sled`, `redb`, `rocksdb`, `fjall`, opened through
//! `Backend::open_with` with the bench configuration, unsynced writes) and `raw-<backend>/<param>`
//! for the same engine driven through its own API with the same tuning (RocksDB: the shared
//! context's options; fjall: a database built like the shared one, a keyspace like a bucket's; sled and redb: a bucket's cache share), the same keys and the same 128-byte
//! incompressible payloads. Throughput is in records or keys per iteration. Read a group as
//! ratios within one run (e.g. `apply/redb/batch-100` ÷ `apply/raw-redb/batch-100`); absolute
//! times on a shared machine are not meaningful. The memory backend is left out: it has no engine
//! underneath to compare against.
//!
//! | group | params | tagged | raw baseline |
//! |---|---|---|---|
//! | `apply` | `batch-1`, `batch-100` | `Engine::apply` of the next puts of a stream over 10,000 keys | one native batch (RocksDB write batch, sled batch, redb transaction); `raw-sled+index`, `raw-redb+index` also write an `offset ‖ key` row per record to an index table in the same transaction, so `raw` → `raw+index` → tagged splits a tagged write into the second row and the rest (tag, checksum, metadata, bookkeeping) |
//! | `lookup` | `hit`, `tombstone`, `miss` | `Engine::lookup` | a native get: `hit`, `deleted-key` (deleted natively), `miss` |
//! | `bucket-lookup` | `hit`, `many-100` | `HistoricalBucket::lookup` of a local hit, `lookup_many` of 100 (on a tokio runtime) | 1 and 100 native gets |
//! | `advance-watermark` | `durable` | `Engine::advance_watermark` by one offset (durable, with the high-water record) | a synced single-key put |
//! | `reclaim` | `10pct-of-20k`, `100pct-of-20k`, `1000-of-20k`, `1000-of-200k` | `Engine::reclaim` of the covered entries (count of the param) of a settled bucket of 20k or 200k distinct keys | the same keys removed physically: RocksDB deletes, flush and compaction to the bottom level; sled one unflushed batch; redb one durable transaction |
//! | `write-during-reclaim` | `idle`, `reclaiming` | `apply` of 100 new keys (an inserting stream), alone and while another thread moves `W` to 5,000 offsets behind the applied end and reclaims, back to back | a native write of the same 100, alone and while another thread writes a synced watermark key and removes the keys written below it |
//!
//! Setup (building batches, filling and settling stores, opening and dropping them) is outside
//! every timed region. The `reclaim` group builds a new bucket for every iteration, so it takes
//! ten samples of one iteration each; criterion may warn that it cannot complete them in the
//! target time, which is expected there.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::future::Future;
use std::hint::black_box;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use criterion::{
    BatchSize, Bencher, BenchmarkId, Criterion, SamplingMode, Throughput, criterion_group,
    criterion_main,
};
use tempfile::TempDir;
use tidemark::{
    Backend, BackendConfig, Engine, EngineHandle, HistoricalBucket, LocalLookup, MemoryLake,
    WriteBatch,
};
use tidemark_benches::{
    BATCH, KEYS, RawLayout, RawStore, Read, SETUP_BATCH, Stream, config, disk_backends, fill,
    fill_key, fresh_key, inserting, open_raw, open_tagged, payload, raw_name, read_keys,
    read_state, settle, stream_key, write_state,
};

/// A tagged bucket of `backend` at `path` holding `state`, settled into its files.
fn tagged_holding(
    backend: Backend,
    config: &BackendConfig,
    path: &Path,
    state: &[WriteBatch],
) -> EngineHandle {
    let engine = open_tagged(backend, config, path);
    for batch in state {
        engine.apply(batch).unwrap();
    }
    settle(&engine);
    engine
}

/// `backend`'s raw baseline with `layout` at `path` holding `state`, settled into its files.
fn raw_holding(
    backend: Backend,
    layout: RawLayout,
    config: &BackendConfig,
    path: &Path,
    state: &[WriteBatch],
) -> Option<Box<dyn RawStore>> {
    let raw = open_raw(backend, layout, config, path)?;
    for batch in state {
        raw.write(batch);
    }
    raw.settle();
    Some(raw)
}

/// A tagged bucket of `backend` and its raw baseline (data only) in `dir`, both holding `state`,
/// with the raw baseline's name.
fn pair(
    backend: Backend,
    config: &BackendConfig,
    dir: &Path,
    state: &[WriteBatch],
) -> (EngineHandle, Box<dyn RawStore>, String) {
    let engine = tagged_holding(backend, config, &dir.join("tagged"), state);
    let name = raw_name(backend, RawLayout::Data);
    let raw = raw_holding(backend, RawLayout::Data, config, &dir.join(&name), state).unwrap();
    (engine, raw, name)
}

/// Times `write` of the stream's next batches of `len` records, built outside the timed region
/// (and dropped outside it).
fn bench_writes<O>(
    b: &mut Bencher<'_>,
    stream: &mut Stream,
    len: u64,
    mut write: impl FnMut(&WriteBatch) -> O,
) {
    b.iter_batched_ref(
        || stream.next_batch(len),
        |batch| write(batch),
        BatchSize::SmallInput,
    );
}

/// Times `read` of `items` in turn, round and round.
fn bench_reads<T, R>(b: &mut Bencher<'_>, items: &[T], mut read: impl FnMut(&T) -> R) {
    let mut items = items.iter().cycle();
    b.iter(|| black_box(read(items.next().unwrap())));
}

/// Times `read` of `items` in turn on `rt`, the runtime's own `block_on` outside the timed region.
fn bench_async_reads<'a, T, R, F: Future<Output = R>>(
    b: &mut Bencher<'_>,
    rt: &tokio::runtime::Runtime,
    items: &'a [T],
    mut read: impl FnMut(&'a T) -> F,
) {
    b.iter_custom(|iters| {
        rt.block_on(async {
            let mut items = items.iter().cycle();
            let started = Instant::now();
            for _ in 0..iters {
                black_box(read(items.next().unwrap()).await);
            }
            started.elapsed()
        })
    });
}

fn bench_apply(c: &mut Criterion) {
    let config = config();
    let (state, stream) = write_state();
    let mut group = c.benchmark_group("apply");
    for len in [1, BATCH] {
        let param = format!("batch-{len}");
        group.throughput(Throughput::Elements(len));
        for backend in disk_backends() {
            let dir = tempfile::tempdir().unwrap();
            let engine = tagged_holding(backend, &config, &dir.path().join("tagged"), &state);
            let mut tagged_stream = stream.clone();
            group.bench_function(BenchmarkId::new(backend.name(), &param), |b| {
                bench_writes(b, &mut tagged_stream, len, |batch| {
                    engine.apply(batch).unwrap()
                });
            });
            for layout in [RawLayout::Data, RawLayout::DataAndIndex] {
                let name = raw_name(backend, layout);
                let Some(raw) =
                    raw_holding(backend, layout, &config, &dir.path().join(&name), &state)
                else {
                    continue;
                };
                let mut raw_stream = stream.clone();
                group.bench_function(BenchmarkId::new(&name, &param), |b| {
                    bench_writes(b, &mut raw_stream, len, |batch| raw.write(batch));
                });
            }
        }
    }
    group.finish();
}

/// Checks, once and untimed, that the read state answers each kind of read as the group names
/// it, so a workload bug cannot pass for a measurement.
fn check_reads(engine: &dyn Engine, raw: &dyn RawStore) {
    let first = |read| read_keys(read).swap_remove(0);
    let hit = first(Read::Hit);
    assert!(matches!(
        engine.lookup(&hit).unwrap(),
        LocalLookup::Value { .. }
    ));
    assert!(raw.get(&hit).is_some());
    let deleted = first(Read::Deleted);
    assert!(matches!(
        engine.lookup(&deleted).unwrap(),
        LocalLookup::Tombstone { .. }
    ));
    assert!(raw.get(&deleted).is_none());
    let missing = first(Read::Missing);
    assert!(matches!(
        engine.lookup(&missing).unwrap(),
        LocalLookup::Miss
    ));
    assert!(raw.get(&missing).is_none());
}

fn bench_lookup(c: &mut Criterion) {
    let config = config();
    let state = read_state();
    let mut group = c.benchmark_group("lookup");
    group.throughput(Throughput::Elements(1));
    for backend in disk_backends() {
        let dir = tempfile::tempdir().unwrap();
        let (engine, raw, name) = pair(backend, &config, dir.path(), &state);
        check_reads(&engine, raw.as_ref());
        for (read, param, raw_param) in [
            (Read::Hit, "hit", "hit"),
            (Read::Deleted, "tombstone", "deleted-key"),
            (Read::Missing, "miss", "miss"),
        ] {
            let keys = read_keys(read);
            group.bench_function(BenchmarkId::new(backend.name(), param), |b| {
                bench_reads(b, &keys, |k| engine.lookup(k).unwrap());
            });
            group.bench_function(BenchmarkId::new(&name, raw_param), |b| {
                bench_reads(b, &keys, |k| raw.get(k));
            });
        }
    }
    group.finish();
}

fn bench_bucket_lookup(c: &mut Criterion) {
    const MANY: usize = 100;
    let config = config();
    let state = read_state();
    let keys = read_keys(Read::Hit);
    let key_groups: Vec<&[Vec<u8>]> = keys.chunks_exact(MANY).collect();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut group = c.benchmark_group("bucket-lookup");
    for backend in disk_backends() {
        let dir = tempfile::tempdir().unwrap();
        let (engine, raw, name) = pair(backend, &config, dir.path(), &state);
        let bucket = &HistoricalBucket::new(engine, Arc::new(MemoryLake::new()));

        group.throughput(Throughput::Elements(1));
        group.bench_function(BenchmarkId::new(backend.name(), "hit"), |b| {
            bench_async_reads(
                b,
                &rt,
                &keys,
                |k| async move { bucket.lookup(k).await.unwrap() },
            );
        });
        group.bench_function(BenchmarkId::new(&name, "hit"), |b| {
            bench_reads(b, &keys, |k| raw.get(k));
        });

        group.throughput(Throughput::Elements(MANY as u64));
        group.bench_function(BenchmarkId::new(backend.name(), "many-100"), |b| {
            bench_async_reads(b, &rt, &key_groups, |ks| async move {
                bucket.lookup_many(ks).await.unwrap()
            });
        });
        group.bench_function(BenchmarkId::new(&name, "many-100"), |b| {
            bench_reads(b, &key_groups, |ks| {
                ks.iter().map(|k| raw.get(k)).collect::<Vec<_>>()
            });
        });
    }
    group.finish();
}

/// The key a raw baseline writes its watermark under (in its own table).
const RAW_WATERMARK_KEY: &[u8] = b"watermark";

fn bench_advance_watermark(c: &mut Criterion) {
    let config = config();
    let (state, _) = write_state();
    let mut group = c.benchmark_group("advance-watermark");
    // An fsync or three per iteration: fewer, larger samples keep the group short.
    group.sample_size(20).throughput(Throughput::Elements(1));
    for backend in disk_backends() {
        let dir = tempfile::tempdir().unwrap();
        let (engine, raw, name) = pair(backend, &config, dir.path(), &state);
        group.bench_function(BenchmarkId::new(backend.name(), "durable"), |b| {
            b.iter_custom(|iters| {
                let from = engine.watermark();
                let to = from + iters;
                if engine.applied_end() <= to {
                    // Untimed: one record at `to` lets each of the `iters` advances move `W`.
                    let mut batch = WriteBatch::new();
                    batch.put(stream_key(to), payload(to), to);
                    engine.apply(&batch).unwrap();
                }
                let started = Instant::now();
                for w in from + 1..=to {
                    black_box(engine.advance_watermark(w).unwrap());
                }
                started.elapsed()
            });
        });
        let mut w = 0u64;
        group.bench_function(BenchmarkId::new(&name, "durable"), |b| {
            b.iter(|| {
                w += 1;
                raw.put_durable(RAW_WATERMARK_KEY, &w.to_be_bytes());
            });
        });
    }
    group.finish();
}

/// A reclaim case: `covered` of `records` distinct keys covered.
struct ReclaimCase {
    param: &'static str,
    records: u64,
    covered: u64,
    /// Criterion's target time for the ten samples, building a bucket per iteration included
    /// (a slow machine overruns it: criterion then warns and runs the ten anyway).
    target: Duration,
}

const RECLAIM_CASES: [ReclaimCase; 4] = [
    ReclaimCase {
        param: "10pct-of-20k",
        records: 20_000,
        covered: 2_000,
        target: Duration::from_secs(3),
    },
    ReclaimCase {
        param: "100pct-of-20k",
        records: 20_000,
        covered: 20_000,
        target: Duration::from_secs(3),
    },
    ReclaimCase {
        param: "1000-of-20k",
        records: 20_000,
        covered: 1_000,
        target: Duration::from_secs(3),
    },
    ReclaimCase {
        param: "1000-of-200k",
        records: 200_000,
        covered: 1_000,
        target: Duration::from_secs(10),
    },
];

/// Times `work` on a store `build` makes in a directory of its own, one new store per iteration;
/// the tuple drops the store before its directory, both after the timed region.
fn bench_on_fresh<S, O>(
    b: &mut Bencher<'_>,
    mut build: impl FnMut(&Path) -> S,
    mut work: impl FnMut(&S) -> O,
) {
    b.iter_batched_ref(
        || {
            let dir = tempfile::tempdir().unwrap();
            (build(dir.path()), dir)
        },
        |(store, _dir): &mut (S, TempDir)| work(store),
        BatchSize::PerIteration,
    );
}

fn bench_reclaim(c: &mut Criterion) {
    let config = config();
    let mut group = c.benchmark_group("reclaim");
    // Setup (a bucket per iteration) dominates: flat sampling gives ten samples of one iteration
    // each, and one warm-up iteration is enough.
    group
        .sampling_mode(SamplingMode::Flat)
        .sample_size(10)
        .warm_up_time(Duration::from_millis(1));
    for case in &RECLAIM_CASES {
        group
            .throughput(Throughput::Elements(case.covered))
            .measurement_time(case.target);
        let state = fill(case.records);
        let covered_keys: Vec<Vec<u8>> = (0..case.covered)
            .map(|offset| fill_key(offset, case.records))
            .collect();
        for backend in disk_backends() {
            group.bench_function(BenchmarkId::new(backend.name(), case.param), |b| {
                bench_on_fresh(
                    b,
                    |dir| {
                        let engine = tagged_holding(backend, &config, dir, &state);
                        engine.advance_watermark(case.covered).unwrap();
                        engine
                    },
                    |engine| engine.reclaim().unwrap(),
                );
            });
            let name = raw_name(backend, RawLayout::Data);
            group.bench_function(BenchmarkId::new(&name, case.param), |b| {
                bench_on_fresh(
                    b,
                    |dir| {
                        raw_holding(backend, RawLayout::Data, &config, &dir.join("raw"), &state)
                            .unwrap()
                    },
                    |raw| raw.remove(&covered_keys),
                );
            });
        }
    }
    group.finish();
}

/// How far `W` trails the applied end while reclaims run during writes.
const LAG: u64 = KEYS / 2;

/// Runs `body`, and with a `step`, another thread calling it over and over meanwhile; `step` says
/// whether it found work (if not, the thread sleeps a millisecond instead of spinning).
fn beside(step: Option<impl FnMut() -> bool + Send>, body: impl FnOnce()) {
    /// Stops the thread however `body` ends, so a failing benchmark cannot hang the scope.
    struct Stop<'a>(&'a AtomicBool);
    impl Drop for Stop<'_> {
        fn drop(&mut self) {
            self.0.store(true, Ordering::Release);
        }
    }
    let Some(mut step) = step else {
        return body();
    };
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            while !stop.load(Ordering::Acquire) {
                if !step() {
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
        });
        let _stop = Stop(&stop);
        body();
    });
}

/// One round of the tagged background reclaimer: `W` to [`LAG`] behind the applied end, then a
/// reclaim.
fn tagged_reclaim_step(engine: &dyn Engine) -> bool {
    let target = engine.applied_end().saturating_sub(LAG);
    if target <= engine.watermark() {
        return false;
    }
    engine.advance_watermark(target).unwrap();
    engine.reclaim().unwrap();
    true
}

/// The raw background remover: what the tagged reclaimer does, natively, on an inserting
/// [`Stream`] (whose every entry is its key's newest, so the keys the tagged reclaim finds
/// covered are exactly those written below the watermark).
struct RawRemover<'a> {
    raw: &'a dyn RawStore,
    /// The end of what the writer has written.
    written: &'a AtomicU64,
    /// Offsets below this are removed.
    done: u64,
}

impl RawRemover<'_> {
    /// A synced watermark put [`LAG`] behind the written end, then the removal of the keys
    /// written below it since the last round.
    fn step(&mut self) -> bool {
        let target = self.written.load(Ordering::Acquire).saturating_sub(LAG);
        if target <= self.done {
            return false;
        }
        self.raw
            .put_durable(RAW_WATERMARK_KEY, &target.to_be_bytes());
        let keys: Vec<Vec<u8>> = (self.done..target).map(fresh_key).collect();
        self.raw.remove(&keys);
        self.done = target;
        true
    }
}

fn bench_write_during_reclaim(c: &mut Criterion) {
    let config = config();
    // Inserts, so an entry stays its key's newest until it is reclaimed: the tagged reclaim and
    // the raw removal remove the same keys, and the stream never rewrites a key just as it is
    // being removed.
    let mut stream = inserting();
    let state = stream.next_batches(2 * KEYS, SETUP_BATCH);
    let mut group = c.benchmark_group("write-during-reclaim");
    group.throughput(Throughput::Elements(BATCH));
    for backend in disk_backends() {
        // A new pair of stores for each param, so both start from the same state (without
        // reclaims the store grows as it is written).
        for reclaiming in [false, true] {
            let param = if reclaiming { "reclaiming" } else { "idle" };
            let dir = tempfile::tempdir().unwrap();
            let (engine, raw, name) = pair(backend, &config, dir.path(), &state);
            let mut tagged_stream = stream.clone();
            beside(
                reclaiming.then_some(|| tagged_reclaim_step(&engine)),
                || {
                    group.bench_function(BenchmarkId::new(backend.name(), param), |b| {
                        bench_writes(b, &mut tagged_stream, BATCH, |batch| {
                            engine.apply(batch).unwrap()
                        });
                    });
                },
            );

            let written = AtomicU64::new(stream.next_offset());
            let mut remover = RawRemover {
                raw: raw.as_ref(),
                written: &written,
                done: 0,
            };
            let mut raw_stream = stream.clone();
            beside(reclaiming.then_some(|| remover.step()), || {
                group.bench_function(BenchmarkId::new(&name, param), |b| {
                    bench_writes(b, &mut raw_stream, BATCH, |batch| {
                        raw.write(batch);
                        let end = batch.records().last().map_or(0, |r| r.offset() + 1);
                        written.fetch_max(end, Ordering::Release);
                    });
                });
            });
        }
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = common::criterion(Duration::from_secs(2));
    targets = bench_apply, bench_lookup, bench_bucket_lookup, bench_advance_watermark,
        bench_reclaim, bench_write_during_reclaim
}
criterion_main!(benches);
