//! `luigi bench suite`: every experiment of the project from one command. The matrix of
//! points is data ([`matrix`]); each point runs as a subprocess of the `luigi` binary
//! ([`runner`]) into a results directory ([`results`]), from which the report ([`report`]),
//! the plots ([`plots`]) and run-to-run comparisons ([`compare`]) are rendered, then or later
//! (`luigi report DIR`).

pub mod compare;
#[cfg(test)]
pub(crate) mod fixtures;
pub mod matrix;
pub mod plots;
pub mod publish;
pub mod report;
pub mod results;
pub mod runner;
pub mod seeds;

use std::path::{Path, PathBuf};

use anyhow::Context;

use crate::suite::results::{load_dir, points_csv, SuiteDir};

/// Renders `REPORT.md`, `points.csv` and the plots (`plots/*.png`) of the results directory
/// `dir` from its records; returns the directory as read.
pub fn render_dir(dir: &Path) -> anyhow::Result<(SuiteDir, Vec<PathBuf>)> {
    let suite = load_dir(dir)?;
    std::fs::write(dir.join("points.csv"), points_csv(&suite.points))
        .with_context(|| format!("writing {}/points.csv", dir.display()))?;
    let plots = plots::draw_all(&suite, &dir.join("plots"))?;
    let mut report = report::render(&suite);
    if !plots.is_empty() {
        report.push_str("## Plots\n\n");
        for p in &plots {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or_default();
            report.push_str(&format!("![{name}](plots/{name})\n\n"));
        }
    }
    std::fs::write(dir.join("REPORT.md"), report).with_context(|| format!("writing {}/REPORT.md", dir.display()))?;
    Ok((suite, plots))
}
