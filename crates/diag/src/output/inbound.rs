//! Rendering of `inbound.Server`, the message `InboundServerPolicies.WatchPort` streams.
//!
//! Names follow the proxy's `labels`: a server is `<kind>:<name>` (`server:voting-grpc`,
//! `default:all-unauthenticated`), an authorization too (`authorizationpolicy:voting-policy`,
//! `default:probe`), and a route, which only has `metadata`, is `default:<name>` or
//! `<kind>.<group>:<name>` with the kind in lower case (`httproute.policy.linkerd.io:web-api`),
//! since policy and Gateway API routes may share a name.
//!
//! The JSON object of a server has these fields, always present (`null` when unset):
//!
//! - `name` (string, as above), `labels` (object, sorted keys), `server_ips` (IP strings);
//! - `protocol`: `{"kind","timeout"}`, `kind` one of `detect`, `http1`, `http2`, `grpc`,
//!   `opaque`, `tls` (`null` when unset), `timeout` a `{"seconds","nanos"}` duration for
//!   `detect`, `null` otherwise;
//! - `authorizations`: `[AUTHZ]`, each `{"name","labels","metadata","networks","authentication"}`
//!   where `networks` is `[{"net":"10.0.0.0/8","except":["10.0.3.0/24"]}]` and
//!   `authentication` is `{"permit","identities","suffixes"}`: `permit` one of
//!   `unauthenticated`, `mtls_any`, `mtls_identities` (`null` when unset), `identities` exact
//!   identity names, `suffixes` dotted suffixes (`""` matches every identity);
//! - `routes`: `[{"name","type","metadata","hosts","rules","authorizations"}]`, `type` `http` or
//!   `grpc`, `hosts` strings (`*.example.com` for a suffix), each rule
//!   `{"matches":[MATCH],"filters":[FILTER]}`. An HTTP match is
//!   `{"path":{"exact"|"prefix"|"regex":s},"method","headers","query_params"}`, a gRPC match
//!   `{"rpc":{"service","method"},"headers"}`; headers and query parameters are
//!   `{"name","exact"|"regex"}`. A filter is `{"request_header_modifier":{"add","set","remove"}}`,
//!   `{"redirect":{"scheme","host","path","port","status"}}` or
//!   `{"failure_injector":{"status","message","ratio"}}` (`{}` when unset);
//! - `rate_limit`: `{"name","metadata","total","identity","overrides":[{"requests_per_second",
//!   "identities"}]}` with limits in requests per second, or `null`.
//!
//! `metadata` is `{"default":name}` or `{"resource":{group,kind,name,namespace,section,port}}`,
//! as in `dst-diag endpoints`.

use linkerd2_proxy_api::{
    grpc_route::{GrpcFailureInjector, GrpcRouteMatch},
    http_route::{
        HeaderMatch, HostMatch, HttpFailureInjector, HttpRouteMatch, PathMatch, QueryParamMatch,
        Ratio, RequestHeaderModifier, RequestRedirect, header_match, host_match, path_match,
        path_modifier, query_param_match,
    },
    http_types::{Headers, Scheme, scheme},
    inbound::{
        Authn, Authz, GrpcRoute, HttpLocalRateLimit, HttpRoute, Network, ProxyProtocol, Server,
        authn::{self, permit_mesh_tls},
        grpc_route, http_local_rate_limit, http_route as inbound_http_route, proxy_protocol,
    },
    meta::{Metadata, metadata},
    net::{IpAddress, IpNetwork},
};
use serde_json::{Value, json};
use std::{
    collections::HashMap,
    io::{self, Write},
    net::IpAddr,
};

use super::{
    OutputFormat, Table, count_or_none, duration_json, labels_json, metadata_json, or_dash,
    profile::{duration_text, method_text},
    push_table,
};

/// Width of the `key:` column of the readable block, so that the values line up.
const KEY_WIDTH: usize = 22;

/// Writes `server` to `out` in `format` and flushes, as [`super::write_update`] does for
/// endpoints: a readable block followed by an empty line, or one JSON object on one line.
pub fn write_inbound_server(
    out: &mut impl Write,
    format: OutputFormat,
    server: &Server,
) -> io::Result<()> {
    match format {
        OutputFormat::Json => writeln!(out, "{}", inbound_server_json(server))?,
        OutputFormat::Table => writeln!(out, "{}\n", inbound_server_table(server))?,
    }
    out.flush()
}

