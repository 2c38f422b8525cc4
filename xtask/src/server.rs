//! Building the `destination` (or `policy-controller`) binary and running it as a child process.
//!
//! The child never outlives xtask: it is killed when its handle is dropped (error paths,
//! panics), and it asks the kernel for SIGTERM when the thread that started it dies, which is
//! xtask's main thread, so that holds even when xtask is killed with SIGKILL.

use anyhow::{Context, bail};
use std::{
    ffi::OsString,
    io::{BufRead, BufReader},
    net::{SocketAddr, TcpListener},
    path::{Path, PathBuf},
    process::{ExitStatus, Stdio},
    time::{Duration, Instant},
};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
    process::{Child, Command},
};

/// The flags the fixtures assume: the Helm chart's defaults for the destination container.
pub const CHART_FLAGS: &[&str] = &[
    "--controller-namespace=linkerd",
    "--identity-trust-domain=cluster.local",
    "--cluster-domain=cluster.local",
    "--enable-ipv6=false",
    "--enable-h2-upgrade=true",
    "--default-opaque-ports=25,587,3306,4444,5432,6379,9300,11211",
    r#"--meshed-http2-client-params={"keep_alive":{"interval":{"seconds":10},"timeout":{"seconds":3},"while_idle":true}}"#,
];

/// `defaults` followed by `extra`, leaving out each default whose flag `extra` gives too: the
/// binaries refuse a flag given twice, and a user's `--enable-ipv6=true` after `--` is meant
/// to replace the chart's value. A flag's name is what comes before its `=`.
pub fn flags_with_overrides(defaults: &[&str], extra: &[String]) -> Vec<OsString> {
    let name = |flag: &str| {
        flag.split_once('=')
            .map_or(flag, |(name, _)| name)
            .to_string()
    };
    let overridden: Vec<String> = extra
        .iter()
        .filter(|f| f.starts_with("--"))
        .map(|f| name(f))
        .collect();
    defaults
        .iter()
        .filter(|d| !overridden.contains(&name(d)))
        .map(OsString::from)
        .chain(extra.iter().map(OsString::from))
        .collect()
}

/// How often `/ready` is polled while waiting for the server.
const READY_POLL: Duration = Duration::from_millis(100);

/// Where the child's stdout and stderr go.
pub enum Output {
    /// A log file (both streams).
    File(PathBuf),
}

/// The `policy-controller` flags the benchmarks assume: the Helm chart's defaults for the
/// policy container, without the admission webhook (it needs a certificate).
pub const POLICY_CHART_FLAGS: &[&str] = &[
    "--cluster-networks=10.0.0.0/8,100.64.0.0/10,172.16.0.0/12,192.168.0.0/16,fd00::/8",
    "--default-policy=all-unauthenticated",
    "--probe-networks=0.0.0.0/0,::/0",
    "--default-opaque-ports=25,587,3306,4444,5432,6379,9300,11211",
    "--admission-controller-disabled",
];

/// A running server child process (`destination` or `policy-controller`).
pub struct ServerProcess {
    child: Child,
    pid: u32,
    /// The binary's name, for messages.
    name: String,
    /// Its admin address (`/ready`, `/metrics`).
    pub admin_addr: SocketAddr,
    log: Option<PathBuf>,
}

/// Builds the `destination` binary with `cargo build -p destination [--release]` and returns
/// the path of the executable cargo reports.
///
/// Compiler output goes to the terminal; errors when cargo fails or reports no executable.
pub fn build_destination(root: &Path, release: bool) -> anyhow::Result<PathBuf> {
    build_binary(root, "destination", "destination", release)
}

/// Builds binary `bin` of package `package` with `cargo build -p PACKAGE --bin BIN
/// [--release]` and returns the path of the executable cargo reports.
///
/// Compiler output goes to the terminal; errors when cargo fails or reports no executable.
pub fn build_binary(
    root: &Path,
    package: &str,
    bin: &str,
    release: bool,
) -> anyhow::Result<PathBuf> {
    let mut exes = build_binaries(root, &[(package, bin)], release)?;
    Ok(exes.remove(0))
}

/// The cargo that runs xtask (`$CARGO`, else `cargo` on the PATH), and a command for it
/// without the variables `cargo run` set for xtask itself ([`describes_the_running_package`]).
pub fn cargo_command() -> (OsString, std::process::Command) {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| OsString::from("cargo"));
    let mut cmd = std::process::Command::new(&cargo);
    for (name, _) in std::env::vars_os() {
        if name.to_str().is_some_and(describes_the_running_package) {
            cmd.env_remove(name);
        }
    }
    (cargo, cmd)
}

