//! TLSRoutes and TCPRoutes in outbound policy: protocol selection (spec/policy.md §5.5),
//! conversion (§5.4) and the resolved view (§5.6).

use crate::{
    ObjectRef,
    inbound::{DefaultPolicy, InboundConfig},
    model::PortSet,
    outbound::{
        Backend, NoMatch, OutboundConfig, OutboundLookup, OutboundPolicy, OutboundProtocol,
        OutboundRoute, OutboundRouteRef, OutboundRule, OutboundTarget, RouteTimeouts,
    },
    routes::HostMatch,
    source::Event,
    testing::Policy as Index,
};
use k8s_openapi::api::core::v1::Service;
use linkerd_k8s_api::gateway_api::{
    experimental::{tcproutes::TcpRoute, tlsroutes::TlsRoute},
    grpcroutes::GrpcRoute,
    httproutes::HttpRoute,
};

fn index() -> Index {
    Index::new(
        InboundConfig {
            cluster_networks: vec!["10.0.0.0/8".parse().unwrap()],
            default_policy: DefaultPolicy::AllUnauthenticated,
            probe_networks: vec![],
            identity_domain: "cluster.local".into(),
            control_plane_namespace: "linkerd".into(),
            compute_route_acceptance: false,
        },
        OutboundConfig {
            cluster_domain: "cluster.local".into(),
            cluster_networks: vec!["10.0.0.0/8".parse().unwrap()],
            default_opaque_ports: PortSet::parse("3306").0,
            global_egress_network_namespace: "linkerd-egress".into(),
            compute_route_acceptance: false,
        },
    )
}

fn yaml<T: serde::de::DeserializeOwned>(s: &str) -> T {
    serde_saphyr::from_str(s).expect("test object decodes")
}

/// Service `emojivoto/web`: 8443 and 3306 (a default opaque port) without appProtocol, 80
/// HTTP/1, 81 HTTP/2, 5432 `linkerd.io/opaque`, 6379 an unknown appProtocol.
fn with_web() -> Index {
    let index = index();
    index.apply(Event::Apply(yaml::<Service>(
        r#"
metadata: {name: web, namespace: emojivoto}
spec:
  clusterIPs: [10.96.0.1]
  ports:
  - {name: tls, port: 8443}
  - {name: mysql, port: 3306}
  - {name: http, port: 80, appProtocol: http}
  - {name: h2, port: 81, appProtocol: kubernetes.io/h2c}
  - {name: pg, port: 5432, appProtocol: linkerd.io/opaque}
  - {name: redis, port: 6379, appProtocol: redis}
"#,
    )));
    index.apply(Event::Apply(yaml::<Service>(
        "metadata: {name: emoji, namespace: emojivoto}\nspec: {clusterIPs: [10.96.0.2], ports: [{port: 8443}]}\n",
    )));
    index
}

/// A route of `kind` (`TLSRoute`, `TCPRoute`, `HTTPRoute`, `GRPCRoute`) in `emojivoto` on
/// `web` (every port), accepted, with `spec` lines after `parentRefs` (rules, hostnames).
fn route_yaml(kind: &str, name: &str, created: &str, spec: &str) -> String {
    format!(
        r#"
apiVersion: gateway.networking.k8s.io/v1alpha2
kind: {kind}
metadata: {{name: {name}, namespace: emojivoto, creationTimestamp: "{created}"}}
spec:
  parentRefs: [{{kind: Service, name: web}}]
{spec}
status:
  parents:
  - controllerName: linkerd.io/policy-controller
    parentRef: {{kind: Service, name: web, namespace: emojivoto}}
    conditions: [{{type: Accepted, status: "True", reason: Accepted, message: "", lastTransitionTime: "2026-01-01T00:00:00Z"}}]
"#
    )
}

fn apply_tls(index: &Index, name: &str, created: &str, spec: &str) {
    let route: TlsRoute = yaml(&route_yaml("TLSRoute", name, created, spec));
    index.apply(Event::Apply(route));
}

fn apply_tcp(index: &Index, name: &str, created: &str, spec: &str) {
    let route: TcpRoute = yaml(&route_yaml("TCPRoute", name, created, spec));
    index.apply(Event::Apply(route));
}

const ONE_BACKEND: &str = "  hostnames: []\n  rules: [{backendRefs: [{name: emoji, port: 8443}]}]";

fn protocol(index: &Index, port: u16) -> OutboundProtocol {
    let target = OutboundTarget::Service {
        service: ObjectRef {
            namespace: "emojivoto".into(),
            name: "web".into(),
        },
        port,
    };
    let policy = match index.outbound_policy(target, "emojivoto").unwrap() {
        OutboundLookup::Watch(rx) => (**rx.borrow()).clone(),
        OutboundLookup::Fixed(p) => (*p).clone(),
    };
    match policy {
        OutboundPolicy::Service(s) => s.protocol,
        other => panic!("not a service policy: {other:?}"),
    }
}

