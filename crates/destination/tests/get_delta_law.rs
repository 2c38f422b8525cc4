//! The delta law of `Destination.Get` (DESIGN.md, "Topics"), property-tested: for any sequence
//! of endpoint views (pods added and removed, readiness flips, new addresses and ports, zones,
//! hints, meshing, a Service that comes and goes, `internalTrafficPolicy: Local`, dual stack),
//! a client that reads any subset of the intermediate views and applies what it was sent
//! (`Add` inserts or replaces by address, `Remove` deletes, `NoEndpoints` clears) holds what a
//! fresh subscriber of the final view is sent, for any client filter (node, zone, IPv6); and
//! no `Add` re-sends an address the client holds unchanged (pods also change in ways the
//! client cannot see).
//!
//! The stream is the real one, [`EndpointsStream`] (filter, diff, shared deltas, translation),
//! driven by a test topic ([`Topic`]) that publishes each view, as the index's topics do; a view published while the stream is not reading is skipped, as a slow stream
//! skips it.
//!
//! Cases per run: proptest's default (256), or `PROPTEST_CASES`:
//! `PROPTEST_CASES=10000 cargo test -p destination --test get_delta_law`.

use destination::{
    EndpointTranslator, TranslatorConfig,
    endpoints::{EndpointsStream, SharedDeltas, StreamFilter},
};
use futures::FutureExt;
use linkerd_index::topic::Topic;
use linkerd_index::{
    AddressId, Endpoint, EndpointsView, OwnerRef, PodInfo, PortSet, ServiceInfo, Workload,
    model::{AddressType, Labels, ProxyPorts},
};
use linkerd2_proxy_api::{
    destination::{Update, WeightedAddr, update},
    net::TcpAddress,
};
use proptest::prelude::*;
use std::{
    collections::{BTreeMap, HashSet},
    net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr},
    sync::Arc,
};

/// Pods that may back the Service, and bare addresses (endpoints without a target).
const PODS: usize = 5;
const ADDRESSES: usize = 2;
/// Addresses are drawn from this few IPs, so that they move between pods and are reused.
const IPS: u8 = 6;
const NODES: [&str; 3] = ["node-0", "node-1", "node-2"];
const ZONES: [&str; 2] = ["zone-a", "zone-b"];

/// One pod as a view holds it: only ready pods are in a view.
#[derive(Clone, Debug)]
struct PodSpec {
    ip: u8,
    /// The second target port (a changed `targetPort`) instead of the first.
    other_port: bool,
    node: usize,
    zone: Option<usize>,
    /// Zone hints: bit 0 `zone-a`, bit 1 `zone-b`.
    hints: u8,
    meshing: Meshing,
    server_opaque: bool,
    /// The pod's IPv6 address too (dual stack).
    ipv6: Option<u8>,
    /// A label no field of the address reads: a change the client cannot see.
    team: bool,
}

/// How a pod's proxy looks to the translation.
#[derive(Clone, Copy, Debug)]
enum Meshing {
    Unmeshed,
    Meshed,
    /// Injected, but without admin and control ports: the translation leaves it out.
    MeshedWithoutPorts,
}

#[derive(Clone, Debug)]
struct AddressSpec {
    ip: u8,
    identity: bool,
}

#[derive(Clone, Debug)]
struct ViewSpec {
    exists: bool,
    local: bool,
    pods: Vec<Option<PodSpec>>,
    addresses: Vec<Option<AddressSpec>>,
}

/// What a proxy holds from a `Get` stream: its endpoints by address, and whether it was told
/// that the Service does not exist (`NoEndpoints { exists: false }`, until the next `Add`). An
/// empty set reached by `Remove`s is the same to the proxy as `NoEndpoints { exists: true }`.
#[derive(Debug, Default, PartialEq)]
struct Client {
    endpoints: BTreeMap<SocketAddr, WeightedAddr>,
    does_not_exist: bool,
}

fn translator() -> Arc<EndpointTranslator> {
    Arc::new(EndpointTranslator::new(TranslatorConfig {
        controller_namespace: "linkerd".into(),
        trust_domain: "cluster.local".into(),
        enable_h2_upgrade: true,
        default_opaque_ports: PortSet::default(),
        meshed_http2_params: None,
        force_opaque_transport: false,
        ext_endpoint_zone_weights: true,
    }))
}

fn ip(n: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(10, 0, 0, n + 1))
}

