//! Rebuilding a bucket into a fresh sled database, so the space a sweep frees becomes free space
//! on disk.
//!
//! Why: sled 0.34 never merges B-tree nodes that deletions empty, and its log keeps every
//! segment it ever filled (freed segments are reused, the file never shrinks). A bucket written
//! with ever-new keys and swept behind a trailing lake therefore keeps its nodes for keys long
//! gone: `tidemark compare --backends sled --duration 60s` held 87 MiB for a 1.2 MiB window.
//! A fresh database holding only the live rows is a few times the window, and copying it costs
//! what is live, not what was ever written.
//!
//! How, without stopping writers for the copy:
//! 1. *copy*: with the applied end `S` read first, every `data` and `by_offset` row of the
//!    current database is copied into a new one (writers go on; a sled iterator sees each key at
//!    some version no older than at `S`);
//! 2. *catch up*: every write committed since `S` has an index row at an offset `>= S`, so the
//!    rows from `S` up to the applied end read then (and their keys' current values) are copied
//!    again, so the round with writers held off is short;
//! 3. *switch*, with writers held off: a last catch-up, `meta` copied whole, and the copy checked
//!    against the live-row digest and count the old database's commits recorded (a copy that
//!    does not add up is dropped, and the old database stays); then the new database is flushed,
//!    made current by the generation pointer ([`crate::generation`]) and swapped in.
//!
//! A crash before the pointer is renamed leaves the old database current; after it, the new one,
//! complete and flushed. Either way the other is removed at the next writable open.

use std::fs;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use tidemark_disk::BackendContext;

use tidemark_disk::MetaKey;
use tidemark_disk::meta::decode_u64;
use tidemark_disk::sweeper::{index_upper_bound, parse_index_key};
use tidemark_engine_api::{Error, Result};

use crate::digest::{self, Delta};
use crate::error::{sled_error, store_failed};
use crate::generation::{self, Generation};
use crate::meta;
use crate::scan::for_each_chunk;
use crate::storage::{Bucket, Removals};

/// By default a rebuild runs once the database is at least this large
/// ([`crate::SledContextOptions::rebuild_min_bytes`]): below it the engine's own footprint
/// dominates and a rebuild could not free enough to pay for itself. The garbage trigger
/// (`due`) does not wait for it.
pub const MIN_REBUILD_BYTES: u64 = 4 << 20;

/// By default a rebuild runs once the database has grown to this multiple of its size right
/// after the last rebuild (before the first one in a process: once it reaches
/// [`MIN_REBUILD_BYTES`]), or to this multiple of what a fresh copy of its live rows would take
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

/// The most rounds of catch-up before the held-off last one: each copies what writers wrote
/// during the one before, so it shrinks unless writers outpace the copy (then the rounds stop).
const CATCH_UP_ROUNDS: usize = 4;

/// A catch-up round that copied at most this many index rows is small enough to be the last
/// one before writers are held off.
const SMALL_CATCH_UP_ROWS: u64 = 256;

/// The longest pause between two chunks of a background copy (see [`Copy::step`]).
const MAX_PAUSE: Duration = Duration::from_millis(20);

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
            || u128::from(size - EMPTY_STORE_BYTES.min(size)) * u128::from(best_rows)
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

/// Rebuilds `bucket` into a fresh generation unless another bucket of its context is
/// rebuilding (the extra database a rebuild opens is bounded to one per context); returns the
/// new generation's size when it switched.
///
/// A rebuild that fails before the pointer's rename leaves the store as it was: it is logged
/// and counted, its files are removed, and the rebuild is simply not done (the next reclaim
/// that finds it due queues it again). A failure at or after the rename leaves unknown which
/// generation a reopen finds, so the store fails ([`Error::StoreFailed`]) and must be reopened,
/// and both generations are kept: they hold the same rows, since writers were held off.
pub(crate) fn run(bucket: &Bucket) -> Result<Option<u64>> {
    let Some(_slot) = bucket.context.try_rebuild_slot()? else {
        return Ok(None);
    };
    let old = bucket.generation()?;
    let Some(number) = old.number.checked_add(1) else {
        // Only a hand-edited pointer gets here; the next number would be the current one.
        return Ok(None);
    };
    let dir = generation::db_dir(&bucket.dir, number);
    let started = Instant::now();
    let built = build(bucket, &old, number, &dir);
    let (new, rows) = match built {
        Ok(built) => built,
        // The pointer may name the new generation already: keep both, the store has failed.
        Err(e) if bucket.is_failed() => {
            bucket.count_failed_rebuild();
            return Err(e);
        }
        Err(e) => {
            if bucket.progress.is_cancelled() {
                tracing::debug!(path = %bucket.dir.display(),
                    "the bucket closed during a sled rebuild; its copy is dropped");
            } else {
                bucket.count_failed_rebuild();
                tracing::warn!(path = %bucket.dir.display(), error = %e,
                    "rebuilding the sled database into a fresh one failed; keeping the current one");
            }
            if let Err(e) = fs::remove_dir_all(&dir)
                && e.kind() != std::io::ErrorKind::NotFound
            {
                tracing::warn!(path = %dir.display(), error = %e,
                    "could not remove an abandoned sled rebuild; the next open removes it");
            }
            return Ok(None);
        }
    };
    // The switch is done: the bookkeeping below must not fail half way.
    let size = new.size_on_disk().unwrap_or(0);
    tracing::debug!(path = %bucket.dir.display(), generation = number, rows,
        bytes_before = old.size_on_disk().unwrap_or(0), bytes_after = size,
        took_ms = started.elapsed().as_millis(), "rebuilt the sled database");
    if let Ok(mut rebuilt) = tidemark_engine_api::sync::lock(&bucket.rebuilt, "sled rebuild sizes")
    {
        *rebuilt = rebuilt.after(size, rows);
    }
    bucket.rebuilds.fetch_add(1, Ordering::AcqRel);
    bucket.unreported_rewrite.fetch_add(size, Ordering::AcqRel);
    tidemark_engine_api::sync::lock(&bucket.retired, "sled retired generations")?.push(old);
    drop(new);
    remove_retired(bucket)?;
    Ok(Some(size))
}

