//! A scripted Kubernetes API server on loopback, for testing the `kube` source end to end.
//!
//! It speaks the list and watch JSON of the real API for the kinds discovery watches, as
//! kube-runtime 4.2's default `watcher::Config` asks for them:
//!
//! - a list is `GET <path>?&limit=500` (`ListSemantic::MostRecent`: no `resourceVersion`); it is
//!   answered in one page (the scripted sets are far below the page size, so no `continue`
//!   token), items without `kind`/`apiVersion` as the real server sends them;
//! - a watch is `GET <path>?&watch=true&timeoutSeconds=290&allowWatchBookmarks=true&
//!   resourceVersion=N`, answered with chunked newline-delimited `{"type","object"}` events:
//!   first the recorded history after `N` (as the watch cache replays it), then live events,
//!   kept open. A `resourceVersion` older than the last [`FakeApi::expire`] gets an `ERROR`
//!   event with a `410 Expired` Status, as the real server does.
//!
//! The Linkerd CRDs ([`CRDS`]) start *not installed*: their lists and watches get `404`, as on
//! a cluster without them, until [`FakeApi::install_crd`]; [`FakeApi::remove_crd`] takes one
//! away again.
//!
//! The Gateway API route kinds ([`GATEWAY_ROUTES`]) have one collection per served version,
//! each installed on its own as the CRDs above; the CustomResourceDefinition objects that say
//! which versions are served live in [`CUSTOM_RESOURCE_DEFINITIONS`] (always served, with
//! `fieldSelector=metadata.name=...` honoured on lists and watches), written with
//! [`FakeApi::put_crd`] / [`FakeApi::delete_crd`]. A test moves both, in the order it needs.
//!
//! Namespaced requests (`/api/v1/namespaces/<ns>/<plural>[/<name>]`, `/apis/<group>/<version>/
//! namespaces/<ns>/<plural>[/<name>]`) reach the same collections, for the writers of the pod:
//! `GET` of one object, a list narrowed to the namespace and to a `labelSelector` of `k=v`
//! terms, `POST` (with `generateName`; `409` when the name is taken), `PUT` (`409` unless the
//! body's `resourceVersion` is the stored one), `DELETE`. Writes are recorded and sent to
//! open watches as the real server does. [`LEASES`] is served this way only.
//!
//! Every request is recorded, so a test waits on "the server saw this request" instead of
//! sleeping; a wait that is never satisfied fails after [`TIMEOUT`].

#![allow(dead_code)] // Each test binary uses a different part of the script.

use hyper::{
    Request, Response, StatusCode,
    body::{Body, Bytes, Frame, Incoming, SizeHint},
    server::conn::http1,
    service::service_fn,
};
use hyper_util::rt::TokioIo;
use parking_lot::Mutex;
use serde_json::{Value, json};
use std::{
    collections::{BTreeMap, BTreeSet, HashMap, VecDeque},
    convert::Infallible,
    net::SocketAddr,
    pin::Pin,
    sync::Arc,
    task::{Context, Poll},
    time::{Duration, Instant},
};
use tokio::sync::{mpsc, watch};

/// How long any wait in these tests may take before it fails the test.
pub const TIMEOUT: Duration = Duration::from_secs(10);

pub const SERVICES: &str = "/api/v1/services";
pub const SLICES: &str = "/apis/discovery.k8s.io/v1/endpointslices";
pub const PODS: &str = "/api/v1/pods";
pub const NODES: &str = "/api/v1/nodes";
pub const REPLICA_SETS: &str = "/apis/apps/v1/replicasets";
pub const JOBS: &str = "/apis/batch/v1/jobs";

pub const SERVERS: &str = "/apis/policy.linkerd.io/v1beta3/servers";
pub const EXTERNAL_WORKLOADS: &str = "/apis/workload.linkerd.io/v1beta1/externalworkloads";
pub const SERVICE_PROFILES: &str = "/apis/linkerd.io/v1alpha2/serviceprofiles";

/// The built-in collections the index watches, always served: (path, apiVersion, kind).
pub const RESOURCES: [(&str, &str, &str); 6] = [
    (SERVICES, "v1", "Service"),
    (SLICES, "discovery.k8s.io/v1", "EndpointSlice"),
    (PODS, "v1", "Pod"),
    (NODES, "v1", "Node"),
    (REPLICA_SETS, "apps/v1", "ReplicaSet"),
    (JOBS, "batch/v1", "Job"),
];

/// The CRD collections the index watches, served only while installed: (path, apiVersion,
/// kind).
pub const CRDS: [(&str, &str, &str); 3] = [
    (SERVERS, "policy.linkerd.io/v1beta3", "Server"),
    (
        EXTERNAL_WORKLOADS,
        "workload.linkerd.io/v1beta1",
        "ExternalWorkload",
    ),
    (SERVICE_PROFILES, "linkerd.io/v1alpha2", "ServiceProfile"),
];

pub const CUSTOM_RESOURCE_DEFINITIONS: &str =
    "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";
