//! The range-scan sweeper shared by the B-tree backends (sled, redb).
//!
//! Each backend keeps an index `by_offset` whose keys are `offset (u64 BE) ‖ key` with empty
//! values, written in the same transaction as the `data` row. Reclamation walks the index from
//! the start up to the threshold, so its cost is proportional to what is covered, never to the
//! table. Overwrites do not delete the old index row (that would need a read before every write);
//! the sweeper drops such *stale* rows when it meets them, and removes a `data` row only when its
//! tag still equals the index row's offset.
//!
//! The loop lives here once; a backend only implements [`SweepChunk`]: one bounded transaction.

use std::time::{Duration, Instant};

use crate::offset_index::parse_index_key;
use crate::turns::{MAX_YIELD, WriterTurns};
use tidemark_engine_api::EngineOptions;
use tidemark_engine_api::Result;
use tidemark_engine_api::codec::{self, Decoded};

/// What to do with one index row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SweepAction {
    /// The data row still carries this offset: remove it (a value) and the index row.
    RemoveValue,
    /// The data row still carries this offset: remove it (a tombstone) and the index row.
    RemoveTombstone,
    /// The data row was overwritten or is gone: drop only the index row.
    DropStaleIndex,
    /// The data row cannot be decoded: keep both rows and count it.
    KeepCorrupt,
    /// The index row itself is too short to hold its 8-byte offset, so it names no entry that can
    /// be read: keep it and count it like a corrupt entry (what cannot be read is never deleted).
    KeepUnreadableIndex,
}

/// Decides the fate of index row `(offset, key)` given the data row's current bytes.
pub fn decide(offset: u64, key: &[u8], current: Option<&[u8]>) -> SweepAction {
    let Some(bytes) = current else {
        return SweepAction::DropStaleIndex;
    };
    match codec::decode(key, bytes) {
        Ok(d) if d.offset() != offset => SweepAction::DropStaleIndex,
        Ok(Decoded::Value { .. }) => SweepAction::RemoveValue,
        Ok(Decoded::Tombstone { .. }) => SweepAction::RemoveTombstone,
        Err(_) => SweepAction::KeepCorrupt,
    }
}

/// What a chunk does with one index row, as decided by [`plan_row`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowPlan<'r> {
    /// The decision, for [`SweepTotals::count`].
    pub action: SweepAction,
    /// The data row to remove (its key); `Some` only for a value or tombstone being reclaimed.
    pub remove_data: Option<&'r [u8]>,
    /// Whether the index row itself is removed.
    pub remove_index: bool,
}

/// The one rule every B-tree backend applies to an index row inside its chunk transaction: parse
/// the row, read the data row it names with `read` (in the same transaction), [`decide`], and say
/// which rows go.
///
/// An index row too short to parse is kept and counted ([`SweepAction::KeepUnreadableIndex`]),
/// exactly like an undecodable value: a sweeper never deletes what it cannot read.
pub fn plan_row<'r, B, E>(
    row: &'r [u8],
    read: impl FnOnce(&'r [u8]) -> Result<Option<B>, E>,
) -> Result<RowPlan<'r>, E>
where
    B: AsRef<[u8]>,
{
    let Some((offset, key)) = parse_index_key(row) else {
        return Ok(RowPlan {
            action: SweepAction::KeepUnreadableIndex,
            remove_data: None,
            remove_index: false,
        });
    };
    let current = read(key)?;
    let action = decide(offset, key, current.as_ref().map(AsRef::as_ref));
    Ok(RowPlan {
        action,
        remove_data: matches!(
            action,
            SweepAction::RemoveValue | SweepAction::RemoveTombstone
        )
        .then_some(key),
        remove_index: !matches!(
            action,
            SweepAction::KeepCorrupt | SweepAction::KeepUnreadableIndex
        ),
    })
}

/// What one chunk (or a whole sweep) did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SweepTotals {
    /// Index rows visited.
    pub rows_visited: u64,
    /// Values removed.
    pub values_removed: u64,
    /// Tombstones removed.
    pub tombstones_removed: u64,
    /// Stale index rows dropped.
    pub stale_dropped: u64,
    /// Corrupt data rows and unreadable index rows kept.
    pub corrupt_kept: u64,
    /// Chunk transactions committed.
    pub chunks: u64,
}

