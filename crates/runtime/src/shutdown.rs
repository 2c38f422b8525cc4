//! Graceful shutdown: SIGINT or SIGTERM ends every open stream with `OK`, then the process.

use futures::{
    FutureExt,
    future::{BoxFuture, Shared},
};
use std::future::Future;
use tokio::sync::watch;

/// A signal that flips once, when the process is asked to stop.
///
/// Every watch stream waits on it, so a waiter is small: a handle to one shared future (two
/// words, and a waker slot while it waits), not a receiver and its `changed()` future each
/// (about 180 bytes per stream).
#[derive(Clone)]
pub struct Shutdown {
    signaled: Shared<BoxFuture<'static, ()>>,
}

impl std::fmt::Debug for Shutdown {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shutdown")
            .field("signaled", &self.signaled.peek().is_some())
            .finish()
    }
}

/// The side that triggers a [`Shutdown`].
#[derive(Debug)]
pub struct Trigger {
    tx: watch::Sender<bool>,
}

/// A new, untriggered shutdown signal.
pub fn channel() -> (Trigger, Shutdown) {
    let (tx, mut rx) = watch::channel(false);
    let signaled = async move {
        let _ = rx.wait_for(|stop| *stop).await;
    };
    (
        Trigger { tx },
        Shutdown {
            signaled: signaled.boxed().shared(),
        },
    )
}

impl Trigger {
    /// Triggers the shutdown.
    pub fn trigger(&self) {
        self.tx.send_replace(true);
    }

    /// Waits for SIGINT or SIGTERM, then triggers.
    pub async fn on_signal(self) {
        let ctrl_c = tokio::signal::ctrl_c();
        #[cfg(unix)]
        {
            let mut term =
                match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                    Ok(term) => term,
                    Err(error) => {
                        tracing::warn!(%error, "cannot listen for SIGTERM");
                        let _ = ctrl_c.await;
                        self.trigger();
                        return;
                    }
                };
            tokio::select! {
                _ = ctrl_c => {}
                _ = term.recv() => {}
            }
        }
        #[cfg(not(unix))]
        let _ = ctrl_c.await;
        tracing::info!("shutting down");
        self.trigger();
    }
}

impl Shutdown {
    /// Resolves once shutdown is triggered (or its trigger is dropped).
    pub fn signaled(self) -> impl Future<Output = ()> + Send + Unpin + 'static {
        self.signaled
    }

    /// [`Self::signaled`] as a poll, for a stream written by hand: `Ready` once shutdown is
    /// triggered (and on every poll after), else `Pending` with `cx`'s waker kept.
    pub fn poll_signaled(&mut self, cx: &mut std::task::Context<'_>) -> std::task::Poll<()> {
        self.signaled.poll_unpin(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::FutureExt;

    #[tokio::test]
    async fn every_waiter_resolves_when_triggered() {
        let (trigger, shutdown) = channel();
        let mut waiters: Vec<_> = (0..3).map(|_| shutdown.clone().signaled()).collect();
        for waiter in &mut waiters {
            assert!(waiter.now_or_never().is_none());
        }
        trigger.trigger();
        for waiter in waiters {
            tokio::time::timeout(std::time::Duration::from_secs(5), waiter)
                .await
                .expect("signaled");
        }
        // A waiter made after the trigger resolves at once.
        assert!(shutdown.signaled().now_or_never().is_some());
    }

    #[tokio::test]
    async fn a_dropped_trigger_signals() {
        let (trigger, shutdown) = channel();
        drop(trigger);
        tokio::time::timeout(std::time::Duration::from_secs(5), shutdown.signaled())
            .await
            .expect("signaled");
    }

    #[test]
    fn a_waiter_is_small() {
        let (_trigger, shutdown) = channel();
        assert!(std::mem::size_of_val(&shutdown.signaled()) <= 16);
    }
}
