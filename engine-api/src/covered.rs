//! Covered-entry accounting kept incrementally, so deciding whether a reclaim pays for itself
//! costs O(1) in the size of the store (§ Backends / Disk-engine skeleton / Covered estimate).
//!
//! Every commit writes its records at offsets in `[first, last]`; the skeleton remembers that as
//! a *run*: its offset range, how many entries and bytes it holds, the most entries written at
//! one offset (a batch may repeat an offset) and the smallest and largest entry. Offsets only
//! grow, so the entries below a threshold are those of the runs below it, plus part of the one
//! run the threshold may cut. For that part the run gives bounds, never a guess: at most
//! `(threshold − first) × most-per-offset` entries lie below the threshold, and at most the
//! largest entry's bytes each. A run holding one entry per offset (the WAL's usual shape) is cut
//! exactly. So the covered figures are upper bounds for every batch the contract accepts
//! (repeated offsets, gaps, both at once): a skipped reclaim must never leave covered entries
//! because the estimate read low. Each run also keeps lower bounds of its entries and bytes, so
//! the uncovered part of a cut run is counted at most at what it certainly holds, and
//! [`Reclaimable::garbage_ratio`](crate::stats::Reclaimable::garbage_ratio) never reads low
//! either. Overwritten versions count once per version, as the sweepers' index rows do, and
//! entries a backend removed on its own (RocksDB's background compactions) count until the next
//! reclaim: the estimate errs high, never low.
//!
//! The runs are persisted as metadata rows ([`ROW_PREFIX`]) written in the same atomic write as
//! the commit that changes them, so the estimate survives a crash and a reopen. Rows a reclaim
//! trims are written afterwards without a sync: losing them only makes the estimate high.
//! Contiguous commits of one entry per offset extend the newest run (up to [`MAX_RUN_SPAN`]
//! offsets), and beyond [`MAX_RUNS`] the two oldest runs merge, so memory and rows stay bounded.

use std::collections::VecDeque;

use crate::batch::Record;
pub use crate::stats::Covered;
use crate::stats::Reclaimable;

/// Most runs held before the two oldest are merged.
pub const MAX_RUNS: usize = 512;

/// A run of one entry per offset is extended by contiguous commits of the same shape up to this
/// many offsets; one commit's records are cut into separate runs where offsets jump this far.
pub const MAX_RUN_SPAN: u64 = 4096;

/// Name prefix of the metadata rows holding the runs (`covered/<first offset, 16 hex digits>`).
pub const ROW_PREFIX: &str = "covered/";

/// A metadata row to write (`Some`) or delete (`None`) beside a commit or after a reclaim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetaRow {
    /// The row's name (it starts with [`ROW_PREFIX`]).
    pub name: String,
    /// The encoded run, `None` to delete the row.
    pub value: Option<Vec<u8>>,
}

/// Upper (`_hi`) and lower (`_lo`) bounds of the entries and bytes some offsets hold. Equal
/// while a run is whole; a reclaim that cuts a run leaves bounds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Bounds {
    entries_hi: u64,
    entries_lo: u64,
    bytes_hi: u64,
    bytes_lo: u64,
}

impl Bounds {
    fn exact(entries: u64, bytes: u64) -> Self {
        Bounds {
            entries_hi: entries,
            entries_lo: entries,
            bytes_hi: bytes,
            bytes_lo: bytes,
        }
    }

    /// The upper bounds, as the estimate reports them.
    fn high(&self) -> Covered {
        Covered {
            entries: self.entries_hi,
            bytes: self.bytes_hi,
        }
    }

    /// The lower bounds: what these offsets certainly hold.
    fn low(&self) -> Covered {
        Covered {
            entries: self.entries_lo,
            bytes: self.bytes_lo,
        }
    }

    fn plus(&self, other: &Bounds) -> Bounds {
        Bounds {
            entries_hi: self.entries_hi.saturating_add(other.entries_hi),
            entries_lo: self.entries_lo.saturating_add(other.entries_lo),
            bytes_hi: self.bytes_hi.saturating_add(other.bytes_hi),
            bytes_lo: self.bytes_lo.saturating_add(other.bytes_lo),
        }
    }

