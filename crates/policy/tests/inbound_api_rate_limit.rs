//! HTTPLocalRateLimitPolicies through a real tonic client, in offline mode (acceptance computed
//! in-process, spec/policy.md §4.7, §4.8, §7.3): the oldest policy of a Server (then by name)
//! is its `local_rate_limit`, and it follows edits of the state directory.

mod support;

use linkerd2_proxy_api::inbound::proxy_protocol;
use serde_json::{Value, json};
use support::*;

const NS: &str = "shop";

fn rate_limit(name: &str, created: &str, total: u32) -> Value {
    json!({
        "apiVersion": "policy.linkerd.io/v1alpha1",
        "kind": "HTTPLocalRateLimitPolicy",
        "metadata": {"name": name, "namespace": NS, "creationTimestamp": created},
        "spec": {
            "targetRef": {"group": "policy.linkerd.io", "kind": "Server", "name": "web-http"},
            "total": {"requestsPerSecond": total},
        },
    })
}

/// The name and total rate of the server's local rate limit, if any.
fn limit(server: &linkerd2_proxy_api::inbound::Server) -> Option<(String, u32)> {
    let proxy_protocol::Kind::Http1(http) = protocol(server) else {
        panic!("{:?}", protocol(server))
    };
    let rl = http.local_rate_limit.as_ref()?;
    Some((
        meta_name(&rl.metadata),
        rl.total.as_ref().map_or(0, |t| t.requests_per_second),
    ))
}

#[tokio::test]
async fn the_oldest_rate_limit_of_a_server_applies() {
    let state = StateDir::new();
    state.write("pod.yaml", &[mk_pod(NS, "web-a", "web", ("http", 8080))]);
    state.write(
        "server.yaml",
        &[mk_server(NS, "web-http", "web", json!(8080), "HTTP/1")],
    );
    state.write(
        "rl.yaml",
        &[
            rate_limit("a-new", "2026-05-04T10:00:00Z", 5),
            rate_limit("b-old", "2026-05-04T09:00:00Z", 100),
        ],
    );
    let mut h = Harness::start(state.path()).await;
    let mut stream = h
        .watch_port(&pod_workload(NS, "web-a"), 8080)
        .await
        .unwrap();
    assert_eq!(
        limit(&next(&mut stream).await),
        Some((
            "policy.linkerd.io/HTTPLocalRateLimitPolicy/b-old".into(),
            100
        ))
    );

    // The older one removed, the other applies.
    state.write("rl.yaml", &[rate_limit("a-new", "2026-05-04T10:00:00Z", 5)]);
    assert_eq!(
        limit(&next(&mut stream).await),
        Some(("policy.linkerd.io/HTTPLocalRateLimitPolicy/a-new".into(), 5))
    );
}
