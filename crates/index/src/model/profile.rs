//! The validated, protocol-agnostic form of a ServiceProfile (spec/destination.md §D.3).
//!
//! [`ProfileInfo::from_service_profile`] is the only place that reads a ServiceProfile's spec:
//! it applies every check that makes Go's translator drop an update (and a few stricter ones,
//! see its docs), so a profile that converts is one the destination can always send, and one
//! that does not is logged with its namespace/name and skipped as a whole.
//!
//! Also here, because both the destination and the sp-validator need them exactly as Go has
//! them: [`parse_go_duration`] (Go's `time.ParseDuration`) and [`quantity_decimillis`]
//! (a Kubernetes quantity's `MilliValue() × 10`).

use linkerd_k8s_api::service_profile::{self as k8s, v1alpha2::ServiceProfile};
use std::time::Duration;

use super::{InvalidObject, Kind};

#[cfg(test)]
mod tests;

impl Kind for ServiceProfile {
    type Wire = ServiceProfile;
    type Object = ProfileInfo;
    const LABEL: &'static str = "ServiceProfile";
    /// Issue 3 item 5: an invalid update removes the profile it replaces, so the service is
    /// served the default profile rather than a stale one.
    const INVALID_REMOVES: bool = true;

    fn from_wire(sp: ServiceProfile) -> Result<ProfileInfo, InvalidObject> {
        ProfileInfo::from_service_profile(&sp)
    }
}

/// A ServiceProfile that passed validation: what a `GetProfile` answer is built from.
#[derive(Clone, Debug, PartialEq)]
pub struct ProfileInfo {
    pub namespace: String,
    /// `<svc>.<ns>.svc.<cluster domain>`.
    pub name: String,
    /// In the order written; the proxy uses the first that matches.
    pub routes: Vec<Route>,
    /// `None` when the spec has none: the destination then sends its default budget.
    pub retry_budget: Option<RetryBudget>,
    /// In the order written; empty when the spec has none.
    pub dst_overrides: Vec<WeightedDst>,
}

/// One route of a profile.
#[derive(Clone, Debug, PartialEq)]
pub struct Route {
    /// Non-empty; becomes the proxy's metric label `route`.
    pub name: String,
    pub condition: RequestMatch,
    pub response_classes: Vec<ResponseClass>,
    pub is_retryable: bool,
    /// `None` when absent, `""`, zero or negative (`timeout_or_ttl`).
    pub timeout: Option<Duration>,
}

/// A request predicate. Several fields set on one CRD match become [`RequestMatch::All`] of
/// them, in the order all, any, method, not, pathRegex (Go's translator order).
#[derive(Clone, Debug, PartialEq)]
pub enum RequestMatch {
    /// Every item matches; an empty list matches everything.
    All(Vec<RequestMatch>),
    /// Some item matches; an empty list matches nothing.
    Any(Vec<RequestMatch>),
    Not(Box<RequestMatch>),
    /// A regular expression as written (valid `regex` crate syntax, not compiled here); the
    /// proxy anchors it.
    Path(String),
    /// An HTTP method, upper-cased.
    Method(String),
}

/// A response classification: responses matching `condition` are failures when `is_failure`.
#[derive(Clone, Debug, PartialEq)]
pub struct ResponseClass {
    pub condition: ResponseMatch,
    pub is_failure: bool,
}

/// A response predicate; several fields set become [`ResponseMatch::All`] of them, in the
/// order all, any, status, not.
#[derive(Clone, Debug, PartialEq)]
pub enum ResponseMatch {
    All(Vec<ResponseMatch>),
    Any(Vec<ResponseMatch>),
    Not(Box<ResponseMatch>),
    /// An inclusive status range; `0` is an unset bound, any other bound is in `100..=599`,
    /// and `max >= min` when both are set.
    Status {
        min: u32,
        max: u32,
    },
}

/// How much retrying may add to the request rate.
#[derive(Clone, Debug, PartialEq)]
pub struct RetryBudget {
    /// Non-negative and finite.
    pub retry_ratio: f32,
    pub min_retries_per_second: u32,
    /// `None` when the TTL is zero or negative (`timeout_or_ttl`).
    pub ttl: Option<Duration>,
}

