//! `dst-diag policy inbound WORKLOAD PORT`: the `InboundServerPolicies.WatchPort` stream a
//! proxy opens for each of its inbound ports; `dst-diag policy outbound TARGET`: the
//! `OutboundPolicies.Watch` stream it opens for each destination.

use linkerd2_proxy_api::{
    inbound::{PortSpec, inbound_server_policies_client::InboundServerPoliciesClient},
    outbound::{
        TrafficSpec, outbound_policies_client::OutboundPoliciesClient, traffic_spec::Target,
    },
};
use std::io::{self, Write};

use crate::{
    Error,
    client::{self, MAX_MESSAGE_SIZE},
    output::{self, OutputFormat},
};

/// Where the policy container listens inside the pod (plaintext, behind the mTLS shim).
pub const DEFAULT_POLICY: &str = "http://127.0.0.1:18090";

/// The policy APIs a proxy consumes.
#[derive(Debug, clap::Subcommand)]
pub enum PolicyCommand {
    /// Streams `InboundServerPolicies.WatchPort` for a workload port: the Server (or default
    /// policy) covering it, its protocol, authorizations, routes and rate limit.
    Inbound(InboundArgs),
    /// Streams `OutboundPolicies.Watch` for a Service authority or an address: the protocol,
    /// routes, backends (with the `Destination.Get` path each resolves), timeouts and retries.
    Outbound(OutboundArgs),
}

/// The flags of `dst-diag policy inbound`.
#[derive(Clone, Debug, clap::Args)]
pub struct InboundArgs {
    /// The workload, as a proxy puts it in `PortSpec.workload`: `<namespace>:<pod>`, or JSON
    /// (`{"ns":"emojivoto","pod":"web-djjwbqr6lt-sfd7g"}`,
    /// `{"ns":"edge","external_workload":"payments-vm-01"}`).
    pub workload: String,

    /// The inbound port of the workload.
    pub port: u32,

    /// The policy controller's gRPC service: `http://host:port`, or `host:port`.
    #[arg(long, env = "DST_DIAG_POLICY", default_value = DEFAULT_POLICY)]
    pub policy: String,

    /// `table`: a readable block per update; `json`: one JSON object per update and line.
    #[arg(short, long, value_enum, default_value_t = OutputFormat::Table)]
    pub output: OutputFormat,
}

// === impl PolicyCommand ===

impl PolicyCommand {
    /// Runs the subcommand, printing to `out`; see [`InboundArgs::run`], [`OutboundArgs::run`].
    pub async fn run(&self, out: &mut impl Write) -> Result<(), Error> {
        match self {
            Self::Inbound(args) => args.run(out).await,
            Self::Outbound(args) => args.run(out).await,
        }
    }
}

// === impl InboundArgs ===

impl InboundArgs {
    /// The request a proxy would send for these flags. The workload is sent verbatim: the
    /// server, not this client, decides what is valid.
    pub fn request(&self) -> PortSpec {
        PortSpec {
            workload: self.workload.clone(),
            port: self.port,
        }
    }

    /// What the request asks for, as error messages name it: `emojivoto:web-0 port 8080`.
    fn target(&self) -> String {
        format!("{} port {}", self.workload, self.port)
    }

    /// Streams every `Server` the policy controller sends for the port to `out`, one at a
    /// time and flushed, until the server ends the stream or `out` is closed (both `Ok`).
    ///
    /// Errors: the connection ([`Error::Connect`]), a refused request or a stream ended with an
    /// error status ([`Error::Status`]), or `out` failing otherwise ([`Error::Output`]).
    pub async fn run(&self, out: &mut impl Write) -> Result<(), Error> {
        let channel = client::connect_to("--policy", &self.policy).await?;
        let mut client =
            InboundServerPoliciesClient::new(channel).max_decoding_message_size(MAX_MESSAGE_SIZE);
        let status = |status| Error::Status {
            rpc: "WatchPort",
            target: self.target(),
            status,
        };
        let mut stream = client::response(
            "WatchPort",
            &self.target(),
            client::RESPONSE_TIMEOUT,
            client.watch_port(self.request()),
        )
        .await
        .map_err(|error| self.workload_hint(error))?
        .into_inner();
        while let Some(server) = stream.message().await.map_err(status)? {
            match output::write_inbound_server(out, self.output, &server) {
                Ok(()) => {}
                // A reader such as `head -5` that has seen enough is not a failure.
                Err(error) if error.kind() == io::ErrorKind::BrokenPipe => return Ok(()),
                Err(error) => return Err(Error::Output(error)),
            }
        }
        client::report_stream_end("WatchPort", &self.target());
        Ok(())
    }