/// Whether `name` is one of the variables `cargo run` sets to describe the package it runs
/// (`CARGO_MANIFEST_DIR`, `CARGO_PKG_NAME`, ...). A cargo started from xtask would pass them
/// on to build scripts, and some fingerprint them (`ring`'s reads `CARGO_MANIFEST_DIR`): each
/// `cargo xtask` build then recompiled those crates and everything above them, and so did the
/// next build from the shell.
fn describes_the_running_package(name: &str) -> bool {
    name.starts_with("CARGO_PKG_")
        || matches!(
            name,
            "CARGO_MANIFEST_DIR"
                | "CARGO_MANIFEST_PATH"
                | "CARGO_CRATE_NAME"
                | "CARGO_BIN_NAME"
                | "CARGO_PRIMARY_PACKAGE"
                | "CARGO_TARGET_TMPDIR"
                | "OUT_DIR"
        )
}

/// Builds every `(package, binary)` of `bins` with one `cargo build -p P... --bin B...
/// [--release]` and returns their executables, in the order of `bins`. One invocation
/// resolves the dependencies' features once, so a dependency shared by the binaries is
/// compiled once rather than once per binary.
///
/// Compiler output goes to the terminal; errors when cargo fails or reports no executable
/// for one of them.
pub fn build_binaries(
    root: &Path,
    bins: &[(&str, &str)],
    release: bool,
) -> anyhow::Result<Vec<PathBuf>> {
    let (cargo, mut cmd) = cargo_command();
    cmd.current_dir(root)
        .args(["build", "--message-format=json-render-diagnostics"])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    for (package, bin) in bins {
        cmd.args(["-p", package, "--bin", bin]);
    }
    if release {
        cmd.arg("--release");
    }
    let names: Vec<&str> = bins.iter().map(|(_, bin)| *bin).collect();
    eprintln!(
        "building {} ({})...",
        names.join(", "),
        if release { "release" } else { "debug" }
    );
    let mut child = cmd
        .spawn()
        .with_context(|| format!("cannot run {}", cargo.to_string_lossy()))?;
    let stdout = child
        .stdout
        .take()
        .context("cargo's stdout was not captured")?;
    let mut executables: Vec<Option<PathBuf>> = vec![None; bins.len()];
    for line in BufReader::new(stdout).lines() {
        let line = line.context("cannot read cargo's output")?;
        let Ok(message) = serde_json::from_str::<serde_json::Value>(&line) else {
            continue;
        };
        let is_a_bin = message["reason"] == "compiler-artifact"
            && message["target"]["kind"]
                .as_array()
                .is_some_and(|k| k.iter().any(|k| k == "bin"));
        let position = names.iter().position(|n| message["target"]["name"] == *n);
        if is_a_bin
            && let Some(position) = position
            && let Some(exe) = message["executable"].as_str()
        {
            executables[position] = Some(PathBuf::from(exe));
        }
    }
    let status = child.wait().context("cannot wait for cargo")?;
    if !status.success() {
        bail!("`cargo build` of {} failed ({status})", names.join(", "));
    }
    executables
        .into_iter()
        .zip(names)
        .map(|(exe, bin)| {
            exe.with_context(|| format!("cargo built {bin} but reported no executable"))
        })
        .collect()
}

/// Errors with a message naming `what` (the listener's role, e.g. "destination's admin port")
/// and `addr` when `addr` cannot be listened on (a port already taken), so that readiness
/// polling never mistakes another server for ours.
pub fn ensure_free(addr: SocketAddr, what: &str) -> anyhow::Result<()> {
    TcpListener::bind(addr).map(drop).with_context(|| {
        format!("{what}, {addr}, cannot be listened on (is the port already in use?)")
    })
}

/// A loopback address with a port that was free a moment ago.
pub fn free_local_addr() -> anyhow::Result<SocketAddr> {
    let listener =
        TcpListener::bind("127.0.0.1:0").context("cannot bind 127.0.0.1:0 to pick a free port")?;
    listener.local_addr().context("cannot read the picked port")
}

/// Reads `VmRSS` of process `pid` from `/proc/PID/status`, in bytes.
pub fn rss_bytes(pid: u32) -> anyhow::Result<u64> {
    Ok(memory(pid)?.rss)
}

