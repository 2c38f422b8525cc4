//! For the gRPC servers of the pod: the HTTP/2 server ([`serve`]: each connection's streams
//! polled by one task, so that one change's updates share writes), accepted connections with
//! `TCP_NODELAY` ([`incoming`]), messages encoded once for every stream that sends them
//! ([`Shared`]), and watch streams that send those encodings without copying them
//! ([`WatchStreams`]).
//!
//! tonic encodes each response stream into a buffer that lives as long as the stream and grows
//! to the largest message sent (a first `Add` of a 500-endpoint Service is over 50 KiB), and it
//! encodes up to 32 KiB of ready messages ahead of HTTP/2. With thousands of idle streams those
//! buffers were most of the pod's memory, and a slow reader's stream held a batch of stale
//! messages. [`WatchStreams`] serves one server-streaming method of a generated tonic server
//! with a response body of its own: each message is the [`Shared`] gRPC frame, handed to HTTP/2
//! as a reference to the one encoding, and the next message is taken from the method's stream
//! only once HTTP/2 has written the previous one out. Request decoding, response headers and
//! errors before the first message are tonic's; the trailers are the ones tonic sends.

use futures::{Stream, task::AtomicWaker};
use hyper::body::Frame;
use std::{
    convert::Infallible,
    marker::PhantomData,
    pin::Pin,
    sync::{
        Arc, Mutex, OnceLock,
        atomic::{AtomicBool, Ordering},
    },
    task::{Context, Poll},
};
use tonic::{
    Status,
    body::Body,
    codec::{BufferSettings, Codec},
    codegen::{BoxFuture, Bytes, Service, StdError, http},
    server::{Grpc, NamedService, ServerStreamingService},
};
use tonic_prost::{ProstDecoder, ProstEncoder};

mod server;

pub use self::server::{GrpcService, Http2Settings, ResetByClient, serve};

/// The connections accepted on `listener`, with `TCP_NODELAY` set on each: without it a
/// small reply sent while an earlier one is unacknowledged waits for the peer's delayed ACK
/// (about 40 ms). `Server::tcp_nodelay` does not apply to connections the server is handed.
pub fn incoming(listener: tokio::net::TcpListener) -> tonic::transport::server::TcpIncoming {
    tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true))
}

/// A message many streams send: it is encoded once, as a gRPC frame (the uncompressed flag,
/// the 4-byte big-endian length, the protobuf), and every stream that sends it sends those
/// bytes (the watch APIs send one change to every stream that watches the same thing). As a
/// [`prost::Message`] it encodes and decodes as `M`.
#[derive(Debug, Default, PartialEq)]
pub struct Shared<M>(Arc<SharedMessage<M>>);

#[derive(Clone, Debug, Default)]
struct SharedMessage<M> {
    message: M,
    /// `message` as a gRPC frame, on first use.
    frame: OnceLock<Bytes>,
}

/// The gRPC frame prefix: the compressed flag and the length.
const PREFIX: usize = 5;

impl<M> Clone for Shared<M> {
    fn clone(&self) -> Self {
        Self(self.0.clone())
    }
}

impl<M: PartialEq> PartialEq for SharedMessage<M> {
    fn eq(&self, other: &Self) -> bool {
        self.message == other.message
    }
}

impl<M> Shared<M> {
    pub fn new(message: M) -> Self {
        Self(Arc::new(SharedMessage {
            message,
            frame: OnceLock::new(),
        }))
    }

    pub fn get(&self) -> &M {
        &self.0.message
    }
}

impl<M: Clone> Shared<M> {
    /// The message, cloned unless this was its last holder.
    pub fn into_inner(self) -> M {
        match Arc::try_unwrap(self.0) {
            Ok(shared) => shared.message,
            Err(shared) => shared.message.clone(),
        }
    }
}

impl<M: prost::Message> Shared<M> {
    /// The message's gRPC frame, encoded on first use; each call returns a reference to the
    /// same bytes. Errors: `OutOfRange` for a message over 4 GiB, which a frame cannot carry.
    pub fn frame(&self) -> Result<Bytes, Status> {
        let frame = self.encoded_frame();
        if frame.len() - PREFIX > u32::MAX as usize {
            return Err(Status::out_of_range(format!(
                "a message of {} bytes does not fit a gRPC frame",
                frame.len() - PREFIX
            )));
        }
        Ok(frame.clone())
    }

