//! Parsing the `path` of a `Get` request: `<service>.<namespace>.svc.<cluster-domain>[:port]` or
//! `<instance>.<service>.<namespace>.svc.<cluster-domain>[:port]` (spec/destination.md §C.1).

use std::net::{IpAddr, Ipv6Addr};

/// Why a path was refused; each becomes `InvalidArgument` with this message.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AuthorityError {
    #[error("Invalid authority: {path}: {reason}")]
    Invalid { path: String, reason: &'static str },
    #[error("IP queries not supported by Get API: host={0}")]
    IpQuery(IpAddr),
    #[error(
        "invalid service {host:?}: expected <service>.<namespace>.svc.{cluster_domain} or <instance>.<service>.<namespace>.svc.{cluster_domain}"
    )]
    NotAService {
        host: String,
        cluster_domain: String,
    },
}

/// A Kubernetes service DNS name with a port.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceName {
    pub namespace: String,
    pub service: String,
    /// The instance (pod hostname) of a StatefulSet-style name.
    pub instance: Option<String>,
    pub port: u16,
}

/// How much of a client's path an error message repeats: enough to recognise it, never so much
/// that the status no longer fits in the response headers.
const MAX_ECHO: usize = 256;

/// `s`, cut to [`MAX_ECHO`] bytes (at a character boundary) with `...` when longer.
fn echo(s: &str) -> String {
    if s.len() <= MAX_ECHO {
        return s.to_string();
    }
    format!("{}...", &s[..s.floor_char_boundary(MAX_ECHO)])
}

/// Splits `host[:port]`; the port defaults to 80; IPv6 hosts must be bracketed.
pub fn split_host_port(path: &str) -> Result<(&str, u16), AuthorityError> {
    let invalid = |reason| AuthorityError::Invalid {
        path: echo(path),
        reason,
    };
    if !path.contains(':') {
        if path.is_empty() {
            return Err(invalid("empty host"));
        }
        return Ok((path, 80));
    }
    let (host, port) = if let Some(rest) = path.strip_prefix('[') {
        // `[::1]` alone takes the default port, as `web` does.
        if let Some(host) = rest.strip_suffix(']')
            && !host.contains(']')
        {
            if host.is_empty() {
                return Err(invalid("empty host"));
            }
            return Ok((host, 80));
        }
        let (host, port) = rest
            .split_once("]:")
            .ok_or_else(|| invalid("unterminated IPv6 literal"))?;
        (host, port)
    } else {
        let (host, port) = path
            .rsplit_once(':')
            .ok_or_else(|| invalid("missing port"))?;
        if host.contains(':') {
            // `fd00::1:80` is an IPv6 address left bare (and so is `fd00:10:244:2::13`, whose
            // last group is not a port); `http://web:80` or `web:80:80` is not an authority.
            let bare_ipv6 = host.parse::<Ipv6Addr>().is_ok() || path.parse::<Ipv6Addr>().is_ok();
            return Err(invalid(if bare_ipv6 {
                "IPv6 addresses must be bracketed"
            } else {
                "not host:port (one `:` at most, and no scheme such as `http://`)"
            }));
        }
        (host, port)
    };
    if host.is_empty() {
        return Err(invalid("empty host"));
    }
    if port.is_empty() || !port.bytes().all(|b| b.is_ascii_digit()) {
        return Err(invalid("port is not a decimal number"));
    }
    match port.parse::<u32>() {
        Ok(p @ 1..=65535) => Ok((host, p as u16)),
        _ => Err(invalid("port out of range 1-65535")),
    }
}

/// The longest DNS name and label (RFC 1035 §2.3.4); Service, namespace and pod hostnames are
/// DNS labels, so a longer one names nothing.
pub(crate) const MAX_NAME: usize = 253;
pub(crate) const MAX_LABEL: usize = 63;

