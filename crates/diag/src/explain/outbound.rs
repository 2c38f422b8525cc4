//! `dst-diag explain outbound`: where a client proxy sends a request, from the
//! `OutboundPolicy` it receives for the target: the route and rule that match
//! ([`super::matching`], as linkerd2-proxy's outbound router decides), that rule's filters,
//! backends with their weights and the `Destination.Get` path each resolves, timeouts and
//! retries.
//!
//! A `Detect` target is taken as HTTP/1 (its HTTP/2 routes are the same routes). Opaque and TLS
//! targets have no request matches; their first route carries every connection.
//!
//! The policy is first checked whole, as the proxy converts it: one match it cannot convert
//! anywhere makes the proxy use a policy that fails every request instead.
//!
//! A rule whose filters fail everything it matches (a failure injector without a ratio or with
//! ratio 1, as an EgressNetwork's `Deny` routes carry; a `Forbidden` opaque or TLS filter)
//! denies: the proxy answers the request itself and sends it nowhere.

use linkerd2_proxy_api::{
    http_route::Ratio,
    outbound::{
        GrpcRoute, HttpRoute, OutboundPolicy, TrafficSpec, grpc_route, http_route, opaque_route,
        proxy_protocol, tls_route, traffic_spec::Target,
    },
};
use serde_json::Value;

use super::{
    Decision, ExplainError,
    inbound::build_request,
    line,
    matching::{self, DEFAULT_HTTP_SCORE, GrpcScore, Request, RouteChoice, RouteMatches},
    source::PolicySource,
};
use crate::output::{
    grpc_match_text, grpc_retry_text, grpc_timeouts_text, http_match_text, http_retry_text,
    http_timeouts_text, metadata_text, outbound_policy_json,
};

/// The flags of `dst-diag explain outbound`.
#[derive(Clone, Debug, clap::Args)]
pub struct OutboundArgs {
    /// What the client calls: a Service authority (`web-svc.emojivoto.svc.cluster.local:80`)
    /// or an address (`10.96.34.218:80`).
    pub target: String,

    /// The client's namespace: consumer routes of that namespace apply (spec/policy.md §5.4).
    #[arg(long, default_value = "default", value_parser = linkerd_runtime::parse_namespace)]
    pub source_namespace: String,

    /// The request's method (default GET; POST for gRPC).
    #[arg(long)]
    pub method: Option<String>,

    /// The request's path, with an optional `?query` (default `/`).
    #[arg(long)]
    pub path: Option<String>,

    /// A gRPC call to this service: POST to `/SERVICE/METHOD`.
    #[arg(long, value_name = "SERVICE", conflicts_with = "path", value_parser = super::grpc_name)]
    pub grpc_service: Option<String>,

    /// The gRPC method, with `--grpc-service`.
    #[arg(long, value_name = "METHOD", requires = "grpc_service", value_parser = super::grpc_name)]
    pub grpc_method: Option<String>,

    /// A request header, `NAME:VALUE` (repeatable); `host:NAME` overrides the target's host.
    #[arg(long = "header", value_name = "NAME:VALUE")]
    pub headers: Vec<String>,

    /// Where the policy comes from, and the controller flags used offline.
    #[command(flatten)]
    pub source: PolicySource,
}

// === impl OutboundArgs ===

impl OutboundArgs {
    /// The request a proxy in `--source-namespace` sends, as `dst-diag policy outbound` does.
    pub fn traffic_spec(&self) -> TrafficSpec {
        let target = match self.target.parse::<std::net::SocketAddr>() {
            Ok(addr) => Target::Addr(addr.into()),
            Err(_) => Target::Authority(self.target.clone()),
        };
        TrafficSpec {
            source_workload: format!("{}:dst-diag", self.source_namespace),
            target: Some(target),
        }
    }

