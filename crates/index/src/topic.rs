//! Topics: one `tokio::sync::watch` channel per subscribed key.
//!
//! Many streams share a topic; each reads the newest snapshot when it wakes, so a slow stream
//! never blocks the index or another stream and never needs a queue (DESIGN.md "Data flow" 4).
//! The index drops a topic when its last receiver is gone.

use std::sync::Arc;
use tokio::sync::watch;

/// The publishing side of one topic.
#[derive(Debug)]
pub struct Topic<V> {
    id: u64,
    tx: watch::Sender<Arc<V>>,
}

impl<V: PartialEq> Topic<V> {
    /// A topic holding `initial`; `id` tells this topic apart from a later one for the same key.
    pub fn new(id: u64, initial: V) -> Self {
        let (tx, _) = watch::channel(Arc::new(initial));
        Self { id, tx }
    }

    pub fn id(&self) -> u64 {
        self.id
    }

    /// A new receiver; its first `borrow()` is the current snapshot.
    pub fn subscribe(&self) -> watch::Receiver<Arc<V>> {
        self.tx.subscribe()
    }

    /// Publishes `view` unless it equals the current snapshot; returns whether it was published.
    pub fn publish(&self, view: V) -> bool {
        self.tx.send_if_modified(|current| {
            if **current == view {
                return false;
            }
            *current = Arc::new(view);
            true
        })
    }

    /// Whether no receiver is left.
    pub fn is_idle(&self) -> bool {
        self.tx.receiver_count() == 0
    }

    /// Number of receivers (streams) subscribed.
    pub fn subscribers(&self) -> usize {
        self.tx.receiver_count()
    }

    /// A sender handle to wait on with `closed()`; it does not keep the topic alive.
    pub fn closed_handle(&self) -> watch::Sender<Arc<V>> {
        self.tx.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn identical_views_are_not_published() {
        let topic = Topic::new(1, 1u32);
        let mut rx = topic.subscribe();
        assert!(!topic.publish(1));
        assert!(!rx.has_changed().unwrap());
        assert!(topic.publish(2));
        assert!(rx.has_changed().unwrap());
        assert_eq!(**rx.borrow_and_update(), 2);
        assert!(!topic.is_idle());
        drop(rx);
        assert!(topic.is_idle());
    }
}
