//! TLSRoutes and TCPRoutes on EgressNetwork parents: attachment (spec/policy.md §5.4),
//! protocol selection without appProtocol (§5.5) and EgressNetwork backends (§5.6).

use super::*;
use crate::{
    outbound::{
        Backend, NoMatch, OutboundLookup, OutboundRoute, OutboundRouteRef, OutboundRule,
        OutboundTarget,
    },
    routes::HostMatch,
    source::Event,
    testing::Policy as Index,
};
use linkerd_k8s_api::{
    EgressNetwork,
    gateway_api::{
        experimental::{tcproutes::TcpRoute, tlsroutes::TlsRoute},
        grpcroutes::GrpcRoute,
        httproutes::HttpRoute,
    },
};

use super::tests::{GLOBAL, index};

fn yaml<T: serde::de::DeserializeOwned>(s: &str) -> T {
    serde_saphyr::from_str(s).expect("test object decodes")
}

/// EgressNetworks `linkerd-egress/internet` (everything outside the cluster, Deny) and
/// `linkerd-egress/partners` (192.0.2.0/24, Allow); the network's own status accepts it.
fn with_networks(offline: bool) -> Index {
    let index = index(offline);
    for (name, spec) in [
        ("internet", "{trafficPolicy: Deny}"),
        (
            "partners",
            "{trafficPolicy: Allow, networks: [{cidr: 192.0.2.0/24}]}",
        ),
    ] {
        index.apply(Event::Apply(yaml::<EgressNetwork>(&format!(
            r#"
apiVersion: policy.linkerd.io/v1alpha1
kind: EgressNetwork
metadata: {{name: {name}, namespace: linkerd-egress}}
spec: {spec}
status:
  conditions: [{{type: Accepted, status: "True", reason: Accepted, message: "", lastTransitionTime: "2026-01-01T00:00:00Z"}}]
"#
        ))));
    }
    index
}

/// A route of `kind` in `linkerd-egress` whose parent is the EgressNetwork `internet` on
/// `port`, with `spec` lines after `parentRefs`; its status accepts it unless `offline`.
fn route_yaml(
    kind: &str,
    name: &str,
    created: &str,
    port: u16,
    spec: &str,
    offline: bool,
) -> String {
    let status = if offline {
        String::new()
    } else {
        format!(
            r#"
status:
  parents:
  - controllerName: linkerd.io/policy-controller
    parentRef: {{group: policy.linkerd.io, kind: EgressNetwork, name: internet, port: {port}}}
    conditions: [{{type: Accepted, status: "True", reason: Accepted, message: "", lastTransitionTime: "2026-01-01T00:00:00Z"}}]
"#
        )
    };
    format!(
        r#"
apiVersion: gateway.networking.k8s.io/v1alpha2
kind: {kind}
metadata: {{name: {name}, namespace: linkerd-egress, creationTimestamp: "{created}"}}
spec:
  parentRefs: [{{group: policy.linkerd.io, kind: EgressNetwork, name: internet, port: {port}}}]
{spec}{status}"#
    )
}

fn egress(index: &Index, addr: &str) -> EgressPolicy {
    match index.outbound_policy(OutboundTarget::Addr(addr.parse().unwrap()), "app") {
        Ok(OutboundLookup::Watch(rx)) => match &**rx.borrow() {
            OutboundPolicy::Egress(e) => e.clone(),
            other => panic!("{other:?}"),
        },
        other => panic!("{other:?}"),
    }
}

/// The HTTP routes `addr` is served with; panics unless its protocol is `Detect`.
fn detect_route_refs(index: &Index, addr: &str) -> Vec<OutboundRouteRef> {
    match egress(index, addr).protocol {
        OutboundProtocol::Detect { http_routes, .. } => {
            http_routes.into_iter().map(|r| r.reference).collect()
        }
        other => panic!("{other:?}"),
    }
}

fn resource(kind: &str, name: &str) -> OutboundRouteRef {
    OutboundRouteRef::Resource {
        group: "gateway.networking.k8s.io".into(),
        kind: kind.into(),
        namespace: GLOBAL.into(),
        name: name.into(),
    }
}

