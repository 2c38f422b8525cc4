//! Topics: one latest-value channel per subscribed key.
//!
//! Many streams share a topic; each reads the newest snapshot when it wakes, so a slow stream
//! never blocks the index or another stream and never needs a queue (DESIGN.md "Data flow" 4).
//! The channel is this module's own ([`Receiver`]) rather than `tokio::sync::watch`: a proxy
//! watches each of its pod's ports on a topic of its own, so the channel is paid once per
//! stream, and tokio's (about 360 bytes, eight notifiers for many receivers) cost a sixth of a
//! `WatchPort` stream; this one is a lock, a version and a table of the waiting receivers'
//! wakers. A receiver waits by polling ([`Receiver::poll_changed`]), so a stream written as a
//! `Stream` by hand holds no pinned waiter (tokio's `Notified` is 64 bytes).
//!
//! A topic whose last receiver is gone is dropped by the index the next time it would
//! recompute it (a change to its group), or when the topics of its kind have doubled since they
//! were last swept. No task waits on each topic: with one topic per watched pod port, such a
//! task cost more than the stream itself. An idle topic is never stale: it is either current or
//! gone, since any change that would alter it drops it first.
//!
//! Topics of one kind may share their views (`SharedViews`): the inbound policy of every pod
//! of a Deployment on one port is the same value, held once however many pods are watched.

use parking_lot::{Mutex, RwLock, RwLockWriteGuard};
use slab::Slab;
use std::{
    cell::Cell,
    collections::HashMap,
    hash::{BuildHasher, Hash},
    ops::Deref,
    sync::{Arc, LazyLock, Weak},
    task::{Context, Poll, Waker},
    time::Instant,
};

/// When the index saw the change that each topic's current view comes from, by the view's
/// address: the start of the convergence a stream measures when it writes the view out
/// ([`change_seen_at`]). An entry lives while its view is its topic's current one, so an
/// address is never reused while it has an entry. Sharded: every publish and every stream's
/// write looks it up. A view shared by several topics ([`SharedViews`]) loses its entry when
/// the first of them replaces it; the others' streams, which write a change as soon as it is
/// published, have then mostly observed it already.
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

/// The publishing side of one topic: receivers see it close when the index drops it.
#[derive(Debug)]
pub struct Topic<V> {
    shared: Arc<Shared<V>>,
}

/// What a topic and its receivers share.
#[derive(Debug)]
struct Shared<V> {
    state: RwLock<State<V>>,
    /// The wakers of the receivers waiting for a newer view, each in its receiver's slot (the
    /// slot stays the receiver's until it is dropped). All are taken and woken on each publish
    /// and when the topic is dropped.
    waiters: Mutex<Slab<Option<Waker>>>,
}

#[derive(Debug)]
struct State<V> {
    view: Arc<V>,
    /// Counts the views published, so a receiver knows whether it has seen the current one.
    version: u64,
    closed: bool,
}

/// A subscriber of one topic: the latest view, and a wait for the next. Each receiver
/// remembers the version it last marked seen, as `tokio::sync::watch::Receiver` does, and
/// offers the same calls (`borrow`, `borrow_and_update`, `has_changed`, `changed`).
#[derive(Debug)]
pub struct Receiver<V> {
    shared: Arc<Shared<V>>,
    seen: u64,
    /// Its slot in the topic's `waiters`, once it has waited ([`NO_SLOT`] before).
    slot: u32,
}

/// The [`Receiver::slot`] of a receiver that never waited.
const NO_SLOT: u32 = u32::MAX;

/// The topic was dropped: no view will follow the current one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the topic is closed")]
pub struct Closed;

/// A view read from a topic; dereferences to its `Arc`, as `watch::Ref` does.
#[derive(Debug)]
pub struct Ref<V>(Arc<V>);

impl<V> Deref for Ref<V> {
    type Target = Arc<V>;

    fn deref(&self) -> &Arc<V> {
        &self.0
    }
}

