//! RocksDB-specific engine behaviour beyond the shared conformance suite: versions spread over
//! levels never resurrect, metadata persistence and corruption, the covered estimate, the
//! recovery purge (`reclaim_below`) and its temporary filter threshold, and the directory layout.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

mod common;

use common::bucket_dir;

use std::path::Path;
use tidemark_backend_rocksdb::RocksDbDiagnostics;
use tidemark_disk::BackendContext;

use rocksdb::{DB, Options};
use tidemark_backend_rocksdb::{BucketPrefix, DATA_CF, META_CF, SHARED_DIR};
use tidemark_backend_rocksdb::{RocksDbContext, RocksDbContextOptions, RocksDbEngine};
use tidemark_engine_api::{Engine, EngineOptions, Error, LocalLookup, OpenEngine};

fn open(dir: &Path) -> RocksDbEngine {
    RocksDbEngine::open(dir, EngineOptions::default()).unwrap()
}

/// Puts `k@1`, then pushes it to the bottom level with a reclaim that covers nothing, then puts
/// `k@5` and flushes it into L0.
fn old_at_bottom_new_in_l0(engine: &RocksDbEngine, newer_is_tombstone: bool) {
    engine.put(b"k", b"old", 1).unwrap();
    let report = engine.reclaim().unwrap();
    assert_eq!(report.removed(), 0);
    let levels = engine.data_files_per_level().unwrap();
    assert_eq!(levels.iter().sum::<u64>(), 1);
    assert_eq!(
        levels[6], 1,
        "old version is in the bottom level: {levels:?}"
    );
    if newer_is_tombstone {
        engine.delete(b"k", 5).unwrap();
    } else {
        engine.put(b"k", b"new", 5).unwrap();
    }
    engine.flush_memtables().unwrap();
    let levels = engine.data_files_per_level().unwrap();
    assert_eq!((levels[0], levels[6]), (1, 1), "{levels:?}");
}

#[test]
fn reclaiming_a_newer_version_never_resurrects_the_bottom_one() {
    for tombstone in [false, true] {
        let tmp = bucket_dir();
        let engine = open(tmp.path());
        old_at_bottom_new_in_l0(&engine, tombstone);
        engine.advance_watermark(6).unwrap();
        let report = engine.reclaim().unwrap();
        // One logical entry (the newest version) was covered and removed; the older version
        // went with it as an obsolete version, not as a second removal.
        assert_eq!(report.removed(), 1, "{report:?}");
        assert_eq!(
            (report.values_removed, report.tombstones_removed),
            if tombstone { (0, 1) } else { (1, 0) }
        );
        assert_eq!(engine.lookup(b"k").unwrap(), LocalLookup::Miss);
        drop(engine);
        let engine = open(tmp.path());
        assert_eq!(engine.lookup(b"k").unwrap(), LocalLookup::Miss);
        assert_eq!(engine.reclaim().unwrap().removed(), 0);
        assert_eq!(engine.lookup(b"k").unwrap(), LocalLookup::Miss);
    }
}

#[test]
fn covering_only_the_older_version_keeps_the_newer_and_later_removes_both() {
    let tmp = bucket_dir();
    let engine = open(tmp.path());
    old_at_bottom_new_in_l0(&engine, false);
    // W = 3 covers k@1 only, but k@1 is no longer the key's entry: k@5 is, and it is not covered.
    engine.advance_watermark(3).unwrap();
    let report = engine.reclaim().unwrap();
    assert_eq!(report.removed(), 0, "{report:?}");
    let expected = LocalLookup::Value {
        offset: 5,
        bytes: b"new".to_vec(),
    };
    assert_eq!(engine.lookup(b"k").unwrap(), expected);
    let levels = engine.data_files_per_level().unwrap();
    assert_eq!(
        levels.iter().sum::<u64>(),
        1,
        "merged into one file: {levels:?}"
    );

    engine.advance_watermark(6).unwrap();
    assert_eq!(engine.reclaim().unwrap().values_removed, 1);
    assert_eq!(engine.lookup(b"k").unwrap(), LocalLookup::Miss);
}