    /// A lower bound never above its upper bound (a damaged or hand-made row could say so).
    fn consistent(mut self) -> Bounds {
        self.entries_lo = self.entries_lo.min(self.entries_hi);
        self.bytes_lo = self.bytes_lo.min(self.bytes_hi);
        self
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Run {
    first: u64,
    last: u64,
    /// What the run holds.
    held: Bounds,
    /// The most entries written at one offset of the range (1 when each offset holds at most
    /// one). Bounds the entries below a threshold that cuts the run.
    per_offset: u64,
    /// The smallest and the largest entry written (key and encoded value bytes).
    min_len: u64,
    max_len: u64,
}

/// Length of a row as written: eight `u64`s (see [`Run::encode`]).
const ROW_LEN: usize = 64;
/// Length of a row written by older builds: `last`, entries, bytes and a "dense" flag (which
/// could be wrong for a batch with both a repeated offset and a gap, so it is not trusted).
const LEGACY_ROW_LEN: usize = 25;

impl Run {
    /// A run over `[first, last]` of which only upper bounds of its entries and bytes are
    /// known: wherever a threshold cuts it, it counts whole.
    fn totals_only(first: u64, last: u64, entries: u64, bytes: u64) -> Run {
        Run {
            first,
            last,
            held: Bounds {
                entries_hi: entries,
                entries_lo: 0,
                bytes_hi: bytes,
                bytes_lo: 0,
            },
            // Any number of the entries may sit at one offset, and no entry is larger than
            // all of them together.
            per_offset: entries,
            min_len: 0,
            max_len: bytes,
        }
    }

    fn span(&self) -> u64 {
        self.last.saturating_sub(self.first).saturating_add(1)
    }

    /// One entry at every offset of the range, exactly: contiguous runs of this shape merge
    /// without losing precision.
    fn dense(&self) -> bool {
        self.per_offset <= 1 && self.held.entries_lo == self.span()
    }

    /// The bounds of what the run holds below `threshold` and at or above it.
    fn split(&self, threshold: u64) -> (Bounds, Bounds) {
        if threshold <= self.first {
            return (Bounds::default(), self.held);
        }
        if threshold > self.last {
            return (self.held, Bounds::default());
        }
        let held = self.held;
        let per_offset = self.per_offset.max(1);
        let below_hi = held
            .entries_hi
            .min((threshold - self.first).saturating_mul(per_offset));
        let above_hi = held
            .entries_hi
            .min((self.last - threshold + 1).saturating_mul(per_offset));
        let below_lo = held.entries_lo.saturating_sub(above_hi);
        let above_lo = held.entries_lo.saturating_sub(below_hi);
        // One side holds at most what the whole holds less what the other side certainly
        // holds, and at most its entries at the largest size each.
        let below_bytes_hi = held
            .bytes_hi
            .saturating_sub(above_lo.saturating_mul(self.min_len))
            .min(below_hi.saturating_mul(self.max_len));
        let above_bytes_hi = held
            .bytes_hi
            .saturating_sub(below_lo.saturating_mul(self.min_len))
            .min(above_hi.saturating_mul(self.max_len));
        let below = Bounds {
            entries_hi: below_hi,
            entries_lo: below_lo,
            bytes_hi: below_bytes_hi,
            bytes_lo: held
                .bytes_lo
                .saturating_sub(above_bytes_hi)
                .max(below_lo.saturating_mul(self.min_len)),
        };
        let above = Bounds {
            entries_hi: above_hi,
            entries_lo: above_lo,
            bytes_hi: above_bytes_hi,
            bytes_lo: held
                .bytes_lo
                .saturating_sub(below_bytes_hi)
                .max(above_lo.saturating_mul(self.min_len)),
        };
        (below.consistent(), above.consistent())
    }

    /// Two runs as one: `b` follows `a` (runs never share an offset; if rows say otherwise, the
    /// per-offset bound adds up instead).
    fn merged(a: &Run, b: &Run) -> Run {
        let disjoint = a.last < b.first;
        Run {
            first: a.first.min(b.first),
            last: a.last.max(b.last),
            held: a.held.plus(&b.held),
            per_offset: if disjoint {
                a.per_offset.max(b.per_offset)
            } else {
                a.per_offset.saturating_add(b.per_offset)
            },
            min_len: a.min_len.min(b.min_len),
            max_len: a.max_len.max(b.max_len),
        }
    }

    fn name(&self) -> String {
        row_name(self.first)
    }

    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(ROW_LEN);
        for word in [
            self.last,
            self.held.entries_hi,
            self.held.entries_lo,
            self.held.bytes_hi,
            self.held.bytes_lo,
            self.per_offset,
            self.min_len,
            self.max_len,
        ] {
            out.extend_from_slice(&word.to_be_bytes());
        }
        out
    }

    fn decode(name: &str, value: &[u8]) -> Option<Run> {
        let first = u64::from_str_radix(name.strip_prefix(ROW_PREFIX)?, 16).ok()?;
        let word = |i: usize| -> Option<u64> {
            let bytes: [u8; 8] = value.get(i * 8..i * 8 + 8)?.try_into().ok()?;
            Some(u64::from_be_bytes(bytes))
        };
        let run = match value.len() {
            ROW_LEN => Run {
                first,
                last: word(0)?,
                held: Bounds {
                    entries_hi: word(1)?,
                    entries_lo: word(2)?,
                    bytes_hi: word(3)?,
                    bytes_lo: word(4)?,
                }
                .consistent(),
                per_offset: word(5)?,
                min_len: word(6)?,
                max_len: word(7)?,
            },
            // Only the totals are trusted (the "dense" flag could be wrong).
            LEGACY_ROW_LEN => Run::totals_only(first, word(0)?, word(1)?, word(2)?),
            _ => return None,
        };
        (run.last >= run.first && run.min_len <= run.max_len).then_some(run)
    }

    fn put(&self) -> MetaRow {
        MetaRow {
            name: self.name(),
            value: Some(self.encode()),
        }
    }

    fn delete(&self) -> MetaRow {
        MetaRow {
            name: self.name(),
            value: None,
        }
    }
}

fn row_name(first: u64) -> String {
    format!("{ROW_PREFIX}{first:016x}")
}

/// The run one commit's records make, built record by record in offset order.
#[derive(Debug, Clone, Copy)]
struct RunBuilder {
    run: Run,
    /// Entries at the newest offset so far.
    at_last: u64,
    /// A record came before an earlier offset (a validated batch never does): from then on
    /// where the entries sit is unknown, and every one may be at any offset.
    unordered: bool,
}

impl RunBuilder {
    fn start(offset: u64, len: u64) -> Self {
        RunBuilder {
            run: Run {
                first: offset,
                last: offset,
                held: Bounds::exact(1, len),
                per_offset: 1,
                min_len: len,
                max_len: len,
            },
            at_last: 1,
            unordered: false,
        }
    }

