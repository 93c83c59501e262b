//! A replica's data directory at startup: which cluster shape it belongs to, and rebuilding it
//! from its peers.
//!
//! `<data dir>/<node>/` (e.g. `luigi-data/s0r1/`) holds the replica's Raft state (see
//! `luigi_raft::disk`) and [`META_FILE`], written when the directory is created:
//!
//! ```toml
//! # Written by luigi when this data directory was created; checked at every start.
//! format = 1
//! node = "s0r1"
//! shards = 2
//! replicas = 3
//! members = "5f0c63a1d2e4b7a9"
//! ```
//!
//! At every start the shard count, this shard's replica count and the node name must match
//! the cluster file: with another shard count, keys hash to other shards and a shard would
//! serve (or miss) keys its data does not hold; with another replica count, the Raft group's
//! voters differ. A mismatch is refused. `members` identifies the member addresses of the
//! whole cluster (a hash): a change only draws a warning, since moving a replica to another
//! address is legitimate.
//!
//! A directory written before this file existed (a Raft state but no [`META_FILE`]) is adopted
//! with a warning: the current shape is recorded and checked from then on. Refusing it would
//! stop every replica of an existing cluster at its first start after an upgrade, and such a
//! directory was almost certainly written by the same cluster file; the warning names the shape
//! adopted so an operator who did change the shape can stop and check.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use serde::{Deserialize, Serialize};
use tracing::{info, warn};

use crate::config::{ClusterConfig, NodeId};

/// File name of the cluster-shape record in a node's directory.
pub const META_FILE: &str = "luigi-node.toml";
const FORMAT: u32 = 1;

/// The cluster shape a node's data directory was created for.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeMeta {
    /// Format of this record (1).
    pub format: u32,
    /// The node's name, `s<shard>r<replica>`.
    pub node: String,
    /// Shards in the cluster.
    pub shards: u32,
    /// Replicas of this node's shard.
    pub replicas: u32,
    /// Hash of every member address, in shard and replica order (16 hex digits).
    pub members: String,
}

impl NodeMeta {
    /// The shape `config` gives `node`.
    pub fn of(config: &ClusterConfig, node: NodeId) -> Self {
        // FNV-1a 64: stable across builds, platforms and processes, unlike std's hasher.
        let mut members = String::new();
        for (s, shard) in config.shards.iter().enumerate() {
            for addr in &shard.replicas {
                members.push_str(&format!("{s}/{addr};"));
            }
        }
        let h = luigi_txn::keyhash::fnv1a(members.as_bytes());
        NodeMeta {
            format: FORMAT,
            node: node.name(),
            shards: config.shard_count(),
            replicas: config.shards.get(node.shard as usize).map_or(0, |s| s.replicas.len() as u32),
            members: format!("{h:016x}"),
        }
    }

    fn describe(&self) -> String {
        format!("{} shard(s), {} replica(s) in this shard, node {}", self.shards, self.replicas, self.node)
    }
}

/// Whether `dir` holds Raft state (a hard state, log segments, snapshots or markers).
fn has_raft_state(dir: &Path) -> anyhow::Result<bool> {
    let entries = match fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(e).with_context(|| format!("cannot list {}", dir.display())),
    };
    for entry in entries {
        let name = entry.with_context(|| format!("cannot list {}", dir.display()))?.file_name();
        let name = name.to_string_lossy();
        if name.starts_with("raft-") || name.ends_with(".wal") || name.starts_with("snapshot-") {
            return Ok(true);
        }
    }
    Ok(false)
}

fn write_meta(dir: &Path, meta: &NodeMeta) -> anyhow::Result<()> {
    let path = dir.join(META_FILE);
    let tmp = dir.join(format!("{META_FILE}.tmp"));
    let text = format!(
        "# Written by luigi when this data directory was created; checked at every start.\n{}",
        toml::to_string(meta).expect("a node record always serializes")
    );
    let write = || -> std::io::Result<()> {
        let mut f = fs::File::create(&tmp)?;
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
        fs::rename(&tmp, &path)?;
        fs::File::open(dir)?.sync_all()
    };
    write().with_context(|| format!("cannot write {}", path.display()))
}

/// Prepares `node`'s directory under `data_dir` and returns it: with `rejoin`, moves its old
/// state aside and sets it up to be rebuilt from its peers (`luigi_raft::disk::prepare_rejoin`);
/// then checks (or records) the cluster shape it belongs to. Errors are one line naming the
/// directory.
///
/// # Errors
/// A shape mismatch, `rejoin` on a shard of one replica, I/O errors.
pub fn prepare(config: &ClusterConfig, node: NodeId, data_dir: &Path, rejoin: bool) -> anyhow::Result<PathBuf> {
    let dir = data_dir.join(node.name());
    let want = NodeMeta::of(config, node);
    let name = node.name();
    if rejoin {
        prepare_rejoin(node, &dir, &want)?;
        return Ok(dir);
    }
    let path = dir.join(META_FILE);
    match fs::read_to_string(&path) {
        Ok(text) => check_shape(&name, &dir, &path, &text, &want)?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if has_raft_state(&dir)? {
                warn!(
                    node = %name,
                    "data directory {} has no {META_FILE} (written before this version): adopting the cluster file's \
                     shape ({}); if the shape changed since the data was written, stop this node now",
                    dir.display(),
                    want.describe()
                );
            } else {
                fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
                info!(node = %name, "new data directory {} for {}", dir.display(), want.describe());
            }
            write_meta(&dir, &want)?;
        }
        Err(e) => return Err(e).with_context(|| format!("node {name}: cannot read {}", path.display())),
    }
    Ok(dir)
}

