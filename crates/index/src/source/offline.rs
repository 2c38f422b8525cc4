//! The `offline` source: a directory of manifests as `kubectl get -o yaml` prints them.
//!
//! Every `*.yaml`, `*.yml` and `*.json` file directly in the directory is read, whether it holds
//! one object, several YAML documents, or a `kind: List`. Each document of a watched kind is
//! decoded once, when its file is read, into the kind's object ([`crate::model::Kind`]), and
//! delivered to the kind's indexes; the source keeps no document, only a digest of each
//! definition, to see what an edit changed and to tell identical definitions from conflicting
//! ones. When files change (inotify through `notify`), only those files are re-read, and each
//! kind gets the `Apply`/`Delete` events a watch would have, for the objects whose served
//! definition changed. A file that does not parse is logged by name and counted; its last good
//! contents (if any) keep being served, so a half-saved edit loses nothing. An object defined
//! identically in two files is one object; differently, the first file (by path) wins and the
//! conflict is logged and counted. Files larger than [`MAX_FILE_BYTES`] or nested deeper than
//! [`MAX_NESTING`] are refused.

use serde_json::Value;
use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    hash::{Hash, Hasher},
    io::Read,
    path::{Path, PathBuf},
    sync::{Arc, Mutex},
    time::Duration,
};
use tokio::sync::Notify;

use super::{AnyObject, Event, KindFeed};
use crate::{
    metrics::IndexMetrics,
    model::{DecodeError, ObjectRef},
};

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
    Yaml(#[from] serde_saphyr::Error),
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
/// A digest of one definition of an object: equal definitions have equal digests.
type Digest = u64;

/// A state directory, ready to be read and followed once the kinds to serve are known
/// ([`OfflineSource::start`]).
#[derive(Clone)]
pub struct OfflineSource {
    dir: PathBuf,
    metrics: IndexMetrics,
}

/// What the notification callback collected for the next read.
#[derive(Debug, Default)]
struct Pending {
    paths: BTreeSet<PathBuf>,
    /// Re-list the whole directory (an event without paths, or about the directory itself).
    rescan: bool,
}

/// The files of the directory, the definitions each makes, and what each watched kind was
/// delivered.
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
    /// The watched kinds, by `(group, kind)`.
    feeds: HashMap<TypeKey, Arc<dyn KindFeed>>,
    /// Per object of a watched kind, the digest of the definition its indexes were given.
    delivered: HashMap<(TypeKey, ObjectKey), Digest>,
    /// Definitions that did not decode, so each bad version is logged and counted once.
    invalid: HashMap<(TypeKey, ObjectKey), Digest>,
    metrics: IndexMetrics,
}

struct LoadedFile {
    /// Size, modification time and inode when last read: an unchanged stamp skips re-reading (and
    /// re-hashing) a large file on a re-list.
    stamp: Option<Stamp>,
    content_hash: u64,
    objects: Vec<(TypeKey, ObjectKey, Digest)>,
}

/// A file's size, modification time and inode. The inode tells a symlink that now points
/// to another file (a ConfigMap volume's update) even when size and time match.
type Stamp = (u64, std::time::SystemTime, u64);

/// The files defining one object and the digest of their definition of it, in path order.
type Definitions = Vec<(PathBuf, Digest)>;
/// Objects whose definitions were touched during one read, with the definition served before:
/// an object moved from one file to another within a read is no change.
type Touched = HashMap<(TypeKey, ObjectKey), Option<Digest>>;
/// Objects whose served definition changed during one read: the file and digest of the new
/// one, or `None` when none is left.
type Changes = Vec<(TypeKey, ObjectKey, Option<(PathBuf, Digest)>)>;
/// The objects of watched kinds decoded during one read, by key and digest.
type Decoded = HashMap<(TypeKey, ObjectKey, Digest), Result<AnyObject, DecodeError>>;

// === impl OfflineSource ===

