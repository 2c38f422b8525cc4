//! Topics: one `tokio::sync::watch` channel per subscribed key.
//!
//! Many streams share a topic; each reads the newest snapshot when it wakes, so a slow stream
//! never blocks the index or another stream and never needs a queue (DESIGN.md "Data flow" 4).
//! The index drops a topic when its last receiver is gone.

use parking_lot::Mutex;
use std::{
    cell::Cell,
    collections::HashMap,
    hash::Hash,
    sync::{
        Arc, LazyLock,
        atomic::{AtomicU64, Ordering},
    },
    time::Instant,
};
use tokio::sync::watch;

/// When the index saw the change that each topic's current view comes from, by the view's
/// address: the start of the convergence a stream measures when it writes the view out
/// ([`change_seen_at`]). An entry lives while its view is its topic's current one, so an
/// address is never reused while it has an entry. Sharded: every publish and every stream's
/// write looks it up.
static SEEN: LazyLock<[Mutex<HashMap<usize, Instant>>; SEEN_SHARDS]> =
    LazyLock::new(|| std::array::from_fn(|_| Mutex::default()));
const SEEN_SHARDS: usize = 16;

thread_local! {
    /// When the event being applied on this thread was seen ([`ChangeSeen`]).
    static APPLYING: Cell<Option<Instant>> = const { Cell::new(None) };
}

/// Marks the events applied on this thread, until dropped, as seen at one instant: the views
/// they publish are stamped with it rather than with the time of publishing.
pub(crate) struct ChangeSeen(Option<Instant>);

/// When the index saw the change that produced `view` (a watch event, a state-directory
/// read), while `view` is its topic's current view; `None` for a view no change produced (a
/// topic's first) or one already replaced.
pub fn change_seen_at<V>(view: &Arc<V>) -> Option<Instant> {
    let key = seen_key(view);
    seen_shard(key).lock().get(&key).copied()
}

fn seen_key<V>(view: &Arc<V>) -> usize {
    Arc::as_ptr(view) as *const () as usize
}

fn seen_shard(key: usize) -> &'static Mutex<HashMap<usize, Instant>> {
    // Allocations are at least 8-byte aligned: the low bits say nothing.
    &SEEN[(key >> 4) % SEEN_SHARDS]
}

impl ChangeSeen {
    pub(crate) fn now() -> Self {
        Self(APPLYING.replace(Some(Instant::now())))
    }
}

impl Drop for ChangeSeen {
    fn drop(&mut self) {
        APPLYING.set(self.0);
    }
}

/// The publishing side of one topic.
#[derive(Debug)]
pub struct Topic<V> {
    id: u64,
    tx: watch::Sender<Arc<V>>,
    /// Dropped with the topic: tells the task watching for its last receiver to let go of its
    /// sender handle, so receivers see the channel close.
    dropped: Option<tokio::sync::oneshot::Sender<()>>,
}

impl<V> Drop for Topic<V> {
    fn drop(&mut self) {
        let key = seen_key(&self.tx.borrow());
        seen_shard(key).lock().remove(&key);
    }
}

/// What the task that garbage-collects a topic holds: a sender handle to wait on for the last
/// receiver, and the signal that the index dropped the topic (then the handle must go too).
pub struct TopicWatch<V> {
    pub closed: watch::Sender<Arc<V>>,
    pub dropped: tokio::sync::oneshot::Receiver<()>,
}

impl<V: PartialEq> Topic<V> {
    /// A topic holding `initial`; `id` tells this topic apart from a later one for the same key.
    pub fn new(id: u64, initial: V) -> Self {
        let (tx, _) = watch::channel(Arc::new(initial));
        Self {
            id,
            tx,
            dropped: None,
        }
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
            let old = seen_key(current);
            seen_shard(old).lock().remove(&old);
            *current = Arc::new(view);
            let new = seen_key(current);
            let seen = APPLYING.get().unwrap_or_else(Instant::now);
            seen_shard(new).lock().insert(new, seen);
            true
        })
    }

    /// Whether no receiver is left.
    pub fn is_idle(&self) -> bool {
        self.tx.receiver_count() == 0
    }

    /// What a garbage-collecting task waits on. Its sender handle keeps the channel open, so
    /// the task must drop it once `dropped` fires (the index removed the topic).
    pub fn watch(&mut self) -> TopicWatch<V> {
        let (tx, dropped) = tokio::sync::oneshot::channel();
        self.dropped = Some(tx);
        TopicWatch {
            closed: self.tx.clone(),
            dropped,
        }
    }
}

/// The topics of one kind of view, grouped by what invalidates them (a service, an IP) and
/// keyed within the group (port, hostname, client namespace, ...).
#[derive(Debug)]
pub(crate) struct Topics<G, K, V> {
    groups: HashMap<G, HashMap<K, Topic<V>>>,
}

impl<G, K, V> Default for Topics<G, K, V> {
    fn default() -> Self {
        Self {
            groups: HashMap::new(),
        }
    }
}

