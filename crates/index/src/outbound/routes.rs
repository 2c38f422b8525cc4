//! Routes as the outbound index reads them (spec/policy.md §5.4): policy.linkerd.io and
//! Gateway API HTTPRoutes, GRPCRoutes, TLSRoutes and TCPRoutes whose parent refs name Services
//! or EgressNetworks, converted once per watch event, stored by key and by parent.
//!
//! Decisions on the quirks of §12 (project decision 1, each named in a test):
//! - a backendRef without namespace is in the ROUTE's namespace (Gateway API), not the parent's;
//! - a policy.linkerd.io `ResponseHeaderModifier` stays a response header modifier;
//! - an update that fails conversion removes the route (no stale version stays active).

use k8s_openapi::{
    apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta},
    jiff::Timestamp,
};
use linkerd_k8s_api::{
    HttpRoute as PolicyHttpRoute,
    gateway_api::{
        experimental::{tcproutes::TcpRoute, tlsroutes::TlsRoute},
        grpcroutes::{self as grpc_api, GrpcRoute},
        httproutes::{self as http_api, HttpRoute as GatewayHttpRoute},
    },
    http_route::HttpRouteFilter,
};
use std::{collections::BTreeMap, sync::Arc};

use super::{
    annotations,
    view::{NoMatch, RouteRetry, RouteTimeouts},
};
pub use crate::routes::{GATEWAY_GROUP, POLICY_GROUP, RouteKey};
use crate::{
    model::{InvalidObject, ObjectRef, invalid, names_of, profile::parse_go_duration},
    routes::{
        Filter, GrpcRouteMatch, HostMatch, HttpRouteMatch, PathMatch,
        convert::{self, RouteError},
        ref_is,
    },
};

/// A route in outbound form.
#[derive(Clone, Debug, PartialEq)]
pub struct OutboundRouteInfo {
    pub key: RouteKey,
    /// Creation time (a time, not its text: `00.5Z` sorts after `00Z`).
    pub created: Option<Timestamp>,
    /// The Service parent refs (others are ignored).
    pub parents: Vec<ServiceParent>,
    /// `status.parents` entries for Services with `Accepted=True` (any controller, §5.4).
    pub accepted: Vec<AcceptedParent>,
    /// The EgressNetwork parent refs (group `policy.linkerd.io`).
    pub egress_parents: Vec<ServiceParent>,
    /// `status.parents` entries for EgressNetworks with `Accepted=True` (§5.4).
    pub egress_accepted: Vec<AcceptedParent>,
    pub hostnames: Vec<HostMatch>,
    pub rules: OutboundRules,
}

/// A parent ref naming a Service (or an EgressNetwork); `port` `None` attaches to every port
/// (§5.4).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceParent {
    pub namespace: String,
    pub name: String,
    pub port: Option<u16>,
}

/// A status entry accepting the route for a Service (`port` `None`: any port).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AcceptedParent {
    pub name: String,
    pub port: Option<u16>,
}

/// The rules of a route, by protocol.
#[derive(Clone, Debug, PartialEq)]
pub enum OutboundRules {
    Http(Vec<RuleSpec<HttpRouteMatch>>),
    Grpc(Vec<RuleSpec<GrpcRouteMatch>>),
    /// A TLSRoute's one rule (§5.4: exactly one, else the route is ignored).
    Tls(RuleSpec<NoMatch>),
    /// A TCPRoute's one rule.
    Tcp(RuleSpec<NoMatch>),
}

/// A converted rule whose backends are not yet resolved against the Services.
#[derive(Clone, Debug, PartialEq)]
pub struct RuleSpec<M> {
    pub matches: Vec<M>,
    pub filters: Vec<Filter>,
    pub backends: Vec<BackendSpec>,
    /// The route's timeout annotations, with the rule's `timeouts.request` when the
    /// `timeout.linkerd.io/request` annotation is unset (§5.4).
    pub timeouts: RouteTimeouts,
    /// The route's retry annotations.
    pub retry: Option<RouteRetry>,
}

