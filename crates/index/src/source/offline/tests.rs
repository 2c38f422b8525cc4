use super::{manifest::nesting_exceeds, *};
use crate::{
    model::{PodInfo, ServiceInfo},
    source::ClusterSource,
    watches::{Watches, feed},
};
use k8s_openapi::api::core::v1::{Pod, Service};
use std::time::Duration;
use tokio::sync::mpsc;

type Events<T> = mpsc::UnboundedReceiver<Event<Arc<T>>>;

fn svc_yaml(name: &str, port: u16) -> String {
    format!(
        "apiVersion: v1\nkind: Service\nmetadata:\n  name: {name}\n  namespace: ns\nspec:\n  ports:\n  - port: {port}\n"
    )
}

fn names(objs: &[Arc<ServiceInfo>]) -> Vec<String> {
    let mut n: Vec<_> = objs.iter().map(|s| s.name.clone()).collect();
    n.sort();
    n
}

async fn next<T>(events: &mut Events<T>) -> Event<Arc<T>> {
    tokio::time::timeout(Duration::from_secs(5), events.recv())
        .await
        .expect("an event in time")
        .expect("source running")
}

/// The port of the Service the next event applies.
async fn applied_port(events: &mut Events<ServiceInfo>) -> u16 {
    match next(events).await {
        Event::Apply(svc) => svc.ports[0].port,
        other => panic!("expected Apply, got {other:?}"),
    }
}

/// Starts reading `dir`, delivering its Services into the channel returned.
async fn services(dir: &Path, metrics: &IndexMetrics) -> Events<ServiceInfo> {
    let (tx, rx) = mpsc::unbounded_channel();
    let mut watches = Watches::new(metrics.clone());
    watches.add::<Service>(tx);
    let source = OfflineSource::new(dir, metrics.clone()).expect("a directory");
    watches.start(&ClusterSource::Offline(source)).await;
    rx
}

fn write(dir: &Path, file: &str, text: &str) {
    let tmp = dir.join(format!(".{file}.tmp"));
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(tmp, dir.join(file)).unwrap();
}

#[test]
fn multi_document_yaml_lists_and_json_streams() {
    let yaml = format!(
        "# comment\n---\n{}---\n---\n{}",
        svc_yaml("a", 80),
        svc_yaml("b", 81)
    );
    let objs = parse_manifests(Path::new("x.yaml"), yaml.as_bytes()).unwrap();
    assert_eq!(objs.len(), 2);

    let list = r#"{"apiVersion":"v1","kind":"List","items":[
        {"apiVersion":"v1","kind":"Service","metadata":{"name":"a","namespace":"ns"}},
        {"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","namespace":"ns"}}]}
        {"apiVersion":"v1","kind":"Service","metadata":{"name":"c","namespace":"ns"}}"#;
    let objs = parse_manifests(Path::new("x.json"), list.as_bytes()).unwrap();
    let kinds: Vec<_> = objs.iter().map(|o| o.type_key.1.as_str()).collect();
    assert_eq!(kinds, ["Service", "Pod", "Service"]);
    // Each object's text is exactly its own, whatever surrounds it; `null` and scalars between
    // objects are skipped, and a `kind: List` with `items: null` holds nothing.
    let stream = "\n  {\"apiVersion\":\"v1\",\"kind\":\"Service\",\"metadata\":{\"name\":\"a\"}} null 7\n\t\
                  {\"items\":null,\"kind\":\"ServiceList\"}[1]\"s\"{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\
                  \"metadata\":{\"name\":\"p\"}}  \n";
    let objs = parse_manifests(Path::new("x.json"), stream.as_bytes()).unwrap();
    let texts: Vec<_> = objs.iter().map(|o| o.json.as_ref()).collect();
    assert_eq!(
        texts,
        [
            r#"{"apiVersion":"v1","kind":"Service","metadata":{"name":"a"}}"#,
            r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p"}}"#,
        ]
    );
    // `items` before `kind`, and a `kind` that is not a string: not a List.
    let late_kind = r#"{"items":[{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p"}}],"kind":"PodList"}
        {"apiVersion":"v1","kind":7,"items":[1],"metadata":{"name":"x"}}"#;
    let objs = parse_manifests(Path::new("x.json"), late_kind.as_bytes()).unwrap();
    assert_eq!(objs.len(), 1);
    assert_eq!(objs[0].obj_key.1, "p");

    // `kubectl get -o yaml` of several objects prints a List with `items`.
    let kubectl = "apiVersion: v1\nkind: List\nmetadata:\n  resourceVersion: \"\"\nitems:\n- apiVersion: v1\n  kind: Service\n  metadata: {name: a, namespace: ns}\n";
    assert_eq!(
        parse_manifests(Path::new("x.yml"), kubectl.as_bytes())
            .unwrap()
            .len(),
        1
    );
}

#[test]
fn malformed_files_are_errors_naming_the_problem() {
    let cases = [
        ("x.yaml", "kind: [unclosed", "invalid YAML"),
        ("x.json", "{\"kind\":", "invalid JSON"),
        ("x.yaml", "? [a, b]\n: c\n", "at line 1, column 3"),
    ];
    for (file, text, needle) in cases {
        let err = parse_manifests(Path::new(file), text.as_bytes())
            .unwrap_err()
            .to_string();
        assert!(err.contains(needle), "{text:?}: {err}");
    }
    // One line, as logged: the position, not an excerpt of the file drawn under it.
    let text = "apiVersion: v1\nkind: Service\nspec:\n  ports:\n  - port: [1\n";
    let err = parse_manifests(Path::new("x.yaml"), text.as_bytes())
        .unwrap_err()
        .to_string();
    assert!(!err.contains('\n'), "{err}");
    assert!(err.starts_with("invalid YAML: "), "{err}");
    assert!(err.contains("line 5, column 11"), "{err}");
    assert!(err.contains("unclosed bracket"), "{err}");
    // serde-saphyr's advice to the program (an option of its decoder) is not the user's.
    for (text, message) in [
        (
            "kind: Service\nmetadata:\n  labels:\n    ~: a\n",
            "invalid YAML: cannot deserialize null into string at line 4, column 5",
        ),
        (
            "kind: Service\nmetadata:\n  labels:\n    x: !!binary /w==\n",
            "invalid YAML: !!binary scalar is not valid UTF-8 so cannot be stored into string at \
             line 4, column 17",
        ),
        (
            "kind: Service\nkind: Pod\n",
            "invalid YAML: duplicate mapping key: kind at line 2, column 1",
        ),
    ] {
        let err = parse_manifests(Path::new("x.yaml"), text.as_bytes()).unwrap_err();
        assert_eq!(err.to_string(), message);
    }
    let err = parse_manifests(Path::new("x.yaml"), b"kind: caf\xe9\n").unwrap_err();
    assert!(matches!(err, FileError::NotUtf8(_)), "{err}");
    assert!(err.to_string().starts_with("not UTF-8: "), "{err}");
    // A JSON object nested deeper than serde_json reads (128) refuses its file, as the README
    // says, instead of being skipped for lacking a name it has.
    let deep = format!(
        r#"{{"apiVersion":"v1","kind":"Service","metadata":{{"name":"a"}}}}
        {{"apiVersion":"v1","kind":"Service","metadata":{{"name":"b"}},"x":{}1{}}}"#,
        "[".repeat(200),
        "]".repeat(200)
    );
    let err = parse_manifests(Path::new("x.json"), deep.as_bytes()).unwrap_err();
    assert!(
        err.to_string().contains("recursion limit exceeded"),
        "{err}"
    );
}

#[test]
fn a_byte_order_mark_is_read_past() {
    for file in ["x.yaml", "x.json"] {
        let text = if file.ends_with("json") {
            "\u{feff}{\"apiVersion\": \"v1\", \"kind\": \"Service\", \"metadata\": {\"name\": \"a\", \"namespace\": \"ok\"}}"
        } else {
            "\u{feff}---\napiVersion: v1\nkind: Service\nmetadata: {name: a, namespace: ok}\n"
        };
        let objs = parse_manifests(Path::new(file), text.as_bytes()).unwrap();
        assert_eq!(objs.len(), 1, "{file}");
        assert_eq!(objs[0].obj_key.1, "a");
    }
}

#[test]
fn documents_that_are_not_objects_are_skipped_alone() {
    let text = "just a string\n---\napiVersion: v1\nkind: Service\nmetadata: {name: a, namespace: ok}\n---\n- 1\n- 2\n---\napiVersion: v1\nkind: List\nitems: 5\n";
    let objs = parse_manifests(Path::new("x.yaml"), text.as_bytes()).unwrap();
    assert_eq!(objs.len(), 1);
    assert_eq!(objs[0].obj_key.1, "a");
}

use crate::testing::logged;

/// Reads `dir` once for `feeds`, delivering each kind's initial `Reset`; what it logged.
fn read_logged(dir: &Path, feeds: Vec<Arc<dyn KindFeed>>, metrics: &IndexMetrics) -> String {
    let mut state = StateDir::new(dir.to_path_buf(), feeds, metrics.clone());
    let (_, log) = logged(|| {
        let (changes, decoded) = state.rescan();
        state.deliver_initial(changes, decoded);
    });
    log
}

/// The first read says what it read and where its time went, so that an operator can tell a
/// start slowed by parsing (a large or YAML state) from one slowed by indexing.
#[test]
fn the_first_read_logs_what_it_read_and_how_long_each_part_took() {
    let dir = tempfile::tempdir().unwrap();
    let services = format!("{}---\n{}", svc_yaml("a", 80), svc_yaml("b", 81));
    write(dir.path(), "services.yaml", &services);
    let pod = r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web-0","namespace":"ns"}}"#;
    write(dir.path(), "pod.json", pod);
    // Neither a file that does not parse nor a Service that does not decode is read.
    write(dir.path(), "broken.yaml", "kind: [unclosed\n");
    let invalid = "apiVersion: v1\nkind: Service\nmetadata: {name: Bad_Svc, namespace: ns}\n";
    write(dir.path(), "invalid.yaml", invalid);
    let metrics = IndexMetrics::default();
    let (tx, mut served) = mpsc::unbounded_channel::<Event<Arc<ServiceInfo>>>();
    let mut state = StateDir::new(
        dir.path().to_path_buf(),
        vec![feed::<Service>(tx, metrics.clone())],
        metrics,
    );
    let (listed, log) = logged(|| state.read_first());
    assert!(listed);
    let Ok(Event::Reset(objs)) = served.try_recv() else {
        panic!("expected Reset")
    };
    assert_eq!(names(&objs), ["a", "b"]);
    let line = log
        .lines()
        .find(|l| l.contains("cluster state directory read"))
        .unwrap_or_else(|| panic!("{log}"));
    // Three objects in the three files read; the Pod is not of a watched kind, so two are
    // served. The file that does not parse and the Service named as no API server would name
    // it are counted apart.
    let bytes = services.len() + pod.len() + invalid.len();
    for field in [
        "files=3".to_string(),
        format!("bytes={bytes}"),
        "objects=3".into(),
        "served=2".into(),
        "refused_files=1".into(),
        "skipped_objects=1".into(),
        "parse_ms=".into(),
        "index_ms=".into(),
    ] {
        assert!(line.contains(&field), "{field}: {line}");
    }

    // A directory that cannot be listed delivers nothing and logs no read.
    let (tx, mut served) = mpsc::unbounded_channel::<Event<Arc<ServiceInfo>>>();
    let metrics = IndexMetrics::default();
    let mut state = StateDir::new(
        dir.path().join("missing"),
        vec![feed::<Service>(tx, metrics.clone())],
        metrics,
    );
    let (listed, log) = logged(|| state.read_first());
    assert!(!listed);
    assert!(served.try_recv().is_err());
    assert!(!log.contains("cluster state directory read"), "{log}");
}

#[test]
fn unnamed_items_are_skipped_alone() {
    let list = "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: Service\n  metadata: {name: b, namespace: ok}\n- {kind: Service}\n- 42\n- {apiVersion: v1, kind: Pod, metadata: {namespace: ok}}\n- {apiVersion: v1, metadata: {name: c}}\n";
    let err = parse_manifests(Path::new("x.yaml"), list.as_bytes());
    // 42 is not a mapping: the item is skipped, and so is the nameless Service; `b` stays.
    let objs = err.unwrap();
    // The log names each skipped item by its place, since it has no name.
    let (_, log) = logged(|| parse_manifests(Path::new("x.yaml"), list.as_bytes()).map(|_| ()));
    // Each says which naming field it lacks.
    for line in [
        "skipping a List item without a string `apiVersion` (an object needs apiVersion, kind and metadata.name) file=x.yaml document=1 item=items[1] kind=Service",
        "skipping a List item that is not an object file=x.yaml document=1 item=items[2] kind=<no kind>",
        "skipping a List item without a string `metadata.name` (an object needs apiVersion, kind and metadata.name) file=x.yaml document=1 item=items[3] kind=Pod",
        "skipping a List item without a string `kind` (an object needs apiVersion, kind and metadata.name) file=x.yaml document=1 item=items[4] kind=<no kind>",
    ] {
        assert!(log.contains(line), "{line}\n{log}");
    }
    assert_eq!(objs.len(), 1);
    assert_eq!(objs[0].obj_key.1, "b");
    let nameless = "apiVersion: v1\nkind: Service\nmetadata: {}\n---\napiVersion: v1\nkind: Service\nmetadata: {name: a}\n";
    assert_eq!(
        parse_manifests(Path::new("x.yaml"), nameless.as_bytes())
            .unwrap()
            .len(),
        1
    );
}

