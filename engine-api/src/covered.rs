//! Covered-entry accounting kept incrementally, so deciding whether a reclaim pays for itself
//! costs O(1) in the size of the store (§ Backends / Disk-engine skeleton / Covered estimate).
//!
//! Every commit writes its records at offsets in `[first, last]`; the skeleton remembers that as
//! a *run* (offset range, entries, bytes). Offsets only grow, so the entries below a threshold
//! are those of the runs below it. A run is **dense** when it holds one entry per offset of its
//! range (the WAL's usual shape); a dense run cut by the threshold contributes exactly the
//! entries below it. A sparse run cut by the threshold contributes all its entries: the estimate
//! is an upper bound, never low (a skipped reclaim must never leave covered entries because the
//! estimate read low). Overwritten versions count once per version, as the sweepers' index rows
//! do, and entries a backend removed on its own (RocksDB's background compactions) count until
//! the next reclaim: the estimate errs high, never low.
//!
//! The runs are persisted as metadata rows ([`ROW_PREFIX`]) written in the same atomic write as
//! the commit that changes them, so the estimate survives a crash and a reopen. Rows a reclaim
//! trims are written afterwards without a sync: losing them only makes the estimate high.
//! Contiguous dense commits extend the newest run (up to [`MAX_RUN_SPAN`] offsets), and beyond
//! [`MAX_RUNS`] the two oldest runs merge, so memory and rows stay bounded.

use std::collections::VecDeque;

use crate::batch::Record;

/// Most runs held before the two oldest are merged.
pub const MAX_RUNS: usize = 512;

/// A dense run is extended by contiguous dense commits up to this many offsets.
pub const MAX_RUN_SPAN: u64 = 4096;

/// Name prefix of the metadata rows holding the runs (`covered/<first offset, 16 hex digits>`).
pub const ROW_PREFIX: &str = "covered/";

/// Entries and their stored bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Covered {
    /// Entries (values and tombstones, counted once per version written).
    pub entries: u64,
    /// Bytes of their keys and encoded values.
    pub bytes: u64,
}

/// A metadata row to write (`Some`) or delete (`None`) beside a commit or after a reclaim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetaRow {
    /// The row's name (it starts with [`ROW_PREFIX`]).
    pub name: String,
    /// The encoded run, `None` to delete the row.
    pub value: Option<Vec<u8>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Run {
    first: u64,
    last: u64,
    count: u64,
    bytes: u64,
    dense: bool,
}

const ROW_LEN: usize = 25;

impl Run {
    fn span(&self) -> u64 {
        self.last.saturating_sub(self.first).saturating_add(1)
    }

    /// Entries and bytes of this run with offset `< threshold` (see the module docs).
    fn below(&self, threshold: u64) -> Covered {
        if threshold > self.last {
            return Covered {
                entries: self.count,
                bytes: self.bytes,
            };
        }
        if threshold <= self.first {
            return Covered::default();
        }
        if !self.dense {
            // Where in the range the entries sit is unknown: count them all.
            return Covered {
                entries: self.count,
                bytes: self.bytes,
            };
        }
        let part = threshold - self.first;
        Covered {
            entries: part.min(self.count),
            bytes: prorate(self.bytes, part, self.span()),
        }
    }

    fn name(&self) -> String {
        row_name(self.first)
    }

    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(ROW_LEN);
        out.extend_from_slice(&self.last.to_be_bytes());
        out.extend_from_slice(&self.count.to_be_bytes());
        out.extend_from_slice(&self.bytes.to_be_bytes());
        out.push(u8::from(self.dense));
        out
    }

    fn decode(name: &str, value: &[u8]) -> Option<Run> {
        let first = u64::from_str_radix(name.strip_prefix(ROW_PREFIX)?, 16).ok()?;
        if value.len() != ROW_LEN {
            return None;
        }
        let word = |i: usize| -> Option<u64> {
            let bytes: [u8; 8] = value.get(i * 8..i * 8 + 8)?.try_into().ok()?;
            Some(u64::from_be_bytes(bytes))
        };
        let dense = match value.get(24) {
            Some(0) => false,
            Some(1) => true,
            _ => return None,
        };
        let run = Run {
            first,
            last: word(0)?,
            count: word(1)?,
            bytes: word(2)?,
            dense,
        };
        (run.last >= run.first).then_some(run)
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

/// `total * part / span`, rounded up (so a dense run's bytes are never under-counted by the
/// rounding), computed without overflow.
fn prorate(total: u64, part: u64, span: u64) -> u64 {
    if span == 0 {
        return total;
    }
    let value = (u128::from(total) * u128::from(part)).div_ceil(u128::from(span));
    u64::try_from(value).unwrap_or(total).min(total)
}

/// The runs of written offsets not yet reclaimed, oldest first. See the module docs.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct CoveredRuns {
    runs: VecDeque<Run>,
}

