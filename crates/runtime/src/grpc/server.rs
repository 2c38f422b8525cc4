//! The HTTP/2 server of the pod's gRPC APIs, with each connection's streams polled by the
//! connection's own task.
//!
//! hyper runs every HTTP/2 stream as a future it hands to an executor. tonic's server spawns
//! each on the runtime, so when one change reaches the thousands of watch streams a proxy
//! fleet holds, every stream is its own task: it encodes its update and wakes the
//! connection's task, which tokio then runs next (its LIFO slot) and which writes that one
//! frame to the socket. That was one `write` system call per update on the server and one
//! `read` on the client: about half of the server's CPU at 10,000 streams.
//!
//! Here the executor of a connection ([`ConnectionStreams`]) keeps the connection's streams,
//! and one task polls them all and then the connection: the updates that one change causes on
//! one connection leave in as few writes as HTTP/2's write buffer allows. Streams of different
//! connections still run in parallel on the runtime's workers.

use futures::{
    FutureExt, Stream, StreamExt,
    channel::mpsc,
    future::CatchUnwind,
    stream::FuturesUnordered,
    task::{ArcWake, AtomicWaker, waker_ref},
};
use hyper::body::{Body as HttpBody, Bytes, Frame, Incoming};
use hyper_util::rt::{TokioIo, TokioTimer};
use prost::bytes::BytesMut;
use std::{
    any::Any,
    convert::Infallible,
    future::Future,
    io,
    panic::AssertUnwindSafe,
    pin::{Pin, pin},
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    task::{Context, Poll},
    time::Duration,
};
use tokio::{
    io::{AsyncRead, AsyncWrite, ReadBuf},
    net::{TcpListener, TcpStream},
    sync::watch,
};
use tonic::{
    Status,
    body::Body,
    codegen::{Service, http},
};

/// HTTP/2 settings for the pod's watch APIs: many long-lived streams per connection (every
/// watch of one proxy shares its connection).
#[derive(Clone, Copy, Debug)]
pub struct Http2Settings {
    /// `SETTINGS_MAX_CONCURRENT_STREAMS` the server announces.
    pub max_concurrent_streams: u32,
    /// How long connections have to close after shutdown starts (5 s, as the pod's other
    /// servers, spec/sp-validator-and-pod.md §b.1); those still open then are dropped, so a
    /// client that never reads or never speaks cannot hold the process up.
    pub drain_timeout: Duration,
    /// Bytes a stream may have queued for sending before hyper stops handing HTTP/2 its
    /// response's chunks (16 KiB, one frame of the default `SETTINGS_MAX_FRAME_SIZE`; hyper's
    /// default is 400 KiB). hyper polls a response body for its next chunk before it has
    /// send capacity, keeps that chunk, and queues it once the stream's queue is below this
    /// bound and its window is open; a larger chunk is still queued whole. So a stream whose
    /// client stops reading holds at most this much queued plus one chunk, whatever windows
    /// the client advertises. The watch streams ([`super::WatchStreams`]) are held to one
    /// unsent message by their body, which makes no chunk while the previous one is queued;
    /// this bound keeps the other responses (tonic's encoder) small too. Values over
    /// `u32::MAX` count as `u32::MAX`.
    pub max_send_buffer_size: usize,
    /// After this long without a frame from the client (10 s), the server sends an HTTP/2
    /// `PING`; a connection whose client does not answer within `keep_alive_timeout` (20 s) is
    /// closed. A proxy whose node vanished (no FIN, no RST) then does not hold its streams, and
    /// their memory, forever; Go's listeners, upstream, use TCP keepalive to the same end.
    pub keep_alive_interval: Duration,
    /// See `keep_alive_interval`.
    pub keep_alive_timeout: Duration,
    /// How long a new connection has to send the HTTP/2 connection preface (10 s; proxies send
    /// it at once). One that has not is closed: idle sockets that never speak would otherwise
    /// hold file descriptors forever. grpc-go bounds its handshake the same way.
    pub preface_timeout: Duration,
    /// How long a request has for its message and its end (the client's half-close) to arrive
    /// once its headers have (10 s; a proxy sends them at once). One that has not is answered
    /// `DEADLINE_EXCEEDED` ("the request message did not arrive …" or "the request did not end
    /// …"): every API here takes one request message, which tonic reads to the end before it
    /// calls the method, and a stream waiting for it would otherwise hold its memory, and hold
    /// up a graceful shutdown, until its connection closes.
    pub request_body_timeout: Duration,
}

impl Default for Http2Settings {
    fn default() -> Self {
        Self {
            max_concurrent_streams: 10_000,
            drain_timeout: Duration::from_secs(5),
            max_send_buffer_size: 16 << 10,
            keep_alive_interval: Duration::from_secs(10),
            keep_alive_timeout: Duration::from_secs(20),
            preface_timeout: Duration::from_secs(10),
            request_body_timeout: Duration::from_secs(10),
        }
    }
}

