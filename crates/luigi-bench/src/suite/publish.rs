//! `luigi report DIR --publish`: rewrites the generated blocks of hand-written documents
//! (README.md, docs/RESULTS.md) from a results directory, leaving the prose around them as it
//! is. A block lies between two markers:
//!
//! ```text
//! <!-- luigi:report BEGIN table=latency -->
//! ...generated, replaced on every publish...
//! <!-- luigi:report END -->
//! ```
//!
//! `table=KEY` is one section of the run's report (see [`TABLES`]; `source` is the run the
//! figures come from: folder, commit, date, machine); `plot=NAME` is an image link to
//! `plots/NAME.png` of the run, relative to the document. The blocks are rendered from the
//! run's records alone (as `luigi report DIR` renders REPORT.md), so publishing twice from the
//! same run changes nothing, and the run's own files are not touched.

use std::path::{Component, Path, PathBuf};

use anyhow::{bail, ensure, Context};

use crate::suite::report;
use crate::suite::results::{load_dir, utc_date, SuiteDir};
use crate::suite::runner::format_duration;

/// The opening marker's prefix; the marker goes on a line of its own.
pub const BEGIN: &str = "<!-- luigi:report BEGIN ";
/// The closing marker, on a line of its own.
pub const END: &str = "<!-- luigi:report END -->";

/// The report sections a `table=KEY` block can hold: the key, and the heading (a prefix of
/// the line) that opens the section in REPORT.md. The block is the section's body, from the
/// line after its heading to the next heading of the same or a higher level.
pub const TABLES: [(&str, &str); 16] = [
    ("failed", "## Failed points"),
    ("counts", "## Resends, resubmissions"),
    ("precision", "## Precision"),
    ("seeds-micro", "## micro: the seeds' layout"),
    ("ratios-micro", "## micro: ratios"),
    ("seeds-tpcc", "## tpcc: the seeds' layout"),
    ("ratios-tpcc", "## tpcc: ratios"),
    ("cross-shard", "## Cross-shard study"),
    ("against-seeds", "## Against seed 000"),
    ("seed004", "## Seed 004"),
    ("scale", "## Scale study"),
    ("latency", "## Commit latency in one-way delays"),
    ("ycsb", "## YCSB"),
    ("ycsb-none", "### `none`"),
    ("ycsb-geo", "### `geo`"),
    ("k2", "### The K2 layout"),
];

/// What the blocks of one document are rendered from.
pub struct Source {
    /// The run's REPORT.md text, rendered from its records.
    pub report: String,
    /// Names (without `.png`) of the plots in the run's `plots/` folder.
    pub plots: Vec<String>,
    /// The run's folder, relative to the document's folder, with `/` separators.
    pub rel_dir: String,
    /// The `source` block: which run the figures come from.
    pub provenance: String,
}

/// Rewrites every block of the documents `targets` from the results directory `dir`; returns
/// the number of blocks per document. A document without a block is an error (the markers
/// went missing), and so is an unknown table or plot: nothing is written then.
pub fn publish(dir: &Path, targets: &[PathBuf]) -> anyhow::Result<Vec<usize>> {
    let suite = load_dir(dir)?;
    let plots = plot_names(&dir.join("plots"))?;
    let mut rewritten = Vec::new();
    for target in targets {
        let text = std::fs::read_to_string(target).with_context(|| format!("reading {}", target.display()))?;
        let rel_dir = relative(dir, target)?;
        let source = Source {
            report: report::render(&suite),
            plots: plots.clone(),
            provenance: provenance(&suite, &rel_dir),
            rel_dir,
        };
        let (new, blocks) = rewrite(&text, &source).with_context(|| format!("publishing into {}", target.display()))?;
        rewritten.push((target, new, blocks));
    }
    let mut counts = Vec::new();
    for (target, new, blocks) in rewritten {
        std::fs::write(target, new).with_context(|| format!("writing {}", target.display()))?;
        counts.push(blocks);
    }
    Ok(counts)
}

/// `text` with every block's content replaced from `source`, and the number of blocks.
pub fn rewrite(text: &str, source: &Source) -> anyhow::Result<(String, usize)> {
    let mut out = String::with_capacity(text.len());
    let mut lines = text.split_inclusive('\n').enumerate();
    let mut blocks = 0;
    while let Some((n, line)) = lines.next() {
        out.push_str(line);
        let Some(spec) = line.trim().strip_prefix(BEGIN) else {
            ensure!(line.trim() != END, "line {}: {END} without its BEGIN marker", n + 1);
            continue;
        };
        let spec =
            spec.strip_suffix("-->").map(str::trim).with_context(|| format!("line {}: unclosed marker", n + 1))?;
        let body = block(spec, source).with_context(|| format!("line {}: block {spec:?}", n + 1))?;
        out.push('\n');
        out.push_str(body.trim_matches('\n'));
        out.push_str("\n\n");
        let end = lines.by_ref().find(|(_, l)| l.trim() == END || l.trim().starts_with(BEGIN));
        match end {
            Some((_, l)) if l.trim() == END => out.push_str(l),
            _ => bail!("line {}: {BEGIN}{spec} --> has no {END} before the next block or the end", n + 1),
        }
        blocks += 1;
    }
    ensure!(blocks > 0, "no {BEGIN}...--> marker: nothing to publish (were the markers removed?)");
    Ok((out, blocks))
}