#[tokio::test]
async fn initial_reset_then_apply_and_delete_as_files_change() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "a.yaml", &svc_yaml("a", 80));
    write(dir.path(), "b.yml", &svc_yaml("b", 80));
    write(dir.path(), "notes.txt", &svc_yaml("ignored", 80));
    write(dir.path(), ".hidden.yaml", &svc_yaml("hidden", 80));
    let (tx, mut services) = mpsc::unbounded_channel::<Event<Arc<ServiceInfo>>>();
    let (pods_tx, mut pods) = mpsc::unbounded_channel::<Event<Arc<PodInfo>>>();
    let mut watches = Watches::new(IndexMetrics::default());
    watches.add::<Service>(tx).add::<Pod>(pods_tx);
    let source = OfflineSource::new(dir.path(), IndexMetrics::default()).unwrap();
    watches.start(&ClusterSource::Offline(source)).await;
    match next(&mut services).await {
        Event::Reset(objs) => assert_eq!(names(&objs), ["a", "b"]),
        other => panic!("expected Reset, got {other:?}"),
    }
    assert!(matches!(next(&mut pods).await, Event::Reset(p) if p.is_empty()));

    // A changed file: one Apply for the changed object only.
    write(dir.path(), "a.yaml", &svc_yaml("a", 81));
    match next(&mut services).await {
        Event::Apply(svc) => {
            assert_eq!(svc.name, "a");
            assert_eq!(svc.ports[0].port, 81);
        }
        other => panic!("expected Apply, got {other:?}"),
    }
    // A removed file: Delete of its objects.
    std::fs::remove_file(dir.path().join("b.yml")).unwrap();
    assert!(matches!(next(&mut services).await, Event::Delete(s) if s.name == "b"));
}

/// A manifest whose file name is not UTF-8 is served like any other (tester finding: it was
/// taken for a hidden file and ignored without a word).
#[tokio::test]
async fn a_file_name_that_is_not_utf8_is_served() {
    use std::os::unix::ffi::OsStrExt;
    let dir = tempfile::tempdir().unwrap();
    let name = std::ffi::OsStr::from_bytes(b"svc\xff.yaml");
    assert!(is_manifest_name(Path::new(name)));
    assert!(!is_manifest_name(Path::new(std::ffi::OsStr::from_bytes(
        b".\xff.yaml"
    ))));
    std::fs::write(dir.path().join(name), svc_yaml("latin1-svc", 80)).unwrap();
    let mut events = services(dir.path(), &IndexMetrics::default()).await;
    match next(&mut events).await {
        Event::Reset(objs) => assert_eq!(names(&objs), ["latin1-svc"]),
        other => panic!("expected Reset, got {other:?}"),
    }
}

/// A manifest that is a symlink to a file elsewhere follows edits to that file (newcomer
/// finding: only changes in the state directory itself were notified, so an edit to the target
/// was never seen), whether the file is rewritten in place or replaced by a rename; other files
/// beside the target change nothing.
#[tokio::test]
async fn edits_to_a_symlinked_manifest_outside_the_directory_are_followed() {
    let dir = tempfile::tempdir().unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    let target = elsewhere.path().join("web.yaml");
    std::fs::write(&target, svc_yaml("web", 80)).unwrap();
    std::os::unix::fs::symlink(&target, dir.path().join("web.yaml")).unwrap();
    write(dir.path(), "a.yaml", &svc_yaml("a", 80));
    let metrics = IndexMetrics::default();
    let mut services = services(dir.path(), &metrics).await;
    match next(&mut services).await {
        Event::Reset(objs) => assert_eq!(names(&objs), ["a", "web"]),
        other => panic!("expected Reset, got {other:?}"),
    }
    // Rewritten in place, as `>>` or an editor that keeps the inode writes it.
    std::fs::write(&target, svc_yaml("web", 81)).unwrap();
    assert_eq!(applied_port(&mut services).await, 81);
    // Replaced by a rename, as `sed -i` and most editors write it.
    write(elsewhere.path(), "web.yaml", &svc_yaml("web", 82));
    assert_eq!(applied_port(&mut services).await, 82);
    // A file beside the target is not a manifest of the directory.
    write(elsewhere.path(), "other.yaml", &svc_yaml("other", 80));
    // The state directory itself is still followed.
    write(dir.path(), "a.yaml", &svc_yaml("a", 83));
    match next(&mut services).await {
        Event::Apply(svc) => assert_eq!((svc.name.as_str(), svc.ports[0].port), ("a", 83)),
        other => panic!("expected Apply of a, got {other:?}"),
    }
    // The target removed: the link dangles, and its objects are withdrawn.
    std::fs::remove_file(&target).unwrap();
    assert!(matches!(next(&mut services).await, Event::Delete(s) if s.name == "web"));
}

/// Every hop of a manifest's link chain is followed (newcomer findings): a target deleted and
/// created again, or not there yet when the link is made, is read once it appears; a link in
/// the middle of a chain re-pointed is followed; and a link in the directory to another of
/// its files (an alias sorting first) is read again when that file changes, without the two
/// names counting as a conflict, as two links to one file outside do not either.
#[tokio::test]
async fn every_hop_of_a_manifests_link_chain_is_followed() {
    let dir = tempfile::tempdir().unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    let middle = tempfile::tempdir().unwrap();
    let target = elsewhere.path().join("web.yaml");
    std::fs::write(&target, svc_yaml("web", 80)).unwrap();
    std::os::unix::fs::symlink(&target, dir.path().join("web.yaml")).unwrap();
    std::os::unix::fs::symlink(&target, dir.path().join("web-again.yaml")).unwrap();
    // A link made before its target exists.
    std::os::unix::fs::symlink(
        elsewhere.path().join("later.yaml"),
        dir.path().join("later.yaml"),
    )
    .unwrap();
    // A chain: chain.yaml -> middle/hop.yaml -> elsewhere/one.yaml.
    std::fs::write(elsewhere.path().join("one.yaml"), svc_yaml("one", 80)).unwrap();
    std::fs::write(elsewhere.path().join("two.yaml"), svc_yaml("two", 80)).unwrap();
    std::os::unix::fs::symlink(
        elsewhere.path().join("one.yaml"),
        middle.path().join("hop.yaml"),
    )
    .unwrap();
    std::os::unix::fs::symlink(
        middle.path().join("hop.yaml"),
        dir.path().join("chain.yaml"),
    )
    .unwrap();
    // An alias in the directory that sorts before the file it names.
    write(dir.path(), "slice.yaml", &svc_yaml("aliased", 80));
    std::os::unix::fs::symlink("slice.yaml", dir.path().join("aa-alias.yaml")).unwrap();
    let metrics = IndexMetrics::default();
    let mut services = services(dir.path(), &metrics).await;
    match next(&mut services).await {
        Event::Reset(objs) => assert_eq!(names(&objs), ["aliased", "one", "web"]),
        other => panic!("expected Reset, got {other:?}"),
    }

    // Two links to one file: edited, no conflict.
    std::fs::write(&target, svc_yaml("web", 81)).unwrap();
    assert_eq!(applied_port(&mut services).await, 81);
    // The alias sorting first is read again with the file it names.
    write(dir.path(), "slice.yaml", &svc_yaml("aliased", 82));
    assert_eq!(applied_port(&mut services).await, 82);
    assert_eq!(metrics.conflicting_objects.get(), 0);

    // Deleted, then created again.
    std::fs::remove_file(&target).unwrap();
    assert!(matches!(next(&mut services).await, Event::Delete(s) if s.name == "web"));
    write(elsewhere.path(), "web.yaml", &svc_yaml("web", 83));
    assert_eq!(applied_port(&mut services).await, 83);
    // The target of a link made before it.
    write(elsewhere.path(), "later.yaml", &svc_yaml("later", 84));
    assert_eq!(applied_port(&mut services).await, 84);
    // The middle of the chain re-pointed: `two` replaces `one`.
    let hop = middle.path().join("hop.yaml");
    std::os::unix::fs::symlink(
        elsewhere.path().join("two.yaml"),
        middle.path().join(".hop.tmp"),
    )
    .unwrap();
    std::fs::rename(middle.path().join(".hop.tmp"), &hop).unwrap();
    let mut seen = Vec::new();
    while seen.len() < 2 {
        match next(&mut services).await {
            Event::Apply(svc) => seen.push(format!("apply {}", svc.name)),
            Event::Delete(svc) => seen.push(format!("delete {}", svc.name)),
            other => panic!("expected Apply or Delete, got {other:?}"),
        }
    }
    seen.sort();
    assert_eq!(seen, ["apply two", "delete one"]);
    assert_eq!(metrics.conflicting_objects.get(), 0);
}

#[tokio::test]
async fn a_file_broken_mid_edit_keeps_its_last_good_objects() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "a.yaml", &svc_yaml("a", 80));
    let metrics = IndexMetrics::default();
    let mut services = services(dir.path(), &metrics).await;
    assert!(matches!(next(&mut services).await, Event::Reset(o) if o.len() == 1));
    write(
        dir.path(),
        "a.yaml",
        "apiVersion: v1\nkind: Service\nmetadata: [",
    );
    // Then a good edit of another file proves the source is alive and `a` was not deleted.
    write(dir.path(), "b.yaml", &svc_yaml("b", 80));
    assert!(matches!(next(&mut services).await, Event::Apply(s) if s.name == "b"));
    assert_eq!(metrics.invalid_files.get(), 1);
}

/// A NUL put at the start of a good file (newcomer finding: the YAML reader stopped there, the
/// file read as empty, and its objects were withdrawn without a word) refuses the file, which
/// keeps its last good objects.
#[tokio::test]
async fn a_nul_character_refuses_the_file_and_keeps_its_objects() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "a.yaml", &svc_yaml("a", 80));
    let metrics = IndexMetrics::default();
    let mut services = services(dir.path(), &metrics).await;
    assert!(matches!(next(&mut services).await, Event::Reset(o) if o.len() == 1));
    write(dir.path(), "a.yaml", &format!("\0{}", svc_yaml("a", 80)));
    write(dir.path(), "b.yaml", &svc_yaml("b", 80));
    assert!(matches!(next(&mut services).await, Event::Apply(s) if s.name == "b"));
    assert_eq!(metrics.invalid_files.get(), 1);
    let err = parse_manifests(
        Path::new("a.yaml"),
        format!("\0{}", svc_yaml("a", 80)).as_bytes(),
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("NUL character at line 1, column 1"), "{err}");
}

/// An object a file defines twice differently (a List naming it twice) keeps the first
/// definition, and the line says it is one file (newcomer finding: it said "two files" and
/// named the same file twice).
#[test]
fn an_object_defined_twice_in_one_file_is_reported_as_one_file() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "a.yaml",
        &format!("{}---\n{}", svc_yaml("web", 80), svc_yaml("web", 99)),
    );
    let metrics = IndexMetrics::default();
    let (tx, mut services) = mpsc::unbounded_channel::<Event<Arc<ServiceInfo>>>();
    let log = read_logged(
        dir.path(),
        vec![feed::<Service>(tx, metrics.clone())],
        &metrics,
    );
    let Ok(Event::Reset(objs)) = services.try_recv() else {
        panic!("expected Reset")
    };
    // The last definition, as `kubectl apply -f` leaves the object.
    assert_eq!(objs[0].ports[0].port, 99);
    assert_eq!(metrics.conflicting_objects.get(), 1);
    assert!(
        log.contains("object defined differently twice in one file; keeping its last definition")
            && !log.contains("in two files"),
        "{log}"
    );
}

#[tokio::test]
async fn duplicates_are_one_object_and_conflicts_keep_the_last_file() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "1.yaml",
        &format!("{}---\n{}", svc_yaml("same", 80), svc_yaml("conflict", 80)),
    );
    write(
        dir.path(),
        "2.yaml",
        &format!("{}---\n{}", svc_yaml("same", 80), svc_yaml("conflict", 99)),
    );
    let metrics = IndexMetrics::default();
    let mut services = services(dir.path(), &metrics).await;
    let Event::Reset(objs) = next(&mut services).await else {
        panic!("expected Reset")
    };
    assert_eq!(names(&objs), ["conflict", "same"]);
    // 2.yaml's, as `kubectl apply -f DIR` (files in path order) leaves it.
    let conflict = objs.iter().find(|s| s.name == "conflict").unwrap();
    assert_eq!(conflict.ports[0].port, 99);
    assert_eq!(metrics.conflicting_objects.get(), 1);
}