impl SweepTotals {
    /// Counts one decided row.
    pub fn count(&mut self, action: SweepAction) {
        self.rows_visited += 1;
        match action {
            SweepAction::RemoveValue => self.values_removed += 1,
            SweepAction::RemoveTombstone => self.tombstones_removed += 1,
            SweepAction::DropStaleIndex => self.stale_dropped += 1,
            SweepAction::KeepCorrupt | SweepAction::KeepUnreadableIndex => self.corrupt_kept += 1,
        }
    }

    fn add(&mut self, other: &SweepTotals) {
        self.rows_visited += other.rows_visited;
        self.values_removed += other.values_removed;
        self.tombstones_removed += other.tombstones_removed;
        self.stale_dropped += other.stale_dropped;
        self.corrupt_kept += other.corrupt_kept;
        self.chunks += other.chunks;
    }
}

/// Result of one chunk transaction.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ChunkResult {
    /// What the chunk did.
    pub totals: SweepTotals,
    /// The last index key visited, where the next chunk resumes (exclusive). `None` when the
    /// chunk found no row at all.
    pub last_index_key: Option<Vec<u8>>,
    /// How long the chunk held the storage's write lock (from when its transaction had the lock
    /// to its commit), which is what writers wait for and what chunks are sized by; `None`: the
    /// sweep times the whole call. Time spent *waiting* for the lock must not count, or a busy
    /// writer would shrink every chunk to one row and the sweep would fall behind.
    pub busy: Option<Duration>,
}

/// Which index rows one sweep chunk visits ([`SweepChunk::sweep_chunk`]).
#[derive(Debug, Clone, Copy)]
pub struct ChunkRequest<'a> {
    /// Only rows below `index_upper_bound(threshold)`.
    pub threshold: u64,
    /// At most this many rows.
    pub limit: usize,
    /// Only rows with a key after this one (`None`: from the start).
    pub resume_after: Option<&'a [u8]>,
}

/// One bounded sweeper transaction, implemented by each B-tree backend.
pub trait SweepChunk {
    /// In **one** transaction: visit at most `limit` index rows with key `> resume_after` (or from
    /// the start when `None`) and `< index_upper_bound(threshold)`; for each, call [`plan_row`]
    /// (which reads the data row and decides), remove the rows its plan names, and count the action
    /// with [`SweepTotals::count`]. Return the last index key visited.
    fn sweep_chunk(&self, chunk: ChunkRequest<'_>) -> Result<ChunkResult>;
}

/// Rows of the first chunk of a sweep sized by time: small, so a sweep of rows that turn out
/// to be expensive (large values, a cold cache) holds writers up briefly before it has a pace.
pub const FIRST_TIMED_CHUNK_ROWS: usize = 16;

/// How many rows the next chunk of a sweep visits: at most `max_rows`, and, with a time target,
/// as many as the pace of the last chunk says fit in it (growing at most twofold per chunk,
/// shrinking at once).
///
/// ```
/// use std::time::Duration;
/// use tidemark_disk::sweeper::ChunkSizer;
///
/// let mut sizer = ChunkSizer::new(4096, Some(Duration::from_millis(1)));
/// assert_eq!(sizer.rows(), 16);
/// sizer.observe(16, Duration::from_micros(100)); // 10x faster than the target
/// assert_eq!(sizer.rows(), 32); // grows at most twofold
/// sizer.observe(32, Duration::from_millis(4)); // 4x slower than the target
/// assert_eq!(sizer.rows(), 8);
/// assert_eq!(ChunkSizer::new(7, None).rows(), 7); // no target: always the maximum
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkSizer {
    max_rows: usize,
    target: Option<Duration>,
    next: usize,
}

impl ChunkSizer {
    /// Chunks of at most `max_rows` rows (at least 1), sized to take about `target` when given
    /// (a zero target is taken as none: no chunk could meet it).
    pub fn new(max_rows: usize, target: Option<Duration>) -> Self {
        let max_rows = max_rows.max(1);
        let target = target.filter(|t| !t.is_zero());
        ChunkSizer {
            max_rows,
            target,
            next: match target {
                Some(_) => max_rows.min(FIRST_TIMED_CHUNK_ROWS),
                None => max_rows,
            },
        }
    }

