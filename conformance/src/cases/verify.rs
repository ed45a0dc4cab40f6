//! The offline consistency check (§ Engine contract / verify): a consistent store is clean and
//! counted; each kind of damage is found, with its keys, and nothing else; nothing is changed.

use tidemark_disk::offset_index::index_key;
use tidemark_engine_api::{Damage, Engine, Record, VerifyReport, codec};

use super::util::apply;
use crate::{EngineFactory, Harness};

/// Runs `verify` twice and checks it changed nothing: the same report, `W` and applied end.
fn verify_twice<E: Engine>(e: &E) -> VerifyReport {
    let positions = (e.watermark(), e.applied_end());
    let first = e.verify().unwrap();
    assert_eq!(
        e.verify().unwrap(),
        first,
        "a second verify saw another store"
    );
    assert_eq!((e.watermark(), e.applied_end()), positions);
    assert_eq!((first.watermark, first.applied_end), positions);
    first
}

/// The damage `report` found, as `(kind, count, example keys)`.
fn found(report: &VerifyReport) -> Vec<(Damage, u64, Vec<Vec<u8>>)> {
    report
        .findings
        .iter()
        .map(|f| {
            let keys = f.examples.iter().map(|x| x.key.clone()).collect();
            (f.damage, f.count, keys)
        })
        .collect()
}

fn keys(list: &[&[u8]]) -> Vec<Vec<u8>> {
    list.iter().map(|k| k.to_vec()).collect()
}

/// The sample store: values and tombstones, a key overwritten (a stale index row where there is
/// an index), a reclaim behind `W`, and one covered entry left for the next reclaim.
fn write_sample<E: Engine>(e: &E) {
    apply(
        e,
        [
            Record::put(b"a", b"1", 0),
            Record::delete(b"b", 1),
            Record::put(b"c", b"3", 2),
        ],
    );
    e.advance_watermark(2).unwrap();
    e.reclaim().unwrap();
    apply(
        e,
        [
            Record::put(b"k", b"old", 3),
            Record::put(b"k", b"new", 5),
            Record::delete(b"t", 6),
            Record::put(b"u", b"", 7),
        ],
    );
    e.advance_watermark(3).unwrap();
}

/// A consistent store is clean: every entry counted as a value or tombstone, the covered ones
/// counted, and where there is an offset index, every row read and the stale one told apart
/// from damage.
pub fn verify_clean_store<F: EngineFactory>(factory: F) {
    let h = Harness::new(factory);
    let e = h.engine();
    let empty = verify_twice(e);
    assert!(empty.is_clean(), "{empty:?}");
    assert_eq!((empty.values, empty.tombstones, empty.covered), (0, 0, 0));

    write_sample(e);
    let r = verify_twice(e);
    assert!(r.is_clean(), "a consistent store has damage: {r:?}");
    assert_eq!(r.backend, e.backend_name());
    assert_eq!((r.watermark, r.applied_end), (3, 8));
    assert!(!r.watermark_above_applied_end());
    // The first reclaim (W = 2) removed a@0 and b@1: c@2, k@5, u@7 and the tombstone t@6 stay.
    assert_eq!((r.values, r.tombstones), (3, 1), "{r:?}");
    // c@2 is below W = 3 and not reclaimed yet (RocksDB's own compactions may have done it).
    if !h.capabilities().declared.background_reclaim {
        assert_eq!(r.covered, 1, "{r:?}");
    }
    if h.capabilities().declared.offset_index {
        // c@2, k@3 (stale: k now holds 5), k@5, t@6, u@7.
        assert_eq!((r.index_rows, r.stale_index_rows), (Some(5), 1), "{r:?}");
    } else {
        assert_eq!((r.index_rows, r.stale_index_rows), (None, 0), "{r:?}");
    }
}

