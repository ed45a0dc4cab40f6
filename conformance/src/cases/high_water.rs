//! The high-water record beside the marker: a store never reopens older than it, and a store
//! that lived in a directory is never replaced by a new, empty one.

use std::path::Path;

use tidemark_disk::high_water::{self, HIGH_WATER_FILE, HighWater};
use tidemark_engine_api::{Engine, EngineOptions, Error, OpenMode};

use super::util::{assert_lookup, value};
use crate::{EngineFactory, Harness};

const MODES: [OpenMode; 3] = [
    OpenMode::CreateIfMissing,
    OpenMode::MustExist,
    OpenMode::ReadOnly,
];

fn options(mode: OpenMode) -> EngineOptions {
    EngineOptions::default().with_open_mode(mode)
}

/// Opens `dir` in every mode and asserts each open fails with an error `is_expected` accepts
/// (named `expected` in failures) whose message names the high-water record.
#[track_caller]
fn assert_refused<F: EngineFactory>(
    factory: &F,
    dir: &Path,
    expected: &str,
    is_expected: fn(&Error) -> bool,
) {
    for mode in MODES {
        match factory.open(dir, options(mode)) {
            Err(err) if is_expected(&err) => {
                assert!(err.to_string().contains(HIGH_WATER_FILE), "{err}");
            }
            Err(other) => panic!("{mode:?}: expected {expected}, got {other}"),
            Ok(_) => panic!("{mode:?}: expected {expected}, but the store opened"),
        }
    }
}

/// The record follows every watermark change, flush and close; an engine state below it (here
/// made by raising the record past what the engine holds, as a truncated log would leave the
/// engine below an honest record) is `RolledBack` in every open mode, and a damaged record is
/// `Damaged`, both naming the file; a deleted record is written again and protects from there.
pub fn high_water_record_refuses_rollback<F: EngineFactory>(factory: F) {
    let mut h = Harness::new(factory);
    let dir = h.path().to_path_buf();
    let recorded = || high_water::read(&dir).unwrap();
    assert_eq!(
        recorded(),
        Some(HighWater::default()),
        "a new store is recorded at open"
    );
    let recorded_as = |watermark, applied_end| {
        Some(HighWater {
            watermark,
            applied_end,
        })
    };
    let e = h.engine();
    e.put(b"k", b"v", 4).unwrap();
    e.advance_watermark(3).unwrap();
    assert_eq!(recorded(), recorded_as(3, 5));
    e.put(b"k", b"w", 7).unwrap();
    e.flush().unwrap();
    assert_eq!(recorded(), recorded_as(3, 8));
    e.put(b"k", b"x", 9).unwrap();
    e.adopt_lake_watermark(12).unwrap();
    assert_eq!(recorded(), recorded_as(12, 10));
    e.put(b"z", b"z", 12).unwrap();
    h.close();
    let closed = HighWater {
        watermark: 12,
        applied_end: 13,
    };
    assert_eq!(
        recorded(),
        Some(closed),
        "a clean close records the final state"
    );

    for ahead in [
        HighWater {
            watermark: 13,
            ..closed
        },
        HighWater {
            applied_end: 14,
            ..closed
        },
    ] {
        high_water::write(&dir, &ahead).unwrap();
        assert_refused(h.factory(), &dir, "RolledBack", |e| {
            matches!(e, Error::RolledBack { .. })
        });
    }
    let path = dir.join(HIGH_WATER_FILE);
    for bad in [
        &b""[..],
        &[0u8; 64][..],
        b"watermark=12\napplied_end=13\ncrc32=00000000\n",
    ] {
        std::fs::write(&path, bad).unwrap();
        assert_refused(h.factory(), &dir, "Damaged", |e| {
            matches!(e, Error::Damaged { .. })
        });
    }
    std::fs::remove_file(&path).unwrap();
    let e = h.reopen();
    assert_eq!((e.watermark(), e.applied_end()), (12, 13));
    assert_lookup(e, b"z", &value(12, "z"));
    assert_eq!(
        recorded(),
        Some(closed),
        "a writable open records a missing record again"
    );
}
