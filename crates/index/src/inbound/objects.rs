//! The policy kinds in the index: conversion of each CRD into its domain form
//! (spec/policy.md §4.5–§4.7, references per §3.1, identities §3.2, networks §3.3) and how it is
//! stored. A resource that cannot be used is an [`InvalidObject`]: logged, counted, skipped.

use ipnet::IpNet;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta};
use linkerd_k8s_api::{
    AuthorizationPolicy, HttpLocalRateLimitPolicy, HttpRoute as PolicyHttpRoute,
    MeshTlsAuthentication, NetworkAuthentication, ServerAuthorization,
    gateway_api::{grpcroutes::GrpcRoute, httproutes::HttpRoute as GatewayHttpRoute},
    http_route::{HttpRouteFilter, POLICY_CONTROLLER_NAME},
};
use std::collections::BTreeSet;

use super::{ClientAuthentication, ClientAuthorization, IdentityMatch, InboundConfig, Network};
use crate::{
    model::{
        AuthenticationRef, AuthorizationPolicyInfo, InboundRouteInfo, InvalidObject,
        MeshTlsAuthenticationInfo, NetworkAuthenticationInfo, ObjectRef, PolicyTarget,
        RateLimitPolicyInfo, RouteRules, ServerAuthorizationInfo, ServerSelection, invalid, names,
    },
    routes::{GrpcRule, HostMatch, HttpRule, convert},
    selector::Selector,
    store::{Cluster, IndexedKind, Touched},
};

const POLICY_GROUP: &str = "policy.linkerd.io";
const GATEWAY_GROUP: &str = "gateway.networking.k8s.io";

/// Whether a reference `(group?, kind)` names the type `(group, kind)`: groups compare with
/// absent or empty meaning `core`, both case-insensitively (§3.1).
pub fn ref_is(ref_group: Option<&str>, ref_kind: &str, group: &str, kind: &str) -> bool {
    let norm = |g: &str| {
        if g.is_empty() {
            "core".to_string()
        } else {
            g.to_ascii_lowercase()
        }
    };
    norm(ref_group.unwrap_or("")) == norm(group) && ref_kind.eq_ignore_ascii_case(kind)
}

/// A client identity pattern (§3.2): `*` any identity, `*.a.b` a suffix, else exact.
pub fn parse_identity(id: &str) -> IdentityMatch {
    if id == "*" {
        IdentityMatch::Suffix(vec![])
    } else if let Some(rest) = id.strip_prefix("*.") {
        IdentityMatch::Suffix(rest.split('.').map(str::to_string).collect())
    } else {
        IdentityMatch::Exact(id.to_string())
    }
}

/// A CIDR or a bare IP (a /32 or /128).
pub fn parse_net(s: &str) -> Result<IpNet, String> {
    s.parse::<IpNet>()
        .or_else(|_| s.parse::<std::net::IpAddr>().map(IpNet::from))
        .map_err(|_| format!("invalid CIDR {s:?}"))
}

fn parse_network(n: &linkerd_k8s_api::Network) -> Result<Network, String> {
    Ok(Network {
        net: parse_net(&n.cidr)?,
        except: n
            .except
            .iter()
            .flatten()
            .map(|e| parse_net(e))
            .collect::<Result<_, _>>()?,
    })
}

fn identity_config(cluster: &Cluster) -> (String, String) {
    cluster.inbound_config.as_ref().map_or_else(
        || ("linkerd".to_string(), "cluster.local".to_string()),
        |c: &InboundConfig| (c.control_plane_namespace.clone(), c.identity_domain.clone()),
    )
}

fn sa_identity(cluster: &Cluster, sa: &str, namespace: &str) -> String {
    let (cp, domain) = identity_config(cluster);
    format!("{sa}.{namespace}.serviceaccount.identity.{cp}.{domain}")
}

fn accepted(conditions: &[Condition]) -> bool {
    conditions
        .iter()
        .any(|c| c.type_ == "Accepted" && c.status == "True")
}

// === ServerAuthorization ===

