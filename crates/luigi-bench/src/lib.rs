//! The Luigi benchmark suite: workloads, the load driver, local clusters, statistics and
//! reports. Every figure it prints is measured by the run that prints it.

pub mod cleanup;
pub mod client;
pub mod cluster;
pub mod cpu;
pub mod driver;
pub mod hgrm;
pub mod micro;
pub mod open_loop;
pub mod options;
pub mod report;
pub mod run;
pub mod samples;
pub mod server_metrics;
pub mod stats;
pub mod suite;
pub mod tpcc;
pub mod workload;
pub mod ycsb;
