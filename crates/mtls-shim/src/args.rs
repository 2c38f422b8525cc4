//! The `mtls-shim` command line. Where the proxy this shim stands in for has an environment
//! variable (spec/sp-validator-and-pod.md §d.5), the flag falls back to it.

use crate::{certify::CertifyConfig, shim::Identity};
use clap::Parser;
use linkerd_runtime::{
    LogArgs, parse_bool, parse_domain, parse_listen_addr, parse_namespace, tls::TlsFiles,
};
use std::{fmt, net::SocketAddr, path::PathBuf, time::Duration};

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

    /// PEM certificate chain the shim presents (leaf first), reloaded when it changes. File
    /// mode: required unless `--identity-addr` is given, and refused with it.
    #[arg(
        long,
        env = "LINKERD_MTLS_SHIM_IDENTITY_CERT",
        required_unless_present = "identity_addr",
        conflicts_with = "identity_addr",
        requires = "identity_key"
    )]
    pub identity_cert: Option<PathBuf>,

    /// PEM private key of the leaf (PKCS#8, SEC1 or PKCS#1), reloaded with the certificate.
    /// File mode, like `--identity-cert`.
    #[arg(
        long,
        env = "LINKERD_MTLS_SHIM_IDENTITY_KEY",
        required_unless_present = "identity_addr",
        conflicts_with = "identity_addr",
        requires = "identity_cert"
    )]
    pub identity_key: Option<PathBuf>,

    /// Certify mode: `HOST:PORT` of linkerd-identity (e.g.
    /// `linkerd-identity-headless.linkerd.svc.cluster.local.:8080`). The shim then makes its
    /// own key and obtains its certificate with `Certify` instead of reading files.
    #[arg(long, env = "LINKERD2_PROXY_IDENTITY_SVC_ADDR", value_parser = parse_identity_addr)]
    pub identity_addr: Option<IdentityAddr>,

    /// Certify mode: the projected service-account token (audience `identity.l5d.io`), re-read
    /// for every `Certify`.
    #[arg(
        long,
        env = "LINKERD2_PROXY_IDENTITY_TOKEN_FILE",
        default_value = "/var/run/secrets/tokens/linkerd-identity-token"
    )]
    pub identity_token_file: PathBuf,

    /// The identity the shim presents (and requests in Certify mode). Default
    /// `linkerd-destination.<ns>.serviceaccount.identity.<ns>.<trust-domain>`.
    #[arg(long, env = "LINKERD2_PROXY_IDENTITY_LOCAL_NAME")]
    pub identity_name: Option<String>,

    /// Certify mode: the identity linkerd-identity must present. Default
    /// `linkerd-identity.<ns>.serviceaccount.identity.<ns>.<trust-domain>`.
    #[arg(long, env = "LINKERD2_PROXY_IDENTITY_SVC_NAME")]
    pub identity_server_name: Option<String>,

    /// Certify mode: the shortest wait before renewing, and the wait after a failed `Certify`
    /// (`100ms`, `10s`, `5m`, `1h`).
    #[arg(long, env = "LINKERD2_PROXY_IDENTITY_MIN_REFRESH", default_value = "10s", value_parser = parse_duration)]
    pub identity_min_refresh: Duration,

    /// Certify mode: the longest wait before renewing.
    #[arg(long, env = "LINKERD2_PROXY_IDENTITY_MAX_REFRESH", default_value = "24h", value_parser = parse_duration)]
    pub identity_max_refresh: Duration,

    /// PEM trust anchors that client certificates, and the shim's own, must chain to. Read
    /// once: changing them needs a restart, as for the proxy.
    #[arg(long, env = "LINKERD_MTLS_SHIM_TRUST_ANCHORS")]
    pub trust_anchors: PathBuf,

    /// Admin listen address: `/live`, `/ready`, `/metrics`.
    #[arg(long, env = "LINKERD2_PROXY_ADMIN_LISTEN_ADDR", default_value = "0.0.0.0:4191", value_parser = parse_listen_addr)]
    pub admin_addr: SocketAddr,

    /// The control-plane namespace: a component of the identity the shim presents.
    #[arg(long, env = "_l5d_ns", default_value = "linkerd", value_parser = parse_namespace)]
    pub control_plane_namespace: String,

    /// The mesh identity trust domain: the last component of the identity the shim presents.
    #[arg(long, env = "_l5d_trustdomain", default_value = "cluster.local", value_parser = parse_domain)]
    pub identity_trust_domain: String,

    /// Admit clients that present no certificate (a presented one is still verified). By
    /// default their handshakes fail with a TLS alert and are counted, so a proxy that is not
    /// certified yet retries.
    #[arg(long, env = "LINKERD_MTLS_SHIM_ALLOW_UNAUTHENTICATED", default_value = "false", value_parser = parse_bool, num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub allow_unauthenticated: bool,

    #[command(flatten)]
    pub log: LogArgs,
}

