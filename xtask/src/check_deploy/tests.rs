use super::*;
use crate::certs;
use linkerd_k8s_api::crd_schema::{UnknownFields, to_json_schema};
use std::process::Command;

fn root() -> PathBuf {
    crate::workspace_root().unwrap()
}

/// A copy of the workspace's deploy/ (without local/) in a temporary directory.
fn copy_deploy() -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    let src = root().join("deploy");
    for file in yaml_files(&src).unwrap() {
        let rel = file.strip_prefix(&src).unwrap();
        if rel.starts_with("local") {
            continue;
        }
        let dest = tmp.path().join("deploy").join(rel);
        std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
        std::fs::copy(&file, &dest).unwrap();
    }
    tmp
}

/// Replaces `from` (which must occur) in a file of the copy.
fn edit(tmp: &tempfile::TempDir, file: &str, from: &str, to: &str) {
    let path = tmp.path().join("deploy").join(file);
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.contains(from), "{file} has no {from:?}");
    std::fs::write(&path, text.replacen(from, to, 1)).unwrap();
}

/// check-deploy on the copy, without external tools, examples from the copy only.
fn check_copy(tmp: &tempfile::TempDir) -> Report {
    check(&Options {
        deploy_dir: tmp.path().join("deploy"),
        example_dirs: vec![tmp.path().join("deploy/examples")],
        fixture_dirs: vec![],
        overlay_dirs: vec![
            tmp.path().join("deploy/certify"),
            tmp.path().join("deploy/ha"),
        ],
        external_tools: false,
        workspace: None,
    })
    .unwrap()
}

fn assert_one_error(report: &Report, needle: &str) {
    assert_eq!(report.errors.len(), 1, "{:#?}", report.errors);
    assert!(
        report.errors[0].contains(needle),
        "{:?} does not say {needle:?}",
        report.errors[0]
    );
}

/// The workspace's deploy/ passes every check, with kubectl and kubernetes-validate when they
/// are on PATH (CI installs kubernetes-validate).
#[test]
fn deploy_is_valid() {
    let report = check(&Options::for_workspace(&root(), true)).unwrap();
    assert!(
        report.errors.is_empty(),
        "run `cargo xtask check-deploy`:\n{}",
        report.errors.join("\n")
    );
    // The one fixture with a field the CRD does not know, on purpose.
    assert_eq!(report.warnings.len(), 1, "{:#?}", report.warnings);
    assert!(report.warnings[0].contains("invalid-03-unknown-field.yaml"));
    assert!(report.warnings[0].contains("'isRetriable' was unexpected"));
    if std::env::var("CI").as_deref() == Ok("true") {
        assert!(
            on_path("kubernetes-validate"),
            ".ci/run installs kubernetes-validate"
        );
    }
    if on_path("kubernetes-validate") {
        assert!(
            report
                .summary
                .iter()
                .any(|l| l.contains(&format!("against {OLDEST_KUBERNETES}: ok")))
        );
    }
}

