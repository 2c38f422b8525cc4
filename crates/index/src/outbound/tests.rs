use super::*;
use crate::{
    inbound::{DefaultPolicy, InboundConfig},
    routes::{Filter, HeaderModifier},
    source::Event,
    testing::Policy as Index,
};
use k8s_openapi::api::core::v1::Service;
use linkerd_k8s_api::{
    HttpRoute as PolicyHttpRoute,
    gateway_api::{grpcroutes::GrpcRoute, httproutes::HttpRoute},
};
use std::time::Duration;

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
            compute_route_acceptance: false,
            global_egress_network_namespace: "linkerd-egress".into(),
        },
    )
}

fn yaml<T: serde::de::DeserializeOwned>(s: &str) -> T {
    serde_saphyr::from_str(s).expect("test object decodes")
}

fn mk_service(ns: &str, name: &str, ip: &str, extra: &str) -> Service {
    yaml(&format!(
        "metadata: {{name: {name}, namespace: {ns}{extra}}}\nspec:\n  clusterIPs: [{ip}]\n  ports:\n  - {{name: http, port: 80}}\n  - {{name: h2, port: 81, appProtocol: kubernetes.io/h2c}}\n  - {{name: db, port: 3306}}\n"
    ))
}

/// A Gateway HTTPRoute in `ns` with parent `web` (port 80) of namespace emojivoto, accepted.
fn mk_route(ns: &str, name: &str, created: &str, backends: &str) -> HttpRoute {
    yaml(&format!(
        r#"
metadata: {{name: {name}, namespace: {ns}, creationTimestamp: "{created}",
  annotations: {{retry.linkerd.io/http: 5xx, timeout.linkerd.io/response: 2s}}}}
spec:
  parentRefs: [{{kind: Service, name: web, namespace: emojivoto, port: 80}}]
  rules:
  - matches: [{{path: {{type: PathPrefix, value: /api}}}}]
    backendRefs: {backends}
status:
  parents:
  - controllerName: linkerd.io/policy-controller
    parentRef: {{kind: Service, name: web, namespace: emojivoto, port: 80}}
    conditions: [{{type: Accepted, status: "True", reason: Accepted, message: "", lastTransitionTime: "2026-01-01T00:00:00Z"}}]
"#
    ))
}

/// `route` with one rule instead of its own, matching paths by the regex `pattern`.
fn with_regex_path(mut route: HttpRoute, pattern: &str) -> HttpRoute {
    let rule: HttpRoute = yaml(&format!(
        "metadata: {{name: x}}\nspec:\n  rules:\n  - matches: [{{path: {{type: RegularExpression, value: '{pattern}'}}}}]\n"
    ));
    route.spec.rules = rule.spec.rules;
    route
}

fn policy(index: &Index, ns: &str, port: u16, source: &str) -> OutboundPolicy {
    let target = OutboundTarget::Service {
        service: ObjectRef {
            namespace: ns.into(),
            name: "web".into(),
        },
        port,
    };
    match index.outbound_policy(target, source).unwrap() {
        OutboundLookup::Watch(rx) => (**rx.borrow()).clone(),
        OutboundLookup::Fixed(p) => (*p).clone(),
    }
}

fn service_policy(p: OutboundPolicy) -> ServicePolicy {
    match p {
        OutboundPolicy::Service(s) => s,
        other => panic!("not a service policy: {other:?}"),
    }
}

