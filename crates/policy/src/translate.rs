//! [`InboundServer`] → `io.linkerd.proxy.inbound.Server` (spec/policy.md §4.8).
//!
//! The proxy rejects a whole Server over one missing field (compat note Z.7), so every
//! authorization carries networks, metadata and `name` labels, every route carries metadata,
//! and `Detect` always carries its timeout.

use ipnet::IpNet;
use linkerd_index::{
    inbound::{
        AuthorizationRef, ClientAuthentication, ClientAuthorization, IdentityMatch,
        InboundProtocol, InboundRoute, InboundServer, Network, RateLimit, RouteRef, ServerRef,
    },
    routes::{
        Filter, GrpcRouteMatch, GrpcRule, HeaderMatch, HeaderModifier, HostMatch, HttpRouteMatch,
        HttpRule, PathMatch, PathModifier, QueryParamMatch, RequestRedirect,
    },
};
use linkerd2_proxy_api::{
    grpc_route, http_route, http_types,
    inbound::{self as api, authn, proxy_protocol},
    meta, net,
};
use std::{collections::HashMap, time::Duration};

/// The API group of Linkerd's policy resources.
const POLICY_GROUP: &str = "policy.linkerd.io";

/// Status of a redirect whose filter sets none: the Gateway API's documented default. Upstream
/// sends 200 here (spec §12); project decision 1 follows the CRD's meaning instead.
pub const DEFAULT_REDIRECT_STATUS: u32 = 302;

/// Turns inbound views into the proxy API's `Server`.
#[derive(Clone, Debug)]
pub struct InboundTranslator {
    /// `--cluster-networks`: the networks of an authorization that names none.
    cluster_networks: Vec<IpNet>,
}

// === impl InboundTranslator ===

impl InboundTranslator {
    /// A translator filling network-less authorizations with `cluster_networks`.
    pub fn new(cluster_networks: Vec<IpNet>) -> Self {
        Self { cluster_networks }
    }

    /// The wire form of `server` (§4.8). `server_ips` is never set.
    pub fn server(&self, server: &InboundServer) -> api::Server {
        let kind = match server.protocol {
            InboundProtocol::Detect { timeout } => {
                proxy_protocol::Kind::Detect(proxy_protocol::Detect {
                    timeout: Some(duration(timeout)),
                    http_routes: self.http_routes(&server.http_routes),
                    http_local_rate_limit: server.rate_limit.as_ref().map(rate_limit),
                })
            }
            InboundProtocol::Http1 => proxy_protocol::Kind::Http1(proxy_protocol::Http1 {
                routes: self.http_routes(&server.http_routes),
                local_rate_limit: server.rate_limit.as_ref().map(rate_limit),
            }),
            InboundProtocol::Http2 => proxy_protocol::Kind::Http2(proxy_protocol::Http2 {
                routes: self.http_routes(&server.http_routes),
                local_rate_limit: server.rate_limit.as_ref().map(rate_limit),
            }),
            InboundProtocol::Grpc => proxy_protocol::Kind::Grpc(proxy_protocol::Grpc {
                routes: server
                    .grpc_routes
                    .iter()
                    .map(|r| self.grpc_route(r))
                    .collect(),
            }),
            InboundProtocol::Opaque => proxy_protocol::Kind::Opaque(proxy_protocol::Opaque {}),
            InboundProtocol::Tls => proxy_protocol::Kind::Tls(proxy_protocol::Tls {}),
        };
        let (group, kind_label, name) = match &server.reference {
            ServerRef::Default(policy) => ("", "default", policy.as_str()),
            ServerRef::Server(name) => (POLICY_GROUP, "server", name.as_str()),
        };
        api::Server {
            protocol: Some(api::ProxyProtocol { kind: Some(kind) }),
            server_ips: vec![],
            authorizations: self.authorizations(server.authorizations.iter()),
            labels: labels(group, kind_label, name),
        }
    }

