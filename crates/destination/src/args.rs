//! The `destination` command line, with upstream's flag names and defaults
//! (spec/destination.md §A.2). Booleans take an explicit value as Go flags do:
//! `--enable-ipv6=false`. The binary reads its command line through
//! [`linkerd_runtime::go_flags`], so upstream's chart's `-addr=:8086` style works too, and the
//! upstream flags in [`UNIMPLEMENTED`] are accepted with a warning.

use clap::{Parser, ValueEnum};
use linkerd_index::ClusterArgs;
use linkerd_index::PortSet;
use linkerd_runtime::{
    LogArgs, go_flags::Unimplemented, parse_bool, parse_domain, parse_listen_addr, parse_namespace,
};
use std::{collections::BTreeMap, net::SocketAddr, path::PathBuf};

use crate::translate::{TranslatorConfig, parse_http2_params};

/// Upstream's flags (spec §A.2) that this binary accepts and ignores, with what they mean here.
pub const UNIMPLEMENTED: &[Unimplemented] = &[
    Unimplemented {
        name: "enable-endpoint-slices",
        takes_value: false,
        meaning: "EndpointSlices are always read, core Endpoints never",
    },
    Unimplemented {
        name: "enable-pprof",
        takes_value: false,
        meaning: "no /debug/pprof endpoints are served",
    },
    Unimplemented {
        name: "trace-collector",
        takes_value: true,
        meaning: "no traces are exported",
    },
    Unimplemented {
        name: "stream-queue-capacity",
        takes_value: true,
        meaning: "streams have no update queue to size: each sends the newest state when it can",
    },
    Unimplemented {
        name: "export-queue-metrics",
        takes_value: false,
        meaning: "no workqueue_* metrics are exported",
    },
];

/// Serves `io.linkerd.proxy.destination.Destination` to Linkerd proxies.
#[derive(Clone, Debug, Parser)]
#[command(name = "destination", version, about)]
pub struct Args {
    /// gRPC listen address (`:8086` means all interfaces).
    #[arg(long, env = "LINKERD_DESTINATION_ADDR", default_value = "0.0.0.0:8086", value_parser = parse_listen_addr)]
    pub addr: SocketAddr,

    /// Admin listen address: `/live`, `/ready`, `/ping`, `/metrics` (upstream: `-metrics-addr`).
    #[arg(long, alias = "metrics-addr", default_value = "0.0.0.0:9996", value_parser = parse_listen_addr)]
    pub admin_addr: SocketAddr,

    /// Introspection API listen address (gRPC, `proto/introspection.proto`): the open streams
    /// and what each last sent. Loopback by default: it shows every proxy's endpoints, so it is
    /// reached with `kubectl port-forward`, never through the mTLS port. If it cannot be bound,
    /// the error is logged and the Destination service runs without it.
    #[arg(long, env = "LINKERD_DESTINATION_INTROSPECTION_ADDR", default_value = "127.0.0.1:9986", value_parser = parse_listen_addr)]
    pub introspection_addr: SocketAddr,

    /// The control-plane namespace: pods whose `linkerd.io/control-plane-ns` label equals it
    /// get an mTLS identity.
    #[arg(long, default_value = "linkerd", value_parser = parse_namespace)]
    pub controller_namespace: String,

    /// Identity trust domain: identities end in `.<controller-namespace>.<trust-domain>`.
    #[arg(long, default_value = "cluster.local", value_parser = parse_domain)]
    pub identity_trust_domain: String,

    /// Kubernetes cluster domain: names are `<svc>.<ns>.svc.<cluster-domain>`.
    #[arg(long, default_value = "cluster.local", value_parser = parse_domain)]
    pub cluster_domain: String,

    /// Serve IPv6 endpoints, preferring them for dual-stack pods.
    #[arg(long, default_value = "true", value_parser = parse_bool, num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub enable_ipv6: bool,

    /// Send `h2` protocol hints for meshed, non-opaque endpoints.
    #[arg(long, default_value = "true", value_parser = parse_bool, num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub enable_h2_upgrade: bool,

    /// Ports treated as opaque for pods without a `config.linkerd.io/opaque-ports` annotation:
    /// a comma list of ports and ranges (`25,587,3306,4444,5432,6379,9300,11211` in the chart).
    #[arg(long, default_value = "")]
    pub default_opaque_ports: String,