fn server_authorization(
    cluster: &Cluster,
    saz: &ServerAuthorization,
) -> Result<ServerAuthorizationInfo, InvalidObject> {
    let (namespace, name) = names("ServerAuthorization", &saz.metadata)?;
    let bad = |reason: String| invalid("ServerAuthorization", &namespace, &name, reason);
    let servers = match (&saz.spec.server.name, &saz.spec.server.selector) {
        (Some(n), _) => ServerSelection::Name(n.clone()),
        (None, Some(sel)) => ServerSelection::Selector(Selector::from_label_selector(sel)),
        // Neither: every Server of the namespace.
        (None, None) => ServerSelection::Selector(Selector::default()),
    };
    let client = &saz.spec.client;
    let networks = client
        .networks
        .iter()
        .flatten()
        .map(parse_network)
        .collect::<Result<_, _>>()
        .map_err(bad)?;
    let authentication = if client.unauthenticated {
        ClientAuthentication::Unauthenticated
    } else if let Some(mtls) = &client.mesh_tls {
        if mtls.unauthenticated_tls {
            ClientAuthentication::TlsUnauthenticated
        } else {
            let mut ids: Vec<IdentityMatch> = mtls
                .identities
                .iter()
                .flatten()
                .map(|i| parse_identity(i))
                .collect();
            ids.extend(mtls.service_accounts.iter().flatten().map(|sa| {
                IdentityMatch::Exact(sa_identity(
                    cluster,
                    &sa.name,
                    sa.namespace.as_deref().unwrap_or(&namespace),
                ))
            }));
            if ids.is_empty() {
                return Err(bad("meshTLS names no identities or service accounts".into()));
            }
            ClientAuthentication::TlsAuthenticated(ids)
        }
    } else {
        return Err(bad("client is neither unauthenticated nor meshTLS".into()));
    };
    Ok(ServerAuthorizationInfo {
        servers,
        authorization: ClientAuthorization {
            networks,
            authentication,
        },
        namespace,
        name,
    })
}

// === AuthorizationPolicy ===

fn authorization_policy(
    cluster: &Cluster,
    ap: &AuthorizationPolicy,
) -> Result<AuthorizationPolicyInfo, InvalidObject> {
    let (namespace, name) = names("AuthorizationPolicy", &ap.metadata)?;
    let bad = |reason: String| invalid("AuthorizationPolicy", &namespace, &name, reason);
    let t = &ap.spec.target_ref;
    let group = t.group.as_deref();
    let target = if ref_is(group, &t.kind, POLICY_GROUP, "Server") {
        PolicyTarget::Server(t.name.clone())
    } else if ref_is(group, &t.kind, "core", "Namespace") {
        PolicyTarget::Namespace
    } else if ref_is(group, &t.kind, POLICY_GROUP, "HTTPRoute")
        || ref_is(group, &t.kind, GATEWAY_GROUP, "HTTPRoute")
        || ref_is(group, &t.kind, GATEWAY_GROUP, "GRPCRoute")
    {
        PolicyTarget::Route {
            group: group.unwrap_or_default().to_string(),
            kind: t.kind.clone(),
            name: t.name.clone(),
        }
    } else {
        return Err(bad(format!("unsupported targetRef kind {}", t.kind)));
    };
    let authentications = ap
        .spec
        .required_authentication_refs
        .iter()
        .map(|r| {
            let g = r.group.as_deref();
            let ns = r.namespace.clone().unwrap_or_else(|| namespace.clone());
            if ref_is(g, &r.kind, POLICY_GROUP, "MeshTLSAuthentication") {
                Ok(AuthenticationRef::MeshTls {
                    namespace: ns,
                    name: r.name.clone(),
                })
            } else if ref_is(g, &r.kind, POLICY_GROUP, "NetworkAuthentication") {
                Ok(AuthenticationRef::Network {
                    namespace: ns,
                    name: r.name.clone(),
                })
            } else if ref_is(g, &r.kind, "core", "ServiceAccount") {
                Ok(AuthenticationRef::ServiceAccount {
                    identity: sa_identity(cluster, &r.name, &ns),
                })
            } else {
                Err(bad(format!("unsupported authentication kind {}", r.kind)))
            }
        })
        .collect::<Result<_, _>>()?;
    Ok(AuthorizationPolicyInfo {
        target,
        authentications,
        namespace,
        name,
    })
}

// === MeshTLSAuthentication / NetworkAuthentication ===