/// A process's memory, from `/proc/PID/status`, in bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Memory {
    /// `VmRSS`: resident now.
    pub rss: u64,
    /// `VmHWM`: the most that was ever resident.
    pub peak: u64,
    /// `RssAnon`: resident memory of the process's own (heap, stacks), without the pages of
    /// its executable and libraries, which the first run of a code path pages in once.
    pub anon: u64,
}

/// Reads `VmRSS`, `VmHWM` and `RssAnon` of process `pid`.
pub fn memory(pid: u32) -> anyhow::Result<Memory> {
    let path = format!("/proc/{pid}/status");
    let status = std::fs::read_to_string(&path).with_context(|| format!("cannot read {path}"))?;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map(|kib| kib * 1024)
            .with_context(|| format!("no {name} line in {path}"))
    };
    Ok(Memory {
        rss: field("VmRSS:")?,
        peak: field("VmHWM:")?,
        anon: field("RssAnon:")?,
    })
}

/// CPU time process `pid` uses while `window` passes with nothing asked of it: a server with
/// nothing to do should use none, and anything else is a loop somewhere.
pub async fn cpu_while_idle(pid: u32, window: Duration) -> anyhow::Result<Duration> {
    let start = cpu_time(pid)?;
    tokio::time::sleep(window).await;
    Ok(cpu_time(pid)?.saturating_sub(start))
}

/// CPU time (user + system) process `pid` has used so far, from `/proc/PID/stat`.
pub fn cpu_time(pid: u32) -> anyhow::Result<Duration> {
    let path = format!("/proc/{pid}/stat");
    let stat = std::fs::read_to_string(&path).with_context(|| format!("cannot read {path}"))?;
    // Fields after the command name (which may hold spaces) start at field 3, `state`;
    // utime and stime are fields 14 and 15.
    let after_comm = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest)
        .unwrap_or_default();
    let fields: Vec<&str> = after_comm.split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<u64>().ok());
    let (Some(utime), Some(stime)) = (ticks(11), ticks(12)) else {
        bail!("unexpected format of {path}");
    };
    // SAFETY: sysconf has no preconditions.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    let per_second = u64::try_from(per_second)
        .ok()
        .filter(|t| *t > 0)
        .unwrap_or(100);
    Ok(Duration::from_secs_f64(
        (utime + stime) as f64 / per_second as f64,
    ))
}

// === impl ServerProcess ===

impl ServerProcess {
    /// Starts `exe` in offline mode on `cluster_state`, listening on `addr` and `admin_addr`,
    /// with [`CHART_FLAGS`] followed by `extra`.
    ///
    /// Must be called within a Tokio runtime, on the main thread (in `block_on`, not in a spawned
    /// task): the child's parent-death signal is tied to the calling thread.
    pub fn spawn(
        exe: &Path,
        cluster_state: &Path,
        addr: SocketAddr,
        admin_addr: SocketAddr,
        extra: &[String],
        output: Output,
    ) -> anyhow::Result<Self> {
        let mut args: Vec<OsString> = vec![
            format!("--addr={addr}").into(),
            format!("--admin-addr={admin_addr}").into(),
            "--cluster-state".into(),
            cluster_state.into(),
        ];
        args.extend(flags_with_overrides(CHART_FLAGS, extra));
        Self::spawn_args(exe, &args, admin_addr, output)
    }

    /// Starts `policy-controller` `exe` in offline mode on `cluster_state`, serving gRPC on
    /// `addr` and its admin on `admin_addr`, with [`POLICY_CHART_FLAGS`] followed by `extra`.
    /// The same constraints as [`Self::spawn`] apply.
    pub fn spawn_policy(
        exe: &Path,
        cluster_state: &Path,
        addr: SocketAddr,
        admin_addr: SocketAddr,
        extra: &[String],
        output: Output,
    ) -> anyhow::Result<Self> {
        let mut args: Vec<OsString> = vec![
            format!("--grpc-addr={addr}").into(),
            format!("--admin-addr={admin_addr}").into(),
            "--cluster-state".into(),
            cluster_state.into(),
        ];
        args.extend(POLICY_CHART_FLAGS.iter().map(OsString::from));
        args.extend(extra.iter().map(OsString::from));
        Self::spawn_args(exe, &args, admin_addr, output)
    }

    /// Starts `exe` with exactly `args`; `admin_addr` is where those arguments make it serve
    /// `/ready`. The same constraints as [`Self::spawn`] apply.
    pub fn spawn_args(
        exe: &Path,
        args: &[OsString],
        admin_addr: SocketAddr,
        output: Output,
    ) -> anyhow::Result<Self> {
        Self::spawn_args_env(exe, args, &[], admin_addr, output)
    }

