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
//! identically in two files is one object; differently, the last file (by path) wins and the
//! conflict is logged and counted, by the read that makes or leaves it (`new_conflict`). Files
//! larger than [`MAX_FILE_BYTES`], and YAML files nested deeper than [`MAX_NESTING`] are
//! refused.

use std::{
    collections::{BTreeMap, BTreeSet},
    io::Read,
    path::{Path, PathBuf},
    sync::{Arc, Mutex},
    time::Duration,
};
use tokio::sync::Notify;
// Keyed by objects' ids, looked up several times per object of a load: foldhash rather than
// SipHash (the keys come from the state directory, whose writer is trusted).
use foldhash::{HashMap, HashMapExt};
use linkerd_k8s_api::names;

pub use self::manifest::{Documents, Manifest, parse_manifests};
use super::{AnyObject, Event, KindFeed};
use crate::{
    metrics::{IndexMetrics, SkippedObject, deferring_skips},
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
/// [`RETRY_MAX`]. A linked cluster's start that failed for a reason that may clear is retried
/// as often (`crate::multicluster`).
pub(crate) const RETRY_MIN: Duration = Duration::from_secs(1);
pub(crate) const RETRY_MAX: Duration = Duration::from_secs(30);

/// The largest state file read, in bytes (64 MiB); a larger one is refused as a whole.
pub const MAX_FILE_BYTES: u64 = 64 << 20;
/// The deepest nesting of `[` / `{` accepted in a YAML state file. The YAML parser's work grows
/// with the square of the flow nesting, so a file of 100,000 `[` would take minutes; serde
/// refuses anything deeper than 128 levels anyway, so no valid manifest is lost. JSON needs no
/// such bound: it is split into objects without recursion.
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
    #[error("not UTF-8: {0}")]
    NotUtf8(std::str::Utf8Error),
    #[error("invalid YAML: {}", yaml_message(.0))]
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

/// serde-saphyr's message on one line, as a log line holds it: with the line and column but
/// without the excerpt of the file it draws under them, and without its advice to the program
/// (an option of the decoder, which the user of a state directory cannot set).
fn yaml_message(error: &serde_saphyr::Error) -> String {
    const ADVICE: [&str; 3] = [
        ", set DuplicateKeyPolicy in Options if acceptable",
        "; use Option<String>",
        ". If you just use !!binary for documentation/annotation, set \
         ignore_binary_tag_for_string in Options",
    ];
    let message = error.without_snippet().to_string();
    ADVICE
        .iter()
        .fold(message, |message, advice| message.replace(advice, ""))
}

/// `(group, kind)` of an object, e.g. `("discovery.k8s.io", "EndpointSlice")`; the version is not
/// part of it, so an object read back at another version is the same object.
type TypeKey = (String, String);
/// `(namespace, name)`; namespace is `""` for cluster-scoped objects.
type ObjectKey = (String, String);
/// A digest of one definition of an object: equal definitions have equal digests.
type Digest = u64;
/// One object of the directory, allocated once and shared by every file that defines it and by
/// what was delivered: with tens of thousands of objects, copies of four strings each add up.
type ObjectId = Arc<ObjectName>;

/// An object's kind and key, with their hash computed once: a read looks each object up in
/// about ten maps, and hashing four strings each time (a cache miss per string) was a fifth of
/// the first read's serial part on 5,000 x 10.
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
struct ObjectName {
    /// First, so that unequal names mostly differ at the first field compared.
    hash: u64,
    type_key: TypeKey,
    key: ObjectKey,
}

impl ObjectName {
    fn new(type_key: TypeKey, key: ObjectKey) -> Self {
        // Fixed seed: the maps holding these hash the hash again with their own random seed.
        let hash = std::hash::BuildHasher::hash_one(
            &foldhash::quality::FixedState::with_seed(0x6f62_6a65_6374_2d69),
            (&type_key, &key),
        );
        Self {
            hash,
            type_key,
            key,
        }
    }
}

impl std::hash::Hash for ObjectName {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        state.write_u64(self.hash);
    }
}

/// A state directory, ready to be read and followed once the kinds to serve are known
/// ([`OfflineSource::start`]).
#[derive(Clone)]
pub struct OfflineSource {
    dir: PathBuf,
    metrics: IndexMetrics,
}

/// `dir` made absolute against the working directory, its links kept (a re-pointed link is
/// followed). notify names changed files by absolute paths: a relative directory matched none
/// of them, so each change re-read the whole directory (tester finding).
fn absolute(dir: PathBuf) -> PathBuf {
    std::path::absolute(&dir).unwrap_or(dir)
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
    /// Files whose last read could not be used (it failed, or found the file empty), so that
    /// what is served of them comes from an earlier read: `offline_stale_files`.
    stale: BTreeSet<PathBuf>,
    /// The last listing of the directory failed: list it again later.
    relist: bool,
    /// The directory's inode when it was last listed.
    inode: Option<u64>,
    /// Manifests that are symlinks, with the paths their chain of links passes through
    /// ([`link_hops`]): a change at one of those is a change of the manifest, notified in
    /// another directory ([`Followed`]) or under another name.
    links: BTreeMap<PathBuf, Vec<PathBuf>>,
    /// Every definition of each object, the served one first: the last file's (in path order),
    /// and in that file its last definition, as `kubectl apply -f DIR` would leave the object.
    defs: HashMap<ObjectId, Definitions>,
    /// The watched kinds, by `(group, kind)`.
    feeds: HashMap<TypeKey, Arc<dyn KindFeed>>,
    /// Per object of a watched kind, the digest of the definition its indexes were given.
    delivered: HashMap<ObjectId, Digest>,
    /// Definitions that did not decode, so each bad version is logged and counted once.
    invalid: HashMap<ObjectId, Digest>,
    /// The objects whose definitions the current read changed: the file served before it
    /// and the files read, to report the conflicts it leaves once it is done
    /// ([`Self::report_conflicts`]).
    conflict_checks: HashMap<ObjectId, ConflictCheck>,
    /// Objects of watched kinds logged and skipped (invalid) since the first read began:
    /// what the first read's summary reports.
    skipped_objects: u64,
    metrics: IndexMetrics,
}

struct LoadedFile {
    /// Size, modification time and inode when last read: an unchanged stamp skips re-reading (and
    /// re-hashing) a large file on a re-list.
    stamp: Option<Stamp>,
    content_hash: u64,
    /// Its path, shared by the definitions it makes.
    path: Arc<Path>,
    objects: Vec<(ObjectId, Digest)>,
}

/// What reading one file found ([`StateDir::load`]), before the state changes.
enum Loaded {
    /// Not read (size, time and inode unchanged on a re-list), or the same bad contents as
    /// reported before.
    Unchanged,
    /// Removed between listing and reading.
    Gone,
    /// Could not be read or parsed; `retry`: for a reason other than its contents.
    Failed {
        error: FileError,
        retry: bool,
        content_hash: Option<u64>,
    },
    /// The contents served.
    Same { stamp: Option<Stamp> },
    /// Empty, while it defined objects.
    EmptyKept { content_hash: u64 },
    Parsed {
        file: LoadedFile,
        /// The objects of watched kinds that the file did not define before, decoded.
        fresh: Vec<((ObjectId, Digest), Result<AnyObject, DecodeError>)>,
        /// Objects of watched kinds skipped, each logged: no name, no namespace, or a name
        /// the API server would refuse.
        skipped: u64,
    },
}

