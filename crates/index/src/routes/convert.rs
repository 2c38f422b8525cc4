//! Conversion of Gateway API (and policy.linkerd.io) route matches and filters into the
//! domain form, validating as spec/policy.md §3.5 says. Every error names the field.

use gateway_api::{grpcroutes as grpc, httproutes as http_api};
use linkerd_k8s_api::gateway_api;

use crate::model::regex::{QuotedPattern, RegexError, check_regex};
use std::time::Duration;

use super::{
    Filter, GrpcRouteMatch, HeaderMatch, HeaderModifier, HttpRouteMatch, PathMatch, PathModifier,
    QueryParamMatch, RequestRedirect,
};

/// [`header_modifier`] of any Gateway API header-modifier body (`add`, `set`: name/value
/// pairs; `remove`: names): their generated types differ per route kind but share fields.
macro_rules! modifier_of {
    ($m:expr) => {
        $crate::routes::convert::header_modifier(
            $m.add
                .iter()
                .flatten()
                .map(|h| (h.name.as_str(), h.value.as_str())),
            $m.set
                .iter()
                .flatten()
                .map(|h| (h.name.as_str(), h.value.as_str())),
            $m.remove.iter().flatten().map(String::as_str),
        )
    };
}
pub(crate) use modifier_of;

/// Why a route's match or filter cannot be used; the whole route is then ignored (§3.5).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RouteError {
    #[error("path {0:?} must be absolute (start with '/')")]
    RelativePath(String),
    /// `regex`, quoted as written ([`QuotedPattern`]), at `field`: within its match
    /// (`path.value`), or in the route once [`rule_matches`] has placed it
    /// (`spec.rules[1].matches[0].path.value`).
    #[error(
        "{field}: invalid regular expression {}: {reason}",
        QuotedPattern(regex)
    )]
    InvalidRegex {
        field: String,
        regex: String,
        reason: String,
    },
    /// Only under a time budget (the webhooks'): a regex was not compiled because the object's
    /// had taken it all. `field` is where the regex is, as in `InvalidRegex`.
    #[error("{field}: {}", RegexError::OutOfTime(*.budget))]
    RegexOutOfTime { field: String, budget: Duration },
    #[error("invalid header name {0:?}")]
    InvalidHeaderName(String),
    /// Gateway API's `HTTPHeaderName` for a query parameter's name: 1 to 256 of the HTTP
    /// token characters (the proxy refuses an empty one, and with it the whole policy).
    #[error("invalid query parameter name {0:?}: 1 to 256 letters, digits or !#$%&'*+-.^_`|~")]
    InvalidQueryParamName(String),
    /// Gateway API's `PreciseHostname`: the proxy refuses a redirect whose host (and port) is
    /// no URI authority, and with it the whole policy.
    #[error(
        "redirect hostname {0:?} is not a hostname: dot-separated labels of lowercase \
         letters, digits and '-', at most 253 characters"
    )]
    InvalidRedirectHostname(String),
    #[error("invalid value for header {0:?}")]
    InvalidHeaderValue(String),
    #[error("unsupported GRPCRoute method match type")]
    GrpcRegexMethod,
    #[error("redirect path modifier needs replaceFullPath or replacePrefixMatch")]
    EmptyPathModifier,
    #[error("invalid redirect status code {0}")]
    InvalidStatus(i64),
    #[error("unsupported filter {0}")]
    UnsupportedFilter(&'static str),
}

impl RouteError {
    /// This error of `spec.rules[rule].matches[index]`: a regex's field then names its whole
    /// path in the route.
    fn in_match(self, rule: usize, index: usize) -> Self {
        let place = |field| format!("spec.rules[{rule}].matches[{index}].{field}");
        match self {
            Self::InvalidRegex {
                field,
                regex,
                reason,
            } => Self::InvalidRegex {
                field: place(field),
                regex,
                reason,
            },
            Self::RegexOutOfTime { field, budget } => Self::RegexOutOfTime {
                field: place(field),
                budget,
            },
            other => other,
        }
    }
}

/// The matches of `spec.rules[rule]` (`matches`, absent or a list), each converted by
/// `convert` ([`http_match`], [`grpc_match`]), in order. An error is the first match's,
/// with a regex named by its whole path (`spec.rules[1].matches[0].headers[1].value`), as
/// the webhook denies it and the index logs it.
pub fn rule_matches<'m, M: 'm, T>(
    rule: usize,
    matches: Option<&'m Vec<M>>,
    convert: impl Fn(&M) -> Result<T, RouteError>,
) -> Result<Vec<T>, RouteError> {
    matches
        .into_iter()
        .flatten()
        .enumerate()
        .map(|(index, matched)| convert(matched).map_err(|e| e.in_match(rule, index)))
        .collect()
}

