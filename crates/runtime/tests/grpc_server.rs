//! `linkerd_runtime::grpc::serve` through real TCP connections: updates batched into few
//! segments, a graceful shutdown, bounded send buffers for a client that stops reading, and
//! watch streams (`WatchStreams`) that hold at most one unsent message.

use futures::{FutureExt, StreamExt, future::BoxFuture, stream::BoxStream};
use hyper_util::rt::TokioIo;
use linkerd_runtime::grpc::{Http2Settings, Shared, StreamingMethod, WatchStreams, serve};
use linkerd2_proxy_api::destination::{
    DestinationProfile, GetDestination, Update, WeightedAddr, WeightedAddrSet,
    destination_client::DestinationClient,
    destination_server::{Destination, DestinationServer},
    update,
};
use prost::Message;
use std::{
    convert::Infallible,
    io,
    net::SocketAddr,
    os::fd::{AsRawFd, RawFd},
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    task::{Context, Poll},
    time::Duration,
};
use tokio::{
    net::{TcpListener, TcpStream},
    sync::watch,
};
use tonic::{
    Request, Response, Status,
    codegen::Service,
    service::Routes,
    transport::{Channel, Uri},
};

/// `Get` streams that send an `Add` for the current change number, then one per change.
struct Changes(watch::Receiver<u32>);

#[tonic::async_trait]
impl Destination for Changes {
    type GetStream = BoxStream<'static, Result<Update, Status>>;
    type GetProfileStream = BoxStream<'static, Result<DestinationProfile, Status>>;

    async fn get(&self, _: Request<GetDestination>) -> Result<Response<Self::GetStream>, Status> {
        let updates =
            futures::stream::unfold((self.0.clone(), true), |(mut rx, first)| async move {
                if !first {
                    rx.changed().await.ok()?;
                }
                let change = *rx.borrow_and_update();
                Some((Ok(add(change)), (rx, false)))
            });
        Ok(Response::new(updates.boxed()))
    }

    async fn get_profile(
        &self,
        _: Request<GetDestination>,
    ) -> Result<Response<Self::GetProfileStream>, Status> {
        Err(Status::unimplemented("not in this test"))
    }
}

/// An `Add` of one address with the labels a meshed pod has: between the 256 bytes above
/// which h2 writes a frame on its own over vectored IO, and the 1 KiB it copies without.
fn add(change: u32) -> Update {
    let labels = [
        "pod",
        "pod_template_hash",
        "serviceaccount",
        "deployment",
        "zone",
        "node",
    ]
    .into_iter()
    .map(|k| (k.to_string(), format!("{k}-value-for-change-{change}")))
    .collect();
    Update {
        update: Some(update::Update::Add(WeightedAddrSet {
            addrs: vec![WeightedAddr {
                addr: Some(SocketAddr::from(([10, 0, 0, 1], 8080)).into()),
                weight: 10_000,
                metric_labels: labels,
                ..Default::default()
            }],
            metric_labels: [("namespace".to_string(), "shop".to_string())].into(),
        })),
    }
}

/// TCP segments received on `fd` so far (`tcpi_segs_in`).
fn segments_in(fd: RawFd) -> u32 {
    let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    // SAFETY: `info` and `len` are valid for writes of the size passed.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&raw mut info).cast(),
            &mut len,
        )
    };
    assert_eq!(rc, 0, "TCP_INFO: {}", io::Error::last_os_error());
    info.tcpi_segs_in
}

async fn start(
    rx: watch::Receiver<u32>,
) -> (
    SocketAddr,
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<()>,
) {
    start_with(rx, Http2Settings::default()).await
}

async fn start_with(
    rx: watch::Receiver<u32>,
    settings: Http2Settings,
) -> (
    SocketAddr,
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<()>,
) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let routes = Routes::new(DestinationServer::new(Changes(rx)));
    let server = tokio::spawn(serve(listener, routes, settings, async {
        let _ = stopped.await;
    }));
    (addr, stop, server)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_change_reaches_the_streams_of_a_connection_in_a_few_segments() {
    const STREAMS: usize = 100;
    let sample = add(0).encoded_len();
    assert!(
        (256..1024).contains(&sample),
        "an Add of {sample} bytes tests nothing"
    );

    let (changes, rx) = watch::channel(0);
    let (addr, _stop, _server) = start(rx).await;
    let connector = Connector::new(addr);
    let channel = tonic::transport::Endpoint::from_static("http://destination")
        .connect_with_connector(connector.clone())
        .await
        .unwrap();
    let mut streams = open_gets(&channel, STREAMS).await;
    for stream in &mut streams {
        assert_eq!(stream.message().await.unwrap(), Some(add(0)));
    }
    let fd = connector.fd.lock().unwrap().expect("connected");
    let before = segments_in(fd);

    changes.send(1).unwrap();
    for stream in &mut streams {
        assert_eq!(stream.message().await.unwrap(), Some(add(1)));
    }
    let segments = segments_in(fd) - before;
    // 100 updates of ~400 bytes fit in three 16 KiB writes; one stream per task wrote
    // each update alone (100 segments).
    assert!(
        segments <= 20,
        "{STREAMS} updates arrived in {segments} TCP segments"
    );
}

