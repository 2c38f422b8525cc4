//! A minimal Kubernetes API server on loopback for `cargo xtask bench-outbound`: enough of the
//! API for `policy-controller` in kube mode (`--kubeconfig`) to index a generated cluster,
//! win the status writer's Lease and patch route statuses, and nothing more.
//!
//! - Collections ([`SERVICES`], [`HTTP_ROUTES`], [`CRDS`]) answer a list (`GET <path>`, one
//!   page whatever `limit` says, with the cluster-wide `resourceVersion`) and a watch
//!   (`?watch=true&resourceVersion=N`: the recorded events after `N`, then live ones, as
//!   chunked newline-delimited `{"type","object"}` lines, kept open). `fieldSelector=
//!   metadata.name=X` is honoured (the Gateway API kind follower watches its CRD that way).
//! - Any other collection the controller watches (Pods, Servers, ...) is served empty: an
//!   empty list, and a watch that stays open without events.
//! - The Lease (`coordination.k8s.io/v1`, namespace `linkerd`): get, create and replace with
//!   `resourceVersion` checks, so the controller becomes leader. The Deployment owning it is
//!   served for `GET`.
//! - `PATCH .../httproutes/NAME/status` is applied as a JSON merge patch, counted
//!   ([`FakeKube::patches`]), and sent to the route watches as `MODIFIED`, as the real
//!   server does.
//!
//! Everything else gets a `404` Status.

use anyhow::Context;
use axum::{
    Router,
    body::{Body, Bytes},
    extract::State as AxumState,
    http::{Method, StatusCode, Uri, header},
    response::{IntoResponse, Response},
};
use serde_json::{Value, json};
use std::{
    collections::{BTreeMap, HashMap},
    convert::Infallible,
    net::SocketAddr,
    path::Path,
    sync::{Arc, Mutex},
};
use tokio::sync::mpsc;

/// Services, cluster-wide.
pub const SERVICES: &str = "/api/v1/services";
/// Gateway API HTTPRoutes at v1, cluster-wide.
pub const HTTP_ROUTES: &str = "/apis/gateway.networking.k8s.io/v1/httproutes";
/// CustomResourceDefinitions: only the HTTPRoute one exists.
pub const CRDS: &str = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";
/// The Lease collection of the control-plane namespace.
const LEASES: &str = "/apis/coordination.k8s.io/v1/namespaces/linkerd/leases";
/// The Deployment that owns the Lease (`--policy-deployment-name`'s default).
const DEPLOYMENT: &str = "/apis/apps/v1/namespaces/linkerd/deployments/linkerd-destination";

/// A running fake API server; it stops with the runtime it was started on.
#[derive(Clone)]
pub struct FakeKube {
    addr: SocketAddr,
    state: Arc<Mutex<State>>,
}

/// The route status patches received.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Patches {
    /// Every status `PATCH` received.
    pub total: u64,
    /// Those that left the status as it was, apart from condition times: a status already in
    /// place that was sent again.
    pub redundant: u64,
}

struct State {
    /// The cluster-wide resource version (etcd's revision).
    version: u64,
    collections: HashMap<&'static str, Collection>,
    lease: LeaseStore,
    patches: Patches,
}

struct Collection {
    api_version: &'static str,
    list_kind: &'static str,
    objects: BTreeMap<(String, String), Value>,
    /// Every event since the start: (resource version, object name, event line).
    history: Vec<(u64, String, Bytes)>,
    watches: Vec<Watch>,
}

/// An open watch: the events of the object named `name` only, when it has a field selector.
struct Watch {
    name: Option<String>,
    tx: mpsc::UnboundedSender<Bytes>,
}

// === impl FakeKube ===

