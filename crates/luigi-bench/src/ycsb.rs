//! `luigi bench ycsb`: YCSB's core workloads and the K2 mixes (`luigi_workloads::ycsb`) over
//! a run of [`crate::run`], reported per operation type (each type is its own procedure, so
//! its own kind in the report) as well as overall.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use luigi_runtime::config::ClusterConfig;
use luigi_workloads::ycsb::{YcsbLoad, YcsbWorkload};
use luigi_workloads::WorkloadSpec;
use serde_json::json;

use crate::client::TxnConnector;
use crate::report::BenchResult;
use crate::run::{reads_at_snapshot, run_workload, Closing, RunSpec};
use crate::workload::ycsb::YcsbOptions;

/// One YCSB run: its shape and its workload.
#[derive(Clone, Debug)]
pub struct YcsbRun {
    /// The run's shape.
    pub run: RunSpec,
    /// The workload's options.
    pub ycsb: YcsbOptions,
}

/// Runs one YCSB configuration; the result has figures for every operation type.
pub fn run_ycsb(run: &YcsbRun) -> anyhow::Result<BenchResult> {
    let YcsbRun { run: spec, ycsb } = run;
    let file = spec.cluster_file.as_ref().map(|p| ClusterConfig::load(p)).transpose()?;
    let shards = file.as_ref().map_or(spec.shards, ClusterConfig::shard_count);
    let config = ycsb.validate(Some(shards), file.as_ref())?;
    // Scans among reads lock nothing when the client reads them at a snapshot.
    let load = YcsbLoad { scans_at_snapshot: reads_at_snapshot(spec, file.as_ref()), ..ycsb.load() };
    let workload =
        Arc::new(YcsbWorkload::new(config.clone(), load, shards).map_err(|e| anyhow::anyhow!("YCSB workload: {e}"))?);
    let closing = Closing { bound: Duration::ZERO, step: Box::new(|_: &dyn TxnConnector| Ok(())) };
    let label = ycsb.label();
    let hosted = Some(WorkloadSpec::Ycsb(config.clone()));
    let (measured, ()) = run_workload(spec, &label, workload, hosted, closing)?;
    let mut params = BTreeMap::new();
    params.insert("dist".into(), json!(load.dist.name()));
    params.insert("records".into(), json!(config.records));
    params.insert("field_count".into(), json!(config.field_count));
    params.insert("field_length".into(), json!(config.field_length));
    params.insert("ops_per_txn".into(), json!(load.ops_per_txn));
    params.insert("max_scan_length".into(), json!(load.max_scan_length));
    params.insert("scans_at_snapshot".into(), json!(load.scans_at_snapshot));
    let mut result = measured.result(spec, &label, params);
    result.by_kind = measured.by_kind(true);
    Ok(result)
}
