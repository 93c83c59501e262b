//! `luigi bench ycsb`'s workload options: which workload (`a`..`f`, `k2-95-5`, `k2-50-50`),
//! its request distribution, the usertable's shape (local clusters only: a cluster file's
//! `[workload]` decides it for its servers), operations per transaction and the longest
//! scan. The workload itself is `luigi_workloads::ycsb`; these options are checked here with
//! messages naming the command-line option and value refused.

use anyhow::{bail, ensure};
use luigi_runtime::config::ClusterConfig;
use luigi_workloads::ycsb::{
    CoreWorkload, Distribution, YcsbConfig, YcsbGenerator, YcsbLoad, YcsbWorkload, MAX_OPS_PER_TXN, MAX_RECORDS,
    MAX_ROW_BYTES, MAX_SCAN_LENGTH, MAX_TXN_BYTES,
};
use luigi_workloads::{TxnGenerator, WorkloadSpec};

/// Transactions drawn by the check that they can be drawn at all.
const DRAW_CHECK_TXNS: u32 = 2_000;

/// `luigi bench ycsb` options, as given on the command line.
#[derive(Clone, Debug, PartialEq)]
pub struct YcsbOptions {
    /// `--workload`.
    pub workload: CoreWorkload,
    /// `--dist` (default: the workload's own).
    pub dist: Option<Distribution>,
    /// `--records` (default 1000). Not with a cluster file.
    pub records: Option<u64>,
    /// `--field-count` (default 10). Not with a cluster file.
    pub field_count: Option<u32>,
    /// `--field-length` (default 100). Not with a cluster file.
    pub field_length: Option<u32>,
    /// `--ops-per-txn`.
    pub ops_per_txn: u32,
    /// `--max-scan-length`.
    pub max_scan_length: u32,
}

impl Default for YcsbOptions {
    fn default() -> Self {
        Self {
            workload: CoreWorkload::A,
            dist: None,
            records: None,
            field_count: None,
            field_length: None,
            ops_per_txn: 1,
            max_scan_length: 100,
        }
    }
}

impl YcsbOptions {
    /// The client-side parameters.
    pub fn load(&self) -> YcsbLoad {
        YcsbLoad {
            dist: self.dist.unwrap_or(self.workload.default_dist()),
            ops_per_txn: self.ops_per_txn,
            max_scan_length: self.max_scan_length,
            ..YcsbLoad::of(self.workload)
        }
    }

    /// The usertable of a local cluster.
    pub fn config(&self) -> YcsbConfig {
        let d = YcsbConfig::default();
        YcsbConfig {
            records: self.records.unwrap_or(d.records),
            field_count: self.field_count.unwrap_or(d.field_count),
            field_length: self.field_length.unwrap_or(d.field_length),
            ..d
        }
    }

    /// The run's label: `ycsb-` and the workload's name.
    pub fn label(&self) -> String {
        format!("ycsb-{}", self.workload.name())
    }

    /// Checks the options for a local cluster of `shards` shards or a cluster file (whose
    /// `[workload]` decides the usertable), naming the option refused; returns the usertable.
    pub fn validate(&self, shards: Option<u32>, file: Option<&ClusterConfig>) -> anyhow::Result<YcsbConfig> {
        self.check_ranges()?;
        let config = match (shards, file) {
            (_, Some(file)) => {
                ensure!(
                    self.records.is_none() && self.field_count.is_none() && self.field_length.is_none(),
                    "--records, --field-count and --field-length are the servers' (the cluster file's [workload]); \
                     not with --cluster"
                );
                hosted_ycsb(file)?
            }
            (Some(_), None) => self.config(),
            (None, None) => bail!("a YCSB run needs a local cluster's shard count or a cluster file"),
        };
        let shards = file.map_or_else(|| shards.unwrap_or(1), ClusterConfig::shard_count);
        YcsbWorkload::new(config.clone(), self.load(), shards)
            .map_err(|e| anyhow::anyhow!("invalid YCSB options: {e}"))?;
        let mut generator = YcsbGenerator::new(
            config.clone(),
            self.load(),
            shards,
            0x5eed,
            luigi_workloads::ycsb::InsertCounter::new(config.records),
        );
        for _ in 0..DRAW_CHECK_TXNS {
            if let Err(e) = generator.next_txn() {
                bail!(
                    "invalid --ops-per-txn {} with --records {}: {e}; raise --records or lower --ops-per-txn",
                    self.ops_per_txn,
                    config.records
                );
            }
        }
        Ok(config)
    }

    /// Each option's range.
    fn check_ranges(&self) -> anyhow::Result<()> {
        ensure!(
            (1..=MAX_OPS_PER_TXN).contains(&self.ops_per_txn),
            "invalid --ops-per-txn {}: from 1 to {MAX_OPS_PER_TXN}",
            self.ops_per_txn
        );
        ensure!(
            (1..=MAX_SCAN_LENGTH).contains(&self.max_scan_length),
            "invalid --max-scan-length {}: from 1 to {MAX_SCAN_LENGTH}",
            self.max_scan_length
        );
        if let Some(records) = self.records {
            ensure!((1..=MAX_RECORDS).contains(&records), "invalid --records {records}: from 1 to {MAX_RECORDS}");
        }
        for (option, value) in [("--field-count", self.field_count), ("--field-length", self.field_length)] {
            if let Some(v) = value {
                ensure!(v >= 1, "invalid {option} {v}: at least 1");
            }
        }
        let config = self.config();
        ensure!(
            config.row_bytes() <= MAX_ROW_BYTES,
            "invalid --field-count {} with --field-length {}: a row of {} bytes, at most {MAX_ROW_BYTES}",
            config.field_count,
            config.field_length,
            config.row_bytes()
        );
        ensure!(
            u64::from(self.ops_per_txn) * config.row_bytes() <= MAX_TXN_BYTES,
            "invalid --ops-per-txn {}: {} rows of {} bytes exceed {MAX_TXN_BYTES} bytes per transaction",
            self.ops_per_txn,
            self.ops_per_txn,
            config.row_bytes()
        );
        Ok(())
    }
}

