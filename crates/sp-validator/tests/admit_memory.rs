//! What judging a review costs in memory stays under `linkerd_admission::decode_cost`, the
//! estimate the webhooks refuse and budget reviews by: a body of small JSON objects decodes
//! into many times its size.

use serde_json::{Value, json};

#[global_allocator]
static ALLOCATOR: linkerd_heap_count::CountingAllocator = linkerd_heap_count::CountingAllocator;

/// A review of a ServiceProfile whose `spec` holds `routes`, padded to about `size` bytes.
fn review_with(routes: Value) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "6a1e2c3d-0000-4000-8000-000000000009",
            "kind": {"group": "linkerd.io", "version": "v1alpha2", "kind": "ServiceProfile"},
            "operation": "CREATE",
            "object": {
                "apiVersion": "linkerd.io/v1alpha2",
                "kind": "ServiceProfile",
                "metadata": {"name": "web.ns.svc.cluster.local", "namespace": "ns"},
                "spec": {"routes": routes},
            },
        },
    }))
    .unwrap()
}

/// The most heap the calling thread holds while judging `body`, beyond what it held before.
fn peak_judging(body: &[u8]) -> isize {
    linkerd_heap_count::marked_peak_during(|| sp_validator::webhook::review(body)).1
}

#[test]
fn judging_a_review_takes_less_than_its_estimated_cost() {
    let small_routes = json!(vec![
        json!({"name": "r", "condition": {"method": "GET"}});
        6000
    ]);
    let long_names = json!(vec![
        json!({"name": "r".repeat(4000), "condition": {"method": "GET"}});
        60
    ]);
    let zeros = json!(vec![0; 120_000]);
    for (shape, routes) in [
        ("small routes", small_routes),
        ("long names", long_names),
        ("numbers", zeros),
    ] {
        let body = review_with(routes);
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

/// A `pathRegex` is compiled within bounds: one of `(a|b)*` repeated 240,000 times (1.4 MiB,
/// an object etcd stores) took the validator to 320 MB; it is denied, holding little.
#[test]
fn a_huge_path_regex_is_denied_without_compiling_it() {
    let pattern = "(a|b)*".repeat(240_000);
    let body = review_with(json!([{"name": "r", "condition": {"pathRegex": pattern}}]));
    let peak = peak_judging(&body);
    assert!(
        (peak as usize) < 8 * body.len(),
        "{peak} bytes held for a {} byte review",
        body.len()
    );
    let answer = sp_validator::webhook::review(&body).unwrap();
    let response = answer.response.unwrap();
    assert!(!response.allowed);
    assert!(
        response
            .result
            .message
            .contains("more than the 8192 allowed"),
        "{}",
        response.result.message
    );
}