impl FakeKube {
    /// Starts the server on a free loopback port with `services`, `routes` (full objects with
    /// `metadata.namespace`/`name`) and the HTTPRoute CRD. Must run within a Tokio runtime.
    pub async fn start(services: Vec<Value>, routes: Vec<Value>) -> anyhow::Result<Self> {
        let mut state = State {
            version: 1,
            collections: HashMap::new(),
            lease: LeaseStore::default(),
            patches: Patches::default(),
        };
        let collections = [
            (SERVICES, "v1", "ServiceList", services),
            (
                HTTP_ROUTES,
                "gateway.networking.k8s.io/v1",
                "HTTPRouteList",
                routes,
            ),
            (
                CRDS,
                "apiextensions.k8s.io/v1",
                "CustomResourceDefinitionList",
                vec![http_route_crd()],
            ),
        ];
        for (path, api_version, list_kind, objects) in collections {
            let mut collection = Collection {
                api_version,
                list_kind,
                objects: BTreeMap::new(),
                history: Vec::new(),
                watches: Vec::new(),
            };
            for mut object in objects {
                state.version += 1;
                object["metadata"]["resourceVersion"] = json!(state.version.to_string());
                collection.objects.insert(key(&object), object);
            }
            state.collections.insert(path, collection);
        }
        let state = Arc::new(Mutex::new(state));
        let app = Router::new().fallback(handle).with_state(state.clone());
        let addr = serve_on_loopback(app).await?;
        Ok(Self { addr, state })
    }

    /// Writes a kubeconfig at `path` whose current context is this server (plain HTTP, no
    /// credentials).
    pub fn write_kubeconfig(&self, path: &Path) -> anyhow::Result<()> {
        write_kubeconfig(self.addr, path)
    }

    /// Replaces a route (a full object; its `status` is kept from the stored one, as an update
    /// of the main resource does) and sends `MODIFIED` to the route watches.
    pub fn update_route(&self, mut route: Value) {
        let mut state = self.state.lock().expect("fake API state poisoned");
        let k = key(&route);
        let status = state.collections[HTTP_ROUTES]
            .objects
            .get(&k)
            .and_then(|o| o.get("status").cloned());
        match status {
            Some(status) => route["status"] = status,
            None => {
                if let Some(fields) = route.as_object_mut() {
                    fields.remove("status");
                }
            }
        }
        state.store(HTTP_ROUTES, route, "MODIFIED");
    }

    /// The route status patches received so far.
    pub fn patches(&self) -> Patches {
        self.state.lock().expect("fake API state poisoned").patches
    }

    /// The Lease's holder, once one was written.
    pub fn lease_holder(&self) -> Option<String> {
        self.state
            .lock()
            .expect("fake API state poisoned")
            .lease
            .holder()
            .map(str::to_string)
    }
}

// === impl State ===

impl State {
    /// Stores `object` under a new resource version and sends the event to the watches.
    fn store(&mut self, path: &'static str, mut object: Value, type_: &str) {
        self.version += 1;
        object["metadata"]["resourceVersion"] = json!(self.version.to_string());
        let Some(collection) = self.collections.get_mut(path) else {
            return;
        };
        let k = key(&object);
        let line = event_line(type_, &object);
        collection.watches.retain(|w| {
            w.name.as_ref().is_some_and(|n| *n != k.1) || w.tx.send(line.clone()).is_ok()
        });
        collection.history.push((self.version, k.1.clone(), line));
        collection.objects.insert(k, object);
    }
}

/// The policy controller's status-writer Lease (`coordination.k8s.io/v1`, namespace `linkerd`)
/// and the Deployment that owns it, as both fake API servers serve them: get, create and
/// replace of the Lease with the API's `resourceVersion` conflict checks, and `GET` of the
/// Deployment.
#[derive(Debug, Default)]
pub(crate) struct LeaseStore {
    lease: Option<Value>,
    /// The Lease's holder after its last successful write.
    holder: Option<String>,
}

// === impl LeaseStore ===