#[test]
fn the_same_object_in_yaml_and_json_in_any_key_order_has_one_digest() {
    let yaml = "apiVersion: v1\nkind: Service\nmetadata:\n  namespace: ns\n  name: a\n  labels: {x: \"1\", y: \"2\"}\nspec:\n  ports:\n  - {port: 80, name: http}\n";
    let json = r#"{"spec":{"ports":[{"name":"http","port":80}]},"kind":"Service","apiVersion":"v1",
        "metadata":{"labels":{"y":"2","x":"1"},"name":"a","namespace":"ns"}}"#;
    let from_yaml = parse_manifests(Path::new("a.yaml"), yaml.as_bytes()).unwrap();
    let from_json = parse_manifests(Path::new("a.json"), json.as_bytes()).unwrap();
    assert_eq!(from_yaml[0].digest, from_json[0].digest);
    assert_eq!(from_yaml[0].obj_key, ("ns".to_string(), "a".to_string()));
    assert_eq!(from_yaml[0].value(), from_json[0].value());
    // What differs is told apart: a value, a type (`"80"` is not `80`), the order of a list.
    for other in [
        json.replace(r#""port":80"#, r#""port":81"#),
        json.replace(r#""port":80"#, r#""port":"80""#),
        json.replace(r#""y":"2","x":"1""#, r#""y":"1","x":"2""#),
        json.replace(
            r#"[{"name":"http","port":80}]"#,
            r#"[{"name":"http","port":80},{"name":"b","port":1}]"#,
        ),
    ] {
        let m = parse_manifests(Path::new("b.json"), other.as_bytes()).unwrap();
        assert_ne!(m[0].digest, from_json[0].digest, "{other}");
    }
    let a = parse_manifests(
        Path::new("c.json"),
        br#"{"apiVersion":"v1","kind":"Service","metadata":{"name":"a"},"spec":{"x":[1,2]}}"#,
    )
    .unwrap();
    let b = parse_manifests(
        Path::new("c.json"),
        br#"{"apiVersion":"v1","kind":"Service","metadata":{"name":"a"},"spec":{"x":[2,1]}}"#,
    )
    .unwrap();
    assert_ne!(a[0].digest, b[0].digest);
}

/// Found by the `state_file` fuzz target: a JSON object with `metadata` twice was named from
/// the first, while every decoder reads the last (which had no name).
#[test]
fn a_key_repeated_in_a_json_object_counts_as_its_last_value() {
    let twice = |first: &str, second: &str| {
        format!(
            r#"{{"apiVersion":"v1","kind":"Service","metadata":{first},"spec":{{}},"metadata":{second}}}"#
        )
    };
    let nameless = twice(r#"{"name":"a","namespace":"ns"}"#, r#"{"namespace":"ns"}"#);
    assert!(
        parse_manifests(Path::new("x.json"), nameless.as_bytes())
            .unwrap()
            .is_empty()
    );
    let renamed = twice(r#"{"name":"a","namespace":"ns"}"#, r#"{"name":"b"}"#);
    let objs = parse_manifests(Path::new("x.json"), renamed.as_bytes()).unwrap();
    assert_eq!(objs[0].obj_key, (String::new(), "b".to_string()));
    assert_eq!(objs[0].value()["metadata"]["name"], "b");
    let names = r#"{"apiVersion":"v1","kind":"Service","metadata":{"name":"a","name":5}}"#;
    assert!(
        parse_manifests(Path::new("x.json"), names.as_bytes())
            .unwrap()
            .is_empty()
    );
    let kinds = r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a"},"kind":"Service"}"#;
    let objs = parse_manifests(Path::new("x.json"), kinds.as_bytes()).unwrap();
    assert_eq!(objs.len(), 1);
    assert_eq!(objs[0].type_key, (String::new(), "Service".to_string()));
}

/// Found by a newcomer: a Pod's address that is not an IP was logged without the file it came
/// from, while every other line about a state file names it. Decoding now runs in a span that
/// names the file, on loader threads that log where the caller logs.
#[test]
fn what_decoding_an_object_logs_names_its_file() {
    let dir = tempfile::tempdir().unwrap();
    let pod = |name: &str, ip: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: shop}}\n\
             spec: {{containers: [{{name: app}}]}}\n\
             status: {{phase: Running, podIP: 10.0.0.7, podIPs: [{{ip: {ip}}}]}}\n"
        )
    };
    std::fs::write(dir.path().join("a-good.yaml"), pod("web-0", "10.0.0.7")).unwrap();
    std::fs::write(dir.path().join("b-typo.yaml"), pod("web-1", "10.0.0.300")).unwrap();
    let metrics = IndexMetrics::default();
    let (tx, mut rx) = mpsc::unbounded_channel::<Event<Arc<PodInfo>>>();
    let mut state = StateDir::new(
        dir.path().to_path_buf(),
        vec![feed::<Pod>(tx, metrics.clone())],
        metrics,
    );
    let (_, log) = logged(|| {
        let (changes, decoded) = state.rescan();
        state.deliver_changes(changes, decoded);
    });
    let line = log
        .lines()
        .find(|l| l.contains("10.0.0.300"))
        .unwrap_or_else(|| panic!("no line about the address: {log}"));
    assert!(
        line.contains("b-typo.yaml") && line.contains("shop/web-1"),
        "{line}"
    );
    // Both Pods are served, the second without an address (its podIPs held only the typo).
    let mut served = Vec::new();
    while let Ok(event) = rx.try_recv() {
        match event {
            Event::Apply(pod) => served.push(pod),
            Event::Reset(pods) => served.extend(pods),
            Event::Delete(_) => {}
        }
    }
    served.sort_by(|a, b| a.name.cmp(&b.name));
    let ips: Vec<_> = served
        .iter()
        .map(|p| (p.name.as_str(), p.ips.len()))
        .collect();
    assert_eq!(ips, [("web-0", 1), ("web-1", 0)]);
}

/// What the loader threads log is in the caller's span too: a linked cluster's first read of
/// its directory logged its bad objects without `linked_cluster{cluster=NAME}` (newcomer
/// finding; one file, read on the caller's thread, had it).
#[test]
fn what_loader_threads_log_is_in_the_callers_span() {
    let dir = tempfile::tempdir().unwrap();
    let pod = |name: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: shop}}\n\
             spec: {{containers: [{{name: app}}]}}\n\
             status: {{phase: Running, podIPs: [{{ip: not-an-ip}}]}}\n"
        )
    };
    for name in ["a", "b", "c", "d"] {
        std::fs::write(dir.path().join(format!("{name}.yaml")), pod(name)).unwrap();
    }
    let metrics = IndexMetrics::default();
    let (tx, _rx) = mpsc::unbounded_channel::<Event<Arc<PodInfo>>>();
    let mut state = StateDir::new(
        dir.path().to_path_buf(),
        vec![feed::<Pod>(tx, metrics.clone())],
        metrics,
    );
    let (_, log) = logged(|| {
        tracing::info_span!("linked_cluster", cluster = "east").in_scope(|| {
            let (changes, decoded) = state.rescan();
            state.deliver_initial(changes, decoded);
        })
    });
    let lines: Vec<&str> = log.lines().filter(|l| l.contains("not-an-ip")).collect();
    assert_eq!(lines.len(), 4, "{log}");
    for line in lines {
        assert!(line.contains("linked_cluster{cluster=\"east\"}"), "{line}");
    }
}

/// A key repeated in a YAML mapping refuses the file (YAML forbids it), and the message names
/// the key without serde-saphyr's advice to set a decoder option (found by a newcomer).
#[test]
fn a_key_repeated_in_yaml_refuses_the_file_naming_the_key() {
    let yaml = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: a\nkind: Service\n";
    let err = parse_manifests(Path::new("x.yaml"), yaml.as_bytes()).unwrap_err();
    let message = err.to_string();
    assert!(message.contains("duplicate mapping key: kind"), "{message}");
    assert!(!message.contains("Options"), "{message}");
}

/// Found by the `state_file` fuzz target: an object with `kind` twice was served from a List's
/// `items` (named by the last `kind`) but refused, with its file, when it was a document of its
/// own. Both now read it as every JSON decoder does, by the last value; a List is told by its
/// last `kind` and split by its last `items`.
#[test]
fn an_object_with_a_key_twice_reads_the_same_in_a_list_and_alone() {
    let object = r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a","namespace":"ns"},"kind":"Service"}"#;
    let list = format!(r#"{{"apiVersion":"v1","kind":"List","items":[{object}]}}"#);
    let in_list = parse_manifests(Path::new("list.json"), list.as_bytes()).unwrap();
    let alone = parse_manifests(Path::new("alone.json"), object.as_bytes()).unwrap();
    let key = |m: &[Manifest<'_>]| {
        m.iter()
            .map(|m| (m.type_key.clone(), m.obj_key.clone(), m.digest))
            .collect::<Vec<_>>()
    };
    assert_eq!(key(&in_list), key(&alone));
    assert_eq!(alone[0].type_key.1, "Service");
    assert_eq!(alone[0].obj_key, ("ns".to_string(), "a".to_string()));

    // The last `kind` says whether a document is a List; the last `items` is what it holds.
    let svc = |name: &str| {
        format!(r#"{{"apiVersion":"v1","kind":"Service","metadata":{{"name":"{name}"}}}}"#)
    };
    let not_a_list = format!(
        r#"{{"apiVersion":"v1","kind":"List","items":[{}],"kind":"Service","metadata":{{"name":"x"}}}}"#,
        svc("a")
    );
    let objs = parse_manifests(Path::new("x.json"), not_a_list.as_bytes()).unwrap();
    assert_eq!(key(&objs).len(), 1);
    assert_eq!(objs[0].obj_key.1, "x");
    let items_twice = format!(
        r#"{{"apiVersion":"v1","kind":"List","items":[{}],"items":[{},{}]}}"#,
        svc("a"),
        svc("b"),
        svc("c")
    );
    let objs = parse_manifests(Path::new("x.json"), items_twice.as_bytes()).unwrap();
    let names: Vec<_> = objs.iter().map(|m| m.obj_key.1.as_str()).collect();
    assert_eq!(names, ["b", "c"]);
}

#[tokio::test]
async fn an_object_in_a_yaml_and_a_json_file_is_one_object() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "1.yaml", &svc_yaml("same", 80));
    let json = r#"{"kind":"Service","apiVersion":"v1","spec":{"ports":[{"port":80}]},"metadata":{"name":"same","namespace":"ns"}}"#;
    let yaml = svc_yaml("same", 80);
    let parsed = parse_manifests(Path::new("1.yaml"), yaml.as_bytes()).unwrap();
    assert_eq!(
        parsed[0].value(),
        serde_json::from_str::<serde_json::Value>(json).unwrap(),
        "the fixture must define the same object"
    );
    write(dir.path(), "2.json", json);
    let metrics = IndexMetrics::default();
    let mut services = services(dir.path(), &metrics).await;
    let Event::Reset(objs) = next(&mut services).await else {
        panic!("expected Reset")
    };
    assert_eq!(names(&objs), ["same"]);
    assert_eq!(metrics.conflicting_objects.get(), 0);
}

#[test]
fn lists_read_items_before_kind_and_objects_keep_a_field_named_items() {
    // kubectl prints `items` before `kind`.
    for (file, text) in [
        (
            "x.yaml",
            "apiVersion: v1\nitems:\n- apiVersion: v1\n  kind: Service\n  metadata: {name: a, namespace: ns}\n- apiVersion: v1\n  kind: Pod\n  metadata: {name: p, namespace: ns}\nkind: List\nmetadata: {resourceVersion: \"\"}\n",
        ),
        (
            "x.json",
            r#"{"apiVersion":"v1","items":[{"apiVersion":"v1","kind":"Service","metadata":{"name":"a","namespace":"ns"}},{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","namespace":"ns"}}],"kind":"PodList","metadata":{}}"#,
        ),
    ] {
        let objs = parse_manifests(Path::new(file), text.as_bytes()).unwrap();
        let names: Vec<_> = objs.iter().map(|o| o.obj_key.1.as_str()).collect();
        assert_eq!(names, ["a", "p"], "{file}");
    }
    // An object that is not a List keeps its `items` as they were.
    let yaml = "apiVersion: example.io/v1\nkind: Basket\nitems:\n- {apple: 1}\n- pear\n- 1\n- 2\nmetadata: {name: b}\n";
    let objs = parse_manifests(Path::new("x.yaml"), yaml.as_bytes()).unwrap();
    assert_eq!(objs.len(), 1);
    assert_eq!(
        objs[0].type_key,
        ("example.io".to_string(), "Basket".to_string())
    );
    assert_eq!(
        objs[0].value()["items"],
        serde_json::json!([{"apple": 1}, "pear", 1, 2])
    );
    let empty =
        "apiVersion: v1\nkind: List\nitems: null\n---\napiVersion: v1\nkind: List\nitems: []\n";
    assert!(
        parse_manifests(Path::new("x.yaml"), empty.as_bytes())
            .unwrap()
            .is_empty()
    );
}

#[tokio::test]
async fn objects_that_do_not_decode_are_skipped_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    let bad = "apiVersion: v1\nkind: Service\nmetadata: {name: bad, namespace: ns}\nspec: {ports: nope}\n";
    write(
        dir.path(),
        "a.yaml",
        &format!("{}---\n{bad}", svc_yaml("good", 80)),
    );
    let metrics = IndexMetrics::default();
    let mut services = services(dir.path(), &metrics).await;
    let Event::Reset(objs) = next(&mut services).await else {
        panic!("expected Reset")
    };
    assert_eq!(names(&objs), ["good"]);
    let text = {
        let mut registry = prometheus_client::registry::Registry::default();
        registry.register("index_invalid_objects", "", metrics.invalid_objects.clone());
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        text
    };
    assert!(
        text.contains("index_invalid_objects_total{cluster=\"local\",kind=\"Service\"} 1"),
        "{text}"
    );
}

/// A label or annotation written with no value (`tier:`, YAML's null) is `""`, as
/// `kubectl apply` and the API server store it: the object is served, in YAML and in a JSON
/// List alike (it was skipped).
#[tokio::test]
async fn a_label_with_no_value_is_empty_and_the_object_served() {
    let dir = tempfile::tempdir().unwrap();
    let yaml = "apiVersion: v1\nkind: Service\nmetadata:\n  name: web\n  namespace: ns\n  labels:\n    app: web\n    tier:\n  annotations:\n    note:\nspec:\n  ports:\n  - port: 80\n";
    let json = r#"{"apiVersion":"v1","kind":"List","items":[{"apiVersion":"v1","kind":"Service",
        "metadata":{"name":"api","namespace":"ns","labels":{"tier":null}},"spec":{"ports":[{"port":81}]}}]}"#;
    write(dir.path(), "a.yaml", yaml);
    write(dir.path(), "b.json", json);
    let metrics = IndexMetrics::default();
    let mut services = services(dir.path(), &metrics).await;
    let Event::Reset(objs) = next(&mut services).await else {
        panic!("expected Reset")
    };
    assert_eq!(names(&objs), ["api", "web"]);
    for svc in &objs {
        assert_eq!(svc.labels.get("tier"), Some(&String::new()), "{}", svc.name);
    }
}

