//! Reading one server's `/metrics`: a plain HTTP/1.1 GET over a tokio TCP connection (the
//! servers' responder answers one request per connection and closes it), bounded in time and
//! size, parsed with `prometheus-parse` into [`Metrics`] to look figures up by name and labels.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use prometheus_parse::{Sample, Scrape, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::histogram::Bucket;

/// The largest answer read (a server's exposition is a few tens of KiB).
pub const MAX_ANSWER_BYTES: u64 = 4 << 20;

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

/// One replica's exposition, parsed.
#[derive(Clone, Debug, Default)]
pub struct Metrics {
    samples: Vec<Sample>,
}

/// A scrape of one replica: when it was answered and what it said, or why it did not answer.
#[derive(Clone, Debug)]
pub struct Reading {
    /// When the answer was complete (rates divide by the time between two of these).
    pub at: Instant,
    /// Its metrics, or why there are none (`connection refused`, `timed out after 800 ms`...).
    pub metrics: Result<Metrics, String>,
}

impl Metrics {
    /// Parses an exposition (Prometheus or OpenMetrics text).
    pub fn parse(text: &str) -> Result<Metrics, String> {
        let scrape = Scrape::parse(text.lines().map(|l| Ok(l.to_string()))).map_err(|e| e.to_string())?;
        Ok(Metrics { samples: scrape.samples })
    }

    /// The series of `metric` whose labels include every one of `labels`, as single values
    /// (counters, gauges and untyped alike: OpenMetrics counters reach the parser untyped).
    pub fn values<'a>(&'a self, metric: &'a str, labels: &'a [(&'a str, &'a str)]) -> impl Iterator<Item = f64> + 'a {
        self.matching(metric, labels).filter_map(|s| match &s.value {
            Value::Counter(v) | Value::Gauge(v) | Value::Untyped(v) => Some(*v),
            Value::Histogram(_) | Value::Summary(_) => None,
        })
    }

    /// The first series of `metric` with `labels` (see [`Metrics::values`]).
    pub fn value(&self, metric: &str, labels: &[(&str, &str)]) -> Option<f64> {
        self.values(metric, labels).next()
    }

    /// Every series of `metric` with the value of its label `label` (e.g. each peer's clock
    /// offset), in the order served.
    pub fn by_label(&self, metric: &str, label: &str) -> Vec<(String, f64)> {
        self.matching(metric, &[])
            .filter_map(|s| match &s.value {
                Value::Counter(v) | Value::Gauge(v) | Value::Untyped(v) => Some((s.labels.get(label)?.to_string(), *v)),
                Value::Histogram(_) | Value::Summary(_) => None,
            })
            .collect()
    }

    /// The buckets of histogram `metric` (its base name, without `_bucket`).
    pub fn histogram(&self, metric: &str) -> Option<Vec<Bucket>> {
        self.matching(metric, &[]).find_map(|s| match &s.value {
            Value::Histogram(h) => Some(h.iter().map(|b| Bucket { le: b.less_than, count: b.count }).collect()),
            Value::Counter(_) | Value::Gauge(_) | Value::Untyped(_) | Value::Summary(_) => None,
        })
    }

    fn matching<'a>(&'a self, metric: &'a str, labels: &'a [(&'a str, &'a str)]) -> impl Iterator<Item = &'a Sample> {
        self.samples
            .iter()
            .filter(move |s| s.metric == metric && labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
    }
}

