//! Helpers for end-to-end tests: find (or build) the workspace's binaries, start them on free
//! loopback ports, wait for their admin `/ready`, and stop them.

use std::{
    io::{Read, Write},
    net::{SocketAddr, TcpListener, TcpStream},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

/// The workspace root.
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// A bundled fixture directory (`tests/fixtures/NAME`).
pub fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures")
        .join(name)
}

/// The path of a workspace binary built in the same profile as this test.
///
/// `cargo test --workspace` has already built it (the binary's own package has integration
/// tests); it is rebuilt here only when missing or older than the workspace's sources, as after
/// `cargo test -p e2e` alone. A nested build resolves features differently and recompiles
/// dependencies, so it is avoided when it can be.
pub fn binary(package: &str, name: &str) -> PathBuf {
    // target/<profile>/deps/<test> -> target/<profile>/<name>
    let exe = std::env::current_exe().expect("current exe");
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("target profile dir")
        .to_path_buf();
    let path = profile_dir.join(name);
    let built = std::fs::metadata(&path).and_then(|m| m.modified()).ok();
    let sources = newest_mtime(&workspace_root().join("crates"));
    if built.is_some_and(|b| sources.is_none_or(|s| b >= s)) {
        return path;
    }
    let status = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args(["build", "--quiet", "-p", package, "--bin", name])
        .current_dir(workspace_root())
        .status()
        .expect("run cargo build");
    assert!(
        status.success(),
        "cargo build -p {package} --bin {name} failed"
    );
    assert!(path.exists(), "{} not built", path.display());
    path
}

fn newest_mtime(dir: &Path) -> Option<std::time::SystemTime> {
    let mut newest = None;
    for entry in std::fs::read_dir(dir).ok()?.flatten() {
        let path = entry.path();
        let mtime = if path.is_dir() {
            newest_mtime(&path)
        } else if path.extension().is_some_and(|e| e == "rs" || e == "toml") {
            entry.metadata().and_then(|m| m.modified()).ok()
        } else {
            None
        };
        newest = newest.max(mtime);
    }
    newest
}

/// A free loopback port, bound then released for a process to bind. It is taken below Linux's
/// ephemeral range (32768–60999): a port the kernel picked there could be given to any
/// outgoing connection (a client of the fake API server) before the process binds it, which
/// made a server exit with "Address already in use". Ports are spread by process ID so that
/// test binaries running at once rarely try the same ones.
pub fn free_addr() -> SocketAddr {
    use std::sync::atomic::{AtomicU32, Ordering};
    const FIRST: u32 = 20_000;
    const COUNT: u32 = 12_000;
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let start = std::process::id().wrapping_mul(7919) % COUNT;
    for _ in 0..COUNT {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = FIRST + (start + n.wrapping_mul(101)) % COUNT;
        if let Ok(listener) = TcpListener::bind(("127.0.0.1", port as u16)) {
            return listener.local_addr().unwrap();
        }
    }
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

/// `GET path` over HTTP/1.0; returns (status code, body), or `None` if nothing answers.
pub fn http_get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_millis(200)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let code = response.split(' ').nth(1)?.parse().ok()?;
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Some((code, body))
}

/// A child process that is killed when dropped.
pub struct Process {
    pub child: Child,
}

impl Process {
    /// Starts `bin` with `args`, stderr captured.
    pub fn start(bin: &Path, args: &[String]) -> Self {
        Self::start_with_env(bin, args, &[])
    }

    /// Starts `bin` with `args` and these environment variables set (and
    /// `LINKERD_CLUSTER_STATE` removed, so that kube mode is not overridden), stderr captured.
    pub fn start_with_env(bin: &Path, args: &[String], env: &[(&str, &str)]) -> Self {
        let child = Command::new(bin)
            .args(args)
            .env_remove("LINKERD_CLUSTER_STATE")
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn");
        Self { child }
    }