fn mesh_tls_authentication(
    cluster: &Cluster,
    m: &MeshTlsAuthentication,
) -> Result<MeshTlsAuthenticationInfo, InvalidObject> {
    let (namespace, name) = names("MeshTLSAuthentication", &m.metadata)?;
    let (cp, domain) = identity_config(cluster);
    let mut identities: Vec<IdentityMatch> = m
        .spec
        .identities
        .iter()
        .flatten()
        .map(|i| parse_identity(i))
        .collect();
    for r in m.spec.identity_refs.iter().flatten() {
        let g = r.group.as_deref();
        if ref_is(g, &r.kind, "core", "ServiceAccount") {
            let ns = r.namespace.as_deref().unwrap_or(&namespace);
            identities.push(IdentityMatch::Exact(sa_identity(cluster, &r.name, ns)));
        } else if ref_is(g, &r.kind, "core", "Namespace") {
            let mut parts = vec![
                r.name.clone(),
                "serviceaccount".into(),
                "identity".into(),
                cp.clone(),
            ];
            parts.extend(domain.split('.').map(str::to_string));
            identities.push(IdentityMatch::Suffix(parts));
        } else {
            return Err(invalid(
                "MeshTLSAuthentication",
                &namespace,
                &name,
                format!("invalid identity target kind {}", r.kind),
            ));
        }
    }
    if identities.is_empty() {
        return Err(invalid(
            "MeshTLSAuthentication",
            &namespace,
            &name,
            "no identities".into(),
        ));
    }
    Ok(MeshTlsAuthenticationInfo {
        identities,
        namespace,
        name,
    })
}

fn network_authentication(
    n: &NetworkAuthentication,
) -> Result<NetworkAuthenticationInfo, InvalidObject> {
    let (namespace, name) = names("NetworkAuthentication", &n.metadata)?;
    let networks: Vec<Network> = n
        .spec
        .networks
        .iter()
        .map(parse_network)
        .collect::<Result<_, _>>()
        .map_err(|r| invalid("NetworkAuthentication", &namespace, &name, r))?;
    if networks.is_empty() {
        return Err(invalid(
            "NetworkAuthentication",
            &namespace,
            &name,
            "at least one network must be specified".into(),
        ));
    }
    Ok(NetworkAuthenticationInfo {
        networks,
        namespace,
        name,
    })
}

// === HTTPLocalRateLimitPolicy ===

fn rate_limit(
    cluster: &Cluster,
    r: &HttpLocalRateLimitPolicy,
) -> Result<RateLimitPolicyInfo, InvalidObject> {
    let (namespace, name) = names("HTTPLocalRateLimitPolicy", &r.metadata)?;
    let bad = |reason: String| invalid("HTTPLocalRateLimitPolicy", &namespace, &name, reason);
    let t = &r.spec.target_ref;
    if !ref_is(t.group.as_deref(), &t.kind, POLICY_GROUP, "Server") {
        return Err(bad(format!("targetRef must be a Server, not {}", t.kind)));
    }
    let overrides = r
        .spec
        .overrides
        .iter()
        .flatten()
        .map(|o| {
            let ids = o
                .client_refs
                .iter()
                .map(|c| {
                    if ref_is(c.group.as_deref(), &c.kind, "core", "ServiceAccount") {
                        let ns = c.namespace.as_deref().unwrap_or(&namespace);
                        Ok(sa_identity(cluster, &c.name, ns))
                    } else {
                        Err(bad(
                            "overrides.clientRefs must target a ServiceAccount".into()
                        ))
                    }
                })
                .collect::<Result<Vec<_>, _>>()?;
            Ok((o.requests_per_second, ids))
        })
        .collect::<Result<_, _>>()?;
    Ok(RateLimitPolicyInfo {
        server: t.name.clone(),
        accepted: r.status.as_ref().is_some_and(|s| accepted(&s.conditions)),
        total: r.spec.total.as_ref().map(|l| l.requests_per_second),
        identity: r.spec.identity.as_ref().map(|l| l.requests_per_second),
        overrides,
        namespace,
        name,
    })
}

// === routes ===

/// A parent reference, whatever route kind it comes from.
struct ParentRef<'a> {
    group: Option<&'a str>,
    kind: Option<&'a str>,
    name: &'a str,
    namespace: Option<&'a str>,
    port: Option<i32>,
    section_name: Option<&'a str>,
}

/// The Servers a route's parent refs name. A Server ref with another namespace, a port or a
/// section name makes the whole route invalid (§4.6).
fn server_parents<'a>(
    namespace: &str,
    parents: impl Iterator<Item = ParentRef<'a>>,
) -> Result<BTreeSet<String>, String> {
    let mut servers = BTreeSet::new();
    for p in parents {
        let Some(kind) = p.kind else { continue };
        if !ref_is(p.group, kind, POLICY_GROUP, "Server") || p.name.is_empty() {
            continue;
        }
        if p.namespace.is_some_and(|ns| ns != namespace) {
            return Err(format!("Server parent {} in another namespace", p.name));
        }
        if p.port.is_some() || p.section_name.is_some() {
            return Err(format!(
                "Server parent {} with a port or sectionName",
                p.name
            ));
        }
        servers.insert(p.name.to_string());
    }
    Ok(servers)
}

