//! The rules a ServiceProfile must pass to be admitted (spec/sp-validator-and-pod.md §a.4), in
//! upstream's order; the first failure is the denial, with upstream's message.
//!
//! [`validate`] takes `request.object` as JSON and checks, in order:
//!
//! 1. **Decoding.** `spec` is decoded strictly into
//!    [`linkerd_k8s_api::service_profile::v1alpha2::ServiceProfileSpec`] (both served versions
//!    share it): an unknown field, a wrong type, a negative or fractional number into an
//!    unsigned field, a `float32` overflow, or a dst-override weight that is not a Kubernetes
//!    quantity is refused with `failed to validate ServiceProfile: error unmarshaling JSON: while
//!    decoding JSON: json: ...`, naming the field. As in Go, `null` stands for an absent field,
//!    and a number or boolean where a string is expected is read as its text (`timeout: 10` is
//!    `"10"`, which then fails as a duration). Only `spec` is strict: `metadata` is read for
//!    its name (which must be a string) and everything else the API server adds
//!    (`managedFields`, `status`, ...) is ignored.
//! 2. **Name.** `metadata.name` must be an RFC 1123 subdomain:
//!    `ServiceProfile "<N>" has invalid name: <Kubernetes' message>`.
//! 3. **Routes**, each in list order: not null, a name, a valid timeout, a condition, a valid
//!    request match, path regexes that compile, then each response class: not null, a
//!    condition, a valid response match.
//! 4. **Retry budget**: a non-negative `retryRatio`, a `ttl`, a valid `ttl`.
//! 5. **Dst overrides**: no null entry.
//!
//! Beyond upstream (project decisions): a `pathRegex` that does not compile with the `regex`
//! crate is refused (upstream admits it and the proxy silently drops the match), with
//! `ServiceProfile "<N>" has a route "<route>" with an invalid pathRegex "<regex>" (<field>):
//! <problem>`, where `<field>` locates it, `spec.routes[<i>].condition.all[<j>].pathRegex` (route
//! names need not be unique, and the pattern may be nested in `all`, `any` or `not`);
//! a null dst override is refused with `ServiceProfile "<N>" has a null dstOverride` (upstream
//! does not look at them). Negative durations (`-1s`) are valid, as in upstream. A review whose
//! regexes take longer than the webhook's time budget to compile is denied at the route where
//! checking stopped, without calling its pattern invalid: `ServiceProfile "<N>" was checked
//! only up to route "<route>" (spec.routes[<i>]): not compiled: the object's regular
//! expressions took more than 3 s to compile`. Every rule is checked first with the patterns
//! parsed only, so a rule broken after patterns slow to compile is what the denial names.
//!
//! Field names match exactly, where Go's decoder ignores case (`PathRegex`); in a cluster the
//! CRD schema prunes such keys before the webhook sees them (§a.6).

use linkerd_index::model::{
    profile::{DurationError, QuantityError, parse_go_duration, quantity_decimillis},
    regex::{QuotedPattern, RegexError, check_regex_compiling, rules_first},
};
use linkerd_k8s_api::service_profile::{
    RequestMatch, ResponseMatch, RouteSpec, v1alpha2::ServiceProfileSpec,
};
use serde::Deserialize;
use serde_json::{Map, Value};
use std::{fmt::Write, time::Duration};

#[cfg(test)]
mod tests;

/// Kubernetes' message for a name longer than a DNS subdomain may be.
pub const NAME_TOO_LONG: &str = "must be no more than 253 characters";

/// Kubernetes' message for a name that is not a lowercase RFC 1123 subdomain.
pub const NAME_NOT_SUBDOMAIN: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";

/// A refused ServiceProfile. Its `Display` is the denial message the API server shows.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum Invalid {
    /// Step 1: the object does not decode.
    #[error(
        "failed to validate ServiceProfile: error unmarshaling JSON: while decoding JSON: json: {0}"
    )]
    Decode(DecodeError),
    /// Step 1, before decoding: the object is not JSON this webhook reads (nested too deep).
    #[error("failed to validate ServiceProfile: {0}")]
    Object(linkerd_admission::ObjectError),
    /// Steps 2 to 5: the profile named `profile` breaks a rule.
    #[error("ServiceProfile \"{profile}\" {problem}")]
    Rule {
        /// `metadata.name` (may be empty).
        profile: String,
        problem: Problem,
    },
}