/// The names gen-certs writes and the names deploy/ uses agree, and the pod's ports are wired
/// as deploy/base/destination.yaml's table says.
#[test]
fn pod_contract() {
    let docs = load_docs(&root().join("deploy/base/destination.yaml")).unwrap();
    let deployment: Deployment = decode_strict(&docs[0].value).unwrap();
    let pod = deployment.spec.unwrap().template.spec.unwrap();
    let names: Vec<_> = pod.containers.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["destination", "sp-validator", "policy"]);
    let shim = &pod.init_containers.as_ref().unwrap()[0];
    assert_eq!(shim.name, "linkerd-proxy");
    assert_eq!(shim.restart_policy.as_deref(), Some("Always"));
    // The shim's `/ready` waits for the controllers, which a native sidecar's startup probe
    // holds back: the startup probe must be `/live`.
    let startup = shim
        .startup_probe
        .as_ref()
        .unwrap()
        .http_get
        .as_ref()
        .unwrap();
    assert_eq!(startup.path.as_deref(), Some("/live"));
    let ready = shim
        .readiness_probe
        .as_ref()
        .unwrap()
        .http_get
        .as_ref()
        .unwrap();
    assert_eq!(ready.path.as_deref(), Some("/ready"));
    let args = |name: &str| -> Vec<String> {
        pod.containers
            .iter()
            .chain(pod.init_containers.iter().flatten())
            .find(|c| c.name == name)
            .unwrap()
            .args
            .clone()
            .unwrap()
    };
    let flag = |name: &str, flag: &str| -> Vec<String> {
        args(name)
            .iter()
            .filter_map(|a| a.strip_prefix(&format!("--{flag}=")).map(str::to_string))
            .collect()
    };
    // The shim forwards the pod's gRPC ports to the controllers' loopback listeners.
    assert_eq!(
        flag("linkerd-proxy", "forward"),
        [
            format!("0.0.0.0:8086={}", flag("destination", "addr")[0]),
            format!("0.0.0.0:8090={}", flag("policy", "grpc-addr")[0]),
        ]
    );
    assert_eq!(flag("destination", "addr"), ["127.0.0.1:18086"]);
    assert_eq!(flag("policy", "grpc-addr"), ["127.0.0.1:18090"]);
    assert_eq!(flag("sp-validator", "addr"), ["0.0.0.0:8443"]);
    assert_eq!(flag("policy", "server-addr"), ["0.0.0.0:9443"]);

    // The secrets gen-certs writes are the ones the pod mounts.
    let secrets: BTreeSet<String> = pod
        .volumes
        .iter()
        .flatten()
        .filter_map(|v| v.secret.as_ref()?.secret_name.clone())
        .collect();
    let mut expected: BTreeSet<String> = certs::WEBHOOKS
        .iter()
        .map(|w| w.secret.to_string())
        .collect();
    expected.insert(certs::IDENTITY_SECRET.to_string());
    assert_eq!(secrets, expected);

    // Services: upstream's names and ports, onto the containers' ports.
    let services: Vec<(String, Option<String>, i32, String)> =
        load_docs(&root().join("deploy/base/services.yaml"))
            .unwrap()
            .iter()
            .map(|d| {
                let svc: Service = decode_strict(&d.value).unwrap();
                let spec = svc.spec.unwrap();
                let port = &spec.ports.unwrap()[0];
                let target = match port.target_port.clone().unwrap() {
                    IntOrString::Int(n) => n.to_string(),
                    IntOrString::String(s) => s,
                };
                (
                    svc.metadata.name.unwrap(),
                    spec.cluster_ip,
                    port.port,
                    target,
                )
            })
            .collect();
    let none = Some("None".to_string());
    assert_eq!(
        services,
        [
            ("linkerd-dst".to_string(), None, 8086, "8086".to_string()),
            (
                "linkerd-dst-headless".to_string(),
                none.clone(),
                8086,
                "8086".to_string()
            ),
            (
                "linkerd-sp-validator".to_string(),
                None,
                443,
                "sp-validator".to_string()
            ),
            ("linkerd-policy".to_string(), none, 8090, "8090".to_string()),
            (
                "linkerd-policy-validator".to_string(),
                None,
                443,
                "policy-https".to_string()
            ),
        ]
    );

    // The webhook configurations gen-certs patches exist, and call the services gen-certs
    // signs for.
    let webhooks: Vec<(String, String)> = load_docs(&root().join("deploy/base/webhooks.yaml"))
        .unwrap()
        .iter()
        .map(|d| {
            let config: ValidatingWebhookConfiguration = decode_strict(&d.value).unwrap();
            let hook = &config.webhooks.unwrap()[0];
            (
                config.metadata.name.unwrap(),
                hook.client_config.service.as_ref().unwrap().name.clone(),
            )
        })
        .collect();
    let expected: Vec<(String, String)> = certs::WEBHOOKS
        .iter()
        .map(|w| (w.configuration.to_string(), w.service.to_string()))
        .collect();
    assert_eq!(webhooks, expected);
}

