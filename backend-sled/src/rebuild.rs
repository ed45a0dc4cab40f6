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

use disk::BackendContext;
use std::fs;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use disk::MetaKey;
use disk::meta::decode_u64;
use disk::sweeper::{index_upper_bound, parse_index_key};
use engine_api::{Error, Result};

use crate::digest::{self, Delta};
use crate::error::{sled_error, store_failed};
use crate::generation::{self, Generation};
use crate::meta;
use crate::scan::for_each_chunk;
use crate::storage::SledStorage;

/// By default a rebuild runs once the database is at least this large
/// ([`crate::SledContextOptions::rebuild_min_bytes`]): below it the engine's own footprint
/// dominates and a rebuild could not free enough to pay for itself.
pub const MIN_REBUILD_BYTES: u64 = 4 << 20;

/// By default a rebuild runs once the database has grown to this multiple of its size right
/// after the last rebuild (before the first one in a process: once it reaches
/// [`MIN_REBUILD_BYTES`]); [`crate::SledContextOptions::rebuild_growth`]. The copy's cost is the
/// live data, so rebuilding at a fixed multiple of it keeps the amortised cost per byte written
/// constant, while the bytes on disk stay below this multiple of a fresh copy.
pub const REBUILD_GROWTH: f64 = 2.0;

/// Whether a database of `size` bytes is due for a rebuild, given its size right after the last
/// one (0 before any), the smallest size rebuilt and the growth that calls for one.
pub(crate) fn due(size: u64, rebuilt_size: u64, min_bytes: u64, growth: f64) -> bool {
    // f64 is exact to 2^53 bytes; beyond, the comparison is off by less than a part in 10^15.
    size >= min_bytes && size as f64 >= rebuilt_size as f64 * growth
}