impl<G: Hash + Eq + Clone, K: Hash + Eq + Clone, V: PartialEq> Topics<G, K, V> {
    /// A receiver of topic `(group, key)`, if it exists.
    pub(crate) fn get(&self, group: &G, key: &K) -> Option<watch::Receiver<Arc<V>>> {
        self.groups
            .get(group)
            .and_then(|t| t.get(key))
            .map(Topic::subscribe)
    }

    /// Creates topic `(group, key)` holding `view`, numbered `id`. Returns a receiver, and the
    /// sender handle to wait on for the topic's last receiver to go.
    pub(crate) fn insert(
        &mut self,
        group: G,
        key: K,
        id: u64,
        view: V,
    ) -> (watch::Receiver<Arc<V>>, TopicWatch<V>) {
        let mut topic = Topic::new(id, view);
        let rx = topic.subscribe();
        let watch = topic.watch();
        self.groups.entry(group).or_default().insert(key, topic);
        (rx, watch)
    }

    /// Drops topic `(group, key)` if it is still the one numbered `id` and has no receiver.
    /// Returns `false` while that topic lives on with receivers (wait again), `true` otherwise.
    pub(crate) fn drop_if_idle(&mut self, group: &G, key: &K, id: u64) -> bool {
        let Some(topics) = self.groups.get_mut(group) else {
            return true;
        };
        match topics.get(key) {
            Some(t) if t.id() == id && t.is_idle() => {
                topics.remove(key);
                if topics.is_empty() {
                    self.groups.remove(group);
                }
                true
            }
            Some(t) if t.id() == id => false,
            _ => true,
        }
    }

    /// Recomputes every topic of `group` with `compute(key)`, publishing what changed and
    /// dropping topics nobody listens to any more.
    pub(crate) fn republish(&mut self, group: &G, compute: impl Fn(&K) -> V) {
        let Some(topics) = self.groups.get_mut(group) else {
            return;
        };
        topics.retain(|_, t| !t.is_idle());
        for (key, topic) in topics.iter() {
            topic.publish(compute(key));
        }
        if topics.is_empty() {
            self.groups.remove(group);
        }
    }

    /// Drops every topic of `group`: their receivers see the channel close.
    pub(crate) fn remove_group(&mut self, group: &G) {
        self.groups.remove(group);
    }

    /// Drops every topic whose `(group, key)` satisfies `remove`: their receivers see the
    /// channel close.
    pub(crate) fn remove_where(&mut self, remove: impl Fn(&G, &K) -> bool) {
        self.groups.retain(|group, topics| {
            topics.retain(|key, _| !remove(group, key));
            !topics.is_empty()
        });
    }

    /// The groups that have topics.
    pub(crate) fn groups(&self) -> impl Iterator<Item = &G> {
        self.groups.keys()
    }

    /// The number of topics alive.
    pub(crate) fn len(&self) -> usize {
        self.groups.values().map(HashMap::len).sum()
    }
}

/// A receiver of topic `(group, key)` among the topics `select` picks in an index's state,
/// creating the topic with `compute` (under the state's lock) if needed. A task drops the topic
/// when its last receiver goes (linkerd2-proxy's "tasks end with their clients").
pub(crate) fn subscribe<S, G, K, V>(
    state: &Arc<Mutex<S>>,
    next_id: &AtomicU64,
    select: fn(&mut S) -> &mut Topics<G, K, V>,
    group: G,
    key: K,
    compute: impl FnOnce(&S) -> V,
) -> watch::Receiver<Arc<V>>
where
    S: Send + 'static,
    G: Hash + Eq + Clone + Send + 'static,
    K: Hash + Eq + Clone + Send + 'static,
    V: PartialEq + Send + Sync + 'static,
{
    let mut locked = state.lock();
    if let Some(rx) = select(&mut locked).get(&group, &key) {
        return rx;
    }
    let view = compute(&locked);
    let id = next_id.fetch_add(1, Ordering::Relaxed);
    let (rx, mut watch) = select(&mut locked).insert(group.clone(), key.clone(), id, view);
    drop(locked);
    let state = state.clone();
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = watch.closed.closed() => {}
                // Removed by the index (its workload was deleted): let go of the sender so
                // the receivers see the channel close.
                _ = &mut watch.dropped => return,
            }
            if select(&mut state.lock()).drop_if_idle(&group, &key, id) {
                return;
            }
        }
    });
    rx
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_published_view_is_stamped_with_when_its_change_was_seen_until_replaced() {
        let topic = Topic::new(1, 1u32);
        let first = topic.subscribe().borrow().clone();
        assert_eq!(change_seen_at(&first), None, "a first view is no change");

        let seen = {
            let _applying = ChangeSeen::now();
            let seen = APPLYING.get().unwrap();
            assert!(topic.publish(2));
            seen
        };
        assert_eq!(APPLYING.get(), None);
        let second = topic.subscribe().borrow().clone();
        assert_eq!(change_seen_at(&second), Some(seen));

        // Outside an event, the time of publishing.
        let before = Instant::now();
        assert!(topic.publish(3));
        let third = topic.subscribe().borrow().clone();
        assert_eq!(change_seen_at(&second), None, "replaced");
        assert!(change_seen_at(&third).unwrap() >= before);
        drop(topic);
        assert_eq!(change_seen_at(&third), None, "topic gone");
    }

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
