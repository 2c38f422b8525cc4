//! The views a watch stream sends (spec/policy.md §4.9, §5.8, decision 3): the topic's current
//! view first, then only views that differ from the last one sent. A slow stream skips the
//! views it missed and reads the newest; it is never reset.

use std::sync::Arc;
use tokio::sync::watch;

/// A topic's receiver and the view last taken from it.
pub(crate) struct DistinctViews<V> {
    rx: watch::Receiver<Arc<V>>,
    last: Option<Arc<V>>,
}

impl<V: PartialEq> DistinctViews<V> {
    pub(crate) fn new(rx: watch::Receiver<Arc<V>>) -> Self {
        Self { rx, last: None }
    }

    /// The current view on the first call, then the next view not equal to the last one
    /// returned; `None` once the topic is gone (its target was deleted).
    pub(crate) async fn next(&mut self) -> Option<Arc<V>> {
        loop {
            if self.last.is_some() {
                self.rx.changed().await.ok()?;
            }
            let view = self.rx.borrow_and_update().clone();
            // Recomputations publish equal views under new `Arc`s: those are not news.
            let unchanged = self
                .last
                .as_ref()
                .is_some_and(|last| Arc::ptr_eq(last, &view) || **last == *view);
            if !unchanged {
                self.last = Some(view.clone());
                return Some(view);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn current_view_first_then_only_changes() {
        let (tx, rx) = watch::channel(Arc::new(1));
        let mut views = DistinctViews::new(rx);
        assert_eq!(views.next().await.as_deref(), Some(&1));
        // An equal view under a new Arc, then a different one: only the latter is sent.
        tx.send(Arc::new(1)).unwrap();
        tx.send(Arc::new(2)).unwrap();
        assert_eq!(views.next().await.as_deref(), Some(&2));
        tx.send(Arc::new(2)).unwrap();
        tx.send(Arc::new(3)).unwrap();
        tx.send(Arc::new(4)).unwrap();
        // A slow reader gets the newest view, not the ones in between.
        assert_eq!(views.next().await.as_deref(), Some(&4));
        drop(tx);
        assert_eq!(views.next().await, None);
    }
}
