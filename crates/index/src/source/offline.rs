//! The `offline` source: a directory of manifests as `kubectl get -o yaml` prints them.
//!
//! Every `*.yaml`, `*.yml` and `*.json` file directly in the directory is read, whether it holds
//! one object, several YAML documents, or a `kind: List`. When a file changes (inotify through
//! `notify`), the directory is re-read and each kind's stream emits the `Apply`/`Delete` events a
//! watch would have. A file that does not parse is logged by name and counted; its last good
//! contents (if any) keep being served, so a half-saved edit loses nothing. An object defined
//! identically in two files is one object; differently, the first file (by path) wins and the
//! conflict is logged and counted.

use futures::{StreamExt, stream::BoxStream};
use serde::Deserialize;
use serde_json::Value;
use std::{
    collections::{BTreeMap, HashMap},
    hash::{Hash, Hasher},
    path::{Path, PathBuf},
    sync::Arc,
    time::Duration,
};
use tokio::sync::{Notify, watch};

use super::{Event, Source, Watched};
use crate::metrics::IndexMetrics;

/// How long to wait after a change notification for the burst of writes to settle.
const SETTLE: Duration = Duration::from_millis(15);

/// Errors starting the offline source.
#[derive(Debug, thiserror::Error)]
pub enum OfflineError {
    #[error("cluster state directory {path}: {source}")]
    Dir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cluster state directory {0} is not a directory")]
    NotADirectory(PathBuf),
}

/// Errors reading one state file; the file is skipped (or its last good contents kept).
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    #[error("cannot read: {0}")]
    Read(#[from] std::io::Error),
    #[error("invalid YAML: {0}")]
    Yaml(#[from] serde_yaml::Error),
    #[error("invalid JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[error("document {index}: {reason}")]
    Document { index: usize, reason: String },
}

/// `(group, kind)` of an object, e.g. `("discovery.k8s.io", "EndpointSlice")`; the version is not
/// part of it, so an object read back at another version is the same object.
type TypeKey = (String, String);
/// `(namespace, name)`; namespace is `""` for cluster-scoped objects.
type ObjectKey = (String, String);

/// Every object of the directory, by kind then by name.
#[derive(Debug, Default)]
pub struct Snapshot {
    objects: HashMap<TypeKey, BTreeMap<ObjectKey, Arc<Value>>>,
}

/// A watched state directory feeding any number of per-kind event streams.
#[derive(Clone)]
pub struct OfflineSource {
    snapshot: watch::Receiver<Arc<Snapshot>>,
    metrics: IndexMetrics,
}

/// The files of the directory, with the parse of each kept until its contents change.
struct StateDir {
    dir: PathBuf,
    files: BTreeMap<PathBuf, LoadedFile>,
    /// Content hashes of files that did not parse, so each bad version is reported once.
    rejected: BTreeMap<PathBuf, u64>,
    /// Manifest-named entries that are not regular files, so each is reported once.
    unreadable: std::collections::BTreeSet<PathBuf>,
    metrics: IndexMetrics,
}

struct LoadedFile {
    /// Size and modification time when last read: an unchanged stamp skips re-reading (and
    /// re-hashing) a large file when another file changed.
    stamp: Option<(u64, std::time::SystemTime)>,
    content_hash: u64,
    objects: Arc<Vec<Arc<Value>>>,
}

// === impl OfflineSource ===

impl OfflineSource {
    /// Reads `dir` and starts watching it for changes. Must be called within a Tokio runtime.
    ///
    /// Errors only when `dir` cannot be read as a directory; bad files inside it are skipped.
    /// When the file-change watcher cannot be set up (inotify limits), the directory is served
    /// as first read and a warning is logged.
    pub fn start(dir: impl Into<PathBuf>, metrics: IndexMetrics) -> Result<Self, OfflineError> {
        let dir = dir.into();
        let meta = std::fs::metadata(&dir).map_err(|source| OfflineError::Dir {
            path: dir.clone(),
            source,
        })?;
        if !meta.is_dir() {
            return Err(OfflineError::NotADirectory(dir));
        }
        let mut state = StateDir {
            dir: dir.clone(),
            files: BTreeMap::new(),
            rejected: BTreeMap::new(),
            unreadable: Default::default(),
            metrics: metrics.clone(),
        };
        let (tx, rx) = watch::channel(Arc::new(state.load()));

        let changed = Arc::new(Notify::new());
        let watcher = {
            let changed = changed.clone();
            let mut watcher =
                notify::recommended_watcher(move |res: notify::Result<notify::Event>| {
                    if res.is_ok_and(|event| is_content_change(&event.kind)) {
                        changed.notify_one();
                    }
                });
            if let Ok(w) = watcher.as_mut() {
                use notify::Watcher;
                if let Err(error) = w.watch(&dir, notify::RecursiveMode::NonRecursive) {
                    tracing::warn!(dir = %dir.display(), %error, "cannot watch the cluster state directory; changes will not be seen");
                }
            }
            watcher
                .inspect_err(|error| tracing::warn!(%error, "cannot watch the cluster state directory; changes will not be seen"))
                .ok()
        };
        tokio::spawn(async move {
            // The watcher lives as long as this task, which ends when every stream is gone.
            let _watcher = watcher;
            loop {
                tokio::select! {
                    _ = changed.notified() => {}
                    _ = tx.closed() => return,
                }
                tokio::time::sleep(SETTLE).await;
                let snapshot = state.load();
                state.metrics.offline_reloads.inc();
                tracing::debug!(dir = %state.dir.display(), "cluster state directory re-read");
                tx.send_replace(Arc::new(snapshot));
            }
        });
        Ok(Self {
            snapshot: rx,
            metrics,
        })
    }
}

impl Source for OfflineSource {
    fn events<K: Watched>(&self) -> BoxStream<'static, Event<K>> {
        let type_key = (K::group(&()).into_owned(), K::kind(&()).into_owned());
        let metrics = self.metrics.clone();
        let decoder = Decoder::<K> {
            type_key,
            metrics,
            known: None,
            rejected: BTreeMap::new(),
            _kind: std::marker::PhantomData,
        };
        futures::stream::unfold(
            (self.snapshot.clone(), decoder),
            |(mut rx, mut decoder)| async move {
                if decoder.known.is_none() {
                    let snapshot = rx.borrow_and_update().clone();
                    let events = decoder.next_events(&snapshot);
                    return Some((events, (rx, decoder)));
                }
                loop {
                    rx.changed().await.ok()?;
                    let snapshot = rx.borrow_and_update().clone();
                    let events = decoder.next_events(&snapshot);
                    if !events.is_empty() {
                        return Some((events, (rx, decoder)));
                    }
                }
            },
        )
        .flat_map(futures::stream::iter)
        .boxed()
    }
}

