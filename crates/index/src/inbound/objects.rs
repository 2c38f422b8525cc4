//! The kinds of the inbound index: conversion of each policy CRD into the compact form the
//! index keeps ([`super::policy`]; spec/policy.md §4.5–§4.7, references per §3.1, identities
//! §3.2, networks §3.3), and how each kind's events update the stores. A resource that cannot
//! be used is an [`InvalidObject`]: logged, counted, skipped; an invalid update removes the
//! version it replaces.

use k8s_openapi::{
    api::core::v1::Pod,
    apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta},
};
use linkerd_k8s_api::{
    AuthorizationPolicy, ExternalWorkload, HttpLocalRateLimitPolicy, HttpRoute as PolicyHttpRoute,
    MeshTlsAuthentication, NetworkAuthentication, Server, ServerAuthorization,
    gateway_api::{grpcroutes::GrpcRoute, httproutes::HttpRoute as GatewayHttpRoute},
    http_route::{HttpRouteFilter, POLICY_CONTROLLER_NAME},
};
use std::{collections::BTreeSet, sync::Arc};

use super::{
    ClientAuthentication, ClientAuthorization, DEFAULT_INBOUND_POLICY_ANNOTATION, DefaultPolicy,
    IdentityMatch, Inbound, InboundConfig, InboundIndex, Touched,
    policy::{
        AuthenticationRef, AuthorizationPolicyInfo, InboundRouteInfo, MeshTlsAuthenticationInfo,
        NetworkAuthenticationInfo, PolicyTarget, RateLimitPolicyInfo, RouteRules,
        ServerAuthorizationInfo, ServerSelection,
    },
};
use crate::{
    metrics::Reporter,
    model::{
        CONTROL_PLANE_NS_LABEL, ExternalWorkloadInfo, InvalidObject, Kind, Network, ObjectRef,
        PodInfo, Selector, ServerInfo, ServerOverlap, invalid, names_of, parse_network,
    },
    routes::{
        GATEWAY_GROUP, GrpcRule, HostMatch, HttpRule, POLICY_GROUP, RouteKey, convert,
        parents::StatusSource, ref_is,
    },
    source::Event,
    store::{apply_event, index_insert, index_remove},
    watches::{Sink, Watches},
};

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

/// The mesh identity of ServiceAccount `sa` of `namespace` (§3.2).
fn sa_identity(config: &InboundConfig, sa: &str, namespace: &str) -> String {
    format!(
        "{sa}.{namespace}.serviceaccount.identity.{}.{}",
        config.control_plane_namespace, config.identity_domain
    )
}

fn accepted(conditions: &[Condition]) -> bool {
    conditions
        .iter()
        .any(|c| c.type_ == "Accepted" && c.status == "True")
}

// === ServerAuthorization ===

