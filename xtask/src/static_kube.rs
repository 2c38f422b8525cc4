//! A Kubernetes API server on loopback over a fixed set of objects, for `cargo xtask
//! bench-scale`: it answers the list and watch requests of kube-runtime's watchers the way the
//! real API server does, from responses prepared before the server starts, so that it costs
//! the machine nothing next to the binary it serves.
//!
//! - A list (`GET <collection>`) answers in pages: `limit` items at most, with a `continue`
//!   token while more match and `remainingItemCount` when no selector filters (kube-runtime's
//!   watcher asks for 500 at a time). The list's `resourceVersion` is the newest object's. List
//!   items carry no `apiVersion`/`kind`, as the real server sends them.
//! - `labelSelector` takes equality (`k=v`, `k==v`, `k!=v`), set (`k in (a,b)`,
//!   `k notin (a,b)`) and existence (`k`, `!k`) requirements; `fieldSelector` takes
//!   `metadata.name` and `metadata.namespace` equality. Anything else is a `400`.
//! - With `Accept: application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1` (and
//!   `as=PartialObjectMetadata` for a watch) objects are reduced to their `metadata`, as kube's
//!   `metadata_watcher` asks for them.
//! - A watch (`?watch=true`) from `resourceVersion` N sends every matching object newer than N
//!   as an `ADDED` event (all of them for no version or `0`), one `{"type":...,"object":...}`
//!   line each, then stays open: the cluster does not change.
//! - A collection it was not given answers `404`, as the API server does for a CRD that is not
//!   installed (the binaries serve such kinds as empty).
//! - The policy controller's Lease and the Deployment owning it are served as by
//!   [`crate::fake_kube`].

use anyhow::{Context, bail};
use axum::{
    Router,
    body::{Body, Bytes},
    extract::State as AxumState,
    http::{HeaderMap, Method, StatusCode, Uri, header},
    response::Response,
};
use futures::StreamExt;
use serde_json::Value;
use std::{
    collections::{BTreeMap, HashMap},
    convert::Infallible,
    net::SocketAddr,
    path::Path,
    sync::{Arc, Mutex},
    task::Poll,
    time::Instant,
};

use crate::fake_kube::{self, LeaseStore, failure, failure_because, parse_query};

/// The objects of each collection, prepared before the server starts.
#[derive(Default)]
pub struct Builder {
    collections: HashMap<&'static str, Collection>,
    version: u64,
}

/// A running server; it stops with the runtime it was started on.
pub struct StaticKube {
    addr: SocketAddr,
    shared: Arc<Shared>,
}

/// What the server has answered since it started or since the last [`StaticKube::take_stats`].
#[derive(Clone, Debug, Default)]
pub struct Stats {
    /// List pages answered (`200`), over all collections.
    pub pages: u64,
    /// Objects sent in those pages, per collection path.
    pub listed: BTreeMap<&'static str, u64>,
    /// Bytes of those pages.
    pub bytes: u64,
    /// When the last page was handed to the connection in full.
    pub last_page_sent: Option<Instant>,
    /// Watches opened.
    pub watches: u64,
}

struct Shared {
    collections: HashMap<&'static str, Collection>,
    /// The cluster's resource version: the newest object's.
    version: u64,
    /// The Lease and the resource-version counter its writes advance.
    lease: Mutex<(LeaseStore, u64)>,
    stats: Mutex<Stats>,
}

struct Collection {
    api_version: &'static str,
    kind: &'static str,
    /// Sorted by (namespace, name), as etcd's keys are.
    items: Vec<Item>,
}

/// One object, serialized once.
struct Item {
    namespace: String,
    name: String,
    labels: BTreeMap<String, String>,
    version: u64,
    /// `{"metadata":{...},<the other fields but apiVersion and kind>}`: a list item as is.
    json: Bytes,
    /// Where the metadata's JSON ends in `json`.
    metadata_end: usize,
}

/// The prefix of [`Item::json`] before the metadata's JSON.
const METADATA_PREFIX: &[u8] = b"{\"metadata\":";

