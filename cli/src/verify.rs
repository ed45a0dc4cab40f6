//! `tidemark verify DIR`: the offline consistency check of a store opened read-only
//! (`Engine::verify`), printed as a report; damage makes the exit status 1.

use serde::Serialize;
use tidemark::{Engine, OpenMode, Result, VerifyReport, display_key};

use crate::output::{Fields, JsonKey, emit};
use crate::store::{Store, StoreArgs, StoreJson};

/// The JSON document of `verify --json` (schema `tidemark.verify/1`, docs/CLI.md).
#[derive(Debug, Serialize)]
pub struct VerifyJson {
    #[serde(flatten)]
    store: StoreJson,
    clean: bool,
    damaged: u64,
    watermark: u64,
    applied_end: u64,
    watermark_above_applied_end: bool,
    values: u64,
    tombstones: u64,
    covered: u64,
    index_rows: Option<u64>,
    stale_index_rows: u64,
    engine_checks: Vec<String>,
    findings: Vec<FindingJson>,
}

/// One kind of damage found.
#[derive(Debug, Serialize)]
pub struct FindingJson {
    kind: &'static str,
    description: &'static str,
    count: u64,
    examples: Vec<ExampleJson>,
}

/// One damaged entry.
#[derive(Debug, Serialize)]
pub struct ExampleJson {
    #[serde(flatten)]
    key: JsonKey,
    detail: String,
}

/// Opens the store read-only, checks it and prints the report; `Ok(false)` when it found
/// damage.
pub fn run(store: &StoreArgs, json: bool) -> Result<bool> {
    let store = store.open(OpenMode::ReadOnly)?;
    let report = store.engine.verify()?;
    emit(json, &to_json(&store, &report), || render(&store, &report))?;
    Ok(report.is_clean())
}

fn to_json(store: &Store, r: &VerifyReport) -> VerifyJson {
    VerifyJson {
        store: store.json_header("tidemark.verify/1"),
        clean: r.is_clean(),
        damaged: r.damaged(),
        watermark: r.watermark,
        applied_end: r.applied_end,
        watermark_above_applied_end: r.watermark_above_applied_end(),
        values: r.values,
        tombstones: r.tombstones,
        covered: r.covered,
        index_rows: r.index_rows,
        stale_index_rows: r.stale_index_rows,
        engine_checks: r.engine_checks.clone(),
        findings: r
            .findings
            .iter()
            .map(|f| FindingJson {
                kind: f.damage.name(),
                description: f.damage.describe(),
                count: f.count,
                examples: f
                    .examples
                    .iter()
                    .map(|x| ExampleJson {
                        key: JsonKey::new(&x.key),
                        detail: x.detail.clone(),
                    })
                    .collect(),
            })
            .collect(),
    }
}

fn render(store: &Store, r: &VerifyReport) -> String {
    let mut f = Fields::default();
    f.add(
        "store",
        format!(
            "{} ({}, format {})",
            store.dir.display(),
            store.backend,
            store.format
        ),
    )
    .progress(r.watermark, r.applied_end)
    .add(
        "entries",
        format!(
            "{} values, {} tombstones ({} below W, waiting for a reclaim)",
            r.values, r.tombstones, r.covered
        ),
    )
    .add(
        "offset index",
        match r.index_rows {
            Some(rows) => format!(
                "{rows} rows ({} stale: left by overwrites, dropped by the sweep that reaches them)",
                r.stale_index_rows
            ),
            None => "none (this backend keeps no offset index)".to_string(),
        },
    )
    .add(
        "engine checks",
        if r.engine_checks.is_empty() {
            "none that only read".to_string()
        } else {
            r.engine_checks.join("; ")
        },
    )
    .add(
        "result",
        if r.is_clean() {
            "clean".to_string()
        } else {
            format!("DAMAGED: {} entries", r.damaged())
        },
    );
    let mut out = f.render();
    for finding in &r.findings {
        out.push_str(&format!(
            "  {} {}: {}\n",
            finding.count,
            finding.damage.name(),
            finding.damage.describe()
        ));
        for x in &finding.examples {
            let key = if x.key.is_empty() {
                "(before the first key)".to_string()
            } else {
                display_key(&x.key)
            };
            out.push_str(&format!("      {key}: {}\n", x.detail));
        }
        let shown = finding.examples.len() as u64;
        if finding.count > shown {
            out.push_str(&format!("      ... and {} more\n", finding.count - shown));
        }
    }
    out
}
