//! RocksDB's own check in `verify`: every block is read with its checksum verified, so a table
//! file damaged on disk is a finding (with the last key read before it), on a store opened
//! read-only.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

mod common;

use common::bucket_dir;

use std::path::Path;
use tidemark_backend_rocksdb::RocksDbDiagnostics;

use tidemark_backend_rocksdb::RocksDbEngine;
use tidemark_backend_rocksdb::testing::damage_a_data_block;
use tidemark_engine_api::{Damage, Engine, EngineOptions, OpenEngine, OpenMode, WriteBatch};
use tidemark_test_support::rng::SplitMix64;

const KEYS: u64 = 2_000;

/// A store whose data sits in one table file at the bottom level: incompressible values, so the
/// data blocks fill most of the file, ahead of the index, the filter and the footer.
fn write_store(dir: &Path) {
    let engine = RocksDbEngine::open(dir, EngineOptions::default()).unwrap();
    let mut rng = SplitMix64::new(15);
    let mut batch = WriteBatch::new();
    for i in 0..KEYS {
        batch.put(format!("k{i:05}"), rng.bytes(200), i);
    }
    engine.apply(&batch).unwrap();
    engine.compact_to_bottom().unwrap();
}

fn read_only(dir: &Path) -> RocksDbEngine {
    let options = EngineOptions::default().with_open_mode(OpenMode::ReadOnly);
    RocksDbEngine::open(dir, options).unwrap()
}

#[test]
fn a_clean_store_passes_the_checksum_check() {
    let tmp = bucket_dir();
    write_store(tmp.path());
    let report = read_only(tmp.path()).verify().unwrap();
    assert!(report.is_clean(), "{report:?}");
    assert_eq!(report.values, KEYS);
    assert_eq!(report.engine_checks.len(), 1, "{report:?}");
    assert!(report.engine_checks[0].contains("checksum"), "{report:?}");
}

#[test]
fn a_damaged_data_block_is_a_finding_not_an_error() {
    let tmp = bucket_dir();
    write_store(tmp.path());
    damage_a_data_block(tmp.path()).unwrap();

    let engine = read_only(tmp.path());
    let report = engine.verify().unwrap();
    let finding = report
        .finding(Damage::EngineCheckFailed)
        .unwrap_or_else(|| panic!("the damaged block was not found: {report:?}"));
    assert_eq!(finding.count, 1, "{report:?}");
    let example = &finding.examples[0];
    assert!(
        example.detail.contains("checksum") || example.detail.contains("Corruption"),
        "{example:?}"
    );
    // The scan stopped in the damaged block, after the keys before it.
    assert!(report.values < KEYS, "{report:?}");
    assert!(example.key.starts_with(b"k"), "{example:?}");
    assert_eq!(report.findings.len(), 1, "{report:?}");
}
