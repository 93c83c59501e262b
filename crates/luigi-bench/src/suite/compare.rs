//! `luigi report --compare A B`: the change between two results directories, point by point
//! (B's throughput and average latency over A's), as markdown, with the geometric mean of the
//! ratios over the points both runs measured and the points only one of them has.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use std::path::Path;

use crate::report::format_thousands;
use crate::suite::plots::{draw_png, Panel, Series};
use crate::suite::results::{PointRecord, SuiteDir};

/// One point of both runs.
#[derive(Clone, Debug, PartialEq)]
pub struct Change {
    /// The point id.
    pub id: String,
    /// A's and B's throughput (None: failed).
    pub tps: (Option<f64>, Option<f64>),
    /// A's and B's average latency, ms (None: failed).
    pub avg_ms: (Option<f64>, Option<f64>),
}

impl Change {
    /// B's throughput over A's, when both succeeded.
    pub fn tps_ratio(&self) -> Option<f64> {
        match self.tps {
            (Some(a), Some(b)) if a > 0.0 => Some(b / a),
            _ => None,
        }
    }

    /// B's average latency over A's, when both succeeded.
    pub fn latency_ratio(&self) -> Option<f64> {
        match self.avg_ms {
            (Some(a), Some(b)) if a > 0.0 => Some(b / a),
            _ => None,
        }
    }
}

/// The points both runs have, by id, and the ids only one has.
pub fn changes(a: &SuiteDir, b: &SuiteDir) -> (Vec<Change>, Vec<String>, Vec<String>) {
    let by_id = |d: &SuiteDir| -> BTreeMap<String, PointRecord> {
        d.points.iter().map(|r| (r.point.id.clone(), r.clone())).collect()
    };
    let (a, b) = (by_id(a), by_id(b));
    let both = a
        .iter()
        .filter_map(|(id, ra)| {
            b.get(id).map(|rb| Change { id: id.clone(), tps: (ra.tps(), rb.tps()), avg_ms: (ra.avg_ms(), rb.avg_ms()) })
        })
        .collect();
    let only_a = a.keys().filter(|id| !b.contains_key(*id)).cloned().collect();
    let only_b = b.keys().filter(|id| !a.contains_key(*id)).cloned().collect();
    (both, only_a, only_b)
}

/// Geometric mean of `ratios` (None if empty).
pub fn geomean(ratios: &[f64]) -> Option<f64> {
    if ratios.is_empty() {
        return None;
    }
    Some((ratios.iter().map(|r| r.ln()).sum::<f64>() / ratios.len() as f64).exp())
}

fn cell(v: Option<f64>, f: impl Fn(f64) -> String) -> String {
    v.map_or_else(|| "FAILED".into(), f)
}

/// The comparison as markdown; `a_name`, `b_name` label the runs.
pub fn render(a: &SuiteDir, b: &SuiteDir, a_name: &str, b_name: &str) -> String {
    let (both, only_a, only_b) = changes(a, b);
    let tps: Vec<f64> = both.iter().filter_map(Change::tps_ratio).collect();
    let lat: Vec<f64> = both.iter().filter_map(Change::latency_ratio).collect();
    let mut out = format!("# Change from A to B\n\n- A: `{a_name}` (commit `{}`)\n", a.info.git_commit);
    let _ = writeln!(out, "- B: `{b_name}` (commit `{}`)", b.info.git_commit);
    let _ = writeln!(
        out,
        "- {} points in both, {} compared (both succeeded); geometric mean of B/A: throughput {}, average latency \
         {}\n",
        both.len(),
        tps.len(),
        geomean(&tps).map_or("-".into(), |g| format!("{g:.3}x")),
        geomean(&lat).map_or("-".into(), |g| format!("{g:.3}x"))
    );
    out.push_str("| point | A tx/s | B tx/s | B/A tx/s | A avg ms | B avg ms | B/A avg ms |\n");
    out.push_str("|---|---:|---:|---:|---:|---:|---:|\n");
    let tps_fmt = |t: f64| format_thousands(t.round() as u64);
    let ms_fmt = |m: f64| format!("{m:.2}");
    for c in &both {
        let _ = writeln!(
            out,
            "| `{}` | {} | {} | {} | {} | {} | {} |",
            c.id,
            cell(c.tps.0, tps_fmt),
            cell(c.tps.1, tps_fmt),
            c.tps_ratio().map_or("-".into(), |r| format!("{r:.2}x")),
            cell(c.avg_ms.0, ms_fmt),
            cell(c.avg_ms.1, ms_fmt),
            c.latency_ratio().map_or("-".into(), |r| format!("{r:.2}x")),
        );
    }
    for (which, ids) in [("A", &only_a), ("B", &only_b)] {
        if !ids.is_empty() {
            let _ = writeln!(
                out,
                "\nOnly in {which}: {}",
                ids.iter().map(|i| format!("`{i}`")).collect::<Vec<_>>().join(", ")
            );
        }
    }
    out
}

/// Plots the ratios B/A of the points both runs measured into the PNG `path`, each sorted
/// from lowest to highest (x: the rank of the point), with a line at 1x; false (and nothing
/// written) if no point was compared.
pub fn plot(a: &SuiteDir, b: &SuiteDir, path: &Path) -> anyhow::Result<bool> {
    let (both, _, _) = changes(a, b);
    let sorted = |f: fn(&Change) -> Option<f64>| {
        let mut v: Vec<f64> = both.iter().filter_map(f).collect();
        v.sort_by(f64::total_cmp);
        v.into_iter().enumerate().map(|(i, r)| (i as f64, r)).collect::<Vec<_>>()
    };
    let series = vec![
        Series { label: "B/A throughput".into(), points: sorted(Change::tps_ratio), failed: Vec::new() },
        Series { label: "B/A average latency".into(), points: sorted(Change::latency_ratio), failed: Vec::new() },
    ];
    let n = series[0].points.len().max(series[1].points.len());
    if n == 0 {
        return Ok(false);
    }
    let panel = Panel {
        title: format!("Change from A to B over {n} points (each line sorted)"),
        x_desc: "points, from the lowest ratio to the highest".into(),
        y_desc: "B / A".into(),
        x: -0.5..(n as f64 - 0.5),
        x_names: Vec::new(),
        series,
        hlines: vec![(1.0, "1x".into())],
        legend_low: false,
    };
    draw_png(path, &[panel])?;
    Ok(true)
}

#[cfg(test)]
mod tests;