#[tokio::test]
async fn default_protocols_by_port() {
    let index = index();
    index.apply(Event::Apply(mk_service(
        "emojivoto",
        "web",
        "10.96.0.1",
        "",
    )));
    let p = service_policy(policy(&index, "emojivoto", 80, "emojivoto"));
    assert_eq!(p.authority, "web.emojivoto.svc.cluster.local:80");
    let OutboundProtocol::Detect {
        timeout,
        http_routes,
    } = &p.protocol
    else {
        panic!("{:?}", p.protocol)
    };
    assert_eq!(*timeout, Duration::from_secs(10));
    assert_eq!(http_routes.len(), 1);
    assert_eq!(
        http_routes[0].reference,
        OutboundRouteRef::Default("http".into())
    );
    assert!(http_routes[0].rules[0].backends.is_empty());

    let p = service_policy(policy(&index, "emojivoto", 81, "emojivoto"));
    assert!(matches!(p.protocol, OutboundProtocol::Http2(ref r) if r.len() == 1));
    let p = service_policy(policy(&index, "emojivoto", 3306, "emojivoto"));
    assert_eq!(
        p.protocol,
        OutboundProtocol::Opaque,
        "a default opaque port"
    );
}

#[tokio::test]
async fn address_targets() {
    let index = index();
    index.apply(Event::Apply(mk_service(
        "emojivoto",
        "web",
        "10.96.0.1",
        "",
    )));
    let lookup =
        |addr: &str| index.outbound_policy(OutboundTarget::Addr(addr.parse().unwrap()), "x");
    assert!(matches!(
        lookup("10.96.0.1:80"),
        Ok(OutboundLookup::Watch(_))
    ));
    match lookup("10.96.0.1:8080") {
        Ok(OutboundLookup::Fixed(p)) => assert_eq!(
            *p,
            OutboundPolicy::UndefinedPort {
                namespace: "emojivoto".into(),
                name: "web".into(),
                port: 8080
            }
        ),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        lookup("10.1.2.3:80").unwrap_err(),
        OutboundError::NoSuchService
    );
    // The fallback is a topic: it ends when EgressNetworks change (§5.8).
    match lookup("192.0.2.1:443") {
        Ok(OutboundLookup::Watch(rx)) => assert_eq!(
            **rx.borrow(),
            OutboundPolicy::Fallback {
                original_dst: "192.0.2.1:443".parse().unwrap()
            }
        ),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn routes_backends_and_updates() {
    let index = index();
    index.apply(Event::Apply(mk_service(
        "emojivoto",
        "web",
        "10.96.0.1",
        ", annotations: {balancer.linkerd.io/failure-accrual: consecutive}",
    )));
    index.apply(Event::Apply(mk_service(
        "emojivoto",
        "api",
        "10.96.0.2",
        "",
    )));
    let OutboundLookup::Watch(mut rx) = index
        .outbound_policy(
            OutboundTarget::Service {
                service: ObjectRef {
                    namespace: "emojivoto".into(),
                    name: "web".into(),
                },
                port: 80,
            },
            "emojivoto",
        )
        .unwrap()
    else {
        panic!("a topic")
    };
    rx.borrow_and_update();
    index.apply(Event::Apply(mk_route(
        "emojivoto",
        "split",
        "2026-01-01T00:00:00Z",
        "[{name: api, port: 8080, weight: 3}, {name: gone, port: 80}, {kind: Pod, name: x, port: 1}, {name: noport}]",
    )));
    assert!(rx.has_changed().unwrap(), "a new route is published");
    let p = service_policy((**rx.borrow_and_update()).clone());
    assert!(p.failure_accrual.is_some());
    let OutboundProtocol::Detect { http_routes, .. } = &p.protocol else {
        panic!()
    };
    assert_eq!(
        http_routes.len(),
        1,
        "no default route beside a resource route"
    );
    let rule = &http_routes[0].rules[0];
    assert_eq!(
        http_routes[0].reference,
        OutboundRouteRef::Resource {
            group: "gateway.networking.k8s.io".into(),
            kind: "HTTPRoute".into(),
            namespace: "emojivoto".into(),
            name: "split".into(),
        }
    );
    assert_eq!(rule.timeouts.response, Some(Duration::from_secs(2)));
    assert_eq!(rule.retry.as_ref().unwrap().http, Some(vec![500..=599]));
    assert_eq!(
        rule.backends,
        vec![
            Backend::Service {
                weight: 3,
                namespace: "emojivoto".into(),
                name: "api".into(),
                port: 8080,
                authority: "api.emojivoto.svc.cluster.local:8080".into(),
                filters: vec![],
                exists: true,
            },
            Backend::Service {
                weight: 1,
                namespace: "emojivoto".into(),
                name: "gone".into(),
                port: 80,
                authority: "gone.emojivoto.svc.cluster.local:80".into(),
                filters: vec![],
                exists: false,
            },
            Backend::Invalid {
                weight: 1,
                message: "unsupported backend type core Pod".into()
            },
            Backend::Invalid {
                weight: 1,
                message: "missing port for backend Service noport".into()
            },
        ]
    );

    // The missing backend Service appears: `exists` flips.
    index.apply(Event::Apply(mk_service(
        "emojivoto",
        "gone",
        "10.96.0.3",
        "",
    )));
    assert!(rx.has_changed().unwrap());
    let p = service_policy((**rx.borrow_and_update()).clone());
    let OutboundProtocol::Detect { http_routes, .. } = &p.protocol else {
        panic!()
    };
    assert!(matches!(
        http_routes[0].rules[0].backends[1],
        Backend::Service { exists: true, .. }
    ));

    // Deleting the route brings the default route back.
    index.apply(Event::<HttpRoute>::Delete(ObjectRef {
        namespace: "emojivoto".into(),
        name: "split".into(),
    }));
    let p = service_policy((**rx.borrow_and_update()).clone());
    let OutboundProtocol::Detect { http_routes, .. } = &p.protocol else {
        panic!()
    };
    assert_eq!(
        http_routes[0].reference,
        OutboundRouteRef::Default("http".into())
    );
}

#[tokio::test]
async fn unaccepted_routes_do_not_attach() {
    let index = index();
    index.apply(Event::Apply(mk_service(
        "emojivoto",
        "web",
        "10.96.0.1",
        "",
    )));
    let mut route = mk_route("emojivoto", "r", "2026-01-01T00:00:00Z", "[]");
    route.status = None;
    index.apply(Event::Apply(route));
    let p = service_policy(policy(&index, "emojivoto", 80, "emojivoto"));
    let OutboundProtocol::Detect { http_routes, .. } = &p.protocol else {
        panic!()
    };
    assert_eq!(
        http_routes[0].reference,
        OutboundRouteRef::Default("http".into())
    );
}

/// §12 "backendRefs without namespace default to the PARENT namespace": decided for the
/// Gateway API meaning, the ROUTE's namespace.
#[tokio::test]
async fn quirk_backend_namespace_defaults_to_route_namespace() {
    let index = index();
    index.apply(Event::Apply(mk_service(
        "emojivoto",
        "web",
        "10.96.0.1",
        "",
    )));
    index.apply(Event::Apply(mk_route(
        "client",
        "consumer",
        "2026-01-01T00:00:00Z",
        "[{name: web-canary, port: 80}]",
    )));
    let p = service_policy(policy(&index, "emojivoto", 80, "client"));
    let OutboundProtocol::Detect { http_routes, .. } = &p.protocol else {
        panic!()
    };
    assert!(matches!(
        &http_routes[0].rules[0].backends[0],
        Backend::Service { namespace, authority, .. }
            if namespace == "client" && authority == "web-canary.client.svc.cluster.local:80"
    ));
}

/// §12 "Consumer routes are merged with, not substituted for, producer routes": decided for
/// GAMMA's meaning: a consumer route replaces the producer routes for its namespace only.
#[tokio::test]
async fn quirk_consumer_routes_replace_producer_routes() {
    let index = index();
    index.apply(Event::Apply(mk_service(
        "emojivoto",
        "web",
        "10.96.0.1",
        "",
    )));
    index.apply(Event::Apply(mk_route(
        "emojivoto",
        "producer",
        "2026-01-01T00:00:00Z",
        "[]",
    )));
    index.apply(Event::Apply(mk_route(
        "client",
        "consumer",
        "2026-01-01T00:00:00Z",
        "[]",
    )));
    let names = |source: &str| {
        let p = service_policy(policy(&index, "emojivoto", 80, source));
        let OutboundProtocol::Detect { http_routes, .. } = p.protocol else {
            panic!()
        };
        http_routes
            .into_iter()
            .map(|r| match r.reference {
                OutboundRouteRef::Resource {
                    namespace, name, ..
                } => format!("{namespace}/{name}"),
                OutboundRouteRef::Default(name) => name,
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(names("client"), ["client/consumer"]);
    assert_eq!(names("other"), ["emojivoto/producer"]);
    assert_eq!(names("emojivoto"), ["emojivoto/producer"]);
}

/// The names of the HTTP routes, in order, of emojivoto's `web` port 80 for a client in its
/// namespace.
fn http_route_names(index: &Index) -> Vec<String> {
    let p = service_policy(policy(index, "emojivoto", 80, "emojivoto"));
    let OutboundProtocol::Detect { http_routes, .. } = p.protocol else {
        panic!("expected HTTP routes: {:?}", p.protocol)
    };
    http_routes
        .iter()
        .map(|r| match &r.reference {
            OutboundRouteRef::Resource { name, .. } => name.clone(),
            OutboundRouteRef::Default(n) => n.clone(),
        })
        .collect()
}

/// §12 "Outbound route ordering tie-break uses route name only": decided for the Gateway API
/// order, creation time, then `{namespace}/{name}`.
#[tokio::test]
async fn quirk_route_order_is_time_then_namespace_and_name() {
    let index = index();
    index.apply(Event::Apply(mk_service(
        "emojivoto",
        "web",
        "10.96.0.1",
        "",
    )));
    index.apply(Event::Apply(mk_route(
        "emojivoto",
        "b",
        "2026-01-01T00:00:00Z",
        "[]",
    )));
    index.apply(Event::Apply(mk_route(
        "emojivoto",
        "a",
        "2026-01-02T00:00:00Z",
        "[]",
    )));
    index.apply(Event::Apply(mk_route(
        "emojivoto",
        "c",
        "2026-01-01T00:00:00Z",
        "[]",
    )));
    let names = http_route_names(&index);
    assert_eq!(names, ["b", "c", "a"]);
}

/// Creation times are compared as times, not as text (tester finding: `00.5Z` sorted before
/// `00Z`, as `.` sorts before `Z`).
#[tokio::test]
async fn route_order_compares_creation_times_as_times() {
    let index = index();
    index.apply(Event::Apply(mk_service(
        "emojivoto",
        "web",
        "10.96.0.1",
        "",
    )));
    // As JSON text, as a source reads it: the typed route would be written out to the second.
    for (name, created) in [
        ("a", "2026-01-01T00:00:00.500Z"),
        ("b", "2026-01-01T00:00:00Z"),
        ("c", "2026-01-01T00:59:59.9+01:00"),
    ] {
        let mut route = serde_json::to_value(mk_route("emojivoto", name, created, "[]")).unwrap();
        route["metadata"]["creationTimestamp"] = created.into();
        index.apply_json::<HttpRoute>(&route.to_string());
    }
    let names = http_route_names(&index);
    assert_eq!(names, ["c", "b", "a"]);
}

/// §12 "Policy HTTPRoute ResponseHeaderModifier becomes a request header modifier on the
/// outbound wire": decided for the CRD's meaning, it stays a response header modifier.
#[tokio::test]
async fn quirk_policy_response_header_modifier_stays_a_response_modifier() {
    let index = index();
    index.apply(Event::Apply(mk_service(
        "emojivoto",
        "web",
        "10.96.0.1",
        "",
    )));
    let route: PolicyHttpRoute = yaml(
        r#"
metadata: {name: hdr, namespace: emojivoto}
spec:
  parentRefs: [{kind: Service, name: web}]
  rules:
  - filters:
    - type: ResponseHeaderModifier
      responseHeaderModifier: {set: [{name: x-a, value: b}]}
    timeouts: {request: 1.5s}
status:
  parents:
  - controllerName: linkerd.io/policy-controller
    parentRef: {kind: Service, name: web, namespace: emojivoto}
    conditions: [{type: Accepted, status: "True", reason: Accepted, message: "", lastTransitionTime: "2026-01-01T00:00:00Z"}]
"#,
    );
    index.apply(Event::Apply(route));
    let p = service_policy(policy(&index, "emojivoto", 81, "emojivoto"));
    let OutboundProtocol::Http2(routes) = p.protocol else {
        panic!()
    };
    let rule = &routes[0].rules[0];
    assert_eq!(
        rule.filters,
        vec![Filter::ResponseHeaderModifier(HeaderModifier {
            set: vec![("x-a".into(), "b".into())],
            ..HeaderModifier::default()
        })]
    );
    assert_eq!(rule.timeouts.request, Some(Duration::from_millis(1500)));
}

/// §12 "A route update that fails conversion is ignored, leaving the previous version
/// active": decided against; the invalid update removes the route.
#[tokio::test]
async fn quirk_invalid_route_update_removes_the_route() {
    let index = index();
    index.apply(Event::Apply(mk_service(
        "emojivoto",
        "web",
        "10.96.0.1",
        "",
    )));
    index.apply(Event::Apply(mk_route(
        "emojivoto",
        "r",
        "2026-01-01T00:00:00Z",
        "[]",
    )));
    let bad = with_regex_path(
        mk_route("emojivoto", "r", "2026-01-01T00:00:00Z", "[]"),
        "(",
    );
    index.apply(Event::Apply(bad));
    let p = service_policy(policy(&index, "emojivoto", 80, "emojivoto"));
    let OutboundProtocol::Detect { http_routes, .. } = p.protocol else {
        panic!()
    };
    assert_eq!(
        http_routes[0].reference,
        OutboundRouteRef::Default("http".into())
    );
}

/// The index checks a route's regexes without compiling them (`check_regex`): one only too
/// large once compiled is served, as the policy webhook denies it but the index must not spend
/// the time compiling (a route of 500 matches like `/\w{20}0` took the indexes 5.3 s to read).
#[tokio::test]
async fn a_route_regex_is_checked_without_compiling_it() {
    let index = index();
    index.apply(Event::Apply(mk_service(
        "emojivoto",
        "web",
        "10.96.0.1",
        "",
    )));
    let large = r"/\w{1000}\w{1000}";
    assert!(crate::model::regex::compile_regex(large).is_err());
    let route = with_regex_path(
        mk_route("emojivoto", "r", "2026-01-01T00:00:00Z", "[]"),
        large,
    );
    index.apply(Event::Apply(route));
    let p = service_policy(policy(&index, "emojivoto", 80, "emojivoto"));
    let OutboundProtocol::Detect { http_routes, .. } = p.protocol else {
        panic!()
    };
    assert_eq!(
        http_routes[0].reference,
        OutboundRouteRef::Resource {
            group: "gateway.networking.k8s.io".into(),
            kind: "HTTPRoute".into(),
            namespace: "emojivoto".into(),
            name: "r".into(),
        }
    );
    assert_eq!(
        http_routes[0].rules[0].matches[0].path,
        Some(crate::routes::PathMatch::Regex(large.into()))
    );
}

/// A route skipped for an invalid regex is logged naming the regex's whole path in the route, as
/// the webhook denies it (tester finding: the log named `headers[1].value` only), and a long
/// pattern is quoted in part.
#[test]
fn a_skipped_route_names_where_its_regex_is() {
    let route: HttpRoute = yaml(
        r#"
metadata: {name: r, namespace: emojivoto}
spec:
  rules:
  - matches: [{path: {type: PathPrefix, value: /}}]
  - matches:
    - {method: GET}
    - headers: [{name: x-a, value: b}, {type: RegularExpression, name: x-id, value: '/\w+('}]
"#,
    );
    assert_eq!(
        routes::gateway_http_route(&route).unwrap_err().reason,
        r#"spec.rules[1].matches[1].headers[1].value: invalid regular expression "/\w+(": unclosed group"#
    );
    let long = format!("({}", "a".repeat(300));
    let route = with_regex_path(route, &long);
    assert_eq!(
        routes::gateway_http_route(&route).unwrap_err().reason,
        format!(
            r#"spec.rules[0].matches[0].path.value: invalid regular expression "({}..." (301 bytes): unclosed group"#,
            "a".repeat(255)
        )
    );
    let route: GrpcRoute = yaml(
        r#"
metadata: {name: g, namespace: emojivoto}
spec:
  rules:
  - {}
  - matches: [{headers: [{type: RegularExpression, name: x-id, value: "["}]}]
"#,
    );
    assert_eq!(
        routes::grpc_route(&route).unwrap_err().reason,
        r#"spec.rules[1].matches[0].headers[0].value: invalid regular expression "[": unclosed character class"#
    );
}

/// The inbound and the outbound index both read Gateway API HTTPRoutes: one invalid route is
/// logged and counted once (`index_invalid_objects_total`), not once per index, and not again
/// when applied again unchanged; it is counted again when it turns invalid after being valid.
#[tokio::test]
async fn an_invalid_route_is_counted_once_by_the_two_indexes() {
    const ROUTE: &str = "HTTPRoute.gateway.networking.k8s.io";
    let index = index();
    let good = mk_route("emojivoto", "r", "2026-01-01T00:00:00Z", "[]");
    let bad = with_regex_path(good.clone(), "(");
    index.apply(Event::Apply(bad.clone()));
    assert_eq!(index.metrics.invalid_objects(ROUTE), 1);
    index.apply(Event::Apply(bad.clone()));
    index.apply(Event::Reset(vec![bad.clone()]));
    assert_eq!(index.metrics.invalid_objects(ROUTE), 1);

    index.apply(Event::Apply(good));
    index.apply(Event::Apply(bad));
    assert_eq!(index.metrics.invalid_objects(ROUTE), 2);
}

#[tokio::test]
async fn grpc_routes_select_grpc() {
    let index = index();
    index.apply(Event::Apply(mk_service(
        "emojivoto",
        "web",
        "10.96.0.1",
        "",
    )));
    let route: GrpcRoute = yaml(
        r#"
metadata: {name: g, namespace: emojivoto, annotations: {retry.linkerd.io/grpc: unavailable, retry.linkerd.io/limit: "3"}}
spec:
  parentRefs: [{kind: Service, name: web}]
  rules:
  - matches: [{method: {service: emoji.Emoji, method: List}}]
status:
  parents:
  - controllerName: linkerd.io/policy-controller
    parentRef: {kind: Service, name: web, namespace: emojivoto, port: 80}
    conditions: [{type: Accepted, status: "True", reason: Accepted, message: "", lastTransitionTime: "2026-01-01T00:00:00Z"}]
"#,
    );
    index.apply(Event::Apply(route));
    let p = service_policy(policy(&index, "emojivoto", 80, "emojivoto"));
    let OutboundProtocol::Grpc(routes) = p.protocol else {
        panic!("{:?}", p.protocol)
    };
    assert_eq!(routes.len(), 1);
    let retry = routes[0].rules[0].retry.clone().unwrap();
    assert_eq!(retry.limit, 3);
    assert!(retry.grpc.unwrap().unavailable);
    assert_eq!(retry.http, None);
}

#[tokio::test]
async fn invalid_honor_retry_after_keeps_the_failure_accrual() {
    let index = index();
    index.apply(Event::Apply(mk_service(
        "emojivoto",
        "web",
        "10.96.0.1",
        ", annotations: {balancer.linkerd.io/failure-accrual: unified, \
           balancer.linkerd.io/failure-accrual-consecutive-max-failures: '3', \
           balancer.alpha.linkerd.io/failure-accrual-honor-retry-after: 'yes'}",
    )));
    let p = service_policy(policy(&index, "emojivoto", 80, "emojivoto"));
    // The invalid toggle takes its default (off); the rest of the accrual is kept.
    assert_eq!(
        p.failure_accrual,
        Some(FailureAccrual::Unified {
            max_consecutive_failures: 3,
            success_rate_threshold: 0.8,
            window: Duration::from_secs(10),
            min_requests: 5,
            backoff: Backoff {
                min: Duration::from_secs(1),
                max: Duration::from_secs(60),
                jitter: 0.5,
                respect_retry_after: false,
            },
        })
    );
}

/// An annotation that does not parse is warned about once, when the Service is indexed or its
/// annotations change (§5.3 "each parse error is logged"; newcomer finding: it was logged at
/// debug level only, so the feature vanished silently), not once per policy computed.
#[test]
fn annotations_that_do_not_parse_are_warned_about_once_per_version() {
    let index = index();
    let annotated = |annotations: &str| {
        mk_service(
            "emojivoto",
            "web",
            "10.96.0.1",
            &format!(", annotations: {{{annotations}}}"),
        )
    };
    let bad = annotated(
        r#"timeout.linkerd.io/request: abc, timeout.linkerd.io/response: 3s, retry.linkerd.io/limit: "70000""#,
    );
    let ((), log) = crate::testing::logged(|| index.apply(Event::Apply(bad.clone())));
    assert!(
        log.contains("WARN")
            && log.contains("kind=Service object=emojivoto/web")
            && log.contains("ignoring timeout annotations")
            && log.contains("abc")
            && log.contains("ignoring retry annotations")
            && log.contains("70000"),
        "{log}"
    );
    // Policies computed from it, and the same annotations again, warn nothing more.
    let ((), log) = crate::testing::logged(|| {
        for namespace in ["a", "b"] {
            policy(&index, "emojivoto", 80, namespace);
        }
        let mut relabeled = bad.clone();
        relabeled.metadata.labels = Some([("v".to_string(), "2".to_string())].into());
        index.apply(Event::Apply(relabeled));
    });
    assert!(!log.contains("WARN"), "{log}");
    // Valid annotations warn nothing.
    let ((), log) = crate::testing::logged(|| {
        index.apply(Event::Apply(annotated("timeout.linkerd.io/response: 3s")))
    });
    assert_eq!(log, "");
}

/// A parentRef port out of 1..=65535, which the Gateway API CRD schema refuses, makes the
/// route invalid (logged, counted, skipped): it was read as no port, attaching the route to
/// every port of the Service (newcomer finding).
#[test]
fn a_parent_port_out_of_range_makes_the_route_invalid() {
    for port in [0, 70000, -1] {
        let route: HttpRoute = yaml(&format!(
            "metadata: {{name: r, namespace: emojivoto}}\nspec:\n  parentRefs: [{{kind: Service, name: web, port: 80}}, {{kind: Service, name: web, port: {port}}}]\n  rules: [{{}}]\n"
        ));
        let error = routes::gateway_http_route(&route).unwrap_err();
        assert_eq!(
            error.reason,
            format!("spec.parentRefs[1].port {port} out of range"),
            "{port}"
        );
    }
    let route: HttpRoute = yaml(
        "metadata: {name: r, namespace: emojivoto}\nspec:\n  parentRefs: [{kind: Service, name: web, port: 65535}, {kind: Service, name: web}]\n  rules: [{}]\n",
    );
    assert!(routes::gateway_http_route(&route).is_ok());
}
