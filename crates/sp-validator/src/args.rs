//! The `sp-validator` command line (spec/sp-validator-and-pod.md §b.1), with upstream's
//! defaults; `--metrics-addr` is accepted as upstream's name of `--admin-addr`. The binary reads
//! its command line through [`linkerd_runtime::go_flags`], so upstream's chart's `-log-level=info`
//! style works too, and the upstream flags in [`UNIMPLEMENTED`] are accepted with a warning.

use clap::Parser;
use linkerd_runtime::{LogArgs, go_flags::Unimplemented, parse_listen_addr};
use std::{net::SocketAddr, path::PathBuf};

/// Upstream's flags (spec §b.1) that this binary accepts and ignores, with what they mean here.
pub const UNIMPLEMENTED: &[Unimplemented] = &[
    Unimplemented {
        name: "enable-pprof",
        takes_value: false,
        meaning: "no /debug/pprof endpoints are served",
    },
    Unimplemented {
        name: "kubeconfig",
        takes_value: true,
        meaning: "the validator reads nothing from the cluster",
    },
];

/// Serves the validating admission webhook of `linkerd.io` ServiceProfiles over HTTPS.
#[derive(Clone, Debug, Parser)]
#[command(name = "sp-validator", version, about)]
pub struct Args {
    /// HTTPS listen address of the webhook (`:8443` means all interfaces).
    #[arg(long, env = "LINKERD_SP_VALIDATOR_ADDR", default_value = "0.0.0.0:8443", value_parser = parse_listen_addr)]
    pub addr: SocketAddr,

    /// Admin listen address (plain HTTP): `/live`, `/ping`, `/ready`, `/metrics`.
    #[arg(long, alias = "metrics-addr", default_value = "0.0.0.0:9997", value_parser = parse_listen_addr)]
    pub admin_addr: SocketAddr,

    /// PEM certificate chain of the webhook, reloaded when it changes.
    #[arg(long, default_value = "/var/run/linkerd/tls/tls.crt")]
    pub server_tls_certs: PathBuf,

    /// PEM private key of the webhook (PKCS#1 RSA, SEC1 EC or PKCS#8), reloaded when it
    /// changes.
    #[arg(long, default_value = "/var/run/linkerd/tls/tls.key")]
    pub server_tls_key: PathBuf,

    #[command(flatten)]
    pub log: LogArgs,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_upstream_spellings() {
        let args = Args::try_parse_from(["sp-validator"]).unwrap();
        assert_eq!(args.addr, "0.0.0.0:8443".parse().unwrap());
        assert_eq!(args.admin_addr, "0.0.0.0:9997".parse().unwrap());
        assert_eq!(
            args.server_tls_certs,
            PathBuf::from("/var/run/linkerd/tls/tls.crt")
        );
        assert_eq!(args.log.log_level, "info");

        let args =
            Args::try_parse_from(["sp-validator", "--addr", ":9443", "--metrics-addr", ":9998"])
                .unwrap();
        assert_eq!(args.addr, "0.0.0.0:9443".parse().unwrap());
        assert_eq!(args.admin_addr, "0.0.0.0:9998".parse().unwrap());
    }

    #[test]
    fn upstream_charts_arguments() {
        // spec/sp-validator-and-pod.md §c.2, rendered with the chart's defaults.
        let line = linkerd_runtime::go_flags::try_parse_from::<Args, _, _>(
            [
                "sp-validator",
                "-log-level=info",
                "-log-format=plain",
                "-enable-pprof=false",
            ],
            UNIMPLEMENTED,
        )
        .unwrap();
        assert_eq!(line.args.addr, "0.0.0.0:8443".parse().unwrap());
        assert_eq!(line.args.admin_addr, "0.0.0.0:9997".parse().unwrap());
        assert_eq!(line.args.log.log_level, "info");
        assert_eq!(
            line.warnings,
            [
                "-enable-pprof=false: accepted as upstream's chart passes it, not implemented here: no /debug/pprof endpoints are served"
            ]
        );
    }
}
