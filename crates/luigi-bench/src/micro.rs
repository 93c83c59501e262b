//! `luigi bench micro`: the micro workload over a run of [`crate::run`].

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use crate::report::BenchResult;
use crate::run::{run_workload, Closing, RunSpec};
use crate::workload::micro::MicroOptions;

/// Everything one micro run needs.
#[derive(Clone, Debug)]
pub struct MicroRun {
    /// The run's shape.
    pub run: RunSpec,
    /// Workload parameters.
    pub micro: MicroOptions,
}

/// Runs one micro benchmark configuration and returns its measured result (see
/// [`run_workload`] for the bounds and failures of a run).
pub fn run_micro(run: &MicroRun) -> anyhow::Result<BenchResult> {
    let MicroRun { run: spec, micro } = run;
    let shards = match &spec.cluster_file {
        Some(path) => luigi_runtime::config::ClusterConfig::load(path)?.shard_count(),
        None => spec.shards,
    };
    let workload = Arc::new(micro.workload(shards)?);
    let closing = Closing { bound: Duration::ZERO, step: Box::new(|_: &dyn crate::client::TxnConnector| Ok(())) };
    let (measured, ()) = run_workload(spec, "micro", workload, None, closing)?;
    let mut params = BTreeMap::new();
    params.insert("keys".into(), json!(micro.keys));
    params.insert("ops".into(), json!(micro.ops));
    params.insert("read_ratio".into(), json!(micro.read_ratio));
    params.insert("cross_shard_pct".into(), json!(if shards > 1 { micro.cross_shard_pct } else { 0 }));
    params.insert("zipf".into(), json!(micro.zipf));
    Ok(measured.result(spec, "micro", params))
}