/// A nameless object of a served kind is skipped and counted as invalid, whether on its own or
/// in a List, in YAML or JSON; one of a kind not served, or with no kind, is only logged.
#[tokio::test]
async fn nameless_objects_of_served_kinds_are_counted() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "a.yaml",
        &format!(
            "{}---\napiVersion: v1\nkind: Service\nmetadata: {{namespace: ns}}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {{}}\n",
            svc_yaml("good", 80)
        ),
    );
    write(
        dir.path(),
        "b.json",
        r#"{"apiVersion":"v1","kind":"List","items":[{"apiVersion":"v1","kind":"Service","metadata":{"namespace":"ns"}},{"kind":"Service"}]}"#,
    );
    let metrics = IndexMetrics::default();
    let mut services = services(dir.path(), &metrics).await;
    let Event::Reset(objs) = next(&mut services).await else {
        panic!("expected Reset")
    };
    assert_eq!(names(&objs), ["good"]);
    assert_eq!(metrics.invalid_objects("Service"), 2);
    assert_eq!(metrics.invalid_objects("ConfigMap"), 0);
}

/// An object of a namespaced kind without `metadata.namespace` is skipped and counted as
/// invalid: served under namespace `""`, a Service was announced as `nons..svc.cluster.local`,
/// which no proxy can resolve. A Node, cluster-scoped, needs none.
#[tokio::test]
async fn namespaced_objects_without_a_namespace_are_skipped() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "a.yaml",
        &format!(
            "{}---\napiVersion: v1\nkind: Service\nmetadata: {{name: nons}}\n\
             spec: {{clusterIP: 10.96.7.1, ports: [{{port: 80}}]}}\n---\n\
             apiVersion: v1\nkind: Node\nmetadata: {{name: node-1}}\n",
            svc_yaml("good", 80)
        ),
    );
    let metrics = IndexMetrics::default();
    let (services_tx, mut services) = mpsc::unbounded_channel();
    let (nodes_tx, mut nodes) = mpsc::unbounded_channel();
    let mut watches = Watches::new(metrics.clone());
    watches.add::<Service>(services_tx);
    watches.add::<k8s_openapi::api::core::v1::Node>(nodes_tx);
    let source = OfflineSource::new(dir.path(), metrics.clone()).expect("a directory");
    let _started = watches.start(&ClusterSource::Offline(source)).await;
    let Event::Reset(objs) = next(&mut services).await else {
        panic!("expected Reset")
    };
    assert_eq!(names(&objs), ["good"]);
    let Event::Reset(nodes) = next(&mut nodes).await else {
        panic!("expected Reset")
    };
    assert_eq!(
        nodes.iter().map(|n| n.name.as_str()).collect::<Vec<_>>(),
        ["node-1"]
    );
    assert_eq!(metrics.invalid_objects("Service"), 1);
    assert_eq!(metrics.invalid_objects("Node"), 0);
}

/// Names the API server would refuse are not served (newcomer finding: a Service named
/// `Web_Svc` in a state file was served, though no cluster could hold it): a Service's name
/// must be a DNS-1035 label, a Pod's a DNS-1123 subdomain, a namespace a DNS-1123 label. The
/// line names the kind, the object and the rule; the valid objects of the file are served.
#[test]
fn objects_whose_names_the_api_server_would_refuse_are_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let svc = |name: &str, namespace: &str| {
        format!(
            "---\napiVersion: v1\nkind: Service\nmetadata: {{name: '{name}', namespace: '{namespace}'}}\n\
             spec: {{ports: [{{port: 80}}]}}\n"
        )
    };
    let text = [
        svc("good", "ns"),
        svc("Web_Svc", "ns"),
        svc("0web", "ns"),
        svc("web.svc", "ns"),
        svc("good", "Ns"),
        svc("good", "ns.a"),
        "---\napiVersion: v1\nkind: Pod\nmetadata: {name: web-0.a, namespace: ns}\n".to_string(),
        "---\napiVersion: v1\nkind: Pod\nmetadata: {name: Web-1, namespace: ns}\n".to_string(),
    ]
    .concat();
    write(dir.path(), "a.yaml", &text);
    let metrics = IndexMetrics::default();
    let (services_tx, mut services) = mpsc::unbounded_channel::<Event<Arc<ServiceInfo>>>();
    let (pods_tx, mut pods) = mpsc::unbounded_channel::<Event<Arc<PodInfo>>>();
    let feeds = vec![
        feed::<Service>(services_tx, metrics.clone()),
        feed::<Pod>(pods_tx, metrics.clone()),
    ];
    let log = read_logged(dir.path(), feeds, &metrics);
    let Ok(Event::Reset(objs)) = services.try_recv() else {
        panic!("expected Reset")
    };
    assert_eq!(names(&objs), ["good"]);
    assert_eq!(objs[0].namespace, "ns");
    let Ok(Event::Reset(served)) = pods.try_recv() else {
        panic!("expected Reset")
    };
    assert_eq!(
        served.iter().map(|p| p.name.as_str()).collect::<Vec<_>>(),
        ["web-0.a"]
    );
    assert_eq!(metrics.invalid_objects("Service"), 5);
    assert_eq!(metrics.invalid_objects("Pod"), 1);
    let line = |needle: &str| {
        log.lines()
            .find(|l| l.contains(needle))
            .unwrap_or_else(|| panic!("no line with {needle}: {log}"))
    };
    let web_svc = line("name=Web_Svc");
    assert!(
        web_svc.contains("a Service's name must be a DNS-1035 label") && web_svc.contains("a.yaml"),
        "{web_svc}"
    );
    assert!(
        line("namespace=Ns").contains("a namespace must be a DNS-1123 label"),
        "{log}"
    );
    assert!(
        line("name=Web-1").contains("a name must be a DNS-1123 subdomain"),
        "{log}"
    );
}

/// The API server ignores the namespace of a cluster-scoped object, and the indexes key Nodes
/// by name: a Node written with a stray namespace is the same Node as without one (newcomer
/// finding: removing the file that gave it a namespace withdrew the Node another file still
/// defined, silently).
#[test]
fn a_cluster_scoped_object_is_one_object_with_or_without_a_namespace() {
    use k8s_openapi::api::core::v1::Node;
    let dir = tempfile::tempdir().unwrap();
    let node = |namespace: &str| {
        format!(
            "apiVersion: v1\nkind: Node\nmetadata: {{name: n3, {namespace}labels: \
             {{topology.kubernetes.io/zone: z1}}}}\n"
        )
    };
    std::fs::write(dir.path().join("a.yaml"), node("")).unwrap();
    std::fs::write(dir.path().join("b.yaml"), node("namespace: x, ")).unwrap();
    let metrics = IndexMetrics::default();
    let (tx, mut rx) = mpsc::unbounded_channel::<Event<Arc<crate::model::NodeInfo>>>();
    let mut state = StateDir::new(
        dir.path().to_path_buf(),
        vec![feed::<Node>(tx, metrics.clone())],
        metrics.clone(),
    );
    let mut rescan = || {
        let (changes, decoded) = state.rescan();
        state.deliver_changes(changes, decoded);
    };
    rescan();
    let mut served = Vec::new();
    while let Ok(event) = rx.try_recv() {
        match event {
            Event::Apply(node) => served.push(node.name.clone()),
            Event::Reset(nodes) => served.extend(nodes.iter().map(|n| n.name.clone())),
            Event::Delete(key) => panic!("{key:?} deleted"),
        }
    }
    assert_eq!(served, ["n3"]);
    std::fs::remove_file(dir.path().join("b.yaml")).unwrap();
    rescan();
    while let Ok(event) = rx.try_recv() {
        assert!(
            !matches!(event, Event::Delete(_)),
            "n3 withdrawn while a.yaml defines it: {event:?}"
        );
    }
    std::fs::remove_file(dir.path().join("a.yaml")).unwrap();
    rescan();
    assert!(
        matches!(rx.try_recv(), Ok(Event::Delete(_))),
        "n3 withdrawn with its last file"
    );
    assert_eq!(metrics.invalid_objects("Node"), 0);
}

#[test]
fn a_missing_directory_is_an_error_naming_it() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let err = OfflineSource::new("/nonexistent/state", IndexMetrics::default())
            .err()
            .unwrap();
        assert!(err.to_string().contains("/nonexistent/state"), "{err}");
        let file = tempfile::NamedTempFile::new().unwrap();
        let err = OfflineSource::new(file.path(), IndexMetrics::default())
            .err()
            .unwrap();
        assert!(err.to_string().contains("not a directory"), "{err}");
    });
}

#[tokio::test]
async fn reading_the_directory_does_not_trigger_another_read() {
    // Regression: inotify reports our own reads (open/close) as events; reacting to them re-read
    // the directory forever after the first change, and re-reported a bad file each time.
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "a.yaml", &svc_yaml("a", 80));
    let metrics = IndexMetrics::default();
    let mut services = services(dir.path(), &metrics).await;
    next(&mut services).await;
    write(dir.path(), "bad.yaml", "kind: [");
    write(dir.path(), "a.yaml", &svc_yaml("a", 81));
    assert!(matches!(next(&mut services).await, Event::Apply(_)));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let settled = metrics.offline_reloads.get();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        metrics.offline_reloads.get(),
        settled,
        "the directory keeps being re-read"
    );
    assert!(settled <= 2, "{settled} reloads for two writes");
    assert_eq!(metrics.invalid_files.get(), 1);

    // Files that are not manifests (notes, an editor's temporary file) are no reason to read.
    for i in 0..5 {
        write(dir.path(), "notes.txt", &format!("{i}"));
        write(dir.path(), "a.yaml~", &format!("{i}"));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(metrics.offline_reloads.get(), settled);
}

/// A bad file is logged with `kept_previous=true` only when its last good version defined
/// objects, which stay served; a file first read empty (created by `> file`, then written)
/// kept nothing (newcomer finding: it was logged `kept_previous=true`).
#[test]
fn a_bad_file_says_whether_objects_were_kept() {
    let dir = tempfile::tempdir().unwrap();
    let metrics = IndexMetrics::default();
    let mut state = state_dir(dir.path(), &metrics);
    let mut rescan = || {
        logged(|| {
            let (changes, decoded) = state.rescan();
            state.deliver_changes(changes, decoded);
        })
        .1
    };
    std::fs::write(dir.path().join("new.yaml"), "").unwrap();
    std::fs::write(dir.path().join("good.yaml"), svc_yaml("a", 80)).unwrap();
    rescan();
    assert_eq!(delivered(), [("a".to_string(), Some(80))]);
    std::fs::write(dir.path().join("new.yaml"), "kind: [").unwrap();
    std::fs::write(dir.path().join("good.yaml"), "kind: [\n").unwrap();
    let log = rescan();
    let line = |file: &str| {
        log.lines()
            .find(|l| l.contains(file))
            .unwrap_or_else(|| panic!("no line about {file}: {log}"))
            .to_string()
    };
    assert!(line("new.yaml").contains("kept_previous=false"), "{log}");
    assert!(line("good.yaml").contains("kept_previous=true"), "{log}");
    assert_eq!(delivered(), [], "a's definition stays served");
}

/// A directory missing when first listed, then created, is said to have appeared; one that
/// was listed before, went and came back, to be listed again (newcomer finding: the first
/// said "listed again" too).
#[test]
fn a_directory_that_appears_is_not_said_to_be_listed_again() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("state");
    let metrics = IndexMetrics::default();
    let mut state = state_dir(&dir, &metrics);
    let mut rescan = || logged(|| drop(state.rescan())).1;
    assert!(rescan().contains("cannot list the cluster state directory"));
    std::fs::create_dir(&dir).unwrap();
    let log = rescan();
    assert!(
        log.contains("cluster state directory appeared and was listed"),
        "{log}"
    );
    std::fs::remove_dir(&dir).unwrap();
    rescan();
    std::fs::create_dir(&dir).unwrap();
    let log = rescan();
    assert!(
        log.contains("cluster state directory listed again"),
        "{log}"
    );
}

/// A state directory whose Services are delivered into `DELIVERED` of the test's thread.
fn state_dir(dir: &Path, metrics: &IndexMetrics) -> StateDir {
    let (tx, rx) = mpsc::unbounded_channel::<Event<Arc<ServiceInfo>>>();
    DELIVERED.with(|d| *d.borrow_mut() = Some(rx));
    StateDir::new(
        dir.to_path_buf(),
        vec![feed::<Service>(tx, metrics.clone())],
        metrics.clone(),
    )
}

thread_local! {
    static DELIVERED: std::cell::RefCell<Option<Events<ServiceInfo>>> =
        const { std::cell::RefCell::new(None) };
}