/// Per-stream state: what has been emitted for one kind, to diff the next snapshot against.
struct Decoder<K> {
    type_key: TypeKey,
    metrics: IndexMetrics,
    /// Objects emitted so far; `None` before the initial `Reset`.
    known: Option<BTreeMap<ObjectKey, Arc<Value>>>,
    /// Objects that did not decode, so each bad version is logged once.
    rejected: BTreeMap<ObjectKey, Arc<Value>>,
    _kind: std::marker::PhantomData<fn() -> K>,
}

impl<K: Watched> Decoder<K> {
    fn next_events(&mut self, snapshot: &Snapshot) -> Vec<Event<K>> {
        let empty = BTreeMap::new();
        let current = snapshot.objects.get(&self.type_key).unwrap_or(&empty);
        let mut next = BTreeMap::new();
        let mut applied = Vec::new();
        let previous = self.known.take();
        for (key, value) in current {
            let unchanged = previous
                .as_ref()
                .and_then(|p| p.get(key))
                .is_some_and(|old| Arc::ptr_eq(old, value) || old == value);
            if unchanged {
                next.insert(key.clone(), value.clone());
                continue;
            }
            if let Some(obj) = self.decode(key, value) {
                next.insert(key.clone(), value.clone());
                applied.push(obj);
            } else if let Some(old) = previous.as_ref().and_then(|p| p.get(key)) {
                // A bad new version keeps the last good one.
                next.insert(key.clone(), old.clone());
            }
        }
        self.rejected.retain(|k, _| current.contains_key(k));
        let events = match previous {
            None => vec![Event::Reset(applied)],
            Some(previous) => {
                let mut events: Vec<Event<K>> = applied.into_iter().map(Event::Apply).collect();
                for (key, old) in &previous {
                    if !next.contains_key(key)
                        && let Ok(obj) = K::deserialize(&**old)
                    {
                        events.push(Event::Delete(obj));
                    }
                }
                events
            }
        };
        self.known = Some(next);
        events
    }

