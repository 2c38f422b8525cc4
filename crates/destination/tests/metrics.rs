//! `/metrics` series of the Destination service: subscriber gauges follow open streams and are
//! deleted with the last one; the gRPC series are go-grpc-prometheus's (spec §F).

mod support;

use destination::DestinationMetrics;
use linkerd_index::IndexMetrics;
use prometheus_client::registry::Registry;
use std::time::Duration;
use support::*;

fn encode(registry: &Registry) -> String {
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, registry).unwrap();
    text
}

/// The lines of `text` that start with `name`, sorted (a family's series come in hash order).
fn series<'a>(text: &'a str, name: &str) -> Vec<&'a str> {
    let mut lines: Vec<&str> = text.lines().filter(|l| l.starts_with(name)).collect();
    lines.sort_unstable();
    lines
}

#[tokio::test]
async fn subscribers_follow_streams_and_series_go_with_the_last_one() {
    let mut registry = Registry::default();
    let index_metrics = IndexMetrics::register(&mut registry);
    let metrics = DestinationMetrics::register(&mut registry);
    let index = offline_index(&fixture_dir("emojivoto"), index_metrics).await;
    let mut h = Harness::serve_index_with_metrics(index, chart_config(), false, metrics).await;

    let mut a = h
        .get("web-svc.emojivoto.svc.cluster.local:80", "")
        .await
        .unwrap();
    let mut b = h
        .get("web-svc.emojivoto.svc.cluster.local:80", "")
        .await
        .unwrap();
    next(&mut a).await;
    next(&mut b).await;
    let text = encode(&registry);
    assert_eq!(
        series(&text, "endpoints_subscribers{"),
        [
            r#"endpoints_subscribers{cluster="local",namespace="emojivoto",service="web-svc",port="80",hostname="",nodename=""} 2"#
        ]
    );
    assert!(
        text.contains("pod_cache_size{cluster=\"local\"} 6"),
        "{text}"
    );
    assert!(
        text.contains("service_cache_size{cluster=\"local\"} 3"),
        "{text}"
    );
    // Counters that nothing has incremented are there at 0, so that `increase()` sees the
    // first increment.
    for zero in [
        "offline_invalid_files_total{cluster=\"local\"} 0\n",
        "offline_conflicting_objects_total{cluster=\"local\"} 0\n",
        "offline_reloads_total{cluster=\"local\"} 0\n",
        "offline_stale_files{cluster=\"local\"} 0\n",
        "index_invalid_objects_total{cluster=\"local\",kind=\"Pod\"} 0\n",
        "index_invalid_objects_total{cluster=\"local\",kind=\"EndpointSlice\"} 0\n",
    ] {
        assert!(text.contains(zero), "{zero}{text}");
    }

    // Closing streams must not deadlock the metrics (regression: the gauge's read guard was held
    // while removing the series) and the series goes with the last subscriber.
    drop(a);
    let wait = |n: usize| {
        let registry = &registry;
        async move {
            for _ in 0..100 {
                if series(&encode(registry), "endpoints_subscribers{").len() == n
                    && (n == 0 || encode(registry).contains("nodename=\"\"} 1"))
                {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            panic!("subscriber series never reached {n}: {}", encode(registry));
        }
    };
    wait(1).await;
    drop(b);
    wait(0).await;
    let text = encode(&registry);
    assert!(text.contains(r#"grpc_server_started_total{grpc_type="server_stream",grpc_service="io.linkerd.proxy.destination.Destination",grpc_method="Get"} 2"#), "{text}");
    assert!(
        text.contains(r#"grpc_method="Get",grpc_code="OK"} 2"#),
        "{text}"
    );
}

const GRPC: &str =
    r#"grpc_type="server_stream",grpc_service="io.linkerd.proxy.destination.Destination""#;
const WEB: &str = r#"cluster="local",namespace="emojivoto",service="web-svc",port="80",hostname="",nodename="node-1""#;
const NOPE: &str =
    r#"cluster="local",namespace="emojivoto",service="nope",port="80",hostname="",nodename="""#;

/// A server over the emojivoto fixture, counting in the returned registry.
async fn serve_emojivoto() -> (Registry, Harness) {
    let mut registry = Registry::default();
    let index_metrics = IndexMetrics::register(&mut registry);
    let metrics = DestinationMetrics::register(&mut registry);
    let index = offline_index(&fixture_dir("emojivoto"), index_metrics).await;
    let h = Harness::serve_index_with_metrics(index, chart_config(), false, metrics).await;
    (registry, h)
}

/// Waits until `done` holds of the encoded registry, failing the test after 2 s.
async fn wait_until(registry: &Registry, what: &str, done: impl Fn(&str) -> bool) -> String {
    for _ in 0..100 {
        let text = encode(registry);
        if done(&text) {
            return text;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("{what} never happened: {}", encode(registry));
}

#[tokio::test]
async fn get_streams_expose_their_snapshot_and_grpc_series() {
    let (registry, mut h) = serve_emojivoto().await;
    let mut web = h
        .get(
            "web-svc.emojivoto.svc.cluster.local:80",
            r#"{"ns":"emojivoto","nodeName":"node-1"}"#,
        )
        .await
        .unwrap();
    assert_eq!(added(&next(&mut web).await).len(), 1);
    let mut nope = h
        .get("nope.emojivoto.svc.cluster.local:80", "")
        .await
        .unwrap();
    next(&mut nope).await;

    let text = encode(&registry);
    assert_eq!(
        series(&text, "endpoints_subscribers{"),
        [
            format!("endpoints_subscribers{{{NOPE}}} 1"),
            format!("endpoints_subscribers{{{WEB}}} 1"),
        ]
    );
    assert_eq!(
        series(&text, "endpoints_pods{"),
        [
            format!("endpoints_pods{{{NOPE}}} 0"),
            format!("endpoints_pods{{{WEB}}} 1"),
        ]
    );
    assert_eq!(
        series(&text, "endpoints_exists{"),
        [
            format!("endpoints_exists{{{NOPE}}} 0"),
            format!("endpoints_exists{{{WEB}}} 1"),
        ]
    );
    assert_eq!(
        series(&text, "endpoints_updates_total{"),
        [
            format!("endpoints_updates_total{{{NOPE}}} 1"),
            format!("endpoints_updates_total{{{WEB}}} 1"),
        ]
    );
    assert_eq!(
        series(&text, "grpc_server_msg_received_total{"),
        [format!(
            r#"grpc_server_msg_received_total{{{GRPC},grpc_method="Get"}} 2"#
        )]
    );
    assert_eq!(
        series(&text, "grpc_server_msg_sent_total{"),
        [format!(
            r#"grpc_server_msg_sent_total{{{GRPC},grpc_method="Get"}} 2"#
        )]
    );
    // Nothing has ended yet.
    assert_eq!(
        series(&text, "grpc_server_handling_seconds"),
        [] as [&str; 0]
    );

    drop(web);
    let text = wait_until(&registry, "the web-svc series deleted", |text| {
        !text.contains("service=\"web-svc\"")
    })
    .await;
    assert_eq!(
        series(&text, "endpoints_pods{"),
        [format!("endpoints_pods{{{NOPE}}} 0")]
    );
    assert_eq!(
        series(&text, "endpoints_exists{"),
        [format!("endpoints_exists{{{NOPE}}} 0")]
    );
    assert!(
        text.contains(&format!(
            r#"grpc_server_handled_total{{{GRPC},grpc_method="Get",grpc_code="OK"}} 1"#
        )),
        "{text}"
    );
    // A stream that lasted well under 100 ms: in every bucket (the sum's value is left out).
    let handling: Vec<&str> = series(&text, "grpc_server_handling_seconds_")
        .into_iter()
        .map(|line| match line.split_once("} ") {
            Some((series, _)) if series.contains("_sum{") => series,
            _ => line,
        })
        .collect();
    let get = format!(r#"{GRPC},grpc_method="Get""#);
    assert_eq!(
        handling,
        [
            format!(r#"grpc_server_handling_seconds_bucket{{le="+Inf",{get}}} 1"#),
            format!(r#"grpc_server_handling_seconds_bucket{{le="0.1",{get}}} 1"#),
            format!(r#"grpc_server_handling_seconds_bucket{{le="1.0",{get}}} 1"#),
            format!(r#"grpc_server_handling_seconds_bucket{{le="300.0",{get}}} 1"#),
            format!(r#"grpc_server_handling_seconds_bucket{{le="3600.0",{get}}} 1"#),
            format!("grpc_server_handling_seconds_count{{{get}}} 1"),
            format!("grpc_server_handling_seconds_sum{{{get}"),
        ]
    );
    drop(nope);
    wait_until(&registry, "every endpoints series deleted", |text| {
        series(text, "endpoints_").is_empty()
    })
    .await;
}

#[tokio::test]
async fn a_refused_get_is_handled_with_its_code() {
    let (registry, mut h) = serve_emojivoto().await;
    let status = h.get("10.96.0.1:80", "").await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    let text = encode(&registry);
    assert!(
        text.contains(&format!(
            r#"grpc_server_handled_total{{{GRPC},grpc_method="Get",grpc_code="InvalidArgument"}} 1"#
        )),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            r#"grpc_server_handling_seconds_count{{{GRPC},grpc_method="Get"}} 1"#
        )),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            r#"grpc_server_msg_received_total{{{GRPC},grpc_method="Get"}} 1"#
        )),
        "{text}"
    );
}

#[tokio::test]
async fn service_subscribers_follow_service_profile_streams() {
    let (registry, mut h) = serve_emojivoto().await;
    let mut a = h
        .get_profile("web-svc.emojivoto.svc.cluster.local:80", "")
        .await
        .unwrap();
    let mut b = h
        .get_profile(
            "web-svc.emojivoto.svc.cluster.local:80",
            r#"{"ns":"emojivoto"}"#,
        )
        .await
        .unwrap();
    next_profile(&mut a).await;
    next_profile(&mut b).await;
    let text = encode(&registry);
    assert_eq!(
        series(&text, "service_subscribers{"),
        [r#"service_subscribers{namespace="emojivoto",name="web-svc"} 2"#]
    );
    assert_eq!(
        series(&text, "grpc_server_msg_received_total{"),
        [format!(
            r#"grpc_server_msg_received_total{{{GRPC},grpc_method="GetProfile"}} 2"#
        )]
    );

    drop(a);
    let text = wait_until(&registry, "one service subscriber left", |text| {
        text.contains(r#"service_subscribers{namespace="emojivoto",name="web-svc"} 1"#)
    })
    .await;
    assert!(
        text.contains(&format!(
            r#"grpc_server_handling_seconds_count{{{GRPC},grpc_method="GetProfile"}} 1"#
        )),
        "{text}"
    );
    drop(b);
    let text = wait_until(&registry, "the service series deleted", |text| {
        series(text, "service_subscribers{").is_empty()
    })
    .await;
    assert!(
        text.contains(&format!(
            r#"grpc_server_handled_total{{{GRPC},grpc_method="GetProfile",grpc_code="OK"}} 2"#
        )),
        "{text}"
    );
}

/// A `GetDestination` whose `path` (tag 2) is not UTF-8.
#[derive(Clone, PartialEq, prost::Message)]
struct PathNotUtf8 {
    #[prost(bytes = "vec", tag = "2")]
    path: Vec<u8>,
}

/// A call whose request does not decode never reaches the method; it is counted as started
/// and handled `Internal`, as grpc-go's server and go-grpc-prometheus count it upstream.
#[tokio::test]
async fn a_get_whose_request_does_not_decode_is_handled_internal() {
    let (registry, h) = serve_emojivoto().await;
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", h.addr))
        .unwrap()
        .connect()
        .await
        .unwrap();
    for method in ["Get", "GetProfile"] {
        let mut grpc = tonic::client::Grpc::new(channel.clone());
        grpc.ready().await.unwrap();
        let path = format!("/io.linkerd.proxy.destination.Destination/{method}");
        let status = grpc
            .server_streaming(
                tonic::Request::new(PathNotUtf8 { path: vec![0xff] }),
                path.parse().unwrap(),
                tonic_prost::ProstCodec::<PathNotUtf8, linkerd2_proxy_api::destination::Update>::default(),
            )
            .await
            .expect_err("refused");
        assert_eq!(status.code(), tonic::Code::Internal, "{status:?}");
    }
    let text = encode(&registry);
    for method in ["Get", "GetProfile"] {
        assert!(
            text.contains(&format!(
                r#"grpc_server_started_total{{{GRPC},grpc_method="{method}"}} 1"#
            )),
            "{text}"
        );
        assert!(
            text.contains(&format!(
                r#"grpc_server_handled_total{{{GRPC},grpc_method="{method}",grpc_code="Internal"}} 1"#
            )),
            "{text}"
        );
        // Its message was never received.
        assert!(
            !text.contains(&format!(
                r#"grpc_server_msg_received_total{{{GRPC},grpc_method="{method}"}}"#
            )),
            "{text}"
        );
    }
}

/// A `Get` whose client's connection closes before its request arrives (the proxy restarted
/// between its headers and its message) is counted as started and handled `Canceled`, as
/// grpc-go counts a handler whose receive failed with the transport. It was not counted.
#[tokio::test]
async fn a_get_whose_connection_closes_before_its_request_is_handled_canceled() {
    let (registry, h) = serve_emojivoto().await;
    // hyper's client keeps its socket in a task of its own: a clone of the socket closes it.
    let tcp = std::net::TcpStream::connect(h.addr).unwrap();
    tcp.set_nonblocking(true).unwrap();
    let socket = tcp.try_clone().unwrap();
    let (mut client, connection) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(tokio::net::TcpStream::from_std(tcp).unwrap()),
    )
    .await
    .unwrap();
    tokio::spawn(connection);
    let never = http_body_util::StreamBody::new(futures::stream::pending::<
        Result<hyper::body::Frame<hyper::body::Bytes>, std::convert::Infallible>,
    >());
    let request = tonic::codegen::http::Request::post(format!(
        "http://{}/io.linkerd.proxy.destination.Destination/Get",
        h.addr
    ))
    .header("content-type", "application/grpc")
    .header("te", "trailers")
    .body(never)
    .unwrap();
    let call = tokio::spawn(client.send_request(request));
    // The headers go out at once; then the connection closes.
    tokio::time::sleep(Duration::from_millis(300)).await;
    socket.shutdown(std::net::Shutdown::Both).unwrap();
    let _ = call.await;

    let handled =
        format!(r#"grpc_server_handled_total{{{GRPC},grpc_method="Get",grpc_code="Canceled"}} 1"#);
    let mut text = encode(&registry);
    for _ in 0..100 {
        if text.contains(&handled) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        text = encode(&registry);
    }
    assert!(text.contains(&handled), "{text}");
    assert!(
        text.contains(&format!(
            r#"grpc_server_started_total{{{GRPC},grpc_method="Get"}} 1"#
        )),
        "{text}"
    );
}
