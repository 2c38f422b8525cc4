//! `dst-diag explain inbound`: the decision a pod's proxy makes about a request, from the
//! `inbound.Server` it receives, as linkerd2-proxy's inbound policy makes it:
//!
//! 0. The proxy converts the whole server first: one route match or authorization it cannot
//!    convert (`invalid:` in the explanation) and it admits no client at all.
//! 1. The proxy adds one authorization of its own to the server's: `default:localhost`, any
//!    client from 127.0.0.1 or ::1.
//! 2. HTTP (HTTP/1, HTTP/2, gRPC, and a `Detect` port, which this command treats as HTTP): the
//!    request takes the best matching route ([`super::matching`]); none: denied, HTTP 404 or
//!    gRPC `NOT_FOUND`. A server that sends no routes gets one that matches everything.
//!    The route's authorizations are tried in order, then the server's; the first that admits
//!    the client wins; none: denied, HTTP 403 or gRPC `PERMISSION_DENIED`.
//! 3. Opaque and TLS ports: the connection is checked against the server's authorizations.
//! 4. An authorization admits a client when one of its networks contains the client's address
//!    (and none of that network's exceptions does), then when its authentication fits:
//!    unauthenticated admits anyone; mesh TLS without identities admits any mTLS client; with
//!    identities, the client's identity must be listed or end with a listed suffix (`*.` forms;
//!    the empty suffix, `*`, is any identity).
//! 5. An admitted HTTP request then counts against the server's rate limit: the total, then the
//!    client identity's override if it has one, else the per-identity limit (clients without
//!    an identity share one).

use linkerd2_proxy_api::{
    inbound::{
        Authz, GrpcRoute, HttpLocalRateLimit, HttpRoute, PortSpec, Server,
        authn::{
            Permit,
            permit_mesh_tls::{Clients, PermitClientIdentities},
        },
        grpc_route, http_route, proxy_protocol,
    },
    meta::metadata,
};
use std::net::IpAddr;

use super::{
    Decision, ExplainError, line,
    matching::{self, DEFAULT_HTTP_SCORE, GrpcScore, Request, RouteMatches},
    source::PolicySource,
};
use crate::Error;
use crate::output::{
    authz_name, grpc_filter_text, grpc_match_text, http_filter_text, http_match_text, labels_name,
    network_text, protocol_text, route_name,
};

/// The flags of `dst-diag explain inbound`.
#[derive(Clone, Debug, clap::Args)]
#[command(group(
    clap::ArgGroup::new("client").required(true).multiple(true).args(["client_identity", "client_ip"])
))]
pub struct InboundArgs {
    /// The workload: `NAMESPACE/POD`, `NAMESPACE:POD`, or the proxy's JSON form
    /// (`{"ns":"edge","external_workload":"payments-vm-01"}`).
    pub workload: String,

    /// The inbound port (1-65535). Any port has a policy: one no Server covers gets the
    /// default policy.
    #[arg(value_parser = port_number)]
    pub port: u32,

    /// The client's mTLS identity (`web.emojivoto.serviceaccount.identity.linkerd.cluster.local`);
    /// without it the client is not mTLS, unless `--client-tls` says so.
    #[arg(long, value_name = "ID")]
    pub client_identity: Option<String>,

    /// The client's address. Without it, only authorizations open to every address can admit
    /// the client.
    #[arg(long, value_name = "IP")]
    pub client_ip: Option<IpAddr>,

    /// The client speaks mesh TLS without a client identity.
    #[arg(long, conflicts_with = "client_identity")]
    pub client_tls: bool,

    /// The request's method (default GET; POST for gRPC).
    #[arg(long)]
    pub method: Option<String>,

    /// The request's path, with an optional `?query` (default `/`, or `/SERVICE/METHOD` with
    /// `--grpc-service`).
    #[arg(long)]
    pub path: Option<String>,

    /// A gRPC call to this service (`emojivoto.v1.VotingService`): POST to `/SERVICE/METHOD`.
    #[arg(long, value_name = "SERVICE", conflicts_with = "path", value_parser = super::grpc_name)]
    pub grpc_service: Option<String>,

    /// The gRPC method, with `--grpc-service`.
    #[arg(long, value_name = "METHOD", requires = "grpc_service", value_parser = super::grpc_name)]
    pub grpc_method: Option<String>,

    /// A request header, `NAME:VALUE` (repeatable); `host:NAME` sets the host routes match.
    #[arg(long = "header", value_name = "NAME:VALUE")]
    pub headers: Vec<String>,

