//! The Grafana dashboard (`deploy/grafana/luigi.json`) is valid JSON of the shape Grafana
//! imports, and every metric its queries name is one docs/METRICS.md lists (so it cannot
//! draw a metric no server serves).

use std::collections::BTreeSet;

use serde_json::Value;

const DASHBOARD: &str = include_str!("../../../deploy/grafana/luigi.json");
const METRICS_DOC: &str = include_str!("../../../docs/METRICS.md");

/// PromQL's functions, aggregations and keywords the dashboard may use, and Grafana's
/// `label_values`.
const PROMQL_WORDS: &[&str] = &[
    "sum",
    "max",
    "min",
    "avg",
    "count",
    "rate",
    "irate",
    "increase",
    "histogram_quantile",
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "and",
    "or",
    "unless",
    "bool",
    "offset",
    "abs",
    "clamp_min",
    "topk",
    "label_values",
];

/// The metrics docs/METRICS.md's table lists (first column, labels stripped), with their type.
fn documented() -> Vec<(String, String)> {
    METRICS_DOC
        .lines()
        .filter_map(|line| {
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            let name = cells.get(1)?.strip_prefix('`')?.split(['`', '{']).next()?;
            let kind = cells.get(2)?;
            Some((name.to_string(), kind.to_string()))
        })
        .filter(|(_, kind)| ["counter", "gauge", "histogram"].contains(&kind.as_str()))
        .collect()
}

/// A series name a query may use for a documented metric (a histogram's `_bucket`, `_sum`
/// and `_count` too).
fn known(name: &str, doc: &[(String, String)]) -> bool {
    doc.iter().any(|(metric, kind)| {
        name == metric
            || (kind == "histogram" && ["_bucket", "_sum", "_count"].iter().any(|s| name == format!("{metric}{s}")))
    })
}

/// The identifiers of a PromQL expression that are neither label matchers, label lists,
/// ranges, strings nor numbers: its functions, keywords and metric names.
fn identifiers(expr: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = expr;
    // Label lists of `by (...)`, `without (...)`, `on (...)` hold label names, not metrics.
    let mut skip_group = false;
    while let Some(c) = rest.chars().next() {
        let closing = match c {
            '{' => Some('}'),
            '[' => Some(']'),
            '"' => Some('"'),
            '(' if skip_group => Some(')'),
            _ => None,
        };
        if let Some(close) = closing {
            let end = rest[1..].find(close).map_or(rest.len(), |i| i + 2);
            rest = &rest[end..];
            skip_group = false;
        } else if c.is_ascii_alphabetic() || c == '_' {
            let end =
                rest.find(|ch: char| !(ch.is_ascii_alphanumeric() || ch == '_' || ch == ':')).unwrap_or(rest.len());
            let word = &rest[..end];
            skip_group = ["by", "without", "on", "ignoring", "group_left", "group_right"].contains(&word);
            out.push(word.to_string());
            rest = &rest[end..];
        } else {
            if c.is_ascii_digit() || c == '.' {
                // A number: its digits (and a decimal point) only.
                let end = rest.find(|ch: char| !(ch.is_ascii_digit() || ch == '.')).unwrap_or(rest.len());
                rest = &rest[end..];
                continue;
            }
            if !c.is_whitespace() {
                skip_group = false;
            }
            rest = &rest[c.len_utf8()..];
        }
    }
    out
}

/// The names in `expr` that are neither PromQL's words nor documented metrics.
fn unknown_names(expr: &str, doc: &[(String, String)]) -> Vec<String> {
    identifiers(expr).into_iter().filter(|w| !PROMQL_WORDS.contains(&w.as_str()) && !known(w, doc)).collect()
}

/// Every query of the dashboard: panels' targets and template variables'.
fn queries(dashboard: &Value) -> Vec<String> {
    let mut out = Vec::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        for target in panel["targets"].as_array().into_iter().flatten() {
            out.push(target["expr"].as_str().expect("every target has an expr").to_string());
        }
    }
    for variable in dashboard["templating"]["list"].as_array().expect("templating.list") {
        if variable["type"] == "query" {
            let query = variable["query"]["query"].as_str().expect("a query variable's query");
            // `label_values(metric, label)`: its second argument is a label, not a metric.
            let metric = query.strip_prefix("label_values(").and_then(|q| q.split(',').next()).unwrap_or(query);
            out.push(metric.to_string());
        }
    }
    out
}

