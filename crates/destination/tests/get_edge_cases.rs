//! `Destination.Get` over the edge-cases snapshot: the Get facts of fixtures/README.md that
//! discovery covers (E1–E14, and E16's Server-driven opacity).

mod support;

use linkerd2_proxy_api::destination::{
    protocol_hint::Protocol, tls_identity::Strategy, update::Update,
};
use support::*;

fn edge() -> std::path::PathBuf {
    fixture_dir("edge-cases")
}

fn hint(addr: &linkerd2_proxy_api::destination::WeightedAddr) -> (&'static str, Option<u32>) {
    match &addr.protocol_hint {
        None => ("none", None),
        Some(h) => {
            let p = match h.protocol {
                Some(Protocol::H2(_)) => "h2",
                Some(Protocol::Opaque(_)) => "opaque",
                None => "empty",
            };
            (p, h.opaque_transport.as_ref().map(|t| t.inbound_port))
        }
    }
}

fn dns_identity(addr: &linkerd2_proxy_api::destination::WeightedAddr) -> Option<String> {
    match addr.tls_identity.clone()?.strategy? {
        Strategy::DnsLikeIdentity(id) => Some(id.name),
        Strategy::UriLikeIdentity(id) => Some(id.uri),
    }
}

async fn add_set(h: &mut Harness, path: &str) -> linkerd2_proxy_api::destination::WeightedAddrSet {
    let mut stream = h.get(path, "").await.unwrap();
    match next(&mut stream).await {
        Update::Add(mut set) => {
            set.addrs.sort_by_key(addr_of);
            set
        }
        other => panic!("{path}: expected Add, got {other:?}"),
    }
}

#[tokio::test]
async fn e1_headless_statefulset_and_instance() {
    let mut h = Harness::start(&edge()).await;
    let set = add_set(&mut h, "cache.edge.svc.cluster.local:6379").await;
    let got: Vec<_> = set.addrs.iter().map(addr_of).collect();
    assert_eq!(
        got,
        [
            sa("10.244.0.41:6379"),
            sa("10.244.1.44:6379"),
            sa("10.244.2.47:6379")
        ]
    );
    for (a, zone) in set
        .addrs
        .iter()
        .zip(["eu-west-1a", "eu-west-1b", "eu-west-1c"])
    {
        assert_eq!(
            dns_identity(a).as_deref(),
            Some("cache.edge.serviceaccount.identity.linkerd.cluster.local")
        );
        assert_eq!(hint(a), ("opaque", Some(4143)));
        let mut l = sorted(&a.metric_labels);
        let pod = l.remove("pod").unwrap();
        assert!(pod.starts_with("cache-"), "{pod}");
        assert_eq!(
            l,
            labels(&[
                ("statefulset", "cache"),
                ("serviceaccount", "cache"),
                ("control_plane_ns", "linkerd"),
                ("zone", zone),
                ("zone_locality", "unknown")
            ])
        );
    }
    let set = add_set(&mut h, "cache-1.cache.edge.svc.cluster.local:6379").await;
    assert_eq!(
        set.addrs.iter().map(addr_of).collect::<Vec<_>>(),
        [sa("10.244.1.44:6379")]
    );
    assert_eq!(set.addrs[0].metric_labels["pod"], "cache-1");
}

#[tokio::test]
async fn e1_unknown_instance_has_no_endpoints() {
    let mut h = Harness::start(&edge()).await;
    let mut stream = h
        .get("cache-9.cache.edge.svc.cluster.local:6379", "")
        .await
        .unwrap();
    assert!(matches!(next(&mut stream).await, Update::NoEndpoints(ne) if ne.exists));
}

#[tokio::test]
async fn e2_external_name_is_invalid() {
    let mut h = Harness::start(&edge()).await;
    let status = h
        .get("legacy-db.edge.svc.cluster.local:443", "")
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    assert!(
        status.message().contains("ExternalName"),
        "{}",
        status.message()
    );
}

#[tokio::test]
async fn e3_service_without_endpoints_and_unknown_service() {
    let mut h = Harness::start(&edge()).await;
    let mut ghost = h.get("ghost.edge.svc.cluster.local:80", "").await.unwrap();
    assert!(matches!(next(&mut ghost).await, Update::NoEndpoints(ne) if ne.exists));
    assert_quiet(&mut ghost).await;
    let mut nosuch = h.get("nosuch.edge.svc.cluster.local:80", "").await.unwrap();
    assert!(matches!(next(&mut nosuch).await, Update::NoEndpoints(ne) if !ne.exists));
}