    fn authorizations<'a>(
        &self,
        authzs: impl Iterator<Item = (&'a AuthorizationRef, &'a ClientAuthorization)>,
    ) -> Vec<api::Authz> {
        authzs.map(|(r, a)| self.authorization(r, a)).collect()
    }

    /// One authorization: metadata and labels name it; no networks means the cluster's.
    fn authorization(
        &self,
        reference: &AuthorizationRef,
        authz: &ClientAuthorization,
    ) -> api::Authz {
        let (metadata, labels) = match reference {
            AuthorizationRef::Default(name) => (
                meta::metadata::Kind::Default(name.clone()),
                labels("", "default", name),
            ),
            AuthorizationRef::ServerAuthorization(name) => (
                resource(POLICY_GROUP, "serverauthorization", name),
                labels(POLICY_GROUP, "serverauthorization", name),
            ),
            AuthorizationRef::AuthorizationPolicy(name) => (
                resource(POLICY_GROUP, "authorizationpolicy", name),
                labels(POLICY_GROUP, "authorizationpolicy", name),
            ),
        };
        let networks = if authz.networks.is_empty() {
            self.cluster_networks
                .iter()
                .map(|net| api::Network {
                    net: Some((*net).into()),
                    except: vec![],
                })
                .collect()
        } else {
            authz.networks.iter().map(network).collect()
        };
        api::Authz {
            networks,
            authentication: Some(authentication(&authz.authentication)),
            labels,
            metadata: Some(meta::Metadata {
                kind: Some(metadata),
            }),
        }
    }

    fn http_routes(&self, routes: &[InboundRoute<HttpRule>]) -> Vec<api::HttpRoute> {
        routes
            .iter()
            .map(|route| api::HttpRoute {
                metadata: Some(route_metadata(&route.reference)),
                hosts: route.hostnames.iter().map(host_match).collect(),
                authorizations: self.authorizations(route.authorizations.iter()),
                rules: route
                    .rules
                    .iter()
                    .map(|rule| api::http_route::Rule {
                        matches: rule.matches.iter().map(http_match).collect(),
                        filters: rule.filters.iter().filter_map(http_filter).collect(),
                    })
                    .collect(),
            })
            .collect()
    }

    fn grpc_route(&self, route: &InboundRoute<GrpcRule>) -> api::GrpcRoute {
        api::GrpcRoute {
            metadata: Some(route_metadata(&route.reference)),
            hosts: route.hostnames.iter().map(host_match).collect(),
            authorizations: self.authorizations(route.authorizations.iter()),
            rules: route
                .rules
                .iter()
                .map(|rule| api::grpc_route::Rule {
                    matches: rule.matches.iter().map(grpc_match).collect(),
                    filters: rule.filters.iter().filter_map(grpc_filter).collect(),
                })
                .collect(),
        }
    }
}

/// `{group, kind, name}`, the label set of servers and authorizations.
fn labels(group: &str, kind: &str, name: &str) -> HashMap<String, String> {
    HashMap::from([
        ("group".to_string(), group.to_string()),
        ("kind".to_string(), kind.to_string()),
        ("name".to_string(), name.to_string()),
    ])
}

fn resource(group: &str, kind: &str, name: &str) -> meta::metadata::Kind {
    meta::metadata::Kind::Resource(meta::Resource {
        group: group.to_string(),
        kind: kind.to_string(),
        name: name.to_string(),
        ..meta::Resource::default()
    })
}

fn route_metadata(reference: &RouteRef) -> meta::Metadata {
    let kind = match reference {
        RouteRef::Default(name) => meta::metadata::Kind::Default(name.clone()),
        RouteRef::Resource { group, kind, name } => resource(group, kind, name),
    };
    meta::Metadata { kind: Some(kind) }
}

pub(crate) fn duration(d: Duration) -> prost_types::Duration {
    prost_types::Duration {
        seconds: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        // Below 1e9, so it fits.
        nanos: d.subsec_nanos() as i32,
    }
}

