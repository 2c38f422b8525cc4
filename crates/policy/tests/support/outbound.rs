//! An `OutboundPolicies` server (with `InboundServerPolicies` beside it, as the controller serves
//! them) on `127.0.0.1:0` over an index, and a generated client.

use linkerd_index::{
    ClusterSource, IndexMetrics, PortSet, Started, Watches,
    inbound::{InboundConfig, InboundIndex},
    outbound::{OutboundConfig, OutboundIndex},
    source::offline::OfflineSource,
};
use linkerd_runtime::shutdown;
use linkerd2_proxy_api::outbound::outbound_policies_client::OutboundPoliciesClient;
use policy::{
    InboundPolicyService, InboundTranslator, OutboundPolicyService, OutboundTranslator,
    PolicyMetrics, bind, serve_policies,
};
use std::path::Path;
use tonic::transport::Channel;

/// A running server's client; the server stops when this is dropped.
pub struct Outbound {
    pub client: OutboundPoliciesClient<Channel>,
    _trigger: shutdown::Trigger,
    _started: Started,
}

/// The chart's outbound settings (cluster domain, `--cluster-networks`,
/// `--default-opaque-ports`, `--global-egress-network-namespace`). `compute_route_acceptance`
/// is offline mode's; kube mode reads acceptance from the routes' status.
pub fn outbound_config(compute_route_acceptance: bool) -> OutboundConfig {
    OutboundConfig {
        cluster_domain: "cluster.local".into(),
        cluster_networks: super::cluster_networks(),
        default_opaque_ports: PortSet::parse("25,587,3306,4444,5432,6379,9300,11211").0,
        compute_route_acceptance,
        global_egress_network_namespace: "linkerd-egress".into(),
    }
}

/// The policy controller's indexes, fed by one set of watches (not started).
pub struct Indexes {
    pub inbound: InboundIndex,
    pub outbound: OutboundIndex,
    pub watches: Watches,
}

/// The inbound and outbound indexes with these settings, fed by one set of watches.
pub fn indexes(inbound: InboundConfig, outbound: OutboundConfig) -> Indexes {
    let metrics = IndexMetrics::default();
    let inbound = InboundIndex::new(inbound, metrics.clone());
    let outbound = OutboundIndex::new(outbound, metrics.clone());
    let mut watches = Watches::new(metrics);
    inbound.watch(&mut watches);
    outbound.watch(&mut watches);
    Indexes {
        inbound,
        outbound,
        watches,
    }
}

/// The server over the state directory `dir` in offline mode, once the index is ready.
pub async fn start_offline(dir: &Path) -> Outbound {
    let Indexes {
        inbound,
        outbound,
        watches,
    } = indexes(super::chart_config(), outbound_config(true));
    let source = OfflineSource::new(dir, IndexMetrics::default()).expect("state dir");
    let started = super::ready(watches.start(&ClusterSource::Offline(source)).await).await;
    serve(inbound, outbound, started).await
}

/// The server over the indexes, which `started` feeds.
pub async fn serve(
    index: InboundIndex,
    outbound_index: OutboundIndex,
    started: Started,
) -> Outbound {
    let (trigger, shutdown) = shutdown::channel();
    let metrics = PolicyMetrics::default();
    let inbound = InboundPolicyService::new(
        index.clone(),
        InboundTranslator::new(super::cluster_networks()),
        metrics.clone(),
        shutdown.clone(),
    );
    let outbound = OutboundPolicyService::new(
        outbound_index,
        OutboundTranslator::new(false),
        "cluster.local".into(),
        metrics,
        shutdown.clone(),
    );
    let (listener, addr) = bind("127.0.0.1:0".parse().expect("address"))
        .await
        .expect("bind loopback");
    tokio::spawn(serve_policies(listener, inbound, Some(outbound), shutdown));
    let client = OutboundPoliciesClient::connect(format!("http://{addr}"))
        .await
        .expect("connect");
    Outbound {
        client,
        _trigger: trigger,
        _started: started,
    }
}
