//! The `--help` epilogues of `luigi bench`'s runs.

/// The bounds of a run and what it leaves behind, as every `luigi bench` run's epilogue says.
macro_rules! bounds_help {
    () => {
        "\
Bounds: a run fails (non-zero exit) if its local servers do not listen within 20 s, if a shard
commits no first transaction within 60 s, if the load does not end within warm-up + duration +
a grace (15 s + the client's give-up time), if it commits nothing in its measured interval, or
if transactions are left unknown (no complete answer within the client's give-up time: the
cluster stalled or lost servers).

The local cluster's servers, logs and data live in $TMPDIR/luigi-bench-XXXXXX; the servers are
stopped and the directory removed on exit, error, panic, SIGINT, SIGTERM or SIGHUP. After a
SIGKILL the servers still exit (their standard input closes) but the directory stays."
    };
}

/// `luigi bench micro --help` (and `ycsb`) epilogue.
pub const MICRO_HELP: &str = bounds_help!();

/// `luigi bench tpcc --help` epilogue.
pub const TPCC_HELP: &str = concat!(
    "After the load, the twelve consistency conditions of TPC-C clause 3.3.2 are checked on the
final state through one transaction over every shard and printed; a failed condition makes the
command exit 1 (after the results file is written).

",
    bounds_help!()
);