impl Loaded {
    /// How many objects it decoded.
    fn fresh_len(&self) -> usize {
        match self {
            Self::Parsed { fresh, .. } => fresh.len(),
            _ => 0,
        }
    }
}

/// A file's size, modification time and inode. The inode tells a symlink that now points
/// to another file (a ConfigMap volume's update) even when size and time match.
type Stamp = (u64, std::time::SystemTime, u64);

/// The files defining one object and the digest of their definition of it, served first: in
/// reverse path order, and within one file in reverse order of definition.
type Definitions = Vec<(Arc<Path>, Digest)>;
/// The file that served an object before a read, and the files the read found it in.
type ConflictCheck = (Option<Arc<Path>>, Vec<Arc<Path>>);
/// Objects whose definitions were touched during one read, with the definition served before:
/// an object moved from one file to another within a read is no change.
type Touched = HashMap<ObjectId, Option<Digest>>;
/// Objects whose served definition changed during one read: the file and digest of the new
/// one, or `None` when none is left.
type Changes = Vec<(ObjectId, Option<(Arc<Path>, Digest)>)>;
/// The objects of watched kinds decoded during one read, by key and digest.
type Decoded = HashMap<(ObjectId, Digest), Result<AnyObject, DecodeError>>;

// === impl OfflineSource ===

impl OfflineSource {
    /// The state directory `dir`. Errors when it is not a directory that can be read; bad files
    /// inside it are skipped when it is read.
    pub fn new(dir: impl Into<PathBuf>, metrics: IndexMetrics) -> Result<Self, OfflineError> {
        let dir = absolute(dir.into());
        let meta = std::fs::metadata(&dir).map_err(|source| OfflineError::Dir {
            path: dir.clone(),
            source,
        })?;
        if !meta.is_dir() {
            return Err(OfflineError::NotADirectory(dir));
        }
        Ok(Self { dir, metrics })
    }

