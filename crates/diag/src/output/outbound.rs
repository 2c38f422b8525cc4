//! `dst-diag policy outbound` output: one `OutboundPolicy` as a readable block or one JSON
//! object. Both show the same summary: the policy's metadata and protocol, then per route its
//! metadata and per rule the matches, the timeouts and retry policy (HTTP and gRPC rules), the
//! backends with their weight and the `Destination.Get` path (or forwarded address) they
//! resolve, and failures injected.

use linkerd2_proxy_api::{
    http_route::Timeouts,
    meta,
    outbound::{
        Backend, ExponentialBackoff, OutboundPolicy, backend, grpc_route, http_route,
        proxy_protocol,
    },
};
use serde_json::{Value, json};
use std::io::{self, Write};

use super::{OutputFormat, duration_text, grpc_match_text, http_match_text};

/// Writes `policy` to `out` in `format` and flushes: a readable block followed by an empty
/// line, or one JSON object on one line.
pub fn write_outbound_policy(
    out: &mut impl Write,
    format: OutputFormat,
    policy: &OutboundPolicy,
) -> io::Result<()> {
    match format {
        OutputFormat::Json => writeln!(out, "{}", outbound_policy_json(policy))?,
        OutputFormat::Table => writeln!(out, "{}\n", outbound_policy_table(policy))?,
    }
    out.flush()
}

/// `default:<name>`, `<Kind>.<group> <namespace>/<name>[:port]`, or `none`.
pub fn metadata_text(m: Option<&meta::Metadata>) -> String {
    match m.and_then(|m| m.kind.as_ref()) {
        Some(meta::metadata::Kind::Default(name)) => format!("default:{name}"),
        Some(meta::metadata::Kind::Resource(r)) => {
            let port = if r.port == 0 {
                String::new()
            } else {
                format!(":{}", r.port)
            };
            format!("{}.{} {}/{}{port}", r.kind, r.group, r.namespace, r.name)
        }
        None => "none".into(),
    }
}

fn backend_json(weight: u32, backend: Option<&Backend>, failures: Vec<String>) -> Value {
    let target = match backend.and_then(|b| b.kind.as_ref()) {
        Some(backend::Kind::Balancer(b)) => {
            match b.discovery.as_ref().and_then(|d| d.kind.as_ref()) {
                Some(backend::endpoint_discovery::Kind::Dst(dst)) => format!("dst {}", dst.path),
                None => "balancer without discovery".into(),
            }
        }
        Some(backend::Kind::Forward(addr)) => match addr
            .addr
            .and_then(|a| std::net::SocketAddr::try_from(a).ok())
        {
            Some(addr) => format!("forward {addr}"),
            None => "forward (no address)".into(),
        },
        None => "none".into(),
    };
    json!({
        "weight": weight,
        "backend": metadata_text(backend.and_then(|b| b.metadata.as_ref())),
        "target": target,
        "failures": failures,
    })
}

/// The backends of a rule's `Distribution`, each as [`backend_json`] with `$failures` of its
/// filters; one body for every route kind, whose generated types differ by module only.
macro_rules! distribution_json {
    ($distribution:expr, $module:ident, $failures:expr) => {
        match $distribution.as_ref().and_then(|d| d.kind.as_ref()) {
            Some($module::distribution::Kind::FirstAvailable(f)) => f
                .backends
                .iter()
                .map(|b| backend_json(1, b.backend.as_ref(), $failures(&b.filters)))
                .collect(),
            Some($module::distribution::Kind::RandomAvailable(ra)) => ra
                .backends
                .iter()
                .map(|w| {
                    let b = w.backend.as_ref();
                    backend_json(
                        w.weight,
                        b.and_then(|b| b.backend.as_ref()),
                        b.map(|b| $failures(&b.filters)).unwrap_or_default(),
                    )
                })
                .collect(),
            _ => Vec::<Value>::new(),
        }
    };
}

/// The text of opaque or TLS route filters (`invalid <message>`, `forbidden`): the two
/// kinds share their filter types but not the generated enum.
macro_rules! forbidding_filters_text {
    ($filters:expr, $module:ident) => {
        $filters
            .iter()
            .map(|f| match &f.kind {
                Some($module::filter::Kind::Invalid(i)) => format!("invalid {}", i.message),
                Some($module::filter::Kind::Forbidden(_)) => "forbidden".into(),
                None => "unknown filter".into(),
            })
            .collect()
    };
}

