//! `/metrics` series of the Destination service: subscriber gauges follow open streams and are
//! deleted with the last one (spec §F).

mod support;

use destination::DestinationMetrics;
use linkerd_index::{Index, IndexMetrics, source::offline::OfflineSource};
use prometheus_client::registry::Registry;
use std::time::Duration;
use support::*;

fn encode(registry: &Registry) -> String {
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, registry).unwrap();
    text
}

fn series<'a>(text: &'a str, name: &str) -> Vec<&'a str> {
    text.lines().filter(|l| l.starts_with(name)).collect()
}

#[tokio::test]
async fn subscribers_follow_streams_and_series_go_with_the_last_one() {
    let mut registry = Registry::default();
    let index_metrics = IndexMetrics::register(&mut registry);
    let metrics = DestinationMetrics::register(&mut registry);
    let index = Index::new(index_metrics.clone());
    index.spawn_watches(&OfflineSource::start(fixture_dir("emojivoto"), index_metrics).unwrap());
    index.ready().wait_for(|r| *r).await.unwrap();
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
            r#"endpoints_subscribers{cluster="local",namespace="emojivoto",service="web-svc",port="80",hostname=""} 2"#
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

    // Closing streams must not deadlock the metrics (regression: the gauge's read guard was held
    // while removing the series) and the series goes with the last subscriber.
    drop(a);
    let wait = |n: usize| {
        let registry = &registry;
        async move {
            for _ in 0..100 {
                if series(&encode(registry), "endpoints_subscribers{").len() == n
                    && (n == 0 || encode(registry).contains("hostname=\"\"} 1"))
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
        text.contains(r#"grpc_method="Get",grpc_code="Ok"} 2"#),
        "{text}"
    );
}