/// How long the server waits after a failed accept (such as running out of file
/// descriptors) before accepting again, rather than failing in a busy loop.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// What [`serve`] serves: a gRPC service of tonic's bodies, shared (`Sync`) by the requests of
/// a connection while they wait for their bodies.
pub trait GrpcService:
    Service<
        http::Request<Body>,
        Response = http::Response<Body>,
        Error = Infallible,
        Future: Send + 'static,
    > + Clone
    + Send
    + Sync
    + 'static
{
}

impl<S> GrpcService for S where
    S: Service<
            http::Request<Body>,
            Response = http::Response<Body>,
            Error = Infallible,
            Future: Send + 'static,
        > + Clone
        + Send
        + Sync
        + 'static
{
}

/// Where the server is in its life; every connection watches it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Serving,
    /// Shutdown started: connections close gracefully.
    Draining,
    /// The drain deadline passed: connections still open are dropped.
    Closed,
}

/// Serves `routes` (a tonic `Routes`, `prepare`d, or [`super::WatchStreams`] in front of one)
/// over HTTP/2 (gRPC; no HTTP/1) on the connections accepted from `listener` (with
/// `TCP_NODELAY`, see [`super::incoming`]) until `shutdown` completes. Then it stops
/// accepting and asks every connection to close gracefully (`GOAWAY`; open streams finish as
/// their services end them). It returns once all are closed, or after
/// [`Http2Settings::drain_timeout`], when it drops those still open.
///
/// Errors: none after the listener is bound. A failed connection is logged at debug level; a
/// failed accept is logged and retried after `ACCEPT_BACKOFF`.
pub async fn serve<S: GrpcService>(
    listener: TcpListener,
    routes: S,
    settings: Http2Settings,
    shutdown: impl Future<Output = ()>,
) {
    serve_incoming(super::incoming(listener), routes, settings, shutdown).await
}

async fn serve_incoming<S: GrpcService>(
    incoming: impl Stream<Item = io::Result<TcpStream>>,
    routes: S,
    settings: Http2Settings,
    shutdown: impl Future<Output = ()>,
) {
    // Every connection holds a receiver, so `closed()` says when all have ended.
    let (phase, watched) = watch::channel(Phase::Serving);
    let mut shutdown = pin!(shutdown);
    // Scoped so that the listener closes as soon as the loop ends: a client connecting while
    // the server drains is refused rather than left waiting.
    {
        let mut incoming = pin!(incoming);
        let mut failed_accepts = 0u64;
        loop {
            tokio::select! {
                () = &mut shutdown => break,
                accepted = incoming.next() => match accepted {
                    Some(Ok(tcp)) => {
                        if failed_accepts > 0 {
                            tracing::info!(failed = failed_accepts, "accepting connections again");
                            failed_accepts = 0;
                        }
                        let connection = serve_connection(tcp, routes.clone(), settings, watched.clone());
                        tokio::spawn(connection);
                    }
                    Some(Err(error)) => {
                        // Once per run of failures: out of file descriptors, every retry fails.
                        if failed_accepts == 0 {
                            tracing::warn!(%error, "failed to accept a connection; retrying every 100 ms until one succeeds");
                        }
                        failed_accepts += 1;
                        tokio::select! {
                            () = &mut shutdown => break,
                            () = tokio::time::sleep(ACCEPT_BACKOFF) => {}
                        }
                    }
                    None => break,
                },
            }
        }
    }
    drop(watched);
    let _ = phase.send(Phase::Draining);
    if tokio::time::timeout(settings.drain_timeout, phase.closed())
        .await
        .is_err()
    {
        tracing::warn!(
            connections = phase.receiver_count(),
            "connections still open after the drain timeout; closing them"
        );
        let _ = phase.send(Phase::Closed);
        phase.closed().await;
    }
}

