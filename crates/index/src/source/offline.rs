//! The `offline` source: a directory of manifests as `kubectl get -o yaml` prints them.
//!
//! Every `*.yaml`, `*.yml` and `*.json` file directly in the directory is read, whether it holds
//! one object, several YAML documents, or a `kind: List`. When files change (inotify through
//! `notify`), only those files are re-read, and each kind's stream emits the `Apply`/`Delete`
//! events a watch would have, for the objects whose contents changed. A file that does not parse
//! is logged by name and counted; its last good contents (if any) keep being served, so a
//! half-saved edit loses nothing. An object defined identically in two files is one object;
//! differently, the first file (by path) wins and the conflict is logged and counted. Files
//! larger than [`MAX_FILE_BYTES`] or nested deeper than [`MAX_NESTING`] are refused.

use futures::{StreamExt, stream::BoxStream};
use serde::Deserialize;
use serde_json::Value;
use std::{
    collections::{BTreeMap, BTreeSet, HashMap, VecDeque},
    hash::{Hash, Hasher},
    io::Read,
    path::{Path, PathBuf},
    sync::{Arc, Mutex},
    time::Duration,
};
use tokio::sync::{Notify, watch};

use super::{Event, Source, Watched};
use crate::metrics::IndexMetrics;

/// After a change notification, the directory is read once no notification came for this long:
/// an editor that truncates then writes a file is read once, not as an empty file first.
const QUIET: Duration = Duration::from_millis(5);
/// The longest a burst of notifications delays the read.
const MAX_SETTLE: Duration = Duration::from_millis(50);
/// A file that could not be read (out of file descriptors, permissions fixed with `chmod`,
/// which no content notification follows), or a directory that could not be listed (deleted,
/// to be recreated), is tried again after this long, then twice as long each time, up to
/// [`RETRY_MAX`].
const RETRY_MIN: Duration = Duration::from_secs(1);
const RETRY_MAX: Duration = Duration::from_secs(30);
/// Changes kept per kind for streams that have not caught up; one further behind re-diffs the
/// whole kind.
const LOG_CAPACITY: usize = 16_384;

/// The largest state file read, in bytes (64 MiB); a larger one is refused as a whole.
pub const MAX_FILE_BYTES: u64 = 64 << 20;
/// The deepest nesting of `[` / `{` accepted in a state file. The YAML parser's work grows with
/// the square of the flow nesting, so a file of 100,000 `[` would take minutes; serde refuses
/// anything deeper than 128 levels anyway, so no valid manifest is lost.
pub const MAX_NESTING: usize = 256;

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
    /// Document `index` (0-based; the message counts from 1, as an editor shows them).
    #[error("document {}: {reason}", index + 1)]
    Document { index: usize, reason: String },
    #[error("larger than {limit} bytes")]
    TooLarge { limit: u64 },
    #[error("nested deeper than {limit} levels of `[` or `{{`")]
    TooDeep { limit: usize },
}

/// `(group, kind)` of an object, e.g. `("discovery.k8s.io", "EndpointSlice")`; the version is not
/// part of it, so an object read back at another version is the same object.
type TypeKey = (String, String);
/// `(namespace, name)`; namespace is `""` for cluster-scoped objects.
type ObjectKey = (String, String);

/// A watched state directory feeding any number of per-kind event streams.
#[derive(Clone)]
pub struct OfflineSource {
    shared: Arc<Mutex<Shared>>,
    /// The generation of `shared`; also keeps the reading task alive while a stream lives.
    generation: watch::Receiver<u64>,
    metrics: IndexMetrics,
}

/// The objects the directory defines now, and per kind the keys that changed recently, for the
/// streams to catch up from.
#[derive(Debug, Default)]
struct Shared {
    /// Bumped once per read that changed anything.
    generation: u64,
    kinds: HashMap<TypeKey, KindObjects>,
}

#[derive(Debug, Default)]
struct KindObjects {
    objects: BTreeMap<ObjectKey, Served>,
    /// `(generation, key)` of every change, oldest first, at most [`LOG_CAPACITY`].
    log: VecDeque<(u64, ObjectKey)>,
    /// The newest generation dropped from `log`: a stream that has not seen it re-diffs all.
    trimmed: u64,
}

