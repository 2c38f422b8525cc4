//! The rules of the route kinds (spec/policy.md §6): the policy.linkerd.io HTTPRoute, and the
//! Gateway API HTTPRoute, GRPCRoute, TLSRoute and TCPRoute. Matches and filters are checked by
//! converting them as the indexes do ([`linkerd_index::routes::convert`], §3.5).

use linkerd_index::{
    model::{
        profile::{DurationError, parse_go_duration},
        regex::RegexError,
    },
    routes::convert,
};
use linkerd_k8s_api::{
    gateway_api::{
        experimental::{
            tcproutes::TcpRouteSpec,
            tlsroutes::{TlsRouteParentRefs, TlsRouteRules},
        },
        grpcroutes::GrpcRouteSpec,
        httproutes::{self as gateway_http, HttpRouteSpec as GatewayHttpRouteSpec},
    },
    http_route::{HttpRouteFilter, HttpRouteTimeouts, v1beta3::HttpRouteSpec},
};
use serde::Deserialize;
use std::{collections::BTreeMap, time::Duration};

use super::{
    annotations,
    kinds::{EGRESS_NETWORK, SERVICE},
};

/// `spec` of a TLSRoute as `v1alpha2` (the version Linkerd's chart serves) writes it, over the
/// `gateway-api` crate's parent and rule types: that crate's TLSRoute is `v1`, which requires
/// `hostnames`, so a `v1alpha2` route without them would not decode and would escape the
/// single-rule check.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TlsRouteSpec {
    #[serde(default)]
    pub parent_refs: Option<Vec<TlsRouteParentRefs>>,
    #[serde(default)]
    pub hostnames: Option<Vec<String>>,
    pub rules: Vec<TlsRouteRules>,
}

/// The denial for `error` in a rule's matches ([`convert::rule_matches`]). A regex is named by
/// where it is and quoted as written (control characters escaped); a review cut short by its
/// regexes' time budget says where judging stopped, not that a pattern there is invalid.
fn match_error(error: convert::RouteError) -> String {
    match error {
        invalid @ convert::RouteError::InvalidRegex { .. } => {
            linkerd_runtime::log::escape_controls_owned(invalid.to_string())
        }
        convert::RouteError::RegexOutOfTime { field, budget } => format!(
            "checked only up to {field}: {}",
            RegexError::OutOfTime(budget)
        ),
        other => other.to_string(),
    }
}

/// The part of a parent reference the rules look at.
struct Parent<'a> {
    group: Option<&'a str>,
    kind: Option<&'a str>,
    port: Option<i32>,
}

/// Which retry annotations a route kind reads.
#[derive(Copy, Clone)]
enum Protocol {
    Http,
    Grpc,
}

/// The policy.linkerd.io HTTPRoute: (1) an EgressNetwork parent names a port; (2) with a
/// Service or EgressNetwork parent, the retry and timeout annotations parse; (3) every match
/// and filter converts; (4) rule timeouts are not negative and `backendRequest` does not
/// exceed `request`; (5) what Gateway API's schema refuses ([`schema_rules`]).
pub fn policy_http_route(
    annotations: &BTreeMap<String, String>,
    spec: &HttpRouteSpec,
) -> Result<(), String> {
    outbound_parents(
        annotations,
        Protocol::Http,
        spec.parent_refs.iter().flatten().map(|p| Parent {
            group: p.group.as_deref(),
            kind: p.kind.as_deref(),
            port: p.port,
        }),
    )?;
    let rules = spec.rules.as_deref().unwrap_or_default();
    for (r, rule) in rules.iter().enumerate() {
        convert::rule_matches(r, rule.matches.as_ref(), convert::http_match)
            .map_err(match_error)?;
        for filter in rule.filters.iter().flatten() {
            policy_filter(filter)?;
        }
        let redirects = rule.filters.iter().flatten().filter_map(|f| match f {
            HttpRouteFilter::RequestRedirect { request_redirect } => Some(request_redirect),
            _ => None,
        });
        schema_rules(r, rule.matches.as_ref(), redirects)?;
    }
    for timeouts in rules.iter().filter_map(|r| r.timeouts.as_ref()) {
        rule_timeouts(timeouts)?;
    }
    Ok(())
}