/// A parsed `labelSelector` and `fieldSelector`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Selector {
    labels: Vec<Requirement>,
    name: Option<String>,
    namespace: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Requirement {
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    DoesNotExist(String),
}

// === impl Builder ===

impl Builder {
    /// Serves the collection at `path` (cluster-wide, e.g. `/api/v1/pods`) of objects of
    /// `kind` in `api_version`, empty until objects are inserted.
    pub fn serve(&mut self, path: &'static str, api_version: &'static str, kind: &'static str) {
        self.collections.entry(path).or_insert_with(|| Collection {
            api_version,
            kind,
            items: Vec::new(),
        });
    }

    /// Adds `object` (a full object with `metadata.name`) to the collection at `path`, which
    /// must be served. Its `metadata.resourceVersion` is kept when it is a number, else it
    /// gets the next one.
    ///
    /// Returns the bytes of the object as a list item. Errors when the collection is not
    /// served or the object has no name.
    pub fn insert(&mut self, path: &str, object: &Value) -> anyhow::Result<usize> {
        let Some(collection) = self.collections.get_mut(path) else {
            bail!("{path} is not a served collection");
        };
        let Value::Object(fields) = object else {
            bail!("an object of {path} is not a JSON object");
        };
        let metadata = fields.get("metadata").cloned().unwrap_or_default();
        let text = |key: &str| {
            metadata
                .get(key)
                .and_then(Value::as_str)
                .map(str::to_string)
        };
        let name = text("name").with_context(|| format!("an object of {path} has no name"))?;
        let version = match text("resourceVersion").and_then(|v| v.parse::<u64>().ok()) {
            Some(version) => version,
            None => self.version + 1,
        };
        self.version = self.version.max(version);
        let labels = metadata
            .get("labels")
            .and_then(Value::as_object)
            .map(|labels| {
                labels
                    .iter()
                    .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                    .collect()
            })
            .unwrap_or_default();
        let mut json = Vec::with_capacity(4096);
        json.extend_from_slice(METADATA_PREFIX);
        serde_json::to_writer(&mut json, &metadata)?;
        let metadata_end = json.len();
        for (key, value) in fields {
            if matches!(key.as_str(), "apiVersion" | "kind" | "metadata") {
                continue;
            }
            json.push(b',');
            serde_json::to_writer(&mut json, key)?;
            json.push(b':');
            serde_json::to_writer(&mut json, value)?;
        }
        json.push(b'}');
        let bytes = json.len();
        collection.items.push(Item {
            namespace: text("namespace").unwrap_or_default(),
            name,
            labels,
            version,
            json: Bytes::from(json),
            metadata_end,
        });
        Ok(bytes)
    }

    /// Starts the server on a free loopback port. Must run within a Tokio runtime.
    pub async fn start(mut self) -> anyhow::Result<StaticKube> {
        for collection in self.collections.values_mut() {
            collection
                .items
                .sort_unstable_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
        }
        let shared = Arc::new(Shared {
            collections: self.collections,
            version: self.version,
            lease: Mutex::new((LeaseStore::default(), self.version)),
            stats: Mutex::new(Stats::default()),
        });
        let app = Router::new().fallback(handle).with_state(shared.clone());
        let addr = fake_kube::serve_on_loopback(app).await?;
        Ok(StaticKube { addr, shared })
    }
}

// === impl StaticKube ===

impl StaticKube {
    /// The server's address (plain HTTP).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Writes a kubeconfig at `path` whose current context is this server (plain HTTP, no
    /// credentials, namespace `linkerd`).
    pub fn write_kubeconfig(&self, path: &Path) -> anyhow::Result<()> {
        fake_kube::write_kubeconfig(self.addr, path)
    }

    /// What was answered since the start or the last [`Self::take_stats`].
    pub fn stats(&self) -> Stats {
        self.shared
            .stats
            .lock()
            .expect("stats lock poisoned")
            .clone()
    }

