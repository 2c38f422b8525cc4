//! `dst-diag explain outbound` as a process: the route, backends, timeouts and retries a client
//! proxy applies, asked offline and of a policy controller started in this test, which must
//! agree.

mod explain_support;

use explain_support::*;

#[tokio::test]
async fn a_split_route_with_retries_and_timeouts() {
    let cluster = Cluster::start("explain").await;
    let run = cluster
        .explain(&[
            "outbound",
            "orders.shop.svc.cluster.local:80",
            "--method",
            "post",
            "--path",
            "/orders/42",
        ])
        .await;
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert_eq!(
        run.lines(),
        [
            "policy:     Service.core shop/orders:80",
            "protocol:   detect (timeout 10s)",
            "request:    POST /orders/42 (host orders.shop.svc.cluster.local)",
            "route HTTPRoute.gateway.networking.k8s.io shop/orders-split: selected: rule 1 matches method=POST path^=/orders",
            "backend:    weight 90 (90%) Service.core shop/orders:80 -> dst orders.shop.svc.cluster.local:80",
            "backend:    weight 10 (10%) Service.core shop/orders-canary:80 -> dst orders-canary.shop.svc.cluster.local:80",
            "timeouts:   request 3s",
            "retries:    up to 2 on status 500-599, each try 300ms, backoff 25ms-250ms, bodies up to 65536 bytes",
            "decision:   routed by route HTTPRoute.gateway.networking.k8s.io shop/orders-split rule 1",
        ]
    );

    // A read takes the second rule, by the Service's address too.
    let run = cluster
        .explain(&["outbound", "10.96.50.10:80", "--path", "/orders/42"])
        .await;
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert_eq!(
        &run.lines()[2..5],
        [
            "request:    GET /orders/42 (host 10.96.50.10)",
            "route HTTPRoute.gateway.networking.k8s.io shop/orders-split: selected: rule 2 matches path^=/",
            "backend:    weight 1 Service.core shop/orders:80 -> dst orders.shop.svc.cluster.local:80",
        ]
    );
}

#[tokio::test]
async fn a_service_without_routes_gets_the_default_route() {
    let cluster = Cluster::start("emojivoto").await;
    let run = cluster
        .explain(&[
            "outbound",
            "web-svc.emojivoto.svc.cluster.local:80",
            "--path",
            "/api/list",
        ])
        .await;
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert_eq!(
        run.lines(),
        [
            "policy:     Service.core emojivoto/web-svc:80",
            "protocol:   detect (timeout 10s)",
            "request:    GET /api/list (host web-svc.emojivoto.svc.cluster.local)",
            "route default:http: selected: rule 1 matches path^=/",
            "backend:    weight 1 Service.core emojivoto/web-svc:80 -> dst web-svc.emojivoto.svc.cluster.local:80",
            "timeouts:   none",
            "retries:    none",
            "decision:   routed by route default:http rule 1",
        ]
    );
}

#[tokio::test]
async fn a_target_that_is_not_a_service_authority_exits_2() {
    let cluster = Cluster::start("emojivoto").await;
    let run = cluster.offline(&["outbound", "web.example.com:80"]).await;
    assert_eq!((run.code, run.stdout.as_str()), (Some(2), ""));
    assert_eq!(
        run.stderr,
        "dst-diag: Get web.example.com:80: NotFound: \
         authority must be of the form <name>.<namespace>.svc.<domain>\n"
    );
    let run = cluster.online(&["outbound", "web.example.com:80"]).await;
    assert_eq!(run.code, Some(2));
    assert_eq!(
        run.stderr,
        "dst-diag: Watch web.example.com:80: NotFound: \
         authority must be of the form <name>.<namespace>.svc.<domain>\n"
    );
}

/// Newcomer finding: a `--source-namespace` no namespace can have was explained as given.
#[tokio::test]
async fn a_source_namespace_that_is_no_namespace_name_exits_2() {
    let run = dst_diag(&[
        "explain",
        "outbound",
        "web-svc.emojivoto.svc.cluster.local:80",
        "--source-namespace",
        "BAD NS",
    ])
    .await;
    assert_eq!((run.code, run.stdout.as_str()), (Some(2), ""));
    assert!(
        run.stderr.starts_with(
            "error: invalid value 'BAD NS' for '--source-namespace <SOURCE_NAMESPACE>': invalid namespace \"BAD NS\""
        ),
        "{}",
        run.stderr
    );
}

/// An IP address without a port is refused before anything is asked, with what a proxy asks
/// for instead (newcomer finding: `policy outbound` gave this hint and `explain` did not).
#[tokio::test]
async fn an_address_without_a_port_is_refused_with_an_example() {
    let cluster = Cluster::start("emojivoto").await;
    for (target, example) in [
        ("10.96.0.1", "10.96.0.1:80"),
        ("fd00:10:244:2::13", "[fd00:10:244:2::13]:80"),
    ] {
        let expected = format!(
            "dst-diag: invalid TARGET \"{target}\": an IP address without a port: a proxy asks \
             for IP:PORT, such as `{example}`\n"
        );
        let run = cluster.offline(&["outbound", target]).await;
        assert_eq!(
            (run.stdout.as_str(), run.stderr.as_str()),
            ("", expected.as_str())
        );
        assert_eq!(run.code, Some(2), "{}", run.stderr);
        let run = cluster.online(&["outbound", target]).await;
        assert_eq!(run.stderr, expected);
    }
}
