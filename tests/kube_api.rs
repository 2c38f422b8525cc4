//! A Kubernetes API server on loopback for running the binaries in kube mode (`KUBECONFIG`
//! pointing at it): enough of the API for `destination` and `policy-controller` to list and
//! watch a set of objects, claim the status writer's Lease, and patch statuses.
//!
//! - Objects are stored by collection, found from their `apiVersion` and `kind` (the plural is
//!   the lower-cased kind plus `s`, `y` becoming `ies`), so any kind can be given.
//! - `GET` of a collection, cluster-wide (`/api/v1/pods`, `/apis/GROUP/VERSION/PLURAL`) or in a
//!   namespace (`.../namespaces/NS/PLURAL`), lists its objects in one page, filtered by
//!   namespace and by `fieldSelector=metadata.name=NAME`; label selectors are not applied. A
//!   collection that was given nothing is an empty list (so every kind is "installed"), and so
//!   is any other `GET` path.
//! - `?watch=true&resourceVersion=N`: the collection's events after `N`, then live ones, as
//!   chunked `{"type","object"}` lines, kept open.
//! - `Accept: ...;as=PartialObjectMetadataList` (kube's metadata watchers): objects are reduced
//!   to their `metadata`.
//! - `GET`, `POST` (create, `409` if it exists) and `PUT` (replace, `409` unless the
//!   `resourceVersion` is the stored one) of one object: how the Lease is claimed.
//! - `PATCH .../NAME/status`: a JSON merge patch of the stored object's `status`; `MODIFIED` goes
//!   to the watches.
//!
//! The server runs on the test's runtime: a test that blocks its thread (`Process::wait_ready`)
//! needs the multi-thread flavour (`#[tokio::test(flavor = "multi_thread")]`).
//!
//! Every write that succeeds is logged ([`Write`]) with the listener it came through: the server
//! listens on as many ports as asked, each with its own kubeconfig, so that a test tells the
//! replicas of a binary apart.

use axum::{
    Router,
    body::{Body, Bytes},
    extract::State,
    http::{HeaderMap, Method, StatusCode, Uri, header},
    response::{IntoResponse, Response},
};
use serde_json::{Value, json};
use std::{
    collections::{BTreeMap, HashMap},
    convert::Infallible,
    net::SocketAddr,
    path::Path,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};
use tokio::sync::mpsc;

/// A running fake API server; it stops with the runtime it was started on.
#[derive(Clone)]
pub struct FakeApi {
    addrs: Vec<SocketAddr>,
    state: Arc<Mutex<ApiState>>,
}

/// A write the server accepted.
#[derive(Clone, Debug)]
pub struct Write {
    /// Which listener (port) it came through, by index.
    pub listener: usize,
    /// `POST`, `PUT` or `PATCH`.
    pub method: Method,
    /// The collection's cluster-wide path: `/apis/coordination.k8s.io/v1/leases`.
    pub collection: String,
    pub namespace: String,
    pub name: String,
    /// The object as stored after the write.
    pub object: Value,
    /// A status patch that left the status as it was, apart from `lastTransitionTime`s.
    pub redundant: bool,
    /// When it was accepted.
    pub at: Instant,
}

#[derive(Default)]
struct ApiState {
    /// The cluster-wide resource version (etcd's revision).
    version: u64,
    collections: HashMap<String, Collection>,
    writes: Vec<Write>,
}

#[derive(Default)]
struct Collection {
    objects: BTreeMap<(String, String), Value>,
    /// Every event: (resource version, namespace, name, event line).
    history: Vec<(u64, String, String, Bytes)>,
    watches: Vec<Watch>,
}

struct Watch {
    namespace: Option<String>,
    name: Option<String>,
    metadata_only: bool,
    tx: mpsc::UnboundedSender<Bytes>,
}

/// What a request path names.
#[derive(Debug, PartialEq, Eq)]
struct Target {
    collection: String,
    namespace: Option<String>,
    name: Option<String>,
    status: bool,
}

// === impl FakeApi ===