fn server_authorization(
    config: &InboundConfig,
    saz: &ServerAuthorization,
) -> Result<ServerAuthorizationInfo, InvalidObject> {
    let (namespace, name) = names_of("ServerAuthorization", &saz.metadata)?;
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
                    config,
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
    config: &InboundConfig,
    ap: &AuthorizationPolicy,
) -> Result<AuthorizationPolicyInfo, InvalidObject> {
    let (namespace, name) = names_of("AuthorizationPolicy", &ap.metadata)?;
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
                    identity: sa_identity(config, &r.name, &ns),
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
    config: &InboundConfig,
    m: &MeshTlsAuthentication,
) -> Result<MeshTlsAuthenticationInfo, InvalidObject> {
    let (namespace, name) = names_of("MeshTLSAuthentication", &m.metadata)?;
    let (cp, domain) = (&config.control_plane_namespace, &config.identity_domain);
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
            identities.push(IdentityMatch::Exact(sa_identity(config, &r.name, ns)));
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
    _: &InboundConfig,
    n: &NetworkAuthentication,
) -> Result<NetworkAuthenticationInfo, InvalidObject> {
    let (namespace, name) = names_of("NetworkAuthentication", &n.metadata)?;
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
    config: &InboundConfig,
    r: &HttpLocalRateLimitPolicy,
) -> Result<RateLimitPolicyInfo, InvalidObject> {
    let (namespace, name) = names_of("HTTPLocalRateLimitPolicy", &r.metadata)?;
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
                        Ok(sa_identity(config, &c.name, ns))
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
        created: r.metadata.creation_timestamp.as_ref().map(|t| t.0),
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

/// The inbound form of a route of `kind` (`HTTPRoute`, `GRPCRoute`) in `group`; errors name
/// the kind by its `label` ([`Kind::LABEL`], as the outbound index does, so that the two
/// indexes report an invalid route alike and it is counted once).
fn route_info(
    (kind, label): (&'static str, &'static str),
    group: &str,
    meta: &ObjectMeta,
    parents: Result<BTreeSet<String>, String>,
    accepted: BTreeSet<String>,
    hostnames: Option<&Vec<String>>,
    rules: Result<RouteRules, convert::RouteError>,
) -> Result<InboundRouteInfo, InvalidObject> {
    let (namespace, name) = names_of(label, meta)?;
    let parents = parents.map_err(|r| invalid(label, &namespace, &name, r))?;
    let rules = rules.map_err(|e| invalid(label, &namespace, &name, e.to_string()))?;
    Ok(InboundRouteInfo {
        group: group.to_string(),
        kind: kind.to_string(),
        created: meta.creation_timestamp.as_ref().map(|t| t.0),
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

fn policy_http_route(
    _: &InboundConfig,
    r: &PolicyHttpRoute,
) -> Result<InboundRouteInfo, InvalidObject> {
    let (parents, accepted) = route_parents!(r);
    let rules = r
        .spec
        .rules
        .iter()
        .flatten()
        .enumerate()
        .map(|(i, rule)| {
            Ok(HttpRule {
                matches: convert::rule_matches(i, rule.matches.as_ref(), convert::http_match)?,
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
        ("HTTPRoute", <PolicyHttpRoute as Kind>::LABEL),
        POLICY_GROUP,
        &r.metadata,
        parents,
        accepted,
        r.spec.hostnames.as_ref(),
        rules,
    )
}

fn gateway_http_route(
    _: &InboundConfig,
    r: &GatewayHttpRoute,
) -> Result<InboundRouteInfo, InvalidObject> {
    let (parents, accepted) = route_parents!(r);
    let rules = r
        .spec
        .rules
        .iter()
        .flatten()
        .enumerate()
        .map(|(i, rule)| {
            Ok(HttpRule {
                matches: convert::rule_matches(i, rule.matches.as_ref(), convert::http_match)?,
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
        ("HTTPRoute", <GatewayHttpRoute as Kind>::LABEL),
        GATEWAY_GROUP,
        &r.metadata,
        parents,
        accepted,
        r.spec.hostnames.as_ref(),
        rules,
    )
}

fn grpc_route(_: &InboundConfig, r: &GrpcRoute) -> Result<InboundRouteInfo, InvalidObject> {
    let (parents, accepted) = route_parents!(r);
    let rules = r
        .spec
        .rules
        .iter()
        .flatten()
        .enumerate()
        .map(|(i, rule)| {
            Ok(GrpcRule {
                matches: convert::rule_matches(i, rule.matches.as_ref(), convert::grpc_match)?,
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
        ("GRPCRoute", <GrpcRoute as Kind>::LABEL),
        GATEWAY_GROUP,
        &r.metadata,
        parents,
        accepted,
        r.spec.hostnames.as_ref(),
        rules,
    )
}

// === how each kind's events update the stores ===

/// Feeds `index` from `watches` (see [`InboundIndex::watch`]).
pub(super) fn watch(index: &InboundIndex, watches: &mut Watches) {
    watches
        .add_selected::<Pod>(index.clone(), Some(CONTROL_PLANE_NS_LABEL))
        .add::<ExternalWorkload>(index.clone())
        .add::<Server>(index.clone())
        .add::<ServerAuthorization>(index.clone())
        .add::<AuthorizationPolicy>(index.clone())
        .add::<MeshTlsAuthentication>(index.clone())
        .add::<NetworkAuthentication>(index.clone())
        .add::<HttpLocalRateLimitPolicy>(index.clone())
        .add::<PolicyHttpRoute>(index.clone())
        .add::<GatewayHttpRoute>(index.clone())
        .add::<GrpcRoute>(index.clone());
}

/// Logs a workload's `config.linkerd.io/default-inbound-policy` that names no default policy:
/// the workload is served the cluster default (spec/policy.md §2.5). Called for each new
/// version of a workload, so once per version.
fn warn_invalid_default_policy(
    kind: &str,
    key: &ObjectRef,
    annotations: &std::collections::BTreeMap<String, String>,
) {
    let Some(value) = annotations.get(DEFAULT_INBOUND_POLICY_ANNOTATION) else {
        return;
    };
    if let Err(error) = value.parse::<DefaultPolicy>() {
        tracing::warn!(kind, object = %format!("{}/{}", key.namespace, key.name), %error, "invalid {DEFAULT_INBOUND_POLICY_ANNOTATION}: the cluster default policy applies");
    }
}

impl Sink<Pod> for InboundIndex {
    /// Only meshed pods (label `linkerd.io/control-plane-ns`) are kept: others have no inbound
    /// policy, and a pod that loses the label is removed.
    fn apply(&self, events: &[Event<Arc<PodInfo>>]) -> usize {
        self.update(|state, touched| {
            apply_event(
                state,
                events,
                touched,
                PodInfo::object_ref,
                |s| s.pods.keys().cloned().collect(),
                |s, pod, touched| {
                    let key = pod.object_ref();
                    if !pod.labels.contains_key(CONTROL_PLANE_NS_LABEL) {
                        if s.pods.remove(&key).is_some() {
                            touched.namespaces.insert(key.namespace);
                        }
                        return;
                    }
                    if s.pods.get(&key).is_some_and(|old| old == pod) {
                        return;
                    }
                    warn_invalid_default_policy("Pod", &key, &pod.annotations);
                    touched.namespaces.insert(key.namespace.clone());
                    s.pods.insert(key, pod.clone());
                },
                |s, key, touched| {
                    if s.pods.remove(key).is_some() {
                        touched.namespaces.insert(key.namespace.clone());
                    }
                },
            );
            state.pods.len()
        })
    }
}

impl Sink<ExternalWorkload> for InboundIndex {
    fn apply(&self, events: &[Event<Arc<ExternalWorkloadInfo>>]) -> usize {
        self.update(|state, touched| {
            apply_event(
                state,
                events,
                touched,
                ExternalWorkloadInfo::object_ref,
                |s| s.external_workloads.keys().cloned().collect(),
                |s, ew, touched| {
                    let key = ew.object_ref();
                    if s.external_workloads.get(&key).is_some_and(|old| old == ew) {
                        return;
                    }
                    warn_invalid_default_policy("ExternalWorkload", &key, &ew.annotations);
                    touched.namespaces.insert(key.namespace.clone());
                    s.external_workloads.insert(key, ew.clone());
                },
                |s, key, touched| {
                    if s.external_workloads.remove(key).is_some() {
                        touched.namespaces.insert(key.namespace.clone());
                    }
                },
            );
            state.external_workloads.len()
        })
    }
}

impl Sink<Server> for InboundIndex {
    fn apply(&self, events: &[Event<Arc<ServerInfo>>]) -> usize {
        self.update(|state, touched| {
            apply_event(
                state,
                events,
                touched,
                ServerInfo::object_ref,
                |s| s.servers.keys().cloned().collect(),
                |s, srv, touched| {
                    let key = srv.object_ref();
                    if s.servers.get(&key).is_some_and(|old| old == srv) {
                        return;
                    }
                    index_insert(&mut s.servers_by_namespace, key.namespace.clone(), &key);
                    touched.namespaces.insert(key.namespace.clone());
                    touched.server_namespaces.insert(key.namespace.clone());
                    s.servers.insert(key, srv.clone());
                    warn_overlapping_servers(s, srv);
                },
                |s, key, touched| {
                    if s.servers.remove(key).is_some() {
                        index_remove(&mut s.servers_by_namespace, &key.namespace, key);
                        touched.namespaces.insert(key.namespace.clone());
                        touched.server_namespaces.insert(key.namespace.clone());
                    }
                },
            );
            state.servers.len()
        })
    }
}

/// Logs that `srv` claims the same workload ports as another Server of its namespace
/// ([`ServerInfo::overlap_with`]): only the older serves them, which nothing else shows.
/// Overlapping selectors that differ, where neither selects every workload, are not looked for.
fn warn_overlapping_servers(s: &Inbound, srv: &ServerInfo) {
    for (twin, overlap) in s.overlapping_servers(srv) {
        let age = |s: &ServerInfo| (s.created, s.name.clone());
        let (older, newer) = if age(twin) < age(srv) {
            (&**twin, srv)
        } else {
            (srv, &**twin)
        };
        match overlap {
            ServerOverlap::Identical => tracing::warn!(
                namespace = %srv.namespace,
                "Servers {} and {} select the same workloads and port; only the older, {}, serves them, and {} has no effect",
                srv.name,
                twin.name,
                older.name,
                newer.name
            ),
            ServerOverlap::SelectsAll => tracing::warn!(
                namespace = %srv.namespace,
                "Servers {} and {} claim the same port and one of them selects every workload; where both select a workload, only the older, {}, serves its port",
                srv.name,
                twin.name,
                older.name
            ),
        }
    }
}

/// A policy kind the inbound index keeps in one of its [`super::PolicyStores`].
trait PolicyKind: Kind<Object = Self> {
    /// Its compact form.
    type Info: PartialEq;
    /// A change reaches every namespace (authentications are referenced across namespaces).
    const EVERY_NAMESPACE: bool = false;
    /// A route kind: its parents are kept for offline acceptance.
    const ROUTE: Option<(&'static str, &'static str)> = None;

    fn store(stores: &mut super::PolicyStores) -> &mut super::NamespacedStore<Self::Info>;
    fn stored(stores: &super::PolicyStores) -> &super::NamespacedStore<Self::Info>;
    fn convert(config: &InboundConfig, obj: &Self) -> Result<Self::Info, InvalidObject>;

    /// The object's name in its store: routes of the three kinds share one, so their names
    /// are prefixed by group and kind.
    fn store_name(name: &str) -> String {
        match Self::ROUTE {
            Some((group, kind)) => format!("{group}/{kind}/{name}"),
            None => name.to_string(),
        }
    }

    /// The route's parents, for a route kind.
    fn parents(_: &Self) -> Option<crate::routes::parents::StatusRoute> {
        None
    }
}

fn object_key(meta: &ObjectMeta) -> ObjectRef {
    ObjectRef {
        namespace: meta.namespace.clone().unwrap_or_default(),
        name: meta.name.clone().unwrap_or_default(),
    }
}

fn touch<K: PolicyKind>(touched: &mut Touched, namespace: &str) {
    if K::EVERY_NAMESPACE {
        touched.all = true;
    } else {
        touched.namespaces.insert(namespace.to_string());
    }
}

/// Stores the compact form of `obj`, or removes the version it replaces when it does not
/// convert (the last good version must not outlive an invalid update).
fn apply_policy<K: PolicyKind>(state: &mut Inbound, obj: &Arc<K>, touched: &mut Touched) {
    let key = object_key(obj.meta());
    if let Some(route) = K::parents(obj) {
        for parent in state.route_parents.apply(route).into_iter().flatten() {
            touched.namespaces.insert(parent.namespace);
        }
    }
    let name = K::store_name(&key.name);
    match K::convert(&state.config, obj) {
        Ok(info) => {
            state.metrics.valid_again(Reporter::Inbound, K::LABEL, &key);
            if K::store(&mut state.policy).insert(&key.namespace, name, info) {
                touch::<K>(touched, &key.namespace);
            }
        }
        Err(error) => {
            state
                .metrics
                .skip_invalid(Reporter::Inbound, K::LABEL, Some(key.clone()), &error);
            if K::store(&mut state.policy).remove(&key.namespace, &name) {
                touch::<K>(touched, &key.namespace);
            }
        }
    }
}

fn delete_policy<K: PolicyKind>(state: &mut Inbound, key: &ObjectRef, touched: &mut Touched) {
    if let Some((group, kind)) = K::ROUTE {
        let route = RouteKey {
            group,
            kind,
            namespace: key.namespace.clone(),
            name: key.name.clone(),
        };
        for parent in state.route_parents.delete(&route).into_iter().flatten() {
            touched.namespaces.insert(parent.namespace);
        }
    }
    state.metrics.valid_again(Reporter::Inbound, K::LABEL, key);
    if K::store(&mut state.policy).remove(&key.namespace, &K::store_name(&key.name)) {
        touch::<K>(touched, &key.namespace);
    }
}

/// The objects of kind `K` the index holds: converted, or (routes) with parents kept.
fn stored_policies<K: PolicyKind>(state: &Inbound) -> Vec<ObjectRef> {
    let prefix = K::store_name("");
    let mut keys: Vec<ObjectRef> = K::stored(&state.policy)
        .keys()
        .into_iter()
        .filter_map(|k| {
            Some(ObjectRef {
                name: k.name.strip_prefix(prefix.as_str())?.to_string(),
                namespace: k.namespace,
            })
        })
        .collect();
    if let Some((group, kind)) = K::ROUTE {
        keys.extend(state.route_parents.keys_of(group, kind));
        keys.sort();
        keys.dedup();
    }
    keys
}

fn apply_policy_event<K: PolicyKind>(index: &InboundIndex, events: &[Event<Arc<K>>]) -> usize {
    index.update(|state, touched| {
        apply_event(
            state,
            events,
            touched,
            |obj: &K| object_key(obj.meta()),
            stored_policies::<K>,
            apply_policy::<K>,
            delete_policy::<K>,
        );
        K::stored(&state.policy).len()
    })
}

macro_rules! policy_kind {
    ($ty:ty, $info:ty, $store:ident, $convert:expr $(, every_namespace = $all:expr)?
     $(, route = ($group:expr, $kind:expr))?) => {
        impl PolicyKind for $ty {
            type Info = $info;
            $(const EVERY_NAMESPACE: bool = $all;)?
            $(const ROUTE: Option<(&'static str, &'static str)> = Some(($group, $kind));)?

            fn store(stores: &mut super::PolicyStores) -> &mut super::NamespacedStore<$info> {
                &mut stores.$store
            }

            fn stored(stores: &super::PolicyStores) -> &super::NamespacedStore<$info> {
                &stores.$store
            }

            fn convert(config: &InboundConfig, obj: &Self) -> Result<$info, InvalidObject> {
                ($convert)(config, obj)
            }

            $(
                fn parents(obj: &Self) -> Option<crate::routes::parents::StatusRoute> {
                    let _ = ($group, $kind);
                    obj.status_route()
                }
            )?
        }

        impl Sink<$ty> for InboundIndex {
            fn apply(&self, events: &[Event<Arc<$ty>>]) -> usize {
                apply_policy_event::<$ty>(self, events)
            }
        }
    };
}

policy_kind!(
    ServerAuthorization,
    ServerAuthorizationInfo,
    server_authorizations,
    server_authorization
);
policy_kind!(
    AuthorizationPolicy,
    AuthorizationPolicyInfo,
    authorization_policies,
    authorization_policy
);
policy_kind!(
    MeshTlsAuthentication,
    MeshTlsAuthenticationInfo,
    mesh_tls_authentications,
    mesh_tls_authentication,
    every_namespace = true
);
policy_kind!(
    NetworkAuthentication,
    NetworkAuthenticationInfo,
    network_authentications,
    network_authentication,
    every_namespace = true
);
policy_kind!(
    HttpLocalRateLimitPolicy,
    RateLimitPolicyInfo,
    rate_limits,
    rate_limit
);
policy_kind!(
    PolicyHttpRoute,
    InboundRouteInfo,
    routes,
    policy_http_route,
    route = (POLICY_GROUP, "HTTPRoute")
);
policy_kind!(
    GatewayHttpRoute,
    InboundRouteInfo,
    routes,
    gateway_http_route,
    route = (GATEWAY_GROUP, "HTTPRoute")
);
policy_kind!(
    GrpcRoute,
    InboundRouteInfo,
    routes,
    grpc_route,
    route = (GATEWAY_GROUP, "GRPCRoute")
);
