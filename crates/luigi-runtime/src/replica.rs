//! The shell around a shard's Raft log: ticks it on the clock, persists what it asks for (our
//! WAL, or nothing with `--durability none`), sends its messages to the other replicas, and
//! advances it. The order follows raft-rs: leader appends may go out before the local write,
//! votes and acknowledgements only after it.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::Context;
use luigi_proto::msg::WireMsg;
use luigi_proto::types::ShardId;
use luigi_raft::disk::DiskStorage;
use luigi_raft::{OutMessage, RaftConfig, RaftError, RaftLog, RecoveredState, SnapshotData};
use luigi_wal::WalOptions;
use tracing::debug;

use crate::config::{ClusterConfig, NodeId};
use crate::net::peer::PeerWriter;
use crate::server::StorageOptions;

/// What an operator does about a replica whose Raft state is lost or damaged.
const REBUILD_HINT: &str =
    "rebuild it from its peers: restart it with `luigi server --rejoin` (README: Rebuilding a replica)";

/// [`REBUILD_HINT`], or what is left when the shard has no other replica.
fn rebuild_hint(replicas: u32) -> &'static str {
    if replicas > 1 {
        REBUILD_HINT
    } else {
        "its shard has no other replica to rebuild it from: restore the directory from a backup, or move it away \
         to start the shard empty"
    }
}

/// Raft id of a replica: its index in the shard's replica list, from 1.
pub fn raft_id(node: NodeId) -> u64 {
    u64::from(node.replica) + 1
}

/// Drives one replica's [`RaftLog`].
pub struct RaftShell {
    shard: ShardId,
    /// The node's name and data directory, for messages.
    name: String,
    dir: PathBuf,
    my_id: u64,
    peers: BTreeMap<u64, PeerWriter<WireMsg>>,
    disk: DiskStorage,
    tick_us: u64,
    next_tick_us: u64,
    /// Replicas in the group (this one included).
    replicas: u32,
    campaigned: bool,
}

impl RaftShell {
    /// Opens the replica's storage (a WAL in its directory under `storage.data_dir`, checked
    /// against the cluster shape, see [`crate::datadir`]; moved aside first with
    /// `storage.rejoin`) and builds its Raft log; `tick_us` is the Raft tick. Lost or damaged
    /// Raft state is refused with one line naming it and the way out.
    pub fn open(
        node: NodeId,
        cluster: &ClusterConfig,
        tick_us: u64,
        storage: &StorageOptions,
    ) -> anyhow::Result<(RaftShell, RaftLog)> {
        let replicas = cluster.shards[node.shard as usize].replicas.len() as u32;
        let voters: Vec<u64> = (1..=u64::from(replicas)).collect();
        let config = RaftConfig::new(raft_id(node), voters, cluster.seed ^ u64::from(node.shard).rotate_left(40));
        let options = WalOptions { durability: storage.durability, ..WalOptions::default() };
        let dir = crate::datadir::prepare(cluster, node, &storage.data_dir, storage.rejoin)?;
        let name = node.name();
        let (disk, recovered): (DiskStorage, RecoveredState) = match DiskStorage::open(&dir, options) {
            Ok(x) => x,
            Err(e) if e.needs_rebuild() => {
                anyhow::bail!("node {name}: cannot restart from {}: {e}; {}", dir.display(), rebuild_hint(replicas))
            }
            Err(e) => return Err(e).with_context(|| format!("node {name}: cannot open its log in {}", dir.display())),
        };
        let rejoining = recovered.rejoining;
        if rejoining {
            tracing::warn!(
                node = %name,
                "rejoining: catching up from the shard's leader; this replica neither votes nor campaigns until it has"
            );
        }
        // A restarted replica rebuilds its state by replaying the committed log (the log
        // hands every committed entry back: `applied` is 0) and never starts an election of
        // its own: the group has a leader, or elects one by timeout. A group of one has no
        // other member that could lead it, so its replica starts one at once, as on a fresh
        // start.
        let restarted = recovered.hard_state.term > 0 || !recovered.entries.is_empty() || recovered.snapshot.is_some();
        if restarted {
            tracing::info!(
                node = %node.name(),
                snapshot = recovered.snapshot.as_ref().map_or(0, |s| s.index),
                entries = recovered.entries.len(),
                term = recovered.hard_state.term,
                commit = recovered.hard_state.commit,
                "restarting from the log in {}",
                dir.display()
            );
        }
        let log = match RaftLog::new(config, Some(recovered)) {
            Ok(log) => log,
            Err(e @ RaftError::Recovered(_)) => {
                anyhow::bail!("node {name}: cannot restart from {}: {e}; {}", dir.display(), rebuild_hint(replicas))
            }
            Err(e) => return Err(e).with_context(|| format!("node {name}: raft")),
        };
        let shell = RaftShell {
            shard: node.shard,
            name,
            dir,
            my_id: raft_id(node),
            peers: BTreeMap::new(),
            disk,
            tick_us,
            next_tick_us: 0,
            replicas,
            // A rejoining replica never starts an election (its log does not campaign anyway).
            campaigned: (restarted && replicas > 1) || rejoining,
        };
        Ok((shell, log))
    }

    /// A connection to replica `id` is up (or replaced).
    pub fn peer_up(&mut self, id: u64, writer: PeerWriter<WireMsg>) {
        self.peers.insert(id, writer);
    }

    /// On a fresh cluster the first replica starts the first election as soon as it can reach
    /// every other replica (a campaign before that would be lost, and another replica would
    /// win), so that benchmarks start from a known layout. Later elections are Raft's own.
    /// The replica of a group of one reaches everyone at once: it elects itself on its first
    /// turn, fresh or restarted (no waiting for an election timeout).
    pub fn campaign_when_connected(&mut self, log: &mut RaftLog) -> anyhow::Result<()> {
        let all_up = self.peers.len() + 1 == self.replicas as usize;
        if self.my_id == 1 && !self.campaigned && all_up && !log.is_leader() {
            self.campaigned = true;
            log.campaign().context("starting the first election")?;
        }
        Ok(())
    }

