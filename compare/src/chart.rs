//! The SVG charts of a comparison (`plotters`, no font files needed: SVG text is drawn by
//! the viewer), one panel per backend, each with its own y scale, since the backends' footprints
//! and latencies differ by an order of magnitude and a shared scale flattens the smaller ones.
//!
//! `bytes-on-disk.svg`: a backend's Tidemark line against its uncovered window and its baselines.
//! `write-p99.svg`: per backend, write p99 and lookup p99 per window side by side. The variant
//! sets the line: Tidemark solid blue (thick), scheduler-off orange short dashes, no-cleanup red
//! long dashes, all-or-nothing purple dots; the uncovered window thin solid grey.
//!
//! With `--buckets`, `buckets-bytes.svg`: a row per backend, the whole root's bytes against the
//! uncovered window and their ratio; `buckets-process.svg`: resident memory, descriptors and
//! threads over time, a line per backend.

use std::path::Path;

use crate::{Error, Result};
use plotters::coord::Shift;
use plotters::element::DashedPathElement;
use plotters::prelude::*;

use super::config::Variant;
use super::historical::report::{BucketsReport, Series};
use super::latency::WindowP99;
use super::report::{CompareReport, RunReport};

const WIDTH: u32 = 1200;
const PANEL_HEIGHT: u32 = 340;
const TITLE_HEIGHT: u32 = 44;
const MIB: f64 = 1024.0 * 1024.0;

/// One line of a panel.
struct Line {
    label: String,
    color: RGBColor,
    /// `None`: solid; `Some((dash, gap))` in pixels.
    dash: Option<(u32, u32)>,
    width: u32,
    points: Vec<(f64, f64)>,
}

/// One plot: a caption, a y axis of its own, its lines.
struct Panel {
    caption: String,
    y_desc: &'static str,
    lines: Vec<Line>,
}

/// Colour, dashes and width of a variant's line.
fn style(variant: Variant) -> (RGBColor, Option<(u32, u32)>, u32) {
    match variant {
        Variant::Tidemark => (RGBColor(31, 119, 180), None, 3),
        Variant::SchedulerOff => (RGBColor(255, 127, 14), Some((6, 4)), 2),
        Variant::NoCleanup => (RGBColor(214, 39, 40), Some((12, 6)), 2),
        Variant::AllOrNothing => (RGBColor(148, 103, 189), Some((2, 5)), 2),
    }
}

fn run_line(run: &RunReport, label: String, points: Vec<(f64, f64)>) -> Line {
    let (color, dash, width) = style(run.variant);
    Line {
        label,
        color,
        dash,
        width,
        points,
    }
}