/// A backendRef, checked but not resolved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BackendSpec {
    Service {
        weight: u32,
        namespace: String,
        name: String,
        port: u16,
        filters: Vec<Filter>,
    },
    Invalid {
        weight: u32,
        message: String,
    },
    /// An EgressNetwork backend (§5.4); resolved against the parent when served (§5.6).
    EgressNetwork {
        weight: u32,
        namespace: String,
        name: String,
        port: Option<u16>,
    },
}

/// A route's parent refs and the accepted entries of its status, by parent kind.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RouteParents {
    pub services: Vec<ServiceParent>,
    pub accepted: Vec<AcceptedParent>,
    pub egress_networks: Vec<ServiceParent>,
    pub egress_accepted: Vec<AcceptedParent>,
}

/// The outbound route stores.
#[derive(Debug, Default)]
pub struct OutboundRoutes {
    pub(crate) by_key: BTreeMap<RouteKey, Arc<OutboundRouteInfo>>,
    /// Parent Service → the routes naming it.
    pub(crate) by_parent: BTreeMap<ObjectRef, std::collections::BTreeSet<RouteKey>>,
    /// Parent EgressNetwork → the routes naming it.
    pub(crate) by_egress_parent: BTreeMap<ObjectRef, std::collections::BTreeSet<RouteKey>>,
}

// === impl OutboundRouteInfo ===

impl OutboundRouteInfo {
    /// The Services this route's parent refs name.
    fn parent_services(&self) -> impl Iterator<Item = ObjectRef> + '_ {
        self.parents.iter().map(|p| ObjectRef {
            namespace: p.namespace.clone(),
            name: p.name.clone(),
        })
    }

    /// The EgressNetworks this route's parent refs name.
    fn parent_egress_networks(&self) -> impl Iterator<Item = ObjectRef> + '_ {
        self.egress_parents.iter().map(|p| ObjectRef {
            namespace: p.namespace.clone(),
            name: p.name.clone(),
        })
    }
}

// === store updates ===

/// What a route change touched: the parents whose policies must be recomputed.
#[derive(Debug, Default)]
pub(crate) struct TouchedParents {
    pub(crate) services: Vec<ObjectRef>,
    pub(crate) egress_networks: Vec<ObjectRef>,
}

impl OutboundRoutes {
    /// Stores `route` under its key (replacing the previous version); returns the parents of
    /// the old and new versions when it changed.
    pub(crate) fn apply(&mut self, route: OutboundRouteInfo) -> TouchedParents {
        if self
            .by_key
            .get(&route.key)
            .is_some_and(|old| **old == route)
        {
            return TouchedParents::default();
        }
        let key = route.key.clone();
        let mut touched = self.delete(&key);
        for parent in route.parent_services() {
            touched.services.push(parent.clone());
            self.by_parent
                .entry(parent)
                .or_default()
                .insert(key.clone());
        }
        for parent in route.parent_egress_networks() {
            touched.egress_networks.push(parent.clone());
            self.by_egress_parent
                .entry(parent)
                .or_default()
                .insert(key.clone());
        }
        self.by_key.insert(key, Arc::new(route));
        touched
    }

    /// Removes the route `key`; returns its parents.
    pub(crate) fn delete(&mut self, key: &RouteKey) -> TouchedParents {
        let mut touched = TouchedParents::default();
        let Some(old) = self.by_key.remove(key) else {
            return touched;
        };
        for parent in old.parent_services() {
            if let Some(keys) = self.by_parent.get_mut(&parent) {
                keys.remove(key);
                if keys.is_empty() {
                    self.by_parent.remove(&parent);
                }
            }
            touched.services.push(parent);
        }
        for parent in old.parent_egress_networks() {
            if let Some(keys) = self.by_egress_parent.get_mut(&parent) {
                keys.remove(key);
                if keys.is_empty() {
                    self.by_egress_parent.remove(&parent);
                }
            }
            touched.egress_networks.push(parent);
        }
        touched
    }