/// Serves one connection, its streams polled by this future; closes it gracefully once
/// `phase` is draining, and drops it once it is closed.
async fn serve_connection<S: GrpcService>(
    tcp: TcpStream,
    routes: S,
    settings: Http2Settings,
    mut phase: watch::Receiver<Phase>,
) {
    let context = Arc::new(ConnectionContext {
        routes,
        connect_info: tonic::transport::server::TcpConnectInfo {
            local_addr: tcp.local_addr().ok(),
            remote_addr: tcp.peer_addr().ok(),
        },
        body_timeout: settings.request_body_timeout,
    });
    let service = hyper::service::service_fn(move |request: http::Request<Incoming>| {
        Box::pin(CountedIfAbandoned(RouteOnceReceived::Receiving {
            context: context.clone(),
            request,
            received: Received::default(),
            deadline: None,
        }))
    });
    let (mut streams, executor) = ConnectionStreams::new();
    let mut builder = hyper::server::conn::http2::Builder::new(executor);
    builder
        .timer(TokioTimer::new())
        .max_concurrent_streams(settings.max_concurrent_streams)
        .max_send_buf_size(settings.max_send_buffer_size.min(u32::MAX as usize))
        .keep_alive_interval(settings.keep_alive_interval)
        .keep_alive_timeout(settings.keep_alive_timeout);
    let read = Arc::new(AtomicUsize::new(0));
    let budget = Arc::new(AtomicUsize::new(READ_BUDGET));
    let io = CopiedFrames {
        tcp,
        read: read.clone(),
        budget: budget.clone(),
    };
    let mut connection = pin!(builder.serve_connection(TokioIo::new(io), service));
    let mut preface_deadline = pin!(tokio::time::sleep(settings.preface_timeout));
    let mut preface_checked = false;
    loop {
        // Streams first, then the connection: it writes what they all sent at once.
        let served = std::future::poll_fn(|cx| {
            budget.store(READ_BUDGET, Ordering::Relaxed);
            streams.poll_streams(cx);
            connection.as_mut().poll(cx)
        });
        tokio::select! {
            served = served => {
                if let Err(error) = served {
                    tracing::debug!(%error, "connection ended with an error");
                }
                return;
            }
            () = &mut preface_deadline, if !preface_checked => {
                if read.load(Ordering::Relaxed) < PREFACE.len() {
                    tracing::debug!("closing a connection that sent no HTTP/2 preface in time");
                    return;
                }
                preface_checked = true;
            }
            changed = phase.changed() => match changed.map(|()| *phase.borrow_and_update()) {
                Ok(Phase::Serving) => {}
                Ok(Phase::Draining) => connection.as_mut().graceful_shutdown(),
                // Closed, or the server is gone.
                Ok(Phase::Closed) | Err(_) => {
                    tracing::debug!("dropping a connection open past the drain timeout");
                    return;
                }
            },
        }
    }
}

/// What the requests of one connection share while they wait to be routed.
struct ConnectionContext<S> {
    routes: S,
    /// The peer, where tonic's `Request::remote_addr` looks for it (the introspection API
    /// shows each stream's).
    connect_info: tonic::transport::server::TcpConnectInfo,
    /// See [`Http2Settings::request_body_timeout`].
    body_timeout: Duration,
}

/// One request of a connection: it is routed once its body has arrived whole (the request
/// message and the end of the stream), and then it is the router's future.
///
/// A client opening a burst of streams sends all their HEADERS, then all their DATA, then all
/// their ends (a gRPC client half-closes after its one request message, in a frame of its
/// own). So in a burst of 2,000 `WatchPort` streams over 40 connections about 800 requests
/// waited at once, and what each held while it waited set the burst's peak, which the process
/// keeps resident:
/// - routed at once, each waited inside tonic's per-call future with its decode buffer (about
///   1.4 KB);
/// - routed on the first DATA frame, from an `async` block, each held 1.7 KB while it waited
///   for that frame (the block, 696 bytes, held the request twice; the header map h2 grew to
///   six 104-byte slots for three headers; the peer's extension, three more blocks), and then
///   tonic's future (about 900 bytes with its decode buffer) while it waited for the end,
///   which tonic reads before it calls the method.
///
/// This state keeps the request, what its body brought so far ([`Received`]) and a context
/// the connection's requests share; one that has to wait keeps its headers in a map of their
/// own size; the peer is added once it is routed. A body over [`super::MAX_REQUEST_BYTES`] is
/// routed as soon as it is over, for tonic to refuse, and its body keeps the deadline for the
/// rest ([`ReceivedBody`]). A request that has not arrived whole within the body timeout is
/// routed too, its body ending in `DEADLINE_EXCEEDED` ([`did_not_arrive`]): tonic answers
/// with that status, and the method's server counts the call as refused
/// ([`super::StreamingMethod::refused`]). hyper keeps each stream's future for the stream's
/// life, as large as it ever is: boxed, this one goes once the response head is ready.
#[expect(
    clippy::large_enum_variant,
    reason = "the future is boxed whole; boxing the waiting request too is one more allocation"
)]
enum RouteOnceReceived<S: GrpcService> {
    Receiving {
        context: Arc<ConnectionContext<S>>,
        request: http::Request<Incoming>,
        received: Received,
        /// Set only for a body that is not there at once: most of a burst's are.
        deadline: Option<Pin<Box<tokio::time::Sleep>>>,
    },
    Routed(Pin<Box<S::Future>>),
    /// The response was returned; hyper does not poll a finished future.
    Done,
}