impl LeaseStore {
    /// The answer to `method path` when it is a Lease or Deployment request, else `None`.
    /// A write takes the next resource version from `version` (the cluster-wide counter).
    pub(crate) fn handle(
        &mut self,
        method: &Method,
        path: &str,
        body: &[u8],
        version: &mut u64,
    ) -> Option<Response> {
        Some(match *method {
            Method::GET if path == DEPLOYMENT => json_response(StatusCode::OK, &deployment()),
            Method::GET if path.starts_with(LEASES) => {
                let name = path.trim_start_matches(LEASES).trim_start_matches('/');
                match &self.lease {
                    Some(lease) if lease["metadata"]["name"] == name => {
                        json_response(StatusCode::OK, lease)
                    }
                    _ => failure(404, "NotFound"),
                }
            }
            Method::POST if path == LEASES => self.write(body, true, version),
            Method::PUT if path.starts_with(LEASES) => self.write(body, false, version),
            _ => return None,
        })
    }

    /// The Lease's holder, once one was written.
    pub(crate) fn holder(&self) -> Option<&str> {
        self.holder.as_deref()
    }

    /// Creates (`create`) or replaces the Lease, with the API's `resourceVersion` conflict
    /// checks.
    fn write(&mut self, body: &[u8], create: bool, version: &mut u64) -> Response {
        let Ok(mut lease) = serde_json::from_slice::<Value>(body) else {
            return failure(400, "BadRequest");
        };
        let current = self
            .lease
            .as_ref()
            .map(|l| l["metadata"]["resourceVersion"].clone());
        if create && current.is_some() {
            return failure(409, "AlreadyExists");
        }
        if !create && current.as_ref() != Some(&lease["metadata"]["resourceVersion"]) {
            return failure(409, "Conflict");
        }
        *version += 1;
        lease["metadata"]["resourceVersion"] = json!(version.to_string());
        lease["metadata"]["namespace"] = json!("linkerd");
        self.holder = lease["spec"]["holderIdentity"].as_str().map(str::to_string);
        self.lease = Some(lease.clone());
        let code = if create {
            StatusCode::CREATED
        } else {
            StatusCode::OK
        };
        json_response(code, &lease)
    }
}

/// (namespace, name) of an object.
fn key(object: &Value) -> (String, String) {
    let field = |f: &str| {
        object["metadata"][f]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };
    (field("namespace"), field("name"))
}

/// The single entry point: dispatches on method and path.
async fn handle(
    AxumState(state): AxumState<Arc<Mutex<State>>>,
    method: Method,
    uri: Uri,
    body: Bytes,
) -> Response {
    let path = uri.path();
    let query = parse_query(uri.query().unwrap_or_default());
    let mut state = state.lock().expect("fake API state poisoned");
    let State { lease, version, .. } = &mut *state;
    if let Some(response) = lease.handle(&method, path, &body, version) {
        return response;
    }
    match method {
        Method::PATCH if path.ends_with("/status") && path.contains("/httproutes/") => {
            patch_route_status(&mut state, path, &body)
        }
        Method::GET => {
            let name = query
                .get("fieldSelector")
                .and_then(|s| s.strip_prefix("metadata.name="))
                .map(str::to_string);
            if query.get("watch").map(String::as_str) == Some("true") {
                let since = query
                    .get("resourceVersion")
                    .and_then(|v| v.parse::<u64>().ok())
                    .unwrap_or(0);
                watch(&mut state, path, name, since)
            } else {
                list(&state, path, name.as_deref())
            }
        }
        _ => failure(404, "NotFound"),
    }
}

/// A list of the collection at `path`, or an empty one for a collection not generated.
fn list(state: &State, path: &str, name: Option<&str>) -> Response {
    let (api_version, list_kind, items) = match state.collections.get(path) {
        Some(c) => (
            c.api_version,
            c.list_kind,
            c.objects
                .iter()
                .filter(|((_, n), _)| name.is_none_or(|name| name == n))
                .map(|(_, o)| o.clone())
                .collect(),
        ),
        None => ("v1", "List", Vec::new()),
    };
    let body = json!({
        "apiVersion": api_version,
        "kind": list_kind,
        "metadata": {"resourceVersion": state.version.to_string()},
        "items": items,
    });
    json_response(StatusCode::OK, &body)
}