fn mk_pod(i: usize, spec: &PodSpec) -> Arc<PodInfo> {
    let (labels, proxy): (Labels, _) = match spec.meshing {
        Meshing::Unmeshed => (Labels::default(), None),
        Meshing::Meshed => (
            [("linkerd.io/control-plane-ns", "linkerd")]
                .into_iter()
                .collect(),
            Some(ProxyPorts {
                inbound: Some(4143),
                admin: Some(4191),
                control: Some(4190),
            }),
        ),
        Meshing::MeshedWithoutPorts => (
            [("linkerd.io/control-plane-ns", "linkerd")]
                .into_iter()
                .collect(),
            Some(ProxyPorts::default()),
        ),
    };
    let labels = if spec.team {
        labels
            .iter()
            .chain([("team", "payments")])
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    } else {
        labels
    };
    Arc::new(PodInfo {
        namespace: "shop".into(),
        name: format!("web-{i}"),
        labels,
        annotations: Default::default(),
        service_account: "web".into(),
        node_name: Some(NODES[spec.node].into()),
        host_network: false,
        phase: Some("Running".into()),
        terminating: false,
        ips: vec![ip(spec.ip)],
        host_ips: vec![],
        owner: None,
        container_ports: vec![],
        proxy,
        opaque_ports: None,
        skip_inbound_ports: Default::default(),
        probe_paths: Default::default(),
    })
}

/// The view of `spec`, as the index computes it: nothing without the Service, and no two
/// endpoints on one address (the later one is left out).
fn mk_view(spec: &ViewSpec) -> EndpointsView {
    if !spec.exists {
        return EndpointsView::default();
    }
    let service = ServiceInfo {
        namespace: "shop".into(),
        name: "web".into(),
        external_name: false,
        internal_traffic_local: spec.local,
        cluster_ips: vec![],
        ports: vec![],
        annotations: Default::default(),
        labels: Default::default(),
        opaque_ports: None,
        ..ServiceInfo::default()
    };
    let mut endpoints = BTreeMap::new();
    let mut taken = HashSet::new();
    for (i, pod) in spec.pods.iter().enumerate() {
        let Some(pod) = pod else { continue };
        let info = mk_pod(i, pod);
        let port = if pod.other_port { 9090 } else { 8080 };
        let hints: Vec<String> = ZONES
            .iter()
            .enumerate()
            .filter(|(z, _)| pod.hints & (1 << z) != 0)
            .map(|(_, zone)| zone.to_string())
            .collect();
        let v4 = SocketAddr::new(ip(pod.ip), port);
        let v6 = pod.ipv6.map(|n| {
            SocketAddr::new(
                IpAddr::V6(Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, u16::from(n) + 1)),
                port,
            )
        });
        for (family, addr) in [(AddressType::IPv4, Some(v4)), (AddressType::IPv6, v6)] {
            let Some(addr) = addr.filter(|a| taken.insert(*a)) else {
                continue;
            };
            let id = AddressId::Pod {
                namespace: "shop".into(),
                name: format!("web-{i}"),
                family,
            };
            let endpoint = Endpoint {
                addr,
                hostname: None,
                zone: pod.zone.map(|z| ZONES[z].to_string()),
                zone_hints: hints.clone(),
                server_opaque: pod.server_opaque,
                workload: Workload::Pod {
                    pod: info.clone(),
                    owner: OwnerRef {
                        kind: "Deployment".into(),
                        name: "web".into(),
                    },
                },
            };
            endpoints.insert(id, Arc::new(endpoint));
        }
    }
    for (i, address) in spec.addresses.iter().enumerate() {
        let Some(address) = address else { continue };
        let addr = SocketAddr::new(ip(address.ip), 8080);
        if !taken.insert(addr) {
            continue;
        }
        let id = AddressId::Address {
            namespace: "shop".into(),
            name: format!("web-{}-8080", ip(address.ip)),
        };
        let endpoint = Endpoint {
            addr,
            hostname: None,
            zone: None,
            zone_hints: vec![],
            server_opaque: false,
            workload: Workload::Address {
                identity: address
                    .identity
                    .then(|| format!("gateway-{i}.linkerd.cluster.local")),
                authority_override: None,
            },
        };
        endpoints.insert(id, Arc::new(endpoint));
    }
    EndpointsView {
        service: Some(Arc::new(service)),
        labels: [("namespace", "shop"), ("service", "web")]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        endpoints,
    }
}

// === impl Client ===