/// `value` if it is a regex ([`check_regex`]: the index checks its syntax, a webhook compiles
/// it); `field` names where it is within its match (`headers[1].value`).
fn regex(value: &str, field: impl FnOnce() -> String) -> Result<String, RouteError> {
    match check_regex(value) {
        Ok(()) => Ok(value.to_string()),
        Err(RegexError::Invalid(reason)) => Err(RouteError::InvalidRegex {
            field: field(),
            regex: value.to_string(),
            reason,
        }),
        Err(RegexError::OutOfTime(budget)) => Err(RouteError::RegexOutOfTime {
            field: field(),
            budget,
        }),
    }
}

fn absolute(path: &str) -> Result<String, RouteError> {
    if path.starts_with('/') {
        Ok(path.to_string())
    } else {
        Err(RouteError::RelativePath(path.to_string()))
    }
}

fn header_name(name: &str) -> Result<String, RouteError> {
    ::http::HeaderName::from_bytes(name.as_bytes())
        .map(|_| name.to_string())
        .map_err(|_| RouteError::InvalidHeaderName(name.to_string()))
}

/// A query parameter's name, as Gateway API's `HTTPHeaderName` pattern allows it.
fn query_param_name(name: &str) -> Result<String, RouteError> {
    let token = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
    if (1..=256).contains(&name.len()) && name.bytes().all(token) {
        Ok(name.to_string())
    } else {
        Err(RouteError::InvalidQueryParamName(name.to_string()))
    }
}

fn header_pair(name: &str, value: &str) -> Result<(String, String), RouteError> {
    let name = header_name(name)?;
    ::http::HeaderValue::from_str(value)
        .map_err(|_| RouteError::InvalidHeaderValue(name.clone()))?;
    Ok((name, value.to_string()))
}

/// The header match at `headers[index]`.
fn header_match(
    index: usize,
    name: &str,
    value: &str,
    is_regex: bool,
) -> Result<HeaderMatch, RouteError> {
    if is_regex {
        Ok(HeaderMatch::Regex {
            name: header_name(name)?,
            regex: regex(value, || format!("headers[{index}].value"))?,
        })
    } else {
        let (name, value) = header_pair(name, value)?;
        Ok(HeaderMatch::Exact { name, value })
    }
}

/// An HTTPRoute match (Gateway API and policy.linkerd.io share the type).
pub fn http_match(m: &http_api::HttpRouteRulesMatches) -> Result<HttpRouteMatch, RouteError> {
    use http_api::{
        HttpRouteRulesMatchesHeadersType as H, HttpRouteRulesMatchesPathType as P,
        HttpRouteRulesMatchesQueryParamsType as Q,
    };
    let path = match &m.path {
        None => None,
        Some(p) => {
            let value = p.value.as_deref().unwrap_or("/");
            Some(match p.r#type {
                None | Some(P::PathPrefix) => PathMatch::Prefix(absolute(value)?),
                Some(P::Exact) => PathMatch::Exact(absolute(value)?),
                Some(P::RegularExpression) => {
                    PathMatch::Regex(regex(value, || "path.value".to_string())?)
                }
            })
        }
    };
    let headers = m
        .headers
        .iter()
        .flatten()
        .enumerate()
        .map(|(i, h)| header_match(i, &h.name, &h.value, h.r#type == Some(H::RegularExpression)))
        .collect::<Result<_, _>>()?;
    let query_params = m
        .query_params
        .iter()
        .flatten()
        .enumerate()
        .map(|(i, q)| {
            Ok(if q.r#type == Some(Q::RegularExpression) {
                QueryParamMatch::Regex {
                    name: query_param_name(&q.name)?,
                    regex: regex(&q.value, || format!("queryParams[{i}].value"))?,
                }
            } else {
                QueryParamMatch::Exact {
                    name: query_param_name(&q.name)?,
                    value: q.value.clone(),
                }
            })
        })
        .collect::<Result<_, RouteError>>()?;
    let method = m.method.as_ref().map(|m| {
        serde_json::to_value(m)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default()
    });
    Ok(HttpRouteMatch {
        path,
        headers,
        query_params,
        method,
    })
}

/// A GRPCRoute match; a regular-expression method match is an error.
pub fn grpc_match(m: &grpc::GrpcRouteRulesMatches) -> Result<GrpcRouteMatch, RouteError> {
    use grpc::{GrpcRouteRulesMatchesHeadersType as H, GrpcRouteRulesMatchesMethodType as M};
    let (service, method) = match &m.method {
        None => (None, None),
        Some(method) if method.r#type == Some(M::RegularExpression) => {
            return Err(RouteError::GrpcRegexMethod);
        }
        Some(method) => (method.service.clone(), method.method.clone()),
    };
    let headers = m
        .headers
        .iter()
        .flatten()
        .enumerate()
        .map(|(i, h)| header_match(i, &h.name, &h.value, h.r#type == Some(H::RegularExpression)))
        .collect::<Result<_, _>>()?;
    Ok(GrpcRouteMatch {
        service,
        method,
        headers,
    })
}

/// A header modifier from its `add`, `set` and `remove` lists.
pub fn header_modifier<'a>(
    add: impl IntoIterator<Item = (&'a str, &'a str)>,
    set: impl IntoIterator<Item = (&'a str, &'a str)>,
    remove: impl IntoIterator<Item = &'a str>,
) -> Result<HeaderModifier, RouteError> {
    Ok(HeaderModifier {
        add: add
            .into_iter()
            .map(|(n, v)| header_pair(n, v))
            .collect::<Result<_, _>>()?,
        set: set
            .into_iter()
            .map(|(n, v)| header_pair(n, v))
            .collect::<Result<_, _>>()?,
        remove: remove
            .into_iter()
            .map(header_name)
            .collect::<Result<_, _>>()?,
    })
}