    /// As [`Self::spawn_args`], with `env` (name, value) pairs added to the inherited
    /// environment (e.g. `HOSTNAME`, the policy controller's Lease claimant).
    pub fn spawn_args_env(
        exe: &Path,
        args: &[OsString],
        env: &[(&str, &str)],
        admin_addr: SocketAddr,
        output: Output,
    ) -> anyhow::Result<Self> {
        let name = exe
            .file_name()
            .map_or_else(|| "server".into(), |n| n.to_string_lossy().into_owned());
        let mut cmd = Command::new(exe);
        cmd.args(args)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .kill_on_drop(true);
        let log = match output {
            Output::File(path) => {
                let file = std::fs::File::create(&path)
                    .with_context(|| format!("cannot create {}", path.display()))?;
                let file2 = file
                    .try_clone()
                    .context("cannot duplicate the log file handle")?;
                cmd.stdout(file).stderr(file2);
                Some(path)
            }
        };
        die_with_parent(&mut cmd);
        // A group of its own: a terminal's Ctrl-C reaches xtask alone, which stops the servers
        // in order (`xtask dev` stops the mtls-shim after the controllers).
        cmd.process_group(0);
        let child = cmd
            .spawn()
            .with_context(|| format!("cannot start {}", exe.display()))?;
        let pid = child
            .id()
            .with_context(|| format!("{name} exited as soon as it started"))?;
        Ok(Self {
            child,
            pid,
            name,
            admin_addr,
            log,
        })
    }

    /// The binary's file name, for messages.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The child's process ID.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Waits until `GET /ready` on the admin address answers 200, polling every 100 ms.
    ///
    /// Errors when the child exits first or `timeout` passes; the message says which, with the
    /// last answer seen and the tail of the log file when there is one.
    pub async fn wait_ready(&mut self, timeout: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self
                .child
                .try_wait()
                .with_context(|| format!("cannot check on {}", self.name))?
            {
                bail!(
                    "{} exited before becoming ready ({status}){}",
                    self.name,
                    self.log_tail()
                );
            }
            let last = match http_get_status(self.admin_addr, "/ready").await {
                Ok(200) => return Ok(()),
                Ok(code) => format!("HTTP {code}"),
                Err(error) => error.to_string(),
            };
            if Instant::now() >= deadline {
                bail!(
                    "{} did not become ready within {} s (GET http://{}/ready: {last}){}",
                    self.name,
                    timeout.as_secs(),
                    self.admin_addr,
                    self.log_tail()
                );
            }
            tokio::time::sleep(READY_POLL).await;
        }
    }

    /// Waits for the child to exit.
    pub async fn wait(&mut self) -> anyhow::Result<ExitStatus> {
        self.child
            .wait()
            .await
            .with_context(|| format!("cannot wait for {}", self.name))
    }

    /// Whether the child has exited, and how.
    pub fn try_wait(&mut self) -> anyhow::Result<Option<ExitStatus>> {
        self.child
            .try_wait()
            .with_context(|| format!("cannot check on {}", self.name))
    }

    /// Asks the child to stop with SIGTERM (its graceful shutdown), then kills it if it has not
    /// exited within `grace`.
    pub async fn stop(&mut self, grace: Duration) -> anyhow::Result<ExitStatus> {
        if let Some(status) = self.try_wait()? {
            return Ok(status);
        }
        self.signal(libc::SIGTERM);
        match tokio::time::timeout(grace, self.child.wait()).await {
            Ok(status) => status.with_context(|| format!("cannot wait for {}", self.name)),
            Err(_) => {
                eprintln!(
                    "{} did not stop within {} s; killing it",
                    self.name,
                    grace.as_secs()
                );
                self.child
                    .kill()
                    .await
                    .with_context(|| format!("cannot kill {}", self.name))?;
                self.wait().await
            }
        }
    }

    fn signal(&self, signal: libc::c_int) {
        let Ok(pid) = libc::pid_t::try_from(self.pid) else {
            return;
        };
        // SAFETY: kill(2) has no memory-safety preconditions; the pid is our own unreaped
        // child, so it cannot name another process.
        unsafe {
            libc::kill(pid, signal);
        }
    }

    /// The last lines of the log file, formatted to append to an error message.
    pub fn log_tail(&self) -> String {
        let Some(path) = &self.log else {
            return String::new();
        };
        let Ok(text) = std::fs::read_to_string(path) else {
            return String::new();
        };
        let lines: Vec<&str> = text.lines().collect();
        let tail = lines[lines.len().saturating_sub(20)..].join("\n");
        format!("\n--- last lines of {} ---\n{tail}", path.display())
    }
}

