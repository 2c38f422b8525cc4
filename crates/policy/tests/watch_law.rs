//! The delta law of the policy watches (spec/policy.md §4.9, §5.8), property-tested: after any
//! sequence of changes to the objects behind one inbound port and one outbound Service (Servers
//! and their protocols and access policies, ServerAuthorizations, AuthorizationPolicies and
//! their NetworkAuthentication, policy and Gateway HTTPRoutes, pod and Service annotations,
//! objects created and deleted), a `WatchPort` and an outbound `Watch` stream that read any
//! subset of the intermediate states end on the message that a fresh watcher gets, both on the
//! same index and on a fresh index fed only the final objects (so that a stale view kept by
//! the index's incremental updates is found too).
//!
//! The streams are the services' own (`InboundServerPolicies::watch_port`,
//! `OutboundPolicies::watch`: topic, distinct views, shared translations, the real
//! translators) over the real indexes, fed typed objects through their watches. A stream that
//! is not polled while the index changes skips the states in between, as a slow client does.
//!
//! Cases per run: proptest's default (256), or `PROPTEST_CASES`:
//! `PROPTEST_CASES=10000 cargo test -p policy --test watch_law`.

mod support;

use futures::{FutureExt, Stream, StreamExt};
use k8s_openapi::api::core::v1::{Pod, Service};
use linkerd_index::{Event, ObjectRef, Watches};
use linkerd_k8s_api::{
    AuthorizationPolicy, HttpRoute as PolicyHttpRoute, NetworkAuthentication, Server,
    ServerAuthorization, gateway_api::httproutes::HttpRoute as GatewayHttpRoute,
};
use linkerd_runtime::shutdown;
use linkerd2_proxy_api::{
    inbound::{PortSpec, inbound_server_policies_server::InboundServerPolicies},
    outbound::{
        OutboundPolicy, TrafficSpec, outbound_policies_server::OutboundPolicies,
        traffic_spec::Target,
    },
};
use policy::{
    InboundPolicyService, InboundTranslator, OutboundPolicyService, OutboundTranslator,
    PolicyMetrics,
};
use proptest::prelude::*;
use serde_json::{Value, json};
use support::{
    chart_config, cluster_networks, mk_pod,
    outbound::{Indexes, indexes, outbound_config},
    pod_workload,
};
use tonic::{Request, Status};

const NS: &str = "shop";
/// The objects a case changes, each in one of [`VARIANTS`] forms or absent (except the pod
/// and the Service, which the watches need).
const SLOTS: usize = 9;
const VARIANTS: u8 = 3;

/// One object of a slot, typed as its watch reads it.
enum Object {
    Pod(Box<Pod>),
    Service(Box<Service>),
    Server(Box<Server>),
    ServerAuthorization(Box<ServerAuthorization>),
    AuthorizationPolicy(Box<AuthorizationPolicy>),
    NetworkAuthentication(Box<NetworkAuthentication>),
    PolicyHttpRoute(Box<PolicyHttpRoute>),
    GatewayHttpRoute(Box<GatewayHttpRoute>),
}

