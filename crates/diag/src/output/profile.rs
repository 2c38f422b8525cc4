//! Rendering of `DestinationProfile`, the message `Destination.GetProfile` streams.
//!
//! The JSON object of a profile has these fields, always present (`null` when unset):
//!
//! - `fully_qualified_name` (string), `opaque_protocol` (bool);
//! - `parent_ref`, `profile_ref`: `{"resource":{group,kind,name,namespace,section,port}}` or
//!   `{"default":name}`, as the endpoints' `resource_ref`;
//! - `retry_budget`: `{"retry_ratio":0.25,"min_retries_per_second":5,"ttl":DURATION}`;
//! - `routes`: `[{"name","condition","metrics_labels","is_retryable","timeout",
//!   "response_classes":[{"condition","is_failure"}]}]`, where `name` is the `route` metric
//!   label and a condition is `{"all":[..]}`, `{"any":[..]}`, `{"not":..}`, `{"method":"GET"}`,
//!   `{"path":"regex"}` or `{"status":{"min":500,"max":599}}` (`{}` when the oneof is unset);
//! - `dst_overrides`: `[{"authority","weight","backend_ref"}]`;
//! - `endpoint`: the endpoint object of `dst-diag endpoints` (`addr`, `identity`, ...).

use linkerd2_proxy_api::{
    destination::{
        DestinationProfile, RequestMatch, ResponseClass, ResponseMatch, RetryBudget, Route,
        WeightedDst, request_match, response_match,
    },
    http_types::{HttpMethod, http_method},
    meta::{Metadata, metadata},
};
use serde_json::{Number, Value, json};
use std::io::{self, Write};

use super::{
    OutputFormat, Table, addrs_table, count_or_none, duration_json, labels_json, metadata_json,
    or_dash, push_table, tcp_addr, weighted_addr_json,
};

/// The metric label that carries a route's name (the ServiceProfile route's `name`).
const ROUTE_LABEL: &str = "route";

/// Width of the `key:` column of the readable block, so that the values line up.
const KEY_WIDTH: usize = 17;

/// Writes `profile` to `out` in `format` and flushes, as [`super::write_update`] does for
/// endpoints: a readable block followed by an empty line, or one JSON object on one line.
pub fn write_profile(
    out: &mut impl Write,
    format: OutputFormat,
    profile: &DestinationProfile,
) -> io::Result<()> {
    match format {
        OutputFormat::Json => writeln!(out, "{}", profile_json(profile))?,
        OutputFormat::Table => writeln!(out, "{}\n", profile_table(profile))?,
    }
    out.flush()
}

/// The JSON object of one profile, with every field of `DestinationProfile` (see the module
/// documentation for the field names).
pub fn profile_json(profile: &DestinationProfile) -> Value {
    json!({
        "fully_qualified_name": profile.fully_qualified_name,
        "opaque_protocol": profile.opaque_protocol,
        "parent_ref": profile.parent_ref.as_ref().map(metadata_json),
        "profile_ref": profile.profile_ref.as_ref().map(metadata_json),
        "retry_budget": profile.retry_budget.as_ref().map(budget_json),
        "routes": profile.routes.iter().map(route_json).collect::<Vec<_>>(),
        "dst_overrides": profile.dst_overrides.iter().map(dst_override_json).collect::<Vec<_>>(),
        "endpoint": profile.endpoint.as_ref().map(weighted_addr_json),
    })
}

