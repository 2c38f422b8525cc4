//! What judging a review costs in memory stays under `linkerd_admission::decode_cost`, the
//! estimate the webhook refuses and budgets reviews by: a body of small JSON objects decodes
//! into many times its size.

use policy::admission;
use serde_json::{Value, json};

#[global_allocator]
static ALLOCATOR: linkerd_heap_count::CountingAllocator = linkerd_heap_count::CountingAllocator;

fn review_of(object: Value) -> Vec<u8> {
    let kind = object["kind"].as_str().unwrap().to_string();
    let (group, version) = object["apiVersion"]
        .as_str()
        .unwrap()
        .split_once('/')
        .unwrap();
    serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "6a1e2c3d-0000-4000-8000-00000000000a",
            "kind": {"group": group, "version": version, "kind": kind},
            "operation": "CREATE",
            "object": object,
        },
    }))
    .unwrap()
}

/// The most heap the calling thread holds while judging `body`, beyond what it held before.
fn peak_judging(body: &[u8]) -> isize {
    linkerd_heap_count::marked_peak_during(|| admission::review(body)).1
}

#[test]
fn judging_a_review_takes_less_than_its_estimated_cost() {
    let rule = json!({"matches": [{"path": {"type": "PathPrefix", "value": "/a"}}]});
    let route = json!({
        "apiVersion": "policy.linkerd.io/v1beta3",
        "kind": "HTTPRoute",
        "metadata": {"name": "r", "namespace": "ns"},
        "spec": {
            "parentRefs": [{"group": "policy.linkerd.io", "kind": "Server", "name": "web"}],
            "rules": vec![rule; 3000],
        },
    });
    let server = |extra: Value| {
        json!({
            "apiVersion": "policy.linkerd.io/v1beta3",
            "kind": "Server",
            "metadata": {"name": "web", "namespace": "ns", "annotations": {"a": "x".repeat(200_000)}},
            "spec": {"podSelector": {}, "port": 80, "x": extra},
        })
    };
    for (shape, object) in [
        ("small objects", route),
        ("numbers", server(json!(vec![0; 120_000]))),
        (
            "objects in an unknown field",
            server(json!(vec![json!({"a": 1}); 12_000])),
        ),
    ] {
        let body = review_of(object);
        let cost = linkerd_admission::decode_cost(&body);
        let peak = peak_judging(&body);
        eprintln!("{shape}: {} bytes, cost {cost}, peak {peak}", body.len());
        assert!(
            peak as usize <= cost,
            "{shape}: {peak} bytes held, estimated {cost}"
        );
        assert!(cost <= linkerd_admission::MAX_DECODED_BYTES);
    }
}
