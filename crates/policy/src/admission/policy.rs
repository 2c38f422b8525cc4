//! The rules of the `policy.linkerd.io` kinds that are not routes (spec/policy.md §6):
//! AuthorizationPolicy, MeshTLSAuthentication, Server, NetworkAuthentication, EgressNetwork,
//! ServerAuthorization and HTTPLocalRateLimitPolicy. Each function returns the message of the
//! first rule that fails.

use k8s_openapi::apimachinery::pkg::{apis::meta::v1::LabelSelector, util::intstr::IntOrString};
use linkerd_index::{inbound::DefaultPolicy, model::parse_net};
use linkerd_k8s_api::{
    Network, authorization_policy::v1alpha1::AuthorizationPolicySpec,
    egress_network::v1alpha1::EgressNetworkSpec,
    http_local_rate_limit_policy::v1alpha1::HttpLocalRateLimitPolicySpec,
    mesh_tls_authentication::v1alpha1::MeshTlsAuthenticationSpec,
    network_authentication::v1alpha1::NetworkAuthenticationSpec, server::v1beta3::ServerSpec,
    server_authorization::v1beta1::ServerAuthorizationSpec, shared::NamespacedTargetRef,
};

use super::{
    identity::validate_identity,
    kinds::{
        GATEWAY_HTTP_ROUTE, GRPC_ROUTE, MESH_TLS_AUTHENTICATION, NAMESPACE, NETWORK_AUTHENTICATION,
        POLICY_HTTP_ROUTE, SERVER, SERVICE_ACCOUNT, TypeRef,
    },
};

/// AuthorizationPolicy in namespace `ns`: a Namespace target must be `ns`; at most one
/// MeshTLSAuthentication, one ServiceAccount (not both) and one NetworkAuthentication; no
/// other authentication kinds; the target is a Server, a Namespace, an HTTPRoute (either
/// group) or a GRPCRoute. An empty `requiredAuthenticationRefs` is allowed.
pub fn authorization_policy(ns: &str, spec: &AuthorizationPolicySpec) -> Result<(), String> {
    let target = &spec.target_ref;
    let target_is = |t: TypeRef| t.matches(target.group.as_deref(), &target.kind);
    if target_is(NAMESPACE) && target.name != ns {
        return Err(format!("cannot target another namespace: {}", target.name));
    }

    let refs = &spec.required_authentication_refs;
    let count = |t: TypeRef| {
        refs.iter()
            .filter(|r| t.matches(r.group.as_deref(), &r.kind))
            .count()
    };
    let (mesh_tls, service_accounts, networks) = (
        count(MESH_TLS_AUTHENTICATION),
        count(SERVICE_ACCOUNT),
        count(NETWORK_AUTHENTICATION),
    );
    if mesh_tls > 1 {
        return Err("only a single MeshTLSAuthentication may be set".into());
    }
    if service_accounts > 1 {
        return Err("only a single ServiceAccount may be set".into());
    }
    if mesh_tls + service_accounts > 1 {
        return Err("a MeshTLSAuthentication and ServiceAccount may not be set together".into());
    }
    if networks > 1 {
        return Err("only a single NetworkAuthentication may be set".into());
    }
    let unsupported: Vec<String> = refs
        .iter()
        .filter(|r| {
            ![
                MESH_TLS_AUTHENTICATION,
                SERVICE_ACCOUNT,
                NETWORK_AUTHENTICATION,
            ]
            .into_iter()
            .any(|t| t.matches(r.group.as_deref(), &r.kind))
        })
        .map(NamespacedTargetRef::canonical_kind)
        .collect();
    if !unsupported.is_empty() {
        return Err(format!(
            "unsupported authentication kind(s): {}",
            unsupported.join(", ")
        ));
    }

    let supported_target = [
        SERVER,
        NAMESPACE,
        POLICY_HTTP_ROUTE,
        GATEWAY_HTTP_ROUTE,
        GRPC_ROUTE,
    ]
    .into_iter()
    .any(target_is);
    if !supported_target {
        return Err(format!(
            "unsupported authorization target type: {}",
            target.canonical_kind()
        ));
    }
    Ok(())
}