fn network(n: &Network) -> api::Network {
    api::Network {
        net: Some(n.net.into()),
        except: n.except.iter().map(|e| net::IpNetwork::from(*e)).collect(),
    }
}

fn authentication(authn: &ClientAuthentication) -> api::Authn {
    let permit = match authn {
        ClientAuthentication::Unauthenticated => {
            authn::Permit::Unauthenticated(authn::PermitUnauthenticated {})
        }
        ClientAuthentication::TlsUnauthenticated => authn::Permit::MeshTls(authn::PermitMeshTls {
            clients: Some(authn::permit_mesh_tls::Clients::Unauthenticated(
                authn::PermitUnauthenticated {},
            )),
        }),
        ClientAuthentication::TlsAuthenticated(ids) => {
            let mut identities = Vec::new();
            let mut suffixes = Vec::new();
            for id in ids {
                match id {
                    IdentityMatch::Exact(name) => {
                        identities.push(api::Identity { name: name.clone() })
                    }
                    IdentityMatch::Suffix(parts) => suffixes.push(api::IdentitySuffix {
                        parts: parts.clone(),
                    }),
                }
            }
            authn::Permit::MeshTls(authn::PermitMeshTls {
                clients: Some(authn::permit_mesh_tls::Clients::Identities(
                    authn::permit_mesh_tls::PermitClientIdentities {
                        identities,
                        suffixes,
                    },
                )),
            })
        }
    };
    api::Authn {
        permit: Some(permit),
    }
}