    /// Where the policy comes from, and the controller flags used offline.
    #[command(flatten)]
    pub source: PolicySource,
}

/// The client as the proxy sees it: its address and TLS.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Client {
    /// Its address, when given.
    pub ip: Option<IpAddr>,
    /// Its transport security.
    pub tls: ClientTls,
}

/// How the client connects.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClientTls {
    /// Not over mesh TLS.
    Plain,
    /// Over mesh TLS, without a client identity.
    NoIdentity,
    /// Over mesh TLS as this identity.
    Identity(String),
}

/// One authorization tried, for the explanation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuthzCheck {
    /// `authorizationpolicy:web-api`, `default:localhost`.
    pub name: String,
    /// Where it comes from: `route`, `server`, or `proxy` (the proxy's own).
    pub origin: &'static str,
    /// `Some(Ok(why))` admits, `Some(Err(why))` does not, `None` not reached.
    pub verdict: Option<Result<String, String>>,
}

/// The proxy's own authorization, added to every server's (see the module documentation).
const LOCALHOST: &str = "default:localhost";

// === impl InboundArgs ===

impl InboundArgs {
    /// The `PortSpec` the pod's proxy sends: the workload in the JSON form the injector sets.
    /// (A `PORT` given on the command line is checked by `port_number` already.)
    ///
    /// Errors: a workload that is not `NS/POD`, `NS:POD` or JSON; a port outside 1-65535.
    pub fn port_spec(&self) -> Result<PortSpec, ExplainError> {
        let invalid = |reason: &str| ExplainError::InvalidArgument {
            flag: "WORKLOAD",
            value: self.workload.clone(),
            reason: reason.to_string(),
        };
        let workload = self.workload.trim();
        let workload = if workload.starts_with('{') {
            workload.to_string()
        } else {
            let (ns, pod) = workload
                .split_once('/')
                .or_else(|| workload.split_once(':'))
                .ok_or_else(|| invalid("expected NAMESPACE/POD"))?;
            if ns.is_empty() || pod.is_empty() || pod.contains('/') {
                return Err(invalid("expected NAMESPACE/POD"));
            }
            serde_json::json!({"ns": ns, "pod": pod}).to_string()
        };
        if !(1..=65535).contains(&self.port) {
            return Err(ExplainError::InvalidArgument {
                flag: "PORT",
                value: self.port.to_string(),
                reason: "not a port number (1-65535)".into(),
            });
        }
        Ok(PortSpec {
            workload,
            port: self.port,
        })
    }

    /// The client the flags describe. Errors: an identity that is not a DNS-like name or a
    /// SPIFFE ID.
    pub fn client(&self) -> Result<Client, ExplainError> {
        let tls = match &self.client_identity {
            Some(id) => {
                check_identity(id).map_err(|reason| ExplainError::InvalidArgument {
                    flag: "--client-identity",
                    value: id.clone(),
                    reason,
                })?;
                ClientTls::Identity(id.clone())
            }
            None if self.client_tls => ClientTls::NoIdentity,
            None => ClientTls::Plain,
        };
        Ok(Client {
            ip: self.client_ip,
            tls,
        })
    }

    /// The request the flags describe; `grpc` (the port speaks gRPC) makes POST the default
    /// method. Errors: a header without `:`, a path not starting with `/`.
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
        let target = match (&self.grpc_service, &self.path) {
            (Some(service), _) => format!(
                "/{service}/{}",
                self.grpc_method.as_deref().unwrap_or_default()
            ),
            (None, Some(path)) => path.clone(),
            (None, None) => "/".into(),
        };
        build_request(method, &target, &self.headers, None)
    }

    /// The explanation and the decision. Errors: see [`ExplainError`]; nothing is decided
    /// then.
    pub async fn explain(&self) -> Result<(String, Decision), ExplainError> {
        let spec = self.port_spec()?;
        let client = self.client()?;
        let target = format!("{} port {}", self.workload, self.port);
        let server =
            self.source
                .inbound_server(spec, &target)
                .await
                .map_err(|error| match error {
                    ExplainError::Policy(source)
                        if matches!(&*source, Error::Status { status, .. }
                        if status.code() == tonic::Code::NotFound) =>
                    {
                        ExplainError::UnknownWorkload {
                            workload: self.workload.clone(),
                            where_: if self.source.cluster_state.is_some() {
                                "is in the cluster state"
                            } else {
                                "is known to the policy controller"
                            },
                            source,
                        }
                    }
                    other => other,
                })?;
        let is_grpc = matches!(protocol_kind(&server), Some(proxy_protocol::Kind::Grpc(_)));
        let request = self.request(is_grpc)?;
        explain_server(&server, &client, &request)
    }
}