/// The Servers for which `status.parents` has `Accepted=True` from this controller.
fn accepted_servers<'a>(
    statuses: impl Iterator<Item = (&'a str, Option<&'a str>, &'a str, &'a [Condition])>,
) -> BTreeSet<String> {
    statuses
        .filter(|(controller, kind, _, conditions)| {
            *controller == POLICY_CONTROLLER_NAME && *kind == Some("Server") && accepted(conditions)
        })
        .map(|(_, _, name, _)| name.to_string())
        .collect()
}

fn route_info(
    kind: &'static str,
    group: &str,
    meta: &ObjectMeta,
    parents: Result<BTreeSet<String>, String>,
    accepted: BTreeSet<String>,
    hostnames: Option<&Vec<String>>,
    rules: Result<RouteRules, convert::RouteError>,
) -> Result<InboundRouteInfo, InvalidObject> {
    let (namespace, name) = names(kind, meta)?;
    let parents = parents.map_err(|r| invalid(kind, &namespace, &name, r))?;
    let rules = rules.map_err(|e| invalid(kind, &namespace, &name, e.to_string()))?;
    Ok(InboundRouteInfo {
        group: group.to_string(),
        kind: kind.to_string(),
        created: meta.creation_timestamp.as_ref().map(|t| t.0.to_string()),
        parents,
        accepted,
        hostnames: hostnames
            .into_iter()
            .flatten()
            .map(|h| HostMatch::parse(h))
            .collect(),
        rules,
        namespace,
        name,
    })
}

/// The Servers a route's parent refs name and those its status accepts it for (see
/// [`server_parents`], [`accepted_servers`]); the route kinds' generated types differ but
/// share these fields.
macro_rules! route_parents {
    ($r:expr) => {{
        let r = $r;
        let namespace = r.metadata.namespace.as_deref().unwrap_or_default();
        let parents = server_parents(
            namespace,
            r.spec.parent_refs.iter().flatten().map(|p| ParentRef {
                group: p.group.as_deref(),
                kind: p.kind.as_deref(),
                name: &p.name,
                namespace: p.namespace.as_deref(),
                port: p.port,
                section_name: p.section_name.as_deref(),
            }),
        );
        let accepted = accepted_servers(r.status.iter().flat_map(|s| &s.parents).map(|p| {
            (
                p.controller_name.as_str(),
                p.parent_ref.kind.as_deref(),
                p.parent_ref.name.as_str(),
                p.conditions.as_slice(),
            )
        }));
        (parents, accepted)
    }};
}

fn policy_http_route(r: &PolicyHttpRoute) -> Result<InboundRouteInfo, InvalidObject> {
    let (parents, accepted) = route_parents!(r);
    let rules = r
        .spec
        .rules
        .iter()
        .flatten()
        .map(|rule| {
            Ok(HttpRule {
                matches: rule
                    .matches
                    .iter()
                    .flatten()
                    .map(convert::http_match)
                    .collect::<Result<_, _>>()?,
                filters: rule
                    .filters
                    .iter()
                    .flatten()
                    .map(|f| match f {
                        HttpRouteFilter::RequestHeaderModifier {
                            request_header_modifier: m,
                        } => convert::modifier_of!(m)
                            .map(crate::routes::Filter::RequestHeaderModifier),
                        HttpRouteFilter::ResponseHeaderModifier {
                            response_header_modifier: m,
                        } => convert::modifier_of!(m)
                            .map(crate::routes::Filter::ResponseHeaderModifier),
                        HttpRouteFilter::RequestRedirect { request_redirect } => {
                            convert::redirect(request_redirect)
                                .map(crate::routes::Filter::RequestRedirect)
                        }
                    })
                    .collect::<Result<_, _>>()?,
            })
        })
        .collect::<Result<_, _>>()
        .map(RouteRules::Http);
    route_info(
        "HTTPRoute",
        POLICY_GROUP,
        &r.metadata,
        parents,
        accepted,
        r.spec.hostnames.as_ref(),
        rules,
    )
}

