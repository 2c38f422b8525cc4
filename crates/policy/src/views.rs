//! The views a watch stream sends (spec/policy.md §4.9, §5.8, decision 3): the topic's current
//! view first, then only views that differ from the last one sent. A slow stream skips the
//! views it missed and reads the newest; it is never reset.
//!
//! The streams of one topic send the same view, so its translation is made once
//! ([`SharedTranslations`]) and sent by each of them as one [`Shared`] message.
//!
//! A stream is a [`ViewMessages`], a `Stream` written by hand: tens of thousands are open at
//! once, and `unfold` plus `take_until` over async functions held each stream's state twice
//! over (408 bytes against 184 for a `WatchPort` stream).

use futures::Stream;
use linkerd_index::topic;
use linkerd_runtime::{
    grpc::Shared,
    introspect::{StreamMeta, StreamRecord, StreamRegistry},
    shutdown::Shutdown,
};
use std::{
    cell::RefCell,
    collections::VecDeque,
    pin::Pin,
    sync::Arc,
    task::{Context, Poll, ready},
    time::Instant,
};
use thread_local::ThreadLocal;
use tonic::Status;

use crate::metrics::Rpc;

/// A topic's receiver and the view last taken from it.
pub(crate) struct DistinctViews<V> {
    rx: topic::Receiver<V>,
    last: Option<Arc<V>>,
    /// The stream's introspection record, told which view the client is up to date with.
    record: Option<StreamRecord<V>>,
    /// When the index saw the change of the view last returned (`last`; `None` for a first
    /// view), until the next call says the stream took it.
    handed: Option<Option<Instant>>,
}

/// The messages of the views translated lately, by view, so that the streams of a topic
/// translate its view once rather than once each. Each worker thread keeps its own
/// [`TRANSLATIONS_PER_THREAD`] (the streams of a topic wake together on a change, and a
/// thread's lookups then touch no memory another core writes); entries hold their views, so a
/// view's address is not reused while its entry lives, and the oldest goes first.
///
/// A view is keyed by its address, so the translation must depend on the view alone (and on
/// the translator, one per service).
pub(crate) struct SharedTranslations<V: Send + Sync, M: Send + Sync> {
    recent: ThreadLocal<RefCell<Recent<V, M>>>,
    /// Translations made, for tests.
    #[cfg(test)]
    translated: std::sync::atomic::AtomicUsize,
}

/// A thread's translations, newest first.
type Recent<V, M> = VecDeque<(Arc<V>, Shared<M>)>;

/// Translations kept per thread: the topics of one change's streams and a few changes in
/// flight, not every topic's (each translation is a message of a few KiB).
const TRANSLATIONS_PER_THREAD: usize = 16;

