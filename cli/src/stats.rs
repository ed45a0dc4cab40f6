//! `tidemark stats DIR`: a store's statistics, read without writing anything.

use serde::Serialize;
use tidemark::{CounterSnapshot, Engine, EngineStats, OpenMode, Result};

use crate::output::{Fields, emit};
use crate::store::{Store, StoreArgs, StoreJson};
use tidemark::units;

/// The JSON document of `stats --json` (schema `tidemark.stats/1`, docs/CLI.md).
#[derive(Debug, Serialize)]
pub struct StatsJson {
    #[serde(flatten)]
    store: StoreJson,
    watermark: u64,
    applied_end: u64,
    watermark_above_applied_end: bool,
    bytes_on_disk: u64,
    live_entries: u64,
    live_entries_exact: bool,
    covered_estimate: u64,
    counters: CountersJson,
}

/// The counters since the engine was opened (always zero for a store the tool just opened).
#[derive(Debug, Serialize)]
pub struct CountersJson {
    applied: u64,
    covered: u64,
    already_applied: u64,
    reclaimed_values: u64,
    reclaimed_tombstones: u64,
    reclaim_runs: u64,
    corrupt_kept: u64,
}

impl From<&CounterSnapshot> for CountersJson {
    fn from(c: &CounterSnapshot) -> Self {
        CountersJson {
            applied: c.applied,
            covered: c.covered,
            already_applied: c.already_applied,
            reclaimed_values: c.reclaimed_values,
            reclaimed_tombstones: c.reclaimed_tombstones,
            reclaim_runs: c.reclaim_runs,
            corrupt_kept: c.corrupt_kept,
        }
    }
}

/// Opens the store read-only and prints its statistics.
pub fn run(store: &StoreArgs, json: bool) -> Result<()> {
    let store = store.open(OpenMode::ReadOnly)?;
    let stats = store.engine.stats()?;
    emit(json, &to_json(&store, &stats), || render(&store, &stats))
}

fn to_json(store: &Store, s: &EngineStats) -> StatsJson {
    StatsJson {
        store: store.json_header("tidemark.stats/1"),
        watermark: s.watermark,
        applied_end: s.applied_end,
        watermark_above_applied_end: s.watermark > s.applied_end,
        bytes_on_disk: s.bytes_on_disk,
        live_entries: s.live_entries,
        live_entries_exact: s.live_entries_exact,
        covered_estimate: s.covered_estimate,
        counters: CountersJson::from(&s.counters),
    }
}

fn render(store: &Store, s: &EngineStats) -> String {
    let c = &s.counters;
    let mut f = Fields::default();
    f.add("store", store.dir.display().to_string())
        .add(
            "backend",
            format!("{} (format {})", store.backend, store.format),
        )
        .progress(s.watermark, s.applied_end)
        .add("on disk", units::bytes_exact(s.bytes_on_disk))
        .add(
            "live entries",
            format!(
                "{} ({})",
                s.live_entries,
                if s.live_entries_exact {
                    "exact"
                } else {
                    "estimate"
                }
            ),
        )
        .add(
            "covered",
            format!(
                "{} (estimate of entries below W not yet reclaimed)",
                s.covered_estimate
            ),
        )
        .add(
            "counters",
            format!(
                "since this open: applied {}, covered {}, already applied {}, reclaimed {} values \
                 and {} tombstones in {} runs, corrupt kept {}",
                c.applied,
                c.covered,
                c.already_applied,
                c.reclaimed_values,
                c.reclaimed_tombstones,
                c.reclaim_runs,
                c.corrupt_kept
            ),
        );
    f.render()
}