impl FakeApi {
    /// Starts the server on `listeners` free loopback ports with `objects` (full objects with
    /// `apiVersion`, `kind` and `metadata`). Must run within a Tokio runtime.
    pub async fn start(objects: Vec<Value>, listeners: usize) -> Self {
        let state = Arc::new(Mutex::new(ApiState::default()));
        {
            let mut state = state.lock().unwrap();
            for object in objects {
                state.store(object, "ADDED");
            }
        }
        let mut addrs = Vec::new();
        for listener in 0..listeners {
            let app = Router::new()
                .fallback(handle)
                .with_state((state.clone(), listener));
            let socket = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            addrs.push(socket.local_addr().unwrap());
            tokio::spawn(async move {
                let _ = axum::serve(socket, app).await;
            });
        }
        Self { addrs, state }
    }

    /// Writes a kubeconfig at `path` for listener `listener` (plain HTTP, no credentials).
    pub fn write_kubeconfig(&self, listener: usize, path: &Path) {
        let addr = self.addrs[listener];
        let config = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: http://{addr}\n\
             users:\n- name: fake\n  user: {{}}\ncontexts:\n- name: fake\n  context:\n    cluster: fake\n    user: fake\n\
             current-context: fake\n"
        );
        std::fs::write(path, config).unwrap();
    }

    /// Creates or replaces `object`, as a client's write would (`ADDED` or `MODIFIED`).
    pub fn apply(&self, object: Value) {
        let mut state = self.state.lock().unwrap();
        let target = Target::of(&object);
        let exists = state
            .collections
            .get(&target.collection)
            .is_some_and(|c| c.objects.contains_key(&key(&object)));
        state.store(object, if exists { "MODIFIED" } else { "ADDED" });
    }

    /// The writes accepted so far, in order.
    pub fn writes(&self) -> Vec<Write> {
        self.state.lock().unwrap().writes.clone()
    }

    /// The stored object, if any.
    pub fn get(&self, collection: &str, namespace: &str, name: &str) -> Option<Value> {
        let state = self.state.lock().unwrap();
        state
            .collections
            .get(collection)?
            .objects
            .get(&(namespace.to_string(), name.to_string()))
            .cloned()
    }

    /// Waits until `done` holds for the writes so far; panics after `timeout`.
    pub async fn wait_for_writes(&self, timeout: Duration, done: impl Fn(&[Write]) -> bool) {
        let deadline = Instant::now() + timeout;
        loop {
            let writes = self.writes();
            if done(&writes) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "not done after {timeout:?}; writes: {writes:#?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

// === impl ApiState ===

impl ApiState {
    /// Stores `object` under the next resource version and sends the event to the watches.
    fn store(&mut self, mut object: Value, type_: &str) -> Value {
        self.version += 1;
        let version = self.version;
        let meta = &mut object["metadata"];
        meta["resourceVersion"] = json!(version.to_string());
        if meta.get("uid").is_none() {
            meta["uid"] = json!(format!("00000000-0000-4000-8000-{version:012}"));
        }
        if meta.get("creationTimestamp").is_none() {
            meta["creationTimestamp"] = json!("2026-01-01T00:00:00Z");
        }
        let target = Target::of(&object);
        let (namespace, name) = key(&object);
        let collection = self.collections.entry(target.collection).or_default();
        let line = event_line(type_, &object, false);
        collection.watches.retain(|w| {
            let wanted = w.namespace.as_ref().is_none_or(|ns| *ns == namespace)
                && w.name.as_ref().is_none_or(|n| *n == name);
            !wanted
                || w.tx
                    .send(event_line(type_, &object, w.metadata_only))
                    .is_ok()
        });
        collection
            .history
            .push((version, namespace.clone(), name.clone(), line));
        collection.objects.insert((namespace, name), object.clone());
        object
    }

    fn log(&mut self, listener: usize, method: Method, target: &Target, object: &Value) {
        let (namespace, name) = key(object);
        self.writes.push(Write {
            listener,
            method,
            collection: target.collection.clone(),
            namespace,
            name,
            object: object.clone(),
            redundant: false,
            at: Instant::now(),
        });
    }
}

// === impl Target ===

impl Target {
    /// Parses `/api/v1[/namespaces/NS]/PLURAL[/NAME[/status]]` and the `/apis/GROUP/VERSION`
    /// form.
    fn parse(path: &str) -> Option<Self> {
        let (prefix, rest) = match path.strip_prefix("/api/v1/") {
            Some(rest) => ("/api/v1".to_string(), rest),
            None => {
                let rest = path.strip_prefix("/apis/")?;
                let mut parts = rest.splitn(3, '/');
                let (group, version, rest) = (parts.next()?, parts.next()?, parts.next()?);
                (format!("/apis/{group}/{version}"), rest)
            }
        };
        let parts: Vec<&str> = rest.split('/').filter(|p| !p.is_empty()).collect();
        let (namespace, parts) = match parts.as_slice() {
            ["namespaces", ns, rest @ ..] if !rest.is_empty() => (Some(ns.to_string()), rest),
            _ => (None, parts.as_slice()),
        };
        let (plural, name, status) = match parts {
            [plural] => (plural, None, false),
            [plural, name] => (plural, Some(name.to_string()), false),
            [plural, name, "status"] => (plural, Some(name.to_string()), true),
            _ => return None,
        };
        Some(Self {
            collection: format!("{prefix}/{plural}"),
            namespace,
            name,
            status,
        })
    }

    /// Where `object` is stored.
    fn of(object: &Value) -> Self {
        let api_version = object["apiVersion"].as_str().unwrap_or("v1");
        let kind = object["kind"].as_str().unwrap_or_default().to_lowercase();
        let plural = match kind.strip_suffix('y') {
            Some(stem) => format!("{stem}ies"),
            None => format!("{kind}s"),
        };
        let collection = match api_version {
            "v1" => format!("/api/v1/{plural}"),
            group_version => format!("/apis/{group_version}/{plural}"),
        };
        let (namespace, name) = key(object);
        Self {
            collection,
            namespace: Some(namespace),
            name: Some(name),
            status: false,
        }
    }
}

/// (namespace, name) of an object; the namespace is empty for cluster-scoped ones.
fn key(object: &Value) -> (String, String) {
    let field = |f: &str| {
        object["metadata"][f]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };
    (field("namespace"), field("name"))
}

/// The object as a metadata watcher receives it.
fn metadata_only(object: &Value) -> Value {
    json!({
        "apiVersion": "meta.k8s.io/v1",
        "kind": "PartialObjectMetadata",
        "metadata": object["metadata"],
    })
}

fn event_line(type_: &str, object: &Value, metadata: bool) -> Bytes {
    let object = if metadata {
        metadata_only(object)
    } else {
        object.clone()
    };
    // `type` first, as the API server writes it: the index decodes `object` as it streams
    // past, which it cannot do once serde has had to buffer it to find the tag.
    Bytes::from(format!("{{\"type\":\"{type_}\",\"object\":{object}}}\n"))
}

/// The single entry point: dispatches on method and path.
async fn handle(
    State((state, listener)): State<(Arc<Mutex<ApiState>>, usize)>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let query = parse_query(uri.query().unwrap_or_default());
    let metadata = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("as=PartialObjectMetadata"));
    let Some(target) = Target::parse(uri.path()) else {
        return match method {
            Method::GET => list(&state.lock().unwrap(), None, &HashMap::new(), false),
            _ => failure(404, "NotFound"),
        };
    };
    let mut state = state.lock().unwrap();
    match (method, &target.name) {
        (Method::GET, None) if query.get("watch").map(String::as_str) == Some("true") => {
            watch(&mut state, &target, &query, metadata)
        }
        (Method::GET, None) => list(&state, Some(&target), &query, metadata),
        (Method::GET, Some(name)) => {
            let k = (target.namespace.clone().unwrap_or_default(), name.clone());
            match state
                .collections
                .get(&target.collection)
                .and_then(|c| c.objects.get(&k))
            {
                Some(object) => json_response(StatusCode::OK, object),
                None => failure(404, "NotFound"),
            }
        }
        (Method::POST, None) => {
            let Ok(mut object) = serde_json::from_slice::<Value>(&body) else {
                return failure(400, "BadRequest");
            };
            if let Some(ns) = &target.namespace {
                object["metadata"]["namespace"] = json!(ns);
            }
            let exists = state
                .collections
                .get(&target.collection)
                .is_some_and(|c| c.objects.contains_key(&key(&object)));
            if exists {
                return failure(409, "AlreadyExists");
            }
            let stored = state.store(object, "ADDED");
            state.log(listener, Method::POST, &target, &stored);
            json_response(StatusCode::CREATED, &stored)
        }
        (Method::PUT, Some(name)) if !target.status => {
            let Ok(mut object) = serde_json::from_slice::<Value>(&body) else {
                return failure(400, "BadRequest");
            };
            let k = (target.namespace.clone().unwrap_or_default(), name.clone());
            let current = state
                .collections
                .get(&target.collection)
                .and_then(|c| c.objects.get(&k));
            let Some(current) = current else {
                return failure(404, "NotFound");
            };
            if current["metadata"]["resourceVersion"] != object["metadata"]["resourceVersion"] {
                return failure(409, "Conflict");
            }
            object["metadata"]["namespace"] = json!(k.0);
            object["metadata"]["uid"] = current["metadata"]["uid"].clone();
            let stored = state.store(object, "MODIFIED");
            state.log(listener, Method::PUT, &target, &stored);
            json_response(StatusCode::OK, &stored)
        }
        (Method::PATCH, Some(name)) if target.status => {
            let Ok(patch) = serde_json::from_slice::<Value>(&body) else {
                return failure(400, "BadRequest");
            };
            let k = (target.namespace.clone().unwrap_or_default(), name.clone());
            let current = state
                .collections
                .get(&target.collection)
                .and_then(|c| c.objects.get(&k))
                .cloned();
            let Some(mut object) = current else {
                return failure(404, "NotFound");
            };
            let before = without_times(object.get("status"));
            if let Some(status) = patch.get("status") {
                // Only the status subresource is written, whatever else the body carries.
                json_patch::merge(&mut object, &json!({"status": status}));
            }
            let redundant = without_times(object.get("status")) == before;
            let stored = state.store(object, "MODIFIED");
            state.log(listener, Method::PATCH, &target, &stored);
            if let Some(write) = state.writes.last_mut() {
                write.redundant = redundant;
            }
            json_response(StatusCode::OK, &stored)
        }
        _ => failure(404, "NotFound"),
    }
}

/// A list of the collection `target` names (in its namespace, if any), or an empty one.
fn list(
    state: &ApiState,
    target: Option<&Target>,
    query: &HashMap<String, String>,
    metadata: bool,
) -> Response {
    let name = name_selector(query);
    let items: Vec<Value> = target
        .and_then(|t| state.collections.get(&t.collection).map(|c| (t, c)))
        .map(|(t, c)| {
            c.objects
                .iter()
                .filter(|((ns, n), _)| {
                    t.namespace.as_ref().is_none_or(|want| want == ns)
                        && name.as_ref().is_none_or(|want| want == n)
                })
                .map(|(_, o)| {
                    if metadata {
                        metadata_only(o)
                    } else {
                        o.clone()
                    }
                })
                .collect()
        })
        .unwrap_or_default();
    let body = json!({
        "apiVersion": "v1",
        "kind": "List",
        "metadata": {"resourceVersion": state.version.to_string()},
        "items": items,
    });
    json_response(StatusCode::OK, &body)
}

/// A watch from `resourceVersion`: the recorded events after it, then live ones.
fn watch(
    state: &mut ApiState,
    target: &Target,
    query: &HashMap<String, String>,
    metadata: bool,
) -> Response {
    let since = query
        .get("resourceVersion")
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(0);
    let name = name_selector(query);
    let (tx, rx) = mpsc::unbounded_channel::<Bytes>();
    let collection = state
        .collections
        .entry(target.collection.clone())
        .or_default();
    for (version, ns, n, line) in &collection.history {
        let wanted = *version > since
            && target.namespace.as_ref().is_none_or(|want| want == ns)
            && name.as_ref().is_none_or(|want| want == n);
        if wanted {
            let line = match metadata {
                false => line.clone(),
                true => {
                    let event: Value = serde_json::from_slice(line).unwrap();
                    event_line(
                        event["type"].as_str().unwrap_or("ADDED"),
                        &event["object"],
                        true,
                    )
                }
            };
            let _ = tx.send(line);
        }
    }
    collection.watches.push(Watch {
        namespace: target.namespace.clone(),
        name,
        metadata_only: metadata,
        tx,
    });
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|line| (Ok::<_, Infallible>(line), rx))
    });
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from_stream(stream))
        .unwrap()
}