/// A watch of the collection at `path` from resource version `since`: the recorded events
/// after it, then live events; a collection not generated never sends any.
fn watch(state: &mut State, path: &str, name: Option<String>, since: u64) -> Response {
    let (tx, rx) = mpsc::unbounded_channel::<Bytes>();
    if let Some(collection) = state.collections.get_mut(path) {
        for (version, object, line) in &collection.history {
            if *version > since && name.as_ref().is_none_or(|n| n == object) {
                let _ = tx.send(line.clone());
            }
        }
        collection.watches.push(Watch { name, tx });
    } else {
        // Kept open: the sender lives as long as the stream.
        let idle = tx;
        let stream = futures::stream::unfold((rx, idle), |(mut rx, idle)| async move {
            rx.recv()
                .await
                .map(|line| (Ok::<_, Infallible>(line), (rx, idle)))
        });
        return stream_response(Body::from_stream(stream));
    }
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|line| (Ok::<_, Infallible>(line), rx))
    });
    stream_response(Body::from_stream(stream))
}

/// One watch event line. `type` comes first, as the API server writes it: the controllers
/// decode each object as it arrives, which they cannot once serde has had to buffer the object
/// to find the tag (serde_json's maps sort keys, which would put `object` first).
fn event_line(type_: &str, object: &Value) -> Bytes {
    Bytes::from(format!(
        "{{\"type\":{},\"object\":{object}}}\n",
        json!(type_)
    ))
}

fn stream_response(body: Body) -> Response {
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "application/json")
        .body(body)
        .unwrap_or_else(|_| failure(500, "InternalError"))
}

/// `PATCH /apis/gateway.networking.k8s.io/v1/namespaces/NS/httproutes/NAME/status`: a merge
/// patch of the stored route, counted; `MODIFIED` goes to the watches.
fn patch_route_status(state: &mut State, path: &str, body: &[u8]) -> Response {
    let Ok(patch) = serde_json::from_slice::<Value>(body) else {
        return failure(400, "BadRequest");
    };
    let parts: Vec<&str> = path
        .trim_start_matches(HTTP_ROUTES_NS_PREFIX)
        .split('/')
        .collect();
    let [namespace, "httproutes", name, "status"] = parts.as_slice() else {
        return failure(404, "NotFound");
    };
    let k = (namespace.to_string(), name.to_string());
    let Some(mut route) = state.collections[HTTP_ROUTES].objects.get(&k).cloned() else {
        return failure(404, "NotFound");
    };
    state.patches.total += 1;
    let before = without_times(route.get("status"));
    if let Some(status) = patch.get("status") {
        // Only the status subresource is written, whatever else the body carries.
        json_patch::merge(&mut route, &json!({"status": status}));
    }
    if without_times(route.get("status")) == before {
        state.patches.redundant += 1;
    }
    state.store(HTTP_ROUTES, route.clone(), "MODIFIED");
    let stored = state.collections[HTTP_ROUTES].objects.get(&k).cloned();
    json_response(StatusCode::OK, &stored.unwrap_or(route))
}

const HTTP_ROUTES_NS_PREFIX: &str = "/apis/gateway.networking.k8s.io/v1/namespaces/";

/// A status with every `lastTransitionTime` removed, for comparing what it says.
fn without_times(status: Option<&Value>) -> Value {
    fn strip(value: &mut Value) {
        match value {
            Value::Object(map) => {
                map.remove("lastTransitionTime");
                map.values_mut().for_each(strip);
            }
            Value::Array(items) => items.iter_mut().for_each(strip),
            _ => {}
        }
    }
    let mut status = status.cloned().unwrap_or(Value::Null);
    strip(&mut status);
    status
}

/// The query string's parameters, percent-decoded.
pub(crate) fn parse_query(query: &str) -> HashMap<String, String> {
    query
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .map(|(k, v)| (percent_decode(k), percent_decode(v)))
        .collect()
}