    /// The names of the routes of one kind.
    pub(crate) fn keys_of<'a>(
        &'a self,
        group: &'a str,
        kind: &'a str,
    ) -> impl Iterator<Item = ObjectRef> + 'a {
        crate::routes::names_of_kind(&self.by_key, group, kind)
    }
}

// === conversion ===

fn accepted(conditions: &[Condition]) -> bool {
    conditions
        .iter()
        .any(|c| c.type_ == "Accepted" && c.status == "True")
}

fn port(p: Option<i32>) -> Option<u16> {
    p.and_then(|p| u16::try_from(p).ok()).filter(|p| *p != 0)
}

/// Parent refs and accepted statuses; the route kinds' generated types differ but share these
/// fields. Returns (from the function using it) an [`InvalidObject`] for a parentRef port out
/// of 1..=65535.
macro_rules! outbound_parents {
    ($r:expr, $kind:expr, $namespace:expr, $name:expr) => {{
        let r = $r;
        // The CRD schema refuses these; offline, nothing does, and no port would attach the
        // route to every port of its parent.
        for (i, p) in r.spec.parent_refs.iter().flatten().enumerate() {
            if let Some(port) = p.port
                && !(1..=65535).contains(&port)
            {
                return Err(invalid(
                    $kind,
                    &$namespace,
                    &$name,
                    format!("spec.parentRefs[{i}].port {port} out of range"),
                ));
            }
        }
        let refs_of = |group: &str, kind: &str| -> Vec<ServiceParent> {
            r.spec
                .parent_refs
                .iter()
                .flatten()
                .filter(|p| {
                    p.kind
                        .as_deref()
                        .is_some_and(|k| ref_is(p.group.as_deref(), k, group, kind))
                })
                .map(|p| ServiceParent {
                    namespace: p
                        .namespace
                        .clone()
                        .unwrap_or_else(|| $namespace.to_string()),
                    name: p.name.clone(),
                    port: port(p.port),
                })
                .collect()
        };
        let egress_networks = refs_of(POLICY_GROUP, "EgressNetwork");
        let egress_accepted: Vec<AcceptedParent> = r
            .status
            .iter()
            .flat_map(|s| &s.parents)
            .filter(|s| {
                let p = &s.parent_ref;
                p.kind.as_deref() == Some("EgressNetwork")
                    && p.group.as_deref() == Some(POLICY_GROUP)
                    && accepted(&s.conditions)
            })
            .map(|s| AcceptedParent {
                name: s.parent_ref.name.clone(),
                port: port(s.parent_ref.port),
            })
            .collect();
        let parents = refs_of("core", "Service");
        let accepted: Vec<AcceptedParent> = r
            .status
            .iter()
            .flat_map(|s| &s.parents)
            .filter(|s| {
                let p = &s.parent_ref;
                p.kind.as_deref() == Some("Service")
                    && matches!(p.group.as_deref(), None | Some("") | Some("core"))
                    && accepted(&s.conditions)
            })
            .map(|s| AcceptedParent {
                name: s.parent_ref.name.clone(),
                port: port(s.parent_ref.port),
            })
            .collect();
        RouteParents {
            services: parents,
            accepted,
            egress_networks,
            egress_accepted,
        }
    }};
}