/// One destination of a traffic split.
#[derive(Clone, Debug, PartialEq)]
pub struct WeightedDst {
    /// As written: `host` or `host:port` (the destination appends the requested port).
    pub authority: String,
    /// Decimillis (`MilliValue() × 10`: a weight of `1` is 10000), see
    /// [`quantity_decimillis`]; 0 when the weight is absent.
    pub weight: u32,
}

/// A string that is not a non-negative Go duration. The messages are Go's
/// (`time: missing unit in duration "250"`), except for [`DurationError::Negative`], which Go
/// accepts.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    /// Not the syntax, or more than `i64::MAX` nanoseconds. Holds the quoted input.
    #[error("time: invalid duration {0}")]
    Invalid(String),
    /// A number without a unit (other than a bare `0`). Holds the quoted input.
    #[error("time: missing unit in duration {0}")]
    MissingUnit(String),
    /// A unit other than `ns`, `us`, `µs`, `μs`, `ms`, `s`, `m` and `h`. Both quoted.
    #[error("time: unknown unit {unit} in duration {input}")]
    UnknownUnit { unit: String, input: String },
    /// A valid but negative duration (a timeout or TTL cannot be). Holds the quoted input.
    #[error("time: negative duration {0}")]
    Negative(String),
}

/// A string that is not a Kubernetes quantity.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum QuantityError {
    #[error(
        "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
    )]
    Format,
    #[error("unable to parse quantity's suffix")]
    Suffix,
    #[error("quantity is empty")]
    Empty,
}

// === impl ProfileInfo ===

impl ProfileInfo {
    /// Validates and converts a ServiceProfile as §D.3 (and the sp-validator, spec/
    /// sp-validator-and-pod.md §a.4) describe, in the validator's order: per route (null
    /// entry, name, timeout, condition, response classes), then the retry budget, then the
    /// dst overrides.
    ///
    /// Fails, with a reason naming the route and the problem, on: a null route, response class
    /// or `all`/`any` entry; an empty route name; a missing route or response-class condition;
    /// a match with no field set; a status bound that is non-zero and outside `100..=599`, or
    /// `max < min` with both set; a `pathRegex` that is not a regex (`check_regex`:
    /// invalid syntax, over 8 KiB or nested over 64 deep), named by its field
    /// (`spec.routes[1].condition.all[0].pathRegex`) (project decision: stricter than
    /// upstream, whose proxy silently drops such a match, and the sp-validator refuses it too;
    /// a pattern only too large once compiled is served, as compiling thousands took seconds,
    /// and left to the proxy); a route timeout or retry-budget TTL that is not a Go
    /// duration (issue decision: the whole profile is skipped, where Go only drops the timeout;
    /// the sp-validator refuses it too); a negative or non-finite `retryRatio`; an empty TTL; a
    /// null dst override or one whose weight is not a quantity. A missing `metadata.name` is an
    /// error too. A negative timeout or TTL is none (`timeout_or_ttl`), not an error: the
    /// sp-validator admits it, as upstream's does.
    pub fn from_service_profile(sp: &ServiceProfile) -> Result<Self, InvalidObject> {
        let namespace = sp.metadata.namespace.clone().unwrap_or_default();
        let name = match sp.metadata.name.as_deref() {
            Some(name) if !name.is_empty() => name.to_string(),
            _ => return Err(invalid(&namespace, "", "metadata.name is missing".into())),
        };
        let spec = &sp.spec;

        let routes = spec
            .routes
            .iter()
            .flatten()
            .enumerate()
            .map(|(i, route)| match route {
                Some(route) => Route::from_spec(i, route),
                None => Err(format!("routes[{i}] is null")),
            })
            .collect::<Result<Vec<_>, _>>()
            .map_err(|reason| invalid(&namespace, &name, reason))?;

        let retry_budget = spec
            .retry_budget
            .as_ref()
            .map(RetryBudget::from_spec)
            .transpose()
            .map_err(|reason| invalid(&namespace, &name, reason))?;

        let dst_overrides = spec
            .dst_overrides
            .iter()
            .flatten()
            .enumerate()
            .map(|(i, dst)| match dst {
                Some(dst) => WeightedDst::from_spec(i, dst),
                None => Err(format!("dstOverrides[{i}] is null")),
            })
            .collect::<Result<Vec<_>, _>>()
            .map_err(|reason| invalid(&namespace, &name, reason))?;
        // Served as upstream serves it (":<port>", spec/destination.md), which resolves
        // nowhere: the traffic it weighs fails. The validator admits it, as upstream's does.
        for (i, dst) in dst_overrides.iter().enumerate() {
            if dst.authority.trim().is_empty() {
                tracing::warn!(
                    profile = %format!("{namespace}/{name}"),
                    "dstOverrides[{i}] has an empty authority: proxies are sent \":<port>\", which resolves nowhere"
                );
            } else if let Some(problem) = unresolvable_authority(&dst.authority) {
                tracing::warn!(
                    profile = %format!("{namespace}/{name}"),
                    "dstOverrides[{i}] authority {:?} {problem}, which resolves nowhere",
                    dst.authority
                );
            }
        }

        warn_negative_values(&format!("{namespace}/{name}"), spec);

        Ok(Self {
            namespace,
            name,
            routes,
            retry_budget,
            dst_overrides,
        })
    }
}

