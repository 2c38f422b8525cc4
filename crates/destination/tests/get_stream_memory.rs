//! Issue 15, item 3: what a `Get` stream holds between updates does not grow with its Service.
//! The stream keeps the view it last sent from (shared with its topic), and its response body
//! keeps no copy of what it sent: no encode buffer as large as the largest `Add`.
//!
//! What a stream holds is measured as the heap its response body frees when dropped, counted
//! by this test binary's allocator on the test's own thread.

mod support;

use destination::{DestinationMetrics, DestinationService, EndpointTranslator};
use futures::FutureExt;
use http_body_util::{BodyExt, Full};
use k8s_openapi::api::{core::v1::Pod, core::v1::Service, discovery::v1::EndpointSlice};
use linkerd_heap_count::thread_live as live;
use linkerd_index::Event;
use linkerd_runtime::shutdown;
use linkerd2_proxy_api::destination::{GetDestination, Update, update};
use prost::Message;
use support::*;
use tonic::codegen::{Bytes, Service as _, http};

#[global_allocator]
static ALLOCATOR: linkerd_heap_count::CountingAllocator = linkerd_heap_count::CountingAllocator;

const NS: &str = "shop";
const PATH: &str = "web.shop.svc.cluster.local:80";
/// The Service's endpoint counts, in order; a stream is measured at each.
const SIZES: [usize; 4] = [10, 500, 1000, 2000];

fn typed<T: serde::de::DeserializeOwned>(v: serde_json::Value) -> T {
    serde_json::from_value(v).unwrap()
}

fn pod_ip(p: usize) -> String {
    format!("10.1.{}.{}", p / 200, p % 200 + 1)
}

/// The Service's slice with the first `n` pods ready.
fn slice(n: usize) -> EndpointSlice {
    let pods: Vec<(String, String)> = (0..n).map(|p| (format!("web-{p}"), pod_ip(p))).collect();
    let eps: Vec<(&str, &str, bool)> = pods
        .iter()
        .map(|(name, ip)| (name.as_str(), ip.as_str(), true))
        .collect();
    typed(mk_slice(NS, "web-1", "web", ("http", 8080), &eps))
}

/// A `Get` request as the generated client sends it.
fn get_request() -> http::Request<Full<Bytes>> {
    let message = GetDestination {
        scheme: "k8s".into(),
        path: PATH.into(),
        context_token: String::new(),
    }
    .encode_to_vec();
    let mut frame = vec![0];
    frame.extend_from_slice(&(message.len() as u32).to_be_bytes());
    frame.extend(message);
    http::Request::builder()
        .method("POST")
        .uri("http://destination/io.linkerd.proxy.destination.Destination/Get")
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(Full::new(frame.into()))
        .unwrap()
}

/// Takes every message `body` has ready (dropping each once read, as HTTP/2 does once it has
/// written it) and returns the number of addresses they added.
fn take_added(body: &mut tonic::body::Body) -> usize {
    let mut added = 0;
    while let Some(frame) = body.frame().now_or_never() {
        let data = frame
            .expect("the stream goes on")
            .expect("a message")
            .into_data()
            .expect("a message, not trailers");
        let update = Update::decode(&data[5..]).unwrap();
        if let Some(update::Update::Add(add)) = update.update {
            added += add.addrs.len();
        }
    }
    added
}

#[test]
fn a_get_stream_holds_as_much_on_a_service_of_2000_endpoints_as_of_10() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let _entered = runtime.enter();
    let index = fed_index();
    index.apply(Event::Apply(typed::<Service>(mk_service(
        NS,
        "web",
        &[("http", 80)],
    ))));
    let last = SIZES[SIZES.len() - 1];
    for p in 0..last {
        let pod = mk_pod(NS, &format!("web-{p}"), &pod_ip(p), "web");
        index.apply(Event::Apply(typed::<Pod>(pod)));
    }
    index.apply(Event::Apply(slice(SIZES[0])));
    let (_trigger, shutdown) = shutdown::channel();
    let mut service = DestinationService::new(
        index.index().clone(),
        EndpointTranslator::new(chart_config()),
        "cluster.local".into(),
        false,
        DestinationMetrics::default(),
        shutdown,
    )
    .into_server();

    // One stream to measure at each size, one dropped first (ending the first stream records
    // metric series that later ones reuse) and one kept to the end (the last stream of a
    // Service deletes its series).
    let mut bodies: Vec<_> = (0..SIZES.len() + 2)
        .map(|_| {
            let response = service
                .call(get_request())
                .now_or_never()
                .expect("answered at once")
                .unwrap();
            assert_eq!(response.status(), http::StatusCode::OK);
            let mut body = response.into_body();
            assert_eq!(take_added(&mut body), SIZES[0]);
            body
        })
        .collect();
    drop(bodies.pop());
    let mut kept = bodies.pop().expect("a stream to keep");

    let mut held = Vec::new();
    let mut size = SIZES[0];
    for next in SIZES {
        if next > size {
            index.apply(Event::Apply(slice(next)));
            for body in &mut bodies {
                assert_eq!(take_added(body), next - size);
            }
            assert_eq!(take_added(&mut kept), next - size);
            size = next;
        }
        let before = live();
        drop(bodies.pop());
        held.push((size, before - live()));
    }

    eprintln!("(endpoints, bytes a stream frees when dropped): {held:?}");
    let (_, on_10) = held[0];
    assert!(on_10 > 0, "a stream holds nothing? {held:?}");
    for &(endpoints, bytes) in &held {
        assert!(
            bytes <= on_10,
            "a stream on {endpoints} endpoints holds {bytes} bytes, on 10 it held {on_10}: {held:?}"
        );
    }
}