    /// JSON `Http2ClientParams` sent on meshed endpoints, e.g.
    /// `{"keep_alive":{"interval":{"seconds":10},"timeout":{"seconds":3},"while_idle":true}}`.
    #[arg(long, default_value = "")]
    pub meshed_http2_client_params: String,

    /// `transport-header` forces opaque transport to every meshed endpoint.
    #[arg(long, value_enum, default_value_t = OutboundTransportMode::Transparent)]
    pub outbound_transport_mode: OutboundTransportMode,

    /// Weigh same-zone endpoints ×10.
    #[arg(long, default_value = "false", value_parser = parse_bool, num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub ext_endpoint_zone_weights: bool,

    /// A linked cluster served from a directory of manifests instead of its link Secret's
    /// kubeconfig: `NAME=DIR`, repeatable. The cluster is linked while the main cluster has
    /// its link Secret (type `mirror.linkerd.io/remote-kubeconfig`, label
    /// `multicluster.linkerd.io/cluster-name: NAME`, in `--controller-namespace`); the
    /// directory is followed live, as `--cluster-state` is.
    #[arg(long, value_name = "NAME=DIR", value_parser = parse_linked_cluster)]
    pub linked_cluster_state: Vec<(String, PathBuf)>,

    #[command(flatten)]
    pub log: LogArgs,

    #[command(flatten)]
    pub cluster: ClusterArgs,
}

/// `--outbound-transport-mode`.
#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum OutboundTransportMode {
    Transparent,
    TransportHeader,
}

/// Parses `NAME=DIR` of `--linked-cluster-state`: a cluster name (a DNS label, as the link
/// Secret's label value, and not `local`) and a non-empty path.
fn parse_linked_cluster(value: &str) -> Result<(String, PathBuf), String> {
    let (name, dir) = value
        .split_once('=')
        .ok_or_else(|| format!("expected NAME=DIR, got {value:?}"))?;
    let valid_name = !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-');
    if !valid_name {
        return Err(format!(
            "cluster name {name:?} is not a DNS label (lowercase letters, digits and '-')"
        ));
    }
    // No link Secret may name it: its series are the local cluster's.
    if name == linkerd_index::metrics::LOCAL_CLUSTER {
        return Err(format!(
            "cluster name {name:?} is the local cluster's; no link can name it"
        ));
    }
    if dir.is_empty() {
        return Err(format!("no directory for linked cluster {name:?}"));
    }
    Ok((name.to_string(), PathBuf::from(dir)))
}

impl Args {
    /// `--linked-cluster-state`, by cluster name. Errors when a name is given twice.
    pub fn linked_cluster_dirs(&self) -> anyhow::Result<BTreeMap<String, PathBuf>> {
        let mut dirs = BTreeMap::new();
        for (name, dir) in &self.linked_cluster_state {
            if dirs.insert(name.clone(), dir.clone()).is_some() {
                anyhow::bail!("--linked-cluster-state names cluster {name} twice");
            }
        }
        Ok(dirs)
    }