    /// What was answered since the start or the last call, and starts counting afresh.
    pub fn take_stats(&self) -> Stats {
        std::mem::take(&mut *self.shared.stats.lock().expect("stats lock poisoned"))
    }

    /// Objects served over all collections.
    pub fn objects(&self) -> usize {
        self.shared
            .collections
            .values()
            .map(|c| c.items.len())
            .sum()
    }
}

// === impl Item ===

impl Item {
    fn metadata(&self) -> &[u8] {
        &self.json[METADATA_PREFIX.len()..self.metadata_end]
    }

    /// Appends the object as `PartialObjectMetadata`.
    fn write_partial(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(
            b"{\"kind\":\"PartialObjectMetadata\",\"apiVersion\":\"meta.k8s.io/v1\",\"metadata\":",
        );
        out.extend_from_slice(self.metadata());
        out.push(b'}');
    }

    /// Appends the full object, with its `kind` and `apiVersion` (a watch event's object).
    fn write_full(&self, collection: &Collection, out: &mut Vec<u8>) {
        out.extend_from_slice(b"{\"kind\":");
        push_json_str(out, collection.kind);
        out.extend_from_slice(b",\"apiVersion\":");
        push_json_str(out, collection.api_version);
        out.push(b',');
        out.extend_from_slice(&self.json[1..]);
    }
}

fn push_json_str(out: &mut Vec<u8>, s: &str) {
    // Kinds and group versions need no escaping, but a string is written as JSON anyway.
    let _ = serde_json::to_writer(&mut *out, s);
}

// === impl Selector ===

impl Selector {
    /// Parses `labelSelector` and `fieldSelector`; the error says what is not understood.
    fn parse(labels: Option<&str>, fields: Option<&str>) -> Result<Self, String> {
        let mut selector = Self::default();
        for term in split_terms(labels.unwrap_or_default())? {
            selector.labels.push(parse_requirement(&term)?);
        }
        for term in fields.unwrap_or_default().split(',').map(str::trim) {
            if term.is_empty() {
                continue;
            }
            let (field, value) = term
                .split_once("==")
                .or_else(|| term.split_once('='))
                .ok_or_else(|| format!("field selector {term:?}: only `field=value` is served"))?;
            match field.trim() {
                "metadata.name" => selector.name = Some(value.trim().to_string()),
                "metadata.namespace" => selector.namespace = Some(value.trim().to_string()),
                other => return Err(format!("field label not supported: {other}")),
            }
        }
        Ok(selector)
    }

    fn is_empty(&self) -> bool {
        *self == Self::default()
    }

    fn matches(&self, item: &Item) -> bool {
        self.name.as_ref().is_none_or(|n| *n == item.name)
            && self.namespace.as_ref().is_none_or(|n| *n == item.namespace)
            && self.labels.iter().all(|r| r.matches(&item.labels))
    }
}

impl Requirement {
    fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        match self {
            Self::In(key, values) => labels.get(key).is_some_and(|v| values.contains(v)),
            Self::NotIn(key, values) => labels.get(key).is_none_or(|v| !values.contains(v)),
            Self::Exists(key) => labels.contains_key(key),
            Self::DoesNotExist(key) => !labels.contains_key(key),
        }
    }
}

/// The comma-separated terms of a label selector, commas inside `( )` kept.
fn split_terms(selector: &str) -> Result<Vec<String>, String> {
    let mut terms = Vec::new();
    let mut depth = 0usize;
    let mut term = String::new();
    for c in selector.chars() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth = depth
                    .checked_sub(1)
                    .ok_or_else(|| format!("label selector {selector:?}: unbalanced `)`"))?;
            }
            ',' if depth == 0 => {
                terms.push(std::mem::take(&mut term));
                continue;
            }
            _ => {}
        }
        term.push(c);
    }
    if depth != 0 {
        return Err(format!("label selector {selector:?}: unbalanced `(`"));
    }
    terms.push(term);
    Ok(terms
        .into_iter()
        .map(|t| t.trim().to_string())
        .filter(|t| !t.is_empty())
        .collect())
}