    fn add(&mut self, offset: u64, len: u64) {
        let run = &mut self.run;
        if offset == run.last {
            self.at_last = self.at_last.saturating_add(1);
        } else if offset > run.last {
            run.last = offset;
            self.at_last = 1;
        } else {
            run.first = run.first.min(offset);
            self.unordered = true;
        }
        run.held = run.held.plus(&Bounds::exact(1, len));
        run.per_offset = if self.unordered {
            run.held.entries_hi
        } else {
            run.per_offset.max(self.at_last)
        };
        run.min_len = run.min_len.min(len);
        run.max_len = run.max_len.max(len);
    }
}

/// The runs of written offsets not yet reclaimed, oldest first. See the module docs.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct CoveredRuns {
    runs: VecDeque<Run>,
}

impl CoveredRuns {
    /// Rebuilds the runs from their persisted rows (also the rows older builds wrote). `None`
    /// when a row is damaged (the runs are derived data: the caller then seeds an upper bound
    /// with [`CoveredRuns::seeded`]).
    pub fn restore(rows: impl IntoIterator<Item = (String, Vec<u8>)>) -> Option<Self> {
        let mut runs: Vec<Run> = rows
            .into_iter()
            .map(|(name, value)| Run::decode(&name, &value))
            .collect::<Option<_>>()?;
        runs.sort_by_key(|r| r.first);
        Some(CoveredRuns { runs: runs.into() })
    }

    /// An upper bound for a store whose history is unknown (written before runs were
    /// persisted, or with damaged rows): `entries` and `bytes` anywhere in `[0, applied_end)`,
    /// all counted as soon as the threshold is above 0. Returns the rows that persist it.
    pub fn seeded(applied_end: u64, entries: u64, bytes: u64) -> (Self, Vec<MetaRow>) {
        let mut runs = CoveredRuns::default();
        if applied_end == 0 || entries == 0 {
            return (runs, Vec::new());
        }
        let run = Run::totals_only(0, applied_end - 1, entries, bytes);
        runs.runs.push_back(run);
        (runs, vec![run.put()])
    }

