//! `luigi get / put / scan / txn`: one key-value transaction against a running cluster,
//! through the client library and the built-in `kv` procedure.

use std::fmt;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::{ArgMatches, Args};
use luigi_runtime::client::Client;
use luigi_runtime::config::ClusterConfig;
use luigi_txn::client_core::TxnOutcome;
use luigi_txn::partition::HashPartitioner;
use luigi_txn::types::Timestamp;
use luigi_workloads::procedures::{kv_args, kv_merge, kv_pieces, Kv, KvOp, KvResult};
use serde_json::{json, Value as Json};

/// Exit status of `get` when the key does not exist.
pub const EXIT_NOT_FOUND: u8 = 1;
/// Exit status of the client commands on an error: nothing was done.
pub const EXIT_ERROR: u8 = 2;
/// Exit status when the transaction's outcome is unknown: it may or may not have executed.
pub const EXIT_UNKNOWN: u8 = 3;

/// Appended to the help of `get`, `put`, `scan` and `txn`.
pub const EXIT_HELP: &str = "\
Keys and values are byte strings, given as UTF-8; keys must not be empty. Output values are
printed as they are stored (with --json, as UTF-8 strings, invalid bytes replaced).

Exit status:
  0  done (get: the key exists)
  1  get only: the key does not exist (nothing is printed on standard output)
  2  error, and nothing was done: bad arguments or cluster file, cluster unreachable,
     transaction rejected by a shard
  3  outcome unknown: no complete answer in time; the transaction may or may not have
     executed (a put can simply be repeated)";

/// Options every key-value command takes.
#[derive(Args)]
pub struct ClientArgs {
    /// Cluster file (TOML) of the running servers.
    #[arg(long)]
    cluster: PathBuf,
    /// Print the result as JSON (one object) instead of text.
    #[arg(long)]
    json: bool,
    /// Seconds to wait for the answer; after that the outcome is reported unknown.
    #[arg(long, default_value_t = 10.0)]
    timeout: f64,
    /// Run this client's clock this many microseconds ahead (negative: behind) of the
    /// machine's: for tests of clock skew (DESIGN.md rule 22).
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    clock_offset_us: i64,
}

#[derive(Args)]
pub struct GetArgs {
    /// The key.
    key: String,
    #[command(flatten)]
    client: ClientArgs,
}

#[derive(Args)]
pub struct PutArgs {
    /// The key.
    key: String,
    /// The value.
    value: String,
    #[command(flatten)]
    client: ClientArgs,
}

#[derive(Args)]
pub struct ScanArgs {
    /// Key prefix ("" for every key); every shard is asked.
    prefix: String,
    /// Most entries printed (the smallest keys).
    #[arg(long, default_value_t = 100)]
    limit: u32,
    #[command(flatten)]
    client: ClientArgs,
}

#[derive(Args)]
pub struct TxnArgs {
    /// Read KEY.
    #[arg(long = "get", value_name = "KEY")]
    gets: Vec<String>,
    /// Write VALUE under KEY.
    #[arg(long = "put", value_name = "KEY=VALUE")]
    puts: Vec<String>,
    /// Remove KEY.
    #[arg(long = "delete", value_name = "KEY")]
    deletes: Vec<String>,
    /// Read the keys starting with PREFIX (at most --limit of them).
    #[arg(long = "scan", value_name = "PREFIX")]
    scans: Vec<String>,
    /// Most entries a --scan returns.
    #[arg(long, default_value_t = 100)]
    limit: u32,
    #[command(flatten)]
    client: ClientArgs,
}

/// The transaction's outcome is unknown (exit status [`EXIT_UNKNOWN`]).
#[derive(Debug)]
pub struct OutcomeUnknown(String);

impl fmt::Display for OutcomeUnknown {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "outcome unknown: {}; the transaction may or may not have executed", self.0)
    }
}

impl std::error::Error for OutcomeUnknown {}

