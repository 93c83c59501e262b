//! `luigi bench suite` (every experiment, into one results directory) and `luigi report`
//! (re-render a results directory, compare two, or publish one into the docs): the
//! command-line side of
//! `luigi_bench::suite`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, ensure, Context};
use clap::Args;
use luigi_bench::suite::matrix::{estimate_s, extended_points, matches, matrix, Point};
use luigi_bench::suite::results::{load_dir, now_unix_s, utc_date, write_pretty, Machine, SuiteInfo};
use luigi_bench::suite::runner::{format_duration, run_points, RunOptions};
use luigi_bench::suite::{compare, publish, render_dir};

/// `luigi bench suite` options.
#[derive(Args)]
pub struct SuiteArgs {
    /// Fewer points and shorter durations (about 5 minutes instead of an hour).
    #[arg(long)]
    quick: bool,
    /// Add the points that would take the default suite past its hour: YCSB A-F and the
    /// uniform K2 mixes under geo, every protocol (about 6 more minutes).
    #[arg(long, conflicts_with = "quick")]
    extended: bool,
    /// Only the points whose id matches: a substring, or a glob with * and ? (e.g.
    /// 'micro-2x3-*-t8-*'). --dry-run lists the ids.
    #[arg(long)]
    only: Option<String>,
    /// Continue the run in this results directory: points recorded as succeeded are skipped,
    /// failed and missing ones run.
    #[arg(long, conflicts_with = "name")]
    resume: Option<PathBuf>,
    /// Name of the run: its directory is <out>/<date>-<name> [default: suite, or quick].
    #[arg(long)]
    name: Option<String>,
    /// Directory under which the run's directory is made.
    #[arg(long, default_value = "results")]
    out: PathBuf,
    /// Print the points, their commands and the time estimate; run nothing.
    #[arg(long)]
    dry_run: bool,
    /// Do not draw a progress bar.
    #[arg(long)]
    no_progress: bool,
    /// Every point's measured seconds (warm-up: a quarter of it), for tests.
    #[arg(long, hide = true)]
    point_duration: Option<f64>,
}

/// `luigi report` options.
#[derive(Args)]
pub struct ReportArgs {
    /// A results directory of `luigi bench suite`: re-renders its REPORT.md, points.csv and
    /// plots from its records, running nothing.
    #[arg(required_unless_present = "compare")]
    dir: Option<PathBuf>,
    /// Compare two results directories point by point (B over A: throughput and average
    /// latency); printed, written as markdown to --to and plotted beside it (same name, .png).
    #[arg(long, num_args = 2, value_names = ["A", "B"], conflicts_with = "dir")]
    compare: Option<Vec<PathBuf>>,
    /// Where --compare writes its markdown [default: B/COMPARE.md].
    #[arg(long, requires = "compare")]
    to: Option<PathBuf>,
    /// Instead of re-rendering DIR, rewrite the generated blocks (between `<!-- luigi:report
    /// BEGIN table=KEY|plot=NAME -->` and `<!-- luigi:report END -->`) of these documents from
    /// DIR's report, leaving their prose as it is [default: README.md docs/RESULTS.md].
    #[arg(long, num_args = 0.., value_name = "FILE", requires = "dir")]
    publish: Option<Vec<PathBuf>>,
}

/// The documents `luigi report DIR --publish` rewrites when given none.
const PUBLISH_DEFAULT: [&str; 2] = ["README.md", "docs/RESULTS.md"];

/// The points selected by `args`.
fn selected(args: &SuiteArgs) -> anyhow::Result<Vec<Point>> {
    let mut points = matrix(args.quick);
    if args.extended {
        points.extend(extended_points());
    }
    if let Some(pattern) = &args.only {
        points.retain(|p| matches(pattern, &p.id));
        ensure!(!points.is_empty(), "--only {pattern} matches no point (--dry-run lists them)");
    }
    if let Some(d) = args.point_duration {
        ensure!(d.is_finite() && d >= 0.1, "--point-duration must be at least 0.1 s");
        for p in &mut points {
            p.duration_s = d;
            p.warmup_s = d / 4.0;
        }
    }
    Ok(points)
}

/// The run directory: --resume's, or a new `<out>/<date>-<name>` (`-2`, `-3`, ... if taken).
fn run_dir(args: &SuiteArgs) -> anyhow::Result<PathBuf> {
    if let Some(dir) = &args.resume {
        ensure!(dir.is_dir(), "--resume {}: not a directory", dir.display());
        return Ok(dir.clone());
    }
    let name = args.name.clone().unwrap_or_else(|| if args.quick { "quick" } else { "suite" }.into());
    ensure!(!name.is_empty() && !name.contains(['/', '\\']), "invalid --name {name:?}: a plain file name");
    let base = args.out.join(format!("{}-{name}", utc_date(now_unix_s())));
    let mut dir = base.clone();
    let mut n = 2;
    while dir.exists() {
        dir = PathBuf::from(format!("{}-{n}", base.display()));
        n += 1;
    }
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(dir)
}