/// Route summaries, each `{kind, route, rules: [{matches, filters, timeouts, retry,
/// backends}]}` (`timeouts` and `retry` for HTTP and gRPC rules, `none` when unset); a rule's
/// `filters` are its own (every request it matches), a backend's `failures` that backend's.
fn routes_json(protocol: &proxy_protocol::Kind) -> Vec<Value> {
    use linkerd2_proxy_api::outbound::{grpc_route, http_route, opaque_route, tls_route};
    let http = |kind: &str, routes: &[linkerd2_proxy_api::outbound::HttpRoute]| {
        routes
            .iter()
            .map(|r| {
                let rules: Vec<Value> = r
                    .rules
                    .iter()
                    .map(|rule| {
                        let backends = distribution_json!(rule.backends, http_route, http_failures);
                        json!({
                            "matches": rule.matches.iter().map(http_match_text).collect::<Vec<_>>(),
                            "filters": rule.filters.iter().map(http_filter_text).collect::<Vec<_>>(),
                            "timeouts": http_timeouts_text(rule),
                            "retry": http_retry_text(rule.retry.as_ref()),
                            "backends": backends,
                        })
                    })
                    .collect();
                json!({"kind": kind, "route": metadata_text(r.metadata.as_ref()), "rules": rules})
            })
            .collect::<Vec<_>>()
    };
    fn http_failures(filters: &[http_route::Filter]) -> Vec<String> {
        filters
            .iter()
            .filter_map(|f| match &f.kind {
                Some(http_route::filter::Kind::FailureInjector(i)) => {
                    Some(format!("{} {}", i.status, i.message))
                }
                _ => None,
            })
            .collect()
    }
    // A rule's own filters apply to every request it matches: the egress deny routes carry
    // their failure there, not on a backend.
    fn http_filter_text(f: &http_route::Filter) -> String {
        use http_route::filter::Kind;
        match &f.kind {
            Some(Kind::FailureInjector(i)) => format!("fail {} {}", i.status, i.message),
            Some(Kind::RequestHeaderModifier(_)) => "request-header-modifier".into(),
            Some(Kind::ResponseHeaderModifier(_)) => "response-header-modifier".into(),
            Some(Kind::Redirect(_)) => "redirect".into(),
            None => "unknown filter".into(),
        }
    }
    fn grpc_filter_text(f: &grpc_route::Filter) -> String {
        use grpc_route::filter::Kind;
        match &f.kind {
            Some(Kind::FailureInjector(i)) => format!("fail grpc-status {} {}", i.code, i.message),
            Some(Kind::RequestHeaderModifier(_)) => "request-header-modifier".into(),
            None => "unknown filter".into(),
        }
    }
    fn grpc_failures(filters: &[grpc_route::Filter]) -> Vec<String> {
        filters
            .iter()
            .filter_map(|f| match &f.kind {
                Some(grpc_route::filter::Kind::FailureInjector(i)) => {
                    Some(format!("grpc-status {} {}", i.code, i.message))
                }
                _ => None,
            })
            .collect()
    }
    fn opaque_failures(filters: &[opaque_route::Filter]) -> Vec<String> {
        forbidding_filters_text!(filters, opaque_route)
    }
    let opaque = |routes: &[linkerd2_proxy_api::outbound::OpaqueRoute]| {
        routes
            .iter()
            .map(|r| {
                let rules: Vec<Value> = r
                    .rules
                    .iter()
                    .map(|rule| {
                        let backends = distribution_json!(rule.backends, opaque_route, opaque_failures);
                        json!({
                            "matches": Vec::<String>::new(),
                            "filters": opaque_failures(&rule.filters),
                            "backends": backends,
                        })
                    })
                    .collect();
                json!({"kind": "opaque", "route": metadata_text(r.metadata.as_ref()), "rules": rules})
            })
            .collect::<Vec<_>>()
    };
    fn tls_failures(filters: &[tls_route::Filter]) -> Vec<String> {
        forbidding_filters_text!(filters, tls_route)
    }
    // A TLS rule's matches are its route's SNIs; its own filters apply to every backend.
    let tls = |routes: &[linkerd2_proxy_api::outbound::TlsRoute]| {
        routes
            .iter()
            .map(|r| {
                let snis: Vec<String> = r.snis.iter().map(sni_text).collect();
                let rules: Vec<Value> = r
                    .rules
                    .iter()
                    .map(|rule| {
                        let backends = distribution_json!(rule.backends, tls_route, tls_failures);
                        json!({
                            "matches": snis,
                            "filters": tls_failures(&rule.filters),
                            "backends": backends,
                        })
                    })
                    .collect();
                json!({"kind": "tls", "route": metadata_text(r.metadata.as_ref()), "rules": rules})
            })
            .collect::<Vec<_>>()
    };
    let grpc = |routes: &[linkerd2_proxy_api::outbound::GrpcRoute]| {
        routes
            .iter()
            .map(|r| {
                let rules: Vec<Value> = r
                    .rules
                    .iter()
                    .map(|rule| {
                        let backends = distribution_json!(rule.backends, grpc_route, grpc_failures);
                        json!({
                            "matches": rule.matches.iter().map(grpc_match_text).collect::<Vec<_>>(),
                            "filters": rule.filters.iter().map(grpc_filter_text).collect::<Vec<_>>(),
                            "timeouts": grpc_timeouts_text(rule),
                            "retry": grpc_retry_text(rule.retry.as_ref()),
                            "backends": backends,
                        })
                    })
                    .collect();
                json!({"kind": "grpc", "route": metadata_text(r.metadata.as_ref()), "rules": rules})
            })
            .collect::<Vec<_>>()
    };
    match protocol {
        proxy_protocol::Kind::Detect(d) => {
            let mut routes = d
                .http1
                .as_ref()
                .map(|h| http("http", &h.routes))
                .unwrap_or_default();
            routes.extend(
                d.opaque
                    .as_ref()
                    .map(|o| opaque(&o.routes))
                    .unwrap_or_default(),
            );
            routes
        }
        proxy_protocol::Kind::Http1(h) => http("http1", &h.routes),
        proxy_protocol::Kind::Http2(h) => http("http2", &h.routes),
        proxy_protocol::Kind::Grpc(g) => grpc(&g.routes),
        proxy_protocol::Kind::Opaque(o) => opaque(&o.routes),
        proxy_protocol::Kind::Tls(t) => tls(&t.routes),
    }
}

