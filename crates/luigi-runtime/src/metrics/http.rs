//! A small HTTP/1.1 responder for `GET /metrics` on the server's tokio runtime (no web
//! framework): one request per connection, then it closes. Everything is bounded: at most
//! [`CONNS_MAX`] connections at once (more are closed at once), a request head of at most
//! [`REQUEST_BYTES_MAX`] bytes read within [`IO_TIMEOUT`], the answer written within it too.
//! A bad request is answered 400, another path 404, another method 405, a head too large 431,
//! a server that cannot answer in time 503; nothing a client sends makes it panic.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tracing::debug;

/// Connections served at once; more are closed as they come.
pub const CONNS_MAX: usize = 16;
/// The largest request head read (request line and headers).
pub const REQUEST_BYTES_MAX: usize = 8192;
/// How long a client has to send its request, and the responder to write its answer.
pub const IO_TIMEOUT: Duration = Duration::from_secs(5);

/// The exposition, asked for once per `GET /metrics`; `None` if the server cannot give one
/// now (answered 503).
pub type Body = Arc<dyn Fn() -> Pin<Box<dyn Future<Output = Option<String>> + Send>> + Send + Sync>;

/// What a request head asks for.
#[derive(Debug, PartialEq, Eq)]
pub enum Request {
    /// `GET /metrics` (a query string is ignored).
    Metrics,
    /// Something else: answered with this status.
    Refused(Status),
}

/// An HTTP status the responder answers with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// 200.
    Ok,
    /// 400: not an HTTP request line.
    BadRequest,
    /// 404: a path other than `/metrics`.
    NotFound,
    /// 405: a method other than `GET`.
    MethodNotAllowed,
    /// 431: a head over [`REQUEST_BYTES_MAX`].
    HeadTooLarge,
    /// 503: the server could not give its figures in time.
    Unavailable,
}

impl Status {
    fn line(self) -> &'static str {
        match self {
            Status::Ok => "200 OK",
            Status::BadRequest => "400 Bad Request",
            Status::NotFound => "404 Not Found",
            Status::MethodNotAllowed => "405 Method Not Allowed",
            Status::HeadTooLarge => "431 Request Header Fields Too Large",
            Status::Unavailable => "503 Service Unavailable",
        }
    }
}

/// Reads a request head's first line: `GET /metrics HTTP/1.x`.
pub fn parse_request(head: &[u8]) -> Request {
    let Ok(text) = std::str::from_utf8(head) else { return Request::Refused(Status::BadRequest) };
    let line = text.split("\r\n").next().unwrap_or_default();
    let mut parts = line.split(' ');
    let (Some(method), Some(target), Some(version), None) = (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Request::Refused(Status::BadRequest);
    };
    if !version.starts_with("HTTP/1.") || method.is_empty() || !target.starts_with('/') {
        return Request::Refused(Status::BadRequest);
    }
    if method != "GET" {
        return Request::Refused(Status::MethodNotAllowed);
    }
    let path = target.split('?').next().unwrap_or_default();
    if path != "/metrics" {
        return Request::Refused(Status::NotFound);
    }
    Request::Metrics
}

/// Serves `GET /metrics` on `listener` with `body`, until the task is dropped.
pub async fn serve(listener: TcpListener, body: Body) {
    let seats = Arc::new(Semaphore::new(CONNS_MAX));
    loop {
        let (stream, from) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                // Out of file descriptors and the like: wait, do not spin.
                debug!(error = %e, "metrics: accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let Ok(seat) = seats.clone().try_acquire_owned() else {
            debug!(%from, "metrics: too many connections; closed");
            continue;
        };
        let body = body.clone();
        tokio::spawn(async move {
            if tokio::time::timeout(IO_TIMEOUT * 3, answer(stream, body)).await.is_err() {
                debug!(%from, "metrics: connection timed out");
            }
            drop(seat);
        });
    }
}

/// Reads one request from `stream` and answers it.
async fn answer(mut stream: TcpStream, body: Body) {
    let request = match tokio::time::timeout(IO_TIMEOUT, read_head(&mut stream)).await {
        Ok(Ok(head)) => parse_request(&head),
        Ok(Err(status)) => Request::Refused(status),
        Err(_) => return, // silent client: closed
    };
    let (status, text) = match request {
        Request::Metrics => match tokio::time::timeout(IO_TIMEOUT, body()).await {
            Ok(Some(text)) => (Status::Ok, text),
            Ok(None) | Err(_) => (Status::Unavailable, "the server cannot give its metrics now\n".to_string()),
        },
        Request::Refused(status) => (status, format!("{}\n", status.line())),
    };
    let content_type = match status {
        Status::Ok => "application/openmetrics-text; version=1.0.0; charset=utf-8",
        _ => "text/plain; charset=utf-8",
    };
    let head = format!(
        "HTTP/1.1 {}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        status.line(),
        text.len()
    );
    let write = async {
        stream.write_all(head.as_bytes()).await?;
        stream.write_all(text.as_bytes()).await?;
        stream.shutdown().await
    };
    let _ = tokio::time::timeout(IO_TIMEOUT, write).await;
}