/// The backends of the report, in the order they ran, each with its runs.
fn by_backend(report: &CompareReport) -> Vec<(&'static str, Vec<&RunReport>)> {
    let mut backends: Vec<(&'static str, Vec<&RunReport>)> = Vec::new();
    for run in &report.runs {
        match backends.iter_mut().find(|(b, _)| *b == run.backend) {
            Some((_, runs)) => runs.push(run),
            None => backends.push((run.backend, vec![run])),
        }
    }
    backends
}

/// `bytes-on-disk.svg`: a panel per backend with every variant's bytes on disk and the bytes of
/// the window the lake has not absorbed (thin), which the Tidemark line should stay near.
pub fn bytes_on_disk(report: &CompareReport, path: &Path) -> Result<()> {
    let panels = by_backend(report)
        .into_iter()
        .map(|(backend, runs)| {
            let mut lines: Vec<Line> = runs
                .iter()
                .map(|r| {
                    let points = r
                        .series
                        .at
                        .iter()
                        .zip(&r.series.bytes_on_disk)
                        .map(|(&t, &b)| (t, b as f64 / MIB))
                        .collect();
                    run_line(r, r.variant.name().to_string(), points)
                })
                .collect();
            // Every variant sees the same lake lag; the Tidemark run's window is the one its
            // line is measured against.
            let window = runs
                .iter()
                .find(|r| r.variant == Variant::Tidemark)
                .or(runs.first());
            if let Some(r) = window {
                lines.push(Line {
                    label: "uncovered window".into(),
                    color: RGBColor(110, 110, 110),
                    dash: None,
                    width: 1,
                    points: r
                        .series
                        .at
                        .iter()
                        .zip(&r.series.window_bytes)
                        .map(|(&t, &b)| (t, b as f64 / MIB))
                        .collect(),
                });
            }
            Panel {
                caption: backend.to_string(),
                y_desc: "MiB on disk",
                lines,
            }
        })
        .collect::<Vec<_>>();
    draw(
        path,
        &format!(
            "Bytes on disk while writing {} records/s (lake lag {}..{} offsets)",
            report.config.rate, report.config.lag_min, report.config.lag_max
        ),
        &panels,
        1,
    )
}

fn p99_points(series: &[WindowP99]) -> Vec<(f64, f64)> {
    series.iter().map(|w| (w.at, w.p99 * 1_000.0)).collect()
}

/// `write-p99.svg`: a row per backend, write p99 per window on the left and lookup p99 per
/// window on the right.
pub fn write_p99(report: &CompareReport, path: &Path) -> Result<()> {
    let mut panels = Vec::new();
    for (backend, runs) in by_backend(report) {
        let lines = |pick: fn(&RunReport) -> &[WindowP99]| {
            runs.iter()
                .map(|r| run_line(r, r.variant.name().to_string(), p99_points(pick(r))))
                .collect::<Vec<_>>()
        };
        panels.push(Panel {
            caption: format!("{backend}: write p99 (apply of {})", report.config.batch),
            y_desc: "ms",
            lines: lines(|r| &r.write_p99_series),
        });
        panels.push(Panel {
            caption: format!("{backend}: lookup p99"),
            y_desc: "ms",
            lines: lines(|r| &r.lookup_p99_series),
        });
    }
    draw(
        path,
        &format!(
            "Write and lookup p99 per {} ms window (batches of {} records)",
            (report.config.p99_window_seconds * 1_000.0).round(),
            report.config.batch
        ),
        &panels,
        2,
    )
}

/// Colour of the `i`th backend's line where one panel holds every backend.
fn backend_color(i: usize) -> RGBColor {
    const PALETTE: [RGBColor; 6] = [
        RGBColor(31, 119, 180),
        RGBColor(255, 127, 14),
        RGBColor(44, 160, 44),
        RGBColor(214, 39, 40),
        RGBColor(148, 103, 189),
        RGBColor(140, 86, 75),
    ];
    PALETTE[i % PALETTE.len()]
}

/// `buckets-bytes.svg` (`--buckets`): a row per backend, bytes of the whole root against the
/// uncovered window on the left, their ratio on the right (where the window is not empty).
pub fn buckets_bytes(report: &BucketsReport, path: &Path) -> Result<()> {
    let tidemark = style(Variant::Tidemark);
    let mut panels = Vec::new();
    for run in &report.runs {
        let series = &run.series;
        let mib = |values: &[u64]| {
            series
                .at
                .iter()
                .zip(values)
                .map(|(&t, &b)| (t, b as f64 / MIB))
                .collect::<Vec<_>>()
        };
        panels.push(Panel {
            caption: format!("{}: bytes on disk, {} buckets", run.backend, run.buckets),
            y_desc: "MiB",
            lines: vec![
                Line {
                    label: "every file under the root".into(),
                    color: tidemark.0,
                    dash: None,
                    width: tidemark.2,
                    points: mib(&series.bytes_on_disk),
                },
                Line {
                    label: "uncovered window".into(),
                    color: RGBColor(110, 110, 110),
                    dash: None,
                    width: 1,
                    points: mib(&series.window_bytes),
                },
            ],
        });
        panels.push(Panel {
            caption: format!("{}: bytes on disk / uncovered window", run.backend),
            y_desc: "ratio",
            lines: vec![Line {
                label: "bytes / window".into(),
                color: tidemark.0,
                dash: None,
                width: 2,
                points: series
                    .at
                    .iter()
                    .zip(&series.bytes_over_window)
                    .filter_map(|(&t, r)| r.map(|r| (t, r)))
                    .collect(),
            }],
        });
    }
    draw(
        path,
        &format!(
            "{} buckets, {} written at a time (the next every {} s): bytes on disk against the \
             uncovered window",
            report.scenario.buckets, report.scenario.active, report.scenario.rotate_seconds
        ),
        &panels,
        2,
    )
}

/// `buckets-process.svg` (`--buckets`): resident memory, open descriptors and threads of the
/// process over time, a line per backend.
pub fn buckets_process(report: &BucketsReport, path: &Path) -> Result<()> {
    let figure =
        |caption: &str, y_desc: &'static str, pick: &dyn Fn(&Series) -> Vec<Option<f64>>| Panel {
            caption: caption.into(),
            y_desc,
            lines: report
                .runs
                .iter()
                .enumerate()
                .map(|(i, run)| Line {
                    label: run.backend.to_string(),
                    color: backend_color(i),
                    dash: None,
                    width: 2,
                    points: run
                        .series
                        .at
                        .iter()
                        .zip(pick(&run.series))
                        .filter_map(|(&t, v)| v.map(|v| (t, v)))
                        .collect(),
                })
                .collect(),
        };
    let count = |values: &[Option<u64>]| values.iter().map(|v| v.map(|v| v as f64)).collect();
    let panels = [
        figure("resident memory", "MiB", &|s: &Series| {
            s.rss_bytes
                .iter()
                .map(|v| v.map(|b| b as f64 / MIB))
                .collect()
        }),
        figure("open file descriptors", "descriptors", &|s: &Series| {
            count(&s.open_fds)
        }),
        figure(
            "threads (the harness's runtime included)",
            "threads",
            &|s: &Series| count(&s.threads),
        ),
    ];
    draw(
        path,
        &format!(
            "The process with {} buckets open, {} written at a time",
            report.scenario.buckets, report.scenario.active
        ),
        &panels,
        1,
    )
}