pub const GATEWAY_GROUP: &str = "gateway.networking.k8s.io";
pub const HTTP_ROUTES_V1BETA1: &str = "/apis/gateway.networking.k8s.io/v1beta1/httproutes";
pub const HTTP_ROUTES_V1: &str = "/apis/gateway.networking.k8s.io/v1/httproutes";
pub const GRPC_ROUTES_V1: &str = "/apis/gateway.networking.k8s.io/v1/grpcroutes";

/// The Gateway API route collections, one per version, served only while installed: (path,
/// apiVersion, kind).
pub const GATEWAY_ROUTES: [(&str, &str, &str); 3] = [
    (
        HTTP_ROUTES_V1BETA1,
        "gateway.networking.k8s.io/v1beta1",
        "HTTPRoute",
    ),
    (HTTP_ROUTES_V1, "gateway.networking.k8s.io/v1", "HTTPRoute"),
    (GRPC_ROUTES_V1, "gateway.networking.k8s.io/v1", "GRPCRoute"),
];

/// The header naming the client of [`FakeApi::client_named`].
pub const CLIENT_HEADER: &str = "x-fake-client";

/// Leases, written by the pod's Lease holders (namespaced requests only).
pub const LEASES: &str = "/apis/coordination.k8s.io/v1/leases";
const LEASE_COLLECTION: (&str, &str, &str) = (LEASES, "coordination.k8s.io/v1", "Lease");

/// The always-served collection of CustomResourceDefinitions: (path, apiVersion, kind).
const CRD_COLLECTION: (&str, &str, &str) = (
    CUSTOM_RESOURCE_DEFINITIONS,
    "apiextensions.k8s.io/v1",
    "CustomResourceDefinition",
);

/// A running fake API server; it stops with the test's runtime.
#[derive(Clone)]
pub struct FakeApi {
    addr: SocketAddr,
    shared: Arc<Shared>,
}

/// One request the server received, with what it answered.
#[derive(Clone, Debug)]
pub struct SeenRequest {
    /// `GET`, `POST`, `PUT`, `PATCH`, `DELETE`.
    pub method: String,
    pub path: String,
    pub query: BTreeMap<String, String>,
    /// The HTTP status answered.
    pub status: u16,
    /// For an answered list, the `metadata.resourceVersion` it carried.
    pub list_version: Option<String>,
    /// The [`CLIENT_HEADER`] of a client from [`FakeApi::client_named`].
    pub client: Option<String>,
    pub at: Instant,
}

struct Shared {
    state: Mutex<State>,
    /// Bumped on every state change, so waiters re-check their condition.
    changed: watch::Sender<()>,
}

struct State {
    /// The cluster-wide resource version, as etcd's revision.
    version: u64,
    collections: HashMap<&'static str, Collection>,
    requests: Vec<SeenRequest>,
    /// While set (the API server down), connections are closed as they are accepted.
    down: bool,
    /// Connections closed that way.
    refused: usize,
    /// Namespaces being deleted: creates in them get `403` with cause `NamespaceTerminating`.
    terminating: BTreeSet<String>,
    /// The tasks serving open connections, aborted when the server goes down.
    connections: Vec<tokio::task::AbortHandle>,
}

struct Collection {
    api_version: &'static str,
    kind: &'static str,
    objects: BTreeMap<(String, String), Value>,
    /// Events after `compacted`, replayed to a watch that resumes from an older version.
    history: Vec<(u64, &'static str, Value)>,
    /// Watches resuming from before this version get `410 Gone`.
    compacted: u64,
    watches: Vec<OpenWatch>,
    /// Statuses to answer the next watch requests with, instead of a stream.
    watch_failures: VecDeque<StatusCode>,
    /// While set, list requests are recorded but not answered.
    lists_held: bool,
    /// While set, namespaced writes are recorded (status `0`) but not answered.
    writes_held: bool,
    /// While unset (a CRD not installed), every request gets `404`.
    installed: bool,
    /// While set (RBAC without this resource), every request gets `403`.
    forbidden: bool,
}

/// A watch being answered: its events go to `tx`, those of the object named `name` only when
/// the watch has a `metadata.name` field selector.
struct OpenWatch {
    name: Option<String>,
    tx: mpsc::UnboundedSender<Bytes>,
}

/// A response body: one buffer, or a stream of watch-event lines that stays open while the
/// server holds its sender.
enum ApiBody {
    Once(Option<Bytes>),
    Stream(mpsc::UnboundedReceiver<Bytes>),
}

// === impl FakeApi ===

impl FakeApi {
    /// Starts the server with `objects` (full objects with `apiVersion`, `kind` and
    /// `metadata.namespace`/`name`), each stored under the collection of its kind. Objects of
    /// a CRD kind are served once it is installed.
    pub async fn start(objects: impl IntoIterator<Item = Value>) -> Self {
        Self::start_at("127.0.0.1:0".parse().expect("an address"), objects).await
    }