    /// Remembers the records one commit writes (in offset order, as a batch holds them) and
    /// returns the rows to write in the same atomic write as the commit. Records are cut into
    /// separate runs where their offsets jump by [`MAX_RUN_SPAN`] or more, so one commit with a
    /// far-away record does not become one run over the whole gap (which would count whole at
    /// every threshold inside it).
    pub fn record_writes(&mut self, writes: &[&Record]) -> Vec<MetaRow> {
        let mut rows = Vec::new();
        let mut pending: Option<RunBuilder> = None;
        for record in writes {
            let (offset, len) = (record.offset(), record.stored_len());
            match &mut pending {
                Some(builder) if offset.saturating_sub(builder.run.first) < MAX_RUN_SPAN => {
                    builder.add(offset, len);
                }
                _ => {
                    if let Some(done) = pending.take() {
                        rows.extend(self.push(done.run));
                    }
                    pending = Some(RunBuilder::start(offset, len));
                }
            }
        }
        if let Some(done) = pending {
            rows.extend(self.push(done.run));
        }
        rows
    }

    /// Adds one commit's run (extending the newest when both hold one entry per offset and
    /// touch), merging the two oldest beyond [`MAX_RUNS`]; returns the rows to write.
    fn push(&mut self, run: Run) -> Vec<MetaRow> {
        if let Some(newest) = self.runs.back_mut()
            && run.dense()
            && newest.dense()
            && newest.last.checked_add(1) == Some(run.first)
            && run.last - newest.first < MAX_RUN_SPAN
        {
            *newest = Run::merged(newest, &run);
            return vec![newest.put()];
        }
        self.runs.push_back(run);
        let mut rows = vec![run.put()];
        if self.runs.len() > MAX_RUNS
            && let (Some(a), Some(b)) = (self.runs.pop_front(), self.runs.pop_front())
        {
            let merged = Run::merged(&a, &b);
            rows.extend([a.delete(), b.delete(), merged.put()]);
            self.runs.push_front(merged);
        }
        rows
    }

    /// Entries and bytes with offset `< threshold` not yet reclaimed (upper bounds: never low).
    pub fn below(&self, threshold: u64) -> Covered {
        self.runs.iter().fold(Covered::default(), |acc, r| {
            add(acc, r.split(threshold).0.high())
        })
    }

    /// Every entry and byte not yet reclaimed (upper bounds).
    pub fn total(&self) -> Covered {
        self.below(u64::MAX)
    }

    /// What a reclaim at `threshold` would find: the covered entries and bytes (upper bounds),
    /// and as stored those plus what the offsets at or above `threshold` certainly hold (lower
    /// bounds), so covered ÷ stored never reads low.
    pub fn reclaimable(&self, threshold: u64) -> Reclaimable {
        let (covered, uncovered) = self.runs.iter().fold(
            (Covered::default(), Covered::default()),
            |(covered, uncovered), r| {
                let (below, above) = r.split(threshold);
                (add(covered, below.high()), add(uncovered, above.low()))
            },
        );
        Reclaimable {
            threshold,
            covered,
            stored: add(covered, uncovered),
        }
    }

    /// Forgets what a reclaim at `threshold` removed, and returns the rows to write.
    pub fn reclaimed(&mut self, threshold: u64) -> Vec<MetaRow> {
        let mut rows = Vec::new();
        self.runs.retain_mut(|r| {
            if threshold <= r.first {
                return true;
            }
            rows.push(r.delete());
            if threshold > r.last {
                return false;
            }
            r.held = r.split(threshold).1;
            r.first = threshold;
            if r.held.entries_hi == 0 {
                return false;
            }
            rows.push(r.put());
            true
        });
        rows
    }

    /// Number of runs held.
    pub fn runs(&self) -> usize {
        self.runs.len()
    }
}