/// Why `request.object` does not decode. Each names the field.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// A field the type does not have: `unknown field "isRetriable"
    /// (spec.routes[0].isRetriable)`.
    #[error("unknown field \"{field}\" ({path})")]
    UnknownField { field: String, path: String },
    /// A value of the wrong type or out of range:
    /// `cannot decode spec.retryBudget.minRetriesPerSecond: invalid value: integer `-5`,
    /// expected u32`.
    #[error("cannot decode {path}: {reason}")]
    Value { path: String, reason: String },
    /// A dst-override weight that is not a quantity (Kubernetes' message).
    #[error("cannot decode {path}: {error}")]
    Quantity { path: String, error: QuantityError },
}

/// A rule of §a.4 that a decoded profile breaks. `Display` is the message after
/// `ServiceProfile "<N>" `.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum Problem {
    #[error("has invalid name: {0}")]
    Name(&'static str),
    #[error("has a null route")]
    NullRoute,
    #[error("has a route with no name")]
    RouteWithoutName,
    #[error("has a route with an invalid timeout: {0}")]
    RouteTimeout(DurationError),
    #[error("has a route with no condition")]
    RouteWithoutCondition,
    #[error("has a route with an invalid condition: {0}")]
    RouteCondition(MatchError),
    /// Project rule, beyond upstream (which does not compile `pathRegex`, §a.5).
    #[error(
        "has a route \"{route}\" with an invalid pathRegex {} ({field}): {reason}",
        QuotedPattern(regex)
    )]
    PathRegex {
        route: String,
        regex: String,
        /// Where the pattern is: `spec.routes[0].condition.any[1].not.pathRegex`.
        field: String,
        reason: String,
    },
    /// Not a rule: judging stopped at route `route` (`spec.routes[index]`) because the
    /// profile's regexes had taken the review's time budget; says no pattern is invalid.
    #[error(
        "was checked only up to route \"{route}\" (spec.routes[{index}]): {}",
        RegexError::OutOfTime(*.budget)
    )]
    RegexOutOfTime {
        route: String,
        index: usize,
        budget: Duration,
    },
    #[error("has a null response class")]
    NullResponseClass,
    #[error("has a response class with no condition")]
    ResponseClassWithoutCondition,
    #[error("has a response class with an invalid condition: {0}")]
    ResponseClassCondition(MatchError),
    /// Printed with six decimals, as Go's `%f`.
    #[error("RetryBudget RetryRatio must be non-negative: {0:.6}")]
    NegativeRetryRatio(f32),
    #[error("RetryBudget missing TTL field")]
    MissingTtl,
    #[error("RetryBudget: {0}")]
    Ttl(DurationError),
    /// Project rule, beyond upstream.
    #[error("has a null dstOverride")]
    NullDstOverride,
}

/// Why a request or response match is invalid.
#[derive(Copy, Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MatchError {
    /// A null entry in `all` or `any`.
    #[error("null condition \"{0}\"")]
    NullCondition(&'static str),
    #[error("A request match must have a field set")]
    RequestWithoutField,
    #[error("A response match must have a field set")]
    ResponseWithoutField,
    #[error("Range minimum must be between 100 and 599, inclusive")]
    RangeMinimum,
    #[error("Range maximum must be between 100 and 599, inclusive")]
    RangeMaximum,
    #[error("Range maximum cannot be smaller than minimum")]
    RangeOrder,
}

/// The parts of the object read besides `spec`; the rest is ignored.
#[derive(Debug, Default, Deserialize)]
struct Object {
    #[serde(default)]
    metadata: Option<Metadata>,
    #[serde(default)]
    spec: Option<Value>,
}

#[derive(Debug, Default, Deserialize)]
struct Metadata {
    #[serde(default)]
    name: Option<String>,
}

/// Validates `request.object` (`None` or `null` is an empty profile, which fails the name
/// rule). See the module docs for the rules and their order.
pub fn validate(object: Option<&Value>) -> Result<(), Invalid> {
    let (name, spec) = decode(object).map_err(Invalid::Decode)?;
    check(&name, &spec).map_err(|problem| Invalid::Rule {
        profile: name,
        problem,
    })
}

