//! Every fixture ServiceProfile through the webhook over HTTPS: the valid ones and the emojivoto
//! cluster's are allowed, each invalid one is denied with exactly its message.

mod support;

use serde_json::Value;
use std::path::PathBuf;
use support::*;

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures")
}

/// The comment lines at the top of a fixture, joined with spaces.
fn header(text: &str) -> String {
    text.lines()
        .take_while(|l| l.starts_with('#'))
        .map(|l| l.trim_start_matches('#').trim())
        .collect::<Vec<_>>()
        .join(" ")
}

#[tokio::test]
async fn fixture_profiles() {
    let webhook = mk_webhook().await;
    // file, the exact denial, and what of it the file's header comment says.
    let invalid = [
        (
            "invalid-01-bad-regex.yaml",
            r#"ServiceProfile "books.booksapp.svc.cluster.local" has a route "GET /books/{id}.json" with an invalid pathRegex "/books/([0-9]+\.json" (spec.routes[0].condition.pathRegex): unclosed group"#,
            "unclosed group",
        ),
        (
            "invalid-02-status-min-gt-max.yaml",
            r#"ServiceProfile "webapp.booksapp.svc.cluster.local" has a response class with an invalid condition: Range maximum cannot be smaller than minimum"#,
            r#"ServiceProfile "webapp.booksapp.svc.cluster.local" has a response class with an invalid condition: Range maximum cannot be smaller than minimum"#,
        ),
        (
            "invalid-03-unknown-field.yaml",
            r#"failed to validate ServiceProfile: error unmarshaling JSON: while decoding JSON: json: unknown field "isRetriable" (spec.routes[0].isRetriable)"#,
            r#"failed to validate ServiceProfile: error unmarshaling JSON: while decoding JSON: json: unknown field "isRetriable""#,
        ),
        (
            "invalid-04-missing-condition.yaml",
            r#"ServiceProfile "authors.booksapp.svc.cluster.local" has a route with no condition"#,
            r#"ServiceProfile "authors.booksapp.svc.cluster.local" has a route with no condition"#,
        ),
        (
            "invalid-05-negative-retry-ratio.yaml",
            r#"ServiceProfile "books.booksapp.svc.cluster.local" RetryBudget RetryRatio must be non-negative: -0.500000"#,
            r#"ServiceProfile "books.booksapp.svc.cluster.local" RetryBudget RetryRatio must be non-negative: -0.500000"#,
        ),
        (
            "invalid-06-malformed-timeout.yaml",
            r#"ServiceProfile "webapp.booksapp.svc.cluster.local" has a route with an invalid timeout: time: missing unit in duration "250""#,
            r#"ServiceProfile "webapp.booksapp.svc.cluster.local" has a route with an invalid timeout: time: missing unit in duration "250""#,
        ),
    ];

    let mut files = std::fs::read_dir(fixtures().join("profiles"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect::<Vec<_>>();
    files.sort();
    let (mut allowed, mut denied) = (0, 0);
    for path in files {
        let file = path.file_name().unwrap().to_str().unwrap().to_string();
        let text = std::fs::read_to_string(&path).unwrap();
        let response = webhook.admit(&text).await;
        if file.starts_with("valid-") {
            assert_allowed(&response, &file);
            allowed += 1;
        } else {
            let (_, message, said) = invalid
                .iter()
                .find(|(name, ..)| *name == file)
                .unwrap_or_else(|| panic!("no expected denial for {file}"));
            assert!(header(&text).contains(said), "{file} header: {said}");
            assert_denied(&response, message, &file);
            denied += 1;
        }
    }
    assert_eq!((allowed, denied), (6, 6));
}

#[tokio::test]
async fn emojivoto_profiles_are_allowed() {
    let webhook = mk_webhook().await;
    let text = std::fs::read_to_string(fixtures().join("emojivoto/cluster.yaml")).unwrap();
    let mut names = Vec::new();
    let documents: Vec<Value> = linkerd_k8s_api::yaml::from_documents(&text).unwrap();
    for object in documents {
        if object["kind"] != "ServiceProfile" {
            continue;
        }
        let name = object["metadata"]["name"].as_str().unwrap().to_string();
        // As the API server sends it: managedFields, uid and the rest of the metadata included.
        let response = webhook.admit_object(object).await;
        assert_allowed(&response, &name);
        names.push(name);
    }
    names.sort();
    assert_eq!(
        names,
        [
            "emoji-svc.emojivoto.svc.cluster.local",
            "voting-svc.emojivoto.svc.cluster.local",
            "web-svc.emojivoto.svc.cluster.local",
        ]
    );
}