    fn decode(&mut self, key: &ObjectKey, value: &Arc<Value>) -> Option<K> {
        match K::deserialize(&**value) {
            Ok(obj) => {
                self.rejected.remove(key);
                Some(obj)
            }
            Err(error) => {
                let seen = self.rejected.get(key).is_some_and(|v| v == value);
                if !seen {
                    tracing::warn!(kind = %self.type_key.1, namespace = %key.0, name = %key.1, %error, "skipping object that does not decode");
                    self.metrics.invalid_object(&self.type_key.1);
                    self.rejected.insert(key.clone(), value.clone());
                }
                None
            }
        }
    }
}

// === impl StateDir ===

impl StateDir {
    /// Re-reads the directory and returns the objects it defines now.
    fn load(&mut self) -> Snapshot {
        let (paths, unreadable) = match manifest_paths(&self.dir) {
            Ok(listed) => listed,
            Err(error) => {
                // Moved away or unmounted: re-reading the files would find none of them and
                // withdraw everything, so the last snapshot stands until the directory is back.
                tracing::warn!(dir = %self.dir.display(), %error, "cannot list the cluster state directory; keeping what was read before");
                return self.snapshot();
            }
        };
        for path in &unreadable {
            if self.unreadable.insert(path.clone()) {
                tracing::warn!(file = %path.display(), "skipping cluster state entry that is not a regular file (a directory, a dangling or looping symlink)");
                self.metrics.invalid_files.inc();
            }
        }
        self.unreadable.retain(|path| unreadable.contains(path));
        self.files.retain(|path, _| paths.contains(path));
        for path in &paths {
            let stamp = std::fs::metadata(path)
                .and_then(|m| Ok((m.len(), m.modified()?)))
                .ok();
            if stamp.is_some() && self.files.get(path).is_some_and(|f| f.stamp == stamp) {
                continue;
            }
            let bytes = match std::fs::read(path) {
                Ok(bytes) => bytes,
                Err(error) => {
                    // Removed between listing and reading: it is simply gone.
                    if error.kind() == std::io::ErrorKind::NotFound {
                        self.files.remove(path);
                    } else {
                        self.file_error(path, FileError::Read(error));
                    }
                    continue;
                }
            };
            let content_hash = {
                let mut h = std::collections::hash_map::DefaultHasher::new();
                bytes.hash(&mut h);
                h.finish()
            };
            if let Some(file) = self.files.get_mut(path)
                && file.content_hash == content_hash
            {
                file.stamp = stamp;
                continue;
            }
            if self.rejected.get(path) == Some(&content_hash) {
                continue;
            }
            match parse_manifests(path, &bytes) {
                Ok(objects) => {
                    self.rejected.remove(path);
                    self.files.insert(
                        path.clone(),
                        LoadedFile {
                            stamp,
                            content_hash,
                            objects: Arc::new(objects.into_iter().map(Arc::new).collect()),
                        },
                    );
                }
                Err(error) => {
                    self.file_error(path, error);
                    self.rejected.insert(path.clone(), content_hash);
                }
            }
        }
        self.rejected.retain(|path, _| paths.contains(path));
        self.snapshot()
    }

    /// The objects of the files as last read, duplicates merged and conflicts reported.
    fn snapshot(&self) -> Snapshot {
        let mut snapshot = Snapshot::default();
        let mut origin: HashMap<(TypeKey, ObjectKey), &Path> = HashMap::new();
        for (path, file) in &self.files {
            for obj in file.objects.iter() {
                let Some((type_key, obj_key)) = object_keys(obj) else {
                    continue;
                };
                let kind = snapshot.objects.entry(type_key.clone()).or_default();
                match kind.get(&obj_key) {
                    None => {
                        kind.insert(obj_key.clone(), obj.clone());
                        origin.insert((type_key, obj_key), path);
                    }
                    Some(first) if first == obj => {}
                    Some(_) => {
                        let first = origin.get(&(type_key.clone(), obj_key.clone()));
                        tracing::warn!(
                            kind = %type_key.1, namespace = %obj_key.0, name = %obj_key.1,
                            first = %first.map(|p| p.display().to_string()).unwrap_or_default(),
                            ignored = %path.display(),
                            "object defined differently in two files; keeping the first"
                        );
                        self.metrics.conflicting_objects.inc();
                    }
                }
            }
        }
        snapshot
    }

    fn file_error(&self, path: &Path, error: FileError) {
        let kept = self.files.contains_key(path);
        tracing::warn!(file = %path.display(), %error, kept_previous = kept, "skipping cluster state file");
        self.metrics.invalid_files.inc();
    }
}