    fn encoded_frame(&self) -> &Bytes {
        self.0.frame.get_or_init(|| {
            let len = self.0.message.encoded_len();
            let mut frame = Vec::with_capacity(PREFIX + len);
            frame.push(0);
            // A length over u32::MAX is refused by `frame`.
            frame.extend_from_slice(&(len.min(u32::MAX as usize) as u32).to_be_bytes());
            self.0.message.encode_raw(&mut frame);
            Bytes::from(frame)
        })
    }

    fn encoded(&self) -> &[u8] {
        &self.encoded_frame()[PREFIX..]
    }
}

impl<M: prost::Message + Clone + Default> prost::Message for Shared<M> {
    fn encode_raw(&self, buf: &mut impl prost::bytes::BufMut) {
        buf.put_slice(self.encoded())
    }

    fn merge_field(
        &mut self,
        tag: u32,
        wire_type: prost::encoding::WireType,
        buf: &mut impl prost::bytes::Buf,
        ctx: prost::encoding::DecodeContext,
    ) -> Result<(), prost::DecodeError> {
        let shared = Arc::make_mut(&mut self.0);
        shared.frame = OnceLock::new();
        shared.message.merge_field(tag, wire_type, buf, ctx)
    }

    fn encoded_len(&self) -> usize {
        self.encoded().len()
    }

    fn clear(&mut self) {
        self.0 = Arc::default();
    }
}

/// Bytes a stream's request decode buffer starts with; a larger request grows it to fit.
pub const STREAM_BUFFER: usize = 512;

/// The largest request message the proxy APIs decode, in bytes; a larger one is answered
/// `OUT_OF_RANGE` ("decoded message length too large") from its length prefix, as soon as
/// its five bytes are in. [`serve`] reads a request body before routing it, up to this many
/// bytes and one frame more. A proxy's requests are a name, a port and a context token, under
/// 1 KiB; with tonic's 4 MiB default, each call could make the server buffer megabytes.
pub const MAX_REQUEST_BYTES: usize = 64 * 1024;

/// One server-streaming gRPC method, as [`WatchStreams`] serves it: its stream yields
/// [`Shared`] messages, sent without copying.
pub trait StreamingMethod: Clone + Send + Sync + 'static {
    type Request: prost::Message + Default + Send + 'static;
    type Response: prost::Message + Send + Sync + 'static;
    /// Usually a boxed stream: [`WatchBody`] holds it as it is, without boxing it again.
    type Stream: Stream<Item = Result<Shared<Self::Response>, Status>> + Send + Unpin + 'static;

    /// The method's gRPC path, `/package.Service/Method`.
    const PATH: &'static str;

    /// Answers one call, as the generated trait's method does.
    fn call(
        &self,
        request: tonic::Request<Self::Request>,
    ) -> BoxFuture<tonic::Response<Self::Stream>, Status>;

    /// Told of a call answered `code` without [`Self::call`]: its request did not decode
    /// (`INTERNAL`), was over [`MAX_REQUEST_BYTES`] (`OUT_OF_RANGE`), did not arrive whole
    /// within [`Http2Settings::request_body_timeout`] (`DEADLINE_EXCEEDED`), or its client
    /// reset the stream or closed its connection before it arrived (`CANCELLED`,
    /// [`ResetByClient`]). A server counts it as started and handled with `code`, as
    /// go-grpc-prometheus counts a call whose handler failed to receive its request; by
    /// default nothing is counted.
    fn refused(&self, code: tonic::Code) {
        let _ = code;
    }
}

/// The tonic service `S` (a generated server, a `Routes`, or another `WatchStreams`) with
/// method `M` served by [`WatchBody`]; every other path goes to `S`. Nest it to cover several
/// methods.
///
/// The servers put it in front of their `Routes` ([`serve`] serves any such service): a
/// response that went through the router has its body boxed twice more (tonic's router is
/// axum's, which boxes bodies its own way), and each watch stream would keep those boxes
/// for its life.
#[derive(Clone)]
pub struct WatchStreams<S, M> {
    inner: S,
    method: M,
}

impl<S, M> WatchStreams<S, M> {
    pub fn new(inner: S, method: M) -> Self {
        Self { inner, method }
    }

