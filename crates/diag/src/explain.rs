//! `dst-diag explain`: why a proxy would allow or deny a request, and where it would send one.
//!
//! `explain inbound NS/POD PORT` takes the `Server` the proxy of that pod receives for the port
//! (the first `InboundServerPolicies.WatchPort` message) and evaluates a request against it as
//! linkerd2-proxy's inbound policy does: the route that matches (Gateway API precedence,
//! [`matching`]), then the authorizations of that route followed by the server's, then the
//! rate limit ([`inbound`]). `explain outbound TARGET` takes the `OutboundPolicy` a client
//! proxy receives and names the route, backends, timeouts and retries a request gets
//! ([`outbound`]). The policy comes from an index built here over `--cluster-state DIR` or
//! from a running controller at `--policy ADDR` ([`source`]).
//!
//! Exit status: 0 allowed (or routed), 1 denied (or no route), 2 when the question cannot be
//! answered (unknown pod, invalid port or identity, unreachable controller); the reason of a 1
//! or 2 is on standard error.

pub mod inbound;
pub mod matching;
pub mod outbound;
pub mod source;

use std::{io::Write, path::PathBuf};

use crate::Error;

/// The things `explain` answers.
#[derive(Debug, clap::Subcommand)]
pub enum ExplainCommand {
    /// Whether the proxy of a pod would admit a request on one of its ports, and why: the
    /// Server (or default policy), protocol, route, authorization and rate limit.
    Inbound(inbound::InboundArgs),
    /// Where a client proxy would send a request to a Service or address: the route, its
    /// backends with their weights, timeouts and retries.
    Outbound(outbound::OutboundArgs),
}

/// What was decided about the request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Admitted (inbound) or routed (outbound), with what decided it in one line.
    Allowed(String),
    /// Refused, with the reason in one line.
    Denied(String),
}

/// Why `explain` cannot answer (exit status 2). Displayed as one line naming the problem.
#[derive(Debug, thiserror::Error)]
pub enum ExplainError {
    /// A command-line value that is not what it should be.
    #[error("invalid {flag} {value:?}: {reason}")]
    InvalidArgument {
        /// The flag or argument (`--client-identity`, `WORKLOAD`).
        flag: &'static str,
        /// The value as given.
        value: String,
        /// What is wrong with it.
        reason: String,
    },
    /// `--cluster-state` cannot be read.
    #[error("cannot read --cluster-state {}", dir.display())]
    ClusterState {
        /// The directory given.
        dir: PathBuf,
        /// The offline source's error.
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The policy controller (or the offline index) refused the question or could not be
    /// asked: an unknown pod is `NotFound: unknown server`.
    #[error(transparent)]
    Policy(Box<Error>),
    /// The controller (or the offline index) does not know the workload (`NotFound: unknown
    /// server`): no pod or ExternalWorkload of that name, or a pod that is not meshed.
    #[error("no meshed pod or ExternalWorkload {workload} {where_}")]
    UnknownWorkload {
        /// The workload as given (`NS/NAME`).
        workload: String,
        /// Who was asked: `is known to the policy controller` (`--policy`), `is in the
        /// cluster state` (`--cluster-state`).
        where_: &'static str,
        /// The controller's answer.
        source: Box<Error>,
    },
    /// The controller ended the stream before its first message.
    #[error("{rpc} {target}: the server ended the stream before sending a policy")]
    StreamEnded {
        /// `WatchPort` or `Watch`.
        rpc: &'static str,
        /// What was asked for.
        target: String,
    },
    /// Neither `--cluster-state` nor `--policy` (the command line requires one).
    #[error("give --cluster-state DIR or --policy ADDR")]
    NoSource,
    /// The policy received cannot be evaluated: the proxy would reject it too.
    #[error("the policy received is invalid: {0}")]
    InvalidPolicy(String),
}

// === impl ExplainCommand ===

impl ExplainCommand {
    /// Explains, writing to `out`. `Ok` when allowed or routed; [`Error::Denied`] when denied
    /// or unroutable (the explanation is still written); [`Error::Explain`] when the question
    /// cannot be answered (nothing is written).
    pub async fn run(&self, out: &mut impl Write) -> Result<(), Error> {
        let (text, decision) = match self {
            Self::Inbound(args) => args.explain().await?,
            Self::Outbound(args) => args.explain().await?,
        };
        writeln!(out, "{text}")
            .and_then(|()| out.flush())
            .map_err(Error::Output)?;
        match decision {
            Decision::Allowed(_) => Ok(()),
            Decision::Denied(reason) => Err(Error::Denied(reason)),
        }
    }
}

impl From<Error> for ExplainError {
    fn from(error: Error) -> Self {
        Self::Policy(Box::new(error))
    }
}

/// `key:` padded so that the values of a block line up.
pub(crate) fn line(key: &str, value: impl std::fmt::Display) -> String {
    format!("{:<12}{value}", format!("{key}:"))
}

/// A gRPC service (`emojivoto.v1.VotingService`) or method name for `--grpc-service` and
/// `--grpc-method`: each is one segment of the call's path, so it cannot be empty or hold `/`,
/// `?`, `#`, whitespace or control characters.
pub(crate) fn grpc_name(name: &str) -> Result<String, String> {
    if name.is_empty() {
        return Err("expected a name, not an empty string".into());
    }
    // `?` and `#` would end the path: the rest would read as a query or a fragment.
    match name
        .chars()
        .find(|c| matches!(c, '/' | '?' | '#') || c.is_whitespace() || c.is_control())
    {
        Some(c) => Err(format!(
            "{c:?} cannot be in a gRPC name (the call's path is /SERVICE/METHOD)"
        )),
        None => Ok(name.to_string()),
    }
}
