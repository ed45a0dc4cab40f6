//! The two SVG charts of a comparison (`plotters`, no font files needed: SVG text is drawn by
//! the viewer): bytes on disk over time and write p99 over time, one line per backend and
//! variant. A backend keeps its colour; the variant sets the line: Tidemark solid, scheduler-off
//! short dashes, no-cleanup long dashes, all-or-nothing dotted.

use std::path::Path;

use plotters::element::DashedPathElement;
use plotters::prelude::*;
use tidemark::{Error, Result};

use super::config::Variant;
use super::report::{CompareReport, RunReport};

const SIZE: (u32, u32) = (1100, 620);
const MIB: f64 = 1024.0 * 1024.0;

/// One line of a chart.
struct Line {
    label: String,
    color: RGBColor,
    /// `None`: solid; `Some((dash, gap))` in pixels.
    dash: Option<(u32, u32)>,
    width: u32,
    points: Vec<(f64, f64)>,
}

fn color(backend: &str) -> RGBColor {
    match backend {
        "sled" => RGBColor(31, 119, 180),
        "redb" => RGBColor(214, 39, 40),
        "rocksdb" => RGBColor(44, 160, 44),
        _ => RGBColor(127, 127, 127),
    }
}

fn dash(variant: Variant) -> Option<(u32, u32)> {
    match variant {
        Variant::Tidemark => None,
        Variant::SchedulerOff => Some((5, 3)),
        Variant::NoCleanup => Some((12, 6)),
        Variant::AllOrNothing => Some((2, 5)),
    }
}

fn run_line(run: &RunReport, points: Vec<(f64, f64)>) -> Line {
    Line {
        label: format!("{} {}", run.backend, run.variant),
        color: color(run.backend),
        dash: dash(run.variant),
        width: 2,
        points,
    }
}

/// `bytes-on-disk.svg`: every run's bytes on disk, and for each backend the bytes of the window
/// the lake has not absorbed (thin), which is what its Tidemark line should stay near.
pub fn bytes_on_disk(report: &CompareReport, path: &Path) -> Result<()> {
    let mut lines: Vec<Line> = report
        .runs
        .iter()
        .map(|r| {
            let points = r
                .series
                .at
                .iter()
                .zip(&r.series.bytes_on_disk)
                .map(|(&t, &b)| (t, b as f64 / MIB))
                .collect();
            run_line(r, points)
        })
        .collect();
    for r in report
        .runs
        .iter()
        .filter(|r| r.variant == Variant::Tidemark)
    {
        lines.push(Line {
            label: format!("{} uncovered window", r.backend),
            color: color(r.backend),
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
    draw(
        path,
        &format!(
            "Bytes on disk while writing {} records/s (lake lag {}..{} offsets)",
            report.config.rate, report.config.lag_min, report.config.lag_max
        ),
        "MiB on disk",
        &lines,
    )
}

/// `write-p99.svg`: every run's write p99 per window.
pub fn write_p99(report: &CompareReport, path: &Path) -> Result<()> {
    let lines: Vec<Line> = report
        .runs
        .iter()
        .map(|r| {
            let points = r
                .write_p99_series
                .iter()
                .map(|w| (w.at, w.p99 * 1_000.0))
                .collect();
            run_line(r, points)
        })
        .collect();
    draw(
        path,
        &format!(
            "Write p99 per {} ms window (batches of {} records)",
            (report.config.p99_window_seconds * 1_000.0).round(),
            report.config.batch
        ),
        "p99 apply latency, ms",
        &lines,
    )
}

fn chart_error(path: &Path, e: impl std::fmt::Display) -> Error {
    Error::Internal(format!("cannot draw {}: {e}", path.display()))
}

fn draw(path: &Path, title: &str, y_desc: &str, lines: &[Line]) -> Result<()> {
    let fail = |e: &dyn std::fmt::Display| chart_error(path, e);
    let x_max = lines
        .iter()
        .flat_map(|l| l.points.iter().map(|p| p.0))
        .fold(0.0_f64, f64::max)
        .max(1e-3);
    let y_max = lines
        .iter()
        .flat_map(|l| l.points.iter().map(|p| p.1))
        .fold(0.0_f64, f64::max)
        .max(1e-3)
        * 1.05;
    let root = SVGBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE).map_err(|e| fail(&e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(42)
        .y_label_area_size(64)
        .build_cartesian_2d(0.0..x_max, 0.0..y_max)
        .map_err(|e| fail(&e))?;
    chart
        .configure_mesh()
        .x_desc("seconds since the run started")
        .y_desc(y_desc)
        .light_line_style(WHITE.mix(0.0))
        .draw()
        .map_err(|e| fail(&e))?;
    for line in lines {
        let style = line.color.stroke_width(line.width);
        let points = line.points.clone();
        match line.dash {
            None => chart
                .draw_series(LineSeries::new(points, style))
                .map_err(|e| fail(&e))?
                .label(line.label.clone())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 24, y)], style)),
            Some((dash, gap)) => chart
                .draw_series(DashedLineSeries::new(points, dash, gap, style))
                .map_err(|e| fail(&e))?
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
        .draw()
        .map_err(|e| fail(&e))?;
    root.present().map_err(|e| fail(&e))?;
    Ok(())
}