fn gateway_http_route(r: &GatewayHttpRoute) -> Result<InboundRouteInfo, InvalidObject> {
    let (parents, accepted) = route_parents!(r);
    let rules = r
        .spec
        .rules
        .iter()
        .flatten()
        .map(|rule| {
            Ok(HttpRule {
                matches: rule
                    .matches
                    .iter()
                    .flatten()
                    .map(convert::http_match)
                    .collect::<Result<_, _>>()?,
                filters: rule
                    .filters
                    .iter()
                    .flatten()
                    .map(convert::gateway_http_filter)
                    .collect::<Result<_, _>>()?,
            })
        })
        .collect::<Result<_, _>>()
        .map(RouteRules::Http);
    route_info(
        "HTTPRoute",
        GATEWAY_GROUP,
        &r.metadata,
        parents,
        accepted,
        r.spec.hostnames.as_ref(),
        rules,
    )
}

fn grpc_route(r: &GrpcRoute) -> Result<InboundRouteInfo, InvalidObject> {
    let (parents, accepted) = route_parents!(r);
    let rules = r
        .spec
        .rules
        .iter()
        .flatten()
        .map(|rule| {
            Ok(GrpcRule {
                matches: rule
                    .matches
                    .iter()
                    .flatten()
                    .map(convert::grpc_match)
                    .collect::<Result<_, _>>()?,
                filters: rule
                    .filters
                    .iter()
                    .flatten()
                    .map(convert::grpc_filter)
                    .collect::<Result<_, _>>()?,
            })
        })
        .collect::<Result<_, _>>()
        .map(RouteRules::Grpc);
    route_info(
        "GRPCRoute",
        GATEWAY_GROUP,
        &r.metadata,
        parents,
        accepted,
        r.spec.hostnames.as_ref(),
        rules,
    )
}

// === IndexedKind impls ===

/// Implements [`IndexedKind`] for a policy kind stored in one of [`super::PolicyStores`]:
/// `$store` picks the store, `$convert` builds the domain form, `$key` its name in the store,
/// and a change touches its namespace (`$all` true: every namespace).
///
/// Route kinds also name `outbound = ($group, $kind, $convert)`: the route is then stored in
/// outbound form too (spec/policy.md §5.4), and an error of either form is reported. Kinds with
/// a status of their own name `status = ($apply, $delete, $keys)`: its inputs are stored
/// whether or not the object converts (§7).
macro_rules! policy_kind {
    ($ty:ty, $kind:literal, $metric:literal, $store:ident, $key:expr, $all:expr, $convert:expr
     $(, outbound = ($ogroup:expr, $okind:expr, $oconvert:expr))?
     $(, status = ($sapply:expr, $sdelete:expr, $skeys:expr))?) => {
        impl IndexedKind for $ty {
            const KIND: &'static str = $kind;
            const CACHE_METRIC: &'static str = $metric;

            fn apply(
                cluster: &mut Cluster,
                obj: &Self,
                touched: &mut Touched,
            ) -> Result<(), InvalidObject> {
                $( ($sapply)(cluster, obj, touched); )?
                #[allow(unused_mut)]
                let mut outbound: Result<(), InvalidObject> = Ok(());
                $(
                    if let Some(key) = crate::store::object_ref(obj) {
                        let key = crate::outbound::routes::RouteKey {
                            group: $ogroup,
                            kind: $okind,
                            namespace: key.namespace,
                            name: key.name,
                        };
                        crate::status::apply_route(cluster, &key, obj, touched);
                        outbound = crate::outbound::routes::apply_route(
                            cluster,
                            key,
                            ($oconvert)(obj),
                            touched,
                        );
                    }
                )?
                let convert: fn(&Cluster, &Self) -> Result<_, InvalidObject> = $convert;
                let inbound = match convert(cluster, obj) {
                    Ok(info) => {
                        let namespace = info.namespace.clone();
                        let name = ($key)(&info.name);
                        if cluster.policy.$store.insert(&namespace, name, info) {
                            touch(touched, namespace, $all);
                        }
                        Ok(())
                    }
                    Err(error) => {
                        // The last good version must not outlive an invalid update.
                        if let Some(key) = crate::store::object_ref(obj) {
                            if cluster.policy.$store.remove(&key.namespace, &($key)(&key.name)) {
                                touch(touched, key.namespace.clone(), $all);
                            }
                        }
                        Err(error)
                    }
                };
                inbound.and(outbound)
            }

            fn delete(cluster: &mut Cluster, key: &ObjectRef, touched: &mut Touched) {
                $( ($sdelete)(cluster, key, touched); )?
                $(
                    let route = crate::outbound::routes::RouteKey {
                        group: $ogroup,
                        kind: $okind,
                        namespace: key.namespace.clone(),
                        name: key.name.clone(),
                    };
                    crate::status::delete_route(cluster, &route, touched);
                    crate::outbound::routes::delete_route(cluster, &route, touched);
                )?
                if cluster
                    .policy
                    .$store
                    .remove(&key.namespace, &($key)(&key.name))
                {
                    touch(touched, key.namespace.clone(), $all);
                }
            }

            fn keys(cluster: &Cluster) -> Vec<ObjectRef> {
                #[allow(unused_mut)]
                let mut keys: Vec<ObjectRef> = cluster
                    .policy
                    .$store
                    .keys()
                    .into_iter()
                    .filter_map(|k| {
                        let name = ($key)("");
                        let name = k.name.strip_prefix(name.as_str())?.to_string();
                        Some(ObjectRef {
                            namespace: k.namespace,
                            name,
                        })
                    })
                    .collect();
                $(
                    // A route that failed conversion is still stored for its status.
                    let outbound = cluster.outbound_routes.by_key.keys();
                    let status = cluster.status_routes.by_key.keys();
                    keys.extend(crate::outbound::routes::route_names(
                        outbound.chain(status),
                        $ogroup,
                        $okind,
                    ));
                    keys.sort();
                    keys.dedup();
                )?
                $(
                    keys.extend(($skeys)(cluster));
                    keys.sort();
                    keys.dedup();
                )?
                keys
            }
        }
    };
}

