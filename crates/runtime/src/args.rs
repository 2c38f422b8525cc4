//! Flag value parsers that accept what upstream's Go flags accept.

use std::net::SocketAddr;

/// Parses a listen address: `0.0.0.0:8086`, `[::]:8086`, or Go's `:8086` (all interfaces).
///
/// Errors name the value: `invalid listen address "x": ...`.
pub fn parse_listen_addr(value: &str) -> Result<SocketAddr, String> {
    let full = match value.strip_prefix(':') {
        Some(port) => format!("0.0.0.0:{port}"),
        None => value.to_string(),
    };
    full.parse().map_err(|e| {
        // The standard library says only "invalid socket address syntax" for a port too large.
        let port = full.rsplit_once(':').map_or("", |(_, port)| port);
        let too_large = port.bytes().all(|b| b.is_ascii_digit())
            && (port.len() > 5 || port.parse::<u32>().is_ok_and(|p| p > 65_535));
        if too_large {
            format!("invalid listen address {value:?}: port {port} is out of range 0-65535")
        } else {
            format!("invalid listen address {value:?}: {e} (expected IP:PORT or :PORT)")
        }
    })
}

/// Parses a boolean as Go's `strconv.ParseBool` does: `1 t T TRUE true True 0 f F FALSE false
/// False`. Used with `--flag=VALUE` so `--enable-ipv6=false` works as upstream's flags do.
pub fn parse_bool(value: &str) -> Result<bool, String> {
    match value {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Ok(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Ok(false),
        _ => Err(format!(
            "invalid boolean {value:?} (expected true or false)"
        )),
    }
}

/// Parses a namespace name for flags such as `--controller-namespace`: an RFC 1123 DNS label
/// as Kubernetes requires (1 to 63 lowercase letters, digits and `-`, starting and ending with
/// a letter or digit). Upstream takes any string; an empty or malformed one would silently
/// break every identity or Lease, so it is refused at start.
pub fn parse_namespace(value: &str) -> Result<String, String> {
    if is_dns_label(value) {
        Ok(value.to_string())
    } else {
        Err(format!(
            "invalid namespace {value:?}: 1 to 63 lowercase letters, digits or '-', starting and ending with a letter or digit"
        ))
    }
}

/// Parses a DNS domain for `--cluster-domain` and the identity trust domain: an RFC 1123
/// subdomain (dot-separated DNS labels, at most 253 characters, no trailing dot). Refused at
/// start for the same reason as [`parse_namespace`]: no name could ever match an empty one.
pub fn parse_domain(value: &str) -> Result<String, String> {
    if value.len() <= 253 && value.split('.').all(is_dns_label) {
        Ok(value.to_string())
    } else {
        Err(format!(
            "invalid domain {value:?}: dot-separated labels of lowercase letters, digits or '-' (at most 253 characters, no trailing dot)"
        ))
    }
}

fn is_dns_label(label: &str) -> bool {
    let bytes = label.as_bytes();
    let alnum = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    !bytes.is_empty()
        && bytes.len() <= 63
        && bytes.iter().all(|b| alnum(b) || *b == b'-')
        && bytes.first().is_some_and(alnum)
        && bytes.last().is_some_and(alnum)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespaces_and_domains() {
        assert_eq!(parse_namespace("linkerd"), Ok("linkerd".to_string()));
        assert_eq!(
            parse_namespace("linkerd-egress"),
            Ok("linkerd-egress".to_string())
        );
        for bad in ["", "Bad NS", "-x", "x-", "a.b", &"a".repeat(64)] {
            assert!(parse_namespace(bad).is_err(), "{bad:?}");
        }
        assert_eq!(
            parse_domain("cluster.local"),
            Ok("cluster.local".to_string())
        );
        assert_eq!(
            parse_domain("example-1.org"),
            Ok("example-1.org".to_string())
        );
        for bad in [
            "",
            "...",
            "cluster.local.",
            "Cluster.local",
            "a..b",
            &["a"; 128].join("."),
        ] {
            assert!(parse_domain(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn listen_addresses() {
        assert_eq!(
            parse_listen_addr(":8086").unwrap(),
            "0.0.0.0:8086".parse().unwrap()
        );
        assert_eq!(
            parse_listen_addr("127.0.0.1:0").unwrap(),
            "127.0.0.1:0".parse().unwrap()
        );
        assert_eq!(
            parse_listen_addr("[::1]:9996").unwrap(),
            "[::1]:9996".parse().unwrap()
        );
        let err = parse_listen_addr("localhost:80").unwrap_err();
        assert!(err.contains("\"localhost:80\""), "{err}");
        assert_eq!(
            parse_listen_addr(":99999").unwrap_err(),
            "invalid listen address \":99999\": port 99999 is out of range 0-65535"
        );
        assert!(
            parse_listen_addr("badhost:12345")
                .unwrap_err()
                .ends_with("(expected IP:PORT or :PORT)")
        );
        assert!(
            parse_listen_addr("[::1]:8x")
                .unwrap_err()
                .ends_with("(expected IP:PORT or :PORT)")
        );
    }

    #[test]
    fn go_booleans() {
        assert_eq!(parse_bool("false"), Ok(false));
        assert_eq!(parse_bool("T"), Ok(true));
        assert_eq!(parse_bool("1"), Ok(true));
        assert!(parse_bool("yes").unwrap_err().contains("\"yes\""));
    }
}
