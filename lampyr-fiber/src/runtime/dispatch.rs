//! A pool's own fiber threads: calls reach them through a bounded channel,
//! without the blocking pool's round trip. A thread that finishes a call
//! looks for the next one (briefly spinning) before it sleeps, so calls
//! arriving back to back run without waking anyone; a thread idle for
//! [`IDLE_EXIT`] ends, so an idle pool holds no threads.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender, TryRecvError, TrySendError};

/// How long an idle thread waits for a call before it ends.
pub const IDLE_EXIT: Duration = Duration::from_secs(60);
/// How long a thread that has just finished a call spins for the next before it sleeps.
const SPIN: Duration = Duration::from_micros(30);

/// One call to run on a fiber thread.
pub(crate) type Job = Box<dyn FnOnce() + Send + 'static>;

/// Threads running one pool's calls, at most `max_threads`, started on demand.
pub(crate) struct Dispatcher {
    name: String,
    jobs: Sender<Job>,
    queue: Receiver<Job>,
    max_threads: usize,
    threads: Mutex<Threads>,
}

#[derive(Default)]
struct Threads {
    /// Threads alive.
    alive: usize,
    /// Threads waiting for a call that no submitted call has claimed yet.
    unclaimed_idle: usize,
}

impl Dispatcher {
    /// A dispatcher of at most `max_threads` threads named after `name`.
    pub(crate) fn new(name: &str, max_threads: usize) -> Arc<Self> {
        let max_threads = max_threads.max(1);
        let (jobs, queue) = crossbeam_channel::bounded(max_threads);
        Arc::new(Dispatcher { name: name.to_string(), jobs, queue, max_threads, threads: Mutex::new(Threads::default()) })
    }

    /// Runs `job` on a pool thread: an idle one, or a new one while fewer than
    /// `max_threads` run. The caller bounds calls in flight to `max_threads`
    /// (the pool's fiber slots); a job beyond that is handed back.
    pub(crate) fn submit(self: &Arc<Self>, job: Job) -> Result<(), Job> {
        let mut threads = self.threads.lock().unwrap_or_else(|p| p.into_inner());
        match self.jobs.try_send(job) {
            Ok(()) => {}
            Err(TrySendError::Full(job) | TrySendError::Disconnected(job)) => return Err(job),
        }
        if threads.unclaimed_idle > 0 {
            threads.unclaimed_idle -= 1;
        } else if threads.alive < self.max_threads {
            threads.alive += 1;
            let me = Arc::clone(self);
            let spawned = std::thread::Builder::new().name(format!("fiber-{}", self.name)).spawn(move || me.serve());
            if let Err(e) = spawned {
                threads.alive -= 1;
                tracing::warn!(error = %e, pool = %self.name, "could not start a fiber thread; the call waits for a busy one");
            }
        }
        Ok(())
    }

    /// A thread's life: run calls until none comes for [`IDLE_EXIT`].
    ///
    /// The idle count may undercount (a thread claimed for a call another
    /// thread took while spinning), never overcount: an undercount only starts
    /// a thread sooner, and every waiting thread takes any call.
    fn serve(&self) {
        loop {
            if let Some(job) = self.spin_for_job() {
                job();
                continue;
            }
            {
                let mut threads = self.threads.lock().unwrap_or_else(|p| p.into_inner());
                if !self.queue.is_empty() {
                    continue;
                }
                threads.unclaimed_idle += 1;
            }
            match self.queue.recv_timeout(IDLE_EXIT) {
                // The submitter claimed this thread for it.
                Ok(job) => job(),
                Err(RecvTimeoutError::Disconnected) => return,
                Err(RecvTimeoutError::Timeout) => {
                    let mut threads = self.threads.lock().unwrap_or_else(|p| p.into_inner());
                    if !self.queue.is_empty() {
                        continue;
                    }
                    threads.unclaimed_idle = threads.unclaimed_idle.saturating_sub(1);
                    threads.alive -= 1;
                    return;
                }
            }
        }
    }

    /// A call already waiting, or one arriving within [`SPIN`].
    fn spin_for_job(&self) -> Option<Job> {
        let spin_until = Instant::now() + SPIN;
        loop {
            match self.queue.try_recv() {
                Ok(job) => return Some(job),
                Err(TryRecvError::Empty) if Instant::now() < spin_until => std::hint::spin_loop(),
                Err(_) => return None,
            }
        }
    }

    /// Threads alive now.
    #[cfg(test)]
    fn alive(&self) -> usize {
        self.threads.lock().map(|t| t.alive).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    #[test]
    fn calls_run_on_at_most_max_threads_and_a_returning_thread_takes_the_next() {
        let dispatcher = Dispatcher::new("test", 2);
        let (done, finished) = mpsc::channel();
        // Both calls and the test meet here: the calls run at the same time.
        let release = Arc::new(std::sync::Barrier::new(3));
        for _ in 0..2 {
            let (release, done) = (Arc::clone(&release), done.clone());
            assert!(
                dispatcher
                    .submit(Box::new(move || {
                        release.wait();
                        let _ = done.send(std::thread::current().id());
                    }))
                    .is_ok()
            );
        }
        assert_eq!(dispatcher.alive(), 2, "two calls at once start two threads");
        release.wait();
        let ids: std::collections::HashSet<_> = (0..2).map(|_| finished.recv().expect("ran")).collect();
        assert_eq!(ids.len(), 2, "they ran side by side");
        for _ in 0..20 {
            let done = done.clone();
            let call = move || {
                let _ = done.send(std::thread::current().id());
            };
            dispatcher.submit(Box::new(call)).map_err(|_| "refused").expect("room");
            let id = finished.recv().expect("ran");
            assert!(ids.contains(&id), "a thread that is already there runs the next call");
        }
        assert_eq!(dispatcher.alive(), 2, "sequential calls start no thread");
    }

    #[test]
    fn a_call_beyond_the_bound_is_handed_back() {
        let dispatcher = Dispatcher::new("test", 1);
        let (release, gate) = mpsc::channel::<()>();
        let gate = Mutex::new(gate);
        let (started, running) = mpsc::channel();
        dispatcher
            .submit(Box::new(move || {
                let _ = started.send(());
                let _ = gate.lock().map(|g| g.recv());
            }))
            .map_err(|_| "refused")
            .expect("the first call");
        running.recv().expect("the first call runs");
        assert!(dispatcher.submit(Box::new(|| {})).is_ok(), "one waits in the channel");
        assert!(dispatcher.submit(Box::new(|| {})).is_err(), "a third is beyond the bound");
        let _ = release.send(());
    }
}