    /// [`FakeApi::start`] listening on `addr`: a port a client was given while nothing listened
    /// there (the API server not started yet: connections refused).
    pub async fn start_at(addr: SocketAddr, objects: impl IntoIterator<Item = Value>) -> Self {
        let builtin = RESOURCES
            .iter()
            .chain([&CRD_COLLECTION, &LEASE_COLLECTION])
            .map(|r| (r, true));
        let crds = CRDS.iter().chain(&GATEWAY_ROUTES).map(|r| (r, false));
        let collections = builtin
            .chain(crds)
            .map(|((path, api_version, kind), installed)| {
                let collection = Collection {
                    api_version,
                    kind,
                    objects: BTreeMap::new(),
                    history: Vec::new(),
                    compacted: 0,
                    watches: Vec::new(),
                    watch_failures: VecDeque::new(),
                    lists_held: false,
                    writes_held: false,
                    installed,
                    forbidden: false,
                };
                (*path, collection)
            })
            .collect();
        let (changed, _) = watch::channel(());
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                version: 1,
                collections,
                requests: Vec::new(),
                down: false,
                refused: 0,
                terminating: BTreeSet::new(),
                connections: Vec::new(),
            }),
            changed,
        });
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .expect("bind loopback");
        let addr = listener.local_addr().expect("local addr");
        let api = Self { addr, shared };
        for obj in objects {
            let api_version = obj["apiVersion"]
                .as_str()
                .expect("object has an apiVersion");
            let kind = obj["kind"].as_str().expect("object has a kind");
            let path = path_of(api_version, kind);
            api.apply(path, obj);
        }
        let server = api.shared.clone();
        tokio::spawn(async move {
            loop {
                let Ok((io, _)) = listener.accept().await else {
                    return;
                };
                if server.state.lock().down {
                    drop(io);
                    server.mutate(|state| state.refused += 1);
                    continue;
                }
                let shared = server.clone();
                let connection = tokio::spawn(async move {
                    let service = service_fn(move |req| {
                        let shared = shared.clone();
                        async move { Ok::<_, Infallible>(shared.handle(req).await) }
                    });
                    // A client that goes away mid-watch is not an error worth reporting.
                    let _ = http1::Builder::new()
                        .serve_connection(TokioIo::new(io), service)
                        .await;
                });
                let mut state = server.state.lock();
                state.connections.retain(|c| !c.is_finished());
                state.connections.push(connection.abort_handle());
            }
        });
        api
    }

    /// The server's URL, `http://127.0.0.1:<port>`, as a kubeconfig names it.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A client of this server, as `KubeSource` takes it.
    pub fn client(&self) -> kube::Client {
        let url = format!("http://{}", self.addr)
            .parse()
            .expect("loopback URL");
        kube::Client::try_from(kube::Config::new(url)).expect("kube client")
    }

    /// A client of this server whose requests carry `name` ([`SeenRequest::client`]), to tell
    /// apart two replicas sharing it.
    pub fn client_named(&self, name: &str) -> kube::Client {
        let url = format!("http://{}", self.addr)
            .parse()
            .expect("loopback URL");
        let mut config = kube::Config::new(url);
        config.headers.push((
            hyper::header::HeaderName::from_static(CLIENT_HEADER),
            hyper::header::HeaderValue::from_str(name).expect("a header value"),
        ));
        kube::Client::try_from(config).expect("kube client")
    }

    /// Creates or replaces an object (ADDED or MODIFIED to open watches).
    pub fn apply(&self, path: &str, mut obj: Value) {
        self.shared.mutate(|state| {
            state.version += 1;
            let version = state.version;
            obj["metadata"]["resourceVersion"] = json!(version.to_string());
            let collection = state.collection(path);
            let key = object_key(&obj);
            let kind = match collection.objects.insert(key, obj.clone()) {
                None => "ADDED",
                Some(_) => "MODIFIED",
            };
            collection.record(version, kind, obj);
        });
    }

    /// Creates or replaces an object as [`FakeApi::apply`] does, but the open watches of
    /// `path` get only the first half of the event's line before their connection's stream
    /// ends: a watch cut mid-event. The event is in the history, so a watch resuming from
    /// before it gets it whole.
    pub fn apply_cut(&self, path: &str, mut obj: Value) {
        self.shared.mutate(|state| {
            state.version += 1;
            let version = state.version;
            obj["metadata"]["resourceVersion"] = json!(version.to_string());
            let collection = state.collection(path);
            let key = object_key(&obj);
            let kind = match collection.objects.insert(key, obj.clone()) {
                None => "ADDED",
                Some(_) => "MODIFIED",
            };
            obj["apiVersion"] = json!(collection.api_version);
            let line = watch_line(kind, obj.clone());
            let half = line.slice(..line.len() / 2);
            for watch in collection.watches.drain(..) {
                let _ = watch.tx.send(half.clone());
            }
            collection.history.push((version, kind, obj));
        });
    }

    /// Deletes an object (DELETED to open watches, with its last state).
    pub fn delete(&self, path: &str, namespace: &str, name: &str) {
        self.shared.mutate(|state| {
            state.version += 1;
            let version = state.version;
            let collection = state.collection(path);
            let key = (namespace.to_string(), name.to_string());
            let mut obj = collection
                .objects
                .remove(&key)
                .unwrap_or_else(|| panic!("no {namespace}/{name} under {path}"));
            obj["metadata"]["resourceVersion"] = json!(version.to_string());
            collection.record(version, "DELETED", obj);
        });
    }

    /// Compacts the history of `path`: every open watch gets an `ERROR` event with a
    /// `410 Expired` Status and is closed, and no watch can resume from before now.
    pub fn expire(&self, path: &str) {
        self.shared.mutate(|state| {
            let version = state.version;
            let collection = state.collection(path);
            collection.compacted = version;
            collection.history.clear();
            let gone = watch_line("ERROR", expired_status(version));
            for watch in collection.watches.drain(..) {
                let _ = watch.tx.send(gone.clone());
            }
        });
    }

    /// Answers the next watch request of `path` with `status` (and a Status body).
    pub fn fail_next_watch(&self, path: &str, status: StatusCode) {
        self.shared
            .mutate(|state| state.collection(path).watch_failures.push_back(status));
    }

    /// Installs the CRD of `path`: from now on its lists and watches are answered, with the
    /// objects already applied to it. As for a new CRD's storage, a watch resuming from before
    /// now gets `410 Gone`.
    pub fn install_crd(&self, path: &str) {
        self.shared.mutate(|state| {
            state.version += 1;
            let version = state.version;
            let collection = state.collection(path);
            collection.installed = true;
            collection.compacted = version;
            collection.history.clear();
        });
    }

    /// Removes the CRD of `path` with its objects: open watches end (without events), and
    /// every later request gets `404` until [`FakeApi::install_crd`].
    pub fn remove_crd(&self, path: &str) {
        self.shared.mutate(|state| {
            let collection = state.collection(path);
            collection.installed = false;
            collection.objects.clear();
            collection.history.clear();
            collection.watches.clear();
        });
    }

    /// Creates or replaces a CustomResourceDefinition (see [`mk_gateway_crd`]): ADDED or
    /// MODIFIED to the watches that select it. It does not install any collection.
    pub fn put_crd(&self, crd: Value) {
        self.apply(CUSTOM_RESOURCE_DEFINITIONS, crd);
    }

    /// Deletes the CustomResourceDefinition `name` (DELETED to the watches that select it). It
    /// does not remove any collection.
    pub fn delete_crd(&self, name: &str) {
        self.delete(CUSTOM_RESOURCE_DEFINITIONS, "", name);
    }

    /// Waits until every watch of `path` answered so far has been closed by its client; fails
    /// the test after [`TIMEOUT`].
    pub async fn wait_for_watches_closed(&self, path: &str) {
        let senders: Vec<_> = {
            let mut state = self.shared.state.lock();
            let collection = state.collection(path);
            collection.watches.iter().map(|w| w.tx.clone()).collect()
        };
        let closed = futures::future::join_all(senders.iter().map(|tx| tx.closed()));
        if tokio::time::timeout(TIMEOUT, closed).await.is_err() {
            panic!("timed out waiting for the watches of {path} to close");
        }
    }

    /// Answers every later request to `path` with `403 Forbidden`, as for a service account
    /// without RBAC for it.
    pub fn forbid(&self, path: &str) {
        self.shared
            .mutate(|state| state.collection(path).forbidden = true);
    }

    /// Takes the server down: open connections are closed (their watches end), and new ones
    /// are closed as they are accepted until [`FakeApi::come_back`]. Objects applied meanwhile
    /// are served after.
    pub fn go_down(&self) {
        self.shared.mutate(|state| {
            state.down = true;
            for collection in state.collections.values_mut() {
                collection.watches.clear();
            }
            for connection in state.connections.drain(..) {
                connection.abort();
            }
        });
    }

    /// Waits until `n` connections have been refused while down; fails the test after
    /// [`TIMEOUT`].
    pub async fn wait_for_refused(&self, n: usize) {
        let mut changed = self.shared.changed.subscribe();
        let wait = async {
            while self.shared.state.lock().refused < n {
                changed.changed().await.expect("the server owns the sender");
            }
        };
        if tokio::time::timeout(TIMEOUT, wait).await.is_err() {
            panic!("timed out waiting for {n} refused connections");
        }
    }

    pub fn come_back(&self) {
        self.shared.mutate(|state| state.down = false);
    }

    /// Holds list requests of `path` unanswered until [`FakeApi::release_lists`].
    pub fn hold_lists(&self, path: &str) {
        self.shared
            .mutate(|state| state.collection(path).lists_held = true);
    }

    pub fn release_lists(&self, path: &str) {
        self.shared
            .mutate(|state| state.collection(path).lists_held = false);
    }

    /// Holds namespaced writes (`POST`, `PUT`, `DELETE`) of `path` unanswered until
    /// [`FakeApi::release_writes`]; each is in [`FakeApi::requests`] with status `0` meanwhile.
    pub fn hold_writes(&self, path: &str) {
        self.shared
            .mutate(|state| state.collection(path).writes_held = true);
    }

    pub fn release_writes(&self, path: &str) {
        self.shared
            .mutate(|state| state.collection(path).writes_held = false);
    }

    /// Marks `namespace` as being deleted: from now on every create in it is refused as the
    /// API server's lifecycle admission refuses it (`403`, cause `NamespaceTerminating`).
    pub fn terminate_namespace(&self, namespace: &str) {
        self.shared
            .mutate(|state| state.terminating.insert(namespace.to_string()));
    }

    /// The objects stored under `path` now, by namespace and name.
    pub fn objects(&self, path: &str) -> Vec<Value> {
        let mut state = self.shared.state.lock();
        state.collection(path).objects.values().cloned().collect()
    }

    /// The write requests (not `GET`) seen so far to `/…/namespaces/*/<plural>…` of
    /// collection `path`, in arrival order.
    pub fn writes_to(&self, path: &str) -> Vec<SeenRequest> {
        self.requests()
            .into_iter()
            .filter(|r| r.method != "GET" && namespaced(&r.path).is_some_and(|(c, _, _)| c == path))
            .collect()
    }

    /// Waits until the objects under `path` satisfy `done`; fails the test after [`TIMEOUT`].
    pub async fn wait_for_objects(&self, path: &str, what: &str, done: impl Fn(&[Value]) -> bool) {
        let mut changed = self.shared.changed.subscribe();
        let wait = async {
            loop {
                if done(&self.objects(path)) {
                    return;
                }
                changed.changed().await.expect("the server owns the sender");
            }
        };
        if tokio::time::timeout(TIMEOUT, wait).await.is_err() {
            panic!(
                "timed out waiting for {what}; {path} holds:\n{:#}",
                Value::Array(self.objects(path))
            );
        }
    }

    /// Every request seen so far, in arrival order.
    pub fn requests(&self) -> Vec<SeenRequest> {
        self.shared.state.lock().requests.clone()
    }

    /// The requests seen so far for `path`, lists or watches.
    pub fn requests_to(&self, path: &str, watches: bool) -> Vec<SeenRequest> {
        let requests = self.shared.state.lock().requests.clone();
        requests
            .into_iter()
            .filter(|r| r.path == path && r.is_watch() == watches)
            .collect()
    }

    /// Waits until the requests seen satisfy `done`; fails the test after [`TIMEOUT`].
    pub async fn wait_for_requests(&self, what: &str, done: impl Fn(&[SeenRequest]) -> bool) {
        let mut changed = self.shared.changed.subscribe();
        let wait = async {
            loop {
                if done(&self.shared.state.lock().requests) {
                    return;
                }
                changed.changed().await.expect("the server owns the sender");
            }
        };
        if tokio::time::timeout(TIMEOUT, wait).await.is_err() {
            let seen: Vec<String> = self.requests().iter().map(SeenRequest::summary).collect();
            panic!(
                "timed out waiting for {what}; requests seen:\n{}",
                seen.join("\n")
            );
        }
    }

    /// Waits until `path` has been answered `n` successful watch requests.
    pub async fn wait_for_watches(&self, path: &str, n: usize) {
        self.wait_for_requests(&format!("{n} open watch(es) of {path}"), |reqs| {
            reqs.iter()
                .filter(|r| r.path == path && r.is_watch() && r.status == 200)
                .count()
                >= n
        })
        .await;
    }
}