/// `sni <name>` for an exact SNI, `sni *.<domain>` for a suffix (labels stored reversed).
fn sni_text(m: &linkerd2_proxy_api::tls_route::SniMatch) -> String {
    use linkerd2_proxy_api::tls_route::sni_match::Match;
    match &m.r#match {
        Some(Match::Exact(name)) => format!("sni {name}"),
        Some(Match::Suffix(suffix)) => {
            let labels: Vec<&str> = suffix
                .reverse_labels
                .iter()
                .rev()
                .map(String::as_str)
                .collect();
            format!("sni *.{}", labels.join("."))
        }
        None => "sni (none)".into(),
    }
}

/// The JSON object of one policy: `{metadata, protocol, routes}`.
pub fn outbound_policy_json(policy: &OutboundPolicy) -> Value {
    let kind = policy.protocol.as_ref().and_then(|p| p.kind.as_ref());
    let protocol = match kind {
        Some(proxy_protocol::Kind::Detect(d)) => format!(
            "detect (timeout {}s)",
            d.timeout.as_ref().map_or(0, |t| t.seconds)
        ),
        Some(proxy_protocol::Kind::Http1(_)) => "http1".into(),
        Some(proxy_protocol::Kind::Http2(_)) => "http2".into(),
        Some(proxy_protocol::Kind::Grpc(_)) => "grpc".into(),
        Some(proxy_protocol::Kind::Opaque(_)) => "opaque".into(),
        Some(proxy_protocol::Kind::Tls(_)) => "tls".into(),
        None => "none".into(),
    };
    json!({
        "metadata": metadata_text(policy.metadata.as_ref()),
        "protocol": protocol,
        "routes": kind.map(routes_json).unwrap_or_default(),
    })
}