/// Backend refs of any route kind (`Option<&Vec<_>>`): `{group?, kind?, name, namespace?, port?,
/// weight?}` plus filters converted by `$filter` (returning `Result<Filter, String>`), or none.
macro_rules! backends {
    ($refs:expr, $namespace:expr, $name:expr, $filter:expr) => {
        backends!(@refs $refs, $namespace, $name, b => b.filters.iter().flatten().map($filter).collect())
    };
    // TLSRoute and TCPRoute backendRefs have no filters.
    ($refs:expr, $namespace:expr, $name:expr) => {
        backends!(@refs $refs, $namespace, $name, _b => Ok(Vec::new()))
    };
    (@refs $refs:expr, $namespace:expr, $name:expr, $b:ident => $filters:expr) => {
        $refs
            .into_iter()
            .flatten()
            .map(|b| {
                let $b = b;
                // The CRD schema refuses a negative weight; offline, nothing does.
                let weight = match b.weight {
                    None => 1,
                    Some(w) => u32::try_from(w).unwrap_or_else(|_| {
                        tracing::warn!(
                            route = %format!("{}/{}", $namespace, $name),
                            backend = %b.name,
                            "backendRef weight {w} is negative (the Gateway API allows 0 to 1000000): the default weight 1 is used"
                        );
                        1
                    }),
                };
                let kind = b.kind.as_deref().unwrap_or("Service");
                if ref_is(b.group.as_deref(), kind, POLICY_GROUP, "EgressNetwork") {
                    return BackendSpec::EgressNetwork {
                        weight,
                        namespace: b
                            .namespace
                            .clone()
                            .unwrap_or_else(|| $namespace.to_string()),
                        name: b.name.clone(),
                        port: port(b.port),
                    };
                }
                if !ref_is(b.group.as_deref(), kind, "core", "Service") {
                    let kind = b.kind.as_deref().unwrap_or("<empty>");
                    let group = b
                        .group
                        .as_deref()
                        .filter(|g| !g.is_empty())
                        .unwrap_or("core");
                    return BackendSpec::Invalid {
                        weight,
                        message: format!("unsupported backend type {group} {kind}"),
                    };
                }
                let Some(port) = port(b.port) else {
                    return BackendSpec::Invalid {
                        weight,
                        message: format!("missing port for backend Service {}", b.name),
                    };
                };
                let filters: Result<Vec<Filter>, String> = $filters;
                match filters {
                    Ok(filters) => BackendSpec::Service {
                        weight,
                        namespace: b
                            .namespace
                            .clone()
                            .unwrap_or_else(|| $namespace.to_string()),
                        name: b.name.clone(),
                        port,
                        filters,
                    },
                    Err(reason) => BackendSpec::Invalid {
                        weight,
                        message: format!("unsupported backend filter: {reason}"),
                    },
                }
            })
            .collect::<Vec<BackendSpec>>()
    };
}

/// The route-level annotations: timeouts and retry, each unset (and logged) when invalid.
fn route_annotations(
    kind: &str,
    meta: &ObjectMeta,
    grpc: bool,
) -> (RouteTimeouts, Option<RouteRetry>) {
    let empty = BTreeMap::new();
    let annotations = meta.annotations.as_ref().unwrap_or(&empty);
    let name = meta.name.as_deref().unwrap_or_default();
    let namespace = meta.namespace.as_deref().unwrap_or_default();
    let timeouts = annotations::timeouts(annotations).unwrap_or_else(|error| {
        tracing::warn!(%error, route = %format!("{namespace}/{name}"), kind, "ignoring timeout annotations");
        RouteTimeouts::default()
    });
    let retry = annotations::retry(annotations)
        .map(|r| {
            r.map(|mut r| {
                // An HTTP route reads only the HTTP conditions, a gRPC route the gRPC ones.
                if grpc {
                    r.http = None;
                } else {
                    r.grpc = None;
                }
                r
            })
        })
        .unwrap_or_else(|error| {
            tracing::warn!(%error, route = %format!("{namespace}/{name}"), kind, "ignoring retry annotations");
            None
        });
    (timeouts, retry)
}