/// The content of the block `spec` (`table=KEY` or `plot=NAME`).
fn block(spec: &str, source: &Source) -> anyhow::Result<String> {
    match spec.split_once('=') {
        Some(("table", "source")) => Ok(source.provenance.clone()),
        Some(("table", key)) => {
            let keys = TABLES.map(|(k, _)| k);
            let Some((_, heading)) = TABLES.iter().find(|(k, _)| *k == key) else {
                bail!("unknown table {key:?}; known: source, {}", keys.join(", "))
            };
            section(&source.report, heading)
                .with_context(|| format!("the run's report has no section {heading:?} (table={key})"))
        }
        Some(("plot", name)) => {
            ensure!(
                source.plots.iter().any(|p| p == name),
                "the run has no plots/{name}.png (it has: {})",
                source.plots.join(", ")
            );
            Ok(format!("![{name}]({}/plots/{name}.png)", source.rel_dir))
        }
        _ => bail!("expected table=KEY or plot=NAME"),
    }
}

/// The body of the section of `report` opened by the line starting with `heading`.
pub fn section(report: &str, heading: &str) -> Option<String> {
    let level = heading.chars().take_while(|c| *c == '#').count();
    let mut lines = report.lines().skip_while(|l| !l.starts_with(heading));
    lines.next()?;
    let closes = |l: &str| {
        let hashes = l.chars().take_while(|c| *c == '#').count();
        hashes > 0 && hashes <= level && l[hashes..].starts_with(' ')
    };
    let body: Vec<&str> = lines.take_while(|l| !closes(l)).collect();
    Some(body.join("\n"))
}

/// The `source` block: the run's folder, commit, start date, wall time, machine and command.
fn provenance(suite: &SuiteDir, rel_dir: &str) -> String {
    let i = &suite.info;
    let commit: String = i.git_commit.chars().take(7).collect();
    let ok = suite.points.iter().filter(|r| r.ok).count();
    format!(
        "Figures from [`{shown}`]({rel_dir}/REPORT.md): commit `{commit}`, started {date} (UTC), wall time {wall}, \
         {ok} of {n} points succeeded; machine: {cores} cores, {mem:.1} GiB, {cpu}; command `{cmd}`.",
        shown = display_dir(rel_dir),
        date = utc_date(i.started_at_unix_s),
        wall = format_duration(i.wall_s() as f64),
        n = suite.points.len(),
        cores = i.machine.cores,
        mem = i.machine.memory_bytes as f64 / f64::from(1u32 << 30),
        cpu = i.machine.cpu_model,
        cmd = command(&i.command),
    )
}

/// The run's folder as the reader names it: from the repository root, not from the document.
fn display_dir(rel_dir: &str) -> &str {
    rel_dir.trim_start_matches("../")
}

/// The suite command, with the binary's path shortened to `luigi`.
fn command(argv: &[String]) -> String {
    let mut words: Vec<&str> = argv.iter().map(String::as_str).collect();
    if let Some(first) = words.first_mut() {
        *first = "luigi";
    }
    words.join(" ")
}

/// The plots of a run (`NAME` of each `NAME.png`), sorted; none if the folder is missing.
fn plot_names(plots: &Path) -> anyhow::Result<Vec<String>> {
    let Ok(entries) = std::fs::read_dir(plots) else { return Ok(Vec::new()) };
    let mut names = Vec::new();
    for entry in entries {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "png") {
            names.extend(path.file_stem().and_then(|s| s.to_str()).map(String::from));
        }
    }
    names.sort();
    Ok(names)
}

/// `dir` relative to the folder of the document `target`, with `/` separators.
pub fn relative(dir: &Path, target: &Path) -> anyhow::Result<String> {
    let dir = dir.canonicalize().with_context(|| format!("resolving {}", dir.display()))?;
    let target = target.canonicalize().with_context(|| format!("resolving {}", target.display()))?;
    let from = target.parent().context("the document has no folder")?;
    let (to, from): (Vec<Component>, Vec<Component>) = (dir.components().collect(), from.components().collect());
    let common = to.iter().zip(&from).take_while(|(a, b)| a == b).count();
    let mut parts: Vec<String> = vec!["..".into(); from.len() - common];
    parts.extend(to[common..].iter().map(|c| c.as_os_str().to_string_lossy().into_owned()));
    Ok(if parts.is_empty() { ".".into() } else { parts.join("/") })
}

#[cfg(test)]
mod tests;