/// The JSON object of one server (see the module documentation for the field names).
pub fn inbound_server_json(server: &Server) -> Value {
    let (kind, timeout, routes, rate_limit) = match protocol_kind(server) {
        Some(proxy_protocol::Kind::Detect(d)) => (
            Some("detect"),
            d.timeout.as_ref().map(duration_json),
            d.http_routes.iter().map(http_route_json).collect(),
            d.http_local_rate_limit.as_ref(),
        ),
        Some(proxy_protocol::Kind::Http1(h)) => (
            Some("http1"),
            None,
            h.routes.iter().map(http_route_json).collect(),
            h.local_rate_limit.as_ref(),
        ),
        Some(proxy_protocol::Kind::Http2(h)) => (
            Some("http2"),
            None,
            h.routes.iter().map(http_route_json).collect(),
            h.local_rate_limit.as_ref(),
        ),
        Some(proxy_protocol::Kind::Grpc(g)) => (
            Some("grpc"),
            None,
            g.routes.iter().map(grpc_route_json).collect(),
            None,
        ),
        Some(proxy_protocol::Kind::Opaque(_)) => (Some("opaque"), None, Vec::new(), None),
        Some(proxy_protocol::Kind::Tls(_)) => (Some("tls"), None, Vec::new(), None),
        None => (None, None, Vec::new(), None),
    };
    json!({
        "name": labels_name(&server.labels),
        "labels": labels_json(&server.labels),
        "server_ips": server.server_ips.iter().map(ip_text).collect::<Vec<_>>(),
        "protocol": { "kind": kind, "timeout": timeout },
        "authorizations": server.authorizations.iter().map(authz_json).collect::<Vec<_>>(),
        "routes": routes,
        "rate_limit": rate_limit.map(rate_limit_json),
    })
}