/// `--identity-addr`: a host name or IP address and a port.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IdentityAddr {
    /// A DNS name (resolved for each connection) or an IP address, without brackets.
    pub host: String,
    /// The TCP port.
    pub port: u16,
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
    /// The identity the shim must present: `--identity-name`, or else the destination service
    /// account's, `linkerd-destination.<ns>.serviceaccount.identity.<ns>.<trust-domain>`
    /// (spec §d.4).
    pub fn local_identity(&self) -> String {
        match &self.identity_name {
            Some(name) => name.clone(),
            None => local_identity(&self.control_plane_namespace, &self.identity_trust_domain),
        }
    }

    /// Where the shim's certificate comes from: files, or `Certify` when `--identity-addr` is
    /// given. Errors (normally caught by the parser already) say which flags are missing or
    /// clash.
    pub fn identity(&self) -> Result<Identity, String> {
        match (&self.identity_addr, &self.identity_cert, &self.identity_key) {
            (Some(addr), None, None) => Ok(Identity::Certify(CertifyConfig {
                addr: addr.clone(),
                token_file: self.identity_token_file.clone(),
                server_name: self.identity_server_name.clone().unwrap_or_else(|| {
                    identity_service_identity(
                        &self.control_plane_namespace,
                        &self.identity_trust_domain,
                    )
                }),
                min_refresh: self.identity_min_refresh,
                max_refresh: self.identity_max_refresh,
            })),
            (None, Some(certs), Some(key)) => Ok(Identity::Files(TlsFiles {
                certs: certs.clone(),
                key: key.clone(),
            })),
            (Some(_), _, _) => Err(
                "--identity-addr (Certify mode) cannot be used with --identity-cert or --identity-key (file mode)"
                    .to_string(),
            ),
            (None, _, _) => Err(
                "either --identity-cert and --identity-key, or --identity-addr, must be given"
                    .to_string(),
            ),
        }
    }
}

/// The identity of the `linkerd-destination` service account in `namespace` under
/// `trust_domain` (spec §d.4): the name proxies expect the pod to present (their SNI).
pub fn local_identity(namespace: &str, trust_domain: &str) -> String {
    format!("linkerd-destination.{namespace}.serviceaccount.identity.{namespace}.{trust_domain}")
}

/// The identity of the `linkerd-identity` service account in `namespace` under
/// `trust_domain` (spec §d.4, `LINKERD2_PROXY_IDENTITY_SVC_NAME`): the name the identity
/// service must present to a `Certify` client.
pub fn identity_service_identity(namespace: &str, trust_domain: &str) -> String {
    format!("linkerd-identity.{namespace}.serviceaccount.identity.{namespace}.{trust_domain}")
}

/// Parses `HOST:PORT` (`[IPv6]:PORT` for an IPv6 address). Errors name the value.
pub fn parse_identity_addr(value: &str) -> Result<IdentityAddr, String> {
    let invalid = |why: &str| {
        format!(
            "invalid identity address {value:?}: {why} (expected HOST:PORT, e.g. linkerd-identity-headless.linkerd.svc.cluster.local.:8080)"
        )
    };
    let (host, port) = value.rsplit_once(':').ok_or_else(|| invalid("no port"))?;
    let port = port
        .parse::<u16>()
        .map_err(|e| invalid(&format!("invalid port {port:?}: {e}")))?;
    let host = match host.strip_prefix('[') {
        Some(rest) => rest
            .strip_suffix(']')
            .ok_or_else(|| invalid("unclosed '['"))?,
        None if host.contains(':') => return Err(invalid("an IPv6 address needs brackets")),
        None => host,
    };
    if host.is_empty() {
        return Err(invalid("no host"));
    }
    Ok(IdentityAddr {
        host: host.to_string(),
        port,
    })
}