    /// The controller's `NotFound: unknown server` (its wording, upstream's) says the
    /// workload is unknown only to who knows the API: say so. A workload written
    /// `NAMESPACE/POD` (as kubectl and `dst-diag explain` take it) is refused as invalid: say
    /// how a proxy writes it, when that form would be valid (`ns/Web` gets no hint: `ns:Web`
    /// is refused too).
    fn workload_hint(&self, error: Error) -> Error {
        match error {
            Error::Status {
                rpc,
                target,
                status,
            } if status.code() == tonic::Code::InvalidArgument
                && !self.workload.contains(':')
                && self.workload.contains('/')
                && policy::workload::parse_workload(&self.workload.replacen('/', ":", 1))
                    .is_ok() =>
            {
                let colon = self.workload.replacen('/', ":", 1);
                Error::Status {
                    rpc,
                    target,
                    status: tonic::Status::invalid_argument(format!(
                        "{} (a proxy names its pod NAMESPACE:POD: try `{colon}`)",
                        status.message(),
                    )),
                }
            }
            Error::Status {
                rpc,
                target,
                status,
            } if status.code() == tonic::Code::NotFound => Error::Status {
                rpc,
                target,
                status: tonic::Status::not_found(format!(
                    "{} (no meshed pod or ExternalWorkload {} is known to the policy controller)",
                    status.message(),
                    self.workload
                )),
            },
            other => other,
        }
    }
}

/// The flags of `dst-diag policy outbound`.
#[derive(Clone, Debug, clap::Args)]
pub struct OutboundArgs {
    /// What a client proxy calls: a Service authority (`web-svc.emojivoto.svc.cluster.local:80`)
    /// or an address (`10.96.34.218:80`).
    pub target: String,

    /// The client's namespace: consumer routes of that namespace apply (spec/policy.md §5.4).
    #[arg(long, default_value = "default")]
    pub source_namespace: String,

    /// The policy controller's gRPC service: `http://host:port`, or `host:port`.
    #[arg(long, env = "DST_DIAG_POLICY", default_value = DEFAULT_POLICY)]
    pub policy: String,

    /// `table`: a readable block per update; `json`: one JSON object per update and line.
    #[arg(short, long, value_enum, default_value_t = OutputFormat::Table)]
    pub output: OutputFormat,
}

// === impl OutboundArgs ===

impl OutboundArgs {
    /// The request a proxy in `--source-namespace` would send: an address target when TARGET
    /// parses as `ip:port`, else an authority (sent verbatim; the server validates it). The
    /// workload is `<namespace>:dst-diag`, of which the server reads only the namespace.
    pub fn request(&self) -> TrafficSpec {
        let target = match self.target.parse::<std::net::SocketAddr>() {
            Ok(addr) => Target::Addr(addr.into()),
            Err(_) => Target::Authority(self.target.clone()),
        };
        TrafficSpec {
            source_workload: format!("{}:dst-diag", self.source_namespace),
            target: Some(target),
        }
    }

    /// Streams every `OutboundPolicy` the controller sends for the target to `out`, until the
    /// server ends the stream or `out` is closed (both `Ok`).
    ///
    /// Errors: the connection ([`Error::Connect`]), a refused request or a stream ended with an
    /// error status ([`Error::Status`]), or `out` failing otherwise ([`Error::Output`]).
    pub async fn run(&self, out: &mut impl Write) -> Result<(), Error> {
        let channel = client::connect_to("--policy", &self.policy).await?;
        let mut client =
            OutboundPoliciesClient::new(channel).max_decoding_message_size(MAX_MESSAGE_SIZE);
        let status = |status| Error::Status {
            rpc: "Watch",
            target: self.target.clone(),
            status,
        };
        let mut stream = client::response(
            "Watch",
            &self.target.clone(),
            client::RESPONSE_TIMEOUT,
            client.watch(self.request()),
        )
        .await
        .map_err(|error| self.target_hint(error))?
        .into_inner();
        while let Some(policy) = stream.message().await.map_err(status)? {
            match output::write_outbound_policy(out, self.output, &policy) {
                Ok(()) => {}
                Err(error) if error.kind() == io::ErrorKind::BrokenPipe => return Ok(()),
                Err(error) => return Err(Error::Output(error)),
            }
        }
        client::report_stream_end("Watch", &self.target);
        Ok(())
    }

    /// A TARGET that is an IP address without a port goes out as an authority, which the
    /// controller refuses as not a Service's: say that a proxy asks for `IP:PORT`.
    fn target_hint(&self, error: Error) -> Error {
        match (error, client::with_example_port(&self.target)) {
            (
                Error::Status {
                    rpc,
                    target,
                    status,
                },
                Some(example),
            ) => Error::Status {
                rpc,
                target,
                status: tonic::Status::new(
                    status.code(),
                    format!(
                        "{} (TARGET is an IP address without a port: a proxy asks for \
                             IP:PORT, such as `{example}`)",
                        status.message()
                    ),
                ),
            },
            (other, _) => other,
        }
    }
}
