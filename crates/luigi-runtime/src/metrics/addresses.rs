//! The cluster file's `metrics` addresses (`[[shards]] metrics = [...]`), checked like the
//! replicas' own: one per replica, each an `ip:port`, none used twice (nor by a replica).

use std::collections::HashSet;
use std::net::SocketAddr;

use crate::config::ShardConfig;

/// What is wrong with a `metrics` field.
#[derive(Debug, PartialEq, Eq)]
pub struct AddressError {
    /// The field, e.g. `shards[1].metrics[0]`.
    pub field: String,
    /// What is wrong.
    pub problem: String,
}

/// Checks every shard's `metrics` against its `replicas`; `seen` holds the addresses already
/// taken (the replicas').
///
/// # Errors
/// The first field that is wrong.
pub fn validate_addresses(shards: &[ShardConfig], seen: &mut HashSet<SocketAddr>) -> Result<(), AddressError> {
    for (s, shard) in shards.iter().enumerate() {
        if shard.metrics.is_empty() {
            continue;
        }
        if shard.metrics.len() != shard.replicas.len() {
            return Err(AddressError {
                field: format!("shards[{s}].metrics"),
                problem: format!(
                    "has {} addresses for {} replicas: one per replica, in the order of `replicas`",
                    shard.metrics.len(),
                    shard.replicas.len()
                ),
            });
        }
        for (r, addr) in shard.metrics.iter().enumerate() {
            let field = format!("shards[{s}].metrics[{r}]");
            let parsed: SocketAddr = addr.parse().map_err(|e| AddressError {
                field: field.clone(),
                problem: format!("'{addr}' is not an ip:port address ({e})"),
            })?;
            if !seen.insert(parsed) {
                return Err(AddressError { field, problem: format!("address {addr} is used twice") });
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::config::ClusterConfig;

    fn parse(text: &str) -> Result<ClusterConfig, String> {
        ClusterConfig::parse(text, Path::new("c.toml")).map_err(|e| e.to_string())
    }

    #[test]
    fn metrics_addresses_are_optional_one_per_replica_and_round_trip() {
        let c = parse("[[shards]]\nreplicas = [\"127.0.0.1:1\", \"127.0.0.1:2\"]").unwrap();
        assert_eq!(c.metrics_addr(crate::config::NodeId { shard: 0, replica: 0 }), None, "off unless configured");
        assert!(!c.to_toml().contains("metrics"), "absent stays absent");
        let c = parse("[[shards]]\nreplicas = [\"127.0.0.1:1\", \"127.0.0.1:2\"]\nmetrics = [\"127.0.0.1:9100\", \"127.0.0.1:9101\"]")
            .unwrap();
        assert_eq!(
            c.metrics_addr(crate::config::NodeId { shard: 0, replica: 1 }),
            Some("127.0.0.1:9101".parse().unwrap())
        );
        assert_eq!(parse(&c.to_toml()).unwrap(), c);
    }

    #[test]
    fn bad_metrics_addresses_name_the_field() {
        let two = "[[shards]]\nreplicas = [\"127.0.0.1:1\", \"127.0.0.1:2\"]\n";
        let e = parse(&format!("{two}metrics = [\"127.0.0.1:9100\"]")).unwrap_err();
        assert!(e.contains("field `shards[0].metrics`") && e.contains("1 addresses for 2 replicas"), "{e}");
        let e = parse(&format!("{two}metrics = [\"127.0.0.1:9100\", \"localhost:9\"]")).unwrap_err();
        assert!(e.contains("field `shards[0].metrics[1]`") && e.contains("not an ip:port"), "{e}");
        let e = parse(&format!("{two}metrics = [\"127.0.0.1:9100\", \"127.0.0.1:9100\"]")).unwrap_err();
        assert!(e.contains("field `shards[0].metrics[1]`") && e.contains("used twice"), "{e}");
        let e = parse(&format!("{two}metrics = [\"127.0.0.1:2\", \"127.0.0.1:9100\"]")).unwrap_err();
        assert!(
            e.contains("field `shards[0].metrics[0]`") && e.contains("127.0.0.1:2 is used twice"),
            "a replica's: {e}"
        );
        let e = parse(&format!("{two}metrics = 5")).unwrap_err();
        assert!(e.contains("metrics"), "{e}");
    }
}