impl OfflineSource {
    /// The state directory `dir`. Errors when it is not a directory that can be read; bad files
    /// inside it are skipped when it is read.
    pub fn new(dir: impl Into<PathBuf>, metrics: IndexMetrics) -> Result<Self, OfflineError> {
        let dir = dir.into();
        let meta = std::fs::metadata(&dir).map_err(|source| OfflineError::Dir {
            path: dir.clone(),
            source,
        })?;
        if !meta.is_dir() {
            return Err(OfflineError::NotADirectory(dir));
        }
        Ok(Self { dir, metrics })
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Reads the directory and delivers every kind of `feeds` its initial `Reset` before
    /// returning, then follows the directory in a task (the handle) that delivers the changes
    /// of each later read. Must be called within a Tokio runtime.
    ///
    /// When the file-change watcher cannot be set up (inotify limits), the directory is served
    /// as first read and a warning is logged.
    pub async fn start(&self, feeds: Vec<Arc<dyn KindFeed>>) -> tokio::task::JoinHandle<()> {
        let dir = self.dir.clone();
        let mut state = StateDir::new(dir.clone(), feeds, self.metrics.clone());
        // Reading and parsing block: a huge or hostile file must not stall the runtime.
        let state = tokio::task::spawn_blocking(move || {
            let (changes, decoded) = state.rescan();
            state.deliver_initial(changes, decoded);
            state
        })
        .await;
        let state = match state {
            Ok(state) => state,
            Err(error) => {
                tracing::error!(%error, "reading the cluster state directory failed; nothing is served");
                return tokio::spawn(async {});
            }
        };

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
        tokio::spawn(async move {
            // The watcher lives as long as this task.
            let mut watcher = watcher;
            let mut watched = dir_inode(&dir);
            let mut state = state;
            let mut retry_after = RETRY_MIN;
            loop {
                let retry = !state.retry.is_empty() || state.relist;
                tokio::select! {
                    _ = changed.notified() => {}
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
                let read = tokio::task::spawn_blocking(move || {
                    let (changes, decoded) = if todo.rescan {
                        state.rescan()
                    } else {
                        state.refresh(&todo.paths)
                    };
                    state.metrics.offline_reloads.inc();
                    tracing::debug!(dir = %state.dir.display(), changed = changes.len(), "cluster state directory re-read");
                    (state, changes, decoded)
                })
                .await;
                let (next, changes, decoded) = match read {
                    Ok(read) => read,
                    Err(error) => {
                        tracing::error!(%error, "reading the cluster state directory failed; changes will not be seen");
                        return;
                    }
                };
                state = next;
                if state.retry.is_empty() && !state.relist {
                    retry_after = RETRY_MIN;
                }
                // A directory deleted and recreated, or moved away and replaced, is a new
                // inode: the watch went with the old one. Watched again before the indexes
                // hear of what was read, so that no edit made after that is missed.
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
                if changes.is_empty() {
                    continue;
                }
                // Applying the changes recomputes the views they touch: not on a runtime thread.
                let delivered = tokio::task::spawn_blocking(move || {
                    state.deliver_changes(changes, decoded);
                    state
                })
                .await;
                match delivered {
                    Ok(next) => state = next,
                    Err(error) => {
                        tracing::error!(%error, "applying the cluster state directory failed; changes will not be seen");
                        return;
                    }
                }
            }
        })
    }
}

// === impl StateDir ===

impl StateDir {
    fn new(dir: PathBuf, feeds: Vec<Arc<dyn KindFeed>>, metrics: IndexMetrics) -> Self {
        let feeds = feeds
            .into_iter()
            .map(|feed| {
                let (group, kind) = feed.type_key();
                ((group.to_string(), kind.to_string()), feed)
            })
            .collect();
        Self {
            dir,
            files: BTreeMap::new(),
            rejected: BTreeMap::new(),
            unreadable: BTreeSet::new(),
            retry: BTreeSet::new(),
            relist: false,
            inode: None,
            defs: HashMap::new(),
            feeds,
            delivered: HashMap::new(),
            invalid: HashMap::new(),
            metrics,
        }
    }

    /// Re-lists the directory and re-reads the files whose size or modification time changed.
    /// Returns the objects whose served definition changed, and the documents decoded.
    fn rescan(&mut self) -> (Changes, Decoded) {
        let mut changes = Touched::new();
        let mut decoded = Decoded::new();
        let (paths, unreadable) = match manifest_paths(&self.dir) {
            Ok(listed) => listed,
            Err(error) => {
                // Moved away or unmounted: re-reading the files would find none of them and
                // withdraw everything, so what was read stands until the directory is back.
                if !self.relist {
                    tracing::warn!(dir = %self.dir.display(), %error, "cannot list the cluster state directory; keeping what was read before until it can be");
                }
                self.relist = true;
                return (Changes::new(), decoded);
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
            self.read_file(path, true, &mut changes, &mut decoded);
        }
        (self.changes(changes), decoded)
    }

    /// Re-reads the files at `paths` (created, changed, removed or renamed; paths that are not
    /// manifests are ignored). Returns the objects whose served definition changed, and the
    /// documents decoded.
    fn refresh(&mut self, paths: &BTreeSet<PathBuf>) -> (Changes, Decoded) {
        // Moved away, deleted or replaced since it was listed: notifications from the old
        // directory name files that are not (or no longer) at these paths, and forgetting them
        // would withdraw objects the directory still defines.
        if self.relist || dir_inode(&self.dir) != self.inode {
            return self.rescan();
        }
        let mut changes = Touched::new();
        let mut decoded = Decoded::new();
        for path in paths.iter().filter(|p| is_manifest_name(p)) {
            match std::fs::metadata(path) {
                Ok(meta) if meta.is_file() => {
                    self.read_file(path, false, &mut changes, &mut decoded)
                }
                // A dangling or looping symlink, or a directory.
                Ok(_) => self.mark_unreadable(path, &mut changes),
                Err(_) if std::fs::symlink_metadata(path).is_ok() => {
                    self.mark_unreadable(path, &mut changes)
                }
                Err(_) => self.forget(&path.clone(), &mut changes),
            }
        }
        (self.changes(changes), decoded)
    }

    /// The touched objects whose served definition differs from the one served before.
    fn changes(&self, touched: Touched) -> Changes {
        let mut changes = Changes::new();
        for (key, before) in touched {
            let after = self.defs.get(&key).and_then(|defs| defs.first()).cloned();
            if before != after.as_ref().map(|(_, digest)| *digest) {
                changes.push((key.0, key.1, after));
            }
        }
        changes
    }

    /// Reads one regular file and serves its objects, unless its contents did not change.
    /// `trust_stamp`: an unchanged size, modification time and inode mean unchanged contents (on a
    /// re-list; a file named by a notification is read, as its time may not have ticked).
    /// Documents of watched kinds that the file did not define before are decoded into
    /// `decoded`.
    fn read_file(
        &mut self,
        path: &Path,
        trust_stamp: bool,
        changes: &mut Touched,
        decoded: &mut Decoded,
    ) {
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
            Ok(documents) => {
                self.rejected.remove(path);
                let before: HashMap<(&TypeKey, &ObjectKey), Digest> = self
                    .files
                    .get(path)
                    .into_iter()
                    .flat_map(|f| &f.objects)
                    .map(|(t, k, d)| ((t, k), *d))
                    .collect();
                let mut objects = Vec::with_capacity(documents.len());
                let mut fresh = Vec::new();
                for document in documents {
                    let Some((type_key, obj_key)) = object_keys(&document) else {
                        continue;
                    };
                    let digest = digest(&document);
                    // Only what the file did not define before may change what is served.
                    if before.get(&(&type_key, &obj_key)) != Some(&digest)
                        && let Some(feed) = self.feeds.get(&type_key)
                    {
                        let object = feed.decode(&document);
                        fresh.push(((type_key.clone(), obj_key.clone(), digest), object));
                    }
                    objects.push((type_key, obj_key, digest));
                }
                drop(before);
                decoded.extend(fresh);
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
        let mut old_by_key: HashMap<(&TypeKey, &ObjectKey), Vec<Digest>> = HashMap::new();
        for (type_key, obj_key, digest) in old.iter().flat_map(|f| &f.objects) {
            old_by_key
                .entry((type_key, obj_key))
                .or_default()
                .push(*digest);
        }
        let mut new_by_key: HashMap<(TypeKey, ObjectKey), Vec<Digest>> = HashMap::new();
        for (type_key, obj_key, digest) in file.iter().flat_map(|f| &f.objects) {
            new_by_key
                .entry((type_key.clone(), obj_key.clone()))
                .or_default()
                .push(*digest);
        }
        let mut touched: Vec<(TypeKey, ObjectKey)> = Vec::new();
        for (&(type_key, obj_key), olds) in &old_by_key {
            let key = (type_key.clone(), obj_key.clone());
            if new_by_key.get(&key) != Some(olds) {
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
            let before = defs.first().map(|(_, d)| *d);
            defs.retain(|(p, _)| p != path);
            if let Some(news) = new_by_key.remove(&key) {
                // Definitions stay in path order; several in one file keep their file order.
                let at = defs.partition_point(|(p, _)| p.as_path() < path);
                defs.splice(at..at, news.into_iter().map(|d| (path.to_path_buf(), d)));
            }
            if let Some((first_path, first)) = defs.first()
                && let Some((ignored, _)) = defs.iter().find(|(_, d)| d != first)
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

    /// Delivers the first read: a `Reset` of every watched kind, with the objects whose served
    /// definition decodes.
    fn deliver_initial(&mut self, changes: Changes, mut decoded: Decoded) {
        let mut resets: HashMap<TypeKey, Vec<AnyObject>> =
            self.feeds.keys().map(|k| (k.clone(), Vec::new())).collect();
        for (type_key, obj_key, served) in changes {
            let Some((path, digest)) = served else {
                continue;
            };
            if !self.feeds.contains_key(&type_key) {
                continue;
            }
            if let Some(object) =
                self.served_object(&mut decoded, &type_key, &obj_key, &path, digest)
            {
                self.delivered.insert((type_key.clone(), obj_key), digest);
                resets.entry(type_key).or_default().push(object);
            }
        }
        for (type_key, objects) in resets {
            if let Some(feed) = self.feeds.get(&type_key) {
                feed.deliver(vec![Event::Reset(objects)]);
            }
        }
    }

    /// Delivers the changes of a later read: an `Apply` of each object of a watched kind whose
    /// served definition changed and decodes, a `Delete` of each one no longer defined (or, for
    /// kinds whose invalid updates remove, no longer valid). Kinds are delivered one after
    /// another, as a cluster's watches would.
    fn deliver_changes(&mut self, changes: Changes, mut decoded: Decoded) {
        let mut events: BTreeMap<TypeKey, Vec<Event<AnyObject>>> = BTreeMap::new();
        for (type_key, obj_key, served) in changes {
            let Some(feed) = self.feeds.get(&type_key).cloned() else {
                continue;
            };
            let key = (type_key.clone(), obj_key.clone());
            let event = match served {
                Some((_, digest)) if self.delivered.get(&key) == Some(&digest) => {
                    // Back to the version delivered: a bad version seen meanwhile is news again.
                    self.invalid.remove(&key);
                    None
                }
                Some((path, digest)) => {
                    match self.served_object(&mut decoded, &type_key, &obj_key, &path, digest) {
                        Some(object) => {
                            self.delivered.insert(key, digest);
                            Some(Event::Apply(object))
                        }
                        None if feed.invalid_removes() && self.delivered.remove(&key).is_some() => {
                            Some(Event::Delete(object_ref(&obj_key)))
                        }
                        // A bad new version keeps the last good one.
                        None => None,
                    }
                }
                None => {
                    self.invalid.remove(&key);
                    self.delivered
                        .remove(&key)
                        .map(|_| Event::Delete(object_ref(&obj_key)))
                }
            };
            if let Some(event) = event {
                events.entry(type_key).or_default().push(event);
            }
        }
        for (type_key, events) in events {
            let Some(feed) = self.feeds.get(&type_key) else {
                continue;
            };
            // Applies first, then deletes: an object moved between keys is never missing in
            // between. The kind's indexes apply the whole batch at once.
            let (deletes, applies): (Vec<_>, Vec<_>) = events
                .into_iter()
                .partition(|e| matches!(e, Event::Delete(_)));
            feed.deliver(applies.into_iter().chain(deletes).collect());
        }
    }

    /// The object of the served definition `(path, digest)` of `obj_key`: decoded during this
    /// read, else decoded again from its file (a conflict's next definition, now served). One
    /// that does not decode is logged, with its file, and counted once per version.
    fn served_object(
        &mut self,
        decoded: &mut Decoded,
        type_key: &TypeKey,
        obj_key: &ObjectKey,
        path: &Path,
        digest: Digest,
    ) -> Option<AnyObject> {
        let feed = self.feeds.get(type_key)?.clone();
        let result = match decoded.remove(&(type_key.clone(), obj_key.clone(), digest)) {
            Some(result) => result,
            None => decode_from_file(&*feed, path, type_key, obj_key, digest)?,
        };
        let key = (type_key.clone(), obj_key.clone());
        match result {
            Ok(object) => {
                self.invalid.remove(&key);
                Some(object)
            }
            Err(error) => {
                if self.invalid.insert(key, digest) != Some(digest) {
                    tracing::warn!(file = %path.display(), kind = %feed.label(), namespace = %obj_key.0, name = %obj_key.1, %error, "skipping object");
                    self.metrics.invalid_object(feed.label());
                }
                None
            }
        }
    }
}

/// Decodes the definition of `obj_key` with `digest` in the file at `path` again; `None` when
/// the file no longer holds it (it changed since, and a notification is on its way).
fn decode_from_file(
    feed: &dyn KindFeed,
    path: &Path,
    type_key: &TypeKey,
    obj_key: &ObjectKey,
    digest: Digest,
) -> Option<Result<AnyObject, DecodeError>> {
    let bytes = read_limited(path).ok()?;
    let documents = parse_manifests(path, &bytes).ok()?;
    documents
        .iter()
        .find(|d| {
            object_keys(d).is_some_and(|(t, k)| t == *type_key && k == *obj_key)
                && self::digest(d) == digest
        })
        .map(|d| feed.decode(d))
}

fn object_ref((namespace, name): &ObjectKey) -> ObjectRef {
    ObjectRef {
        namespace: namespace.clone(),
        name: name.clone(),
    }
}

/// A digest of a document's contents: equal for equal documents, whatever their key order or
/// formatting (maps are sorted in [`Value`]).
fn digest(document: &Value) -> Digest {
    fn feed(value: &Value, h: &mut impl Hasher) {
        std::mem::discriminant(value).hash(h);
        match value {
            Value::Null => {}
            Value::Bool(b) => b.hash(h),
            Value::Number(n) => n.to_string().hash(h),
            Value::String(s) => s.hash(h),
            Value::Array(items) => {
                items.len().hash(h);
                for item in items {
                    feed(item, h);
                }
            }
            Value::Object(map) => {
                map.len().hash(h);
                for (k, v) in map {
                    k.hash(h);
                    feed(v, h);
                }
            }
        }
    }
    let mut h = std::collections::hash_map::DefaultHasher::new();
    feed(document, &mut h);
    h.finish()
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
    let docs: Vec<Value> = if path.extension().and_then(|e| e.to_str()) == Some("json") {
        serde_json::Deserializer::from_str(text)
            .into_iter::<Value>()
            .collect::<Result<_, _>>()?
    } else {
        linkerd_k8s_api::yaml::from_documents(text)?
    };
    let mut objects = Vec::new();
    for (index, doc) in docs.into_iter().enumerate() {
        match doc {
            Value::Null => {}
            Value::Object(mut map) => {
                let is_list = map
                    .get("kind")
                    .and_then(Value::as_str)
                    .is_some_and(|k| k == "List" || k.ends_with("List"))
                    && map.contains_key("items");
                if !is_list {
                    objects.push(Value::Object(map));
                    continue;
                }
                match map.remove("items") {
                    Some(Value::Array(items)) => objects.extend(items),
                    Some(Value::Null) | None => {}
                    Some(_) => {
                        tracing::warn!(
                            file = %path.display(),
                            document = index + 1,
                            "skipping a List whose `items` is not a sequence"
                        );
                    }
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