/// The object of `slot` in its form `variant`, as JSON.
fn document(slot: usize, variant: u8) -> Value {
    let meta = |name: &str| json!({"name": name, "namespace": NS});
    let pick = |options: &[&'static str]| options[usize::from(variant)];
    match slot {
        0 => {
            let mut pod = mk_pod(NS, "web-0", "web", ("http", 8080));
            let policy = pick(&["", "deny", "all-authenticated"]);
            if !policy.is_empty() {
                pod["metadata"]["annotations"] =
                    json!({"config.linkerd.io/default-inbound-policy": policy});
            }
            pod
        }
        1 => {
            let timeout = pick(&["", "1s", "5s"]);
            let mut metadata = meta("web");
            if !timeout.is_empty() {
                metadata["annotations"] = json!({"timeout.linkerd.io/request": timeout});
            }
            json!({
                "apiVersion": "v1", "kind": "Service", "metadata": metadata,
                "spec": {
                    "clusterIP": "10.96.0.10", "clusterIPs": ["10.96.0.10"],
                    "selector": {"app": "web"},
                    "ports": [{"name": "http", "port": 80, "targetPort": 8080}],
                },
            })
        }
        2 => json!({
            "apiVersion": "policy.linkerd.io/v1beta3", "kind": "Server",
            "metadata": {"name": "web-http", "namespace": NS, "creationTimestamp": "2026-05-04T09:31:40Z"},
            "spec": {
                "podSelector": {"matchLabels": {"app": "web"}},
                "port": "http",
                "proxyProtocol": pick(&["HTTP/1", "gRPC", "opaque"]),
                "accessPolicy": "deny",
            },
        }),
        3 => json!({
            "apiVersion": "policy.linkerd.io/v1beta3", "kind": "Server",
            "metadata": {"name": "web-alt", "namespace": NS, "creationTimestamp": "2026-05-04T10:00:00Z"},
            "spec": {
                "podSelector": {"matchLabels": {"app": "web"}},
                "port": 8080,
                "proxyProtocol": "HTTP/2",
                "accessPolicy": pick(&["deny", "all-unauthenticated", "audit"]),
            },
        }),
        4 => json!({
            "apiVersion": "policy.linkerd.io/v1beta1", "kind": "ServerAuthorization",
            "metadata": meta("web-public"),
            "spec": {
                "server": {"name": "web-http"},
                "client": {
                    "unauthenticated": true,
                    "networks": pick(&["", "10.0.0.0/8", "192.168.0.0/16"]).split_terminator(',').map(|cidr| json!({"cidr": cidr})).collect::<Vec<_>>(),
                },
            },
        }),
        5 => {
            let target = [
                json!({"group": "policy.linkerd.io", "kind": "Server", "name": "web-http"}),
                json!({"group": "policy.linkerd.io", "kind": "Server", "name": "web-alt"}),
                json!({"group": "policy.linkerd.io", "kind": "HTTPRoute", "name": "web-route"}),
            ][usize::from(variant)]
            .clone();
            json!({
                "apiVersion": "policy.linkerd.io/v1alpha1", "kind": "AuthorizationPolicy",
                "metadata": meta("web-authz"),
                "spec": {
                    "targetRef": target,
                    "requiredAuthenticationRefs": [
                        {"group": "policy.linkerd.io", "kind": "NetworkAuthentication", "name": "nets"},
                    ],
                },
            })
        }
        6 => json!({
            "apiVersion": "policy.linkerd.io/v1alpha1", "kind": "NetworkAuthentication",
            "metadata": meta("nets"),
            "spec": {"networks": (
                [
                    json!([{"cidr": "10.0.0.0/8"}]),
                    json!([{"cidr": "0.0.0.0/0", "except": ["10.1.0.0/16"]}]),
                    json!([{"cidr": "192.168.0.0/16"}]),
                ][usize::from(variant)]
            )},
        }),
        7 => json!({
            "apiVersion": "policy.linkerd.io/v1beta3", "kind": "HTTPRoute",
            "metadata": meta("web-route"),
            "spec": {
                "parentRefs": [{"group": "policy.linkerd.io", "kind": "Server", "name": "web-http"}],
                "rules": [{"matches": [{"path": {"type": "PathPrefix", "value": pick(&["/a", "/b", "/c"])}}]}],
            },
        }),
        _ => json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
            "metadata": meta("web-gw"),
            "spec": {
                "parentRefs": [{"kind": "Service", "group": "core", "name": "web", "port": 80}],
                "rules": [{
                    "matches": [{"path": {"type": "PathPrefix", "value": pick(&["/x", "/y", "/z"])}}],
                    "backendRefs": [{"name": "web", "port": 80}],
                }],
            },
        }),
    }
}