    /// The request the flags describe, for the target's host unless a `host` header is given.
    pub fn request(&self, grpc: bool) -> Result<Request, ExplainError> {
        let grpc = grpc || self.grpc_service.is_some();
        let method = match &self.method {
            Some(m) if m.trim().is_empty() => {
                return Err(ExplainError::InvalidArgument {
                    flag: "--method",
                    value: m.clone(),
                    reason: "empty".into(),
                });
            }
            Some(m) => m.trim().to_ascii_uppercase(),
            None if grpc => "POST".into(),
            None => "GET".into(),
        };
        let path = match (&self.grpc_service, &self.path) {
            (Some(service), _) => format!(
                "/{service}/{}",
                self.grpc_method.as_deref().unwrap_or_default()
            ),
            (None, Some(path)) => path.clone(),
            (None, None) => "/".into(),
        };
        build_request(
            method,
            &path,
            &self.headers,
            Some(target_host(&self.target)),
        )
    }

    /// The explanation and the decision (routed, or no route).
    ///
    /// Errors: [`ExplainError::InvalidArgument`] for an IP address without a port, which a
    /// proxy never asks for; then those of the policy source and of the request's flags.
    pub async fn explain(&self) -> Result<(String, Decision), ExplainError> {
        if let Some(example) = crate::client::with_example_port(&self.target) {
            return Err(ExplainError::InvalidArgument {
                flag: "TARGET",
                value: self.target.clone(),
                reason: format!(
                    "an IP address without a port: a proxy asks for IP:PORT, such as `{example}`"
                ),
            });
        }
        let policy = self
            .source
            .outbound_policy(self.traffic_spec(), &self.target)
            .await?;
        let is_grpc = matches!(
            policy.protocol.as_ref().and_then(|p| p.kind.as_ref()),
            Some(proxy_protocol::Kind::Grpc(_))
        );
        let request = self.request(is_grpc)?;
        explain_policy(&policy, &request)
    }
}

/// The host of a target: `web-svc.emojivoto.svc.cluster.local:80` → the name, an `ip:port` →
/// the IP.
fn target_host(target: &str) -> String {
    if let Ok(addr) = target.parse::<std::net::SocketAddr>() {
        return addr.ip().to_string();
    }
    match target.rsplit_once(':') {
        Some((host, port)) if port.bytes().all(|b| b.is_ascii_digit()) => host.to_string(),
        _ => target.to_string(),
    }
}

/// Routes `request` with `policy`, as the client proxy would.
///
/// Errors: [`ExplainError::InvalidPolicy`] for a policy without a protocol.
pub fn explain_policy(
    policy: &OutboundPolicy,
    request: &Request,
) -> Result<(String, Decision), ExplainError> {
    let kind = policy
        .protocol
        .as_ref()
        .and_then(|p| p.kind.as_ref())
        .ok_or_else(|| ExplainError::InvalidPolicy("the OutboundPolicy has no protocol".into()))?;
    let summary = outbound_policy_json(policy);
    let mut lines = vec![
        line("policy", metadata_text(policy.metadata.as_ref())),
        line("protocol", summary["protocol"].as_str().unwrap_or_default()),
    ];
    // `summary["routes"]` lists a Detect target's HTTP/1 routes, then its opaque ones.
    let routes_json = summary["routes"].as_array().cloned().unwrap_or_default();
    if let Some(problem) = invalid_routes(kind) {
        lines.push(line("request", request.text()));
        lines.push(line("invalid", problem));
        let decision = Decision::Denied(INVALID_POLICY.into());
        lines.push(line("decision", format!("denied: {INVALID_POLICY}")));
        return Ok((crate::output::join_lines(&lines), decision));
    }
    let decision = match kind {
        proxy_protocol::Kind::Detect(d) => {
            let routes = d.http1.as_ref().map(|h| &h.routes[..]).unwrap_or_default();
            lines.push(line("request", request.text()));
            explain_http(routes, request, &routes_json, &mut lines)
        }
        proxy_protocol::Kind::Http1(h) => {
            lines.push(line("request", request.text()));
            explain_http(&h.routes, request, &routes_json, &mut lines)
        }
        proxy_protocol::Kind::Http2(h) => {
            lines.push(line("request", request.text()));
            explain_http(&h.routes, request, &routes_json, &mut lines)
        }
        proxy_protocol::Kind::Grpc(g) => {
            lines.push(line("request", request.text()));
            explain_grpc(&g.routes, request, &routes_json, &mut lines)
        }
        proxy_protocol::Kind::Opaque(_) | proxy_protocol::Kind::Tls(_) => {
            lines.push(line(
                "request",
                "a connection (the target is not HTTP: request flags do not apply)",
            ));
            // The first rule of the first route: the one the proxy uses.
            let forbidden = match kind {
                proxy_protocol::Kind::Opaque(o) => o
                    .routes
                    .first()
                    .and_then(|r| r.rules.first())
                    .is_some_and(|rule| {
                        rule.filters.iter().any(|f| {
                            matches!(f.kind, Some(opaque_route::filter::Kind::Forbidden(_)))
                        })
                    }),
                proxy_protocol::Kind::Tls(t) => t
                    .routes
                    .first()
                    .and_then(|r| r.rules.first())
                    .is_some_and(|rule| {
                        rule.filters
                            .iter()
                            .any(|f| matches!(f.kind, Some(tls_route::filter::Kind::Forbidden(_))))
                    }),
                _ => false,
            };
            match routes_json.first() {
                Some(route) => {
                    let name = route["route"].as_str().unwrap_or_default().to_string();
                    lines.push(format!(
                        "route {name}: selected (the first route carries every connection)"
                    ));
                    push_backends(route, 0, &mut lines);
                    if forbidden {
                        Decision::Denied(format!(
                            "route {name} forbids every connection (the proxy closes it)"
                        ))
                    } else if !sends_to_a_backend(route, 0) {
                        Decision::Denied(format!("route {name} {NO_BACKEND}"))
                    } else {
                        Decision::Allowed(format!("routed by route {name}"))
                    }
                }
                None => Decision::Denied(
                    "the policy has no route (the proxy fails the connection)".into(),
                ),
            }
        }
    };
    lines.push(match &decision {
        Decision::Allowed(text) => line("decision", text),
        Decision::Denied(reason) => line("decision", format!("denied: {reason}")),
    });
    Ok((crate::output::join_lines(&lines), decision))
}