/// Has the kernel send SIGTERM to the child when the thread that spawned it dies, so that the
/// server never outlives xtask, even when xtask is killed with SIGKILL.
fn die_with_parent(cmd: &mut Command) {
    // SAFETY: between fork and exec only async-signal-safe calls are made (prctl, getppid) and
    // nothing is allocated.
    let parent = unsafe { libc::getpid() };
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // The parent may have died before prctl took effect.
            if libc::getppid() != parent {
                return Err(std::io::Error::other(
                    "xtask exited while starting the server",
                ));
            }
            Ok(())
        });
    }
}

/// `GET path` over HTTP/1.0 and returns the response's status code.
async fn http_get_status(addr: SocketAddr, path: &str) -> std::io::Result<u16> {
    http_get(addr, path).await.map(|(code, _)| code)
}

/// `GET path` over HTTP/1.0 (so the server closes the connection after the body) and returns
/// the response's status code and body; errors after 2 s without a complete answer.
pub async fn http_get(addr: SocketAddr, path: &str) -> std::io::Result<(u16, String)> {
    let exchange = async {
        let mut stream = TcpStream::connect(addr).await?;
        stream
            .write_all(format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())
            .await?;
        let mut response = Vec::new();
        stream.read_to_end(&mut response).await?;
        let text = String::from_utf8_lossy(&response).into_owned();
        let head: String = text.chars().take(64).collect();
        let code = head
            .split_whitespace()
            .nth(1)
            .and_then(|code| code.parse::<u16>().ok())
            .ok_or_else(|| std::io::Error::other(format!("not an HTTP response: {head:?}")))?;
        let body = text
            .split_once("\r\n\r\n")
            .map(|(_, body)| body.to_string())
            .unwrap_or_default();
        Ok((code, body))
    };
    tokio::time::timeout(Duration::from_secs(2), exchange)
        .await
        .unwrap_or_else(|_| {
            Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "no answer within 2 s",
            ))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extra_flags_replace_the_chart_defaults_they_name() {
        let extra = vec![
            "--enable-ipv6=true".to_string(),
            "--log-level=debug".to_string(),
        ];
        let flags = flags_with_overrides(&["--enable-ipv6=false", "--cluster-domain=c"], &extra);
        assert_eq!(
            flags,
            [
                "--cluster-domain=c",
                "--enable-ipv6=true",
                "--log-level=debug"
            ]
            .map(OsString::from)
        );
        // A bare boolean flag names itself.
        let flags = flags_with_overrides(&["--enable-ipv6=false"], &["--enable-ipv6".to_string()]);
        assert_eq!(flags, [OsString::from("--enable-ipv6")]);
    }

    #[test]
    fn a_taken_port_is_named_by_its_role_and_address() {
        let taken = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = taken.local_addr().unwrap();
        let error = ensure_free(addr, "destination's admin port").unwrap_err();
        assert_eq!(
            error.to_string(),
            format!(
                "destination's admin port, {addr}, cannot be listened on (is the port already in use?)"
            )
        );
        drop(taken);
        ensure_free(addr, "destination's admin port").unwrap();
    }

    #[test]
    fn cargo_started_from_xtask_does_not_inherit_the_package_variables() {
        // `cargo test` sets these for the test process, as `cargo run` does for xtask.
        assert!(std::env::var_os("CARGO_MANIFEST_DIR").is_some());
        assert!(std::env::var_os("CARGO_PKG_NAME").is_some());
        let (_, cmd) = cargo_command();
        let removed: Vec<String> = cmd
            .get_envs()
            .filter(|(_, value)| value.is_none())
            .map(|(name, _)| name.to_string_lossy().into_owned())
            .collect();
        assert!(
            removed.contains(&"CARGO_MANIFEST_DIR".to_string()),
            "{removed:?}"
        );
        assert!(
            removed.contains(&"CARGO_PKG_NAME".to_string()),
            "{removed:?}"
        );
        // What configures cargo itself is kept.
        assert!(
            removed.iter().all(|n| n != "CARGO_HOME"
                && n != "CARGO_TARGET_DIR"
                && !n.starts_with("CARGO_BUILD_")
                && !n.starts_with("CARGO_PROFILE_")),
            "{removed:?}"
        );
    }
}