/// Builds a request from command-line text: `target` is a path with an optional query, and
/// each header is `NAME:VALUE`; a `host` header (or `default_host`) sets the host.
pub(crate) fn build_request(
    method: String,
    target: &str,
    headers: &[String],
    default_host: Option<String>,
) -> Result<Request, ExplainError> {
    // RFC 9110 §9.1: a method is a token; a proxy never sees one with spaces or separators.
    let tchar = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
    if !method.bytes().all(tchar) {
        return Err(ExplainError::InvalidArgument {
            flag: "--method",
            value: method,
            reason: "not an HTTP method (letters, digits and !#$%&'*+-.^_`|~ only)".into(),
        });
    }
    if !target.starts_with('/') {
        return Err(ExplainError::InvalidArgument {
            flag: "--path",
            value: target.to_string(),
            reason: "a path starts with /".into(),
        });
    }
    // A request line cannot carry them; a client percent-encodes them.
    if target.chars().any(|c| c.is_control() || c.is_whitespace()) {
        return Err(ExplainError::InvalidArgument {
            flag: "--path",
            value: target.to_string(),
            reason: "a path holds no spaces or control characters (percent-encode them)".into(),
        });
    }
    let (path, query) = match target.split_once('?') {
        Some((path, query)) => (path.to_string(), Some(query.to_string())),
        None => (target.to_string(), None),
    };
    let mut parsed = Vec::new();
    for header in headers {
        let Some((name, value)) = header.split_once(':') else {
            return Err(ExplainError::InvalidArgument {
                flag: "--header",
                value: header.clone(),
                reason: "expected NAME:VALUE".into(),
            });
        };
        let name = name.trim().to_ascii_lowercase();
        if name.is_empty() {
            return Err(ExplainError::InvalidArgument {
                flag: "--header",
                value: header.clone(),
                reason: "empty header name".into(),
            });
        }
        // What an HTTP/1 or HTTP/2 request can carry (the `http` crate's checks, as the
        // proxy's): a token for a name, no control characters but tabs in a value.
        if http::HeaderName::from_bytes(name.as_bytes()).is_err() {
            return Err(ExplainError::InvalidArgument {
                flag: "--header",
                value: header.clone(),
                reason: "not an HTTP header name (letters, digits and !#$%&'*+-.^_`|~ only)".into(),
            });
        }
        let value = value.trim();
        if http::HeaderValue::from_bytes(value.as_bytes()).is_err() {
            return Err(ExplainError::InvalidArgument {
                flag: "--header",
                value: header.clone(),
                reason: "a header value holds no control characters but tabs".into(),
            });
        }
        parsed.push((name, value.to_string()));
    }
    let host = parsed
        .iter()
        .find(|(n, _)| n == "host")
        .map(|(_, v)| strip_port(v).to_string())
        .or(default_host);
    Ok(Request {
        method,
        path,
        query,
        headers: parsed,
        host,
    })
}

/// `web.example.com:8080` → `web.example.com`; `[::1]:80` → `[::1]`.
fn strip_port(authority: &str) -> &str {
    match authority.rsplit_once(':') {
        Some((host, port))
            if !host.is_empty()
                && !port.is_empty()
                && port.bytes().all(|b| b.is_ascii_digit())
                // A bare IPv6 address has colons but no port.
                && (host.starts_with('[') || !host.contains(':')) =>
        {
            host
        }
        _ => authority,
    }
}

/// Whether `id` could be a proxy's identity: a DNS-like name (labels of letters, digits and
/// `-`, at most 63 each and 253 in all) or a `spiffe://` ID.
pub fn check_identity(id: &str) -> Result<(), String> {
    if let Some(rest) = id.strip_prefix("spiffe://") {
        let domain = rest.split('/').next().unwrap_or_default();
        if domain.is_empty() {
            return Err("a SPIFFE ID names a trust domain: spiffe://DOMAIN/PATH".into());
        }
        return Ok(());
    }
    if id.is_empty() {
        return Err("empty".into());
    }
    if id.len() > 253 {
        return Err("longer than 253 characters".into());
    }
    for label in id.split('.') {
        if label.is_empty() {
            return Err("an empty label (two dots, or a dot at an end)".into());
        }
        if label.len() > 63 {
            return Err(format!("label {label:?} is longer than 63 characters"));
        }
        if let Some(c) = label
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || *c == '-'))
        {
            return Err(format!(
                "{c:?} is not allowed: an identity is a DNS-like name such as \
                 web.emojivoto.serviceaccount.identity.linkerd.cluster.local"
            ));
        }
        if label.starts_with('-') || label.ends_with('-') {
            return Err(format!("label {label:?} starts or ends with '-'"));
        }
    }
    Ok(())
}

