//! Where `explain` gets the policy a proxy would receive: from an index built in this process
//! over `--cluster-state DIR`, as the policy controller builds it in offline mode and answered
//! by the controller's own service code, or from a running controller at `--policy ADDR`.
//! Both give the same message for the same cluster, so an explanation does not depend on
//! where the policy came from.

use linkerd_index::{
    ClusterSource, InboundIndex, IndexMetrics, OutboundIndex, PortSet, Started, Watches,
    inbound::{DefaultPolicy, InboundConfig},
    outbound::OutboundConfig,
    source::offline::OfflineSource,
};
use linkerd_runtime::{parse_domain, parse_namespace, shutdown};
use linkerd2_proxy_api::{
    inbound::{
        PortSpec, Server, inbound_server_policies_client::InboundServerPoliciesClient,
        inbound_server_policies_server::InboundServerPolicies,
    },
    outbound::{
        OutboundPolicy, TrafficSpec, outbound_policies_client::OutboundPoliciesClient,
        outbound_policies_server::OutboundPolicies,
    },
};
use policy::{
    InboundPolicyService, InboundTranslator, OutboundPolicyService, OutboundTranslator,
    PolicyMetrics,
    args::{
        Networks, parse_cluster_networks, parse_default_policy, parse_networks, parse_port_set,
    },
};
use std::path::PathBuf;

use super::ExplainError;
use crate::{
    Error,
    client::{self, MAX_MESSAGE_SIZE},
};

/// The chart's `--cluster-networks` (the binary's default plus `fd00::/8`), spec/policy.md §1.2.
pub const CHART_CLUSTER_NETWORKS: &str =
    "10.0.0.0/8,100.64.0.0/10,172.16.0.0/12,192.168.0.0/16,fd00::/8";
/// The chart's `--probe-networks`.
pub const CHART_PROBE_NETWORKS: &str = "0.0.0.0/0,::/0";
/// The chart's `--default-opaque-ports`.
pub const CHART_DEFAULT_OPAQUE_PORTS: &str = "25,587,3306,4444,5432,6379,9300,11211";

/// `--cluster-state DIR` or `--policy ADDR`, and the controller flags that shape the answer
/// offline. Their defaults are the Helm chart's values, so that an offline answer is what an
/// installed pod would send.
#[derive(Clone, Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("source").required(true).args(["cluster_state", "policy"])))]
pub struct PolicySource {
    /// Answer offline: index the manifests in DIR (`kubectl get -o yaml` output, as the
    /// controllers' `--cluster-state` reads them) in this process.
    #[arg(long, value_name = "DIR")]
    pub cluster_state: Option<PathBuf>,

    /// Ask a running policy controller: `http://host:port` or `host:port` (its plaintext gRPC
    /// port, 18090 in the pod).
    #[arg(long, value_name = "ADDR")]
    pub policy: Option<String>,

    /// Offline only: the controller's `--cluster-networks`.
    #[arg(long, default_value = CHART_CLUSTER_NETWORKS, value_parser = parse_cluster_networks, requires = "cluster_state")]
    pub cluster_networks: Networks,

    /// Offline only: the controller's `--default-policy`.
    #[arg(long, default_value = "all-unauthenticated", value_parser = parse_default_policy, requires = "cluster_state")]
    pub default_policy: DefaultPolicy,

    /// Offline only: the controller's `--probe-networks` (empty: no probe routes).
    #[arg(long, default_value = CHART_PROBE_NETWORKS, value_parser = parse_networks, requires = "cluster_state")]
    pub probe_networks: Networks,

    /// Offline only: the controller's `--identity-domain`.
    #[arg(long, default_value = "cluster.local", value_parser = parse_domain, requires = "cluster_state")]
    pub identity_domain: String,

    /// Offline only: the controller's `--cluster-domain`.
    #[arg(long, default_value = "cluster.local", value_parser = parse_domain, requires = "cluster_state")]
    pub cluster_domain: String,

    /// Offline only: the controller's `--control-plane-namespace`.
    #[arg(long, default_value = "linkerd", value_parser = parse_namespace, requires = "cluster_state")]
    pub control_plane_namespace: String,

    /// Offline only: the controller's `--default-opaque-ports` (outbound).
    #[arg(long, default_value = CHART_DEFAULT_OPAQUE_PORTS, value_parser = parse_port_set, requires = "cluster_state")]
    pub default_opaque_ports: PortSet,
}

// === impl PolicySource ===

impl PolicySource {
    /// What the index computes inbound policy with, offline (route acceptance decided here,
    /// as the controller does in offline mode).
    pub fn inbound_config(&self) -> InboundConfig {
        InboundConfig {
            cluster_networks: self.cluster_networks.0.clone(),
            default_policy: self.default_policy,
            probe_networks: self.probe_networks.0.clone(),
            identity_domain: self.identity_domain.clone(),
            control_plane_namespace: self.control_plane_namespace.clone(),
            compute_route_acceptance: true,
        }
    }