fn name_selector(query: &HashMap<String, String>) -> Option<String> {
    query
        .get("fieldSelector")
        .and_then(|s| s.strip_prefix("metadata.name="))
        .map(str::to_string)
}

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
fn parse_query(query: &str) -> HashMap<String, String> {
    query
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .map(|(k, v)| (percent_decode(k), percent_decode(v)))
        .collect()
}

fn percent_decode(s: &str) -> String {
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

fn json_response(code: StatusCode, body: &Value) -> Response {
    (
        code,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

/// A `Status` answer, as the API server sends for a failed request.
fn failure(code: u16, reason: &str) -> Response {
    let body = json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": reason, "reason": reason, "code": code,
    });
    json_response(StatusCode::from_u16(code).unwrap(), &body)
}

/// The Deployment `linkerd/linkerd-destination`, which owns the status writer's Lease.
pub fn destination_deployment() -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "linkerd-destination", "namespace": "linkerd"},
        "spec": {
            "selector": {"matchLabels": {"linkerd.io/control-plane-component": "destination"}},
            "template": {"metadata": {"labels": {"linkerd.io/control-plane-component": "destination"}}},
        },
    })
}

/// The Gateway API HTTPRoute CRD, serving (and storing) v1, `Established`: with it, the
/// policy controller watches `gateway.networking.k8s.io/v1` HTTPRoutes.
pub fn gateway_http_route_crd() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "httproutes.gateway.networking.k8s.io"},
        "spec": {
            "group": "gateway.networking.k8s.io",
            "names": {"kind": "HTTPRoute", "listKind": "HTTPRouteList", "plural": "httproutes", "singular": "httproute"},
            "scope": "Namespaced",
            "versions": [{"name": "v1", "served": true, "storage": true}],
        },
        "status": {"conditions": [{"type": "Established", "status": "True"}]},
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths() {
        assert_eq!(
            Target::parse("/api/v1/pods"),
            Some(Target {
                collection: "/api/v1/pods".into(),
                namespace: None,
                name: None,
                status: false
            })
        );
        assert_eq!(
            Target::parse("/apis/coordination.k8s.io/v1/namespaces/linkerd/leases/x"),
            Some(Target {
                collection: "/apis/coordination.k8s.io/v1/leases".into(),
                namespace: Some("linkerd".into()),
                name: Some("x".into()),
                status: false
            })
        );
        let status =
            Target::parse("/apis/gateway.networking.k8s.io/v1/namespaces/ns/httproutes/r/status")
                .unwrap();
        assert!(status.status && status.name.as_deref() == Some("r"));
        // A Namespace by name is not a namespaced collection.
        assert_eq!(
            Target::parse("/api/v1/namespaces/linkerd")
                .unwrap()
                .collection,
            "/api/v1/namespaces"
        );
        assert_eq!(Target::parse("/apis"), None);
        let policy = json!({"apiVersion": "policy.linkerd.io/v1alpha1", "kind": "AuthorizationPolicy", "metadata": {"name": "a", "namespace": "n"}});
        assert_eq!(
            Target::of(&policy).collection,
            "/apis/policy.linkerd.io/v1alpha1/authorizationpolicies"
        );
    }
}