/// What the proxy does with a policy it cannot convert (linkerd2-proxy's
/// `ClientPolicy::invalid`, the policy it uses instead).
const INVALID_POLICY: &str = "the proxy refuses the whole policy as invalid and uses one that \
     fails every request with an internal error (\"invalid client policy configuration\")";

/// The first match of the policy's HTTP or gRPC routes the proxy cannot convert
/// ([`matching::invalid_match`]), HTTP/1 routes before HTTP/2 ones; opaque and TLS routes have
/// no matches.
fn invalid_routes(kind: &proxy_protocol::Kind) -> Option<String> {
    let http = |routes: &[HttpRoute]| {
        let name = |i: usize| metadata_text(routes[i].metadata.as_ref());
        matching::invalid_match(routes, matching::check_http_match, name)
            .or_else(|| matching::invalid_redirect(routes, name))
    };
    match kind {
        proxy_protocol::Kind::Detect(d) => d
            .http1
            .as_ref()
            .and_then(|h| http(&h.routes))
            .or_else(|| d.http2.as_ref().and_then(|h| http(&h.routes))),
        proxy_protocol::Kind::Http1(h) => http(&h.routes),
        proxy_protocol::Kind::Http2(h) => http(&h.routes),
        proxy_protocol::Kind::Grpc(g) => {
            matching::invalid_match(&g.routes, matching::check_grpc_match, |i| {
                metadata_text(g.routes[i].metadata.as_ref())
            })
        }
        proxy_protocol::Kind::Opaque(_) | proxy_protocol::Kind::Tls(_) => None,
    }
}