/// The readable block of one profile, without a trailing newline:
///
/// ```text
/// PROFILE web-svc.emojivoto.svc.cluster.local
/// opaque protocol: false
/// parent:          Service emojivoto/web-svc port 80
/// profile:         ServiceProfile.linkerd.io emojivoto/web-svc.emojivoto.svc.cluster.local
/// retry budget:    ratio 0.25, min 5 retries/s, ttl 15s
/// routes:          2
/// ROUTE          CONDITION                        TIMEOUT  RETRYABLE  RESPONSE CLASSES
/// GET /api/list  all(method GET, path /api/list)  -        yes        -
/// GET /api/vote  all(method GET, path /api/vote)  500ms    no         status 500-599 → failure
/// dst overrides:   none
/// endpoint:        none
/// ```
///
/// Dst overrides are an `AUTHORITY WEIGHT BACKEND` table; an endpoint profile's endpoint is
/// the `dst-diag endpoints` table of one row.
pub fn profile_table(profile: &DestinationProfile) -> String {
    let name = if profile.fully_qualified_name.is_empty() {
        "<no name>"
    } else {
        &profile.fully_qualified_name
    };
    let mut lines = vec![format!("PROFILE {name}")];
    let field = |lines: &mut Vec<String>, key: &str, value: String| {
        lines.push(format!("{:<KEY_WIDTH$}{value}", format!("{key}:")));
    };
    field(
        &mut lines,
        "opaque protocol",
        profile.opaque_protocol.to_string(),
    );
    field(&mut lines, "parent", meta_text(profile.parent_ref.as_ref()));
    field(
        &mut lines,
        "profile",
        meta_text(profile.profile_ref.as_ref()),
    );
    field(
        &mut lines,
        "retry budget",
        profile
            .retry_budget
            .as_ref()
            .map_or_else(|| "-".into(), budget_text),
    );

    let mut routes = Table::new([
        "ROUTE",
        "CONDITION",
        "TIMEOUT",
        "RETRYABLE",
        "RESPONSE CLASSES",
    ]);
    for route in &profile.routes {
        let classes: Vec<String> = route.response_classes.iter().map(class_text).collect();
        routes.push([
            or_dash(route.metrics_labels.get(ROUTE_LABEL).cloned()),
            route
                .condition
                .as_ref()
                .map_or_else(|| "-".into(), request_match_text),
            route
                .timeout
                .as_ref()
                .map_or_else(|| "-".into(), duration_text),
            if route.is_retryable { "yes" } else { "no" }.into(),
            or_dash(Some(classes.join("; "))),
        ]);
    }
    field(&mut lines, "routes", count_or_none(profile.routes.len()));
    push_table(&mut lines, &routes);

    let mut overrides = Table::new(["AUTHORITY", "WEIGHT", "BACKEND"]);
    for dst in &profile.dst_overrides {
        overrides.push([
            dst.authority.clone(),
            dst.weight.to_string(),
            dst.backend_ref
                .as_ref()
                .map_or_else(|| "-".into(), |m| meta_text(Some(m))),
        ]);
    }
    field(
        &mut lines,
        "dst overrides",
        count_or_none(profile.dst_overrides.len()),
    );
    push_table(&mut lines, &overrides);

    match &profile.endpoint {
        Some(endpoint) => {
            field(&mut lines, "endpoint", tcp_addr(endpoint.addr.as_ref()));
            push_table(&mut lines, &addrs_table(std::slice::from_ref(endpoint)));
        }
        None => field(&mut lines, "endpoint", "none".into()),
    }
    crate::output::join_lines(&lines)
}

/// A request condition as one line: `all(method GET, path /api/list)`, `any(..)`, `not(..)`,
/// `method POST`, `path REGEX`; `<empty>` for a match with nothing set.
pub fn request_match_text(m: &RequestMatch) -> String {
    match &m.r#match {
        Some(request_match::Match::All(seq)) => format!("all({})", join(&seq.matches)),
        Some(request_match::Match::Any(seq)) => format!("any({})", join(&seq.matches)),
        Some(request_match::Match::Not(inner)) => format!("not({})", request_match_text(inner)),
        Some(request_match::Match::Path(path)) => format!("path {}", path.regex),
        Some(request_match::Match::Method(method)) => format!("method {}", method_text(method)),
        None => "<empty>".into(),
    }
}

/// A response condition as one line: `status 500-599` (`status 404` for a range of one),
/// `all(..)`, `any(..)`, `not(..)`; `<empty>` for a match with nothing set.
pub fn response_match_text(m: &ResponseMatch) -> String {
    let join = |matches: &[ResponseMatch]| {
        matches
            .iter()
            .map(response_match_text)
            .collect::<Vec<_>>()
            .join(", ")
    };
    match &m.r#match {
        Some(response_match::Match::All(seq)) => format!("all({})", join(&seq.matches)),
        Some(response_match::Match::Any(seq)) => format!("any({})", join(&seq.matches)),
        Some(response_match::Match::Not(inner)) => {
            format!("not({})", response_match_text(inner))
        }
        Some(response_match::Match::Status(range)) if range.min == range.max => {
            format!("status {}", range.min)
        }
        Some(response_match::Match::Status(range)) => {
            format!("status {}-{}", range.min, range.max)
        }
        None => "<empty>".into(),
    }
}

fn join(matches: &[RequestMatch]) -> String {
    matches
        .iter()
        .map(request_match_text)
        .collect::<Vec<_>>()
        .join(", ")
}

/// `GET`, an unregistered method as sent, or a bracketed note when it cannot be read.
pub(crate) fn method_text(method: &HttpMethod) -> String {
    match &method.r#type {
        Some(http_method::Type::Registered(code)) => http_method::Registered::try_from(*code)
            .map(|m| m.as_str_name().to_string())
            .unwrap_or_else(|_| format!("<unknown method {code}>")),
        Some(http_method::Type::Unregistered(name)) => name.clone(),
        None => "<no method>".into(),
    }
}

/// `status 500-599 → failure` or `... → success`.
fn class_text(class: &ResponseClass) -> String {
    let condition = class
        .condition
        .as_ref()
        .map_or_else(|| "<no condition>".into(), response_match_text);
    let outcome = if class.is_failure {
        "failure"
    } else {
        "success"
    };
    format!("{condition} → {outcome}")
}

/// `ratio 0.25, min 5 retries/s, ttl 15s`.
fn budget_text(budget: &RetryBudget) -> String {
    format!(
        "ratio {}, min {} retries/s, ttl {}",
        budget.retry_ratio,
        budget.min_retries_per_second,
        budget
            .ttl
            .as_ref()
            .map_or_else(|| "-".into(), duration_text)
    )
}

