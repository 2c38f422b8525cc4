//! Graceful shutdown: SIGINT or SIGTERM ends every open stream with `OK`, then the process.

use tokio::sync::watch;

/// A signal that flips once, when the process is asked to stop.
#[derive(Clone, Debug)]
pub struct Shutdown {
    rx: watch::Receiver<bool>,
}

/// The side that triggers a [`Shutdown`].
#[derive(Debug)]
pub struct Trigger {
    tx: watch::Sender<bool>,
}

/// A new, untriggered shutdown signal.
pub fn channel() -> (Trigger, Shutdown) {
    let (tx, rx) = watch::channel(false);
    (Trigger { tx }, Shutdown { rx })
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
    pub async fn signaled(mut self) {
        let _ = self.rx.wait_for(|stop| *stop).await;
    }
}
