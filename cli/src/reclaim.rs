//! `tidemark reclaim DIR [--watermark W]`: advance the watermark (optional) of an existing store
//! and reclaim what it covers, then print the report.

use serde::Serialize;
use tidemark::{Engine, OpenMode, ReclaimReport, Result, WatermarkUpdate};

use crate::output::{Fields, emit};
use crate::store::{Store, StoreArgs, StoreJson};
use tidemark::units;

/// The JSON document of `reclaim --json` (schema `tidemark.reclaim/1`, docs/CLI.md).
#[derive(Debug, Serialize)]
pub struct ReclaimJson {
    #[serde(flatten)]
    store: StoreJson,
    watermark_update: Option<WatermarkUpdateJson>,
    watermark: u64,
    applied_end: u64,
    threshold: u64,
    values_removed: u64,
    tombstones_removed: u64,
    corrupt_kept: u64,
    bytes_before: u64,
    bytes_after: u64,
    duration_seconds: f64,
}

/// What `--watermark` did.
#[derive(Debug, Serialize)]
pub struct WatermarkUpdateJson {
    previous: u64,
    requested: u64,
    current: u64,
    moved: bool,
}

impl From<&WatermarkUpdate> for WatermarkUpdateJson {
    fn from(u: &WatermarkUpdate) -> Self {
        WatermarkUpdateJson {
            previous: u.previous,
            requested: u.requested,
            current: u.current,
            moved: u.moved,
        }
    }
}

/// Opens the existing store read-write (creating nothing), advances `W` to `watermark` when
/// given, reclaims everything below `W` (the tool keeps no retention distance) and makes it
/// durable before printing.
pub fn run(store: &StoreArgs, watermark: Option<u64>, json: bool) -> Result<()> {
    let store = store.open(OpenMode::MustExist)?;
    let update = watermark
        .map(|w| store.engine.advance_watermark(w))
        .transpose()?;
    let report = store.engine.reclaim()?;
    // A reclaim need not be durable by itself; the tool's is, before it says it is done.
    store.engine.flush()?;
    let doc = to_json(&store, update.as_ref(), &report);
    emit(json, &doc, || render(&store, update.as_ref(), &report))
}

fn to_json(store: &Store, update: Option<&WatermarkUpdate>, r: &ReclaimReport) -> ReclaimJson {
    ReclaimJson {
        store: store.json_header("tidemark.reclaim/1"),
        watermark_update: update.map(WatermarkUpdateJson::from),
        watermark: store.engine.watermark(),
        applied_end: store.engine.applied_end(),
        threshold: r.threshold,
        values_removed: r.values_removed,
        tombstones_removed: r.tombstones_removed,
        corrupt_kept: r.corrupt_kept,
        bytes_before: r.bytes_before,
        bytes_after: r.bytes_after,
        duration_seconds: r.duration.as_secs_f64(),
    }
}

fn render(store: &Store, update: Option<&WatermarkUpdate>, r: &ReclaimReport) -> String {
    let mut f = Fields::default();
    f.add(
        "store",
        format!("{} ({})", store.dir.display(), store.backend),
    );
    if let Some(u) = update {
        f.add("watermark W", update_line(u));
    }
    f.add(
        "threshold",
        format!("{} (entries below it are removed)", r.threshold),
    )
    .add(
        "removed",
        format!(
            "{} values, {} tombstones",
            r.values_removed, r.tombstones_removed
        ),
    )
    .add("corrupt kept", r.corrupt_kept.to_string())
    .add(
        "on disk",
        format!(
            "{} -> {}",
            units::bytes_exact(r.bytes_before),
            units::bytes_exact(r.bytes_after)
        ),
    )
    .add("took", units::duration(r.duration));
    f.render()
}

fn update_line(u: &WatermarkUpdate) -> String {
    if !u.moved && u.requested <= u.current {
        format!(
            "{} (asked {}: not above W, unchanged)",
            u.current, u.requested
        )
    } else if !u.moved {
        format!(
            "{} (asked {}: W is already at the applied end, unchanged)",
            u.current, u.requested
        )
    } else if u.current < u.requested {
        format!(
            "{} -> {} (asked {}: clamped to the applied end)",
            u.previous, u.current, u.requested
        )
    } else {
        format!("{} -> {}", u.previous, u.current)
    }
}
