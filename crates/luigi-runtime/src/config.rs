//! The cluster file (TOML): shards, replicas with addresses, the network scenario or a per-link
//! delay matrix, and protocol knobs. Every error names the file, the field and the problem.
//!
//! ```toml
//! net = "same-region"          # none | same-region | same-continent | cross-continent | geo
//! seed = 7                     # seeds the per-message WAN delays
//!
//! [protocol]
//! headroom_us = 450            # default: per scenario (half the jitter + 200 µs)
//!
//! [[shards]]
//! replicas = ["127.0.0.1:7100"]
//!
//! [[links]]                    # optional overrides of the scenario, per direction
//! from = "client"              # "client" (every client) or a node name like "s0r0"
//! to = "s0r0"
//! mean_us = 30000
//! jitter_us = 5000
//! ```
//!
//! Node names are `s{shard}r{replica}`: `s0r0` is the first replica of shard 0.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use luigi_node::Tuning;
use luigi_proto::types::ShardId;
use serde::{Deserialize, Serialize};

use crate::net::wan::{DelayDist, DelayModel, Scenario};

/// Name standing for every client in link overrides.
pub const CLIENT_NODE: &str = "client";

/// A parsed and validated cluster file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterConfig {
    /// Network scenario applied to every hop (client-server and server-server).
    #[serde(default = "default_net")]
    pub net: String,
    /// Seed of the WAN delay draws.
    #[serde(default = "default_seed")]
    pub seed: u64,
    /// Protocol knobs.
    #[serde(default)]
    pub protocol: ProtocolConfig,
    /// The shards, in shard-id order.
    pub shards: Vec<ShardConfig>,
    /// Per-link overrides of the scenario's delay.
    #[serde(default)]
    pub links: Vec<LinkConfig>,
    /// The cluster secret: servers prove they hold it (HMAC-SHA256 over a per-connection
    /// challenge) before anything server-to-server (Raft, snapshots, agreement, leader
    /// announcements) is accepted from them. Without it the handshake uses an empty key:
    /// any process that speaks the protocol can act as a peer (a warning says so at start).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
    /// Optional client token: when set, a client proves it holds it the same way before its
    /// transactions are accepted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_token: Option<String>,
}

fn default_net() -> String {
    "none".into()
}

fn default_seed() -> u64 {
    1
}

/// Protocol knobs. Absent fields take defaults derived from the scenario.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProtocolConfig {
    /// Added by coordinators to the one-way-delay estimate.
    pub headroom_us: Option<u64>,
    /// How far ahead leaders log their watermark floor promise.
    pub floor_lookahead_us: Option<u64>,
    /// Coordinators resend a dispatch unanswered for this long.
    pub retry_timeout_us: Option<u64>,
    /// A follower snapshots its state and compacts its log every this many applied records.
    pub snapshot_entries: Option<u64>,
}

/// One shard.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShardConfig {
    /// Replica addresses; the first is the initial leader.
    pub replicas: Vec<String>,
}

/// A one-directional delay override.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinkConfig {
    /// Sender node name (or "client").
    pub from: String,
    /// Receiver node name (or "client").
    pub to: String,
    /// Mean one-way delay.
    pub mean_us: u64,
    /// Uniform jitter around the mean.
    #[serde(default)]
    pub jitter_us: u64,
}

/// A cluster file problem.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read cluster file {path}: {source}")]
    Read {
        /// File.
        path: PathBuf,
        /// Cause.
        source: std::io::Error,
    },
    /// The TOML is malformed or a field has the wrong type or name.
    #[error("cluster file {path}: {message}")]
    Parse {
        /// File.
        path: PathBuf,
        /// What the parser said (names the field and line).
        message: String,
    },
    /// A field has an invalid value.
    #[error("cluster file {path}: field `{field}`: {problem}")]
    Invalid {
        /// File.
        path: PathBuf,
        /// Field path, e.g. `shards[1].replicas[0]`.
        field: String,
        /// What is wrong.
        problem: String,
    },
}

pub use luigi_node::NodeId;