/// `count` `Get` streams on `channel`, opened one after the other (response headers read).
async fn open_gets(channel: &Channel, count: usize) -> Vec<tonic::Streaming<Update>> {
    let mut streams = Vec::with_capacity(count);
    for _ in 0..count {
        let mut client = DestinationClient::new(channel.clone());
        let response = client.get(GetDestination::default()).await.unwrap();
        streams.push(response.into_inner());
    }
    streams
}

/// A `Get` stream on a new connection to `addr`, past its first message (`add(0)`).
async fn open_get(addr: SocketAddr) -> tonic::Streaming<Update> {
    let mut client = DestinationClient::connect(format!("http://{addr}"))
        .await
        .unwrap();
    let mut stream = client
        .get(GetDestination::default())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(stream.message().await.unwrap(), Some(add(0)));
    stream
}

#[tokio::test]
async fn shutdown_refuses_new_connections_and_waits_for_open_streams_to_end() {
    let (changes, rx) = watch::channel(0);
    let (addr, stop, mut server) = start(rx).await;
    let mut stream = open_get(addr).await;

    stop.send(()).unwrap();
    // The open stream goes on being served while the server drains.
    tokio::time::sleep(Duration::from_millis(100)).await;
    changes.send(1).unwrap();
    assert_eq!(stream.message().await.unwrap(), Some(add(1)));
    assert!(
        (&mut server).now_or_never().is_none(),
        "returned with a stream open"
    );
    assert!(TcpStream::connect(addr).await.is_err(), "still accepting");

    // The stream ends (its service's watch is gone): the server returns.
    drop(changes);
    assert_eq!(stream.message().await.unwrap(), None);
    tokio::time::timeout(Duration::from_secs(5), server)
        .await
        .expect("the server returned")
        .unwrap();
}

/// What the code under test logs on this thread, as text.
#[derive(Clone, Default)]
struct Logs(Arc<Mutex<Vec<u8>>>);

impl io::Write for Logs {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl tracing_subscriber::fmt::MakeWriter<'_> for Logs {
    type Writer = Logs;

    fn make_writer(&self) -> Logs {
        self.clone()
    }
}

