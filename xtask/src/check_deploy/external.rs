//! The tools that know Kubernetes better than check-deploy: `kubectl kustomize` and
//! `kubernetes-validate`, each when on PATH.

use super::{Doc, OLDEST_KUBERNETES, Report, parse_docs};
use anyhow::Context;
use linkerd_k8s_api::yaml;
use serde_json::Value;
use std::{collections::BTreeSet, path::Path, process::Command};

/// `kubectl kustomize` on each overlay (when on PATH): it must build. Kustomize refuses what the
/// in-process loader accepts, e.g. an overlay inside its base directory ("cycle detected").
pub(super) fn build_overlays(
    overlays: &[std::path::PathBuf],
    report: &mut Report,
) -> anyhow::Result<()> {
    if !on_path("kubectl") {
        return Ok(());
    }
    for overlay in overlays {
        let output = Command::new("kubectl")
            .arg("kustomize")
            .arg(overlay)
            .output()
            .context("running kubectl kustomize")?;
        if !output.status.success() {
            report.errors.push(format!(
                "kubectl kustomize {} failed: {}",
                overlay.display(),
                String::from_utf8_lossy(&output.stderr).trim()
            ));
        }
    }
    Ok(())
}

pub(super) fn run_external(
    deploy_dir: &Path,
    docs: &[Doc],
    report: &mut Report,
) -> anyhow::Result<()> {
    let tmp = tempfile::tempdir()?;
    let mut to_validate = tmp.path().join("deploy.yaml");
    let ours: BTreeSet<String> = docs.iter().map(|d| object_key(&d.value)).collect();

    if on_path("kubectl") {
        let output = Command::new("kubectl")
            .arg("kustomize")
            .arg(deploy_dir)
            .output()
            .context("running kubectl kustomize")?;
        if !output.status.success() {
            report.errors.push(format!(
                "kubectl kustomize {} failed: {}",
                deploy_dir.display(),
                String::from_utf8_lossy(&output.stderr).trim()
            ));
        } else {
            let built = String::from_utf8_lossy(&output.stdout).into_owned();
            let theirs: BTreeSet<String> = parse_docs(&built, "kubectl kustomize")?
                .iter()
                .map(|d| object_key(&d.value))
                .collect();
            if theirs != ours {
                report.errors.push(format!(
                    "kubectl kustomize builds other objects than check-deploy read: only kustomize: {:?}; only check-deploy: {:?}",
                    theirs.difference(&ours).collect::<Vec<_>>(),
                    ours.difference(&theirs).collect::<Vec<_>>()
                ));
            }
            std::fs::write(&to_validate, built)?;
            report.summary.push(format!(
                "kubectl kustomize: builds the same {} objects",
                theirs.len()
            ));
        }
    } else {
        report
            .summary
            .push("kubectl: not on PATH, kustomize build not checked".to_string());
    }
    if !to_validate.exists() {
        let mut all = String::new();
        for doc in docs {
            all.push_str("---\n");
            all.push_str(&yaml::to_string(&doc.value)?);
        }
        to_validate = tmp.path().join("documents.yaml");
        std::fs::write(&to_validate, all)?;
    }

    if on_path("kubernetes-validate") {
        for version in [Some(OLDEST_KUBERNETES), None] {
            let mut cmd = Command::new("kubernetes-validate");
            cmd.arg("--strict").arg("--quiet");
            if let Some(version) = version {
                cmd.arg("--kubernetes-version").arg(version);
            }
            let output = cmd
                .arg(&to_validate)
                .output()
                .context("running kubernetes-validate")?;
            let label = version.unwrap_or("its newest release");
            if output.status.success() {
                report
                    .summary
                    .push(format!("kubernetes-validate --strict against {label}: ok"));
            } else {
                report.errors.push(format!(
                    "kubernetes-validate --strict against {label}: {}{}",
                    String::from_utf8_lossy(&output.stdout).trim(),
                    String::from_utf8_lossy(&output.stderr).trim()
                ));
            }
        }
    } else {
        report.summary.push(
            "kubernetes-validate: not on PATH, Kubernetes schemas not checked (pip install kubernetes-validate)"
                .to_string(),
        );
    }
    Ok(())
}

/// `apiVersion kind namespace/name` of an object.
fn object_key(value: &Value) -> String {
    let s = |p: &str| value.pointer(p).and_then(Value::as_str).unwrap_or("");
    format!(
        "{} {} {}/{}",
        s("/apiVersion"),
        s("/kind"),
        s("/metadata/namespace"),
        s("/metadata/name")
    )
}

/// Whether `program` is an executable file in a directory of PATH.
pub(super) fn on_path(program: &str) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::env::var_os("PATH").is_some_and(|path| {
        std::env::split_paths(&path).any(|dir| {
            std::fs::metadata(dir.join(program))
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
    })
}