fn object(slot: usize, variant: u8) -> Object {
    fn typed<T: serde::de::DeserializeOwned>(slot: usize, variant: u8) -> Box<T> {
        serde_json::from_value(document(slot, variant))
            .unwrap_or_else(|e| panic!("slot {slot} variant {variant}: {e}"))
    }
    match slot {
        0 => Object::Pod(typed(slot, variant)),
        1 => Object::Service(typed(slot, variant)),
        2 | 3 => Object::Server(typed(slot, variant)),
        4 => Object::ServerAuthorization(typed(slot, variant)),
        5 => Object::AuthorizationPolicy(typed(slot, variant)),
        6 => Object::NetworkAuthentication(typed(slot, variant)),
        7 => Object::PolicyHttpRoute(typed(slot, variant)),
        _ => Object::GatewayHttpRoute(typed(slot, variant)),
    }
}

// === impl Object ===

impl Object {
    fn apply(self, watches: &Watches) {
        match self {
            Self::Pod(o) => watches.apply(Event::Apply(*o)),
            Self::Service(o) => watches.apply(Event::Apply(*o)),
            Self::Server(o) => watches.apply(Event::Apply(*o)),
            Self::ServerAuthorization(o) => watches.apply(Event::Apply(*o)),
            Self::AuthorizationPolicy(o) => watches.apply(Event::Apply(*o)),
            Self::NetworkAuthentication(o) => watches.apply(Event::Apply(*o)),
            Self::PolicyHttpRoute(o) => watches.apply(Event::Apply(*o)),
            Self::GatewayHttpRoute(o) => watches.apply(Event::Apply(*o)),
        }
    }

    fn delete(self, watches: &Watches) {
        fn gone<K: linkerd_index::Kind + serde::Serialize>(watches: &Watches, name: &str) {
            watches.apply(Event::<K>::Delete(ObjectRef {
                namespace: NS.into(),
                name: name.into(),
            }));
        }
        match self {
            Self::Pod(_) | Self::Service(_) => unreachable!("never deleted"),
            Self::Server(o) => gone::<Server>(watches, o.metadata.name.as_deref().unwrap()),
            Self::ServerAuthorization(_) => gone::<ServerAuthorization>(watches, "web-public"),
            Self::AuthorizationPolicy(_) => gone::<AuthorizationPolicy>(watches, "web-authz"),
            Self::NetworkAuthentication(_) => gone::<NetworkAuthentication>(watches, "nets"),
            Self::PolicyHttpRoute(_) => gone::<PolicyHttpRoute>(watches, "web-route"),
            Self::GatewayHttpRoute(_) => gone::<GatewayHttpRoute>(watches, "web-gw"),
        }
    }
}

/// Both services over fresh indexes, with the pod and the Service applied.
struct Policies {
    watches: Watches,
    inbound: InboundPolicyService,
    outbound: OutboundPolicyService,
    _trigger: shutdown::Trigger,
}

type Watch<M> = std::pin::Pin<Box<dyn Stream<Item = Result<M, Status>> + Send>>;

impl Policies {
    /// Indexes fed `objects` (by slot: the variant, or absent).
    fn new(objects: &[Option<u8>]) -> Self {
        let Indexes {
            inbound,
            outbound,
            watches,
        } = indexes(chart_config(), outbound_config(true));
        for (slot, variant) in objects.iter().enumerate() {
            if let Some(variant) = variant {
                object(slot, *variant).apply(&watches);
            }
        }
        let (trigger, shutdown) = shutdown::channel();
        let metrics = PolicyMetrics::default();
        Self {
            watches,
            inbound: InboundPolicyService::new(
                inbound,
                InboundTranslator::new(cluster_networks()),
                metrics.clone(),
                shutdown.clone(),
            ),
            outbound: OutboundPolicyService::new(
                outbound,
                OutboundTranslator::new(false),
                "cluster.local".into(),
                metrics,
                shutdown,
            ),
            _trigger: trigger,
        }
    }