/// Scrapes `target` within `timeout` (connecting, asking and reading the whole answer).
pub async fn read(target: &Target, timeout: Duration) -> Reading {
    let metrics = match tokio::time::timeout(timeout, get(target.addr)).await {
        Ok(Ok(text)) => Metrics::parse(&text),
        Ok(Err(e)) => Err(e),
        Err(_) => Err(format!("timed out after {} ms", timeout.as_millis())),
    };
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

/// `GET /metrics` from `addr`: the body of a 200 answer.
async fn get(addr: SocketAddr) -> Result<String, String> {
    let mut stream = TcpStream::connect(addr).await.map_err(|e| e.kind().to_string())?;
    let request = format!("GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.map_err(|e| format!("sending the request: {e}"))?;
    let mut answer = Vec::new();
    let read = (&mut stream).take(MAX_ANSWER_BYTES + 1).read_to_end(&mut answer).await;
    read.map_err(|e| format!("reading the answer: {e}"))?;
    if answer.len() as u64 > MAX_ANSWER_BYTES {
        return Err(format!("answer larger than {} MiB", MAX_ANSWER_BYTES >> 20));
    }
    body(&answer)
}

/// The body of an HTTP answer whose status is 200; otherwise the status line as the error.
fn body(answer: &[u8]) -> Result<String, String> {
    let text = std::str::from_utf8(answer).map_err(|_| "answer is not UTF-8".to_string())?;
    let (head, body) = text.split_once("\r\n\r\n").ok_or_else(|| "incomplete HTTP answer".to_string())?;
    let status = head.lines().next().unwrap_or_default();
    match status.split_whitespace().nth(1) {
        Some("200") if status.starts_with("HTTP/1.") => Ok(body.to_string()),
        _ => Err(format!("answered {}", status.chars().take(60).collect::<String>())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXPOSITION: &str = "\
# HELP luigi_transactions Transactions by outcome and path.
# TYPE luigi_transactions counter
luigi_transactions_total{shard=\"0\",replica=\"1\",protocol=\"luigi\",outcome=\"committed\",path=\"any\"} 17
luigi_transactions_total{shard=\"0\",replica=\"1\",protocol=\"luigi\",outcome=\"admitted\",path=\"any\"} 18
# TYPE luigi_clock_offset_seconds gauge
luigi_clock_offset_seconds{shard=\"0\",replica=\"1\",protocol=\"luigi\",peer=\"0\"} -0.00025
luigi_clock_offset_seconds{shard=\"0\",replica=\"1\",protocol=\"luigi\",peer=\"2\"} 0.0001
# TYPE etcd_disk_wal_fsync_duration_seconds histogram
etcd_disk_wal_fsync_duration_seconds_sum{shard=\"0\",replica=\"1\",protocol=\"luigi\"} 0.003
etcd_disk_wal_fsync_duration_seconds_count{shard=\"0\",replica=\"1\",protocol=\"luigi\"} 2
etcd_disk_wal_fsync_duration_seconds_bucket{le=\"0.001\",shard=\"0\",replica=\"1\",protocol=\"luigi\"} 1
etcd_disk_wal_fsync_duration_seconds_bucket{le=\"+Inf\",shard=\"0\",replica=\"1\",protocol=\"luigi\"} 2
# EOF
";

    #[test]
    fn figures_are_found_by_name_and_labels() {
        let m = Metrics::parse(EXPOSITION).unwrap();
        assert_eq!(m.value("luigi_transactions_total", &[("outcome", "committed"), ("path", "any")]), Some(17.0));
        assert_eq!(m.value("luigi_transactions_total", &[("outcome", "refused")]), None);
        assert_eq!(m.values("luigi_transactions_total", &[]).count(), 2);
        assert_eq!(
            m.by_label("luigi_clock_offset_seconds", "peer"),
            vec![("0".to_string(), -0.00025), ("2".to_string(), 0.0001)]
        );
        let h = m.histogram("etcd_disk_wal_fsync_duration_seconds").unwrap();
        assert_eq!(h, vec![Bucket { le: 0.001, count: 1.0 }, Bucket { le: f64::INFINITY, count: 2.0 }]);
        assert_eq!(m.histogram("luigi_turn_duration_seconds"), None);
    }

    #[test]
    fn only_a_200_answer_has_a_body() {
        assert_eq!(body(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nup\n"), Ok("up\n".to_string()));
        assert_eq!(
            body(b"HTTP/1.1 503 Service Unavailable\r\n\r\n"),
            Err("answered HTTP/1.1 503 Service Unavailable".into())
        );
        assert_eq!(body(b"HTTP/1.1 200 OK\r\n"), Err("incomplete HTTP answer".into()));
        assert_eq!(body(b"SSH-2.0-OpenSSH\r\n\r\n"), Err("answered SSH-2.0-OpenSSH".into()));
        assert_eq!(body(&[0xff, 0xfe]), Err("answer is not UTF-8".into()));
    }

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