/// Reads up to the end of the request head (`\r\n\r\n`), at most [`REQUEST_BYTES_MAX`].
async fn read_head(stream: &mut TcpStream) -> Result<Vec<u8>, Status> {
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    loop {
        let n = stream.read(&mut buf).await.map_err(|_| Status::BadRequest)?;
        if n == 0 {
            return Err(Status::BadRequest); // closed before the head ended
        }
        head.extend_from_slice(&buf[..n]);
        if let Some(end) = head.windows(4).position(|w| w == b"\r\n\r\n") {
            head.truncate(end);
            return Ok(head);
        }
        if head.len() > REQUEST_BYTES_MAX {
            return Err(Status::HeadTooLarge);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_get_of_metrics_is_served() {
        assert_eq!(parse_request(b"GET /metrics HTTP/1.1\r\nHost: x"), Request::Metrics);
        assert_eq!(parse_request(b"GET /metrics?x=1 HTTP/1.0"), Request::Metrics);
        assert_eq!(parse_request(b"GET / HTTP/1.1"), Request::Refused(Status::NotFound));
        assert_eq!(parse_request(b"POST /metrics HTTP/1.1"), Request::Refused(Status::MethodNotAllowed));
        for bad in [&b""[..], b"GET", b"GET /metrics", b"GET /metrics HTTP/1.1 extra", b"GET metrics HTTP/1.1"] {
            assert_eq!(parse_request(bad), Request::Refused(Status::BadRequest), "{:?}", String::from_utf8_lossy(bad));
        }
        assert_eq!(parse_request(b"GET /metrics SPDY/3"), Request::Refused(Status::BadRequest));
        assert_eq!(parse_request(&[0xff, 0xfe, b' ']), Request::Refused(Status::BadRequest));
    }

    /// A responder on a loopback port serving `text`.
    async fn responder(text: Option<&'static str>) -> std::net::SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let body: Body = Arc::new(move || Box::pin(async move { text.map(str::to_string) }));
        tokio::spawn(serve(listener, body));
        addr
    }

    /// Sends `request` and reads the whole answer.
    async fn ask(addr: std::net::SocketAddr, request: &[u8]) -> String {
        let mut s = TcpStream::connect(addr).await.unwrap();
        // A refused connection may be reset before the request is written or read.
        let _ = s.write_all(request).await;
        let mut answer = Vec::new();
        let _ = s.read_to_end(&mut answer).await;
        String::from_utf8_lossy(&answer).into_owned()
    }

    #[tokio::test]
    async fn bad_requests_get_their_status_and_the_responder_goes_on() {
        let addr = responder(Some("up 1\n# EOF\n")).await;
        let ok = ask(addr, b"GET /metrics HTTP/1.1\r\nHost: a\r\n\r\n").await;
        assert!(ok.starts_with("HTTP/1.1 200 OK\r\n") && ok.ends_with("\r\n\r\nup 1\n# EOF\n"), "{ok}");
        assert!(ok.contains("Content-Length: 11\r\n"), "{ok}");
        assert!(ask(addr, b"GET /x HTTP/1.1\r\n\r\n").await.starts_with("HTTP/1.1 404 "));
        assert!(ask(addr, b"DELETE /metrics HTTP/1.1\r\n\r\n").await.starts_with("HTTP/1.1 405 "));
        assert!(ask(addr, b"\x00\x01garbage\r\n\r\n").await.starts_with("HTTP/1.1 400 "));
        let huge = [b"GET /metrics HTTP/1.1\r\nX: ".as_slice(), &[b'a'; REQUEST_BYTES_MAX + 10]].concat();
        assert!(ask(addr, &huge).await.starts_with("HTTP/1.1 431 "));
        // A client that closes mid-head gets a 400 (or nothing, if it is gone first).
        let cut = ask(addr, b"GET /metr").await;
        assert!(cut.is_empty() || cut.starts_with("HTTP/1.1 400 "), "{cut}");
        assert!(ask(addr, b"GET /metrics HTTP/1.1\r\n\r\n").await.starts_with("HTTP/1.1 200 "), "still serving");
    }

    #[tokio::test]
    async fn a_server_without_figures_answers_503() {
        let addr = responder(None).await;
        assert!(ask(addr, b"GET /metrics HTTP/1.1\r\n\r\n").await.starts_with("HTTP/1.1 503 "));
    }

    #[tokio::test]
    async fn connections_beyond_the_bound_are_closed_and_the_others_served() {
        let addr = responder(Some("# EOF\n")).await;
        // Silent connections take every seat (each held until its read times out).
        let mut silent = Vec::new();
        for _ in 0..CONNS_MAX {
            silent.push(TcpStream::connect(addr).await.unwrap());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(ask(addr, b"GET /metrics HTTP/1.1\r\n\r\n").await, "", "no seat: closed at once");
        drop(silent);
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(ask(addr, b"GET /metrics HTTP/1.1\r\n\r\n").await.starts_with("HTTP/1.1 200 "));
    }
}
