//! `dst-diag policy inbound` as a process against an InboundServerPolicies server started in
//! this test on `127.0.0.1:0`, serving the emojivoto fixture with the chart-default flags.

mod support;

use linkerd_index::{
    ClusterSource, IndexMetrics, Watches,
    inbound::{DefaultPolicy, InboundConfig, InboundIndex},
    source::offline::OfflineSource,
};
use linkerd_runtime::shutdown;
use policy::{
    InboundPolicyService, InboundTranslator, PolicyMetrics, args::parse_networks, bind, serve,
};
use serde_json::{Value, json};
use std::{net::SocketAddr, path::Path};
use support::*;

const VOTING: &str = "voting-qbtpmtmk74-gdg57";

/// The policy-controller flags the fixtures assume (the chart defaults), with route acceptance
/// decided in-process as offline mode does.
fn chart_config() -> InboundConfig {
    InboundConfig {
        cluster_networks: parse_networks(
            "10.0.0.0/8,100.64.0.0/10,172.16.0.0/12,192.168.0.0/16,fd00::/8",
        )
        .unwrap()
        .0,
        default_policy: DefaultPolicy::AllUnauthenticated,
        probe_networks: parse_networks("0.0.0.0/0,::/0").unwrap().0,
        identity_domain: "cluster.local".into(),
        control_plane_namespace: "linkerd".into(),
        compute_route_acceptance: true,
    }
}

/// An InboundServerPolicies server over the emojivoto fixture; it stops when the trigger is
/// dropped.
async fn start_policy_server() -> (SocketAddr, shutdown::Trigger) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/emojivoto");
    let config = chart_config();
    let metrics = IndexMetrics::default();
    let translator = InboundTranslator::new(config.cluster_networks.clone());
    let index = InboundIndex::new(config, metrics.clone());
    let mut watches = Watches::new(metrics.clone());
    index.watch(&mut watches);
    let source = OfflineSource::new(&dir, metrics).expect("fixture dir");
    // Offline mode delivers the whole directory before `start` returns.
    watches.start(&ClusterSource::Offline(source)).await;
    let (trigger, shutdown) = shutdown::channel();
    let service = InboundPolicyService::new(
        index,
        translator,
        PolicyMetrics::default(),
        shutdown.clone(),
    );
    let (listener, addr) = bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
    tokio::spawn(serve(listener, service, shutdown));
    (addr, trigger)
}

#[tokio::test]
async fn table_shows_voting_grpc_and_its_authorization() {
    let (addr, _server) = start_policy_server().await;
    let policy = addr.to_string();
    let workload = format!("emojivoto:{VOTING}");
    let child = dst_diag(&["policy", "inbound", &workload, "8080", "--policy", &policy]);
    let lines = read_lines(child, 30).await;
    assert_eq!(
        lines,
        [
            "SERVER server:voting-grpc",
            "protocol:             gRPC",
            "rate limit:           none",
            "authorizations:       1",
            "AUTHORIZATION                      NETWORKS         AUTHENTICATION",
            &format!(
                "authorizationpolicy:voting-policy  0.0.0.0/0, ::/0  mTLS identities={WEB_ID}"
            ),
            "routes:               1",
            "ROUTE            HOSTS  RULE  MATCHES  FILTERS",
            "default:default  *      1     *        -",
            "route authorizations: none",
        ]
    );
}