/// `--rejoin`: moves `node`'s old state in `dir` aside and sets it up to be rebuilt from its
/// peers, recording the shape `want`.
fn prepare_rejoin(node: NodeId, dir: &Path, want: &NodeMeta) -> anyhow::Result<()> {
    let name = node.name();
    if want.replicas < 2 {
        bail!(
            "node {name}: --rejoin rebuilds a replica from the other replicas of its shard, and shard {} has \
             no other replica",
            node.shard
        );
    }
    let moved = luigi_raft::disk::prepare_rejoin(dir)
        .with_context(|| format!("node {name}: cannot prepare {} for a rebuild", dir.display()))?;
    match moved {
        Some(old) => warn!(
            node = %name,
            "rebuilding this replica from its peers: its old data directory was moved to {}",
            old.display()
        ),
        None => warn!(node = %name, "rebuilding this replica from its peers into {}", dir.display()),
    }
    write_meta(dir, want)
}

/// Checks the shape recorded in `dir`'s meta file (`text`, read from `path`) against the
/// cluster file's `want`: another format or shape is refused; changed member addresses are
/// recorded.
fn check_shape(name: &str, dir: &Path, path: &Path, text: &str, want: &NodeMeta) -> anyhow::Result<()> {
    let found: NodeMeta = toml::from_str(text)
        .map_err(|e| anyhow::anyhow!("{}", e.to_string().trim_end().replace('\n', " ")))
        .with_context(|| format!("node {name}: unreadable {}", path.display()))?;
    if found.format != FORMAT {
        bail!("node {name}: {} has format {}, this build reads {FORMAT}", path.display(), found.format);
    }
    if (found.shards, found.replicas, &found.node) != (want.shards, want.replicas, &want.node) {
        bail!(
            "node {name}: data directory {} was created for a cluster of {}, but the cluster file gives {}; \
             refusing to start (keys or Raft voters would not match its data): use the data directory of \
             this cluster, or move this one away",
            dir.display(),
            found.describe(),
            want.describe()
        );
    }
    if found.members != want.members {
        warn!(
            node = %name,
            "the cluster's member addresses changed since {} was created (members {} then, {} now); \
             starting, as the shape is the same",
            dir.display(),
            found.members,
            want.members
        );
        write_meta(dir, want)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(shards: usize, replicas: usize, base: u16) -> ClusterConfig {
        let mut text = String::new();
        let mut port = base;
        for _ in 0..shards {
            let addrs: Vec<String> = (0..replicas)
                .map(|_| {
                    port += 1;
                    format!("\"127.0.0.1:{port}\"")
                })
                .collect();
            text.push_str(&format!("[[shards]]\nreplicas = [{}]\n", addrs.join(", ")));
        }
        ClusterConfig::parse(&text, Path::new("c.toml")).unwrap()
    }

    #[test]
    fn the_shape_is_recorded_then_checked() {
        let tmp = tempfile::tempdir().unwrap();
        let node = NodeId { shard: 0, replica: 1 };
        let dir = prepare(&config(1, 3, 7000), node, tmp.path(), false).unwrap();
        assert_eq!(dir, tmp.path().join("s0r1"));
        let meta: NodeMeta = toml::from_str(&fs::read_to_string(dir.join(META_FILE)).unwrap()).unwrap();
        assert_eq!((meta.shards, meta.replicas, meta.node.as_str()), (1, 3, "s0r1"));
        // Same shape: fine, also with other addresses.
        prepare(&config(1, 3, 7000), node, tmp.path(), false).unwrap();
        prepare(&config(1, 3, 8000), node, tmp.path(), false).unwrap();
        // Another shard count or replica count: refused, one line naming the directory.
        for other in [config(2, 3, 7000), config(1, 5, 7000)] {
            let e = format!("{:#}", prepare(&other, node, tmp.path(), false).unwrap_err());
            assert!(e.contains(&dir.display().to_string()) && e.contains("refusing to start"), "{e}");
            assert!(!e.contains('\n'), "{e}");
        }
    }

    #[test]
    fn a_directory_from_before_the_record_is_adopted() {
        let tmp = tempfile::tempdir().unwrap();
        let node = NodeId { shard: 1, replica: 0 };
        let dir = tmp.path().join("s1r0");
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join("raft-hardstate"), b"x").unwrap();
        prepare(&config(2, 3, 7000), node, tmp.path(), false).unwrap();
        assert!(dir.join(META_FILE).exists());
        assert!(prepare(&config(3, 3, 7000), node, tmp.path(), false).is_err());
    }

    #[test]
    fn rejoin_moves_the_old_directory_aside() {
        let tmp = tempfile::tempdir().unwrap();
        let node = NodeId { shard: 0, replica: 2 };
        let dir = prepare(&config(1, 3, 7000), node, tmp.path(), false).unwrap();
        fs::write(dir.join("raft-hardstate"), b"old").unwrap();
        prepare(&config(1, 3, 7000), node, tmp.path(), true).unwrap();
        assert!(dir.join(luigi_raft::disk::REJOIN_FILE).exists() && dir.join(META_FILE).exists());
        assert!(!dir.join("raft-hardstate").exists());
        let aside: Vec<_> = fs::read_dir(tmp.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("s0r2.discarded-"))
            .collect();
        assert_eq!(aside.len(), 1, "{aside:?}");
        assert_eq!(fs::read(tmp.path().join(&aside[0]).join("raft-hardstate")).unwrap(), b"old");
        // A shard of one has nobody to rebuild from.
        let e = prepare(&config(1, 1, 7000), NodeId { shard: 0, replica: 0 }, tmp.path(), true).unwrap_err();
        assert!(e.to_string().contains("no other replica"), "{e}");
    }
}
