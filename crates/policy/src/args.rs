//! The `policy-controller` command line, with upstream's flag names and defaults
//! (spec/policy.md §1.2). Booleans take an explicit value as Go flags do:
//! `--admission-controller-disabled=true`.

use clap::Parser;
use ipnet::IpNet;
use linkerd_index::{
    ClusterArgs, PortSet,
    inbound::{DefaultPolicy, InboundConfig},
    outbound::OutboundConfig,
};
use linkerd_runtime::{LogArgs, parse_bool, parse_domain, parse_listen_addr, parse_namespace};
use std::{net::SocketAddr, path::PathBuf};

/// The chart's (and upstream binary's) default `--cluster-networks`.
pub const DEFAULT_CLUSTER_NETWORKS: &str = "10.0.0.0/8,100.64.0.0/10,172.16.0.0/12,192.168.0.0/16";

/// Serves `io.linkerd.proxy.inbound.InboundServerPolicies` and
/// `io.linkerd.proxy.outbound.OutboundPolicies` to Linkerd proxies, the policy admission webhook,
/// and (the Lease holder) the status of the policy routes.
#[derive(Clone, Debug, Parser)]
#[command(name = "policy-controller", version, about)]
pub struct Args {
    /// gRPC listen address for the policy APIs (`:8090` means all interfaces).
    #[arg(long, env = "LINKERD_POLICY_GRPC_ADDR", default_value = "0.0.0.0:8090", value_parser = parse_listen_addr)]
    pub grpc_addr: SocketAddr,

    /// Admin listen address: `/live`, `/ready`, `/metrics`.
    #[arg(long, default_value = "0.0.0.0:9990", value_parser = parse_listen_addr)]
    pub admin_addr: SocketAddr,

    /// Introspection API listen address (gRPC, `proto/introspection.proto`): the open streams
    /// and what each last sent. Loopback by default: it shows every proxy's policies, so it is
    /// reached with `kubectl port-forward`, never through the mTLS port. If it cannot be bound,
    /// the error is logged and the policy APIs run without it.
    #[arg(long, env = "LINKERD_POLICY_INTROSPECTION_ADDR", default_value = "127.0.0.1:9980", value_parser = parse_listen_addr)]
    pub introspection_addr: SocketAddr,

    /// HTTPS listen address of the policy admission webhook.
    #[arg(long, default_value = "0.0.0.0:9443", value_parser = parse_listen_addr)]
    pub server_addr: SocketAddr,

    /// PEM certificate chain of the admission webhook.
    #[arg(long, default_value = "/var/run/linkerd/tls/tls.crt")]
    pub server_tls_certs: PathBuf,

    /// PEM private key of the admission webhook.
    #[arg(long, default_value = "/var/run/linkerd/tls/tls.key")]
    pub server_tls_key: PathBuf,

    /// Do not serve the admission webhook at all.
    #[arg(long, default_value = "false", value_parser = parse_bool, num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub admission_controller_disabled: bool,

    /// The cluster's pod and node networks, comma-separated CIDRs: `cluster-*` default policies
    /// admit them, and so does every authorization that names no network.
    #[arg(long, default_value = DEFAULT_CLUSTER_NETWORKS, value_parser = parse_cluster_networks)]
    pub cluster_networks: Networks,

    /// Mesh identity trust domain: identities end in `.<control-plane-namespace>.<domain>`.
    #[arg(long, default_value = "cluster.local", value_parser = parse_domain)]
    pub identity_domain: String,

    /// Kubernetes cluster domain: Services are `<svc>.<ns>.svc.<cluster-domain>`.
    #[arg(long, default_value = "cluster.local", value_parser = parse_domain)]
    pub cluster_domain: String,

    /// Policy of ports no Server covers: all-unauthenticated, all-authenticated,
    /// cluster-unauthenticated, cluster-authenticated, deny or audit.
    #[arg(long, default_value = "all-unauthenticated", value_parser = parse_default_policy)]
    pub default_policy: DefaultPolicy,

