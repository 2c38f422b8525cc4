//! `cargo xtask check-deploy`: offline checks of the manifests in `deploy/`.
//!
//! 1. Every YAML document reachable from `deploy/kustomization.yaml` (following `resources`
//!    into files and directories) decodes into its k8s-openapi type, with no field left over
//!    (a misspelt or misplaced field is an error, not silently dropped), and every YAML file
//!    under `deploy/` is reachable (except `examples/` and the `local/` overlay).
//! 2. The objects fit together: namespaces, label selectors of the Deployment, Services and
//!    PodDisruptionBudget, Service target ports and probe ports against container ports,
//!    volume mounts, webhook services, RBAC bindings and the service account, the containers'
//!    hardening, and RBAC that grants reads on every kind the index watches and writes only
//!    on status subresources, leases and EndpointSlices (the ExternalWorkload
//!    controller's; the only deletes granted), and on EndpointSlices and Leases exactly the
//!    writes the code makes ([`WRITES_USED`]). A Deployment of several replicas (the `ha`
//!    overlay) must survive the loss of one: a required anti-affinity across nodes that selects
//!    its own pods, and one pod down at a time in rolling updates and drains.
//! 3. Every custom resource of ours in `deploy/examples/` and `tests/fixtures/` validates
//!    against the openAPIV3Schema of its version in the CRDs of `deploy/crds/`. Fields the
//!    schema does not know are pruned by the API server (or refused with `kubectl apply
//!    --validate=strict`): errors in `deploy/examples/`, warnings in `tests/fixtures/`, whose
//!    invalid ServiceProfiles are invalid on purpose.
//! 4. When on PATH: `kubectl kustomize deploy/` must build the same objects, and
//!    `kubernetes-validate --strict` must accept them against the Kubernetes schemas of the
//!    oldest supported and the newest release it knows.

use anyhow::{Context, bail};
use k8s_openapi::{
    Resource,
    api::{
        admissionregistration::v1::ValidatingWebhookConfiguration,
        apps::v1::Deployment,
        core::v1::{ConfigMap, Container, Namespace, Probe, Secret, Service, ServiceAccount},
        policy::v1::PodDisruptionBudget,
        rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding},
    },
    apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
    apimachinery::pkg::{apis::meta::v1::LabelSelector, util::intstr::IntOrString},
};
use linkerd_k8s_api::yaml;
use serde::{Deserialize, de::DeserializeOwned};
use serde_json::Value;
use std::{
    collections::{BTreeMap, BTreeSet},
    path::{Path, PathBuf},
};

mod external;
mod schema;

#[cfg(test)]
use self::{
    external::on_path,
    schema::{json_path, structural_problems},
};
use self::{
    external::{build_overlays, run_external},
    schema::CrdSchemas,
};

/// Kubernetes release whose schemas `kubernetes-validate` checks against, besides its newest:
/// the oldest the manifests support (native sidecar containers are on by default from 1.29).
pub const OLDEST_KUBERNETES: &str = "1.29.0";

/// Bytes of all annotations of an object: what client-side `kubectl apply` needs for its
/// `last-applied-configuration` copy.
const LAST_APPLIED_LIMIT: usize = 256 * 1024;

/// The API groups of our CRDs; objects of other groups in the fixtures are not checked here.
const OUR_GROUPS: [&str; 3] = ["linkerd.io", "policy.linkerd.io", "workload.linkerd.io"];

/// Where the pod's images are published; the rest of the name is the binary.
const IMAGE_PREFIX: &str = "ghcr.io/linkerd-rs/";

/// Verbs that change state.
const WRITE_VERBS: [&str; 5] = ["create", "update", "patch", "delete", "deletecollection"];

/// The writes the pod makes on the kinds it writes whole objects of, by (API group, resource),
/// sorted: the ExternalWorkload EndpointSlice controller creates (`POST`), replaces (`PUT`:
/// `update`) and deletes its slices (`crates/destination/src/external_endpoints.rs`), the
/// Lease task creates and replaces its Leases (`crates/index/src/lease.rs`); neither patches.
/// RBAC must grant exactly these writes on them: one fewer and the writer is refused, one more
/// is a privilege nothing uses.
const WRITES_USED: [(&str, &str, &[&str]); 2] = [
    (
        "discovery.k8s.io",
        "endpointslices",
        &["create", "delete", "update"],
    ),
    ("coordination.k8s.io", "leases", &["create", "update"]),
];

/// `cargo xtask check-deploy [--no-external]`
#[derive(Debug, clap::Args)]
pub struct CheckDeployArgs {
    /// Do not run `kubectl kustomize` and `kubernetes-validate`, even when they are on PATH.
    #[arg(long)]
    no_external: bool,
}

/// What to check.
#[derive(Clone, Debug)]
pub struct Options {
    /// The directory holding the top kustomization.
    pub deploy_dir: PathBuf,
    /// Directories whose YAML files hold example custom resources: errors when they do not
    /// validate, and when they carry unknown fields.
    pub example_dirs: Vec<PathBuf>,
    /// Like `example_dirs`, but unknown fields are only warnings.
    pub fixture_dirs: Vec<PathBuf>,
    /// Kustomize overlays of `deploy_dir` (e.g. `deploy/certify`), built with their JSON 6902
    /// patches and checked like it.
    pub overlay_dirs: Vec<PathBuf>,
    /// Run `kubectl kustomize` and `kubernetes-validate` when they are on PATH.
    pub external_tools: bool,
    /// The workspace, to check that every image has its Dockerfile in `docker/` building a
    /// binary of `crates/`.
    pub workspace: Option<PathBuf>,
}

/// The findings.
#[derive(Debug, Default)]
pub struct Report {
    pub errors: Vec<String>,
    pub warnings: Vec<String>,
    /// What was checked, one line each.
    pub summary: Vec<String>,
}

/// One YAML document and where it came from (`path#index`, 1-based, counting the documents
/// that are not empty).
#[derive(Clone, Debug)]
pub struct Doc {
    pub source: String,
    pub value: Value,
}

