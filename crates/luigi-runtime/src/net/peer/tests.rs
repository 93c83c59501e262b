//! Connection tests over loopback TCP.

use std::net::SocketAddr;

use bytes::BytesMut;
use tokio::io::AsyncWriteExt;

use super::*;
use crate::net::codec::encode_frame;
use crate::net::codec::FrameError;
use crate::net::wan::{now_us, DelayLine};
use luigi_wan::DelayDist;
use serde::Deserialize;
use std::time::Duration;
use tokio::io::AsyncReadExt;
use tokio::net::TcpListener;
use tokio::time::timeout;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
enum Msg {
    Data { seq: u64, sent_us: u64, body: Vec<u8> },
    Echo(u64),
}

const T: Duration = Duration::from_secs(20);

fn data(seq: u64) -> Msg {
    Msg::Data { seq, sent_us: now_us(), body: vec![(seq % 251) as u8; (seq % 97) as usize * 13] }
}

/// Echo server: answers every `Data{seq}` with `Echo(seq)`; reports how
/// each connection's reader ended.
async fn echo_server(link_for_replies: Option<DelayLink>) -> (SocketAddr, mpsc::UnboundedReceiver<ReadEnd>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (ends_tx, ends_rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        let cfg = NetConfig::default();
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let (writer, reader) = split_stream::<Msg, Msg>(stream, &cfg, link_for_replies.clone()).unwrap();
            let ends_tx = ends_tx.clone();
            tokio::spawn(async move {
                let end = reader
                    .run(move |m| {
                        if let Msg::Data { seq, .. } = m {
                            writer.send(&Msg::Echo(seq)).unwrap();
                        }
                    })
                    .await;
                let _ = ends_tx.send(end);
            });
        }
    });
    (addr, ends_rx)
}