/// What the notification callback collected for the next read.
#[derive(Debug, Default)]
struct Pending {
    paths: BTreeSet<PathBuf>,
    /// Re-list the whole directory (an event without paths, or about the directory itself).
    rescan: bool,
}

/// The files of the directory, with the parse of each kept until its contents change, and every
/// definition of every object.
struct StateDir {
    dir: PathBuf,
    files: BTreeMap<PathBuf, LoadedFile>,
    /// Content hashes of files that did not parse, so each bad version is reported once.
    rejected: BTreeMap<PathBuf, u64>,
    /// Manifest-named entries that are not regular files, so each is reported once.
    unreadable: BTreeSet<PathBuf>,
    /// Files whose last read failed for a reason other than their contents: read again later.
    retry: BTreeSet<PathBuf>,
    /// The last listing of the directory failed: list it again later.
    relist: bool,
    /// The directory's inode when it was last listed.
    inode: Option<u64>,
    /// Every definition of each object, in file path order: the first one is served.
    defs: HashMap<(TypeKey, ObjectKey), Definitions>,
    metrics: IndexMetrics,
}

struct LoadedFile {
    /// Size, modification time and inode when last read: an unchanged stamp skips re-reading (and
    /// re-hashing) a large file on a re-list.
    stamp: Option<Stamp>,
    content_hash: u64,
    objects: Vec<(TypeKey, ObjectKey, Arc<Value>)>,
}

/// A file's size, modification time and inode. The inode tells a symlink that now points
/// to another file (a ConfigMap volume's update) even when size and time match.
type Stamp = (u64, std::time::SystemTime, u64);

/// The files defining one object and their definition of it, in path order.
type Definitions = Vec<(PathBuf, Arc<Value>)>;
/// Objects whose served definition changed: the new one, or `None` when none is left.
type Changes = Vec<(TypeKey, ObjectKey, Option<Served>)>;

