//! What the many-bucket scenarios (scale, descriptor headroom) check of each bucket they open:
//! a reclaim that removes exactly what is covered, and every record's lookup.

use tidemark_engine_api::{Engine, Error, LocalLookup, Result};

/// Advances `W` to `w` and reclaims; the reclaim must remove exactly the `w` entries below it
/// (the buckets of the scale and headroom tests hold one entry per offset from 0).
pub(crate) fn advance_and_reclaim_exactly<E: Engine>(engine: &E, w: u64) -> Result<()> {
    engine.advance_watermark(w)?;
    let removed = engine.reclaim()?.removed();
    if removed != w {
        return Err(Error::Internal(format!(
            "reclaim below {w} removed {removed} entries"
        )));
    }
    Ok(())
}

/// Asserts that the lookup of `key`, record `j` of bucket `i`, finds `expected`.
#[track_caller]
pub(crate) fn assert_record<E: Engine>(
    name: &str,
    engine: &E,
    i: usize,
    j: u64,
    key: &[u8],
    expected: &LocalLookup,
) {
    let found = engine
        .lookup(key)
        .unwrap_or_else(|e| panic!("{name}: bucket {i} lookup {j}: {e}"));
    assert_eq!(&found, expected, "{name}: bucket {i} record {j}");
}