impl<V: PartialEq + Send + Sync + 'static> DistinctViews<V> {
    pub(crate) fn new(rx: topic::Receiver<V>) -> Self {
        Self {
            rx,
            last: None,
            record: None,
            handed: None,
        }
    }

    /// The same views, recorded in `streams` as a stream of `meta` whose messages are
    /// `translator`'s: a view is written out when the next one is asked for (a watch stream
    /// asks only once HTTP/2 took its last message), and a view equal to the last one sent is
    /// written out at once. The introspection API shows the translation of the view written
    /// out, made again when asked for: holding the message would keep a translation alive per
    /// stream once the shared cache lets it go.
    pub(crate) fn recorded<T: Translate<V>>(
        mut self,
        streams: &StreamRegistry,
        meta: StreamMeta,
        translator: Arc<T>,
    ) -> Self {
        let rx = &self.rx;
        self.record = Some(streams.open_views(meta, rx.current_view(), move |view| {
            (
                T::TYPE_NAME,
                prost::Message::encode_to_vec(&translator.translate(view)),
            )
        }));
        self
    }

    /// The stream's record, if it has one.
    pub(crate) fn record(&self) -> Option<&StreamRecord<V>> {
        self.record.as_ref()
    }

    /// The current view on the first call, then the next view not equal to the last one
    /// returned; `None` once the topic is gone (its target was deleted).
    #[cfg(test)]
    pub(crate) async fn next(&mut self) -> Option<Arc<V>> {
        std::future::poll_fn(|cx| self.poll_next(cx)).await
    }

    /// [`Self::next`] as a poll.
    pub(crate) fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Option<Arc<V>>> {
        if let (Some(record), Some(seen), Some(last)) =
            (&self.record, self.handed.take(), &self.last)
        {
            record.caught_up(last, true, seen);
        }
        loop {
            let first = self.last.is_none();
            if !first && ready!(self.rx.poll_changed(cx)).is_err() {
                return Poll::Ready(None);
            }
            let view = self.rx.borrow_and_update().clone();
            // Recomputations publish equal views under new `Arc`s: those are not news.
            let unchanged = self
                .last
                .as_ref()
                .is_some_and(|last| Arc::ptr_eq(last, &view) || **last == *view);
            if !unchanged {
                self.last = Some(view.clone());
                if self.record.is_some() {
                    // A stream's first message answers its request, not a change.
                    let seen = (!first)
                        .then(|| linkerd_index::change_seen_at(&view))
                        .flatten();
                    self.handed = Some(seen);
                }
                return Poll::Ready(Some(view));
            }
            if let Some(record) = &self.record {
                record.caught_up(&view, false, None);
            }
        }
    }
}

/// How a topic's view becomes the message its streams send: [`crate::InboundTranslator`] makes
/// an inbound `Server`, [`crate::OutboundTranslator`] an `OutboundPolicy`.
pub(crate) trait Translate<V>: Send + Sync + 'static {
    /// The proxy API message.
    type Message: prost::Message + Send + Sync + 'static;
    /// Its protobuf name, as the introspection API shows it.
    const TYPE_NAME: &'static str;
    fn translate(&self, view: &V) -> Self::Message;
}

/// The messages of one watch stream (`WatchPort`, `OutboundPolicies.Watch`): the translation
/// of each view [`DistinctViews`] returns, made once for the streams of the topic by
/// [`SharedTranslations`]. Ends (`None`, answered `OK`) when the topic is gone or at shutdown;
/// it never fails. Its record is told what it sent, and `rpc` counts each message and the
/// stream's end (and, for a `WatchPort` stream, its place in `inbound_port_subscribers`).
pub(crate) struct ViewMessages<V: Send + Sync, T: Translate<V>> {
    views: DistinctViews<V>,
    translator: Arc<T>,
    translations: Arc<SharedTranslations<V, T::Message>>,
    rpc: Rpc,
    shutdown: Shutdown,
}

impl<V, T> ViewMessages<V, T>
where
    V: PartialEq + Send + Sync + 'static,
    T: Translate<V>,
{
    pub(crate) fn new(
        views: DistinctViews<V>,
        translator: Arc<T>,
        translations: Arc<SharedTranslations<V, T::Message>>,
        rpc: Rpc,
        shutdown: Shutdown,
    ) -> Self {
        Self {
            views,
            translator,
            translations,
            rpc,
            shutdown,
        }
    }

    /// The next message; `None` once the topic is gone. Shutdown is not checked.
    fn poll_message(&mut self, cx: &mut Context<'_>) -> Poll<Option<Shared<T::Message>>> {
        let Some(view) = ready!(self.views.poll_next(cx)) else {
            return Poll::Ready(None);
        };
        let translator = &self.translator;
        let message = self
            .translations
            .get_or_translate(&view, |view| translator.translate(view));
        if let Some(record) = self.views.record() {
            record.sent(1, None);
        }
        self.rpc.sent();
        Poll::Ready(Some(message))
    }

    /// The next message, waited for; `None` once the topic is gone (shutdown not checked).
    #[cfg(test)]
    pub(crate) async fn next_message(&mut self) -> Option<Shared<T::Message>> {
        std::future::poll_fn(|cx| self.poll_message(cx)).await
    }
}