impl<S: GrpcService> Future for RouteOnceReceived<S> {
    type Output = Result<http::Response<Body>, Infallible>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        if let Self::Routed(routed) = this {
            let response = std::task::ready!(routed.as_mut().poll(cx));
            *this = Self::Done;
            return Poll::Ready(response);
        }
        let Self::Receiving {
            context,
            request,
            received,
            deadline,
        } = this
        else {
            return Poll::Pending;
        };
        let ended = loop {
            match Pin::new(request.body_mut()).poll_frame(cx) {
                Poll::Ready(Some(Ok(frame))) => {
                    // Routed now, for tonic to refuse; the deadline still holds for its end.
                    if received.push(frame) > super::MAX_REQUEST_BYTES
                        || received.declared_len() > Some(super::MAX_REQUEST_BYTES)
                    {
                        break false;
                    }
                }
                Poll::Ready(Some(Err(error))) => {
                    // The client reset its stream (with any reason) or its connection broke:
                    // gone before its request arrived, which gRPC servers count `CANCELLED`.
                    received.error = Some(Status::cancelled(format!(
                        "the client abandoned its request: {error}"
                    )));
                    break true;
                }
                Poll::Ready(None) => break true,
                Poll::Pending => {
                    let deadline = match deadline {
                        Some(deadline) => deadline,
                        None => {
                            compact_headers(request.headers_mut());
                            deadline.insert(Box::pin(tokio::time::sleep(context.body_timeout)))
                        }
                    };
                    std::task::ready!(deadline.as_mut().poll(cx));
                    // Routed with what came, then the error: tonic answers with it.
                    received.error = Some(did_not_arrive(
                        received.data_len() > 0,
                        context.body_timeout,
                    ));
                    break true;
                }
            }
        };
        let Self::Receiving {
            context,
            request,
            received,
            deadline,
        } = std::mem::replace(this, Self::Done)
        else {
            return Poll::Pending;
        };
        let (mut parts, rest) = request.into_parts();
        parts.extensions.insert(context.connect_info.clone());
        // A body ending in `CANCELLED` is the client's reset, which tonic would read as an end
        // and answer `INTERNAL` for the missing message.
        if received
            .error
            .as_ref()
            .is_some_and(|e| e.code() == tonic::Code::Cancelled)
        {
            parts.extensions.insert(ResetByClient);
        }
        let body_timeout = context.body_timeout;
        let rest = match ended {
            true => None,
            false => Some(Rest {
                body: rest,
                deadline: deadline.unwrap_or_else(|| Box::pin(tokio::time::sleep(body_timeout))),
                body_timeout,
            }),
        };
        let body = Body::new(ReceivedBody { received, rest });
        let request = http::Request::from_parts(parts, body);
        *this = Self::Routed(Box::pin(context.routes.clone().call(request)));
        // The router's future has not been polled yet.
        self.poll(cx)
    }
}

/// A request's future as hyper holds it. One dropped before its request arrived whole (its
/// connection closed, or the server dropped it past the drain timeout) is routed as reset
/// ([`ResetByClient`]) on the way out, so that the method's server counts it `CANCELLED`, as
/// grpc-go counts a handler whose receive failed with the transport; hyper drops such a call
/// without routing it.
struct CountedIfAbandoned<S: GrpcService>(RouteOnceReceived<S>);

impl<S: GrpcService> Future for CountedIfAbandoned<S> {
    type Output = Result<http::Response<Body>, Infallible>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.0).poll(cx)
    }
}

impl<S: GrpcService> Drop for CountedIfAbandoned<S> {
    fn drop(&mut self) {
        let RouteOnceReceived::Receiving {
            context, request, ..
        } = &self.0
        else {
            return;
        };
        let mut abandoned = http::Request::new(Body::empty());
        *abandoned.method_mut() = request.method().clone();
        *abandoned.uri_mut() = request.uri().clone();
        abandoned
            .extensions_mut()
            .insert(context.connect_info.clone());
        abandoned.extensions_mut().insert(ResetByClient);
        // A watch method counts it when it is called: by this call in front of a router, at
        // the first poll behind one. Nothing waits for the answer.
        let routed = pin!(context.routes.clone().call(abandoned));
        let _ = routed.poll(&mut Context::from_waker(std::task::Waker::noop()));
    }
}

/// Put in the extensions of a request whose client reset its stream (`RST_STREAM`, whatever
/// its reason) or closed its connection before the request arrived whole:
/// [`super::WatchStreams`] counts the call `CANCELLED`, as grpc-go does, without handing it to
/// tonic, which would read the reset as the body's end.
#[derive(Clone, Copy, Debug)]
pub struct ResetByClient;

/// How a request that has not arrived whole within `body_timeout` of its headers ends:
/// `DEADLINE_EXCEEDED`, saying whether its message came.
fn did_not_arrive(message_came: bool, body_timeout: Duration) -> Status {
    let missing = match message_came {
        false => "the request message did not arrive",
        true => "the request did not end",
    };
    Status::deadline_exceeded(format!("{missing} within {body_timeout:?} of its headers"))
}

/// What a request body brought before it was routed: its data (nearly always one frame, the
/// request message; its end comes in an empty frame, or with it), its trailers, or the error
/// reading it failed with, in that order.
#[derive(Default)]
struct Received {
    data: ReceivedData,
    /// Boxed: a request nearly never has them, and every waiting request holds this.
    trailers: Option<Box<http::HeaderMap>>,
    error: Option<Status>,
}