    /// The chunk sizing of a sweep under `options`, with at most `cap` rows per chunk whatever
    /// `sweep_chunk_rows` says (a backend's own limit; `usize::MAX` for none).
    pub fn for_options(options: &EngineOptions, cap: usize) -> Self {
        ChunkSizer::new(options.sweep_chunk_rows.min(cap), options.sweep_chunk_time)
    }

    /// Rows the next chunk may visit.
    pub fn rows(&self) -> usize {
        self.next
    }

    /// The most rows a chunk may visit.
    pub fn max_rows(&self) -> usize {
        self.max_rows
    }

    /// Sizes the next chunk from one that visited `rows` rows in `took`.
    pub fn observe(&mut self, rows: usize, took: Duration) {
        let Some(target) = self.target else {
            return;
        };
        if rows == 0 {
            return;
        }
        let pace = target.as_secs_f64() / took.as_secs_f64().max(1e-9);
        // Saturating float-to-int: a huge pace is capped below anyway.
        let fit = (rows as f64 * pace) as usize;
        self.next = fit.clamp(1, self.next.saturating_mul(2).min(self.max_rows));
    }
}

/// Runs chunks until no covered index row remains below `threshold`, each as large as `sizer`
/// says, letting every writer announced in `turns` commit between two chunks (so a writer waits
/// for at most the chunk in flight, never the whole sweep). After every chunk that visited rows it
/// runs `on_chunk` ([`ReclaimRequest::on_chunk`](crate::ReclaimRequest::on_chunk)).
///
/// Corrupt rows are kept, so the loop resumes after the last visited key rather than from the
/// start; every chunk therefore makes progress and the sweep terminates.
pub fn sweep<S: SweepChunk + ?Sized>(
    target: &S,
    threshold: u64,
    mut sizer: ChunkSizer,
    turns: &WriterTurns,
    on_chunk: Option<&(dyn Fn(&SweepTotals) + Sync)>,
) -> Result<SweepTotals> {
    let mut totals = SweepTotals::default();
    let mut cursor: Option<Vec<u8>> = None;
    loop {
        let limit = sizer.rows();
        let started = Instant::now();
        let chunk = target.sweep_chunk(ChunkRequest {
            threshold,
            limit,
            resume_after: cursor.as_deref(),
        })?;
        let took = chunk.busy.unwrap_or_else(|| started.elapsed());
        totals.add(&chunk.totals);
        let visited = chunk.totals.rows_visited;
        if visited > 0
            && let Some(on_chunk) = on_chunk
        {
            on_chunk(&chunk.totals);
        }
        match chunk.last_index_key {
            Some(last) if visited as usize >= limit => cursor = Some(last),
            _ => return Ok(totals),
        }
        sizer.observe(visited as usize, took);
        turns.yield_to_writers(MAX_YIELD);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::offset_index::{index_key, index_upper_bound};
    use std::cell::RefCell;
    use std::collections::BTreeMap;

    /// A toy two-map backend used to test the loop shape.
    #[derive(Default)]
    struct Toy {
        data: RefCell<BTreeMap<Vec<u8>, Vec<u8>>>,
        index: RefCell<BTreeMap<Vec<u8>, ()>>,
        chunks: RefCell<u64>,
        /// Rows each chunk visited, in order.
        sizes: RefCell<Vec<usize>>,
        /// What each chunk reports as the time it held the lock (`None`: the sweep times it).
        busy: Option<Duration>,
    }

    impl Toy {
        fn put(&self, key: &[u8], offset: u64) {
            self.data
                .borrow_mut()
                .insert(key.to_vec(), codec::encode_value(key, offset, b"v"));
            self.index.borrow_mut().insert(index_key(offset, key), ());
        }
    }

    impl SweepChunk for Toy {
        fn sweep_chunk(&self, chunk: ChunkRequest<'_>) -> Result<ChunkResult> {
            let ChunkRequest {
                threshold,
                limit,
                resume_after,
            } = chunk;
            *self.chunks.borrow_mut() += 1;
            let upper = index_upper_bound(threshold).to_vec();
            let rows: Vec<Vec<u8>> = self
                .index
                .borrow()
                .range(..upper)
                .map(|(k, _)| k.clone())
                .filter(|k| resume_after.is_none_or(|r| k.as_slice() > r))
                .take(limit)
                .collect();
            let mut result = ChunkResult::default();
            for row in rows {
                let plan = plan_row(&row, |key| {
                    Ok::<_, ()>(self.data.borrow().get(key).cloned())
                })
                .unwrap();
                if let Some(key) = plan.remove_data {
                    self.data.borrow_mut().remove(key);
                }
                if plan.remove_index {
                    self.index.borrow_mut().remove(&row);
                }
                result.totals.count(plan.action);
                result.last_index_key = Some(row);
            }
            result.totals.chunks = 1;
            result.busy = self.busy;
            self.sizes
                .borrow_mut()
                .push(result.totals.rows_visited as usize);
            Ok(result)
        }
    }

    #[test]
    fn sweeps_in_chunks_and_keeps_uncovered() {
        let toy = Toy::default();
        for i in 0..10u64 {
            toy.put(format!("k{i}").as_bytes(), i);
        }
        toy.put(b"k0", 20); // k0@0 is now stale
        toy.data.borrow_mut().insert(b"k3".to_vec(), vec![0xee]); // corrupt
        let totals = sweep(
            &toy,
            6,
            ChunkSizer::new(2, None),
            &WriterTurns::default(),
            None,
        )
        .unwrap();
        assert_eq!(totals.rows_visited, 6);
        assert_eq!(totals.stale_dropped, 1);
        assert_eq!(totals.corrupt_kept, 1);
        assert_eq!(totals.values_removed, 4);
        assert_eq!(totals.chunks, 4);
        assert!(toy.data.borrow().contains_key(b"k0".as_slice()));
        assert!(toy.data.borrow().contains_key(b"k3".as_slice()));
        assert!(toy.data.borrow().contains_key(b"k6".as_slice()));
        assert!(!toy.data.borrow().contains_key(b"k5".as_slice()));
    }

    #[test]
    fn timed_chunks_shrink_to_the_pace_of_the_rows() {
        let toy = Toy::default();
        for i in 0..40u64 {
            toy.put(format!("k{i:02}").as_bytes(), i);
        }
        // No chunk can meet a 1 ns target: after the first (FIRST_TIMED_CHUNK_ROWS rows) every
        // chunk is one row, and the sweep still removes everything covered.
        let sizer = ChunkSizer::new(64, Some(Duration::from_nanos(1)));
        let totals = sweep(&toy, 40, sizer, &WriterTurns::default(), None).unwrap();
        assert_eq!(totals.values_removed, 40);
        let first = FIRST_TIMED_CHUNK_ROWS as u64;
        // The toy counts the last, empty chunk too.
        assert_eq!(totals.chunks, 1 + (40 - first) + 1);
        assert!(toy.data.borrow().is_empty());
    }

    #[test]
    fn chunks_are_sized_by_the_time_they_hold_the_lock_not_by_the_wait_for_it() {
        // Each chunk reports 1 µs holding the lock, however long the call took (waiting for a
        // writer's fsync, say): the chunks grow to their maximum instead of shrinking.
        let toy = Toy {
            busy: Some(Duration::from_micros(1)),
            ..Toy::default()
        };
        for i in 0..200u64 {
            toy.put(format!("k{i:03}").as_bytes(), i);
        }
        let sizer = ChunkSizer::new(64, Some(Duration::from_millis(1)));
        let totals = sweep(&toy, 200, sizer, &WriterTurns::default(), None).unwrap();
        assert_eq!(totals.values_removed, 200);
        assert_eq!(*toy.sizes.borrow(), vec![16, 32, 64, 64, 24]);
        // A zero target cannot be met: it sizes nothing (full chunks), rather than one row each.
        assert_eq!(ChunkSizer::new(64, Some(Duration::ZERO)).rows(), 64);
    }

    #[test]
    fn a_writer_announced_before_a_chunk_ends_commits_before_the_next_one() {
        use std::sync::{Arc, Mutex, mpsc};
        // A chunk per row, logging itself; the writer waits for the first chunk, then logs.
        struct Logged {
            log: Arc<Mutex<Vec<String>>>,
            first_done: Mutex<Option<mpsc::Sender<()>>>,
        }
        impl SweepChunk for Logged {
            fn sweep_chunk(&self, chunk: ChunkRequest<'_>) -> Result<ChunkResult> {
                let (threshold, after) = (chunk.threshold, chunk.resume_after);
                let next = after.map_or(0, |a| a[0] + 1);
                if u64::from(next) >= threshold {
                    return Ok(ChunkResult::default());
                }
                self.log.lock().unwrap().push(format!("chunk {next}"));
                if let Some(tx) = self.first_done.lock().unwrap().take() {
                    tx.send(()).unwrap();
                }
                let mut result = ChunkResult {
                    last_index_key: Some(vec![next]),
                    ..ChunkResult::default()
                };
                result.totals.rows_visited = 1;
                Ok(result)
            }
        }
        let log = Arc::new(Mutex::new(Vec::new()));
        let turns = Arc::new(WriterTurns::default());
        let (done_tx, done_rx) = mpsc::channel();
        let (announced_tx, announced_rx) = mpsc::channel();
        let writer = {
            let (log, turns) = (Arc::clone(&log), Arc::clone(&turns));
            std::thread::spawn(move || {
                let turn = turns.announce();
                announced_tx.send(()).unwrap();
                done_rx.recv().unwrap();
                log.lock().unwrap().push("write".to_string());
                drop(turn);
            })
        };
        announced_rx.recv().unwrap();
        let target = Logged {
            log: Arc::clone(&log),
            first_done: Mutex::new(Some(done_tx)),
        };
        let totals = sweep(&target, 3, ChunkSizer::new(1, None), &turns, None).unwrap();
        writer.join().unwrap();
        assert_eq!(totals.rows_visited, 3);
        assert_eq!(
            *log.lock().unwrap(),
            ["chunk 0", "write", "chunk 1", "chunk 2"]
        );
    }

    #[test]
    fn chunk_sizes_follow_the_pace_within_their_bounds() {
        let ms = Duration::from_millis;
        let mut sizer = ChunkSizer::new(100, Some(ms(2)));
        assert_eq!(sizer.rows(), FIRST_TIMED_CHUNK_ROWS);
        // Fast chunks double the size up to the maximum, never past it.
        for expected in [32, 64, 100, 100] {
            sizer.observe(sizer.rows(), Duration::from_micros(10));
            assert_eq!(sizer.rows(), expected);
        }
        // A slow chunk shrinks it to what fits the target at once, never below one row.
        sizer.observe(100, ms(8));
        assert_eq!(sizer.rows(), 25);
        sizer.observe(25, Duration::from_secs(10));
        assert_eq!(sizer.rows(), 1);
        // An empty chunk says nothing about the pace.
        sizer.observe(0, ms(50));
        assert_eq!(sizer.rows(), 1);
        // Without a target the size never moves.
        let mut fixed = ChunkSizer::new(7, None);
        fixed.observe(7, Duration::from_secs(1));
        assert_eq!((fixed.rows(), fixed.max_rows()), (7, 7));
        assert_eq!(ChunkSizer::new(0, None).rows(), 1);
    }

    #[test]
    fn unreadable_index_rows_are_kept_and_counted() {
        let toy = Toy::default();
        toy.put(b"a", 1);
        // Shorter than the 8-byte offset, and below every threshold's upper bound.
        toy.index.borrow_mut().insert(vec![0, 0, 0], ());
        let totals = sweep(
            &toy,
            5,
            ChunkSizer::new(10, None),
            &WriterTurns::default(),
            None,
        )
        .unwrap();
        assert_eq!((totals.rows_visited, totals.corrupt_kept), (2, 1));
        assert_eq!(totals.values_removed, 1);
        assert!(toy.index.borrow().contains_key([0u8, 0, 0].as_slice()));
        // Met and counted again by every later sweep, never deleted.
        assert_eq!(
            sweep(
                &toy,
                5,
                ChunkSizer::new(10, None),
                &WriterTurns::default(),
                None
            )
            .unwrap()
            .corrupt_kept,
            1
        );
        assert_eq!(
            plan_row(&[1, 2], |_| Ok::<Option<Vec<u8>>, ()>(None)),
            Ok(RowPlan {
                action: SweepAction::KeepUnreadableIndex,
                remove_data: None,
                remove_index: false
            })
        );
    }

    #[test]
    fn index_key_round_trips_and_bounds() {
        let k = index_key(5, b"abc");
        assert_eq!(parse_index_key(&k), Some((5, b"abc".as_slice())));
        assert!(k.as_slice() < index_upper_bound(6).as_slice());
        assert!(k.as_slice() >= index_upper_bound(5).as_slice());
        assert_eq!(parse_index_key(b"short"), None);
    }
}