impl<V> Drop for Topic<V> {
    fn drop(&mut self) {
        let mut state = self.shared.state.write();
        state.closed = true;
        let key = seen_key(&state.view);
        drop(state);
        seen_shard(key).lock().remove(&key);
        self.shared.wake_all();
    }
}

impl<V: PartialEq> Topic<V> {
    /// A topic holding `initial`.
    pub fn new(initial: Arc<V>) -> Self {
        Self {
            shared: Arc::new(Shared {
                state: RwLock::new(State {
                    view: initial,
                    version: 0,
                    closed: false,
                }),
                waiters: Mutex::new(Slab::new()),
            }),
        }
    }

    /// A new receiver; its first `borrow()` is the current snapshot, which it counts as seen.
    pub fn subscribe(&self) -> Receiver<V> {
        let seen = self.shared.state.read().version;
        Receiver {
            shared: self.shared.clone(),
            seen,
            slot: NO_SLOT,
        }
    }

    /// Publishes `view`, allocated by `views`, unless it equals the current snapshot; returns
    /// whether it was published.
    fn publish(&self, view: V, views: &mut impl ViewAlloc<V>) -> bool {
        let state = self.shared.state.write();
        if *state.view == view {
            return false;
        }
        self.replace(state, views.alloc(view));
        true
    }

    /// Publishes `view` unless it equals the current snapshot; returns whether it was
    /// published. For topics outside an index (tests, tools).
    pub fn send(&self, view: Arc<V>) -> bool {
        let state = self.shared.state.write();
        if *state.view == *view {
            return false;
        }
        self.replace(state, view);
        true
    }

    fn replace(&self, mut state: RwLockWriteGuard<'_, State<V>>, view: Arc<V>) {
        let old = seen_key(&state.view);
        seen_shard(old).lock().remove(&old);
        state.view = view;
        state.version += 1;
        let new = seen_key(&state.view);
        let seen = APPLYING.get().unwrap_or_else(Instant::now);
        seen_shard(new).lock().insert(new, seen);
        drop(state);
        self.shared.wake_all();
    }

    /// Whether no receiver is left.
    pub fn is_idle(&self) -> bool {
        Arc::strong_count(&self.shared) == 1
    }
}

impl<V> Receiver<V> {
    /// The current view, without marking it seen.
    pub fn borrow(&self) -> Ref<V> {
        Ref(self.shared.state.read().view.clone())
    }

    /// The current view, marked seen.
    pub fn borrow_and_update(&mut self) -> Ref<V> {
        let state = self.shared.state.read();
        self.seen = state.version;
        Ref(state.view.clone())
    }

    /// Whether a view was published since the one last marked seen; [`Closed`] once the
    /// topic is dropped.
    pub fn has_changed(&self) -> Result<bool, Closed> {
        let state = self.shared.state.read();
        if state.closed {
            return Err(Closed);
        }
        Ok(state.version != self.seen)
    }

    /// Waits for a view newer than the one last marked seen and marks it seen (read it with
    /// [`Self::borrow`]); [`Closed`] when the topic is dropped first. Cancel-safe.
    pub async fn changed(&mut self) -> Result<(), Closed> {
        std::future::poll_fn(|cx| self.poll_changed(cx)).await
    }

