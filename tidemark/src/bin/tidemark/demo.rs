//! The side-by-side backend demo: every backend runs the full Tidemark path on the same
//! deterministic stream. A [`HistoricalBucket`] applies the stream while a [`MemoryLake`] absorbs it
//! and confirms progress with a moving lag (the two end offsets are never equal); each confirmation
//! refreshes the lake lookuper, publishes the watermark and asks the [`ReclaimScheduler`] for a
//! reclaim, which runs in the background, coalesced and rate-limited. Lookups through the bucket
//! are checked against a model of the stream while this happens and, for every key, at the end.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tidemark::rng::SplitMix64;
use tidemark::{
    Backend, BucketId, Engine, EngineOptions, Error, HistoricalBucket, LakeSnapshot, MemoryLake,
    ReclaimScheduler, Result, SchedulerConfig, WriteBatch,
};

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
    /// The scheduler reclaims a bucket at most once per this interval.
    pub reclaim_interval: Duration,
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
            reclaim_interval: Duration::from_millis(20),
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
    /// Reclaim requests the bucket made (one per published watermark).
    pub reclaim_requests: u64,
    /// Reclaims the scheduler actually ran (the rest were coalesced or rate-limited).
    pub reclaim_runs: u64,
    /// Values removed by reclamation.
    pub values_removed: u64,
    /// Tombstones removed by reclamation.
    pub tombstones_removed: u64,
    /// Lookups answered by the lake after a local miss.
    pub lake_fallbacks: u64,
    /// Time spent applying batches.
    pub ingest_time: Duration,
    /// Lookups checked against the model (during the stream and for every key at the end).
    pub lookups_checked: u64,
    /// Lookups that disagreed with the model (must be 0).
    pub mismatches: u64,
}

/// The model: every key's latest value (`None` = deleted).
type Model = BTreeMap<Vec<u8>, Option<Vec<u8>>>;

/// Runs the workload on one backend in `dir` (a fresh directory per backend).
pub fn run_backend(backend: Backend, dir: &Path, config: &DemoConfig) -> Result<DemoRow> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(run_bucket(backend, dir, config))
}