pub fn get(args: GetArgs) -> anyhow::Result<ExitCode> {
    let ops = vec![KvOp::Get { key: args.key.clone().into_bytes() }];
    let (ts, results) = run(&args.client, &ops)?;
    let [KvResult::Value(value)] = results.as_slice() else { anyhow::bail!("unexpected answer {results:?}") };
    if args.client.json {
        let value = value.as_deref().map(text);
        print_json(&json!({ "key": args.key, "found": value.is_some(), "value": value, "ts": ts }));
    } else if let Some(v) = value {
        print_bytes_line(v);
    } else {
        eprintln!("luigi: key not found: {}", args.key);
    }
    Ok(if value.is_some() { ExitCode::SUCCESS } else { ExitCode::from(EXIT_NOT_FOUND) })
}

pub fn put(args: PutArgs) -> anyhow::Result<ExitCode> {
    let ops = vec![KvOp::Put { key: args.key.clone().into_bytes(), value: args.value.into_bytes() }];
    let (ts, _) = run(&args.client, &ops)?;
    if args.client.json {
        print_json(&json!({ "key": args.key, "ok": true, "ts": ts }));
    } else {
        println!("OK");
    }
    Ok(ExitCode::SUCCESS)
}

pub fn scan(args: ScanArgs) -> anyhow::Result<ExitCode> {
    let ops = vec![KvOp::Scan { prefix: args.prefix.clone().into_bytes(), limit: args.limit }];
    let (ts, results) = run(&args.client, &ops)?;
    let [KvResult::Entries(entries)] = results.as_slice() else { anyhow::bail!("unexpected answer {results:?}") };
    if args.client.json {
        let entries: Vec<Json> = entries.iter().map(|(k, v)| json!({ "key": text(k), "value": text(v) })).collect();
        print_json(&json!({ "prefix": args.prefix, "entries": entries, "ts": ts }));
    } else {
        print_entries(entries, "");
    }
    Ok(ExitCode::SUCCESS)
}