/// The usertable a cluster file's servers host.
pub fn hosted_ycsb(config: &ClusterConfig) -> anyhow::Result<YcsbConfig> {
    match &config.workload {
        Some(WorkloadSpec::Ycsb(ycsb)) => Ok(ycsb.clone()),
        Some(WorkloadSpec::Tpcc(_)) | None => {
            bail!("the cluster's servers host no YCSB usertable: its file has no [workload] table with kind = \"ycsb\"")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rejected(options: YcsbOptions) -> String {
        let msg = format!("{:#}", options.validate(Some(1), None).expect_err("accepted"));
        assert_eq!(msg.lines().count(), 1, "one line: {msg}");
        msg
    }

    #[test]
    fn every_workload_with_every_distribution_is_accepted() {
        for workload in CoreWorkload::ALL {
            for dist in [None, Some(Distribution::Uniform), Some(Distribution::Zipfian), Some(Distribution::Latest)] {
                let options = YcsbOptions { workload, dist, ..YcsbOptions::default() };
                assert_eq!(options.validate(Some(3), None).unwrap(), YcsbConfig::default());
            }
        }
        let d = YcsbOptions { workload: CoreWorkload::D, ..YcsbOptions::default() };
        assert_eq!(d.load().dist, Distribution::Latest, "D reads the latest by default");
        assert_eq!(d.label(), "ycsb-d");
    }

    #[test]
    fn out_of_range_options_are_refused_naming_them() {
        let cases = [
            (YcsbOptions { ops_per_txn: 0, ..YcsbOptions::default() }, "invalid --ops-per-txn 0"),
            (YcsbOptions { max_scan_length: 0, ..YcsbOptions::default() }, "invalid --max-scan-length 0"),
            (YcsbOptions { records: Some(0), ..YcsbOptions::default() }, "invalid --records 0"),
            (YcsbOptions { field_count: Some(0), ..YcsbOptions::default() }, "invalid --field-count 0"),
            (YcsbOptions { field_length: Some(100_000), ..YcsbOptions::default() }, "a row of 1000000 bytes"),
            (YcsbOptions { ops_per_txn: 600, ..YcsbOptions::default() }, "invalid YCSB options"),
        ];
        for (options, needle) in cases {
            let msg = rejected(options);
            assert!(msg.contains(needle), "{needle:?} not in {msg}");
        }
    }

    /// Issue 31: a client sends a transaction whose every piece declares no write as snapshot
    /// reads (the read-only path). YCSB's reads must be exactly those, in every workload and
    /// with several operations per transaction; K2's {95, 5} mix draws 95 % of them.
    #[test]
    fn reads_and_only_reads_declare_no_writes_so_they_take_the_read_only_path() {
        for workload in CoreWorkload::ALL {
            for ops_per_txn in [1, 4] {
                let options = YcsbOptions { workload, ops_per_txn, ..YcsbOptions::default() };
                let config = options.validate(Some(3), None).unwrap();
                let counter = luigi_workloads::ycsb::InsertCounter::new(config.records);
                let mut generator = YcsbGenerator::new(config, options.load(), 3, 7, counter);
                let draws = 4_000;
                let mut read_only = 0;
                for _ in 0..draws {
                    let txn = generator.next_txn().unwrap();
                    let no_writes = txn.pieces.iter().all(|piece| piece.keys.writes.is_empty());
                    assert_eq!(no_writes, txn.procedure == "ycsb.read", "{workload:?}: {}", txn.procedure);
                    read_only += u32::from(no_writes);
                }
                let share = f64::from(read_only) / f64::from(draws);
                let expected = f64::from(options.load().mix.read) / 100.0;
                assert!((share - expected).abs() < 0.02, "{workload:?}: {share} read-only, mix {expected}");
            }
        }
    }

    #[test]
    fn a_cluster_file_must_host_a_usertable_and_decides_its_shape() {
        let mut file = ClusterConfig::local(1, luigi_wan::Scenario::None, &[1]);
        let e = YcsbOptions::default().validate(None, Some(&file)).unwrap_err().to_string();
        assert!(e.contains("host no YCSB usertable"), "{e}");
        let hosted = YcsbConfig { records: 500, ..YcsbConfig::default() };
        file.workload = Some(WorkloadSpec::Ycsb(hosted.clone()));
        assert_eq!(YcsbOptions::default().validate(None, Some(&file)).unwrap(), hosted);
        let sized = YcsbOptions { records: Some(10), ..YcsbOptions::default() };
        assert!(sized.validate(None, Some(&file)).unwrap_err().to_string().contains("not with --cluster"));
    }
}