/// The readable block of one server, without a trailing newline:
///
/// ```text
/// SERVER server:voting-grpc
/// protocol:             gRPC
/// rate limit:           none
/// authorizations:       1
/// AUTHORIZATION                      NETWORKS         AUTHENTICATION
/// authorizationpolicy:voting-policy  0.0.0.0/0, ::/0  mTLS identities=web.emojivoto.serviceaccount...
/// routes:               1
/// ROUTE            HOSTS  RULE  MATCHES  FILTERS
/// default:default  *      1     *        -
/// route authorizations: none
/// ```
///
/// A route has one row per rule (its name and hosts on the first); the matches of a rule, any
/// of which selects it, are joined by ` | `. Route authorizations are one table with a
/// `ROUTE` column. Server IPs get a line when there are any.
pub fn inbound_server_table(server: &Server) -> String {
    let mut lines = vec![format!("SERVER {}", labels_name(&server.labels))];
    let field = |lines: &mut Vec<String>, key: &str, value: String| {
        lines.push(format!("{:<KEY_WIDTH$}{value}", format!("{key}:")));
    };
    field(
        &mut lines,
        "protocol",
        protocol_text(server.protocol.as_ref()),
    );
    if !server.server_ips.is_empty() {
        let ips: Vec<String> = server.server_ips.iter().map(ip_text).collect();
        field(&mut lines, "server IPs", ips.join(", "));
    }

    let (http_routes, grpc_routes, rate_limit): (&[HttpRoute], &[GrpcRoute], _) =
        match protocol_kind(server) {
            Some(proxy_protocol::Kind::Detect(d)) => {
                (&d.http_routes, &[], d.http_local_rate_limit.as_ref())
            }
            Some(proxy_protocol::Kind::Http1(h)) => (&h.routes, &[], h.local_rate_limit.as_ref()),
            Some(proxy_protocol::Kind::Http2(h)) => (&h.routes, &[], h.local_rate_limit.as_ref()),
            Some(proxy_protocol::Kind::Grpc(g)) => (&[], &g.routes, None),
            _ => (&[], &[], None),
        };
    field(
        &mut lines,
        "rate limit",
        rate_limit.map_or_else(|| "none".into(), rate_limit_text),
    );

    field(
        &mut lines,
        "authorizations",
        count_or_none(server.authorizations.len()),
    );
    let mut authzs = Table::new(["AUTHORIZATION", "NETWORKS", "AUTHENTICATION"]);
    for authz in &server.authorizations {
        authzs.push(authz_row(authz));
    }
    push_table(&mut lines, &authzs);

    let takes_routes = matches!(
        protocol_kind(server),
        Some(
            proxy_protocol::Kind::Detect(_)
                | proxy_protocol::Kind::Http1(_)
                | proxy_protocol::Kind::Http2(_)
                | proxy_protocol::Kind::Grpc(_)
        )
    );
    if !takes_routes {
        return crate::output::join_lines(&lines);
    }
    let mut routes = Table::new(["ROUTE", "HOSTS", "RULE", "MATCHES", "FILTERS"]);
    let mut route_authzs = Table::new(["ROUTE", "AUTHORIZATION", "NETWORKS", "AUTHENTICATION"]);
    let mut add_route = |name: String, hosts: String, rules: Vec<(String, String)>, authzs| {
        if rules.is_empty() {
            routes.push([
                name.clone(),
                hosts.clone(),
                "-".into(),
                "-".into(),
                "-".into(),
            ]);
        }
        for (i, (matches, filters)) in rules.into_iter().enumerate() {
            let (name, hosts) = if i == 0 {
                (name.clone(), hosts.clone())
            } else {
                (String::new(), String::new())
            };
            routes.push([name, hosts, (i + 1).to_string(), matches, filters]);
        }
        for authz in authzs {
            let [authz_name, networks, authn] = authz_row(authz);
            route_authzs.push([name.clone(), authz_name, networks, authn]);
        }
    };
    for route in http_routes {
        let rules = route
            .rules
            .iter()
            .map(|rule| {
                let matches: Vec<String> = rule.matches.iter().map(http_match_text).collect();
                let filters: Vec<String> = rule.filters.iter().map(http_filter_text).collect();
                (any_of(matches), or_dash(Some(filters.join("; "))))
            })
            .collect();
        add_route(
            route_name(route.metadata.as_ref()),
            hosts_text(&route.hosts),
            rules,
            &route.authorizations,
        );
    }
    for route in grpc_routes {
        let rules = route
            .rules
            .iter()
            .map(|rule| {
                let matches: Vec<String> = rule.matches.iter().map(grpc_match_text).collect();
                let filters: Vec<String> = rule.filters.iter().map(grpc_filter_text).collect();
                (any_of(matches), or_dash(Some(filters.join("; "))))
            })
            .collect();
        add_route(
            route_name(route.metadata.as_ref()),
            hosts_text(&route.hosts),
            rules,
            &route.authorizations,
        );
    }
    let route_authz_count: usize = http_routes
        .iter()
        .map(|r| r.authorizations.len())
        .sum::<usize>()
        + grpc_routes
            .iter()
            .map(|r| r.authorizations.len())
            .sum::<usize>();
    field(
        &mut lines,
        "routes",
        count_or_none(http_routes.len() + grpc_routes.len()),
    );
    push_table(&mut lines, &routes);
    field(
        &mut lines,
        "route authorizations",
        count_or_none(route_authz_count),
    );
    push_table(&mut lines, &route_authzs);
    crate::output::join_lines(&lines)
}

/// `Detect (timeout 10s)`, `HTTP/1`, `HTTP/2`, `gRPC`, `opaque`, `TLS`, or `<unset>`.
pub fn protocol_text(protocol: Option<&ProxyProtocol>) -> String {
    match protocol.and_then(|p| p.kind.as_ref()) {
        Some(proxy_protocol::Kind::Detect(d)) => match &d.timeout {
            Some(timeout) => format!("Detect (timeout {})", duration_text(timeout)),
            None => "Detect (no timeout)".into(),
        },
        Some(proxy_protocol::Kind::Http1(_)) => "HTTP/1".into(),
        Some(proxy_protocol::Kind::Http2(_)) => "HTTP/2".into(),
        Some(proxy_protocol::Kind::Grpc(_)) => "gRPC".into(),
        Some(proxy_protocol::Kind::Opaque(_)) => "opaque".into(),
        Some(proxy_protocol::Kind::Tls(_)) => "TLS".into(),
        None => "<unset>".into(),
    }
}