/// `luigi txn`: the operations run in the order given on the command line, so a --get after a
/// --put of the same key reads the new value. `matches` are the sub-command's own.
pub fn txn(args: TxnArgs, matches: &ArgMatches) -> anyhow::Result<ExitCode> {
    let mut ordered: Vec<(usize, KvOp)> = Vec::new();
    let mut add = |id: &str, values: &[String], op: &dyn Fn(&str) -> anyhow::Result<KvOp>| -> anyhow::Result<()> {
        let indices = matches.indices_of(id).map(Iterator::collect::<Vec<_>>).unwrap_or_default();
        for (i, v) in indices.into_iter().zip(values) {
            ordered.push((i, op(v)?));
        }
        Ok(())
    };
    add("gets", &args.gets, &|k| Ok(KvOp::Get { key: k.as_bytes().to_vec() }))?;
    add("puts", &args.puts, &|kv| {
        let (k, v) = kv.split_once('=').with_context(|| format!("--put {kv}: expected KEY=VALUE"))?;
        Ok(KvOp::Put { key: k.as_bytes().to_vec(), value: v.as_bytes().to_vec() })
    })?;
    add("deletes", &args.deletes, &|k| Ok(KvOp::Delete { key: k.as_bytes().to_vec() }))?;
    add("scans", &args.scans, &|p| Ok(KvOp::Scan { prefix: p.as_bytes().to_vec(), limit: args.limit }))?;
    ordered.sort_by_key(|(i, _)| *i);
    let ops: Vec<KvOp> = ordered.into_iter().map(|(_, op)| op).collect();
    anyhow::ensure!(!ops.is_empty(), "nothing to do: give at least one --get, --put, --delete or --scan");
    let (ts, results) = run(&args.client, &ops)?;
    if args.client.json {
        let results: Vec<Json> = ops.iter().zip(&results).map(|(op, r)| result_json(op, r)).collect();
        print_json(&json!({ "ok": true, "ts": ts, "results": results }));
    } else {
        for (op, r) in ops.iter().zip(&results) {
            print_result(op, r);
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Connects, runs `ops` as one transaction and waits for the answer.
fn run(args: &ClientArgs, ops: &[KvOp]) -> anyhow::Result<(Timestamp, Vec<KvResult>)> {
    anyhow::ensure!(args.timeout > 0.0 && args.timeout.is_finite(), "--timeout must be a positive number of seconds");
    let config = ClusterConfig::load(&args.cluster)?;
    luigi_runtime::clock::set_offset_us(args.clock_offset_us);
    let partitioner = HashPartitioner::new(config.shard_count());
    let pieces = kv_pieces(&partitioner, ops, config.read_only_path()).map_err(anyhow::Error::msg)?;
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().context("cannot start the runtime")?;
    rt.block_on(async {
        // A client id of its own: ids are unique per cluster, and this client's transaction
        // ids (id, 1), (id, 2), ... must never be taken for an earlier invocation's.
        let id = luigi_runtime::clock::now_us().wrapping_shl(12) ^ u64::from(std::process::id());
        let client = Client::connect_with(&config, id, Arc::new(partitioner)).await?;
        let timeout = Duration::from_secs_f64(args.timeout);
        let done = tokio::time::timeout(timeout, client.execute_pieces(Kv::NAME, kv_args(ops), pieces))
            .await
            .map_err(|_| OutcomeUnknown(format!("no answer within {} s", args.timeout)))?
            .map_err(|e| OutcomeUnknown(e.to_string()))?;
        match done.outcome {
            TxnOutcome::Ordered { ts, results } => {
                let mut outputs = Vec::new();
                for (shard, r) in results {
                    match r {
                        Ok(bytes) => outputs.push((shard, bytes)),
                        Err(e) => anyhow::bail!("transaction failed on shard {shard} (its writes there undone): {e}"),
                    }
                }
                Ok((ts, kv_merge(ops, &outputs).map_err(anyhow::Error::msg)?))
            }
            TxnOutcome::Rejected(why) => anyhow::bail!("transaction rejected (not executed): {why}"),
            TxnOutcome::Unknown(why) => Err(OutcomeUnknown(why).into()),
        }
    })
}

/// Bytes as text for JSON and messages.
fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn print_json(v: &Json) {
    println!("{v}");
}

fn print_bytes_line(bytes: &[u8]) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(bytes).and_then(|()| out.write_all(b"\n"));
}

/// `key<TAB>value` per line.
fn print_entries(entries: &[(Vec<u8>, Vec<u8>)], indent: &str) {
    let mut out = std::io::stdout().lock();
    for (k, v) in entries {
        let _ = write!(out, "{indent}")
            .and_then(|()| out.write_all(k))
            .and_then(|()| out.write_all(b"\t"))
            .and_then(|()| out.write_all(v))
            .and_then(|()| out.write_all(b"\n"));
    }
}

/// The key of a point operation, the prefix of a scan.
fn subject(op: &KvOp) -> String {
    match op {
        KvOp::Get { key } | KvOp::Put { key, .. } | KvOp::Delete { key } => text(key),
        KvOp::Scan { prefix, .. } => text(prefix),
    }
}

/// One line per operation (`kv_merge` checked that each result is of its operation's kind).
fn print_result(op: &KvOp, r: &KvResult) {
    let subject = subject(op);
    match r {
        KvResult::Value(Some(v)) => println!("get {subject}: {}", text(v)),
        KvResult::Value(None) => println!("get {subject}: (not found)"),
        KvResult::Written => println!("put {subject}: OK"),
        KvResult::Deleted(true) => println!("delete {subject}: OK"),
        KvResult::Deleted(false) => println!("delete {subject}: (not found)"),
        KvResult::Entries(entries) => {
            println!("scan {subject}: {} entries", entries.len());
            print_entries(entries, "  ");
        }
    }
}

fn result_json(op: &KvOp, r: &KvResult) -> Json {
    let subject = subject(op);
    match r {
        KvResult::Value(v) => {
            json!({ "op": "get", "key": subject, "found": v.is_some(), "value": v.as_deref().map(text) })
        }
        KvResult::Written => json!({ "op": "put", "key": subject, "ok": true }),
        KvResult::Deleted(existed) => json!({ "op": "delete", "key": subject, "found": existed }),
        KvResult::Entries(entries) => {
            let entries: Vec<Json> = entries.iter().map(|(k, v)| json!({ "key": text(k), "value": text(v) })).collect();
            json!({ "op": "scan", "prefix": subject, "entries": entries })
        }
    }
}
