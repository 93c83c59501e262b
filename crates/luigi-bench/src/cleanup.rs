//! Leaving nothing behind. The servers a benchmark starts and their temporary directory go on
//! every way out of the process that can be handled:
//!
//! - a return, with a result or an error: `Drop` of the [`LocalCluster`](crate::cluster::LocalCluster);
//! - a panic: the same `Drop`, run while the stack unwinds (the workspace does not build
//!   with `panic = "abort"`); a panic in a load thread is caught at its join and becomes an
//!   error;
//! - SIGINT, SIGTERM and SIGHUP: [`install_signal_handlers`] runs a thread that, on the
//!   signal, stops every registered resource ([`register`]) and exits with status 128 + the
//!   signal number;
//! - a run past its deadline: a [`Watchdog`] does the same and exits with status 1.
//!
//! SIGKILL cannot be caught (nor can an abort of the process): the servers still exit by
//! themselves, since they run with `--exit-on-stdin-eof` and the kernel closes their standard
//! input when the benchmark dies, but the temporary directory (`$TMPDIR/luigi-bench-*`, the
//! servers' logs and data) stays behind.

use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

/// Something to tear down before the process exits.
pub trait Cleanup: Send + Sync {
    /// Stops and removes it; called at most once per process exit path but possibly again by
    /// its own `Drop`, so it must be idempotent.
    fn cleanup(&self);
}

static REGISTRY: Mutex<Vec<Weak<dyn Cleanup>>> = Mutex::new(Vec::new());

fn registry() -> MutexGuard<'static, Vec<Weak<dyn Cleanup>>> {
    // A panic while holding the lock leaves a valid list: keep using it.
    REGISTRY.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Registers `item` for [`cleanup_all`] for as long as it lives (the registry holds a weak
/// reference: dropping the last `Arc` runs its own `Drop` as usual).
pub fn register(item: &Arc<dyn Cleanup>) {
    let mut items = registry();
    items.retain(|w| w.strong_count() > 0);
    items.push(Arc::downgrade(item));
}

/// Cleans up every registered resource still alive.
pub fn cleanup_all() {
    // Upgraded outside the lock: a cleanup may take a while (killing and reaping servers).
    let alive: Vec<Arc<dyn Cleanup>> = registry().iter().filter_map(Weak::upgrade).collect();
    for item in alive {
        item.cleanup();
    }
}

/// Installs (once per process) handlers of SIGINT, SIGTERM and SIGHUP that clean up every
/// registered resource, then exit with status 128 + the signal number. They are in place when
/// this returns.
pub fn install_signal_handlers() -> anyhow::Result<()> {
    static INSTALLED: Mutex<bool> = Mutex::new(false);
    let mut installed = INSTALLED.lock().unwrap_or_else(PoisonError::into_inner);
    if *installed {
        return Ok(());
    }
    let (ready_tx, ready_rx) = mpsc::channel::<std::io::Result<()>>();
    std::thread::Builder::new().name("luigi-bench-signals".into()).spawn(move || {
        use tokio::signal::unix::{signal, SignalKind};
        let rt = match tokio::runtime::Builder::new_current_thread().enable_io().build() {
            Ok(rt) => rt,
            Err(e) => {
                let _ = ready_tx.send(Err(e));
                return;
            }
        };
        rt.block_on(async move {
            let streams = (|| {
                Ok::<_, std::io::Error>((
                    signal(SignalKind::interrupt())?,
                    signal(SignalKind::terminate())?,
                    signal(SignalKind::hangup())?,
                ))
            })();
            let (mut int, mut term, mut hup) = match streams {
                Ok(streams) => {
                    let _ = ready_tx.send(Ok(()));
                    streams
                }
                Err(e) => {
                    let _ = ready_tx.send(Err(e));
                    return;
                }
            };
            let number: i32 = tokio::select! {
                _ = int.recv() => 2,
                _ = term.recv() => 15,
                _ = hup.recv() => 1,
            };
            eprintln!("luigi: interrupted by signal {number}: stopping the local servers and removing their directory");
            cleanup_all();
            std::process::exit(128 + number);
        });
    })?;
    ready_rx.recv().map_err(|_| anyhow::anyhow!("the signal thread stopped before installing its handlers"))??;
    *installed = true;
    Ok(())
}

/// A last-resort bound on a run: if it is not dropped within its bound, it prints `message`
/// as an error, cleans up every registered resource and exits the process with status 1.
/// Runs normally end much earlier, through their own deadlines; this covers whatever would
/// block past them.
pub struct Watchdog {
    disarm: Option<mpsc::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Watchdog {
    /// Arms a watchdog firing after `bound`.
    pub fn arm(bound: Duration, message: String) -> Self {
        let (disarm, fired) = mpsc::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("luigi-bench-watchdog".into())
            .spawn(move || {
                if let Err(RecvTimeoutError::Timeout) = fired.recv_timeout(bound) {
                    eprintln!("luigi: error: {message}");
                    cleanup_all();
                    std::process::exit(1);
                }
            })
            .ok();
        Watchdog { disarm: Some(disarm), thread }
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        drop(self.disarm.take()); // disconnects: the thread returns at once
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    struct Counter(AtomicU32);

    impl Cleanup for Counter {
        fn cleanup(&self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn cleanup_all_reaches_live_items_only() {
        let live = Arc::new(Counter(AtomicU32::new(0)));
        let gone = Arc::new(Counter(AtomicU32::new(0)));
        let live_dyn: Arc<dyn Cleanup> = live.clone();
        let gone_dyn: Arc<dyn Cleanup> = gone.clone();
        register(&live_dyn);
        register(&gone_dyn);
        drop(gone_dyn);
        let gone_weak = Arc::downgrade(&gone);
        drop(gone);
        assert!(gone_weak.upgrade().is_none());
        cleanup_all();
        assert!(live.0.load(Ordering::SeqCst) >= 1);
    }

    #[test]
    fn a_disarmed_watchdog_stays_quiet() {
        let dog = Watchdog::arm(Duration::from_secs(3600), "never printed".into());
        let started = std::time::Instant::now();
        drop(dog);
        assert!(started.elapsed() < Duration::from_secs(1), "dropping joins at once");
    }

    #[test]
    fn signal_handlers_install_once() {
        install_signal_handlers().unwrap();
        install_signal_handlers().unwrap();
    }
}
