//! Issue 16 leftovers, item 4: what a remote-discovery `Get` stream holds between updates does
//! not grow with the remote Service, as for a local stream (`get_stream_memory.rs`): it keeps
//! the views it last sent from (shared with the linked cluster's topics), not a copy of every
//! address it sent.
//!
//! What a stream holds is measured as the heap its response body frees when dropped, counted
//! by this test binary's allocator on the test's own thread (the runtime is current-thread, so
//! the stream is polled and dropped there).

mod support;

use destination::{DestinationMetrics, DestinationService, EndpointTranslator};
use http_body_util::{BodyExt, Full};
use k8s_openapi::api::core::v1::Service;
use linkerd_heap_count::thread_live as live;
use linkerd_index::Event;
use linkerd_runtime::shutdown;
use linkerd2_proxy_api::destination::{GetDestination, Update, update};
use prost::Message;
use serde_json::{Value, json};
use std::time::Duration;
use support::*;
use tonic::codegen::{Bytes, Service as _, http};

#[global_allocator]
static ALLOCATOR: linkerd_heap_count::CountingAllocator = linkerd_heap_count::CountingAllocator;

const NS: &str = "shop";
/// The local mirror Service of `web` in the linked cluster `east`.
const PATH: &str = "web-east.shop.svc.cluster.local:80";
/// The remote Service's endpoint counts, in order; a stream is measured at each.
const SIZES: [usize; 3] = [10, 500, 1000];

fn typed<T: serde::de::DeserializeOwned>(v: Value) -> T {
    serde_json::from_value(v).unwrap()
}

fn pod_ip(p: usize) -> String {
    format!("10.2.{}.{}", p / 200, p % 200 + 1)
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

/// Reads `body`'s messages (dropping each once read, as HTTP/2 does once it has written it)
/// until they have added `want` addresses; anything but an `Add` fails the test.
async fn take_added(body: &mut tonic::body::Body, want: usize) {
    let mut added = 0;
    while added < want {
        let frame = tokio::time::timeout(Duration::from_secs(10), body.frame())
            .await
            .expect("an update in time")
            .expect("the stream goes on")
            .expect("a message");
        let data = frame.into_data().expect("a message, not trailers");
        match Update::decode(&data[5..]).unwrap().update {
            Some(update::Update::Add(add)) => added += add.addrs.len(),
            other => panic!("expected an Add, got {other:?}"),
        }
    }
    assert_eq!(added, want);
}

#[test]
fn a_remote_discovery_stream_holds_as_much_on_1000_remote_endpoints_as_on_10() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        // East: web with every pod, the first 10 ready.
        let east = StateDir::new();
        east.write("service.yaml", &[mk_service(NS, "web", &[("http", 80)])]);
        let last = SIZES[SIZES.len() - 1];
        let pods: Vec<Value> = (0..last)
            .map(|p| mk_pod(NS, &format!("web-{p}"), &pod_ip(p), "web"))
            .collect();
        east.write("pods.yaml", &pods);
        write_web_slice(&east, NS, SIZES[0], pod_ip);

        let (_watches, store) = link_east(east.path()).await;

        // Local: the mirror Service.
        let index = fed_index();
        let mut mirror = mk_service(NS, "web-east", &[("http", 80)]);
        mirror["metadata"]["labels"] = json!({
            "multicluster.linkerd.io/remote-discovery": "east",
            "multicluster.linkerd.io/remote-service": "web",
        });
        index.apply(Event::Apply(typed::<Service>(mirror)));

        let (_trigger, shutdown) = shutdown::channel();
        let mut service = DestinationService::new(
            index.index().clone(),
            EndpointTranslator::new(chart_config()),
            "cluster.local".into(),
            false,
            DestinationMetrics::default(),
            shutdown,
        )
        .with_clusters(store)
        .into_server();

        // One stream to measure at each size, one dropped first (ending the first stream
        // records metric series that later ones reuse) and one kept to the end (the last
        // stream of a Service deletes its series).
        let mut bodies = Vec::new();
        for _ in 0..SIZES.len() + 2 {
            let response = service.call(get_request()).await.unwrap();
            assert_eq!(response.status(), http::StatusCode::OK);
            let mut body = response.into_body();
            take_added(&mut body, SIZES[0]).await;
            bodies.push(body);
        }
        drop(bodies.pop());
        let mut kept = bodies.pop().expect("a stream to keep");

        let mut held = Vec::new();
        let mut size = SIZES[0];
        for next in SIZES {
            if next > size {
                write_web_slice(&east, NS, next, pod_ip);
                for body in &mut bodies {
                    take_added(body, next - size).await;
                }
                take_added(&mut kept, next - size).await;
                size = next;
            }
            let mut body = bodies.pop().expect("a stream to measure");
            // Whatever the stream buffers for a wake-up is made before the measure.
            assert!(
                futures::FutureExt::now_or_never(body.frame()).is_none(),
                "no update pending"
            );
            let before = live();
            drop(body);
            held.push((size, before - live()));
        }

        eprintln!("(remote endpoints, bytes a stream frees when dropped): {held:?}");
        let (_, on_10) = held[0];
        assert!(on_10 > 0, "a stream holds nothing? {held:?}");
        for &(endpoints, bytes) in &held {
            assert!(
                bytes <= on_10,
                "a stream on {endpoints} remote endpoints holds {bytes} bytes, on 10 it held {on_10}: {held:?}"
            );
        }
    });
}
