//! An `OutboundPolicies` server (with `InboundServerPolicies` beside it, as the controller serves
//! them) on `127.0.0.1:0` over an index, and a generated client.

use linkerd_index::{
    Index, IndexMetrics, outbound::OutboundConfig, ports::PortSet, source::offline::OfflineSource,
};
use linkerd_runtime::shutdown;
use linkerd2_proxy_api::outbound::outbound_policies_client::OutboundPoliciesClient;
use policy::{
    InboundPolicyService, InboundTranslator, OutboundPolicyService, OutboundTranslator,
    PolicyMetrics, bind, serve_policies,
};
use std::{path::Path, time::Duration};
use tonic::transport::Channel;

/// A running server's client; the server stops when this is dropped.
pub struct Outbound {
    pub client: OutboundPoliciesClient<Channel>,
    _trigger: shutdown::Trigger,
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

/// The server over the state directory `dir` in offline mode, once the index is ready.
pub async fn start_offline(dir: &Path) -> Outbound {
    let index_metrics = IndexMetrics::default();
    let index = Index::with_policy(
        index_metrics.clone(),
        super::chart_config(),
        outbound_config(true),
    );
    let source = OfflineSource::start(dir, index_metrics).expect("state dir");
    index.spawn_policy_watches(&source);
    tokio::time::timeout(Duration::from_secs(10), index.ready().wait_for(|r| *r))
        .await
        .expect("index ready in time")
        .expect("ready channel");
    serve(index).await
}

/// The server over `index`, which the caller feeds.
pub async fn serve(index: Index) -> Outbound {
    let (trigger, shutdown) = shutdown::channel();
    let metrics = PolicyMetrics::default();
    let inbound = InboundPolicyService::new(
        index.clone(),
        InboundTranslator::new(super::cluster_networks()),
        metrics.clone(),
        shutdown.clone(),
    );
    let outbound = OutboundPolicyService::new(
        index,
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
    }
}