    /// Waits until `GET admin/ready` answers 200, failing after `timeout`.
    pub fn wait_ready(&mut self, admin: SocketAddr, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Some((200, _)) = http_get(admin, "/ready") {
                return;
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("process exited before ready: {status}: {}", self.stderr());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        panic!("not ready after {timeout:?}: {}", self.stderr());
    }

    /// Sends SIGTERM without waiting (the test's own runtime must keep driving its clients
    /// while the server shuts down gracefully).
    pub fn send_sigterm(&self) {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        assert!(status.is_ok_and(|s| s.success()), "kill -TERM failed");
    }

    /// Waits up to 10 s for the process to exit and returns its status. Async, so that the
    /// test's gRPC clients keep answering the server's graceful-shutdown PING meanwhile.
    pub async fn wait_exit(&mut self) -> std::process::ExitStatus {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status;
            }
            if Instant::now() >= deadline {
                let _ = self.child.kill();
                panic!("process did not exit: {}", self.stderr());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Everything the process wrote on stderr (after it exited).
    pub fn stderr(&mut self) -> String {
        let mut out = String::new();
        if let Some(mut err) = self.child.stderr.take() {
            let _ = err.read_to_string(&mut out);
        }
        out
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub mod kube_api;

/// The arguments of an upstream chart container in `tests/fixtures/upstream-chart/NAME.args`:
/// one per line, `#` lines skipped.
pub fn chart_args(name: &str) -> Vec<String> {
    let path = fixture("upstream-chart").join(format!("{name}.args"));
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .lines()
        .filter(|line| !line.starts_with('#') && !line.is_empty())
        .map(str::to_string)
        .collect()
}

/// The objects of a YAML fixture file (multi-document), as JSON.
pub fn fixture_objects(path: &Path) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(path).unwrap();
    linkerd_k8s_api::yaml::from_documents::<serde_json::Value>(&text)
        .unwrap()
        .into_iter()
        .filter(|v| !v.is_null())
        .collect()
}

/// A self-signed certificate for `localhost` written as `tls.crt` and `tls.key` into `dir`;
/// returns it (DER) for clients to trust.
pub fn write_localhost_cert(dir: &Path) -> rustls::pki_types::CertificateDer<'static> {
    let rcgen::CertifiedKey { cert, signing_key } =
        rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    std::fs::write(dir.join("tls.crt"), cert.pem()).unwrap();
    std::fs::write(dir.join("tls.key"), signing_key.serialize_pem()).unwrap();
    cert.der().clone()
}

/// `POST /` of a JSON body over HTTPS (HTTP/1.1, TLS 1.3) to a server whose certificate is `ca`
/// for `localhost`, as the API server sends an AdmissionReview; returns (status, body).
pub async fn https_post(
    addr: SocketAddr,
    ca: &rustls::pki_types::CertificateDer<'static>,
    body: &serde_json::Value,
) -> (u16, serde_json::Value) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca.clone()).unwrap();
    let config = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_protocol_versions(&[&rustls::version::TLS13])
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut tls = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config))
        .connect(
            rustls::pki_types::ServerName::try_from("localhost").unwrap(),
            tcp,
        )
        .await
        .unwrap();
    let body = body.to_string();
    let request = format!(
        "POST / HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    tls.write_all(request.as_bytes()).await.unwrap();
    let mut response = Vec::new();
    // A server may close without close_notify once it has answered.
    let _ = tls.read_to_end(&mut response).await;
    let response = String::from_utf8_lossy(&response);
    let (head, body) = response.split_once("\r\n\r\n").expect("an HTTP response");
    let code = head.split(' ').nth(1).unwrap().parse().unwrap();
    let body = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        dechunk(body)
    } else {
        body.to_string()
    };
    (
        code,
        serde_json::from_str(&body).unwrap_or(serde_json::Value::Null),
    )
}

/// The payload of a chunked HTTP/1.1 body.
fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let Ok(size) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if size == 0 || rest.len() < size {
            break;
        }
        out.push_str(&rest[..size]);
        body = rest[size..].trim_start_matches("\r\n");
    }
    out
}