/// Has sweep chunks report their removals to the copy while it lives, and stops them after.
struct Listening<'a>(&'a Bucket);

impl<'a> Listening<'a> {
    fn start(bucket: &'a Bucket) -> Result<Self> {
        *tidemark_engine_api::sync::lock(&bucket.removals, "sled removals")? =
            Some(Removals::default());
        Ok(Listening(bucket))
    }
}

impl Drop for Listening<'_> {
    fn drop(&mut self) {
        // Poisoned: a sweep chunk panicked while pushing; the rows it pushed are not needed
        // any more, and the store that panicked is failed by the skeleton.
        let mut removals = self
            .0
            .removals
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        *removals = None;
    }
}

/// Copies `old` into a new generation `number` at `dir` and switches to it; returns the new
/// generation and its row count.
fn build(
    bucket: &Bucket,
    old: &Arc<Generation>,
    number: u64,
    dir: &std::path::Path,
) -> Result<(Arc<Generation>, u64)> {
    if dir.exists() {
        // Left by a rebuild that failed earlier: never current, so nothing in it counts.
        fs::remove_dir_all(dir)?;
    }
    let cache_bytes = bucket.context.cache_bytes_per_bucket();
    let db = crate::engine::sled_config(dir, cache_bytes)
        .open()
        .map_err(sled_error)?;
    let new = Generation::new(number, db)?;
    let _listening = Listening::start(bucket)?;
    let pace = bucket.context.settings().rebuild_in_background;
    let mut copy = Copy::start(bucket, old, &new, pace)?;
    // Rounds while they shrink: one that did not means writers outpace the copy, and another
    // would only be longer (and the held-off round with it).
    let mut last = u64::MAX;
    for _ in 0..CATCH_UP_ROUNDS {
        let met = copy.catch_up()?;
        if met <= SMALL_CATCH_UP_ROWS || met >= last {
            break;
        }
        last = met;
    }
    // All but the last catch-up reaches disk here, with its directories and sled's `conf`,
    // while writers go on: what is left for the held-off round is its own rows.
    new.db.flush().map_err(sled_error)?;
    generation::sync_tree(dir)?;
    let _switch = tidemark_engine_api::sync::write(&bucket.switch, "sled generation switch")?;
    // A store that failed meanwhile promises nothing durable: it must be reopened, not rebuilt.
    if bucket.is_failed() {
        return Err(store_failed(&bucket.dir, None));
    }
    let rows = copy.finish(&bucket.dir)?;
    new.db.flush().map_err(sled_error)?;
    // sled syncs its log but not its directories nor its `conf`: all of it must be durable
    // before the pointer may name it (synced above; this round finds little left).
    generation::sync_tree(dir)?;
    if let Err(e) = generation::publish(&bucket.dir, number) {
        if !e.renamed {
            // The pointer did not change: the old generation is still the store.
            return Err(Error::Io(e.source));
        }
        // Renamed, but perhaps not durably: which generation a reopen finds is unknown.
        bucket.fail(&e.source);
        return Err(store_failed(&bucket.dir, Some(sled::Error::Io(e.source))));
    }
    let new = Arc::new(new);
    *tidemark_engine_api::sync::lock(&bucket.current, "sled generation")? = Arc::clone(&new);
    bucket.context.register(&new.db);
    Ok((new, rows))
}