impl Logs {
    /// Captures this thread's logs until the guard is dropped.
    fn capture(&self) -> tracing::subscriber::DefaultGuard {
        let subscriber = tracing_subscriber::fmt()
            .with_writer(self.clone())
            .with_ansi(false)
            .finish();
        tracing::subscriber::set_default(subscriber)
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

/// Reads `tcp` (the server's SETTINGS, perhaps) until the server closes it (EOF or reset);
/// fails after 5 s.
async fn assert_closed(tcp: &mut TcpStream) {
    let mut received = Vec::new();
    tokio::time::timeout(
        Duration::from_secs(5),
        tokio::io::AsyncReadExt::read_to_end(tcp, &mut received),
    )
    .await
    .expect("the server closed the connection")
    .ok();
}

#[tokio::test]
async fn connections_still_open_after_the_drain_timeout_are_dropped() {
    let logs = Logs::default();
    let _capture = logs.capture();
    let (_changes, rx) = watch::channel(0);
    let settings = Http2Settings {
        drain_timeout: Duration::from_millis(200),
        ..Default::default()
    };
    let (addr, stop, server) = start_with(rx, settings).await;
    // A client that connects and never speaks: no HTTP/2 preface, so no GOAWAY ends it.
    let mut silent = TcpStream::connect(addr).await.unwrap();
    // And one with an open stream it never ends.
    let _stream = open_get(addr).await;

    stop.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(5), server)
        .await
        .expect("the server returned after the drain timeout")
        .unwrap();
    assert_closed(&mut silent).await;
    // Each connection is counted once.
    assert!(
        logs.text()
            .contains("still open after the drain timeout; closing them connections=2"),
        "{}",
        logs.text()
    );
}

/// A server started for a test, and the handles that keep it serving.
type Running = (
    watch::Sender<u32>,
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<()>,
);

/// Opens a `Get` whose request body is `body`, on a server whose request body timeout is
/// 200 ms, and returns the status it was refused with, the connection and the server.
async fn refused_get(
    body: impl futures::Stream<Item = GetDestination> + Send + 'static,
) -> (Status, tonic::transport::Channel, Running) {
    let (changes, rx) = watch::channel(0);
    let settings = Http2Settings {
        request_body_timeout: Duration::from_millis(200),
        ..Default::default()
    };
    let (addr, stop, server) = start_with(rx, settings).await;
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut grpc = tonic::client::Grpc::new(channel.clone());
    grpc.ready().await.unwrap();
    let answered = tokio::time::timeout(
        Duration::from_secs(5),
        grpc.streaming::<_, _, Update, _>(
            Request::new(body),
            "/io.linkerd.proxy.destination.Destination/Get"
                .parse()
                .unwrap(),
            tonic_prost::ProstCodec::default(),
        ),
    )
    .await
    .expect("answered within the body timeout");
    let status = answered.expect_err("no stream without the whole request");
    assert_eq!(status.code(), tonic::Code::DeadlineExceeded, "{status:?}");
    (status, channel, (changes, stop, server))
}

#[tokio::test]
async fn a_request_whose_message_never_arrives_is_answered_after_the_body_timeout() {
    // The request's headers go out; its message never does.
    let (status, channel, _server) = refused_get(futures::stream::pending()).await;
    assert_eq!(
        status.message(),
        "the request message did not arrive within 200ms of its headers"
    );
    // The connection goes on serving.
    let mut streams = open_gets(&channel, 1).await;
    assert_eq!(streams[0].message().await.unwrap(), Some(add(0)));
}

/// tonic reads a request to its end before it calls the method: a client that sends its
/// message but never half-closes would hold its stream, unanswered, until the connection closed.
#[tokio::test]
async fn a_request_that_never_ends_is_answered_after_the_body_timeout() {
    let unended = futures::stream::once(async { GetDestination::default() })
        .chain(futures::stream::pending());
    let (status, _channel, _server) = refused_get(unended).await;
    assert_eq!(
        status.message(),
        "the request did not end within 200ms of its headers"
    );
}

/// A request over 64 KiB is routed before its end, for tonic to refuse; one whose first
/// message is valid is read on to its end by tonic, with no deadline of its own.
#[tokio::test]
async fn a_request_routed_for_its_size_that_never_ends_is_answered_after_the_body_timeout() {
    let message = |i: usize| GetDestination {
        path: format!("{i}-{}", "a".repeat(1_000)),
        ..Default::default()
    };
    let oversized = futures::stream::iter((0..70).map(message)).chain(futures::stream::pending());
    let (status, _channel, _server) = refused_get(oversized).await;
    assert_eq!(
        status.message(),
        "the request did not end within 200ms of its headers"
    );
}

#[tokio::test]
async fn a_client_that_does_not_answer_pings_is_disconnected() {
    let (changes, rx) = watch::channel(0);
    let settings = Http2Settings {
        keep_alive_interval: Duration::from_millis(100),
        keep_alive_timeout: Duration::from_millis(100),
        ..Default::default()
    };
    let (addr, _stop, _server) = start_with(rx, settings).await;
    // A client whose h2 connection answers pings, and one that no longer reads its socket
    // (as a peer whose node vanished).
    let mut alive = open_get(addr).await;
    let connector = Connector::new(addr);
    let channel = tonic::transport::Endpoint::from_static("http://destination")
        .connect_with_connector(connector.clone())
        .await
        .unwrap();
    let _gone = open_gets(&channel, 1).await;
    // The service's own receiver, and one per stream.
    assert_eq!(changes.receiver_count(), 3);
    connector.paused.store(true, Ordering::Relaxed);

    tokio::time::timeout(Duration::from_secs(5), async {
        while changes.receiver_count() > 2 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the silent client's stream was dropped");
    // The other client answered every ping; its stream is still served.
    tokio::time::sleep(Duration::from_millis(500)).await;
    changes.send(1).unwrap();
    assert_eq!(alive.message().await.unwrap(), Some(add(1)));
    assert_eq!(changes.receiver_count(), 2);
}

/// `Get` streams that, once `go` is true, send 8 KiB `Add`s as fast as they are polled,
/// counting the bytes they hand to the server in `pulled`.
struct Flood {
    go: watch::Receiver<bool>,
    pulled: Arc<AtomicUsize>,
}

#[tonic::async_trait]
impl Destination for Flood {
    type GetStream = BoxStream<'static, Result<Update, Status>>;
    type GetProfileStream = BoxStream<'static, Result<DestinationProfile, Status>>;

    async fn get(&self, _: Request<GetDestination>) -> Result<Response<Self::GetStream>, Status> {
        let (mut go, pulled) = (self.go.clone(), self.pulled.clone());
        let big = Update {
            update: Some(update::Update::Add(WeightedAddrSet {
                addrs: vec![],
                metric_labels: [("padding".to_string(), "x".repeat(8 << 10))].into(),
            })),
        };
        let flood = futures::stream::repeat_with(move || {
            pulled.fetch_add(big.encoded_len(), Ordering::Relaxed);
            Ok(big.clone())
        });
        let started = async move {
            let _ = go.wait_for(|go| *go).await;
            flood
        };
        Ok(Response::new(started.flatten_stream().boxed()))
    }

    async fn get_profile(
        &self,
        _: Request<GetDestination>,
    ) -> Result<Response<Self::GetProfileStream>, Status> {
        Err(Status::unimplemented("not in this test"))
    }
}

/// A client socket that stops reading once `paused` is set, as a client that has stopped
/// reading its connection while advertising huge HTTP/2 windows.
struct PausableRead {
    tcp: TcpStream,
    paused: Arc<AtomicBool>,
}

impl tokio::io::AsyncRead for PausableRead {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.paused.load(Ordering::Relaxed) {
            return Poll::Pending;
        }
        std::pin::Pin::new(&mut self.tcp).poll_read(cx, buf)
    }
}

impl tokio::io::AsyncWrite for PausableRead {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        std::pin::Pin::new(&mut self.tcp).poll_write(cx, buf)
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<()>> {
        std::pin::Pin::new(&mut self.tcp).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<()>> {
        std::pin::Pin::new(&mut self.tcp).poll_shutdown(cx)
    }
}

/// Connects over TCP (`TCP_NODELAY`), remembers the socket for reading its `TCP_INFO`, and
/// stops reading it once `paused` is set. `recv_buffer`, if set, fixes the socket's receive
/// buffer (bytes), so that a paused client soon closes its TCP window.
#[derive(Clone)]
struct Connector {
    addr: SocketAddr,
    fd: Arc<Mutex<Option<RawFd>>>,
    paused: Arc<AtomicBool>,
    recv_buffer: Option<u32>,
}

impl Connector {
    fn new(addr: SocketAddr) -> Self {
        Self {
            addr,
            fd: Default::default(),
            paused: Default::default(),
            recv_buffer: None,
        }
    }
}

impl Service<Uri> for Connector {
    type Response = TokioIo<PausableRead>;
    type Error = io::Error;
    type Future = BoxFuture<'static, io::Result<Self::Response>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: Uri) -> Self::Future {
        let this = self.clone();
        Box::pin(async move {
            let socket = tokio::net::TcpSocket::new_v4()?;
            if let Some(size) = this.recv_buffer {
                socket.set_recv_buffer_size(size)?;
            }
            let tcp = socket.connect(this.addr).await?;
            tcp.set_nodelay(true)?;
            *this.fd.lock().unwrap() = Some(tcp.as_raw_fd());
            Ok(TokioIo::new(PausableRead {
                tcp,
                paused: this.paused,
            }))
        })
    }
}

/// The largest send buffer the kernel may grow a TCP socket's to (`tcp_wmem`'s maximum).
fn tcp_send_buffer_max() -> usize {
    let wmem = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_wmem").unwrap();
    wmem.split_whitespace().nth(2).unwrap().parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stops_reading_holds_a_bounded_buffer_per_stream() {
    const STREAMS: usize = 200;
    let (go, go_rx) = watch::channel(false);
    let pulled = Arc::new(AtomicUsize::new(0));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let routes = Routes::new(DestinationServer::new(Flood {
        go: go_rx,
        pulled: pulled.clone(),
    }));
    tokio::spawn(serve(
        listener,
        routes,
        Http2Settings::default(),
        std::future::pending(),
    ));

    // HTTP/2 windows of 2 GiB: flow control never stops the server.
    let connector = Connector {
        recv_buffer: Some(16 << 10),
        ..Connector::new(addr)
    };
    let channel = tonic::transport::Endpoint::from_static("http://destination")
        .initial_connection_window_size(i32::MAX as u32)
        .initial_stream_window_size(i32::MAX as u32)
        .connect_with_connector(connector.clone())
        .await
        .unwrap();
    let _streams = open_gets(&channel, STREAMS).await;
    connector.paused.store(true, Ordering::Relaxed);
    go.send(true).unwrap();

    // The streams fill the socket, then their send buffers, then stop being polled.
    let mut last = 0;
    loop {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let now = pulled.load(Ordering::Relaxed);
        if now == last {
            break;
        }
        last = now;
    }
    // The socket's buffers, plus per stream its send buffer (16 KiB) and what tonic had
    // encoded (up to 32 KiB and a message), with room. hyper's default buffer of 400 KiB
    // took 450 KiB per stream.
    let bound = tcp_send_buffer_max() + (16 << 10) + STREAMS * (192 << 10);
    assert!(
        last > 0 && last <= bound,
        "{STREAMS} streams of a client that stopped reading took {} KiB from their services (at most {} KiB allowed)",
        last >> 10,
        bound >> 10,
    );
}

#[tokio::test]
async fn connections_that_send_no_preface_are_closed() {
    let (changes, rx) = watch::channel(0);
    let settings = Http2Settings {
        preface_timeout: Duration::from_millis(200),
        ..Default::default()
    };
    let (addr, _stop, _server) = start_with(rx, settings).await;
    let silent = TcpStream::connect(addr).await.unwrap();
    let mut partial = TcpStream::connect(addr).await.unwrap();
    tokio::io::AsyncWriteExt::write_all(&mut partial, b"PRI * HTTP/2.0\r\n")
        .await
        .unwrap();
    let mut stream = open_get(addr).await;

    for mut idle in [silent, partial] {
        assert_closed(&mut idle).await;
    }
    // A client that sent its preface is served past the deadline.
    tokio::time::sleep(Duration::from_millis(300)).await;
    changes.send(1).unwrap();
    assert_eq!(stream.message().await.unwrap(), Some(add(1)));
}

/// `Get` served by `WatchStreams`: once `go` is true, each stream sends the same `Add` as
/// often as it is polled, counting in `pulled` (one counter per stream, in call order) the
/// messages it handed over.
#[derive(Clone)]
struct SharedFlood {
    message: Shared<Update>,
    go: watch::Receiver<bool>,
    pulled: Arc<Mutex<Vec<Arc<AtomicUsize>>>>,
}

impl SharedFlood {
    /// Streams of `Add`s whose gRPC frame is `frame` bytes, flooding once `go` is true.
    fn new(frame: usize, go: watch::Receiver<bool>) -> Self {
        let message = (0..frame)
            .rev()
            .map(padded_add)
            .find(|add| Shared::new(add.clone()).frame().unwrap().len() == frame)
            .expect("an Add of that frame size");
        Self {
            message: Shared::new(message),
            go,
            pulled: Default::default(),
        }
    }

    /// The messages each stream has handed over so far.
    fn pulled(&self) -> Vec<usize> {
        let pulled = self.pulled.lock().unwrap();
        pulled.iter().map(|n| n.load(Ordering::SeqCst)).collect()
    }

    /// Waits until the streams stop taking messages, and returns how many each took.
    async fn settled(&self) -> Vec<usize> {
        let mut last = self.pulled();
        loop {
            tokio::time::sleep(Duration::from_millis(300)).await;
            let now = self.pulled();
            if now == last {
                return now;
            }
            last = now;
        }
    }
}

/// An `Add` with no address and a label of `padding` bytes.
fn padded_add(padding: usize) -> Update {
    Update {
        update: Some(update::Update::Add(WeightedAddrSet {
            addrs: vec![],
            metric_labels: [("padding".to_string(), "x".repeat(padding))].into(),
        })),
    }
}

impl StreamingMethod for SharedFlood {
    type Request = GetDestination;
    type Response = Update;
    type Stream = BoxStream<'static, Result<Shared<Update>, Status>>;
    const PATH: &'static str = "/io.linkerd.proxy.destination.Destination/Get";

    fn call(
        &self,
        _: Request<GetDestination>,
    ) -> tonic::codegen::BoxFuture<Response<Self::Stream>, Status> {
        let pulled = Arc::new(AtomicUsize::new(0));
        self.pulled.lock().unwrap().push(pulled.clone());
        let (message, mut go) = (self.message.clone(), self.go.clone());
        let flood = futures::stream::repeat_with(move || {
            pulled.fetch_add(1, Ordering::SeqCst);
            Ok(message.clone())
        });
        let started = async move {
            let _ = go.wait_for(|go| *go).await;
            flood
        };
        Box::pin(async move { Ok(Response::new(started.flatten_stream().boxed())) })
    }
}

/// A server of `SharedFlood` streams; other paths go to `Changes` (never called here).
async fn serve_flood(flood: &SharedFlood) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (_changes, rx) = watch::channel(0);
    let generated = DestinationServer::new(Changes(rx));
    let routes = Routes::new(WatchStreams::new(generated, flood.clone()));
    tokio::spawn(serve(
        listener,
        routes,
        Http2Settings::default(),
        std::future::pending(),
    ));
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_stream_whose_window_is_full_holds_at_most_one_unsent_message() {
    const STREAMS: usize = 10;
    // A proxy's stream window (the HTTP/2 default); frames that do not divide it, so the
    // last one that fits is cut by the window.
    const WINDOW: usize = 65_535;
    const FRAME: usize = 3_000;
    let (_go, go) = watch::channel(true);
    let flood = SharedFlood::new(FRAME, go);
    let addr = serve_flood(&flood).await;
    // The client reads its connection (its h2 task takes every frame) but not the streams,
    // so their windows fill and stay full.
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .initial_stream_window_size(WINDOW as u32)
        .initial_connection_window_size(64 << 20)
        .connect()
        .await
        .unwrap();
    let _streams = open_gets(&channel, STREAMS).await;

    let pulled = flood.settled().await;
    assert_eq!(pulled.len(), STREAMS);
    for (stream, messages) in pulled.into_iter().enumerate() {
        // The window's worth went out; what the server holds beyond it is the rest of the
        // frame the window cut, or one whole frame. tonic's encoder took 32 KiB more.
        let unsent = (messages * FRAME).checked_sub(WINDOW);
        assert!(
            unsent.is_some_and(|unsent| unsent <= FRAME),
            "stream {stream} took {messages} messages of {FRAME} bytes for a window of {WINDOW}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_streams_of_a_client_that_stops_reading_its_socket_hold_one_message_each() {
    const STREAMS: usize = 200;
    const FRAME: usize = 8 << 10;
    let (go, go_rx) = watch::channel(false);
    let flood = SharedFlood::new(FRAME, go_rx);
    let addr = serve_flood(&flood).await;
    // HTTP/2 windows of 2 GiB: flow control never stops the server, the socket does.
    let connector = Connector {
        recv_buffer: Some(16 << 10),
        ..Connector::new(addr)
    };
    let channel = tonic::transport::Endpoint::from_static("http://destination")
        .initial_connection_window_size(i32::MAX as u32)
        .initial_stream_window_size(i32::MAX as u32)
        .connect_with_connector(connector.clone())
        .await
        .unwrap();
    let _streams = open_gets(&channel, STREAMS).await;
    connector.paused.store(true, Ordering::Relaxed);
    go.send(true).unwrap();

    let pulled: usize = flood.settled().await.iter().sum();
    // The sockets' buffers and h2's 16 KiB write buffer, plus one frame per stream; tonic's
    // encoder and a send buffer of 64 KiB held 96 KiB per stream.
    let bound = tcp_send_buffer_max() + (16 << 10) + (16 << 10) + STREAMS * FRAME;
    assert!(
        pulled * FRAME <= bound,
        "{STREAMS} streams of a client that stopped reading took {} KiB (at most {} KiB allowed)",
        (pulled * FRAME) >> 10,
        bound >> 10,
    );
}

/// `Get` served by `WatchStreams`, recording the codes of the calls answered before its
/// method ([`StreamingMethod::refused`]) and the paths it was called with; it refuses the
/// path `refused` itself and keeps every other stream open.
#[derive(Clone, Default)]
struct RefusalLog {
    refused: Arc<Mutex<Vec<tonic::Code>>>,
    called: Arc<Mutex<Vec<String>>>,
}

impl StreamingMethod for RefusalLog {
    type Request = GetDestination;
    type Response = Update;
    type Stream = BoxStream<'static, Result<Shared<Update>, Status>>;
    const PATH: &'static str = "/io.linkerd.proxy.destination.Destination/Get";

    fn call(
        &self,
        request: Request<GetDestination>,
    ) -> tonic::codegen::BoxFuture<Response<Self::Stream>, Status> {
        let path = request.into_inner().path;
        self.called.lock().unwrap().push(path.clone());
        Box::pin(async move {
            match path.as_str() {
                "refused" => Err(Status::invalid_argument("refused by the method")),
                _ => Ok(Response::new(futures::stream::pending().boxed())),
            }
        })
    }

    fn refused(&self, code: tonic::Code) {
        self.refused.lock().unwrap().push(code);
    }
}

/// Serves `Get` through `WatchStreams` with a fresh [`RefusalLog`] on a loopback port, with
/// `settings`; the server runs until the test ends.
async fn serve_refusal_log(settings: Http2Settings) -> (SocketAddr, RefusalLog) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (changes, rx) = watch::channel(0);
    let log = RefusalLog::default();
    let routes = Routes::new(WatchStreams::new(
        DestinationServer::new(Changes(rx)),
        log.clone(),
    ));
    tokio::spawn(async move {
        // Held while serving: `Get` streams end when their changes' sender goes.
        let _changes = changes;
        serve(listener, routes, settings, std::future::pending()).await
    });
    (addr, log)
}

/// An HTTP/2 client of `addr` that sends whatever body a test gives it (tonic's client only
/// sends whole messages).
async fn raw_h2_client<B>(addr: SocketAddr) -> hyper::client::conn::http2::SendRequest<B>
where
    B: hyper::body::Body + Send + Unpin + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let tcp = TcpStream::connect(addr).await.unwrap();
    let (client, connection) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        TokioIo::new(tcp),
    )
    .await
    .unwrap();
    tokio::spawn(connection);
    client
}

/// A `Get` of [`RefusalLog`] to `addr` with `body`, as a gRPC client sends its headers.
fn get_request<B>(addr: SocketAddr, body: B) -> http::Request<B> {
    http::Request::post(format!("http://{addr}{}", RefusalLog::PATH))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(body)
        .unwrap()
}

/// A `GetDestination` whose path is not UTF-8, as the bytes of another message with the
/// same tag.
#[derive(Clone, PartialEq, prost::Message)]
struct PathNotUtf8 {
    #[prost(bytes = "vec", tag = "2")]
    path: Vec<u8>,
}

/// What a `Get` of `body` is answered with (the server's body timeout is 200 ms).
async fn answer_to<M: Message + Default + Send + 'static>(
    channel: &Channel,
    body: impl futures::Stream<Item = M> + Send + 'static,
) -> Status {
    let mut grpc = tonic::client::Grpc::new(channel.clone());
    grpc.ready().await.unwrap();
    let answered = tokio::time::timeout(
        Duration::from_secs(5),
        grpc.streaming::<_, _, Update, _>(
            Request::new(body),
            RefusalLog::PATH.parse().unwrap(),
            tonic_prost::ProstCodec::<M, Update>::default(),
        ),
    )
    .await
    .expect("answered in time");
    answered.expect_err("the call is refused")
}

/// Go's servers count a call whose request cannot be read as started and handled with the
/// error's code; tonic answers such a call without calling the method, so `WatchStreams`
/// tells the method's server.
#[tokio::test]
async fn calls_answered_before_their_method_are_told_to_it() {
    let settings = Http2Settings {
        request_body_timeout: Duration::from_millis(200),
        ..Default::default()
    };
    let (addr, log) = serve_refusal_log(settings).await;
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let get = |path: &str| GetDestination {
        path: path.to_string(),
        ..Default::default()
    };

    let not_utf8 = PathNotUtf8 { path: vec![0xff] };
    let status = answer_to(&channel, futures::stream::iter([not_utf8])).await;
    assert_eq!(status.code(), tonic::Code::Internal, "{status:?}");
    let status = answer_to(&channel, futures::stream::pending::<GetDestination>()).await;
    assert_eq!(status.code(), tonic::Code::DeadlineExceeded, "{status:?}");
    let unended =
        futures::stream::once(async move { get("open") }).chain(futures::stream::pending());
    let status = answer_to(&channel, unended).await;
    assert_eq!(status.code(), tonic::Code::DeadlineExceeded, "{status:?}");
    let oversized = get(&"a".repeat(70 << 10));
    let status = answer_to(&channel, futures::stream::iter([oversized])).await;
    assert_eq!(status.code(), tonic::Code::OutOfRange, "{status:?}");
    // Refused by the method: counted by it, not told again.
    let status = answer_to(&channel, futures::stream::iter([get("refused")])).await;
    assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");

    assert_eq!(
        *log.refused.lock().unwrap(),
        [
            tonic::Code::Internal,
            tonic::Code::DeadlineExceeded,
            tonic::Code::DeadlineExceeded,
            tonic::Code::OutOfRange,
        ]
    );
    assert_eq!(*log.called.lock().unwrap(), ["refused"]);
}

/// A request whose first five bytes declare a message over 64 KiB is refused from them, not
/// after the body timeout (newcomer finding: it waited 10 s unless its end came).
#[tokio::test]
async fn a_request_declaring_too_large_a_message_is_refused_at_once() {
    let (addr, log) = serve_refusal_log(Http2Settings::default()).await;
    let mut client = raw_h2_client(addr).await;
    // The prefix of a 65,537-byte message, and nothing more for now.
    let prefix = hyper::body::Frame::data(tonic::codegen::Bytes::from_static(&[0, 0, 1, 0, 1]));
    let body = http_body_util::StreamBody::new(
        futures::stream::iter([Ok::<_, Infallible>(prefix)]).chain(futures::stream::pending()),
    );
    let request = get_request(addr, body);
    let response = tokio::time::timeout(Duration::from_secs(2), client.send_request(request))
        .await
        .expect("answered before the 10 s body timeout")
        .unwrap();
    let status = Status::from_header_map(response.headers()).expect("a trailers-only answer");
    assert_eq!(status.code(), tonic::Code::OutOfRange, "{status:?}");
    assert_eq!(*log.refused.lock().unwrap(), [tonic::Code::OutOfRange]);
}

/// A client that resets its stream before its request arrives whole (a proxy giving up on a
/// slow control plane) is counted as `CANCELLED`, as go-grpc-prometheus counts a handler
/// whose request receive was canceled: whatever the reset's reason (`CANCEL` from a dropped
/// call, `INTERNAL_ERROR` from a request body that failed; it was counted `INTERNAL`).
#[tokio::test]
async fn a_call_reset_before_its_request_arrives_is_told_as_cancelled() {
    let (addr, log) = serve_refusal_log(Http2Settings::default()).await;
    let told = |count: usize| {
        let log = log.clone();
        async move {
            tokio::time::timeout(Duration::from_secs(5), async {
                loop {
                    if log.refused.lock().unwrap().len() >= count {
                        return log.refused.lock().unwrap().clone();
                    }
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            })
            .await
            .expect("the reset call is told to the method")
        }
    };

    // A dropped call: `RST_STREAM(CANCEL)`.
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let call = tokio::spawn({
        let channel = channel.clone();
        async move { answer_to(&channel, futures::stream::pending::<GetDestination>()).await }
    });
    // The headers go out at once; the message never does. Then the client gives up.
    tokio::time::sleep(Duration::from_millis(300)).await;
    call.abort();
    let _ = call.await;
    assert_eq!(told(1).await, [tonic::Code::Cancelled]);

    // A request body that fails: hyper resets the stream with `INTERNAL_ERROR`.
    let mut client = raw_h2_client(addr).await;
    let failing = futures::stream::once(Box::pin(async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        Err::<hyper::body::Frame<tonic::codegen::Bytes>, _>(io::Error::other("the client failed"))
    }));
    let request = get_request(addr, http_body_util::StreamBody::new(failing));
    let _ = client.send_request(request).await;
    assert_eq!(
        told(2).await,
        [tonic::Code::Cancelled, tonic::Code::Cancelled]
    );
    assert!(log.called.lock().unwrap().is_empty());
}

/// A client whose connection closes (a proxy restarting, a TCP reset) before its request
/// arrives is counted as `CANCELLED` too, as grpc-go counts a handler whose receive failed
/// with the transport (it was not counted: hyper drops such a call before it is routed).
#[tokio::test]
async fn a_call_whose_connection_closes_before_its_request_arrives_is_told_as_cancelled() {
    let (addr, log) = serve_refusal_log(Http2Settings::default()).await;
    // hyper's client keeps its socket in a task of its own: a clone of the socket closes it.
    let tcp = TcpStream::connect(addr).await.unwrap().into_std().unwrap();
    let socket = tcp.try_clone().unwrap();
    let tcp = TcpStream::from_std(tcp).unwrap();
    let (mut client, connection) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        TokioIo::new(tcp),
    )
    .await
    .unwrap();
    tokio::spawn(connection);
    let body = http_body_util::StreamBody::new(futures::stream::pending::<
        Result<hyper::body::Frame<tonic::codegen::Bytes>, Infallible>,
    >());
    let call = tokio::spawn(client.send_request(get_request(addr, body)));
    // The headers go out at once; then the connection closes.
    tokio::time::sleep(Duration::from_millis(300)).await;
    socket.shutdown(std::net::Shutdown::Both).unwrap();
    let _ = call.await;
    let told = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            if !log.refused.lock().unwrap().is_empty() {
                return log.refused.lock().unwrap().clone();
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the abandoned call is told to the method");
    assert_eq!(told, [tonic::Code::Cancelled]);
    assert!(log.called.lock().unwrap().is_empty());
}