/// The data frames of a request body, joined.
#[derive(Default)]
enum ReceivedData {
    #[default]
    None,
    /// One frame, as h2 handed it.
    One(Bytes),
    /// Several, copied one after the other (a client may send a message in many small
    /// frames: copied once each, not into a list of frames).
    Joined(BytesMut),
}

impl ReceivedData {
    fn bytes(&self) -> &[u8] {
        match self {
            ReceivedData::None => &[],
            ReceivedData::One(data) => data,
            ReceivedData::Joined(data) => data,
        }
    }
}

impl Received {
    /// Keeps `frame`; returns the bytes of data received so far.
    fn push(&mut self, frame: Frame<Bytes>) -> usize {
        match frame.into_data() {
            // An empty frame (the end of a stream, sent apart) tells the router nothing.
            Ok(data) if data.is_empty() => {}
            Ok(data) => {
                self.data = match std::mem::take(&mut self.data) {
                    ReceivedData::None => ReceivedData::One(data),
                    ReceivedData::One(first) => {
                        let mut joined = BytesMut::with_capacity(first.len() + data.len());
                        joined.extend_from_slice(&first);
                        joined.extend_from_slice(&data);
                        ReceivedData::Joined(joined)
                    }
                    ReceivedData::Joined(mut joined) => {
                        joined.extend_from_slice(&data);
                        ReceivedData::Joined(joined)
                    }
                }
            }
            Err(frame) => {
                if let Ok(trailers) = frame.into_trailers() {
                    self.trailers = Some(Box::new(trailers));
                }
            }
        }
        self.data_len()
    }

    /// The length the first message's gRPC prefix declares (bytes 1 to 4, big-endian), once
    /// its five bytes are in: a request declaring more than it may send is refused from it.
    fn declared_len(&self) -> Option<usize> {
        let prefix: [u8; 4] = self.data.bytes().get(1..5)?.try_into().ok()?;
        usize::try_from(u32::from_be_bytes(prefix)).ok()
    }

    /// The bytes of data received.
    fn data_len(&self) -> usize {
        self.data.bytes().len()
    }

    fn next(&mut self) -> Option<Result<Frame<Bytes>, Status>> {
        match std::mem::take(&mut self.data) {
            ReceivedData::One(data) => return Some(Ok(Frame::data(data))),
            ReceivedData::Joined(data) => return Some(Ok(Frame::data(data.freeze()))),
            ReceivedData::None => {}
        }
        if let Some(trailers) = self.trailers.take() {
            return Some(Ok(Frame::trailers(*trailers)));
        }
        self.error.take().map(Err)
    }

    fn is_empty(&self) -> bool {
        matches!(self.data, ReceivedData::None) && self.trailers.is_none() && self.error.is_none()
    }
}

/// Moves `headers` into a map of their own size: h2 grows the map it decodes a request's
/// headers into by doubling (six 104-byte slots for three headers).
fn compact_headers(headers: &mut http::HeaderMap) {
    // A name's further values are kept apart from the map's slots (though http grows the
    // map when one is appended).
    let mut compact = http::HeaderMap::with_capacity(headers.keys_len());
    let mut name = None;
    for (next, value) in std::mem::take(headers) {
        // `None`: another value of the previous name.
        if next.is_some() {
            name = next;
        }
        if let Some(name) = &name {
            compact.append(name, value);
        }
    }
    *headers = compact;
}

/// A request body as the router gets it: the frames read before it was routed
/// ([`RouteOnceReceived`]), then what is left of a body routed early for its size.
struct ReceivedBody {
    received: Received,
    /// `None` once the body ended or failed before it was routed.
    rest: Option<Rest>,
}

/// The rest of a body routed before its end, and the deadline it must end by: tonic reads a
/// request to its end with no deadline of its own.
struct Rest {
    body: Incoming,
    deadline: Pin<Box<tokio::time::Sleep>>,
    body_timeout: Duration,
}

impl HttpBody for ReceivedBody {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        if let Some(frame) = self.received.next() {
            return Poll::Ready(Some(frame));
        }
        let Some(rest) = &mut self.rest else {
            return Poll::Ready(None);
        };
        let polled = match Pin::new(&mut rest.body).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => return Poll::Ready(Some(Ok(frame))),
            Poll::Ready(Some(Err(error))) => Some(Err(Status::from_error(Box::new(error)))),
            Poll::Ready(None) => None,
            Poll::Pending => {
                std::task::ready!(rest.deadline.as_mut().poll(cx));
                Some(Err(did_not_arrive(true, rest.body_timeout)))
            }
        };
        self.rest = None;
        Poll::Ready(polled)
    }

    fn is_end_stream(&self) -> bool {
        self.received.is_empty() && self.rest.as_ref().is_none_or(|r| r.body.is_end_stream())
    }
}

/// A stream future `F` hyper hands to the executor, as its connection keeps it: a panic ends
/// its stream (hyper resets it) and not the connection's other streams, as when each stream
/// was a task of its own.
type Caught<F> = CatchUnwind<AssertUnwindSafe<F>>;