/// Evaluates `request` from `client` against `server`, as the proxy would (see the module
/// documentation), returning the explanation and the decision.
///
/// Errors: [`ExplainError::InvalidPolicy`] for a message without a protocol.
pub fn explain_server(
    server: &Server,
    client: &Client,
    request: &Request,
) -> Result<(String, Decision), ExplainError> {
    let kind = protocol_kind(server)
        .ok_or_else(|| ExplainError::InvalidPolicy("the Server has no protocol".into()))?;
    let mut lines = vec![
        line("server", labels_name(&server.labels)),
        line("protocol", protocol_text(server.protocol.as_ref())),
        line("client", client_text(client)),
    ];
    if let Some(problem) = invalid_server(server, kind) {
        lines.push(line("request", request.text()));
        lines.push(line("invalid", problem));
        lines.push(line("decision", format!("denied: {INVALID_SERVER}")));
        return Ok((
            crate::output::join_lines(&lines),
            Decision::Denied(INVALID_SERVER.into()),
        ));
    }
    let decision = match kind {
        proxy_protocol::Kind::Detect(d) => {
            lines.push(line("request", request.text()));
            lines.push(format!(
                "{:12}(the port detects the protocol: the request is taken as HTTP; a non-HTTP \
                 connection is checked against the server's authorizations)",
                ""
            ));
            let decision = explain_http(server, &d.http_routes, client, request, &mut lines);
            rate_limit_lines(
                d.http_local_rate_limit.as_ref(),
                client,
                &decision,
                &mut lines,
            );
            decision
        }
        proxy_protocol::Kind::Http1(proxy_protocol::Http1 {
            routes,
            local_rate_limit,
        })
        | proxy_protocol::Kind::Http2(proxy_protocol::Http2 {
            routes,
            local_rate_limit,
        }) => {
            lines.push(line("request", request.text()));
            let decision = explain_http(server, routes, client, request, &mut lines);
            rate_limit_lines(local_rate_limit.as_ref(), client, &decision, &mut lines);
            decision
        }
        proxy_protocol::Kind::Grpc(g) => {
            lines.push(line("request", request.text()));
            let decision = explain_grpc(server, &g.routes, client, request, &mut lines);
            lines.push(line("rate limit", "none (gRPC servers carry none)"));
            decision
        }
        proxy_protocol::Kind::Opaque(_) | proxy_protocol::Kind::Tls(_) => {
            lines.push(line(
                "request",
                "a connection (the port is not HTTP: routes and request flags do not apply)",
            ));
            let checks = authorize(server.authorizations.iter().map(|a| (a, "server")), client);
            let admitted = push_checks(&checks, &mut lines);
            lines.push(line("rate limit", "none (not HTTP)"));
            match admitted {
                Some(name) => Decision::Allowed(format!("allowed by {name}")),
                None => Decision::Denied(format!(
                    "no authorization of {} admits the connection (the proxy closes it)",
                    labels_name(&server.labels)
                )),
            }
        }
    };
    lines.push(match &decision {
        Decision::Allowed(text) => line("decision", text),
        Decision::Denied(reason) => line("decision", format!("denied: {reason}")),
    });
    Ok((crate::output::join_lines(&lines), decision))
}

/// What the proxy does with a server it cannot convert (linkerd2-proxy's
/// `ServerPolicy::invalid`, the policy it uses instead: one route with no authorization).
const INVALID_SERVER: &str = "the proxy refuses the whole server as invalid and uses one that \
     admits no client: every HTTP request is denied (HTTP 403, gRPC PERMISSION_DENIED) and \
     every other connection closed";

