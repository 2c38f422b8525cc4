//! `dst-diag`: a client of the Destination service and the policy controller that streams what a
//! Linkerd proxy would receive and prints it, as readable blocks or as newline-delimited JSON.
//!
//! Each subcommand is a module ([`endpoints`], [`profile`], [`policy`]); [`client`] connects to
//! the server and [`output`] renders the proxy API's messages, so that rendering is tested
//! without a network. `main.rs` only parses the command line, handles Ctrl-C and turns an
//! [`Error`] into a one-line message and its exit code ([`Error::exit_code`]: 1, 2 when
//! [`explain`] cannot answer, 3 when `proxy-status` could reach only one server).

#![deny(rust_2018_idioms, missing_docs)]
#![forbid(unsafe_code)]

pub mod client;
pub mod endpoints;
pub mod explain;
pub mod output;
pub mod policy;
pub mod profile;
pub mod streams;

pub use self::output::OutputFormat;

/// The command line of `dst-diag`.
#[derive(Debug, clap::Parser)]
#[command(name = "dst-diag", version, about)]
pub struct Args {
    /// What to stream.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands: one per API a proxy consumes.
#[derive(Debug, clap::Subcommand)]
#[allow(
    clippy::large_enum_variant,
    reason = "one value per run; `explain` carries the controller's offline flags"
)]
pub enum Command {
    /// Streams `Destination.Get` for an authority: the endpoints a proxy would balance over.
    Endpoints(endpoints::EndpointsArgs),
    /// Streams `Destination.GetProfile` for an authority or `IP:PORT`: the service profile
    /// (routes, retries, timeouts) or endpoint profile a proxy would apply.
    Profile(profile::ProfileArgs),
    /// Streams what the policy controller tells a proxy: `policy inbound WORKLOAD PORT`
    /// (`InboundServerPolicies.WatchPort`) or `policy outbound AUTHORITY|IP:PORT`
    /// (`OutboundPolicies.Watch`).
    #[command(subcommand)]
    Policy(policy::PolicyCommand),
    /// Explains a policy decision: `explain inbound NS/POD PORT` (would the pod's proxy admit
    /// this request, and why) or `explain outbound AUTHORITY|IP:PORT` (which route, backends,
    /// timeouts and retries a request gets). Exit status 0 allowed, 1 denied, 2 no answer.
    #[command(subcommand)]
    Explain(explain::ExplainCommand),
    /// Lists the watch streams a server holds open, from its introspection API: API, client
    /// pod, target, peer, messages sent, and whether each is behind (has not written out the newest view of what it follows).
    Streams(streams::StreamsArgs),
    /// Shows one open stream and what it last sent (for `Get`, the whole set its proxy holds).
    Stream(streams::StreamArgs),
    /// Shows every stream one pod's proxy holds on destination and policy-controller, and
    /// whether each is in sync with the current view. Exit status 3 when one of the two servers
    /// could not be reached (its streams are left out).
    ProxyStatus(streams::ProxyStatusArgs),
}

/// Why a run stopped other than by the server ending its stream. The `Display` of each
/// variant is one line naming the problem; the underlying cause, if any, is its `source`.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// `--destination` (or `--policy`) is not a usable `http://host:port` address.
    #[error("invalid {flag} {addr:?}: {reason}")]
    InvalidDestination {
        /// The flag that gave the address: `--destination`, `--policy`.
        flag: &'static str,
        /// The flag's value, as given.
        addr: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The connection to the server could not be made.
    #[error("connect to {addr}")]
    Connect {
        /// The server's URI.
        addr: String,
        /// The transport's error.
        source: tonic::transport::Error,
    },
    /// The server refused the request or ended the stream with an error status. A `Get` or
    /// `GetProfile` name refused for being invalid while it holds upper-case letters gets the
    /// lower-case name as a hint: destination compares names as written, as upstream's does,
    /// and Kubernetes names are lower case.
    #[error(
        "{rpc} {}: {}{}",
        echo(target),
        status_line(status),
        case_hint(rpc, target, status)
    )]
    Status {
        /// The RPC (`Get`, `GetProfile`, `WatchPort`).
        rpc: &'static str,
        /// What was asked for (the authority, `IP:PORT`, or `WORKLOAD port PORT`).
        target: String,
        /// The status, rendered as `Code: message`.
        status: tonic::Status,
    },
    /// The server accepted the connection but did not answer the request in time: not a gRPC
    /// server, or a plaintext client on a TLS-only port that does not close the connection.
    #[error(
        "{rpc} {}: no response in {}s: is the address a plaintext gRPC port of the right server?",
        echo(target),
        after.as_secs_f32()
    )]
    NoResponse {
        /// The RPC (`Get`, `GetProfile`, `WatchPort`, `Watch`).
        rpc: &'static str,
        /// What was asked for.
        target: String,
        /// How long the answer was waited for.
        after: std::time::Duration,
    },
    /// Standard output could not be written (other than a closed pipe, which ends the run).
    #[error("write output")]
    Output(#[source] std::io::Error),
    /// `explain` decided that the request is denied (or has no route); the reason.
    #[error("denied: {0}")]
    Denied(String),
    /// `explain` cannot answer the question.
    #[error(transparent)]
    Explain(#[from] explain::ExplainError),
    /// The arguments cannot give an answer (`proxy-status` with no server to ask, or one server
    /// named for both): what to give instead.
    #[error("{0}")]
    Usage(String),
    /// `proxy-status` could reach neither server: why, for each.
    #[error(
        "neither server could be reached: destination: {}; policy: {}",
        error_line(destination),
        error_line(policy)
    )]
    NoServer {
        /// Why destination's introspection API could not be reached.
        destination: Box<Error>,
        /// Why policy-controller's could not.
        policy: Box<Error>,
    },
    /// `proxy-status` printed the streams of the servers that answered, but `server` could
    /// not be reached: its streams are missing from the output.
    #[error("{server}'s streams are left out")]
    LeftOut {
        /// `destination` or `policy`.
        server: &'static str,
        /// Why it could not be reached.
        source: Box<Error>,
    },
}