/// The objects of `deploy/` by type.
#[derive(Default)]
struct Manifests {
    namespaces: Vec<Named<Namespace>>,
    service_accounts: Vec<Named<ServiceAccount>>,
    cluster_roles: Vec<Named<ClusterRole>>,
    cluster_role_bindings: Vec<Named<ClusterRoleBinding>>,
    roles: Vec<Named<Role>>,
    role_bindings: Vec<Named<RoleBinding>>,
    deployments: Vec<Named<Deployment>>,
    services: Vec<Named<Service>>,
    pdbs: Vec<Named<PodDisruptionBudget>>,
    webhooks: Vec<Named<ValidatingWebhookConfiguration>>,
    crds: Vec<Named<CustomResourceDefinition>>,
    secrets: Vec<Named<Secret>>,
    config_maps: Vec<Named<ConfigMap>>,
}

struct Named<T> {
    source: String,
    obj: T,
}

/// The parts of a kustomization that check-deploy follows; any other field is refused, so
/// that objects kustomize would generate or change are not missed.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Kustomization {
    #[allow(dead_code)]
    api_version: Option<String>,
    #[allow(dead_code)]
    kind: Option<String>,
    #[serde(default)]
    resources: Vec<String>,
    #[serde(default)]
    patches: Vec<KustomizePatch>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct KustomizePatch {
    path: Option<String>,
    patch: Option<String>,
    target: Option<Value>,
}

pub fn run(root: &Path, args: CheckDeployArgs) -> anyhow::Result<()> {
    let options = Options::for_workspace(root, !args.no_external);
    let report = check(&options)?;
    for line in &report.summary {
        println!("{line}");
    }
    for warning in &report.warnings {
        println!("warning: {warning}");
    }
    for error in &report.errors {
        eprintln!("error: {error}");
    }
    if !report.errors.is_empty() {
        bail!("check-deploy found {} error(s)", report.errors.len());
    }
    println!("check-deploy: ok");
    Ok(())
}

/// Runs every check. Errors only when a file cannot be read; findings are in the report.
pub fn check(options: &Options) -> anyhow::Result<Report> {
    let mut report = Report::default();
    let deploy_dir = &options.deploy_dir;

    // 1. The kustomization tree, decoded.
    let mut docs = Vec::new();
    let mut visited = BTreeSet::new();
    load_kustomization(deploy_dir, &mut docs, &mut visited, &mut report)?;
    // Overlays are built (patches applied) now, so that their files count as referenced, and
    // checked after deploy/.
    let mut overlays = Vec::new();
    for overlay in &options.overlay_dirs {
        let mut overlay_docs = Vec::new();
        let mut overlay_visited = BTreeSet::new();
        load_kustomization(
            overlay,
            &mut overlay_docs,
            &mut overlay_visited,
            &mut report,
        )?;
        visited.extend(overlay_visited);
        overlays.push((overlay, overlay_docs));
    }
    // An overlay reloads deploy/: a problem of deploy/ is reported once.
    let mut seen = BTreeSet::new();
    report.errors.retain(|e| seen.insert(e.clone()));
    check_orphans(deploy_dir, &visited, &mut report)?;
    let mut manifests = Manifests::default();
    for doc in &docs {
        if let Err(e) = manifests.add(doc) {
            report.errors.push(format!("{}: {e}", doc.source));
        }
        let size = serde_json::to_vec(&doc.value).map_or(0, |json| json.len());
        if size > LAST_APPLIED_LIMIT {
            report.errors.push(format!(
                "{}: {size} bytes as JSON; client-side `kubectl apply` keeps a copy in an annotation limited to {LAST_APPLIED_LIMIT}",
                doc.source
            ));
        }
    }
    report.summary.push(format!(
        "{}: {} objects ({})",
        deploy_dir.display(),
        docs.len(),
        kinds_summary(&docs)
    ));

    // 2. Cross-references.
    manifests.check(&mut report);
    if let Some(root) = &options.workspace {
        check_images(root, &manifests, &mut report)?;
    }

    // The overlays' objects, with the problems their patches bring (those of deploy/ itself
    // were reported above).
    for (overlay, overlay_docs) in overlays {
        let mut overlay_manifests = Manifests::default();
        let mut overlay_report = Report::default();
        for doc in &overlay_docs {
            if let Err(e) = overlay_manifests.add(doc) {
                overlay_report.errors.push(format!("{}: {e}", doc.source));
            }
        }
        overlay_manifests.check(&mut overlay_report);
        let name = overlay.display();
        for error in overlay_report.errors {
            if !report.errors.contains(&error) {
                report.errors.push(format!("overlay {name}: {error}"));
            }
        }
        for warning in overlay_report.warnings {
            if !report.warnings.contains(&warning) {
                report.warnings.push(format!("overlay {name}: {warning}"));
            }
        }
        report.summary.push(format!(
            "overlay {name}: {} objects ({})",
            overlay_docs.len(),
            kinds_summary(&overlay_docs)
        ));
    }

    // 3. Custom resources against the CRDs.
    let schemas = CrdSchemas::new(&manifests.crds, &mut report);
    let mut checked = 0;
    for (dirs, strict) in [
        (&options.example_dirs, true),
        (&options.fixture_dirs, false),
    ] {
        for dir in dirs {
            for file in yaml_files(dir)? {
                for doc in load_docs(&file)? {
                    if schemas.validate(&doc, strict, &mut report) {
                        checked += 1;
                    }
                }
            }
        }
    }
    report.summary.push(format!(
        "{checked} custom resources validated against {} CRDs",
        manifests.crds.len()
    ));

    // 4. The tools that know Kubernetes better than this file.
    if options.external_tools {
        run_external(deploy_dir, &docs, &mut report)?;
        build_overlays(&options.overlay_dirs, &mut report)?;
    }
    Ok(report)
}

// === impl Options ===

impl Options {
    /// deploy/, deploy/examples/ and tests/fixtures/ of the workspace at `root`.
    pub fn for_workspace(root: &Path, external_tools: bool) -> Self {
        Self {
            deploy_dir: root.join("deploy"),
            example_dirs: vec![root.join("deploy/examples")],
            fixture_dirs: vec![root.join("tests/fixtures")],
            overlay_dirs: vec![root.join("deploy/certify"), root.join("deploy/ha")],
            external_tools,
            workspace: Some(root.to_path_buf()),
        }
    }
}

// === Loading ===

