//! When a bucket is rebuilt into a fresh sled database: the *growth* and *garbage* rules
//! ([`due`]) and the sizes they measure from ([`Rebuilt`]).

/// By default a rebuild runs once the database is at least this large
/// ([`crate::SledContextOptions::rebuild_min_bytes`]): below it the engine's own footprint
/// dominates and a rebuild could not free enough to pay for itself. The garbage trigger
/// (`due`) does not wait for it.
pub const MIN_REBUILD_BYTES: u64 = 4 << 20;

/// By default a rebuild runs once the database has grown to this multiple of what a fresh copy of
/// its live rows would take (before the first rebuild in a process: once it reaches
/// [`MIN_REBUILD_BYTES`]; see `due` for how a fresh copy is estimated)
/// ([`crate::SledContextOptions::rebuild_growth`]). The copy's cost is the live data, so
/// rebuilding at a fixed multiple of it keeps the amortised cost per byte written constant,
/// while the bytes on disk stay below this multiple of a fresh copy.
pub const REBUILD_GROWTH: f64 = 2.0;

/// At least what sled 0.34's files take for a database that holds nothing (its three trees and
/// the meta rows, flushed): sled counts the log only as far as it is written, and a fresh store
/// measured 429 bytes (the test `an_empty_store_takes_what_the_garbage_trigger_assumes`); 64 KiB
/// leaves room for the meta rows a drained store keeps. The garbage trigger (`due`) takes it
/// as the size of a fresh copy of no rows, and as the fixed part of a copy's size.
pub const EMPTY_STORE_BYTES: u64 = 64 << 10;

/// The garbage trigger fires only when a rebuild would free at least this much: below it the
/// copy is not worth its fixed cost (a new database, its syncs, the switch).
pub const MIN_GARBAGE_BYTES: u64 = 1 << 20;

/// A rebuild is never due before the database has grown to this multiple of its size right
/// after the last rebuild (or to `rebuild_growth`, when that is smaller): the growth rule
/// measures from the smallest copy seen, and a copy that came out larger than that (sled seals
/// its segments at other points when its I/O threads run at other moments) must not call for
/// another copy straight away.
const MIN_REBUILD_STEP: f64 = 1.25;

/// The database right after the last rebuild: its size and the rows it held (zeros before the
/// first rebuild since open), and the copy with the fewest bytes per row seen since open.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Rebuilt {
    pub(crate) size: u64,
    pub(crate) rows: u64,
    /// The copy that took the fewest bytes per row since open: `(size, rows)`.
    pub(crate) best: (u64, u64),
}

impl Rebuilt {
    /// The bookkeeping after a rebuild that came out at `size` bytes for `rows` rows.
    pub(crate) fn after(self, size: u64, rows: u64) -> Rebuilt {
        let (best_size, best_rows) = self.best;
        // Only a copy well above the empty store measures what a row takes.
        let measures = rows > 0 && size >= EMPTY_STORE_BYTES + MIN_GARBAGE_BYTES;
        // Fewer bytes per row: size / rows < best_size / best_rows, without division.
        let smaller = best_rows == 0
            || u128::from(size.saturating_sub(EMPTY_STORE_BYTES)) * u128::from(best_rows)
                < u128::from(best_size.saturating_sub(EMPTY_STORE_BYTES)) * u128::from(rows);
        Rebuilt {
            size,
            rows,
            best: if measures && smaller {
                (size, rows)
            } else {
                self.best
            },
        }
    }

    /// What a fresh copy of `live` rows would take, judged from the last copy
    /// ([`fresh_size`]).
    fn fresh_as_last(self, live: u64) -> Option<u64> {
        fresh_size(live, (self.size, self.rows))
    }

    /// What a fresh copy of `live` rows would take, judged from the smallest copy seen
    /// ([`fresh_size`]).
    fn fresh_as_best(self, live: u64) -> Option<u64> {
        fresh_size(live, self.best)
    }
}

/// What a fresh copy of `live` rows would take: [`EMPTY_STORE_BYTES`], plus, per row, what each
/// row took in a copy of `rows` rows that came out at `size` bytes. Without such a copy (before
/// any rebuild) the per-row figure is unknown and only an empty store is estimated (the growth
/// rule covers the rest).
fn fresh_size(live: u64, (size, rows): (u64, u64)) -> Option<u64> {
    if live == 0 {
        return Some(EMPTY_STORE_BYTES);
    }
    if rows == 0 {
        return None;
    }
    let per_row = size.saturating_sub(EMPTY_STORE_BYTES) as f64 / rows as f64;
    // f64 is exact to 2^53 bytes; beyond, the estimate is off by less than a part in 10^15.
    Some(EMPTY_STORE_BYTES.saturating_add((per_row * live as f64) as u64))
}