/// Every container's args are accepted by its binary's own command line, and mean what the
/// pod needs: the shim forwards to where the controllers listen.
#[test]
fn container_args_parse() {
    use clap::Parser;
    let docs = load_docs(&root().join("deploy/base/destination.yaml")).unwrap();
    let deployment: Deployment = decode_strict(&docs[0].value).unwrap();
    let pod = deployment.spec.unwrap().template.spec.unwrap();
    let argv = |name: &str, bin: &str| -> Vec<String> {
        let c = pod
            .containers
            .iter()
            .chain(pod.init_containers.iter().flatten())
            .find(|c| c.name == name)
            .unwrap();
        std::iter::once(bin.to_string())
            .chain(c.args.clone().unwrap())
            .collect()
    };
    let dst = destination::args::Args::try_parse_from(argv("destination", "destination")).unwrap();
    let policy = policy::args::Args::try_parse_from(argv("policy", "policy-controller")).unwrap();
    let spv =
        sp_validator::args::Args::try_parse_from(argv("sp-validator", "sp-validator")).unwrap();
    let shim = mtls_shim::args::Args::try_parse_from(argv("linkerd-proxy", "mtls-shim")).unwrap();

    let forwards: Vec<(u16, std::net::SocketAddr)> = shim
        .forwards
        .iter()
        .map(|f| (f.listen.port(), f.upstream))
        .collect();
    assert_eq!(forwards, [(8086, dst.addr), (8090, policy.grpc_addr)]);
    assert!(dst.addr.ip().is_loopback() && policy.grpc_addr.ip().is_loopback());
    assert_eq!(
        shim.local_identity(),
        "linkerd-destination.linkerd.serviceaccount.identity.linkerd.cluster.local"
    );
    assert_eq!(dst.controller_namespace, shim.control_plane_namespace);
    assert_eq!(dst.identity_trust_domain, shim.identity_trust_domain);
    assert_eq!(policy.identity_domain, shim.identity_trust_domain);
    assert!(!dst.enable_ipv6);
    assert!(
        dst.translator_config()
            .unwrap()
            .meshed_http2_params
            .is_some()
    );
    assert_eq!(spv.addr.port(), 8443);
    assert_eq!(policy.server_addr.port(), 9443);
    assert!(!policy.admission_controller_disabled);
    let admin_ports = [
        dst.admin_addr,
        policy.admin_addr,
        spv.admin_addr,
        shim.admin_addr,
    ]
    .map(|a| a.port());
    assert_eq!(admin_ports, [9996, 9990, 9997, 4191]);
    assert!(dst.cluster.cluster_state.is_none() && policy.cluster.cluster_state.is_none());
}

/// The overlay gen-certs writes reads as deploy/ plus three TLS secrets, and (with kubectl)
/// builds with both caBundles set.
#[test]
fn gen_certs_overlay() {
    let out = tempfile::tempdir().unwrap();
    let generated = certs::generate(
        certs::DEPLOY_NAMESPACE,
        "cluster.local",
        time::Duration::days(1),
        None,
    )
    .unwrap();
    let files = certs::render(
        &generated,
        certs::DEPLOY_NAMESPACE,
        &root().join("deploy"),
        out.path(),
    )
    .unwrap();
    for (name, contents) in &files {
        let path = out.path().join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, contents).unwrap();
    }
    // The Certify overlay it writes too: deploy/certify plus the two webhook Secrets.
    let certify = check(&Options {
        deploy_dir: out.path().join("certify"),
        example_dirs: vec![],
        fixture_dirs: vec![],
        overlay_dirs: vec![],
        external_tools: true,
        workspace: None,
    })
    .unwrap();
    assert!(certify.errors.is_empty(), "{:#?}", certify.errors);
    assert!(
        certify.summary[0].contains("31 objects") && certify.summary[0].contains("2 Secret"),
        "{:?}",
        certify.summary
    );
    let report = check(&Options {
        deploy_dir: out.path().to_path_buf(),
        example_dirs: vec![],
        fixture_dirs: vec![],
        overlay_dirs: vec![out.path().join("certify")],
        external_tools: true,
        workspace: None,
    })
    .unwrap();
    assert!(report.errors.is_empty(), "{:#?}", report.errors);
    assert!(
        report.summary[0].contains("32 objects") && report.summary[0].contains("3 Secret"),
        "{:?}",
        report.summary
    );
    if on_path("kubectl") {
        let output = Command::new("kubectl")
            .arg("kustomize")
            .arg(out.path())
            .output()
            .unwrap();
        assert!(output.status.success());
        let built = parse_docs(&String::from_utf8(output.stdout).unwrap(), "built").unwrap();
        for wh in &generated.webhooks {
            let config = built
                .iter()
                .find(|d| d.value["metadata"]["name"] == wh.webhook.configuration)
                .unwrap();
            let bundle: k8s_openapi::ByteString = serde_json::from_value(
                config.value["webhooks"][0]["clientConfig"]["caBundle"].clone(),
            )
            .unwrap();
            assert_eq!(bundle.0, wh.ca_pem.as_bytes());
        }
    }
}

#[test]
fn unknown_fields_of_builtin_kinds_are_errors() {
    let tmp = copy_deploy();
    edit(
        &tmp,
        "base/destination.yaml",
        "  revisionHistoryLimit: 10",
        "  revisionHistoryLimt: 10",
    );
    assert_one_error(
        &check_copy(&tmp),
        "unknown field(s): spec.revisionHistoryLimt",
    );

    let tmp = copy_deploy();
    edit(
        &tmp,
        "base/destination.yaml",
        "        readinessProbe:\n          httpGet:\n            path: /ready\n            port: 9996",
        "        readinessProbe:\n          httpGet:\n            path: /ready\n            prot: 9996",
    );
    // k8s-openapi defaults a missing required field (kubernetes-validate refuses it); the
    // misspelt one is reported with its path.
    assert_one_error(
        &check_copy(&tmp),
        "unknown field(s): spec.template.spec.containers[0].readinessProbe.httpGet.prot",
    );
}