#[test]
fn watermark_and_applied_end_survive_reopen_and_the_filter_uses_them() {
    let tmp = bucket_dir();
    {
        let engine = open(tmp.path());
        for i in 0..10u64 {
            engine.put(format!("k{i}").as_bytes(), b"v", i).unwrap();
        }
        assert!(engine.advance_watermark(4).unwrap().moved);
    }
    let engine = open(tmp.path());
    assert_eq!((engine.watermark(), engine.applied_end()), (4, 10));
    // The restored W drives the filter straight away.
    let report = engine.reclaim().unwrap();
    assert_eq!((report.threshold, report.values_removed), (4, 4));
    assert_eq!(engine.lookup(b"k3").unwrap(), LocalLookup::Miss);
    assert!(matches!(
        engine.lookup(b"k4").unwrap(),
        LocalLookup::Value { offset: 4, .. }
    ));
}

#[test]
fn covered_estimate_tracks_writes_and_reclaims() {
    let tmp = bucket_dir();
    let engine = open(tmp.path());
    let mut batch = tidemark_engine_api::WriteBatch::new();
    for i in 0..100u64 {
        batch.put(format!("k{i}"), b"v".to_vec(), i);
    }
    engine.apply(&batch).unwrap();
    assert_eq!(engine.stats().unwrap().covered_estimate, 0);
    engine.advance_watermark(40).unwrap();
    assert_eq!(engine.stats().unwrap().covered_estimate, 40);
    let report = engine.reclaim().unwrap();
    assert_eq!(report.values_removed, 40);
    assert!(report.bytes_after <= report.bytes_before, "{report:?}");
    let stats = engine.stats().unwrap();
    assert_eq!(stats.covered_estimate, 0);
    assert!(!stats.live_entries_exact);
    assert!(stats.bytes_on_disk > 0);
    assert_eq!(stats.counters.reclaimed_values, 40);
}

/// The shared instance of the closed bucket at `dir`, opened raw.
fn raw_meta_db(dir: &Path) -> DB {
    let opts = Options::default();
    let instance = dir.parent().unwrap().join(SHARED_DIR);
    DB::open_cf(&opts, instance, [DATA_CF, META_CF]).unwrap()
}

/// The first bucket of an instance has prefix 0.
fn first_bucket(key: &[u8]) -> Vec<u8> {
    BucketPrefix(0).key(key)
}

#[test]
fn unparsable_metadata_is_corrupt_and_newer_format_is_unsupported() {
    let tmp = bucket_dir();
    drop(open(tmp.path()));
    {
        let db = raw_meta_db(tmp.path());
        let meta = db.cf_handle(META_CF).unwrap();
        db.put_cf(meta, first_bucket(b"watermark"), b"xyz").unwrap();
    }
    match RocksDbEngine::open(tmp.path(), EngineOptions::default()) {
        Err(Error::Corrupt { key, .. }) => assert_eq!(key, b"meta/watermark"),
        other => panic!("expected Corrupt, got {other:?}"),
    }

    let tmp = bucket_dir();
    drop(open(tmp.path()));
    {
        let db = raw_meta_db(tmp.path());
        let meta = db.cf_handle(META_CF).unwrap();
        db.put_cf(meta, first_bucket(b"format_version"), 3u64.to_be_bytes())
            .unwrap();
    }
    match RocksDbEngine::open(tmp.path(), EngineOptions::default()) {
        Err(Error::UnsupportedFormat { found: 3, .. }) => {}
        other => panic!("expected UnsupportedFormat, got {other:?}"),
    }
}

#[test]
fn directory_layout_and_foreign_directories() {
    let tmp = bucket_dir();
    let bucket = tmp.path().join("missing").join("bucket");
    drop(open(&bucket));
    assert!(bucket.join("TIDEMARK").is_file());
    assert!(
        bucket
            .join(tidemark_backend_rocksdb::BUCKET_RECORD)
            .is_file()
    );
    let instance = tmp.path().join("missing").join(SHARED_DIR);
    assert!(instance.join("CURRENT").is_file());
    // A second sibling joins the instance under the next prefix.
    let sibling = tmp.path().join("missing").join("sibling");
    let engine = open(&sibling);
    assert_eq!(engine.storage().prefix(), BucketPrefix(1));
    assert_eq!(
        engine.storage().instance_path(),
        std::fs::canonicalize(&instance).unwrap()
    );
    drop(engine);

    let foreign = bucket_dir();
    std::fs::write(foreign.path().join("data.redb"), b"x").unwrap();
    assert!(matches!(
        RocksDbEngine::open(foreign.path(), EngineOptions::default()),
        Err(Error::ForeignDirectory { .. })
    ));
    let other = bucket_dir();
    tidemark_disk::layout::claim_directory(other.path(), "sled").unwrap();
    assert!(matches!(
        RocksDbEngine::open(other.path(), EngineOptions::default()),
        Err(Error::WrongBackend { .. })
    ));
}

