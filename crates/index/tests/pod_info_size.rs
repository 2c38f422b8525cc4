//! Memory regression guard: what the index keeps of a realistic injected pod.
//!
//! `data/injected-pod.json` is the emojivoto `web` pod as `kubectl get pod -o json` prints it
//! after injection (about 14 KB: the proxy and init containers with their env, probes, owner
//! reference, labels, annotations, status). Decoding it keeps a `PodInfo` whose heap footprint
//! this test measures with a counting allocator. The allocator counts the test's own thread.

use k8s_openapi::api::core::v1::Pod;
use linkerd_index::model::{PodInfo, decode_json};

#[global_allocator]
static ALLOCATOR: linkerd_heap_count::CountingAllocator = linkerd_heap_count::CountingAllocator;

/// The bound documented on [`PodInfo`]: measured at 1,676 bytes (inline struct plus heap) for
/// this pod, down from 2,036 with labels in a `BTreeMap`; the guard leaves room for allocator
/// differences, not for new fields kept by accident.
const POD_INFO_BOUND: usize = 1_800;

#[test]
fn decoded_injected_pod_stays_small() {
    let document = include_str!("data/injected-pod.json");

    let before = linkerd_heap_count::thread_live();
    let pod: Box<PodInfo> = Box::new(decode_json::<Pod>(document).expect("the fixture decodes"));
    let retained = usize::try_from(linkerd_heap_count::thread_live() - before).unwrap();

    // The decode kept what discovery and policy read...
    assert_eq!(pod.name, "web-djjwbqr6lt-sfd7g");
    assert_eq!(pod.service_account, "web");
    assert_eq!(
        pod.proxy.as_ref().and_then(|p| p.inbound),
        Some(4143),
        "the proxy's inbound port is read from its env"
    );
    assert!(!pod.probe_paths.is_empty(), "probe paths are kept");
    assert!(
        pod.annotations.keys().all(|k| k.contains("linkerd.io/")),
        "only Linkerd annotations are kept: {:?}",
        pod.annotations.keys()
    );
    // ...in a small fraction of the document.
    assert!(
        retained <= POD_INFO_BOUND,
        "a decoded injected pod holds {retained} bytes (bound {POD_INFO_BOUND}, document {} bytes)",
        document.len()
    );
    println!(
        "PodInfo: {retained} bytes retained of a {} byte document",
        document.len()
    );
}