#[test]
fn unknown_api_versions_are_errors() {
    let tmp = copy_deploy();
    edit(
        &tmp,
        "base/pdb.yaml",
        "apiVersion: policy/v1",
        "apiVersion: policy/v1beta1",
    );
    let report = check_copy(&tmp);
    assert_eq!(report.errors.len(), 2, "{:#?}", report.errors);
    assert!(
        report.errors[0]
            .contains("knows no Kubernetes type for policy/v1beta1 PodDisruptionBudget")
    );
    // The budget is not read, so deploy/ha's three replicas have none.
    assert!(report.errors[1].contains("3 replicas need a PodDisruptionBudget"));
}

#[test]
fn services_must_reach_container_ports() {
    let tmp = copy_deploy();
    edit(
        &tmp,
        "base/services.yaml",
        "targetPort: policy-https",
        "targetPort: policy-http",
    );
    assert_one_error(
        &check_copy(&tmp),
        "Service linkerd-policy-validator: targetPort String(\"policy-http\") is not a port of a running container",
    );

    let tmp = copy_deploy();
    edit(
        &tmp,
        "base/services.yaml",
        "    linkerd.io/control-plane-component: destination\n  ports:\n  - name: grpc\n    port: 8090",
        "    linkerd.io/control-plane-component: dest\n  ports:\n  - name: grpc\n    port: 8090",
    );
    assert_one_error(
        &check_copy(&tmp),
        "Service linkerd-policy: selector does not match",
    );
}

#[test]
fn probes_and_hardening_are_checked() {
    let tmp = copy_deploy();
    edit(
        &tmp,
        "base/destination.yaml",
        "            path: /ping\n            port: 9996",
        "            path: /ping\n            port: 9999",
    );
    assert_one_error(
        &check_copy(&tmp),
        "container destination: livenessProbe port Int(9999)",
    );

    let tmp = copy_deploy();
    edit(
        &tmp,
        "base/destination.yaml",
        "          allowPrivilegeEscalation: false\n          capabilities:\n            drop: [ALL]\n          readOnlyRootFilesystem: true\n          runAsNonRoot: true\n          runAsUser: 2103",
        "          allowPrivilegeEscalation: false\n          capabilities:\n            drop: [ALL]\n          readOnlyRootFilesystem: false\n          runAsNonRoot: true\n          runAsUser: 2103",
    );
    assert_one_error(
        &check_copy(&tmp),
        "container destination: readOnlyRootFilesystem is not true",
    );
}

#[test]
fn webhooks_must_call_a_service_of_deploy() {
    let tmp = copy_deploy();
    edit(
        &tmp,
        "base/webhooks.yaml",
        "      name: linkerd-sp-validator\n",
        "      name: linkerd-sp-validater\n",
    );
    assert_one_error(
        &check_copy(&tmp),
        "Service linkerd/linkerd-sp-validater is not in deploy/",
    );
}

