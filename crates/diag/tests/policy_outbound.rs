//! `dst-diag policy outbound` as a process against an OutboundPolicies server started in this
//! test on `127.0.0.1:0`, serving the emojivoto fixture offline.

mod support;

use linkerd_index::{
    ClusterSource, IndexMetrics, PortSet, Watches,
    inbound::{DefaultPolicy, InboundConfig, InboundIndex},
    outbound::{OutboundConfig, OutboundIndex},
    source::offline::OfflineSource,
};
use linkerd_runtime::shutdown;
use policy::{
    InboundPolicyService, InboundTranslator, OutboundPolicyService, OutboundTranslator,
    PolicyMetrics, args::parse_networks, bind, serve_policies,
};
use serde_json::{Value, json};
use std::{net::SocketAddr, path::Path};
use support::*;

async fn start_policy_server() -> (SocketAddr, shutdown::Trigger) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/emojivoto");
    let networks = parse_networks("10.0.0.0/8,100.64.0.0/10,172.16.0.0/12,192.168.0.0/16,fd00::/8")
        .unwrap()
        .0;
    let inbound = InboundConfig {
        cluster_networks: networks.clone(),
        default_policy: DefaultPolicy::AllUnauthenticated,
        probe_networks: vec![],
        identity_domain: "cluster.local".into(),
        control_plane_namespace: "linkerd".into(),
        compute_route_acceptance: true,
    };
    let outbound = OutboundConfig {
        cluster_domain: "cluster.local".into(),
        cluster_networks: networks.clone(),
        default_opaque_ports: PortSet::default(),
        compute_route_acceptance: true,
        global_egress_network_namespace: "linkerd-egress".into(),
    };
    let metrics = IndexMetrics::default();
    let inbound_index = InboundIndex::new(inbound, metrics.clone());
    let outbound_index = OutboundIndex::new(outbound, metrics.clone());
    let mut watches = Watches::new(metrics.clone());
    inbound_index.watch(&mut watches);
    outbound_index.watch(&mut watches);
    let source = OfflineSource::new(&dir, metrics).expect("fixture dir");
    // Offline mode delivers the whole directory before `start` returns.
    watches.start(&ClusterSource::Offline(source)).await;
    let (trigger, shutdown) = shutdown::channel();
    let inbound = InboundPolicyService::new(
        inbound_index,
        InboundTranslator::new(networks),
        PolicyMetrics::default(),
        shutdown.clone(),
    );
    let outbound = OutboundPolicyService::new(
        outbound_index,
        OutboundTranslator::new(false),
        "cluster.local".into(),
        PolicyMetrics::default(),
        shutdown.clone(),
    );
    let (listener, addr) = bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
    tokio::spawn(serve_policies(listener, inbound, Some(outbound), shutdown));
    (addr, trigger)
}

#[tokio::test]
async fn table_shows_web_svc_default_routes() {
    let (addr, _server) = start_policy_server().await;
    let policy = addr.to_string();
    let child = dst_diag(&[
        "policy",
        "outbound",
        "web-svc.emojivoto.svc.cluster.local:80",
        "--source-namespace",
        "emojivoto",
        "--policy",
        &policy,
    ]);
    let lines = read_lines(child, 7).await;
    let dst = "Service.core emojivoto/web-svc:80 -> dst web-svc.emojivoto.svc.cluster.local:80";
    assert_eq!(
        lines,
        [
            "policy:   Service.core emojivoto/web-svc:80".to_string(),
            "protocol: detect (timeout 10s)".to_string(),
            "route:    [http] default:http".to_string(),
            "  match:  path^=/".to_string(),
            format!("  backend: weight 1 {dst}"),
            "route:    [opaque] default:opaq".to_string(),
            format!("  backend: weight 1 {dst}"),
        ]
    );
}

/// An address without a port is sent as an authority, which the controller refuses; the error
/// says what a proxy sends instead (newcomer finding: only the controller's "authority must be
/// of the form …" was shown).
#[tokio::test]
async fn an_address_without_a_port_gets_a_hint() {
    let (addr, _server) = start_policy_server().await;
    let policy = format!("http://{addr}");
    for (target, example) in [
        ("10.96.34.218", "10.96.34.218:80"),
        ("[fd00::1]", "[fd00::1]:80"),
    ] {
        let child = dst_diag(&["policy", "outbound", target, "--policy", &policy]);
        let (code, stdout, stderr) = wait_output(child).await;
        assert_eq!(code, Some(1), "stderr: {stderr}");
        assert_eq!(stdout, "");
        assert!(
            stderr.starts_with(&format!("dst-diag: Watch {target}: NotFound: ")),
            "{stderr}"
        );
        assert!(
            stderr.ends_with(&format!(
                " (TARGET is an IP address without a port: a proxy asks for IP:PORT, such as `{example}`)\n"
            )),
            "{stderr}"
        );
    }
}

#[tokio::test]
async fn json_shows_undefined_port() {
    let (addr, _server) = start_policy_server().await;
    let policy = format!("http://{addr}");
    let child = dst_diag(&[
        "policy",
        "outbound",
        "10.96.34.218:9999",
        "--policy",
        &policy,
        "-o",
        "json",
    ]);
    let lines = read_lines(child, 1).await;
    let p: Value = serde_json::from_str(&lines[0]).expect("a JSON line");
    assert_eq!(
        p,
        json!({
            "metadata": "Service.core emojivoto/web-svc:9999",
            "protocol": "opaque",
            "routes": [{
                "kind": "opaque",
                "route": "default:undefined-port",
                "rules": [{"matches": [], "filters": ["forbidden"], "backends": []}],
            }],
        })
    );
}

/// A stream the server ends without an error status (here its shutdown; in a cluster also
/// an EgressNetwork change, policy §5.8) is said on stderr; the run still exits 0.
#[tokio::test]
async fn a_stream_the_server_ends_is_reported() {
    use tokio::io::{AsyncBufReadExt, BufReader};
    let (addr, server) = start_policy_server().await;
    let policy = addr.to_string();
    let mut child = dst_diag(&[
        "policy",
        "outbound",
        "web-svc.emojivoto.svc.cluster.local:80",
        "--policy",
        &policy,
    ]);
    let mut stdout = BufReader::new(child.stdout.take().expect("piped stdout")).lines();
    let first = tokio::time::timeout(TIMEOUT, stdout.next_line())
        .await
        .expect("dst-diag prints in time")
        .expect("stdout readable");
    assert_eq!(
        first.as_deref(),
        Some("policy:   Service.core emojivoto/web-svc:80")
    );
    server.trigger();
    let (code, _, stderr) = wait_output(child).await;
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(
        stderr.trim_end(),
        "Watch web-svc.emojivoto.svc.cluster.local:80: the server ended the stream"
    );
}

/// Regression: `dst-diag endpoints` pointed at the policy controller printed only
/// `Get ...: Unimplemented`.
#[tokio::test]
async fn the_wrong_server_for_the_rpc_gets_a_hint() {
    let (addr, _server) = start_policy_server().await;
    let destination = format!("http://{addr}");
    let child = dst_diag(&[
        "endpoints",
        "web-svc.emojivoto.svc.cluster.local:80",
        "--destination",
        &destination,
    ]);
    let (code, stdout, stderr) = wait_output(child).await;
    assert_eq!(code, Some(1), "stderr: {stderr}");
    assert_eq!(stdout, "");
    assert!(
        stderr.contains("Unimplemented") && stderr.contains("Get and GetProfile are destination's"),
        "stderr: {stderr}"
    );
}