#[test]
fn raw_injection_is_kept_and_counted_by_reclaim_and_fails_lookup() {
    let tmp = bucket_dir();
    let engine = open(tmp.path());
    engine.put(b"good", b"v", 0).unwrap();
    engine.insert_raw(b"bad", b"\x09garbage").unwrap();
    engine.advance_watermark(1).unwrap();
    let report = engine.reclaim().unwrap();
    assert_eq!((report.values_removed, report.corrupt_kept), (1, 1));
    assert!(matches!(engine.lookup(b"bad"), Err(Error::Corrupt { .. })));
    // Met once per reclaim, not once per level it passes through.
    assert_eq!(engine.reclaim().unwrap().corrupt_kept, 1);
}

#[test]
fn engines_in_a_private_context_and_unsynced_writes() {
    let ctx = RocksDbContext::new(RocksDbContextOptions {
        rate_limit_bytes_per_sec: None,
        ..RocksDbContextOptions::default()
    })
    .unwrap();
    let tmp = bucket_dir();
    let options = EngineOptions::default().with_sync_writes(false);
    {
        let engine = RocksDbEngine::open_in(&ctx, tmp.path(), options.clone()).unwrap();
        engine.put(b"a", b"1", 0).unwrap();
        engine.flush().unwrap();
    }
    let engine = RocksDbEngine::open_in(&ctx, tmp.path(), options).unwrap();
    assert_eq!(
        engine.lookup(b"a").unwrap(),
        LocalLookup::Value {
            offset: 0,
            bytes: b"1".to_vec()
        }
    );
    assert_eq!(
        engine
            .storage()
            .context()
            .settings()
            .rate_limit_bytes_per_sec,
        None
    );
}

fn open_with_distance(dir: &Path, distance: u64) -> RocksDbEngine {
    RocksDbEngine::open(
        dir,
        EngineOptions::default().with_retention_distance(distance),
    )
    .unwrap()
}

fn put_range(engine: &RocksDbEngine, offsets: std::ops::Range<u64>) {
    let mut batch = tidemark_engine_api::WriteBatch::new();
    for i in offsets {
        batch.put(format!("k{i:03}"), b"v".to_vec(), i);
    }
    engine.apply(&batch).unwrap();
}

fn present(engine: &RocksDbEngine, i: u64) -> bool {
    engine.lookup(format!("k{i:03}").as_bytes()).unwrap() != LocalLookup::Miss
}

#[test]
fn reclaim_below_ignores_the_retention_distance_and_then_restores_it() {
    let tmp = bucket_dir();
    let engine = open_with_distance(tmp.path(), 20);
    put_range(&engine, 0..30);
    engine.advance_watermark(25).unwrap();
    assert_eq!(engine.reclaim().unwrap().values_removed, 5, "W - D = 5");

    // Asking for less than W - D removes nothing more (reclaim already took everything below 5).
    let report = engine.reclaim_below(3).unwrap();
    assert_eq!((report.threshold, report.removed()), (3, 0));

    let report = engine.reclaim_below(25).unwrap();
    assert_eq!((report.threshold, report.values_removed), (25, 20));
    assert!((0..30).all(|i| present(&engine, i) == (i >= 25)));
    assert_eq!(engine.stats().unwrap().counters.reclaimed_values, 25);

    // The purge threshold is gone once the call returns: compactions apply W - D again.
    put_range(&engine, 30..50);
    engine.advance_watermark(50).unwrap();
    engine.compact_to_bottom().unwrap();
    assert!((25..50).all(|i| present(&engine, i) == (i >= 30)));
    let report = engine.reclaim().unwrap();
    assert_eq!(report.threshold, 30);
    assert!((25..50).all(|i| present(&engine, i) == (i >= 30)));
}

