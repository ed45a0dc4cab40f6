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
use tidemark_disk::offset_index::{index_upper_bound, parse_index_key};
use tidemark_engine_api::{Error, Result};

use crate::bucket::{Bucket, Removals};
use crate::digest::{self, Delta};
use crate::error::{sled_error, store_failed};
use crate::generation::{self, Generation};
use crate::meta;
use crate::progress::Progress;
use crate::scan::for_each_chunk;
use crate::worker::Rebuild;

/// The most rounds of catch-up before the held-off last one: each copies what writers wrote
/// during the one before, so it shrinks unless writers outpace the copy (then the rounds stop).
const CATCH_UP_ROUNDS: usize = 4;

/// A catch-up round that copied at most this many index rows is small enough to be the last
/// one before writers are held off.
const SMALL_CATCH_UP_ROWS: u64 = 256;

/// The longest pause between two chunks of a background copy (see [`Copy::step`]).
const MAX_PAUSE: Duration = Duration::from_millis(20);

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
        let mut removals = tidemark_engine_api::sync::lock_recovered(&self.0.removals);
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
    let db = crate::generation::sled_config(dir, cache_bytes)
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

impl Rebuild for Bucket {
    fn progress(&self) -> &Arc<Progress> {
        &self.progress
    }

    fn due(&self) -> Result<bool> {
        self.rebuild_due()
    }

    fn rebuild(&self) -> Result<()> {
        run(self).map(drop)
    }

    fn panicked(&self, error: &Error) {
        self.count_failed_rebuild();
        self.fail(error);
    }
}