/// Why a non-empty dst-override authority resolves nowhere, as the destination sends it
/// (`destination::profile::dst_authority`, spec §D.3: kept when it ends in a port, else the
/// requested port is joined): port 0 is sent as written; a `host:` suffix that is no port
/// 1-65535 (`web:99999`, `web:http`) and an unbracketed name with several colons that is no
/// IPv6 address make the whole authority a host (`[web:99999]:<port>`). `None` when it may
/// resolve. The validator admits these, as upstream's does, and the traffic weighed to them
/// fails: this is the only place they show.
fn unresolvable_authority(authority: &str) -> Option<String> {
    let port = match authority.rsplit_once(':') {
        None => return None,
        Some((host, port)) if !host.contains(':') => port,
        Some((host, port)) if host.starts_with('[') && host.ends_with(']') => port,
        // Unbracketed colons: sent bracketed, an IPv6 address with the requested port.
        Some(_) if authority.starts_with('[') => "",
        Some(_) => {
            return authority.parse::<std::net::Ipv6Addr>().is_err().then(|| {
                format!("is neither host:port nor an IPv6 address: proxies are sent it as a host, \"[{authority}]:<port>\"")
            });
        }
    };
    let digits = !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit());
    match port.parse::<u64>() {
        _ if port.is_empty() => None,
        Ok(0) if digits => Some("has port 0: proxies are sent it as written".into()),
        Ok(1..=65535) if digits => None,
        _ => Some(format!(
            "ends in {port:?}, no port 1-65535: proxies are sent it as a host, \"[{authority}]:<port>\""
        )),
    }
}

/// Logs the negative values a profile is served without: a route timeout or retry-budget TTL
/// (sent as none, `timeout_or_ttl`) and a dst override weight (sent as 0, which the proxy
/// ignores). Both webhooks admit them, as upstream's do; the log is the only place they show.
fn warn_negative_values(profile: &str, spec: &k8s::v1alpha2::ServiceProfileSpec) {
    let negative = |text: &str| matches!(parse_go_duration(text), Err(DurationError::Negative(_)));
    for route in spec.routes.iter().flatten().flatten() {
        if let Some(timeout) = route.timeout.as_deref().filter(|t| negative(t)) {
            tracing::warn!(%profile, route = %route.name, "route timeout {timeout:?} is negative: the route is served without a timeout");
        }
    }
    if let Some(budget) = spec.retry_budget.as_ref().filter(|b| negative(&b.ttl)) {
        tracing::warn!(%profile, "retryBudget ttl {:?} is negative: the profile is served without a retry budget TTL", budget.ttl);
    }
    for (i, dst) in spec.dst_overrides.iter().flatten().flatten().enumerate() {
        let weight = dst.weight.0.trim();
        let magnitude = weight.strip_prefix('-').map(quantity_decimillis);
        if magnitude.is_some_and(|m| m.is_ok_and(|m| m > 0)) {
            tracing::warn!(%profile, authority = %dst.authority, "dstOverrides[{i}] weight {weight:?} is negative: it is sent as 0, which sends no traffic there");
        }
    }
}

fn invalid(namespace: &str, name: &str, reason: String) -> InvalidObject {
    InvalidObject {
        kind: "ServiceProfile",
        namespace: namespace.to_string(),
        name: name.to_string(),
        reason,
    }
}

// === impl Route ===