    /// Networks allowed to reach probe routes, comma-separated CIDRs; empty means no probe
    /// routes (the chart sets `0.0.0.0/0,::/0`).
    #[arg(long, default_value = "", value_parser = parse_networks)]
    pub probe_networks: Networks,

    /// Ports treated as opaque for Services and EgressNetworks without an opaque-ports
    /// annotation (outbound only; the chart sets `25,587,3306,4444,5432,6379,9300,11211`).
    #[arg(long, default_value = "", value_parser = parse_port_set)]
    pub default_opaque_ports: PortSet,

    /// The control-plane namespace: Lease namespace and the identity-name component.
    #[arg(long, default_value = "linkerd", value_parser = parse_namespace)]
    pub control_plane_namespace: String,

    /// The Deployment that owns the status writer's Lease.
    #[arg(long, default_value = "linkerd-destination")]
    pub policy_deployment_name: String,

    /// Timeout of one route-status patch, in milliseconds (at least 1: with 0 every patch
    /// would time out before it is sent).
    #[arg(long, default_value = "5000", value_parser = clap::value_parser!(u64).range(1..))]
    pub patch_timeout_ms: u64,

    /// Allow `l5d-*` request headers through every outbound HTTP and gRPC route.
    #[arg(long, default_value = "false", value_parser = parse_bool, num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub allow_l5d_request_headers: bool,

    /// Namespace whose EgressNetworks apply to clients of every namespace that has none of its
    /// own.
    #[arg(long, default_value = "linkerd-egress", value_parser = parse_namespace)]
    pub global_egress_network_namespace: String,

    #[command(flatten)]
    pub log: LogArgs,

    #[command(flatten)]
    pub cluster: ClusterArgs,
}

/// A parsed comma-separated CIDR list (its own type so clap takes the list as one value).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Networks(pub Vec<IpNet>);

impl Args {
    /// What the index needs to compute inbound policy. Offline mode (`--cluster-state`) decides
    /// route acceptance in-process, since no status writer runs there.
    pub fn inbound_config(&self) -> InboundConfig {
        InboundConfig {
            cluster_networks: self.cluster_networks.0.clone(),
            default_policy: self.default_policy,
            probe_networks: self.probe_networks.0.clone(),
            identity_domain: self.identity_domain.clone(),
            control_plane_namespace: self.control_plane_namespace.clone(),
            compute_route_acceptance: self.cluster.cluster_state.is_some(),
        }
    }
}

impl Args {
    /// What the index needs to compute outbound policy (spec §5). Offline mode decides route
    /// acceptance in-process, as for inbound.
    pub fn outbound_config(&self) -> OutboundConfig {
        OutboundConfig {
            cluster_domain: self.cluster_domain.clone(),
            cluster_networks: self.cluster_networks.0.clone(),
            default_opaque_ports: self.default_opaque_ports.clone(),
            compute_route_acceptance: self.cluster.cluster_state.is_some(),
            global_egress_network_namespace: self.global_egress_network_namespace.clone(),
        }
    }
}

/// Parses comma-separated CIDRs (`10.0.0.0/8,fd00::/8`); items are trimmed, empty items
/// skipped, and a bare IP means a single address (`/32` or `/128`).
///
/// Errors name the item: `invalid network "10.0.0.0/33": ...`.
pub fn parse_networks(value: &str) -> Result<Networks, String> {
    value
        .split(',')
        .map(str::trim)
        .filter(|item| !item.is_empty())
        .map(|item| {
            item.parse::<IpNet>()
                .or_else(|e| {
                    item.parse::<std::net::IpAddr>()
                        .map(IpNet::from)
                        .map_err(|_| e)
                })
                .map_err(|e| format!("invalid network {item:?}: {}", network_problem(item, e)))
        })
        .collect::<Result<_, _>>()
        .map(Networks)
}

