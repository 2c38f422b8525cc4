//! The `io.linkerd.proxy.destination.Destination` service as served: the generated
//! [`DestinationServer`], except that `Get` responses are encoded with a small buffer.
//!
//! tonic encodes each response stream into a buffer that lives as long as the stream, 8 KiB
//! by default, and keeps the whole buffer allocated while any message cut from it is. A `Get`
//! stream is idle nearly all its life and its messages are small (a `Remove` is tens of bytes,
//! an `Add` of ten meshed endpoints about 2 KiB), so with thousands of streams that buffer was
//! most of each stream's memory. `Get` here starts from [`GET_ENCODE_BUFFER`] bytes and grows
//! only to the messages it sends. Messages, framing and status codes are unchanged: the same
//! generated types go through tonic's prost encoder.

use linkerd2_proxy_api::destination::{
    GetDestination, Update,
    destination_server::{Destination, DestinationServer},
};
use std::{
    convert::Infallible,
    sync::Arc,
    task::{Context, Poll},
};
use tonic::{
    codec::{BufferSettings, Codec},
    codegen::{BoxFuture, Service, StdError, http},
    server::{Grpc, NamedService, ServerStreamingService},
};
use tonic_prost::{ProstDecoder, ProstEncoder};

use crate::server::DestinationService;

/// The gRPC path of `Destination.Get`.
const GET_PATH: &str = "/io.linkerd.proxy.destination.Destination/Get";

/// Bytes a `Get` stream's encode buffer starts with; a larger message grows it to fit.
pub const GET_ENCODE_BUFFER: usize = 512;

/// Encoded bytes after which tonic hands a batch of ready messages to HTTP/2: its default.
const YIELD_THRESHOLD: usize = 32 * 1024;

/// The Destination service with `Get` encoded by [`GetCodec`]; every other method is the
/// generated server's.
#[derive(Clone)]
pub struct DestinationGrpc {
    service: Arc<DestinationService>,
    generated: DestinationServer<DestinationService>,
}

impl DestinationGrpc {
    pub fn new(service: DestinationService) -> Self {
        let service = Arc::new(service);
        Self {
            generated: DestinationServer::from_arc(service.clone()),
            service,
        }
    }
}

impl NamedService for DestinationGrpc {
    const NAME: &'static str = <DestinationServer<DestinationService> as NamedService>::NAME;
}

impl<B> Service<http::Request<B>> for DestinationGrpc
where
    B: tonic::codegen::Body + Send + 'static,
    B::Error: Into<StdError> + Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        if request.uri().path() != GET_PATH {
            return self.generated.call(request);
        }
        let method = GetMethod(self.service.clone());
        Box::pin(async move { Ok(Grpc::new(GetCodec).server_streaming(method, request).await) })
    }
}

/// `Get` as tonic's server-streaming handler calls it.
struct GetMethod(Arc<DestinationService>);

impl ServerStreamingService<GetDestination> for GetMethod {
    type Response = Update;
    type ResponseStream = <DestinationService as Destination>::GetStream;
    type Future = BoxFuture<tonic::Response<Self::ResponseStream>, tonic::Status>;

    fn call(&mut self, request: tonic::Request<GetDestination>) -> Self::Future {
        let service = self.0.clone();
        Box::pin(async move { service.get(request).await })
    }
}

/// tonic's prost codec for `Get`, with an encode buffer of [`GET_ENCODE_BUFFER`] bytes.
#[derive(Clone, Copy, Debug, Default)]
struct GetCodec;

impl Codec for GetCodec {
    type Encode = Update;
    type Decode = GetDestination;
    type Encoder = ProstEncoder<Update>;
    type Decoder = ProstDecoder<GetDestination>;

    fn encoder(&mut self) -> Self::Encoder {
        ProstEncoder::new(BufferSettings::new(GET_ENCODE_BUFFER, YIELD_THRESHOLD))
    }

    fn decoder(&mut self) -> Self::Decoder {
        ProstDecoder::new(BufferSettings::new(GET_ENCODE_BUFFER, YIELD_THRESHOLD))
    }
}
