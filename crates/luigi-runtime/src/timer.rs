//! A precise one-shot wake-up for the server's event loop. Tokio's timers have millisecond
//! granularity, which would add up to a millisecond to every hold-until-timestamp; a parked
//! thread wakes within tens of microseconds.

use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use tokio::sync::Notify;

use crate::clock;

#[derive(Default)]
struct State {
    deadline_us: Option<u64>,
    stop: bool,
}

/// Wakes a tokio task (through a [`Notify`]) when the clock reaches a deadline.
pub struct PreciseTimer {
    shared: Arc<(Mutex<State>, Condvar)>,
    notify: Arc<Notify>,
    thread: Option<JoinHandle<()>>,
}

impl PreciseTimer {
    /// Starts the timer thread.
    pub fn start() -> std::io::Result<Self> {
        let shared = Arc::new((Mutex::new(State::default()), Condvar::new()));
        let notify = Arc::new(Notify::new());
        let (s, n) = (shared.clone(), notify.clone());
        let thread = std::thread::Builder::new().name("luigi-timer".into()).spawn(move || run(&s, &n))?;
        Ok(Self { shared, notify, thread: Some(thread) })
    }

    /// Sets the deadline (µs, [`clock::now_us`] scale), replacing any previous one. The timer
    /// thread is woken only when the deadline moves earlier; a later deadline is picked up
    /// when it wakes for the earlier one, which saves a context switch per event under load.
    pub fn set(&self, deadline_us: Option<u64>) {
        let (lock, cvar) = &*self.shared;
        let mut st = lock.lock().unwrap_or_else(|e| e.into_inner());
        if st.deadline_us == deadline_us {
            return;
        }
        let earlier = match (deadline_us, st.deadline_us) {
            (Some(new), Some(old)) => new < old,
            (Some(_), None) => true,
            (None, _) => false,
        };
        st.deadline_us = deadline_us;
        if earlier {
            cvar.notify_one();
        }
    }

    /// Resolves when a deadline has been reached.
    pub async fn fired(&self) {
        self.notify.notified().await
    }
}

fn run(shared: &(Mutex<State>, Condvar), notify: &Notify) {
    let (lock, cvar) = shared;
    let mut st = lock.lock().unwrap_or_else(|e| e.into_inner());
    loop {
        if st.stop {
            return;
        }
        match st.deadline_us {
            None => st = cvar.wait(st).unwrap_or_else(|e| e.into_inner()),
            Some(deadline) => {
                let now = clock::now_us();
                if now >= deadline {
                    st.deadline_us = None;
                    notify.notify_one();
                } else {
                    let wait = Duration::from_micros(deadline - now);
                    st = cvar.wait_timeout(st, wait).unwrap_or_else(|e| e.into_inner()).0;
                }
            }
        }
    }
}

impl Drop for PreciseTimer {
    fn drop(&mut self) {
        {
            let (lock, cvar) = &*self.shared;
            lock.lock().unwrap_or_else(|e| e.into_inner()).stop = true;
            cvar.notify_one();
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn fires_at_the_deadline_not_before() {
        let timer = PreciseTimer::start().unwrap();
        let start = clock::now_us();
        timer.set(Some(start + 3_000));
        timer.fired().await;
        let waited = clock::now_us() - start;
        assert!(waited >= 3_000, "fired early after {waited} µs");
    }
}