fn parse_requirement(term: &str) -> Result<Requirement, String> {
    let key = |k: &str| -> Result<String, String> {
        let k = k.trim();
        let valid = !k.is_empty()
            && k.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'));
        if valid {
            Ok(k.to_string())
        } else {
            Err(format!("label selector term {term:?}: invalid key {k:?}"))
        }
    };
    let set = |values: &str| -> Result<Vec<String>, String> {
        let inner = values
            .trim()
            .strip_prefix('(')
            .and_then(|v| v.strip_suffix(')'))
            .ok_or_else(|| format!("label selector term {term:?}: expected `(values)`"))?;
        Ok(inner.split(',').map(|v| v.trim().to_string()).collect())
    };
    if let Some(k) = term.strip_prefix('!') {
        return Ok(Requirement::DoesNotExist(key(k)?));
    }
    if let Some((k, values)) = term.split_once(" notin ") {
        return Ok(Requirement::NotIn(key(k)?, set(values)?));
    }
    if let Some((k, values)) = term.split_once(" in ") {
        return Ok(Requirement::In(key(k)?, set(values)?));
    }
    if let Some((k, v)) = term.split_once("!=") {
        return Ok(Requirement::NotIn(key(k)?, vec![v.trim().to_string()]));
    }
    if let Some((k, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
        return Ok(Requirement::In(key(k)?, vec![v.trim().to_string()]));
    }
    Ok(Requirement::Exists(key(term)?))
}

// === the requests ===

async fn handle(
    AxumState(shared): AxumState<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let path = uri.path();
    {
        let mut lease = shared.lease.lock().expect("lease lock poisoned");
        let (store, version) = &mut *lease;
        if let Some(response) = store.handle(&method, path, &body, version) {
            return response;
        }
    }
    let Some((&path, collection)) = shared.collections.get_key_value(path) else {
        return failure(404, "NotFound");
    };
    if method != Method::GET {
        return failure(405, "MethodNotAllowed");
    }
    let query = parse_query(uri.query().unwrap_or_default());
    let selector = match Selector::parse(
        query.get("labelSelector").map(String::as_str),
        query.get("fieldSelector").map(String::as_str),
    ) {
        Ok(selector) => selector,
        Err(message) => return failure_because(400, "BadRequest", &message),
    };
    // `as=PartialObjectMetadataList` for a list, `as=PartialObjectMetadata` for a watch.
    let partial = headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.contains("as=PartialObjectMetadata"));
    let watching = matches!(query.get("watch").map(String::as_str), Some("true" | "1"));
    if watching {
        watch(&shared, collection, &query, &selector, partial)
    } else {
        list(&shared, path, collection, &query, &selector, partial)
    }
}