#[test]
fn rbac_is_least_privilege_and_complete() {
    let tmp = copy_deploy();
    edit(
        &tmp,
        "base/rbac.yaml",
        "  resources: [pods, services, nodes]\n  verbs: [get, list, watch]",
        "  resources: [pods, services, nodes]\n  verbs: [get, list, watch, delete]",
    );
    let report = check_copy(&tmp);
    assert_eq!(report.errors.len(), 3, "{:#?}", report.errors);
    assert!(report.errors[0].contains("[\"delete\"] on \"pods\""));

    // The pod records no events, so it may not write them.
    let tmp = copy_deploy();
    edit(
        &tmp,
        "base/rbac.yaml",
        "  resources: [httproutes/status, grpcroutes/status, tlsroutes/status, tcproutes/status]\n  verbs: [patch]\n",
        "  resources: [httproutes/status, grpcroutes/status, tlsroutes/status, tcproutes/status]\n  verbs: [patch]\n- apiGroups: [\"\"]\n  resources: [events]\n  verbs: [create, patch]\n",
    );
    assert_one_error(&check_copy(&tmp), "on \"events\": the pod writes only");

    // The ExternalWorkload controller may delete its EndpointSlices, never collections of them.
    let tmp = copy_deploy();
    edit(
        &tmp,
        "base/rbac.yaml",
        "  verbs: [create, update, delete]",
        "  verbs: [create, update, delete, deletecollection]",
    );
    let report = check_copy(&tmp);
    assert_eq!(report.errors.len(), 2, "{:#?}", report.errors);
    assert!(
        report.errors[0].contains("on \"endpointslices\""),
        "{:#?}",
        report.errors
    );
    assert!(
        report.errors[1].contains("\"deletecollection\", \"update\"]; the pod makes exactly"),
        "{:#?}",
        report.errors
    );

    // The writers' kinds get exactly the writes their code makes: no patch (never used), and
    // not without update (the controller replaces its slices).
    let tmp = copy_deploy();
    edit(
        &tmp,
        "base/rbac.yaml",
        "  verbs: [create, update, delete]",
        "  verbs: [create, update, patch, delete]",
    );
    assert_eq!(
        check_copy(&tmp).errors,
        [
            "RBAC: writes granted on endpointslices.discovery.k8s.io are [\"create\", \"delete\", \"patch\", \"update\"]; the pod makes exactly [\"create\", \"delete\", \"update\"]"
        ]
    );
    let tmp = copy_deploy();
    edit(
        &tmp,
        "base/rbac.yaml",
        "  verbs: [create, update, delete]",
        "  verbs: [create, delete]",
    );
    assert_one_error(
        &check_copy(&tmp),
        "are [\"create\", \"delete\"]; the pod makes exactly",
    );
    let tmp = copy_deploy();
    edit(
        &tmp,
        "base/rbac.yaml",
        "  verbs: [get, update]",
        "  verbs: [get, update, patch]",
    );
    assert_one_error(
        &check_copy(&tmp),
        "writes granted on leases.coordination.k8s.io are [\"create\", \"patch\", \"update\"]",
    );

    let tmp = copy_deploy();
    edit(
        &tmp,
        "base/rbac.yaml",
        "  resources: [replicasets]",
        "  resources: [\"*\"]",
    );
    let report = check_copy(&tmp);
    assert!(
        report.errors[0].contains("a rule grants a wildcard"),
        "{:#?}",
        report.errors
    );
    assert!(
        report
            .errors
            .iter()
            .any(|e| e.contains("no ClusterRoleBinding grants get on replicasets.apps")),
        "{:#?}",
        report.errors
    );

    let tmp = copy_deploy();
    edit(
        &tmp,
        "base/rbac.yaml",
        "  resources: [jobs]\n",
        "  resources: [cronjobs]\n",
    );
    let report = check_copy(&tmp);
    assert_eq!(
        report.errors,
        ["get", "list", "watch"].map(|verb| format!(
            "RBAC: no ClusterRoleBinding grants {verb} on jobs.batch (the index watches it)"
        ))
    );

    let tmp = copy_deploy();
    edit(
        &tmp,
        "base/rbac.yaml",
        "  name: linkerd-policy\nsubjects:",
        "  name: linkerd-policies\nsubjects:",
    );
    let report = check_copy(&tmp);
    assert!(
        report.errors[0].contains("roleRef ClusterRole linkerd-policies is not in deploy/"),
        "{:#?}",
        report.errors
    );
}

/// Regression: deploy/certify and gen-certs' deploy/local extended `..`, deploy/ itself, which
/// contains them; kustomize refuses that ("cycle detected"), so `kubectl apply -k` failed.
#[test]
fn an_overlay_inside_its_base_is_an_error() {
    let tmp = copy_deploy();
    edit(&tmp, "certify/kustomization.yaml", "- ../base\n", "- ..\n");
    let report = check_copy(&tmp);
    assert!(
        report.errors.iter().any(|e| e.contains(
            "certify/kustomization.yaml: resource \"..\" contains this kustomization, which kustomize refuses"
        )),
        "{:#?}",
        report.errors
    );
}

#[test]
fn every_manifest_is_part_of_the_kustomization() {
    let tmp = copy_deploy();
    std::fs::write(tmp.path().join("deploy/extra.yaml"), "kind: ConfigMap\n").unwrap();
    assert_one_error(
        &check_copy(&tmp),
        "extra.yaml: not referenced by any kustomization",
    );

    let tmp = copy_deploy();
    edit(
        &tmp,
        "base/kustomization.yaml",
        "- pdb.yaml\n",
        "- pdb.yaml\n- missing.yaml\n",
    );
    assert_one_error(
        &check_copy(&tmp),
        "resource \"missing.yaml\" does not exist",
    );

    let tmp = copy_deploy();
    edit(
        &tmp,
        "base/kustomization.yaml",
        "resources:",
        "namePrefix: x-\nresources:",
    );
    let report = check_copy(&tmp);
    assert!(
        report.errors[0].contains("unknown field `namePrefix`"),
        "{:#?}",
        report.errors
    );
}

