//! PNG plots of a results directory (`plotters`' bitmap backend, text in DejaVu Sans embedded
//! from the `dejavu` crate: no system font is read): throughput against threads per workload
//! and shape (one line per protocol, one panel per network), average latency per network in
//! one-way delays with reference lines at 2-5 delays, the cross-shard study, the scale
//! study, commit-latency CDFs (the latency study) and YCSB per workload. Each plot is drawn only when the directory holds points for it. A point that
//! failed (or committed nothing) is never drawn as zero nor left out: it is a cross on the x
//! axis in its line's colour, the line breaks there, and the legend says "failed".

use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Once;

use anyhow::anyhow;
use plotters::coord::cartesian::Cartesian2d;
use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;

use crate::suite::matrix::{
    seed_threads, Shape, Study, PROTOCOLS, REMOTE_ITEM_PCTS, SEED_NETS, SEED_SHAPES, YCSB_NETS, YCSB_VARIANTS,
};
use crate::suite::results::{PointRecord, SuiteDir};

/// The font family the plots use (registered from the embedded DejaVu Sans).
const FONT: &str = "sans-serif";
/// Size of a plot of 2 x 2 panels, pixels.
pub const GRID_SIZE: (u32, u32) = (1200, 900);
/// Size of a single-panel plot, pixels.
pub const SINGLE_SIZE: (u32, u32) = (900, 600);
/// Size of a plot of two panels side by side, pixels.
pub const PAIR_SIZE: (u32, u32) = (1500, 560);
/// The one-way delay of each seed network, ms (seed 000's table).
const ONE_WAY_MS: [f64; 4] = [2.0, 30.0, 80.0, 150.0];

/// One line of a chart.
#[derive(Clone, Debug)]
pub struct Series {
    /// Legend label.
    pub label: String,
    /// Points, in x order.
    pub points: Vec<(f64, f64)>,
    /// The x of the points that failed (marked on the axis; the line breaks there).
    pub failed: Vec<f64>,
}

/// What a plot shows of one recorded cell.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Mark {
    /// Its figure.
    Value(f64),
    /// It failed or committed nothing: no figure.
    Failed,
}

impl Mark {
    /// The mark of `record` (`None`: not in the run), its figure read by `figure`.
    pub fn of(record: Option<&PointRecord>, figure: impl Fn(&PointRecord) -> Option<f64>) -> Option<Mark> {
        record.map(|r| figure(r).map_or(Mark::Failed, Mark::Value))
    }
}

impl Series {
    /// A line from `(x, mark)` pairs in x order (cells not in the run left out).
    pub fn from_marks(label: impl Into<String>, marks: impl IntoIterator<Item = (f64, Option<Mark>)>) -> Self {
        let mut series = Series { label: label.into(), points: Vec::new(), failed: Vec::new() };
        for (x, mark) in marks {
            match mark {
                Some(Mark::Value(y)) => series.points.push((x, y)),
                Some(Mark::Failed) => series.failed.push(x),
                None => {}
            }
        }
        series
    }

    /// Nothing to draw: no point, failed or not.
    pub fn is_empty(&self) -> bool {
        self.points.is_empty() && self.failed.is_empty()
    }

    /// The points in runs not broken by a failed point.
    fn segments(&self) -> Vec<Vec<(f64, f64)>> {
        let mut segments: Vec<Vec<(f64, f64)>> = Vec::new();
        for &p in &self.points {
            match segments.last_mut() {
                Some(seg) if !self.failed.iter().any(|&f| f > seg[seg.len() - 1].0 && f < p.0) => seg.push(p),
                _ => segments.push(vec![p]),
            }
        }
        segments
    }
}

/// A chart panel: what [`draw_panel`] draws.
#[derive(Clone, Debug)]
pub struct Panel {
    /// Caption.
    pub title: String,
    /// X axis description.
    pub x_desc: String,
    /// Y axis description.
    pub y_desc: String,
    /// X range.
    pub x: Range<f64>,
    /// Names of integer x positions (categories), if the x axis is categorical.
    pub x_names: Vec<String>,
    /// The lines.
    pub series: Vec<Series>,
    /// Horizontal reference lines: (y, label).
    pub hlines: Vec<(f64, String)>,
    /// The legend at the lower left (where the lines leave room), not the upper left.
    pub legend_low: bool,
}