    /// [`Self::changed`] as a poll: `Ready` once a view newer than the one last marked seen
    /// is published (marked seen) or the topic is dropped; `Pending` otherwise, with `cx`'s
    /// waker kept until the next publish (one slot per receiver, whatever the polls).
    pub fn poll_changed(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Closed>> {
        if let Some(ready) = self.check() {
            return Poll::Ready(ready);
        }
        {
            let mut waiters = self.shared.waiters.lock();
            match waiters.get_mut(self.slot as usize) {
                Some(Some(waker)) if waker.will_wake(cx.waker()) => {}
                Some(waiting) => *waiting = Some(cx.waker().clone()),
                None => {
                    // Grown one at a time while small: most topics have one receiver.
                    if waiters.len() == waiters.capacity() {
                        let more = waiters.capacity().max(1);
                        waiters.reserve_exact(more);
                    }
                    let slot = waiters.insert(Some(cx.waker().clone()));
                    match u32::try_from(slot) {
                        Ok(slot) if slot != NO_SLOT => self.slot = slot,
                        // Beyond four billion receivers: poll again rather than sleep.
                        _ => {
                            waiters.remove(slot);
                            cx.waker().wake_by_ref();
                        }
                    }
                }
            }
        }
        // Checked again once the waker is in: a publish before that woke nobody, but a
        // publish after it wakes this receiver.
        match self.check() {
            Some(ready) => Poll::Ready(ready),
            None => Poll::Pending,
        }
    }

    /// `Some` when a wait would end now: a newer view (marked seen), or the topic closed.
    fn check(&mut self) -> Option<Result<(), Closed>> {
        let state = self.shared.state.read();
        if state.version != self.seen {
            self.seen = state.version;
            return Some(Ok(()));
        }
        state.closed.then_some(Err(Closed))
    }
}

impl<V> Shared<V> {
    /// Wakes every waiting receiver (outside the lock, which they take to wait again).
    fn wake_all(&self) {
        let wakers: Vec<Waker> = self
            .waiters
            .lock()
            .iter_mut()
            .filter_map(|(_, waiting)| waiting.take())
            .collect();
        for waker in wakers {
            waker.wake();
        }
    }
}

impl<V> Drop for Receiver<V> {
    fn drop(&mut self) {
        if self.slot != NO_SLOT {
            let mut waiters = self.shared.waiters.lock();
            waiters.try_remove(self.slot as usize);
            // A topic that had many receivers does not keep their table once they are gone.
            if waiters.is_empty() {
                *waiters = Slab::new();
            }
        }
    }
}

impl<V> Receiver<V> {
    /// Waits until `ready` holds for the current view (checked first) and returns that view,
    /// marked seen; [`Closed`] when the topic is dropped first.
    pub async fn wait_for(
        &mut self,
        mut ready: impl FnMut(&Arc<V>) -> bool,
    ) -> Result<Ref<V>, Closed> {
        loop {
            let view = self.borrow_and_update();
            if ready(&view) {
                return Ok(view);
            }
            self.changed().await?;
        }
    }
}

impl<V: Send + Sync + 'static> Receiver<V> {
    /// A function reading the current view through a clone of this receiver, which it never
    /// marks seen (for the introspection registry, `linkerd_runtime::introspect`).
    pub fn current_view(&self) -> impl Fn() -> Arc<V> + Send + Sync + 'static {
        let shared = self.shared.clone();
        move || shared.state.read().view.clone()
    }
}

impl<V> Clone for Receiver<V> {
    /// A receiver that has seen what this one has; it waits in a slot of its own.
    fn clone(&self) -> Self {
        Self {
            shared: self.shared.clone(),
            seen: self.seen,
            slot: NO_SLOT,
        }
    }
}

/// How the topics of one kind allocate the views they publish.
pub(crate) trait ViewAlloc<V>: Default {
    fn alloc(&mut self, view: V) -> Arc<V>;
}

/// Each view is its own allocation.
#[derive(Debug, Default)]
pub(crate) struct NotShared;

impl<V> ViewAlloc<V> for NotShared {
    fn alloc(&mut self, view: V) -> Arc<V> {
        Arc::new(view)
    }
}

/// Equal views share one allocation: publishing a view equal to one a topic of the same kind
/// holds hands out that one. For views that many topics compute alike (the inbound policy of
/// each pod of a Deployment); the watch streams then also share its translation, which is
/// made once per view (`policy::views::SharedTranslations`).
///
/// Views are found by hash; the views no topic holds any more are forgotten when their hash
/// comes up again, and all at once whenever the table has doubled since the last sweep.
#[derive(Debug)]
pub(crate) struct SharedViews<V> {
    by_hash: HashMap<u64, Vec<Weak<V>>>,
    hasher: foldhash::fast::FixedState,
    /// Entries in `by_hash`, counting those gone since the last sweep.
    entries: usize,
    /// `entries` after the last sweep.
    swept: usize,
}