/// `Service emojivoto/web-svc port 80`, `ServiceProfile.linkerd.io emojivoto/NAME`,
/// `default NAME`, or `-` when unset. The `core` group is left out, as kubectl does.
fn meta_text(meta: Option<&Metadata>) -> String {
    let Some(meta) = meta else {
        return "-".into();
    };
    match &meta.kind {
        Some(metadata::Kind::Default(name)) => format!("default {name}"),
        // Upstream's default profile names only the group of the kind it would have come from.
        Some(metadata::Kind::Resource(r)) if r.kind.is_empty() && r.name.is_empty() => {
            format!(
                "none ({} default)",
                if r.group.is_empty() { "core" } else { &r.group }
            )
        }
        Some(metadata::Kind::Resource(r)) => {
            let mut text = if r.group.is_empty() || r.group == "core" {
                r.kind.clone()
            } else {
                format!("{}.{}", r.kind, r.group)
            };
            if r.namespace.is_empty() {
                text.push_str(&format!(" {}", r.name));
            } else {
                text.push_str(&format!(" {}/{}", r.namespace, r.name));
            }
            if !r.section.is_empty() {
                text.push_str(&format!(" section {}", r.section));
            }
            if r.port != 0 {
                text.push_str(&format!(" port {}", r.port));
            }
            text
        }
        None => "<empty>".into(),
    }
}

/// A duration as Go prints short ones: `500ms`, `15s`, `1.5s`, `250us`, `0s`; a negative one
/// gets a `-` in front.
pub(crate) fn duration_text(d: &prost_types::Duration) -> String {
    let nanos = i128::from(d.seconds) * 1_000_000_000 + i128::from(d.nanos);
    let sign = if nanos < 0 { "-" } else { "" };
    let n = nanos.unsigned_abs();
    let scaled = |unit: u128, digits: usize, suffix: &str| {
        let (whole, frac) = (n / unit, n % unit);
        if frac == 0 {
            format!("{sign}{whole}{suffix}")
        } else {
            let frac = format!("{frac:0digits$}");
            format!("{sign}{whole}.{}{suffix}", frac.trim_end_matches('0'))
        }
    };
    match n {
        0 => "0s".into(),
        n if n < 1_000 => format!("{sign}{n}ns"),
        n if n < 1_000_000 => scaled(1_000, 3, "us"),
        n if n < 1_000_000_000 => scaled(1_000_000, 6, "ms"),
        _ => scaled(1_000_000_000, 9, "s"),
    }
}

fn route_json(route: &Route) -> Value {
    json!({
        "name": route.metrics_labels.get(ROUTE_LABEL),
        "condition": route.condition.as_ref().map(request_match_json),
        "metrics_labels": labels_json(&route.metrics_labels),
        "is_retryable": route.is_retryable,
        "timeout": route.timeout.as_ref().map(duration_json),
        "response_classes": route.response_classes.iter().map(|c| json!({
            "condition": c.condition.as_ref().map(response_match_json),
            "is_failure": c.is_failure,
        })).collect::<Vec<_>>(),
    })
}

fn request_match_json(m: &RequestMatch) -> Value {
    let seq = |matches: &[RequestMatch]| matches.iter().map(request_match_json).collect::<Vec<_>>();
    match &m.r#match {
        Some(request_match::Match::All(s)) => json!({ "all": seq(&s.matches) }),
        Some(request_match::Match::Any(s)) => json!({ "any": seq(&s.matches) }),
        Some(request_match::Match::Not(inner)) => json!({ "not": request_match_json(inner) }),
        Some(request_match::Match::Path(path)) => json!({ "path": path.regex }),
        Some(request_match::Match::Method(method)) => json!({ "method": method_text(method) }),
        None => json!({}),
    }
}

fn response_match_json(m: &ResponseMatch) -> Value {
    let seq =
        |matches: &[ResponseMatch]| matches.iter().map(response_match_json).collect::<Vec<_>>();
    match &m.r#match {
        Some(response_match::Match::All(s)) => json!({ "all": seq(&s.matches) }),
        Some(response_match::Match::Any(s)) => json!({ "any": seq(&s.matches) }),
        Some(response_match::Match::Not(inner)) => json!({ "not": response_match_json(inner) }),
        Some(response_match::Match::Status(range)) => {
            json!({ "status": { "min": range.min, "max": range.max } })
        }
        None => json!({}),
    }
}

fn budget_json(budget: &RetryBudget) -> Value {
    json!({
        "retry_ratio": f32_json(budget.retry_ratio),
        "min_retries_per_second": budget.min_retries_per_second,
        "ttl": budget.ttl.as_ref().map(duration_json),
    })
}

fn dst_override_json(dst: &WeightedDst) -> Value {
    json!({
        "authority": dst.authority,
        "weight": dst.weight,
        "backend_ref": dst.backend_ref.as_ref().map(metadata_json),
    })
}

/// The number as written in the ServiceProfile (`0.2`, not the `0.20000000298023224` that
/// widening the `f32` to `f64` gives); `null` when it is not finite.
fn f32_json(x: f32) -> Value {
    x.to_string()
        .parse::<f64>()
        .ok()
        .and_then(Number::from_f64)
        .map_or(Value::Null, Value::Number)
}

#[cfg(test)]
mod tests;
