//! The pod's indexes fed from manifests without a source: each document decoded as its kind
//! (as the offline source decodes it) and delivered to every index that reads the kind.

use gateway_api::{
    experimental::{tcproutes::TcpRoute, tlsroutes::TlsRoute},
    grpcroutes::GrpcRoute,
    httproutes::HttpRoute as GatewayHttpRoute,
};
use k8s_openapi::api::{
    apps::v1::ReplicaSet,
    batch::v1::Job,
    core::v1::{Node, Pod, Secret, Service},
    discovery::v1::EndpointSlice,
};
use linkerd_index::{
    DiscoveryIndex, Event, IndexMetrics, Kind, PortSet, StatusIndex, Watches,
    inbound::{DefaultPolicy, InboundConfig, InboundIndex},
    model::{DecodeError, decode_json},
    outbound::{OutboundConfig, OutboundIndex},
    source::offline::parse_manifests,
};
use linkerd_k8s_api::{
    AuthorizationPolicy, EgressNetwork, ExternalWorkload, HttpLocalRateLimitPolicy,
    HttpRoute as PolicyHttpRoute, MeshTlsAuthentication, NetworkAuthentication, Server,
    ServerAuthorization, ServiceProfile,
};
use std::{path::Path, sync::Arc};

/// The bundled fixture clusters (tests/fixtures), compiled in so that the fuzz binaries need
/// no files at run time.
pub const FIXTURES: &[(&str, &str)] = &[
    (
        "emojivoto.yaml",
        include_str!("../../tests/fixtures/emojivoto/cluster.yaml"),
    ),
    (
        "edge-cases.yaml",
        include_str!("../../tests/fixtures/edge-cases/cluster.yaml"),
    ),
];

/// The chart's `--cluster-networks` (fixtures/README.md).
pub fn cluster_networks() -> Vec<ipnet::IpNet> {
    [
        "10.0.0.0/8",
        "100.64.0.0/10",
        "172.16.0.0/12",
        "192.168.0.0/16",
        "fd00::/8",
    ]
    .iter()
    .filter_map(|n| n.parse().ok())
    .collect()
}

/// The policy controller's inbound flags as the chart sets them.
pub fn inbound_config() -> InboundConfig {
    InboundConfig {
        cluster_networks: cluster_networks(),
        default_policy: DefaultPolicy::AllUnauthenticated,
        probe_networks: ["0.0.0.0/0", "::/0"]
            .iter()
            .filter_map(|n| n.parse().ok())
            .collect(),
        identity_domain: "cluster.local".into(),
        control_plane_namespace: "linkerd".into(),
        compute_route_acceptance: true,
    }
}

/// The policy controller's outbound flags as the chart sets them (offline mode's route
/// acceptance).
pub fn outbound_config() -> OutboundConfig {
    OutboundConfig {
        cluster_domain: "cluster.local".into(),
        cluster_networks: cluster_networks(),
        default_opaque_ports: PortSet::parse("25,587,3306,4444,5432,6379,9300,11211").0,
        compute_route_acceptance: true,
        global_egress_network_namespace: "linkerd-egress".into(),
    }
}

/// Every index of the pod (discovery, inbound, outbound, status), fed by one set of watches.
pub struct Indexes {
    pub watches: Watches,
    pub discovery: DiscoveryIndex,
    pub inbound: InboundIndex,
    pub outbound: OutboundIndex,
    pub status: StatusIndex,
}

impl Indexes {
    /// Empty indexes with the chart's flags.
    pub fn new() -> Self {
        let metrics = IndexMetrics::default();
        let discovery = DiscoveryIndex::new();
        let inbound = InboundIndex::new(inbound_config(), metrics.clone());
        let outbound = OutboundIndex::new(outbound_config(), metrics.clone());
        let status = StatusIndex::new(cluster_networks());
        let mut watches = Watches::new(metrics);
        discovery.watch(&mut watches);
        inbound.watch(&mut watches);
        outbound.watch(&mut watches);
        status.watch(&mut watches);
        Self {
            watches,
            discovery,
            inbound,
            outbound,
            status,
        }
    }

    /// Indexes holding every object of the bundled fixture clusters.
    pub fn fixtures() -> Self {
        let indexes = Self::new();
        for (name, text) in FIXTURES {
            for manifest in parse_manifests(Path::new(name), text.as_bytes()).unwrap_or_default() {
                let _ = indexes.apply_json(&manifest.type_key, &manifest.json);
            }
        }
        indexes
    }

    /// Decodes one document of the kind `type_key` (`(group, kind)`) and applies it to the
    /// indexes that read the kind. `None` when no index reads the kind; the decode error
    /// when the document is not a usable object of it.
    pub fn apply_json(
        &self,
        type_key: &(String, String),
        json: &str,
    ) -> Option<Result<(), DecodeError>> {
        macro_rules! kinds {
            ($($ty:ty),* $(,)?) => {
                $(
                    if is::<$ty>(type_key) {
                        return Some(decode_json::<$ty>(json).map(|object| {
                            self.watches.deliver::<$ty>(Event::Apply(Arc::new(object)))
                        }));
                    }
                )*
            };
        }
        kinds!(
            Service,
            EndpointSlice,
            Pod,
            Node,
            ReplicaSet,
            Job,
            Secret,
            Server,
            ExternalWorkload,
            ServiceProfile,
            EgressNetwork,
            ServerAuthorization,
            AuthorizationPolicy,
            MeshTlsAuthentication,
            NetworkAuthentication,
            HttpLocalRateLimitPolicy,
            PolicyHttpRoute,
            GatewayHttpRoute,
            GrpcRoute,
            TcpRoute,
            TlsRoute,
        );
        None
    }
}

impl Default for Indexes {
    fn default() -> Self {
        Self::new()
    }
}

/// Whether `type_key` names `K`.
fn is<K: Kind>(type_key: &(String, String)) -> bool {
    K::group(&()) == type_key.0.as_str() && K::kind(&()) == type_key.1.as_str()
}

/// A current-thread runtime for the targets that call the gRPC services (their topics spawn
/// tasks), one per thread.
pub fn block_on<F: std::future::Future>(future: F) -> F::Output {
    thread_local! {
        static RUNTIME: tokio::runtime::Runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a current-thread runtime builds");
    }
    RUNTIME.with(|rt| rt.block_on(future))
}
