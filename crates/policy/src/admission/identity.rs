//! Validity of the identity strings of a MeshTLSAuthentication (spec/policy.md §6): a SPIFFE id
//! (`spiffe://<trust domain>[/<path>]`) or a DNS-like name, optionally with a leading `*`
//! label (`*`, `*.ns.serviceaccount.identity.linkerd.cluster.local`).

/// The DNS-like form, as the error message states it.
pub const DNS_LIKE_IDENTITY_REGEX: &str =
    r"^(\*|[a-z0-9]([-a-z0-9]*[a-z0-9])?)(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$";

const SPIFFE_SCHEME: &str = "spiffe://";

/// Why an identity string is neither a SPIFFE id nor a DNS-like name.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum InvalidIdentity {
    #[error("SPIFFE trust domain is missing")]
    MissingTrustDomain,
    #[error(
        "SPIFFE trust domain characters are limited to lowercase letters, numbers, dots, dashes, and underscores"
    )]
    TrustDomainCharacters,
    #[error(
        "SPIFFE path segment characters are limited to letters, numbers, dots, dashes, and underscores"
    )]
    PathSegmentCharacters,
    #[error("SPIFFE path cannot contain empty segments")]
    EmptySegment,
    #[error("SPIFFE path cannot contain dot segments")]
    DotSegment,
    #[error("SPIFFE path cannot have a trailing slash")]
    TrailingSlash,
    #[error(
        "identity must be a valid SPIFFE id or a DNS SAN, matching the regex: {DNS_LIKE_IDENTITY_REGEX}"
    )]
    NotDnsLike,
}

/// Checks one identity string. Anything that does not start with `spiffe://` must be DNS-like
/// (so `http://x`, `spiffe:/x` and `spiffe:x` fail that rule).
pub fn validate_identity(id: &str) -> Result<(), InvalidIdentity> {
    match id.strip_prefix(SPIFFE_SCHEME) {
        Some(rest) => validate_spiffe(rest),
        None if is_dns_like(id) => Ok(()),
        None => Err(InvalidIdentity::NotDnsLike),
    }
}

/// `rest` is what follows `spiffe://`: the trust domain, then an optional `/`-separated path.
fn validate_spiffe(rest: &str) -> Result<(), InvalidIdentity> {
    let (domain, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    if domain.is_empty() {
        return Err(InvalidIdentity::MissingTrustDomain);
    }
    if !domain
        .bytes()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || b"-._".contains(&c))
    {
        return Err(InvalidIdentity::TrustDomainCharacters);
    }
    let Some(path) = path.strip_prefix('/') else {
        return Ok(());
    };
    let segments: Vec<&str> = path.split('/').collect();
    for (i, segment) in segments.iter().enumerate() {
        if !segment
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || b"-._".contains(&c))
        {
            return Err(InvalidIdentity::PathSegmentCharacters);
        }
        match *segment {
            "" if i + 1 == segments.len() => return Err(InvalidIdentity::TrailingSlash),
            "" => return Err(InvalidIdentity::EmptySegment),
            "." | ".." => return Err(InvalidIdentity::DotSegment),
            _ => {}
        }
    }
    Ok(())
}

/// Whether `id` matches [`DNS_LIKE_IDENTITY_REGEX`].
fn is_dns_like(id: &str) -> bool {
    fn label(l: &str) -> bool {
        let b = l.as_bytes();
        let edge = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
        match (b.first(), b.last()) {
            (Some(first), Some(last)) => {
                edge(first) && edge(last) && b.iter().all(|c| edge(c) || *c == b'-')
            }
            _ => false,
        }
    }
    let mut labels = id.split('.');
    let first_ok = labels.next().is_some_and(|l| l == "*" || label(l));
    first_ok && labels.all(label)
}

#[cfg(test)]
mod tests {
    use super::{InvalidIdentity::*, *};

    #[test]
    fn dns_like_names() {
        for ok in [
            "*",
            "*.a.b",
            "a.b",
            "system.local",
            "web.emojivoto.serviceaccount.identity.linkerd.cluster.local",
            "a-1.b2",
            "0",
        ] {
            assert_eq!(validate_identity(ok), Ok(()), "{ok}");
        }
        for bad in [
            "",
            "a.b.*",
            "*.*.a",
            "**",
            "system.local.",
            ".system.local",
            "system..local",
            "-a.b",
            "a-.b",
            "A.b",
            "a_b",
            "a.*.b",
            "http://domain.test/path/element",
            "spiffe:/path/element",
            "spiffe:path/element",
        ] {
            assert_eq!(validate_identity(bad), Err(NotDnsLike), "{bad}");
        }
        assert!(
            NotDnsLike
                .to_string()
                .contains("valid SPIFFE id or a DNS SAN")
        );
    }

    #[test]
    fn spiffe_ids() {
        for ok in [
            "spiffe://trustdomain",
            "spiffe://trust-domain.example_1",
            "spiffe://trustdomain/path/element",
            "spiffe://td/ns/Default/sa/Web-1.x_y",
        ] {
            assert_eq!(validate_identity(ok), Ok(()), "{ok}");
        }
        let cases = [
            ("spiffe://", MissingTrustDomain),
            ("spiffe:///path/element", MissingTrustDomain),
            (
                "spiffe://domain.test:8080/path/element",
                TrustDomainCharacters,
            ),
            (
                "spiffe://user:password@test.org/path/element",
                TrustDomainCharacters,
            ),
            ("spiffe://Upper.test", TrustDomainCharacters),
            (
                "spiffe://domain.test/path/element?query=",
                PathSegmentCharacters,
            ),
            (
                "spiffe://domain.test/path/element#fragment-1",
                PathSegmentCharacters,
            ),
            ("spiffe://test.org/", TrailingSlash),
            ("spiffe://test.org/path/other/", TrailingSlash),
            ("spiffe://test.org//", EmptySegment),
            ("spiffe://test.org/a//b", EmptySegment),
            ("spiffe://test.org/./other", DotSegment),
            ("spiffe://test.org/../other", DotSegment),
            ("spiffe://test.org/a/..", DotSegment),
        ];
        for (id, want) in cases {
            assert_eq!(validate_identity(id), Err(want), "{id}");
        }
    }
}