#[test]
fn reclaim_below_a_threshold_under_w_minus_d_removes_only_below_it() {
    let tmp = bucket_dir();
    let engine = open_with_distance(tmp.path(), 0);
    put_range(&engine, 0..20);
    engine.advance_watermark(15).unwrap();
    // Like MemoryEngine: offset < min(threshold, W), even where W - D would allow more.
    let report = engine.reclaim_below(4).unwrap();
    assert_eq!((report.threshold, report.values_removed), (4, 4));
    assert!((0..20).all(|i| present(&engine, i) == (i >= 4)));
    assert_eq!(engine.reclaim().unwrap().values_removed, 11);
}

#[test]
fn reclaim_below_never_touches_entries_at_or_above_w() {
    let tmp = bucket_dir();
    let engine = open_with_distance(tmp.path(), u64::MAX);
    put_range(&engine, 0..20);
    engine.delete(b"k020", 20).unwrap();
    engine.advance_watermark(12).unwrap();
    // A retention distance this large keeps everything from reclaim, but not from a purge.
    assert_eq!(engine.reclaim().unwrap().removed(), 0);
    let report = engine.reclaim_below(u64::MAX).unwrap();
    assert_eq!((report.threshold, report.values_removed), (12, 12));
    assert!((0..20).all(|i| present(&engine, i) == (i >= 12)));
    assert_eq!(
        engine.lookup(b"k020").unwrap(),
        LocalLookup::Tombstone { offset: 20 }
    );
}

#[test]
fn reclaim_below_purges_a_lagging_replica_up_to_the_adopted_watermark() {
    let tmp = bucket_dir();
    {
        let engine = open_with_distance(tmp.path(), 20);
        put_range(&engine, 0..30);
        engine.delete(b"k005", 30).unwrap();
        // Recovery: the lake's end is past this replica's applied end (31).
        assert_eq!(engine.adopt_lake_watermark(40).unwrap().current, 40);
        let report = engine.reclaim_below(40).unwrap();
        assert_eq!(
            (
                report.threshold,
                report.values_removed,
                report.tombstones_removed
            ),
            (40, 29, 1)
        );
    }
    // Physically gone, so a restart cannot serve any of it again.
    let engine = open_with_distance(tmp.path(), 20);
    assert_eq!(engine.watermark(), 40);
    assert!((0..30).all(|i| !present(&engine, i)));
    assert_eq!(engine.reclaim_below(40).unwrap().removed(), 0);
}

#[test]
fn reclaim_below_never_resurrects_an_older_bottom_version() {
    for tombstone in [false, true] {
        let tmp = bucket_dir();
        let engine = open_with_distance(tmp.path(), 10);
        old_at_bottom_new_in_l0(&engine, tombstone);
        engine.advance_watermark(6).unwrap();
        assert_eq!(engine.reclaim().unwrap().removed(), 0, "W - D = 0");
        let report = engine.reclaim_below(6).unwrap();
        assert_eq!(report.removed(), 1, "{report:?}");
        assert_eq!(engine.lookup(b"k").unwrap(), LocalLookup::Miss);
    }
}

#[test]
fn compact_to_bottom_places_everything_in_the_last_level() {
    let tmp = bucket_dir();
    let engine = open(tmp.path());
    engine.put(b"a", b"1", 0).unwrap();
    engine.compact_to_bottom().unwrap();
    engine.put(b"b", b"2", 1).unwrap();
    engine.compact_to_bottom().unwrap();
    let levels = engine.data_files_per_level().unwrap();
    assert_eq!(levels.iter().sum::<u64>(), levels[6], "{levels:?}");
    assert!(levels[6] >= 1);
    // No reclaim ran, so nothing is counted as reclaimed.
    assert_eq!(engine.stats().unwrap().counters.reclaim_runs, 0);
}