async fn run_bucket(backend: Backend, dir: &Path, config: &DemoConfig) -> Result<DemoRow> {
    let options = EngineOptions::default()
        .with_retention_distance(config.retention_distance)
        // The demo measures reclamation, not fsync latency.
        .with_sync_writes(false);
    let engine = backend.open(dir, options)?;
    let lake = Arc::new(MemoryLake::new());
    let scheduler = ReclaimScheduler::new(
        SchedulerConfig::default().with_min_interval(config.reclaim_interval),
    )?;
    let bucket = HistoricalBucket::new(engine.clone(), lake.clone())
        .with_scheduler(&scheduler, BucketId(0))?;
    bucket.recover(LakeSnapshot::default()).await?;

    let mut rng = SplitMix64::new(config.seed);
    let mut model = Model::new();
    let mut applied = 0u64;
    let mut peak_bytes = 0u64;
    let mut ingest_time = Duration::ZERO;
    let mut lookups_checked = 0u64;
    let mut mismatches = 0u64;
    let batch_size = config.batch.max(1) as u64;
    let keys = config.keys.max(1);
    let mut offset = 0u64;
    let mut batches = 0u64;
    while offset < config.records {
        let mut batch = WriteBatch::new();
        let end = (offset + batch_size).min(config.records);
        for o in offset..end {
            let key = format!("key-{:06}", rng.next_u64() % keys).into_bytes();
            if rng.next_u64() % 100 < config.delete_percent {
                batch.delete(key.clone(), o);
                model.insert(key, None);
            } else {
                let value = payload(o, config.value_size);
                batch.put(key.clone(), value.clone(), o);
                model.insert(key, Some(value));
            }
        }
        offset = end;
        // The WAL record reaches the lake's input as soon as it is committed.
        lake.append_batch(&batch)?;
        let started = Instant::now();
        applied += bucket.apply(batch).await?.applied;
        ingest_time += started.elapsed();
        batches += 1;

        if batches.is_multiple_of(config.lake_every.max(1)) {
            // The lake trails by a lag that moves, so its end never equals the applied end.
            let lag = config.min_lag + rng.next_u64() % (config.min_lag + 1);
            let snapshot = lake.commit(offset.saturating_sub(lag))?;
            bucket.on_lake_progress(snapshot).await?;
            peak_bytes = peak_bytes.max(engine.stats()?.bytes_on_disk);
            // Spot-check lookups while background reclaims run.
            for _ in 0..20 {
                let key = format!("key-{:06}", rng.next_u64() % keys).into_bytes();
                lookups_checked += 1;
                if bucket.lookup(&key).await? != model.get(&key).cloned().flatten() {
                    mismatches += 1;
                }
            }
        }
    }
    // Let every requested reclaim finish (the scheduler's own work is what the table reports),
    // then sweep once more so every backend ends on the same threshold and the final sizes
    // compare like with like.
    scheduler.settled(BucketId(0)).await;
    scheduler.shutdown().await;
    let reclaim_engine = engine.clone();
    tokio::task::spawn_blocking(move || reclaim_engine.reclaim())
        .await
        .map_err(|e| Error::Internal(format!("the final reclaim task did not complete: {e}")))??;
    engine.flush()?;
    for (key, expected) in &model {
        lookups_checked += 1;
        if bucket.lookup(key).await? != *expected {
            mismatches += 1;
        }
    }
    let stats = engine.stats()?;
    let bucket_stats = bucket.stats();
    let scheduled = scheduler.stats().total;
    Ok(DemoRow {
        backend,
        applied,
        watermark: stats.watermark,
        applied_end: stats.applied_end,
        live_entries: stats.live_entries,
        live_exact: stats.live_entries_exact,
        peak_bytes: peak_bytes.max(stats.bytes_on_disk),
        final_bytes: stats.bytes_on_disk,
        reclaim_requests: bucket_stats.reclaim_requests,
        reclaim_runs: scheduled.runs,
        values_removed: stats.counters.reclaimed_values,
        tombstones_removed: stats.counters.reclaimed_tombstones,
        lake_fallbacks: bucket_stats.lake_fallbacks,
        ingest_time,
        lookups_checked,
        mismatches,
    })
}

fn payload(offset: u64, size: usize) -> Vec<u8> {
    let seed = offset.to_be_bytes();
    (0..size).map(|i| seed[i % 8] ^ (i as u8)).collect()
}

/// Renders rows as a fixed-width table.
pub fn render(rows: &[DemoRow]) -> String {
    let mut out = format!(
        "{:<8} {:>8} {:>8} {:>8} {:>11} {:>11} {:>9} {:>8} {:>8} {:>8} {:>8} {:>8} {:>12}\n",
        "backend",
        "applied",
        "W",
        "live",
        "peak bytes",
        "final bytes",
        "requests",
        "reclaims",
        "values-",
        "tombs-",
        "lake hit",
        "ingest",
        "mismatches"
    );
    for r in rows {
        let live = if r.live_exact {
            r.live_entries.to_string()
        } else {
            format!("~{}", r.live_entries)
        };
        out.push_str(&format!(
            "{:<8} {:>8} {:>8} {:>8} {:>11} {:>11} {:>9} {:>8} {:>8} {:>8} {:>8} {:>7.2}s {:>12}\n",
            r.backend.name(),
            r.applied,
            r.watermark,
            live,
            r.peak_bytes,
            r.final_bytes,
            r.reclaim_requests,
            r.reclaim_runs,
            r.values_removed,
            r.tombstones_removed,
            r.lake_fallbacks,
            r.ingest_time.as_secs_f64(),
            format!("{}/{}", r.mismatches, r.lookups_checked),
        ));
    }
    out
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
            assert!(r.lake_fallbacks > 0, "{table}");
            assert!(
                r.reclaim_runs >= 1 && r.reclaim_requests >= r.reclaim_runs,
                "{table}"
            );
            assert_eq!(r.lookups_checked, rows[0].lookups_checked);
        }
        // Every backend saw the same stream, so exact backends agree on what is left.
        let exact: Vec<_> = rows
            .iter()
            .filter(|r| r.live_exact)
            .map(|r| r.live_entries)
            .collect();
        assert!(exact.windows(2).all(|w| w[0] == w[1]), "{table}");
    }
}
