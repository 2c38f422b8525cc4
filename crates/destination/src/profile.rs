//! Translation of a Service's profile to the proxy API's `DestinationProfile`
//! (spec/destination.md §D.3).
//!
//! The index has already validated the ServiceProfile ([`ProfileInfo`]); what is left here is
//! shape: refs, the default retry budget, method enums, durations and dst-override
//! authorities. Every function is total: nothing here can fail.

use linkerd_index::model::profile::{self, ProfileInfo};
use linkerd2_proxy_api::{
    destination::{
        DestinationProfile, HttpStatusRange, PathMatch, RequestMatch, ResponseClass, ResponseMatch,
        RetryBudget, Route, WeightedDst, request_match, response_match,
    },
    http_types::{HttpMethod, http_method},
    meta::{Metadata, Resource, metadata},
};
use std::time::Duration;

#[cfg(test)]
mod tests;

/// The Service and port a `GetProfile` stream is about, and what the service profile needs to
/// know of them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceProfileTarget {
    /// `fully_qualified_name` of the answer: the host as the client gave it, or
    /// `<svc>.<ns>.svc.<cluster domain>` for a cluster-IP request (§D.1).
    pub fqn: String,
    /// The Service's namespace.
    pub namespace: String,
    /// The Service's name.
    pub service: String,
    /// The requested port.
    pub port: u16,
    /// Whether the requested port is in the Service's opaque-port set (§D.4).
    pub opaque: bool,
}

/// The retry budget sent when a Service has no ServiceProfile, or one without `retryBudget`:
/// `{retry_ratio 0.2, min_retries_per_second 10, ttl 10s}` (§D.3).
pub fn default_retry_budget() -> RetryBudget {
    RetryBudget {
        retry_ratio: 0.2,
        min_retries_per_second: 10,
        ttl: Some(prost_types::Duration {
            seconds: 10,
            nanos: 0,
        }),
    }
}

/// The completely empty profile: the answer for a port the Service does not declare
/// (§D.2 step 2, §H.7). No fqn, no budget, no refs; the proxy then falls back to the
/// client-policy API.
pub fn empty_profile() -> DestinationProfile {
    DestinationProfile::default()
}

/// The service profile of `target` (§D.3), from its ServiceProfile, or the default profile
/// when `profile` is `None`.
///
/// * `fully_qualified_name`, `opaque_protocol` from the target;
/// * `parent_ref`: `Resource{group "core", kind "Service", name, namespace, port}`;
/// * `profile_ref`: `Resource{group "linkerd.io", kind "ServiceProfile", name, namespace}` of
///   the ServiceProfile, or `Resource{group "linkerd.io"}` alone for the default profile
///   (upstream's shape, §I.2);
/// * `retry_budget`: the ServiceProfile's (a zero TTL leaves `ttl` unset), else
///   [`default_retry_budget`];
/// * `routes` in ServiceProfile order, each with `metrics_labels {"route": name}`;
/// * `dst_overrides` with the requested port appended to an authority without one (see
///   [`dst_authority`]) and the weight in decimillis as given;
/// * `endpoint` unset.
pub fn service_profile(
    target: &ServiceProfileTarget,
    profile: Option<&ProfileInfo>,
) -> DestinationProfile {
    let parent_ref = resource(Resource {
        group: "core".into(),
        kind: "Service".into(),
        name: target.service.clone(),
        namespace: target.namespace.clone(),
        port: u32::from(target.port),
        ..Resource::default()
    });
    let Some(profile) = profile else {
        return DestinationProfile {
            fully_qualified_name: target.fqn.clone(),
            opaque_protocol: target.opaque,
            retry_budget: Some(default_retry_budget()),
            parent_ref: Some(parent_ref),
            profile_ref: Some(resource(Resource {
                group: "linkerd.io".into(),
                ..Resource::default()
            })),
            ..DestinationProfile::default()
        };
    };

    DestinationProfile {
        fully_qualified_name: target.fqn.clone(),
        opaque_protocol: target.opaque,
        routes: profile.routes.iter().map(route).collect(),
        retry_budget: Some(
            profile
                .retry_budget
                .as_ref()
                .map(|b| RetryBudget {
                    retry_ratio: b.retry_ratio,
                    min_retries_per_second: b.min_retries_per_second,
                    ttl: b.ttl.map(duration),
                })
                .unwrap_or_else(default_retry_budget),
        ),
        dst_overrides: profile
            .dst_overrides
            .iter()
            .map(|dst| WeightedDst {
                authority: dst_authority(&dst.authority, target.port),
                weight: dst.weight,
                backend_ref: None,
            })
            .collect(),
        endpoint: None,
        parent_ref: Some(parent_ref),
        profile_ref: Some(resource(Resource {
            group: "linkerd.io".into(),
            kind: "ServiceProfile".into(),
            name: profile.name.clone(),
            namespace: profile.namespace.clone(),
            ..Resource::default()
        })),
    }
}