/// The first part of `server` the proxy cannot convert: a route's match
/// ([`matching::invalid_match`]), then an authorization of the server or of a route
/// ([`check_authz`]); the proxy refuses the whole server for one.
fn invalid_server(server: &Server, kind: &proxy_protocol::Kind) -> Option<String> {
    fn http(routes: &[HttpRoute]) -> Option<String> {
        let name = |i: usize| route_name(routes[i].metadata.as_ref());
        matching::invalid_match(routes, matching::check_http_match, name)
            .or_else(|| matching::invalid_redirect(routes, name))
            .or_else(|| routes_authz(routes.iter().map(|r| (&r.metadata, &r.authorizations))))
    }
    fn routes_authz<'a>(
        routes: impl Iterator<
            Item = (
                &'a Option<linkerd2_proxy_api::meta::Metadata>,
                &'a Vec<Authz>,
            ),
        >,
    ) -> Option<String> {
        routes.into_iter().find_map(|(meta, authzs)| {
            authzs.iter().find_map(|a| {
                check_authz(a).err().map(|why| {
                    format!(
                        "route {} authorization {}: {why}",
                        route_name(meta.as_ref()),
                        authz_name(a)
                    )
                })
            })
        })
    }
    let routes = match kind {
        proxy_protocol::Kind::Detect(d) => http(&d.http_routes),
        proxy_protocol::Kind::Http1(h) => http(&h.routes),
        proxy_protocol::Kind::Http2(h) => http(&h.routes),
        proxy_protocol::Kind::Grpc(g) => {
            matching::invalid_match(&g.routes, matching::check_grpc_match, |i| {
                route_name(g.routes[i].metadata.as_ref())
            })
            .or_else(|| routes_authz(g.routes.iter().map(|r| (&r.metadata, &r.authorizations))))
        }
        proxy_protocol::Kind::Opaque(_) | proxy_protocol::Kind::Tls(_) => None,
    };
    routes.or_else(|| {
        server.authorizations.iter().find_map(|a| {
            check_authz(a)
                .err()
                .map(|why| format!("authorization {}: {why}", authz_name(a)))
        })
    })
}

/// Whether the proxy converts an authorization: it lists networks, each with an address (and
/// exceptions) it can read, and has an authentication, whose mesh TLS names its clients.
fn check_authz(authz: &Authz) -> Result<(), String> {
    if authz.networks.is_empty() {
        return Err(NO_NETWORKS.into());
    }
    for network in &authz.networks {
        let Some(net) = network.net else {
            return Err("a network has no address".into());
        };
        for net in std::iter::once(net).chain(network.except.iter().copied()) {
            if ipnet::IpNet::try_from(net).is_err() {
                return Err(format!(
                    "network {} is not a valid network",
                    network_text(network)
                ));
            }
        }
    }
    match authz
        .authentication
        .as_ref()
        .and_then(|a| a.permit.as_ref())
    {
        None => Err(NO_AUTHENTICATION.into()),
        Some(Permit::MeshTls(tls)) if tls.clients.is_none() => Err(NO_MESH_TLS_CLIENTS.into()),
        Some(_) => Ok(()),
    }
}

const NO_NETWORKS: &str = "it lists no networks";
const NO_AUTHENTICATION: &str = "it has no authentication";
const NO_MESH_TLS_CLIENTS: &str = "its mesh TLS names no clients";

/// The HTTP part: the route, then the authorizations.
fn explain_http(
    server: &Server,
    routes: &[HttpRoute],
    client: &Client,
    request: &Request,
    lines: &mut Vec<String>,
) -> Decision {
    // A server without routes gets one route that matches everything (the proxy's fallback).
    let fallback;
    let routes = if routes.is_empty() {
        fallback = [HttpRoute {
            metadata: Some(default_metadata()),
            rules: vec![http_route::Rule::default()],
            ..Default::default()
        }];
        lines.push(NO_ROUTES.to_string());
        &fallback[..]
    } else {
        routes
    };
    let choice = matching::choose(
        routes,
        request,
        matching::http_score,
        DEFAULT_HTTP_SCORE,
        http_match_text,
    );
    lines.extend(matching::route_lines(&choice, |i| {
        route_name(routes[i].metadata.as_ref())
    }));
    let Some(selected) = choice.selected else {
        return Decision::Denied(
            "no route matches the request (the proxy answers HTTP 404)".into(),
        );
    };
    let route = &routes[selected];
    let rule = matching::selected_rule(&choice, selected).and_then(|r| route.rules.get(r));
    if let Some(rule) = rule
        && !rule.filters.is_empty()
    {
        let filters: Vec<String> = rule.filters.iter().map(http_filter_text).collect();
        lines.push(line("filters", filters.join("; ")));
    }
    let name = route_name(route.metadata.as_ref());
    let decision = admit_on_route(
        server,
        &route.authorizations,
        &name,
        client,
        lines,
        "HTTP 403",
    );
    // An admitted request then meets the rule's filters: a redirect answers it, as outbound
    // (second tester's finding: it was reported as allowed, and one the proxy fails too).
    let redirect = rule.and_then(|rule| {
        rule.filters.iter().find_map(|f| match &f.kind {
            Some(http_route::filter::Kind::Redirect(r)) => Some(r),
            _ => None,
        })
    });
    match (decision, redirect) {
        (Decision::Allowed(allowed), Some(redirect)) => {
            let matched = matching::selected_match(&choice, selected)
                .and_then(|m| rule.and_then(|r| r.matches.get(m)));
            match matching::redirect_answer(redirect, matched) {
                Ok(answer) => Decision::Allowed(format!("{allowed}, then redirected: {answer}")),
                Err(why) => {
                    Decision::Denied(format!("route {name} {why}; the client was {allowed}"))
                }
            }
        }
        (decision, _) => decision,
    }
}