/// Parses a duration as the proxy's variables write them: an integer followed by `ms`, `s`,
/// `m` or `h` (`100ms`, `10s`, `24h`). Errors name the value.
pub fn parse_duration(value: &str) -> Result<Duration, String> {
    let invalid = || format!("invalid duration {value:?}: expected e.g. 100ms, 10s, 5m or 24h");
    let split = value
        .find(|c: char| !c.is_ascii_digit())
        .ok_or_else(invalid)?;
    let (number, unit) = value.split_at(split);
    let number: u64 = number.parse().map_err(|_| invalid())?;
    let millis = match unit {
        "ms" => Some(number),
        "s" => number.checked_mul(1_000),
        "m" => number.checked_mul(60_000),
        "h" => number.checked_mul(3_600_000),
        _ => None,
    };
    millis.map(Duration::from_millis).ok_or_else(invalid)
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

// === impl IdentityAddr ===

impl fmt::Display for IdentityAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
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

    #[test]
    fn certify_mode_flags() {
        let args = Args::try_parse_from([
            "mtls-shim",
            "--forward=:8086=127.0.0.1:18086",
            "--trust-anchors=a",
            "--identity-addr=linkerd-identity-headless.l5d.svc.cluster.local.:8080",
            "--control-plane-namespace=l5d",
            "--identity-min-refresh=100ms",
        ])
        .unwrap();
        let Ok(Identity::Certify(certify)) = args.identity() else {
            panic!("Certify mode: {:?}", args.identity());
        };
        assert_eq!(
            certify.addr,
            IdentityAddr {
                host: "linkerd-identity-headless.l5d.svc.cluster.local.".into(),
                port: 8080
            }
        );
        assert_eq!(
            certify.token_file,
            PathBuf::from("/var/run/secrets/tokens/linkerd-identity-token")
        );
        assert_eq!(
            certify.server_name,
            "linkerd-identity.l5d.serviceaccount.identity.l5d.cluster.local"
        );
        assert_eq!(certify.min_refresh, Duration::from_millis(100));
        assert_eq!(certify.max_refresh, Duration::from_secs(24 * 3600));
        assert_eq!(
            args.local_identity(),
            "linkerd-destination.l5d.serviceaccount.identity.l5d.cluster.local"
        );

        // Both modes at once, or neither, is refused by the parser.
        let err = Args::try_parse_from([
            "mtls-shim",
            "--forward=:8086=127.0.0.1:18086",
            "--trust-anchors=a",
            "--identity-addr=127.0.0.1:8080",
            "--identity-cert=c",
            "--identity-key=k",
        ])
        .unwrap_err();
        assert_eq!(
            err.kind(),
            clap::error::ErrorKind::ArgumentConflict,
            "{err}"
        );
        let err = Args::try_parse_from([
            "mtls-shim",
            "--forward=:8086=127.0.0.1:18086",
            "--trust-anchors=a",
        ])
        .unwrap_err();
        assert_eq!(
            err.kind(),
            clap::error::ErrorKind::MissingRequiredArgument,
            "{err}"
        );
    }

    #[test]
    fn identity_addrs_and_durations() {
        assert_eq!(
            parse_identity_addr("[::1]:8080").map(|a| a.to_string()),
            Ok("[::1]:8080".to_string())
        );
        assert_eq!(
            parse_identity_addr("10.0.0.1:8080"),
            Ok(IdentityAddr {
                host: "10.0.0.1".into(),
                port: 8080
            })
        );
        for bad in ["host", ":8080", "::1:8080", "host:port", "[::1:8080"] {
            let err = parse_identity_addr(bad).unwrap_err();
            assert!(
                err.starts_with(&format!("invalid identity address {bad:?}: ")),
                "{err}"
            );
        }
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration("24h"), Ok(Duration::from_secs(86_400)));
        assert_eq!(parse_duration("100ms"), Ok(Duration::from_millis(100)));
        for bad in ["10", "s", "10d", "-1s", "99999999999999999999h"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }
}