pub(crate) fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(b)) => {
                out.push(b);
                i += 3;
            }
            (b'+', _) => {
                out.push(b' ');
                i += 1;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

pub(crate) fn json_response(code: StatusCode, body: &Value) -> Response {
    (
        code,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

pub(crate) fn failure(code: u16, reason: &str) -> Response {
    failure_because(code, reason, reason)
}

/// A `Status` answer with HTTP status `code`, as the API server sends for a failed request.
pub(crate) fn failure_because(code: u16, reason: &str, message: &str) -> Response {
    let body = json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message, "reason": reason, "code": code,
    });
    json_response(
        StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        &body,
    )
}

/// The Deployment owning the Lease: only its `uid` is read.
fn deployment() -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": "linkerd-destination",
            "namespace": "linkerd",
            "uid": "0000000d-0000-4000-8000-000000000001",
            "resourceVersion": "1",
        },
        "spec": {
            "selector": {"matchLabels": {"app": "linkerd-destination"}},
            "template": {"metadata": {"labels": {"app": "linkerd-destination"}}},
        },
    })
}

/// The Gateway API HTTPRoute CRD, serving (and storing) v1, `Established`.
fn http_route_crd() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "httproutes.gateway.networking.k8s.io", "namespace": ""},
        "spec": {
            "group": "gateway.networking.k8s.io",
            "names": {"kind": "HTTPRoute", "listKind": "HTTPRouteList", "plural": "httproutes", "singular": "httproute"},
            "scope": "Namespaced",
            "versions": [{"name": "v1", "served": true, "storage": true}],
        },
        "status": {
            "conditions": [{"type": "Established", "status": "True"}],
        },
    })
}

/// Serves `app` as a fake API server on an ephemeral loopback port, in the background; its
/// address. Shared with the bench's [`crate::static_kube`] server.
pub(crate) async fn serve_on_loopback(app: Router) -> anyhow::Result<std::net::SocketAddr> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .context("cannot listen on 127.0.0.1 for the fake API server")?;
    let addr = listener
        .local_addr()
        .context("cannot read the fake API server's address")?;
    tokio::spawn(async move {
        if let Err(error) = axum::serve(listener, app).await {
            eprintln!("fake API server stopped: {error}");
        }
    });
    Ok(addr)
}

/// Writes a kubeconfig at `path` whose current context is the API server at `addr` (plain
/// HTTP, no credentials, namespace `linkerd`).
pub(crate) fn write_kubeconfig(addr: std::net::SocketAddr, path: &Path) -> anyhow::Result<()> {
    let config = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: http://{addr}\n\
         users:\n- name: fake\n  user: {{}}\ncontexts:\n- name: fake\n  context:\n    cluster: fake\n    user: fake\n    namespace: linkerd\n\
         current-context: fake\n"
    );
    std::fs::write(path, config).with_context(|| format!("cannot write {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_are_percent_decoded() {
        let q = parse_query(
            "&fieldSelector=metadata.name%3Dhttproutes.gateway.networking.k8s.io&watch=true",
        );
        assert_eq!(
            q["fieldSelector"],
            "metadata.name=httproutes.gateway.networking.k8s.io"
        );
        assert_eq!(q["watch"], "true");
    }

    #[test]
    fn events_name_their_type_before_their_object() {
        let line = event_line(
            "MODIFIED",
            &json!({"kind": "HTTPRoute", "apiVersion": "v1"}),
        );
        assert_eq!(
            line,
            "{\"type\":\"MODIFIED\",\"object\":{\"apiVersion\":\"v1\",\"kind\":\"HTTPRoute\"}}\n"
        );
    }

    #[test]
    fn a_patch_that_only_moves_times_is_redundant() {
        let a = json!({"parents": [{"conditions": [{"type": "Accepted", "lastTransitionTime": "t1"}]}]});
        let b = json!({"parents": [{"conditions": [{"type": "Accepted", "lastTransitionTime": "t2"}]}]});
        assert_eq!(without_times(Some(&a)), without_times(Some(&b)));
        assert_ne!(without_times(Some(&a)), without_times(None));
    }
}
