//! `luigi bench tpcc` and `luigi check tpcc`: TPC-C (`luigi_workloads::tpcc`, see
//! `docs/TPCC.md`) over a run of [`crate::run`], followed by the twelve consistency
//! conditions of clause 3.3.2, read through one transaction over every shard. Under a
//! protocol that is not transactional (`direct`) the conditions are not checked: they hold
//! only of serializable executions, so a failure would say nothing about the servers.
//!
//! This is the seeds' closed-loop client model (threads x in-flight, no keying or think
//! times), not an audited tpmC.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context};
use luigi_runtime::config::ClusterConfig;
use luigi_txn::types::Protocol;
use luigi_workloads::tpcc::{ConditionResult, Mix, TpccConfig, TpccLoad, TpccWorkload};
use luigi_workloads::WorkloadSpec;
use serde_json::json;

use crate::client::{ClusterConnector, TxnConnector, TxnStatus};
use crate::report::BenchResult;
use crate::run::{run_workload, Closing, RunSpec};

/// Procedure of the NewOrder transaction (what tpmC counts).
pub const NEW_ORDER: &str = "tpcc.new_order";
/// How long the closing consistency check may take (a full-scale warehouse is read whole).
pub const CHECK_BOUND: Duration = Duration::from_secs(300);
/// How many times the check transaction is tried when it is not committed (a leader change
/// during the check answers it unknown or rejected; a read-only transaction may be retried).
pub const CHECK_ATTEMPTS_MAX: u32 = 3;

/// `luigi bench tpcc`'s workload options, as given on the command line.
#[derive(Clone, Debug, PartialEq)]
pub struct TpccOptions {
    /// `--warehouses` (default: one per shard). Not with a cluster file (its own counts).
    pub warehouses: Option<u32>,
    /// `--scale` (default 1.0). Not with a cluster file.
    pub scale: Option<f64>,
    /// `--remote-item-pct`.
    pub remote_item_pct: f64,
    /// `--remote-payment-pct`.
    pub remote_payment_pct: f64,
    /// `--mix`.
    pub mix: Mix,
}

impl TpccOptions {
    /// The client-side parameters.
    pub fn load(&self) -> TpccLoad {
        TpccLoad { mix: self.mix, remote_item_pct: self.remote_item_pct, remote_payment_pct: self.remote_payment_pct }
    }

    /// The server-side parameters for a local cluster of `shards` shards.
    pub fn config(&self, shards: u32) -> TpccConfig {
        TpccConfig {
            warehouses: self.warehouses.unwrap_or(shards),
            scale: self.scale.unwrap_or(1.0),
            ..TpccConfig::default()
        }
    }

    /// Checks the options for a local cluster of `shards` shards (`None`: a cluster file,
    /// whose `[workload]` decides the warehouses and the scale), naming the option refused.
    pub fn validate(&self, shards: Option<u32>, file: Option<&ClusterConfig>) -> anyhow::Result<TpccConfig> {
        for (option, pct) in
            [("--remote-item-pct", self.remote_item_pct), ("--remote-payment-pct", self.remote_payment_pct)]
        {
            ensure!(
                pct.is_finite() && (0.0..=100.0).contains(&pct),
                "invalid {option} {pct}: a percentage from 0 to 100"
            );
        }
        let config = match (shards, file) {
            (_, Some(file)) => {
                ensure!(
                    self.warehouses.is_none() && self.scale.is_none(),
                    "--warehouses and --scale are the servers' (the cluster file's [workload]); not with --cluster"
                );
                hosted_tpcc(file)?
            }
            (Some(shards), None) => self.config(shards),
            (None, None) => bail!("a TPC-C run needs a local cluster's shard count or a cluster file"),
        };
        let shards = file.map_or_else(|| shards.unwrap_or(1), ClusterConfig::shard_count);
        TpccWorkload::new(config.clone(), self.load(), shards)
            .map_err(|e| anyhow::anyhow!("invalid TPC-C options: {e}"))?;
        Ok(config)
    }
}

/// The TPC-C parameters of the workload a cluster file's servers host.
pub fn hosted_tpcc(config: &ClusterConfig) -> anyhow::Result<TpccConfig> {
    match &config.workload {
        Some(WorkloadSpec::Tpcc(tpcc)) => Ok(tpcc.clone()),
        Some(WorkloadSpec::Ycsb(_)) | None => bail!(
            "the cluster's servers host no TPC-C database: its file has no [workload] table with kind = \"tpcc\" \
             (see docs/TPCC.md)"
        ),
    }
}

/// One TPC-C run: its shape and its workload.
#[derive(Clone, Debug)]
pub struct TpccRun {
    /// The run's shape.
    pub run: RunSpec,
    /// The workload's options.
    pub tpcc: TpccOptions,
}

/// Why the conditions are not checked under `protocol`, if they are not.
pub fn conditions_skipped(protocol: Protocol) -> Option<String> {
    match protocol {
        Protocol::Luigi | Protocol::Occ | Protocol::TwoPl => None,
        Protocol::Direct => Some(format!(
            "the consistency conditions are not checked: {protocol} is not transactional (no atomicity, no isolation)"
        )),
    }
}

