//! The offline consistency check of a store (§ Engine contract / verify), like a filesystem
//! check: every stored value decodes, no tag is at or above the applied end, and where the
//! storage keeps an offset index, the index and the data agree.
//!
//! The rules live here once. A storage only walks what it holds and feeds each row to a
//! [`Verifier`] (data rows with [`Verifier::data_row`]; a storage with an offset index checks it
//! with the disk toolkit's `offset_index::VerifyIndex`) and reports its engine's own checks; the
//! [`VerifyReport`] says what was found. Nothing is ever repaired.

use std::collections::BTreeMap;

use crate::codec::{self, Decoded};

/// How many examples (the first damaged entries met, in scan order) a finding keeps.
pub const MAX_EXAMPLES: usize = 5;

/// A kind of damage `verify` detects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Damage {
    /// A data row whose stored bytes do not decode (§ Stored value format / Value encoding).
    UndecodableValue,
    /// A value or tombstone tagged at or above the applied end: a write the store's own progress
    /// says was never applied.
    TagAtOrAboveAppliedEnd,
    /// An offset-index row shorter than its 8-byte offset: it names no entry.
    UnparsableIndexRow,
    /// An offset-index row naming a write the data does not hold: no data row for its key, or
    /// one with an older tag than the row's offset.
    IndexRowWithoutData,
    /// A decodable data row without the index row at its tag: no sweep would ever reclaim it.
    DataRowWithoutIndexRow,
    /// The storage engine's own check failed (RocksDB: a block checksum mismatch).
    EngineCheckFailed,
    /// The rows read do not add up to the digest the store's commits recorded with them (sled):
    /// some rows are older than the metadata, missing or extra, although each one decodes.
    DigestMismatch,
}

impl Damage {
    /// Every kind, in report order.
    pub const ALL: [Damage; 7] = [
        Damage::UndecodableValue,
        Damage::TagAtOrAboveAppliedEnd,
        Damage::UnparsableIndexRow,
        Damage::IndexRowWithoutData,
        Damage::DataRowWithoutIndexRow,
        Damage::EngineCheckFailed,
        Damage::DigestMismatch,
    ];

    /// A stable `snake_case` name (the CLI's JSON output uses it).
    pub fn name(self) -> &'static str {
        match self {
            Damage::UndecodableValue => "undecodable_value",
            Damage::TagAtOrAboveAppliedEnd => "tag_at_or_above_applied_end",
            Damage::UnparsableIndexRow => "unparsable_index_row",
            Damage::IndexRowWithoutData => "index_row_without_data",
            Damage::DataRowWithoutIndexRow => "data_row_without_index_row",
            Damage::EngineCheckFailed => "engine_check_failed",
            Damage::DigestMismatch => "digest_mismatch",
        }
    }

    /// One line for people.
    pub fn describe(self) -> &'static str {
        match self {
            Damage::UndecodableValue => "stored values that do not decode",
            Damage::TagAtOrAboveAppliedEnd => "entries tagged at or above the applied end",
            Damage::UnparsableIndexRow => "offset-index rows too short to name an entry",
            Damage::IndexRowWithoutData => "offset-index rows naming a write the data lacks",
            Damage::DataRowWithoutIndexRow => "data rows missing their offset-index row",
            Damage::EngineCheckFailed => "failures of the storage engine's own checks",
            Damage::DigestMismatch => "rows that do not add up to the digest recorded with them",
        }
    }
}

/// One damaged entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Example {
    /// The key of the data row; for an index row, the raw index row; for a failed engine check,
    /// the last data key read before it (empty when it failed before the first); for a digest,
    /// the name of the metadata row holding it.
    pub key: Vec<u8>,
    /// What exactly is wrong.
    pub detail: String,
}

/// Every entry found with one kind of damage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// The kind.
    pub damage: Damage,
    /// How many entries have it.
    pub count: u64,
    /// The first [`MAX_EXAMPLES`] of them, in scan order.
    pub examples: Vec<Example>,
}

/// What `verify` found. `findings` is empty when the store is consistent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifyReport {
    /// The backend.
    pub backend: &'static str,
    /// The watermark `W` the store holds.
    pub watermark: u64,
    /// The applied end the store holds.
    pub applied_end: u64,
    /// Data rows that decode as values.
    pub values: u64,
    /// Data rows that decode as tombstones.
    pub tombstones: u64,
    /// Decodable entries below `W`: covered, waiting for a reclaim (not damage).
    pub covered: u64,
    /// Offset-index rows read; `None` where the storage keeps no offset index.
    pub index_rows: Option<u64>,
    /// Index rows left behind by an overwrite (the data row holds a newer tag): normal; the
    /// next sweep below them drops them.
    pub stale_index_rows: u64,
    /// The storage engine's own checks that ran (empty when it offers none that only reads).
    pub engine_checks: Vec<String>,
    /// One entry per kind of damage found, in [`Damage::ALL`] order.
    pub findings: Vec<Finding>,
}

impl VerifyReport {
    /// Whether no damage was found.
    pub fn is_clean(&self) -> bool {
        self.findings.is_empty()
    }

