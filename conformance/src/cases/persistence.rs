//! Reopening: data, watermark and applied end survive; reclaim works after reopen; directories.

use engine_api::{Engine, LocalLookup, Record};

use super::util::{assert_lookup, batch, tombstone, value};
use crate::{EngineFactory, Harness};

/// Reopen restores values, tombstones, misses, the watermark and the applied end.
pub fn reopen_restores_data<F: EngineFactory>(factory: F) {
    let mut h = Harness::new(factory);
    let e = h.engine();
    e.apply(&batch([
        Record::put(b"a".to_vec(), b"1".to_vec(), 0),
        Record::put(vec![0u8, 0xff], vec![0xffu8, 0], 1),
        Record::delete(b"gone".to_vec(), 2),
    ]))
    .unwrap();
    e.put(b"a", b"2", 5).unwrap();
    e.advance_watermark(3).unwrap();
    let e = h.reopen();
    assert_eq!(e.watermark(), 3);
    assert_eq!(e.applied_end(), 6);
    assert_lookup(e, b"a", &value(5, "2"));
    assert_lookup(e, &[0, 0xff], &value(1, vec![0xffu8, 0]));
    assert_lookup(e, b"gone", &tombstone(2));
    assert_lookup(e, b"never", &LocalLookup::Miss);
    let s = e.stats().unwrap();
    assert_eq!((s.watermark, s.applied_end), (3, 6));
}