/// The listing is often piped into `head` or `grep -m`: a reader that closes the pipe ends the
/// listing (`Ok`), not the process with a panic as `println!` would.
fn dry_run(points: &[Point]) -> std::io::Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    for p in points {
        writeln!(
            out,
            "{:<48} ~{:>5.1}s  luigi {}",
            p.id,
            p.estimate_s(),
            p.argv(&format!("<dir>/points/{}.json", p.id)).join(" ")
        )?;
    }
    writeln!(
        out,
        "{} points, estimated {} (fitted to the debug build on a 2-core machine)",
        points.len(),
        format_duration(estimate_s(points))
    )
}

/// `luigi bench suite`.
pub fn suite(args: SuiteArgs) -> anyhow::Result<ExitCode> {
    let points = selected(&args)?;
    if args.dry_run {
        return match dry_run(&points) {
            Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
                Err(anyhow::Error::new(e).context("writing the list"))
            }
            Ok(()) | Err(_) => Ok(ExitCode::SUCCESS),
        };
    }
    let exe = std::env::current_exe().context("cannot locate the luigi binary")?;
    let dir = run_dir(&args)?;
    let info_path = dir.join("suite.json");
    let mut info = match args.resume.as_ref().and_then(|_| std::fs::read(&info_path).ok()) {
        Some(data) => serde_json::from_slice(&data).with_context(|| format!("parsing {}", info_path.display()))?,
        None => SuiteInfo {
            command: std::env::args().collect(),
            git_commit: luigi_bench::suite::results::git_commit(),
            machine: Machine::this(),
            started_at_unix_s: now_unix_s(),
            ended_at_unix_s: 0,
            running_s: 0,
            points: points.len(),
            estimate_s: estimate_s(&points),
        },
    };
    write_pretty(&info_path, &info)?;
    eprintln!(
        "suite: {} points, estimated {}, into {}",
        points.len(),
        format_duration(estimate_s(&points)),
        dir.display()
    );
    let opts = RunOptions { exe, dir: dir.clone(), progress: !args.no_progress };
    let began = now_unix_s();
    let outcome = run_points(&opts, &points)?;
    info.ended_at_unix_s = now_unix_s();
    // A --resume adds the time it ran, not the time since the run began.
    info.running_s += info.ended_at_unix_s.saturating_sub(began);
    write_pretty(&info_path, &info)?;
    render_dir(&dir)?;
    eprintln!(
        "suite: {} run, {} skipped (done already), {} failed; report in {}",
        outcome.ran.len(),
        outcome.skipped.len(),
        outcome.failed.len(),
        dir.join("REPORT.md").display()
    );
    if outcome.failed.is_empty() {
        Ok(ExitCode::SUCCESS)
    } else {
        eprintln!("failed points: {}", outcome.failed.join(", "));
        Ok(ExitCode::FAILURE)
    }
}

/// `luigi report`.
pub fn report(args: ReportArgs) -> anyhow::Result<ExitCode> {
    if let Some(pair) = &args.compare {
        let [a, b] = pair.as_slice() else { bail!("--compare takes two results directories") };
        let (run_a, run_b) = (load_dir(a)?, load_dir(b)?);
        let markdown = compare::render(&run_a, &run_b, &a.display().to_string(), &b.display().to_string());
        print!("{markdown}");
        let to = args.to.clone().unwrap_or_else(|| b.join("COMPARE.md"));
        std::fs::write(&to, &markdown).with_context(|| format!("writing {}", to.display()))?;
        let png = to.with_extension("png");
        match compare::plot(&run_a, &run_b, &png)? {
            true => eprintln!("written to {} and {}", to.display(), png.display()),
            false => eprintln!("written to {} (no point compared: no plot)", to.display()),
        }
        return Ok(ExitCode::SUCCESS);
    }
    let dir: &Path = args.dir.as_deref().context("give a results directory, or --compare A B")?;
    if let Some(targets) = &args.publish {
        let targets: Vec<PathBuf> = match targets.is_empty() {
            true => PUBLISH_DEFAULT.iter().map(PathBuf::from).collect(),
            false => targets.clone(),
        };
        let blocks = publish::publish(dir, &targets)?;
        for (target, n) in targets.iter().zip(blocks) {
            println!("{}: {n} block(s) rewritten from {}", target.display(), dir.display());
        }
        return Ok(ExitCode::SUCCESS);
    }
    let (suite, plots) = render_dir(dir)?;
    let failed = suite.points.iter().filter(|r| !r.ok).count();
    println!(
        "{}: {} points ({failed} failed); REPORT.md, points.csv and {} plot(s) written",
        dir.display(),
        suite.points.len(),
        plots.len()
    );
    Ok(ExitCode::SUCCESS)
}