    /// The connection to replica `id` is gone; Raft retransmits what was lost.
    pub fn peer_down(&mut self, id: u64) {
        self.peers.remove(&id);
    }

    /// Ticks the log for every tick period elapsed by `now_us`.
    pub fn tick(&mut self, now_us: u64, log: &mut RaftLog) {
        if self.next_tick_us == 0 {
            self.next_tick_us = now_us + self.tick_us;
        }
        // Bounded catch-up: after a long stall, a few ticks are enough for Raft.
        let mut ticks = 0;
        while now_us >= self.next_tick_us && ticks < 16 {
            tracing::trace!(id = self.my_id, "raft tick");
            log.tick();
            self.next_tick_us += self.tick_us;
            ticks += 1;
        }
        if now_us >= self.next_tick_us {
            self.next_tick_us = now_us + self.tick_us;
        }
    }

    /// When the next tick is due.
    pub fn next_tick_us(&self) -> u64 {
        self.next_tick_us
    }

    /// Handles everything the log has ready: send, persist, send what needed persistence,
    /// advance; repeated while the log has more. Returns the data of a snapshot the log
    /// installed from the leader, which the state machine must load before applying more.
    pub fn drive(&mut self, log: &mut RaftLog) -> anyhow::Result<Option<Vec<u8>>> {
        let mut installed = None;
        loop {
            let rd = match log.ready() {
                Ok(Some(rd)) => rd,
                Ok(None) => break,
                Err(e @ RaftError::LostEntries { .. }) => return Err(self.lost_entries(&e)),
                Err(e) => return Err(e).context("raft ready"),
            };
            if let Some(change) = &rd.role_change {
                tracing::info!(shard = self.shard, id = self.my_id, ?change, term = log.term(), "raft role change");
            }
            if let Some(snap) = &rd.snapshot {
                tracing::info!(
                    shard = self.shard,
                    id = self.my_id,
                    index = snap.index,
                    "installing the leader's snapshot"
                );
                installed = Some(snap.data.clone());
            }
            self.send(rd.messages.iter());
            self.disk.persist(&rd).context("persisting the raft log")?;
            if rd.rejoined {
                tracing::info!(
                    node = %self.name,
                    term = log.term(),
                    commit = log.commit_index(),
                    "rejoined: caught up with the leader; votes again from the next term on"
                );
            }
            self.send(rd.persisted_messages.iter());
            log.advance(rd.number);
        }
        Ok(installed)
    }

    /// The log found that this replica lost entries it had acknowledged: marks the directory
    /// damaged (so that a restart refuses it at once instead of running into this again) and
    /// returns the one-line error the server stops with.
    fn lost_entries(&mut self, e: &RaftError) -> anyhow::Error {
        // In node names (raft ids are replica indexes + 1).
        let what = match *e {
            RaftError::LostEntries { leader, term, commit, last_index } => format!(
                "this replica lost acknowledged log entries: its leader s{}r{} (term {term}) counts entries up to \
                 index {commit} as held here, but its log ends at index {last_index}",
                self.shard,
                leader.saturating_sub(1)
            ),
            _ => e.to_string(),
        };
        let marked = match self.disk.mark_damaged(&what) {
            Ok(()) => format!("marked its data directory {} damaged", self.dir.display()),
            Err(m) => format!("could not mark its data directory {} damaged ({m})", self.dir.display()),
        };
        anyhow::anyhow!("node {}: {what}; {marked}; {REBUILD_HINT}", self.name)
    }

    /// Saves a snapshot of the state machine at `index` and compacts the log behind it
    /// (memory and WAL), returning it. Skipped (`None`) until the log can compact there
    /// ([`RaftLog::can_compact`]).
    pub fn compact(&mut self, log: &mut RaftLog, index: u64, data: Vec<u8>) -> anyhow::Result<Option<SnapshotData>> {
        if !log.can_compact(index) {
            return Ok(None);
        }
        let snap = log.compact(index, data).context("compacting the raft log")?;
        self.disk.save_snapshot(&snap).context("saving a snapshot")?;
        tracing::debug!(shard = self.shard, id = self.my_id, index, bytes = snap.data.len(), "snapshot saved");
        Ok(Some(snap))
    }

    /// Offers a snapshot this follower just took to its leader (see
    /// [`WireMsg::SnapshotOffer`]). Best effort: a lost offer only delays the leader's
    /// compaction to the next one.
    pub fn offer_snapshot(&self, log: &RaftLog, index: u64, data: Vec<u8>) {
        let Some(leader) = log.leader_id().filter(|l| *l != self.my_id) else { return };
        let Some(w) = self.peers.get(&leader) else { return };
        let msg = WireMsg::SnapshotOffer { shard: self.shard, from: self.my_id, index, data };
        if let Err(e) = w.send(&msg) {
            debug!(to = leader, error = %e, "snapshot offer not sent");
        }
    }

    fn send<'a>(&self, msgs: impl Iterator<Item = &'a OutMessage>) {
        for m in msgs {
            match self.peers.get(&m.to) {
                Some(w) => {
                    let msg = WireMsg::Raft { shard: self.shard, from: self.my_id, bytes: m.bytes.clone() };
                    if let Err(e) = w.send(&msg) {
                        debug!(to = m.to, error = %e, "raft message not sent; raft will retransmit");
                    }
                }
                None => debug!(to = m.to, "replica not connected; raft will retransmit"),
            }
        }
    }
}