impl<V> Default for SharedViews<V> {
    fn default() -> Self {
        Self {
            by_hash: HashMap::new(),
            hasher: Default::default(),
            entries: 0,
            swept: 0,
        }
    }
}

/// Entries below which the table is not swept.
const SHARED_VIEWS_MIN_SWEEP: usize = 1024;

impl<V: Hash + Eq> ViewAlloc<V> for SharedViews<V> {
    fn alloc(&mut self, view: V) -> Arc<V> {
        let hash = self.hasher.hash_one(&view);
        let same_hash = self.by_hash.entry(hash).or_default();
        let before = same_hash.len();
        same_hash.retain(|v| v.strong_count() > 0);
        self.entries -= before - same_hash.len();
        if let Some(shared) = same_hash
            .iter()
            .filter_map(Weak::upgrade)
            .find(|shared| **shared == view)
        {
            return shared;
        }
        let view = Arc::new(view);
        same_hash.push(Arc::downgrade(&view));
        self.entries += 1;
        if self.entries >= (2 * self.swept).max(SHARED_VIEWS_MIN_SWEEP) {
            self.by_hash.retain(|_, views| {
                views.retain(|v| v.strong_count() > 0);
                !views.is_empty()
            });
            self.entries = self.by_hash.values().map(Vec::len).sum();
            self.swept = self.entries;
        }
        view
    }
}

impl<V> SharedViews<V> {
    /// The views held by a topic now (entries not yet swept are not counted).
    #[cfg(test)]
    pub(crate) fn live(&self) -> usize {
        self.by_hash
            .values()
            .flatten()
            .filter(|v| v.strong_count() > 0)
            .count()
    }
}

/// The topics of one kind of view, grouped by what invalidates them (a service, an IP) and
/// keyed within the group (port, hostname, client namespace, ...); `A` allocates their views
/// ([`NotShared`] or [`SharedViews`]).
#[derive(Debug)]
pub(crate) struct Topics<G, K, V, A = NotShared> {
    groups: HashMap<G, HashMap<K, Topic<V>>>,
    views: A,
    /// Topics created since the last sweep for idle ones.
    created: usize,
    /// Topics alive after the last sweep.
    swept: usize,
}

/// Topics created before the first sweep.
const TOPICS_MIN_SWEEP: usize = 256;

impl<G, K, V, A: Default> Default for Topics<G, K, V, A> {
    fn default() -> Self {
        Self {
            groups: HashMap::new(),
            views: A::default(),
            created: 0,
            swept: 0,
        }
    }
}

impl<G: Hash + Eq + Clone, K: Hash + Eq + Clone, V: PartialEq, A: ViewAlloc<V>> Topics<G, K, V, A> {
    /// A receiver of topic `(group, key)`, if it exists.
    pub(crate) fn get(&self, group: &G, key: &K) -> Option<Receiver<V>> {
        self.groups
            .get(group)
            .and_then(|t| t.get(key))
            .map(Topic::subscribe)
    }

    /// Creates topic `(group, key)` holding `view` and returns a receiver. Sweeps the idle
    /// topics first when as many topics were created since the last sweep as were alive after
    /// it (at least [`TOPICS_MIN_SWEEP`]), so idle topics never outnumber live ones by much.
    pub(crate) fn insert(&mut self, group: G, key: K, view: V) -> Receiver<V> {
        if self.created >= self.swept.max(TOPICS_MIN_SWEEP) {
            self.sweep();
        }
        self.created += 1;
        let topic = Topic::new(self.views.alloc(view));
        let rx = topic.subscribe();
        self.groups.entry(group).or_default().insert(key, topic);
        rx
    }

    /// Drops every topic without a receiver.
    pub(crate) fn sweep(&mut self) {
        self.groups.retain(|_, topics| {
            topics.retain(|_, t| !t.is_idle());
            !topics.is_empty()
        });
        self.created = 0;
        self.swept = self.len();
    }