#[tokio::test]
async fn e4_only_ready_endpoints() {
    let mut h = Harness::start(&edge()).await;
    let set = add_set(&mut h, "flaky.edge.svc.cluster.local:80").await;
    assert_eq!(
        set.addrs.iter().map(addr_of).collect::<Vec<_>>(),
        [sa("10.244.0.52:8080")]
    );
}

#[tokio::test]
async fn e5_address_in_two_slices_is_served_once() {
    let mut h = Harness::start(&edge()).await;
    let set = add_set(&mut h, "split.edge.svc.cluster.local:80").await;
    assert_eq!(
        set.addrs.iter().map(addr_of).collect::<Vec<_>>(),
        [
            sa("10.244.0.58:8080"),
            sa("10.244.1.61:8080"),
            sa("10.244.2.63:8080")
        ]
    );
}

#[tokio::test]
async fn e6_named_target_port_resolved_per_slice() {
    let mut h = Harness::start(&edge()).await;
    let set = add_set(&mut h, "polyglot.edge.svc.cluster.local:80").await;
    let got: Vec<_> = set
        .addrs
        .iter()
        .map(|a| (addr_of(a), a.metric_labels["deployment"].clone()))
        .collect();
    assert_eq!(
        got,
        [
            (sa("10.244.1.66:8080"), "polyglot-v1".into()),
            (sa("10.244.2.68:9090"), "polyglot-v2".into())
        ]
    );
}

#[tokio::test]
async fn e7_service_opaque_annotation_does_not_make_get_opaque() {
    let mut h = Harness::start(&edge()).await;
    let set = add_set(&mut h, "ledger.edge.svc.cluster.local:7000").await;
    assert_eq!(
        set.addrs.iter().map(addr_of).collect::<Vec<_>>(),
        [sa("10.244.0.70:7000")]
    );
    assert_eq!(hint(&set.addrs[0]), ("h2", None));
}

#[tokio::test]
async fn e8_pod_opaque_ports_by_name() {
    let mut h = Harness::start(&edge()).await;
    let amqp = add_set(&mut h, "mq.edge.svc.cluster.local:5672").await;
    assert_eq!(
        amqp.addrs.iter().map(addr_of).collect::<Vec<_>>(),
        [sa("10.244.1.73:5672")]
    );
    assert_eq!(hint(&amqp.addrs[0]), ("opaque", Some(4143)));
    let mgmt = add_set(&mut h, "mq.edge.svc.cluster.local:15672").await;
    assert_eq!(hint(&mgmt.addrs[0]), ("h2", None));
}

#[tokio::test]
async fn e9_host_network_daemonset_is_unmeshed() {
    let mut h = Harness::start(&edge()).await;
    let set = add_set(&mut h, "node-agent.edge.svc.cluster.local:9100").await;
    assert_eq!(
        set.addrs.iter().map(addr_of).collect::<Vec<_>>(),
        [
            sa("10.20.1.11:9100"),
            sa("10.20.2.12:9100"),
            sa("10.20.3.13:9100")
        ]
    );
    for a in &set.addrs {
        assert_eq!(a.tls_identity, None);
        assert_eq!(a.protocol_hint, None);
        assert_eq!(a.http2, None);
        let keys: Vec<_> = sorted(&a.metric_labels).into_keys().collect();
        assert_eq!(
            keys,
            [
                "daemonset",
                "pod",
                "serviceaccount",
                "zone",
                "zone_locality"
            ]
        );
        assert_eq!(a.metric_labels["daemonset"], "node-agent");
        assert_eq!(a.metric_labels["serviceaccount"], "node-agent");
    }
}

#[tokio::test]
async fn e10_named_target_port_to_container_port() {
    let mut h = Harness::start(&edge()).await;
    let set = add_set(&mut h, "gateway.edge.svc.cluster.local:443").await;
    assert_eq!(
        set.addrs.iter().map(addr_of).collect::<Vec<_>>(),
        [sa("10.244.1.77:8443")]
    );
    assert_eq!(
        dns_identity(&set.addrs[0]).as_deref(),
        Some("gateway.edge.serviceaccount.identity.linkerd.cluster.local")
    );
}

#[tokio::test]
async fn e11_unmeshed_pod() {
    let mut h = Harness::start(&edge()).await;
    let set = add_set(&mut h, "legacy.edge.svc.cluster.local:80").await;
    assert_eq!(
        set.addrs.iter().map(addr_of).collect::<Vec<_>>(),
        [sa("10.244.2.80:8080")]
    );
    let a = &set.addrs[0];
    assert_eq!(
        (a.tls_identity.clone(), a.protocol_hint, a.http2),
        (None, None, None)
    );
    let mut l = sorted(&a.metric_labels);
    assert!(l.remove("pod").unwrap().starts_with("legacy-4h4nlxbbh8-"));
    assert_eq!(
        l,
        labels(&[
            ("deployment", "legacy"),
            ("serviceaccount", "default"),
            ("pod_template_hash", "4h4nlxbbh8"),
            ("zone", "eu-west-1c"),
            ("zone_locality", "unknown")
        ])
    );
}