/// Parses a `Get` path against the cluster domain.
///
/// Errors: [`AuthorityError::Invalid`] for a malformed port, a name longer than DNS allows
/// (253 bytes, or 63 in one label), with a character other than ASCII letters, digits, `-`
/// and `.`, or with a label that starts or ends with `-` (such names cannot exist, and each
/// distinct name a client asks for costs a topic and metric series while its stream lasts);
/// [`AuthorityError::IpQuery`] for an IP; [`AuthorityError::NotAService`] for a name that is
/// not `<service>.<namespace>.svc.<cluster-domain>` (with an optional instance label).
pub fn parse_service_name(path: &str, cluster_domain: &str) -> Result<ServiceName, AuthorityError> {
    let (host, port) = split_host_port(path)?;
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Err(AuthorityError::IpQuery(ip));
    }
    if host.len() > MAX_NAME || host.split('.').any(|label| label.len() > MAX_LABEL) {
        return Err(AuthorityError::Invalid {
            path: echo(path),
            reason: "name longer than DNS allows (253 bytes, 63 per label)",
        });
    }
    // No Service, namespace or pod hostname holds another character (Kubernetes names are
    // DNS labels): such a name could never be served, and would only cost a topic and
    // metric series with odd labels while its stream lasts. Case is left to the lookup.
    if !host
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.')
    {
        return Err(AuthorityError::Invalid {
            path: echo(path),
            reason: "a character no DNS name holds (only letters, digits, `-` and `.`)",
        });
    }
    if host
        .split('.')
        .any(|label| label.starts_with('-') || label.ends_with('-'))
    {
        return Err(AuthorityError::Invalid {
            path: echo(path),
            reason: "a DNS label that starts or ends with `-`",
        });
    }
    let not_a_service = || AuthorityError::NotAService {
        host: echo(host),
        cluster_domain: cluster_domain.to_string(),
    };
    let labels: Vec<&str> = host.split('.').collect();
    let suffix: Vec<&str> = std::iter::once("svc")
        .chain(cluster_domain.split('.'))
        .collect();
    if labels.iter().any(|l| l.is_empty())
        || labels.len() <= suffix.len()
        || !labels.ends_with(&suffix)
    {
        return Err(not_a_service());
    }
    match labels[..labels.len() - suffix.len()] {
        [service, namespace] => Ok(ServiceName {
            namespace: namespace.to_string(),
            service: service.to_string(),
            instance: None,
            port,
        }),
        [instance, service, namespace] => Ok(ServiceName {
            namespace: namespace.to_string(),
            service: service.to_string(),
            instance: Some(instance.to_string()),
            port,
        }),
        _ => Err(not_a_service()),
    }
}

/// What a `GetProfile` path names (spec/destination.md §D.1).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProfileTarget {
    /// An IP and port: a Service's cluster IP, a pod IP, a host IP and host port, an
    /// ExternalWorkload's IP, or an address nothing is known about.
    Addr(std::net::SocketAddr),
    /// A Service name (with an instance for a StatefulSet pod's DNS name).
    Name(ServiceName),
}

/// Parses a `GetProfile` path: an IP (IPv6 bracketed; an IPv4-mapped IPv6 address is read as
/// its IPv4 address) or a service name as for `Get`.
pub fn parse_profile_target(
    path: &str,
    cluster_domain: &str,
) -> Result<ProfileTarget, AuthorityError> {
    let (host, port) = split_host_port(path)?;
    if let Ok(ip) = host.parse::<IpAddr>() {
        // `[::ffff:10.0.0.1]` is the IPv4 address as an IPv6 socket writes it; the cluster
        // indexes it as IPv4 (Go's net.IP compares the two equal upstream).
        return Ok(ProfileTarget::Addr(std::net::SocketAddr::new(
            ip.to_canonical(),
            port,
        )));
    }
    parse_service_name(path, cluster_domain).map(ProfileTarget::Name)
}

#[cfg(test)]
mod tests {
    use super::*;

    const DOMAIN: &str = "cluster.local";