    /// Recomputes every topic of `group` with `compute(key)`, publishing what changed and
    /// dropping topics nobody listens to any more.
    pub(crate) fn republish(&mut self, group: &G, compute: impl Fn(&K) -> V) {
        self.republish_from(group, |key, _| compute(key));
    }

    /// [`Self::republish`] for views that depend on the one they replace: `compute(key,
    /// current view)`.
    pub(crate) fn republish_from(&mut self, group: &G, compute: impl Fn(&K, &V) -> V) {
        let Some(topics) = self.groups.get_mut(group) else {
            return;
        };
        topics.retain(|_, t| !t.is_idle());
        for (key, topic) in topics.iter() {
            let current = topic.shared.state.read().view.clone();
            topic.publish(compute(key, &current), &mut self.views);
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

    /// The number of topics with receivers.
    pub(crate) fn len(&self) -> usize {
        self.groups
            .values()
            .flat_map(HashMap::values)
            .filter(|t| !t.is_idle())
            .count()
    }
}

/// A receiver of topic `(group, key)` among the topics `select` picks in an index's state,
/// creating the topic with `compute` (under the state's lock) if needed.
pub(crate) fn subscribe<S, G, K, V, A>(
    state: &Mutex<S>,
    select: fn(&mut S) -> &mut Topics<G, K, V, A>,
    group: G,
    key: K,
    compute: impl FnOnce(&S) -> V,
) -> Receiver<V>
where
    G: Hash + Eq + Clone,
    K: Hash + Eq + Clone,
    V: PartialEq,
    A: ViewAlloc<V>,
{
    let mut locked = state.lock();
    if let Some(rx) = select(&mut locked).get(&group, &key) {
        return rx;
    }
    let view = compute(&locked);
    select(&mut locked).insert(group, key, view)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_published_view_is_stamped_with_when_its_change_was_seen_until_replaced() {
        let topic = Topic::new(Arc::new(1u32));
        let first = topic.subscribe().borrow().clone();
        assert_eq!(change_seen_at(&first), None, "a first view is no change");

        let seen = {
            let _applying = ChangeSeen::now();
            let seen = APPLYING.get().unwrap();
            assert!(topic.publish(2, &mut NotShared));
            seen
        };
        assert_eq!(APPLYING.get(), None);
        let second = topic.subscribe().borrow().clone();
        assert_eq!(change_seen_at(&second), Some(seen));

        // Outside an event, the time of publishing.
        let before = Instant::now();
        assert!(topic.publish(3, &mut NotShared));
        let third = topic.subscribe().borrow().clone();
        assert_eq!(change_seen_at(&second), None, "replaced");
        assert!(change_seen_at(&third).unwrap() >= before);
        drop(topic);
        assert_eq!(change_seen_at(&third), None, "topic gone");
    }

    #[tokio::test]
    async fn identical_views_are_not_published() {
        let topic = Topic::new(Arc::new(1u32));
        let mut rx = topic.subscribe();
        assert!(!topic.publish(1, &mut NotShared));
        assert!(!rx.has_changed().unwrap());
        assert!(topic.publish(2, &mut NotShared));
        assert!(rx.has_changed().unwrap());
        assert_eq!(**rx.borrow_and_update(), 2);
        assert!(!topic.is_idle());
        drop(rx);
        assert!(topic.is_idle());
    }

    /// A proxy watches each port of its pod on a topic of its own: the channel is paid once
    /// per `WatchPort` stream (tokio's watch channel took 360 bytes).
    #[test]
    fn a_topic_channel_is_small() {
        let shared = std::mem::size_of::<Shared<u32>>();
        eprintln!("Shared: {shared} bytes");
        assert!(shared <= 80, "{shared} bytes");
        assert_eq!(std::mem::size_of::<Receiver<u32>>(), 24);
    }

    /// A waker that counts its wake-ups.
    struct CountingWaker(std::sync::atomic::AtomicUsize);

    impl std::task::Wake for CountingWaker {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    }

    #[test]
    fn the_waiters_table_goes_with_the_last_waiting_receiver() {
        let topic = Topic::new(Arc::new(1u32));
        let waker = Waker::from(Arc::new(CountingWaker(Default::default())));
        let mut cx = Context::from_waker(&waker);
        let mut receivers: Vec<_> = (0..1000).map(|_| topic.subscribe()).collect();
        for rx in &mut receivers {
            assert!(rx.poll_changed(&mut cx).is_pending());
        }
        assert!(topic.shared.waiters.lock().capacity() >= 1000);
        drop(receivers);
        assert_eq!(topic.shared.waiters.lock().capacity(), 0);
    }

    #[test]
    fn a_polled_receiver_keeps_one_slot_and_is_woken_once_per_publish() {
        let topic = Topic::new(Arc::new(1u32));
        let counter = Arc::new(CountingWaker(Default::default()));
        let waker = Waker::from(counter.clone());
        let mut cx = Context::from_waker(&waker);
        let woken = || counter.0.load(std::sync::atomic::Ordering::SeqCst);

        let mut rx = topic.subscribe();
        let mut other = topic.subscribe();
        for _ in 0..5 {
            assert!(rx.poll_changed(&mut cx).is_pending());
        }
        assert!(other.poll_changed(&mut cx).is_pending());
        assert_eq!(
            topic.shared.waiters.lock().len(),
            2,
            "one slot per receiver"
        );
        assert_eq!(
            topic.shared.waiters.lock().capacity(),
            2,
            "grown one at a time"
        );

        assert!(topic.send(Arc::new(2)));
        assert_eq!(woken(), 2);
        assert_eq!(rx.poll_changed(&mut cx), Poll::Ready(Ok(())));
        assert_eq!(**rx.borrow(), 2);
        // Woken only while waiting: `rx` took its view and did not wait again.
        assert!(other.poll_changed(&mut cx).is_ready());
        assert!(other.poll_changed(&mut cx).is_pending());
        assert!(topic.send(Arc::new(3)));
        assert_eq!(woken(), 3);

        // A clone waits in a slot of its own; a dropped receiver frees its slot.
        let mut clone = rx.clone();
        assert_eq!(clone.poll_changed(&mut cx), Poll::Ready(Ok(())));
        assert!(clone.poll_changed(&mut cx).is_pending());
        assert_eq!(topic.shared.waiters.lock().len(), 3);
        drop((rx, other));
        assert_eq!(topic.shared.waiters.lock().len(), 1);
        let mut last = topic.subscribe();
        assert!(last.poll_changed(&mut cx).is_pending());
        drop(last);

        // A dropped topic wakes its waiters, which then see it closed.
        drop(topic);
        assert_eq!(woken(), 4);
        assert_eq!(clone.poll_changed(&mut cx), Poll::Ready(Err(Closed)));
    }

    #[tokio::test]
    async fn a_receiver_wakes_for_the_newest_view_and_sees_the_topic_close() {
        let topic = Topic::new(Arc::new(1u32));
        let mut rx = topic.subscribe();
        let waiting = tokio::spawn(async move {
            rx.changed().await.unwrap();
            let view = **rx.borrow();
            (view, rx)
        });
        tokio::task::yield_now().await;
        assert!(topic.send(Arc::new(2)));
        let (view, mut rx) = waiting.await.unwrap();
        assert_eq!(view, 2);
        assert!(!rx.has_changed().unwrap(), "changed() marks the view seen");

        // Published while nobody waits: one wake-up, for the newest.
        assert!(topic.send(Arc::new(3)));
        assert!(topic.send(Arc::new(4)));
        rx.changed().await.unwrap();
        assert_eq!(**rx.borrow(), 4);
        assert!(!rx.has_changed().unwrap());

        // A waiter dropped before any publish leaves the receiver as it was (cancel-safe).
        let cancelled = tokio::time::timeout(std::time::Duration::from_millis(5), rx.changed());
        assert!(cancelled.await.is_err());
        assert!(topic.send(Arc::new(5)));
        let five = rx.wait_for(|v| **v >= 5).await.unwrap();
        assert_eq!(**five, 5);

        let mut late = topic.subscribe();
        let waiter = tokio::spawn(async move { late.wait_for(|v| **v == 7).await.map(|v| **v) });
        tokio::task::yield_now().await;
        assert!(topic.send(Arc::new(6)));
        assert!(topic.send(Arc::new(7)));
        assert_eq!(waiter.await.unwrap(), Ok(7));

        // A view published before the topic closes is still delivered, then Closed.
        drop(topic);
        assert_eq!(rx.has_changed(), Err(Closed));
        rx.changed().await.unwrap();
        assert_eq!(**rx.borrow(), 7);
        assert_eq!(rx.changed().await, Err(Closed));
    }

    #[test]
    fn equal_views_of_shared_topics_are_one_allocation() {
        let mut topics: Topics<&str, u16, String, SharedViews<String>> = Topics::default();
        let a = topics.insert("web-0", 80, "policy".to_string());
        let b = topics.insert("web-1", 80, "policy".to_string());
        let c = topics.insert("web-1", 9090, "other".to_string());
        assert!(Arc::ptr_eq(&a.borrow(), &b.borrow()));
        assert!(!Arc::ptr_eq(&a.borrow(), &c.borrow()));
        assert_eq!(topics.views.live(), 2);

        // A change makes one topic's view equal to another's: it is published as that one.
        topics.republish(&"web-1", |port| match port {
            80 => "changed".to_string(),
            _ => "policy".to_string(),
        });
        assert_eq!(**b.borrow(), "changed");
        assert!(Arc::ptr_eq(&a.borrow(), &c.borrow()));
        assert_eq!(topics.views.live(), 2);

        // Views no topic holds are dropped, whatever the table keeps.
        drop((a, b, c));
        topics.remove_group(&"web-0");
        topics.remove_group(&"web-1");
        assert_eq!(topics.views.live(), 0);
    }

    #[test]
    fn shared_views_forget_the_views_no_topic_holds() {
        let mut views = SharedViews::<u32>::default();
        for round in 0..10u32 {
            let held: Vec<Arc<u32>> = (0..1000).map(|i| views.alloc(round * 1000 + i)).collect();
            assert_eq!(views.live(), 1000);
            drop(held);
        }
        // Swept as the table doubles: at most twice the largest live set, plus one round.
        assert!(views.entries <= 3 * 1000, "{} entries", views.entries);
    }

    #[test]
    fn idle_topics_go_at_their_next_change_or_sweep() {
        let mut topics: Topics<u32, u16, u32> = Topics::default();
        let web = topics.insert(1, 80, 1);
        let admin = topics.insert(1, 9990, 1);
        let other = topics.insert(2, 80, 1);
        drop(admin);
        drop(other);
        assert_eq!(topics.len(), 1);
        // A change to group 1 drops its idle topic and publishes to the other.
        topics.republish(&1, |_| 2);
        assert_eq!(topics.groups[&1].len(), 1);
        assert_eq!(**web.borrow(), 2);
        // Group 2 is untouched: its idle topic waits for the sweep, holding a current view.
        assert_eq!(topics.groups[&2].len(), 1);
        let again = topics.get(&2, &80).expect("the idle topic");
        assert_eq!(**again.borrow(), 1);
        drop(again);

        // Topics created and dropped in bulk are swept as they double, never all kept.
        for i in 0..(4 * TOPICS_MIN_SWEEP as u32) {
            drop(topics.insert(100 + i, 80, i));
        }
        let kept: usize = topics.groups.values().map(HashMap::len).sum();
        assert!(kept <= TOPICS_MIN_SWEEP + 2, "{kept} topics kept");
        assert_eq!(topics.len(), 1);
        drop(web);
    }
}
