//! `Destination.Get` / `GetProfile` paths and context tokens (spec/destination.md §C.1, §D.1).
//!
//! Input: `<path>\n<context token>` (UTF-8). Properties:
//! - a parsed service name has non-empty DNS labels of at most 63 bytes and a port 1-65535,
//!   prints back to a path that parses to the same name (with its port, or without when it is
//!   80; a host starting with `[` only without, as §C.1 splits a path with `:` as an IPv6
//!   literal then), and `GetProfile` reads the path as the same name;
//! - an IP query refused by `Get` is an address target of `GetProfile` (IPv4-mapped IPv6
//!   read as IPv4);
//! - every refusal has a message that fits in a gRPC status;
//! - a context token never fails, ignores surrounding whitespace, and reads `ns:<ns>` as the
//!   namespace when it is not JSON.

use destination::{
    authority::{AuthorityError, ProfileTarget, parse_profile_target, parse_service_name},
    token::ContextToken,
};

use super::{MAX_MESSAGE, text};

const DOMAIN: &str = "cluster.local";

/// See the module docs.
pub fn get_path(data: &[u8]) {
    let Some(text) = text(data) else { return };
    let (path, token) = text.split_once('\n').unwrap_or((text, ""));
    check_path(path);
    check_token(token);
}

fn check_path(path: &str) {
    let profile = parse_profile_target(path, DOMAIN);
    match parse_service_name(path, DOMAIN) {
        Ok(name) => {
            let labels = [
                Some(&name.service),
                Some(&name.namespace),
                name.instance.as_ref(),
            ];
            for label in labels.into_iter().flatten() {
                assert!(
                    !label.is_empty() && !label.contains('.') && label.len() <= 63,
                    "{path:?}: label {label:?}"
                );
            }
            assert_ne!(name.port, 0, "{path:?}");
            let instance = name
                .instance
                .as_ref()
                .map(|i| format!("{i}."))
                .unwrap_or_default();
            let host = format!("{instance}{}.{}.svc.{DOMAIN}", name.service, name.namespace);
            let again = format!("{host}:{}", name.port);
            let printed = parse_service_name(&again, DOMAIN);
            if host.starts_with('[') {
                // Only a path without `:` may start with `[` (§C.1 step 2, Go's
                // `net.SplitHostPort` upstream): with a port, `[` opens an IPv6 literal.
                assert!(
                    printed.is_err(),
                    "{path:?} printed as {again:?}: {printed:?}"
                );
            } else {
                assert_eq!(printed.as_ref(), Ok(&name), "{path:?} printed as {again:?}");
            }
            if name.port == 80 {
                assert_eq!(
                    parse_service_name(&host, DOMAIN).as_ref(),
                    Ok(&name),
                    "{path:?} printed as {host:?}"
                );
            }
            assert_eq!(profile, Ok(ProfileTarget::Name(name)), "{path:?}");
        }
        Err(error) => {
            let message = error.to_string();
            assert!(
                !message.is_empty() && message.len() <= MAX_MESSAGE,
                "{path:?}: {} bytes",
                message.len()
            );
            match error {
                AuthorityError::IpQuery(ip) => match profile {
                    Ok(ProfileTarget::Addr(addr)) => {
                        assert_eq!(addr.ip(), ip.to_canonical(), "{path:?}")
                    }
                    other => panic!("{path:?}: Get refused an IP, GetProfile gave {other:?}"),
                },
                AuthorityError::Invalid { .. } => {
                    // A malformed host:port is refused by both.
                    if let Ok(ProfileTarget::Name(name)) = profile {
                        panic!("{path:?}: Get refused it ({message}), GetProfile read {name:?}");
                    }
                }
                AuthorityError::NotAService { .. } => {
                    assert!(
                        !matches!(profile, Ok(ProfileTarget::Name(_))),
                        "{path:?}: GetProfile read a name Get refused"
                    );
                }
            }
        }
    }
}

fn check_token(token: &str) {
    let parsed = ContextToken::parse(token);
    assert_eq!(
        ContextToken::parse(&format!(" \t{token}\n ")),
        parsed,
        "{token:?}: whitespace around a token changed it"
    );
    let trimmed = token.trim();
    if serde_json::from_str::<serde_json::Value>(trimmed).is_err()
        && let Some(ns) = trimmed.strip_prefix("ns:")
        && !ns.contains(':')
    {
        assert_eq!(parsed.ns.as_deref(), Some(ns), "{token:?}");
    }
}
