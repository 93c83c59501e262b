//! The client library: a [`Coordinator`] driven by one tokio task, with one connection per
//! shard leader. `execute` submits a transaction and resolves with its answer; retries happen
//! inside, under the same transaction id, so a transaction is never executed twice.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use luigi_proto::coordinator::{CommitRule, Completion, CoordOutput, Coordinator, CoordinatorConfig};
use luigi_proto::msg::{ClientMsg, WireMsg};
use luigi_proto::partition::{split, HashPartitioner, Partitioner};
use luigi_proto::types::{ClientId, ShardId, ShardPiece, TxnId};
use luigi_store::Key;
use tokio::sync::{mpsc, oneshot};
use tracing::{debug, warn};

use crate::clock;
use crate::config::{ClusterConfig, NodeId, CLIENT_NODE};
use crate::net::peer::{connect, NetConfig, PeerWriter};
use crate::net::wan::{DelayLine, DelayLink};

/// Capacity of the request queue into the driver task.
const REQUEST_QUEUE: usize = 1 << 14;
/// Capacity of the channel carrying every leader's messages into the driver task.
const INBOUND_QUEUE: usize = 1 << 16;
/// Attempts to connect to a leader before giving up.
const CONNECT_ATTEMPTS_MAX: u32 = 50;
/// Pings sent to each leader at start to seed the one-way-delay estimate.
const WARMUP_PINGS: usize = 8;
/// How often the coordinator checks for dispatches to retry.
const RETRY_TICK: Duration = Duration::from_millis(10);

/// Why `execute` failed (the transaction's own outcome is in the [`Completion`]).
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The client's driver task has stopped.
    #[error("client is shut down")]
    Closed,
}

struct Request {
    procedure: String,
    args: Vec<u8>,
    pieces: Vec<ShardPiece>,
    done: oneshot::Sender<Completion>,
}

/// A connection to a Luigi cluster. Cheap to clone; clones share the coordinator.
#[derive(Clone)]
pub struct Client {
    requests: mpsc::Sender<Request>,
    partitioner: Arc<dyn Partitioner>,
    id: ClientId,
}

impl Client {
    /// Connects to every shard leader of `config` as client `id` (unique in the cluster),
    /// hash-partitioning keys.
    pub async fn connect(config: &ClusterConfig, id: ClientId) -> anyhow::Result<Self> {
        Self::connect_with(config, id, Arc::new(HashPartitioner::new(config.shard_count()))).await
    }

    /// Like [`Client::connect`] with a workload-specific partitioner (e.g. by warehouse).
    pub async fn connect_with(
        config: &ClusterConfig,
        id: ClientId,
        partitioner: Arc<dyn Partitioner>,
    ) -> anyhow::Result<Self> {
        anyhow::ensure!(
            partitioner.shards() == config.shard_count(),
            "partitioner covers {} shards but the cluster has {}",
            partitioner.shards(),
            config.shard_count()
        );
        let model = config.delay_model();
        let delay_line = if model.is_zero() { None } else { Some(Arc::new(DelayLine::new()?)) };
        let (in_tx, in_rx) = mpsc::channel(INBOUND_QUEUE);
        let mut writers = HashMap::new();
        for shard in 0..config.shard_count() {
            let node = NodeId { shard, replica: 0 };
            let link = delay_line.as_ref().map(|l| {
                l.link(model.dist(CLIENT_NODE, &node.name()), config.seed ^ id.rotate_left(17) ^ u64::from(shard))
            });
            let writer = connect_leader(config, shard, link, &in_tx).await?;
            writer.send(&WireMsg::Client(ClientMsg::Hello { client: id }))?;
            writers.insert(shard, writer);
        }
        let mut coord_config = CoordinatorConfig::new(id);
        coord_config.headroom_us = config.headroom_us();
        coord_config.retry_timeout_us = config.retry_timeout_us();
        coord_config.initial_owd_us = config.scenario().delay().mean_us;
        coord_config.commit_rule = CommitRule::AllShards { shards: config.shard_count() };
        let (req_tx, req_rx) = mpsc::channel(REQUEST_QUEUE);
        let driver = Driver {
            coordinator: Coordinator::new(coord_config),
            writers,
            waiting: HashMap::new(),
            out: Vec::new(),
            _delay_line: delay_line,
        };
        tokio::spawn(driver.run(req_rx, in_rx));
        Ok(Self { requests: req_tx, partitioner, id })
    }

    /// This client's id.
    pub fn id(&self) -> ClientId {
        self.id
    }

    /// The partitioner used to split keys into shard pieces.
    pub fn partitioner(&self) -> &dyn Partitioner {
        &*self.partitioner
    }