    #[test]
    fn profile_targets() {
        assert_eq!(
            parse_profile_target("10.96.34.218:80", DOMAIN),
            Ok(ProfileTarget::Addr("10.96.34.218:80".parse().unwrap()))
        );
        assert_eq!(
            parse_profile_target("[fd00:10:96::8:7a3e]:80", DOMAIN),
            Ok(ProfileTarget::Addr(
                "[fd00:10:96::8:7a3e]:80".parse().unwrap()
            ))
        );
        let Ok(ProfileTarget::Name(name)) =
            parse_profile_target("cache-1.cache.edge.svc.cluster.local:6379", DOMAIN)
        else {
            panic!("expected a name");
        };
        assert_eq!(name.instance.as_deref(), Some("cache-1"));
        assert_eq!(
            parse_profile_target("[::ffff:10.244.2.19]:8080", DOMAIN),
            Ok(ProfileTarget::Addr("10.244.2.19:8080".parse().unwrap()))
        );
        // A bracketed address without a port takes port 80, as a name does.
        assert_eq!(
            parse_profile_target("[fd00:10:96::8:7a3e]", DOMAIN),
            Ok(ProfileTarget::Addr(
                "[fd00:10:96::8:7a3e]:80".parse().unwrap()
            ))
        );
        assert_eq!(split_host_port("[::1]"), Ok(("::1", 80)));
        for malformed in ["[::1", "[::1]x", "[::1]]", "[]:80"] {
            assert!(split_host_port(malformed).is_err(), "{malformed}");
        }
        assert!(parse_profile_target("fd00::1:80", DOMAIN).is_err());
        assert!(parse_profile_target("linkerd.io:80", DOMAIN).is_err());
        assert!(parse_profile_target("10.0.0.1:0", DOMAIN).is_err());
    }

    #[test]
    fn names_up_to_the_dns_limits_are_parsed_and_longer_ones_refused() {
        let label = |n| "a".repeat(n);
        let ok = format!("{}.{}.svc.cluster.local:80", label(63), label(63));
        assert_eq!(parse_service_name(&ok, DOMAIN).unwrap().service, label(63));
        let long_label = format!("{}.ns.svc.cluster.local:80", label(64));
        let long_name = format!(
            "{}.{}.{}.{}.svc.cluster.local:80",
            label(63),
            label(63),
            label(63),
            label(47)
        );
        for path in [long_label, long_name] {
            assert!(
                matches!(parse_service_name(&path, DOMAIN), Err(AuthorityError::Invalid { reason, .. }) if reason.contains("DNS")),
                "{path}"
            );
        }
    }

    #[test]
    fn service_names() {
        let name = parse_service_name("web-svc.emojivoto.svc.cluster.local:80", DOMAIN).unwrap();
        assert_eq!(
            name,
            ServiceName {
                namespace: "emojivoto".into(),
                service: "web-svc".into(),
                instance: None,
                port: 80
            }
        );
        let name = parse_service_name("cache-1.cache.edge.svc.cluster.local:6379", DOMAIN).unwrap();
        assert_eq!(name.instance.as_deref(), Some("cache-1"));
        assert_eq!(
            (name.service.as_str(), name.namespace.as_str()),
            ("cache", "edge")
        );
        // No port: 80.
        assert_eq!(
            parse_service_name("web-svc.emojivoto.svc.cluster.local", DOMAIN)
                .unwrap()
                .port,
            80
        );
        // Another cluster domain.
        let name = parse_service_name("a.b.svc.example.org:1", "example.org").unwrap();
        assert_eq!(name.service, "a");
    }

