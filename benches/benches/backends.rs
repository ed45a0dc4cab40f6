//! Backends side by side: tagged apply and lookup against each engine's raw baseline, and
//! incremental reclaim. Quote ratios from one run (e.g. `apply/redb` vs `apply/raw-redb`).
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::hint::black_box;
use std::path::Path;
use std::time::Duration;

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use tidemark::{Backend, BackendConfig, Engine, EngineOptions};
use tidemark_benches::{BATCH, KEYS, RawRedb, RawRocks, RawSled, RawStore, batch, config, key};

fn options() -> EngineOptions {
    // Raw baselines do not sync either; this compares bookkeeping, not fsync latency.
    EngineOptions::default().with_sync_writes(false)
}

/// The raw baselines, each with the tuning of its backend's buckets in `config`.
fn raw_stores(config: &BackendConfig, dir: &Path) -> Vec<(&'static str, Box<dyn RawStore>)> {
    vec![
        (
            "raw-sled",
            Box::new(RawSled::open(config, &dir.join("raw-sled"))) as Box<dyn RawStore>,
        ),
        (
            "raw-redb",
            Box::new(RawRedb::open(config, &dir.join("raw.redb"))),
        ),
        (
            "raw-rocksdb",
            Box::new(RawRocks::open(config, &dir.join("raw-rocksdb"))),
        ),
    ]
}

/// Batches that write every key of the space twice.
const PREFILL_BATCHES: u64 = KEYS / BATCH * 2;

fn prefill(engine: &dyn Engine) {
    for n in 0..PREFILL_BATCHES {
        engine.apply(&batch(n)).unwrap();
    }
}

fn prefill_raw(raw: &dyn RawStore) {
    for n in 0..PREFILL_BATCHES {
        raw.write(&batch(n));
    }
}

fn bench_apply(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let config = config();
    let mut group = c.benchmark_group("apply-100");
    for backend in Backend::compiled() {
        let engine = backend
            .open_with(&dir.path().join(backend.name()), options(), &config)
            .unwrap();
        let mut n = 0u64;
        group.bench_function(backend.name(), |b| {
            b.iter(|| {
                engine.apply(black_box(&batch(n))).unwrap();
                n += 1;
            })
        });
    }
    for (name, raw) in raw_stores(&config, dir.path()) {
        let mut n = 0u64;
        group.bench_function(name, |b| {
            b.iter(|| {
                raw.write(black_box(&batch(n)));
                n += 1;
            })
        });
    }
    group.finish();
}

fn bench_lookup(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let config = config();
    let mut group = c.benchmark_group("lookup");
    for backend in Backend::compiled() {
        let engine = backend
            .open_with(&dir.path().join(backend.name()), options(), &config)
            .unwrap();
        prefill(engine.as_ref());
        let mut i = 0u64;
        group.bench_function(backend.name(), |b| {
            b.iter(|| {
                i = i.wrapping_add(7919);
                black_box(engine.lookup(&key(i)).unwrap());
            })
        });
    }
    for (name, raw) in raw_stores(&config, dir.path()) {
        prefill_raw(raw.as_ref());
        let mut i = 0u64;
        group.bench_function(name, |b| {
            b.iter(|| {
                i = i.wrapping_add(7919);
                black_box(raw.get(&key(i)));
            })
        });
    }
    group.finish();
}

fn bench_reclaim(c: &mut Criterion) {
    let root = tempfile::tempdir().unwrap();
    let config = config();
    let mut group = c.benchmark_group("reclaim-10pct-of-20k");
    group.sample_size(10);
    for backend in Backend::compiled() {
        let mut run = 0u64;
        group.bench_function(backend.name(), |b| {
            b.iter_batched(
                || {
                    run += 1;
                    let path = root.path().join(format!("{}-{run}", backend.name()));
                    let engine = backend.open_with(&path, options(), &config).unwrap();
                    prefill(engine.as_ref());
                    // Cover the oldest tenth of the stream.
                    engine
                        .advance_watermark(PREFILL_BATCHES * BATCH / 10)
                        .unwrap();
                    engine
                },
                |engine| black_box(engine.reclaim().unwrap()),
                BatchSize::PerIteration,
            )
        });
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3));
    targets = bench_apply, bench_lookup, bench_reclaim
}
criterion_main!(benches);
