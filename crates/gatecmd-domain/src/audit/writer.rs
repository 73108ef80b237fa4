//! The audit log's writer thread: callers enqueue their bounded lines and return; one thread
//! takes them in order and hands each to the sink (the log, which chains, signs and writes
//! it), so the signature's cost is off the caller's path (docs/AUDIT.md "Writing").
//!
//! - **Order.** A line is taken from the queue only while the sink's lock is held, and
//!   written before that lock is let go, so lines reach the file in the order they were
//!   enqueued, whoever drains them (the thread, a `flush`, or a caller under backpressure);
//!   the chain's order is the file's order.
//! - **Nothing lost on a stop.** [`Writer::drain`] (`Audit::flush`, the server's stop)
//!   writes everything enqueued before it returns; dropping the writer drains and joins the
//!   thread. What a `SIGKILL` can lose is the lines still queued at that instant
//!   (microseconds' worth, at most [`MAX_QUEUED`]).
//! - **Bounded.** Past [`MAX_QUEUED`] lines waiting (a disk slower than the callers), the
//!   caller drains the queue itself, as the writer was synchronous before: memory stays
//!   bounded and a flood slows its own callers, not the host.
//! - **Not in the caller's time.** The thread runs under `SCHED_BATCH`: woken by a push, it
//!   does not preempt the caller on a busy core (docs/PERFORMANCE.md, "Signing off the
//!   request path").

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;

/// Lines waiting beyond which a caller writes them itself (backpressure).
pub(super) const MAX_QUEUED: usize = 4096;

/// Where lines go: one line at a time, under the sink's lock.
pub(super) trait Sink: Send + 'static {
    fn write_line(&mut self, line: &[u8]);
}

/// The queue and the thread that empties it into the sink.
pub(super) struct Writer<S: Sink> {
    inner: Arc<Inner<S>>,
    thread: Option<JoinHandle<()>>,
}

struct Inner<S> {
    sink: Arc<Mutex<S>>,
    queue: Mutex<Queue>,
    /// Wakes the thread: a line was enqueued, or the writer stops.
    work: Condvar,
}

#[derive(Default)]
struct Queue {
    lines: VecDeque<Vec<u8>>,
    stop: bool,
}

impl<S: Sink> Writer<S> {
    /// Starts the thread. If the system refuses a thread, every caller writes its own line
    /// (the queue is then drained at each push).
    pub(super) fn start(sink: Arc<Mutex<S>>) -> Writer<S> {
        let inner = Arc::new(Inner {
            sink,
            queue: Mutex::new(Queue::default()),
            work: Condvar::new(),
        });
        let for_thread = inner.clone();
        let thread = std::thread::Builder::new()
            .name("gatecmd-audit".into())
            .spawn(move || {
                batch_policy();
                for_thread.run()
            })
            .map_err(|e| tracing::warn!(error = %e, "audit log: no writer thread; callers write their own lines"))
            .ok();
        Writer { inner, thread }
    }

    /// Enqueues one line; the caller returns without waiting for it to be written.
    pub(super) fn push(&self, line: Vec<u8>) {
        let waiting = {
            let mut q = lock(&self.inner.queue);
            q.lines.push_back(line);
            q.lines.len()
        };
        if self.thread.is_none() || waiting > MAX_QUEUED {
            self.inner.drain();
        } else {
            self.inner.work.notify_one();
        }
    }

    /// Writes every line enqueued so far, in order, before returning.
    pub(super) fn drain(&self) {
        self.inner.drain();
    }
}

impl<S: Sink> Drop for Writer<S> {
    /// The last handle is gone: the thread writes what is queued and ends.
    fn drop(&mut self) {
        lock(&self.inner.queue).stop = true;
        self.inner.work.notify_one();
        if let Some(t) = self.thread.take()
            && t.join().is_err()
        {
            tracing::error!("audit log: the writer thread panicked");
        }
        self.inner.drain();
    }
}

impl<S: Sink> Inner<S> {
    fn run(&self) {
        loop {
            {
                let mut q = lock(&self.queue);
                while q.lines.is_empty() && !q.stop {
                    q = self.work.wait(q).unwrap_or_else(|p| p.into_inner());
                }
                if q.lines.is_empty() && q.stop {
                    return;
                }
            }
            self.drain();
        }
    }

    /// Takes each line under the sink's lock and writes it before letting go, so concurrent
    /// drains keep the queue's order. The lock is taken per line: a refusal's admission,
    /// which takes the same lock, waits for one line at most.
    fn drain(&self) {
        loop {
            let mut sink = lock(&self.sink);
            let Some(line) = lock(&self.queue).lines.pop_front() else {
                return;
            };
            sink.write_line(&line);
        }
    }
}

/// `SCHED_BATCH` for the calling thread (the writer): woken by a push, it does not preempt
/// the caller that pushed (which would put the signature back on the request's time when
/// every core is busy); it runs when a core is free or at the caller's next wait. A failure
/// leaves the normal policy.
fn batch_policy() {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: sets the calling thread's scheduling policy (pid 0); `param` outlives the call.
    let rc = unsafe { libc::sched_setscheduler(0, libc::SCHED_BATCH, &param) };
    if rc != 0 {
        tracing::debug!(error = %std::io::Error::last_os_error(), "audit log: the writer thread keeps the normal scheduling policy");
    }
}

/// A panic while a lock was held leaves at worst a cut line: carry on with the data.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Default)]
    struct Lines(Vec<Vec<u8>>);

    impl Sink for Lines {
        fn write_line(&mut self, line: &[u8]) {
            self.0.push(line.to_vec());
        }
    }

    #[test]
    fn lines_from_many_threads_are_written_in_enqueue_order_and_all_by_the_stop() {
        let sink = Arc::new(Mutex::new(Lines::default()));
        let writer = Arc::new(Writer::start(sink.clone()));
        let order = Arc::new(Mutex::new(Vec::new()));
        let threads: Vec<_> = (0..4u8)
            .map(|t| {
                let (writer, order) = (writer.clone(), order.clone());
                std::thread::spawn(move || {
                    for n in 0..2000u16 {
                        // Enqueue and note the order under one lock, so `order` is the
                        // queue's order.
                        let mut o = lock(&order);
                        let line = [vec![t], n.to_be_bytes().to_vec()].concat();
                        writer.push(line.clone());
                        o.push(line);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().expect("thread");
        }
        drop(Arc::into_inner(writer).expect("the last handle"));
        let written = std::mem::take(&mut lock(&sink).0);
        assert_eq!(written.len(), 8000);
        assert_eq!(written, *lock(&order));
    }

    #[test]
    fn drain_returns_with_everything_written() {
        let sink = Arc::new(Mutex::new(Lines::default()));
        let writer = Writer::start(sink.clone());
        for n in 0..100u8 {
            writer.push(vec![n]);
        }
        writer.drain();
        assert_eq!(lock(&sink).0.len(), 100);
    }
}