// === impl Shared ===

impl Shared {
    fn mutate<T>(&self, f: impl FnOnce(&mut State) -> T) -> T {
        let out = f(&mut self.state.lock());
        self.changed.send_replace(());
        out
    }

    async fn handle(&self, req: Request<Incoming>) -> Response<ApiBody> {
        let path = req.uri().path().to_string();
        let query: BTreeMap<String, String> = req
            .uri()
            .query()
            .unwrap_or_default()
            .split('&')
            .filter(|kv| !kv.is_empty())
            .map(|kv| match kv.split_once('=') {
                Some((k, v)) => (percent_decode(k), percent_decode(v)),
                None => (percent_decode(kv), String::new()),
            })
            .collect();
        let mut seen = SeenRequest {
            method: req.method().to_string(),
            path: path.clone(),
            query,
            status: 200,
            list_version: None,
            client: req
                .headers()
                .get(CLIENT_HEADER)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string),
            at: Instant::now(),
        };
        if let Some(target) = namespaced(&path) {
            return self.handle_namespaced(req, seen, target).await;
        }
        let (served, forbidden) = self
            .state
            .lock()
            .collections
            .get(path.as_str())
            .map_or((false, false), |c| (c.installed, c.forbidden));
        if forbidden {
            seen.status = 403;
            self.mutate(|state| state.requests.push(seen));
            return status_response(
                StatusCode::FORBIDDEN,
                "Forbidden",
                "the service account cannot list this resource",
            );
        }
        if !served || req.method() != hyper::Method::GET {
            seen.status = 404;
            self.mutate(|state| state.requests.push(seen));
            return status_response(
                StatusCode::NOT_FOUND,
                "NotFound",
                "the server could not find the requested resource",
            );
        }
        if seen.is_watch() {
            self.mutate(|state| state.watch(seen))
        } else {
            self.list(seen).await
        }
    }

    /// A request to `/…/namespaces/<ns>/<plural>[/<name>]`, answered from the collection of
    /// `<plural>`.
    async fn handle_namespaced(
        &self,
        req: Request<Incoming>,
        mut seen: SeenRequest,
        (collection, namespace, name): (String, String, Option<String>),
    ) -> Response<ApiBody> {
        let method = req.method().clone();
        let body = read_body(req.into_body()).await;
        let selector = seen.param("labelSelector").map(str::to_string);
        let held = |state: &State| {
            method != hyper::Method::GET
                && state
                    .collections
                    .get(collection.as_str())
                    .is_some_and(|c| c.writes_held)
        };
        // A held write is recorded before it is answered, so a test can see it.
        let mut recorded_at = None;
        if held(&self.state.lock()) {
            let mut pending = seen.clone();
            pending.status = 0;
            recorded_at = Some(self.mutate(|state| {
                state.requests.push(pending);
                state.requests.len() - 1
            }));
            let mut changed = self.changed.subscribe();
            while held(&self.state.lock()) {
                changed.changed().await.expect("the server owns the sender");
            }
        }
        let (status, response) = self.mutate(|state| {
            let Some(c) = state.collections.get(collection.as_str()) else {
                return (404, status_body(404, "NotFound", "no such collection"));
            };
            if c.forbidden {
                return (
                    403,
                    status_body(
                        403,
                        "Forbidden",
                        "the service account cannot use this resource",
                    ),
                );
            }
            if !c.installed {
                return (
                    404,
                    status_body(
                        404,
                        "NotFound",
                        "the server could not find the requested resource",
                    ),
                );
            }
            let path: &'static str = state
                .collections
                .keys()
                .find(|k| **k == collection)
                .copied()
                .expect("collection exists");
            match (method.as_str(), name) {
                ("GET", None) => {
                    let version = state.version.to_string();
                    let c = state.collection(path);
                    let items: Vec<Value> = c
                        .objects
                        .iter()
                        .filter(|((ns, _), obj)| {
                            *ns == namespace && matches_labels(selector.as_deref(), obj)
                        })
                        .map(|(_, obj)| obj.clone())
                        .collect();
                    let list = json!({
                        "kind": format!("{}List", c.kind),
                        "apiVersion": c.api_version,
                        "metadata": {"resourceVersion": version},
                        "items": items,
                    });
                    (200, list)
                }
                ("GET", Some(name)) => match state.collection(path).objects.get(&(namespace, name))
                {
                    Some(obj) => (200, obj.clone()),
                    None => (404, status_body(404, "NotFound", "not found")),
                },
                ("POST", None) if state.terminating.contains(&namespace) => {
                    let mut refused = status_body(
                        403,
                        "Forbidden",
                        &format!("unable to create new content in namespace {namespace} because it is being terminated"),
                    );
                    refused["details"] = json!({"causes": [{
                        "reason": "NamespaceTerminating",
                        "message": format!("namespace {namespace} is being terminated"),
                        "field": "metadata.namespace",
                    }]});
                    (403, refused)
                }
                ("POST", None) => {
                    let Some(mut obj) = body else {
                        return (400, status_body(400, "BadRequest", "body is not JSON"));
                    };
                    if obj["metadata"]["name"].as_str().is_none_or(str::is_empty) {
                        let Some(prefix) = obj["metadata"]["generateName"].as_str() else {
                            return (
                                422,
                                status_body(422, "Invalid", "name or generateName is required"),
                            );
                        };
                        let seq = state.version + 1;
                        obj["metadata"]["name"] = json!(format!("{prefix}{seq:05}"));
                    }
                    let key = (
                        namespace.clone(),
                        obj["metadata"]["name"]
                            .as_str()
                            .unwrap_or_default()
                            .to_string(),
                    );
                    if state.collection(path).objects.contains_key(&key) {
                        return (409, status_body(409, "AlreadyExists", "already exists"));
                    }
                    obj["metadata"]["namespace"] = json!(namespace);
                    obj["metadata"]["uid"] = json!(format!("uid-{}", state.version + 1));
                    (201, store(state, path, obj))
                }
                ("PUT", Some(name)) => {
                    let Some(mut obj) = body else {
                        return (400, status_body(400, "BadRequest", "body is not JSON"));
                    };
                    let key = (namespace.clone(), name);
                    let Some(current) = state.collection(path).objects.get(&key) else {
                        return (404, status_body(404, "NotFound", "not found"));
                    };
                    let sent = &obj["metadata"]["resourceVersion"];
                    if !sent.is_null() && *sent != current["metadata"]["resourceVersion"] {
                        return (
                            409,
                            status_body(409, "Conflict", "the object has been modified"),
                        );
                    }
                    obj["metadata"]["namespace"] = json!(namespace);
                    obj["metadata"]["uid"] = current["metadata"]["uid"].clone();
                    (200, store(state, path, obj))
                }
                ("DELETE", Some(name)) => {
                    state.version += 1;
                    let version = state.version;
                    let c = state.collection(path);
                    match c.objects.remove(&(namespace, name)) {
                        Some(mut obj) => {
                            obj["metadata"]["resourceVersion"] = json!(version.to_string());
                            c.record(version, "DELETED", obj.clone());
                            (200, obj)
                        }
                        None => (404, status_body(404, "NotFound", "not found")),
                    }
                }
                _ => (405, status_body(405, "MethodNotAllowed", "not scripted")),
            }
        });
        seen.status = status;
        self.mutate(|state| match recorded_at {
            Some(at) => state.requests[at] = seen,
            None => state.requests.push(seen),
        });
        json_response(StatusCode::from_u16(status).expect("status"), &response)
    }

    async fn list(&self, mut seen: SeenRequest) -> Response<ApiBody> {
        // Recorded before it is answered, so a test can see a held list.
        let index = self.mutate(|state| {
            state.requests.push(seen.clone());
            state.requests.len() - 1
        });
        let mut changed = self.changed.subscribe();
        while self.state.lock().collection(&seen.path).lists_held {
            changed.changed().await.expect("the server owns the sender");
        }
        self.mutate(|state| {
            let version = state.version.to_string();
            let collection = state.collection(&seen.path);
            let name = seen.selected_name();
            let items: Vec<Value> = collection
                .objects
                .values()
                .filter(|obj| selects(name.as_deref(), obj))
                .map(|obj| {
                    let mut item = obj.clone();
                    if let Some(map) = item.as_object_mut() {
                        map.remove("kind");
                        map.remove("apiVersion");
                    }
                    item
                })
                .collect();
            let list = json!({
                "kind": format!("{}List", collection.kind),
                "apiVersion": collection.api_version,
                "metadata": {"resourceVersion": version},
                "items": items,
            });
            seen.list_version = Some(version);
            state.requests[index] = seen;
            json_response(StatusCode::OK, &list)
        })
    }
}