/// How an authorization authenticates clients: `unauthenticated`, `mTLS any`, or
/// `mTLS identities=a,b suffixes=*.c` (either list left out when empty; the empty suffix,
/// which matches every identity, is `*`).
pub fn authn_text(authn: Option<&Authn>) -> String {
    match authn.and_then(|a| a.permit.as_ref()) {
        Some(authn::Permit::Unauthenticated(_)) => "unauthenticated".into(),
        Some(authn::Permit::MeshTls(tls)) => match &tls.clients {
            Some(permit_mesh_tls::Clients::Unauthenticated(_)) => "mTLS any".into(),
            Some(permit_mesh_tls::Clients::Identities(ids)) => {
                let mut text = String::from("mTLS");
                if !ids.identities.is_empty() {
                    let names: Vec<&str> = ids.identities.iter().map(|i| i.name.as_str()).collect();
                    text.push_str(&format!(" identities={}", names.join(",")));
                }
                if !ids.suffixes.is_empty() {
                    let suffixes: Vec<String> = ids
                        .suffixes
                        .iter()
                        .map(|s| suffix_pattern(&s.parts))
                        .collect();
                    text.push_str(&format!(" suffixes={}", suffixes.join(",")));
                }
                if ids.identities.is_empty() && ids.suffixes.is_empty() {
                    text.push_str(" nobody");
                }
                text
            }
            None => "mTLS <no clients>".into(),
        },
        None => "<unset>".into(),
    }
}

/// An HTTP match as one line: `method=GET path=/api/list header[x-env]=prod query[v]~=^2`,
/// with `=` exact, `^=` prefix and `~=` regex; `*` when it matches every request.
pub fn http_match_text(m: &HttpRouteMatch) -> String {
    let mut parts = Vec::new();
    if let Some(method) = &m.method {
        parts.push(format!("method={}", method_text(method)));
    }
    if let Some(path) = &m.path {
        parts.push(path_text(path));
    }
    parts.extend(m.headers.iter().map(header_text));
    parts.extend(m.query_params.iter().map(query_text));
    if parts.is_empty() {
        "*".into()
    } else {
        parts.join(" ")
    }
}

/// A gRPC match as one line: `rpc=emojivoto.v1.VotingService/VoteDoughnut`, with `*` for an
/// empty service or method, followed by header matches; `*` when it matches every call.
pub fn grpc_match_text(m: &GrpcRouteMatch) -> String {
    let mut parts = Vec::new();
    if let Some(rpc) = &m.rpc
        && !(rpc.service.is_empty() && rpc.method.is_empty())
    {
        let or_any = |s: &str| {
            if s.is_empty() {
                "*".to_string()
            } else {
                s.to_string()
            }
        };
        parts.push(format!(
            "rpc={}/{}",
            or_any(&rpc.service),
            or_any(&rpc.method)
        ));
    }
    parts.extend(m.headers.iter().map(header_text));
    if parts.is_empty() {
        "*".into()
    } else {
        parts.join(" ")
    }
}

/// A server's or authorization's name from its labels, `<kind>:<name>`; `<no labels>` when
/// the server sent neither.
pub(crate) fn labels_name(labels: &HashMap<String, String>) -> String {
    match (labels.get("kind"), labels.get("name")) {
        (Some(kind), Some(name)) => format!("{kind}:{name}"),
        (None, Some(name)) => name.clone(),
        _ => "<no labels>".into(),
    }
}

/// An authorization's name: from its labels, else from its metadata.
pub(crate) fn authz_name(authz: &Authz) -> String {
    if authz.labels.contains_key("name") {
        return labels_name(&authz.labels);
    }
    match authz.metadata.as_ref().and_then(|m| m.kind.as_ref()) {
        Some(metadata::Kind::Default(name)) => format!("default:{name}"),
        Some(metadata::Kind::Resource(r)) => format!("{}:{}", r.kind.to_lowercase(), r.name),
        None => "<no name>".into(),
    }
}

/// A route's name from its metadata (see the module documentation).
pub(crate) fn route_name(meta: Option<&Metadata>) -> String {
    match meta.and_then(|m| m.kind.as_ref()) {
        Some(metadata::Kind::Default(name)) => format!("default:{name}"),
        Some(metadata::Kind::Resource(r)) if r.group.is_empty() => {
            format!("{}:{}", r.kind.to_lowercase(), r.name)
        }
        Some(metadata::Kind::Resource(r)) => {
            format!("{}.{}:{}", r.kind.to_lowercase(), r.group, r.name)
        }
        None => "<no name>".into(),
    }
}