fn rate_limit(limit: &RateLimit) -> api::HttpLocalRateLimit {
    use api::http_local_rate_limit::{Limit, Override, r#override::ClientIdentities};
    let limit_of = |rps: u32| Limit {
        requests_per_second: rps,
    };
    api::HttpLocalRateLimit {
        metadata: Some(meta::Metadata {
            kind: Some(resource(
                POLICY_GROUP,
                "HTTPLocalRateLimitPolicy",
                &limit.name,
            )),
        }),
        total: limit.total.map(limit_of),
        identity: limit.identity.map(limit_of),
        overrides: limit
            .overrides
            .iter()
            .map(|o| Override {
                limit: Some(limit_of(o.requests_per_second)),
                clients: Some(ClientIdentities {
                    identities: o
                        .identities
                        .iter()
                        .map(|name| api::Identity { name: name.clone() })
                        .collect(),
                }),
            })
            .collect(),
    }
}

pub(crate) fn host_match(host: &HostMatch) -> http_route::HostMatch {
    let m = match host {
        HostMatch::Exact(name) => http_route::host_match::Match::Exact(name.clone()),
        HostMatch::Suffix { reverse_labels } => {
            http_route::host_match::Match::Suffix(http_route::host_match::Suffix {
                reverse_labels: reverse_labels.clone(),
            })
        }
    };
    http_route::HostMatch { r#match: Some(m) }
}

pub(crate) fn http_match(m: &HttpRouteMatch) -> http_route::HttpRouteMatch {
    use http_route::path_match::Kind;
    http_route::HttpRouteMatch {
        path: m.path.as_ref().map(|p| http_route::PathMatch {
            kind: Some(match p {
                PathMatch::Exact(s) => Kind::Exact(s.clone()),
                PathMatch::Prefix(s) => Kind::Prefix(s.clone()),
                PathMatch::Regex(s) => Kind::Regex(s.clone()),
            }),
        }),
        headers: m.headers.iter().map(header_match).collect(),
        query_params: m
            .query_params
            .iter()
            .map(|q| {
                use http_route::query_param_match::Value;
                let (name, value) = match q {
                    QueryParamMatch::Exact { name, value } => (name, Value::Exact(value.clone())),
                    QueryParamMatch::Regex { name, regex } => (name, Value::Regex(regex.clone())),
                };
                http_route::QueryParamMatch {
                    name: name.clone(),
                    value: Some(value),
                }
            })
            .collect(),
        method: m.method.as_deref().map(method),
    }
}

fn header_match(h: &HeaderMatch) -> http_route::HeaderMatch {
    use http_route::header_match::Value;
    let (name, value) = match h {
        HeaderMatch::Exact { name, value } => (name, Value::Exact(value.as_bytes().to_vec())),
        HeaderMatch::Regex { name, regex } => (name, Value::Regex(regex.clone())),
    };
    http_route::HeaderMatch {
        name: name.clone(),
        value: Some(value),
    }
}

/// The nine standard methods are sent as registered ones, anything else as a string.
fn method(m: &str) -> http_types::HttpMethod {
    use http_types::http_method::{Registered, Type};
    let t = match Registered::from_str_name(m) {
        Some(registered) => Type::Registered(registered.into()),
        None => Type::Unregistered(m.to_string()),
    };
    http_types::HttpMethod { r#type: Some(t) }
}

pub(crate) fn grpc_match(m: &GrpcRouteMatch) -> grpc_route::GrpcRouteMatch {
    grpc_route::GrpcRouteMatch {
        rpc: Some(grpc_route::GrpcRpcMatch {
            service: m.service.clone().unwrap_or_default(),
            method: m.method.clone().unwrap_or_default(),
        }),
        headers: m.headers.iter().map(header_match).collect(),
    }
}

/// HTTP filters sent inbound: request header modifiers and redirects; response header
/// modifiers are dropped (§4.8).
fn http_filter(f: &Filter) -> Option<api::http_route::Filter> {
    use api::http_route::filter::Kind;
    let kind = match f {
        Filter::RequestHeaderModifier(m) => Kind::RequestHeaderModifier(header_modifier(m)),
        Filter::RequestRedirect(r) => Kind::Redirect(redirect(r)),
        Filter::ResponseHeaderModifier(_) => return None,
    };
    Some(api::http_route::Filter { kind: Some(kind) })
}

/// gRPC filters sent inbound: request header modifiers only (§4.8).
fn grpc_filter(f: &Filter) -> Option<api::grpc_route::Filter> {
    use api::grpc_route::filter::Kind;
    match f {
        Filter::RequestHeaderModifier(m) => Some(api::grpc_route::Filter {
            kind: Some(Kind::RequestHeaderModifier(header_modifier(m))),
        }),
        Filter::ResponseHeaderModifier(_) | Filter::RequestRedirect(_) => None,
    }
}

pub(crate) fn header_modifier(m: &HeaderModifier) -> http_route::RequestHeaderModifier {
    let headers = |pairs: &[(String, String)]| http_types::Headers {
        headers: pairs
            .iter()
            .map(|(name, value)| http_types::headers::Header {
                name: name.clone(),
                value: value.as_bytes().to_vec(),
            })
            .collect(),
    };
    http_route::RequestHeaderModifier {
        add: Some(headers(&m.add)),
        set: Some(headers(&m.set)),
        remove: m.remove.clone(),
    }
}

pub(crate) fn redirect(r: &RequestRedirect) -> http_route::RequestRedirect {
    use http_route::path_modifier::Replace;
    http_route::RequestRedirect {
        scheme: r.scheme.as_deref().map(http_types::Scheme::from),
        host: r.hostname.clone().unwrap_or_default(),
        path: r.path.as_ref().map(|p| http_route::PathModifier {
            replace: Some(match p {
                PathModifier::Full(s) => Replace::Full(s.clone()),
                PathModifier::Prefix(s) => Replace::Prefix(s.clone()),
            }),
        }),
        port: r.port.map(u32::from).unwrap_or(0),
        status: r.status.map(u32::from).unwrap_or(DEFAULT_REDIRECT_STATUS),
    }
}

pub mod outbound;

#[cfg(test)]
mod tests;