/// Rebuilds `storage` into a fresh generation when [`due`] and no other bucket of its context is
/// rebuilding (the extra database a rebuild opens is bounded to one per context); returns the
/// new generation's size when it switched.
///
/// A rebuild that fails before the pointer's rename leaves the store as it was: it is logged,
/// its files are removed, and the reclaim that ran it succeeds (the next one tries again). A
/// failure at or after the rename leaves unknown which generation a reopen finds, so the store
/// fails ([`Error::StoreFailed`]) and must be reopened, and both generations are kept: they hold
/// the same rows, since writers were held off.
pub(crate) fn run_if_due(storage: &SledStorage) -> Result<Option<u64>> {
    remove_retired(storage)?;
    if !due(
        storage.size_on_disk()?,
        storage.rebuilt_size.load(Ordering::Acquire),
        storage.context.settings().rebuild_min_bytes,
        storage.context.settings().rebuild_growth,
    ) {
        return Ok(None);
    }
    let Some(_slot) = storage.context.try_rebuild_slot()? else {
        return Ok(None);
    };
    let old = storage.generation()?;
    let Some(number) = old.number.checked_add(1) else {
        // Only a hand-edited pointer gets here; the next number would be the current one.
        return Ok(None);
    };
    let dir = generation::db_dir(&storage.dir, number);
    let built = build(storage, &old, number, &dir);
    let (new, rows) = match built {
        Ok(built) => built,
        // The pointer may name the new generation already: keep both, the store has failed.
        Err(e) if storage.is_failed() => return Err(e),
        Err(e) => {
            tracing::warn!(path = %storage.dir.display(), error = %e,
                "rebuilding the sled database into a fresh one failed; keeping the current one");
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
    tracing::debug!(path = %storage.dir.display(), generation = number, rows,
        bytes_before = old.size_on_disk().unwrap_or(0), bytes_after = size,
        "rebuilt the sled database");
    storage.rebuilt_size.store(size, Ordering::Release);
    storage.rebuilds.fetch_add(1, Ordering::AcqRel);
    engine_api::sync::lock(&storage.retired, "sled retired generations")?.push(old);
    drop(new);
    remove_retired(storage)?;
    Ok(Some(size))
}

/// Copies `old` into a new generation `number` at `dir` and switches to it; returns the new
/// generation and its row count.
fn build(
    storage: &SledStorage,
    old: &Arc<Generation>,
    number: u64,
    dir: &std::path::Path,
) -> Result<(Arc<Generation>, u64)> {
    if dir.exists() {
        // Left by a rebuild that failed earlier: never current, so nothing in it counts.
        fs::remove_dir_all(dir)?;
    }
    let cache_bytes = storage.context.cache_bytes_per_bucket();
    let db = crate::engine::sled_config(dir, cache_bytes)
        .open()
        .map_err(sled_error)?;
    let new = Generation::new(number, db)?;
    let mut copy = Copy::start(old, &new)?;
    copy.catch_up()?;
    // Most of the copy reaches disk here, while writers go on.
    new.db.flush().map_err(sled_error)?;
    let _switch = engine_api::sync::write(&storage.switch, "sled generation switch")?;
    // A store that failed meanwhile promises nothing durable: it must be reopened, not rebuilt.
    disk::Storage::check_usable(storage)?;
    let rows = copy.finish(&storage.dir)?;
    new.db.flush().map_err(sled_error)?;
    // sled syncs its log but not its directories nor its `conf`: all of it must be durable
    // before the pointer may name it.
    generation::sync_tree(dir)?;
    if let Err(e) = generation::publish(&storage.dir, number) {
        if !e.renamed {
            // The pointer did not change: the old generation is still the store.
            return Err(Error::Io(e.source));
        }
        // Renamed, but perhaps not durably: which generation a reopen finds is unknown.
        storage.fail(&e.source);
        return Err(store_failed(&storage.dir, Some(sled::Error::Io(e.source))));
    }
    let new = Arc::new(new);
    *engine_api::sync::lock(&storage.current, "sled generation")? = Arc::clone(&new);
    storage.context.register(&new.db);
    Ok((new, rows))
}

/// Drops every retired generation nothing reads any more and removes its files.
fn remove_retired(storage: &SledStorage) -> Result<()> {
    let mut retired = engine_api::sync::lock(&storage.retired, "sled retired generations")?;
    for old in std::mem::take(&mut *retired) {
        match Arc::try_unwrap(old) {
            Ok(old) => {
                let dir = generation::db_dir(&storage.dir, old.number);
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
    old: &'a Generation,
    new: &'a Generation,
    /// Every write at an offset at or above this one may be missing from the copy.
    from: u64,
    /// The digest of the copied `data` rows, kept as they are written.
    digest: Delta,
    /// How many `data` rows the copy holds.
    rows: u64,
}

impl<'a> Copy<'a> {
    /// Copies every row of `old`'s `data` and `by_offset` into `new` (writers may go on).
    pub(crate) fn start(old: &'a Generation, new: &'a Generation) -> Result<Self> {
        let mut copy = Copy {
            old,
            new,
            from: applied_end(&old.meta)?,
            digest: Delta::default(),
            rows: 0,
        };
        // Plain inserts, not batches: a sled batch pins the log while it runs, and a page it
        // must read back from the log meanwhile (the cache share is small) waits for that pin:
        // the batch deadlocks with itself.
        // Keys written meanwhile are met or not, either way caught up by their offsets.
        for_each_chunk(&old.data, &[], None, |rows| {
            rows.iter()
                .try_for_each(|(key, stored)| copy.put(key, stored))
        })?;
        // Below `S` only: index rows written meanwhile land at the end of the range, and a scan
        // that followed them would chase the writers for as long as they write.
        let below = index_upper_bound(copy.from);
        for_each_chunk(&old.by_offset, &[], Some(&below), |rows| {
            for (row, _) in rows {
                new.by_offset.insert(row, &[][..]).map_err(sled_error)?;
            }
            Ok(())
        })?;
        Ok(copy)
    }

    /// Copies again what was written since the last round: index rows at offsets from `from` up
    /// to the applied end read first, and the current value of each of their keys. Bounded
    /// above, so it ends while writers go on (what they write meanwhile is the next round's).
    pub(crate) fn catch_up(&mut self) -> Result<()> {
        self.catch_up_to(true)
    }

    /// [`Self::catch_up`], bounded above by the applied end read first or (with writers held
    /// off) not at all: the unbounded last round also meets every index row above the offsets,
    /// such as an unreadable one shorter than an offset, so the rounds together cover every key.
    fn catch_up_to(&mut self, bounded: bool) -> Result<()> {
        // Read before the scan: whatever commits later is at or above it.
        let end = applied_end(&self.old.meta)?;
        let (old, new) = (self.old, self.new);
        let (from, until) = (index_upper_bound(self.from), index_upper_bound(end));
        let until = bounded.then_some(&until[..]);
        for_each_chunk(&old.by_offset, &from, until, |rows| {
            for (row, _) in rows {
                new.by_offset.insert(row, &[][..]).map_err(sled_error)?;
                if let Some((_, key)) = parse_index_key(row)
                    && let Some(stored) = old.data.get(key).map_err(sled_error)?
                {
                    self.put(key, &stored)?;
                }
            }
            Ok(())
        })?;
        self.from = end;
        Ok(())
    }

    /// With writers held off: the last catch-up, `meta` copied whole, and the copy checked
    /// against the digest and count the old database recorded. A copy that does not add up is
    /// an error, and nothing of it may be used.
    pub(crate) fn finish(mut self, dir: &std::path::Path) -> Result<u64> {
        self.catch_up_to(false)?;
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

    #[test]
    fn a_rebuild_is_due_from_the_minimum_size_and_then_at_each_doubling() {
        let (min, growth) = (MIN_REBUILD_BYTES, REBUILD_GROWTH);
        assert!(!due(min - 1, 0, min, growth));
        assert!(due(min, 0, min, growth));
        let rebuilt = 3 * min;
        assert!(!due(2 * rebuilt - 1, rebuilt, min, growth));
        assert!(due(2 * rebuilt, rebuilt, min, growth));
        assert!(due(rebuilt, rebuilt, min, 1.0), "growth 1: every reclaim");
        assert!(
            !due(u64::MAX - 1, 0, u64::MAX, growth),
            "u64::MAX turns rebuilds off"
        );
    }
}
