//! The `mtls-shim` command line. Where the proxy this shim stands in for has an environment
//! variable (spec/sp-validator-and-pod.md §d.5), the flag falls back to it.

use clap::Parser;
use linkerd_runtime::{LogArgs, parse_bool, parse_listen_addr};
use std::{fmt, net::SocketAddr, path::PathBuf};

/// Terminates mesh TLS in front of the linkerd-destination pod's gRPC servers.
#[derive(Clone, Debug, Parser)]
#[command(name = "mtls-shim", version, about)]
pub struct Args {
    /// `LISTEN=UPSTREAM`: terminate mesh TLS on LISTEN and relay the bytes to UPSTREAM, both
    /// `IP:PORT` (LISTEN may be `:PORT`). Repeatable, or comma-separated in the variable, e.g.
    /// `0.0.0.0:8086=127.0.0.1:18086`.
    #[arg(
        long = "forward",
        env = "LINKERD_MTLS_SHIM_FORWARD",
        value_name = "LISTEN=UPSTREAM",
        value_delimiter = ',',
        required = true,
        value_parser = parse_forward
    )]
    pub forwards: Vec<Forward>,

    /// PEM certificate chain the shim presents (leaf first), reloaded when it changes.
    #[arg(long, env = "LINKERD_MTLS_SHIM_IDENTITY_CERT")]
    pub identity_cert: PathBuf,

    /// PEM private key of the leaf (PKCS#8, SEC1 or PKCS#1), reloaded with the certificate.
    #[arg(long, env = "LINKERD_MTLS_SHIM_IDENTITY_KEY")]
    pub identity_key: PathBuf,

    /// PEM trust anchors that client certificates, and the shim's own, must chain to. Read
    /// once: changing them needs a restart, as for the proxy.
    #[arg(long, env = "LINKERD_MTLS_SHIM_TRUST_ANCHORS")]
    pub trust_anchors: PathBuf,

    /// Admin listen address: `/live`, `/ready`, `/metrics`.
    #[arg(long, env = "LINKERD2_PROXY_ADMIN_LISTEN_ADDR", default_value = "0.0.0.0:4191", value_parser = parse_listen_addr)]
    pub admin_addr: SocketAddr,

    /// The control-plane namespace: a component of the identity the shim presents.
    #[arg(long, env = "_l5d_ns", default_value = "linkerd")]
    pub control_plane_namespace: String,

    /// The mesh identity trust domain: the last component of the identity the shim presents.
    #[arg(long, env = "_l5d_trustdomain", default_value = "cluster.local")]
    pub identity_trust_domain: String,

    /// Admit clients that present no certificate (a presented one is still verified). By
    /// default their handshakes fail with a TLS alert and are counted, so a proxy that is not
    /// certified yet retries (spec Z.6).
    #[arg(long, env = "LINKERD_MTLS_SHIM_ALLOW_UNAUTHENTICATED", default_value = "false", value_parser = parse_bool, num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub allow_unauthenticated: bool,

    #[command(flatten)]
    pub log: LogArgs,
}

/// One `--forward`: where mesh TLS is terminated and where the bytes go.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Forward {
    /// The address the shim listens on (port 0 picks a free port).
    pub listen: SocketAddr,
    /// The controller the decrypted bytes are relayed to.
    pub upstream: SocketAddr,
}

// === impl Args ===

impl Args {
    /// The identity the shim must present: the destination service account's,
    /// `linkerd-destination.<ns>.serviceaccount.identity.<ns>.<trust-domain>` (spec §d.4).
    pub fn local_identity(&self) -> String {
        local_identity(&self.control_plane_namespace, &self.identity_trust_domain)
    }
}

/// The identity of the `linkerd-destination` service account in `namespace` under
/// `trust_domain` (spec §d.4): the name proxies expect the pod to present (their SNI).
pub fn local_identity(namespace: &str, trust_domain: &str) -> String {
    format!("linkerd-destination.{namespace}.serviceaccount.identity.{namespace}.{trust_domain}")
}

/// Parses `LISTEN=UPSTREAM`. Errors name the value and the part that is wrong.
pub fn parse_forward(value: &str) -> Result<Forward, String> {
    let Some((listen, upstream)) = value.split_once('=') else {
        return Err(format!(
            "invalid forward {value:?}: expected LISTEN=UPSTREAM, e.g. 0.0.0.0:8086=127.0.0.1:18086"
        ));
    };
    let listen =
        parse_listen_addr(listen).map_err(|e| format!("invalid forward {value:?}: {e}"))?;
    let upstream = upstream.parse().map_err(|e| {
        format!("invalid forward {value:?}: invalid upstream address {upstream:?}: {e} (expected IP:PORT)")
    })?;
    Ok(Forward { listen, upstream })
}

// === impl Forward ===

impl fmt::Display for Forward {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}={}", self.listen, self.upstream)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sa(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn forwards() {
        assert_eq!(
            parse_forward("0.0.0.0:8086=127.0.0.1:18086"),
            Ok(Forward {
                listen: sa("0.0.0.0:8086"),
                upstream: sa("127.0.0.1:18086"),
            })
        );
        assert_eq!(
            parse_forward(":8090=[::1]:18090"),
            Ok(Forward {
                listen: sa("0.0.0.0:8090"),
                upstream: sa("[::1]:18090"),
            })
        );
        let err = parse_forward("0.0.0.0:8086").unwrap_err();
        assert!(err.contains("expected LISTEN=UPSTREAM"), "{err}");
        let err = parse_forward("0.0.0.0:8086=localhost:18086").unwrap_err();
        assert!(
            err.starts_with(
                "invalid forward \"0.0.0.0:8086=localhost:18086\": invalid upstream address \"localhost:18086\""
            ),
            "{err}"
        );
        let err = parse_forward("x=127.0.0.1:1").unwrap_err();
        assert!(err.contains("invalid listen address \"x\""), "{err}");
    }

    #[test]
    fn flags() {
        let args = Args::try_parse_from([
            "mtls-shim",
            "--forward",
            "0.0.0.0:8086=127.0.0.1:18086",
            "--forward=:8090=127.0.0.1:18090",
            "--identity-cert=/id/tls.crt",
            "--identity-key=/id/tls.key",
            "--trust-anchors=/id/ca.crt",
            "--control-plane-namespace=l5d",
            "--identity-trust-domain=example.org",
            "--allow-unauthenticated",
        ])
        .unwrap();
        assert_eq!(args.forwards.len(), 2);
        assert_eq!(args.forwards[1].listen, sa("0.0.0.0:8090"));
        assert_eq!(args.admin_addr, sa("0.0.0.0:4191"));
        assert!(args.allow_unauthenticated);
        assert_eq!(
            args.local_identity(),
            "linkerd-destination.l5d.serviceaccount.identity.l5d.example.org"
        );

        let args = Args::try_parse_from([
            "mtls-shim",
            "--forward=:8086=127.0.0.1:18086",
            "--identity-cert=c",
            "--identity-key=k",
            "--trust-anchors=a",
            "--allow-unauthenticated=false",
        ])
        .unwrap();
        assert!(!args.allow_unauthenticated);
        assert_eq!(
            args.local_identity(),
            "linkerd-destination.linkerd.serviceaccount.identity.linkerd.cluster.local"
        );
    }
}