impl Panel {
    /// The top of the y axis: a tenth above the highest point or reference line (1 if none).
    fn y_max(&self) -> f64 {
        let top = self
            .series
            .iter()
            .flat_map(|s| s.points.iter().map(|p| p.1))
            .chain(self.hlines.iter().map(|h| h.0))
            .fold(0.0, f64::max);
        if top > 0.0 {
            top * 1.1
        } else {
            1.0
        }
    }
}

fn font() {
    static REGISTER: Once = Once::new();
    REGISTER.call_once(|| {
        // The embedded font is valid TrueType; were it not, text would be missing, not wrong.
        let _ = plotters::style::register_font(FONT, FontStyle::Normal, dejavu::sans::regular());
    });
}

fn plot_err(e: impl std::fmt::Display) -> anyhow::Error {
    anyhow!("drawing a plot: {e}")
}

/// A protocol's (or a series index's) colour.
fn color(i: usize) -> RGBColor {
    const COLORS: [RGBColor; 6] = [
        RGBColor(31, 119, 180),
        RGBColor(255, 127, 14),
        RGBColor(44, 160, 44),
        RGBColor(214, 39, 40),
        RGBColor(148, 103, 189),
        RGBColor(140, 86, 75),
    ];
    COLORS[i % COLORS.len()]
}

/// A panel of a partial run (--only) without a point: says so rather than draw empty axes.
fn draw_empty(area: &DrawingArea<BitMapBackend<'_>, Shift>, title: &str) -> anyhow::Result<()> {
    let (w, h) = area.dim_in_pixel();
    let at = |y: u32| (w as i32 / 2 - 150, y as i32);
    area.draw(&Text::new(title.to_string(), at(h / 2 - 20), (FONT, 18))).map_err(plot_err)?;
    area.draw(&Text::new("no point of this panel in the run", at(h / 2 + 10), (FONT, 14))).map_err(plot_err)
}

/// A panel's chart: f64 coordinates on a bitmap.
type Chart<'a, 'b> = ChartContext<'a, BitMapBackend<'b>, Cartesian2d<RangedCoordf64, RangedCoordf64>>;

/// Draws `panel`'s lines, their points, their failed points (crosses on the x axis) and the
/// legend entries.
fn draw_lines(chart: &mut Chart<'_, '_>, panel: &Panel) -> anyhow::Result<()> {
    for (i, s) in panel.series.iter().enumerate() {
        // A protocol keeps its colour in every panel, whichever protocols a panel lacks.
        let c = color(PROTOCOLS.iter().position(|p| *p == s.label).unwrap_or(i));
        // The legend entry hangs on an empty series, so that a line of failed points only
        // is still named.
        chart
            .draw_series(LineSeries::new(std::iter::empty(), c.stroke_width(2)))
            .map_err(plot_err)?
            .label(&s.label)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2)));
        for segment in s.segments() {
            chart.draw_series(LineSeries::new(segment, c.stroke_width(2))).map_err(plot_err)?;
        }
        chart.draw_series(s.points.iter().map(|&p| Circle::new(p, 4, c.filled()))).map_err(plot_err)?;
        chart.draw_series(s.failed.iter().map(|&x| Cross::new((x, 0.0), 8, c.stroke_width(3)))).map_err(plot_err)?;
    }
    if panel.series.iter().any(|s| !s.failed.is_empty()) {
        chart
            .draw_series(std::iter::empty::<Cross<(f64, f64), i32>>())
            .map_err(plot_err)?
            .label("failed (no figure)")
            .legend(|(x, y)| Cross::new((x + 10, y), 6, BLACK.stroke_width(3)));
    }
    Ok(())
}

