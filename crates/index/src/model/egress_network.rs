//! EgressNetwork, as outbound policy and route status read it (spec/policy.md §5.2, §7.4).

use ipnet::IpNet;
use k8s_openapi::{apimachinery::pkg::apis::meta::v1::Condition, jiff::Timestamp};
use linkerd_k8s_api::{EgressNetwork, egress_network::TrafficPolicy as ApiTrafficPolicy};
use std::{collections::BTreeMap, net::IpAddr};

use super::{
    InvalidObject, Kind, Network, OPAQUE_PORTS_ANNOTATION, ObjectRef, invalid, linkerd_annotations,
    names_of, parse_net, ports::PortSet,
};

/// `spec.trafficPolicy` of an EgressNetwork: what traffic that no route matches gets.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum TrafficPolicy {
    Allow,
    Deny,
}

impl Kind for EgressNetwork {
    type Wire = EgressNetwork;
    type Object = EgressNetworkInfo;
    const LABEL: &'static str = "EgressNetwork";
    /// The last good version must not outlive an invalid update: its networks would keep
    /// claiming addresses.
    const INVALID_REMOVES: bool = true;

    fn from_wire(obj: EgressNetwork) -> Result<EgressNetworkInfo, InvalidObject> {
        EgressNetworkInfo::from_egress_network(&obj)
    }
}

/// What the index keeps of an EgressNetwork.
#[derive(Clone, Debug, PartialEq)]
pub struct EgressNetworkInfo {
    pub namespace: String,
    pub name: String,
    pub created: Option<Timestamp>,
    pub traffic_policy: TrafficPolicy,
    /// `spec.networks`; `None` when absent (see [`EgressNetworkInfo::networks`]).
    pub networks: Option<Vec<Network>>,
    /// The `*.linkerd.io/` annotations (timeouts, retries, failure accrual, opaque ports).
    pub annotations: BTreeMap<String, String>,
    /// `config.linkerd.io/opaque-ports`; `None` without the annotation, empty when its value
    /// does not parse ([`PortSet::parse_annotation`]).
    pub opaque_ports: Option<PortSet>,
    /// The observed `status.conditions`.
    pub conditions: Vec<Condition>,
}

// === impl EgressNetworkInfo ===

impl EgressNetworkInfo {
    /// Converts an EgressNetwork. Errors: no name, or a CIDR (or exception) that is neither a
    /// CIDR nor an IP.
    pub fn from_egress_network(obj: &EgressNetwork) -> Result<Self, InvalidObject> {
        const KIND: &str = "EgressNetwork";
        let (namespace, name) = names_of(KIND, &obj.metadata)?;
        let networks = obj
            .spec
            .networks
            .as_ref()
            .map(|nets| {
                nets.iter()
                    .map(|n| {
                        Ok(Network {
                            net: parse_net(&n.cidr)?,
                            except: n
                                .except
                                .iter()
                                .flatten()
                                .map(|e| parse_net(e))
                                .collect::<Result<_, String>>()?,
                        })
                    })
                    .collect::<Result<Vec<_>, String>>()
            })
            .transpose()
            .map_err(|e| invalid(KIND, &namespace, &name, e))?;
        let annotations = linkerd_annotations(&obj.metadata);
        let opaque_ports = annotations.get(OPAQUE_PORTS_ANNOTATION).map(|list| {
            PortSet::parse_annotation(list, |_| None).unwrap_or_else(|error| {
                tracing::warn!(egress_network = %format!("{namespace}/{name}"), %error, "invalid {OPAQUE_PORTS_ANNOTATION}: no port is opaque");
                PortSet::default()
            })
        });
        Ok(Self {
            created: obj.metadata.creation_timestamp.as_ref().map(|t| t.0),
            traffic_policy: match obj.spec.traffic_policy {
                ApiTrafficPolicy::Allow => TrafficPolicy::Allow,
                ApiTrafficPolicy::Deny => TrafficPolicy::Deny,
            },
            networks,
            annotations,
            opaque_ports,
            conditions: obj
                .status
                .as_ref()
                .map(|s| s.conditions.clone())
                .unwrap_or_default(),
            namespace,
            name,
        })
    }

    pub fn object_ref(&self) -> ObjectRef {
        ObjectRef {
            namespace: self.namespace.clone(),
            name: self.name.clone(),
        }
    }

    /// The networks it covers: `spec.networks`, or when absent `0.0.0.0/0` except the IPv4
    /// cluster networks and `::/0` except the IPv6 ones (§5.2).
    pub fn networks(&self, cluster_networks: &[IpNet]) -> Vec<Network> {
        if let Some(networks) = &self.networks {
            return networks.clone();
        }
        let (v4, v6): (Vec<IpNet>, Vec<IpNet>) = cluster_networks
            .iter()
            .partition(|n| matches!(n, IpNet::V4(_)));
        vec![
            Network {
                net: IpNet::V4(Default::default()),
                except: v4,
            },
            Network {
                net: IpNet::V6(Default::default()),
                except: v6,
            },
        ]
    }

    /// The size (§3.3) of the smallest of its networks containing `ip`, if any does.
    pub fn smallest_match(&self, cluster_networks: &[IpNet], ip: IpAddr) -> Option<u128> {
        self.networks(cluster_networks)
            .iter()
            .filter(|n| n.net.contains(&ip) && !n.except.iter().any(|e| e.contains(&ip)))
            .map(network_size)
            .min()
    }

    /// Whether the observed status says `Accepted=True`.
    pub fn observed_accepted(&self) -> bool {
        self.conditions
            .iter()
            .any(|c| c.type_ == "Accepted" && c.status == "True")
    }

    /// Whether one of its networks intersects one of `cluster_networks` (§7.4): either
    /// contains the other, and the cluster network is not inside one of its exceptions.
    pub fn overlaps_cluster_networks(&self, cluster_networks: &[IpNet]) -> bool {
        self.networks(cluster_networks).iter().any(|n| {
            cluster_networks.iter().any(|c| {
                (n.net.contains(c) || c.contains(&n.net)) && !n.except.iter().any(|e| e.contains(c))
            })
        })
    }
}

/// Host count of a network minus those of its exceptions; `/0` of IPv6 saturates.
fn network_size(n: &Network) -> u128 {
    fn hosts(net: &IpNet) -> u128 {
        let bits = u32::from(net.max_prefix_len() - net.prefix_len());
        1u128.checked_shl(bits).unwrap_or(u128::MAX)
    }
    n.except
        .iter()
        .fold(hosts(&n.net), |size, e| size.saturating_sub(hosts(e)))
}