/// The gRPC part: the route, then the authorizations.
fn explain_grpc(
    server: &Server,
    routes: &[GrpcRoute],
    client: &Client,
    request: &Request,
    lines: &mut Vec<String>,
) -> Decision {
    let fallback;
    let routes = if routes.is_empty() {
        fallback = [GrpcRoute {
            metadata: Some(default_metadata()),
            rules: vec![grpc_route::Rule::default()],
            ..Default::default()
        }];
        lines.push(NO_ROUTES.to_string());
        &fallback[..]
    } else {
        routes
    };
    let choice = matching::choose(
        routes,
        request,
        matching::grpc_score,
        GrpcScore::default(),
        grpc_match_text,
    );
    lines.extend(matching::route_lines(&choice, |i| {
        route_name(routes[i].metadata.as_ref())
    }));
    let Some(selected) = choice.selected else {
        return Decision::Denied(
            "no route matches the call (the proxy answers gRPC status NOT_FOUND)".into(),
        );
    };
    let route = &routes[selected];
    if let Some(rule) = matching::selected_rule(&choice, selected).and_then(|r| route.rules.get(r))
        && !rule.filters.is_empty()
    {
        let filters: Vec<String> = rule.filters.iter().map(grpc_filter_text).collect();
        lines.push(line("filters", filters.join("; ")));
    }
    let name = route_name(route.metadata.as_ref());
    admit_on_route(
        server,
        &route.authorizations,
        &name,
        client,
        lines,
        "gRPC status PERMISSION_DENIED",
    )
}

const NO_ROUTES: &str =
    "            (the server sent no routes: the proxy uses one that matches everything)";

fn default_metadata() -> linkerd2_proxy_api::meta::Metadata {
    linkerd2_proxy_api::meta::Metadata {
        kind: Some(metadata::Kind::Default("default".into())),
    }
}

/// Tries the route's authorizations, then the server's, then the proxy's own.
fn admit_on_route(
    server: &Server,
    route_authzs: &[Authz],
    route: &str,
    client: &Client,
    lines: &mut Vec<String>,
    denial: &str,
) -> Decision {
    let checks = authorize(
        route_authzs
            .iter()
            .map(|a| (a, "route"))
            .chain(server.authorizations.iter().map(|a| (a, "server"))),
        client,
    );
    match push_checks(&checks, lines) {
        Some(name) => Decision::Allowed(format!("allowed by {name} on route {route}")),
        None => Decision::Denied(format!(
            "no authorization of route {route} admits the client (the proxy answers {denial})"
        )),
    }
}

/// Each authorization's verdict in order; the first that admits ends the search, and the ones
/// after it are not reached. The proxy's `default:localhost` comes last.
pub fn authorize<'a>(
    authzs: impl Iterator<Item = (&'a Authz, &'static str)>,
    client: &Client,
) -> Vec<AuthzCheck> {
    let mut checks: Vec<AuthzCheck> = authzs
        .map(|(authz, origin)| AuthzCheck {
            name: authz_name(authz),
            origin,
            verdict: Some(authz_admits(authz, client)),
        })
        .collect();
    checks.push(AuthzCheck {
        name: LOCALHOST.into(),
        origin: "proxy",
        verdict: Some(localhost_admits(client)),
    });
    if let Some(first) = checks.iter().position(|c| matches!(c.verdict, Some(Ok(_)))) {
        for later in &mut checks[first + 1..] {
            later.verdict = None;
        }
    }
    checks
}

/// Writes one line per check; returns the name of the authorization that admits, if any.
fn push_checks(checks: &[AuthzCheck], lines: &mut Vec<String>) -> Option<String> {
    if checks.len() == 1 {
        lines.push("authorizations: the controller sent none for this route or server".into());
    }
    let mut admitted = None;
    for check in checks {
        let verdict = match &check.verdict {
            Some(Ok(why)) => {
                admitted.get_or_insert_with(|| check.name.clone());
                format!("admits: {why}")
            }
            Some(Err(why)) => format!("does not admit: {why}"),
            None => "not reached".into(),
        };
        lines.push(format!(
            "authorization {} ({}): {verdict}",
            check.name, check.origin
        ));
    }
    admitted
}