/// RocksDB's `ForceOptimized` bottom step can stop before older bottom files that lie, in key
/// order, after a file the same call wrote there; reclaim compacts those files too.
#[test]
fn reclaim_reaches_bottom_files_after_one_it_just_wrote() {
    let tmp = bucket_dir();
    let engine = open(tmp.path());
    // Two older bottom files, k0 and k5, each written by its own reclaim...
    engine.delete(b"k5", 7).unwrap();
    engine.reclaim().unwrap();
    engine.delete(b"k0", 8).unwrap();
    engine.reclaim().unwrap();
    // ...then a new file for k1, which the next reclaim writes to the bottom between them.
    engine.advance_watermark(9).unwrap();
    engine.delete(b"k1", 9).unwrap();
    assert_eq!(engine.data_files_per_level().unwrap()[6], 2);
    let report = engine.reclaim().unwrap();
    assert_eq!(report.tombstones_removed, 2, "{report:?}");
    assert_eq!(engine.lookup(b"k0").unwrap(), LocalLookup::Miss);
    assert_eq!(engine.lookup(b"k5").unwrap(), LocalLookup::Miss);
    assert_eq!(
        engine.lookup(b"k1").unwrap(),
        LocalLookup::Tombstone { offset: 9 }
    );
}

/// The reclaim's own flush can bring L0 to RocksDB's compaction trigger (4 files), and the
/// automatic compaction it starts may remove the covered entries before the manual compaction
/// begins (typically it does): those removals are this reclaim's work and are counted, whichever
/// compaction does them.
#[test]
fn reclaim_counts_what_the_compaction_its_flush_triggers_removes() {
    let tmp = bucket_dir();
    // Each reopen flushes the recovered WAL into one more L0 file.
    for offset in 0..3u64 {
        let engine = open(tmp.path());
        let mut batch = tidemark_engine_api::WriteBatch::new();
        batch.delete(b"k0".to_vec(), offset);
        if offset == 1 {
            batch.delete(b"k1".to_vec(), offset);
        }
        engine.apply(&batch).unwrap();
    }
    let engine = open(tmp.path());
    assert_eq!(engine.data_files_per_level().unwrap()[0], 3);
    engine.delete(b"k0", 3).unwrap();
    engine.advance_watermark(4).unwrap();
    let report = engine.reclaim().unwrap();
    assert_eq!(report.tombstones_removed, 2, "{report:?}");
    assert_eq!(engine.lookup(b"k0").unwrap(), LocalLookup::Miss);
    assert_eq!(engine.lookup(b"k1").unwrap(), LocalLookup::Miss);
}

#[test]
fn reclaim_reports_the_bytes_its_compaction_wrote() {
    let tmp = bucket_dir();
    let engine =
        RocksDbEngine::open(tmp.path(), EngineOptions::default().with_sync_writes(false)).unwrap();
    let batch: tidemark_engine_api::WriteBatch = (0..2_000u64)
        .map(|i| tidemark_engine_api::Record::put(format!("key-{i:05}"), vec![i as u8; 100], i))
        .collect();
    engine.apply(&batch).unwrap();
    engine.compact_to_bottom().unwrap();

    // A tenth covered: the compaction rewrites the nine tenths that stay.
    engine.advance_watermark(200).unwrap();
    let small = engine.reclaim().unwrap();
    assert_eq!(small.values_removed, 200);
    let rewritten = small
        .bytes_rewritten
        .expect("RocksDB measures what it rewrites");
    assert!(
        rewritten >= small.bytes_after / 2 && rewritten <= small.bytes_before,
        "{small:?}"
    );

    // Everything covered: nothing is left to rewrite.
    engine.advance_watermark(2_000).unwrap();
    let all = engine.reclaim().unwrap();
    assert_eq!(all.values_removed, 1_800);
    assert!(all.bytes_rewritten.unwrap() < rewritten / 4, "{all:?}");
    let counters = engine.stats().unwrap().counters;
    assert_eq!(
        counters.reclaim_bytes_rewritten,
        rewritten + all.bytes_rewritten.unwrap()
    );
    assert!(counters.reclaim_bytes_freed >= small.bytes_before - all.bytes_after);
}

