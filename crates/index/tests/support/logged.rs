//! Capturing what code logs, for the index's integration tests and its unit tests (which
//! include this file).

use std::{
    io::Write,
    sync::{Arc, Mutex},
};

/// The lines a capturing subscriber wrote.
#[derive(Clone, Default)]
pub struct Lines(Arc<Mutex<Vec<u8>>>);

impl Lines {
    /// What was written so far.
    pub fn text(&self) -> String {
        String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
    }

    fn subscriber(&self) -> impl tracing::Subscriber + Send + Sync + 'static {
        keep_interest_per_thread();
        let writer = self.clone();
        tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .finish()
    }
}

impl Write for Lines {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The log lines written while `f` runs.
#[allow(dead_code, reason = "not every test binary captures logs this way")]
pub fn logged<T>(f: impl FnOnce() -> T) -> (T, String) {
    let lines = Lines::default();
    let out = tracing::subscriber::with_default(lines.subscriber(), f);
    (out, lines.text())
}

/// Captures what the current thread logs until the guard is dropped: in a `#[tokio::test]`,
/// whose runtime polls every task on the test's thread, what its spawned tasks log too.
#[allow(
    dead_code,
    reason = "not every test binary captures the logs of its tasks"
)]
pub fn capture_thread() -> (tracing::subscriber::DefaultGuard, Lines) {
    let lines = Lines::default();
    let guard = tracing::subscriber::set_default(lines.subscriber());
    (guard, lines)
}

/// Sets a global subscriber that records nothing, once per process. tracing caches whether
/// each log line is wanted; while a single subscriber is registered, a line first reached on a
/// thread without one (another test, a task's thread) was cached as never wanted, and the
/// capturing test then saw nothing of it (a flaky test under load). With the global one
/// there are always two, and each line is asked of the subscriber of the thread writing it.
fn keep_interest_per_thread() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // Another global subscriber is as good; this one only needs to exist.
        let _ =
            tracing::subscriber::set_global_default(tracing::subscriber::NoSubscriber::default());
    });
}