fn touch(touched: &mut Touched, namespace: String, all: bool) {
    if all {
        touched.inbound_all = true;
    } else {
        touched.inbound_namespaces.insert(namespace);
    }
}

fn plain(name: &str) -> String {
    name.to_string()
}

policy_kind!(
    ServerAuthorization,
    "ServerAuthorization",
    "serverauthorization_cache_size",
    server_authorizations,
    plain,
    false,
    server_authorization
);
policy_kind!(
    AuthorizationPolicy,
    "AuthorizationPolicy",
    "authorizationpolicy_cache_size",
    authorization_policies,
    plain,
    false,
    authorization_policy
);
policy_kind!(
    MeshTlsAuthentication,
    "MeshTLSAuthentication",
    "meshtlsauthentication_cache_size",
    mesh_tls_authentications,
    plain,
    true,
    mesh_tls_authentication
);
policy_kind!(
    NetworkAuthentication,
    "NetworkAuthentication",
    "networkauthentication_cache_size",
    network_authentications,
    plain,
    true,
    |_, n| network_authentication(n)
);
policy_kind!(
    HttpLocalRateLimitPolicy,
    "HTTPLocalRateLimitPolicy",
    "httplocalratelimitpolicy_cache_size",
    rate_limits,
    plain,
    false,
    rate_limit,
    status = (
        crate::status::apply_rate_limit,
        crate::status::delete_rate_limit,
        crate::status::rate_limit_keys
    )
);
// Routes of the three kinds share a store; their names are prefixed by group and kind.
policy_kind!(
    PolicyHttpRoute,
    "HTTPRoute.policy.linkerd.io",
    "httproute_cache_size",
    routes,
    |n: &str| format!("policy.linkerd.io/HTTPRoute/{n}"),
    false,
    |_, r| policy_http_route(r),
    outbound = (
        POLICY_GROUP,
        "HTTPRoute",
        crate::outbound::routes::policy_http_route
    )
);
policy_kind!(
    GatewayHttpRoute,
    "HTTPRoute.gateway.networking.k8s.io",
    "gateway_httproute_cache_size",
    routes,
    |n: &str| format!("gateway.networking.k8s.io/HTTPRoute/{n}"),
    false,
    |_, r| gateway_http_route(r),
    outbound = (
        GATEWAY_GROUP,
        "HTTPRoute",
        crate::outbound::routes::gateway_http_route
    )
);
policy_kind!(
    GrpcRoute,
    "GRPCRoute",
    "grpcroute_cache_size",
    routes,
    |n: &str| format!("gateway.networking.k8s.io/GRPCRoute/{n}"),
    false,
    |_, r| grpc_route(r),
    outbound = (
        GATEWAY_GROUP,
        "GRPCRoute",
        crate::outbound::routes::grpc_route
    )
);