/// `(name, port)` of each Service applied since the last call, `None` for a deleted one,
/// sorted by name.
fn delivered() -> Vec<(String, Option<u16>)> {
    let mut out = Vec::new();
    DELIVERED.with(|d| {
        let mut d = d.borrow_mut();
        let rx = d.as_mut().expect("a state directory");
        while let Ok(event) = rx.try_recv() {
            match event {
                Event::Apply(svc) => out.push((svc.name.clone(), Some(svc.ports[0].port))),
                Event::Delete(key) => out.push((key.name, None)),
                Event::Reset(svcs) => {
                    out.extend(svcs.iter().map(|s| (s.name.clone(), Some(s.ports[0].port))))
                }
            }
        }
    });
    out.sort();
    out
}

/// Re-lists the directory and delivers what changed; returns what was delivered.
fn rescan(state: &mut StateDir) -> Vec<(String, Option<u16>)> {
    let (changes, decoded) = state.rescan();
    state.deliver_changes(changes, decoded);
    delivered()
}

/// Re-reads `files` and delivers what changed; returns what was delivered.
fn refresh(state: &mut StateDir, dir: &Path, files: &[&str]) -> Vec<(String, Option<u16>)> {
    let paths = files.iter().map(|f| dir.join(f)).collect();
    let (changes, decoded) = state.refresh(&paths);
    state.deliver_changes(changes, decoded);
    delivered()
}

fn service_count(state: &StateDir) -> usize {
    state
        .defs
        .keys()
        .filter(|id| id.type_key.1 == "Service")
        .count()
}

/// Re-lists the directory; returns the number of Services it defines.
fn rescanned(state: &mut StateDir) -> usize {
    rescan(state);
    service_count(state)
}

#[test]
fn a_directory_moved_away_keeps_what_was_read() {
    // Regression: when the directory could not be listed, its files were re-read by their old
    // paths, found missing and withdrawn, although the log said they were kept.
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("state");
    std::fs::create_dir(&dir).unwrap();
    write(&dir, "a.yaml", &svc_yaml("a", 80));
    write(&dir, "b.yaml", &svc_yaml("b", 80));
    let mut state = state_dir(&dir, &IndexMetrics::default());
    assert_eq!(rescanned(&mut state), 2);
    std::fs::rename(&dir, root.path().join("elsewhere")).unwrap();
    assert_eq!(rescanned(&mut state), 2);
    // Back in place with one file fewer: read as usual again.
    std::fs::rename(root.path().join("elsewhere"), &dir).unwrap();
    std::fs::remove_file(dir.join("b.yaml")).unwrap();
    assert_eq!(rescanned(&mut state), 1);
}

#[test]
fn entries_that_are_not_regular_files_are_reported_once() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "a.yaml", &svc_yaml("a", 80));
    std::fs::create_dir(dir.path().join("sub.yaml")).unwrap();
    std::os::unix::fs::symlink("loop.yaml", dir.path().join("loop.yaml")).unwrap();
    std::os::unix::fs::symlink("missing", dir.path().join("dangling.yaml")).unwrap();
    let metrics = IndexMetrics::default();
    let mut state = state_dir(dir.path(), &metrics);
    assert_eq!(rescanned(&mut state), 1);
    assert_eq!(rescanned(&mut state), 1);
    assert_eq!(metrics.invalid_files.get(), 3, "each entry counted once");
    assert_eq!(state.unreadable.len(), 3);
    // Fixed (the dangling link now points at a manifest): no longer reported.
    write(dir.path(), "missing", &svc_yaml("m", 80));
    assert_eq!(rescanned(&mut state), 2);
    assert_eq!(state.unreadable.len(), 2);
}

#[test]
fn editing_one_file_among_many_changes_only_its_changed_objects() {
    let dir = tempfile::tempdir().unwrap();
    for f in ["a", "b", "c"] {
        let text = format!(
            "{}---\n{}",
            svc_yaml(&format!("{f}1"), 80),
            svc_yaml(&format!("{f}2"), 80)
        );
        write(dir.path(), &format!("{f}.yaml"), &text);
    }
    let mut state = state_dir(dir.path(), &IndexMetrics::default());
    assert_eq!(rescan(&mut state).len(), 6);
    write(
        dir.path(),
        "b.yaml",
        &format!("{}---\n{}", svc_yaml("b1", 80), svc_yaml("b2", 99)),
    );
    assert_eq!(
        refresh(&mut state, dir.path(), &["b.yaml"]),
        [("b2".to_string(), Some(99))]
    );
    // Rewriting the same contents, or a re-list, changes nothing.
    write(
        dir.path(),
        "b.yaml",
        &format!("{}---\n{}", svc_yaml("b1", 80), svc_yaml("b2", 99)),
    );
    assert!(refresh(&mut state, dir.path(), &["b.yaml"]).is_empty());
    assert!(rescan(&mut state).is_empty());
    // A notification for a file that is not a manifest reads nothing.
    write(dir.path(), "notes.txt", "x");
    assert!(refresh(&mut state, dir.path(), &["notes.txt"]).is_empty());
}

#[test]
fn a_removed_file_withdraws_the_objects_no_other_file_defines() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "a.yaml",
        &format!("{}---\n{}", svc_yaml("only-a", 80), svc_yaml("both", 80)),
    );
    write(dir.path(), "b.yaml", &svc_yaml("both", 80));
    let mut state = state_dir(dir.path(), &IndexMetrics::default());
    rescan(&mut state);
    std::fs::remove_file(dir.path().join("a.yaml")).unwrap();
    assert_eq!(
        refresh(&mut state, dir.path(), &["a.yaml"]),
        [("only-a".to_string(), None)]
    );
    assert_eq!(service_count(&state), 1);
    std::fs::remove_file(dir.path().join("b.yaml")).unwrap();
    assert_eq!(
        refresh(&mut state, dir.path(), &["b.yaml"]),
        [("both".to_string(), None)]
    );
}

#[test]
fn an_object_moved_between_files_is_no_change() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "a.yaml",
        &format!("{}---\n{}", svc_yaml("stays", 80), svc_yaml("moves", 80)),
    );
    write(dir.path(), "b.yaml", &svc_yaml("other", 80));
    let mut state = state_dir(dir.path(), &IndexMetrics::default());
    rescan(&mut state);
    write(dir.path(), "a.yaml", &svc_yaml("stays", 80));
    write(
        dir.path(),
        "b.yaml",
        &format!("{}---\n{}", svc_yaml("other", 80), svc_yaml("moves", 80)),
    );
    assert!(refresh(&mut state, dir.path(), &["a.yaml", "b.yaml"]).is_empty());
    assert_eq!(service_count(&state), 3);
    // Moved back with a change on the way: one change, no withdrawal.
    write(
        dir.path(),
        "a.yaml",
        &format!("{}---\n{}", svc_yaml("stays", 80), svc_yaml("moves", 81)),
    );
    write(dir.path(), "b.yaml", &svc_yaml("other", 80));
    assert_eq!(
        refresh(&mut state, dir.path(), &["a.yaml", "b.yaml"]),
        [("moves".to_string(), Some(81))]
    );
}

#[test]
fn a_conflict_resolves_to_the_previous_file_when_the_last_goes() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "1.yaml", &svc_yaml("x", 80));
    write(dir.path(), "2.yaml", &svc_yaml("x", 99));
    let metrics = IndexMetrics::default();
    let mut state = state_dir(dir.path(), &metrics);
    assert_eq!(rescan(&mut state), [("x".to_string(), Some(99))]);
    assert_eq!(metrics.conflicting_objects.get(), 1);
    std::fs::remove_file(dir.path().join("2.yaml")).unwrap();
    assert_eq!(
        refresh(&mut state, dir.path(), &["2.yaml"]),
        [("x".to_string(), Some(80))]
    );
}

#[tokio::test]
async fn streams_see_only_the_objects_of_the_edited_file() {
    let dir = tempfile::tempdir().unwrap();
    for f in ["a", "b", "c"] {
        let text = format!(
            "{}---\n{}",
            svc_yaml(&format!("{f}1"), 80),
            svc_yaml(&format!("{f}2"), 80)
        );
        write(dir.path(), &format!("{f}.yaml"), &text);
    }
    let mut services = services(dir.path(), &IndexMetrics::default()).await;
    assert!(matches!(next(&mut services).await, Event::Reset(o) if o.len() == 6));
    write(
        dir.path(),
        "b.yaml",
        &format!("{}---\n{}", svc_yaml("b1", 80), svc_yaml("b2", 99)),
    );
    match next(&mut services).await {
        Event::Apply(s) => {
            assert_eq!(s.name, "b2");
            assert_eq!(s.ports[0].port, 99);
        }
        other => panic!("expected Apply of b2, got {other:?}"),
    }
    // The next event is the next change: nothing else was emitted for the first one.
    std::fs::remove_file(dir.path().join("c.yaml")).unwrap();
    let mut deleted = Vec::new();
    for _ in 0..2 {
        match next(&mut services).await {
            Event::Delete(s) => deleted.push(s.name),
            other => panic!("expected Delete, got {other:?}"),
        }
    }
    deleted.sort();
    assert_eq!(deleted, ["c1", "c2"]);
}

#[test]
fn a_file_broken_again_the_same_way_is_reported_again() {
    // Regression: fixing a file back to the contents served left its bad version marked as
    // reported, so the same breakage a second time went unreported and uncounted.
    let dir = tempfile::tempdir().unwrap();
    let good = svc_yaml("a", 80);
    let bad = "apiVersion: v1\nkind: Service\nmetadata: [";
    let metrics = IndexMetrics::default();
    let mut state = state_dir(dir.path(), &metrics);
    write(dir.path(), "a.yaml", &good);
    assert_eq!(rescanned(&mut state), 1);
    for round in 1..=2 {
        write(dir.path(), "a.yaml", bad);
        refresh(&mut state, dir.path(), &["a.yaml"]);
        assert_eq!(metrics.invalid_files.get(), round);
        // The same bad contents notified again are not news.
        refresh(&mut state, dir.path(), &["a.yaml"]);
        assert_eq!(metrics.invalid_files.get(), round);
        write(dir.path(), "a.yaml", &good);
        refresh(&mut state, dir.path(), &["a.yaml"]);
        assert_eq!(service_count(&state), 1);
    }
}

/// A file whose objects are served from an earlier read, because what it holds now does not
/// parse, is empty, or cannot be read, is shown by `offline_stale_files`: a fresh start would
/// not serve those objects (newcomer finding: nothing said so while `/ready` answered ok).
#[test]
fn files_served_from_an_earlier_read_are_counted_stale() {
    let dir = tempfile::tempdir().unwrap();
    let metrics = IndexMetrics::default();
    let mut state = state_dir(dir.path(), &metrics);
    write(dir.path(), "a.yaml", &svc_yaml("a", 80));
    write(dir.path(), "b.yaml", &svc_yaml("b", 80));
    assert_eq!(rescanned(&mut state), 2);
    assert_eq!(metrics.stale_files(), 0);

    write(
        dir.path(),
        "a.yaml",
        "apiVersion: v1\nkind: Service\nmetadata: [",
    );
    refresh(&mut state, dir.path(), &["a.yaml"]);
    assert_eq!(service_count(&state), 2, "the last good contents are kept");
    assert_eq!(metrics.stale_files(), 1);
    write(dir.path(), "b.yaml", "");
    refresh(&mut state, dir.path(), &["b.yaml"]);
    assert_eq!(metrics.stale_files(), 2);

    // Fixed, or removed: nothing stale is left.
    write(dir.path(), "a.yaml", &svc_yaml("a", 81));
    refresh(&mut state, dir.path(), &["a.yaml"]);
    assert_eq!(metrics.stale_files(), 1);
    std::fs::remove_file(dir.path().join("b.yaml")).unwrap();
    refresh(&mut state, dir.path(), &["b.yaml"]);
    assert_eq!(metrics.stale_files(), 0);
    assert_eq!(service_count(&state), 1);

    // A file that never parsed serves nothing: not stale.
    write(
        dir.path(),
        "c.yaml",
        "apiVersion: v1\nkind: Service\nmetadata: [",
    );
    refresh(&mut state, dir.path(), &["c.yaml"]);
    assert_eq!(metrics.stale_files(), 0);

    // Grown past the size limit (newcomer finding: not counted).
    let big = std::fs::OpenOptions::new()
        .write(true)
        .open(dir.path().join("a.yaml"))
        .unwrap();
    big.set_len(MAX_FILE_BYTES + 1).unwrap();
    refresh(&mut state, dir.path(), &["a.yaml"]);
    assert_eq!(service_count(&state), 1, "the last good contents are kept");
    assert_eq!(metrics.stale_files(), 1);
    write(dir.path(), "a.yaml", &svc_yaml("a", 81));
    refresh(&mut state, dir.path(), &["a.yaml"]);
    assert_eq!(metrics.stale_files(), 0);
}

/// While the directory cannot be listed, every file it served is stale: a fresh start would
/// serve none of them (newcomer finding: the gauge stayed 0).
#[test]
fn files_of_a_directory_moved_away_are_stale_until_it_is_back() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("state");
    std::fs::create_dir(&dir).unwrap();
    write(&dir, "a.yaml", &svc_yaml("a", 80));
    write(&dir, "b.yaml", &svc_yaml("b", 80));
    let metrics = IndexMetrics::default();
    let mut state = state_dir(&dir, &metrics);
    assert_eq!(rescanned(&mut state), 2);
    std::fs::rename(&dir, root.path().join("away")).unwrap();
    assert_eq!(rescanned(&mut state), 2);
    assert_eq!(metrics.stale_files(), 2);
    std::fs::rename(root.path().join("away"), &dir).unwrap();
    assert_eq!(rescanned(&mut state), 2);
    assert_eq!(metrics.stale_files(), 0);
}

