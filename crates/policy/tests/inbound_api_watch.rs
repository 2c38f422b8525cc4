//! WatchPort update semantics (spec §4.9): current value first, one message per change,
//! nothing for an identical recomputation, and a clean end when the workload is deleted or the
//! server shuts down.

mod support;

use linkerd2_proxy_api::inbound::proxy_protocol;
use serde_json::json;
use support::*;

const NS: &str = "shop";

fn web_pod() -> serde_json::Value {
    mk_pod(NS, "web-0", "web", ("http", 8080))
}

#[tokio::test]
async fn servers_and_authorizations_come_and_go() {
    let state = StateDir::new();
    state.write("pod.yaml", &[web_pod()]);
    let mut h = Harness::start(state.path()).await;
    let mut stream = h
        .watch_port(&pod_workload(NS, "web-0"), 8080)
        .await
        .unwrap();

    let first = next(&mut stream).await;
    assert_eq!(
        sorted(&first.labels),
        labels("", "default", "all-unauthenticated")
    );
    assert!(matches!(protocol(&first), proxy_protocol::Kind::Detect(_)));
    assert_quiet(&mut stream).await;

    // A Server selecting the named port takes it over.
    state.write(
        "server.yaml",
        &[mk_server(NS, "web-http", "web", json!("http"), "HTTP/1")],
    );
    let server = next(&mut stream).await;
    assert_proxy_valid(&server);
    assert_eq!(
        sorted(&server.labels),
        labels("policy.linkerd.io", "server", "web-http")
    );
    assert!(matches!(protocol(&server), proxy_protocol::Kind::Http1(_)));
    assert!(server.authorizations.is_empty());

    // A ServerAuthorization with no networks: the cluster networks go on the wire.
    state.write(
        "saz.yaml",
        &[mk_server_authorization(NS, "web-public", "web-http", &[])],
    );
    let authorized = next(&mut stream).await;
    assert_proxy_valid(&authorized);
    assert_eq!(authz_names(&authorized.authorizations), ["web-public"]);
    let authz = &authorized.authorizations[0];
    assert_eq!(
        meta_name(&authz.metadata),
        "policy.linkerd.io/serverauthorization/web-public"
    );
    assert_eq!(
        sorted(&authz.labels),
        labels("policy.linkerd.io", "serverauthorization", "web-public")
    );
    assert_eq!(authn(authz), Authn::Unauthenticated);
    let cluster: Vec<String> = cluster_networks().iter().map(|n| n.to_string()).collect();
    assert_eq!(networks(authz), cluster);

    // A change elsewhere in the namespace (an authorization of another Server) recomputes
    // the server to an identical value: nothing is sent.
    state.write(
        "other.yaml",
        &[mk_server_authorization(NS, "api-public", "api", &[])],
    );
    assert_quiet(&mut stream).await;

    // The Server goes away: back to the default, whose authorization is the cluster default.
    state.remove("server.yaml");
    let back = next(&mut stream).await;
    assert_eq!(
        sorted(&back.labels),
        labels("", "default", "all-unauthenticated")
    );
    assert_eq!(back, first);
}

// The next three tests are ignored until the index recomputes inbound topics on workload
// events: Pod apply/delete and ExternalWorkload delete do not add the namespace to
// `Touched::inbound_namespaces` (crates/index/src/store.rs).

#[tokio::test]
async fn deleting_the_pod_ends_the_stream_with_ok() {
    let state = StateDir::new();
    state.write("pod.yaml", &[web_pod()]);
    let mut h = Harness::start(state.path()).await;
    let mut stream = h
        .watch_port(&pod_workload(NS, "web-0"), 8080)
        .await
        .unwrap();
    next(&mut stream).await;

    state.remove("pod.yaml");
    assert_ends_ok(&mut stream).await;
    let err = h
        .get_port(&pod_workload(NS, "web-0"), 8080)
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::NotFound);
}

#[tokio::test]
async fn deleting_the_external_workload_ends_the_stream_with_ok() {
    let state = StateDir::new();
    state.write(
        "ew.yaml",
        &[json!({
            "apiVersion": "workload.linkerd.io/v1beta1",
            "kind": "ExternalWorkload",
            "metadata": {"name": "vm-1", "namespace": NS, "labels": {"app": "vm"}},
            "spec": {
                "meshTLS": {"identity": "spiffe://root.linkerd.cluster.local/vm-1", "serverName": "vm-1.cluster.local"},
                "workloadIPs": [{"ip": "10.20.3.201"}],
                "ports": [{"name": "http", "port": 8080}],
            },
        })],
    );
    let mut h = Harness::start(state.path()).await;
    let workload = format!(r#"{{"ns":"{NS}","external_workload":"vm-1"}}"#);
    let mut stream = h.watch_port(&workload, 8080).await.unwrap();
    assert_eq!(
        next(&mut stream).await.labels["name"],
        "all-unauthenticated"
    );

    state.remove("ew.yaml");
    assert_ends_ok(&mut stream).await;
}

#[tokio::test]
async fn a_pod_annotation_change_updates_the_default_policy() {
    let state = StateDir::new();
    state.write("pod.yaml", &[web_pod()]);
    let mut h = Harness::start(state.path()).await;
    let mut stream = h
        .watch_port(&pod_workload(NS, "web-0"), 8080)
        .await
        .unwrap();
    assert_eq!(
        next(&mut stream).await.labels["name"],
        "all-unauthenticated"
    );

    let mut pod = web_pod();
    pod["metadata"]["annotations"] = json!({"config.linkerd.io/default-inbound-policy": "deny"});
    state.write("pod.yaml", &[pod]);
    let denied = next(&mut stream).await;
    assert_eq!(sorted(&denied.labels), labels("", "default", "deny"));
    assert!(denied.authorizations.is_empty());
}

#[tokio::test]
async fn a_protocol_change_is_one_message() {
    let state = StateDir::new();
    state.write("pod.yaml", &[web_pod()]);
    state.write(
        "server.yaml",
        &[mk_server(NS, "web", "web", json!(8080), "HTTP/1")],
    );
    let mut h = Harness::start(state.path()).await;
    let mut stream = h
        .watch_port(&pod_workload(NS, "web-0"), 8080)
        .await
        .unwrap();
    assert!(matches!(
        protocol(&next(&mut stream).await),
        proxy_protocol::Kind::Http1(_)
    ));
    state.write(
        "server.yaml",
        &[mk_server(NS, "web", "web", json!(8080), "HTTP/2")],
    );
    assert!(matches!(
        protocol(&next(&mut stream).await),
        proxy_protocol::Kind::Http2(_)
    ));
    assert_quiet(&mut stream).await;
}

#[tokio::test]
async fn shutdown_ends_open_streams_with_ok() {
    let state = StateDir::new();
    state.write("pod.yaml", &[web_pod()]);
    let mut h = Harness::start(state.path()).await;
    let mut streams = Vec::new();
    for port in [8080, 4191] {
        let mut stream = h
            .watch_port(&pod_workload(NS, "web-0"), port)
            .await
            .unwrap();
        next(&mut stream).await;
        streams.push(stream);
    }
    h.shutdown();
    for stream in &mut streams {
        assert_ends_ok(stream).await;
    }
}