// === impl State ===

impl State {
    fn collection(&mut self, path: &str) -> &mut Collection {
        self.collections
            .get_mut(path)
            .unwrap_or_else(|| panic!("{path} is not a scripted collection"))
    }

    fn watch(&mut self, mut seen: SeenRequest) -> Response<ApiBody> {
        let collection = self.collection(&seen.path);
        if let Some(status) = collection.watch_failures.pop_front() {
            seen.status = status.as_u16();
            self.requests.push(seen);
            return status_response(status, "InternalError", "scripted failure");
        }
        let from: u64 = seen
            .param("resourceVersion")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let (tx, rx) = mpsc::unbounded_channel();
        let name = seen.selected_name();
        if from < collection.compacted {
            // The real server answers 200 and reports the expiry as the stream's only event.
            let _ = tx.send(watch_line("ERROR", expired_status(from)));
        } else {
            for (version, kind, obj) in &collection.history {
                if *version > from && selects(name.as_deref(), obj) {
                    let _ = tx.send(watch_line(kind, obj.clone()));
                }
            }
            collection.watches.push(OpenWatch { name, tx });
        }
        self.requests.push(seen);
        Response::builder()
            .status(StatusCode::OK)
            .header("content-type", "application/json")
            .body(ApiBody::Stream(rx))
            .expect("valid response")
    }
}