/// A request redirect: a port outside 1..=65535 is dropped; a path modifier needs its value;
/// a hostname must be a DNS-1123 subdomain (Gateway API's `PreciseHostname`, which the CRD's
/// pattern enforces in upstream's schema and not in ours).
pub fn redirect(
    r: &http_api::HttpRouteRulesFiltersRequestRedirect,
) -> Result<RequestRedirect, RouteError> {
    use http_api::{
        HttpRouteRulesFiltersRequestRedirectPathType as T,
        HttpRouteRulesFiltersRequestRedirectScheme as S,
    };
    let path = match &r.path {
        None => None,
        Some(p) => Some(
            match (&p.r#type, &p.replace_full_path, &p.replace_prefix_match) {
                (T::ReplaceFullPath, Some(full), _) => PathModifier::Full(absolute(full)?),
                (T::ReplacePrefixMatch, _, Some(prefix)) => PathModifier::Prefix(absolute(prefix)?),
                _ => return Err(RouteError::EmptyPathModifier),
            },
        ),
    };
    let status = match r.status_code {
        None => None,
        Some(code) => Some(
            u16::try_from(code)
                .ok()
                .filter(|c| (100..=599).contains(c))
                .ok_or(RouteError::InvalidStatus(code))?,
        ),
    };
    Ok(RequestRedirect {
        scheme: r.scheme.as_ref().map(|s| match s {
            S::Http => "http".to_string(),
            S::Https => "https".to_string(),
        }),
        hostname: match &r.hostname {
            Some(host) if !linkerd_k8s_api::names::is_dns1123_subdomain(host) => {
                return Err(RouteError::InvalidRedirectHostname(host.clone()));
            }
            host => host.clone(),
        },
        path,
        port: r
            .port
            .and_then(|p| u16::try_from(p).ok())
            .filter(|p| *p != 0),
        status,
    })
}

/// A Gateway API HTTPRoute filter; mirrors, rewrites, CORS and extension refs are not
/// supported by the proxy and make the route unusable.
pub fn gateway_http_filter(f: &http_api::HttpRouteRulesFilters) -> Result<Filter, RouteError> {
    use http_api::HttpRouteRulesFiltersType as T;
    match f.r#type {
        T::RequestHeaderModifier => {
            let m = f
                .request_header_modifier
                .as_ref()
                .ok_or(RouteError::UnsupportedFilter(
                    "RequestHeaderModifier without a body",
                ))?;
            Ok(Filter::RequestHeaderModifier(modifier_of!(m)?))
        }
        T::ResponseHeaderModifier => {
            let m = f
                .response_header_modifier
                .as_ref()
                .ok_or(RouteError::UnsupportedFilter(
                    "ResponseHeaderModifier without a body",
                ))?;
            Ok(Filter::ResponseHeaderModifier(modifier_of!(m)?))
        }
        T::RequestRedirect => Ok(Filter::RequestRedirect(redirect(
            f.request_redirect
                .as_ref()
                .ok_or(RouteError::UnsupportedFilter(
                    "RequestRedirect without a body",
                ))?,
        )?)),
        T::RequestMirror => Err(RouteError::UnsupportedFilter("RequestMirror")),
        T::UrlRewrite => Err(RouteError::UnsupportedFilter("URLRewrite")),
        T::ExtensionRef => Err(RouteError::UnsupportedFilter("ExtensionRef")),
        T::Cors => Err(RouteError::UnsupportedFilter("CORS")),
    }
}

/// A GRPCRoute filter: header modifiers only.
pub fn grpc_filter(f: &grpc::GrpcRouteRulesFilters) -> Result<Filter, RouteError> {
    if let Some(m) = &f.request_header_modifier {
        return Ok(Filter::RequestHeaderModifier(modifier_of!(m)?));
    }
    if let Some(m) = &f.response_header_modifier {
        return Ok(Filter::ResponseHeaderModifier(modifier_of!(m)?));
    }
    if f.request_mirror.is_some() {
        return Err(RouteError::UnsupportedFilter("RequestMirror"));
    }
    Err(RouteError::UnsupportedFilter("ExtensionRef"))
}