/// The streams of one connection, polled by the task that drives the connection.
///
/// hyper spawns every HTTP/2 stream of a connection as a future of one type, which the
/// executor is generic over but cannot name. Each set of `sets` keeps the streams of one such
/// type unboxed, in its own node: boxed, each stream held the box (128 bytes) and a node of
/// `FuturesUnordered` (80) for its life, two blocks instead of one. A connection has one set,
/// unless hyper spawns futures of other types too.
struct ConnectionStreams {
    spawned: mpsc::UnboundedReceiver<Box<dyn Spawned>>,
    sets: Vec<Box<dyn StreamSet>>,
    waker: Arc<StreamsWaker>,
}

/// A stream on its way from the executor to its connection's [`ConnectionStreams`] (boxed
/// only for the trip).
trait Spawned: Send {
    /// Adds the stream to the set of its type in `sets`, which it adds if there is none.
    fn push_into(self: Box<Self>, sets: &mut Vec<Box<dyn StreamSet>>);
}

/// The streams of one type: a `FuturesUnordered` of [`Caught`] futures.
trait StreamSet: Send {
    /// As `FuturesUnordered::poll_next`: `Ready(Some(()))` when a stream ended (a panic
    /// is logged), `Ready(None)` when none is left.
    fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Option<()>>;
    #[cfg(test)]
    fn len(&self) -> usize;
    fn as_any(&mut self) -> &mut dyn Any;
}

impl<F> Spawned for Caught<F>
where
    F: Future<Output = ()> + Send + 'static,
{
    fn push_into(self: Box<Self>, sets: &mut Vec<Box<dyn StreamSet>>) {
        let stream = *self;
        for set in sets.iter_mut() {
            if let Some(set) = set.as_any().downcast_mut::<FuturesUnordered<Caught<F>>>() {
                set.push(stream);
                return;
            }
        }
        let set = FuturesUnordered::new();
        set.push(stream);
        sets.push(Box::new(set));
    }
}

impl<F> StreamSet for FuturesUnordered<Caught<F>>
where
    F: Future<Output = ()> + Send + 'static,
{
    fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Option<()>> {
        self.poll_next_unpin(cx).map(|ended| {
            ended.map(|ended| {
                if ended.is_err() {
                    tracing::error!("a stream's handler panicked; the stream was reset");
                }
            })
        })
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        FuturesUnordered::len(self)
    }

    fn as_any(&mut self) -> &mut dyn Any {
        self
    }
}

/// The waker the streams are polled with: it wakes the connection's task and records that
/// it did, which tells a `FuturesUnordered` that stopped early (it returns after two of its
/// futures woke themselves, as an HTTP/2 stream does when it sends) from one with nothing
/// ready.
#[derive(Default)]
struct StreamsWaker {
    task: AtomicWaker,
    woken: AtomicBool,
}

impl ArcWake for StreamsWaker {
    fn wake_by_ref(this: &Arc<Self>) {
        this.woken.store(true, Ordering::Release);
        this.task.wake();
    }
}

/// How many times one poll of a connection goes back to streams that stopped early before
/// it lets the connection write: a bound on the time one connection holds a worker.
const STREAM_ROUNDS: usize = 64;

/// The executor hyper is given for one connection: it hands each stream to the connection's
/// [`ConnectionStreams`]. A stream spawned after the connection is gone is dropped, which
/// resets it, as the connection is closed anyway.
#[derive(Clone)]
struct StreamExecutor(mpsc::UnboundedSender<Box<dyn Spawned>>);

impl<F> hyper::rt::Executor<F> for StreamExecutor
where
    F: Future<Output = ()> + Send + 'static,
{
    fn execute(&self, stream: F) {
        let _ = self
            .0
            .unbounded_send(Box::new(AssertUnwindSafe(stream).catch_unwind()));
    }
}

impl ConnectionStreams {
    fn new() -> (Self, StreamExecutor) {
        let (tx, rx) = mpsc::unbounded();
        let streams = Self {
            spawned: rx,
            sets: Vec::new(),
            waker: Arc::default(),
        };
        (streams, StreamExecutor(tx))
    }

    /// The streams running.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.sets.iter().map(|set| set.len()).sum()
    }

    /// Polls every stream that is ready, including those the connection spawned since the
    /// last poll. They are polled from this task, so their wake-ups wake it, and all of them
    /// before the connection, so that it writes what they sent together.
    fn poll_streams(&mut self, cx: &mut Context<'_>) {
        while let Poll::Ready(Some(stream)) = self.spawned.poll_next_unpin(cx) {
            stream.push_into(&mut self.sets);
        }
        self.waker.task.register(cx.waker());
        let waker = waker_ref(&self.waker);
        let mut streams_cx = Context::from_waker(&waker);
        for _ in 0..STREAM_ROUNDS {
            self.waker.woken.store(false, Ordering::Release);
            let mut ended = false;
            let mut running = false;
            for set in &mut self.sets {
                match set.poll_next(&mut streams_cx) {
                    Poll::Ready(Some(())) => ended = true,
                    Poll::Ready(None) => {}
                    Poll::Pending => running = true,
                }
            }
            // A stream ended: the set returned early, with others maybe ready.
            if ended {
                continue;
            }
            // No stream left.
            if !running {
                return;
            }
            // Streams woke during the poll: go on with them, unless they only yielded because
            // the task's tokio budget is spent (they will run on the next poll).
            if !(self.waker.woken.load(Ordering::Acquire)
                && tokio::task::coop::has_budget_remaining())
            {
                return;
            }
        }
    }
}