/// Drops every retired generation nothing reads any more and removes its files.
pub(crate) fn remove_retired(bucket: &Bucket) -> Result<()> {
    let mut retired = tidemark_engine_api::sync::lock(&bucket.retired, "sled retired generations")?;
    for old in std::mem::take(&mut *retired) {
        match Arc::try_unwrap(old) {
            Ok(old) => {
                let dir = generation::db_dir(&bucket.dir, old.number);
                drop(old);
                if let Err(e) = fs::remove_dir_all(&dir)
                    && e.kind() != std::io::ErrorKind::NotFound
                {
                    tracing::warn!(path = %dir.display(), error = %e,
                        "could not remove a retired sled generation; the next open removes it");
                }
            }
            Err(still_read) => retired.push(still_read),
        }
    }
    Ok(())
}

/// A copy of one generation into the next, in progress.
pub(crate) struct Copy<'a> {
    bucket: &'a Bucket,
    old: &'a Generation,
    new: &'a Generation,
    /// Every write at an offset at or above this one may be missing from the copy.
    from: u64,
    /// The digest of the copied `data` rows, kept as they are written.
    digest: Delta,
    /// How many `data` rows the copy holds.
    rows: u64,
    /// Whether the bulk copy pauses between chunks (a background rebuild).
    pace: bool,
    /// When the last step ended.
    last_step: Instant,
}

impl<'a> Copy<'a> {
    /// Copies every row of `old`'s `data` and `by_offset` into `new` (writers and sweeps may go
    /// on), a chunk at a time.
    pub(crate) fn start(
        bucket: &'a Bucket,
        old: &'a Generation,
        new: &'a Generation,
        pace: bool,
    ) -> Result<Self> {
        let mut copy = Copy {
            bucket,
            old,
            new,
            from: applied_end(&old.meta)?,
            digest: Delta::default(),
            rows: 0,
            pace,
            last_step: Instant::now(),
        };
        // Plain inserts, not batches: a sled batch pins the log while it runs, and a page it
        // must read back from the log meanwhile (the cache share is small) waits for that pin:
        // the batch deadlocks with itself. And a batch takes sled's process-wide lock
        // exclusively: every read and write of every sled bucket would wait for it.
        // Keys written meanwhile are met or not, either way caught up by their offsets.
        for_each_chunk(&old.data, &[], None, |rows| {
            rows.iter()
                .try_for_each(|(key, stored)| copy.put(key, stored))?;
            copy.step(true)
        })?;
        // Below `S` only: index rows written meanwhile land at the end of the range, and a scan
        // that followed them would chase the writers for as long as they write.
        let below = index_upper_bound(copy.from);
        for_each_chunk(&old.by_offset, &[], Some(&below), |rows| {
            for (row, _) in rows {
                new.by_offset.insert(row, &[][..]).map_err(sled_error)?;
            }
            copy.step(true)
        })?;
        copy.remove_swept()?;
        Ok(copy)
    }

    /// Between two chunks: stops when the bucket is closing; in a background bulk copy
    /// (`bulk`), pauses as long as the chunk took (up to [`MAX_PAUSE`]), so the copy takes at
    /// most half of a core and writers and readers (of every sled bucket: each insert takes
    /// sled's process-wide lock's shared side) get the other half between chunks. Catch-up
    /// rounds do not pause: they must outpace the writers they follow.
    fn step(&mut self, bulk: bool) -> Result<()> {
        self.bucket.progress.step()?;
        if bulk && self.pace {
            std::thread::sleep(self.last_step.elapsed().min(MAX_PAUSE));
        }
        self.last_step = Instant::now();
        Ok(())
    }

    /// Copies again what was written since the last round: index rows at offsets from `from` up
    /// to the applied end read first, and the current value of each of their keys. Bounded
    /// above, so it ends while writers go on (what they write meanwhile is the next round's).
    /// Returns the index rows it met.
    pub(crate) fn catch_up(&mut self) -> Result<u64> {
        let met = self.catch_up_to(true)?;
        self.remove_swept()?;
        Ok(met)
    }