fn explain_http(
    routes: &[HttpRoute],
    request: &Request,
    routes_json: &[Value],
    lines: &mut Vec<String>,
) -> Decision {
    let choice = matching::choose(
        routes,
        request,
        matching::http_score,
        DEFAULT_HTTP_SCORE,
        http_match_text,
    );
    let Some((i, r)) = push_choice(&choice, routes_json, lines) else {
        return Decision::Denied("no route matches the request (the proxy fails it)".into());
    };
    let Some(rule) = routes.get(i).and_then(|route| route.rules.get(r)) else {
        return decide(routes_json, i, r, None);
    };
    lines.push(line("timeouts", http_timeouts_text(rule)));
    lines.push(line("retries", http_retry_text(rule.retry.as_ref())));
    // A redirect answers every request the rule matches before any backend is chosen.
    if let Some(redirect) = rule.filters.iter().find_map(|f| match &f.kind {
        Some(http_route::filter::Kind::Redirect(r)) => Some(r),
        _ => None,
    }) {
        let matched = matching::selected_match(&choice, i).and_then(|m| rule.matches.get(m));
        let which = route_rule(routes_json, i, r);
        return match matching::redirect_answer(redirect, matched) {
            Ok(answer) => Decision::Allowed(format!(
                "redirected by {which}: {answer} (no backend is called)"
            )),
            Err(why) => Decision::Denied(format!("{which} {why}")),
        };
    }
    let failure = rule.filters.iter().find_map(|f| match &f.kind {
        Some(http_route::filter::Kind::FailureInjector(fi)) if always(fi.ratio.as_ref()) => {
            Some(format!(
                "fails every request it matches: HTTP {} {:?}",
                fi.status, fi.message
            ))
        }
        _ => None,
    });
    decide(routes_json, i, r, failure)
}

fn explain_grpc(
    routes: &[GrpcRoute],
    request: &Request,
    routes_json: &[Value],
    lines: &mut Vec<String>,
) -> Decision {
    let choice = matching::choose(
        routes,
        request,
        matching::grpc_score,
        GrpcScore::default(),
        grpc_match_text,
    );
    let Some((i, r)) = push_choice(&choice, routes_json, lines) else {
        return Decision::Denied("no route matches the call (the proxy fails it)".into());
    };
    let Some(rule) = routes.get(i).and_then(|route| route.rules.get(r)) else {
        return decide(routes_json, i, r, None);
    };
    lines.push(line("timeouts", grpc_timeouts_text(rule)));
    lines.push(line("retries", grpc_retry_text(rule.retry.as_ref())));
    let failure = rule.filters.iter().find_map(|f| match &f.kind {
        Some(grpc_route::filter::Kind::FailureInjector(fi)) if always(fi.ratio.as_ref()) => {
            Some(format!(
                "fails every call it matches: gRPC status {} {:?}",
                fi.code, fi.message
            ))
        }
        _ => None,
    });
    decide(routes_json, i, r, failure)
}

/// Routed by rule `rule` of route `route`, or denied when that rule fails everything it
/// matches: `failure` says how (the proxy answers for the backend), or the rule sends to no
/// backend ([`sends_to_a_backend`]).
fn decide(routes_json: &[Value], route: usize, rule: usize, failure: Option<String>) -> Decision {
    let which = route_rule(routes_json, route, rule);
    match failure {
        Some(how) => Decision::Denied(format!("{which} {how} (the proxy answers it)")),
        None if !routes_json
            .get(route)
            .is_some_and(|r| sends_to_a_backend(r, rule)) =>
        {
            Decision::Denied(format!("{which} {NO_BACKEND}"))
        }
        None => Decision::Allowed(format!("routed by {which}")),
    }
}

/// Why a rule that [`sends_to_a_backend`] denies fails what it matches.
const NO_BACKEND: &str = "sends to no backend that can answer (it has none, only backends of \
     weight 0, or only backends that fail every request): the proxy fails what it matches";

/// Whether rule `rule` of `route` (its JSON) has a backend of weight above 0 that does not
/// fail every request. The proxy leaves out the backends of weight 0 (a Gateway API weight of
/// 0 sends no traffic), and a backend the controller could not resolve (a Service that does
/// not exist) carries a filter that fails every request: a rule with neither kind left fails
/// every request it matches.
fn sends_to_a_backend(route: &Value, rule: usize) -> bool {
    route["rules"][rule]["backends"]
        .as_array()
        .is_some_and(|backends| {
            backends.iter().any(|b| {
                b["weight"].as_u64() > Some(0) && b["failures"].as_array().is_none_or(Vec::is_empty)
            })
        })
}

/// `route NAME rule N` (N from 1).
fn route_rule(routes_json: &[Value], route: usize, rule: usize) -> String {
    let name = routes_json
        .get(route)
        .and_then(|r| r["route"].as_str())
        .unwrap_or_default();
    format!("route {name} rule {}", rule + 1)
}

