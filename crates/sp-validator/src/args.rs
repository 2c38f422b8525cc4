//! The `sp-validator` command line (spec/sp-validator-and-pod.md §b.1), with upstream's
//! defaults; `--metrics-addr` is accepted as upstream's name of `--admin-addr`.

use clap::Parser;
use linkerd_runtime::{LogArgs, parse_listen_addr};
use std::{net::SocketAddr, path::PathBuf};

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
}