#[test]
fn periodic_compaction_reaches_rocksdb() {
    let ctx = RocksDbContext::new(RocksDbContextOptions {
        periodic_compaction_secs: 3_600,
        ..RocksDbContextOptions::default()
    })
    .unwrap();
    let tmp = bucket_dir();
    let engine = RocksDbEngine::open_in(&ctx, tmp.path(), EngineOptions::default()).unwrap();
    // RocksDB writes the options in force to an OPTIONS file: the data column family has it.
    let options: String = std::fs::read_dir(engine.storage().instance_path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("OPTIONS-")
        })
        .map(|p| std::fs::read_to_string(p).unwrap())
        .collect();
    let data_section = options
        .split("[CFOptions \"data\"]")
        .nth(1)
        .and_then(|rest| rest.split("\n[").next())
        .expect("a data column family section");
    assert!(
        data_section.contains("periodic_compaction_seconds=3600"),
        "periodic compaction not set on the data column family"
    );
}

#[test]
fn a_removed_bucket_takes_its_rows_out_of_the_shared_instance_and_no_other() {
    let tmp = tempfile::tempdir().unwrap();
    let ctx = RocksDbContext::for_buckets(4).unwrap();
    let (a_dir, b_dir) = (tmp.path().join("a"), tmp.path().join("b"));
    let options = EngineOptions::default();
    let a = RocksDbEngine::open_in(&ctx, &a_dir, options.clone()).unwrap();
    let b = RocksDbEngine::open_in(&ctx, &b_dir, options.clone()).unwrap();
    put_range(&a, 0..500);
    put_range(&b, 0..500);
    a.advance_watermark(100).unwrap();
    a.compact_to_bottom().unwrap();

    let refused = RocksDbEngine::remove_in(&ctx, &a_dir).unwrap_err();
    assert!(
        refused.to_string().contains("open in this process"),
        "{refused}"
    );
    assert!(present(&a, 499), "a refused removal touches nothing");
    drop(a);
    RocksDbEngine::remove_in(&ctx, &a_dir).unwrap();
    assert!(!a_dir.exists());
    assert!(
        (0..500).all(|i| present(&b, i)),
        "the sibling keeps every row"
    );
    // A directory that is not a RocksDB bucket is refused and left alone.
    let foreign = tmp.path().join("foreign");
    tidemark_disk::layout::claim_directory(&foreign, "sled").unwrap();
    assert!(matches!(
        RocksDbEngine::remove_in(&ctx, &foreign),
        Err(Error::WrongBackend { .. })
    ));
    assert!(foreign.exists());
    drop(b);

    let db = raw_meta_db(&b_dir);
    for name in [DATA_CF, META_CF] {
        let cf = db.cf_handle(name).unwrap();
        let prefixes: std::collections::BTreeSet<u32> = db
            .iterator_cf(cf, rocksdb::IteratorMode::Start)
            .map(|row| BucketPrefix::split(&row.unwrap().0).unwrap().0.0)
            .collect();
        // Prefix 0 was the removed bucket's; u32::MAX holds the instance's own rows.
        assert!(!prefixes.contains(&0), "{name}: {prefixes:?}");
        assert!(prefixes.contains(&1), "{name}: {prefixes:?}");
    }
}

#[test]
fn small_sibling_buckets_share_their_table_files_after_reclaims() {
    let tmp = tempfile::tempdir().unwrap();
    let ctx = RocksDbContext::for_buckets(50).unwrap();
    let engines: Vec<RocksDbEngine> = (0..50)
        .map(|i| {
            let engine = RocksDbEngine::open_in(
                &ctx,
                &tmp.path().join(format!("b{i}")),
                EngineOptions::default(),
            )
            .unwrap();
            put_range(&engine, 0..100);
            engine.advance_watermark(10).unwrap();
            engine.reclaim().unwrap();
            engine
        })
        .collect();
    // Each reclaim compacts its bucket's range together with its small neighbours, so fifty
    // reclaimed buckets of a few KiB do not leave fifty table files.
    let files: u64 = engines[49].data_files_per_level().unwrap().iter().sum();
    assert!(files <= 2, "{files} table files for 50 small buckets");
    for engine in &engines {
        assert!(!present(engine, 9) && present(engine, 10) && present(engine, 99));
    }
}
