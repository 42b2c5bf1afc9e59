//! Long work (a run, a sweep) played from Python on a thread of its own, the interpreter's lock
//! released, while the calling thread looks for signals every few milliseconds: Ctrl-C in a
//! notebook (a `KeyboardInterrupt`) requests the work's stop, as SIGINT does for the command
//! line, and is raised once the work has stopped at its next round boundary. An exception from a
//! Python callback stops the work the same way.

use std::sync::{Arc, Mutex, PoisonError};
use std::thread;
use std::time::Duration;

use fedsim::stop::StopSignal;
use pyo3::prelude::*;

/// How often the waiting thread looks for a `KeyboardInterrupt`.
const SIGNAL_POLL: Duration = Duration::from_millis(20);

/// A stop request shared by the work, its callbacks and the waiting thread, with the first
/// Python exception that asked for it.
#[derive(Clone, Default)]
pub(crate) struct Interruptible {
    stop: StopSignal,
    raised: Arc<Mutex<Option<PyErr>>>,
}

impl Interruptible {
    /// The stop request the work watches.
    pub(crate) fn stop(&self) -> &StopSignal {
        &self.stop
    }

    /// Stops the work because of `error`, which is raised once it has stopped; the first such
    /// error wins.
    pub(crate) fn raise(&self, error: PyErr) {
        self.raised
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get_or_insert(error);
        self.stop.request();
    }

    /// Runs `work` on a thread of its own with the lock released until it returns; then the
    /// first exception raised meanwhile (a `KeyboardInterrupt`, a callback's), or its value.
    pub(crate) fn wait<T: Send>(
        &self,
        py: Python<'_>,
        work: impl FnOnce() -> T + Send,
    ) -> PyResult<T> {
        let value = py.detach(|| {
            thread::scope(|scope| {
                let working = scope.spawn(work);
                while !working.is_finished() {
                    thread::sleep(SIGNAL_POLL);
                    if let Err(interrupt) = Python::attach(|py| py.check_signals()) {
                        self.raise(interrupt);
                    }
                }
                working.join()
            })
        });
        let value = value.unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        match self
            .raised
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        {
            Some(error) => Err(error),
            None => Ok(value),
        }
    }
}