/// Whether a database of `size` bytes holding `live` rows is due for a rebuild, given the
/// database right after the last one, the smallest size the growth rule rebuilds
/// (`u64::MAX`: never rebuild) and the growth that calls for one.
///
/// Two rules, either suffices:
/// - *growth*: `size >= min_bytes` and `size >= growth ×` a fresh copy of the live rows (the
///   smaller of the size after the last rebuild and [`Rebuilt::fresh_as_best`]), but never
///   before the database grew by [`MIN_REBUILD_STEP`] since the last rebuild (any size from
///   `min_bytes` before the first): the steady state, where the window stays and sled's files
///   grow with what goes through. Measuring from the smallest copy keeps one large copy from
///   lifting the whole next tooth of the sawtooth;
/// - *garbage*: `size >= growth ×` what a fresh copy of the live rows would take, judged from
///   the last copy ([`Rebuilt::fresh_as_last`]), and a rebuild would free at least
///   [`MIN_GARBAGE_BYTES`]: the live rows shrank (a bucket the lake covered and a reclaim
///   emptied), so most of the files are garbage although they did not grow. With a steady
///   window the estimate is the size after the last rebuild, so the rule cannot call for a copy
///   right after one.
pub(crate) fn due(size: u64, rebuilt: Rebuilt, live: u64, min_bytes: u64, growth: f64) -> bool {
    if min_bytes == u64::MAX {
        return false;
    }
    let base = rebuilt
        .fresh_as_best(live)
        .map_or(rebuilt.size, |fresh| fresh.min(rebuilt.size));
    // f64 is exact to 2^53 bytes; beyond, the comparisons are off by less than a part in 10^15.
    let grown = size >= min_bytes
        && size as f64 >= base as f64 * growth
        && size as f64 >= rebuilt.size as f64 * growth.min(MIN_REBUILD_STEP);
    let garbage = rebuilt.fresh_as_last(live).is_some_and(|fresh| {
        size as f64 >= fresh as f64 * growth && size >= fresh.saturating_add(MIN_GARBAGE_BYTES)
    });
    grown || garbage
}

#[cfg(test)]
mod tests {
    use super::*;

    const NONE: Rebuilt = Rebuilt {
        size: 0,
        rows: 0,
        best: (0, 0),
    };

    #[test]
    fn a_rebuild_is_due_from_the_minimum_size_and_then_at_each_doubling() {
        let (min, growth) = (MIN_REBUILD_BYTES, REBUILD_GROWTH);
        let live = 1_000_000;
        assert!(!due(min - 1, NONE, live, min, growth));
        assert!(due(min, NONE, live, min, growth));
        let rebuilt = NONE.after(3 * min, live);
        assert!(!due(2 * rebuilt.size - 1, rebuilt, live, min, growth));
        assert!(due(2 * rebuilt.size, rebuilt, live, min, growth));
        assert!(
            due(rebuilt.size, rebuilt, live, min, 1.0),
            "growth 1: every reclaim"
        );
        assert!(
            !due(u64::MAX - 1, NONE, 0, u64::MAX, growth),
            "u64::MAX turns rebuilds off"
        );
    }

    #[test]
    fn the_garbage_trigger_fires_when_the_live_rows_shrank_not_on_a_steady_window() {
        let (min, growth) = (MIN_REBUILD_BYTES, REBUILD_GROWTH);
        let rebuilt = NONE.after(40 << 20, 100_000);
        // A steady window: the estimate is the size after the last rebuild, so it fires where
        // the growth rule does, not before.
        assert!(!due(
            2 * rebuilt.size - 1,
            rebuilt,
            rebuilt.rows,
            min,
            growth
        ));
        // A tenth of the rows left: a fresh copy takes about a tenth, so the files are mostly
        // garbage although they did not grow.
        assert!(due(rebuilt.size, rebuilt, rebuilt.rows / 10, min, growth));
        // Drained: rebuilt whenever a rebuild frees at least the minimum, below `min_bytes`
        // too, and before any rebuild since open.
        let small = EMPTY_STORE_BYTES + MIN_GARBAGE_BYTES;
        assert!(due(small.max(2 * EMPTY_STORE_BYTES), NONE, 0, min, growth));
        assert!(!due(small - 1, NONE, 0, min, growth));
        assert!(!due(2 * EMPTY_STORE_BYTES - 1, NONE, 0, min, growth));
        // Before any rebuild with rows left, only the growth rule can tell.
        assert!(!due(min - 1, NONE, 1, min, growth));
    }

    #[test]
    fn the_growth_rule_measures_from_the_smallest_copy_but_never_calls_for_one_straight_away() {
        let (min, growth) = (MIN_REBUILD_BYTES, REBUILD_GROWTH);
        let rows = 14_000;
        let small = 8 << 20;
        // The same rows came out twice as large in the next copy.
        let rebuilt = NONE.after(small, rows).after(2 * small, rows);
        assert_eq!(rebuilt.best, (small, rows));
        // Measured from the smallest copy (2 × 8 MiB), but not before the database grew by the
        // minimum step since the large copy: not at 16 MiB, at 20 MiB.
        assert!(!due(2 * small, rebuilt, rows, min, growth));
        assert!(!due(2 * small + (4 << 20) - 1, rebuilt, rows, min, growth));
        assert!(due(2 * small + (4 << 20), rebuilt, rows, min, growth));
        // A smaller copy after a larger one becomes the base, and so does its own size.
        let rebuilt = rebuilt.after(small / 2, rows);
        assert_eq!(rebuilt.best, (small / 2, rows));
        // (The estimate per row rounds down by up to a byte per thousand rows.)
        assert!(!due(small - 64, rebuilt, rows, min, growth));
        assert!(due(small, rebuilt, rows, min, growth));
        // A copy too small to measure a row (a drained store) leaves the per-row figure alone.
        let drained = rebuilt.after(EMPTY_STORE_BYTES, 10);
        assert_eq!(drained.best, (small / 2, rows));
    }
}
