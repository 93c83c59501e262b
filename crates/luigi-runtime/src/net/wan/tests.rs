//! Delay line tests (the model's own are in `luigi-wan`).

use std::time::Duration;

use bytes::Bytes;

use super::*;
use luigi_wan::DelayDist;
use tokio::sync::mpsc;

/// Receives `n` frames (blocking), returning `(payload, receive_time_us)`.
fn recv_n(rx: &mut mpsc::Receiver<Bytes>, n: usize) -> Vec<(Bytes, u64)> {
    (0..n)
        .map(|_| {
            let f = rx.blocking_recv().expect("frame");
            (f, now_us())
        })
        .collect()
}

#[test]
fn link_delays_are_bounded_and_fifo() {
    let line = DelayLine::new().unwrap();
    let link = line.link(DelayDist::new(2000, 500), 42);
    assert!(!link.is_bypass());
    let (tx, mut rx) = mpsc::channel::<Bytes>(1024);
    let n = 300u64;
    let receiver = std::thread::spawn(move || recv_n(&mut rx, n as usize));
    let mut sent_us = Vec::new();
    for i in 0..n {
        let permit = tx.clone().try_reserve_owned().unwrap();
        sent_us.push(now_us());
        link.submit(Bytes::copy_from_slice(&i.to_be_bytes()), permit).unwrap();
        if i % 3 == 0 {
            std::thread::sleep(Duration::from_micros(200));
        }
    }
    let got = receiver.join().unwrap();
    let mut total = 0;
    for (i, (frame, at)) in got.iter().enumerate() {
        assert_eq!(&frame[..], &(i as u64).to_be_bytes(), "FIFO");
        let delay = at - sent_us[i];
        assert!(delay >= 1500, "frame {i} early: {delay} µs");
        // Lateness depends on the machine's load; only a hang is an error here.
        assert!(delay < 1_000_000, "frame {i} a second late: {delay} µs");
        total += delay;
    }
    let mean = total / n;
    // Printed, not asserted above the drawn range: a shared machine wakes the thread late.
    eprintln!("delay line: mean delay {mean} µs (drawn from 2000 ± 500)");
    assert!(mean >= 1500, "mean {mean} below the smallest delay drawn");
    // The thread decrements `pending` right after handing over a batch.
    let deadline = Instant::now() + Duration::from_secs(5);
    while line.pending() != 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(line.pending(), 0);
}

#[test]
fn many_links_interleave_and_stay_fifo() {
    let line = DelayLine::new().unwrap();
    let (tx, mut rx) = mpsc::channel::<Bytes>(100_000);
    let threads: Vec<_> = (0..4u8)
        .map(|t| {
            let link = line.link(DelayDist::new(1000, 900), t as u64);
            let tx = tx.clone();
            std::thread::spawn(move || {
                for i in 0..2000u32 {
                    let permit = tx.clone().try_reserve_owned().unwrap();
                    let mut b = vec![t];
                    b.extend_from_slice(&i.to_be_bytes());
                    link.submit(Bytes::from(b), permit).unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let got = recv_n(&mut rx, 8000);
    let mut next = [0u32; 4];
    for (f, _) in got {
        let t = f[0] as usize;
        let i = u32::from_be_bytes(f[1..5].try_into().unwrap());
        assert_eq!(i, next[t], "link {t} out of order");
        next[t] += 1;
    }
    assert_eq!(next, [2000; 4]);
}

#[test]
fn zero_dist_bypasses_thread() {
    let line = DelayLine::new().unwrap();
    let link = line.link(DelayDist::ZERO, 1);
    assert!(link.is_bypass());
    let (tx, mut rx) = mpsc::channel::<Bytes>(4);
    link.submit(Bytes::from_static(b"x"), tx.clone().try_reserve_owned().unwrap()).unwrap();
    assert_eq!(rx.try_recv().unwrap(), Bytes::from_static(b"x"));
    assert_eq!(line.pending(), 0);
    // Bypass links work without any line at all.
    drop(line);
    DelayLink::bypass().submit(Bytes::from_static(b"y"), tx.try_reserve_owned().unwrap()).unwrap();
    assert_eq!(rx.try_recv().unwrap(), Bytes::from_static(b"y"));
}

#[test]
fn full_line_errors_and_drop_flushes() {
    let line = DelayLine::with_capacity(3).unwrap();
    let link = line.link(DelayDist::fixed(10_000_000), 1); // 10 s
    let (tx, mut rx) = mpsc::channel::<Bytes>(16);
    for i in 0..3u8 {
        link.submit(Bytes::from(vec![i]), tx.clone().try_reserve_owned().unwrap()).unwrap();
    }
    let err = link.submit(Bytes::from_static(b"no"), tx.clone().try_reserve_owned().unwrap()).unwrap_err();
    assert_eq!(err, DelayError::Full { capacity: 3 });
    // The refused frame released its queue slot: 16 - 3 reserved.
    assert_eq!(tx.capacity(), 13);
    assert_eq!(line.pending(), 3);
    assert!(rx.try_recv().is_err());

    let start = Instant::now();
    drop(line);
    assert!(start.elapsed() < Duration::from_secs(2), "drop must not wait for delays");
    for i in 0..3u8 {
        assert_eq!(rx.try_recv().unwrap(), Bytes::from(vec![i]));
    }
    let err = link.submit(Bytes::from_static(b"late"), tx.clone().try_reserve_owned().unwrap()).unwrap_err();
    assert_eq!(err, DelayError::ShutDown);
    assert_eq!(tx.capacity(), 16);
}

#[test]
fn earlier_deadline_wakes_sleeping_thread() {
    let line = DelayLine::new().unwrap();
    let slow = line.link(DelayDist::fixed(5_000_000), 1); // 5 s
    let fast = line.link(DelayDist::fixed(1_000), 2); // 1 ms
    let (tx, mut rx) = mpsc::channel::<Bytes>(16);
    slow.submit(Bytes::from_static(b"slow"), tx.clone().try_reserve_owned().unwrap()).unwrap();
    std::thread::sleep(Duration::from_millis(5)); // let the thread go to sleep
    let t0 = now_us();
    fast.submit(Bytes::from_static(b"fast"), tx.clone().try_reserve_owned().unwrap()).unwrap();
    assert_eq!(rx.blocking_recv().unwrap(), Bytes::from_static(b"fast"));
    let waited = now_us() - t0;
    assert!((1_000..1_000_000).contains(&waited), "{waited}");
}
