//! How a run stops before its end: a request to stop early (Ctrl-C, SIGTERM), seen by every
//! tier that waits or works; and the crash points at which the crash tests kill the process.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// A run-wide stop request. Clones share it. The server waits on [`StopSignal::receiver`]
/// alongside its links, so a request wakes it at once; training checks
/// [`StopSignal::is_requested`] between steps, so workers give up within one step.
#[derive(Debug, Clone)]
pub struct StopSignal {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    requested: AtomicBool,
    wake: flume::Sender<()>,
    woken: flume::Receiver<()>,
}

impl Default for StopSignal {
    fn default() -> Self {
        let (wake, woken) = flume::bounded(1);
        Self {
            inner: Arc::new(Inner {
                requested: AtomicBool::new(false),
                wake,
                woken,
            }),
        }
    }
}

impl StopSignal {
    /// A signal that nothing has requested yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Asks the run to stop; later calls change nothing.
    pub fn request(&self) {
        if !self.inner.requested.swap(true, Ordering::SeqCst) {
            let _ = self.inner.wake.try_send(());
        }
    }

    /// Whether a stop has been requested.
    pub fn is_requested(&self) -> bool {
        self.inner.requested.load(Ordering::SeqCst)
    }

    /// Receives one message when a stop is requested, for waiting on it with other channels.
    pub fn receiver(&self) -> &flume::Receiver<()> {
        &self.inner.woken
    }
}

/// The environment variable naming a file (`config.json`, `checkpoint.fedsim`, …) after whose
/// first write the process kills itself; `NAME#N` names the `N`-th write of a file written
/// piece by piece (a record of `client-states.0.log`).
pub const CRASH_AFTER: &str = "FEDSIM_CRASH_AFTER";

/// Ends the process at once with SIGKILL, as `kill -9` would, if this, the `write`-th write of
/// `path` by this process (from 1), is the one [`CRASH_AFTER`] names: the crash tests stop a run
/// at an exact point of its folder's life this way, where polling for a file would race the
/// process.
pub fn crash_point(path: &Path, write: u64) {
    let Some(named) = std::env::var_os(CRASH_AFTER) else {
        return;
    };
    let named = named.to_string_lossy();
    let (name, nth) = match named.rsplit_once('#') {
        Some((name, nth)) => (name, nth.parse().unwrap_or(1)),
        None => (named.as_ref(), 1),
    };
    if write == nth && path.file_name().is_some_and(|file| file == name) {
        // SAFETY: kill with this process's own id and a valid signal number touches no memory.
        unsafe {
            libc::kill(libc::getpid(), libc::SIGKILL);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_is_seen_by_every_clone_and_wakes_one_waiter() {
        let signal = StopSignal::new();
        let clone = signal.clone();
        assert!(!clone.is_requested());
        signal.request();
        signal.request();
        assert!(clone.is_requested());
        assert!(clone.receiver().try_recv().is_ok());
        assert!(clone.receiver().try_recv().is_err());
    }
}