    /// The service and the method, to put the method in front of a router holding the
    /// service instead.
    pub fn into_parts(self) -> (S, M) {
        (self.inner, self.method)
    }
}

impl<S: NamedService, M> NamedService for WatchStreams<S, M> {
    const NAME: &'static str = S::NAME;
}

impl<S, M, B> Service<http::Request<B>> for WatchStreams<S, M>
where
    S: Service<http::Request<B>, Response = http::Response<Body>, Error = Infallible>,
    S::Future: Send + 'static,
    M: StreamingMethod,
    B: tonic::codegen::Body + Send + 'static,
    B::Error: Into<StdError> + Send + 'static,
{
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        if request.uri().path() != M::PATH {
            return Box::pin(self.inner.call(request));
        }
        if request.extensions().get::<ResetByClient>().is_some() {
            // Told here: tonic would answer `INTERNAL` (no message), and the client is gone.
            self.method.refused(tonic::Code::Cancelled);
            let status =
                Status::cancelled("the client reset the stream before its request arrived");
            return Box::pin(std::future::ready(Ok(status.into_http())));
        }
        // tonic decodes the request and builds the response head (or the error); the method's
        // stream is taken out of its hands and sent by a `WatchBody`.
        let called = Arc::new(Mutex::new(Called::Not));
        let method = Method {
            method: self.method.clone(),
            called: called.clone(),
        };
        let refused = self.method.clone();
        Box::pin(async move {
            let mut grpc = Grpc::new(DecodeOnly::<M>(PhantomData))
                .max_decoding_message_size(MAX_REQUEST_BYTES);
            let response = grpc.server_streaming(method, request).await;
            let called = std::mem::replace(
                &mut *called.lock().unwrap_or_else(|e| e.into_inner()),
                Called::Not,
            );
            Ok(match called {
                Called::Streaming(stream) => {
                    let (head, _empty) = response.into_parts();
                    http::Response::from_parts(head, Body::new(WatchBody::new(stream)))
                }
                // The method failed, and counted that itself.
                Called::Failed => response,
                Called::Not => {
                    if let Some(status) = Status::from_header_map(response.headers()) {
                        tracing::debug!(path = M::PATH, %status, "refused a call before its method");
                        refused.refused(status.code());
                    }
                    response
                }
            })
        })
    }
}

/// Whether tonic called a [`Method`], and the stream it returned.
enum Called<S> {
    Not,
    Failed,
    Streaming(S),
}

/// `M` as tonic's server-streaming handler calls it: its stream is put in `called`, and
/// tonic gets an empty one.
struct Method<M: StreamingMethod> {
    method: M,
    called: Arc<Mutex<Called<M::Stream>>>,
}

impl<M: StreamingMethod> ServerStreamingService<M::Request> for Method<M> {
    type Response = M::Response;
    type ResponseStream = futures::stream::Empty<Result<M::Response, Status>>;
    type Future = BoxFuture<tonic::Response<Self::ResponseStream>, Status>;

    fn call(&mut self, request: tonic::Request<M::Request>) -> Self::Future {
        let call = self.method.call(request);
        let slot = self.called.clone();
        *slot.lock().unwrap_or_else(|e| e.into_inner()) = Called::Failed;
        Box::pin(async move {
            let (metadata, stream, extensions) = call.await?.into_parts();
            *slot.lock().unwrap_or_else(|e| e.into_inner()) = Called::Streaming(stream);
            Ok(tonic::Response::from_parts(
                metadata,
                futures::stream::empty(),
                extensions,
            ))
        })
    }
}

/// tonic's prost codec for `M`'s request, with a buffer of [`STREAM_BUFFER`] bytes; its
/// encoder only ever sees an empty stream.
struct DecodeOnly<M>(PhantomData<fn() -> M>);

impl<M: StreamingMethod> Codec for DecodeOnly<M> {
    type Encode = M::Response;
    type Decode = M::Request;
    type Encoder = ProstEncoder<M::Response>;
    type Decoder = ProstDecoder<M::Request>;

    fn encoder(&mut self) -> Self::Encoder {
        ProstEncoder::new(BufferSettings::new(0, 0))
    }

    fn decoder(&mut self) -> Self::Decoder {
        ProstDecoder::new(BufferSettings::new(STREAM_BUFFER, STREAM_BUFFER))
    }
}

