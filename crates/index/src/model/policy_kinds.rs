//! The policy kinds that are handed to the indexes in their typed form: each index that reads
//! one converts it into its own compact form (inbound authorizations, outbound routes, route
//! status inputs) and keeps only that.

use linkerd_k8s_api::{
    AuthorizationPolicy, HttpLocalRateLimitPolicy, HttpRoute as PolicyHttpRoute,
    MeshTlsAuthentication, NetworkAuthentication, ServerAuthorization,
    gateway_api::{
        experimental::{tcproutes::TcpRoute, tlsroutes::TlsRoute},
        grpcroutes::GrpcRoute,
        httproutes::HttpRoute as GatewayHttpRoute,
    },
};

use super::{InvalidObject, Kind};

macro_rules! typed_kind {
    ($ty:ty, $label:literal) => {
        impl Kind for $ty {
            type Wire = $ty;
            type Object = $ty;
            const LABEL: &'static str = $label;

            fn from_wire(obj: $ty) -> Result<$ty, InvalidObject> {
                Ok(obj)
            }
        }
    };
}

typed_kind!(ServerAuthorization, "ServerAuthorization");
typed_kind!(AuthorizationPolicy, "AuthorizationPolicy");
typed_kind!(MeshTlsAuthentication, "MeshTLSAuthentication");
typed_kind!(NetworkAuthentication, "NetworkAuthentication");
typed_kind!(HttpLocalRateLimitPolicy, "HTTPLocalRateLimitPolicy");
typed_kind!(PolicyHttpRoute, "HTTPRoute.policy.linkerd.io");
typed_kind!(GatewayHttpRoute, "HTTPRoute.gateway.networking.k8s.io");
typed_kind!(GrpcRoute, "GRPCRoute");
typed_kind!(TcpRoute, "TCPRoute");

impl Kind for TlsRoute {
    type Wire = TlsRoute;
    type Object = TlsRoute;
    const LABEL: &'static str = "TLSRoute";
    const HAS_DEFAULTS: bool = true;

    fn from_wire(obj: TlsRoute) -> Result<TlsRoute, InvalidObject> {
        Ok(obj)
    }

    /// A TLSRoute read at v1alpha2 may have no `spec.hostnames` (required from v1 on, which the
    /// `gateway-api` type follows), meaning "any SNI".
    fn fill_defaults(document: &mut serde_json::Value) {
        if let Some(spec) = document.get_mut("spec").and_then(|s| s.as_object_mut())
            && spec.get("hostnames").is_none_or(|h| h.is_null())
        {
            spec.insert("hostnames".into(), serde_json::Value::Array(Vec::new()));
        }
    }
}