/// MeshTLSAuthentication: it names some identity or identityRef; identities are SPIFFE ids or
/// DNS-like names (`id <id> is invalid: <reason>`); identityRefs are ServiceAccounts, or
/// Namespaces without a namespace.
pub fn mesh_tls_authentication(spec: &MeshTlsAuthenticationSpec) -> Result<(), String> {
    // The CRD's description requires one of the two with an item; the index skips one with
    // neither.
    if spec.identities.iter().flatten().next().is_none()
        && spec.identity_refs.iter().flatten().next().is_none()
    {
        return Err(
            "a MeshTLSAuthentication must name at least one identity or identityRef (it would authenticate no client)"
                .into(),
        );
    }
    for id in spec.identities.iter().flatten() {
        validate_identity(id).map_err(|reason| format!("id {id} is invalid: {reason}"))?;
    }
    for r in spec.identity_refs.iter().flatten() {
        if SERVICE_ACCOUNT.matches(r.group.as_deref(), &r.kind) {
            continue;
        }
        if NAMESPACE.matches(r.group.as_deref(), &r.kind) {
            if r.namespace.is_some() {
                return Err(
                    "Namespace identity_ref is cluster-scoped and cannot have a namespace".into(),
                );
            }
            continue;
        }
        return Err(format!(
            "invalid identity target kind: {}",
            r.canonical_kind()
        ));
    }
    Ok(())
}

/// Server: exactly one of `podSelector` and `externalWorkloadSelector` (spec/policy.md §2.1;
/// the CRD schema requires it too, but without one a Server selects nothing and with both it
/// is ambiguous); `port`
/// is a port number in 1..=65535 or a Kubernetes port name (IANA service name:
/// 1-15 lowercase letters, digits and `-`, with a letter, no leading, trailing or doubled `-`),
/// which the CRD schema also requires but a webhook must not rely on (a Server on port 0 would
/// select nothing and silently leave the port on its default policy); the selector's
/// expressions are valid ([`label_selector`]); then `accessPolicy`, when given, is a
/// default-policy name (`proxyProtocol` is checked by decoding).
pub fn server(spec: &ServerSpec) -> Result<(), String> {
    if spec.pod_selector.is_some() == spec.external_workload_selector.is_some() {
        return Err(
            "a Server must have exactly one of spec.podSelector and spec.externalWorkloadSelector"
                .into(),
        );
    }
    match &spec.port {
        IntOrString::Int(port) if !(1..=65535).contains(port) => {
            return Err(format!(
                "invalid port {port}: a Server's port must be between 1 and 65535"
            ));
        }
        IntOrString::String(name) if !is_port_name(name) => {
            return Err(format!(
                "invalid port name {name:?}: a Server's port name must be 1-15 lowercase letters, digits and '-', with at least one letter"
            ));
        }
        _ => {}
    }
    for (field, selector) in [
        ("podSelector", &spec.pod_selector),
        ("externalWorkloadSelector", &spec.external_workload_selector),
    ] {
        if let Some(selector) = selector {
            label_selector(field, selector)?;
        }
    }
    if let Some(policy) = &spec.access_policy {
        policy
            .parse::<DefaultPolicy>()
            .map_err(|e| format!("Invalid 'accessPolicy' field: {e}"))?;
    }
    Ok(())
}

/// A label selector's expressions: the operator is `In`, `NotIn`, `Exists` or `DoesNotExist`
/// (upstream's selector type has only those, so a Server with another does not decode there
/// and is denied), and the values fit it as Kubernetes requires of label selectors (some for
/// `In` and `NotIn`, none for the others). The index reads a selector that breaks these as
/// selecting nothing: a typo would silently leave the workloads to the default policy.
fn label_selector(field: &str, selector: &LabelSelector) -> Result<(), String> {
    for (i, expression) in selector.match_expressions.iter().flatten().enumerate() {
        let operator = expression.operator.as_str();
        let has_values = expression.values.as_ref().is_some_and(|v| !v.is_empty());
        let at = format!("{field}.matchExpressions[{i}] (key {:?})", expression.key);
        match operator {
            "In" | "NotIn" if !has_values => {
                return Err(format!(
                    "invalid {at}: operator {operator} needs at least one value"
                ));
            }
            "Exists" | "DoesNotExist" if has_values => {
                return Err(format!("invalid {at}: operator {operator} takes no values"));
            }
            "In" | "NotIn" | "Exists" | "DoesNotExist" => {}
            _ => {
                return Err(format!(
                    "invalid {at}: unknown operator {operator:?}, expected In, NotIn, Exists or DoesNotExist"
                ));
            }
        }
    }
    Ok(())
}

/// Whether `name` is a Kubernetes port name (`IsValidPortName`: an IANA_SVC_NAME).
fn is_port_name(name: &str) -> bool {
    (1..=15).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && name.bytes().any(|b| b.is_ascii_lowercase())
        && !name.starts_with('-')
        && !name.ends_with('-')
        && !name.contains("--")
}

/// NetworkAuthentication: at least one network, each valid (see [`networks`]).
pub fn network_authentication(spec: &NetworkAuthenticationSpec) -> Result<(), String> {
    if spec.networks.is_empty() {
        return Err("at least one network must be specified".into());
    }
    networks(&spec.networks)
}