/// A TLS or TCP route as served: one rule with `backends`.
fn plain(
    kind: &str,
    name: &str,
    created: &str,
    hostnames: Vec<HostMatch>,
    backends: Vec<Backend>,
) -> OutboundRoute<NoMatch> {
    OutboundRoute {
        reference: resource(kind, name),
        creation_timestamp: Some(created.parse().unwrap()),
        hostnames,
        rules: vec![OutboundRule {
            matches: vec![],
            filters: vec![],
            backends,
            timeouts: RouteTimeouts::default(),
            retry: None,
        }],
    }
}

/// The `hostnames` line of a TLSRoute spec (required by the TLSRoute schema) and its match.
const API_HOSTNAMES: &str = "  hostnames: [api.example.com]\n";

fn api_hosts() -> Vec<HostMatch> {
    vec![HostMatch::Exact("api.example.com".into())]
}

const T1: &str = "2026-01-01T00:00:00Z";
const T2: &str = "2026-01-02T00:00:00Z";

#[tokio::test]
async fn tls_routes_attach_to_egress_networks_with_forward_backends() {
    let index = with_networks(false);
    index.apply(Event::Apply(yaml::<TlsRoute>(&route_yaml(
        "TLSRoute",
        "api-tls",
        T1,
        443,
        "  hostnames: [api.example.com]\n  rules:\n  - backendRefs:\n    - {group: policy.linkerd.io, kind: EgressNetwork, name: internet, weight: 2}\n    - {group: policy.linkerd.io, kind: EgressNetwork, name: partners}\n",
        false,
    ))));
    let dst: SocketAddr = "8.8.8.8:443".parse().unwrap();
    assert_eq!(
        egress(&index, "8.8.8.8:443").protocol,
        OutboundProtocol::Tls(vec![plain(
            "TLSRoute",
            "api-tls",
            T1,
            vec![HostMatch::Exact("api.example.com".into())],
            vec![
                Backend::Forward {
                    weight: 2,
                    namespace: GLOBAL.into(),
                    name: "internet".into(),
                    port: 443,
                    addr: dst,
                },
                Backend::InvalidEgressNetwork {
                    weight: 1,
                    namespace: GLOBAL.into(),
                    name: "partners".into(),
                    port: 443,
                    message: "Route with EgressNetwork backend needs to have the same EgressNetwork as a parent".into(),
                },
            ],
        )])
    );
    // Another port of the network has no route: Detect with no HTTP routes.
    assert_eq!(
        egress(&index, "8.8.8.8:8443").protocol,
        OutboundProtocol::Detect {
            timeout: DETECT_TIMEOUT,
            http_routes: vec![]
        }
    );
}

#[tokio::test]
async fn the_first_tcp_route_carries_egress_opaque_traffic() {
    let index = with_networks(false);
    let tcp = |name: &str, created: &str, port: u16| {
        yaml::<TcpRoute>(&route_yaml(
            "TCPRoute",
            name,
            created,
            port,
            "  rules:\n  - backendRefs: [{group: policy.linkerd.io, kind: EgressNetwork, name: internet}]\n",
            false,
        ))
    };
    // Applied newest first: the oldest still wins.
    index.apply(Event::Apply(tcp("pg-new", T2, 5432)));
    index.apply(Event::Apply(tcp("pg-old", T1, 5432)));
    index.apply(Event::Apply(tcp("mysql", T1, 3306)));
    let forward = |port: u16| Backend::Forward {
        weight: 1,
        namespace: GLOBAL.into(),
        name: "internet".into(),
        port,
        addr: SocketAddr::new("8.8.8.8".parse().unwrap(), port),
    };
    assert_eq!(
        egress(&index, "8.8.8.8:5432").protocol,
        OutboundProtocol::OpaqueRoute(Box::new(plain(
            "TCPRoute",
            "pg-old",
            T1,
            vec![],
            vec![forward(5432)]
        )))
    );
    // An opaque port (the default opaque ports) also takes its first TCP route…
    assert_eq!(
        egress(&index, "8.8.8.8:3306").protocol,
        OutboundProtocol::OpaqueRoute(Box::new(plain(
            "TCPRoute",
            "mysql",
            T1,
            vec![],
            vec![forward(3306)]
        )))
    );
    // …and without one the egress default opaque route.
    assert_eq!(
        egress(&index, "192.0.2.1:3306").protocol,
        OutboundProtocol::Opaque
    );
}