// === impl Args ===

impl Args {
    /// Runs the subcommand, printing to standard output, until the server ends the stream
    /// (`Ok`), standard output is closed (`Ok`), or an error.
    pub async fn run(self) -> Result<(), Error> {
        let mut stdout = std::io::stdout();
        match self.command {
            Command::Endpoints(args) => args.run(&mut stdout).await,
            Command::Profile(args) => args.run(&mut stdout).await,
            Command::Policy(command) => command.run(&mut stdout).await,
            Command::Explain(command) => command.run(&mut stdout).await,
            Command::Streams(args) => args.run(&mut stdout).await,
            Command::Stream(args) => args.run(&mut stdout).await,
            Command::ProxyStatus(args) => args.run(&mut stdout).await,
        }
    }
}

// === impl Error ===

impl Error {
    /// The process's exit status for this error: 2 when `explain` cannot answer or the
    /// arguments cannot give an answer (a server address that cannot be used, as clap's usage
    /// errors), 3 when `proxy-status` printed only some servers' streams, else 1 (for
    /// `explain`, a denial).
    pub fn exit_code(&self) -> u8 {
        match self {
            Self::Explain(_) | Self::Usage(_) | Self::InvalidDestination { .. } => 2,
            Self::LeftOut { .. } => 3,
            _ => 1,
        }
    }
}

/// `error: cause: cause ...` on one line, leaving out a cause that only repeats the text before it
/// (tonic's transport errors wrap `tcp connect error` in `tcp connect error`). Control
/// characters (a target's, a server's message quoting it) are shown escaped, as the tables
/// show them.
pub fn error_line(error: &dyn std::error::Error) -> String {
    let mut line = error.to_string();
    let mut last = line.clone();
    let mut source = error.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        // Skip a cause its error already quotes (`reading DIR: No such file (os error 2)`
        // over the io::Error itself).
        if text != last && !last.ends_with(&text) {
            line.push_str(": ");
            line.push_str(&text);
        }
        last = text;
        source = cause.source();
    }
    linkerd_runtime::log::escape_controls_owned(line)
}

/// What an error line repeats of a target: its first 256 bytes (at a character boundary) and
/// `...` when longer, as the servers' own messages cut what they echo; the whole target is
/// what the user typed.
fn echo(target: &str) -> std::borrow::Cow<'_, str> {
    const MAX_ECHO: usize = 256;
    if target.len() <= MAX_ECHO {
        return target.into();
    }
    format!("{}...", &target[..target.floor_char_boundary(MAX_ECHO)]).into()
}

/// ` (Kubernetes names are lower case: did you mean NAME?)` when the server refused a `Get` or
/// `GetProfile` name with upper-case letters as invalid (not an IP address, whose case does not
/// matter), else nothing.
fn case_hint(rpc: &str, target: &str, status: &tonic::Status) -> String {
    let host = target
        .rsplit_once(':')
        .map_or(target, |(host, _)| host)
        .trim_start_matches('[')
        .trim_end_matches(']');
    let an_ip = |s: &str| s.parse::<std::net::IpAddr>().is_ok();
    if !matches!(rpc, "Get" | "GetProfile")
        || status.code() != tonic::Code::InvalidArgument
        || !target.bytes().any(|b| b.is_ascii_uppercase())
        || an_ip(host)
        || an_ip(target)
    {
        return String::new();
    }
    format!(
        " (Kubernetes names are lower case: did you mean {}?)",
        echo(&target.to_ascii_lowercase())
    )
}

