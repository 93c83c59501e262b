use super::*;
use crate::suite::fixtures;

/// A point of the fixture suite that failed.
const FAILED: &str = "micro-1x1-same-region-t1-luigi";

/// A source rendered from the fixture suite (one point failed), as a document one folder
/// below the root sees it.
fn source() -> Source {
    let suite = fixtures::suite(&[FAILED]);
    Source {
        report: report::render(&suite),
        plots: vec!["scale".into(), "throughput-micro-2x3".into()],
        rel_dir: "../results/2026-11-27-full".into(),
        provenance: provenance(&suite, "../results/2026-11-27-full"),
    }
}

const DOC: &str = "# Results\n\nProse before.\n\n<!-- luigi:report BEGIN table=source -->\nold source\n\
<!-- luigi:report END -->\n\n## Latency\n\nA reading that must survive.\n\n\
<!-- luigi:report BEGIN table=latency -->\n| stale | table |\n<!-- luigi:report END -->\n\n\
<!-- luigi:report BEGIN plot=scale -->\n<!-- luigi:report END -->\nProse after.\n";

#[test]
fn blocks_are_replaced_and_the_prose_around_them_kept() {
    let (out, blocks) = rewrite(DOC, &source()).unwrap();
    assert_eq!(blocks, 3);
    assert!(!out.contains("old source") && !out.contains("| stale | table |"), "{out}");
    for prose in ["# Results\n\nProse before.\n\n", "## Latency\n\nA reading that must survive.\n\n", "Prose after.\n"]
    {
        assert!(out.contains(prose), "lost {prose:?}:\n{out}");
    }
    let latency = section(&source().report, "## Commit latency in one-way delays").unwrap();
    assert!(latency.contains("| shape | luigi | occ | 2pl | direct |"), "{latency}");
    assert!(out.contains(latency.trim_matches('\n')), "{out}");
    assert!(out.contains("![scale](../results/2026-11-27-full/plots/scale.png)"), "{out}");
    assert!(
        out.contains("Figures from [`results/2026-11-27-full`](../results/2026-11-27-full/REPORT.md): commit"),
        "{out}"
    );
    assert_eq!(out.matches(BEGIN).count(), 3);
    assert_eq!(out.matches(END).count(), 3);
}

#[test]
fn publishing_twice_changes_nothing() {
    let (once, _) = rewrite(DOC, &source()).unwrap();
    let (twice, _) = rewrite(&once, &source()).unwrap();
    assert_eq!(once, twice);
}

#[test]
fn a_section_ends_at_the_next_heading_of_its_level() {
    let report = "## A\n\nbody a\n### A1\n\nsub\n## B\n\nbody b\n";
    assert_eq!(section(report, "## A").unwrap(), "\nbody a\n### A1\n\nsub");
    assert_eq!(section(report, "### A1").unwrap(), "\nsub");
    assert_eq!(section(report, "## C"), None);
}

#[test]
fn every_table_key_names_a_section_of_the_full_report() {
    let report = source().report;
    for (key, heading) in TABLES {
        let body = section(&report, heading).unwrap_or_else(|| panic!("table={key}: no section {heading:?}"));
        // The fixture's points resend nothing: their counts section says so instead of a table.
        let expected = if key == "counts" { "None." } else { "|" };
        assert!(body.contains(expected), "table={key}: section {heading:?} has no {expected:?}");
    }
    assert!(section(&report, "## Failed points").unwrap().contains(FAILED));
}

#[test]
fn missing_or_broken_markers_are_clear_errors() {
    let err = |text: &str| format!("{:#}", rewrite(text, &source()).unwrap_err());
    assert!(err("# Prose only\n").contains("no <!-- luigi:report BEGIN"), "{}", err("# Prose only\n"));
    let unterminated = "<!-- luigi:report BEGIN table=latency -->\nold\n";
    assert!(err(unterminated).contains("has no <!-- luigi:report END -->"), "{}", err(unterminated));
    let nested = "<!-- luigi:report BEGIN table=latency -->\n<!-- luigi:report BEGIN table=scale -->\n";
    assert!(err(nested).contains("line 1"), "{}", err(nested));
    let stray = "text\n<!-- luigi:report END -->\n";
    assert!(err(stray).contains("line 2"), "{}", err(stray));
    let unknown = "<!-- luigi:report BEGIN table=nope -->\n<!-- luigi:report END -->\n";
    assert!(err(unknown).contains("unknown table \"nope\""), "{}", err(unknown));
    let no_plot = "<!-- luigi:report BEGIN plot=cdf -->\n<!-- luigi:report END -->\n";
    assert!(err(no_plot).contains("no plots/cdf.png"), "{}", err(no_plot));
}

#[test]
fn publish_writes_every_document_or_none() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("results/2026-11-27-x");
    std::fs::create_dir_all(run.join("points")).unwrap();
    crate::suite::results::write_pretty(&run.join("suite.json"), &fixtures::suite(&[]).info).unwrap();
    let docs = tmp.path().join("docs");
    std::fs::create_dir_all(&docs).unwrap();
    let (good, bad) = (docs.join("RESULTS.md"), tmp.path().join("README.md"));
    let doc = "intro\n<!-- luigi:report BEGIN table=source -->\n<!-- luigi:report END -->\n";
    std::fs::write(&good, doc).unwrap();
    std::fs::write(&bad, "no markers\n").unwrap();
    assert!(publish(&run, &[good.clone(), bad.clone()]).is_err());
    assert_eq!(std::fs::read_to_string(&good).unwrap(), doc, "a failed publish wrote a document");
    assert_eq!(publish(&run, std::slice::from_ref(&good)).unwrap(), vec![1]);
    let out = std::fs::read_to_string(&good).unwrap();
    assert!(out.contains("(../results/2026-11-27-x/REPORT.md)"), "{out}");
}