/// The Gateway API HTTPRoute: rules (1) to (3) and (5) of [`policy_http_route`], where only
/// header modifier and redirect filters are checked (mirrors, rewrites and extension refs are
/// admitted); then every Service backend names a non-zero port (`invalid backendRef`).
pub fn gateway_http_route(
    annotations: &BTreeMap<String, String>,
    spec: &GatewayHttpRouteSpec,
) -> Result<(), String> {
    use gateway_http::HttpRouteRulesFiltersType as T;
    outbound_parents(
        annotations,
        Protocol::Http,
        spec.parent_refs.iter().flatten().map(|p| Parent {
            group: p.group.as_deref(),
            kind: p.kind.as_deref(),
            port: p.port,
        }),
    )?;
    let rules = spec.rules.as_deref().unwrap_or_default();
    for (r, rule) in rules.iter().enumerate() {
        convert::rule_matches(r, rule.matches.as_ref(), convert::http_match)
            .map_err(match_error)?;
        for filter in rule.filters.iter().flatten() {
            if matches!(
                filter.r#type,
                T::RequestHeaderModifier | T::ResponseHeaderModifier | T::RequestRedirect
            ) {
                convert::gateway_http_filter(filter).map_err(|e| e.to_string())?;
            }
        }
        let redirects = rule
            .filters
            .iter()
            .flatten()
            .filter_map(|f| match f.r#type {
                T::RequestRedirect => f.request_redirect.as_ref(),
                _ => None,
            });
        schema_rules(r, rule.matches.as_ref(), redirects)?;
    }
    service_backends(
        rules
            .iter()
            .flat_map(|r| r.backend_refs.iter().flatten())
            .map(|b| (b.group.as_deref(), b.kind.as_deref(), b.port)),
    )
}

/// GRPCRoute: rules (1) and (2) of [`policy_http_route`] (with the gRPC retry annotation);
/// every match converts (no regular-expression method match); header modifier filters are
/// valid; every Service backend names a non-zero port.
pub fn grpc_route(
    annotations: &BTreeMap<String, String>,
    spec: &GrpcRouteSpec,
) -> Result<(), String> {
    outbound_parents(
        annotations,
        Protocol::Grpc,
        spec.parent_refs.iter().flatten().map(|p| Parent {
            group: p.group.as_deref(),
            kind: p.kind.as_deref(),
            port: p.port,
        }),
    )?;
    let rules = spec.rules.as_deref().unwrap_or_default();
    for (r, rule) in rules.iter().enumerate() {
        convert::rule_matches(r, rule.matches.as_ref(), convert::grpc_match)
            .map_err(match_error)?;
        for filter in rule.filters.iter().flatten() {
            if filter.request_header_modifier.is_some() || filter.response_header_modifier.is_some()
            {
                convert::grpc_filter(filter).map_err(|e| e.to_string())?;
            }
        }
    }
    service_backends(
        rules
            .iter()
            .flat_map(|r| r.backend_refs.iter().flatten())
            .map(|b| (b.group.as_deref(), b.kind.as_deref(), b.port)),
    )
}

/// TLSRoute: an EgressNetwork parent names a port; exactly one rule.
pub fn tls_route(spec: &TlsRouteSpec) -> Result<(), String> {
    egress_parents_have_ports(spec.parent_refs.iter().flatten().map(|p| Parent {
        group: p.group.as_deref(),
        kind: p.kind.as_deref(),
        port: p.port,
    }))?;
    if spec.rules.len() != 1 {
        return Err("TlsRoute supports a single rule only".into());
    }
    Ok(())
}

/// TCPRoute: an EgressNetwork parent names a port; exactly one rule.
pub fn tcp_route(spec: &TcpRouteSpec) -> Result<(), String> {
    egress_parents_have_ports(spec.parent_refs.iter().flatten().map(|p| Parent {
        group: p.group.as_deref(),
        kind: p.kind.as_deref(),
        port: p.port,
    }))?;
    if spec.rules.len() != 1 {
        return Err("TcpRoute supports a single rule only".into());
    }
    Ok(())
}

/// Rules (1) and (2): parents, and the annotations the outbound index reads when the route
/// has an outbound parent.
fn outbound_parents<'a>(
    annotations: &BTreeMap<String, String>,
    protocol: Protocol,
    parents: impl Iterator<Item = Parent<'a>> + Clone,
) -> Result<(), String> {
    egress_parents_have_ports(parents.clone())?;
    let outbound = parents.into_iter().any(|p| {
        SERVICE.matches_opt(p.group, p.kind) || EGRESS_NETWORK.matches_opt(p.group, p.kind)
    });
    if outbound {
        annotations::check_timeouts(annotations)?;
        match protocol {
            Protocol::Http => annotations::check_http_retry(annotations)?,
            Protocol::Grpc => annotations::check_grpc_retry(annotations)?,
        }
    }
    Ok(())
}

fn egress_parents_have_ports<'a>(
    mut parents: impl Iterator<Item = Parent<'a>>,
) -> Result<(), String> {
    if parents.any(|p| EGRESS_NETWORK.matches_opt(p.group, p.kind) && p.port.is_none()) {
        return Err("cannot target an EgressNetwork without specifying a port".into());
    }
    Ok(())
}