/// Whether a file-system event can change what the directory defines. Reads (our own, too) and
/// metadata changes such as access times cannot; reacting to them would re-read forever.
fn is_content_change(kind: &notify::EventKind) -> bool {
    use notify::event::{EventKind, ModifyKind};
    match kind {
        EventKind::Access(_) | EventKind::Modify(ModifyKind::Metadata(_)) | EventKind::Other => {
            false
        }
        EventKind::Create(_) | EventKind::Modify(_) | EventKind::Remove(_) | EventKind::Any => true,
    }
}

/// The manifest files directly in `dir`, sorted by path, and the entries named like manifests
/// that are not regular files (directories, dangling or looping symlinks). Hidden files (editor
/// swap files) are skipped.
fn manifest_paths(dir: &Path) -> std::io::Result<(Vec<PathBuf>, Vec<PathBuf>)> {
    let mut paths = Vec::new();
    let mut unreadable = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        let hidden = path
            .file_name()
            .and_then(|n| n.to_str())
            .is_none_or(|n| n.starts_with('.'));
        let manifest = matches!(
            path.extension().and_then(|e| e.to_str()),
            Some("yaml" | "yml" | "json")
        );
        if manifest && !hidden {
            if path.is_file() {
                paths.push(path);
            } else {
                unreadable.push(path);
            }
        }
    }
    paths.sort();
    unreadable.sort();
    Ok((paths, unreadable))
}

/// Parses one file into its objects: YAML documents or JSON values, with `kind: List` expanded.
///
/// Any syntax error rejects the whole file, so a file is never half-applied.
pub fn parse_manifests(path: &Path, bytes: &[u8]) -> Result<Vec<Value>, FileError> {
    let text = std::str::from_utf8(bytes)
        .map_err(|e| FileError::Read(std::io::Error::new(std::io::ErrorKind::InvalidData, e)))?;
    let mut docs = Vec::new();
    if path.extension().and_then(|e| e.to_str()) == Some("json") {
        for value in serde_json::Deserializer::from_str(text).into_iter::<Value>() {
            docs.push(value?);
        }
    } else {
        for doc in serde_yaml::Deserializer::from_str(text) {
            let value = serde_yaml::Value::deserialize(doc)?;
            let json = serde_json::to_value(&value).map_err(|e| FileError::Document {
                index: docs.len(),
                reason: e.to_string(),
            })?;
            docs.push(json);
        }
    }
    let mut objects = Vec::new();
    for (index, doc) in docs.into_iter().enumerate() {
        match doc {
            Value::Null => {}
            Value::Object(ref map) => {
                let is_list = map
                    .get("kind")
                    .and_then(Value::as_str)
                    .is_some_and(|k| k == "List" || k.ends_with("List"))
                    && map.get("items").is_some();
                if is_list {
                    match map.get("items") {
                        Some(Value::Array(items)) => objects.extend(items.iter().cloned()),
                        Some(Value::Null) => {}
                        _ => {
                            return Err(FileError::Document {
                                index,
                                reason: "`items` of a List is not a sequence".to_string(),
                            });
                        }
                    }
                } else {
                    objects.push(doc);
                }
            }
            _ => {
                return Err(FileError::Document {
                    index,
                    reason: "not a Kubernetes object (expected a mapping)".to_string(),
                });
            }
        }
    }
    // An item that is not an object of its own is skipped by itself: one bad entry of a large
    // `kind: List` must not take the rest of the cluster with it.
    objects.retain(|obj| {
        let named = object_keys(obj).is_some();
        if !named {
            let kind = obj.get("kind").and_then(Value::as_str).unwrap_or("<no kind>");
            tracing::warn!(file = %path.display(), %kind, "skipping an object without apiVersion, kind or metadata.name");
        }
        named
    });
    Ok(objects)
}

fn object_keys(obj: &Value) -> Option<(TypeKey, ObjectKey)> {
    let api_version = obj.get("apiVersion")?.as_str()?;
    let kind = obj.get("kind")?.as_str()?;
    let meta = obj.get("metadata")?;
    let name = meta.get("name")?.as_str()?;
    let namespace = meta.get("namespace").and_then(Value::as_str).unwrap_or("");
    let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
    Some((
        (group.to_string(), kind.to_string()),
        (namespace.to_string(), name.to_string()),
    ))
}

#[cfg(test)]
mod tests;