/// Bytes one poll of a connection's task reads from its socket: about one request of the watch
/// APIs (a `PortSpec` with its headers is about 80 bytes, a `GetDestination` 100 to 200).
///
/// A proxy that reconnects opens all its streams at once, and hyper accepts every stream whose
/// frames one poll reads before any of them runs. Reading without a bound, a burst of
/// thousands of requests was all queued at once in h2: their request bodies, then their
/// responses, in per-connection buffers that keep their largest size, and the small DATA
/// frames that h2 counts against its flood budget until a stream takes them. Past about
/// 2,600 of those h2 closed the whole connection (`GOAWAY ENHANCE_YOUR_CALM`,
/// `too_many_data_frames`), and each stream of a burst of 2,000 held 700 more bytes of heap.
/// With this bound, the streams accepted in one poll take their bodies and send their
/// responses in the next, before more is read; the task yields to the runtime in between.
/// Those buffers grow to what one poll's streams queue, so the bound sets what they keep: a
/// stream of a 2,000-stream `WatchPort` burst held 1,550–1,610 bytes of heap with 512 bytes
/// per poll, 1,420 with 256, 1,350 with 128 and 1,330 with 64
/// (`crates/policy/tests/watch_port_memory.rs`); 128 costs a 64 KiB request 512 polls.
const READ_BUDGET: usize = 128;

/// A connection whose writes h2 batches: it reports no vectored writes, so h2 copies DATA
/// frames of up to 1 KiB into its 16 KiB write buffer instead of writing each frame over
/// 256 bytes on its own (h2 `FramedWrite`: it holds at most one frame it did not copy). The
/// updates of one change to many streams then leave in a few writes.
///
/// It reads at most [`READ_BUDGET`] bytes per poll of the connection's task, and counts the
/// bytes read, up to the length of the HTTP/2 preface, for [`Http2Settings::preface_timeout`].
struct CopiedFrames {
    tcp: TcpStream,
    read: Arc<AtomicUsize>,
    /// What the current poll of the connection's task may still read; the task refills it
    /// each time it is polled.
    budget: Arc<AtomicUsize>,
}

/// The HTTP/2 client connection preface (RFC 9113 §3.4).
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

impl AsyncRead for CopiedFrames {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let budget = self.budget.load(Ordering::Relaxed);
        if budget == 0 {
            // Spent for this poll: the task comes back once the runtime's other tasks ran.
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        let limit = budget.min(buf.remaining());
        let mut limited = ReadBuf::new(buf.initialize_unfilled_to(limit));
        let polled = Pin::new(&mut self.tcp).poll_read(cx, &mut limited);
        let n = limited.filled().len();
        buf.advance(n);
        self.budget.store(budget - n, Ordering::Relaxed);
        let read = self.read.load(Ordering::Relaxed);
        if read < PREFACE.len() {
            self.read.store(read + n, Ordering::Relaxed);
        }
        polled
    }
}