impl Client {
    /// The addresses `updates` add that the client holds already, unchanged: deltas send
    /// what changed only (tester finding: a pod label no field reads re-sent its address).
    fn resent(&self, updates: &[Update]) -> Vec<SocketAddr> {
        updates
            .iter()
            .filter_map(|update| match update.update.as_ref() {
                Some(update::Update::Add(set)) => Some(set),
                _ => None,
            })
            .flat_map(|set| &set.addrs)
            .filter(|addr| self.endpoints.get(&socket_addr(addr)) == Some(*addr))
            .map(socket_addr)
            .collect()
    }

    fn apply(&mut self, updates: &[Update]) {
        for update in updates {
            match update.update.as_ref().expect("an update") {
                update::Update::Add(set) => {
                    self.does_not_exist = false;
                    for addr in &set.addrs {
                        self.endpoints.insert(socket_addr(addr), addr.clone());
                    }
                }
                update::Update::Remove(set) => {
                    for addr in &set.addrs {
                        self.endpoints.remove(&tcp_addr(addr));
                    }
                }
                update::Update::NoEndpoints(no) => {
                    self.endpoints.clear();
                    self.does_not_exist = !no.exists;
                }
            }
        }
    }
}

fn socket_addr(addr: &WeightedAddr) -> SocketAddr {
    tcp_addr(&addr.addr.unwrap())
}

fn tcp_addr(addr: &TcpAddress) -> SocketAddr {
    SocketAddr::new(
        IpAddr::try_from(addr.ip.unwrap()).unwrap(),
        addr.port as u16,
    )
}

/// The updates the stream has ready (it has one as soon as the topic changed).
fn next_updates(stream: &mut EndpointsStream) -> Vec<Update> {
    stream
        .next_updates()
        .now_or_never()
        .expect("the stream reads the changed topic at once")
        .expect("the topic lives")
        .iter()
        .map(|update| update.get().clone())
        .collect()
}

/// Each update as text: `add <addr>...`, `remove <addr>...`, `no-endpoints exists=<bool>`.
fn describe(updates: &[Update]) -> Vec<String> {
    updates
        .iter()
        .map(|update| match update.update.as_ref().unwrap() {
            update::Update::Add(set) => std::iter::once("add".to_string())
                .chain(set.addrs.iter().map(|a| socket_addr(a).to_string()))
                .collect::<Vec<_>>()
                .join(" "),
            update::Update::Remove(set) => std::iter::once("remove".to_string())
                .chain(set.addrs.iter().map(|a| tcp_addr(a).to_string()))
                .collect::<Vec<_>>()
                .join(" "),
            update::Update::NoEndpoints(no) => format!("no-endpoints exists={}", no.exists),
        })
        .collect()
}

/// Found by the property below: an address whose new endpoint the translation leaves out (a
/// pod injected without admin and control ports) stayed at the client with what an earlier
/// endpoint there was.
#[test]
fn an_address_whose_endpoint_is_left_out_is_removed() {
    let pod = |ip, meshing| PodSpec {
        ip,
        other_port: false,
        node: 0,
        zone: None,
        hints: 0,
        meshing,
        server_opaque: false,
        ipv6: None,
        team: false,
    };
    let view = |pods: Vec<Option<PodSpec>>| {
        Arc::new(mk_view(&ViewSpec {
            exists: true,
            local: false,
            pods,
            addresses: vec![],
        }))
    };
    let topic = Topic::new(view(vec![Some(pod(0, Meshing::Meshed))]));
    let rx = topic.subscribe();
    let mut stream = EndpointsStream::new(
        rx,
        StreamFilter::default(),
        translator(),
        Arc::new(SharedDeltas::default()),
    );
    assert_eq!(describe(&next_updates(&mut stream)), ["add 10.0.0.1:8080"]);

    // web-0 moves to 10.0.0.2, and web-1, left out, takes 10.0.0.1.
    topic.send(view(vec![
        Some(pod(1, Meshing::Meshed)),
        Some(pod(0, Meshing::MeshedWithoutPorts)),
    ]));
    assert_eq!(
        describe(&next_updates(&mut stream)),
        ["add 10.0.0.2:8080", "remove 10.0.0.1:8080"]
    );
    // web-0 stays, but is left out from now on.
    topic.send(view(vec![
        Some(pod(1, Meshing::MeshedWithoutPorts)),
        Some(pod(0, Meshing::MeshedWithoutPorts)),
    ]));
    assert_eq!(
        describe(&next_updates(&mut stream)),
        ["remove 10.0.0.2:8080"]
    );
}

// === strategies ===