fn reference(kind: &str, name: &str) -> OutboundRouteRef {
    OutboundRouteRef::Resource {
        group: "gateway.networking.k8s.io".into(),
        kind: kind.into(),
        namespace: "emojivoto".into(),
        name: name.into(),
    }
}

/// A route's kind and name, or `default <name>`.
fn names_of<M>(routes: &[OutboundRoute<M>]) -> Vec<String> {
    routes
        .iter()
        .map(|r| match &r.reference {
            OutboundRouteRef::Resource { kind, name, .. } => format!("{kind} {name}"),
            OutboundRouteRef::Default(name) => format!("default {name}"),
        })
        .collect()
}

/// What a port's protocol is, in short: `Detect[...]`, `Tls[...]`, `Opaque`,
/// `OpaqueRoute[...]`, `Http1[...]`, `Http2[...]`, `Grpc[...]`.
fn summary(index: &Index, port: u16) -> String {
    match protocol(index, port) {
        OutboundProtocol::Detect { http_routes, .. } => {
            format!("Detect{:?}", names_of(&http_routes))
        }
        OutboundProtocol::Http1(r) => format!("Http1{:?}", names_of(&r)),
        OutboundProtocol::Http2(r) => format!("Http2{:?}", names_of(&r)),
        OutboundProtocol::Grpc(r) => format!("Grpc{:?}", names_of(&r)),
        OutboundProtocol::Opaque => "Opaque".into(),
        OutboundProtocol::Tls(r) => format!("Tls{:?}", names_of(&r)),
        OutboundProtocol::OpaqueRoute(r) => format!("OpaqueRoute{:?}", names_of(&[*r])),
    }
}

#[tokio::test]
async fn a_tls_route_on_a_port_without_app_protocol_is_served_as_tls() {
    let index = with_web();
    apply_tls(
        &index,
        "sni",
        "2026-01-01T00:00:00Z",
        r#"  hostnames: [emoji.example.com, "*.example.org"]
  rules:
  - backendRefs:
    - {name: emoji, port: 8443, weight: 3}
    - {name: gone, namespace: other, port: 8443}
    - {group: example.com, kind: Bucket, name: b}
    - {name: emoji}"#,
    );
    let expected = OutboundProtocol::Tls(vec![OutboundRoute {
        reference: reference("TLSRoute", "sni"),
        creation_timestamp: Some("2026-01-01T00:00:00Z".parse().unwrap()),
        hostnames: vec![
            HostMatch::Exact("emoji.example.com".into()),
            HostMatch::Suffix {
                reverse_labels: vec!["org".into(), "example".into()],
            },
        ],
        rules: vec![OutboundRule {
            matches: Vec::<NoMatch>::new(),
            filters: vec![],
            backends: vec![
                Backend::Service {
                    weight: 3,
                    namespace: "emojivoto".into(),
                    name: "emoji".into(),
                    port: 8443,
                    authority: "emoji.emojivoto.svc.cluster.local:8443".into(),
                    filters: vec![],
                    exists: true,
                },
                Backend::Service {
                    weight: 1,
                    namespace: "other".into(),
                    name: "gone".into(),
                    port: 8443,
                    authority: "gone.other.svc.cluster.local:8443".into(),
                    filters: vec![],
                    exists: false,
                },
                Backend::Invalid {
                    weight: 1,
                    message: "unsupported backend type example.com Bucket".into(),
                },
                Backend::Invalid {
                    weight: 1,
                    message: "missing port for backend Service emoji".into(),
                },
            ],
            timeouts: RouteTimeouts::default(),
            retry: None,
        }],
    }]);
    assert_eq!(protocol(&index, 8443), expected);
}