/// `--cluster-networks`: [`parse_networks`], and at least one network. None would make every
/// address that is not a Service's external (outbound fallback, spec §5.1) and leave the
/// `cluster-*` default policies admitting no one: a mistake, not a configuration.
pub fn parse_cluster_networks(value: &str) -> Result<Networks, String> {
    let networks = parse_networks(value)?;
    if networks.0.is_empty() {
        return Err(format!(
            "at least one network is required (the chart's default is {DEFAULT_CLUSTER_NETWORKS})"
        ));
    }
    Ok(networks)
}

/// What is wrong with a network that does not parse: ipnet says only "invalid IP address
/// syntax", also when the address is fine and the prefix length is out of range.
fn network_problem(item: &str, error: ipnet::AddrParseError) -> String {
    let Some((addr, prefix)) = item.split_once('/') else {
        return format!("{error} (expected an address or a CIDR such as 10.0.0.0/8)");
    };
    let max = match addr.parse::<std::net::IpAddr>() {
        Ok(std::net::IpAddr::V4(_)) => 32,
        Ok(std::net::IpAddr::V6(_)) => 128,
        Err(_) => return format!("{addr:?} is not an IP address"),
    };
    match prefix.parse::<u8>() {
        Ok(len) if len <= max => error.to_string(),
        _ => format!("prefix length {prefix:?} is not a number from 0 to {max}"),
    }
}

/// Parses a default-policy name; the error is the index's (`invalid mode: "x"`) followed by
/// the names that are valid.
pub fn parse_default_policy(value: &str) -> Result<DefaultPolicy, String> {
    value
        .parse()
        .map_err(|e: linkerd_index::inbound::InvalidPolicy| {
            format!(
                "{e} (expected one of all-unauthenticated, all-authenticated, \
             cluster-unauthenticated, cluster-authenticated, deny, audit)"
            )
        })
}

