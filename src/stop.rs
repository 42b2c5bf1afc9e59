//! A request to stop a run early (Ctrl-C, SIGTERM), seen by every tier that waits or works.

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