/// Runs one TPC-C configuration, then checks the twelve conditions on the final state
/// (`None`: not checked, the protocol is not transactional, see [`conditions_skipped`]).
/// Returns the result (with the conditions in its `params`) and the conditions; a failed
/// condition is not an error here: the caller records the run, then fails.
pub fn run_tpcc(run: &TpccRun) -> anyhow::Result<(BenchResult, Option<Vec<ConditionResult>>)> {
    let TpccRun { run: spec, tpcc } = run;
    let file = spec.cluster_file.as_ref().map(|p| ClusterConfig::load(p)).transpose()?;
    let shards = file.as_ref().map_or(spec.shards, ClusterConfig::shard_count);
    let config = tpcc.validate(Some(shards), file.as_ref())?;
    let workload = Arc::new(
        TpccWorkload::new(config.clone(), tpcc.load(), shards).map_err(|e| anyhow::anyhow!("TPC-C workload: {e}"))?,
    );
    let checker = workload.clone();
    let skipped = conditions_skipped(spec.protocol);
    let closing: Closing<'_, Option<(Vec<ConditionResult>, f64)>> = match skipped {
        Some(_) => Closing { bound: Duration::ZERO, step: Box::new(|_: &dyn TxnConnector| Ok(None)) },
        None => Closing {
            bound: CHECK_BOUND,
            step: Box::new(move |connector: &dyn TxnConnector| check_conditions(&checker, connector).map(Some)),
        },
    };
    let hosted = Some(WorkloadSpec::Tpcc(config.clone()));
    let (measured, checked) = run_workload(spec, "tpcc", workload, hosted, closing)?;
    let mut params = BTreeMap::new();
    params.insert("warehouses".into(), json!(config.warehouses));
    params.insert("scale".into(), json!(config.scale));
    params.insert("mix".into(), json!(format!("{:?}", tpcc.mix)));
    params.insert("remote_item_pct".into(), json!(tpcc.remote_item_pct));
    params.insert("remote_payment_pct".into(), json!(tpcc.remote_payment_pct));
    let measured_s = measured.report.measured.as_secs_f64();
    let new_orders = measured.report.by_kind.get(NEW_ORDER).map_or(0, |k| k.counters.committed);
    params.insert("tpmc".into(), json!(new_orders as f64 * 60.0 / measured_s));
    let c = &measured.report.counters;
    params.insert(
        "cross_shard_share".into(),
        json!(if c.committed == 0 { 0.0 } else { c.cross_shard as f64 / c.committed as f64 }),
    );
    match (&checked, skipped) {
        (Some((conditions, check_s)), _) => {
            params.insert("check_s".into(), json!(check_s));
            params.insert("conditions".into(), json!(conditions_json(conditions)));
        }
        (None, why) => {
            params.insert("conditions_skipped".into(), json!(why.unwrap_or_default()));
        }
    }
    Ok((measured.result(spec, "tpcc", params), checked.map(|(conditions, _)| conditions)))
}

/// The conditions as JSON values (number, passed, checked, detail).
pub fn conditions_json(conditions: &[ConditionResult]) -> Vec<serde_json::Value> {
    conditions
        .iter()
        .map(|c| json!({"number": c.number, "passed": c.passed, "checked": c.checked, "detail": c.detail}))
        .collect()
}

/// Reads the final state through one `tpcc.check` transaction over every shard and
/// evaluates the twelve conditions. Returns them and the seconds the check took.
pub fn check_conditions(
    workload: &TpccWorkload,
    connector: &dyn TxnConnector,
) -> anyhow::Result<(Vec<ConditionResult>, f64)> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let started = Instant::now();
    let outputs = rt.block_on(async {
        let client = connector.connect(luigi_runtime::clock::now_us() << 8 | 0xfe).await?;
        let mut last = None;
        for _ in 0..CHECK_ATTEMPTS_MAX {
            let done = client.submit(workload.check_txn()).await?;
            if done.status == TxnStatus::Committed {
                return Ok(done.outputs);
            }
            last = Some(done.status);
        }
        bail!("the check transaction was not committed in {CHECK_ATTEMPTS_MAX} attempts (last: {last:?})")
    })?;
    let conditions = workload.evaluate(&outputs).map_err(|e| anyhow::anyhow!("evaluating the check's output: {e}"))?;
    Ok((conditions, started.elapsed().as_secs_f64()))
}

/// `luigi check tpcc --cluster FILE`: the twelve conditions on a running cluster.
pub fn check_cluster(config: &ClusterConfig) -> anyhow::Result<(Vec<ConditionResult>, f64)> {
    if let Some(why) = conditions_skipped(config.protocol()) {
        bail!("the cluster runs {}: {why}", config.protocol());
    }
    let tpcc = hosted_tpcc(config)?;
    let workload = TpccWorkload::new(tpcc, TpccLoad::default(), config.shard_count())
        .map_err(|e| anyhow::anyhow!("the cluster file's TPC-C workload: {e}"))?;
    check_conditions(&workload, &ClusterConnector { cluster: config }).context("checking the TPC-C conditions")
}

/// The conditions as an aligned table, one line each.
pub fn render_conditions(conditions: &[ConditionResult]) -> String {
    let mut out = String::new();
    for c in conditions {
        let verdict = if c.passed { "ok  " } else { "FAIL" };
        out.push_str(&format!("{verdict} {:>2}  {:<72} checked {:>9}", c.number, c.statement, c.checked));
        if !c.passed {
            out.push_str(&format!("\n         {}", c.detail));
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_conditions_are_checked_for_every_transactional_protocol_only() {
        for p in Protocol::ALL {
            let skipped = conditions_skipped(p);
            assert_eq!(skipped.is_none(), p.is_transactional(), "{p}");
            if let Some(why) = skipped {
                assert!(why.contains("direct is not transactional"), "{why}");
            }
        }
        let mut config = ClusterConfig::local(1, luigi_wan::Scenario::None, &[1]);
        config.set_protocol(Protocol::Direct);
        let e = check_cluster(&config).unwrap_err().to_string();
        assert!(e.contains("runs direct") && e.contains("not transactional"), "{e}");
    }
}