/// The definition of an object that is served, and the file it is from (for log messages).
#[derive(Clone, Debug)]
struct Served {
    value: Arc<Value>,
    file: Arc<Path>,
}
/// Objects whose definitions were touched during one read, with the definition served before:
/// an object moved from one file to another within a read is no change.
type Touched = HashMap<(TypeKey, ObjectKey), Option<Arc<Value>>>;

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
        let mut state = StateDir::new(dir.clone(), metrics.clone());
        let shared = Arc::new(Mutex::new(Shared::default()));
        let changes = state.rescan();
        publish(&shared, changes);
        let (tx, rx) = watch::channel(0);

        let changed = Arc::new(Notify::new());
        let pending = Arc::new(Mutex::new(Pending::default()));
        let watcher = {
            let (changed, pending, watched) = (changed.clone(), pending.clone(), dir.clone());
            let mut watcher =
                notify::recommended_watcher(move |res: notify::Result<notify::Event>| {
                    let mut p = pending.lock().unwrap_or_else(|e| e.into_inner());
                    match res {
                        Ok(event) if is_content_change(&event.kind) => {
                            if event.need_rescan() || event.paths.is_empty() {
                                p.rescan = true;
                            }
                            for path in event.paths {
                                if path.parent() == Some(watched.as_path())
                                    && !is_atomic_writer_entry(&path)
                                {
                                    p.paths.insert(path);
                                } else {
                                    p.rescan = true;
                                }
                            }
                        }
                        Ok(_) => return,
                        // A lost event (queue overflow) may hide any change.
                        Err(_) => p.rescan = true,
                    }
                    drop(p);
                    changed.notify_one();
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
        let task_shared = shared.clone();
        tokio::spawn(async move {
            // The watcher lives as long as this task, which ends when every stream is gone.
            let mut watcher = watcher;
            let mut watched = dir_inode(&dir);
            let mut state = state;
            let mut retry_after = RETRY_MIN;
            loop {
                let retry = !state.retry.is_empty() || state.relist;
                tokio::select! {
                    _ = changed.notified() => {}
                    _ = tx.closed() => return,
                    () = tokio::time::sleep(retry_after), if retry => {
                        let mut p = pending.lock().unwrap_or_else(|e| e.into_inner());
                        p.paths.extend(state.retry.iter().cloned());
                        p.rescan |= state.relist;
                        retry_after = (retry_after * 2).min(RETRY_MAX);
                    }
                }
                let burst = tokio::time::Instant::now();
                while burst.elapsed() < MAX_SETTLE
                    && tokio::time::timeout(QUIET, changed.notified())
                        .await
                        .is_ok()
                {}
                let todo = std::mem::take(&mut *pending.lock().unwrap_or_else(|e| e.into_inner()));
                let shared = task_shared.clone();
                // Reading and parsing block: a huge or hostile file must not stall the runtime
                // (and with it `/ready` and every stream).
                let read = tokio::task::spawn_blocking(move || {
                    let changes = if todo.rescan {
                        state.rescan()
                    } else {
                        state.refresh(&todo.paths)
                    };
                    state.metrics.offline_reloads.inc();
                    tracing::debug!(dir = %state.dir.display(), changed = changes.len(), "cluster state directory re-read");
                    let generation = publish(&shared, changes);
                    (state, generation)
                })
                .await;
                match read {
                    Ok((next, generation)) => {
                        state = next;
                        if state.retry.is_empty() && !state.relist {
                            retry_after = RETRY_MIN;
                        }
                        // A directory deleted and recreated, or moved away and replaced, is a
                        // new inode: the watch went with the old one.
                        if !state.relist
                            && let Some(w) = watcher.as_mut()
                        {
                            let now = state.inode;
                            if now != watched {
                                use notify::Watcher;
                                let _ = w.unwatch(&state.dir);
                                match w.watch(&state.dir, notify::RecursiveMode::NonRecursive) {
                                    Ok(()) => watched = now,
                                    Err(error) => {
                                        tracing::warn!(dir = %state.dir.display(), %error, "cannot watch the cluster state directory again; changes will not be seen")
                                    }
                                }
                            }
                        }
                        if let Some(generation) = generation {
                            tx.send_replace(generation);
                        }
                    }
                    Err(error) => {
                        tracing::error!(%error, "reading the cluster state directory failed; changes will not be seen");
                        return;
                    }
                }
            }
        });
        Ok(Self {
            shared,
            generation: rx,
            metrics,
        })
    }
}

/// Applies `changes` to the shared objects; returns the new generation, if anything changed.
fn publish(shared: &Mutex<Shared>, changes: Changes) -> Option<u64> {
    if changes.is_empty() {
        return None;
    }
    let mut shared = shared.lock().unwrap_or_else(|e| e.into_inner());
    shared.generation += 1;
    let generation = shared.generation;
    for (type_key, key, value) in changes {
        let kind = shared.kinds.entry(type_key).or_default();
        match value {
            Some(value) => kind.objects.insert(key.clone(), value),
            None => kind.objects.remove(&key),
        };
        kind.log.push_back((generation, key));
        if kind.log.len() > LOG_CAPACITY
            && let Some((dropped, _)) = kind.log.pop_front()
        {
            kind.trimmed = dropped;
        }
    }
    Some(generation)
}

impl Source for OfflineSource {
    fn events<K: Watched>(&self) -> BoxStream<'static, Event<K>> {
        let type_key = (K::group(&()).into_owned(), K::kind(&()).into_owned());
        let metrics = self.metrics.clone();
        let decoder = Decoder::<K> {
            type_key,
            metrics,
            known: None,
            seen: 0,
            rejected: BTreeMap::new(),
            _kind: std::marker::PhantomData,
        };
        futures::stream::unfold(
            (self.generation.clone(), self.shared.clone(), decoder),
            |(mut rx, shared, mut decoder)| async move {
                if decoder.known.is_none() {
                    rx.borrow_and_update();
                    let events = decoder.next_events(&shared);
                    return Some((events, (rx, shared, decoder)));
                }
                loop {
                    rx.changed().await.ok()?;
                    rx.borrow_and_update();
                    let events = decoder.next_events(&shared);
                    if !events.is_empty() {
                        return Some((events, (rx, shared, decoder)));
                    }
                }
            },
        )
        .flat_map(futures::stream::iter)
        .boxed()
    }
}

