//! Gateway API kinds are optional at run time (spec/policy.md "Project decisions" 2): the
//! policy server, fed by the `kube` source from a scripted API server, serves a Service's
//! default route while the HTTPRoute CRD is absent, the HTTPRoute once the CRD is installed (at
//! v1beta1), from v1 once the CRD is upgraded to serve it, and the default again once it is
//! removed, on one open `OutboundPolicies.Watch` and without a restart.

#[path = "../../index/tests/fake_apiserver/mod.rs"]
mod fake_apiserver;
mod support;

use fake_apiserver::{FakeApi, HTTP_ROUTES_V1, HTTP_ROUTES_V1BETA1, TIMEOUT, mk_gateway_crd};
use linkerd_index::{ClusterSource, IndexMetrics, source::kube::KubeSource};
use linkerd2_proxy_api::{
    http_route, meta,
    outbound::{self as api, OutboundPolicy, TrafficSpec, proxy_protocol, traffic_spec::Target},
};
use serde_json::{Value, json};
use tonic::Streaming;

const NS: &str = "emojivoto";
const WEB: &str = "web-svc.emojivoto.svc.cluster.local:80";

#[tokio::test]
async fn routes_follow_the_httproute_crd_without_a_restart() {
    let api = FakeApi::start([
        mk_service("web-svc"),
        mk_accepted_route("v1beta1", "web-api", "/api"),
    ])
    .await;
    let mut server = start(&api).await;
    let client = &mut server.client;
    let mut stream = client
        .watch(TrafficSpec {
            source_workload: "emojivoto:vote-bot-6d8d6b8d5c-abcde".into(),
            target: Some(Target::Authority(WEB.into())),
        })
        .await
        .expect("Watch")
        .into_inner();

    // CRD absent: the index is ready and the port gets the default route.
    let policy = next(&mut stream, "the policy without the CRD").await;
    assert_eq!(policy.metadata, service_meta());
    assert_eq!(
        http1_routes(&policy),
        [(default_meta("http"), vec![prefix("/")])]
    );

    // CRD installed, serving v1beta1: the route, accepted for web-svc by its status, replaces
    // the default.
    api.install_crd(HTTP_ROUTES_V1BETA1);
    api.put_crd(mk_gateway_crd("httproutes", "HTTPRoute", &["v1beta1"]));
    let policy = next(&mut stream, "the policy with the route").await;
    assert_eq!(policy.metadata, service_meta());
    assert_eq!(
        http1_routes(&policy),
        [(route_meta("web-api"), vec![prefix("/api")])]
    );

    // CRD upgraded to serve v1: the routes come from v1 (whose collection the script gives
    // another match, to tell the versions apart).
    api.apply(
        HTTP_ROUTES_V1,
        mk_accepted_route("v1", "web-api", "/api/v1"),
    );
    api.install_crd(HTTP_ROUTES_V1);
    api.put_crd(mk_gateway_crd(
        "httproutes",
        "HTTPRoute",
        &["v1beta1", "v1"],
    ));
    let policy = next(&mut stream, "the policy from v1").await;
    assert_eq!(
        http1_routes(&policy),
        [(route_meta("web-api"), vec![prefix("/api/v1")])]
    );

    // CRD removed: back to the default route.
    api.delete_crd("httproutes.gateway.networking.k8s.io");
    let policy = next(&mut stream, "the policy after the CRD's removal").await;
    assert_eq!(policy.metadata, service_meta());
    assert_eq!(
        http1_routes(&policy),
        [(default_meta("http"), vec![prefix("/")])]
    );
}

/// The index over `api` (every policy kind; the Gateway CRDs and the policy.linkerd.io ones
/// absent) once ready, behind a policy server on `127.0.0.1:0`, and a client of it. The
/// trigger keeps the server running.
async fn start(api: &FakeApi) -> support::outbound::Outbound {
    let index_metrics = IndexMetrics::default();
    let mut inbound = support::chart_config();
    // As in kube mode: acceptance is read from the routes' status.
    inbound.compute_route_acceptance = false;
    let outbound = support::outbound::outbound_config(false);
    let indexes = support::outbound::indexes(inbound, outbound);
    let source = ClusterSource::Kube(KubeSource::new(api.client(), index_metrics));
    let started = indexes.watches.start(&source).await;
    tokio::time::timeout(TIMEOUT, started.ready().wait_for(|r| *r))
        .await
        .expect("ready with the Gateway API CRDs absent")
        .expect("the watches own the sender");
    support::outbound::serve(indexes.inbound, indexes.outbound, started).await
}