async fn round_trip(n: u64, client_link: Option<DelayLink>, server_link: Option<DelayLink>) {
    let (addr, _ends) = echo_server(server_link).await;
    let (writer, reader) = connect::<Msg, Msg>(addr, &NetConfig::default(), client_link).await.unwrap();
    let (mut rx, _h) = reader.spawn_channel(1024);
    let sender = {
        let writer = writer.clone();
        tokio::spawn(async move {
            for seq in 0..n {
                loop {
                    match writer.send(&data(seq)) {
                        Ok(()) => break,
                        Err(SendError::Backlogged) => tokio::task::yield_now().await,
                        Err(e) => panic!("send failed: {e}"),
                    }
                }
            }
        })
    };
    for seq in 0..n {
        let got = timeout(T, rx.recv()).await.unwrap().unwrap();
        assert_eq!(got, Msg::Echo(seq));
    }
    sender.await.unwrap();
    assert_eq!(writer.queued_frames(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_arrive_in_order_without_delay() {
    round_trip(20_000, None, None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_arrive_in_order_with_delay() {
    let line = DelayLine::new().unwrap();
    let c = line.link(DelayDist::new(2000, 500), 1);
    let s = line.link(DelayDist::new(2000, 500), 2);
    round_trip(20_000, Some(c), Some(s)).await;
}

/// Throughput smoke test (run with `--ignored --nocapture`): one
/// connection, small messages, echo round trip, with and without delay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore]
async fn throughput_smoke() {
    let n = 400_000u64;
    for delayed in [false, true] {
        let line = DelayLine::new().unwrap();
        let link = |seed| delayed.then(|| line.link(DelayDist::new(2000, 500), seed));
        let start = std::time::Instant::now();
        round_trip(n, link(1), link(2)).await;
        let secs = start.elapsed().as_secs_f64();
        eprintln!("delayed={delayed}: {n} request+echo pairs in {secs:.2} s = {:.0} msgs/s each way", n as f64 / secs);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn payloads_arrive_intact() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let line = DelayLine::new().unwrap();
    let server = tokio::spawn(async move {
        let (stream, _) = listener.accept().await.unwrap();
        let (_w, r) = split_stream::<Msg, Msg>(stream, &NetConfig::default(), None).unwrap();
        let (mut rx, _) = r.spawn_channel(16);
        let mut got = Vec::new();
        while let Some(m) = rx.recv().await {
            got.push(m);
        }
        got
    });
    let link = line.link(DelayDist::new(300, 300), 9);
    let (w, _r) = connect::<Msg, Msg>(addr, &NetConfig::default(), Some(link)).await.unwrap();
    let sent: Vec<Msg> = (0..3000).map(data).collect();
    for m in &sent {
        w.send(m).unwrap();
    }
    // Broadcast path: encode once, send the same frame.
    let frame = w.encode(&Msg::Echo(7)).unwrap();
    w.send_frame(frame.clone()).unwrap();
    w.send_frame(frame).unwrap();
    drop(w); // flushes delayed frames, then FIN
    let got = timeout(T, server).await.unwrap().unwrap();
    assert_eq!(got.len(), sent.len() + 2);
    assert_eq!(&got[..sent.len()], &sent[..]);
    assert_eq!(&got[sent.len()..], &[Msg::Echo(7), Msg::Echo(7)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn measured_one_way_delay_matches_link() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let line = DelayLine::new().unwrap();
    let n = 200u64;
    let server = tokio::spawn(async move {
        let (stream, _) = listener.accept().await.unwrap();
        let (_w, r) = split_stream::<Msg, Msg>(stream, &NetConfig::default(), None).unwrap();
        let mut delays = Vec::new();
        r.run(|m| {
            if let Msg::Data { seq, sent_us, .. } = m {
                delays.push((seq, now_us() - sent_us));
            }
        })
        .await;
        delays
    });
    let link = line.link(DelayDist::new(2000, 500), 3);
    let (w, _r) = connect::<Msg, Msg>(addr, &NetConfig::default(), Some(link)).await.unwrap();
    // Send from a plain OS thread with gaps, like a closed-loop client.
    std::thread::spawn(move || {
        for seq in 0..n {
            w.send(&data(seq)).unwrap();
            std::thread::sleep(Duration::from_micros(300));
        }
    })
    .join()
    .unwrap();
    let delays = timeout(T, server).await.unwrap().unwrap();
    assert_eq!(delays.len(), n as usize);
    for (i, &(seq, d)) in delays.iter().enumerate() {
        assert_eq!(seq, i as u64, "FIFO");
        assert!(d >= 1500, "message {seq} arrived after only {d} µs");
        // Lateness depends on the machine's load; only a hang is an error here.
        assert!(d < 2_000_000, "message {seq} took {d} µs");
    }
    let mean = delays.iter().map(|&(_, d)| d).sum::<u64>() / n;
    let min = delays.iter().map(|&(_, d)| d).min().unwrap_or(0);
    let max = delays.iter().map(|&(_, d)| d).max().unwrap_or(0);
    eprintln!("one-way delay over TCP: min {min} µs, mean {mean} µs, max {max} µs");
    // Printed, not bounded above: a shared machine delivers late, never early.
    assert!(mean >= 1500, "mean one-way delay {mean} µs below the smallest delay drawn");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_frame_disconnects_only_that_peer() {
    let (addr, mut ends) = echo_server(None).await;
    let (good_w, good_r) = connect::<Msg, Msg>(addr, &NetConfig::default(), None).await.unwrap();
    let (mut good_rx, _) = good_r.spawn_channel(16);
    good_w.send(&data(1)).unwrap();
    assert_eq!(timeout(T, good_rx.recv()).await.unwrap(), Some(Msg::Echo(1)));

    // Oversized length prefix.
    let mut bad = TcpStream::connect(addr).await.unwrap();
    bad.write_all(&[0xFF; 16]).await.unwrap();
    let mut buf = [0u8; 64];
    let res = timeout(T, bad.read(&mut buf)).await.unwrap();
    assert!(matches!(res, Ok(0) | Err(_)), "bad peer not disconnected: {res:?}");
    let end = timeout(T, ends.recv()).await.unwrap().unwrap();
    assert!(matches!(end, ReadEnd::BadFrame(FrameError::TooLarge { .. })), "{end:?}");

    // Well-sized frame with a payload that is not a Msg.
    let mut bad2 = TcpStream::connect(addr).await.unwrap();
    let mut frame = BytesMut::new();
    encode_frame(&"not a message, but a long string", &mut frame).unwrap();
    bad2.write_all(&frame).await.unwrap();
    let res = timeout(T, bad2.read(&mut buf)).await.unwrap();
    assert!(matches!(res, Ok(0) | Err(_)), "bad peer not disconnected: {res:?}");
    let end = timeout(T, ends.recv()).await.unwrap().unwrap();
    assert!(matches!(end, ReadEnd::BadFrame(_)), "{end:?}");

    // The well-behaved connection is unaffected.
    for seq in 2..100 {
        good_w.send(&data(seq)).unwrap();
    }
    for seq in 2..100 {
        assert_eq!(timeout(T, good_rx.recv()).await.unwrap(), Some(Msg::Echo(seq)));
    }
    assert!(!good_w.is_closed());
}

/// Minimal subscriber recording `(level, fields)` of every event.
struct Capture(std::sync::Arc<std::sync::Mutex<Vec<(tracing::Level, String)>>>);

struct FieldsToString<'a>(&'a mut String);

impl tracing::field::Visit for FieldsToString<'_> {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        use std::fmt::Write;
        let _ = write!(self.0, "{}={:?} ", field.name(), value);
    }
}

impl tracing::Subscriber for Capture {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        let mut fields = String::new();
        event.record(&mut FieldsToString(&mut fields));
        if let Ok(mut events) = self.0.lock() {
            events.push((*event.metadata().level(), fields));
        }
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

/// Current-thread runtime so the thread-local subscriber sees the
/// reader task's events.
#[tokio::test]
async fn bad_frame_logs_one_warning_naming_the_peer() {
    let events = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let _guard = tracing::subscriber::set_default(Capture(events.clone()));
    let (addr, mut ends) = echo_server(None).await;
    let mut bad = TcpStream::connect(addr).await.unwrap();
    let bad_addr = bad.local_addr().unwrap();
    bad.write_all(&[0, 0, 0, 2, 0xFF, 0xFF]).await.unwrap();
    let end = timeout(T, ends.recv()).await.unwrap().unwrap();
    assert!(matches!(end, ReadEnd::BadFrame(FrameError::Malformed { len: 2, .. })), "{end:?}");
    let mut buf = [0u8; 8];
    let res = timeout(T, bad.read(&mut buf)).await.unwrap();
    assert!(matches!(res, Ok(0) | Err(_)), "{res:?}");

    let events = events.lock().unwrap().clone();
    let warnings: Vec<_> = events.iter().filter(|(level, _)| *level <= tracing::Level::WARN).collect();
    assert_eq!(warnings.len(), 1, "{events:?}");
    let line = &warnings[0].1;
    assert!(line.contains(&bad_addr.to_string()), "{line}");
    assert!(line.contains("malformed frame of 2 bytes"), "{line}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_queue_reports_backlogged() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let line = DelayLine::new().unwrap();
    let link = line.link(DelayDist::fixed(1_000_000), 1); // 1 s: frames stay queued
    let cfg = NetConfig { send_queue_frames: 4, ..NetConfig::default() };
    let (w, _r) = connect::<Msg, Msg>(addr, &cfg, Some(link)).await.unwrap();
    let _accepted = listener.accept().await.unwrap();
    for seq in 0..4 {
        w.send(&data(seq)).unwrap();
    }
    assert_eq!(w.queued_frames(), 4);
    assert!(matches!(w.send(&data(4)), Err(SendError::Backlogged)));
    let big = Msg::Data { seq: 0, sent_us: 0, body: vec![0; MAX_FRAME_BYTES_DEFAULT + 1] };
    assert!(matches!(w.send(&big), Err(SendError::Encode(FrameError::TooLarge { .. }))));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_after_peer_vanishes_reports_closed() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (w, r) = connect::<Msg, Msg>(addr, &NetConfig::default(), None).await.unwrap();
    let reader = r.spawn(|_| {});
    let (accepted, _) = listener.accept().await.unwrap();
    drop(accepted);
    drop(listener);
    let end = timeout(T, reader).await.unwrap().unwrap();
    assert!(matches!(end, ReadEnd::Eof | ReadEnd::Io(_)), "{end:?}");
    let closed = timeout(T, async {
        loop {
            match w.send(&data(0)) {
                Ok(()) => tokio::time::sleep(Duration::from_millis(1)).await,
                Err(SendError::Closed) => break,
                Err(e) => panic!("unexpected {e}"),
            }
        }
    })
    .await;
    assert!(closed.is_ok(), "writer never noticed the closed connection");
    assert!(w.is_closed());
}