/// Reads `dir`'s kustomization and, recursively, its resources.
fn load_kustomization(
    dir: &Path,
    docs: &mut Vec<Doc>,
    visited: &mut BTreeSet<PathBuf>,
    report: &mut Report,
) -> anyhow::Result<()> {
    let path = ["kustomization.yaml", "kustomization.yml", "Kustomization"]
        .iter()
        .map(|name| dir.join(name))
        .find(|p| p.is_file())
        .with_context(|| format!("{} has no kustomization.yaml", dir.display()))?;
    if !visited.insert(path.clone()) {
        report
            .errors
            .push(format!("{}: included twice", path.display()));
        return Ok(());
    }
    // The documents of this kustomization start here; its patches apply to them only.
    let first = docs.len();
    let text = read(&path)?;
    let kustomization: Kustomization = match yaml::from_str(&text) {
        Ok(k) => k,
        Err(e) => {
            report.errors.push(format!("{}: {e}", path.display()));
            return Ok(());
        }
    };
    for resource in &kustomization.resources {
        if resource.contains("://") {
            report.errors.push(format!(
                "{}: remote resource {resource:?} cannot be checked offline",
                path.display()
            ));
            continue;
        }
        let target = normalize(&dir.join(resource));
        if target.is_dir() && normalize(dir).starts_with(&target) {
            // kustomize refuses a resource directory that contains the kustomization itself.
            report.errors.push(format!(
                "{}: resource {resource:?} contains this kustomization, which kustomize refuses \
                 (\"cycle detected\"): extend a directory beside it, such as deploy/base",
                path.display()
            ));
        } else if target.is_dir() {
            load_kustomization(&target, docs, visited, report)?;
        } else if target.is_file() {
            if !visited.insert(target.clone()) {
                report
                    .errors
                    .push(format!("{}: included twice", target.display()));
                continue;
            }
            docs.extend(load_docs(&target)?);
        } else {
            report.errors.push(format!(
                "{}: resource {resource:?} does not exist",
                path.display()
            ));
        }
    }
    for patch in &kustomization.patches {
        let (text, at) = match (&patch.path, &patch.patch) {
            (Some(file), None) => {
                let target = dir.join(file);
                if !target.is_file() {
                    report
                        .errors
                        .push(format!("{}: patch {file:?} does not exist", path.display()));
                    continue;
                }
                visited.insert(target.clone());
                (read(&target)?, target.display().to_string())
            }
            (None, Some(inline)) => (inline.clone(), format!("{}: inline patch", path.display())),
            _ => {
                report.errors.push(format!(
                    "{}: a patch needs exactly one of `path` and `patch`",
                    path.display()
                ));
                continue;
            }
        };
        if let Err(e) = apply_patch(&text, patch.target.as_ref(), &mut docs[first..]) {
            report.errors.push(format!("{at}: {e}"));
        }
    }
    Ok(())
}

/// `path` without `.` and `dir/..` components (lexically, as kustomize reads them), so that a
/// file reached through an overlay's `..` has the same name as from deploy/.
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            std::path::Component::CurDir => {}
            std::path::Component::ParentDir if out.file_name().is_some() => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

/// Applies a kustomize patch to the documents its `target` selects (by `kind`, `name` and,
/// when given, `namespace`, `group` and `version`), so that what is checked is what kustomize
/// builds. Only JSON 6902 patches (a YAML list of operations) are understood: a strategic
/// merge patch would need each type's merge keys, so it is refused rather than guessed.
///
/// Errors: the patch is not a list of operations, no target is given or no document matches
/// it, or an operation fails (a `test` that does not hold, a path that does not exist).
fn apply_patch(text: &str, target: Option<&Value>, docs: &mut [Doc]) -> Result<(), String> {
    let ops: json_patch::Patch = yaml::from_str(text)
        .map_err(|e| format!("only JSON 6902 patches (a list of operations) are checked: {e}"))?;
    let target = target.ok_or("a JSON 6902 patch needs a `target`")?;
    let wanted = |field: &str| target.get(field).and_then(Value::as_str);
    let matches = |doc: &Doc| {
        let (group, version) = doc.value["apiVersion"]
            .as_str()
            .map(|v| v.rsplit_once('/').unwrap_or(("", v)))
            .unwrap_or_default();
        let field = |f: &str, actual: Option<&str>| wanted(f).is_none_or(|w| Some(w) == actual);
        field("kind", doc.value["kind"].as_str())
            && field("name", doc.value["metadata"]["name"].as_str())
            && field("namespace", doc.value["metadata"]["namespace"].as_str())
            && field("group", Some(group))
            && field("version", Some(version))
    };
    let mut patched = 0;
    for doc in docs.iter_mut().filter(|d| matches(d)) {
        json_patch::patch(&mut doc.value, &ops).map_err(|e| format!("{}: {e}", doc.source))?;
        patched += 1;
    }
    if patched == 0 {
        return Err(format!("no object matches the target {target}"));
    }
    Ok(())
}

/// Every YAML file under `deploy_dir` must be part of the kustomization tree, except the
/// examples and the local overlay written by gen-certs.
fn check_orphans(
    deploy_dir: &Path,
    visited: &BTreeSet<PathBuf>,
    report: &mut Report,
) -> anyhow::Result<()> {
    let skip = [deploy_dir.join("examples"), deploy_dir.join("local")];
    for file in yaml_files(deploy_dir)? {
        if skip.iter().any(|dir| file.starts_with(dir)) || visited.contains(&file) {
            continue;
        }
        report.errors.push(format!(
            "{}: not referenced by any kustomization under {}",
            file.display(),
            deploy_dir.display()
        ));
    }
    Ok(())
}

/// The documents of a YAML file; `kind: List` is flattened into its items, empty documents
/// are skipped.
pub fn load_docs(path: &Path) -> anyhow::Result<Vec<Doc>> {
    let text = read(path)?;
    parse_docs(&text, &path.display().to_string())
}

fn parse_docs(text: &str, name: &str) -> anyhow::Result<Vec<Doc>> {
    let mut docs = Vec::new();
    let documents: Vec<Value> = yaml::from_documents(text).with_context(|| name.to_string())?;
    for (i, value) in documents.into_iter().enumerate() {
        let source = format!("{name}#{}", i + 1);
        match value {
            Value::Null => {}
            Value::Object(ref map) if map.get("kind").and_then(Value::as_str) == Some("List") => {
                let items = map.get("items").and_then(Value::as_array);
                for (j, item) in items.into_iter().flatten().enumerate() {
                    docs.push(Doc {
                        source: format!("{source}.items[{j}]"),
                        value: item.clone(),
                    });
                }
            }
            value => docs.push(Doc { source, value }),
        }
    }
    Ok(docs)
}