/// The response body of a watch stream: each message of `S` is one data frame, the
/// [`Shared::frame`] bytes themselves (no copy, no encode buffer); then trailers with
/// `grpc-status` (and `grpc-message` when the stream ends with an error), as tonic sends them.
///
/// It takes the next message from `S` only once the previous frame has been released by its
/// consumer (HTTP/2 releases it once it has written all of it to the connection, which a
/// stream's flow-control window can hold back), so a stream whose peer does not read holds at
/// most one unsent message, and the next one is made from the newest state when it can go.
/// A consumer that keeps the frames it reads (e.g. one collecting the body) gets only the
/// first.
pub struct WatchBody<S> {
    /// `None` once the trailers went out.
    stream: Option<S>,
    /// Whether the last frame handed out is still held; `None` once it was seen released, so
    /// that an idle stream, as most are, holds no flag (64 bytes of heap each).
    in_flight: Option<Arc<InFlight>>,
}

struct InFlight {
    held: AtomicBool,
    released: AtomicWaker,
}

/// The bytes of one frame as handed to HTTP/2: a reference to the shared frame that tells the
/// body when it is released.
struct HandedFrame {
    frame: Bytes,
    in_flight: Arc<InFlight>,
}

impl AsRef<[u8]> for HandedFrame {
    fn as_ref(&self) -> &[u8] {
        &self.frame
    }
}

impl Drop for HandedFrame {
    fn drop(&mut self) {
        self.in_flight.held.store(false, Ordering::Release);
        self.in_flight.released.wake();
    }
}

impl<S> WatchBody<S> {
    pub fn new(stream: S) -> Self {
        Self {
            stream: Some(stream),
            in_flight: None,
        }
    }
}