/// Whether a failure injector with `ratio` fails every request: no ratio (the proxy API's
/// "always"), or a ratio of at least 1.
fn always(ratio: Option<&Ratio>) -> bool {
    ratio.is_none_or(|r| r.denominator > 0 && r.numerator >= r.denominator)
}

/// One line per route, then the selected rule's filters and backends; the selected route and
/// rule indexes.
fn push_choice<S: Ord + Copy>(
    choice: &RouteChoice<S>,
    routes_json: &[Value],
    lines: &mut Vec<String>,
) -> Option<(usize, usize)> {
    let name = |i: usize| {
        routes_json
            .get(i)
            .and_then(|r| r["route"].as_str())
            .unwrap_or("<no name>")
            .to_string()
    };
    lines.extend(matching::route_lines(choice, name));
    let selected = choice.selected?;
    let rule = matching::selected_rule(choice, selected)?;
    if let Some(route) = routes_json.get(selected) {
        push_backends(route, rule, lines);
    }
    Some((selected, rule))
}

/// The filters and backends of rule `rule` of a route's summary.
fn push_backends(route: &Value, rule: usize, lines: &mut Vec<String>) {
    let rule = &route["rules"][rule];
    let strings = |v: &Value| -> Vec<String> {
        v.as_array()
            .into_iter()
            .flatten()
            .filter_map(|s| s.as_str().map(String::from))
            .collect()
    };
    let filters = strings(&rule["filters"]);
    if !filters.is_empty() {
        lines.push(line("filters", filters.join("; ")));
    }
    let backends = rule["backends"].as_array().cloned().unwrap_or_default();
    if backends.is_empty() {
        lines.push(line(
            "backends",
            "none (the proxy fails what this rule matches)",
        ));
    }
    let total: u64 = backends.iter().filter_map(|b| b["weight"].as_u64()).sum();
    for b in &backends {
        let weight = b["weight"].as_u64().unwrap_or_default();
        let share = if weight == 0 {
            " (no traffic)".to_string()
        } else if backends.len() == 1 {
            String::new()
        } else {
            format!(" ({}%)", weight * 100 / total)
        };
        let failures = strings(&b["failures"]);
        let failures = if failures.is_empty() {
            String::new()
        } else {
            format!(", fails {}", failures.join(", "))
        };
        lines.push(line(
            "backend",
            format!(
                "weight {weight}{share} {} -> {}{failures}",
                b["backend"].as_str().unwrap_or_default(),
                b["target"].as_str().unwrap_or_default()
            ),
        ));
    }
}

// === impl RouteMatches ===

impl RouteMatches for HttpRoute {
    type Match = linkerd2_proxy_api::http_route::HttpRouteMatch;
    fn hosts(&self) -> &[linkerd2_proxy_api::http_route::HostMatch] {
        &self.hosts
    }
    fn rules(&self) -> Vec<&[Self::Match]> {
        self.rules.iter().map(|r| &r.matches[..]).collect()
    }
    fn redirects(&self) -> Vec<(usize, &linkerd2_proxy_api::http_route::RequestRedirect)> {
        fn redirect(
            f: &http_route::Filter,
        ) -> Option<&linkerd2_proxy_api::http_route::RequestRedirect> {
            match &f.kind {
                Some(http_route::filter::Kind::Redirect(r)) => Some(r),
                _ => None,
            }
        }
        (self.rules.iter().enumerate())
            .flat_map(|(i, rule)| {
                rule.filters
                    .iter()
                    .filter_map(redirect)
                    .map(move |r| (i, r))
            })
            .collect()
    }
}

impl RouteMatches for GrpcRoute {
    type Match = linkerd2_proxy_api::grpc_route::GrpcRouteMatch;
    fn hosts(&self) -> &[linkerd2_proxy_api::http_route::HostMatch] {
        &self.hosts
    }
    fn rules(&self) -> Vec<&[Self::Match]> {
        self.rules.iter().map(|r| &r.matches[..]).collect()
    }
}

#[cfg(test)]
mod tests;
