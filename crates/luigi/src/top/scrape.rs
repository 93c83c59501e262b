//! Reading every replica's `/metrics` at once, through the runtime's one scrape client
//! ([`luigi_runtime::metrics::scrape`]: bounded in time and size, parsed), each reading
//! stamped with when it was answered (rates divide by the time between two).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use luigi_runtime::metrics::scrape::fetch;
pub use luigi_runtime::metrics::scrape::Metrics;

/// One replica's metrics address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// Its shard.
    pub shard: u32,
    /// Its index in the shard's replica list.
    pub replica: u32,
    /// Where it serves `GET /metrics`.
    pub addr: SocketAddr,
}

/// A scrape of one replica: when it was answered and what it said, or why it did not answer.
#[derive(Clone, Debug)]
pub struct Reading {
    /// When the answer was complete (rates divide by the time between two of these).
    pub at: Instant,
    /// Its metrics, or why there are none (`connection refused`, `timed out after 800 ms`...).
    pub metrics: Result<Metrics, String>,
}

/// Scrapes `target` within `timeout` (connecting, asking and reading the whole answer).
pub async fn read(target: &Target, timeout: Duration) -> Reading {
    let metrics = fetch(target.addr, timeout).await;
    Reading { at: Instant::now(), metrics }
}

/// Every target scraped at once, each within `timeout`; the readings in `targets`' order.
pub async fn read_all(targets: &[Target], timeout: Duration) -> Vec<Reading> {
    let mut tasks = tokio::task::JoinSet::new();
    for (i, target) in targets.iter().enumerate() {
        let target = target.clone();
        tasks.spawn(async move { (i, read(&target, timeout).await) });
    }
    let mut readings: Vec<Option<Reading>> = vec![None; targets.len()];
    while let Some(done) = tasks.join_next().await {
        if let Ok((i, reading)) = done {
            readings[i] = Some(reading);
        }
    }
    readings
        .into_iter()
        .map(|r| r.unwrap_or_else(|| Reading { at: Instant::now(), metrics: Err("scrape task failed".into()) }))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_closed_port_and_a_silent_server_are_readings_with_a_reason() {
        let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let closed_addr = closed.local_addr().unwrap();
        drop(closed);
        let targets = [
            Target { shard: 0, replica: 0, addr: silent.local_addr().unwrap() },
            Target { shard: 0, replica: 1, addr: closed_addr },
        ];
        let readings = read_all(&targets, Duration::from_millis(200)).await;
        assert_eq!(readings[0].metrics.as_ref().unwrap_err(), "timed out after 200 ms");
        assert_eq!(readings[1].metrics.as_ref().unwrap_err(), "connection refused");
    }
}
