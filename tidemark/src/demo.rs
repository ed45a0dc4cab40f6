//! The side-by-side backend demo: every backend ingests the same deterministic stream while a
//! simulated lake trails it by a moving lag; the watermark follows the lake and covered state is
//! reclaimed incrementally. Each run ends by checking every key against a model of the stream.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use engine_api::watermark::reclaim_threshold;
use engine_api::{Engine, EngineOptions, LocalLookup, Result, WriteBatch};

use crate::backend::Backend;

/// Workload of the demo. `Default` is a stream of 60,000 records over 2,000 keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DemoConfig {
    /// Records written in total.
    pub records: u64,
    /// Size of the key space (keys are overwritten continually).
    pub keys: u64,
    /// Payload bytes per value.
    pub value_size: usize,
    /// Records per applied batch.
    pub batch: usize,
    /// The lake confirms progress after every this many batches.
    pub lake_every: u64,
    /// Smallest lag (in offsets) between the applied end and the lake; the real lag moves above it.
    pub min_lag: u64,
    /// Percentage of records that are deletes.
    pub delete_percent: u64,
    /// Retention distance `D`.
    pub retention_distance: u64,
    /// Seed of the deterministic stream.
    pub seed: u64,
}

impl Default for DemoConfig {
    fn default() -> Self {
        DemoConfig {
            records: 60_000,
            keys: 2_000,
            value_size: 128,
            batch: 100,
            lake_every: 20,
            min_lag: 500,
            delete_percent: 10,
            retention_distance: 0,
            seed: 0x71de_4a11,
        }
    }
}

/// What one backend did during the demo.
#[derive(Debug, Clone, PartialEq)]
pub struct DemoRow {
    /// The backend.
    pub backend: Backend,
    /// Records applied.
    pub applied: u64,
    /// Final watermark.
    pub watermark: u64,
    /// Final applied end.
    pub applied_end: u64,
    /// Live entries left (estimate where the backend only estimates).
    pub live_entries: u64,
    /// Whether `live_entries` is exact.
    pub live_exact: bool,
    /// Largest bytes-on-disk seen.
    pub peak_bytes: u64,
    /// Bytes on disk at the end.
    pub final_bytes: u64,
    /// Reclaim runs.
    pub reclaim_runs: u64,
    /// Values removed by reclamation.
    pub values_removed: u64,
    /// Tombstones removed by reclamation.
    pub tombstones_removed: u64,
    /// Time spent applying batches.
    pub ingest_time: Duration,
    /// Time spent in reclaim.
    pub reclaim_time: Duration,
    /// Keys checked against the model at the end.
    pub keys_checked: u64,
    /// Keys whose local state disagreed with the model (must be 0).
    pub mismatches: u64,
}

/// The latest record of a key in the model: its offset and value (`None` = deleted).
type ModelEntry = (u64, Option<Vec<u8>>);

/// Runs the workload on one backend in `dir` (a fresh directory per backend).
pub fn run_backend(backend: Backend, dir: &Path, config: &DemoConfig) -> Result<DemoRow> {
    let options = EngineOptions::default()
        .with_retention_distance(config.retention_distance)
        // The demo measures reclamation, not fsync latency.
        .with_sync_writes(false);
    let engine = backend.open(dir, options)?;
    let mut rng = SplitMix(config.seed);
    let mut model: BTreeMap<Vec<u8>, ModelEntry> = BTreeMap::new();
    let mut row = DemoRow {
        backend,
        applied: 0,
        watermark: 0,
        applied_end: 0,
        live_entries: 0,
        live_exact: true,
        peak_bytes: 0,
        final_bytes: 0,
        reclaim_runs: 0,
        values_removed: 0,
        tombstones_removed: 0,
        ingest_time: Duration::ZERO,
        reclaim_time: Duration::ZERO,
        keys_checked: 0,
        mismatches: 0,
    };
    let batch_size = config.batch.max(1) as u64;
    let keys = config.keys.max(1);
    let mut offset = 0u64;
    let mut batches = 0u64;
    while offset < config.records {
        let mut batch = WriteBatch::new();
        let end = (offset + batch_size).min(config.records);
        for o in offset..end {
            let key = format!("key-{:06}", rng.next() % keys).into_bytes();
            if rng.next() % 100 < config.delete_percent {
                batch.delete(key.clone(), o);
                model.insert(key, (o, None));
            } else {
                let value = payload(o, config.value_size);
                batch.put(key.clone(), value.clone(), o);
                model.insert(key, (o, Some(value)));
            }
        }
        offset = end;
        let started = Instant::now();
        row.applied += engine.apply(&batch)?.applied;
        row.ingest_time += started.elapsed();
        batches += 1;

        if batches % config.lake_every.max(1) == 0 {
            // The lake trails by a lag that moves, so its end never equals the applied end.
            let lag = config.min_lag + rng.next() % (config.min_lag + 1);
            engine.advance_watermark(offset.saturating_sub(lag))?;
            row.peak_bytes = row.peak_bytes.max(engine.stats()?.bytes_on_disk);
            let started = Instant::now();
            engine.reclaim()?;
            row.reclaim_time += started.elapsed();
        }
    }
    engine.flush()?;
    let stats = engine.stats()?;
    let threshold = reclaim_threshold(stats.watermark, config.retention_distance);
    for (key, expected) in &model {
        row.keys_checked += 1;
        if !matches_model(&engine.lookup(key)?, expected, threshold) {
            row.mismatches += 1;
        }
    }
    row.watermark = stats.watermark;
    row.applied_end = stats.applied_end;
    row.live_entries = stats.live_entries;
    row.live_exact = stats.live_entries_exact;
    row.final_bytes = stats.bytes_on_disk;
    row.peak_bytes = row.peak_bytes.max(stats.bytes_on_disk);
    row.reclaim_runs = stats.counters.reclaim_runs;
    row.values_removed = stats.counters.reclaimed_values;
    row.tombstones_removed = stats.counters.reclaimed_tombstones;
    Ok(row)
}