fn add(a: Covered, b: Covered) -> Covered {
    Covered {
        entries: a.entries.saturating_add(b.entries),
        bytes: a.bytes.saturating_add(b.bytes),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::*;

    fn apply_rows(store: &mut BTreeMap<String, Vec<u8>>, rows: Vec<MetaRow>) {
        for row in rows {
            match row.value {
                Some(v) => store.insert(row.name, v),
                None => store.remove(&row.name),
            };
        }
    }

    /// One commit of records at `offsets`, each with a value of `value_len` bytes.
    fn commit(t: &mut CoveredRuns, offsets: &[u64], value_len: usize) -> Vec<MetaRow> {
        let records: Vec<Record> = offsets
            .iter()
            .map(|&o| Record::put(vec![b'k'], vec![0; value_len], o))
            .collect();
        let writes: Vec<&Record> = records.iter().collect();
        t.record_writes(&writes)
    }

    /// Stored bytes of one record of [`commit`].
    fn entry_len(value_len: usize) -> u64 {
        (1 + crate::codec::HEADER_LEN + value_len) as u64
    }

    #[test]
    fn one_entry_per_offset_is_exact_and_forgets_what_was_reclaimed() {
        let mut t = CoveredRuns::default();
        commit(&mut t, &(0..10).collect::<Vec<_>>(), 4);
        commit(&mut t, &(10..20).collect::<Vec<_>>(), 4);
        assert_eq!(
            t.runs(),
            1,
            "contiguous commits of one entry per offset extend one run"
        );
        let len = entry_len(4);
        assert_eq!(t.below(0), Covered::default());
        assert_eq!(
            t.below(10),
            Covered {
                entries: 10,
                bytes: 10 * len
            }
        );
        assert_eq!(t.below(15).entries, 15);
        assert_eq!(t.total().entries, 20);
        t.reclaimed(15);
        assert_eq!(t.below(15), Covered::default());
        assert_eq!(
            t.below(100),
            Covered {
                entries: 5,
                bytes: 5 * len
            }
        );
        let r = t.reclaimable(17);
        assert_eq!((r.covered.entries, r.stored.entries), (2, 5));
    }

    #[test]
    fn a_repeated_offset_beside_a_gap_never_reads_low() {
        // Four entries at 1, 3, 3, 4 look like one per offset by their count and range alone.
        let mut t = CoveredRuns::default();
        commit(&mut t, &[1, 3, 3, 4], 4);
        assert!(t.below(3).entries >= 1);
        t.reclaimed(3); // removes the entry at 1
        assert!(t.below(5).entries >= 3, "{:?}", t.below(5));
        // Five entries at 2, 2, 3, 3, 6 of equal size: four below 4, four fifths of the bytes.
        let mut t = CoveredRuns::default();
        commit(&mut t, &[2, 2, 3, 3, 6], 4);
        assert_eq!(t.below(4).entries, 4);
        let r = t.reclaimable(4);
        assert_eq!(r.covered.bytes, 4 * entry_len(4));
        assert!((r.garbage_ratio() - 0.8).abs() < 1e-9, "{r:?}");
    }

    #[test]
    fn far_apart_records_of_one_commit_are_separate_runs() {
        let mut t = CoveredRuns::default();
        let mut offsets: Vec<u64> = (0..10).collect();
        offsets.push(1_000_000);
        let rows = commit(&mut t, &offsets, 4);
        assert_eq!((t.runs(), rows.len()), (2, 2));
        assert_eq!(t.below(10).entries, 10, "exact, not the whole commit");
        assert_eq!(t.below(10).bytes, 10 * entry_len(4));
        assert_eq!(t.total().entries, 11);
    }

    #[test]
    fn rows_restore_the_same_estimate() {
        let mut store = BTreeMap::new();
        let mut t = CoveredRuns::default();
        for i in 0..(MAX_RUNS as u64 * 3) {
            // Gaps between commits: one run each, merged beyond MAX_RUNS.
            let rows = commit(&mut t, &[i * 10, i * 10 + 2, i * 10 + 2, i * 10 + 4], 3);
            apply_rows(&mut store, rows);
        }
        assert!(t.runs() <= MAX_RUNS);
        apply_rows(&mut store, t.reclaimed(777));
        let restored = CoveredRuns::restore(store.clone()).unwrap();
        for threshold in [0, 5, 777, 778, 5_000, u64::MAX] {
            assert_eq!(restored.below(threshold), t.below(threshold), "{threshold}");
            assert_eq!(
                restored.reclaimable(threshold),
                t.reclaimable(threshold),
                "{threshold}"
            );
        }
        assert_eq!(restored.runs(), t.runs());
        assert_eq!(store.len(), t.runs());

        store.insert(row_name(123_456_789), b"short".to_vec());
        assert!(CoveredRuns::restore(store).is_none());
    }

    #[test]
    fn rows_of_older_builds_count_whole_when_cut() {
        // last = 9, 10 entries, 100 bytes, flagged "dense" (a flag older builds could get wrong).
        let mut legacy = Vec::new();
        for word in [9u64, 10, 100] {
            legacy.extend_from_slice(&word.to_be_bytes());
        }
        legacy.push(1);
        let t = CoveredRuns::restore([(row_name(0), legacy)]).unwrap();
        assert_eq!(
            t.below(1),
            Covered {
                entries: 10,
                bytes: 100
            }
        );
        assert_eq!(t.below(0), Covered::default());
    }

    #[test]
    fn seeded_counts_everything_once_anything_is_covered() {
        let (t, rows) = CoveredRuns::seeded(100, 50, 500);
        assert_eq!(rows.len(), 1);
        assert_eq!(t.below(0).entries, 0);
        assert_eq!(t.below(1).entries, 50);
        assert_eq!(t.below(1).bytes, 500);
        assert_eq!(CoveredRuns::seeded(0, 50, 1).0.runs(), 0);
    }

    /// One step of a generated history.
    #[derive(Debug, Clone)]
    enum Step {
        /// A commit: offset steps from the last offset written (0 repeats it) and value sizes.
        Commit(Vec<(u64, usize)>),
        /// A reclaim at `threshold` (an offset back from the newest one written).
        Reclaim(u64),
        /// The runs rebuilt from their rows (a reopen).
        Reopen,
    }

    fn step() -> impl Strategy<Value = Step> {
        let gap = prop_oneof![
            6 => 0u64..3,
            1 => 3u64..40,
            1 => Just(MAX_RUN_SPAN),
        ];
        prop_oneof![
            6 => proptest::collection::vec((gap, 0usize..64), 1..12).prop_map(Step::Commit),
            2 => (0u64..60).prop_map(Step::Reclaim),
            1 => Just(Step::Reopen),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1024))]

        /// Against the exact entries held, for arbitrary commits (repeated offsets, gaps, jumps,
        /// varied sizes), reclaims and reopens: the covered entries and bytes below every
        /// threshold are never low, and neither is the garbage ratio.
        #[test]
        fn estimates_never_read_low(steps in proptest::collection::vec(step(), 1..40)) {
            let mut t = CoveredRuns::default();
            let mut rows = BTreeMap::new();
            // (offset, stored bytes) of every entry written and not yet reclaimed.
            let mut held: Vec<(u64, u64)> = Vec::new();
            let mut next = 0u64;
            for step in steps {
                match step {
                    Step::Commit(records) => {
                        let mut built = Vec::new();
                        let mut previous: Option<u64> = None;
                        for (gap, value_len) in records {
                            // A commit starts at or after the next fresh offset; within it,
                            // offsets never decrease (a gap of 0 repeats one).
                            let offset = previous.map_or(next, |p| p) + gap;
                            previous = Some(offset);
                            built.push(Record::put(vec![b'k'], vec![0; value_len], offset));
                        }
                        next = previous.map_or(next, |p| p + 1);
                        let writes: Vec<&Record> = built.iter().collect();
                        apply_rows(&mut rows, t.record_writes(&writes));
                        held.extend(built.iter().map(|r| (r.offset(), r.stored_len())));
                    }
                    Step::Reclaim(back) => {
                        let threshold = next.saturating_sub(back);
                        apply_rows(&mut rows, t.reclaimed(threshold));
                        held.retain(|&(o, _)| o >= threshold);
                    }
                    Step::Reopen => {
                        t = CoveredRuns::restore(rows.clone()).expect("rows restore");
                    }
                }
                // Every threshold that can matter: at and just past each entry held.
                let mut thresholds: Vec<u64> = held.iter().flat_map(|&(o, _)| [o, o + 1]).collect();
                thresholds.extend([0, next + 1]);
                for threshold in thresholds {
                    let exact = held.iter().filter(|&&(o, _)| o < threshold).fold(
                        Covered::default(),
                        |acc, &(_, len)| add(acc, Covered { entries: 1, bytes: len }),
                    );
                    let stored: u64 = held.iter().map(|&(_, len)| len).sum();
                    let r = t.reclaimable(threshold);
                    prop_assert!(r.covered.entries >= exact.entries,
                        "threshold {threshold}: {r:?} < exact {exact:?}");
                    prop_assert!(r.covered.bytes >= exact.bytes,
                        "threshold {threshold}: {r:?} < exact {exact:?}");
                    prop_assert_eq!(t.below(threshold), r.covered);
                    if stored > 0 {
                        let ratio = exact.bytes as f64 / stored as f64;
                        prop_assert!(r.garbage_ratio() + 1e-9 >= ratio,
                            "threshold {threshold}: ratio {} < exact {ratio} ({r:?})",
                            r.garbage_ratio());
                    }
                }
                prop_assert!(t.runs() <= MAX_RUNS);
            }
        }
    }
}