    /// The state directory `dir`, which need not exist yet (a linked cluster's, named before
    /// it is copied in): until it can be listed, [`Self::start`] delivers nothing, so its
    /// kinds are not ready. Errors when `dir` exists and is not a directory.
    pub fn awaiting(dir: impl Into<PathBuf>, metrics: IndexMetrics) -> Result<Self, OfflineError> {
        let dir = absolute(dir.into());
        match std::fs::metadata(&dir) {
            Ok(meta) if !meta.is_dir() => Err(OfflineError::NotADirectory(dir)),
            _ => Ok(Self { dir, metrics }),
        }
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Reads the directory and delivers every kind of `feeds` its initial `Reset` before
    /// returning, then follows the directory in a task (the handle) that delivers the changes
    /// of each later read. Must be called within a Tokio runtime.
    ///
    /// A directory that cannot be listed yet ([`Self::awaiting`]) is tried again by the task,
    /// after 1 s and then up to every 30 s; its kinds get their initial `Reset` once it can be.
    ///
    /// When the file-change watcher cannot be set up (inotify limits), the directory is served
    /// as first read and a warning is logged.
    ///
    /// What the reads log is in the caller's span (a linked cluster's names the cluster).
    pub async fn start(&self, feeds: Vec<Arc<dyn KindFeed>>) -> tokio::task::JoinHandle<()> {
        use tracing::Instrument;
        let span = tracing::Span::current();
        let dir = self.dir.clone();
        self.metrics.expose_offline();
        let mut state = StateDir::new(dir.clone(), feeds, self.metrics.clone());
        let (state, listed) = match std::fs::metadata(&dir) {
            Ok(_) => match read_initial(state, span.clone()).await {
                Some(read) => read,
                None => return tokio::spawn(async {}),
            },
            Err(error) => {
                tracing::warn!(dir = %dir.display(), %error, "the cluster state directory is not there yet; its objects are served once it is");
                // Rescans say when it is listed, not that it went.
                state.relist = true;
                (state, false)
            }
        };

        let changed = Arc::new(Notify::new());
        let pending = Arc::new(Mutex::new(Pending::default()));
        let followed = Arc::new(Mutex::new(Followed::default()));
        let watcher = {
            let (changed, pending, watched) = (changed.clone(), pending.clone(), dir.clone());
            let callback_followed = followed.clone();
            let mut watcher =
                notify::recommended_watcher(move |res: notify::Result<notify::Event>| {
                    let mut p = pending.lock().unwrap_or_else(|e| e.into_inner());
                    match res {
                        Ok(event) if is_content_change(&event.kind) => {
                            if event.need_rescan() || event.paths.is_empty() {
                                p.rescan = true;
                            }
                            let followed =
                                callback_followed.lock().unwrap_or_else(|e| e.into_inner());
                            for path in event.paths {
                                if path.parent() == Some(watched.as_path()) {
                                    if is_atomic_writer_entry(&path) {
                                        p.rescan = true;
                                    } else {
                                        // Links to it are read again too, under their names.
                                        if let Some(links) = followed.manifests_of(&path, true) {
                                            p.paths.extend(links.iter().cloned());
                                        }
                                        p.paths.insert(path);
                                    }
                                } else if path == watched {
                                    p.rescan = true;
                                } else if let Some(links) = followed.manifests_of(&path, false) {
                                    p.paths.extend(links.iter().cloned());
                                } else if let Some(hop) = followed.is_state_dir_hop(&path) {
                                    // The state directory re-pointed or replaced; else a
                                    // neighbour of it, which changes nothing here.
                                    p.rescan |= hop;
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
            if listed && let Ok(w) = watcher.as_mut() {
                use notify::Watcher;
                if let Err(error) = w.watch(&dir, notify::RecursiveMode::NonRecursive) {
                    tracing::warn!(dir = %dir.display(), %error, "cannot watch the cluster state directory; changes will not be seen");
                }
                Followed::follow(&followed, &state.dir, &state.links, w);
            }
            watcher
                .inspect_err(|error| tracing::warn!(%error, "cannot watch the cluster state directory; changes will not be seen"))
                .ok()
        };
        let task_span = span.clone();
        let task = async move {
            // The watcher lives as long as this task.
            let mut watcher = watcher;
            // The directory the watch was put on, as first listed (not as it is when the task
            // first runs: it may have moved away by then).
            let mut watched = state.inode;
            let mut state = state;
            let mut retry_after = RETRY_MIN;
            if !listed {
                // Waits for the directory, then reads it as `start` would have; the loop below
                // watches it once it has read it (`watched` is none).
                loop {
                    tokio::time::sleep(retry_after).await;
                    retry_after = (retry_after * 2).min(RETRY_MAX);
                    match read_initial(state, tracing::Span::current()).await {
                        Some((next, true)) => {
                            state = next;
                            break;
                        }
                        Some((next, false)) => state = next,
                        None => return,
                    }
                }
                retry_after = RETRY_MIN;
                pending.lock().unwrap_or_else(|e| e.into_inner()).rescan = true;
                changed.notify_one();
            }
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
                // Only files that are not manifests changed (notes, an editor's swap file):
                // there is nothing to read.
                if !todo.rescan && !todo.paths.iter().any(|p| is_manifest_name(p)) {
                    continue;
                }
                let in_span = tracing::Span::current();
                let rescanned = todo.rescan;
                let read = tokio::task::spawn_blocking(move || {
                    let _entered = in_span.enter();
                    let (changes, decoded) = if todo.rescan {
                        state.rescan()
                    } else {
                        state.refresh(&todo.paths)
                    };
                    // A retry that could not list the directory read nothing.
                    if !state.relist {
                        state.metrics.offline_reloads.inc();
                    }
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
                // hear of what was read, so that no edit made after that is missed. The same
                // directory is watched again after every full read (adding a watch it has is
                // a no-op): moved away under a watched parent (a link's target's directory),
                // `notify` dropped its watch, and moved back it is the same inode.
                if !state.relist
                    && let Some(w) = watcher.as_mut()
                {
                    use notify::Watcher;
                    let now = state.inode;
                    if now != watched {
                        let _ = w.unwatch(&state.dir);
                    }
                    if now != watched || rescanned {
                        match w.watch(&state.dir, notify::RecursiveMode::NonRecursive) {
                            Ok(()) if now != watched => {
                                watched = now;
                                // An edit between this read and the new watch raised no
                                // event: read once more, now that the next one will (a
                                // directory that appeared or was replaced, then edited at
                                // once, kept its first version; test flaky under load).
                                pending.lock().unwrap_or_else(|e| e.into_inner()).rescan = true;
                                changed.notify_one();
                            }
                            Ok(()) => {}
                            Err(error) => {
                                tracing::warn!(dir = %state.dir.display(), %error, "cannot watch the cluster state directory again; changes will not be seen")
                            }
                        }
                    }
                    Followed::follow(&followed, &state.dir, &state.links, w);
                }
                if changes.is_empty() {
                    continue;
                }
                // Applying the changes recomputes the views they touch: not on a runtime thread.
                let in_span = tracing::Span::current();
                let delivered = tokio::task::spawn_blocking(move || {
                    let _entered = in_span.enter();
                    state.deliver_changes(changes, decoded);
                    super::release_freed_memory();
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
        };
        tokio::spawn(task.instrument(task_span))
    }
}

/// The first read of `state`'s directory, off the runtime (reading and parsing block: a huge
/// or hostile file must not stall it): every kind's initial `Reset` when the directory could be
/// listed (`true`), nothing when it could not (`false`, the state to try again with). `None`
/// when the read failed (it panicked), logged.
async fn read_initial(mut state: StateDir, span: tracing::Span) -> Option<(StateDir, bool)> {
    let read = tokio::task::spawn_blocking(move || {
        let _entered = span.enter();
        let listed = state.read_first();
        (state, listed)
    })
    .await;
    read.inspect_err(|error| {
        tracing::error!(%error, "reading the cluster state directory failed; nothing is served")
    })
    .ok()
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
            stale: BTreeSet::new(),
            relist: false,
            inode: None,
            links: BTreeMap::new(),
            defs: HashMap::new(),
            feeds,
            delivered: HashMap::new(),
            invalid: HashMap::new(),
            conflict_checks: HashMap::new(),
            skipped_objects: 0,
            metrics,
        }
    }

    /// The first read: every file parsed, then each watched kind's first `Reset` delivered.
    /// `false` when the directory could not be listed (nothing is delivered). Logs what it read
    /// and where the time went: parsing (both cores, bound by the files' size and format) or
    /// indexing (one thread, bound by the objects' count). `files`, `bytes` and `objects` count
    /// what was read; files refused (not parsed, or not regular files) and objects of watched
    /// kinds skipped as invalid are counted apart, each also logged on its own.
    fn read_first(&mut self) -> bool {
        let started = std::time::Instant::now();
        let (changes, decoded) = self.rescan();
        if self.relist {
            return false;
        }
        let parsed = started.elapsed();
        self.deliver_initial(changes, decoded);
        super::release_freed_memory();
        let bytes: u64 = self
            .files
            .values()
            .filter_map(|f| f.stamp)
            .map(|s| s.0)
            .sum();
        tracing::info!(
            dir = %self.dir.display(),
            files = self.files.len(),
            bytes,
            objects = self.defs.len(),
            served = self.delivered.len(),
            refused_files = self.rejected.len() + self.unreadable.len(),
            skipped_objects = self.skipped_objects,
            parse_ms = parsed.as_millis() as u64,
            index_ms = (started.elapsed() - parsed).as_millis() as u64,
            "cluster state directory read"
        );
        true
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
                // A linked cluster's directory plays its API server: shown unreachable.
                self.metrics.api_answered(false);
                self.report_stale_files();
                return (Changes::new(), decoded);
            }
        };
        self.metrics.api_answered(true);
        if std::mem::take(&mut self.relist) {
            // Never listed before: a directory that was missing at start has appeared.
            if self.inode.is_some() {
                tracing::info!(dir = %self.dir.display(), "cluster state directory listed again");
            } else {
                tracing::info!(dir = %self.dir.display(), "cluster state directory appeared and was listed");
            }
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
        let files: Vec<&Path> = paths.iter().map(PathBuf::as_path).collect();
        let loaded = self.load_all(&files, true);
        // Sized once: growing it rehashes every object decoded so far.
        decoded.reserve(loaded.iter().map(Loaded::fresh_len).sum());
        for (path, loaded) in files.iter().zip(loaded) {
            self.apply(path, loaded, &mut changes, &mut decoded);
        }
        self.links = paths
            .iter()
            .chain(&unreadable)
            .filter_map(|p| Some((p.clone(), link_hops(p)?)))
            .collect();
        self.report_conflicts();
        self.report_stale_files();
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
        let named: Vec<(&Path, Option<std::fs::Metadata>)> = paths
            .iter()
            .filter(|p| is_manifest_name(p))
            .map(|p| (p.as_path(), std::fs::metadata(p).ok()))
            .collect();
        let files: Vec<&Path> = named
            .iter()
            .filter(|(_, meta)| meta.as_ref().is_some_and(|m| m.is_file()))
            .map(|(p, _)| *p)
            .collect();
        let mut loaded = self.load_all(&files, false).into_iter();
        for (path, _) in &named {
            match link_hops(path) {
                Some(hops) => self.links.insert(path.to_path_buf(), hops),
                None => self.links.remove(*path),
            };
        }
        // Applied in path order, as they would be read one after another.
        for (path, meta) in named {
            match meta {
                Some(meta) if meta.is_file() => {
                    if let Some(loaded) = loaded.next() {
                        self.apply(path, loaded, &mut changes, &mut decoded);
                    }
                }
                // A directory, a FIFO or socket, a dangling or looping symlink.
                Some(_) => self.mark_unreadable(path, &mut changes),
                None if std::fs::symlink_metadata(path).is_ok() => {
                    self.mark_unreadable(path, &mut changes)
                }
                None => self.forget(path, &mut changes),
            }
        }
        self.report_conflicts();
        self.report_stale_files();
        (self.changes(changes), decoded)
    }

    /// The touched objects whose served definition differs from the one served before.
    fn changes(&self, touched: Touched) -> Changes {
        let mut changes = Changes::new();
        for (key, before) in touched {
            let after = self.defs.get(&key).and_then(|defs| defs.first()).cloned();
            if before != after.as_ref().map(|(_, digest)| *digest) {
                changes.push((key, after));
            }
        }
        changes
    }

    /// Reads the regular files at `paths` in parallel (one thread per core), as [`Self::load`]
    /// does, in the order given.
    fn load_all(&self, paths: &[&Path], trust_stamp: bool) -> Vec<Loaded> {
        let threads = std::thread::available_parallelism()
            .map_or(1, std::num::NonZero::get)
            .min(paths.len());
        if threads <= 1 {
            let mut buffer = Vec::new();
            return paths
                .iter()
                .map(|p| self.load(p, trust_stamp, &mut buffer))
                .collect();
        }
        let next = std::sync::atomic::AtomicUsize::new(0);
        let mut loaded: Vec<Option<Loaded>> = paths.iter().map(|_| None).collect();
        // The workers log where the caller logs (its subscriber may be scoped to its thread),
        // in its span (a linked cluster's names the cluster).
        let dispatch = tracing::dispatcher::get_default(Clone::clone);
        let span = tracing::Span::current();
        std::thread::scope(|scope| {
            let workers: Vec<_> = (0..threads)
                .map(|_| {
                    scope.spawn(|| {
                        let _logs = tracing::dispatcher::set_default(&dispatch);
                        let _span = span.enter();
                        let (mut done, mut buffer) = (Vec::new(), Vec::new());
                        loop {
                            let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            let Some(path) = paths.get(i) else { break };
                            done.push((i, self.load(path, trust_stamp, &mut buffer)));
                        }
                        done
                    })
                })
                .collect();
            for worker in workers {
                match worker.join() {
                    Ok(done) => done.into_iter().for_each(|(i, l)| loaded[i] = Some(l)),
                    Err(panic) => std::panic::resume_unwind(panic),
                }
            }
        });
        loaded
            .into_iter()
            .map(|l| l.unwrap_or(Loaded::Unchanged))
            .collect()
    }

    /// Reads one regular file, unless its contents did not change, and decodes the objects of
    /// watched kinds that it did not define before. Changes nothing: [`Self::apply`] does.
    /// `trust_stamp`: an unchanged size, modification time and inode mean unchanged contents (on
    /// a re-list; a file named by a notification is read, as its time may not have ticked).
    /// The file is read into `buffer`, which the caller reuses for the next file: a fresh
    /// allocation per file of tens of MiB costs a page fault per page.
    fn load(&self, path: &Path, trust_stamp: bool, buffer: &mut Vec<u8>) -> Loaded {
        let stamp = std::fs::metadata(path)
            .and_then(|m| {
                use std::os::unix::fs::MetadataExt;
                Ok((m.len(), m.modified()?, m.ino()))
            })
            .ok();
        let served = self.files.get(path);
        if trust_stamp && stamp.is_some() && served.is_some_and(|f| f.stamp == stamp) {
            return Loaded::Unchanged;
        }
        let written_len = match read_state_file(path, buffer) {
            Ok(len) => len,
            // Removed between listing and reading: it is simply gone.
            Err(FileError::Read(error)) if error.kind() == std::io::ErrorKind::NotFound => {
                return Loaded::Gone;
            }
            Err(error) => {
                return Loaded::Failed {
                    retry: matches!(error, FileError::Read(_)),
                    error,
                    content_hash: None,
                };
            }
        };
        let content_hash = manifest::content_hash(buffer, written_len == 0);
        if served.is_some_and(|f| f.content_hash == content_hash) {
            return Loaded::Same { stamp };
        }
        if written_len == 0 && served.is_some_and(|f| !f.objects.is_empty()) {
            return Loaded::EmptyKept { content_hash };
        }
        if self.rejected.get(path) == Some(&content_hash) {
            return Loaded::Unchanged;
        }
        let documents = match Documents::parse_read(path, buffer) {
            Ok(documents) => documents,
            Err(error) => {
                return Loaded::Failed {
                    error,
                    retry: false,
                    content_hash: Some(content_hash),
                };
            }
        };
        let before: HashMap<&ObjectId, Digest> = served
            .into_iter()
            .flat_map(|f| &f.objects)
            .map(|(id, d)| (id, *d))
            .collect();
        let mut skipped = 0;
        // An object of a served kind without a name is as invalid as one that does not decode.
        let mut nameless = |type_key: &TypeKey| {
            if let Some(feed) = self.feeds.get(type_key) {
                self.metrics.invalid_object(feed.label());
                skipped += 1;
            }
        };
        let manifests = match documents.manifests_with(path, &mut nameless) {
            Ok(manifests) => manifests,
            Err(error) => {
                return Loaded::Failed {
                    error,
                    retry: false,
                    content_hash: Some(content_hash),
                };
            }
        };
        let mut objects = Vec::new();
        let mut fresh = Vec::new();
        // What decoding logs (an address skipped in an object it keeps) names the file.
        let _file = tracing::warn_span!("state_file", file = %path.display()).entered();
        for m in manifests {
            let (mut namespace, name) = m.obj_key;
            match self.feeds.get(&m.type_key) {
                Some(feed) if feed.namespaced() && namespace.is_empty() => {
                    tracing::warn!(
                        kind = feed.label(),
                        %name,
                        "skipping an object without `metadata.namespace`: its kind is namespaced \
                         (`kubectl get -o yaml` writes it; add it to a hand-written manifest)"
                    );
                    self.metrics.invalid_object(feed.label());
                    skipped += 1;
                    continue;
                }
                // The API server ignores a cluster-scoped object's namespace, and the indexes
                // key such objects by name: with and without one, it is one object.
                Some(feed) if !feed.namespaced() => namespace.clear(),
                _ => {}
            }
            // No API server checked these names: one it would refuse is not served.
            if let Some(feed) = self.feeds.get(&m.type_key)
                && let Some(problem) = (!namespace.is_empty())
                    .then(|| names::namespace_problem(&namespace))
                    .flatten()
                    .or_else(|| names::name_problem(&m.type_key.0, &m.type_key.1, &name))
            {
                tracing::warn!(
                    kind = feed.label(),
                    %namespace,
                    %name,
                    "skipping an object the API server would refuse: {problem}"
                );
                self.metrics.invalid_object(feed.label());
                skipped += 1;
                continue;
            }
            let name = ObjectName::new(m.type_key, (namespace, name));
            // The object's id where the directory has one already.
            let id = match self.defs.get_key_value(&name) {
                Some((id, _)) => id.clone(),
                None => Arc::new(name),
            };
            // Only what the file did not define before may change what is served.
            if before.get(&id) != Some(&m.digest)
                && let Some(feed) = self.feeds.get(&id.type_key)
            {
                fresh.push(((id.clone(), m.digest), feed.decode_json(&m.json)));
            }
            objects.push((id, m.digest));
        }
        Loaded::Parsed {
            file: LoadedFile {
                stamp,
                content_hash,
                path: served.map_or_else(|| Arc::from(path), |f| f.path.clone()),
                objects,
            },
            fresh,
            skipped,
        }
    }

    /// Serves what [`Self::load`] found in the file at `path`, recording the objects touched
    /// in `changes` and the objects decoded in `decoded`.
    fn apply(&mut self, path: &Path, loaded: Loaded, changes: &mut Touched, decoded: &mut Decoded) {
        self.unreadable.remove(path);
        self.retry.remove(path);
        match loaded {
            Loaded::Unchanged => {}
            Loaded::Gone => self.forget(path, changes),
            Loaded::Failed {
                error,
                retry,
                content_hash,
            } => {
                if retry {
                    self.retry.insert(path.to_path_buf());
                }
                self.stale.insert(path.to_path_buf());
                self.file_error(path, error);
                if let Some(hash) = content_hash {
                    self.rejected.insert(path.to_path_buf(), hash);
                }
            }
            Loaded::Same { stamp } => {
                if let Some(file) = self.files.get_mut(path) {
                    file.stamp = stamp;
                }
                self.stale.remove(path);
                // Back to the contents served: a bad version seen meanwhile is news again.
                self.rejected.remove(path);
            }
            Loaded::EmptyKept { content_hash } => {
                self.stale.insert(path.to_path_buf());
                // `kubectl get -o yaml > file` and `cp` truncate, then write: an empty file
                // is most likely mid-write, and withdrawing its objects would tell every proxy
                // that their services are gone. Removing the file is how they are withdrawn.
                if self.rejected.insert(path.to_path_buf(), content_hash) != Some(content_hash) {
                    tracing::warn!(file = %path.display(), "cluster state file is empty; keeping its objects until it has contents again (remove the file to withdraw them)");
                }
            }
            Loaded::Parsed {
                file,
                fresh,
                skipped,
            } => {
                self.skipped_objects += skipped;
                self.rejected.remove(path);
                self.stale.remove(path);
                decoded.extend(fresh);
                self.replace(path, Some(file), changes);
            }
        }
    }

    /// The entry at `path` is gone: its objects are withdrawn (unless defined elsewhere too).
    fn forget(&mut self, path: &Path, changes: &mut Touched) {
        if let Some(file) = self.files.get(path) {
            // A withdrawal tells every proxy the objects are gone: say why.
            // Objects, not definitions: one defined twice in the file is one.
            let objects: BTreeSet<&ObjectId> = file.objects.iter().map(|(id, _)| id).collect();
            tracing::info!(file = %path.display(), objects = objects.len(), "cluster state file removed; withdrawing its objects (unless another file defines them)");
        }
        self.rejected.remove(path);
        self.unreadable.remove(path);
        self.retry.remove(path);
        self.stale.remove(path);
        self.replace(path, None, changes);
    }

    fn mark_unreadable(&mut self, path: &Path, changes: &mut Touched) {
        self.rejected.remove(path);
        self.retry.remove(path);
        self.stale.remove(path);
        self.replace(path, None, changes);
        if self.unreadable.insert(path.to_path_buf()) {
            tracing::warn!(file = %path.display(), "skipping cluster state entry that is not a regular file (a directory, a FIFO or socket, a dangling or looping symlink)");
            self.metrics.invalid_files.inc();
        }
    }

    /// Replaces the definitions of file `path` with those of `file` (none when `None`) and
    /// records the objects touched: O(objects of the two versions of the file), whatever else
    /// the directory holds.
    fn replace(&mut self, path: &Path, file: Option<LoadedFile>, changes: &mut Touched) {
        let old = self.files.remove(path);
        let mut old_by_key: HashMap<&ObjectId, Vec<Digest>> = HashMap::new();
        for (id, digest) in old.iter().flat_map(|f| &f.objects) {
            old_by_key.entry(id).or_default().push(*digest);
        }
        let mut new_by_key: HashMap<ObjectId, Vec<Digest>> = HashMap::new();
        for (id, digest) in file.iter().flat_map(|f| &f.objects) {
            new_by_key.entry(id.clone()).or_default().push(*digest);
        }
        let mut touched: Vec<ObjectId> = Vec::new();
        for (&id, olds) in &old_by_key {
            if new_by_key.get(id) != Some(olds) {
                touched.push(id.clone());
            }
        }
        for id in new_by_key.keys() {
            if !old_by_key.contains_key(id) {
                touched.push(id.clone());
            }
        }
        drop(old_by_key);
        let shared = file.as_ref().map(|f| f.path.clone());
        let this_file: Arc<Path> = shared.clone().unwrap_or_else(|| Arc::from(path));
        for key in touched {
            let defs = self.defs.entry(key.clone()).or_default();
            let served_before = defs.first().cloned();
            defs.retain(|(p, _)| **p != *path);
            if let Some(news) = new_by_key.remove(&key)
                && let Some(shared) = &shared
            {
                // Definitions stay in reverse path order; several in one file, in reverse
                // file order.
                let at = defs.partition_point(|(p, _)| **p > *path);
                defs.splice(at..at, news.into_iter().rev().map(|d| (shared.clone(), d)));
            }
            // Judged once the read has applied every file it read: files read together (two
            // links to one file, a file and a link to it) agree again only then.
            let check = self
                .conflict_checks
                .entry(key.clone())
                .or_insert_with(|| (served_before.as_ref().map(|(p, _)| p.clone()), Vec::new()));
            check.1.push(this_file.clone());
            if defs.is_empty() {
                self.defs.remove(&key);
            }
            changes.entry(key).or_insert(served_before.map(|(_, d)| d));
        }
        if let Some(file) = file {
            self.files.insert(path.to_path_buf(), file);
        }
    }

    /// Logs and counts the conflicts the files of this read made or left
    /// ([`Self::conflict_checks`]), once per object: the served file and every differing one.
    fn report_conflicts(&mut self) {
        for (key, (served_before, paths)) in std::mem::take(&mut self.conflict_checks) {
            let Some(defs) = self.defs.get(&key) else {
                continue;
            };
            let mut conflict: Option<(&Path, BTreeSet<&Path>)> = None;
            for path in &paths {
                if let Some((served, ignored)) = new_conflict(defs, path, served_before.as_deref())
                {
                    conflict
                        .get_or_insert_with(|| (served, BTreeSet::new()))
                        .1
                        .extend(ignored);
                }
            }
            let Some((served, ignored)) = conflict else {
                continue;
            };
            // Two definitions in one file (a List naming an object twice) are told apart
            // from two files, whose paths alone would say it.
            let what = if ignored.iter().all(|p| *p == served) {
                "object defined differently twice in one file; keeping its last definition"
            } else {
                "object defined differently in two files; keeping the last file's"
            };
            let ignored: Vec<String> = ignored.iter().map(|p| p.display().to_string()).collect();
            tracing::warn!(
                kind = %key.type_key.1, namespace = %key.key.0, name = %key.key.1,
                served = %served.display(), ignored = %ignored.join(", "),
                "{what}"
            );
            self.metrics.conflicting_objects.inc();
        }
    }

    /// Sets `offline_stale_files`: the files whose objects are served from an earlier read
    /// because what they hold now was refused (does not parse, is empty, too large) or cannot
    /// be read, and every file while the directory cannot be listed. A fresh start would not
    /// serve those objects, so an operator must see them.
    fn report_stale_files(&self) {
        let serves = |path: &PathBuf| self.files.get(path).is_some_and(|f| !f.objects.is_empty());
        let stale = if self.relist {
            self.files.keys().filter(|path| serves(path)).count()
        } else {
            self.stale.iter().filter(|path| serves(path)).count()
        };
        self.metrics.set_stale_files(stale);
    }

    fn file_error(&self, path: &Path, error: FileError) {
        // Kept: objects the file defined before. A file created by `> file` was first read
        // empty, which defined none.
        let kept = self.files.get(path).is_some_and(|f| !f.objects.is_empty());
        tracing::warn!(file = %path.display(), %error, kept_previous = kept, "skipping cluster state file");
        self.metrics.invalid_files.inc();
    }

    /// Delivers the first read: a `Reset` of every watched kind, with the objects whose served
    /// definition decodes.
    fn deliver_initial(&mut self, changes: Changes, mut decoded: Decoded) {
        let mut resets: HashMap<TypeKey, Vec<AnyObject>> =
            self.feeds.keys().map(|k| (k.clone(), Vec::new())).collect();
        for (id, served) in changes {
            let Some((path, digest)) = served else {
                continue;
            };
            // One entry per watched kind: an object of another kind is not delivered.
            let Some(objects) = resets.get_mut(&id.type_key) else {
                continue;
            };
            if let ServedObject::Decoded(object) =
                self.served_object(&mut decoded, &id, &path, digest)
            {
                objects.push(object);
                self.delivered.insert(id, digest);
            }
        }
        for (type_key, objects) in resets {
            if let Some(feed) = self.feeds.get(&type_key) {
                let skipped = deferring_skips(|| feed.deliver(vec![Event::Reset(objects)]));
                self.log_skipped(skipped);
            }
        }
    }

    /// Logs the objects the indexes skipped as invalid, each with the file whose definition
    /// of it is served (an HTTPRoute whose regex does not compile is refused by the index, after
    /// the source decoded it).
    fn log_skipped(&self, skipped: Vec<SkippedObject>) {
        for object in skipped {
            let file = (object.key.as_ref()).and_then(|key| self.served_file(object.kind, key));
            object.log(file.map(|file| &**file));
        }
    }

    /// The file whose definition of the object `key` of the kind labelled `kind` is served.
    fn served_file(&self, kind: &str, key: &ObjectRef) -> Option<&Arc<Path>> {
        self.feeds
            .iter()
            .filter(|(_, feed)| feed.label() == kind)
            .find_map(|(type_key, _)| {
                let name =
                    ObjectName::new(type_key.clone(), (key.namespace.clone(), key.name.clone()));
                self.defs.get(&name)?.first().map(|(path, _)| path)
            })
    }

    /// Delivers the changes of a later read: an `Apply` of each object of a watched kind whose
    /// served definition changed and decodes, a `Delete` of each one no longer defined or whose
    /// served definition no longer decodes, of any kind: the indexes hold what a fresh read of
    /// the directory would give them (a version that is in no file any more never outlives
    /// an invalid edit). Kinds are delivered one after another, as a cluster's watches would.
    fn deliver_changes(&mut self, changes: Changes, mut decoded: Decoded) {
        let mut events: BTreeMap<TypeKey, Vec<Event<AnyObject>>> = BTreeMap::new();
        for (key, served) in changes {
            if !self.feeds.contains_key(&key.type_key) {
                continue;
            }
            let event = match served {
                Some((_, digest)) if self.delivered.get(&key) == Some(&digest) => {
                    // Back to the version delivered: a bad version seen meanwhile is news again.
                    self.invalid.remove(&key);
                    None
                }
                Some((path, digest)) => {
                    match self.served_object(&mut decoded, &key, &path, digest) {
                        ServedObject::Decoded(object) => {
                            self.delivered.insert(key.clone(), digest);
                            Some(Event::Apply(object))
                        }
                        ServedObject::Invalid => self
                            .delivered
                            .remove(&key)
                            .map(|_| Event::Delete(object_ref(&key.key))),
                        // Read again when its file's notification comes.
                        ServedObject::Gone => None,
                    }
                }
                None => {
                    self.invalid.remove(&key);
                    self.delivered
                        .remove(&key)
                        .map(|_| Event::Delete(object_ref(&key.key)))
                }
            };
            if let Some(event) = event {
                events.entry(key.type_key.clone()).or_default().push(event);
            }
        }
        // Objects added or changed go first, kind by kind, those that others refer to before
        // those that refer to them (a Pod before the EndpointSlice naming it, before its
        // Service); then objects removed, kind by kind in the reverse order (the Service
        // first). A file removed or added then reaches a stream as one change of its Service,
        // never through a moment where a slice names Pods already gone or not there yet; nor
        // does a rewrite that drops a Pod and its endpoint while changing another Pod (newcomer
        // finding: the Pods' batch, applied whole, removed the Pod under the old slice).
        // Within a kind, an object moved between keys is so never missing in between.
        let (mut applying, mut deleting) = (Vec::new(), Vec::new());
        for (type_key, events) in events {
            let (deletes, applies): (Vec<_>, Vec<_>) = events
                .into_iter()
                .partition(|e| matches!(e, Event::Delete(_)));
            if !applies.is_empty() {
                applying.push((type_key.clone(), applies));
            }
            if !deletes.is_empty() {
                deleting.push((type_key, deletes));
            }
        }
        applying.sort_by_key(|(type_key, _)| reference_rank(&type_key.1));
        deleting.sort_by_key(|(type_key, _)| std::cmp::Reverse(reference_rank(&type_key.1)));
        for (type_key, events) in applying.into_iter().chain(deleting) {
            let Some(feed) = self.feeds.get(&type_key) else {
                continue;
            };
            // The kind's indexes apply the whole batch at once.
            let skipped = deferring_skips(|| feed.deliver(events));
            self.log_skipped(skipped);
        }
    }

    /// The object of the served definition `(path, digest)` of `obj_key`: decoded during this
    /// read, else decoded again from its file (a conflict's next definition, now served). One
    /// that does not decode is logged, with its file, and counted once per version.
    fn served_object(
        &mut self,
        decoded: &mut Decoded,
        key: &ObjectId,
        path: &Path,
        digest: Digest,
    ) -> ServedObject {
        let Some(feed) = self.feeds.get(&key.type_key).cloned() else {
            return ServedObject::Gone;
        };
        let result = match decoded.remove(&(key.clone(), digest)) {
            Some(result) => result,
            None => match decode_from_file(&*feed, path, key, digest) {
                Some(result) => result,
                None => return ServedObject::Gone,
            },
        };
        let (key, obj_key) = (key.clone(), &key.key);
        match result {
            Ok(object) => {
                self.invalid.remove(&key);
                ServedObject::Decoded(object)
            }
            Err(error) => {
                if self.invalid.insert(key, digest) != Some(digest) {
                    tracing::warn!(file = %path.display(), kind = %feed.label(), namespace = %obj_key.0, name = %obj_key.1, %error, "skipping object");
                    self.metrics.invalid_object(feed.label());
                    self.skipped_objects += 1;
                }
                ServedObject::Invalid
            }
        }
    }
}

/// What the served definition of an object gives ([`StateDir::served_object`]).
enum ServedObject {
    Decoded(AnyObject),
    /// It does not decode: skipped, as a fresh read of the directory would skip it.
    Invalid,
    /// Its file no longer holds it (or the kind is not watched): the file changed since it
    /// was listed, and its notification is on its way.
    Gone,
}

/// The conflict to report after the file at `path` was read, given an object's definitions
/// ([`Definitions`], served first) and the file served before the read: the file whose
/// definition is served and those that define the object differently. A read reports the
/// conflicts it makes or leaves behind: `path` defines the object differently from the served
/// file (named alone), or is the served file, or the read changed which file is served (one
/// removed, one sorting last added; all the differing files named). A read that leaves a
/// conflict as it was (a file that agrees with the served definition, or one that did not
/// define the object) reports nothing, so each conflicting file is counted once.
fn new_conflict<'a>(
    defs: &'a Definitions,
    path: &Path,
    served_before: Option<&Path>,
) -> Option<(&'a Path, Vec<&'a Path>)> {
    let (served, definition) = defs.first()?;
    let differing: Vec<&Path> = defs
        .iter()
        .filter(|(_, d)| d != definition)
        .map(|(p, _)| &**p)
        .collect();
    if differing.is_empty() {
        return None;
    }
    if **served == *path || served_before != Some(&**served) {
        return Some((served, differing));
    }
    let ignored = differing.into_iter().find(|p| *p == path)?;
    Some((served, vec![ignored]))
}

/// Decodes the definition of `obj_key` with `digest` in the file at `path` again; `None` when
/// the file no longer holds it (it changed since, and a notification is on its way).
fn decode_from_file(
    feed: &dyn KindFeed,
    path: &Path,
    key: &ObjectName,
    digest: Digest,
) -> Option<Result<AnyObject, DecodeError>> {
    // What decoding logs names the file, as on the file's first read (tester finding: a
    // skipped port's line lost its file when the object was decoded again).
    let _file = tracing::warn_span!("state_file", file = %path.display()).entered();
    let mut bytes = Vec::new();
    read_state_file(path, &mut bytes).ok()?;
    let documents = Documents::parse_read(path, &bytes).ok()?;
    documents
        .manifests(path)
        .ok()?
        .iter()
        .find(|m| m.type_key == key.type_key && m.obj_key == key.key && m.digest == digest)
        .map(|m| feed.decode_json(&m.json))
}

fn object_ref((namespace, name): &ObjectKey) -> ObjectRef {
    ObjectRef {
        namespace: namespace.clone(),
        name: name.clone(),
    }
}

/// Reads at most [`MAX_FILE_BYTES`] of `path` into `buffer` (cleared first) and returns what
/// it read; a longer file is an error, not a truncation.
fn read_limited_into<'a>(path: &Path, buffer: &'a mut Vec<u8>) -> Result<&'a [u8], FileError> {
    buffer.clear();
    let file = std::fs::File::open(path)?;
    let size = file.metadata().map(|m| m.len()).unwrap_or(0);
    if size > MAX_FILE_BYTES {
        return Err(FileError::TooLarge {
            limit: MAX_FILE_BYTES,
        });
    }
    buffer.reserve(size as usize);
    file.take(MAX_FILE_BYTES + 1).read_to_end(buffer)?;
    if buffer.len() as u64 > MAX_FILE_BYTES {
        return Err(FileError::TooLarge {
            limit: MAX_FILE_BYTES,
        });
    }
    Ok(buffer)
}

/// The length of each piece a JSON state file is read in by [`read_state_file`]: small enough
/// to stay in the CPU's cache between the read and the compaction.
const READ_PIECE_BYTES: usize = 256 << 10;

/// Reads the state file at `path` into `buffer` (cleared first) as [`Documents::parse_read`]
/// takes it: a JSON file compacted as it is read, piece by piece
/// ([`manifest::JsonCompactor`]: one pass over the file, not a copy of it and then a pass over
/// the copy), a YAML file as it is. Returns the file's length as written.
///
/// Errors as [`read_limited_into`]: a file longer than [`MAX_FILE_BYTES`] is refused.
fn read_state_file(path: &Path, buffer: &mut Vec<u8>) -> Result<u64, FileError> {
    if !manifest::is_json(path) {
        return read_limited_into(path, buffer).map(|bytes| bytes.len() as u64);
    }
    buffer.clear();
    let mut file = std::fs::File::open(path)?;
    let size = file.metadata().map(|m| m.len()).unwrap_or(0);
    if size > MAX_FILE_BYTES {
        return Err(FileError::TooLarge {
            limit: MAX_FILE_BYTES,
        });
    }
    // `kubectl get -o json` compacts to about two fifths.
    buffer.reserve(size as usize / 2);
    let mut piece = vec![0; READ_PIECE_BYTES];
    let mut compactor = manifest::JsonCompactor::default();
    let mut read = 0;
    loop {
        let n = match file.read(&mut piece) {
            Ok(0) => return Ok(read),
            Ok(n) => n,
            Err(error) if error.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(error) => return Err(error.into()),
        };
        read += n as u64;
        if read > MAX_FILE_BYTES {
            return Err(FileError::TooLarge {
                limit: MAX_FILE_BYTES,
            });
        }
        compactor.push(&piece[..n], buffer);
    }
}

/// Whether `path` is one of the `..data` / `..<timestamp>` entries through which a ConfigMap or
/// Secret volume (kubelet's atomic writer) swaps all its files at once: the manifests are
/// symlinks into them, so a change there may change any file while none is notified.
fn is_atomic_writer_entry(path: &Path) -> bool {
    path.file_name()
        .is_some_and(|name| name.as_encoded_bytes().starts_with(b".."))
}

/// The paths a symlink at `path` leads through, link after link, to the file it names (which
/// may not exist: a dangling link is followed too, so the file is read once it appears).
/// Each path is absolute, its directory resolved. `None` when `path` is not a symlink.
/// A link into a ConfigMap volume's `..data` is followed by the volume's swaps instead
/// ([`is_atomic_writer_entry`]): its hops stop there.
fn link_hops(path: &Path) -> Option<Vec<PathBuf>> {
    // Far more than a sane chain; the kernel gives up after 40.
    const MAX_HOPS: usize = 40;
    if !std::fs::symlink_metadata(path).ok()?.is_symlink() {
        return None;
    }
    let mut hops = Vec::new();
    let mut at = path.to_path_buf();
    while hops.len() < MAX_HOPS {
        let Ok(next) = std::fs::read_link(&at) else {
            break;
        };
        let next = at.parent().unwrap_or(Path::new("/")).join(next);
        let (Some(dir), Some(name)) = (next.parent(), next.file_name()) else {
            break;
        };
        let dir = resolve_dir(dir);
        if dir
            .components()
            .any(|c| is_atomic_writer_entry(Path::new(c.as_os_str())))
        {
            break;
        }
        at = dir.join(name);
        if hops.contains(&at) {
            break;
        }
        hops.push(at.clone());
        if !std::fs::symlink_metadata(&at).is_ok_and(|m| m.is_symlink()) {
            break;
        }
    }
    Some(hops)
}

/// `dir` resolved as far as it exists: its canonical path, or, for a directory that is gone,
/// its name joined to its nearest existing ancestor's canonical path. A link's target
/// directory moved away must still be named where it will come back: unresolved,
/// `state/../target` would look like a path inside the state directory.
fn resolve_dir(dir: &Path) -> PathBuf {
    if let Ok(resolved) = std::fs::canonicalize(dir) {
        return resolved;
    }
    match (dir.parent(), dir.file_name()) {
        (Some(parent), Some(name)) => resolve_dir(parent).join(name),
        _ => dir.to_path_buf(),
    }
}

/// The paths the manifests that are symlinks lead through ([`StateDir::links`]), and the
/// directories of those outside the state directory, watched beside it: what the watcher's
/// callback needs to tell a change to a linked file from another file's.
#[derive(Debug, Default)]
struct Followed {
    /// The state directory, resolved: hops in it are notified by its own watch.
    dir: PathBuf,
    /// Hop to the manifests leading through it.
    hops: HashMap<PathBuf, Vec<PathBuf>>,
    /// The directories of hops outside the state directory that are watched.
    dirs: BTreeSet<PathBuf>,
    /// Those directories, watched or not (not there yet): an event on one of them, or on a
    /// directory above one, means links through it resolve anew.
    wanted: BTreeSet<PathBuf>,
    /// The state directory as given (made absolute) and, when that is a symlink, each hop of
    /// its chain of links: replacing one (`ln -sfn` and a rename, as git-sync publishes, or a
    /// directory removed and made again) changes what the state directory is, which no watch
    /// on the directory itself tells.
    dir_hops: BTreeSet<PathBuf>,
    /// The directories holding `dir_hops`, watched for that: their other entries are not the
    /// state directory's.
    dir_hop_parents: BTreeSet<PathBuf>,
}

impl Followed {
    /// Follows the hops of `links` (manifest to hops) for the state directory `given` (as the
    /// user gave it): watches the directories of hops outside it with `watcher`, and the
    /// directories holding `given` and each link of its own chain, and stops watching those no
    /// hop is in any more. Each is watched again at every call (adding a watch it has is a no-op):
    /// one moved away under a watched directory had its watch dropped by `notify`, and moved
    /// back it is the same directory. A directory that cannot be watched (it does not exist)
    /// is left out: its creation is seen where its parent is watched, else on the next read
    /// of the state directory.
    fn follow(
        shared: &Mutex<Self>,
        given: &Path,
        links: &BTreeMap<PathBuf, Vec<PathBuf>>,
        watcher: &mut impl notify::Watcher,
    ) {
        let dir = std::fs::canonicalize(given).unwrap_or_else(|_| given.to_path_buf());
        let mut hops: HashMap<PathBuf, Vec<PathBuf>> = HashMap::new();
        for (link, link_hops) in links {
            for hop in link_hops {
                hops.entry(hop.clone()).or_default().push(link.clone());
            }
        }
        let dirs: BTreeSet<PathBuf> = hops
            .keys()
            .filter_map(|hop| hop.parent())
            .filter(|parent| !parent.starts_with(&dir))
            .map(Path::to_path_buf)
            .collect();
        let mut dir_hops = BTreeSet::new();
        if let Ok(given) = std::path::absolute(given) {
            dir_hops.extend(link_hops(&given).into_iter().flatten());
            dir_hops.insert(given);
        }
        let dir_hop_parents: BTreeSet<PathBuf> = dir_hops
            .iter()
            .filter_map(|hop| hop.parent())
            .map(Path::to_path_buf)
            .collect();
        // Not locked while the watcher works: its thread may be waiting for the lock in the
        // callback, and `watch` waits for its thread.
        let before = {
            let shared = shared.lock().unwrap_or_else(|e| e.into_inner());
            &shared.dirs | &shared.dir_hop_parents
        };
        let wanted = &dirs | &dir_hop_parents;
        for gone in before.difference(&wanted) {
            let _ = watcher.unwatch(gone);
        }
        let mut watched = BTreeSet::new();
        for followed in &wanted {
            match watcher.watch(followed, notify::RecursiveMode::NonRecursive) {
                Ok(()) => {
                    watched.insert(followed.clone());
                }
                Err(_) => {
                    tracing::debug!(dir = %followed.display(), "cannot watch the directory of a link to the state directory or to a state file yet")
                }
            }
        }
        *shared.lock().unwrap_or_else(|e| e.into_inner()) = Self {
            dir,
            hops,
            dirs: &dirs & &watched,
            wanted: dirs,
            dir_hop_parents: &dir_hop_parents & &watched,
            dir_hops,
        };
    }

    /// Whether a change at `path` may change what the state directory is: `Some(true)` for the
    /// directory as given or a hop of its chain of links, `Some(false)` for another entry
    /// beside one of them (but not a directory a state file's link leads through), `None` for
    /// a path elsewhere.
    fn is_state_dir_hop(&self, path: &Path) -> Option<bool> {
        if self.dir_hops.contains(path) {
            return Some(true);
        }
        let followed = self.wanted.iter().any(|dir| dir.starts_with(path));
        (!followed
            && path
                .parent()
                .is_some_and(|parent| self.dir_hop_parents.contains(parent)))
        .then_some(false)
    }

    /// The manifests a change at `path` is read through: `Some` (possibly empty, for another
    /// file beside a hop) when `path` is in a followed directory or is a hop, `None` otherwise,
    /// and when `path` is a followed directory or one above it (moved, deleted or created
    /// again: the links through it resolve anew, which a full read does). `path` in the state
    /// directory may be named as the directory was given.
    fn manifests_of(&self, path: &Path, in_state_dir: bool) -> Option<&[PathBuf]> {
        if !in_state_dir && self.wanted.iter().any(|dir| dir.starts_with(path)) {
            return None;
        }
        let resolved;
        let path = match (in_state_dir, path.file_name()) {
            (true, Some(name)) => {
                resolved = self.dir.join(name);
                &resolved
            }
            _ => path,
        };
        match self.hops.get(path) {
            Some(links) => Some(links),
            None => path
                .parent()
                .is_some_and(|dir| self.dirs.contains(dir))
                .then_some(&[]),
        }
    }
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
/// that are not regular files (directories, FIFOs and sockets, dangling or looping symlinks).
/// Hidden files (editor swap files) are skipped.
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

/// Where a kind's objects stand among those that refer to one another, for the order of a
/// read's deliveries: Nodes and workloads are named by Pods, Pods and ExternalWorkloads by
/// EndpointSlices, EndpointSlices belong to Services (and the other kinds select by label).
fn reference_rank(kind: &str) -> u8 {
    match kind {
        "Node" | "ReplicaSet" | "Job" => 0,
        "Pod" | "ExternalWorkload" => 1,
        "EndpointSlice" => 2,
        _ => 3,
    }
}

/// Whether `path` is named like a manifest: `*.yaml`, `*.yml` or `*.json`, not hidden (editor
/// swap and temporary files are).
/// A name need not be UTF-8 (`svc\xff.yaml` is served, and logged as `svc\u{FFFD}.yaml`).
fn is_manifest_name(path: &Path) -> bool {
    let hidden = path
        .file_name()
        .is_none_or(|n| n.as_encoded_bytes().starts_with(b"."));
    let manifest = path
        .extension()
        .is_some_and(|e| e == "yaml" || e == "yml" || e == "json");
    manifest && !hidden
}

mod manifest;
#[cfg(test)]
mod tests;