fn chart_error(path: &Path, e: impl std::fmt::Display) -> Error {
    Error::Harness(format!("cannot draw {}: {e}", path.display()))
}

/// Draws `panels` in a grid of `columns`, every panel over the same time axis.
fn draw(path: &Path, title: &str, panels: &[Panel], columns: usize) -> Result<()> {
    let fail = |e: &dyn std::fmt::Display| chart_error(path, e);
    let columns = columns.max(1);
    let rows = panels.len().div_ceil(columns).max(1);
    let x_max = panels
        .iter()
        .flat_map(|p| &p.lines)
        .flat_map(|l| l.points.iter().map(|p| p.0))
        .fold(0.0_f64, f64::max)
        .max(1e-3);
    let height = TITLE_HEIGHT + PANEL_HEIGHT * rows as u32;
    let root = SVGBackend::new(path, (WIDTH, height)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| fail(&e))?;
    let body = root
        .titled(title, ("sans-serif", 22))
        .map_err(|e| fail(&e))?;
    for (area, panel) in body.split_evenly((rows, columns)).iter().zip(panels) {
        draw_panel(area, panel, x_max).map_err(|e| fail(&e))?;
    }
    root.present().map_err(|e| fail(&e))?;
    Ok(())
}

fn draw_panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    panel: &Panel,
    x_max: f64,
) -> std::result::Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    let y_max = panel
        .lines
        .iter()
        .flat_map(|l| l.points.iter().map(|p| p.1))
        .fold(0.0_f64, f64::max)
        .max(1e-3)
        * 1.08;
    let mut chart = ChartBuilder::on(area)
        .caption(&panel.caption, ("sans-serif", 17))
        .margin(10)
        .x_label_area_size(36)
        .y_label_area_size(58)
        .build_cartesian_2d(0.0..x_max, 0.0..y_max)?;
    chart
        .configure_mesh()
        .x_desc("seconds since the run started")
        .y_desc(panel.y_desc)
        .light_line_style(WHITE.mix(0.0))
        .draw()?;
    for line in &panel.lines {
        let style = line.color.stroke_width(line.width);
        let points = line.points.clone();
        match line.dash {
            None => chart
                .draw_series(LineSeries::new(points, style))?
                .label(line.label.clone())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 24, y)], style)),
            Some((dash, gap)) => chart
                .draw_series(DashedLineSeries::new(points, dash, gap, style))?
                .label(line.label.clone())
                .legend(move |(x, y)| {
                    DashedPathElement::new(vec![(x, y), (x + 24, y)], dash, gap, style)
                }),
        };
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.4))
        .label_font(("sans-serif", 13))
        .draw()?;
    Ok(())
}