/// Whether one authorization admits `client`: networks first, then authentication, as the
/// proxy checks them.
pub fn authz_admits(authz: &Authz, client: &Client) -> Result<String, String> {
    let network = network_admits(authz, client)?;
    let authn = match authz
        .authentication
        .as_ref()
        .and_then(|a| a.permit.as_ref())
    {
        None => return Err(NO_AUTHENTICATION.into()),
        Some(Permit::Unauthenticated(_)) => "unauthenticated clients are allowed".to_string(),
        Some(Permit::MeshTls(tls)) => match (&tls.clients, &client.tls) {
            (None, _) => return Err(NO_MESH_TLS_CLIENTS.into()),
            (Some(_), ClientTls::Plain) => {
                return Err(format!(
                    "no authentication: it requires {}, and the client is not mTLS",
                    required_text(tls.clients.as_ref())
                ));
            }
            (Some(Clients::Unauthenticated(_)), _) => "any mTLS client is allowed".to_string(),
            (Some(Clients::Identities(_)), ClientTls::NoIdentity) => {
                return Err(format!(
                    "no authentication: it requires {}, and the client has no identity",
                    required_text(tls.clients.as_ref())
                ));
            }
            (Some(Clients::Identities(ids)), ClientTls::Identity(id)) => {
                if ids.identities.iter().any(|i| i.name == *id) {
                    format!("identity {id} is listed")
                } else if let Some(suffix) =
                    ids.suffixes.iter().find(|s| suffix_contains(&s.parts, id))
                {
                    if suffix.parts.is_empty() {
                        "any identity is allowed".to_string()
                    } else {
                        format!("identity {id} ends with .{}", suffix.parts.join("."))
                    }
                } else {
                    let options = identity_options(ids);
                    return Err(if options.len() == 1 {
                        format!("wrong identity: {id} is not {}", options[0])
                    } else {
                        format!("wrong identity: {id} is none of {}", options.join(", "))
                    });
                }
            }
        },
    };
    Ok(format!("{network}; {authn}"))
}

/// The proxy's `default:localhost`: any client from 127.0.0.1 or ::1 (exactly those).
fn localhost_admits(client: &Client) -> Result<String, String> {
    match client.ip {
        Some(ip) if is_localhost(ip) => Ok(format!(
            "{ip} is localhost; unauthenticated clients are allowed"
        )),
        Some(ip) => Err(format!("network not covered: {ip} is not 127.0.0.1 or ::1")),
        None => Err("network not covered: only 127.0.0.1 and ::1, and no --client-ip given".into()),
    }
}

fn is_localhost(ip: IpAddr) -> bool {
    ip == IpAddr::from([127, 0, 0, 1]) || ip == IpAddr::from(std::net::Ipv6Addr::LOCALHOST)
}

/// Whether a network of `authz` contains the client; without an address, only a network
/// spanning every address (`/0`, no exceptions) does.
fn network_admits(authz: &Authz, client: &Client) -> Result<String, String> {
    if authz.networks.is_empty() {
        return Err(NO_NETWORKS.into());
    }
    let all: Vec<String> = authz.networks.iter().map(network_text).collect();
    let Some(ip) = client.ip else {
        return match authz
            .networks
            .iter()
            .find(|n| n.except.is_empty() && n.net.as_ref().is_some_and(|net| net.prefix_len == 0))
        {
            Some(n) => Ok(format!("{} covers every address", network_text(n))),
            None => Err(format!(
                "network not covered: without --client-ip only a network of every address \
                 counts, and it lists {}",
                all.join(", ")
            )),
        };
    };
    let mut excepted = None;
    for network in &authz.networks {
        let Some(net) = network.net.and_then(|n| ipnet::IpNet::try_from(n).ok()) else {
            continue;
        };
        if !net.contains(&ip) {
            continue;
        }
        match network
            .except
            .iter()
            .filter_map(|e| ipnet::IpNet::try_from(*e).ok())
            .find(|e| e.contains(&ip))
        {
            None => return Ok(format!("{ip} is in {net}")),
            Some(except) => excepted = Some(format!("{ip} is in {net} but excepted by {except}")),
        }
    }
    Err(match excepted {
        Some(why) => format!("network not covered: {why}"),
        None => format!("network not covered: {ip} is in none of {}", all.join(", ")),
    })
}