/// Records which kind each delivered batch was of, and whether it only deleted.
struct KindLog(&'static str, Arc<std::sync::Mutex<Vec<String>>>);

impl<K: crate::model::Kind> crate::watches::Sink<K> for KindLog {
    fn apply(&self, events: &[Event<Arc<K::Object>>]) -> usize {
        let deletes = events.iter().all(|e| matches!(e, Event::Delete(_)));
        let what = if deletes { "delete" } else { "apply" };
        self.1.lock().unwrap().push(format!("{what} {}", self.0));
        0
    }
}

/// A file added or removed reaches the indexes Pods, then EndpointSlices, then the Service
/// when added, and the Service first when removed: a stream sees its Service appear with its
/// endpoints, or go, never a slice naming Pods not there (newcomer finding: removing a file
/// sent `NoEndpoints{exists: true}`, then `exists: false`, and warned of unindexed Pods).
#[test]
fn a_file_is_delivered_referenced_kinds_first_and_withdrawn_in_reverse() {
    use k8s_openapi::api::discovery::v1::EndpointSlice;
    let dir = tempfile::tempdir().unwrap();
    let metrics = IndexMetrics::default();
    let log = Arc::new(std::sync::Mutex::new(Vec::new()));
    let feeds = vec![
        feed::<Service>(KindLog("Service", log.clone()), metrics.clone()),
        feed::<EndpointSlice>(KindLog("EndpointSlice", log.clone()), metrics.clone()),
        feed::<Pod>(KindLog("Pod", log.clone()), metrics.clone()),
    ];
    let mut state = StateDir::new(dir.path().to_path_buf(), feeds, metrics);
    let (changes, decoded) = state.rescan();
    state.deliver_initial(changes, decoded);
    log.lock().unwrap().clear();

    let pod = "apiVersion: v1\nkind: Pod\nmetadata: {name: web-0, namespace: ns, labels: {app: web}}\nstatus: {podIP: 10.0.0.1}\n";
    let slice = "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {name: web-1, namespace: ns, labels: {kubernetes.io/service-name: web}}\naddressType: IPv4\nendpoints: [{addresses: [10.0.0.1], targetRef: {kind: Pod, name: web-0, namespace: ns}}]\nports: [{port: 8080}]\n";
    let text = format!("{}---\n{slice}---\n{pod}", svc_yaml("web", 80));
    write(dir.path(), "web.yaml", &text);
    let (changes, decoded) = state.refresh(&[dir.path().join("web.yaml")].into());
    state.deliver_changes(changes, decoded);
    assert_eq!(
        *log.lock().unwrap(),
        ["apply Pod", "apply EndpointSlice", "apply Service"]
    );
    log.lock().unwrap().clear();

    std::fs::remove_file(dir.path().join("web.yaml")).unwrap();
    let (changes, decoded) = state.refresh(&[dir.path().join("web.yaml")].into());
    state.deliver_changes(changes, decoded);
    assert_eq!(
        *log.lock().unwrap(),
        ["delete Service", "delete EndpointSlice", "delete Pod"]
    );
}

/// A rewrite that removes a Pod and its endpoint while it changes another Pod delivers the
/// Pods changed, then the EndpointSlice, then the Pod removed: a stream's next view never names
/// a Pod already gone (newcomer finding: the Pods' batch, applied whole before the slice, made
/// each view computed in between warn of an unindexed Pod and drop its endpoint a moment early).
#[test]
fn a_pod_removed_with_its_endpoint_goes_after_the_slice() {
    use k8s_openapi::api::discovery::v1::EndpointSlice;
    let dir = tempfile::tempdir().unwrap();
    let metrics = IndexMetrics::default();
    let log = Arc::new(std::sync::Mutex::new(Vec::new()));
    let feeds = vec![
        feed::<Service>(KindLog("Service", log.clone()), metrics.clone()),
        feed::<EndpointSlice>(KindLog("EndpointSlice", log.clone()), metrics.clone()),
        feed::<Pod>(KindLog("Pod", log.clone()), metrics.clone()),
    ];
    let pod = |name: &str, ip: &str, version: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: ns, labels: {{app: web, version: {version}}}}}\nstatus: {{podIP: {ip}}}\n"
        )
    };
    let slice = |pods: &[(&str, &str)]| {
        let endpoints: Vec<String> = pods
            .iter()
            .map(|(name, ip)| {
                format!(
                    "{{addresses: [{ip}], targetRef: {{kind: Pod, name: {name}, namespace: ns}}}}"
                )
            })
            .collect();
        format!(
            "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {{name: web-1, namespace: ns, labels: {{kubernetes.io/service-name: web}}}}\naddressType: IPv4\nendpoints: [{}]\nports: [{{port: 8080}}]\n",
            endpoints.join(", ")
        )
    };
    let before = format!(
        "{}---\n{}---\n{}---\n{}",
        svc_yaml("web", 80),
        slice(&[("web-0", "10.0.0.1"), ("web-1", "10.0.0.2")]),
        pod("web-0", "10.0.0.1", "v1"),
        pod("web-1", "10.0.0.2", "v1"),
    );
    write(dir.path(), "web.yaml", &before);
    let mut state = StateDir::new(dir.path().to_path_buf(), feeds, metrics);
    let (changes, decoded) = state.rescan();
    state.deliver_initial(changes, decoded);
    log.lock().unwrap().clear();

    let after = format!(
        "{}---\n{}---\n{}",
        svc_yaml("web", 80),
        slice(&[("web-0", "10.0.0.1")]),
        pod("web-0", "10.0.0.1", "v2"),
    );
    write(dir.path(), "web.yaml", &after);
    let (changes, decoded) = state.refresh(&[dir.path().join("web.yaml")].into());
    state.deliver_changes(changes, decoded);
    assert_eq!(
        *log.lock().unwrap(),
        ["apply Pod", "apply EndpointSlice", "delete Pod"]
    );
}

#[test]
fn deeply_nested_files_are_refused_before_parsing() {
    // Regression: 100,000 levels of `[` kept the YAML parser busy for minutes (its work grows
    // with the square of the depth) inside a runtime task, stalling every stream and `/ready`.
    let deep = "[".repeat(100_000);
    let err = parse_manifests(Path::new("x.yaml"), deep.as_bytes()).unwrap_err();
    assert!(matches!(err, FileError::TooDeep { limit: 256 }), "{err}");
    assert!(err.to_string().contains("nested deeper than 256"), "{err}");
    // JSON is split into objects without recursion (a document that is no object is skipped),
    // and an object is read to serde_json's recursion limit: its file is refused.
    let err = parse_manifests(Path::new("x.json"), deep.as_bytes()).unwrap_err();
    assert!(
        err.to_string().contains("EOF while parsing a list"),
        "{err}"
    );
    let deep_array = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    assert!(
        parse_manifests(Path::new("x.json"), deep_array.as_bytes())
            .unwrap()
            .is_empty()
    );
    let deep_object = format!(
        r#"{{"apiVersion":"v1","kind":"Service","metadata":{{"name":"a"}},"spec":{}{}}}"#,
        "[".repeat(100_000),
        "]".repeat(100_000)
    );
    for text in [
        deep_object.clone(),
        format!(r#"{{"kind":"List","items":[{deep_object}]}}"#),
    ] {
        let err = parse_manifests(Path::new("x.json"), text.as_bytes()).unwrap_err();
        assert!(
            err.to_string().contains("recursion limit exceeded"),
            "{err}"
        );
    }
    // A List item that is not an object is skipped alone, however deep it nests.
    let deep_item = format!(
        r#"{{"kind":"List","items":[{}{},{{"apiVersion":"v1","kind":"Service","metadata":{{"name":"a"}}}}]}}"#,
        "[".repeat(200),
        "]".repeat(200)
    );
    let objs = parse_manifests(Path::new("x.json"), deep_item.as_bytes()).unwrap();
    assert_eq!(objs.len(), 1);
    assert_eq!(objs[0].obj_key, (String::new(), "a".to_string()));
    let mixed = format!("a: {}", "{b: [".repeat(200));
    assert!(matches!(
        parse_manifests(Path::new("x.yaml"), mixed.as_bytes()),
        Err(FileError::TooDeep { .. })
    ));
    // Brackets inside quoted strings and comments do not count; a quote inside a plain scalar
    // opens no string, so it cannot hide brackets.
    let quoted = format!(
        "apiVersion: v1\nkind: Service\nmetadata:\n  name: q\n  annotations:\n    a: \"{}\"\n    b: '{}'\n# {}\n",
        "[".repeat(300),
        "{".repeat(300),
        "[".repeat(300),
    );
    let objs = parse_manifests(Path::new("x.yaml"), quoted.as_bytes()).unwrap();
    assert_eq!(
        objs[0].value()["metadata"]["annotations"]["a"],
        "[".repeat(300)
    );
    assert!(nesting_exceeds(
        format!("a: it's {}", "[".repeat(300)).as_bytes(),
        256
    ));
    assert!(!nesting_exceeds(
        format!("a: \"{}\"", "[".repeat(300)).as_bytes(),
        256
    ));
    assert!(!nesting_exceeds(
        format!("{{\"a\": \"{}\\\"{}\"}}", "[".repeat(300), "]").as_bytes(),
        256
    ));
    // Block nesting is bounded by serde's own recursion limit, and fast.
    let block = format!("{}x\n", "- ".repeat(100_000));
    let err = parse_manifests(Path::new("x.yaml"), block.as_bytes()).unwrap_err();
    assert!(err.to_string().contains("budget breached: Depth"), "{err}");
}

#[test]
fn oversized_and_deep_files_are_reported_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "ok.yaml", &svc_yaml("a", 80));
    write(dir.path(), "deep.yaml", &"[".repeat(100_000));
    let big = std::fs::File::create(dir.path().join("big.yaml")).unwrap();
    // Sparse: no 64 MiB written.
    big.set_len(MAX_FILE_BYTES + 1).unwrap();
    let metrics = IndexMetrics::default();
    let mut state = state_dir(dir.path(), &metrics);
    assert_eq!(rescanned(&mut state), 1);
    assert_eq!(metrics.invalid_files.get(), 2);
    let err = read_limited_into(&dir.path().join("big.yaml"), &mut Vec::new()).unwrap_err();
    assert!(
        err.to_string().contains("larger than 67108864 bytes"),
        "{err}"
    );
}

#[test]
fn decode_errors_name_the_field() {
    let value: serde_json::Value = serde_json::from_str(
        r#"{"apiVersion":"v1","kind":"Service","metadata":{"name":"a"},"spec":{"ports":[{"port":"http"}]}}"#,
    )
    .unwrap();
    let err = crate::model::decode_value::<Service>(&value)
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("does not decode: spec.ports[0].port: invalid type"),
        "{err}"
    );
}

#[test]
fn a_truncated_file_keeps_its_objects_until_rewritten_or_removed() {
    // Regression: `kubectl get -o yaml > file` truncates before writing; the empty file was
    // read and every Service in it withdrawn (NoEndpoints on every stream) until the write.
    let dir = tempfile::tempdir().unwrap();
    let metrics = IndexMetrics::default();
    let mut state = state_dir(dir.path(), &metrics);
    write(
        dir.path(),
        "a.yaml",
        &format!("{}---\n{}", svc_yaml("a", 80), svc_yaml("b", 80)),
    );
    assert_eq!(rescanned(&mut state), 2);
    write(dir.path(), "a.yaml", "");
    assert_eq!(refresh(&mut state, dir.path(), &["a.yaml"]), []);
    assert_eq!(service_count(&state), 2);
    assert_eq!(
        metrics.invalid_files.get(),
        0,
        "an empty file is not invalid"
    );
    // The write completes with one object changed: only that one is news.
    write(
        dir.path(),
        "a.yaml",
        &format!("{}---\n{}", svc_yaml("a", 81), svc_yaml("b", 80)),
    );
    assert_eq!(
        refresh(&mut state, dir.path(), &["a.yaml"]),
        [("a".to_string(), Some(81))]
    );
    // Removing the file withdraws them.
    std::fs::remove_file(dir.path().join("a.yaml")).unwrap();
    assert_eq!(
        refresh(&mut state, dir.path(), &["a.yaml"]),
        [("a".to_string(), None), ("b".to_string(), None)]
    );
    // A file that starts empty is simply empty.
    write(dir.path(), "c.yaml", "");
    assert_eq!(refresh(&mut state, dir.path(), &["c.yaml"]), []);

    // A JSON file emptied, then written with blanks only (which compact to nothing), holds
    // no objects: they go, as a fresh start would have them (final tester's finding: the
    // blanks read as the empty file kept, and the objects stayed served).
    let list = |port: u16| {
        format!(
            r#"{{"kind": "List", "items": [{{"apiVersion": "v1", "kind": "Service", "metadata": {{"name": "j", "namespace": "ns"}}, "spec": {{"ports": [{{"port": {port}}}]}}}}]}}"#
        )
    };
    write(dir.path(), "j.json", &list(80));
    assert_eq!(
        refresh(&mut state, dir.path(), &["j.json"]),
        [("j".to_string(), Some(80))]
    );
    write(dir.path(), "j.json", "");
    assert_eq!(refresh(&mut state, dir.path(), &["j.json"]), []);
    write(dir.path(), "j.json", "  \n\n");
    assert_eq!(
        refresh(&mut state, dir.path(), &["j.json"]),
        [("j".to_string(), None)]
    );
    // Reindenting a served file is no change.
    write(dir.path(), "j.json", &list(81));
    assert_eq!(
        refresh(&mut state, dir.path(), &["j.json"]),
        [("j".to_string(), Some(81))]
    );
    write(
        dir.path(),
        "j.json",
        &format!("\n\n{}\n   ", list(81).replace(", ", ",\n    ")),
    );
    assert_eq!(refresh(&mut state, dir.path(), &["j.json"]), []);
}