    /// [`Self::catch_up`], bounded above by the applied end read first or (with writers held
    /// off) not at all: the unbounded last round also meets every index row above the offsets,
    /// such as an unreadable one shorter than an offset, so the rounds together cover every key.
    fn catch_up_to(&mut self, bounded: bool) -> Result<u64> {
        // Read before the scan: whatever commits later is at or above it.
        let end = applied_end(&self.old.meta)?;
        let (old, new) = (self.old, self.new);
        let (from, until) = (index_upper_bound(self.from), index_upper_bound(end));
        let until = bounded.then_some(&until[..]);
        let mut met = 0u64;
        for_each_chunk(&old.by_offset, &from, until, |rows| {
            for (row, _) in rows {
                let Some((offset, key)) = parse_index_key(row) else {
                    // Unreadable: kept as it is, like the sweeper keeps it.
                    new.by_offset.insert(row, &[][..]).map_err(sled_error)?;
                    continue;
                };
                let Some(stored) = old.data.get(key).map_err(sled_error)? else {
                    // The key is gone (swept): the row is stale, the next sweep would drop it.
                    continue;
                };
                // Only the row that names the key's current value is copied, with the value: a
                // key overwritten many times during the copy is met once per write, and its
                // older rows are stale (the next sweep would drop them). A value whose tag
                // cannot be read is copied with every row that names it.
                match tidemark_engine_api::codec::peek_tag(&stored) {
                    Some(tag) if tag != offset => {}
                    _ => {
                        new.by_offset.insert(row, &[][..]).map_err(sled_error)?;
                        self.put(key, &stored)?;
                    }
                }
            }
            met += rows.len() as u64;
            if bounded { self.step(false) } else { Ok(()) }
        })?;
        self.from = end;
        Ok(met)
    }

    /// Removes from the copy what sweep chunks removed from the old generation since the last
    /// call. A sweep removes a key's current value, so the key was absent from the old
    /// generation from then until a newer write: the copy drops the key when it holds that value
    /// or an older version (a lower offset tag; read before the sweep, while the newer one was
    /// swept before a catch-up met it), and keeps a newer one (written after the sweep, copied
    /// by a catch-up since). Every row the copy read before a sweep removed it is named in a
    /// later call, since a chunk reports after it commits and the last call runs with every
    /// chunk held off. Only the rebuild writes the copy, so a read and a removal cannot race.
    fn remove_swept(&mut self) -> Result<()> {
        let removed = {
            let mut removals =
                tidemark_engine_api::sync::lock(&self.bucket.removals, "sled removals")?;
            std::mem::take(removals.as_mut().ok_or_else(|| {
                Error::backend(
                    crate::error::BACKEND,
                    std::io::Error::other("a sled rebuild stopped hearing of removals"),
                )
            })?)
        };
        let tag = tidemark_engine_api::codec::peek_tag;
        for (key, swept) in removed.data {
            let Some(held) = self.new.data.get(&key).map_err(sled_error)? else {
                continue;
            };
            let older = match (tag(&held), tag(&swept)) {
                (Some(held), Some(swept)) => held <= swept,
                // Unreadable tags: only the very bytes swept are known to be gone.
                _ => held == swept,
            };
            if older {
                self.new.data.remove(&key).map_err(sled_error)?;
                self.digest.remove(&key, &held);
                self.rows = self.rows.saturating_sub(1);
            }
        }
        for row in removed.index {
            self.new.by_offset.remove(row).map_err(sled_error)?;
        }
        Ok(())
    }

    /// With writers and sweeps held off: the last catch-up, `meta` copied whole, and the copy
    /// checked against the digest and count the old database recorded. A copy that does not
    /// add up is an error, and nothing of it may be used.
    pub(crate) fn finish(mut self, dir: &std::path::Path) -> Result<u64> {
        self.catch_up_to(false)?;
        self.remove_swept()?;
        self.new.meta.clear().map_err(sled_error)?;
        let new = self.new;
        for_each_chunk(&self.old.meta, &[], None, |rows| {
            for (name, value) in rows {
                new.meta.insert(name, value).map_err(sled_error)?;
            }
            Ok(())
        })?;
        let recorded_rows = meta::restore_live(&self.old.meta, dir)?;
        let recorded = match digest::restore(&self.old.meta)? {
            digest::Restored::Current(recorded) => Some(recorded),
            digest::Restored::Missing => None,
        };
        let total = self.digest.total();
        if recorded != Some(total) || recorded_rows != Some(self.rows) {
            return Err(Error::backend(
                crate::error::BACKEND,
                std::io::Error::other(format!(
                    "the rebuilt copy holds {} rows hashing to {total:016x}, but the database \
                     recorded {recorded_rows:?} rows hashing to {recorded:016x?}",
                    self.rows
                )),
            ));
        }
        Ok(self.rows)
    }

    /// Writes one `data` row into the copy, keeping the copy's digest and row count.
    fn put(&mut self, key: &[u8], stored: &[u8]) -> Result<()> {
        match self.new.data.insert(key, stored).map_err(sled_error)? {
            Some(previous) => self.digest.remove(key, &previous),
            None => self.rows += 1,
        }
        self.digest.add(key, stored);
        Ok(())
    }
}

/// The applied end `meta` holds (0 before the first commit).
fn applied_end(meta: &sled::Tree) -> Result<u64> {
    meta.get(MetaKey::AppliedEnd.bytes())
        .map_err(sled_error)?
        .map_or(Ok(0), |bytes| decode_u64(MetaKey::AppliedEnd, &bytes))
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
