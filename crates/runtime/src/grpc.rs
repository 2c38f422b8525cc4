//! For the gRPC servers of the pod: the HTTP/2 server ([`serve`]: each connection's streams
//! polled by one task, so that one change's updates share writes), accepted connections with
//! `TCP_NODELAY` ([`incoming`]), messages encoded once for every stream that sends them
//! ([`Shared`]), and watch streams with small encode buffers ([`SmallBuffers`]).
//!
//! tonic encodes each response stream into a buffer that lives as long as the stream, 8 KiB
//! by default, and keeps the whole buffer allocated while any message cut from it is. The
//! pod's streams (`Get`, `GetProfile`, `WatchPort`, `Watch`) are idle nearly all their life
//! and their messages are a few KiB at most, so with thousands of streams that buffer was most
//! of each stream's memory. [`SmallBuffers`] serves one server-streaming method of a generated
//! tonic server with buffers that start at [`STREAM_BUFFER`] bytes and grow only to the
//! messages sent; the method's other paths stay the generated server's. Messages, framing and
//! status codes are unchanged: the same generated types go through tonic's prost codec.

use futures::Stream;
use std::{
    convert::Infallible,
    marker::PhantomData,
    sync::{Arc, OnceLock},
    task::{Context, Poll},
};
use tonic::{
    Status,
    body::Body,
    codec::{BufferSettings, Codec},
    codegen::{BoxFuture, Service, StdError, http},
    server::{Grpc, NamedService, ServerStreamingService},
};
use tonic_prost::{ProstDecoder, ProstEncoder};

mod server;

pub use self::server::{Http2Settings, serve};

/// The connections accepted on `listener`, with `TCP_NODELAY` set on each: without it a
/// small reply sent while an earlier one is unacknowledged waits for the peer's delayed ACK
/// (about 40 ms). `Server::tcp_nodelay` does not apply to connections the server is handed.
pub fn incoming(listener: tokio::net::TcpListener) -> tonic::transport::server::TcpIncoming {
    tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true))
}

/// A message many streams send: it is encoded once, and every stream that sends it copies
/// those bytes (the watch APIs send one change to every stream that watches the same thing).
/// The bytes are `M`'s encoding; decoding into a `Shared` works as for `M`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Shared<M>(Arc<SharedMessage<M>>);

#[derive(Clone, Debug, Default)]
struct SharedMessage<M> {
    message: M,
    /// `message` encoded, on first use.
    encoded: OnceLock<Box<[u8]>>,
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
            encoded: OnceLock::new(),
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
    fn encoded(&self) -> &[u8] {
        self.0
            .encoded
            .get_or_init(|| self.0.message.encode_to_vec().into_boxed_slice())
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
        shared.encoded = OnceLock::new();
        shared.message.merge_field(tag, wire_type, buf, ctx)
    }

    fn encoded_len(&self) -> usize {
        self.encoded().len()
    }

    fn clear(&mut self) {
        self.0 = Arc::default();
    }
}

/// Bytes a stream's encode (and request decode) buffer starts with; a larger message grows it
/// to fit.
pub const STREAM_BUFFER: usize = 512;

/// Encoded bytes after which tonic hands a batch of ready messages to HTTP/2: its default.
const YIELD_THRESHOLD: usize = 32 * 1024;

/// One server-streaming gRPC method, as [`SmallBuffers`] serves it.
pub trait StreamingMethod: Clone + Send + Sync + 'static {
    type Request: prost::Message + Default + Send + 'static;
    type Response: prost::Message + Send + 'static;
    type Stream: Stream<Item = Result<Self::Response, Status>> + Send + 'static;

    /// The method's gRPC path, `/package.Service/Method`.
    const PATH: &'static str;

    /// Answers one call, as the generated trait's method does.
    fn call(
        &self,
        request: tonic::Request<Self::Request>,
    ) -> BoxFuture<tonic::Response<Self::Stream>, Status>;
}

/// The tonic service `S` (a generated server, or another `SmallBuffers`) with method `M`
/// served through small buffers; every other path goes to `S`. Nest it to cover several
/// methods of one service.
#[derive(Clone)]
pub struct SmallBuffers<S, M> {
    inner: S,
    method: M,
}

impl<S, M> SmallBuffers<S, M> {
    pub fn new(inner: S, method: M) -> Self {
        Self { inner, method }
    }
}

impl<S: NamedService, M> NamedService for SmallBuffers<S, M> {
    const NAME: &'static str = S::NAME;
}

impl<S, M, B> Service<http::Request<B>> for SmallBuffers<S, M>
where
    S: Service<
            http::Request<B>,
            Response = http::Response<Body>,
            Error = Infallible,
            Future = BoxFuture<http::Response<Body>, Infallible>,
        >,
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
            return self.inner.call(request);
        }
        let method = Method(self.method.clone());
        Box::pin(async move {
            let mut grpc = Grpc::new(SmallBufferCodec::<M>(PhantomData));
            Ok(grpc.server_streaming(method, request).await)
        })
    }
}

/// `M` as tonic's server-streaming handler calls it.
struct Method<M>(M);

impl<M: StreamingMethod> ServerStreamingService<M::Request> for Method<M> {
    type Response = M::Response;
    type ResponseStream = M::Stream;
    type Future = BoxFuture<tonic::Response<M::Stream>, Status>;

    fn call(&mut self, request: tonic::Request<M::Request>) -> Self::Future {
        self.0.call(request)
    }
}

/// tonic's prost codec for `M`, with buffers of [`STREAM_BUFFER`] bytes.
struct SmallBufferCodec<M>(PhantomData<fn() -> M>);

impl<M: StreamingMethod> Codec for SmallBufferCodec<M> {
    type Encode = M::Response;
    type Decode = M::Request;
    type Encoder = ProstEncoder<M::Response>;
    type Decoder = ProstDecoder<M::Request>;

    fn encoder(&mut self) -> Self::Encoder {
        ProstEncoder::new(BufferSettings::new(STREAM_BUFFER, YIELD_THRESHOLD))
    }

    fn decoder(&mut self) -> Self::Decoder {
        ProstDecoder::new(BufferSettings::new(STREAM_BUFFER, YIELD_THRESHOLD))
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
        type Stream = futures::stream::Iter<std::vec::IntoIter<Result<Update, Status>>>;
        const PATH: &'static str = PATH;

        fn call(
            &self,
            request: tonic::Request<GetDestination>,
        ) -> BoxFuture<tonic::Response<Self::Stream>, Status> {
            self.requests
                .lock()
                .unwrap()
                .push(request.into_inner().path);
            let updates: Vec<_> = self.updates.iter().cloned().map(Ok).collect();
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
        let mut service = SmallBuffers::new(generated.clone(), watch.clone());
        let asked = GetDestination {
            path: "web.shop.svc.cluster.local:80".into(),
            ..Default::default()
        };

        let response = service.call(request(PATH, &asked)).await.unwrap();
        let body = response.into_body().collect().await.unwrap();
        let trailers = body.trailers().cloned().expect("trailers");
        assert_eq!(trailers["grpc-status"], "0");
        let mut bytes = body.to_bytes();
        let mut got = Vec::new();
        while !bytes.is_empty() {
            assert_eq!(bytes[0], 0, "uncompressed");
            let len = u32::from_be_bytes(bytes[1..5].try_into().unwrap()) as usize;
            got.push(Update::decode(&bytes[5..5 + len]).unwrap());
            bytes = bytes.slice(5 + len..);
        }
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
            <SmallBuffers<Generated, Watch> as NamedService>::NAME,
            "test.Service"
        );
    }
}