fn pod_spec() -> impl Strategy<Value = PodSpec> {
    (
        (0..IPS, any::<bool>(), 0..NODES.len()),
        (prop::option::of(0..ZONES.len()), 0u8..4),
        (
            prop_oneof![
                Just(Meshing::Unmeshed),
                Just(Meshing::Meshed),
                Just(Meshing::MeshedWithoutPorts)
            ],
            any::<bool>(),
            prop::option::of(0..IPS),
            any::<bool>(),
        ),
    )
        .prop_map(
            |((ip, other_port, node), (zone, hints), (meshing, server_opaque, ipv6, team))| {
                PodSpec {
                    ip,
                    other_port,
                    node,
                    zone,
                    hints,
                    meshing,
                    server_opaque,
                    ipv6,
                    team,
                }
            },
        )
}

fn view_spec() -> impl Strategy<Value = ViewSpec> {
    (
        prop::bool::weighted(0.9),
        prop::bool::weighted(0.2),
        prop::collection::vec(prop::option::of(pod_spec()), PODS),
        prop::collection::vec(
            prop::option::weighted(
                0.3,
                (0..IPS, any::<bool>()).prop_map(|(ip, identity)| AddressSpec { ip, identity }),
            ),
            ADDRESSES,
        ),
    )
        .prop_map(|(exists, local, pods, addresses)| ViewSpec {
            exists,
            local,
            pods,
            addresses,
        })
}

fn filter() -> impl Strategy<Value = StreamFilter> {
    (
        prop::option::of(0..NODES.len()),
        prop::option::of(0..ZONES.len()),
        any::<bool>(),
    )
        .prop_map(|(node, zone, enable_ipv6)| StreamFilter {
            node_name: node.map(|n| NODES[n].to_string()),
            client_zone: zone.map(|z| ZONES[z].to_string()),
            enable_ipv6,
        })
}

/// Views in order, and for each view after the first whether the stream reads it (the last
/// one is always read). Some views are the one before with only the `team` label of some pods
/// flipped: a change the client cannot see, which random views alone would hardly make.
fn history() -> impl Strategy<Value = (Vec<ViewSpec>, Vec<bool>)> {
    prop::collection::vec(view_spec(), 1..10).prop_flat_map(|views| {
        let n = views.len();
        let reads = prop::collection::vec(any::<bool>(), n);
        let invisible = prop::collection::vec(prop::option::weighted(0.3, any::<u8>()), n);
        (Just(views), reads, invisible).prop_map(|(mut views, reads, invisible)| {
            for (i, flips) in invisible.into_iter().enumerate().skip(1) {
                if let Some(flips) = flips {
                    let mut view = views[i - 1].clone();
                    for (p, pod) in view.pods.iter_mut().enumerate() {
                        if let Some(pod) = pod
                            && flips & (1 << p) != 0
                        {
                            pod.team = !pod.team;
                        }
                    }
                    views[i] = view;
                }
            }
            (views, reads)
        })
    })
}

proptest! {
    #[test]
    fn a_stream_that_skips_views_ends_as_a_fresh_subscriber(
        (views, reads) in history(),
        filter in filter(),
    ) {
        let translator = translator();
        let deltas = Arc::new(SharedDeltas::default());
        let topic = Topic::new(Arc::new(mk_view(&views[0])));
        let rx = topic.subscribe();
        let mut stream = EndpointsStream::new(rx, filter.clone(), translator.clone(), deltas.clone());
        let mut client = Client::default();
        client.apply(&next_updates(&mut stream));
        // A view equal to the current one is not published (the index's topics do the same),
        // so the stream has something to read only after a view that differs.
        let mut unread = false;
        for (i, view) in views.iter().enumerate().skip(1) {
            unread |= topic.send(Arc::new(mk_view(view)));
            if unread && (reads[i] || i == views.len() - 1) {
                let updates = next_updates(&mut stream);
                let resent = client.resent(&updates);
                prop_assert!(resent.is_empty(), "re-sent unchanged {:?}: {:?}", resent, describe(&updates));
                client.apply(&updates);
                unread = false;
            }
        }

        let mut fresh = EndpointsStream::new(topic.subscribe(), filter, translator, deltas);
        let first = next_updates(&mut fresh);
        prop_assert_eq!(first.len(), 1, "one message: {:?}", first);
        let mut subscriber = Client::default();
        subscriber.apply(&first);
        prop_assert_eq!(&client, &subscriber);
        prop_assert_eq!(stream.held(), fresh.held());
    }
}