#[tokio::test]
async fn egress_protocol_prefers_grpc_then_http_then_tls_then_tcp() {
    let index = with_networks(false);
    let rules = "  rules: [{backendRefs: []}]\n";
    index.apply(Event::Apply(yaml::<TcpRoute>(&route_yaml(
        "TCPRoute", "tcp", T1, 443, rules, false,
    ))));
    assert!(matches!(
        egress(&index, "8.8.8.8:443").protocol,
        OutboundProtocol::OpaqueRoute(_)
    ));
    index.apply(Event::Apply(yaml::<TlsRoute>(&route_yaml(
        "TLSRoute",
        "tls",
        T1,
        443,
        &format!("{API_HOSTNAMES}{rules}"),
        false,
    ))));
    assert_eq!(
        egress(&index, "8.8.8.8:443").protocol,
        OutboundProtocol::Tls(vec![plain("TLSRoute", "tls", T1, api_hosts(), vec![])])
    );
    index.apply(Event::Apply(yaml::<HttpRoute>(&route_yaml(
        "HTTPRoute",
        "http",
        T1,
        443,
        "  rules: [{}]\n",
        false,
    ))));
    assert_eq!(
        detect_route_refs(&index, "8.8.8.8:443"),
        vec![resource("HTTPRoute", "http")]
    );
    index.apply(Event::Apply(yaml::<GrpcRoute>(&route_yaml(
        "GRPCRoute",
        "grpc",
        T1,
        443,
        "  rules: [{}]\n",
        false,
    ))));
    let protocol = egress(&index, "8.8.8.8:443").protocol;
    let OutboundProtocol::Grpc(routes) = protocol else {
        panic!("{protocol:?}");
    };
    assert_eq!(
        routes.into_iter().map(|r| r.reference).collect::<Vec<_>>(),
        vec![resource("GRPCRoute", "grpc")]
    );
}

#[tokio::test]
async fn kube_mode_tls_routes_need_an_accepted_status() {
    let index = with_networks(false);
    index.apply(Event::Apply(yaml::<TlsRoute>(&route_yaml(
        "TLSRoute",
        "unaccepted",
        T1,
        443,
        &format!("{API_HOSTNAMES}  rules: [{{backendRefs: []}}]\n"),
        true,
    ))));
    assert_eq!(
        egress(&index, "8.8.8.8:443").protocol,
        OutboundProtocol::Detect {
            timeout: DETECT_TIMEOUT,
            http_routes: vec![]
        }
    );
}

#[tokio::test]
async fn offline_tls_and_tcp_routes_attach_by_computed_acceptance() {
    let index = with_networks(true);
    index.apply(Event::Apply(yaml::<TlsRoute>(&route_yaml(
        "TLSRoute",
        "tls",
        T1,
        443,
        &format!("{API_HOSTNAMES}  rules: [{{backendRefs: []}}]\n"),
        true,
    ))));
    index.apply(Event::Apply(yaml::<TcpRoute>(&route_yaml(
        "TCPRoute",
        "tcp",
        T1,
        5432,
        "  rules: [{backendRefs: []}]\n",
        true,
    ))));
    assert_eq!(
        egress(&index, "8.8.8.8:443").protocol,
        OutboundProtocol::Tls(vec![plain("TLSRoute", "tls", T1, api_hosts(), vec![])])
    );
    assert_eq!(
        egress(&index, "8.8.8.8:5432").protocol,
        OutboundProtocol::OpaqueRoute(Box::new(plain("TCPRoute", "tcp", T1, vec![], vec![])))
    );
    // An HTTPRoute on the identical parent ref conflicts the TLSRoute (§7.2), which then no
    // longer attaches: the HTTP route is served.
    index.apply(Event::Apply(yaml::<HttpRoute>(&route_yaml(
        "HTTPRoute",
        "http",
        T1,
        443,
        "  rules: [{}]\n",
        true,
    ))));
    assert_eq!(
        detect_route_refs(&index, "8.8.8.8:443"),
        vec![resource("HTTPRoute", "http")]
    );
}