/// The readable block of one policy.
pub fn outbound_policy_table(policy: &OutboundPolicy) -> String {
    let v = outbound_policy_json(policy);
    let s = |v: &Value| v.as_str().unwrap_or_default().to_string();
    let mut lines = vec![
        format!("policy:   {}", s(&v["metadata"])),
        format!("protocol: {}", s(&v["protocol"])),
    ];
    for route in v["routes"].as_array().into_iter().flatten() {
        lines.push(format!(
            "route:    [{}] {}",
            s(&route["kind"]),
            s(&route["route"])
        ));
        for rule in route["rules"].as_array().into_iter().flatten() {
            let matches: Vec<String> = rule["matches"]
                .as_array()
                .into_iter()
                .flatten()
                .map(s)
                .collect();
            if !matches.is_empty() {
                lines.push(format!("  match:  {}", matches.join(" | ")));
            }
            let filters: Vec<String> = rule["filters"]
                .as_array()
                .into_iter()
                .flatten()
                .map(s)
                .collect();
            if !filters.is_empty() {
                lines.push(format!("  filter: {}", filters.join(", ")));
            }
            // HTTP and gRPC rules only; `none` is left out, as an empty filter list is.
            for (field, label) in [("timeouts", "timeouts"), ("retry", "retry")] {
                if let Some(text) = rule[field].as_str().filter(|t| *t != "none") {
                    lines.push(format!("  {label}: {text}"));
                }
            }
            for b in rule["backends"].as_array().into_iter().flatten() {
                let failures: Vec<String> = b["failures"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(s)
                    .collect();
                let failures = if failures.is_empty() {
                    String::new()
                } else {
                    format!(" fails: {}", failures.join(", "))
                };
                lines.push(format!(
                    "  backend: weight {} {} -> {}{failures}",
                    b["weight"],
                    s(&b["backend"]),
                    s(&b["target"])
                ));
            }
        }
    }
    crate::output::join_lines(&lines)
}

/// A rule's timeouts ([`timeouts_text`]).
pub(crate) fn http_timeouts_text(rule: &http_route::Rule) -> String {
    // Older controllers send only the deprecated per-rule request timeout.
    #[allow(deprecated)]
    let legacy = rule.request_timeout.as_ref();
    timeouts_text(rule.timeouts.as_ref(), legacy)
}

/// A gRPC rule's timeouts ([`timeouts_text`]).
pub(crate) fn grpc_timeouts_text(rule: &grpc_route::Rule) -> String {
    // Older controllers send only the deprecated per-rule request timeout.
    #[allow(deprecated)]
    let legacy = rule.request_timeout.as_ref();
    timeouts_text(rule.timeouts.as_ref(), legacy)
}

/// `request 10s, response 5s, idle 60s`; the deprecated per-rule request timeout when the
/// rule has no `timeouts`; `none`.
pub(crate) fn timeouts_text(
    timeouts: Option<&Timeouts>,
    legacy: Option<&prost_types::Duration>,
) -> String {
    let mut parts = Vec::new();
    if let Some(t) = timeouts {
        for (name, d) in [
            ("request", &t.request),
            ("response", &t.response),
            ("idle", &t.idle),
        ] {
            if let Some(d) = d {
                parts.push(format!("{name} {}", duration_text(d)));
            }
        }
    }
    if parts.is_empty()
        && let Some(d) = legacy
    {
        parts.push(format!("request {}", duration_text(d)));
    }
    if parts.is_empty() {
        "none".into()
    } else {
        parts.join(", ")
    }
}

/// A rule's retry policy, `none` without one ([`retry_text`]).
pub(crate) fn http_retry_text(retry: Option<&http_route::Retry>) -> String {
    let Some(retry) = retry else {
        return "none".into();
    };
    let on: Vec<String> = retry
        .conditions
        .iter()
        .flat_map(|c| &c.status_ranges)
        .map(|r| {
            if r.start == r.end {
                r.start.to_string()
            } else {
                format!("{}-{}", r.start, r.end)
            }
        })
        .collect();
    let on = if on.is_empty() {
        "no status".to_string()
    } else {
        format!("status {}", on.join(","))
    };
    retry_text(
        retry.max_retries,
        &on,
        retry.max_request_bytes,
        retry.timeout.as_ref(),
        retry.backoff.as_ref(),
    )
}

/// A rule's retry policy, `none` without one ([`retry_text`]).
pub(crate) fn grpc_retry_text(retry: Option<&grpc_route::Retry>) -> String {
    let Some(retry) = retry else {
        return "none".into();
    };
    let mut on = Vec::new();
    if let Some(c) = &retry.conditions {
        for (set, name) in [
            (c.cancelled, "cancelled"),
            (c.deadine_exceeded, "deadline-exceeded"),
            (c.resource_exhausted, "resource-exhausted"),
            (c.internal, "internal"),
            (c.unavailable, "unavailable"),
        ] {
            if set {
                on.push(name);
            }
        }
    }
    let on = if on.is_empty() {
        "no status".to_string()
    } else {
        on.join(",")
    };
    retry_text(
        retry.max_retries,
        &on,
        retry.max_request_bytes,
        retry.timeout.as_ref(),
        retry.backoff.as_ref(),
    )
}

/// `up to 3 on status 500-599, each try 1s, backoff 25ms-250ms, bodies up to 64KiB`.
fn retry_text(
    max: u32,
    on: &str,
    max_bytes: u32,
    timeout: Option<&prost_types::Duration>,
    backoff: Option<&ExponentialBackoff>,
) -> String {
    let mut text = format!("up to {max} on {on}");
    if let Some(t) = timeout {
        text.push_str(&format!(", each try {}", duration_text(t)));
    }
    if let Some(b) = backoff {
        let d = |d: &Option<prost_types::Duration>| {
            d.as_ref().map_or_else(|| "?".to_string(), duration_text)
        };
        text.push_str(&format!(
            ", backoff {}-{}",
            d(&b.min_backoff),
            d(&b.max_backoff)
        ));
    }
    if max_bytes > 0 {
        text.push_str(&format!(", bodies up to {max_bytes} bytes"));
    }
    text
}

#[cfg(test)]
mod tests;
