//! A state file that cannot be read for a moment (the process is out of file descriptors) is
//! read again once it can be, though no new change to it is notified.
//!
//! Alone in its test binary: it lowers the process's file-descriptor limit.

use k8s_openapi::api::core::v1::Service;
use linkerd_index::{
    ClusterSource, Event, IndexMetrics, Watches, model::ServiceInfo, source::offline::OfflineSource,
};
use std::sync::Arc;
use std::{fs::File, io::Write, time::Duration};

fn service(port: u16) -> String {
    format!(
        "apiVersion: v1\nkind: Service\nmetadata:\n  name: a\n  namespace: ns\nspec:\n  ports:\n  - port: {port}\n"
    )
}

/// Lowers this process's soft limit of open files to `limit`.
fn limit_open_files(limit: libc::rlim_t) {
    let mut rlimit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `rlimit` is valid for reads and writes of its size.
    assert_eq!(
        unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut rlimit) },
        0
    );
    rlimit.rlim_cur = limit.min(rlimit.rlim_max);
    // SAFETY: as above.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &rlimit) }, 0);
}

#[tokio::test]
async fn a_file_that_could_not_be_read_is_read_again() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.yaml");
    std::fs::write(&path, service(80)).unwrap();
    let (tx, mut services) = tokio::sync::mpsc::unbounded_channel::<Event<Arc<ServiceInfo>>>();
    let mut watches = Watches::new(IndexMetrics::default());
    watches.add::<Service>(tx);
    let source = OfflineSource::new(dir.path(), IndexMetrics::default()).unwrap();
    let _started = watches.start(&ClusterSource::Offline(source)).await;
    let first = tokio::time::timeout(Duration::from_secs(5), services.recv()).await;
    assert!(matches!(first, Ok(Some(Event::Reset(s))) if s.len() == 1));

    // Open the file for the edit first, then take every descriptor left.
    let mut edit = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    limit_open_files(256);
    let mut held = Vec::new();
    while let Ok(file) = File::open("/dev/null") {
        held.push(file);
    }
    // Same length, so the file is never seen empty or short.
    edit.write_all(service(81).as_bytes()).unwrap();
    // The source is notified, and fails to open the file.
    tokio::time::sleep(Duration::from_millis(300)).await;
    drop(held);

    match tokio::time::timeout(Duration::from_secs(5), services.recv()).await {
        Ok(Some(Event::Apply(svc))) => {
            assert_eq!(svc.ports[0].port, 81);
        }
        other => panic!("expected the edit to be applied, got {other:?}"),
    }
}