/// `*.yaml` and `*.yml` files under `dir` (recursively), sorted; none when it does not exist.
fn yaml_files(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    if !dir.is_dir() {
        return Ok(files);
    }
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in
            std::fs::read_dir(&dir).with_context(|| format!("listing {}", dir.display()))?
        {
            let path = entry
                .with_context(|| format!("listing {}", dir.display()))?
                .path();
            if path.is_dir() {
                pending.push(path);
            } else if matches!(
                path.extension().and_then(|e| e.to_str()),
                Some("yaml" | "yml")
            ) {
                files.push(path);
            }
        }
    }
    files.sort();
    Ok(files)
}

fn kinds_summary(docs: &[Doc]) -> String {
    let mut kinds = BTreeMap::<&str, usize>::new();
    for doc in docs {
        let kind = doc.value.get("kind").and_then(Value::as_str).unwrap_or("?");
        *kinds.entry(kind).or_default() += 1;
    }
    kinds
        .iter()
        .map(|(kind, n)| format!("{n} {kind}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Decodes `value` into `T`, refusing fields `T` does not have (k8s-openapi ignores them).
fn decode_strict<T: DeserializeOwned>(value: &Value) -> Result<T, String> {
    let mut unknown = Vec::new();
    let decoded = {
        let mut on_ignored = |path: serde_ignored::Path<'_>| unknown.push(field_path(&path));
        let de = serde_ignored::Deserializer::new(value.clone(), &mut on_ignored);
        serde_path_to_error::deserialize::<_, T>(de)
            .map_err(|e| format!("{}: {}", e.path(), e.inner()))?
    };
    if !unknown.is_empty() {
        return Err(format!("unknown field(s): {}", unknown.join(", ")));
    }
    Ok(decoded)
}

/// `spec.template.spec.containers[0].name`: serde_ignored's path without its `?` for options.
fn field_path(path: &serde_ignored::Path<'_>) -> String {
    use serde_ignored::Path;
    match path {
        Path::Root => String::new(),
        Path::Seq { parent, index } => format!("{}[{index}]", field_path(parent)),
        Path::Map { parent, key } => {
            let parent = field_path(parent);
            if parent.is_empty() {
                key.clone()
            } else {
                format!("{parent}.{key}")
            }
        }
        Path::Some { parent }
        | Path::NewtypeStruct { parent }
        | Path::NewtypeVariant { parent } => field_path(parent),
    }
}

// === impl Manifests ===

impl Manifests {
    /// Decodes a document into its type by apiVersion and kind.
    fn add(&mut self, doc: &Doc) -> Result<(), String> {
        let api_version = doc
            .value
            .get("apiVersion")
            .and_then(Value::as_str)
            .ok_or("no apiVersion")?;
        let kind = doc
            .value
            .get("kind")
            .and_then(Value::as_str)
            .ok_or("no kind")?;
        macro_rules! kinds {
            ($($ty:ty => $field:ident),* $(,)?) => {
                $(
                    if kind == <$ty as Resource>::KIND && api_version == <$ty as Resource>::API_VERSION {
                        let obj = decode_strict::<$ty>(&doc.value)?;
                        self.$field.push(Named { source: doc.source.clone(), obj });
                        return Ok(());
                    }
                )*
            };
        }
        kinds!(
            Namespace => namespaces,
            ServiceAccount => service_accounts,
            ClusterRole => cluster_roles,
            ClusterRoleBinding => cluster_role_bindings,
            Role => roles,
            RoleBinding => role_bindings,
            Deployment => deployments,
            Service => services,
            PodDisruptionBudget => pdbs,
            ValidatingWebhookConfiguration => webhooks,
            CustomResourceDefinition => crds,
            Secret => secrets,
            ConfigMap => config_maps,
        );
        Err(format!(
            "check-deploy knows no Kubernetes type for {api_version} {kind}"
        ))
    }

    fn check(&self, report: &mut Report) {
        let errors = &mut report.errors;
        let namespaces: BTreeSet<&str> = self
            .namespaces
            .iter()
            .filter_map(|n| n.obj.metadata.name.as_deref())
            .collect();

        // Names are unique per kind and namespace, and namespaced objects name a namespace
        // of the tree (kubectl would otherwise put them in the current context's).
        let mut seen = BTreeSet::new();
        let mut note = |kind: &str,
                        source: &str,
                        meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
                        namespaced: bool,
                        errors: &mut Vec<String>| {
            let name = meta.name.as_deref().unwrap_or_default();
            if name.is_empty() {
                errors.push(format!("{source}: {kind} has no name"));
            }
            if namespaced {
                match meta.namespace.as_deref() {
                    None => errors.push(format!("{source}: {kind} {name} has no namespace")),
                    Some(ns) if !namespaces.contains(ns) => errors.push(format!(
                        "{source}: {kind} {name} is in namespace {ns:?}, which deploy/ does not create"
                    )),
                    Some(_) => {}
                }
            } else if meta.namespace.is_some() {
                errors.push(format!(
                    "{source}: {kind} {name} is cluster-scoped but names a namespace"
                ));
            }
            if !seen.insert((kind.to_string(), meta.namespace.clone(), name.to_string())) {
                errors.push(format!("{source}: a second {kind} named {name}"));
            }
        };
        macro_rules! each {
            ($field:ident, $namespaced:expr) => {
                for n in &self.$field {
                    let kind = n.obj_kind();
                    note(kind, &n.source, &n.obj.metadata, $namespaced, errors);
                }
            };
        }
        each!(namespaces, false);
        each!(service_accounts, true);
        each!(cluster_roles, false);
        each!(cluster_role_bindings, false);
        each!(roles, true);
        each!(role_bindings, true);
        each!(deployments, true);
        each!(services, true);
        each!(pdbs, true);
        each!(webhooks, false);
        each!(crds, false);
        each!(secrets, true);
        each!(config_maps, true);

        for deployment in &self.deployments {
            self.check_deployment(deployment, errors);
        }
        self.check_webhooks(errors);
        self.check_rbac(errors);
    }

    fn check_deployment(&self, d: &Named<Deployment>, errors: &mut Vec<String>) {
        let source = &d.source;
        let name = d.obj.metadata.name.as_deref().unwrap_or_default();
        let namespace = d.obj.metadata.namespace.as_deref();
        let Some(spec) = &d.obj.spec else {
            errors.push(format!("{source}: Deployment {name} has no spec"));
            return;
        };
        let labels = spec
            .template
            .metadata
            .as_ref()
            .and_then(|m| m.labels.clone())
            .unwrap_or_default();
        if !selects(&spec.selector, &labels) {
            errors.push(format!(
                "{source}: Deployment {name}: spec.selector does not match the pod template's labels"
            ));
        }
        let Some(pod) = &spec.template.spec else {
            errors.push(format!("{source}: Deployment {name} has no pod spec"));
            return;
        };

        // The service account exists.
        let sa = pod.service_account_name.as_deref().unwrap_or("default");
        if !self.service_accounts.iter().any(|s| {
            s.obj.metadata.name.as_deref() == Some(sa)
                && s.obj.metadata.namespace.as_deref() == namespace
        }) {
            errors.push(format!(
                "{source}: Deployment {name}: serviceAccountName {sa:?} is not in deploy/"
            ));
        }

        // Containers: the main ones and the sidecars (init containers that keep running).
        let sidecars = pod
            .init_containers
            .iter()
            .flatten()
            .filter(|c| c.restart_policy.as_deref() == Some("Always"));
        let running: Vec<&Container> = pod.containers.iter().chain(sidecars).collect();
        let volumes: BTreeSet<&str> = pod
            .volumes
            .iter()
            .flatten()
            .map(|v| v.name.as_str())
            .collect();
        let pod_security = pod.security_context.as_ref();
        let mut port_names = BTreeSet::new();
        let mut port_numbers = BTreeSet::new();
        for c in pod
            .containers
            .iter()
            .chain(pod.init_containers.iter().flatten())
        {
            let at = format!("{source}: container {}", c.name);
            if c.image.as_deref().unwrap_or_default().is_empty() {
                errors.push(format!("{at}: no image"));
            }
            for port in c.ports.iter().flatten() {
                if let Some(port_name) = &port.name
                    && !port_names.insert(port_name.clone())
                {
                    errors.push(format!("{at}: a second port named {port_name}"));
                }
                if !port_numbers.insert(port.container_port) {
                    errors.push(format!("{at}: port {} declared twice", port.container_port));
                }
            }
            for mount in c.volume_mounts.iter().flatten() {
                if !volumes.contains(mount.name.as_str()) {
                    errors.push(format!(
                        "{at}: mounts {:?}, which is not a volume of the pod",
                        mount.name
                    ));
                }
            }
            for (probe_kind, probe) in [
                ("livenessProbe", &c.liveness_probe),
                ("readinessProbe", &c.readiness_probe),
                ("startupProbe", &c.startup_probe),
            ] {
                if let Some(probe) = probe
                    && let Some(port) = probe_port(probe)
                    && !container_has_port(c, port)
                {
                    errors.push(format!(
                        "{at}: {probe_kind} port {port:?} is not a port of the container"
                    ));
                }
            }
            let sc = c.security_context.as_ref();
            let run_as_non_root = sc
                .and_then(|s| s.run_as_non_root)
                .or_else(|| pod_security.and_then(|s| s.run_as_non_root));
            if run_as_non_root != Some(true) {
                errors.push(format!("{at}: runAsNonRoot is not true"));
            }
            if sc.and_then(|s| s.read_only_root_filesystem) != Some(true) {
                errors.push(format!("{at}: readOnlyRootFilesystem is not true"));
            }
            if sc.and_then(|s| s.allow_privilege_escalation) != Some(false) {
                errors.push(format!("{at}: allowPrivilegeEscalation is not false"));
            }
            let drops_all = sc
                .and_then(|s| s.capabilities.as_ref())
                .and_then(|caps| caps.drop.as_ref())
                .is_some_and(|drop| drop.iter().any(|d| d == "ALL"));
            if !drops_all {
                errors.push(format!("{at}: capabilities do not drop ALL"));
            }
            let requests = c.resources.as_ref().and_then(|r| r.requests.as_ref());
            if !requests.is_some_and(|r| r.contains_key("cpu") && r.contains_key("memory")) {
                errors.push(format!("{at}: no cpu and memory requests"));
            }
        }
        for c in &running {
            if c.readiness_probe.is_none() || c.liveness_probe.is_none() {
                errors.push(format!(
                    "{source}: container {}: needs liveness and readiness probes",
                    c.name
                ));
            }
        }

        // Services and the PodDisruptionBudget select these pods, on ports they have.
        for svc in &self.services {
            let Some(svc_spec) = &svc.obj.spec else {
                continue;
            };
            let svc_name = svc.obj.metadata.name.as_deref().unwrap_or_default();
            let selector = svc_spec.selector.clone().unwrap_or_default();
            if svc.obj.metadata.namespace.as_deref() != namespace {
                continue;
            }
            if selector.is_empty() || !selector.iter().all(|(k, v)| labels.get(k) == Some(v)) {
                errors.push(format!(
                    "{}: Service {svc_name}: selector does not match Deployment {name}'s pods",
                    svc.source
                ));
                continue;
            }
            for port in svc_spec.ports.iter().flatten() {
                let target = port
                    .target_port
                    .clone()
                    .unwrap_or(IntOrString::Int(port.port));
                if !running.iter().any(|c| container_has_port(c, &target)) {
                    errors.push(format!(
                        "{}: Service {svc_name}: targetPort {target:?} is not a port of a running container of Deployment {name}",
                        svc.source
                    ));
                }
            }
        }
        for pdb in &self.pdbs {
            let selector = pdb.obj.spec.as_ref().and_then(|s| s.selector.as_ref());
            if !selector.is_some_and(|s| selects(s, &labels)) {
                errors.push(format!(
                    "{}: PodDisruptionBudget: selector does not match Deployment {name}'s pods",
                    pdb.source
                ));
            }
        }
        self.check_availability(d, &labels, errors);
    }

    /// Anti-affinity terms select the pod's own labels (else they spread nothing), and a
    /// Deployment of several replicas stays available with one replica fewer: one node's
    /// failure takes one replica at most (required anti-affinity on `kubernetes.io/hostname`),
    /// and rolling updates and drains take one pod down at a time (`maxUnavailable` of the
    /// strategy and of a PodDisruptionBudget).
    fn check_availability(
        &self,
        d: &Named<Deployment>,
        labels: &BTreeMap<String, String>,
        errors: &mut Vec<String>,
    ) {
        let source = &d.source;
        let name = d.obj.metadata.name.as_deref().unwrap_or_default();
        let Some(spec) = &d.obj.spec else { return };
        let anti = spec
            .template
            .spec
            .as_ref()
            .and_then(|p| p.affinity.as_ref())
            .and_then(|a| a.pod_anti_affinity.as_ref());
        let required = anti
            .and_then(|a| {
                a.required_during_scheduling_ignored_during_execution
                    .clone()
            })
            .unwrap_or_default();
        let preferred = anti
            .and_then(|a| {
                a.preferred_during_scheduling_ignored_during_execution
                    .clone()
            })
            .unwrap_or_default();
        let terms = required
            .iter()
            .chain(preferred.iter().map(|w| &w.pod_affinity_term));
        for term in terms {
            if !term
                .label_selector
                .as_ref()
                .is_some_and(|s| selects_with_expressions(s, labels))
            {
                errors.push(format!(
                    "{source}: Deployment {name}: a podAntiAffinity term (topologyKey {}) does not select the Deployment's own pods",
                    term.topology_key
                ));
            }
        }

        let replicas = spec.replicas.unwrap_or(1);
        if replicas < 2 {
            return;
        }
        if !required
            .iter()
            .any(|t| t.topology_key == "kubernetes.io/hostname")
        {
            errors.push(format!(
                "{source}: Deployment {name}: {replicas} replicas without a required podAntiAffinity on kubernetes.io/hostname may share a node"
            ));
        }
        let rolling = spec
            .strategy
            .as_ref()
            .and_then(|s| s.rolling_update.as_ref());
        let percent_of = |value: Option<&IntOrString>, default: &str, round_up: bool| {
            let value = value
                .cloned()
                .unwrap_or_else(|| IntOrString::String(default.to_string()));
            resolve_count(&value, replicas, round_up)
        };
        let unavailable = percent_of(
            rolling.and_then(|r| r.max_unavailable.as_ref()),
            "25%",
            false,
        );
        let surge = percent_of(rolling.and_then(|r| r.max_surge.as_ref()), "25%", true);
        match (unavailable, surge) {
            (Some(0), Some(0)) => errors.push(format!(
                "{source}: Deployment {name}: maxUnavailable and maxSurge are both 0, which the API server refuses"
            )),
            (Some(u), Some(_)) if u > 1 => errors.push(format!(
                "{source}: Deployment {name}: a rolling update may take {u} of {replicas} pods down at once; at most 1 keeps {} ready",
                replicas - 1
            )),
            (Some(_), Some(_)) => {}
            _ => errors.push(format!(
                "{source}: Deployment {name}: maxUnavailable or maxSurge is not a count or a percentage"
            )),
        }
        let budget = self.pdbs.iter().find(|pdb| {
            pdb.obj.metadata.namespace == d.obj.metadata.namespace
                && pdb
                    .obj
                    .spec
                    .as_ref()
                    .and_then(|s| s.selector.as_ref())
                    .is_some_and(|s| selects(s, labels))
        });
        let down = budget.and_then(|pdb| {
            let spec = pdb.obj.spec.as_ref()?;
            match (&spec.max_unavailable, &spec.min_available) {
                (Some(max), _) => resolve_count(max, replicas, true),
                (None, Some(min)) => resolve_count(min, replicas, true).map(|m| replicas - m),
                (None, None) => None,
            }
        });
        if down.is_none_or(|n| n > 1) {
            errors.push(format!(
                "{source}: Deployment {name}: {replicas} replicas need a PodDisruptionBudget that lets drains evict one pod at a time"
            ));
        }
    }

    fn check_webhooks(&self, errors: &mut Vec<String>) {
        for config in &self.webhooks {
            let config_name = config.obj.metadata.name.as_deref().unwrap_or_default();
            let hooks = config.obj.webhooks.as_deref().unwrap_or_default();
            if hooks.is_empty() {
                errors.push(format!("{}: {config_name} has no webhooks", config.source));
            }
            for hook in hooks {
                let at = format!("{}: webhook {}", config.source, hook.name);
                if hook.admission_review_versions.is_empty() {
                    errors.push(format!("{at}: no admissionReviewVersions"));
                }
                if hook.rules.as_ref().is_none_or(|r| r.is_empty()) {
                    errors.push(format!("{at}: no rules"));
                }
                let Some(svc_ref) = &hook.client_config.service else {
                    errors.push(format!("{at}: clientConfig names no service"));
                    continue;
                };
                let port = svc_ref.port.unwrap_or(443);
                let svc = self.services.iter().find(|s| {
                    s.obj.metadata.name.as_deref() == Some(svc_ref.name.as_str())
                        && s.obj.metadata.namespace.as_deref() == Some(svc_ref.namespace.as_str())
                });
                match svc {
                    None => errors.push(format!(
                        "{at}: Service {}/{} is not in deploy/",
                        svc_ref.namespace, svc_ref.name
                    )),
                    Some(svc) => {
                        let ports = svc.obj.spec.as_ref().and_then(|s| s.ports.as_ref());
                        if !ports.into_iter().flatten().any(|p| p.port == port) {
                            errors
                                .push(format!("{at}: Service {} has no port {port}", svc_ref.name));
                        }
                    }
                }
            }
        }
    }

    fn check_rbac(&self, errors: &mut Vec<String>) {
        // Bindings point at roles and service accounts of the tree.
        let mut granted: Vec<(&str, &PolicyRule)> = Vec::new();
        let cluster_role = |name: &str| {
            self.cluster_roles
                .iter()
                .find(|r| r.obj.metadata.name.as_deref() == Some(name))
        };
        let check_subjects = |source: &str,
                              subjects: Option<&Vec<k8s_openapi::api::rbac::v1::Subject>>,
                              errors: &mut Vec<String>| {
            for subject in subjects.into_iter().flatten() {
                if subject.kind == "ServiceAccount"
                    && !self.service_accounts.iter().any(|sa| {
                        sa.obj.metadata.name.as_deref() == Some(subject.name.as_str())
                            && sa.obj.metadata.namespace.as_deref() == subject.namespace.as_deref()
                    })
                {
                    errors.push(format!(
                        "{source}: subject ServiceAccount {}/{} is not in deploy/",
                        subject.namespace.as_deref().unwrap_or("?"),
                        subject.name
                    ));
                }
            }
        };
        for binding in &self.cluster_role_bindings {
            check_subjects(&binding.source, binding.obj.subjects.as_ref(), errors);
            match cluster_role(&binding.obj.role_ref.name) {
                Some(role) if binding.obj.role_ref.kind == "ClusterRole" => {
                    granted.extend(
                        role.obj
                            .rules
                            .iter()
                            .flatten()
                            .map(|r| (role.source.as_str(), r)),
                    );
                }
                _ => errors.push(format!(
                    "{}: roleRef {} {} is not in deploy/",
                    binding.source, binding.obj.role_ref.kind, binding.obj.role_ref.name
                )),
            }
        }
        for binding in &self.role_bindings {
            check_subjects(&binding.source, binding.obj.subjects.as_ref(), errors);
            let found = match binding.obj.role_ref.kind.as_str() {
                "Role" => self.roles.iter().any(|r| {
                    r.obj.metadata.name.as_deref() == Some(binding.obj.role_ref.name.as_str())
                        && r.obj.metadata.namespace == binding.obj.metadata.namespace
                }),
                _ => cluster_role(&binding.obj.role_ref.name).is_some(),
            };
            if !found {
                errors.push(format!(
                    "{}: roleRef {} {} is not in deploy/",
                    binding.source, binding.obj.role_ref.kind, binding.obj.role_ref.name
                ));
            }
        }

        // Least privilege: no wildcards; writes only on status, leases and the EndpointSlices
        // of the ExternalWorkload controller (which alone may delete).
        let all_rules = self
            .cluster_roles
            .iter()
            .flat_map(|r| {
                r.obj
                    .rules
                    .iter()
                    .flatten()
                    .map(move |rule| (&r.source, rule))
            })
            .chain(self.roles.iter().flat_map(|r| {
                r.obj
                    .rules
                    .iter()
                    .flatten()
                    .map(move |rule| (&r.source, rule))
            }));
        for (source, rule) in all_rules {
            let resources = rule.resources.as_deref().unwrap_or_default();
            if rule.verbs.iter().any(|v| v == "*")
                || resources.iter().any(|r| r.contains('*'))
                || rule.api_groups.iter().flatten().any(|g| g == "*")
            {
                errors.push(format!("{source}: a rule grants a wildcard: {rule:?}"));
            }
            let writes: Vec<&String> = rule
                .verbs
                .iter()
                .filter(|v| WRITE_VERBS.contains(&v.as_str()))
                .collect();
            if writes.is_empty() {
                continue;
            }
            for resource in resources {
                let endpoint_slices = resource == "endpointslices"
                    && rule
                        .api_groups
                        .iter()
                        .flatten()
                        .all(|g| g == "discovery.k8s.io");
                let allowed = endpoint_slices
                    || resource.ends_with("/status")
                    || (resource == "leases"
                        && rule
                            .api_groups
                            .iter()
                            .flatten()
                            .all(|g| g == "coordination.k8s.io"));
                let deletes = writes.iter().any(|v| {
                    v.as_str() == "deletecollection" || (v.as_str() == "delete" && !endpoint_slices)
                });
                if !allowed || deletes {
                    errors.push(format!(
                        "{source}: {writes:?} on {resource:?}: the pod writes only route status, leases and ExternalWorkload EndpointSlices (it records no events)"
                    ));
                }
            }
        }

        // The writers' kinds: exactly the writes they make.
        for (group, resource, used) in WRITES_USED {
            let mut writes: Vec<&str> = self
                .cluster_roles
                .iter()
                .flat_map(|r| r.obj.rules.iter().flatten())
                .chain(self.roles.iter().flat_map(|r| r.obj.rules.iter().flatten()))
                .filter(|rule| {
                    rule.api_groups.iter().flatten().any(|g| g == group)
                        && rule.resources.iter().flatten().any(|r| r == resource)
                })
                .flat_map(|rule| &rule.verbs)
                .map(String::as_str)
                .filter(|v| WRITE_VERBS.contains(v))
                .collect();
            writes.sort_unstable();
            writes.dedup();
            if writes != used {
                errors.push(format!(
                    "RBAC: writes granted on {resource}.{group} are {writes:?}; the pod makes exactly {used:?}"
                ));
            }
        }

        // Every kind the index watches can be read.
        for (group, resource) in watched_resources() {
            for verb in ["get", "list", "watch"] {
                let ok = granted.iter().any(|(_, rule)| {
                    rule.api_groups.iter().flatten().any(|g| g == group)
                        && rule.resources.iter().flatten().any(|r| r == resource)
                        && rule.verbs.iter().any(|v| v == verb)
                });
                if !ok {
                    errors.push(format!(
                        "RBAC: no ClusterRoleBinding grants {verb} on {resource}.{group} (the index watches it)",
                        group = if group.is_empty() { "core" } else { group }
                    ));
                }
            }
        }
    }
}

/// Images are `ghcr.io/linkerd-rs/<binary>:<tag>`, built by `docker/<binary>.Dockerfile`
/// from the crate that declares the binary, with the binary as entrypoint.
fn check_images(root: &Path, manifests: &Manifests, report: &mut Report) -> anyhow::Result<()> {
    let bins = declared_bins(&root.join("crates"))?;
    for deployment in &manifests.deployments {
        let pod = deployment
            .obj
            .spec
            .as_ref()
            .and_then(|s| s.template.spec.as_ref());
        let containers = pod.into_iter().flat_map(|p| {
            p.containers
                .iter()
                .chain(p.init_containers.iter().flatten())
        });
        for c in containers {
            let at = format!("{}: container {}", deployment.source, c.name);
            let image = c.image.as_deref().unwrap_or_default();
            let Some(bin) = image
                .strip_prefix(IMAGE_PREFIX)
                .and_then(|rest| rest.split(':').next())
            else {
                report.errors.push(format!(
                    "{at}: image {image:?} is not one of {IMAGE_PREFIX}*"
                ));
                continue;
            };
            let Some(package) = bins.get(bin) else {
                report.errors.push(format!(
                    "{at}: no crate under crates/ declares a binary {bin:?}"
                ));
                continue;
            };
            let dockerfile = root.join("docker").join(format!("{bin}.Dockerfile"));
            let Ok(text) = std::fs::read_to_string(&dockerfile) else {
                report
                    .errors
                    .push(format!("{at}: {} does not exist", dockerfile.display()));
                continue;
            };
            for needle in [
                format!("-p {package} --bin {bin}"),
                format!("ENTRYPOINT [\"/{bin}\"]"),
            ] {
                if !text.contains(&needle) {
                    report.errors.push(format!(
                        "{}: has no `{needle}` (image {image})",
                        dockerfile.display()
                    ));
                }
            }
        }
    }
    Ok(())
}

/// Binary name → package name, from `crates/*/Cargo.toml` (`[[bin]]` names, else the package
/// name when `src/main.rs` exists).
fn declared_bins(crates: &Path) -> anyhow::Result<BTreeMap<String, String>> {
    let mut bins = BTreeMap::new();
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(crates)
        .with_context(|| format!("listing {}", crates.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.join("Cargo.toml").is_file())
        .collect();
    dirs.sort();
    for dir in dirs {
        let manifest = read(&dir.join("Cargo.toml"))?;
        let (mut section, mut package, mut declared) = (String::new(), None, Vec::new());
        for line in manifest.lines().map(str::trim) {
            if line.starts_with('[') {
                section = line.to_string();
                continue;
            }
            let Some(value) = line
                .strip_prefix("name")
                .map(str::trim_start)
                .and_then(|rest| rest.strip_prefix('='))
                .map(|v| v.trim().trim_matches('"').to_string())
            else {
                continue;
            };
            match section.as_str() {
                "[package]" => package = Some(value),
                "[[bin]]" => declared.push(value),
                _ => {}
            }
        }
        let Some(package) = package else { continue };
        if declared.is_empty() && dir.join("src/main.rs").is_file() {
            declared.push(package.clone());
        }
        for bin in declared {
            bins.insert(bin, package.clone());
        }
    }
    Ok(bins)
}

/// (API group, resource) of every kind the destination and policy indexes watch.
fn watched_resources() -> Vec<(&'static str, &'static str)> {
    vec![
        ("", "pods"),
        ("", "services"),
        ("", "nodes"),
        ("discovery.k8s.io", "endpointslices"),
        ("apps", "replicasets"),
        ("batch", "jobs"),
        ("linkerd.io", "serviceprofiles"),
        ("workload.linkerd.io", "externalworkloads"),
        ("policy.linkerd.io", "servers"),
        ("policy.linkerd.io", "serverauthorizations"),
        ("policy.linkerd.io", "authorizationpolicies"),
        ("policy.linkerd.io", "meshtlsauthentications"),
        ("policy.linkerd.io", "networkauthentications"),
        ("policy.linkerd.io", "httplocalratelimitpolicies"),
        ("policy.linkerd.io", "httproutes"),
        ("policy.linkerd.io", "egressnetworks"),
        ("gateway.networking.k8s.io", "httproutes"),
        ("gateway.networking.k8s.io", "grpcroutes"),
        // The Gateway API kinds follow their CRDs.
        ("apiextensions.k8s.io", "customresourcedefinitions"),
    ]
}

trait ObjKind {
    fn obj_kind(&self) -> &'static str;
}

impl<T: Resource> ObjKind for Named<T> {
    fn obj_kind(&self) -> &'static str {
        T::KIND
    }
}

/// Whether `selector` (matchLabels only; expressions are not used by deploy/) selects
/// `labels`. An empty selector selects nothing here: deploy/ never means "everything".
fn selects(selector: &LabelSelector, labels: &BTreeMap<String, String>) -> bool {
    let match_labels = selector.match_labels.clone().unwrap_or_default();
    !match_labels.is_empty()
        && selector.match_expressions.is_none()
        && match_labels.iter().all(|(k, v)| labels.get(k) == Some(v))
}

/// Whether `selector` selects `labels`, with `matchExpressions` (In, NotIn, Exists,
/// DoesNotExist) as the API server evaluates them. An empty selector selects nothing here.
fn selects_with_expressions(selector: &LabelSelector, labels: &BTreeMap<String, String>) -> bool {
    let match_labels = selector.match_labels.clone().unwrap_or_default();
    let expressions = selector.match_expressions.clone().unwrap_or_default();
    if match_labels.is_empty() && expressions.is_empty() {
        return false;
    }
    match_labels.iter().all(|(k, v)| labels.get(k) == Some(v))
        && expressions.iter().all(|e| {
            let value = labels.get(&e.key);
            let values = e.values.clone().unwrap_or_default();
            match e.operator.as_str() {
                "In" => value.is_some_and(|v| values.contains(v)),
                "NotIn" => value.is_none_or(|v| !values.contains(v)),
                "Exists" => value.is_some(),
                "DoesNotExist" => value.is_none(),
                _ => false,
            }
        })
}

/// A count or a percentage of `total` (`25%`), rounded up or down as the API server rounds
/// that field; `None` when it is neither.
fn resolve_count(value: &IntOrString, total: i32, round_up: bool) -> Option<i32> {
    match value {
        IntOrString::Int(n) => Some(*n),
        IntOrString::String(text) => {
            let percent: i32 = text.strip_suffix('%')?.parse().ok()?;
            let scaled = percent.checked_mul(total)?;
            Some(if round_up {
                (scaled + 99) / 100
            } else {
                scaled / 100
            })
        }
    }
}

fn probe_port(probe: &Probe) -> Option<&IntOrString> {
    probe
        .http_get
        .as_ref()
        .map(|h| &h.port)
        .or_else(|| probe.tcp_socket.as_ref().map(|t| &t.port))
}

fn container_has_port(c: &Container, port: &IntOrString) -> bool {
    c.ports.iter().flatten().any(|p| match port {
        IntOrString::Int(n) => p.container_port == *n,
        IntOrString::String(name) => p.name.as_deref() == Some(name.as_str()),
    })
}

fn read(path: &Path) -> anyhow::Result<String> {
    std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))
}

#[cfg(test)]
mod tests;