/// §5.5, the row "no appProtocol": gRPC > HTTP (Detect) > TLS > TCP (first only) > Detect.
#[tokio::test]
async fn without_app_protocol_grpc_then_http_then_tls_then_tcp() {
    let index = with_web();
    assert_eq!(summary(&index, 8443), r#"Detect["default http"]"#);
    apply_tcp(&index, "c", "2026-01-01T00:00:00Z", ONE_BACKEND);
    assert_eq!(summary(&index, 8443), r#"OpaqueRoute["TCPRoute c"]"#);
    apply_tls(&index, "t", "2026-01-01T00:00:00Z", ONE_BACKEND);
    assert_eq!(summary(&index, 8443), r#"Tls["TLSRoute t"]"#);
    let http: HttpRoute = yaml(&route_yaml(
        "HTTPRoute",
        "h",
        "2026-01-01T00:00:00Z",
        "  rules: [{}]",
    ));
    index.apply(Event::Apply(http));
    assert_eq!(summary(&index, 8443), r#"Detect["HTTPRoute h"]"#);
    let grpc: GrpcRoute = yaml(&route_yaml(
        "GRPCRoute",
        "g",
        "2026-01-01T00:00:00Z",
        "  rules: [{}]",
    ));
    index.apply(Event::Apply(grpc));
    assert_eq!(summary(&index, 8443), r#"Grpc["GRPCRoute g"]"#);
}

/// §5.5, the rows with an appProtocol: an opaque or unknown one (or an opaque port) takes the
/// first TCP route and never TLS routes; HTTP/1 and HTTP/2 take neither.
#[tokio::test]
async fn app_protocols_with_tls_and_tcp_routes() {
    let index = with_web();
    apply_tls(&index, "t", "2026-01-01T00:00:00Z", ONE_BACKEND);
    for port in [5432, 6379, 3306] {
        assert_eq!(
            summary(&index, port),
            "Opaque",
            "port {port}, TLS route only"
        );
    }
    apply_tcp(&index, "c", "2026-01-01T00:00:00Z", ONE_BACKEND);
    for port in [5432, 6379, 3306] {
        assert_eq!(
            summary(&index, port),
            r#"OpaqueRoute["TCPRoute c"]"#,
            "port {port}"
        );
    }
    assert_eq!(summary(&index, 80), r#"Http1["default http"]"#);
    assert_eq!(summary(&index, 81), r#"Http2["default http"]"#);
    // A TCPRoute's backends get no timeouts or retries of the parent.
    let OutboundProtocol::OpaqueRoute(route) = protocol(&index, 5432) else {
        panic!()
    };
    assert_eq!(route.hostnames, vec![]);
    assert_eq!(
        route.rules,
        vec![OutboundRule {
            matches: vec![],
            filters: vec![],
            backends: vec![Backend::Service {
                weight: 1,
                namespace: "emojivoto".into(),
                name: "emoji".into(),
                port: 8443,
                authority: "emoji.emojivoto.svc.cluster.local:8443".into(),
                filters: vec![],
                exists: true,
            }],
            timeouts: RouteTimeouts::default(),
            retry: None,
        }]
    );
}

/// §12 "Only the first TCP route (by timestamp, name) is used": kept, since a TCPRoute has no
/// matches and the Gateway API gives a conflict to the oldest route (then by namespace/name).
#[tokio::test]
async fn quirk_only_the_first_tcp_route_is_used() {
    let index = with_web();
    apply_tcp(&index, "b-old", "2026-01-01T00:00:00Z", ONE_BACKEND);
    apply_tcp(&index, "a-new", "2026-02-01T00:00:00Z", ONE_BACKEND);
    assert_eq!(summary(&index, 5432), r#"OpaqueRoute["TCPRoute b-old"]"#);
    assert_eq!(summary(&index, 8443), r#"OpaqueRoute["TCPRoute b-old"]"#);
    // Same creation time: by name.
    apply_tcp(&index, "a-old", "2026-01-01T00:00:00Z", ONE_BACKEND);
    assert_eq!(summary(&index, 5432), r#"OpaqueRoute["TCPRoute a-old"]"#);
    // Every TLS route is used, in order.
    apply_tls(&index, "t2", "2026-01-02T00:00:00Z", ONE_BACKEND);
    apply_tls(&index, "t1", "2026-01-03T00:00:00Z", ONE_BACKEND);
    assert_eq!(
        summary(&index, 8443),
        r#"Tls["TLSRoute t2", "TLSRoute t1"]"#
    );
}

/// §5.4 "TLSRoute/TCPRoute must have exactly one rule, else ignored".
#[tokio::test]
async fn tls_and_tcp_routes_need_exactly_one_rule() {
    let index = with_web();
    let two_rules =
        "  hostnames: []\n  rules: [{backendRefs: [{name: emoji, port: 8443}]}, {backendRefs: []}]";
    apply_tcp(&index, "c", "2026-01-01T00:00:00Z", two_rules);
    apply_tls(
        &index,
        "t",
        "2026-01-01T00:00:00Z",
        "  hostnames: []\n  rules: []",
    );
    assert_eq!(summary(&index, 8443), r#"Detect["default http"]"#);
    assert_eq!(summary(&index, 5432), "Opaque");
    // Fixed: served; broken again: gone again.
    apply_tcp(&index, "c", "2026-01-01T00:00:00Z", ONE_BACKEND);
    assert_eq!(summary(&index, 5432), r#"OpaqueRoute["TCPRoute c"]"#);
    apply_tcp(&index, "c", "2026-01-01T00:00:00Z", two_rules);
    assert_eq!(summary(&index, 5432), "Opaque");
}

#[tokio::test]
async fn tls_and_tcp_routes_attach_only_when_accepted_and_leave_when_deleted() {
    let index = with_web();
    let mut route: TcpRoute = yaml(&route_yaml(
        "TCPRoute",
        "c",
        "2026-01-01T00:00:00Z",
        ONE_BACKEND,
    ));
    let accepted = route.clone();
    route.status = None;
    index.apply(Event::Apply(route));
    assert_eq!(summary(&index, 5432), "Opaque", "no status yet");
    index.apply(Event::Apply(accepted.clone()));
    assert_eq!(summary(&index, 5432), r#"OpaqueRoute["TCPRoute c"]"#);
    index.delete(&accepted);
    assert_eq!(summary(&index, 5432), "Opaque");
}