    /// A name with a character no Kubernetes name holds is malformed, not an unknown Service
    /// (newcomer finding: `web_svc` or a quote and newline opened a stream, a topic and metric
    /// series that could never be served).
    #[test]
    fn names_with_characters_dns_names_lack_are_refused() {
        for path in [
            "web_svc.emojivoto.svc.cluster.local:80",
            "w\u{e9}b.emojivoto.svc.cluster.local:80",
            "we\"b\nnl.emojivoto.svc.cluster.local:80",
            "web.emoji voto.svc.cluster.local:80",
            "web-0.web\u{0}.ns.svc.cluster.local:80",
        ] {
            for parsed in [
                parse_service_name(path, DOMAIN).map(|_| ()),
                parse_profile_target(path, DOMAIN).map(|_| ()),
            ] {
                assert!(
                    matches!(&parsed, Err(AuthorityError::Invalid { reason, .. }) if reason.contains("character")),
                    "{path:?}: {parsed:?}"
                );
            }
        }
        // A label starting or ending with `-` is no DNS label either.
        for path in [
            "-web.emojivoto.svc.cluster.local:80",
            "web-.emojivoto.svc.cluster.local:80",
            "web-0.web.-ns.svc.cluster.local:80",
        ] {
            let parsed = parse_service_name(path, DOMAIN);
            assert!(
                matches!(&parsed, Err(AuthorityError::Invalid { reason, .. }) if reason.contains("starts or ends")),
                "{path:?}: {parsed:?}"
            );
        }
        // Case is not the parser's to judge: an upper-case name is an unknown Service.
        assert_eq!(
            parse_service_name("Web-Svc.emojivoto.svc.cluster.local:80", DOMAIN)
                .unwrap()
                .service,
            "Web-Svc"
        );
    }

    #[test]
    fn refused_paths() {
        let invalid = |p: &str| parse_service_name(p, DOMAIN).unwrap_err();
        assert_eq!(
            invalid("10.96.34.218:80"),
            AuthorityError::IpQuery("10.96.34.218".parse().unwrap())
        );
        assert_eq!(
            invalid("[fd00::1]:80"),
            AuthorityError::IpQuery("fd00::1".parse().unwrap())
        );
        for path in [
            "web-svc.emojivoto.svc.cluster.local:0",
            "web-svc.emojivoto.svc.cluster.local:65536",
            "web-svc.emojivoto.svc.cluster.local:99999999999",
            "web-svc.emojivoto.svc.cluster.local:-1",
            "web-svc.emojivoto.svc.cluster.local:http",
            "web-svc.emojivoto.svc.cluster.local:",
            "fd00::1:80",
            "[fd00::1:80",
            ":80",
            "",
        ] {
            assert!(
                matches!(invalid(path), AuthorityError::Invalid { .. }),
                "{path}"
            );
        }
        for path in [
            "linkerd.io:80",
            "web-svc.emojivoto.svc.cluster.local.:80",
            "web-svc.svc.cluster.local:80",
            "a.b.c.d.svc.cluster.local:80",
            "web-svc.emojivoto.svc.other.domain:80",
            "web-svc..svc.cluster.local:80",
            "svc.cluster.local:80",
        ] {
            assert!(
                matches!(invalid(path), AuthorityError::NotAService { .. }),
                "{path}"
            );
        }
        let reason = |p: &str| match invalid(p) {
            AuthorityError::Invalid { reason, .. } => reason,
            other => panic!("{p}: {other:?}"),
        };
        assert_eq!(reason("fd00::1:80"), "IPv6 addresses must be bracketed");
        assert_eq!(
            reason("fd00:10:244:2::13"),
            "IPv6 addresses must be bracketed"
        );
        for path in [
            "http://web-svc.emojivoto.svc.cluster.local:80",
            "web-svc.emojivoto.svc.cluster.local:80:80",
        ] {
            assert_eq!(
                reason(path),
                "not host:port (one `:` at most, and no scheme such as `http://`)"
            );
        }
        let long = format!("{}:99999", "é".repeat(10_000));
        assert!(invalid(&long).to_string().len() < 400);
        let long = format!("{}.emojivoto.svc.other:80", "a".repeat(100_000));
        assert!(invalid(&long).to_string().len() < 500);
        let msg = invalid("web-svc.emojivoto.svc.cluster.local:0").to_string();
        assert!(
            msg.contains("web-svc.emojivoto.svc.cluster.local:0") && msg.contains("out of range"),
            "{msg}"
        );
    }
}