    /// What the index computes outbound policy with, offline.
    pub fn outbound_config(&self) -> OutboundConfig {
        OutboundConfig {
            cluster_domain: self.cluster_domain.clone(),
            cluster_networks: self.cluster_networks.0.clone(),
            default_opaque_ports: self.default_opaque_ports.clone(),
            compute_route_acceptance: true,
            global_egress_network_namespace: "linkerd-egress".into(),
        }
    }

    /// The `Server` a proxy asking `InboundServerPolicies` for `spec` gets first.
    ///
    /// Errors: the directory cannot be read ([`ExplainError::ClusterState`]); the controller
    /// cannot be reached or refuses the request, e.g. `NotFound: unknown server` for a pod it
    /// does not know ([`ExplainError::Policy`]).
    pub async fn inbound_server(
        &self,
        spec: PortSpec,
        target: &str,
    ) -> Result<Server, ExplainError> {
        match (&self.cluster_state, &self.policy) {
            (Some(dir), _) => {
                let metrics = IndexMetrics::default();
                let index = InboundIndex::new(self.inbound_config(), metrics.clone());
                let _watches = start_offline(dir, metrics, |w| index.watch(w)).await?;
                let (_trigger, shutdown) = shutdown::channel();
                let service = InboundPolicyService::new(
                    index,
                    InboundTranslator::new(self.cluster_networks.0.clone()),
                    PolicyMetrics::default(),
                    shutdown,
                );
                let server = service
                    .get_port(tonic::Request::new(spec))
                    .await
                    .map_err(|status| status_error("GetPort", target, status))?;
                Ok(server.into_inner())
            }
            (None, Some(addr)) => {
                let channel = client::connect_to("--policy", addr).await?;
                let mut client = InboundServerPoliciesClient::new(channel)
                    .max_decoding_message_size(MAX_MESSAGE_SIZE);
                // The proxy's view: the first message of its `WatchPort` stream.
                let mut stream = client::response(
                    "WatchPort",
                    target,
                    client::RESPONSE_TIMEOUT,
                    client.watch_port(spec),
                )
                .await?
                .into_inner();
                let first = client::response(
                    "WatchPort",
                    target,
                    client::RESPONSE_TIMEOUT,
                    stream.message(),
                )
                .await?;
                first.ok_or_else(|| ExplainError::StreamEnded {
                    rpc: "WatchPort",
                    target: target.to_string(),
                })
            }
            (None, None) => Err(ExplainError::NoSource),
        }
    }

    /// The `OutboundPolicy` a proxy asking `OutboundPolicies` for `spec` gets first.
    ///
    /// Errors: as [`Self::inbound_server`]; `NotFound` for an authority that names no Service.
    pub async fn outbound_policy(
        &self,
        spec: TrafficSpec,
        target: &str,
    ) -> Result<OutboundPolicy, ExplainError> {
        match (&self.cluster_state, &self.policy) {
            (Some(dir), _) => {
                let metrics = IndexMetrics::default();
                let index = OutboundIndex::new(self.outbound_config(), metrics.clone());
                let _watches = start_offline(dir, metrics, |w| index.watch(w)).await?;
                let (_trigger, shutdown) = shutdown::channel();
                let service = OutboundPolicyService::new(
                    index,
                    OutboundTranslator::new(false),
                    self.cluster_domain.clone(),
                    PolicyMetrics::default(),
                    shutdown,
                );
                let policy = service
                    .get(tonic::Request::new(spec))
                    .await
                    .map_err(|status| status_error("Get", target, status))?;
                Ok(policy.into_inner())
            }
            (None, Some(addr)) => {
                let channel = client::connect_to("--policy", addr).await?;
                let mut client = OutboundPoliciesClient::new(channel)
                    .max_decoding_message_size(MAX_MESSAGE_SIZE);
                let mut stream = client::response(
                    "Watch",
                    target,
                    client::RESPONSE_TIMEOUT,
                    client.watch(spec),
                )
                .await?
                .into_inner();
                let first =
                    client::response("Watch", target, client::RESPONSE_TIMEOUT, stream.message())
                        .await?;
                first.ok_or_else(|| ExplainError::StreamEnded {
                    rpc: "Watch",
                    target: target.to_string(),
                })
            }
            (None, None) => Err(ExplainError::NoSource),
        }
    }
}

/// Feeds the index that `watch` registers from the manifests in `dir`, read whole before this
/// returns (offline mode reads the directory before `start` does); the watches follow the
/// directory while the returned value lives.
async fn start_offline(
    dir: &std::path::Path,
    metrics: IndexMetrics,
    watch: impl FnOnce(&mut Watches),
) -> Result<Started, ExplainError> {
    let mut watches = Watches::new(metrics.clone());
    watch(&mut watches);
    let source = OfflineSource::new(dir, metrics).map_err(|source| ExplainError::ClusterState {
        dir: dir.to_path_buf(),
        source: Box::new(source),
    })?;
    Ok(watches.start(&ClusterSource::Offline(source)).await)
}

/// The error of an offline answer, worded as the same refusal from a running controller.
fn status_error(rpc: &'static str, target: &str, status: tonic::Status) -> ExplainError {
    ExplainError::Policy(Box::new(Error::Status {
        rpc,
        target: target.to_string(),
        status,
    }))
}