/// A local answer is right when it is exactly the model's latest record, or a miss for a key
/// whose latest record is covered (then the lake answers).
fn matches_model(local: &LocalLookup, (offset, value): &ModelEntry, threshold: u64) -> bool {
    match (local, value) {
        (LocalLookup::Value { offset: o, bytes }, Some(v)) => o == offset && bytes == v,
        (LocalLookup::Tombstone { offset: o }, None) => o == offset,
        (LocalLookup::Miss, _) => *offset < threshold,
        _ => false,
    }
}

fn payload(offset: u64, size: usize) -> Vec<u8> {
    let seed = offset.to_be_bytes();
    (0..size).map(|i| seed[i % 8] ^ (i as u8)).collect()
}

/// Renders rows as a fixed-width table.
pub fn render(rows: &[DemoRow]) -> String {
    let mut out = format!(
        "{:<8} {:>9} {:>9} {:>10} {:>12} {:>12} {:>9} {:>10} {:>10} {:>8} {:>9} {:>10}\n",
        "backend", "applied", "W", "live", "peak bytes", "final bytes", "reclaims", "values-", "tombs-", "ingest", "reclaim", "mismatch"
    );
    for r in rows {
        let live = if r.live_exact {
            r.live_entries.to_string()
        } else {
            format!("~{}", r.live_entries)
        };
        out.push_str(&format!(
            "{:<8} {:>9} {:>9} {:>10} {:>12} {:>12} {:>9} {:>10} {:>10} {:>7.2}s {:>8.2}s {:>5}/{}\n",
            r.backend.name(),
            r.applied,
            r.watermark,
            live,
            r.peak_bytes,
            r.final_bytes,
            r.reclaim_runs,
            r.values_removed,
            r.tombstones_removed,
            r.ingest_time.as_secs_f64(),
            r.reclaim_time.as_secs_f64(),
            r.mismatches,
            r.keys_checked,
        ));
    }
    out
}

/// A tiny deterministic generator, so every backend sees the identical stream.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_backend_reclaims_and_agrees_with_the_model() {
        let config = DemoConfig {
            records: 4_000,
            keys: 300,
            value_size: 32,
            batch: 50,
            lake_every: 4,
            min_lag: 100,
            ..DemoConfig::default()
        };
        let dir = tempfile::tempdir().unwrap();
        let rows: Vec<DemoRow> = Backend::compiled()
            .into_iter()
            .map(|b| run_backend(b, &dir.path().join(b.name()), &config).unwrap())
            .collect();
        let table = render(&rows);
        for r in &rows {
            assert_eq!(r.mismatches, 0, "{table}");
            assert_eq!(r.applied, 4_000, "{table}");
            assert!(r.values_removed > 0 && r.tombstones_removed > 0, "{table}");
            assert!(r.watermark > 0 && r.watermark < r.applied_end, "{table}");
            assert_eq!(r.keys_checked, rows[0].keys_checked);
        }
        // Every backend saw the same stream, so exact backends agree on what is left.
        let exact: Vec<_> = rows.iter().filter(|r| r.live_exact).map(|r| r.live_entries).collect();
        assert!(exact.windows(2).all(|w| w[0] == w[1]), "{table}");
    }
}