/// Backends `(group, kind, port)` that are Services (kind defaults to `Service`) need a
/// non-zero port. Other kinds are admitted.
fn service_backends<'a>(
    mut backends: impl Iterator<Item = (Option<&'a str>, Option<&'a str>, Option<i32>)>,
) -> Result<(), String> {
    let missing = backends.find(|(group, kind, port)| {
        SERVICE.matches(*group, kind.unwrap_or("Service")) && port.unwrap_or(0) == 0
    });
    match missing {
        // The cause ("cannot reference a Service without a port") is in the log only: the
        // denial message is upstream's.
        Some((_, _, port)) => {
            tracing::debug!(?port, "cannot reference a Service without a port");
            Err("invalid backendRef".into())
        }
        None => Ok(()),
    }
}

fn policy_filter(filter: &HttpRouteFilter) -> Result<(), String> {
    // The request and response modifiers are distinct generated types of the same shape.
    macro_rules! header_modifier {
        ($m:expr) => {
            convert::header_modifier(
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
            .map(drop)
        };
    }
    match filter {
        HttpRouteFilter::RequestHeaderModifier {
            request_header_modifier: m,
        } => header_modifier!(m),
        HttpRouteFilter::ResponseHeaderModifier {
            response_header_modifier: m,
        } => header_modifier!(m),
        HttpRouteFilter::RequestRedirect { request_redirect } => {
            convert::redirect(request_redirect).map(drop)
        }
    }
    .map_err(|e| e.to_string())
}

/// Rule (5) of the HTTPRoutes: what Gateway API's HTTPRoute schema refuses at the API server,
/// which upstream's policy.linkerd.io HTTPRoute CRD shares and `deploy/crds/` does not carry
/// (the index reads such routes as spec/policy.md §3.5 says, dropping a bad port): a rule
/// repeats its RequestRedirect filter; a redirect's port is outside 1..=65535 or its status
/// is not a redirect's (301, 302, 303, 307, 308); a redirect that replaces the matched prefix
/// is in a rule without exactly one PathPrefix match (the proxy fails what such a rule
/// matches); a match repeats a header's or a query parameter's name.
fn schema_rules<'a>(
    r: usize,
    matches: Option<&Vec<gateway_http::HttpRouteRulesMatches>>,
    redirects: impl Iterator<Item = &'a gateway_http::HttpRouteRulesFiltersRequestRedirect>,
) -> Result<(), String> {
    use gateway_http::{
        HttpRouteRulesFiltersRequestRedirectPathType as Modifier,
        HttpRouteRulesMatchesPathType as Path,
    };
    let redirects: Vec<_> = redirects.collect();
    if redirects.len() > 1 {
        return Err(format!(
            "spec.rules[{r}].filters: RequestRedirect filter cannot be repeated"
        ));
    }
    for redirect in redirects {
        if let Some(port) = redirect.port.filter(|p| !(1..=65535).contains(p)) {
            return Err(format!(
                "spec.rules[{r}] requestRedirect.port {port} is not a port (1 to 65535)"
            ));
        }
        if let Some(code) = redirect
            .status_code
            .filter(|c| ![301, 302, 303, 307, 308].contains(c))
        {
            return Err(format!(
                "spec.rules[{r}] requestRedirect.statusCode {code} is not a redirect status \
                 (301, 302, 303, 307 or 308)"
            ));
        }
        // A rule without matches, or a match without a path, matches the `/` prefix (the
        // API server's defaults).
        let one_prefix = matches.is_none_or(|all| {
            all.len() <= 1
                && all.iter().all(|m| {
                    m.path
                        .as_ref()
                        .is_none_or(|p| matches!(p.r#type, None | Some(Path::PathPrefix)))
                })
        });
        if redirect.path.as_ref().map(|p| &p.r#type) == Some(&Modifier::ReplacePrefixMatch)
            && !one_prefix
        {
            return Err(format!(
                "spec.rules[{r}]: when using RequestRedirect filter with \
                 path.replacePrefixMatch, exactly one PathPrefix match must be specified"
            ));
        }
    }
    for (m, one) in matches.into_iter().flatten().enumerate() {
        let headers = one.headers.iter().flatten().map(|h| h.name.as_str());
        if let Some(name) = repeated(headers) {
            return Err(format!(
                "spec.rules[{r}].matches[{m}].headers: header {name:?} is matched twice"
            ));
        }
        let query = one.query_params.iter().flatten().map(|q| q.name.as_str());
        if let Some(name) = repeated(query) {
            return Err(format!(
                "spec.rules[{r}].matches[{m}].queryParams: query parameter {name:?} is matched twice"
            ));
        }
    }
    Ok(())
}

/// The first name `names` holds twice.
fn repeated<'a>(names: impl Iterator<Item = &'a str>) -> Option<&'a str> {
    let mut seen = std::collections::HashSet::new();
    names.into_iter().find(|name| !seen.insert(*name))
}

/// Rule (4) of the policy HTTPRoute: Go-style `request` and `backendRequest` timeouts.
fn rule_timeouts(timeouts: &HttpRouteTimeouts) -> Result<(), String> {
    fn parse(name: &str, value: Option<&str>) -> Result<Option<Duration>, String> {
        match value.map(parse_go_duration) {
            None => Ok(None),
            Some(Ok(d)) => Ok(Some(d)),
            Some(Err(DurationError::Negative(_))) => {
                Err(format!("{name} timeout must not be negative"))
            }
            Some(Err(e)) => Err(format!("invalid {name} timeout: {e}")),
        }
    }
    let backend_request = parse("backendRequest", timeouts.backend_request.as_deref())?;
    let request = parse("request", timeouts.request.as_deref())?;
    if let (Some(request), Some(backend_request)) = (request, backend_request)
        && backend_request > request
    {
        return Err(format!(
            "backendRequest timeout ({backend_request:?}) must not be greater than request timeout ({request:?})"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use linkerd_index::model::regex::with_time_budget;
    use serde_json::json;

    /// The policy HTTPRoute denial for `rules`, judged within `budget`.
    fn policy_denial(rules: serde_json::Value, budget: Duration) -> Option<String> {
        let spec: HttpRouteSpec = serde_json::from_value(json!({
            "parentRefs": [{"group": "policy.linkerd.io", "kind": "Server", "name": "web"}],
            "rules": rules,
        }))
        .unwrap();
        with_time_budget(budget, || policy_http_route(&BTreeMap::new(), &spec)).err()
    }

    /// The webhook compiles a route's regexes, which the index only checks for syntax: one
    /// too large once compiled is denied here, and the index's check finds nothing to warn of.
    #[test]
    fn regexes_too_large_compiled_are_denied() {
        let large = r"/\w{1000}\w{1000}";
        let rules = json!([{"matches": [{"path": {"type": "RegularExpression", "value": large}}]}]);
        let denial = policy_denial(rules, Duration::from_secs(60)).expect("denied");
        assert!(
            denial.starts_with(&format!(
                r#"spec.rules[0].matches[0].path.value: invalid regular expression "{large}": "#
            )) && denial.contains("size limit"),
            "{denial}"
        );
    }

    /// A review cut short by its regexes' time budget says where checking stopped and calls
    /// no pattern invalid (tester finding: `invalid regular expression "/\\w{20}597": not
    /// compiled: ...` for a valid pattern).
    #[test]
    fn regexes_out_of_time_are_not_called_invalid() {
        let rules = json!([
            {"matches": [{"path": {"type": "PathPrefix", "value": "/"}}]},
            {"matches": [
                {"path": {"type": "Exact", "value": "/a"}},
                {"headers": [
                    {"name": "x-a", "value": "b"},
                    {"type": "RegularExpression", "name": "x-id", "value": r"/\w{20}597"},
                ]},
            ]},
        ]);
        assert_eq!(
            policy_denial(rules.clone(), Duration::ZERO).unwrap(),
            "checked only up to spec.rules[1].matches[1].headers[1].value: not compiled: the object's regular expressions took more than 0 s to compile"
        );
        assert_eq!(policy_denial(rules, Duration::from_secs(60)), None);
    }

    /// An invalid regex is named by where it is and quoted as written (tester finding: the
    /// pattern came `{:?}`-escaped, `"/\\w("`, with no rule or match).
    #[test]
    fn invalid_regexes_are_quoted_as_written_where_they_are() {
        let rules = |matches: serde_json::Value| json!([{"matches": [{"path": {"type": "PathPrefix", "value": "/"}}]}, {"matches": matches}]);
        let denial = |matches| policy_denial(rules(matches), Duration::from_secs(60)).unwrap();
        assert_eq!(
            denial(json!([
                {"method": "GET"},
                {"method": "GET"},
                {"path": {"type": "RegularExpression", "value": r"/\w+("}},
            ])),
            r#"spec.rules[1].matches[2].path.value: invalid regular expression "/\w+(": unclosed group"#
        );
        assert_eq!(
            denial(json!([{"queryParams": [
                {"name": "a", "value": "b"},
                {"type": "RegularExpression", "name": "q", "value": "[a-"},
            ]}])),
            r#"spec.rules[1].matches[0].queryParams[1].value: invalid regular expression "[a-": unclosed character class"#
        );
        // Control characters are shown escaped, backslashes as written.
        assert_eq!(
            denial(json!([{"headers": [
                {"type": "RegularExpression", "name": "x-id", "value": "\u{1}\\d("},
            ]}])),
            r#"spec.rules[1].matches[0].headers[0].value: invalid regular expression "\u{1}\d(": unclosed group"#
        );
    }
}