impl Route {
    fn from_spec(index: usize, spec: &k8s::RouteSpec) -> Result<Self, String> {
        if spec.name.is_empty() {
            return Err(format!("routes[{index}] has no name"));
        }
        let ctx = |problem: String| format!("route \"{}\": {problem}", spec.name);

        let timeout = match spec.timeout.as_deref() {
            None | Some("") => None,
            Some(t) => timeout_or_ttl(t).map_err(|e| ctx(format!("invalid timeout: {e}")))?,
        };
        let condition = spec
            .condition
            .as_ref()
            .ok_or_else(|| ctx("no condition".into()))?;
        let path = format!("spec.routes[{index}].condition");
        let condition = RequestMatch::from_spec(condition, &path).map_err(ctx)?;
        let response_classes = spec
            .response_classes
            .iter()
            .flatten()
            .enumerate()
            .map(|(i, class)| {
                let class = class
                    .as_ref()
                    .ok_or_else(|| ctx(format!("responseClasses[{i}] is null")))?;
                let condition = class
                    .condition
                    .as_ref()
                    .ok_or_else(|| ctx(format!("responseClasses[{i}] has no condition")))?;
                let condition = ResponseMatch::from_spec(condition)
                    .map_err(|e| ctx(format!("responseClasses[{i}]: {e}")))?;
                Ok(ResponseClass {
                    condition,
                    is_failure: class.is_failure,
                })
            })
            .collect::<Result<Vec<_>, String>>()?;

        Ok(Self {
            name: spec.name.clone(),
            condition,
            response_classes,
            is_retryable: spec.is_retryable,
            timeout,
        })
    }
}

// === impl RequestMatch ===

impl RequestMatch {
    /// The match `spec`, found at field `path` (`spec.routes[0].condition.all[1]`), which names
    /// an invalid `pathRegex` in the reason, as the sp-validator's denial does.
    fn from_spec(spec: &k8s::RequestMatch, path: &str) -> Result<Self, String> {
        let mut items = Vec::new();
        let nested = |field: &'static str| {
            move |i: usize, spec: &k8s::RequestMatch| {
                Self::from_spec(spec, &format!("{path}.{field}[{i}]"))
            }
        };
        if let Some(all) = &spec.all {
            items.push(Self::All(children(all, "all", nested("all"))?));
        }
        if let Some(any) = &spec.any {
            items.push(Self::Any(children(any, "any", nested("any"))?));
        }
        if let Some(method) = spec.method.as_deref().filter(|m| !m.is_empty()) {
            items.push(Self::Method(method.to_uppercase()));
        }
        if let Some(not) = &spec.not {
            let not = Self::from_spec(not, &format!("{path}.not"))?;
            items.push(Self::Not(Box::new(not)));
        }
        if let Some(regex) = spec.path_regex.as_deref().filter(|p| !p.is_empty()) {
            if let Err(problem) = super::regex::check_regex(regex) {
                return Err(format!(
                    "invalid pathRegex {} ({path}.pathRegex): {problem}",
                    super::regex::QuotedPattern(regex)
                ));
            }
            items.push(Self::Path(regex.to_string()));
        }
        one_or_all(items, Self::All, "A request match must have a field set")
    }
}

// === impl ResponseMatch ===

impl ResponseMatch {
    fn from_spec(spec: &k8s::ResponseMatch) -> Result<Self, String> {
        let mut items = Vec::new();
        if let Some(all) = &spec.all {
            items.push(Self::All(children(all, "all", |_, s| Self::from_spec(s))?));
        }
        if let Some(any) = &spec.any {
            items.push(Self::Any(children(any, "any", |_, s| Self::from_spec(s))?));
        }
        if let Some(k8s::Range { min, max }) = spec.status {
            let valid = |bound: u32| bound == 0 || (100..=599).contains(&bound);
            if !valid(min) {
                return Err("Range minimum must be between 100 and 599, inclusive".into());
            }
            if !valid(max) {
                return Err("Range maximum must be between 100 and 599, inclusive".into());
            }
            if min != 0 && max != 0 && max < min {
                return Err("Range maximum cannot be smaller than minimum".into());
            }
            items.push(Self::Status { min, max });
        }
        if let Some(not) = &spec.not {
            items.push(Self::Not(Box::new(Self::from_spec(not)?)));
        }
        one_or_all(items, Self::All, "A response match must have a field set")
    }
}

/// Converts the entries of an `all`/`any` list; a null entry is Go's `null condition "all"`.
fn children<S, T>(
    specs: &[Option<S>],
    field: &str,
    convert: impl Fn(usize, &S) -> Result<T, String>,
) -> Result<Vec<T>, String> {
    specs
        .iter()
        .enumerate()
        .map(|(i, spec)| match spec {
            Some(spec) => convert(i, spec),
            None => Err(format!("null condition \"{field}\"")),
        })
        .collect()
}