    /// The translation settings these flags describe. Errors when
    /// `--meshed-http2-client-params` is not valid JSON of the right shape (fatal upstream too).
    pub fn translator_config(&self) -> anyhow::Result<TranslatorConfig> {
        let (default_opaque_ports, invalid) = PortSet::parse(&self.default_opaque_ports);
        for item in invalid {
            tracing::warn!(%item, "ignoring invalid --default-opaque-ports item");
        }
        Ok(TranslatorConfig {
            controller_namespace: self.controller_namespace.clone(),
            trust_domain: self.identity_trust_domain.clone(),
            enable_h2_upgrade: self.enable_h2_upgrade,
            default_opaque_ports,
            meshed_http2_params: parse_http2_params(&self.meshed_http2_client_params)?,
            force_opaque_transport: self.outbound_transport_mode
                == OutboundTransportMode::TransportHeader,
            ext_endpoint_zone_weights: self.ext_endpoint_zone_weights,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upstream_style_flags() {
        let args = Args::try_parse_from([
            "destination",
            "--addr=:8086",
            "--enable-ipv6=false",
            "--enable-h2-upgrade",
            "--default-opaque-ports=25,587,3306",
            "--outbound-transport-mode=transport-header",
            "--cluster-state=/tmp",
        ])
        .unwrap();
        assert_eq!(args.addr, "0.0.0.0:8086".parse().unwrap());
        assert!(!args.enable_ipv6);
        assert!(args.enable_h2_upgrade);
        let config = args.translator_config().unwrap();
        assert!(config.force_opaque_transport);
        assert!(config.default_opaque_ports.contains(3306));
        assert!(config.meshed_http2_params.is_none());
    }

    #[test]
    fn upstream_charts_arguments() {
        // spec/sp-validator-and-pod.md §c.2, rendered with the chart's defaults.
        let line = linkerd_runtime::go_flags::try_parse_from::<Args, _, _>(
            [
                "destination",
                "-addr=:8086",
                "-controller-namespace=linkerd",
                "-outbound-transport-mode=transport-header",
                "-enable-h2-upgrade=true",
                "-log-level=info",
                "-log-format=plain",
                "-enable-endpoint-slices=true",
                "-cluster-domain=cluster.local",
                "-identity-trust-domain=cluster.local",
                "-default-opaque-ports=25,587,3306,4444,5432,6379,9300,11211",
                "-enable-ipv6=false",
                "-enable-pprof=false",
                r#"--meshed-http2-client-params={"keep_alive":{"interval":{"seconds":10},"timeout":{"seconds":3},"while_idle":true}}"#,
            ],
            UNIMPLEMENTED,
        )
        .unwrap();
        let args = &line.args;
        assert_eq!(args.addr, "0.0.0.0:8086".parse().unwrap());
        assert_eq!(args.admin_addr, "0.0.0.0:9996".parse().unwrap());
        assert!(args.enable_h2_upgrade && !args.enable_ipv6);
        let config = args.translator_config().unwrap();
        assert!(config.force_opaque_transport);
        assert!(config.default_opaque_ports.contains(11211));
        let keep_alive = config.meshed_http2_params.unwrap().keep_alive.unwrap();
        assert_eq!(keep_alive.interval.unwrap().seconds, 10);
        assert_eq!(keep_alive.timeout.unwrap().seconds, 3);
        assert_eq!(line.warnings.len(), 2, "{:?}", line.warnings);
        assert!(line.warnings[0].starts_with("-enable-endpoint-slices=true: "));
        assert!(line.warnings[1].starts_with("-enable-pprof=false: "));
    }

    #[test]
    fn defaults_and_errors() {
        let args = Args::try_parse_from(["destination"]).unwrap();
        assert_eq!(args.addr, "0.0.0.0:8086".parse().unwrap());
        assert_eq!(args.admin_addr, "0.0.0.0:9996".parse().unwrap());
        assert_eq!(args.introspection_addr, "127.0.0.1:9986".parse().unwrap());
        assert!(args.enable_ipv6 && args.enable_h2_upgrade && !args.ext_endpoint_zone_weights);
        assert!(Args::try_parse_from(["destination", "--enable-ipv6=maybe"]).is_err());
        assert!(Args::try_parse_from(["destination", "--addr=nowhere"]).is_err());
        // A name no identity or Service could match is refused, not served.
        assert!(Args::try_parse_from(["destination", "--controller-namespace="]).is_err());
        assert!(Args::try_parse_from(["destination", "--identity-trust-domain="]).is_err());
        assert!(Args::try_parse_from(["destination", "--cluster-domain=..."]).is_err());
        let bad = Args::try_parse_from(["destination", "--meshed-http2-client-params={"]).unwrap();
        assert!(bad.translator_config().is_err());
    }

    #[test]
    fn linked_cluster_state_is_name_equals_dir_and_repeatable() {
        let args = Args::try_parse_from([
            "destination",
            "--linked-cluster-state=east=/state/east",
            "--linked-cluster-state",
            "west=/state/w=1",
        ])
        .unwrap();
        let dirs = args.linked_cluster_dirs().unwrap();
        assert_eq!(dirs["east"], PathBuf::from("/state/east"));
        assert_eq!(dirs["west"], PathBuf::from("/state/w=1"));
        for bad in [
            "east",
            "=dir",
            "East=dir",
            "east=",
            "-east=dir",
            "local=dir",
        ] {
            let flag = format!("--linked-cluster-state={bad}");
            assert!(
                Args::try_parse_from(["destination", &flag]).is_err(),
                "{bad}"
            );
        }
        let twice = Args::try_parse_from([
            "destination",
            "--linked-cluster-state=east=/a",
            "--linked-cluster-state=east=/b",
        ])
        .unwrap();
        assert!(twice.linked_cluster_dirs().is_err());
    }

    #[test]
    fn meshed_http2_params_must_be_json() {
        let bad = Args::try_parse_from(["destination", "--meshed-http2-client-params={"]).unwrap();
        assert!(bad.translator_config().is_err());
    }
}