fn authz_row(authz: &Authz) -> [String; 3] {
    let networks: Vec<String> = authz.networks.iter().map(network_text).collect();
    [
        authz_name(authz),
        if networks.is_empty() {
            "<none>".into()
        } else {
            networks.join(", ")
        },
        authn_text(authz.authentication.as_ref()),
    ]
}

fn protocol_kind(server: &Server) -> Option<&proxy_protocol::Kind> {
    server.protocol.as_ref().and_then(|p| p.kind.as_ref())
}

fn any_of(matches: Vec<String>) -> String {
    if matches.is_empty() {
        "<no match>".into()
    } else {
        matches.join(" | ")
    }
}

/// An IP address, or a bracketed note when the message does not carry one.
fn ip_text(ip: &IpAddress) -> String {
    IpAddr::try_from(*ip).map_or_else(|_| "<no IP>".into(), |ip| ip.to_string())
}

/// `10.0.0.0/8`, or a bracketed note when the message does not carry an address.
fn cidr_text(net: &IpNetwork) -> String {
    match net.ip.and_then(|ip| IpAddr::try_from(ip).ok()) {
        Some(ip) => format!("{ip}/{}", net.prefix_len),
        None => format!("<no IP>/{}", net.prefix_len),
    }
}

/// `10.20.0.0/16`, or `10.20.0.0/16 except 10.20.3.200/32,10.20.4.0/24`.
pub(crate) fn network_text(network: &Network) -> String {
    let net = network
        .net
        .as_ref()
        .map_or_else(|| "<no network>".into(), cidr_text);
    if network.except.is_empty() {
        net
    } else {
        let except: Vec<String> = network.except.iter().map(cidr_text).collect();
        format!("{net} except {}", except.join(","))
    }
}

/// `*.ingress-nginx.serviceaccount.identity.linkerd.cluster.local`, or `*` for every name.
fn suffix_pattern(parts: &[String]) -> String {
    if parts.is_empty() {
        "*".into()
    } else {
        format!("*.{}", parts.join("."))
    }
}

/// A host match: the exact name, or `*.example.com` for a suffix (sent as reversed labels).
pub(crate) fn host_text(host: &HostMatch) -> String {
    match &host.r#match {
        Some(host_match::Match::Exact(name)) => name.clone(),
        Some(host_match::Match::Suffix(s)) => {
            let labels: Vec<&str> = s.reverse_labels.iter().rev().map(String::as_str).collect();
            if labels.is_empty() {
                "*".into()
            } else {
                format!("*.{}", labels.join("."))
            }
        }
        None => "<empty>".into(),
    }
}

/// The hosts a route applies to, comma-separated; `*` when it names none (any host).
fn hosts_text(hosts: &[HostMatch]) -> String {
    if hosts.is_empty() {
        "*".into()
    } else {
        hosts.iter().map(host_text).collect::<Vec<_>>().join(",")
    }
}

fn path_text(path: &PathMatch) -> String {
    match &path.kind {
        Some(path_match::Kind::Exact(p)) => format!("path={p}"),
        Some(path_match::Kind::Prefix(p)) => format!("path^={p}"),
        Some(path_match::Kind::Regex(p)) => format!("path~={p}"),
        None => "path=<empty>".into(),
    }
}

fn header_text(h: &HeaderMatch) -> String {
    match &h.value {
        Some(header_match::Value::Exact(v)) => {
            format!("header[{}]={}", h.name, String::from_utf8_lossy(v))
        }
        Some(header_match::Value::Regex(r)) => format!("header[{}]~={r}", h.name),
        None => format!("header[{}]=<empty>", h.name),
    }
}

fn query_text(q: &QueryParamMatch) -> String {
    match &q.value {
        Some(query_param_match::Value::Exact(v)) => format!("query[{}]={v}", q.name),
        Some(query_param_match::Value::Regex(r)) => format!("query[{}]~={r}", q.name),
        None => format!("query[{}]=<empty>", q.name),
    }
}

