//! The shim refuses to start with a certificate proxies would refuse, naming the file and
//! the identity.

mod support;

use mtls_shim::{Shim, ShimMetrics, StartError};
use support::*;

#[tokio::test]
async fn a_certificate_for_another_identity_stops_the_start() {
    let pki = Pki::new();
    let dir = tempfile::tempdir().unwrap();
    let leaf = pki.leaf("linkerd-destination.other.serviceaccount.identity.other.cluster.local");
    let config = write_config(dir.path(), &pki, &leaf, &[]);
    let err = Shim::bind(&config, ShimMetrics::default())
        .await
        .unwrap_err();
    assert!(matches!(err, StartError::Identity { .. }), "{err}");
    let msg = err.to_string();
    assert!(
        msg.starts_with(&format!(
            "the certificate in {} is not valid for the identity {} under the trust anchors in {}: ",
            match &config.identity {
                mtls_shim::Identity::Files(files) => files.certs.display(),
                mtls_shim::Identity::Certify(_) => unreachable!(),
            },
            shim_identity(),
            config.trust_anchors.display()
        )),
        "{msg}"
    );
    assert!(
        msg.contains("linkerd-destination.other.serviceaccount.identity.other.cluster.local"),
        "{msg}"
    );
}

#[tokio::test]
async fn a_self_signed_certificate_stops_the_start() {
    let pki = Pki::new();
    let dir = tempfile::tempdir().unwrap();
    let leaf = self_signed_leaf(&shim_identity());
    let config = write_config(dir.path(), &pki, &leaf, &[]);
    let err = Shim::bind(&config, ShimMetrics::default())
        .await
        .unwrap_err();
    assert!(matches!(err, StartError::Identity { .. }), "{err}");
    assert!(err.to_string().contains("UnknownIssuer"), "{err}");
}

#[tokio::test]
async fn missing_trust_anchors_stop_the_start() {
    let pki = Pki::new();
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &pki, &pki.leaf(&shim_identity()), &[]);
    std::fs::remove_file(&config.trust_anchors).unwrap();
    let err = Shim::bind(&config, ShimMetrics::default())
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with(&format!("cannot read {}: ", config.trust_anchors.display())),
        "{err}"
    );
}

#[tokio::test]
async fn a_busy_listen_address_stops_the_start() {
    let pki = Pki::new();
    let dir = tempfile::tempdir().unwrap();
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let busy_addr = busy.local_addr().unwrap();
    let mut config = write_config(dir.path(), &pki, &pki.leaf(&shim_identity()), &[]);
    config.forwards = vec![mtls_shim::Forward {
        listen: busy_addr,
        upstream: "127.0.0.1:1".parse().unwrap(),
    }];
    let err = Shim::bind(&config, ShimMetrics::default())
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with(&format!(
            "cannot listen on {busy_addr} (--forward {busy_addr}=127.0.0.1:1): "
        )),
        "{err}"
    );
}