#[test]
fn custom_resources_are_validated_against_the_crds() {
    let tmp = copy_deploy();
    edit(
        &tmp,
        "examples/policy.yaml",
        "  port: http\n",
        "  port: [http]\n",
    );
    assert_one_error(&check_copy(&tmp), "Server web-http: spec.port: ");

    let tmp = copy_deploy();
    edit(
        &tmp,
        "examples/policy.yaml",
        "  trafficPolicy: Deny",
        "  trafficPolicy: Maybe",
    );
    assert_one_error(
        &check_copy(&tmp),
        "EgressNetwork internet: spec.trafficPolicy: \"Maybe\" is not one of",
    );

    let tmp = copy_deploy();
    edit(
        &tmp,
        "examples/service-profile.yaml",
        "    isRetryable: true",
        "    isRetriable: true",
    );
    assert_one_error(&check_copy(&tmp), "'isRetriable' was unexpected");

    let tmp = copy_deploy();
    edit(
        &tmp,
        "examples/external-workload.yaml",
        "apiVersion: workload.linkerd.io/v1beta1",
        "apiVersion: workload.linkerd.io/v1",
    );
    assert_one_error(
        &check_copy(&tmp),
        "no CRD in deploy/crds serves workload.linkerd.io/v1 ExternalWorkload",
    );

    // In fixtures, fields the CRD does not know are warnings (the API server may prune them).
    let tmp = copy_deploy();
    let fixtures = tmp.path().join("fixtures");
    std::fs::create_dir_all(&fixtures).unwrap();
    std::fs::write(
        fixtures.join("cluster.yaml"),
        "apiVersion: v1\nkind: List\nitems:\n- apiVersion: policy.linkerd.io/v1alpha1\n  kind: NetworkAuthentication\n  metadata: {name: n, namespace: x}\n  spec:\n    networks: [{cidr: 10.0.0.0/8, exception: []}]\n",
    )
    .unwrap();
    let report = check(&Options {
        deploy_dir: tmp.path().join("deploy"),
        example_dirs: vec![],
        fixture_dirs: vec![fixtures],
        overlay_dirs: vec![
            tmp.path().join("deploy/certify"),
            tmp.path().join("deploy/ha"),
        ],
        external_tools: false,
        workspace: None,
    })
    .unwrap();
    assert!(report.errors.is_empty(), "{:#?}", report.errors);
    assert_eq!(report.warnings.len(), 1);
    assert!(report.warnings[0].contains("cluster.yaml#1.items[0]: NetworkAuthentication n"));
    assert!(report.warnings[0].contains("'exception' was unexpected"));
}

#[test]
fn images_are_built_by_a_dockerfile_of_docker() {
    let bins = declared_bins(&root().join("crates")).unwrap();
    assert_eq!(bins["policy-controller"], "policy");
    assert_eq!(bins["destination"], "destination");
    assert_eq!(bins["dst-diag"], "diag");

    let tmp = copy_deploy();
    edit(
        &tmp,
        "base/destination.yaml",
        "image: ghcr.io/linkerd-rs/sp-validator:latest",
        "image: ghcr.io/linkerd-rs/sp-validate:latest",
    );
    let docs = load_docs(&tmp.path().join("deploy/base/destination.yaml")).unwrap();
    let mut manifests = Manifests::default();
    manifests.add(&docs[0]).unwrap();
    let mut report = Report::default();
    check_images(&root(), &manifests, &mut report).unwrap();
    assert_eq!(report.errors.len(), 1, "{:#?}", report.errors);
    assert!(report.errors[0].ends_with(
        "container sp-validator: no crate under crates/ declares a binary \"sp-validate\""
    ));
}

#[test]
fn structural_schema_rules() {
    let problems = |schema: Value| {
        let mut problems = Vec::new();
        structural_problems(&schema, "s", false, &mut problems);
        problems
    };
    assert!(
        problems(serde_json::json!({"type": "object", "properties": {"a": {"type": "string"}}}))
            .is_empty()
    );
    assert_eq!(
        problems(serde_json::json!({"type": "object", "properties": {"a": {"$ref": "#/x"}}})),
        ["s.a: $ref is not supported", "s.a: no type"]
    );
    assert_eq!(
        problems(serde_json::json!({"type": "array"})),
        ["s: an array without items"]
    );
    assert_eq!(
        problems(
            serde_json::json!({"x-kubernetes-int-or-string": true, "anyOf": [{"type": "integer"}, {"type": "string"}]})
        ),
        [
            "s.anyOf[0]: type inside allOf/anyOf/oneOf/not",
            "s.anyOf[1]: type inside allOf/anyOf/oneOf/not"
        ]
    );
    assert!(problems(serde_json::json!({"x-kubernetes-int-or-string": true})).is_empty());
}