// === impl Collection ===

impl Collection {
    fn record(&mut self, version: u64, kind: &'static str, mut obj: Value) {
        // As the real server converts: an object is served at its collection's version.
        obj["apiVersion"] = json!(self.api_version);
        let line = watch_line(kind, obj.clone());
        self.watches.retain(|watch| {
            !selects(watch.name.as_deref(), &obj) || watch.tx.send(line.clone()).is_ok()
        });
        self.history.push((version, kind, obj));
    }
}

// === impl SeenRequest ===

impl SeenRequest {
    /// `watch=true` (or `watch=1`) marks a watch; anything else is a list.
    pub fn is_watch(&self) -> bool {
        matches!(self.param("watch"), Some("true" | "1"))
    }

    /// `GET <path>?<query> -> <status>`, for failure messages.
    pub fn summary(&self) -> String {
        let query: Vec<String> = self.query.iter().map(|(k, v)| format!("{k}={v}")).collect();
        format!("GET {}?{} -> {}", self.path, query.join("&"), self.status)
    }

    pub fn param(&self, name: &str) -> Option<&str> {
        self.query.get(name).map(String::as_str)
    }

    /// The name a `fieldSelector=metadata.name=NAME` selects; the only field selector
    /// scripted.
    fn selected_name(&self) -> Option<String> {
        let selector = self.param("fieldSelector")?;
        let name = selector
            .strip_prefix("metadata.name=")
            .unwrap_or_else(|| panic!("unscripted field selector {selector:?}"));
        Some(name.to_string())
    }
}