    /// Damaged entries found, all kinds together.
    pub fn damaged(&self) -> u64 {
        self.findings.iter().map(|f| f.count).sum()
    }

    /// The finding of one kind, `None` when there is no such damage.
    pub fn finding(&self, damage: Damage) -> Option<&Finding> {
        self.findings.iter().find(|f| f.damage == damage)
    }

    /// `W` above the applied end. Only [`Engine::adopt_lake_watermark`] sets such a `W` (a
    /// lagging replica recovering, § Lake progress and snapshots / recover), and the store does
    /// not record whether it did, so this is reported, never counted as damage.
    ///
    /// [`Engine::adopt_lake_watermark`]: crate::Engine::adopt_lake_watermark
    pub fn watermark_above_applied_end(&self) -> bool {
        self.watermark > self.applied_end
    }
}

/// Collects what a storage feeds it into a [`VerifyReport`].
#[derive(Debug)]
pub struct Verifier {
    report: VerifyReport,
    findings: BTreeMap<Damage, Finding>,
}

impl Verifier {
    /// A verifier for a store of `backend` holding `watermark` and `applied_end`.
    pub fn new(backend: &'static str, watermark: u64, applied_end: u64) -> Self {
        Verifier {
            report: VerifyReport {
                backend,
                watermark,
                applied_end,
                values: 0,
                tombstones: 0,
                covered: 0,
                index_rows: None,
                stale_index_rows: 0,
                engine_checks: Vec::new(),
                findings: Vec::new(),
            },
            findings: BTreeMap::new(),
        }
    }

    /// Checks one data row: it decodes, and its tag is below the applied end. Returns the tag
    /// when the row decodes.
    pub fn data_row(&mut self, key: &[u8], stored: &[u8]) -> Option<u64> {
        let decoded = match codec::decode(key, stored) {
            Ok(decoded) => decoded,
            Err(e) => {
                let detail = match e {
                    crate::Error::Corrupt { reason, .. } => reason,
                    other => other.to_string(),
                };
                self.found(Damage::UndecodableValue, key, detail);
                return None;
            }
        };
        match decoded {
            Decoded::Value { .. } => self.report.values += 1,
            Decoded::Tombstone { .. } => self.report.tombstones += 1,
        }
        let tag = decoded.offset();
        if tag < self.report.watermark {
            self.report.covered += 1;
        }
        if tag >= self.report.applied_end {
            let detail = format!("tag {tag} >= applied end {}", self.report.applied_end);
            self.found(Damage::TagAtOrAboveAppliedEnd, key, detail);
        }
        Some(tag)
    }

    /// Counts `rows` offset-index rows checked (the report's `index_rows`, `Some` from the
    /// first call on, also for 0 rows).
    pub fn count_index_rows(&mut self, rows: u64) {
        self.report.index_rows = Some(self.report.index_rows.unwrap_or(0) + rows);
    }

    /// Counts one stale offset-index row: its data row holds a newer write (not damage).
    pub fn count_stale_index_row(&mut self) {
        self.report.stale_index_rows += 1;
    }

    /// Records that the storage engine's own check `name` ran.
    pub fn engine_check(&mut self, name: impl Into<String>) {
        self.report.engine_checks.push(name.into());
    }

    /// Records a failure of the storage engine's own check, met after reading `last_key` (`None`
    /// when it failed before the first key).
    pub fn engine_check_failed(&mut self, last_key: Option<&[u8]>, detail: impl Into<String>) {
        self.found(
            Damage::EngineCheckFailed,
            last_key.unwrap_or_default(),
            detail.into(),
        );
    }

    /// Records one damaged entry.
    pub fn found(&mut self, damage: Damage, key: &[u8], detail: String) {
        let finding = self.findings.entry(damage).or_insert_with(|| Finding {
            damage,
            count: 0,
            examples: Vec::new(),
        });
        finding.count += 1;
        if finding.examples.len() < MAX_EXAMPLES {
            finding.examples.push(Example {
                key: key.to_vec(),
                detail,
            });
        }
    }

    /// The report.
    pub fn finish(mut self) -> VerifyReport {
        self.report.findings = self.findings.into_values().collect();
        self.report
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn examples_are_capped_but_every_entry_counted() {
        let mut v = Verifier::new("toy", 0, 1);
        for i in 0..(MAX_EXAMPLES as u64 + 3) {
            v.data_row(format!("k{i}").as_bytes(), &[0]);
        }
        v.engine_check_failed(None, "checksum mismatch");
        let r = v.finish();
        let f = r.finding(Damage::UndecodableValue).unwrap();
        assert_eq!(
            (f.count, f.examples.len()),
            (MAX_EXAMPLES as u64 + 3, MAX_EXAMPLES)
        );
        assert!(f.examples[0].detail.contains("unknown kind"), "{f:?}");
        let f = r.finding(Damage::EngineCheckFailed).unwrap();
        assert_eq!(f.examples[0].key, Vec::<u8>::new());
        assert_eq!(r.index_rows, None);
    }
}
