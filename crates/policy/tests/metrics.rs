//! The gRPC series of `/metrics` (spec §8) after real requests.

mod support;

use policy::PolicyMetrics;
use prometheus_client::{encoding::text::encode, registry::Registry};
use support::*;

const SERVICE: &str = "io.linkerd.proxy.inbound.InboundServerPolicies";

fn series(text: &str, name: &str, method: &str, extra: &str) -> Option<String> {
    let method = format!("grpc_method=\"{method}\"");
    text.lines()
        .find(|l| {
            l.starts_with(name)
                && l.contains(&method)
                && l.contains(&format!("grpc_service=\"{SERVICE}\""))
                && l.contains(extra)
        })
        .and_then(|l| l.rsplit(' ').next())
        .map(str::to_string)
}

#[tokio::test]
async fn grpc_server_series() {
    let mut registry = Registry::default();
    let metrics = PolicyMetrics::register(&mut registry);
    let encode_now = |registry: &Registry| {
        let mut text = String::new();
        encode(&mut text, registry).unwrap();
        text
    };

    // The OK series exist before any request.
    let text = encode_now(&registry);
    assert_eq!(
        series(
            &text,
            "grpc_server_handled_total",
            "GetPort",
            "grpc_code=\"OK\""
        )
        .as_deref(),
        Some("0")
    );

    let mut h =
        Harness::start_with_metrics(&fixture_dir("emojivoto"), chart_config(), metrics).await;
    h.pod_port("emojivoto", "web-djjwbqr6lt-sfd7g", 8080).await;
    h.get_port("bad", 8080).await.unwrap_err();
    h.get_port(&pod_workload("emojivoto", "nosuch"), 8080)
        .await
        .unwrap_err();
    let mut stream = h
        .watch_port(&pod_workload("emojivoto", "web-djjwbqr6lt-sfd7g"), 8080)
        .await
        .unwrap();
    next(&mut stream).await;

    let text = encode_now(&registry);
    let get = |name: &str, method: &str, extra: &str| series(&text, name, method, extra);
    assert_eq!(
        get(
            "grpc_server_started_total",
            "GetPort",
            "grpc_type=\"unary\""
        )
        .as_deref(),
        Some("3")
    );
    assert_eq!(
        get("grpc_server_msg_received_total", "GetPort", "").as_deref(),
        Some("3")
    );
    assert_eq!(
        get("grpc_server_handled_total", "GetPort", "grpc_code=\"OK\"").as_deref(),
        Some("1")
    );
    assert_eq!(
        get(
            "grpc_server_handled_total",
            "GetPort",
            "grpc_code=\"INVALID_ARGUMENT\""
        )
        .as_deref(),
        Some("1")
    );
    assert_eq!(
        get(
            "grpc_server_handled_total",
            "GetPort",
            "grpc_code=\"NOT_FOUND\""
        )
        .as_deref(),
        Some("1")
    );
    assert_eq!(
        get("grpc_server_handling_seconds_count", "GetPort", "").as_deref(),
        Some("3")
    );
    // Unary responses are not counted as sent messages.
    assert_eq!(get("grpc_server_msg_sent_total", "GetPort", ""), None);

    assert_eq!(
        get(
            "grpc_server_started_total",
            "WatchPort",
            "grpc_type=\"server_stream\""
        )
        .as_deref(),
        Some("1")
    );
    assert_eq!(
        get("grpc_server_msg_sent_total", "WatchPort", "").as_deref(),
        Some("1")
    );
    assert!(text.contains("inbound_port_subscribers 1\n"), "{text}");

    // A stream the client drops is handled OK.
    drop(stream);
    let mut handled = None;
    for _ in 0..50 {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        let text = encode_now(&registry);
        handled = series(
            &text,
            "grpc_server_handled_total",
            "WatchPort",
            "grpc_code=\"OK\"",
        );
        if handled.as_deref() == Some("1") {
            assert!(text.contains("inbound_port_subscribers 0\n"), "{text}");
            break;
        }
    }
    assert_eq!(handled.as_deref(), Some("1"));
}

/// A `PortSpec` whose `workload` (tag 1) is not UTF-8.
#[derive(Clone, PartialEq, prost::Message)]
struct WorkloadNotUtf8 {
    #[prost(bytes = "vec", tag = "1")]
    workload: Vec<u8>,
}

/// A `WatchPort` whose request does not decode never reaches the method; it is counted as
/// started and handled `INTERNAL`, with no message received.
#[tokio::test]
async fn a_watch_port_whose_request_does_not_decode_is_handled_internal() {
    let mut registry = Registry::default();
    let metrics = PolicyMetrics::register(&mut registry);
    let h = Harness::start_with_metrics(&fixture_dir("emojivoto"), chart_config(), metrics).await;
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", h.addr))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.unwrap();
    let status = grpc
        .server_streaming(
            tonic::Request::new(WorkloadNotUtf8 {
                workload: vec![0xff],
            }),
            format!("/{SERVICE}/WatchPort").parse().unwrap(),
            tonic_prost::ProstCodec::<WorkloadNotUtf8, linkerd2_proxy_api::inbound::Server>::default(),
        )
        .await
        .expect_err("refused");
    assert_eq!(status.code(), tonic::Code::Internal, "{status:?}");

    let mut text = String::new();
    encode(&mut text, &registry).unwrap();
    let get = |name: &str, extra: &str| series(&text, name, "WatchPort", extra);
    assert_eq!(get("grpc_server_started_total", "").as_deref(), Some("1"));
    assert_eq!(
        get("grpc_server_handled_total", "grpc_code=\"INTERNAL\"").as_deref(),
        Some("1")
    );
    assert_eq!(get("grpc_server_msg_received_total", ""), None);
}
