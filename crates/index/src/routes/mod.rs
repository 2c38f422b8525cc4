//! Routes, shared by inbound policy, outbound policy, route status and the admission webhook
//! (spec/policy.md §3.4, §3.5): HTTP and gRPC route rules in domain form, their conversion from
//! the Kubernetes types ([`convert`]), and what a route's parents decide ([`parents`]).

pub mod convert;
pub mod parents;

/// The API group of Linkerd's policy resources.
pub const POLICY_GROUP: &str = "policy.linkerd.io";
/// The API group of the Gateway API.
pub const GATEWAY_GROUP: &str = "gateway.networking.k8s.io";

/// Identifies a route across kinds: a policy and a Gateway HTTPRoute may share a name.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RouteKey {
    pub group: &'static str,
    pub kind: &'static str,
    pub namespace: String,
    pub name: String,
}

/// The names of the routes of one type `(group, kind)` among `routes`' keys: what a relist of
/// that kind compares against (O(every route), as a relist is).
pub(crate) fn names_of_kind<'a, V>(
    routes: &'a std::collections::BTreeMap<RouteKey, V>,
    group: &'a str,
    kind: &'a str,
) -> impl Iterator<Item = crate::model::ObjectRef> + 'a {
    routes
        .keys()
        .filter(move |k| k.group == group && k.kind == kind)
        .map(|k| crate::model::ObjectRef {
            namespace: k.namespace.clone(),
            name: k.name.clone(),
        })
}

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

/// A request path match. Paths are absolute (start with `/`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum PathMatch {
    Exact(String),
    Prefix(String),
    /// A regular expression of valid syntax (`check_regex`; the webhook compiles it).
    Regex(String),
}

/// A header (or gRPC metadata) match on `name`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum HeaderMatch {
    Exact { name: String, value: String },
    Regex { name: String, regex: String },
}

/// A query-parameter match on `name`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum QueryParamMatch {
    Exact { name: String, value: String },
    Regex { name: String, regex: String },
}

/// One HTTP match: every field that is set must match.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct HttpRouteMatch {
    pub path: Option<PathMatch>,
    pub headers: Vec<HeaderMatch>,
    pub query_params: Vec<QueryParamMatch>,
    /// An upper-case HTTP method.
    pub method: Option<String>,
}

/// One gRPC match: an RPC (service and method, either may be absent) and headers.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct GrpcRouteMatch {
    pub service: Option<String>,
    pub method: Option<String>,
    pub headers: Vec<HeaderMatch>,
}

/// Headers to add, set and remove.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct HeaderModifier {
    pub add: Vec<(String, String)>,
    pub set: Vec<(String, String)>,
    pub remove: Vec<String>,
}

/// How a redirect rewrites the path.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum PathModifier {
    Full(String),
    Prefix(String),
}

/// A request redirect.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct RequestRedirect {
    /// `http` or `https`.
    pub scheme: Option<String>,
    pub hostname: Option<String>,
    pub path: Option<PathModifier>,
    /// 1..=65535; other values are dropped at conversion.
    pub port: Option<u16>,
    /// An HTTP status code (301, 302, ...).
    pub status: Option<u16>,
}

/// A route filter.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Filter {
    RequestHeaderModifier(HeaderModifier),
    ResponseHeaderModifier(HeaderModifier),
    RequestRedirect(RequestRedirect),
}

/// A hostname match: `*.example.com` matches by suffix, anything else exactly.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum HostMatch {
    Exact(String),
    /// The labels after `*.`, reversed (`*.example.com` → `["com", "example"]`).
    Suffix {
        reverse_labels: Vec<String>,
    },
}

/// One HTTP rule.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct HttpRule {
    pub matches: Vec<HttpRouteMatch>,
    pub filters: Vec<Filter>,
}

/// One gRPC rule.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct GrpcRule {
    pub matches: Vec<GrpcRouteMatch>,
    pub filters: Vec<Filter>,
}

impl HostMatch {
    /// Parses a route hostname (§3.4).
    pub fn parse(host: &str) -> Self {
        match host.strip_prefix("*.") {
            Some(rest) => Self::Suffix {
                reverse_labels: rest.split('.').rev().map(str::to_string).collect(),
            },
            None => Self::Exact(host.to_string()),
        }
    }
}