// === impl ApiBody ===

impl Body for ApiBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        match &mut *self {
            Self::Once(buf) => Poll::Ready(buf.take().map(|b| Ok(Frame::data(b)))),
            Self::Stream(rx) => rx
                .poll_recv(cx)
                .map(|line| line.map(|b| Ok(Frame::data(b)))),
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(self, Self::Once(None))
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            Self::Once(buf) => SizeHint::with_exact(buf.as_ref().map_or(0, |b| b.len() as u64)),
            // No exact size: hyper sends the stream chunked.
            Self::Stream(_) => SizeHint::default(),
        }
    }
}

/// The CustomResourceDefinition `<plural>.gateway.networking.k8s.io` of `kind`, serving
/// `served` (the others of v1alpha2, v1beta1, v1 are listed as not served), `Established`.
pub fn mk_gateway_crd(plural: &str, kind: &str, served: &[&str]) -> Value {
    let versions: Vec<Value> = ["v1alpha2", "v1beta1", "v1"]
        .iter()
        .map(|v| json!({"name": v, "served": served.contains(v), "storage": *v == "v1"}))
        .collect();
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.{GATEWAY_GROUP}")},
        "spec": {
            "group": GATEWAY_GROUP,
            "names": {"kind": kind, "listKind": format!("{kind}List"), "plural": plural},
            "scope": "Namespaced",
            "versions": versions,
        },
        "status": {"conditions": [
            {"type": "NamesAccepted", "status": "True"},
            {"type": "Established", "status": "True"},
        ]},
    })
}