fn one_or_all<T>(mut items: Vec<T>, all: fn(Vec<T>) -> T, none: &str) -> Result<T, String> {
    match items.len() {
        0 => Err(none.to_string()),
        1 => Ok(items.remove(0)),
        _ => Ok(all(items)),
    }
}

// === impl RetryBudget ===

impl RetryBudget {
    fn from_spec(spec: &k8s::RetryBudget) -> Result<Self, String> {
        if spec.retry_ratio < 0.0 {
            return Err(format!(
                "RetryBudget RetryRatio must be non-negative: {:.6}",
                spec.retry_ratio
            ));
        }
        if !spec.retry_ratio.is_finite() {
            return Err(format!(
                "RetryBudget RetryRatio must be a finite number: {}",
                spec.retry_ratio
            ));
        }
        if spec.ttl.is_empty() {
            return Err("RetryBudget missing TTL field".into());
        }
        let ttl = timeout_or_ttl(&spec.ttl).map_err(|e| format!("RetryBudget: {e}"))?;
        Ok(Self {
            retry_ratio: spec.retry_ratio,
            min_retries_per_second: spec.min_retries_per_second,
            ttl,
        })
    }
}

// === impl WeightedDst ===

impl WeightedDst {
    fn from_spec(index: usize, spec: &k8s::WeightedDst) -> Result<Self, String> {
        let quantity = spec.weight.0.trim();
        // An absent weight decodes as "" here; Go reads it as the zero Quantity.
        let weight = if quantity.is_empty() {
            0
        } else {
            quantity_decimillis(quantity).map_err(|e| {
                format!(
                    "dstOverrides[{index}] (authority \"{}\"): invalid weight \"{quantity}\": {e}",
                    spec.authority
                )
            })?
        };
        Ok(Self {
            authority: spec.authority.clone(),
            weight,
        })
    }
}

// === Go durations ===

/// A route timeout or retry-budget TTL as the proxy is sent it: `None` for zero, and for a
/// negative duration. Go parses `-1s`, so the sp-validator admits it as upstream's does
/// (spec/sp-validator-and-pod.md §a.4), and upstream's destination sends it on; the proxy has no
/// use for a negative timeout or TTL (it keeps a budget only with a TTL of 1 s to 60 s), so it is
/// sent as none, like zero, instead of the whole profile being skipped.
///
/// Errors: the text is not a Go duration ([`parse_go_duration`]); never
/// [`DurationError::Negative`].
fn timeout_or_ttl(text: &str) -> Result<Option<Duration>, DurationError> {
    match parse_go_duration(text) {
        Ok(duration) => Ok(duration.non_zero()),
        Err(DurationError::Negative(_)) => Ok(None),
        Err(error) => Err(error),
    }
}

trait NonZero: Sized {
    fn non_zero(self) -> Option<Self>;
}

impl NonZero for Duration {
    fn non_zero(self) -> Option<Self> {
        (!self.is_zero()).then_some(self)
    }
}