pub(crate) fn http_filter_text(f: &inbound_http_route::Filter) -> String {
    use inbound_http_route::filter::Kind;
    match &f.kind {
        Some(Kind::RequestHeaderModifier(m)) => header_modifier_text(m),
        Some(Kind::Redirect(r)) => redirect_text(r),
        Some(Kind::FailureInjector(fi)) => http_failure_text(fi),
        None => "<empty filter>".into(),
    }
}

pub(crate) fn grpc_filter_text(f: &grpc_route::Filter) -> String {
    use grpc_route::filter::Kind;
    match &f.kind {
        Some(Kind::RequestHeaderModifier(m)) => header_modifier_text(m),
        Some(Kind::FailureInjector(fi)) => grpc_failure_text(fi),
        None => "<empty filter>".into(),
    }
}

/// `request headers: add x-a=1, set x-b=2, remove x-c`.
fn header_modifier_text(m: &RequestHeaderModifier) -> String {
    let pairs = |headers: &Option<Headers>| {
        headers
            .iter()
            .flat_map(|h| &h.headers)
            .map(|h| format!("{}={}", h.name, String::from_utf8_lossy(&h.value)))
            .collect::<Vec<_>>()
    };
    let mut parts = Vec::new();
    for (verb, list) in [("add", pairs(&m.add)), ("set", pairs(&m.set))] {
        if !list.is_empty() {
            parts.push(format!("{verb} {}", list.join(",")));
        }
    }
    if !m.remove.is_empty() {
        parts.push(format!("remove {}", m.remove.join(",")));
    }
    format!("request headers: {}", or_dash(Some(parts.join(", "))))
}

/// `redirect 301 https://example.com:8443 path=/new` (only the parts the filter sets; the
/// path as `path=` for a full replacement, `path^=` for a prefix one).
fn redirect_text(r: &RequestRedirect) -> String {
    match redirect_location_text(r) {
        location if location.is_empty() => format!("redirect {}", r.status),
        location => format!("redirect {} {location}", r.status),
    }
}

/// Where a redirect sends the client, as [`redirect_text`] shows it (`https://example.com:8443
/// path=/new`); empty when the filter sets nothing (the request's own URL).
fn redirect_location_text(r: &RequestRedirect) -> String {
    let scheme = r.scheme.as_ref().map(scheme_text);
    let mut target = String::new();
    if let Some(scheme) = &scheme {
        target.push_str(&format!("{scheme}://"));
    }
    if !r.host.is_empty() {
        target.push_str(&r.host);
    } else if scheme.is_some() || r.port != 0 {
        target.push_str("<same host>");
    }
    if r.port != 0 {
        target.push_str(&format!(":{}", r.port));
    }
    match r.path.as_ref().and_then(|p| p.replace.as_ref()) {
        Some(path_modifier::Replace::Full(p)) => target.push_str(&format!(" path={p}")),
        Some(path_modifier::Replace::Prefix(p)) => target.push_str(&format!(" path^={p}")),
        None => {}
    }
    target.trim_start().to_string()
}

pub(crate) fn scheme_text(s: &Scheme) -> String {
    match &s.r#type {
        Some(scheme::Type::Registered(code)) => scheme::Registered::try_from(*code)
            .map(|r| r.as_str_name().to_lowercase())
            .unwrap_or_else(|_| format!("<unknown scheme {code}>")),
        Some(scheme::Type::Unregistered(name)) => name.clone(),
        None => "<no scheme>".into(),
    }
}

fn ratio_text(ratio: Option<&Ratio>) -> String {
    ratio.map_or_else(
        || "always".into(),
        |r| format!("{}/{}", r.numerator, r.denominator),
    )
}

/// `fail 503 "injected" 1/10`.
fn http_failure_text(f: &HttpFailureInjector) -> String {
    format!(
        "fail {} {:?} {}",
        f.status,
        f.message,
        ratio_text(f.ratio.as_ref())
    )
}

/// `fail code 14 "injected" 1/10`.
fn grpc_failure_text(f: &GrpcFailureInjector) -> String {
    format!(
        "fail code {} {:?} {}",
        f.code,
        f.message,
        ratio_text(f.ratio.as_ref())
    )
}