#[test]
fn the_dashboard_is_grafana_json_with_a_shard_variable_and_every_panel_queried_and_placed() {
    let d: Value = serde_json::from_str(DASHBOARD).expect("valid JSON");
    assert_eq!(d["uid"], "luigi-cluster");
    assert!(d["schemaVersion"].as_u64().is_some_and(|v| v >= 30), "a current Grafana schema");
    let variables = d["templating"]["list"].as_array().unwrap();
    let shard = variables.iter().find(|v| v["name"] == "shard").expect("a $shard variable");
    assert_eq!((shard["multi"].as_bool(), shard["includeAll"].as_bool()), (Some(true), Some(true)));
    assert!(variables.iter().any(|v| v["name"] == "datasource" && v["type"] == "datasource"));
    let mut ids = BTreeSet::new();
    let mut exprs = 0;
    for panel in d["panels"].as_array().unwrap() {
        assert!(ids.insert(panel["id"].as_u64().expect("an id")), "ids are unique: {panel}");
        let grid = &panel["gridPos"];
        assert!(grid["w"].as_u64().is_some_and(|w| (1..=24).contains(&w)) && grid["y"].is_u64(), "placed: {panel}");
        if panel["type"] == "row" {
            continue;
        }
        let targets = panel["targets"].as_array().expect("targets");
        assert!(!targets.is_empty(), "{} has a query", panel["title"]);
        for t in targets {
            let expr = t["expr"].as_str().unwrap();
            assert!(expr.contains("shard=~\"$shard\""), "{} follows $shard: {expr}", panel["title"]);
            exprs += 1;
        }
    }
    assert!(exprs >= 20, "{exprs} queries");
}

#[test]
fn every_metric_the_dashboard_queries_is_in_docs_metrics_md() {
    let d: Value = serde_json::from_str(DASHBOARD).unwrap();
    let doc = documented();
    assert!(doc.len() >= 25, "the table was read: {doc:?}");
    let mut used = BTreeSet::new();
    for expr in queries(&d) {
        assert_eq!(unknown_names(&expr, &doc), Vec::<String>::new(), "in {expr}");
        used.extend(identifiers(&expr).into_iter().filter(|w| known(w, &doc)));
    }
    for wanted in [
        "etcd_server_has_leader",
        "etcd_server_is_leader",
        "luigi_raft_term",
        "luigi_transactions_total",
        "etcd_disk_wal_fsync_duration_seconds_bucket",
        "etcd_server_proposals_pending",
        "luigi_watermark_lag_seconds",
        "etcd_server_leader_changes_seen_total",
        "luigi_refusals_total",
        "luigi_clock_offset_seconds",
    ] {
        assert!(used.contains(wanted), "the dashboard shows {wanted}");
    }
}

#[test]
fn the_check_catches_a_metric_that_is_not_documented_and_reads_past_labels_and_numbers() {
    let doc = documented();
    let expr = "histogram_quantile(0.99, sum by (shard, le) (rate(luigi_commit_latency_seconds_bucket{shard=~\"$shard\"}[1m])))";
    assert_eq!(unknown_names(expr, &doc), ["luigi_commit_latency_seconds_bucket"]);
    assert_eq!(
        unknown_names("rate(luigi_raft_term_bucket[1m])", &doc),
        ["luigi_raft_term_bucket"],
        "a gauge has no buckets"
    );
    assert_eq!(
        unknown_names("sum by (shard, path) (rate(luigi_transactions_total{path=\"x\"}[5m])) > 0.5", &doc),
        Vec::<String>::new()
    );
    assert_eq!(
        identifiers("max by (shard) (luigi_serving{a=\"b\"}) * on (shard) group_left etcd_server_is_leader"),
        ["max", "by", "luigi_serving", "on", "group_left", "etcd_server_is_leader"]
    );
}
