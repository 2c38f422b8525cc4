//! The `mtls-shim` sidecar builds no Kubernetes client (issue 15): neither kube, k8s-openapi
//! nor gateway-api is among the packages it compiles.
//!
//! The check reads `cargo metadata` (the resolved graph of the whole workspace for the host
//! platform, from the lock file, without the network) and walks the shim's normal and build dependencies, so it holds
//! whichever crate would bring kube back in: a direct dependency, or one of `linkerd-runtime`'s.
//! Dev-dependencies are not followed: the shim's tests may use the index and its fixtures.
//! The workspace graph unifies features across members, so it is a superset of what
//! `cargo build -p mtls-shim` compiles: the check can only be stricter than that build.

use anyhow::Context;
use serde_json::Value;
use std::collections::{BTreeSet, HashMap};

/// Packages the shim must not build: the Kubernetes client and its API types.
const KUBERNETES: &[&str] = &["kube", "k8s-openapi", "gateway-api"];

/// The names of the packages `root` compiles: itself and its normal and build dependencies,
/// transitively (a package reached only as some package's dev-dependency is left out).
///
/// `metadata` is `cargo metadata --format-version 1` output. Errors when `root` is not a
/// package of the graph, or the output lacks `packages` or `resolve`.
fn built_packages(metadata: &Value, root: &str) -> anyhow::Result<BTreeSet<String>> {
    let names: HashMap<&str, &str> = metadata["packages"]
        .as_array()
        .context("cargo metadata without packages")?
        .iter()
        .filter_map(|p| Some((p["id"].as_str()?, p["name"].as_str()?)))
        .collect();
    let nodes: HashMap<&str, &Value> = metadata["resolve"]["nodes"]
        .as_array()
        .context("cargo metadata without resolve.nodes")?
        .iter()
        .filter_map(|n| Some((n["id"].as_str()?, n)))
        .collect();
    let root_id = names
        .iter()
        .find(|(id, name)| **name == root && nodes.contains_key(**id))
        .map(|(id, _)| *id)
        .with_context(|| format!("no package {root} in the resolved graph"))?;

    let mut seen = BTreeSet::from([root_id]);
    let mut next = vec![root_id];
    while let Some(id) = next.pop() {
        let deps = nodes[id]["deps"].as_array().into_iter().flatten();
        for dep in deps {
            // `kind` is null for a normal dependency, "build" or "dev" otherwise.
            let built = dep["dep_kinds"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|k| k["kind"].as_str() != Some("dev"));
            if let Some(pkg) = dep["pkg"].as_str()
                && built
                && nodes.contains_key(pkg)
                && seen.insert(pkg)
            {
                next.push(pkg);
            }
        }
    }
    Ok(seen
        .into_iter()
        .map(|id| names.get(id).copied().unwrap_or(id).to_string())
        .collect())
}

/// `cargo metadata` of this workspace for the host platform (other platforms' dependencies,
/// such as Windows console crates, are not in the local registry cache), from the lock file
/// and that cache only.
fn workspace_metadata() -> anyhow::Result<Value> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let manifest = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../Cargo.toml");
    let output = std::process::Command::new(cargo)
        .args(["metadata", "--format-version", "1", "--locked", "--offline"])
        .args(["--filter-platform", &host_platform()?])
        .arg("--manifest-path")
        .arg(&manifest)
        .output()
        .context("running cargo metadata")?;
    anyhow::ensure!(
        output.status.success(),
        "cargo metadata failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).context("decoding cargo metadata")
}

/// The host's target triple, from the `host:` line of `rustc -vV`.
fn host_platform() -> anyhow::Result<String> {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".to_string());
    let output = std::process::Command::new(rustc)
        .arg("-vV")
        .output()
        .context("running rustc -vV")?;
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("host: "))
        .map(|host| host.trim().to_string())
        .context("no host line in rustc -vV")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn mtls_shim_builds_no_kubernetes_client() {
        let metadata = workspace_metadata().unwrap();
        let built = built_packages(&metadata, "mtls-shim").unwrap();
        // The walk reached the shim's real dependencies (so an empty set cannot pass).
        for expected in ["linkerd-runtime", "rustls", "tonic", "linkerd2-proxy-api"] {
            assert!(built.contains(expected), "{expected} not in {built:?}");
        }
        let kubernetes: Vec<&String> = built
            .iter()
            .filter(|name| KUBERNETES.contains(&name.as_str()) || name.starts_with("kube-"))
            .collect();
        assert!(
            kubernetes.is_empty(),
            "mtls-shim builds {kubernetes:?}; `cargo tree -p mtls-shim -e normal -i <name>` says why"
        );
        // The same walk finds kube where it is used.
        let policy = built_packages(&metadata, "policy").unwrap();
        assert!(policy.contains("kube") && policy.contains("k8s-openapi"));
    }

    fn mk_package(name: &str) -> Value {
        json!({"id": format!("{name}-id"), "name": name})
    }

    fn mk_dep(name: &str, kinds: &[Option<&str>]) -> Value {
        let kinds: Vec<Value> = kinds
            .iter()
            .map(|k| json!({"kind": k, "target": null}))
            .collect();
        json!({"name": name, "pkg": format!("{name}-id"), "dep_kinds": kinds})
    }

    #[test]
    fn dev_dependencies_are_not_built() {
        let packages = [
            "shim",
            "runtime",
            "index",
            "kube",
            "k8s-openapi",
            "cc",
            "tempfile",
        ];
        let metadata = json!({
            "packages": packages.map(mk_package),
            "resolve": {"nodes": [
                {"id": "shim-id", "deps": [
                    mk_dep("runtime", &[None]),
                    mk_dep("index", &[Some("dev")]),
                    mk_dep("cc", &[Some("build")]),
                ]},
                // A dependency that is dev for one target and normal for another is built.
                {"id": "runtime-id", "deps": [
                    mk_dep("kube", &[Some("dev"), None]),
                    mk_dep("tempfile", &[Some("dev")]),
                ]},
                {"id": "index-id", "deps": [mk_dep("k8s-openapi", &[None])]},
                {"id": "kube-id", "deps": []},
                {"id": "k8s-openapi-id", "deps": []},
                {"id": "cc-id", "deps": []},
                {"id": "tempfile-id", "deps": []},
            ]},
        });
        assert_eq!(
            built_packages(&metadata, "shim").unwrap(),
            BTreeSet::from(["cc", "kube", "runtime", "shim"].map(String::from))
        );
        assert_eq!(
            built_packages(&metadata, "index").unwrap(),
            BTreeSet::from(["index", "k8s-openapi"].map(String::from))
        );
        assert!(built_packages(&metadata, "nope").is_err());
    }
}