#[tokio::test]
async fn e12_native_sidecar_proxy_in_init_containers() {
    let mut h = Harness::start(&edge()).await;
    let set = add_set(&mut h, "billing.edge.svc.cluster.local:80").await;
    assert_eq!(
        set.addrs.iter().map(addr_of).collect::<Vec<_>>(),
        [sa("10.244.0.83:8080")]
    );
    assert_eq!(
        dns_identity(&set.addrs[0]).as_deref(),
        Some("billing.edge.serviceaccount.identity.linkerd.cluster.local")
    );
    assert_eq!(hint(&set.addrs[0]), ("h2", None));
}

#[tokio::test]
async fn e13_dual_stack_follows_enable_ipv6() {
    let mut v4 = Harness::start_with(&edge(), chart_config(), false).await;
    let set = add_set(&mut v4, "dual.edge.svc.cluster.local:80").await;
    assert_eq!(
        set.addrs.iter().map(addr_of).collect::<Vec<_>>(),
        [sa("10.244.0.86:8080"), sa("10.244.2.88:8080")]
    );

    let mut v6 = Harness::start_with(&edge(), chart_config(), true).await;
    let set = add_set(&mut v6, "dual.edge.svc.cluster.local:80").await;
    assert_eq!(
        set.addrs.iter().map(addr_of).collect::<Vec<_>>(),
        [sa("[fd00:10:244::56]:8080"), sa("[fd00:10:244:2::58]:8080")]
    );
}

#[tokio::test]
async fn forced_opaque_transport_spares_admin_and_control_ports() {
    // §H.2: with --outbound-transport-mode=transport-header, the proxy's admin (4191) and control
    // (4190) ports keep plain h2, every other port of a meshed pod gets opaque transport.
    let config = destination::TranslatorConfig {
        force_opaque_transport: true,
        ..chart_config()
    };
    let mut h = Harness::start_with(&fixture_dir("emojivoto"), config, false).await;
    let set = add_set(&mut h, "web-svc.emojivoto.svc.cluster.local:80").await;
    assert_eq!(hint(&set.addrs[0]), ("h2", Some(4143)));
    let admin = add_set(&mut h, "web-svc.emojivoto.svc.cluster.local:4191").await;
    assert_eq!(
        admin.addrs.iter().map(addr_of).collect::<Vec<_>>(),
        [sa("10.244.2.19:4191")]
    );
    assert_eq!(hint(&admin.addrs[0]), ("h2", None));
    let control = add_set(&mut h, "web-svc.emojivoto.svc.cluster.local:4190").await;
    assert_eq!(hint(&control.addrs[0]), ("h2", None));
}

#[tokio::test]
async fn e14_external_workload_endpoint() {
    let mut h = Harness::start(&edge()).await;
    let set = add_set(&mut h, "payments.edge.svc.cluster.local:80").await;
    // The kube placeholder slice (ports null) contributes nothing; the linkerd slice one address.
    assert_eq!(set.addrs.len(), 1, "{set:?}");
    let a = &set.addrs[0];
    assert_eq!(addr_of(a), sa("10.20.3.200:8080"));
    let tls = a.tls_identity.clone().unwrap();
    assert_eq!(
        tls.strategy,
        Some(Strategy::UriLikeIdentity(
            linkerd2_proxy_api::destination::tls_identity::UriLikeIdentity {
                uri: "spiffe://root.linkerd.cluster.local/payments-vm-01".into()
            }
        ))
    );
    assert_eq!(
        tls.server_name.unwrap().name,
        "payments-vm-01.cluster.local"
    );
    assert_eq!(hint(a), ("h2", None));
    assert!(
        a.http2.is_some(),
        "meshed params are sent to ExternalWorkloads"
    );
    assert_eq!(
        sorted(&a.metric_labels),
        labels(&[
            ("external_workload", "payments-vm-01"),
            ("zone", "eu-west-1c"),
            ("zone_locality", "unknown")
        ])
    );
}

#[tokio::test]
async fn e16_opaque_server_makes_get_opaque() {
    let mut h = Harness::start(&edge()).await;
    let set = add_set(&mut h, "secrets.edge-strict.svc.cluster.local:8200").await;
    let got: Vec<_> = set.addrs.iter().map(addr_of).collect();
    assert_eq!(got, [sa("10.244.1.90:8200"), sa("10.244.2.92:8200")]);
    for a in &set.addrs {
        assert_eq!(hint(a), ("opaque", Some(4143)), "{a:?}");
    }
}