/// One page of the collection's matching objects from the `continue` token on.
fn list(
    shared: &Arc<Shared>,
    path: &'static str,
    collection: &Collection,
    query: &HashMap<String, String>,
    selector: &Selector,
    partial: bool,
) -> Response {
    let limit = query
        .get("limit")
        .and_then(|l| l.parse::<usize>().ok())
        .filter(|l| *l > 0);
    let start = match query.get("continue").map(String::as_str) {
        None | Some("") => 0,
        Some(token) => match parse_continue(token, shared.version) {
            Some(start) => start,
            None => {
                return failure_because(
                    400,
                    "BadRequest",
                    &format!("continue key is not valid: {token}"),
                );
            }
        },
    };
    let mut page = Vec::new();
    let mut next = None;
    for (i, item) in collection.items.iter().enumerate().skip(start) {
        if !selector.matches(item) {
            continue;
        }
        if limit.is_some_and(|l| page.len() == l) {
            next = Some(i);
            break;
        }
        page.push(item);
    }
    let size: usize = page.iter().map(|i| i.json.len() + 1).sum();
    let mut out = Vec::with_capacity(size + 256);
    out.extend_from_slice(b"{\"kind\":");
    if partial {
        out.extend_from_slice(b"\"PartialObjectMetadataList\",\"apiVersion\":\"meta.k8s.io/v1\"");
    } else {
        push_json_str(&mut out, &format!("{}List", collection.kind));
        out.extend_from_slice(b",\"apiVersion\":");
        push_json_str(&mut out, collection.api_version);
    }
    out.extend_from_slice(b",\"metadata\":{\"resourceVersion\":");
    push_json_str(&mut out, &shared.version.to_string());
    if let Some(next) = next {
        out.extend_from_slice(b",\"continue\":");
        push_json_str(&mut out, &continue_token(shared.version, next));
        if selector.is_empty() {
            let remaining = collection.items.len() - next;
            out.extend_from_slice(format!(",\"remainingItemCount\":{remaining}").as_bytes());
        }
    }
    out.extend_from_slice(b"},\"items\":[");
    for (i, item) in page.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        if partial {
            item.write_partial(&mut out);
        } else {
            out.extend_from_slice(&item.json);
        }
    }
    out.extend_from_slice(b"]}");
    let (count, bytes) = (page.len() as u64, out.len() as u64);
    let shared = shared.clone();
    let body = body_then(Bytes::from(out), move || {
        let mut stats = shared.stats.lock().expect("stats lock poisoned");
        stats.pages += 1;
        *stats.listed.entry(path).or_default() += count;
        stats.bytes += bytes;
        stats.last_page_sent = Some(Instant::now());
    });
    json_body(body)
}

/// A watch: `ADDED` for each matching object newer than `resourceVersion`, then nothing,
/// kept open until the client goes.
fn watch(
    shared: &Arc<Shared>,
    collection: &Collection,
    query: &HashMap<String, String>,
    selector: &Selector,
    partial: bool,
) -> Response {
    let since = match query.get("resourceVersion").map(String::as_str) {
        None | Some("") => 0,
        Some(v) => match v.parse::<u64>() {
            Ok(v) => v,
            Err(_) => {
                return failure_because(
                    400,
                    "BadRequest",
                    &format!("invalid resourceVersion {v:?}"),
                );
            }
        },
    };
    shared.stats.lock().expect("stats lock poisoned").watches += 1;
    let events: Vec<Result<Bytes, Infallible>> = collection
        .items
        .iter()
        .filter(|item| item.version > since && selector.matches(item))
        .map(|item| {
            let mut line = Vec::with_capacity(item.json.len() + 64);
            line.extend_from_slice(b"{\"type\":\"ADDED\",\"object\":");
            if partial {
                item.write_partial(&mut line);
            } else {
                item.write_full(collection, &mut line);
            }
            line.extend_from_slice(b"}\n");
            Ok(Bytes::from(line))
        })
        .collect();
    let stream = futures::stream::iter(events).chain(futures::stream::pending());
    json_body(Body::from_stream(stream))
}

/// `bytes`, then `sent()` once the connection has taken them and asks for more.
fn body_then(bytes: Bytes, sent: impl FnOnce() + Send + 'static) -> Body {
    let mut sent = Some(sent);
    let first = futures::stream::iter([Ok::<_, Infallible>(bytes)]);
    let end = futures::stream::poll_fn(move |_| {
        if let Some(sent) = sent.take() {
            sent();
        }
        Poll::<Option<Result<Bytes, Infallible>>>::Ready(None)
    });
    Body::from_stream(first.chain(end))
}

fn json_body(body: Body) -> Response {
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "application/json")
        .body(body)
        .unwrap_or_else(|_| failure(500, "InternalError"))
}

/// The token of the page starting at item `index` of a list at `version`: opaque to clients,
/// like the real server's.
fn continue_token(version: u64, index: usize) -> String {
    format!("v1.{version}.{index}")
}

/// The item index of a token from [`continue_token`] for this server's `version`.
fn parse_continue(token: &str, version: u64) -> Option<usize> {
    let rest = token.strip_prefix("v1.")?;
    let (v, index) = rest.split_once('.')?;
    (v.parse::<u64>().ok()? == version)
        .then(|| index.parse().ok())
        .flatten()
}

#[cfg(test)]
mod tests;