/// Parses a duration exactly as Go's `time.ParseDuration` does, for non-negative values:
/// an optional sign, then one or more `<decimal number><unit>` groups (`300ms`, `1.5h`,
/// `1m30s`, `.5s`), units `ns`, `us`, `µs` (U+00B5), `μs` (U+03BC), `ms`, `s`, `m`, `h`; a
/// bare `0` (or `+0`, `-0`) is zero.
///
/// Errors carry Go's message, with the input quoted as Go quotes it: `time: invalid duration
/// "x"`, `time: missing unit in duration "250"`, `time: unknown unit "d" in duration "1d"`;
/// more than `i64::MAX` nanoseconds is invalid. A negative duration, which Go accepts, is
/// [`DurationError::Negative`]: valid syntax, but no timeout or TTL (the sp-validator admits
/// it, and a profile reads it as none: `timeout_or_ttl`).
pub fn parse_go_duration(input: &str) -> Result<Duration, DurationError> {
    const MAX: u64 = 1 << 63;
    let invalid = || DurationError::Invalid(go_quote(input));

    let mut s = input.as_bytes();
    let mut negative = false;
    if let [sign @ (b'-' | b'+'), rest @ ..] = s {
        negative = *sign == b'-';
        s = rest;
    }
    if s == b"0" {
        return Ok(Duration::ZERO);
    }
    if s.is_empty() {
        return Err(invalid());
    }

    let mut total: u64 = 0;
    while !s.is_empty() {
        if !(s[0] == b'.' || s[0].is_ascii_digit()) {
            return Err(invalid());
        }
        // The integer part; more than 2^63 is an overflow.
        let digits = s.iter().take_while(|c| c.is_ascii_digit()).count();
        let mut value: u64 = 0;
        for &c in &s[..digits] {
            if value > MAX / 10 {
                return Err(invalid());
            }
            value = value * 10 + u64::from(c - b'0');
            if value > MAX {
                return Err(invalid());
            }
        }
        let pre = digits > 0;
        s = &s[digits..];

        // The fraction: precision stops accumulating where it would overflow, as in Go.
        let (mut fraction, mut scale, mut post) = (0u64, 1f64, false);
        if let [b'.', rest @ ..] = s {
            s = rest;
            let digits = s.iter().take_while(|c| c.is_ascii_digit()).count();
            let mut overflow = false;
            for &c in &s[..digits] {
                if overflow {
                    continue;
                }
                if fraction > (MAX - 1) / 10 {
                    overflow = true;
                    continue;
                }
                let next = fraction * 10 + u64::from(c - b'0');
                if next > MAX {
                    overflow = true;
                    continue;
                }
                fraction = next;
                scale *= 10.0;
            }
            post = digits > 0;
            s = &s[digits..];
        }
        if !pre && !post {
            return Err(invalid());
        }

        let unit_len = s
            .iter()
            .take_while(|&&c| !(c == b'.' || c.is_ascii_digit()))
            .count();
        if unit_len == 0 {
            return Err(DurationError::MissingUnit(go_quote(input)));
        }
        let (unit, rest) = s.split_at(unit_len);
        s = rest;
        let unit = match unit {
            b"ns" => 1,
            // `µs` (U+00B5, micro sign) and `μs` (U+03BC, Greek mu) in UTF-8.
            b"us" | [0xc2, 0xb5, b's'] | [0xce, 0xbc, b's'] => 1_000,
            b"ms" => 1_000_000,
            b"s" => 1_000_000_000,
            b"m" => 60 * 1_000_000_000,
            b"h" => 60 * 60 * 1_000_000_000,
            _ => {
                return Err(DurationError::UnknownUnit {
                    unit: go_quote(&String::from_utf8_lossy(unit)),
                    input: go_quote(input),
                });
            }
        };
        if value > MAX / unit {
            return Err(invalid());
        }
        value *= unit;
        if fraction > 0 {
            // Go computes this in float64, which is nanosecond-accurate for fractions of hours.
            value += (fraction as f64 * (unit as f64 / scale)) as u64;
            if value > MAX {
                return Err(invalid());
            }
        }
        total = match total.checked_add(value) {
            Some(total) if total <= MAX => total,
            _ => return Err(invalid()),
        };
    }
    if negative {
        return if total == 0 {
            Ok(Duration::ZERO)
        } else {
            Err(DurationError::Negative(go_quote(input)))
        };
    }
    if total > MAX - 1 {
        return Err(invalid());
    }
    Ok(Duration::from_nanos(total))
}

/// Quotes a string as Go's `time` package does in its errors: `"…"` with `"` and `\`
/// escaped, and bytes of control or non-ASCII characters as `\xNN`.
fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        if c < ' ' || !c.is_ascii() {
            let mut buf = [0u8; 4];
            for b in c.encode_utf8(&mut buf).bytes() {
                out.push_str(&format!("\\x{b:02x}"));
            }
        } else {
            if c == '"' || c == '\\' {
                out.push('\\');
            }
            out.push(c);
        }
    }
    out.push('"');
    out
}

// === Kubernetes quantities ===