/// Step 1: the name, and the strictly decoded spec.
fn decode(object: Option<&Value>) -> Result<(String, ServiceProfileSpec), DecodeError> {
    let object = match object {
        None | Some(Value::Null) => Object::default(),
        Some(Value::Array(_)) => return Err(not_a_list("object")),
        Some(object) => {
            if let Some(Value::Array(_)) = object.get("metadata") {
                return Err(not_a_list("metadata"));
            }
            serde_path_to_error::deserialize(object).map_err(|e| value_error(String::new(), e))?
        }
    };
    let name = object.metadata.and_then(|m| m.name).unwrap_or_default();
    let spec = match object.spec {
        None | Some(Value::Null) => ServiceProfileSpec::default(),
        Some(mut spec) => {
            normalize_spec(&mut spec)?;
            serde_path_to_error::deserialize(spec)
                .map_err(|e| value_error("spec".to_string(), e))?
        }
    };
    if let Some(budget) = &spec.retry_budget {
        // serde narrows an f64 to f32 without complaint; Go refuses what overflows.
        if !budget.retry_ratio.is_finite() {
            return Err(DecodeError::Value {
                path: "spec.retryBudget.retryRatio".to_string(),
                reason: "number out of range for float32".to_string(),
            });
        }
    }
    for (i, dst) in spec.dst_overrides.iter().flatten().enumerate() {
        let Some(dst) = dst else { continue };
        // An absent weight is Go's zero quantity.
        if dst.weight.0.is_empty() {
            continue;
        }
        quantity_decimillis(&dst.weight.0).map_err(|error| DecodeError::Quantity {
            path: format!("spec.dstOverrides[{i}].weight"),
            error,
        })?;
    }
    Ok((name, spec))
}

/// Steps 2 to 5, in the three passes of [`rules_first`]: every rule but `pathRegex`; then each
/// `pathRegex`'s bounds, parsed; then each compiled (within the review's time budget). Time in
/// proportion to the profile's size until the last. So a rule broken after patterns slow to
/// compile (a route with no condition after 200 of them), or a pattern over a bound, is denied
/// for itself, not as a review that ran out of time, which clients may retry (tester findings).
fn check(name: &str, spec: &ServiceProfileSpec) -> Result<(), Problem> {
    rules_first(|| check_rules(name, spec), Result::is_err)
}

/// Steps 2 to 5, each `pathRegex` checked as the pass of [`check`] says
/// ([`check_regex_compiling`]).
fn check_rules(name: &str, spec: &ServiceProfileSpec) -> Result<(), Problem> {
    if let Some(message) = dns1123_subdomain(name) {
        return Err(Problem::Name(message));
    }
    for (index, route) in spec.routes.iter().flatten().enumerate() {
        check_route(index, route.as_ref().ok_or(Problem::NullRoute)?)?;
    }
    if let Some(budget) = &spec.retry_budget {
        if budget.retry_ratio < 0.0 {
            return Err(Problem::NegativeRetryRatio(budget.retry_ratio));
        }
        if budget.ttl.is_empty() {
            return Err(Problem::MissingTtl);
        }
        go_duration(&budget.ttl).map_err(Problem::Ttl)?;
    }
    if spec.dst_overrides.iter().flatten().any(Option::is_none) {
        return Err(Problem::NullDstOverride);
    }
    Ok(())
}

/// The route at `spec.routes[index]`.
fn check_route(index: usize, route: &RouteSpec) -> Result<(), Problem> {
    if route.name.is_empty() {
        return Err(Problem::RouteWithoutName);
    }
    if let Some(timeout) = route.timeout.as_deref().filter(|t| !t.is_empty()) {
        go_duration(timeout).map_err(Problem::RouteTimeout)?;
    }
    let condition = route
        .condition
        .as_ref()
        .ok_or(Problem::RouteWithoutCondition)?;
    check_request_match(condition).map_err(Problem::RouteCondition)?;
    let root = format!("spec.routes[{index}].condition");
    if let Some((regex, field, error)) = invalid_path_regex(condition, &root) {
        // Quoted in the message the client reads: control characters shown escaped.
        let escaped = |text: &str| linkerd_runtime::log::escape_controls(text).into_owned();
        return Err(match error {
            RegexError::Invalid(reason) => Problem::PathRegex {
                route: escaped(&route.name),
                regex: escaped(regex),
                field,
                reason: escaped(&reason),
            },
            RegexError::OutOfTime(budget) => Problem::RegexOutOfTime {
                route: escaped(&route.name),
                index,
                budget,
            },
        });
    }
    for class in route.response_classes.iter().flatten() {
        let class = class.as_ref().ok_or(Problem::NullResponseClass)?;
        let condition = class
            .condition
            .as_ref()
            .ok_or(Problem::ResponseClassWithoutCondition)?;
        check_response_match(condition).map_err(Problem::ResponseClassCondition)?;
    }
    Ok(())
}

/// Upstream's check, in its order: all, any, method, not, pathRegex. A present list counts as
/// set even when empty.
fn check_request_match(m: &RequestMatch) -> Result<(), MatchError> {
    let mut set = false;
    for (list, field) in [(&m.all, "all"), (&m.any, "any")] {
        if let Some(list) = list {
            set = true;
            for item in list {
                check_request_match(item.as_ref().ok_or(MatchError::NullCondition(field))?)?;
            }
        }
    }
    set |= m.method.as_deref().is_some_and(|m| !m.is_empty());
    if let Some(not) = &m.not {
        set = true;
        check_request_match(not)?;
    }
    set |= m.path_regex.as_deref().is_some_and(|p| !p.is_empty());
    if set {
        Ok(())
    } else {
        Err(MatchError::RequestWithoutField)
    }
}