impl<S, M> hyper::body::Body for WatchBody<S>
where
    S: Stream<Item = Result<Shared<M>, Status>> + Unpin,
    M: prost::Message,
{
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let this = self.get_mut();
        let Some(stream) = this.stream.as_mut() else {
            return Poll::Ready(None);
        };
        if let Some(in_flight) = &this.in_flight {
            if in_flight.held.load(Ordering::Acquire) {
                in_flight.released.register(cx.waker());
                if in_flight.held.load(Ordering::Acquire) {
                    return Poll::Pending;
                }
            }
            this.in_flight = None;
        }
        let status = match std::task::ready!(Pin::new(stream).poll_next(cx)) {
            Some(Ok(message)) => match message.frame() {
                Ok(frame) => {
                    let in_flight = Arc::new(InFlight {
                        held: AtomicBool::new(true),
                        released: AtomicWaker::new(),
                    });
                    let handed = Bytes::from_owner(HandedFrame {
                        frame,
                        in_flight: in_flight.clone(),
                    });
                    this.in_flight = Some(in_flight);
                    return Poll::Ready(Some(Ok(Frame::data(handed))));
                }
                Err(status) => status,
            },
            Some(Err(status)) => status,
            None => Status::ok(""),
        };
        this.stream = None;
        let mut trailers = http::HeaderMap::new();
        if let Err(invalid) = status.add_header(&mut trailers) {
            trailers.clear();
            let _ = invalid.add_header(&mut trailers);
        }
        Poll::Ready(Some(Ok(Frame::trailers(trailers))))
    }

    fn is_end_stream(&self) -> bool {
        self.stream.is_none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::{BodyExt, Full};
    use linkerd2_proxy_api::{
        destination::{GetDestination, NoEndpoints, Update, WeightedAddr, WeightedAddrSet, update},
        net::TcpAddress,
    };
    use prost::Message;
    use std::sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    };

    const PATH: &str = "/test.Service/Watch";

    /// The generated server's stand-in: answers every call with an empty `200`.
    #[derive(Clone, Default)]
    struct Generated(Arc<AtomicUsize>);

    impl Service<http::Request<Full<tonic::codegen::Bytes>>> for Generated {
        type Response = http::Response<Body>;
        type Error = Infallible;
        type Future = BoxFuture<Self::Response, Self::Error>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, _: http::Request<Full<tonic::codegen::Bytes>>) -> Self::Future {
            self.0.fetch_add(1, Ordering::SeqCst);
            Box::pin(async { Ok(http::Response::new(Body::empty())) })
        }
    }

    /// Answers with the given updates, recording the requests' paths.
    #[derive(Clone)]
    struct Watch {
        updates: Vec<Update>,
        requests: Arc<std::sync::Mutex<Vec<String>>>,
    }

    impl NamedService for Generated {
        const NAME: &'static str = "test.Service";
    }

    impl StreamingMethod for Watch {
        type Request = GetDestination;
        type Response = Update;
        type Stream = futures::stream::Iter<std::vec::IntoIter<Result<Shared<Update>, Status>>>;
        const PATH: &'static str = PATH;

        fn call(
            &self,
            request: tonic::Request<GetDestination>,
        ) -> BoxFuture<tonic::Response<Self::Stream>, Status> {
            self.requests
                .lock()
                .unwrap()
                .push(request.into_inner().path);
            let updates: Vec<_> = self
                .updates
                .iter()
                .map(|update| Ok(Shared::new(update.clone())))
                .collect();
            Box::pin(async move { Ok(tonic::Response::new(futures::stream::iter(updates))) })
        }
    }

    /// A gRPC frame: the uncompressed flag, the length, the message.
    fn frame(message: &impl Message) -> Vec<u8> {
        let body = message.encode_to_vec();
        let mut frame = vec![0];
        frame.extend_from_slice(&(body.len() as u32).to_be_bytes());
        frame.extend(body);
        frame
    }

    fn request(path: &str, message: &GetDestination) -> http::Request<Full<tonic::codegen::Bytes>> {
        http::Request::builder()
            .method("POST")
            .uri(format!("http://destination{path}"))
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .body(Full::new(frame(message).into()))
            .unwrap()
    }

    fn no_endpoints() -> Update {
        Update {
            update: Some(update::Update::NoEndpoints(NoEndpoints { exists: true })),
        }
    }

    /// An `Add` of `n` addresses, each with a `pod` label.
    fn large_add(n: u32) -> Update {
        let addrs = (0..n)
            .map(|i| WeightedAddr {
                addr: Some(TcpAddress::from(std::net::SocketAddr::from((
                    [10, 0, (i / 250) as u8, (i % 250) as u8],
                    8080,
                )))),
                weight: 10_000,
                metric_labels: [("pod".to_string(), format!("web-{i}"))].into(),
                ..Default::default()
            })
            .collect();
        Update {
            update: Some(update::Update::Add(WeightedAddrSet {
                addrs,
                metric_labels: Default::default(),
            })),
        }
    }

    #[test]
    fn a_shared_message_encodes_and_decodes_as_the_message() {
        let add = large_add(3);
        let shared = Shared::new(add.clone());
        assert_eq!(shared.encoded_len(), add.encoded_len());
        assert_eq!(shared.encode_to_vec(), add.encode_to_vec());
        // A clone shares the encoding; a second encode gives the same bytes.
        assert_eq!(shared.clone().encode_to_vec(), add.encode_to_vec());

        let decoded = Shared::<Update>::decode(add.encode_to_vec().as_slice()).unwrap();
        assert_eq!(decoded.get(), &add);
        // Merging into a message already encoded re-encodes it.
        let mut merged = shared.clone();
        merged
            .merge(no_endpoints().encode_to_vec().as_slice())
            .unwrap();
        assert_eq!(merged.get(), &no_endpoints());
        assert_eq!(merged.encode_to_vec(), no_endpoints().encode_to_vec());
        assert_eq!(shared.get(), &add, "the other holders keep theirs");
        assert_eq!(merged.into_inner(), no_endpoints());
    }

    #[tokio::test]
    async fn accepted_connections_have_tcp_nodelay() {
        use futures::StreamExt;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let mut accepted = incoming(listener);
        let _client = tokio::net::TcpStream::connect(addr).await.unwrap();
        let server_side = accepted.next().await.unwrap().unwrap();
        assert!(server_side.nodelay().unwrap());
    }

    #[tokio::test]
    async fn the_method_path_is_served_with_its_messages_whole_and_others_go_to_the_inner_service()
    {
        let add = large_add(300);
        assert!(
            add.encoded_len() > 10 * STREAM_BUFFER,
            "the Add is too small to test growth"
        );
        let generated = Generated::default();
        let watch = Watch {
            updates: vec![add.clone(), no_endpoints(), add.clone()],
            requests: Default::default(),
        };
        let mut service = WatchStreams::new(generated.clone(), watch.clone());
        let asked = GetDestination {
            path: "web.shop.svc.cluster.local:80".into(),
            ..Default::default()
        };

        let response = service.call(request(PATH, &asked)).await.unwrap();
        assert_eq!(response.headers()["content-type"], "application/grpc");
        let mut body = response.into_body();
        let mut got = Vec::new();
        // Each frame is dropped once read, as HTTP/2 drops it once written.
        let trailers = loop {
            let frame = body.frame().await.expect("trailers end the body").unwrap();
            let bytes = match frame.into_data() {
                Ok(bytes) => bytes,
                Err(frame) => break frame.into_trailers().expect("trailers"),
            };
            assert_eq!(bytes[0], 0, "uncompressed");
            let len = u32::from_be_bytes(bytes[1..5].try_into().unwrap()) as usize;
            assert_eq!(bytes.len(), 5 + len, "one message per frame");
            got.push(Update::decode(&bytes[5..]).unwrap());
        };
        assert_eq!(trailers["grpc-status"], "0");
        assert!(body.frame().await.is_none());
        assert_eq!(got, [add.clone(), no_endpoints(), add]);
        assert_eq!(*watch.requests.lock().unwrap(), [asked.path.as_str()]);
        assert_eq!(generated.0.load(Ordering::SeqCst), 0);

        let other = service
            .call(request("/test.Service/Other", &asked))
            .await
            .unwrap();
        assert_eq!(other.status(), http::StatusCode::OK);
        assert_eq!(generated.0.load(Ordering::SeqCst), 1);
        assert_eq!(watch.requests.lock().unwrap().len(), 1);
        assert_eq!(
            <WatchStreams<Generated, Watch> as NamedService>::NAME,
            "test.Service"
        );
    }

    #[test]
    fn a_watch_body_takes_the_next_message_once_the_last_frame_is_released() {
        use futures::FutureExt;
        let polled = Arc::new(AtomicUsize::new(0));
        let (add, none) = (Shared::new(large_add(2)), Shared::new(no_endpoints()));
        let messages = vec![Ok(add.clone()), Ok(none.clone())];
        let counted = polled.clone();
        let stream = futures::StreamExt::inspect(futures::stream::iter(messages), move |_| {
            counted.fetch_add(1, Ordering::SeqCst);
        });
        let mut body = WatchBody::new(stream);

        let first = body.frame().now_or_never().unwrap().unwrap().unwrap();
        let first = first.into_data().unwrap();
        // The shared encoding itself, not a copy.
        assert_eq!(first.as_ptr(), add.frame().unwrap().as_ptr());
        assert_eq!(Update::decode(&first[5..]).unwrap(), large_add(2));
        assert!(
            body.frame().now_or_never().is_none(),
            "the first frame is held"
        );
        assert_eq!(polled.load(Ordering::SeqCst), 1);

        drop(first);
        let second = body.frame().now_or_never().unwrap().unwrap().unwrap();
        assert_eq!(&second.into_data().unwrap()[..], &none.frame().unwrap()[..]);
        assert_eq!(polled.load(Ordering::SeqCst), 2);
        let trailers = body.frame().now_or_never().unwrap().unwrap().unwrap();
        let trailers = trailers.into_trailers().unwrap();
        assert_eq!(trailers["grpc-status"], "0");
        assert!(!trailers.contains_key("grpc-message"));
        assert!(hyper::body::Body::is_end_stream(&body));
    }

    #[test]
    fn a_watch_body_ends_an_erring_stream_with_its_status_in_the_trailers() {
        use futures::FutureExt;
        let messages: Vec<Result<Shared<Update>, Status>> =
            vec![Err(Status::not_found("service shop/web is gone: 100%"))];
        let mut body = WatchBody::new(futures::stream::iter(messages));
        let trailers = body.frame().now_or_never().unwrap().unwrap().unwrap();
        let trailers = trailers.into_trailers().unwrap();
        assert_eq!(trailers["grpc-status"], "5");
        assert_eq!(
            trailers["grpc-message"], "service%20shop/web%20is%20gone:%20100%25",
            "percent-encoded, as tonic sends it"
        );
        assert!(body.frame().now_or_never().unwrap().is_none());
    }
}