#[test]
fn nullable_and_implicit_root_fields() {
    let schema = serde_json::json!({
        "type": "object",
        "properties": {"spec": {"type": "object", "nullable": true, "properties": {"n": {"type": "integer"}}}},
    });
    let strict = jsonschema::draft4::new(&to_json_schema(&schema, UnknownFields::Refused)).unwrap();
    let ok = serde_json::json!({"apiVersion": "a/v1", "kind": "K", "metadata": {"name": "x"}, "spec": null});
    assert!(strict.is_valid(&ok));
    assert!(strict.is_valid(&serde_json::json!({"spec": {"n": 1}})));
    assert!(!strict.is_valid(&serde_json::json!({"spec": {"n": 1, "m": 2}})));
    assert!(!strict.is_valid(&serde_json::json!({"spec": {"n": "1"}})));
    let lenient = jsonschema::draft4::new(&to_json_schema(&schema, UnknownFields::Pruned)).unwrap();
    assert!(lenient.is_valid(&serde_json::json!({"spec": {"n": 1, "m": 2}})));
    assert_eq!(json_path("/spec/routes/0/name"), "spec.routes[0].name");
    assert_eq!(json_path(""), "(root)");
}

/// deploy/certify builds deploy/ with the sidecar in Certify mode: its flags parse as such, it
/// mounts the projected token (audience identity.l5d.io) and the trust-roots ConfigMap, and the
/// pod no longer needs the identity Secret.
#[test]
fn certify_overlay() {
    use clap::Parser;
    let mut docs = Vec::new();
    let mut report = Report::default();
    load_kustomization(
        &root().join("deploy/certify"),
        &mut docs,
        &mut BTreeSet::new(),
        &mut report,
    )
    .unwrap();
    assert!(report.errors.is_empty(), "{:#?}", report.errors);
    let doc = docs
        .iter()
        .find(|d| d.value["kind"] == "Deployment")
        .unwrap();
    let deployment: Deployment = decode_strict(&doc.value).unwrap();
    let pod = deployment.spec.unwrap().template.spec.unwrap();
    let shim = &pod.init_containers.as_ref().unwrap()[0];
    let args = mtls_shim::args::Args::try_parse_from(
        std::iter::once("mtls-shim".to_string()).chain(shim.args.clone().unwrap()),
    )
    .unwrap();
    assert_eq!(
        args.identity_addr.map(|a| a.to_string()).as_deref(),
        Some("linkerd-identity-headless.linkerd.svc.cluster.local.:8080")
    );
    assert!(args.identity_cert.is_none() && args.identity_key.is_none());
    let volumes = pod.volumes.unwrap();
    let names: Vec<&str> = volumes.iter().map(|v| v.name.as_str()).collect();
    assert!(!names.contains(&"identity"), "{names:?}");
    let token = volumes
        .iter()
        .find(|v| v.name == "linkerd-identity-token")
        .unwrap();
    let source = token.projected.as_ref().unwrap().sources.as_ref().unwrap()[0]
        .service_account_token
        .clone()
        .unwrap();
    assert_eq!(source.audience.as_deref(), Some("identity.l5d.io"));
    assert_eq!(source.path, "linkerd-identity-token");
    let mounts: Vec<(&str, &str)> = shim
        .volume_mounts
        .iter()
        .flatten()
        .map(|m| (m.name.as_str(), m.mount_path.as_str()))
        .collect();
    assert_eq!(
        mounts,
        [
            (
                "linkerd-identity-trust-roots",
                "/var/run/linkerd/identity/trust-roots"
            ),
            ("linkerd-identity-token", "/var/run/secrets/tokens"),
        ]
    );
    assert_eq!(
        args.identity_token_file,
        PathBuf::from("/var/run/secrets/tokens/linkerd-identity-token")
    );
}

/// A patch whose `test` operation does not hold (deploy/ reordered under it), or that matches
/// nothing, fails the check instead of editing the wrong thing.
#[test]
fn overlay_patches_are_applied_and_checked() {
    let tmp = copy_deploy();
    edit(
        &tmp,
        "certify/shim-certify.yaml",
        "  value: identity\n",
        "  value: sp-tls\n",
    );
    let report = check_copy(&tmp);
    assert_one_error(&report, "shim-certify.yaml");

    let tmp = copy_deploy();
    edit(
        &tmp,
        "certify/kustomization.yaml",
        "name: linkerd-destination",
        "name: linkerd-nothing",
    );
    assert_one_error(&check_copy(&tmp), "no object matches the target");
}