/// EgressNetwork: `networks`, when present, is not empty and each is valid.
pub fn egress_network(spec: &EgressNetworkSpec) -> Result<(), String> {
    match &spec.networks {
        None => Ok(()),
        Some(nets) if nets.is_empty() => Err("at least one network must be specified".into()),
        Some(nets) => networks(nets),
    }
}

/// ServerAuthorization: exactly one of `server.name` and `server.selector` (with neither it
/// would authorize clients on every Server of the namespace; the CRD schema requires it too);
/// `client` sets `meshTLS` or `unauthenticated: true`; `meshTLS` excludes `unauthenticated`;
/// `unauthenticatedTLS` excludes identities and ServiceAccounts, and without it `meshTLS`
/// names some (the index skips a ServerAuthorization that authorizes no client); the Server selector's
/// expressions are valid ([`label_selector`]); networks are valid.
pub fn server_authorization(spec: &ServerAuthorizationSpec) -> Result<(), String> {
    if spec.server.name.is_some() == spec.server.selector.is_some() {
        return Err(
            "a ServerAuthorization must have exactly one of spec.server.name and spec.server.selector"
                .into(),
        );
    }
    let client = &spec.client;
    if client.mesh_tls.is_none() && !client.unauthenticated {
        return Err(
            "a ServerAuthorization's spec.client must set meshTLS or unauthenticated: true (it would authorize no client)"
                .into(),
        );
    }
    if let Some(tls) = &client.mesh_tls {
        if client.unauthenticated {
            return Err("`unauthenticated` must be false if `mesh_tls` is specified".into());
        }
        let identities = tls.identities.as_ref().is_some_and(|ids| !ids.is_empty());
        let service_accounts = tls
            .service_accounts
            .as_ref()
            .is_some_and(|sas| !sas.is_empty());
        if tls.unauthenticated_tls && (identities || service_accounts) {
            return Err(
                "`unauthenticatedTLS` be false if any `identities` or `service_accounts` is specified"
                    .into(),
            );
        }
        // The index skips such a ServerAuthorization as invalid.
        if !tls.unauthenticated_tls && !identities && !service_accounts {
            return Err(
                "a ServerAuthorization's spec.client.meshTLS must name identities or serviceAccounts, or set unauthenticatedTLS: true (it would authorize no client)"
                    .into(),
            );
        }
    }
    if let Some(selector) = &spec.server.selector {
        label_selector("server.selector", selector)?;
    }
    networks(client.networks.as_deref().unwrap_or_default())
}

/// HTTPLocalRateLimitPolicy: the target is a Server; rates are positive, and neither the
/// identity rate nor an override exceeds the total; overrides name ServiceAccounts.
pub fn rate_limit_policy(spec: &HttpLocalRateLimitPolicySpec) -> Result<(), String> {
    let target = &spec.target_ref;
    if !SERVER.matches(target.group.as_deref(), &target.kind) {
        return Err(format!(
            "invalid targetRef kind: {}",
            target.canonical_kind()
        ));
    }
    let overrides = spec.overrides.as_deref().unwrap_or_default();
    if let Some(total) = &spec.total {
        let total = total.requests_per_second;
        if total == 0 {
            return Err("total.requestsPerSecond must be greater than 0".into());
        }
        if spec
            .identity
            .as_ref()
            .is_some_and(|i| i.requests_per_second > total)
        {
            return Err(
                "identity.requestsPerSecond must be less than or equal to total.requestsPerSecond"
                    .into(),
            );
        }
        if overrides.iter().any(|o| o.requests_per_second > total) {
            return Err(
                "override.requestsPerSecond must be less than or equal to total.requestsPerSecond"
                    .into(),
            );
        }
    }
    if spec
        .identity
        .as_ref()
        .is_some_and(|i| i.requests_per_second == 0)
    {
        return Err("identity.requestsPerSecond must be greater than 0".into());
    }
    for o in overrides {
        if o.requests_per_second == 0 {
            return Err("override.requestsPerSecond must be greater than 0".into());
        }
        if !o
            .client_refs
            .iter()
            .all(|r| SERVICE_ACCOUNT.matches(r.group.as_deref(), &r.kind))
        {
            return Err("overrides.clientRefs must target a ServiceAccount".into());
        }
    }
    Ok(())
}

/// Every CIDR and exception parses (a bare IP is a /32 or /128), and every exception lies
/// strictly inside its CIDR.
pub fn networks(networks: &[Network]) -> Result<(), String> {
    for net in networks {
        let cidr = parse_net(&net.cidr)?;
        for except in net.exceptions() {
            let except = parse_net(except)?;
            if except.contains(&cidr) {
                return Err(format!(
                    "cidr '{cidr}' is completely negated by exception '{except}'"
                ));
            }
            if !cidr.contains(&except) {
                return Err(format!(
                    "cidr '{cidr}' does not include exception '{except}'"
                ));
            }
        }
    }
    Ok(())
}