/// TLSRoutes and TCPRoutes are read at v1alpha2 as `kubectl get -o yaml` prints them; a
/// v1alpha2 TLSRoute may leave out `hostnames`, which the v1-typed TLSRoute requires.
#[tokio::test]
async fn v1alpha2_tls_and_tcp_routes_decode_and_delete() {
    use linkerd_k8s_api::gateway_api::experimental::{tcproutes::TcpRoute, tlsroutes::TlsRoute};
    let route = |kind: &str, name: &str| {
        format!(
            "apiVersion: gateway.networking.k8s.io/v1alpha2\nkind: {kind}\nmetadata: {{name: {name}, namespace: ns}}\nspec:\n  parentRefs: [{{kind: Service, name: web, port: 443}}]\n  rules:\n  - backendRefs: [{{name: web, port: 443}}]\n"
        )
    };
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "routes.yaml",
        &format!("{}---\n{}", route("TLSRoute", "t"), route("TCPRoute", "c")),
    );
    let metrics = IndexMetrics::default();
    let (tls_tx, mut tls) = mpsc::unbounded_channel::<Event<Arc<TlsRoute>>>();
    let (tcp_tx, mut tcp) = mpsc::unbounded_channel::<Event<Arc<TcpRoute>>>();
    let mut watches = Watches::new(metrics.clone());
    watches.add::<TlsRoute>(tls_tx).add::<TcpRoute>(tcp_tx);
    let source = OfflineSource::new(dir.path(), metrics.clone()).unwrap();
    watches.start(&ClusterSource::Offline(source)).await;
    match next(&mut tls).await {
        Event::Reset(routes) => {
            assert_eq!(routes.len(), 1);
            assert_eq!(routes[0].metadata.name.as_deref(), Some("t"));
            assert_eq!(routes[0].spec.hostnames, Vec::<String>::new());
            assert_eq!(routes[0].spec.rules[0].backend_refs[0].port, Some(443));
        }
        other => panic!("expected Reset, got {other:?}"),
    }
    match next(&mut tcp).await {
        Event::Reset(routes) => {
            assert_eq!(routes.len(), 1);
            assert_eq!(routes[0].metadata.name.as_deref(), Some("c"));
        }
        other => panic!("expected Reset, got {other:?}"),
    }
    std::fs::remove_file(dir.path().join("routes.yaml")).unwrap();
    assert!(matches!(next(&mut tls).await, Event::Delete(r) if r.name == "t"));
}

#[tokio::test]
async fn a_directory_deleted_and_recreated_is_read_and_watched_again() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("state");
    std::fs::create_dir(&dir).unwrap();
    write(&dir, "a.yaml", &svc_yaml("a", 80));
    let metrics = IndexMetrics::default();
    let mut services = services(&dir, &metrics).await;
    assert!(matches!(next(&mut services).await, Event::Reset(o) if o.len() == 1));

    // What was read stands while the directory is gone (as when it is moved away), and the
    // retries that find it missing read nothing: they are not counted as reloads...
    std::fs::remove_dir_all(&dir).unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let reloads = metrics.offline_reloads.get();
    tokio::time::sleep(RETRY_MIN * 3).await;
    assert_eq!(metrics.offline_reloads.get(), reloads);
    // ...and once it is back, it is listed again within a retry.
    std::fs::create_dir(&dir).unwrap();
    write(&dir, "b.yaml", &svc_yaml("b", 80));
    assert!(matches!(next(&mut services).await, Event::Apply(s) if s.name == "b"));
    assert!(matches!(next(&mut services).await, Event::Delete(s) if s.name == "a"));
    // And watched again.
    write(&dir, "b.yaml", &svc_yaml("b", 81));
    assert_eq!(applied_port(&mut services).await, 81);
}

/// A state directory given as a symlink that is then re-pointed (`ln -sfn` and a rename, as
/// git-sync publishes), or replaced by a directory, is read and watched anew (tester finding:
/// the old target stayed served and watched, and its edits applied, until a restart).
#[tokio::test]
async fn a_state_directory_link_re_pointed_or_replaced_is_followed() {
    let root = tempfile::tempdir().unwrap();
    let root = root.path();
    for name in ["a", "b"] {
        std::fs::create_dir(root.join(name)).unwrap();
        write(&root.join(name), "svc.yaml", &svc_yaml(name, 80));
    }
    std::os::unix::fs::symlink("a", root.join("main")).unwrap();
    let metrics = IndexMetrics::default();
    let mut services = services(&root.join("main"), &metrics).await;
    assert!(matches!(next(&mut services).await, Event::Reset(o) if names(&o) == ["a"]));

    // Neighbours of the link come and go without a read.
    let reloads = metrics.offline_reloads.get();
    write(root, "notes.txt", "x");
    std::os::unix::fs::symlink("b", root.join("main.new")).unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(metrics.offline_reloads.get(), reloads);

    std::fs::rename(root.join("main.new"), root.join("main")).unwrap();
    assert!(matches!(next(&mut services).await, Event::Apply(s) if s.name == "b"));
    assert!(matches!(next(&mut services).await, Event::Delete(s) if s.name == "a"));
    // The new target is watched, the old one no more.
    write(&root.join("b"), "svc.yaml", &svc_yaml("b", 81));
    assert_eq!(applied_port(&mut services).await, 81);
    write(&root.join("a"), "svc.yaml", &svc_yaml("a", 82));
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        services.try_recv().is_err(),
        "the old target's edit is not served"
    );

    // The link replaced by a directory of its own.
    std::fs::create_dir(root.join("c")).unwrap();
    write(&root.join("c"), "svc.yaml", &svc_yaml("c", 80));
    std::fs::remove_file(root.join("main")).unwrap();
    std::fs::rename(root.join("c"), root.join("main")).unwrap();
    assert!(matches!(next(&mut services).await, Event::Apply(s) if s.name == "c"));
    assert!(matches!(next(&mut services).await, Event::Delete(s) if s.name == "b"));
    write(&root.join("main"), "svc.yaml", &svc_yaml("c", 83));
    assert_eq!(applied_port(&mut services).await, 83);
}

#[tokio::test]
async fn a_config_map_volume_update_is_read() {
    // The layout kubelet gives a ConfigMap volume: the manifest is a symlink through `..data`,
    // and an update swaps `..data` to a new directory in one rename.
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let version = |name: &str, port: u16| {
        std::fs::create_dir(dir.join(name)).unwrap();
        std::fs::write(dir.join(name).join("a.yaml"), svc_yaml("a", port)).unwrap();
        std::os::unix::fs::symlink(name, dir.join("..data_tmp")).unwrap();
        std::fs::rename(dir.join("..data_tmp"), dir.join("..data")).unwrap();
    };
    version("..v1", 80);
    std::os::unix::fs::symlink("..data/a.yaml", dir.join("a.yaml")).unwrap();
    let mut services = services(dir, &IndexMetrics::default()).await;
    assert!(matches!(next(&mut services).await, Event::Reset(o) if o.len() == 1));

    version("..v2", 81);
    std::fs::remove_dir_all(dir.join("..v1")).unwrap();
    assert_eq!(applied_port(&mut services).await, 81);
}

#[tokio::test]
async fn edits_to_a_directory_moved_away_withdraw_nothing() {
    let root = tempfile::tempdir().unwrap();
    let (dir, away) = (root.path().join("state"), root.path().join("state.old"));
    std::fs::create_dir(&dir).unwrap();
    write(&dir, "a.yaml", &svc_yaml("a", 80));
    let mut services = services(&dir, &IndexMetrics::default()).await;
    assert!(matches!(next(&mut services).await, Event::Reset(o) if o.len() == 1));

    // The watch follows the directory; its notifications name the old paths, where nothing is.
    std::fs::rename(&dir, &away).unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    write(&away, "a.yaml", &svc_yaml("a", 81));
    let quiet = tokio::time::timeout(Duration::from_millis(500), services.recv()).await;
    assert!(quiet.is_err(), "{quiet:?}");
    // Back in place, it is listed again (a retry) and read as it is now.
    std::fs::rename(&away, &dir).unwrap();
    assert_eq!(applied_port(&mut services).await, 81);
}

/// A directory holding a link into its parent (whose directory is watched to follow the link)
/// is followed again once moved away and back (newcomer finding: `notify` dropped the
/// directory's watch when the parent's watch saw it moved, and later edits were never read).
#[tokio::test]
async fn a_directory_with_a_link_into_its_parent_is_followed_after_a_move_and_back() {
    let root = tempfile::tempdir().unwrap();
    let (dir, away) = (root.path().join("state"), root.path().join("state.old"));
    std::fs::create_dir(&dir).unwrap();
    write(&dir, "a.yaml", &svc_yaml("a", 80));
    write(root.path(), "p.yaml", &svc_yaml("p", 80));
    std::os::unix::fs::symlink("../p.yaml", dir.join("p.yaml")).unwrap();
    let mut services = services(&dir, &IndexMetrics::default()).await;
    assert!(matches!(next(&mut services).await, Event::Reset(o) if o.len() == 2));

    // Away long enough that a read finds it gone and a retry misses it too.
    std::fs::rename(&dir, &away).unwrap();
    tokio::time::sleep(RETRY_MIN * 2).await;
    std::fs::rename(&away, &dir).unwrap();
    // Listed again within a retry; nothing changed, so nothing is delivered.
    tokio::time::sleep(RETRY_MIN * 3).await;
    write(&dir, "r.yaml", &svc_yaml("r", 80));
    assert!(matches!(next(&mut services).await, Event::Apply(s) if s.name == "r"));
    write(&dir, "a.yaml", &svc_yaml("a", 81));
    assert_eq!(applied_port(&mut services).await, 81);
}

/// A link target's directory moved away, moved back, deleted and created again, while the
/// directory above it is watched too (a link into the state directory's parent): the link's
/// objects go and come back, and later edits are read (newcomer finding: the moves went
/// unnoticed, and `notify` dropped the directory's watch, so the old object stayed served).
#[tokio::test]
async fn a_link_targets_directory_moved_or_recreated_under_a_watched_parent_is_followed() {
    let root = tempfile::tempdir().unwrap();
    let (dir, target, away) = (
        root.path().join("state"),
        root.path().join("target"),
        root.path().join("target.away"),
    );
    std::fs::create_dir(&dir).unwrap();
    std::fs::create_dir(&target).unwrap();
    write(&target, "t.yaml", &svc_yaml("t", 80));
    write(root.path(), "p.yaml", &svc_yaml("p", 80));
    // Relative, as `ln -s ../target/t.yaml` writes it: resolved through `state/..` (newcomer
    // finding: while the directory was gone, the unresolved path looked inside `state`).
    std::os::unix::fs::symlink("../target/t.yaml", dir.join("t.yaml")).unwrap();
    std::os::unix::fs::symlink("../p.yaml", dir.join("p.yaml")).unwrap();
    let mut services = services(&dir, &IndexMetrics::default()).await;
    assert!(matches!(next(&mut services).await, Event::Reset(o) if o.len() == 2));

    // Moved away, the link dangles: its object goes. Moved back, it comes back, and edits
    // in the directory are read again.
    std::fs::rename(&target, &away).unwrap();
    assert!(matches!(next(&mut services).await, Event::Delete(s) if s.name == "t"));
    std::fs::rename(&away, &target).unwrap();
    assert_eq!(applied_port(&mut services).await, 80);
    write(&target, "t.yaml", &svc_yaml("t", 81));
    assert_eq!(applied_port(&mut services).await, 81);

    // Deleted and created again.
    std::fs::remove_dir_all(&target).unwrap();
    assert!(matches!(next(&mut services).await, Event::Delete(s) if s.name == "t"));
    std::fs::create_dir(&target).unwrap();
    write(&target, "t.yaml", &svc_yaml("t", 82));
    assert_eq!(applied_port(&mut services).await, 82);
    write(&target, "t.yaml", &svc_yaml("t", 83));
    assert_eq!(applied_port(&mut services).await, 83);
}

/// Removing a file withdraws its objects from every proxy: the log says which file went and how
/// many objects it defined.
#[test]
fn a_removed_file_is_logged_with_its_objects() {
    let dir = tempfile::tempdir().unwrap();
    let metrics = IndexMetrics::default();
    write(dir.path(), "a.yaml", &svc_yaml("a", 80));
    // `b` defined twice is one object (newcomer finding: the line counted definitions).
    write(
        dir.path(),
        "b.yaml",
        &format!(
            "{}---\n{}---\n{}",
            svc_yaml("b", 80),
            svc_yaml("c", 80),
            svc_yaml("b", 81)
        ),
    );
    let mut state = state_dir(dir.path(), &metrics);
    assert_eq!(rescanned(&mut state), 3);
    std::fs::remove_file(dir.path().join("b.yaml")).unwrap();
    let (_, log) = logged(|| rescan(&mut state));
    let line = format!(
        "cluster state file removed; withdrawing its objects (unless another file defines them) file={} objects=2",
        dir.path().join("b.yaml").display()
    );
    assert!(log.contains(&line), "{line}\n{log}");
    assert_eq!(service_count(&state), 1);
}