impl<V, T> Stream for ViewMessages<V, T>
where
    V: PartialEq + Send + Sync + 'static,
    T: Translate<V>,
{
    type Item = Result<Shared<T::Message>, Status>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        // Shutdown first, as `take_until` would: a stream with news still ends.
        if this.shutdown.poll_signaled(cx).is_ready() {
            return Poll::Ready(None);
        }
        this.poll_message(cx).map(|message| message.map(Ok))
    }
}

// === impl SharedTranslations ===

impl<V: Send + Sync, M: Send + Sync> SharedTranslations<V, M> {
    pub(crate) fn new() -> Self {
        Self {
            recent: ThreadLocal::new(),
            #[cfg(test)]
            translated: Default::default(),
        }
    }

    /// The message of `view`: the one translated earlier on this thread, or `translate`'s.
    pub(crate) fn get_or_translate(
        &self,
        view: &Arc<V>,
        translate: impl FnOnce(&V) -> M,
    ) -> Shared<M> {
        let recent = self.recent.get_or_default();
        if let Some((_, message)) = recent.borrow().iter().find(|(v, _)| Arc::ptr_eq(v, view)) {
            return message.clone();
        }
        #[cfg(test)]
        self.translated
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let message = Shared::new(translate(view));
        let mut recent = recent.borrow_mut();
        if recent.len() == TRANSLATIONS_PER_THREAD {
            recent.pop_back();
        }
        recent.push_front((view.clone(), message.clone()));
        message
    }

    /// The translations made so far.
    #[cfg(test)]
    pub(crate) fn translated(&self) -> usize {
        self.translated.load(std::sync::atomic::Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn current_view_first_then_only_changes() {
        let tx = topic::Topic::new(Arc::new(1));
        let mut views = DistinctViews::new(tx.subscribe());
        assert_eq!(views.next().await.as_deref(), Some(&1));
        // An equal view under a new Arc, then a different one: only the latter is sent.
        tx.send(Arc::new(1));
        tx.send(Arc::new(2));
        assert_eq!(views.next().await.as_deref(), Some(&2));
        tx.send(Arc::new(2));
        tx.send(Arc::new(3));
        tx.send(Arc::new(4));
        // A slow reader gets the newest view, not the ones in between.
        assert_eq!(views.next().await.as_deref(), Some(&4));
        drop(tx);
        assert_eq!(views.next().await, None);
    }

    #[test]
    fn a_view_is_translated_once_per_thread() {
        let translations = SharedTranslations::<u32, String>::new();
        let (one, two) = (Arc::new(1), Arc::new(2));
        let first = translations.get_or_translate(&one, |v| format!("view {v}"));
        let again = translations.get_or_translate(&one, |_| unreachable!("translated again"));
        assert_eq!(again.get(), "view 1");
        assert!(std::ptr::eq(first.get(), again.get()), "one message");
        // An equal view under another Arc is another view.
        let equal = Arc::new(1);
        translations.get_or_translate(&equal, |v| format!("view {v}"));
        translations.get_or_translate(&two, |v| format!("view {v}"));
        assert_eq!(translations.translated(), 3);
        std::thread::scope(|scope| {
            scope.spawn(|| translations.get_or_translate(&one, |v| format!("view {v} again")));
        });
        assert_eq!(translations.translated(), 4);
        // The oldest go once a thread holds more than it keeps.
        let others: Vec<_> = (0..TRANSLATIONS_PER_THREAD as u32).map(Arc::new).collect();
        for view in &others {
            translations.get_or_translate(view, |v| format!("view {v}"));
        }
        let evicted = translations.get_or_translate(&one, |v| format!("view {v} evicted"));
        assert_eq!(evicted.get(), "view 1 evicted");
    }
}