impl ClusterConfig {
    /// Reads and validates `path`.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read { path: path.into(), source })?;
        Self::parse(&text, path)
    }

    /// Parses and validates `text` (`path` is only used in messages).
    pub fn parse(text: &str, path: &Path) -> Result<Self, ConfigError> {
        let config: ClusterConfig = toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: path.into(),
            message: e.to_string().trim_end().replace('\n', " "),
        })?;
        config.validate(path)?;
        Ok(config)
    }

    /// Renders the config as TOML (what `load` reads back).
    pub fn to_toml(&self) -> String {
        toml::to_string_pretty(self).expect("a cluster config always serializes")
    }

    /// Checks every field.
    pub fn validate(&self, path: &Path) -> Result<(), ConfigError> {
        let invalid = |field: String, problem: String| ConfigError::Invalid { path: path.into(), field, problem };
        Scenario::from_str(&self.net).map_err(|e| invalid("net".into(), e.to_string()))?;
        if self.shards.is_empty() {
            return Err(invalid("shards".into(), "at least one [[shards]] entry is needed".into()));
        }
        let mut seen = HashSet::new();
        for (s, shard) in self.shards.iter().enumerate() {
            if shard.replicas.is_empty() {
                return Err(invalid(format!("shards[{s}].replicas"), "a shard needs at least one replica".into()));
            }
            if shard.replicas.len() > 7 {
                return Err(invalid(format!("shards[{s}].replicas"), "at most 7 replicas per shard".into()));
            }
            for (r, addr) in shard.replicas.iter().enumerate() {
                let field = format!("shards[{s}].replicas[{r}]");
                let parsed: SocketAddr = addr
                    .parse()
                    .map_err(|e| invalid(field.clone(), format!("'{addr}' is not an ip:port address ({e})")))?;
                if !seen.insert(parsed) {
                    return Err(invalid(field, format!("address {addr} is used twice")));
                }
            }
        }
        for (i, link) in self.links.iter().enumerate() {
            for (end, name) in [("from", &link.from), ("to", &link.to)] {
                if name != CLIENT_NODE && self.node_addr_by_name(name).is_none() {
                    return Err(invalid(
                        format!("links[{i}].{end}"),
                        format!(
                            "'{name}' is neither \"{CLIENT_NODE}\" nor a node of this cluster (s<shard>r<replica>)"
                        ),
                    ));
                }
            }
            if link.jitter_us > link.mean_us {
                return Err(invalid(format!("links[{i}].jitter_us"), "jitter larger than the mean delay".into()));
            }
        }
        for (field, value) in [("secret", &self.secret), ("client_token", &self.client_token)] {
            if value.as_ref().is_some_and(|v| v.len() < 16) {
                return Err(invalid(field.into(), "must be at least 16 characters (a random string)".into()));
            }
        }
        if self.protocol.retry_timeout_us == Some(0) {
            return Err(invalid("protocol.retry_timeout_us".into(), "must be positive".into()));
        }
        Ok(())
    }

    /// The network scenario.
    pub fn scenario(&self) -> Scenario {
        Scenario::from_str(&self.net).expect("validated")
    }

    /// Number of shards.
    pub fn shard_count(&self) -> u32 {
        self.shards.len() as u32
    }

    /// Address of `node`.
    pub fn node_addr(&self, node: NodeId) -> Option<SocketAddr> {
        let addr = self.shards.get(node.shard as usize)?.replicas.get(node.replica as usize)?;
        addr.parse().ok()
    }

    fn node_addr_by_name(&self, name: &str) -> Option<SocketAddr> {
        self.node_addr(name.parse().ok()?)
    }

    /// The initial leader of `shard`.
    pub fn leader_addr(&self, shard: ShardId) -> SocketAddr {
        self.node_addr(NodeId { shard, replica: 0 }).expect("validated: every shard has a replica")
    }

    /// Every hop's delay: the scenario plus link overrides.
    pub fn delay_model(&self) -> DelayModel {
        let mut model = DelayModel::from_scenario(self.scenario());
        for link in &self.links {
            model.set_link(link.from.clone(), link.to.clone(), DelayDist::new(link.mean_us, link.jitter_us));
        }
        model
    }

    /// Coordinator headroom: configured, or half the scenario's jitter plus 200 µs.
    pub fn headroom_us(&self) -> u64 {
        self.tuning().headroom_us
    }

    /// Coordinator retry timeout: configured, or 4 round trips plus one second.
    pub fn retry_timeout_us(&self) -> u64 {
        self.tuning().retry_timeout_us
    }

    /// Every timeout, derived from the scenario's one-way delay ([`Tuning::for_delay`]) with
    /// the file's `[protocol]` overrides applied.
    pub fn tuning(&self) -> Tuning {
        let d = self.scenario().delay();
        let mut t = Tuning::for_delay(d.mean_us, d.jitter_us);
        let p = &self.protocol;
        t.headroom_us = p.headroom_us.unwrap_or(t.headroom_us);
        t.retry_timeout_us = p.retry_timeout_us.unwrap_or(t.retry_timeout_us);
        t.floor_lookahead_us = p.floor_lookahead_us.unwrap_or(t.floor_lookahead_us);
        t.snapshot_entries = p.snapshot_entries.unwrap_or(t.snapshot_entries).max(1);
        t
    }

    /// A local cluster of `shards` single-replica shards on loopback ports from `ports`.
    pub fn local(shards: u32, net: Scenario, ports: &[u16]) -> Self {
        assert_eq!(ports.len(), shards as usize, "one port per node");
        ClusterConfig {
            net: net.to_string(),
            seed: 1,
            protocol: ProtocolConfig::default(),
            shards: ports.iter().map(|p| ShardConfig { replicas: vec![format!("127.0.0.1:{p}")] }).collect(),
            links: Vec::new(),
            secret: None,
            client_token: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<ClusterConfig, String> {
        ClusterConfig::parse(text, Path::new("c.toml")).map_err(|e| e.to_string())
    }

    const GOOD: &str = r#"
        net = "geo"
        [protocol]
        headroom_us = 900
        [[shards]]
        replicas = ["127.0.0.1:7100"]
        [[shards]]
        replicas = ["127.0.0.1:7101"]
        [[links]]
        from = "s0r0"
        to = "s1r0"
        mean_us = 1000
        jitter_us = 10
    "#;

    #[test]
    fn good_file_parses_and_round_trips() {
        let c = parse(GOOD).unwrap();
        assert_eq!(c.shard_count(), 2);
        assert_eq!(c.headroom_us(), 900);
        assert_eq!(c.delay_model().dist("s0r0", "s1r0"), DelayDist::new(1000, 10));
        assert_eq!(c.delay_model().dist("client", "s1r0"), Scenario::Geo.delay());
        assert_eq!(parse(&c.to_toml()).unwrap(), c);
    }

    #[test]
    fn errors_name_the_field() {
        let e = parse("net = \"moon\"\n[[shards]]\nreplicas = [\"127.0.0.1:1\"]").unwrap_err();
        assert!(e.contains("field `net`") && e.contains("moon"), "{e}");
        let e = parse("[[shards]]\nreplicas = [\"localhost\"]").unwrap_err();
        assert!(e.contains("shards[0].replicas[0]") && e.contains("not an ip:port"), "{e}");
        let e =
            parse("[[shards]]\nreplicas = [\"127.0.0.1:1\"]\n[[shards]]\nreplicas = [\"127.0.0.1:1\"]").unwrap_err();
        assert!(e.contains("shards[1].replicas[0]") && e.contains("used twice"), "{e}");
        let e = parse("shards = []").unwrap_err();
        assert!(e.contains("field `shards`"), "{e}");
        let e = parse("[[shards]]\nreplicas = [\"127.0.0.1:1\"]\nbogus = 1").unwrap_err();
        assert!(e.contains("bogus"), "{e}");
        let e =
            parse("[[shards]]\nreplicas = [\"127.0.0.1:1\"]\n[[links]]\nfrom = \"s9r0\"\nto = \"client\"\nmean_us = 1")
                .unwrap_err();
        assert!(e.contains("links[0].from") && e.contains("s9r0"), "{e}");
        let e = parse("[[shards]]\nreplicas = 5").unwrap_err();
        assert!(e.contains("c.toml") && e.contains("replicas"), "{e}");
    }

    #[test]
    fn missing_file_is_a_clear_error() {
        let e = ClusterConfig::load(Path::new("/nonexistent/c.toml")).unwrap_err().to_string();
        assert!(e.contains("cannot read cluster file /nonexistent/c.toml"), "{e}");
    }

    #[test]
    fn node_names() {
        assert_eq!("s3r1".parse::<NodeId>().unwrap(), NodeId { shard: 3, replica: 1 });
        assert!("x1".parse::<NodeId>().is_err());
        assert_eq!(NodeId { shard: 0, replica: 2 }.name(), "s0r2");
    }
}