/// Draws `panel` on `area`.
pub fn draw_panel(area: &DrawingArea<BitMapBackend<'_>, Shift>, panel: &Panel) -> anyhow::Result<()> {
    font();
    if panel.series.is_empty() {
        return draw_empty(area, &panel.title);
    }
    let y_max = panel.y_max();
    let mut chart = ChartBuilder::on(area)
        .caption(&panel.title, (FONT, 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(panel.x.clone(), 0.0..y_max)
        .map_err(plot_err)?;
    let names = &panel.x_names;
    let name_of = |x: &f64| -> String {
        let i = x.round();
        if (x - i).abs() < 1e-6 && i >= 0.0 && (i as usize) < names.len() {
            names[i as usize].clone()
        } else if names.is_empty() {
            format!("{x}")
        } else {
            String::new()
        }
    };
    let y_label = |y: &f64| if y_max > 20.0 { format!("{y:.0}") } else { format!("{y:.1}") };
    let mut mesh = chart.configure_mesh();
    mesh.x_desc(&panel.x_desc)
        .y_desc(&panel.y_desc)
        .label_style((FONT, 13))
        .x_label_formatter(&name_of)
        .y_label_formatter(&y_label);
    if !names.is_empty() {
        mesh.x_labels(names.len() * 4 + 1);
    }
    mesh.draw().map_err(plot_err)?;
    for (y, label) in &panel.hlines {
        let style = RGBColor(170, 30, 30).mix(0.6).stroke_width(2);
        chart.draw_series(LineSeries::new([(panel.x.start, *y), (panel.x.end, *y)], style)).map_err(plot_err)?;
        let at = (panel.x.end - 0.07 * (panel.x.end - panel.x.start), *y);
        chart
            .draw_series(std::iter::once(Text::new(
                label.clone(),
                at,
                (FONT, 14).into_font().color(&RGBColor(170, 30, 30)),
            )))
            .map_err(plot_err)?;
    }
    draw_lines(&mut chart, panel)?;
    if !panel.series.is_empty() {
        chart
            .configure_series_labels()
            .label_font((FONT, 13))
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .position(if panel.legend_low { SeriesLabelPosition::LowerLeft } else { SeriesLabelPosition::UpperLeft })
            .draw()
            .map_err(plot_err)?;
    }
    Ok(())
}

/// Draws `panels` (one, two side by side, or up to four in a 2 x 2 grid) into the PNG `path`.
pub fn draw_png(path: &Path, panels: &[Panel]) -> anyhow::Result<()> {
    let (size, grid) = match panels.len() {
        0 | 1 => (SINGLE_SIZE, (1, 1)),
        2 => (PAIR_SIZE, (1, 2)),
        _ => (GRID_SIZE, (2, 2)),
    };
    let root = BitMapBackend::new(path, size).into_drawing_area();
    root.fill(&WHITE).map_err(plot_err)?;
    if panels.len() > 1 {
        for (area, panel) in root.split_evenly(grid).iter().zip(panels) {
            draw_panel(area, panel)?;
        }
    } else if let Some(panel) = panels.first() {
        draw_panel(&root, panel)?;
    }
    root.present().map_err(plot_err)
}

/// Throughput against threads, one panel per network, for one workload and shape.
fn throughput_panels(dir: &SuiteDir, study: Study, workload: &str, shape: Shape) -> Vec<Panel> {
    SEED_NETS
        .iter()
        .map(|net| {
            let series = PROTOCOLS
                .iter()
                .map(|protocol| {
                    let marks = seed_threads(study).iter().map(|&t| {
                        (f64::from(t), Mark::of(dir.seeds_cell(study, shape, protocol, t, net), PointRecord::tps))
                    });
                    Series::from_marks(*protocol, marks)
                })
                .filter(|s: &Series| !s.is_empty())
                .collect();
            Panel {
                title: format!("{workload} {shape}, {net}"),
                x_desc: "client threads".into(),
                y_desc: "committed tx/s".into(),
                x: 0.0..9.0,
                x_names: Vec::new(),
                series,
                hlines: Vec::new(),
                legend_low: false,
            }
        })
        .collect()
}

/// Average latency in one-way delays per network at 1 thread, one panel per shape, with
/// reference lines at 2, 3, 4 and 5 delays.
fn latency_panels(dir: &SuiteDir, study: Study, workload: &str) -> Vec<Panel> {
    SEED_SHAPES
        .iter()
        .map(|&shape| {
            let series = PROTOCOLS
                .iter()
                .map(|protocol| {
                    let marks = SEED_NETS.iter().enumerate().map(|(i, net)| {
                        let cell = dir.seeds_cell(study, shape, protocol, 1, net);
                        (i as f64, Mark::of(cell, |r| r.avg_ms().map(|ms| ms / ONE_WAY_MS[i])))
                    });
                    Series::from_marks(*protocol, marks)
                })
                .filter(|s: &Series| !s.is_empty())
                .collect();
            Panel {
                title: format!("{workload} {shape}, 1 thread: average latency"),
                x_desc: "network (one-way delay D: 2, 30, 80, 150 ms)".into(),
                y_desc: "average latency / D".into(),
                x: -0.3..3.3,
                x_names: SEED_NETS.iter().map(|n| n.to_string()).collect(),
                series,
                hlines: (2..=5).map(|k| (f64::from(k), format!("{k} D"))).collect(),
                legend_low: false,
            }
        })
        .collect()
}

/// The cross-shard study: throughput against the remote-item share, one line per protocol.
fn cross_shard_panel(dir: &SuiteDir) -> Panel {
    let series = PROTOCOLS
        .iter()
        .map(|protocol| {
            let marks = REMOTE_ITEM_PCTS
                .iter()
                .map(|&pct| (f64::from(pct), Mark::of(dir.cross_shard_cell(protocol, pct), PointRecord::tps)));
            Series::from_marks(*protocol, marks)
        })
        .filter(|s: &Series| !s.is_empty())
        .collect();
    Panel {
        title: "TPC-C NewOrder, 2x3, geo, 8 threads".into(),
        x_desc: "remote items, %".into(),
        y_desc: "committed tx/s".into(),
        x: 0.0..25.0,
        x_names: Vec::new(),
        series,
        hlines: Vec::new(),
        legend_low: false,
    }
}

/// The scale study: throughput against shards (3 replicas) and against replicas (1 shard).
fn scale_panel(dir: &SuiteDir) -> Panel {
    let line = |label: &str, shapes: &[(u32, u32)], x: fn(Shape) -> u32| {
        let marks = shapes.iter().map(|&(shards, replicas)| {
            let shape = Shape::new(shards, replicas);
            let cell = dir.first(|r| r.point.study == Study::Scale && r.point.shape() == shape);
            (f64::from(x(shape)), Mark::of(cell, PointRecord::tps))
        });
        Series::from_marks(label, marks)
    };
    let series = vec![
        line("shards (3 replicas each)", &[(1, 3), (2, 3), (4, 3), (8, 3)], |s| s.shards),
        line("replicas (1 shard)", &[(1, 3), (1, 5), (1, 7)], |s| s.replicas),
    ];
    Panel {
        title: "Scale: micro, geo, 8 threads, Luigi".into(),
        x_desc: "shards, or replicas of one shard".into(),
        y_desc: "committed tx/s".into(),
        x: 0.0..9.0,
        x_names: Vec::new(),
        series: series.into_iter().filter(|s| !s.is_empty()).collect(),
        hlines: Vec::new(),
        // The shards line falls from the upper left.
        legend_low: true,
    }
}

/// Commit-latency CDFs of the latency study (geo, one thread), in one-way delays: one panel
/// per shape, one line per protocol, from each point's percentile export. A failed point is a
/// cross at 0 like everywhere else.
fn latency_cdf_panels(dir: &SuiteDir) -> Vec<Panel> {
    SEED_SHAPES
        .iter()
        .map(|&shape| {
            let mut x_max: f64 = 1.0;
            let series = PROTOCOLS
                .iter()
                .filter_map(|protocol| {
                    let r = dir.first(|r| {
                        r.point.study == Study::Latency && r.point.shape() == shape && r.point.protocol == *protocol
                    })?;
                    let mut s = Series { label: protocol.to_string(), points: Vec::new(), failed: Vec::new() };
                    match r.measured() {
                        // A point recorded before percentile exports existed has no curve.
                        Some(b) => {
                            s.points = b
                                .latency_percentiles
                                .as_ref()?
                                .rows
                                .iter()
                                .map(|row| (row.value_us as f64 / 1000.0 / ONE_WAY_MS[3], row.quantile))
                                .collect();
                            s.points.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.total_cmp(&b.1)));
                        }
                        None => s.failed.push(0.0),
                    }
                    x_max = s.points.iter().map(|p| p.0).fold(x_max, f64::max);
                    Some(s)
                })
                .collect();
            Panel {
                title: format!("micro {shape}, geo, 1 thread: commit latency CDF"),
                x_desc: "latency / D (D = 150 ms one way)".into(),
                y_desc: "fraction of commits at or below".into(),
                x: 0.0..(x_max * 1.05).ceil(),
                x_names: Vec::new(),
                series,
                hlines: Vec::new(),
                legend_low: false,
            }
        })
        .collect()
}