/// Upstream's check, in its order: all, any, status, not. A status bound of 0 is unset.
fn check_response_match(m: &ResponseMatch) -> Result<(), MatchError> {
    let mut set = false;
    for (list, field) in [(&m.all, "all"), (&m.any, "any")] {
        if let Some(list) = list {
            set = true;
            for item in list {
                check_response_match(item.as_ref().ok_or(MatchError::NullCondition(field))?)?;
            }
        }
    }
    if let Some(range) = &m.status {
        set = true;
        let valid = |bound: u32| bound == 0 || (100..=599).contains(&bound);
        if !valid(range.min) {
            return Err(MatchError::RangeMinimum);
        }
        if !valid(range.max) {
            return Err(MatchError::RangeMaximum);
        }
        if range.min != 0 && range.max != 0 && range.max < range.min {
            return Err(MatchError::RangeOrder);
        }
    }
    if let Some(not) = &m.not {
        set = true;
        check_response_match(not)?;
    }
    if set {
        Ok(())
    } else {
        Err(MatchError::ResponseWithoutField)
    }
}

/// The first `pathRegex` (in check order) that [`check_regex_compiling`] refuses (the `regex` crate, as
/// the destination and the proxy use it, cannot parse or compile it, or the time budget left it
/// uncompiled); with its field, under `path` (the match's own), and why.
fn invalid_path_regex<'m>(
    m: &'m RequestMatch,
    path: &str,
) -> Option<(&'m str, String, RegexError)> {
    for (list, name) in [(&m.all, "all"), (&m.any, "any")] {
        for (i, item) in list.iter().flatten().enumerate() {
            let Some(item) = item else { continue };
            if let Some(found) = invalid_path_regex(item, &format!("{path}.{name}[{i}]")) {
                return Some(found);
            }
        }
    }
    if let Some(not) = m.not.as_deref()
        && let Some(found) = invalid_path_regex(not, &format!("{path}.not"))
    {
        return Some(found);
    }
    let regex = m.path_regex.as_deref().filter(|p| !p.is_empty())?;
    let problem = check_regex_compiling(regex).err()?;
    Some((regex, format!("{path}.pathRegex"), problem))
}

/// Go's `time.ParseDuration`, under which negative durations are valid.
fn go_duration(text: &str) -> Result<(), DurationError> {
    match parse_go_duration(text) {
        Ok(_) | Err(DurationError::Negative(_)) => Ok(()),
        Err(error) => Err(error),
    }
}

/// Kubernetes' `IsDNS1123Subdomain`: the first message, if any (length first).
fn dns1123_subdomain(name: &str) -> Option<&'static str> {
    if name.len() > 253 {
        Some(NAME_TOO_LONG)
    } else if !linkerd_k8s_api::names::is_dns1123_subdomain(name) {
        Some(NAME_NOT_SUBDOMAIN)
    } else {
        None
    }
}

fn value_error(root: String, error: serde_path_to_error::Error<serde_json::Error>) -> DecodeError {
    use serde_path_to_error::Segment;
    let mut path = root;
    for segment in error.path().iter() {
        let _ = match segment {
            Segment::Seq { index } => write!(path, "[{index}]"),
            Segment::Map { key } if path.is_empty() => write!(path, "{key}"),
            Segment::Map { key } => write!(path, ".{key}"),
            Segment::Enum { variant } => write!(path, ".{variant}"),
            Segment::Unknown => write!(path, ".?"),
        };
    }
    if path.is_empty() {
        path.push_str("object");
    }
    let reason = error.inner().to_string();
    // serde: "unknown field `isRetriable`, expected one of `name`, ...".
    if let Some(field) = reason
        .strip_prefix("unknown field `")
        .and_then(|rest| rest.split_once('`'))
        .map(|(field, _)| field.to_string())
    {
        return DecodeError::UnknownField { field, path };
    }
    DecodeError::Value { path, reason }
}

// === Go decoding semantics ===