/// deploy/ha: three replicas on three nodes, one pod down at a time in rolling updates and
/// drains; everything else as deploy/.
#[test]
fn ha_overlay() {
    let mut docs = Vec::new();
    let mut report = Report::default();
    load_kustomization(
        &root().join("deploy/ha"),
        &mut docs,
        &mut BTreeSet::new(),
        &mut report,
    )
    .unwrap();
    assert!(report.errors.is_empty(), "{:#?}", report.errors);
    let doc = docs
        .iter()
        .find(|d| d.value["kind"] == "Deployment")
        .unwrap();
    let deployment: Deployment = decode_strict(&doc.value).unwrap();
    let spec = deployment.spec.unwrap();
    assert_eq!(spec.replicas, Some(3));
    let rolling = spec.strategy.unwrap().rolling_update.unwrap();
    assert_eq!(rolling.max_unavailable, Some(IntOrString::Int(1)));
    assert_eq!(
        resolve_count(rolling.max_surge.as_ref().unwrap(), 3, true),
        Some(1)
    );
    let anti = spec
        .template
        .spec
        .unwrap()
        .affinity
        .unwrap()
        .pod_anti_affinity
        .unwrap();
    let required = anti
        .required_during_scheduling_ignored_during_execution
        .unwrap();
    assert_eq!(required.len(), 1);
    assert_eq!(required[0].topology_key, "kubernetes.io/hostname");
    let preferred = anti
        .preferred_during_scheduling_ignored_during_execution
        .unwrap();
    assert_eq!(
        preferred[0].pod_affinity_term.topology_key,
        "topology.kubernetes.io/zone"
    );
    let pdb = docs
        .iter()
        .find(|d| d.value["kind"] == "PodDisruptionBudget")
        .unwrap();
    assert_eq!(pdb.value["spec"]["maxUnavailable"], 1);
}

/// Replicas that could go down together are errors: two at once in a rolling update, an
/// anti-affinity that selects other pods, several replicas without one, or no budget.
#[test]
fn availability_of_several_replicas_is_checked() {
    let tmp = copy_deploy();
    edit(
        &tmp,
        "ha/deployment-ha.yaml",
        "maxUnavailable: 1",
        "maxUnavailable: 2",
    );
    assert_one_error(
        &check_copy(&tmp),
        "a rolling update may take 2 of 3 pods down at once",
    );

    let tmp = copy_deploy();
    edit(
        &tmp,
        "ha/deployment-ha.yaml",
        "maxUnavailable: 1",
        "maxUnavailable: 50%",
    );
    assert!(
        check_copy(&tmp).errors.is_empty(),
        "50% of 3 rounds down to 1"
    );

    let tmp = copy_deploy();
    edit(
        &tmp,
        "ha/deployment-ha.yaml",
        "values: [destination]",
        "values: [identity]",
    );
    let report = check_copy(&tmp);
    assert_eq!(report.errors.len(), 1, "{:#?}", report.errors);
    assert!(report.errors[0].contains(
        "a podAntiAffinity term (topologyKey kubernetes.io/hostname) does not select the Deployment's own pods"
    ));

    let tmp = copy_deploy();
    edit(
        &tmp,
        "ha/deployment-ha.yaml",
        "topologyKey: kubernetes.io/hostname",
        "topologyKey: kubernetes.io/arch",
    );
    assert_one_error(
        &check_copy(&tmp),
        "3 replicas without a required podAntiAffinity on kubernetes.io/hostname",
    );

    let tmp = copy_deploy();
    edit(
        &tmp,
        "base/pdb.yaml",
        "maxUnavailable: 1",
        "maxUnavailable: 2",
    );
    assert_one_error(
        &check_copy(&tmp),
        "3 replicas need a PodDisruptionBudget that lets drains evict one pod at a time",
    );
}

#[test]
fn counts_and_percentages() {
    let pct = |s: &str| IntOrString::String(s.to_string());
    assert_eq!(resolve_count(&pct("25%"), 3, false), Some(0));
    assert_eq!(resolve_count(&pct("25%"), 3, true), Some(1));
    assert_eq!(resolve_count(&pct("100%"), 3, false), Some(3));
    assert_eq!(resolve_count(&IntOrString::Int(2), 3, true), Some(2));
    assert_eq!(resolve_count(&pct("half"), 3, true), None);
}