fn resource(resource: Resource) -> Metadata {
    Metadata {
        kind: Some(metadata::Kind::Resource(resource)),
    }
}

fn route(route: &profile::Route) -> Route {
    Route {
        condition: Some(request_match(&route.condition)),
        response_classes: route
            .response_classes
            .iter()
            .map(|class| ResponseClass {
                condition: Some(response_match(&class.condition)),
                is_failure: class.is_failure,
            })
            .collect(),
        metrics_labels: [("route".to_string(), route.name.clone())]
            .into_iter()
            .collect(),
        is_retryable: route.is_retryable,
        timeout: route.timeout.map(duration),
    }
}

fn request_match(m: &profile::RequestMatch) -> RequestMatch {
    use request_match::{Match, Seq};
    let seq = |items: &[profile::RequestMatch]| Seq {
        matches: items.iter().map(request_match).collect(),
    };
    let m = match m {
        profile::RequestMatch::All(items) => Match::All(seq(items)),
        profile::RequestMatch::Any(items) => Match::Any(seq(items)),
        profile::RequestMatch::Not(inner) => Match::Not(Box::new(request_match(inner))),
        profile::RequestMatch::Path(regex) => Match::Path(PathMatch {
            regex: regex.clone(),
        }),
        profile::RequestMatch::Method(method) => Match::Method(http_method(method)),
    };
    RequestMatch { r#match: Some(m) }
}

/// The nine methods the proxy API registers as their enum, any other as an `unregistered`
/// string (already upper-cased by the index).
fn http_method(method: &str) -> HttpMethod {
    let ty = match http_method::Registered::from_str_name(method) {
        Some(registered) => http_method::Type::Registered(registered.into()),
        None => http_method::Type::Unregistered(method.to_string()),
    };
    HttpMethod { r#type: Some(ty) }
}

fn response_match(m: &profile::ResponseMatch) -> ResponseMatch {
    use response_match::{Match, Seq};
    let seq = |items: &[profile::ResponseMatch]| Seq {
        matches: items.iter().map(response_match).collect(),
    };
    let m = match m {
        profile::ResponseMatch::All(items) => Match::All(seq(items)),
        profile::ResponseMatch::Any(items) => Match::Any(seq(items)),
        profile::ResponseMatch::Not(inner) => Match::Not(Box::new(response_match(inner))),
        profile::ResponseMatch::Status { min, max } => Match::Status(HttpStatusRange {
            min: *min,
            max: *max,
        }),
    };
    ResponseMatch { r#match: Some(m) }
}

/// `{seconds, nanos}`; a `Duration` from the index is at most `i64::MAX` nanoseconds, so the
/// seconds always fit.
fn duration(d: Duration) -> prost_types::Duration {
    prost_types::Duration {
        seconds: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        nanos: i32::try_from(d.subsec_nanos()).unwrap_or(0),
    }
}

/// A dst-override authority as the proxy will resolve it: kept when it already ends in a
/// port, else given the requested port (§D.3).
///
/// "Ends in a port" means `host:<port>` with a host without `:`, or `[<ipv6>]:<port>`, where
/// `<port>` is a decimal number up to 65535. Otherwise the authority is a host and the port is
/// joined as Go's `net.JoinHostPort` does: a host containing `:` (an IPv6 address) is
/// bracketed (`fd00::1` ⇒ `[fd00::1]:7000`), a bracketed one is not bracketed twice
/// (`[fd00::1]` ⇒ `[fd00::1]:7000`), and a trailing `:` with no port is dropped
/// (`web:` ⇒ `web:7000`).
pub fn dst_authority(authority: &str, port: u16) -> String {
    let is_port = |p: &str| {
        !p.is_empty() && p.bytes().all(|c| c.is_ascii_digit()) && p.parse::<u16>().is_ok()
    };
    if authority.starts_with('[') {
        if let Some((_, p)) = authority.split_once("]:")
            && is_port(p)
        {
            return authority.to_string();
        }
        let host = authority.strip_suffix(':').unwrap_or(authority);
        return if host.ends_with(']') {
            format!("{host}:{port}")
        } else {
            format!("[{host}]:{port}")
        };
    }
    match authority.split_once(':') {
        // One colon: `host:port`, or `host:` with the port missing.
        Some((host, p)) if !p.contains(':') => {
            if is_port(p) {
                authority.to_string()
            } else if p.is_empty() {
                format!("{host}:{port}")
            } else {
                format!("[{authority}]:{port}")
            }
        }
        // Several colons, unbracketed: an IPv6 address.
        Some(_) => format!("[{authority}]:{port}"),
        None => format!("{authority}:{port}"),
    }
}