/// A third definition names its own file, and one that agrees with the served definition
/// reports nothing (newcomer finding: the third file's conflict named the second file); a
/// conflict left behind when the served file goes is reported again, naming every file that
/// still differs (newcomer finding).
#[test]
fn each_conflicting_file_is_reported_once_by_name() {
    // Definitions as the state keeps them, served first: the last path first.
    let def = |path: &str, digest: u64| (Arc::<Path>::from(Path::new(path)), digest);
    let defs = vec![def("z.yaml", 1), def("b.yaml", 2), def("a.yaml", 3)];
    let named = |defs: &Definitions, path: &str, served_before: &str| {
        new_conflict(defs, Path::new(path), Some(Path::new(served_before))).map(
            |(served, ignored)| {
                let ignored: Vec<String> =
                    ignored.iter().map(|p| p.display().to_string()).collect();
                (served.display().to_string(), ignored.join(", "))
            },
        )
    };
    let pair = |a: &str, b: &str| Some((a.to_string(), b.to_string()));
    assert_eq!(named(&defs, "a.yaml", "z.yaml"), pair("z.yaml", "a.yaml"));
    assert_eq!(named(&defs, "b.yaml", "z.yaml"), pair("z.yaml", "b.yaml"));
    // The served file read again: every file that differs.
    assert_eq!(
        named(&defs, "z.yaml", "z.yaml"),
        pair("z.yaml", "b.yaml, a.yaml")
    );
    let agreeing = vec![def("z.yaml", 1), def("y.yaml", 1), def("a.yaml", 2)];
    assert_eq!(named(&agreeing, "y.yaml", "z.yaml"), None);
    // No longer defined by the file read, the served file unchanged.
    assert_eq!(named(&agreeing, "gone.yaml", "z.yaml"), None);
    // The served file removed: the previous one is served, and the conflict is still there.
    let left = vec![def("b.yaml", 2), def("a.yaml", 3)];
    assert_eq!(named(&left, "z.yaml", "z.yaml"), pair("b.yaml", "a.yaml"));

    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "z.yaml", &svc_yaml("x", 80));
    write(dir.path(), "b.yaml", &svc_yaml("x", 99));
    let metrics = IndexMetrics::default();
    let mut state = state_dir(dir.path(), &metrics);
    rescan(&mut state);
    assert_eq!(metrics.conflicting_objects.get(), 1);
    write(dir.path(), "a.yaml", &svc_yaml("x", 81));
    assert!(refresh(&mut state, dir.path(), &["a.yaml"]).is_empty());
    assert_eq!(metrics.conflicting_objects.get(), 2);
    write(dir.path(), "y.yaml", &svc_yaml("x", 80));
    assert!(refresh(&mut state, dir.path(), &["y.yaml"]).is_empty());
    assert_eq!(metrics.conflicting_objects.get(), 2);
    // z.yaml goes: y.yaml agrees and is served, so nothing served changes, and the conflict
    // left behind is reported.
    std::fs::remove_file(dir.path().join("z.yaml")).unwrap();
    assert!(refresh(&mut state, dir.path(), &["z.yaml"]).is_empty());
    assert_eq!(metrics.conflicting_objects.get(), 3);
    // y.yaml goes too: b.yaml is served, a.yaml still differs.
    std::fs::remove_file(dir.path().join("y.yaml")).unwrap();
    assert_eq!(
        refresh(&mut state, dir.path(), &["y.yaml"]),
        [("x".to_string(), Some(99))]
    );
    assert_eq!(metrics.conflicting_objects.get(), 4);
}

/// A Service feed whose index refuses the Service `ns/bad` after it decoded, as the outbound
/// index refuses an HTTPRoute whose regex does not compile.
struct RefusingFeed(Arc<dyn KindFeed>, IndexMetrics);

impl KindFeed for RefusingFeed {
    fn type_key(&self) -> (&str, &str) {
        self.0.type_key()
    }
    fn label(&self) -> &'static str {
        self.0.label()
    }
    fn namespaced(&self) -> bool {
        self.0.namespaced()
    }
    fn decode_json(&self, document: &str) -> Result<AnyObject, DecodeError> {
        self.0.decode_json(document)
    }
    fn deliver(&self, events: Vec<Event<AnyObject>>) {
        let bad = crate::model::InvalidObject {
            kind: "Service",
            namespace: "ns".into(),
            name: "bad".into(),
            reason: "refused by the test's index".into(),
        };
        self.1.skip_invalid(
            crate::metrics::Reporter::Outbound,
            "Service",
            Some(ObjectRef {
                namespace: "ns".into(),
                name: "bad".into(),
            }),
            &bad,
        );
        self.0.deliver(events);
    }
}

/// An object the index refuses after the source decoded it is logged with its file, as one
/// that does not decode is (newcomer finding: the line named no file).
#[test]
fn an_object_the_index_refuses_is_logged_with_its_file() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "good.yaml", &svc_yaml("good", 80));
    write(dir.path(), "bad.yaml", &svc_yaml("bad", 80));
    let metrics = IndexMetrics::default();
    let (tx, _rx) = mpsc::unbounded_channel::<Event<Arc<ServiceInfo>>>();
    let refusing = RefusingFeed(feed::<Service>(tx, metrics.clone()), metrics.clone());
    let mut state = StateDir::new(
        dir.path().to_path_buf(),
        vec![Arc::new(refusing)],
        metrics.clone(),
    );
    let (_, log) = logged(|| {
        let (changes, decoded) = state.rescan();
        state.deliver_changes(changes, decoded);
    });
    let line = log
        .lines()
        .find(|l| l.contains("skipping object"))
        .unwrap_or_else(|| panic!("no skip line in {log:?}"));
    assert!(
        line.contains(&format!("file={}", dir.path().join("bad.yaml").display())),
        "{line}"
    );
    assert!(
        line.contains("invalid Service ns/bad: refused by the test's index"),
        "{line}"
    );
    // As fields too, as the sources log what they cannot decode (tester finding).
    assert!(
        line.contains("kind=Service namespace=ns name=bad"),
        "{line}"
    );
    assert_eq!(metrics.invalid_objects("Service"), 1);
}

/// An edit that makes a served object invalid withdraws it, of any kind, as a fresh read of
/// the directory would skip it; a valid edit brings it back (newcomer finding: a Service's
/// last good version stayed served, and outlived the removal of the only file holding it).
#[test]
fn an_invalid_edit_withdraws_the_object_as_a_fresh_read_would() {
    let bad = svc_yaml("x", 80).replace("port: 80", "port: 99999");
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "a.yaml", &svc_yaml("x", 80));
    let metrics = IndexMetrics::default();
    let mut state = state_dir(dir.path(), &metrics);
    assert_eq!(rescan(&mut state), [("x".to_string(), Some(80))]);
    write(dir.path(), "a.yaml", &bad);
    assert_eq!(
        refresh(&mut state, dir.path(), &["a.yaml"]),
        [("x".to_string(), None)]
    );
    assert_eq!(metrics.invalid_objects("Service"), 1);
    write(dir.path(), "a.yaml", &svc_yaml("x", 81));
    assert_eq!(
        refresh(&mut state, dir.path(), &["a.yaml"]),
        [("x".to_string(), Some(81))]
    );

    // The served file (last in path order) removed, the one left defining it invalidly: the
    // object goes, as it would on a fresh read, rather than keep the removed file's version.
    write(dir.path(), "z.yaml", &svc_yaml("x", 82));
    assert_eq!(
        refresh(&mut state, dir.path(), &["z.yaml"]),
        [("x".to_string(), Some(82))]
    );
    write(dir.path(), "a.yaml", &bad);
    assert!(refresh(&mut state, dir.path(), &["a.yaml"]).is_empty());
    std::fs::remove_file(dir.path().join("z.yaml")).unwrap();
    assert_eq!(
        refresh(&mut state, dir.path(), &["z.yaml"]),
        [("x".to_string(), None)]
    );
    assert_eq!(metrics.invalid_objects("Service"), 2);
    let mut fresh = state_dir(dir.path(), &IndexMetrics::default());
    assert!(rescan(&mut fresh).is_empty());
}

/// YAML is written as JSON as it is read, without a document tree: the objects are those a
/// tree gave (keys as strings, `~` as `null`, `.nan` a string), and an error inside a List's
/// item is the parser's, naming its line and column once.
#[test]
fn yaml_is_read_into_the_json_a_document_tree_gave() {
    let list = "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: Service\n  metadata:\n    name: a\n    labels: {1: b, true: c, 1.5: d}\n  spec: {x: .nan, y: [1, -2, 3.5, ~, \"s\", {}], z: 18446744073709551615}\n";
    let objs = parse_manifests(Path::new("x.yaml"), list.as_bytes()).unwrap();
    assert_eq!(objs.len(), 1);
    assert_eq!(
        objs[0].value(),
        serde_json::json!({
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "a", "labels": {"1": "b", "true": "c", "1.5": "d"}},
            "spec": {"x": ".nan", "y": [1, -2, 3.5, null, "s", {}], "z": 18446744073709551615u64},
        })
    );
    // A document that is one object, with a field named `items` (not a List): kept whole.
    let object = "apiVersion: v1\nkind: Thing\nitems: [1, {a: b}]\nmetadata: {name: t}\n";
    let objs = parse_manifests(Path::new("x.yaml"), object.as_bytes()).unwrap();
    assert_eq!(
        objs[0].value(),
        serde_json::json!({"apiVersion": "v1", "kind": "Thing", "items": [1, {"a": "b"}], "metadata": {"name": "t"}})
    );
    for (text, message) in [
        (
            "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: Service\n  metadata: {name: a\n",
            "invalid YAML: unclosed bracket '{' at line 6, column 13",
        ),
        (
            "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: Service\n  metadata:\n    name: a\n    name: b\n",
            "invalid YAML: duplicate mapping key: name at line 8, column 5",
        ),
        (
            "apiVersion: v1\nkind: Service\nmetadata:\n  name: a\n  labels:\n    x: 1\n    x: 2\n",
            "invalid YAML: duplicate mapping key: x at line 7, column 5",
        ),
    ] {
        let error = parse_manifests(Path::new("x.yaml"), text.as_bytes()).unwrap_err();
        assert_eq!(error.to_string(), message, "{text}");
    }
}

/// A state directory given relative to the working directory is followed by its absolute
/// path, links kept: notify names changed files absolutely, and a relative directory matched
/// none of them, so each change re-read every file (tester finding: an oversized file beside
/// the edited one was logged and counted again on each edit).
#[test]
fn a_relative_state_directory_is_made_absolute_with_its_links() {
    let cwd = std::env::current_dir().unwrap();
    let dir = tempfile::tempdir_in(&cwd).unwrap();
    let link = dir.path().join("state");
    std::fs::create_dir(dir.path().join("target")).unwrap();
    std::os::unix::fs::symlink("target", &link).unwrap();
    let relative = link.strip_prefix(&cwd).unwrap().to_path_buf();
    assert!(relative.is_relative());
    let source = OfflineSource::new(&relative, IndexMetrics::default()).unwrap();
    assert_eq!(source.dir(), link);
    let awaiting = OfflineSource::awaiting(&relative, IndexMetrics::default()).unwrap();
    assert_eq!(awaiting.dir(), link);
}

/// An object decoded again from the file that serves it once another file stops defining it
/// logs what decoding finds under that file's name, as its first read did (tester finding: a
/// skipped port's line lost its file).
#[test]
fn an_object_decoded_again_logs_its_file() {
    use k8s_openapi::api::discovery::v1::EndpointSlice;
    let dir = tempfile::tempdir().unwrap();
    let slice = |ports: &str| {
        format!(
            r#"{{"apiVersion":"discovery.k8s.io/v1","kind":"EndpointSlice","metadata":{{"name":"r-abc","namespace":"t","labels":{{"kubernetes.io/service-name":"r"}}}},"addressType":"IPv4","ports":{ports},"endpoints":[{{"addresses":["10.0.0.1"]}}]}}"#
        )
    };
    write(
        dir.path(),
        "r1.json",
        &slice(r#"[{"name":"http","port":70000},{"name":"x","port":8080}]"#),
    );
    write(
        dir.path(),
        "r2.json",
        &slice(r#"[{"name":"x","port":8081}]"#),
    );
    let metrics = IndexMetrics::default();
    let (tx, mut slices) = mpsc::unbounded_channel::<Event<Arc<crate::model::SliceInfo>>>();
    let mut state = StateDir::new(
        dir.path().to_path_buf(),
        vec![feed::<EndpointSlice>(tx, metrics.clone())],
        metrics.clone(),
    );
    let (_, first) = logged(|| {
        let (changes, decoded) = state.rescan();
        state.deliver_initial(changes, decoded);
    });
    assert!(
        matches!(slices.try_recv(), Ok(Event::Reset(s)) if s[0].ports.as_ref().unwrap()[0].port == 8081)
    );
    let r1 = dir.path().join("r1.json");
    assert!(
        first.contains(&format!("file={}", r1.display())) && first.contains("port=70000"),
        "{first}"
    );

    let r2 = dir.path().join("r2.json");
    std::fs::remove_file(&r2).unwrap();
    let (_, again) = logged(|| {
        let (changes, decoded) = state.refresh(&BTreeSet::from([r2]));
        state.deliver_changes(changes, decoded);
    });
    assert!(
        matches!(slices.try_recv(), Ok(Event::Apply(s)) if s.ports.as_ref().unwrap()[0].port == 8080)
    );
    let line = again
        .lines()
        .find(|l| l.contains("port=70000"))
        .unwrap_or_else(|| panic!("{again}"));
    assert!(line.contains(&format!("file={}", r1.display())), "{line}");
}