/// The matches of `spec.rules[rule]`; a rule with no matches matches every request (prefix
/// `/`).
fn http_matches(
    rule: usize,
    matches: Option<&Vec<http_api::HttpRouteRulesMatches>>,
) -> Result<Vec<HttpRouteMatch>, RouteError> {
    let mut out = convert::rule_matches(rule, matches, convert::http_match)?;
    if out.is_empty() {
        out.push(HttpRouteMatch {
            path: Some(PathMatch::Prefix("/".into())),
            ..HttpRouteMatch::default()
        });
    }
    Ok(out)
}

fn http_backend_filter(f: &http_api::HttpRouteRulesBackendRefsFilters) -> Result<Filter, String> {
    use http_api::HttpRouteRulesBackendRefsFiltersType as T;
    let missing = || format!("{:?} without a body", f.r#type);
    match &f.r#type {
        T::RequestHeaderModifier => {
            let m = f.request_header_modifier.as_ref().ok_or_else(missing)?;
            convert::modifier_of!(m)
                .map(Filter::RequestHeaderModifier)
                .map_err(|e| e.to_string())
        }
        T::ResponseHeaderModifier => {
            let m = f.response_header_modifier.as_ref().ok_or_else(missing)?;
            convert::modifier_of!(m)
                .map(Filter::ResponseHeaderModifier)
                .map_err(|e| e.to_string())
        }
        T::RequestRedirect => {
            // The backend-filter body has the route-filter body's fields under another name.
            let body = f.request_redirect.as_ref().ok_or_else(missing)?;
            let redirect: http_api::HttpRouteRulesFiltersRequestRedirect =
                serde_json::to_value(body)
                    .and_then(serde_json::from_value)
                    .map_err(|e| format!("RequestRedirect: {e}"))?;
            convert::redirect(&redirect)
                .map(Filter::RequestRedirect)
                .map_err(|e| e.to_string())
        }
        other => Err(format!("{other:?}")),
    }
}