/// A YCSB variant's axis label: `a`..`f`, or `95/5u` for `k2-95-5-uniform`.
fn short_ycsb_label(label: &str) -> String {
    match label.strip_prefix("k2-") {
        None => label.to_string(),
        Some(mix) => {
            let (ratio, dist) = mix.rsplit_once('-').unwrap_or((mix, ""));
            format!("{}{}", ratio.replacen('-', "/", 1), &dist[..dist.len().min(1)])
        }
    }
}

/// YCSB: throughput per workload variant (A-F, the K2 mixes), one line per protocol, one
/// panel per network of the study.
fn ycsb_panels(dir: &SuiteDir) -> Vec<Panel> {
    YCSB_NETS
        .iter()
        .map(|net| {
            let series = PROTOCOLS
                .iter()
                .map(|protocol| {
                    let marks = YCSB_VARIANTS.iter().enumerate().map(|(i, (label, _))| {
                        (i as f64, Mark::of(dir.ycsb_cell(net, label, protocol), PointRecord::tps))
                    });
                    Series::from_marks(*protocol, marks)
                })
                .filter(|s: &Series| !s.is_empty())
                .collect();
            Panel {
                title: format!("YCSB, 2x3, {net}, 8 threads"),
                x_desc: "workload (95/5u: K2 95 % reads, 5 % writes, uniform keys; z: zipfian)".into(),
                y_desc: "committed tx/s".into(),
                x: -0.5..(YCSB_VARIANTS.len() as f64 - 0.5),
                x_names: YCSB_VARIANTS.iter().map(|(label, _)| short_ycsb_label(label)).collect(),
                series,
                hlines: Vec::new(),
                legend_low: false,
            }
        })
        .collect()
}

/// Draws every plot the directory has points for into `out`; returns the files written.
pub fn draw_all(dir: &SuiteDir, out: &Path) -> anyhow::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(out)?;
    let mut written = Vec::new();
    let mut png = |name: String, panels: Vec<Panel>| -> anyhow::Result<()> {
        if panels.iter().any(|p| !p.series.is_empty()) {
            let path = out.join(name);
            draw_png(&path, &panels)?;
            written.push(path);
        }
        Ok(())
    };
    for (study, workload) in [(Study::SeedsMicro, "micro"), (Study::SeedsTpcc, "tpcc")] {
        for shape in SEED_SHAPES {
            let panels = throughput_panels(dir, study, workload, shape);
            png(format!("throughput-{workload}-{shape}.png"), panels)?;
        }
        png(format!("latency-{workload}.png"), latency_panels(dir, study, workload))?;
    }
    png("cross-shard.png".into(), vec![cross_shard_panel(dir)])?;
    png("scale.png".into(), vec![scale_panel(dir)])?;
    png("latency-cdf.png".into(), latency_cdf_panels(dir))?;
    png("ycsb.png".into(), ycsb_panels(dir))?;
    Ok(written)
}

#[cfg(test)]
mod tests;