impl AsyncWrite for CopiedFrames {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.tcp).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.tcp).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.tcp).poll_shutdown(cx)
    }

    fn is_write_vectored(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic::service::Routes;
    use tracing_subscriber::layer::SubscriberExt;

    /// A stream as h2 makes it: each time it is woken it sends, which wakes it once more.
    struct Sender {
        polls: Arc<AtomicUsize>,
        sent: bool,
    }

    impl Sender {
        /// A stream that has not sent yet, counting its polls in `polls`.
        fn new(polls: &Arc<AtomicUsize>) -> Self {
            Self {
                polls: polls.clone(),
                sent: false,
            }
        }
    }

    impl Future for Sender {
        type Output = ();

        fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
            self.polls.fetch_add(1, Ordering::SeqCst);
            if !self.sent {
                self.sent = true;
                cx.waker().wake_by_ref();
            }
            Poll::Pending
        }
    }

    /// One poll of the connection's streams, as its task makes.
    async fn poll_once(streams: &mut ConnectionStreams) {
        std::future::poll_fn(|cx| {
            streams.poll_streams(cx);
            Poll::Ready(())
        })
        .await
    }

    /// A message sent in many small frames is copied once into one buffer: a list of frames
    /// (104 bytes each) would let a 64 KiB request hold 7 MB.
    #[test]
    fn a_request_body_received_in_small_frames_is_joined() {
        let mut received = Received::default();
        for byte in 0..10_000u32 {
            let len = received.push(Frame::data(Bytes::from(vec![byte as u8])));
            assert_eq!(len, byte as usize + 1);
        }
        received.push(Frame::data(Bytes::new()));
        let mut trailers = http::HeaderMap::new();
        trailers.insert("x-end", "1".parse().unwrap());
        received.push(Frame::trailers(trailers.clone()));
        assert!(!received.is_empty());

        let data = received.next().unwrap().unwrap().into_data().unwrap();
        assert_eq!(data.len(), 10_000);
        assert_eq!((data[0], data[1], data[9_999]), (0, 1, (9_999 % 256) as u8));
        let last = received.next().unwrap().unwrap().into_trailers().unwrap();
        assert_eq!(last, trailers);
        assert!(received.next().is_none());
        assert!(received.is_empty());
    }

    #[test]
    fn a_request_body_of_one_frame_is_handed_on_as_it_came() {
        let mut received = Received::default();
        let message = Bytes::from_static(b"\0\0\0\0\x02\x0a\x00");
        received.push(Frame::data(message.clone()));
        received.push(Frame::data(Bytes::new()));
        let data = received.next().unwrap().unwrap().into_data().unwrap();
        assert_eq!(data.as_ptr(), message.as_ptr(), "not copied");
        assert!(received.next().is_none());
    }

    #[test]
    fn compacted_headers_keep_every_value_in_a_map_of_their_size() {
        let mut headers = http::HeaderMap::new();
        headers.insert("te", "trailers".parse().unwrap());
        headers.insert("content-type", "application/grpc".parse().unwrap());
        headers.insert("user-agent", "linkerd2-proxy".parse().unwrap());
        assert_eq!(headers.capacity(), 6, "h2's map doubled as it grew");
        let before = headers.clone();
        compact_headers(&mut headers);
        assert_eq!(headers, before);
        assert_eq!(headers.capacity(), 3);

        headers.append("l5d-extra", "one".parse().unwrap());
        headers.append("l5d-extra", "two".parse().unwrap());
        compact_headers(&mut headers);
        let extras: Vec<_> = headers.get_all("l5d-extra").iter().collect();
        assert_eq!(extras, ["one", "two"]);
        assert_eq!(headers.len(), 5);
    }

    #[tokio::test]
    async fn one_poll_of_a_connection_polls_every_ready_stream() {
        let (mut streams, executor) = ConnectionStreams::new();
        let polls = Arc::new(AtomicUsize::new(0));
        for _ in 0..10 {
            hyper::rt::Executor::execute(&executor, Sender::new(&polls));
        }
        poll_once(&mut streams).await;
        // Each stream: the poll that sends and the one its own wake-up causes.
        assert_eq!(polls.load(Ordering::SeqCst), 20);
    }

    #[tokio::test]
    async fn a_panicking_stream_ends_alone() {
        let (mut streams, executor) = ConnectionStreams::new();
        let polls = Arc::new(AtomicUsize::new(0));
        hyper::rt::Executor::execute(&executor, async { panic!("a handler's bug") });
        hyper::rt::Executor::execute(&executor, Sender::new(&polls));
        poll_once(&mut streams).await;
        assert_eq!(polls.load(Ordering::SeqCst), 2);
        assert_eq!(streams.len(), 1, "the other stream goes on");
    }

    /// Counts the warnings logged.
    struct CountWarnings(Arc<AtomicUsize>);

    impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for CountWarnings {
        fn on_event(
            &self,
            event: &tracing::Event<'_>,
            _: tracing_subscriber::layer::Context<'_, S>,
        ) {
            if *event.metadata().level() == tracing::Level::WARN {
                self.0.fetch_add(1, Ordering::SeqCst);
            }
        }
    }

    // Two workers: a busy accept loop then fails this test instead of starving the timer.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn failed_accepts_are_retried_after_a_pause() {
        let attempts = Arc::new(AtomicUsize::new(0));
        let counted = attempts.clone();
        let failing = futures::stream::repeat_with(move || {
            counted.fetch_add(1, Ordering::SeqCst);
            Err(io::Error::from_raw_os_error(24)) // EMFILE
        });
        let warnings = Arc::new(AtomicUsize::new(0));
        let subscriber = tracing_subscriber::registry().with(CountWarnings(warnings.clone()));
        let _capture = tracing::subscriber::set_default(subscriber);
        serve_incoming(
            failing,
            Routes::default(),
            Http2Settings::default(),
            tokio::time::sleep(Duration::from_millis(500)),
        )
        .await;
        // One warning for the run of failures, not one per retry.
        assert_eq!(warnings.load(Ordering::SeqCst), 1);
        // About one attempt per pause until shutdown (more if the machine stalls the timer);
        // a busy loop makes hundreds of thousands.
        let attempts = attempts.load(Ordering::SeqCst);
        assert!((2..=20).contains(&attempts), "{attempts} accepts in 0.5 s");
    }
}
