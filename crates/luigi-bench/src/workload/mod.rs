//! Workloads for the load driver: the protocol-neutral ones of `luigi_workloads` (re-exported
//! here), plus the command-line options that configure them ([`micro::MicroOptions`],
//! [`ycsb::YcsbOptions`]).

pub mod micro;
pub mod ycsb;

pub use luigi_workloads::{GenError, TxnGenerator, TxnSpec, Workload};