/// `web-rl: total 100/s, per identity 20/s, 50/s for a,b`.
fn rate_limit_text(limit: &HttpLocalRateLimit) -> String {
    let name = match limit.metadata.as_ref().and_then(|m| m.kind.as_ref()) {
        Some(metadata::Kind::Resource(r)) => r.name.clone(),
        Some(metadata::Kind::Default(name)) => format!("default:{name}"),
        None => "<no name>".into(),
    };
    let mut parts = Vec::new();
    if let Some(total) = &limit.total {
        parts.push(format!("total {}/s", total.requests_per_second));
    }
    if let Some(identity) = &limit.identity {
        parts.push(format!("per identity {}/s", identity.requests_per_second));
    }
    for o in &limit.overrides {
        let ids: Vec<&str> = o
            .clients
            .iter()
            .flat_map(|c| &c.identities)
            .map(|i| i.name.as_str())
            .collect();
        let rps = o
            .limit
            .as_ref()
            .map_or_else(|| "?".into(), |l| l.requests_per_second.to_string());
        parts.push(format!("{rps}/s for {}", ids.join(",")));
    }
    if parts.is_empty() {
        parts.push("no limits".into());
    }
    format!("{name}: {}", parts.join(", "))
}

// === JSON ===

fn network_json(network: &Network) -> Value {
    json!({
        "net": network.net.as_ref().map(cidr_text),
        "except": network.except.iter().map(cidr_text).collect::<Vec<_>>(),
    })
}

fn authn_json(authn: Option<&Authn>) -> Value {
    let (permit, identities, suffixes) = match authn.and_then(|a| a.permit.as_ref()) {
        Some(authn::Permit::Unauthenticated(_)) => (Some("unauthenticated"), vec![], vec![]),
        Some(authn::Permit::MeshTls(tls)) => match &tls.clients {
            Some(permit_mesh_tls::Clients::Unauthenticated(_)) => {
                (Some("mtls_any"), vec![], vec![])
            }
            Some(permit_mesh_tls::Clients::Identities(ids)) => (
                Some("mtls_identities"),
                ids.identities.iter().map(|i| i.name.clone()).collect(),
                ids.suffixes.iter().map(|s| s.parts.join(".")).collect(),
            ),
            None => (None, vec![], vec![]),
        },
        None => (None, vec![], vec![]),
    };
    json!({ "permit": permit, "identities": identities, "suffixes": suffixes })
}

fn authz_json(authz: &Authz) -> Value {
    json!({
        "name": authz_name(authz),
        "labels": labels_json(&authz.labels),
        "metadata": authz.metadata.as_ref().map(metadata_json),
        "networks": authz.networks.iter().map(network_json).collect::<Vec<_>>(),
        "authentication": authn_json(authz.authentication.as_ref()),
    })
}

fn header_match_json(h: &HeaderMatch) -> Value {
    match &h.value {
        Some(header_match::Value::Exact(v)) => {
            json!({ "name": h.name, "exact": String::from_utf8_lossy(v) })
        }
        Some(header_match::Value::Regex(r)) => json!({ "name": h.name, "regex": r }),
        None => json!({ "name": h.name }),
    }
}

fn http_match_json(m: &HttpRouteMatch) -> Value {
    json!({
        "path": m.path.as_ref().map(|p| match &p.kind {
            Some(path_match::Kind::Exact(s)) => json!({ "exact": s }),
            Some(path_match::Kind::Prefix(s)) => json!({ "prefix": s }),
            Some(path_match::Kind::Regex(s)) => json!({ "regex": s }),
            None => json!({}),
        }),
        "method": m.method.as_ref().map(method_text),
        "headers": m.headers.iter().map(header_match_json).collect::<Vec<_>>(),
        "query_params": m.query_params.iter().map(|q| match &q.value {
            Some(query_param_match::Value::Exact(v)) => json!({ "name": q.name, "exact": v }),
            Some(query_param_match::Value::Regex(r)) => json!({ "name": q.name, "regex": r }),
            None => json!({ "name": q.name }),
        }).collect::<Vec<_>>(),
    })
}

fn grpc_match_json(m: &GrpcRouteMatch) -> Value {
    json!({
        "rpc": m.rpc.as_ref().map(|r| json!({ "service": r.service, "method": r.method })),
        "headers": m.headers.iter().map(header_match_json).collect::<Vec<_>>(),
    })
}