/// `InvalidArgument: Invalid authority: ...`, or only the code when there is no message, then
/// the status's causes. An answer that is not gRPC at all (an admin or webhook port given as
/// the server) or a connection a TLS-only port dropped (the mtls-shim's) gets a hint.
fn status_line(status: &tonic::Status) -> String {
    let mut line = if status.message().is_empty() {
        format!("{:?}", status.code())
    } else {
        format!("{:?}: {}", status.code(), status.message())
    };
    // tonic's message for a dropped connection is only "operation was canceled"; the cause
    // (hyper's, h2's) says what happened.
    let mut causes = String::new();
    let mut source = std::error::Error::source(status);
    while let Some(cause) = source {
        let text = cause.to_string();
        if !line.contains(&text) && !causes.contains(&text) {
            causes.push_str(": ");
            causes.push_str(&text);
        }
        source = cause.source();
    }
    line.push_str(&causes);
    let message = status.message();
    // A TLS server (the mtls-shim) answers a plaintext HTTP/2 preface with a TLS alert, which
    // h2 reads as a frame of the wrong size, or just drops the connection.
    let tls_only = [
        "frame with invalid size",
        "operation was canceled",
        "broken pipe",
        "connection reset",
        "connection closed",
    ]
    .iter()
    .any(|sign| line.contains(sign));
    let not_grpc = message.contains("grpc-status header missing")
        || message.contains("protocol error")
        || message.contains("content-type");
    if tls_only {
        line.push_str(
            " (the server dropped the connection or did not speak plaintext HTTP/2: if the \
             address is the mtls-shim's port, 8086 or 8090, it takes mTLS only; the in-pod \
             plaintext gRPC ports are 18086 (destination) and 18090 (policy-controller))",
        );
    } else if not_grpc {
        line.push_str(
            " (the server did not answer in gRPC: is the address a gRPC port of destination or \
             policy-controller, rather than an admin or webhook port?)",
        );
    } else if status.code() == tonic::Code::Unimplemented {
        // A gRPC server without this service (an HTTP 404 is mapped to Unimplemented too,
        // hence after the check above).
        line.push_str(
            " (the server does not serve this RPC: Get and GetProfile are destination's, \
             WatchPort and Watch are policy-controller's, ListStreams and GetStream are the \
             introspection API's, on 127.0.0.1:9986 (destination) and 127.0.0.1:9980 \
             (policy-controller); is the address another server's port?)",
        );
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Found by a newcomer: a newline in the target (and in the server's message quoting it)
    /// split the error over two lines.
    #[test]
    fn an_error_line_is_one_line() {
        let error = Error::Status {
            rpc: "Get",
            target: "web-svc.emojivoto.svc.cluster.local:80\n".into(),
            status: tonic::Status::invalid_argument(
                "Invalid authority: web-svc.emojivoto.svc.cluster.local:80\n\u{1b}[31m",
            ),
        };
        assert_eq!(
            error_line(&error),
            "Get web-svc.emojivoto.svc.cluster.local:80\\n: InvalidArgument: Invalid authority: \
             web-svc.emojivoto.svc.cluster.local:80\\n\\u{1b}[31m"
        );
    }

    /// Found by a newcomer: a 10,000-character name was repeated whole in the error line.
    #[test]
    fn an_error_line_repeats_at_most_256_bytes_of_the_target() {
        let target = format!("{}.emojivoto.svc.cluster.local:80", "a".repeat(10_000));
        let error = Error::Status {
            rpc: "Get",
            target,
            status: tonic::Status::invalid_argument("name longer than DNS allows"),
        };
        let line = error.to_string();
        assert_eq!(
            line,
            format!(
                "Get {}...: InvalidArgument: name longer than DNS allows",
                "a".repeat(256)
            )
        );
        // Cut at a character boundary.
        assert_eq!(echo(&"é".repeat(200)), format!("{}...", "é".repeat(128)));
        assert_eq!(echo("web-svc:80"), "web-svc:80");
    }

    /// Only a refused name with upper-case letters gets the lower-case one as a hint; an IP
    /// address's case does not matter, and policy's targets are not names.
    #[test]
    fn only_a_refused_upper_case_name_gets_a_case_hint() {
        let invalid = tonic::Status::invalid_argument("invalid service");
        assert_eq!(
            case_hint("GetProfile", "Web.NS.svc.cluster.local:80", &invalid),
            " (Kubernetes names are lower case: did you mean web.ns.svc.cluster.local:80?)"
        );
        for (rpc, target) in [
            ("Get", "web.ns.svc.cluster.local:80"),
            ("Get", "[FD00::A]:80"),
            ("Get", "FD00::A"),
            ("WatchPort", "Web port 80"),
        ] {
            assert_eq!(case_hint(rpc, target, &invalid), "", "{rpc} {target}");
        }
        let unavailable = tonic::Status::unavailable("down");
        assert_eq!(
            case_hint("Get", "WEB.NS.svc.cluster.local:80", &unavailable),
            ""
        );
    }
}