/// Per-stream state: what has been emitted for one kind, to diff the next changes against.
struct Decoder<K> {
    type_key: TypeKey,
    metrics: IndexMetrics,
    /// Objects emitted so far; `None` before the initial `Reset`.
    known: Option<BTreeMap<ObjectKey, Arc<Value>>>,
    /// The generation of the shared objects last read.
    seen: u64,
    /// Objects that did not decode, so each bad version is logged once.
    rejected: BTreeMap<ObjectKey, Arc<Value>>,
    _kind: std::marker::PhantomData<fn() -> K>,
}

impl<K: Watched> Decoder<K> {
    /// The events that take this stream from what it emitted to the shared objects now: a
    /// `Reset` the first time, then `Apply`s and `Delete`s of the keys changed since.
    fn next_events(&mut self, shared: &Mutex<Shared>) -> Vec<Event<K>> {
        let (changed, full) = {
            let shared = shared.lock().unwrap_or_else(|e| e.into_inner());
            let kind = shared.kinds.get(&self.type_key);
            let full = self.known.is_none() || kind.is_some_and(|k| k.trimmed > self.seen);
            let mut changed: BTreeMap<ObjectKey, Option<Served>> = BTreeMap::new();
            if let Some(kind) = kind {
                if full {
                    for (key, value) in &kind.objects {
                        changed.insert(key.clone(), Some(value.clone()));
                    }
                } else {
                    let since = kind.log.iter().rev().take_while(|(g, _)| *g > self.seen);
                    for (_, key) in since {
                        if !changed.contains_key(key) {
                            changed.insert(key.clone(), kind.objects.get(key).cloned());
                        }
                    }
                }
            }
            self.seen = shared.generation;
            (changed, full)
        };
        let Some(mut known) = self.known.take() else {
            let mut known = BTreeMap::new();
            let mut objects = Vec::new();
            for (key, served) in changed {
                if let Some(served) = served
                    && let Some(obj) = self.decode(&key, &served)
                {
                    known.insert(key, served.value);
                    objects.push(obj);
                }
            }
            self.known = Some(known);
            return vec![Event::Reset(objects)];
        };
        let mut changed = changed;
        if full {
            for key in known.keys() {
                changed.entry(key.clone()).or_insert(None);
            }
        }
        let mut applied = Vec::new();
        let mut deleted = Vec::new();
        for (key, served) in changed {
            match served {
                Some(served) => {
                    let unchanged = known.get(&key).is_some_and(|old| {
                        Arc::ptr_eq(old, &served.value) || **old == *served.value
                    });
                    if unchanged {
                        // Back to the version emitted: a bad version seen meanwhile is news again.
                        self.rejected.remove(&key);
                        continue;
                    }
                    // A bad new version keeps the last good one.
                    if let Some(obj) = self.decode(&key, &served) {
                        known.insert(key, served.value);
                        applied.push(Event::Apply(obj));
                    }
                }
                None => {
                    self.rejected.remove(&key);
                    if let Some(old) = known.remove(&key)
                        && let Ok(obj) = decode::<K>(&old)
                    {
                        deleted.push(Event::Delete(obj));
                    }
                }
            }
        }
        self.known = Some(known);
        applied.extend(deleted);
        applied
    }

    /// Decodes the served definition of `key`; one that does not decode is logged, with its
    /// file, and counted once per version.
    fn decode(&mut self, key: &ObjectKey, served: &Served) -> Option<K> {
        match decode::<K>(&served.value) {
            Ok(obj) => {
                self.rejected.remove(key);
                Some(obj)
            }
            Err(error) => {
                let seen = self.rejected.get(key).is_some_and(|v| *v == served.value);
                if !seen {
                    tracing::warn!(file = %served.file.display(), kind = %self.type_key.1, namespace = %key.0, name = %key.1, %error, "skipping object that does not decode");
                    self.metrics.invalid_object(&self.type_key.1);
                    self.rejected.insert(key.clone(), served.value.clone());
                }
                None
            }
        }
    }
}