fn grpc_backend_filter(f: &grpc_api::GrpcRouteRulesBackendRefsFilters) -> Result<Filter, String> {
    if let Some(m) = &f.request_header_modifier {
        return convert::modifier_of!(m)
            .map(Filter::RequestHeaderModifier)
            .map_err(|e| e.to_string());
    }
    if let Some(m) = &f.response_header_modifier {
        return convert::modifier_of!(m)
            .map(Filter::ResponseHeaderModifier)
            .map_err(|e| e.to_string());
    }
    Err(format!("{:?}", f.r#type))
}

fn info(
    key: RouteKey,
    meta: &ObjectMeta,
    parents: RouteParents,
    hostnames: Option<&Vec<String>>,
    rules: OutboundRules,
) -> OutboundRouteInfo {
    OutboundRouteInfo {
        key,
        created: meta.creation_timestamp.as_ref().map(|t| t.0),
        parents: parents.services,
        accepted: parents.accepted,
        egress_parents: parents.egress_networks,
        egress_accepted: parents.egress_accepted,
        hostnames: hostnames
            .into_iter()
            .flatten()
            .map(|h| HostMatch::parse(h))
            .collect(),
        rules,
    }
}

fn key(group: &'static str, kind: &'static str, namespace: &str, name: &str) -> RouteKey {
    RouteKey {
        group,
        kind,
        namespace: namespace.to_string(),
        name: name.to_string(),
    }
}

/// A policy.linkerd.io HTTPRoute; rule `timeouts.request` is a Go-style duration (§3.6).
pub fn policy_http_route(r: &PolicyHttpRoute) -> Result<OutboundRouteInfo, InvalidObject> {
    const KIND: &str = "HTTPRoute.policy.linkerd.io";
    let (namespace, name) = names_of(KIND, &r.metadata)?;
    let bad = |e: String| invalid(KIND, &namespace, &name, e);
    let (timeouts, retry) = route_annotations(KIND, &r.metadata, false);
    let rules = r
        .spec
        .rules
        .iter()
        .flatten()
        .enumerate()
        .map(|(i, rule)| {
            let filters = rule
                .filters
                .iter()
                .flatten()
                .map(|f| match f {
                    HttpRouteFilter::RequestHeaderModifier {
                        request_header_modifier: m,
                    } => convert::modifier_of!(m).map(Filter::RequestHeaderModifier),
                    // §12 quirk decided: the CRD's meaning, a RESPONSE header modifier.
                    HttpRouteFilter::ResponseHeaderModifier {
                        response_header_modifier: m,
                    } => convert::modifier_of!(m).map(Filter::ResponseHeaderModifier),
                    HttpRouteFilter::RequestRedirect { request_redirect } => {
                        convert::redirect(request_redirect).map(Filter::RequestRedirect)
                    }
                })
                .collect::<Result<_, _>>()
                .map_err(|e| bad(e.to_string()))?;
            let mut timeouts = timeouts.clone();
            if timeouts.request.is_none()
                && let Some(request) = rule.timeouts.as_ref().and_then(|t| t.request.as_deref())
            {
                let d = parse_go_duration(request)
                    .map_err(|e| bad(format!("invalid timeouts.request: {e}")))?;
                timeouts.request = Some(d).filter(|d| !d.is_zero());
            }
            Ok(RuleSpec {
                matches: http_matches(i, rule.matches.as_ref()).map_err(|e| bad(e.to_string()))?,
                filters,
                backends: backends!(
                    rule.backend_refs.as_ref(),
                    namespace,
                    name,
                    http_backend_filter
                ),
                timeouts,
                retry: retry.clone(),
            })
        })
        .collect::<Result<_, InvalidObject>>()?;
    Ok(info(
        key(POLICY_GROUP, "HTTPRoute", &namespace, &name),
        &r.metadata,
        outbound_parents!(r, KIND, namespace, name),
        r.spec.hostnames.as_ref(),
        OutboundRules::Http(rules),
    ))
}

/// A Gateway API HTTPRoute; rule `timeouts.request` is read with the annotation-style parser
/// and ignored, with a warning, when it does not parse (§5.4).
pub fn gateway_http_route(r: &GatewayHttpRoute) -> Result<OutboundRouteInfo, InvalidObject> {
    const KIND: &str = "HTTPRoute.gateway.networking.k8s.io";
    let (namespace, name) = names_of(KIND, &r.metadata)?;
    let bad = |e: RouteError| invalid(KIND, &namespace, &name, e.to_string());
    let (timeouts, retry) = route_annotations(KIND, &r.metadata, false);
    let rules = r
        .spec
        .rules
        .iter()
        .flatten()
        .enumerate()
        .map(|(i, rule)| {
            let mut timeouts = timeouts.clone();
            if timeouts.request.is_none()
                && let Some(request) = rule.timeouts.as_ref().and_then(|t| t.request.as_deref())
            {
                match annotations::parse_duration(request) {
                    Ok(d) => timeouts.request = Some(d).filter(|d| !d.is_zero()),
                    Err(error) => tracing::warn!(
                        route = %format!("{namespace}/{name}"),
                        %error,
                        "ignoring rules[{i}].timeouts.request {request:?}: the rule has no request timeout"
                    ),
                }
            }
            Ok(RuleSpec {
                matches: http_matches(i, rule.matches.as_ref()).map_err(bad)?,
                filters: rule
                    .filters
                    .iter()
                    .flatten()
                    .map(convert::gateway_http_filter)
                    .collect::<Result<_, _>>()
                    .map_err(bad)?,
                backends: backends!(rule.backend_refs.as_ref(), namespace, name, http_backend_filter),
                timeouts,
                retry: retry.clone(),
            })
        })
        .collect::<Result<_, InvalidObject>>()?;
    Ok(info(
        key(GATEWAY_GROUP, "HTTPRoute", &namespace, &name),
        &r.metadata,
        outbound_parents!(r, KIND, namespace, name),
        r.spec.hostnames.as_ref(),
        OutboundRules::Http(rules),
    ))
}

/// A GRPCRoute; timeouts come from annotations only (§5.4).
pub fn grpc_route(r: &GrpcRoute) -> Result<OutboundRouteInfo, InvalidObject> {
    const KIND: &str = "GRPCRoute";
    let (namespace, name) = names_of(KIND, &r.metadata)?;
    let bad = |e: RouteError| invalid(KIND, &namespace, &name, e.to_string());
    let (timeouts, retry) = route_annotations(KIND, &r.metadata, true);
    let rules = r
        .spec
        .rules
        .iter()
        .flatten()
        .enumerate()
        .map(|(i, rule)| {
            let mut matches = convert::rule_matches(i, rule.matches.as_ref(), convert::grpc_match)
                .map_err(bad)?;
            if matches.is_empty() {
                matches.push(GrpcRouteMatch::default());
            }
            Ok(RuleSpec {
                matches,
                filters: rule
                    .filters
                    .iter()
                    .flatten()
                    .map(convert::grpc_filter)
                    .collect::<Result<_, _>>()
                    .map_err(bad)?,
                backends: backends!(
                    rule.backend_refs.as_ref(),
                    namespace,
                    name,
                    grpc_backend_filter
                ),
                timeouts: timeouts.clone(),
                retry: retry.clone(),
            })
        })
        .collect::<Result<_, InvalidObject>>()?;
    Ok(info(
        key(GATEWAY_GROUP, "GRPCRoute", &namespace, &name),
        &r.metadata,
        outbound_parents!(r, KIND, namespace, name),
        r.spec.hostnames.as_ref(),
        OutboundRules::Grpc(rules),
    ))
}

/// The one rule of a TLSRoute or TCPRoute, or why the route is ignored (§5.4).
fn single_rule<R>(rules: &[R]) -> Result<&R, String> {
    match rules {
        [rule] => Ok(rule),
        rules => Err(format!("must have exactly one rule, has {}", rules.len())),
    }
}

/// A TLS or TCP rule: backends only; no matches, filters, timeouts or retries (§5.6).
fn plain_rule(backends: Vec<BackendSpec>) -> RuleSpec<NoMatch> {
    RuleSpec {
        matches: Vec::new(),
        filters: Vec::new(),
        backends,
        timeouts: RouteTimeouts::default(),
        retry: None,
    }
}

/// A TLSRoute (read at whatever version its CRD serves, §2.3): exactly one rule, `hostnames`
/// become SNI matches (§5.4).
pub fn tls_route(r: &TlsRoute) -> Result<OutboundRouteInfo, InvalidObject> {
    const KIND: &str = "TLSRoute";
    let (namespace, name) = names_of(KIND, &r.metadata)?;
    let rule = single_rule(&r.spec.rules).map_err(|e| invalid(KIND, &namespace, &name, e))?;
    let backends = backends!(Some(&rule.backend_refs), namespace, name);
    Ok(info(
        key(GATEWAY_GROUP, "TLSRoute", &namespace, &name),
        &r.metadata,
        outbound_parents!(r, KIND, namespace, name),
        Some(&r.spec.hostnames),
        OutboundRules::Tls(plain_rule(backends)),
    ))
}

/// A TCPRoute (v1alpha2, §2.3): exactly one rule (§5.4).
pub fn tcp_route(r: &TcpRoute) -> Result<OutboundRouteInfo, InvalidObject> {
    const KIND: &str = "TCPRoute";
    let (namespace, name) = names_of(KIND, &r.metadata)?;
    let rule = single_rule(&r.spec.rules).map_err(|e| invalid(KIND, &namespace, &name, e))?;
    let backends = backends!(Some(&rule.backend_refs), namespace, name);
    Ok(info(
        key(GATEWAY_GROUP, "TCPRoute", &namespace, &name),
        &r.metadata,
        outbound_parents!(r, KIND, namespace, name),
        None,
        OutboundRules::Tcp(plain_rule(backends)),
    ))
}
