//! The one client of the servers' `/metrics` (used by `luigi top` and by the benchmark's
//! per-run scrapes): a plain HTTP/1.1 GET over a tokio TCP connection (the responder answers
//! one request per connection and closes it), bounded in time and size, parsed with
//! `prometheus-parse` into [`Metrics`] to look figures up by name and labels.
//!
//! An answer larger than [`MAX_ANSWER_BYTES`] is refused whole: a truncated exposition parses
//! as one with series missing, which a reader would take for zeros.

use std::net::SocketAddr;
use std::time::Duration;

use prometheus_parse::{Sample, Scrape, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The largest answer read (a server's exposition is a few tens of KiB).
pub const MAX_ANSWER_BYTES: u64 = 4 << 20;

/// One cumulative bucket of a histogram: `count` observations were at most `le`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Bucket {
    /// The bucket's upper bound (`+Inf` for the last).
    pub le: f64,
    /// Observations at most `le` (cumulative).
    pub count: f64,
}

/// One server's exposition, parsed.
#[derive(Clone, Debug, Default)]
pub struct Metrics {
    samples: Vec<Sample>,
}

impl Metrics {
    /// Parses an exposition (Prometheus or OpenMetrics text).
    pub fn parse(text: &str) -> Result<Metrics, String> {
        let scrape = Scrape::parse(text.lines().map(|l| Ok(l.to_string()))).map_err(|e| format!("parse: {e}"))?;
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

/// `GET /metrics` from `addr` within `timeout` (connecting, asking and reading the whole
/// answer), parsed; or why not (`connection refused`, `timed out after 800 ms`, `answered
/// HTTP/1.1 503 ...`, `answer larger than 4 MiB`, `parse: ...`).
pub async fn fetch(addr: SocketAddr, timeout: Duration) -> Result<Metrics, String> {
    match tokio::time::timeout(timeout, get(addr)).await {
        Ok(Ok(text)) => Metrics::parse(&text),
        Ok(Err(e)) => Err(e),
        Err(_) => Err(format!("timed out after {} ms", timeout.as_millis())),
    }
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
    use tokio::net::TcpListener;

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

    /// A server that accepts one connection and answers `answer` whatever it is asked.
    async fn answering(answer: Vec<u8>) -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let (mut conn, _) = listener.accept().await.unwrap();
            let mut request = [0u8; 256];
            let _ = conn.read(&mut request).await;
            let _ = conn.write_all(&answer).await;
        });
        addr
    }

    #[tokio::test]
    async fn an_answer_over_the_bound_is_refused_whole_not_parsed_in_part() {
        let mut answer = b"HTTP/1.1 200 OK\r\n\r\n".to_vec();
        let line = b"luigi_transactions_total{outcome=\"committed\",path=\"any\"} 1\n";
        while (answer.len() as u64) <= MAX_ANSWER_BYTES {
            answer.extend_from_slice(line);
        }
        let addr = answering(answer).await;
        let got = fetch(addr, Duration::from_secs(10)).await;
        assert_eq!(got.unwrap_err(), "answer larger than 4 MiB");
    }

    #[tokio::test]
    async fn a_whole_answer_is_parsed() {
        let addr = answering(format!("HTTP/1.1 200 OK\r\n\r\n{EXPOSITION}").into_bytes()).await;
        let m = fetch(addr, Duration::from_secs(10)).await.unwrap();
        assert_eq!(m.value("luigi_transactions_total", &[("outcome", "admitted")]), Some(18.0));
    }

    #[tokio::test]
    async fn a_closed_port_and_a_silent_server_are_errors_with_a_reason() {
        let silent = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let closed = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let closed_addr = closed.local_addr().unwrap();
        drop(closed);
        let timeout = Duration::from_millis(200);
        assert_eq!(fetch(silent.local_addr().unwrap(), timeout).await.unwrap_err(), "timed out after 200 ms");
        assert_eq!(fetch(closed_addr, timeout).await.unwrap_err(), "connection refused");
    }
}
