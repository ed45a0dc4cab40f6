//! The tag-threshold filter inside real fjall compactions.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use fjall::{Database, Keyspace, KeyspaceCreateOptions};
use tidemark_backend_fjall::{FilterCounters, TagThresholdFilterFactory, ThresholdSupplier};
use tidemark_engine_api::codec::{encode_tombstone, encode_value};

const DATA: &str = "data";

struct Guarded {
    _dir: tempfile::TempDir,
    db: Database,
    data: Keyspace,
    limit: Arc<AtomicU64>,
    counters: Arc<FilterCounters>,
}

/// A database whose `data` keyspace is guarded by the filter with the limit in `limit`
/// (0 supplies nothing).
fn guarded() -> Result<Guarded, Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let limit = Arc::new(AtomicU64::new(0));
    let counters = Arc::new(FilterCounters::default());
    let supplier: ThresholdSupplier = {
        let limit = Arc::clone(&limit);
        Arc::new(move || Some(limit.load(Ordering::SeqCst)).filter(|l| *l > 0))
    };
    let factory =
        Arc::new(TagThresholdFilterFactory::new(0, supplier).with_counters(Arc::clone(&counters)));
    let db = Database::builder(dir.path())
        .with_compaction_filter_factories(Arc::new(move |name: &str| {
            (name == DATA)
                .then(|| Arc::clone(&factory) as Arc<dyn fjall::compaction::filter::Factory>)
        }))
        .open()?;
    let data = db.keyspace(DATA, KeyspaceCreateOptions::default)?;
    Ok(Guarded {
        _dir: dir,
        db,
        data,
        limit,
        counters,
    })
}

#[test]
fn a_major_compaction_removes_covered_values_and_tombstones_only()
-> Result<(), Box<dyn std::error::Error>> {
    let g = guarded()?;
    for tag in 1..=10u64 {
        let key = tag.to_be_bytes();
        g.data.insert(key, encode_value(&key, tag, b"v"))?;
    }
    let dead = 11u64.to_be_bytes();
    g.data.insert(dead, encode_tombstone(&dead, 11))?;
    g.data.rotate_memtable_and_wait()?;

    g.limit.store(5, Ordering::SeqCst);
    g.data.major_compact()?;
    for tag in 1..=10u64 {
        assert_eq!(
            g.data.get(tag.to_be_bytes())?.is_some(),
            tag > 5,
            "tag {tag}"
        );
    }
    assert!(g.data.get(dead)?.is_some());
    g.limit.store(11, Ordering::SeqCst);
    g.data.major_compact()?;
    assert!(g.data.get(dead)?.is_none());
    let c = g.counters.snapshot();
    assert_eq!((c.removed_values, c.removed_tombstones), (10, 1));
    drop(g.db);
    Ok(())
}

#[test]
fn removing_a_newer_version_never_resurrects_an_older_one() -> Result<(), Box<dyn std::error::Error>>
{
    let g = guarded()?;
    let key = b"k";
    g.data.insert(key, encode_value(key, 100, b"old"))?;
    g.data.rotate_memtable_and_wait()?;
    g.data.major_compact()?;
    // The newer version is covered by the limit, the older one (tag 100) is not; removing the
    // newer one must leave a deletion, not bring the older one back.
    g.data.insert(key, encode_value(key, 3, b"new"))?;
    g.data.rotate_memtable_and_wait()?;
    g.limit.store(5, Ordering::SeqCst);
    g.data.major_compact()?;
    assert!(g.data.get(key)?.is_none(), "an older version reappeared");
    Ok(())
}

#[test]
fn corrupt_values_are_kept_and_counted() -> Result<(), Box<dyn std::error::Error>> {
    let g = guarded()?;
    // An unknown kind byte, and a value kind too short to hold its tag.
    g.data.insert(b"bad", b"\x07\0\0\0\0\0\0\0\x01".to_vec())?;
    g.data.insert(b"short", b"\x01\0\0".to_vec())?;
    g.data.rotate_memtable_and_wait()?;
    g.limit.store(u64::MAX, Ordering::SeqCst);
    g.data.major_compact()?;
    assert!(g.data.get(b"bad")?.is_some());
    assert!(g.data.get(b"short")?.is_some());
    let c = g.counters.snapshot();
    assert_eq!((c.kept_corrupt, c.removed_values), (2, 0));
    Ok(())
}