    fn watch_port(&self) -> Watch<linkerd2_proxy_api::inbound::Server> {
        let request = Request::new(PortSpec {
            workload: pod_workload(NS, "web-0"),
            port: 8080,
        });
        self.inbound
            .watch_port(request)
            .now_or_never()
            .expect("answered at once")
            .expect("WatchPort of web-0:8080")
            .into_inner()
    }

    fn watch(&self) -> Watch<OutboundPolicy> {
        let request = Request::new(TrafficSpec {
            source_workload: pod_workload(NS, "client"),
            target: Some(Target::Authority("web.shop.svc.cluster.local:80".into())),
        });
        self.outbound
            .watch(request)
            .now_or_never()
            .expect("answered at once")
            .expect("Watch of web:80")
            .into_inner()
    }
}

/// The message `stream` has ready, if any; a stream that ends or fails fails the test.
fn ready<M>(stream: &mut Watch<M>) -> Option<M> {
    match stream.next().now_or_never() {
        None => None,
        Some(Some(Ok(message))) => Some(message),
        Some(Some(Err(status))) => panic!("the stream failed: {status}"),
        Some(None) => panic!("the stream ended"),
    }
}

/// Changes: a slot and its new variant (`None`: deleted; the pod and the Service are never
/// deleted), and for each change whether the streams read after it (always after the last).
fn history() -> impl Strategy<Value = (Vec<(usize, Option<u8>)>, Vec<bool>)> {
    let change =
        (0..SLOTS, prop::option::weighted(0.75, 0..VARIANTS)).prop_map(|(slot, variant)| {
            match (slot, variant) {
                (0 | 1, None) => (slot, Some(0)),
                _ => (slot, variant),
            }
        });
    prop::collection::vec(change, 1..16).prop_flat_map(|changes| {
        let reads = prop::collection::vec(any::<bool>(), changes.len());
        (Just(changes), reads)
    })
}

proptest! {
    #[test]
    fn watches_that_skip_states_end_as_a_fresh_watcher(
        initial in prop::collection::vec(prop::option::of(0..VARIANTS), SLOTS),
        (changes, reads) in history(),
    ) {
        // The indexes spawn a task per topic (never run here: each case drops its runtime).
        let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let _runtime = runtime.enter();
        let mut objects = initial;
        objects[0].get_or_insert(0);
        objects[1].get_or_insert(0);
        let policies = Policies::new(&objects);
        let (mut inbound, mut outbound) = (policies.watch_port(), policies.watch());
        let mut last_inbound = ready(&mut inbound).expect("the current policy first");
        let mut last_outbound = ready(&mut outbound).expect("the current policy first");

        for (i, (slot, variant)) in changes.iter().enumerate() {
            match variant {
                Some(variant) => object(*slot, *variant).apply(&policies.watches),
                None => {
                    if let Some(previous) = objects[*slot] {
                        object(*slot, previous).delete(&policies.watches);
                    }
                }
            }
            objects[*slot] = *variant;
            if reads[i] || i == changes.len() - 1 {
                if let Some(message) = ready(&mut inbound) {
                    last_inbound = message;
                }
                if let Some(message) = ready(&mut outbound) {
                    last_outbound = message;
                }
                // One message per read: the newest state, never the ones skipped.
                prop_assert!(ready(&mut inbound).is_none());
                prop_assert!(ready(&mut outbound).is_none());
            }
        }

        // A fresh watcher of the same index.
        prop_assert_eq!(&last_inbound, &ready(&mut policies.watch_port()).unwrap());
        prop_assert_eq!(&last_outbound, &ready(&mut policies.watch()).unwrap());
        // A fresh index fed the final objects only.
        let fresh = Policies::new(&objects);
        prop_assert_eq!(&last_inbound, &ready(&mut fresh.watch_port()).unwrap());
        prop_assert_eq!(&last_outbound, &ready(&mut fresh.watch()).unwrap());
    }
}