/// Every stored value that does not decode is found (counted, first keys in key order, the
/// reason given), and nothing else is reported; the entries are still there afterwards.
pub fn verify_finds_undecodable_values<F: EngineFactory>(factory: F) {
    let h = Harness::new(factory);
    let e = h.engine();
    write_sample(e);
    h.inject_raw(b"bad-kind", &[0x03, 0, 0, 0, 0, 0, 0, 0, 1]);
    h.inject_raw(b"empty", &[]);
    h.inject_raw(b"short", &[codec::KIND_VALUE, 0, 0]);
    let r = verify_twice(e);
    assert_eq!(
        found(&r),
        [(
            Damage::UndecodableValue,
            3,
            keys(&[b"bad-kind", b"empty", b"short"])
        )],
        "{r:?}"
    );
    let example = &r.findings[0].examples[0];
    assert!(example.detail.contains("unknown kind"), "{example:?}");
    assert_eq!(r.damaged(), 3);
    assert_eq!((r.values, r.tombstones), (3, 1), "{r:?}");
    assert!(e.lookup(b"short").is_err(), "verify must not repair");
}

/// Every entry tagged at or above the applied end — a write the store's progress says never
/// happened — is found, and nothing else.
pub fn verify_finds_tags_at_or_above_applied_end<F: EngineFactory>(factory: F) {
    let h = Harness::new(factory);
    let e = h.engine();
    write_sample(e);
    let end = e.applied_end();
    h.inject_raw(b"at-end", &codec::encode_value(b"at-end", end, b"x"));
    h.inject_raw(b"far", &codec::encode_tombstone(b"far", end + 100));
    h.inject_raw(
        b"just-below",
        &codec::encode_value(b"just-below", end - 1, b"x"),
    );
    let r = verify_twice(e);
    assert_eq!(
        found(&r),
        [(
            Damage::TagAtOrAboveAppliedEnd,
            2,
            keys(&[b"at-end", b"far"])
        )],
        "{r:?}"
    );
    assert!(
        r.findings[0].examples[0]
            .detail
            .contains(&format!(">= applied end {end}")),
        "{r:?}"
    );
}

/// `W` above the applied end (an adopted lake end: a lagging replica) is reported but is not
/// damage; every entry is then below `W`.
pub fn verify_reports_lagging_watermark_without_damage<F: EngineFactory>(factory: F) {
    let h = Harness::new(factory);
    let e = h.engine();
    write_sample(e);
    e.adopt_lake_watermark(20).unwrap();
    let r = verify_twice(e);
    assert!(r.is_clean(), "{r:?}");
    assert!(r.watermark_above_applied_end());
    assert_eq!((r.watermark, r.applied_end), (20, 8));
    if !h.capabilities().declared.background_reclaim {
        assert_eq!(r.covered, r.values + r.tombstones, "{r:?}");
    }
}

/// Where the store keeps an offset index, each disagreement between the index and the data is
/// found with its key: an index row too short to parse, one naming a key with no data row, one
/// naming a newer write than the data row holds, and a data row whose index row is gone.
pub fn verify_finds_index_damage<F: EngineFactory>(factory: F) {
    let h = Harness::new(factory);
    let f = h.factory();
    let e = h.engine();
    write_sample(e);
    f.inject_index_row(e, &[0, 1, 2]).unwrap();
    f.inject_index_row(e, &index_key(4, b"ghost")).unwrap();
    f.inject_index_row(e, &index_key(6, b"k")).unwrap();
    assert!(f.remove_index_row(e, &index_key(7, b"u")).unwrap());
    let r = verify_twice(e);
    assert_eq!(
        found(&r),
        [
            (Damage::UnparsableIndexRow, 1, vec![vec![0, 1, 2]]),
            (Damage::IndexRowWithoutData, 2, keys(&[b"ghost", b"k"])),
            (Damage::DataRowWithoutIndexRow, 1, keys(&[b"u"])),
        ],
        "{r:?}"
    );
    assert_eq!(r.index_rows, Some(7), "{r:?}");
}