/// Decodes one object, with the defaults older versions of its kind leave out
/// ([`super::fill_defaults`]); an error names the field it is about (`spec.ports[0].port: ...`).
fn decode<K: Watched>(value: &Value) -> Result<K, serde_path_to_error::Error<serde_json::Error>> {
    if super::has_defaults::<K>() {
        let mut value = value.clone();
        super::fill_defaults::<K>(&mut value);
        return serde_path_to_error::deserialize(&value);
    }
    serde_path_to_error::deserialize(value)
}

// === impl StateDir ===

impl StateDir {
    fn new(dir: PathBuf, metrics: IndexMetrics) -> Self {
        Self {
            dir,
            files: BTreeMap::new(),
            rejected: BTreeMap::new(),
            unreadable: BTreeSet::new(),
            retry: BTreeSet::new(),
            relist: false,
            inode: None,
            defs: HashMap::new(),
            metrics,
        }
    }

    /// Re-lists the directory and re-reads the files whose size or modification time changed.
    /// Returns the objects whose served definition changed.
    fn rescan(&mut self) -> Changes {
        let mut changes = Touched::new();
        let (paths, unreadable) = match manifest_paths(&self.dir) {
            Ok(listed) => listed,
            Err(error) => {
                // Moved away or unmounted: re-reading the files would find none of them and
                // withdraw everything, so what was read stands until the directory is back.
                if !self.relist {
                    tracing::warn!(dir = %self.dir.display(), %error, "cannot list the cluster state directory; keeping what was read before until it can be");
                }
                self.relist = true;
                return Changes::new();
            }
        };
        if std::mem::take(&mut self.relist) {
            tracing::info!(dir = %self.dir.display(), "cluster state directory listed again");
        }
        self.inode = dir_inode(&self.dir);
        let gone: Vec<PathBuf> = self
            .files
            .keys()
            .chain(self.rejected.keys())
            .chain(self.unreadable.iter())
            .filter(|p| !paths.contains(p) && !unreadable.contains(p))
            .cloned()
            .collect();
        for path in gone {
            self.forget(&path, &mut changes);
        }
        for path in &unreadable {
            self.mark_unreadable(path, &mut changes);
        }
        for path in &paths {
            self.read_file(path, true, &mut changes);
        }
        self.changes(changes)
    }

    /// Re-reads the files at `paths` (created, changed, removed or renamed; paths that are not
    /// manifests are ignored). Returns the objects whose served definition changed.
    fn refresh(&mut self, paths: &BTreeSet<PathBuf>) -> Changes {
        // Moved away, deleted or replaced since it was listed: notifications from the old
        // directory name files that are not (or no longer) at these paths, and forgetting them
        // would withdraw objects the directory still defines.
        if self.relist || dir_inode(&self.dir) != self.inode {
            return self.rescan();
        }
        let mut changes = Touched::new();
        for path in paths.iter().filter(|p| is_manifest_name(p)) {
            match std::fs::metadata(path) {
                Ok(meta) if meta.is_file() => self.read_file(path, false, &mut changes),
                // A dangling or looping symlink, or a directory.
                Ok(_) => self.mark_unreadable(path, &mut changes),
                Err(_) if std::fs::symlink_metadata(path).is_ok() => {
                    self.mark_unreadable(path, &mut changes)
                }
                Err(_) => self.forget(&path.clone(), &mut changes),
            }
        }
        self.changes(changes)
    }

    /// The touched objects whose served definition differs from the one served before.
    fn changes(&self, touched: Touched) -> Changes {
        let mut changes = Changes::new();
        for (key, before) in touched {
            let after = self
                .defs
                .get(&key)
                .and_then(|defs| defs.first())
                .map(|(file, value)| Served {
                    value: value.clone(),
                    file: file.as_path().into(),
                });
            let same = match (&before, &after) {
                (Some(b), Some(a)) => Arc::ptr_eq(b, &a.value) || **b == *a.value,
                (None, None) => true,
                _ => false,
            };
            if !same {
                changes.push((key.0, key.1, after));
            }
        }
        changes
    }