/// Rewrites `spec` so that serde decodes it as Go's YAML-then-JSON decoding does: a `null`
/// known field is absent (Go leaves the zero value), and a number or boolean given for a string
/// field is its text. Refuses a list where an object is expected, which serde would read as the
/// struct's fields in order and Go refuses. Unknown fields and list entries are left for the
/// decoder to refuse or keep.
fn normalize_spec(spec: &mut Value) -> Result<(), DecodeError> {
    let fields = ["routes", "retryBudget", "dstOverrides"];
    let Some(spec) = normalize(spec, "spec", &fields, &[])? else {
        return Ok(());
    };
    if let Some(Value::Array(routes)) = spec.get_mut("routes") {
        for (i, route) in routes.iter_mut().enumerate() {
            normalize_route(route, &format!("spec.routes[{i}]"))?;
        }
    }
    if let Some(budget) = spec.get_mut("retryBudget") {
        let fields = ["retryRatio", "minRetriesPerSecond", "ttl"];
        normalize(budget, "spec.retryBudget", &fields, &["ttl"])?;
    }
    if let Some(Value::Array(dsts)) = spec.get_mut("dstOverrides") {
        for (i, dst) in dsts.iter_mut().enumerate() {
            let path = format!("spec.dstOverrides[{i}]");
            normalize(dst, &path, &["authority", "weight"], &["authority"])?;
        }
    }
    Ok(())
}

fn normalize_route(route: &mut Value, path: &str) -> Result<(), DecodeError> {
    let fields = [
        "name",
        "condition",
        "responseClasses",
        "isRetryable",
        "timeout",
    ];
    let Some(route) = normalize(route, path, &fields, &["name", "timeout"])? else {
        return Ok(());
    };
    if let Some(condition) = route.get_mut("condition") {
        normalize_request_match(condition, &format!("{path}.condition"))?;
    }
    if let Some(Value::Array(classes)) = route.get_mut("responseClasses") {
        for (i, class) in classes.iter_mut().enumerate() {
            let path = format!("{path}.responseClasses[{i}]");
            let class = normalize(class, &path, &["condition", "isFailure"], &[])?;
            if let Some(condition) = class.and_then(|c| c.get_mut("condition")) {
                normalize_response_match(condition, &format!("{path}.condition"))?;
            }
        }
    }
    Ok(())
}

fn normalize_request_match(m: &mut Value, path: &str) -> Result<(), DecodeError> {
    let fields = ["all", "any", "not", "pathRegex", "method"];
    let Some(m) = normalize(m, path, &fields, &["pathRegex", "method"])? else {
        return Ok(());
    };
    for list in ["all", "any"] {
        if let Some(Value::Array(items)) = m.get_mut(list) {
            for (i, item) in items.iter_mut().enumerate() {
                normalize_request_match(item, &format!("{path}.{list}[{i}]"))?;
            }
        }
    }
    if let Some(not) = m.get_mut("not") {
        normalize_request_match(not, &format!("{path}.not"))?;
    }
    Ok(())
}

fn normalize_response_match(m: &mut Value, path: &str) -> Result<(), DecodeError> {
    let Some(m) = normalize(m, path, &["all", "any", "not", "status"], &[])? else {
        return Ok(());
    };
    for list in ["all", "any"] {
        if let Some(Value::Array(items)) = m.get_mut(list) {
            for (i, item) in items.iter_mut().enumerate() {
                normalize_response_match(item, &format!("{path}.{list}[{i}]"))?;
            }
        }
    }
    if let Some(not) = m.get_mut("not") {
        normalize_response_match(not, &format!("{path}.not"))?;
    }
    if let Some(status) = m.get_mut("status") {
        normalize(status, &format!("{path}.status"), &["min", "max"], &[])?;
    }
    Ok(())
}

/// Drops the `null` values of `fields` and turns numbers and booleans of `strings` into text;
/// returns the object for recursion. A list is refused; `None` for any other non-object, which
/// the decoder refuses (or, for `null`, reads as absent).
fn normalize<'v>(
    value: &'v mut Value,
    path: &str,
    fields: &[&str],
    strings: &[&str],
) -> Result<Option<&'v mut Map<String, Value>>, DecodeError> {
    let object = match value {
        Value::Object(object) => object,
        Value::Array(_) => return Err(not_a_list(path)),
        _ => return Ok(None),
    };
    object.retain(|key, value| !(value.is_null() && fields.contains(&key.as_str())));
    for key in strings {
        if let Some(value) = object.get_mut(*key) {
            match value {
                Value::Number(n) => *value = Value::String(n.to_string()),
                Value::Bool(b) => *value = Value::String(b.to_string()),
                _ => {}
            }
        }
    }
    Ok(Some(object))
}

fn not_a_list(path: &str) -> DecodeError {
    DecodeError::Value {
        path: path.to_string(),
        reason: "invalid type: sequence, expected an object".to_string(),
    }
}