/// What an authorization's mesh TLS requires, for a message: `mesh TLS`, `any identity`,
/// `identity a`, `one of the identities a, *.b`.
fn required_text(clients: Option<&Clients>) -> String {
    match clients {
        Some(Clients::Unauthenticated(_)) | None => "mesh TLS".into(),
        Some(Clients::Identities(ids)) => {
            if ids.suffixes.iter().any(|s| s.parts.is_empty()) {
                return "any identity".into();
            }
            let options = identity_options(ids);
            match options.len() {
                0 => "an identity but lists none".into(),
                1 => format!("identity {}", options[0]),
                _ => format!("one of the identities {}", options.join(", ")),
            }
        }
    }
}

/// The exact identities, then the suffixes as `*.suffix`.
fn identity_options(ids: &PermitClientIdentities) -> Vec<String> {
    let mut options: Vec<String> = ids.identities.iter().map(|i| i.name.clone()).collect();
    options.extend(
        ids.suffixes
            .iter()
            .map(|s| format!("*.{}", s.parts.join("."))),
    );
    options
}

/// A suffix `[a, b]` contains names ending in `.a.b`; the empty suffix contains every name.
fn suffix_contains(parts: &[String], id: &str) -> bool {
    if parts.is_empty() {
        return true;
    }
    id.ends_with(&format!(".{}", parts.join(".")))
}

/// The rate limit lines: which limits count this request, for an admitted HTTP request.
fn rate_limit_lines(
    limit: Option<&HttpLocalRateLimit>,
    client: &Client,
    decision: &Decision,
    lines: &mut Vec<String>,
) {
    let Some(limit) = limit else {
        lines.push(line("rate limit", "none"));
        return;
    };
    let name = match limit.metadata.as_ref().and_then(|m| m.kind.as_ref()) {
        Some(metadata::Kind::Resource(r)) => format!("{}:{}", r.kind.to_lowercase(), r.name),
        Some(metadata::Kind::Default(name)) => format!("default:{name}"),
        None => "<no name>".into(),
    };
    let mut applies = Vec::new();
    if let Some(total) = limit.total.as_ref().filter(|l| l.requests_per_second > 0) {
        applies.push(format!(
            "total {}/s shared by all clients",
            total.requests_per_second
        ));
    }
    let identity = match &client.tls {
        ClientTls::Identity(id) => Some(id.as_str()),
        _ => None,
    };
    let overridden = identity.and_then(|id| {
        limit.overrides.iter().find(|o| {
            o.clients
                .iter()
                .flat_map(|c| &c.identities)
                .any(|i| i.name == id)
        })
    });
    match (overridden, identity) {
        (Some(o), Some(id)) => {
            let rps = o.limit.as_ref().map_or(0, |l| l.requests_per_second);
            applies.push(format!("override {rps}/s for identity {id}"));
        }
        _ => {
            if let Some(per) = limit
                .identity
                .as_ref()
                .filter(|l| l.requests_per_second > 0)
            {
                applies.push(match identity {
                    Some(id) => format!("{}/s for identity {id}", per.requests_per_second),
                    None => format!(
                        "{}/s shared by the clients without an identity",
                        per.requests_per_second
                    ),
                });
            }
        }
    }
    let applies = if applies.is_empty() {
        "no limit counts this client".to_string()
    } else {
        applies.join(", ")
    };
    let when = match decision {
        Decision::Allowed(_) => "",
        Decision::Denied(_) => " (had it been admitted)",
    };
    lines.push(line("rate limit", format!("{name}: {applies}{when}")));
}

fn protocol_kind(server: &Server) -> Option<&proxy_protocol::Kind> {
    server.protocol.as_ref().and_then(|p| p.kind.as_ref())
}

fn client_text(client: &Client) -> String {
    let addr = client
        .ip
        .map_or_else(|| "address not given".to_string(), |ip| ip.to_string());
    match &client.tls {
        ClientTls::Plain => format!("{addr}, not mTLS"),
        ClientTls::NoIdentity => format!("{addr}, mTLS without identity"),
        ClientTls::Identity(id) => format!("{addr}, mTLS identity {id}"),
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

/// The `PORT` argument: a port number 1-65535, whatever is wrong with it (`0`, `65536`, a
/// number too large for any integer type, a word) said the same way.
fn port_number(value: &str) -> Result<u32, String> {
    value
        .parse::<u32>()
        .ok()
        .filter(|port| (1..=65535).contains(port))
        .ok_or_else(|| "not a port number (1-65535)".to_string())
}

#[cfg(test)]
mod tests;