fn header_modifier_json(m: &RequestHeaderModifier) -> Value {
    let pairs = |headers: &Option<Headers>| {
        headers
            .iter()
            .flat_map(|h| &h.headers)
            .map(|h| json!({ "name": h.name, "value": String::from_utf8_lossy(&h.value) }))
            .collect::<Vec<_>>()
    };
    json!({ "add": pairs(&m.add), "set": pairs(&m.set), "remove": m.remove })
}

fn ratio_json(ratio: Option<&Ratio>) -> Value {
    ratio.map_or(
        Value::Null,
        |r| json!({ "numerator": r.numerator, "denominator": r.denominator }),
    )
}

fn http_filter_json(f: &inbound_http_route::Filter) -> Value {
    use inbound_http_route::filter::Kind;
    match &f.kind {
        Some(Kind::RequestHeaderModifier(m)) => {
            json!({ "request_header_modifier": header_modifier_json(m) })
        }
        Some(Kind::Redirect(r)) => json!({ "redirect": {
            "scheme": r.scheme.as_ref().map(scheme_text),
            "host": r.host,
            "path": r.path.as_ref().and_then(|p| p.replace.as_ref()).map(|p| match p {
                path_modifier::Replace::Full(s) => json!({ "full": s }),
                path_modifier::Replace::Prefix(s) => json!({ "prefix": s }),
            }),
            "port": r.port,
            "status": r.status,
        }}),
        Some(Kind::FailureInjector(fi)) => json!({ "failure_injector": {
            "status": fi.status,
            "message": fi.message,
            "ratio": ratio_json(fi.ratio.as_ref()),
        }}),
        None => json!({}),
    }
}

fn grpc_filter_json(f: &grpc_route::Filter) -> Value {
    use grpc_route::filter::Kind;
    match &f.kind {
        Some(Kind::RequestHeaderModifier(m)) => {
            json!({ "request_header_modifier": header_modifier_json(m) })
        }
        Some(Kind::FailureInjector(fi)) => json!({ "failure_injector": {
            "code": fi.code,
            "message": fi.message,
            "ratio": ratio_json(fi.ratio.as_ref()),
        }}),
        None => json!({}),
    }
}

fn http_route_json(route: &HttpRoute) -> Value {
    json!({
        "name": route_name(route.metadata.as_ref()),
        "type": "http",
        "metadata": route.metadata.as_ref().map(metadata_json),
        "hosts": route.hosts.iter().map(host_text).collect::<Vec<_>>(),
        "rules": route.rules.iter().map(|rule| json!({
            "matches": rule.matches.iter().map(http_match_json).collect::<Vec<_>>(),
            "filters": rule.filters.iter().map(http_filter_json).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
        "authorizations": route.authorizations.iter().map(authz_json).collect::<Vec<_>>(),
    })
}

fn grpc_route_json(route: &GrpcRoute) -> Value {
    json!({
        "name": route_name(route.metadata.as_ref()),
        "type": "grpc",
        "metadata": route.metadata.as_ref().map(metadata_json),
        "hosts": route.hosts.iter().map(host_text).collect::<Vec<_>>(),
        "rules": route.rules.iter().map(|rule| json!({
            "matches": rule.matches.iter().map(grpc_match_json).collect::<Vec<_>>(),
            "filters": rule.filters.iter().map(grpc_filter_json).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
        "authorizations": route.authorizations.iter().map(authz_json).collect::<Vec<_>>(),
    })
}

fn rate_limit_json(limit: &HttpLocalRateLimit) -> Value {
    let rps = |l: &Option<http_local_rate_limit::Limit>| l.as_ref().map(|l| l.requests_per_second);
    let name = match limit.metadata.as_ref().and_then(|m| m.kind.as_ref()) {
        Some(metadata::Kind::Resource(r)) => Some(r.name.clone()),
        Some(metadata::Kind::Default(name)) => Some(format!("default:{name}")),
        None => None,
    };
    json!({
        "name": name,
        "metadata": limit.metadata.as_ref().map(metadata_json),
        "total": rps(&limit.total),
        "identity": rps(&limit.identity),
        "overrides": limit.overrides.iter().map(|o| json!({
            "requests_per_second": rps(&o.limit),
            "identities": o.clients.iter().flat_map(|c| &c.identities).map(|i| i.name.clone()).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
    })
}

#[cfg(test)]
mod tests;