fn path_of(api_version: &str, kind: &str) -> &'static str {
    RESOURCES
        .iter()
        .chain(&CRDS)
        .chain(&GATEWAY_ROUTES)
        .chain([&CRD_COLLECTION, &LEASE_COLLECTION])
        .find(|(_, v, k)| *v == api_version && *k == kind)
        .map(|(path, _, _)| *path)
        .unwrap_or_else(|| panic!("{api_version} {kind} is not a scripted kind"))
}

/// `(collection path, namespace, name)` of a namespaced request path.
fn namespaced(path: &str) -> Option<(String, String, Option<String>)> {
    let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let (prefix, rest) = match parts.as_slice() {
        ["api", "v1", "namespaces", rest @ ..] => ("/api/v1".to_string(), rest),
        ["apis", group, version, "namespaces", rest @ ..] => {
            (format!("/apis/{group}/{version}"), rest)
        }
        _ => return None,
    };
    match rest {
        [ns, plural] => Some((format!("{prefix}/{plural}"), ns.to_string(), None)),
        [ns, plural, name] => Some((
            format!("{prefix}/{plural}"),
            ns.to_string(),
            Some(name.to_string()),
        )),
        _ => None,
    }
}

/// Stores `obj` under `path` at the next version (ADDED or MODIFIED to open watches) and
/// returns it as stored.
fn store(state: &mut State, path: &'static str, mut obj: Value) -> Value {
    state.version += 1;
    let version = state.version;
    obj["metadata"]["resourceVersion"] = json!(version.to_string());
    let collection = state.collection(path);
    obj["apiVersion"] = json!(collection.api_version);
    obj["kind"] = json!(collection.kind);
    let key = object_key(&obj);
    let kind = match collection.objects.insert(key, obj.clone()) {
        None => "ADDED",
        Some(_) => "MODIFIED",
    };
    collection.record(version, kind, obj.clone());
    obj
}

/// Whether `obj` has every `k=v` of a label selector (the only form scripted).
fn matches_labels(selector: Option<&str>, obj: &Value) -> bool {
    selector
        .into_iter()
        .flat_map(|s| s.split(','))
        .filter(|t| !t.is_empty())
        .all(|term| {
            let (k, v) = term
                .split_once('=')
                .unwrap_or_else(|| panic!("unscripted label selector term {term:?}"));
            obj["metadata"]["labels"][k].as_str() == Some(v)
        })
}

/// A request body as JSON; `None` when empty or not JSON.
async fn read_body(mut body: Incoming) -> Option<Value> {
    let mut bytes = Vec::new();
    loop {
        let frame = std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await;
        match frame {
            Some(Ok(frame)) => {
                if let Some(data) = frame.data_ref() {
                    bytes.extend_from_slice(data);
                }
            }
            Some(Err(_)) => return None,
            None => break,
        }
    }
    serde_json::from_slice(&bytes).ok()
}

fn status_body(code: u16, reason: &str, message: &str) -> Value {
    json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "reason": reason,
        "code": code,
        "message": message,
    })
}

/// Whether a watch or list selecting `name` (all when `None`) sees `obj`.
fn selects(name: Option<&str>, obj: &Value) -> bool {
    name.is_none_or(|name| obj["metadata"]["name"].as_str() == Some(name))
}

/// A query component with its `%XX` escapes (and `+` for a space) decoded.
fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("");
                match u8::from_str_radix(hex, 16) {
                    Ok(b) => {
                        out.push(b);
                        i += 3;
                        continue;
                    }
                    Err(_) => out.push(b'%'),
                }
            }
            b'+' => out.push(b' '),
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8(out).expect("UTF-8 query")
}

fn object_key(obj: &Value) -> (String, String) {
    let meta = &obj["metadata"];
    let namespace = meta["namespace"].as_str().unwrap_or_default().to_string();
    let name = meta["name"]
        .as_str()
        .expect("object has a name")
        .to_string();
    (namespace, name)
}

/// One watch event, `type` first as the API server writes it (the object is then decoded as it
/// streams in, whatever its size).
fn watch_line(kind: &str, object: Value) -> Bytes {
    let kind = serde_json::to_string(kind).expect("JSON");
    let object = serde_json::to_string(&object).expect("JSON");
    Bytes::from(format!("{{\"type\":{kind},\"object\":{object}}}\n"))
}

fn expired_status(version: u64) -> Value {
    json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "reason": "Expired",
        "code": 410,
        "message": format!("too old resource version: {version}"),
    })
}

fn status_response(status: StatusCode, reason: &str, message: &str) -> Response<ApiBody> {
    let body = json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "reason": reason,
        "code": status.as_u16(),
        "message": message,
    });
    json_response(status, &body)
}

fn json_response(status: StatusCode, body: &Value) -> Response<ApiBody> {
    let body = serde_json::to_vec(body).expect("JSON");
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(ApiBody::Once(Some(Bytes::from(body))))
        .expect("valid response")
}
