//! TLSRoutes and TCPRoutes as indexed kinds (spec/policy.md §1.5: "outbound, status"). Unlike
//! HTTP and gRPC routes they have no inbound form: each is stored for outbound policy (§5.4) and
//! for the route status computation (§7.2), the latter whether or not it converts.

use linkerd_k8s_api::gateway_api::experimental::{tcproutes::TcpRoute, tlsroutes::TlsRoute};

use super::routes::{self, GATEWAY_GROUP, RouteKey};
use crate::{
    model::{InvalidObject, ObjectRef},
    store::{Cluster, IndexedKind, Touched},
};

/// Implements [`IndexedKind`] for a Gateway API route kind with outbound and status forms only.
macro_rules! outbound_route_kind {
    ($ty:ty, $kind:literal, $metric:literal, $convert:expr) => {
        impl IndexedKind for $ty {
            const KIND: &'static str = $kind;
            const CACHE_METRIC: &'static str = $metric;

            fn apply(
                cluster: &mut Cluster,
                obj: &Self,
                touched: &mut Touched,
            ) -> Result<(), InvalidObject> {
                let Some(key) = crate::store::object_ref(obj) else {
                    return Ok(());
                };
                let key = route_key($kind, key);
                crate::status::apply_route(cluster, &key, obj, touched);
                routes::apply_route(cluster, key, ($convert)(obj), touched)
            }

            fn delete(cluster: &mut Cluster, key: &ObjectRef, touched: &mut Touched) {
                let key = route_key($kind, key.clone());
                crate::status::delete_route(cluster, &key, touched);
                routes::delete_route(cluster, &key, touched);
            }

            fn keys(cluster: &Cluster) -> Vec<ObjectRef> {
                // A route that failed conversion is still stored for its status.
                let outbound = cluster.outbound_routes.by_key.keys();
                let status = cluster.status_routes.by_key.keys();
                let mut keys: Vec<ObjectRef> =
                    routes::route_names(outbound.chain(status), GATEWAY_GROUP, $kind).collect();
                keys.sort();
                keys.dedup();
                keys
            }
        }
    };
}

fn route_key(kind: &'static str, object: ObjectRef) -> RouteKey {
    RouteKey {
        group: GATEWAY_GROUP,
        kind,
        namespace: object.namespace,
        name: object.name,
    }
}

outbound_route_kind!(
    TlsRoute,
    "TLSRoute",
    "tlsroute_cache_size",
    routes::tls_route
);
outbound_route_kind!(
    TcpRoute,
    "TCPRoute",
    "tcproute_cache_size",
    routes::tcp_route
);

#[cfg(test)]
mod tests;