    /// Reads one regular file and serves its objects, unless its contents did not change.
    /// `trust_stamp`: an unchanged size, modification time and inode mean unchanged contents (on a
    /// re-list; a file named by a notification is read, as its time may not have ticked).
    fn read_file(&mut self, path: &Path, trust_stamp: bool, changes: &mut Touched) {
        self.unreadable.remove(path);
        self.retry.remove(path);
        let stamp = std::fs::metadata(path)
            .and_then(|m| {
                use std::os::unix::fs::MetadataExt;
                Ok((m.len(), m.modified()?, m.ino()))
            })
            .ok();
        if trust_stamp && stamp.is_some() && self.files.get(path).is_some_and(|f| f.stamp == stamp)
        {
            return;
        }
        let bytes = match read_limited(path) {
            Ok(bytes) => bytes,
            Err(FileError::Read(error)) if error.kind() == std::io::ErrorKind::NotFound => {
                // Removed between listing and reading: it is simply gone.
                self.forget(path, changes);
                return;
            }
            Err(error) => {
                if matches!(error, FileError::Read(_)) {
                    self.retry.insert(path.to_path_buf());
                }
                self.file_error(path, error);
                return;
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
            // Back to the contents served: a bad version seen meanwhile is news again.
            self.rejected.remove(path);
            return;
        }
        if bytes.is_empty() && self.files.get(path).is_some_and(|f| !f.objects.is_empty()) {
            // `kubectl get -o yaml > file` and `cp` truncate, then write: an empty file is
            // most likely mid-write, and withdrawing its objects would tell every proxy that
            // their services are gone. Removing the file is how its objects are withdrawn.
            if self.rejected.insert(path.to_path_buf(), content_hash) != Some(content_hash) {
                tracing::warn!(file = %path.display(), "cluster state file is empty; keeping its objects until it has contents again (remove the file to withdraw them)");
            }
            return;
        }
        if self.rejected.get(path) == Some(&content_hash) {
            return;
        }
        match parse_manifests(path, &bytes) {
            Ok(objects) => {
                self.rejected.remove(path);
                let objects = objects
                    .into_iter()
                    .filter_map(|obj| {
                        let (type_key, obj_key) = object_keys(&obj)?;
                        Some((type_key, obj_key, Arc::new(obj)))
                    })
                    .collect();
                let file = LoadedFile {
                    stamp,
                    content_hash,
                    objects,
                };
                self.replace(path, Some(file), changes);
            }
            Err(error) => {
                self.file_error(path, error);
                self.rejected.insert(path.to_path_buf(), content_hash);
            }
        }
    }

    /// The entry at `path` is gone: its objects are withdrawn (unless defined elsewhere too).
    fn forget(&mut self, path: &Path, changes: &mut Touched) {
        self.rejected.remove(path);
        self.unreadable.remove(path);
        self.retry.remove(path);
        self.replace(path, None, changes);
    }

    fn mark_unreadable(&mut self, path: &Path, changes: &mut Touched) {
        self.rejected.remove(path);
        self.retry.remove(path);
        self.replace(path, None, changes);
        if self.unreadable.insert(path.to_path_buf()) {
            tracing::warn!(file = %path.display(), "skipping cluster state entry that is not a regular file (a directory, a dangling or looping symlink)");
            self.metrics.invalid_files.inc();
        }
    }

    /// Replaces the definitions of file `path` with those of `file` (none when `None`) and
    /// records the objects touched: O(objects of the two versions of the file), whatever else
    /// the directory holds.
    fn replace(&mut self, path: &Path, file: Option<LoadedFile>, changes: &mut Touched) {
        let old = self.files.remove(path);
        let old_objects = old.as_ref().map_or(&[][..], |f| &f.objects[..]);
        let mut old_by_key: HashMap<(&TypeKey, &ObjectKey), Vec<&Arc<Value>>> = HashMap::new();
        for (type_key, obj_key, value) in old_objects {
            old_by_key
                .entry((type_key, obj_key))
                .or_default()
                .push(value);
        }
        let mut file = file;
        let mut new_by_key: HashMap<(TypeKey, ObjectKey), Vec<Arc<Value>>> = HashMap::new();
        if let Some(file) = file.as_mut() {
            for (type_key, obj_key, value) in &mut file.objects {
                // An unchanged object keeps its `Arc`, so every later comparison is a pointer's.
                if let Some(same) = old_by_key
                    .get(&(&*type_key, &*obj_key))
                    .and_then(|olds| olds.iter().find(|o| **o == value))
                {
                    *value = Arc::clone(same);
                }
                new_by_key
                    .entry((type_key.clone(), obj_key.clone()))
                    .or_default()
                    .push(value.clone());
            }
        }
        let same_defs = |olds: Option<&Vec<&Arc<Value>>>, news: Option<&Vec<Arc<Value>>>| {
            let olds = olds.map_or(&[][..], |v| &v[..]);
            let news = news.map_or(&[][..], |v| &v[..]);
            olds.len() == news.len() && olds.iter().zip(news).all(|(o, n)| Arc::ptr_eq(o, n))
        };
        let mut touched: Vec<(TypeKey, ObjectKey)> = Vec::new();
        for &(type_key, obj_key) in old_by_key.keys() {
            let key = (type_key.clone(), obj_key.clone());
            if !same_defs(old_by_key.get(&(type_key, obj_key)), new_by_key.get(&key)) {
                touched.push(key);
            }
        }
        for key in new_by_key.keys() {
            if !old_by_key.contains_key(&(&key.0, &key.1)) {
                touched.push(key.clone());
            }
        }
        drop(old_by_key);
        for key in touched {
            let defs = self.defs.entry(key.clone()).or_default();
            let before = defs.first().map(|(_, v)| v.clone());
            defs.retain(|(p, _)| p != path);
            if let Some(news) = new_by_key.remove(&key) {
                // Definitions stay in path order; several in one file keep their file order.
                let at = defs.partition_point(|(p, _)| p.as_path() < path);
                defs.splice(at..at, news.into_iter().map(|v| (path.to_path_buf(), v)));
            }
            if let Some((first_path, first)) = defs.first()
                && let Some((ignored, _)) = defs.iter().find(|(_, v)| v != first)
            {
                tracing::warn!(
                    kind = %key.0.1, namespace = %key.1.0, name = %key.1.1,
                    first = %first_path.display(), ignored = %ignored.display(),
                    "object defined differently in two files; keeping the first"
                );
                self.metrics.conflicting_objects.inc();
            }
            if defs.is_empty() {
                self.defs.remove(&key);
            }
            changes.entry(key).or_insert(before);
        }
        if let Some(file) = file {
            self.files.insert(path.to_path_buf(), file);
        }
    }

    fn file_error(&self, path: &Path, error: FileError) {
        let kept = self.files.contains_key(path);
        tracing::warn!(file = %path.display(), %error, kept_previous = kept, "skipping cluster state file");
        self.metrics.invalid_files.inc();
    }
}

/// Reads at most [`MAX_FILE_BYTES`] of `path`; a longer file is an error, not a truncation.
fn read_limited(path: &Path) -> Result<Vec<u8>, FileError> {
    let file = std::fs::File::open(path)?;
    let size = file.metadata().map(|m| m.len()).unwrap_or(0);
    if size > MAX_FILE_BYTES {
        return Err(FileError::TooLarge {
            limit: MAX_FILE_BYTES,
        });
    }
    let mut bytes = Vec::with_capacity(size as usize);
    file.take(MAX_FILE_BYTES + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(FileError::TooLarge {
            limit: MAX_FILE_BYTES,
        });
    }
    Ok(bytes)
}

/// Whether `path` is one of the `..data` / `..<timestamp>` entries through which a ConfigMap or
/// Secret volume (kubelet's atomic writer) swaps all its files at once: the manifests are
/// symlinks into them, so a change there may change any file while none is notified.
fn is_atomic_writer_entry(path: &Path) -> bool {
    path.file_name()
        .is_some_and(|name| name.as_encoded_bytes().starts_with(b".."))
}

/// The inode of directory `dir`, to tell a directory recreated at the same path.
fn dir_inode(dir: &Path) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(dir).ok().map(|m| m.ino())
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
        if is_manifest_name(&path) {
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

/// Whether `path` is named like a manifest: `*.yaml`, `*.yml` or `*.json`, not hidden (editor
/// swap and temporary files are).
fn is_manifest_name(path: &Path) -> bool {
    let hidden = path
        .file_name()
        .and_then(|n| n.to_str())
        .is_none_or(|n| n.starts_with('.'));
    let manifest = matches!(
        path.extension().and_then(|e| e.to_str()),
        Some("yaml" | "yml" | "json")
    );
    manifest && !hidden
}

/// Parses one file into its objects: YAML documents or JSON values, with `kind: List` expanded.
///
/// Any syntax error rejects the whole file, so a file is never half-applied; so does nesting
/// deeper than [`MAX_NESTING`] ([`FileError::TooDeep`]), checked before any parsing.
pub fn parse_manifests(path: &Path, bytes: &[u8]) -> Result<Vec<Value>, FileError> {
    let text = std::str::from_utf8(bytes)
        .map_err(|e| FileError::Read(std::io::Error::new(std::io::ErrorKind::InvalidData, e)))?;
    // Editors on Windows start UTF-8 files with a byte order mark; kubectl reads past it.
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    if nesting_exceeds(bytes, MAX_NESTING) {
        return Err(FileError::TooDeep { limit: MAX_NESTING });
    }
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
                            tracing::warn!(
                                file = %path.display(),
                                document = index + 1,
                                "skipping a List whose `items` is not a sequence"
                            );
                        }
                    }
                } else {
                    objects.push(doc);
                }
            }
            // Valid YAML that is no object (a stray scalar or sequence) goes alone, as a bad
            // item of a List does: the file's objects around it are still served.
            _ => {
                tracing::warn!(
                    file = %path.display(),
                    document = index + 1,
                    "skipping a document that is not a Kubernetes object (expected a mapping)"
                );
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

/// Whether `[` / `{` nest deeper than `limit` in `bytes`, outside quoted strings and comments.
///
/// A linear scan that over-counts rather than under-counts: brackets inside plain or block
/// scalars count too (manifests nest a dozen levels, the limit is far above). A quote opens a
/// string only where YAML starts a quoted scalar, so `it's` opens none.
fn nesting_exceeds(bytes: &[u8], limit: usize) -> bool {
    let mut depth = 0usize;
    let mut i = 0;
    // Where YAML starts a quoted scalar: at a line's start or after an indicator, blanks
    // between; a quote inside a plain scalar (`5" screen`) opens nothing.
    let token_start = |i: usize| {
        let mut j = i;
        while j > 0 && matches!(bytes[j - 1], b' ' | b'\t') {
            j -= 1;
        }
        j == 0
            || matches!(
                bytes[j - 1],
                b'\n' | b'\r' | b'[' | b'{' | b',' | b':' | b'-' | b'?'
            )
    };
    while i < bytes.len() {
        match bytes[i] {
            b'[' | b'{' => {
                depth += 1;
                if depth > limit {
                    return true;
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            b'"' if token_start(i) => {
                i += 1;
                while i < bytes.len() && bytes[i] != b'"' {
                    i += if bytes[i] == b'\\' { 2 } else { 1 };
                }
            }
            // `''` inside a single-quoted string reads as a close and an open: same result.
            b'\'' if token_start(i) => {
                i += 1;
                while i < bytes.len() && bytes[i] != b'\'' {
                    i += 1;
                }
            }
            b'#' if i == 0 || matches!(bytes[i - 1], b' ' | b'\t' | b'\n' | b'\r') => {
                while i < bytes.len() && bytes[i] != b'\n' {
                    i += 1;
                }
            }
            _ => {}
        }
        i += 1;
    }
    false
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