    /// Runs `procedure(args)` reading `reads` and writing `writes` (split across shards by the
    /// partitioner) and waits for its answer.
    pub async fn execute(
        &self,
        procedure: &str,
        args: Vec<u8>,
        reads: Vec<Key>,
        writes: Vec<Key>,
    ) -> Result<Completion, ClientError> {
        let pieces = split(&*self.partitioner, reads, writes);
        self.execute_pieces(procedure, args, pieces).await
    }

    /// Like [`Client::execute`] with explicit per-shard pieces.
    pub async fn execute_pieces(
        &self,
        procedure: &str,
        args: Vec<u8>,
        pieces: Vec<ShardPiece>,
    ) -> Result<Completion, ClientError> {
        let (done, rx) = oneshot::channel();
        let req = Request { procedure: procedure.to_string(), args, pieces, done };
        self.requests.send(req).await.map_err(|_| ClientError::Closed)?;
        rx.await.map_err(|_| ClientError::Closed)
    }
}

async fn connect_leader(
    config: &ClusterConfig,
    shard: ShardId,
    link: Option<DelayLink>,
    in_tx: &mpsc::Sender<(ShardId, WireMsg)>,
) -> anyhow::Result<PeerWriter<WireMsg>> {
    let addr = config.leader_addr(shard);
    let mut attempt = 0;
    let (writer, reader) = loop {
        attempt += 1;
        match connect::<WireMsg, WireMsg>(addr, &NetConfig::default(), link.clone()).await {
            Ok(pair) => break pair,
            Err(e) if attempt < CONNECT_ATTEMPTS_MAX => {
                debug!(shard, %addr, error = %e, attempt, "leader not reachable yet");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => {
                return Err(e).with_context(|| format!("cannot reach the leader of shard {shard} at {addr}"));
            }
        }
    };
    let tx = in_tx.clone();
    tokio::spawn(async move {
        let end = reader.forward(&tx, move |msg| (shard, msg)).await;
        warn!(shard, ?end, "connection to leader ended");
    });
    Ok(writer)
}

struct Driver {
    coordinator: Coordinator,
    writers: HashMap<ShardId, PeerWriter<WireMsg>>,
    waiting: HashMap<TxnId, oneshot::Sender<Completion>>,
    out: Vec<CoordOutput>,
    _delay_line: Option<Arc<DelayLine>>,
}

impl Driver {
    async fn run(mut self, mut requests: mpsc::Receiver<Request>, mut inbound: mpsc::Receiver<(ShardId, WireMsg)>) {
        let now = clock::now_us();
        for shard in self.writers.keys().copied().collect::<Vec<_>>() {
            for _ in 0..WARMUP_PINGS {
                self.coordinator.ping(now, shard, &mut self.out);
            }
        }
        self.flush();
        let mut accepting = true;
        // Retries are on the scale of the retry timeout; a coarse tick is plenty and keeps
        // the per-event path free of timer bookkeeping.
        let mut retry_tick = tokio::time::interval(RETRY_TICK);
        retry_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        loop {
            tokio::select! {
                req = requests.recv(), if accepting => match req {
                    Some(req) => {
                        self.submit(req);
                        while let Ok(req) = requests.try_recv() {
                            self.submit(req);
                        }
                    }
                    None => accepting = false, // every handle dropped
                },
                msg = inbound.recv() => match msg {
                    Some((shard, msg)) => {
                        self.on_msg(shard, msg);
                        while let Ok((shard, msg)) = inbound.try_recv() {
                            self.on_msg(shard, msg);
                        }
                    }
                    None => return,
                },
                _ = retry_tick.tick() => self.coordinator.tick(clock::now_us(), &mut self.out),
            }
            self.flush();
            if !accepting && self.waiting.is_empty() {
                return; // nothing left to answer
            }
        }
    }

    fn submit(&mut self, req: Request) {
        let id = self.coordinator.submit(clock::now_us(), &req.procedure, req.args, req.pieces, &mut self.out);
        self.waiting.insert(id, req.done);
    }

    fn on_msg(&mut self, shard: ShardId, msg: WireMsg) {
        match msg {
            WireMsg::Server(msg) => self.coordinator.on_message(clock::now_us(), msg, &mut self.out),
            WireMsg::Client(_) | WireMsg::Peer(_) | WireMsg::Raft { .. } => {
                warn!(shard, "leader sent a message meant for a server; ignored")
            }
        }
    }

    fn flush(&mut self) {
        for o in self.out.drain(..) {
            match o {
                CoordOutput::Send { shard, msg } => match self.writers.get(&shard) {
                    // A failed send is retried by the coordinator's timeout under the same id.
                    Some(w) => {
                        if let Err(e) = w.send(&WireMsg::Client(msg)) {
                            debug!(shard, error = %e, "send to leader failed; will retry");
                        }
                    }
                    None => warn!(shard, "no connection to shard"),
                },
                CoordOutput::Done(c) => {
                    if let Some(done) = self.waiting.remove(&c.id) {
                        let _ = done.send(c);
                    }
                }
            }
        }
    }
}
