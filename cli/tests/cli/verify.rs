//! `tidemark verify`: a clean store exits 0; each kind of damage, planted in a real store, is
//! found with its key and makes the exit status 1, in text and in JSON that parses back.

use std::path::Path;

use tidemark::{Engine, WriteBatch};
use tidemark_conformance::cases::util::noise;
use tidemark_conformance::factories::DiskFactory;
use tidemark_conformance::{EngineFactory, Harness};
use tidemark_disk::offset_index::index_key;
use tidemark_engine_api::codec;

use crate::support::{arg, release_sled_lock, tidemark};

/// The store every case starts from: values, a tombstone, an overwritten key, `W = 2`.
fn sample<E: Engine>(e: &E) {
    let mut batch = WriteBatch::new();
    batch
        .put("a", "1", 0)
        .put("k", "old", 1)
        .put("k", "new", 2)
        .delete("t", 3)
        .put("u", "", 4);
    e.apply(&batch).unwrap();
    e.advance_watermark(2).unwrap();
}

/// A way to damage a store, and what `verify` must say about it.
struct Plant<F: EngineFactory> {
    kind: &'static str,
    key: &'static str,
    plant: fn(&Harness<F>),
}

/// Runs `verify` (JSON, then text) on the closed store at `dir` and checks it found exactly
/// `kind` once, naming `key`, exited 1 and changed nothing it cannot have changed.
#[track_caller]
fn assert_found(dir: &Path, kind: &str, key: &str) {
    let run = tidemark(&["verify", "--json", arg(dir)]);
    assert_eq!(run.code, Some(1), "{kind}: {run:?}");
    let v = run.json();
    assert_eq!(v["schema"], "tidemark.verify/1");
    assert_eq!(
        (&v["clean"], &v["damaged"]),
        (&false.into(), &1.into()),
        "{v}"
    );
    let findings = v["findings"].as_array().unwrap();
    assert_eq!(findings.len(), 1, "{kind}: {v}");
    let f = &findings[0];
    assert_eq!((&f["kind"], &f["count"]), (&kind.into(), &1.into()), "{v}");
    assert!(f["description"].is_string(), "{v}");
    let example = &f["examples"][0];
    assert_eq!(example["key"], key, "{kind}: {v}");
    assert!(
        example["key_hex"].is_string() && example["detail"].is_string(),
        "{v}"
    );

    let text = tidemark(&["verify", arg(dir)]);
    assert_eq!(text.code, Some(1), "{text:?}");
    assert!(
        text.stdout.contains("DAMAGED: 1 entries"),
        "{}",
        text.stdout
    );
    assert!(
        text.stdout.contains(&format!("1 {kind}: ")),
        "{}",
        text.stdout
    );
    assert!(
        text.stdout.contains(&format!("      {key}: ")),
        "{}",
        text.stdout
    );
}

fn plants<F: EngineFactory>() -> Vec<Plant<F>> {
    let mut out = vec![
        Plant {
            kind: "undecodable_value",
            key: "\"rotten\"",
            plant: |h| h.inject_raw(b"rotten", &[0xee, 1, 2]),
        },
        Plant {
            kind: "tag_at_or_above_applied_end",
            key: "\"future\"",
            plant: |h| h.inject_raw(b"future", &codec::encode_value(b"future", 99, b"x")),
        },
    ];
    if F::NAME != "rocksdb" {
        out.extend([
            Plant {
                kind: "unparsable_index_row",
                key: "0x0102",
                plant: |h: &Harness<F>| h.factory().inject_index_row(h.engine(), &[1, 2]).unwrap(),
            },
            Plant {
                kind: "index_row_without_data",
                key: "\"ghost\"",
                plant: |h: &Harness<F>| {
                    let row = index_key(1, b"ghost");
                    h.factory().inject_index_row(h.engine(), &row).unwrap()
                },
            },
            Plant {
                kind: "data_row_without_index_row",
                key: "\"u\"",
                plant: |h: &Harness<F>| {
                    let row = index_key(4, b"u");
                    assert!(h.factory().remove_index_row(h.engine(), &row).unwrap());
                },
            },
        ]);
    }
    out
}

fn every_damage_kind_is_found<F: EngineFactory + Clone>(factory: F) {
    let mut clean = Harness::new(factory.clone());
    sample(clean.engine());
    clean.close();
    release_sled_lock(clean.path());
    let run = tidemark(&["verify", "--json", arg(clean.path())]).success();
    let v = run.json();
    assert_eq!(
        (&v["clean"], &v["damaged"]),
        (&true.into(), &0.into()),
        "{v}"
    );
    assert_eq!(
        (v["values"].as_u64(), v["tombstones"].as_u64()),
        (Some(3), Some(1)),
        "{v}"
    );
    let text = tidemark(&["verify", arg(clean.path())]);
    assert_eq!(text.code, Some(0), "{text:?}");
    assert!(
        text.stdout.contains("result         clean"),
        "{}",
        text.stdout
    );

    for plant in plants::<F>() {
        let mut h = Harness::new(factory.clone());
        sample(h.engine());
        (plant.plant)(&h);
        h.close();
        release_sled_lock(h.path());
        assert_found(h.path(), plant.kind, plant.key);
    }
}

#[test]
fn sled_damage_is_found() {
    every_damage_kind_is_found(DiskFactory::<tidemark::sled::SledStorage>::new());
}

#[test]
fn redb_damage_is_found() {
    every_damage_kind_is_found(DiskFactory::<tidemark::redb::RedbStorage>::new());
}

#[test]
fn rocksdb_damage_is_found() {
    every_damage_kind_is_found(DiskFactory::<tidemark::rocksdb::RocksDbStorage>::new());
}

#[test]
fn a_rocksdb_table_file_damaged_on_disk_fails_its_checksum() {
    let mut h = Harness::new(DiskFactory::<tidemark::rocksdb::RocksDbStorage>::new());
    let mut batch = WriteBatch::new();
    for i in 0..2_000u64 {
        batch.put(format!("k{i:05}"), noise(i, 200), i);
    }
    h.engine().apply(&batch).unwrap();
    h.factory().settle(h.engine()).unwrap();
    h.close();
    tidemark::rocksdb::testing::damage_a_data_block(h.path()).unwrap();

    let run = tidemark(&["verify", "--json", arg(h.path())]);
    assert_eq!(run.code, Some(1), "{run:?}");
    let v = run.json();
    let f = &v["findings"][0];
    assert_eq!(f["kind"], "engine_check_failed", "{v}");
    assert!(
        f["examples"][0]["detail"]
            .as_str()
            .unwrap()
            .contains("data: "),
        "{v}"
    );
    assert!(v["values"].as_u64().unwrap() < 2_000, "{v}");
}

#[test]
fn a_lagging_watermark_is_reported_but_is_not_damage() {
    let mut h = Harness::new(DiskFactory::<tidemark::redb::RedbStorage>::new());
    sample(h.engine());
    h.engine().adopt_lake_watermark(50).unwrap();
    h.close();
    let run = tidemark(&["verify", "--json", arg(h.path())]).success();
    let v = run.json();
    assert_eq!(
        (&v["clean"], &v["watermark_above_applied_end"]),
        (&true.into(), &true.into())
    );
    let text = tidemark(&["verify", arg(h.path())]);
    assert!(
        text.stdout.contains("above the applied end"),
        "{}",
        text.stdout
    );
}