/// Parses a port list (`25,587,4000-4100`, or empty); unlike annotations, a bad item is an
/// error (spec §1.2).
pub fn parse_port_set(value: &str) -> Result<PortSet, String> {
    let (ports, invalid) = PortSet::parse(value);
    match invalid.first() {
        None => Ok(ports),
        Some(item) => Err(item.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nets(list: &[&str]) -> Vec<IpNet> {
        list.iter().map(|n| n.parse().unwrap()).collect()
    }

    #[test]
    fn defaults_follow_upstream() {
        let args = Args::try_parse_from(["policy-controller"]).unwrap();
        assert_eq!(args.grpc_addr, "0.0.0.0:8090".parse().unwrap());
        assert_eq!(args.admin_addr, "0.0.0.0:9990".parse().unwrap());
        assert_eq!(args.introspection_addr, "127.0.0.1:9980".parse().unwrap());
        assert_eq!(args.server_addr, "0.0.0.0:9443".parse().unwrap());
        assert_eq!(
            args.server_tls_certs,
            PathBuf::from("/var/run/linkerd/tls/tls.crt")
        );
        assert!(!args.admission_controller_disabled);
        assert_eq!(
            args.cluster_networks.0,
            nets(&[
                "10.0.0.0/8",
                "100.64.0.0/10",
                "172.16.0.0/12",
                "192.168.0.0/16"
            ])
        );
        assert_eq!(args.default_policy, DefaultPolicy::AllUnauthenticated);
        assert!(args.probe_networks.0.is_empty());
        assert!(args.default_opaque_ports.is_empty());
        assert_eq!(args.control_plane_namespace, "linkerd");
        assert_eq!(args.policy_deployment_name, "linkerd-destination");
        assert_eq!(args.patch_timeout_ms, 5000);
        assert!(!args.allow_l5d_request_headers);
        assert_eq!(args.global_egress_network_namespace, "linkerd-egress");

        let config = args.inbound_config();
        assert_eq!(config.identity_domain, "cluster.local");
        assert!(!config.compute_route_acceptance);
    }

    #[test]
    fn chart_flags() {
        let args = Args::try_parse_from([
            "policy-controller",
            "--grpc-addr=[::]:8090",
            "--admin-addr=:9990",
            "--admission-controller-disabled=true",
            "--cluster-networks=10.0.0.0/8,100.64.0.0/10,172.16.0.0/12,192.168.0.0/16,fd00::/8",
            "--default-policy=cluster-authenticated",
            "--probe-networks=0.0.0.0/0,::/0",
            "--default-opaque-ports=25,587,3306,4444,5432,6379,9300,11211",
            "--identity-domain=example.org",
            "--allow-l5d-request-headers",
            "--cluster-state=/tmp",
        ])
        .unwrap();
        assert_eq!(args.grpc_addr, "[::]:8090".parse().unwrap());
        assert!(args.admission_controller_disabled && args.allow_l5d_request_headers);
        assert!(args.default_opaque_ports.contains(11211));
        let config = args.inbound_config();
        assert_eq!(config.default_policy, DefaultPolicy::ClusterAuthenticated);
        assert_eq!(config.cluster_networks.len(), 5);
        assert_eq!(config.probe_networks, nets(&["0.0.0.0/0", "::/0"]));
        assert_eq!(config.identity_domain, "example.org");
        assert!(config.compute_route_acceptance, "offline mode");
    }

    #[test]
    fn bad_values_are_refused_with_their_reason() {
        let err = |flag: &str| {
            Args::try_parse_from(["policy-controller", flag])
                .unwrap_err()
                .to_string()
        };
        assert!(err("--default-policy=open").contains(
            "invalid mode: \"open\" (expected one of all-unauthenticated, all-authenticated, \
             cluster-unauthenticated, cluster-authenticated, deny, audit)"
        ));
        assert!(err("--cluster-networks=10.0.0.0/33").contains(
            "invalid network \"10.0.0.0/33\": prefix length \"33\" is not a number from 0 to 32"
        ));
        assert!(err("--cluster-networks=fd00::/129").contains(
            "invalid network \"fd00::/129\": prefix length \"129\" is not a number from 0 to 128"
        ));
        assert!(
            err("--cluster-networks=10.0.0.300/8")
                .contains("invalid network \"10.0.0.300/8\": \"10.0.0.300\" is not an IP address")
        );
        assert!(
            err("--cluster-networks=").contains("at least one network is required"),
            "{}",
            err("--cluster-networks=")
        );
        assert!(err("--cluster-networks= , ").contains("at least one network is required"));
        assert!(err("--probe-networks=nowhere").contains("\"nowhere\""));
        assert!(err("--default-opaque-ports=0").contains("\"0\""));
        assert!(err("--default-opaque-ports=2-1").contains(
            "invalid port or port range \"2-1\": ports are 1 to 65535, a range is LOW-HIGH with LOW <= HIGH"
        ));
        assert!(err("--admission-controller-disabled=maybe").contains("\"maybe\""));
        assert!(err("--grpc-addr=nowhere").contains("\"nowhere\""));
        assert!(err("--control-plane-namespace=").contains("invalid namespace \"\""));
        assert!(err("--global-egress-network-namespace=Bad NS").contains("\"Bad NS\""));
        assert!(err("--identity-domain=").contains("invalid domain \"\""));
        assert!(err("--cluster-domain=cluster.local.").contains("no trailing dot"));
        assert!(
            err("--patch-timeout-ms=0").contains("0 is not in 1.."),
            "{}",
            err("--patch-timeout-ms=0")
        );
    }

    #[test]
    fn network_lists() {
        assert_eq!(parse_networks("").unwrap(), Networks::default());
        assert_eq!(
            parse_networks(" 10.0.0.0/8 , ,10.1.2.3,fd00::1").unwrap().0,
            nets(&["10.0.0.0/8", "10.1.2.3/32", "fd00::1/128"])
        );
    }
}