#[tokio::test]
async fn json_shows_voting_grpc_and_its_authorization() {
    let (addr, _server) = start_policy_server().await;
    let policy = format!("http://{addr}");
    let workload = format!(r#"{{"ns":"emojivoto","pod":"{VOTING}"}}"#);
    let child = dst_diag(&[
        "policy", "inbound", &workload, "8080", "--policy", &policy, "-o", "json",
    ]);
    let lines = read_lines(child, 1).await;
    let server: Value = serde_json::from_str(&lines[0]).expect("a JSON line");

    assert_eq!(server["name"], "server:voting-grpc");
    assert_eq!(
        server["labels"],
        json!({"group": "policy.linkerd.io", "kind": "server", "name": "voting-grpc"})
    );
    assert_eq!(server["protocol"], json!({"kind": "grpc", "timeout": null}));
    assert_eq!(server["rate_limit"], Value::Null);
    let authzs = server["authorizations"].as_array().expect("authorizations");
    assert_eq!(authzs.len(), 1);
    assert_eq!(authzs[0]["name"], "authorizationpolicy:voting-policy");
    assert_eq!(
        authzs[0]["authentication"],
        json!({"permit": "mtls_identities", "identities": [WEB_ID], "suffixes": []})
    );
    assert_eq!(
        authzs[0]["networks"],
        json!([{"net": "0.0.0.0/0", "except": []}, {"net": "::/0", "except": []}])
    );
    let routes = server["routes"].as_array().expect("routes");
    assert_eq!(routes.len(), 1);
    assert_eq!(routes[0]["name"], "default:default");
    assert_eq!(routes[0]["type"], "grpc");
}

#[tokio::test]
async fn web_http_shows_routes_with_their_authorizations() {
    let (addr, _server) = start_policy_server().await;
    let policy = addr.to_string();
    let child = dst_diag(&[
        "policy",
        "inbound",
        "emojivoto:web-djjwbqr6lt-sfd7g",
        "8080",
        "--policy",
        &policy,
        "-o",
        "json",
    ]);
    let lines = read_lines(child, 1).await;
    let server: Value = serde_json::from_str(&lines[0]).expect("a JSON line");
    assert_eq!(server["name"], "server:web-http");
    assert_eq!(server["protocol"]["kind"], "http1");
    let routes = server["routes"].as_array().expect("routes");
    let names: Vec<&str> = routes.iter().filter_map(|r| r["name"].as_str()).collect();
    assert_eq!(
        names,
        [
            "httproute.policy.linkerd.io:web-api",
            "httproute.gateway.networking.k8s.io:web-static"
        ]
    );
    assert_eq!(
        routes[0]["rules"][0]["matches"][0],
        json!({"path": {"exact": "/api/list"}, "method": "GET", "headers": [], "query_params": []})
    );
    assert_eq!(
        routes[0]["authorizations"][0]["name"],
        "authorizationpolicy:web-api"
    );
    assert_eq!(
        routes[1]["authorizations"][0]["networks"][2],
        json!({"net": "10.20.0.0/16", "except": ["10.20.3.200/32"]})
    );
}

#[tokio::test]
async fn unknown_pod_is_a_one_line_not_found() {
    let (addr, _server) = start_policy_server().await;
    let policy = format!("http://{addr}");
    let child = dst_diag(&[
        "policy",
        "inbound",
        "emojivoto:nosuch",
        "8080",
        "--policy",
        &policy,
    ]);
    let (code, stdout, stderr) = wait_output(child).await;
    assert_eq!(code, Some(1), "stderr: {stderr}");
    assert_eq!(stdout, "");
    assert_eq!(
        stderr,
        "dst-diag: WatchPort emojivoto:nosuch port 8080: NotFound: unknown server (no meshed pod or ExternalWorkload emojivoto:nosuch is known to the policy controller)\n"
    );
}

#[tokio::test]
async fn a_workload_written_with_a_slash_gets_the_proxy_form_as_a_hint() {
    let (addr, _server) = start_policy_server().await;
    let policy = format!("http://{addr}");
    let workload = format!("emojivoto/{VOTING}");
    let child = dst_diag(&["policy", "inbound", &workload, "8080", "--policy", &policy]);
    let (code, stdout, stderr) = wait_output(child).await;
    assert_eq!(code, Some(1), "stderr: {stderr}");
    assert_eq!(stdout, "");
    assert!(
        stderr.starts_with(&format!(
            "dst-diag: WatchPort {workload} port 8080: InvalidArgument: Invalid workload: "
        )),
        "{stderr}"
    );
    assert!(
        stderr.ends_with(&format!(
            " (a proxy names its pod NAMESPACE:POD: try `emojivoto:{VOTING}`)\n"
        )),
        "{stderr}"
    );
    // No hint that would be refused in turn (tester finding: `emojivoto/Web` was told to try
    // `emojivoto:Web`, which no pod can be named).
    let child = dst_diag(&[
        "policy",
        "inbound",
        "emojivoto/Web",
        "8080",
        "--policy",
        &policy,
    ]);
    let (code, _, stderr) = wait_output(child).await;
    assert_eq!(code, Some(1), "stderr: {stderr}");
    assert!(
        stderr.contains("InvalidArgument: Invalid workload: "),
        "{stderr}"
    );
    assert!(!stderr.contains("try `"), "{stderr}");
}

#[tokio::test]
async fn invalid_port_and_address_are_one_line_errors() {
    let (addr, _server) = start_policy_server().await;
    let policy = addr.to_string();
    let workload = format!("emojivoto:{VOTING}");
    let child = dst_diag(&["policy", "inbound", &workload, "0", "--policy", &policy]);
    let (code, _, stderr) = wait_output(child).await;
    assert_eq!(code, Some(1), "stderr: {stderr}");
    assert_eq!(
        stderr,
        format!("dst-diag: WatchPort {workload} port 0: InvalidArgument: Invalid port: 0\n")
    );

    let child = dst_diag(&[
        "policy",
        "inbound",
        &workload,
        "8080",
        "--policy",
        "https://127.0.0.1:8090",
    ]);
    let (code, _, stderr) = wait_output(child).await;
    // A usage error, as clap's (newcomer finding: it was 1, as a server's refusal).
    assert_eq!(code, Some(2), "stderr: {stderr}");
    assert_eq!(
        stderr,
        "dst-diag: invalid --policy \"https://127.0.0.1:8090\": scheme \"https\" is not supported, use http://host:port (plaintext)\n"
    );
}