/// A Kubernetes quantity as decimillis: `ceil(value × 1000) × 10`, Go's
/// `Quantity.MilliValue() * 10` as the destination sends dst-override weights (`1` ⇒ 10000,
/// `500m` ⇒ 5000, `0.5` ⇒ 5000, `100` ⇒ 1000000, `1k` ⇒ 10000000).
///
/// Accepts Kubernetes' syntax: an optional sign, a decimal number (`1`, `1.5`, `.5`, `5.`),
/// then one suffix: a decimal SI one (`n`, `u`, `m`, none, `k`, `M`, `G`, `T`, `P`, `E`), a
/// binary one (`Ki`, `Mi`, `Gi`, `Ti`, `Pi`, `Ei`) or a decimal exponent (`1e3`, `5E-1`).
/// Saturates: anything above `u32::MAX` decimillis is `u32::MAX`, and a negative value is 0
/// (the proxy ignores a weight of 0; Go would wrap it around). Leading and trailing
/// whitespace is ignored, as in Go's JSON decoding.
pub fn quantity_decimillis(quantity: &str) -> Result<u32, QuantityError> {
    let q = quantity.trim();
    if q.is_empty() {
        return Err(QuantityError::Empty);
    }
    let (negative, q) = match q.as_bytes()[0] {
        b'-' => (true, &q[1..]),
        b'+' => (false, &q[1..]),
        _ => (false, q),
    };
    let int_len = q.bytes().take_while(u8::is_ascii_digit).count();
    let (int, rest) = q.split_at(int_len);
    let (frac, suffix) = match rest.strip_prefix('.') {
        Some(rest) => rest.split_at(rest.bytes().take_while(u8::is_ascii_digit).count()),
        None => ("", rest),
    };
    if int.is_empty() && frac.is_empty() {
        return Err(QuantityError::Format);
    }

    // value = digits × 10^exp10 × 2^exp2
    let (mut exp10, exp2): (i64, u32) = match suffix {
        "n" => (-9, 0),
        "u" => (-6, 0),
        "m" => (-3, 0),
        "" => (0, 0),
        "k" => (3, 0),
        "M" => (6, 0),
        "G" => (9, 0),
        "T" => (12, 0),
        "P" => (15, 0),
        "E" => (18, 0),
        "Ki" => (0, 10),
        "Mi" => (0, 20),
        "Gi" => (0, 30),
        "Ti" => (0, 40),
        "Pi" => (0, 50),
        "Ei" => (0, 60),
        s if s.len() > 1 && (s.starts_with('e') || s.starts_with('E')) => {
            let digits = s[1..].trim_start_matches(['+', '-']);
            if digits.is_empty() || !digits.bytes().all(|c| c.is_ascii_digit()) {
                return Err(QuantityError::Format);
            }
            let exp = s[1..].parse::<i64>().map_err(|_| QuantityError::Suffix)?;
            (exp, 0)
        }
        s if s.bytes().all(|c| b"eEinumkKMGTP+-0123456789".contains(&c)) => {
            return Err(QuantityError::Suffix);
        }
        _ => return Err(QuantityError::Format),
    };

    // The significant digits, as an integer of at most 18 digits (so that it and a 2^60
    // multiplier fit in u128); `sticky` remembers non-zero digits dropped beyond those, which
    // only ever matter for rounding up.
    let all_digits = format!("{int}{frac}");
    exp10 -= frac.len() as i64;
    let significant = all_digits.trim_start_matches('0');
    let kept = significant.len().min(18);
    let sticky = significant[kept..].bytes().any(|c| c != b'0');
    exp10 += (significant.len() - kept) as i64;
    let mantissa: u128 = significant[..kept]
        .bytes()
        .fold(0, |acc, c| acc * 10 + u128::from(c - b'0'));
    if mantissa == 0 || negative {
        return Ok(0);
    }

    // millis = ceil(mantissa × 10^(exp10 + 3) × 2^exp2)
    let exp = exp10.saturating_add(3);
    let millis: Option<u128> = if exp >= 0 {
        u32::try_from(exp)
            .ok()
            .and_then(|e| 10u128.checked_pow(e))
            .and_then(|p| mantissa.checked_mul(p))
            .and_then(|m| m.checked_mul(1u128 << exp2))
    } else if exp < -38 {
        // mantissa × 2^60 < 10^37: a positive value below one milli.
        Some(1)
    } else {
        let neg = exp.unsigned_abs() as u32;
        let shared = exp2.min(neg);
        let numerator = mantissa << (exp2 - shared);
        let denominator = 5u128.pow(neg) << (neg - shared);
        let rounded_up = !numerator.is_multiple_of(denominator) || sticky;
        Some(numerator / denominator + u128::from(rounded_up))
    };
    Ok(millis
        .and_then(|m| m.checked_mul(10))
        .and_then(|d| u32::try_from(d).ok())
        .unwrap_or(u32::MAX))
}