/// The next policy on `stream`, failing the test after [`TIMEOUT`].
async fn next(stream: &mut Streaming<OutboundPolicy>, what: &str) -> OutboundPolicy {
    match tokio::time::timeout(TIMEOUT, stream.message()).await {
        Ok(Ok(Some(policy))) => policy,
        Ok(Ok(None)) => panic!("stream ended waiting for {what}"),
        Ok(Err(status)) => panic!("{status} waiting for {what}"),
        Err(_) => panic!("timed out waiting for {what}"),
    }
}

/// Each HTTP/1 route of the detected protocol: its metadata and the matches of its rules.
fn http1_routes(
    policy: &OutboundPolicy,
) -> Vec<(Option<meta::Metadata>, Vec<http_route::HttpRouteMatch>)> {
    let Some(proxy_protocol::Kind::Detect(detect)) =
        policy.protocol.as_ref().and_then(|p| p.kind.as_ref())
    else {
        panic!("not Detect: {:?}", policy.protocol)
    };
    let http1 = detect.http1.as_ref().expect("HTTP/1 routes");
    http1
        .routes
        .iter()
        .map(|r: &api::HttpRoute| {
            let matches = r.rules.iter().flat_map(|rule| rule.matches.clone());
            (r.metadata.clone(), matches.collect())
        })
        .collect()
}

fn prefix(path: &str) -> http_route::HttpRouteMatch {
    http_route::HttpRouteMatch {
        path: Some(http_route::PathMatch {
            kind: Some(http_route::path_match::Kind::Prefix(path.into())),
        }),
        ..Default::default()
    }
}

fn service_meta() -> Option<meta::Metadata> {
    Some(meta::Metadata {
        kind: Some(meta::metadata::Kind::Resource(meta::Resource {
            group: "core".into(),
            kind: "Service".into(),
            name: "web-svc".into(),
            namespace: NS.into(),
            section: String::new(),
            port: 80,
        })),
    })
}

fn default_meta(name: &str) -> Option<meta::Metadata> {
    Some(meta::Metadata {
        kind: Some(meta::metadata::Kind::Default(name.into())),
    })
}

fn route_meta(name: &str) -> Option<meta::Metadata> {
    Some(meta::Metadata {
        kind: Some(meta::metadata::Kind::Resource(meta::Resource {
            group: "gateway.networking.k8s.io".into(),
            kind: "HTTPRoute".into(),
            name: name.into(),
            namespace: NS.into(),
            ..Default::default()
        })),
    })
}

fn mk_service(name: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "clusterIP": "10.96.0.10",
            "clusterIPs": ["10.96.0.10"],
            "ports": [{"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"}],
        },
    })
}

/// An HTTPRoute `name` at `version` on `web-svc` port 80 for the prefix `path`, with the
/// `Accepted=True` parent status the status controller writes (kube mode reads acceptance
/// from it).
fn mk_accepted_route(version: &str, name: &str, path: &str) -> Value {
    let parent = json!({"group": "core", "kind": "Service", "name": "web-svc", "port": 80});
    json!({
        "apiVersion": format!("gateway.networking.k8s.io/{version}"),
        "kind": "HTTPRoute",
        "metadata": {
            "name": name,
            "namespace": NS,
            "creationTimestamp": "2026-05-04T10:00:00Z",
        },
        "spec": {
            "parentRefs": [parent],
            "rules": [{
                "matches": [{"path": {"type": "PathPrefix", "value": path}}],
                "backendRefs": [{"name": "web-svc", "port": 80}],
            }],
        },
        "status": {"parents": [{
            "parentRef": parent,
            "controllerName": "linkerd.io/policy-controller",
            "conditions": [{
                "type": "Accepted",
                "status": "True",
                "reason": "Accepted",
                "message": "",
                "lastTransitionTime": "2026-05-04T10:00:01Z",
            }],
        }]},
    })
}