impl CoveredRuns {
    /// Rebuilds the runs from their persisted rows. `None` when a row is damaged (the runs are
    /// derived data: the caller then seeds an upper bound with [`CoveredRuns::seeded`]).
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
        let run = Run {
            first: 0,
            last: applied_end - 1,
            count: entries,
            bytes,
            dense: false,
        };
        runs.runs.push_back(run);
        (runs, vec![run.put()])
    }

    /// Remembers a commit of `count` entries (`bytes` of keys and encoded values) at offsets in
    /// `[first, last]`, and returns the rows to write in the same atomic write as the commit.
    pub fn record(&mut self, first: u64, last: u64, count: u64, bytes: u64) -> Vec<MetaRow> {
        if count == 0 {
            return Vec::new();
        }
        let (first, last) = (first.min(last), last.max(first));
        let dense = last - first == count - 1;
        if let Some(newest) = self.runs.back_mut()
            && dense
            && newest.dense
            && newest.last.checked_add(1) == Some(first)
            && last - newest.first < MAX_RUN_SPAN
        {
            newest.last = last;
            newest.count = newest.count.saturating_add(count);
            newest.bytes = newest.bytes.saturating_add(bytes);
            return vec![newest.put()];
        }
        let run = Run {
            first,
            last,
            count,
            bytes,
            dense,
        };
        self.runs.push_back(run);
        let mut rows = vec![run.put()];
        if self.runs.len() > MAX_RUNS
            && let (Some(a), Some(b)) = (self.runs.pop_front(), self.runs.pop_front())
        {
            let merged = Run {
                first: a.first,
                last: a.last.max(b.last),
                count: a.count.saturating_add(b.count),
                bytes: a.bytes.saturating_add(b.bytes),
                dense: a.dense && b.dense && a.last.checked_add(1) == Some(b.first),
            };
            rows.extend([a.delete(), b.delete(), merged.put()]);
            self.runs.push_front(merged);
        }
        rows
    }

    /// [`record`](Self::record)s the records one commit writes (in offset order), cut where
    /// their offsets jump by [`MAX_RUN_SPAN`] or more, so one commit with a far-away record does
    /// not become one sparse run over the whole gap (which would count whole at every threshold
    /// inside it).
    pub fn record_writes(&mut self, writes: &[&Record]) -> Vec<MetaRow> {
        let mut rows = Vec::new();
        let mut pending: Option<(u64, u64, u64, u64)> = None; // first, last, count, bytes
        for record in writes {
            let (offset, len) = (record.offset(), record.stored_len());
            pending = match pending {
                Some((first, last, count, bytes))
                    if offset.saturating_sub(first) < MAX_RUN_SPAN =>
                {
                    Some((
                        first,
                        last.max(offset),
                        count + 1,
                        bytes.saturating_add(len),
                    ))
                }
                Some((first, last, count, bytes)) => {
                    rows.extend(self.record(first, last, count, bytes));
                    Some((offset, offset, 1, len))
                }
                None => Some((offset, offset, 1, len)),
            };
        }
        if let Some((first, last, count, bytes)) = pending {
            rows.extend(self.record(first, last, count, bytes));
        }
        rows
    }

    /// Entries and bytes with offset `< threshold` not yet reclaimed (never low).
    pub fn below(&self, threshold: u64) -> Covered {
        self.runs.iter().fold(Covered::default(), |acc, r| {
            let part = r.below(threshold);
            Covered {
                entries: acc.entries.saturating_add(part.entries),
                bytes: acc.bytes.saturating_add(part.bytes),
            }
        })
    }

    /// Every entry and byte not yet reclaimed.
    pub fn total(&self) -> Covered {
        self.below(u64::MAX)
    }

    /// What a reclaim at `threshold` would find, beside everything stored.
    pub fn reclaimable(&self, threshold: u64) -> crate::stats::Reclaimable {
        crate::stats::Reclaimable {
            threshold,
            covered: self.below(threshold),
            stored: self.total(),
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
            if r.dense {
                let gone = r.below(threshold);
                r.count = r.count.saturating_sub(gone.entries);
                r.bytes = r.bytes.saturating_sub(gone.bytes);
            }
            // A sparse run keeps its count: which of its entries went is unknown.
            r.first = threshold;
            if r.count == 0 {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn apply_rows(store: &mut std::collections::BTreeMap<String, Vec<u8>>, rows: Vec<MetaRow>) {
        for row in rows {
            match row.value {
                Some(v) => store.insert(row.name, v),
                None => store.remove(&row.name),
            };
        }
    }

    #[test]
    fn dense_runs_are_exact_and_forget_what_was_reclaimed() {
        let mut t = CoveredRuns::default();
        t.record(0, 9, 10, 100);
        t.record(10, 19, 10, 100);
        assert_eq!(t.runs(), 1, "contiguous dense commits extend one run");
        assert_eq!(t.below(0).entries, 0);
        assert_eq!(
            t.below(10),
            Covered {
                entries: 10,
                bytes: 100
            }
        );
        assert_eq!(t.below(15).entries, 15);
        assert_eq!(
            t.total(),
            Covered {
                entries: 20,
                bytes: 200
            }
        );
        t.reclaimed(15);
        assert_eq!(t.below(15), Covered::default());
        assert_eq!(
            t.below(100),
            Covered {
                entries: 5,
                bytes: 50
            }
        );
    }

    #[test]
    fn sparse_runs_never_read_low() {
        let mut t = CoveredRuns::default();
        // Ten entries at 0..=9, then one far away in the same commit: a sparse run.
        t.record(0, 1_000_000, 11, 110);
        assert_eq!(
            t.below(10).entries,
            11,
            "an upper bound, never the 0 a prorated share gives"
        );
        t.reclaimed(10);
        assert_eq!(t.below(10).entries, 0);
        assert_eq!(t.below(20).entries, 11);
        // Separate commits with a gap are separate runs: exact again.
        let mut t = CoveredRuns::default();
        t.record(0, 9, 10, 10);
        t.record(1_000_000, 1_000_000, 1, 1);
        assert_eq!(t.below(10).entries, 10);
    }

    #[test]
    fn far_apart_records_of_one_commit_are_separate_runs() {
        let records: Vec<Record> = (0..10)
            .map(|i| Record::put(vec![b'a'], vec![0; 4], i))
            .chain([Record::put(vec![b'b'], vec![], 1_000_000)])
            .collect();
        let writes: Vec<&Record> = records.iter().collect();
        let mut t = CoveredRuns::default();
        let rows = t.record_writes(&writes);
        assert_eq!((t.runs(), rows.len()), (2, 2));
        assert_eq!(t.below(10).entries, 10, "exact, not the whole commit");
        assert_eq!(
            t.below(10).bytes,
            10 * (1 + crate::codec::HEADER_LEN as u64 + 4)
        );
        assert_eq!(t.total().entries, 11);
    }

    #[test]
    fn rows_restore_the_same_estimate() {
        let mut store = std::collections::BTreeMap::new();
        let mut t = CoveredRuns::default();
        for i in 0..(MAX_RUNS as u64 * 3) {
            // Gaps between commits: one run each, merged beyond MAX_RUNS.
            apply_rows(&mut store, t.record(i * 10, i * 10 + 4, 5, 50));
        }
        assert!(t.runs() <= MAX_RUNS);
        apply_rows(&mut store, t.reclaimed(777));
        let restored = CoveredRuns::restore(store.clone()).unwrap();
        for threshold in [0, 5, 777, 5_000, u64::MAX] {
            assert_eq!(restored.below(threshold), t.below(threshold), "{threshold}");
        }
        assert_eq!(restored.runs(), t.runs());
        assert_eq!(store.len(), t.runs());

        store.insert(row_name(123_456_789), b"short".to_vec());
        assert!(CoveredRuns::restore(store).is_none());
    }

    #[test]
    fn seeded_counts_everything_once_anything_is_covered() {
        let (t, rows) = CoveredRuns::seeded(100, 50, 500);
        assert_eq!(rows.len(), 1);
        assert_eq!(t.below(0).entries, 0);
        assert_eq!(t.below(1).entries, 50);
        assert_eq!(CoveredRuns::seeded(0, 50, 1).0.runs(), 0);
    }
}
