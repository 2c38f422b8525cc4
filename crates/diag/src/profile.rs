//! `dst-diag profile AUTHORITY|IP:PORT`: the `Destination.GetProfile` stream a proxy opens for
//! a destination.

use linkerd2_proxy_api::destination::{GetDestination, destination_client::DestinationClient};
use std::io::{self, Write};

use crate::{
    Error,
    client::{self, DEFAULT_DESTINATION, MAX_MESSAGE_SIZE},
    output::{self, OutputFormat},
};

/// The scheme proxies put in `GetDestination.scheme`.
const SCHEME: &str = "k8s";

/// How long the first profile may take before the run says why it may not come.
const SILENCE_HINT_AFTER: std::time::Duration = std::time::Duration::from_secs(5);

/// The flags of `dst-diag profile`.
#[derive(Clone, Debug, clap::Args)]
pub struct ProfileArgs {
    /// The destination, as a proxy puts it in `GetDestination.path`: a service authority
    /// (`web-svc.emojivoto.svc.cluster.local:80`) or an `IP:PORT` (a cluster IP gets the
    /// service's profile, a pod IP an endpoint profile).
    pub target: String,

    /// The Destination service: `http://host:port`, or `host:port`.
    #[arg(long, env = "DST_DIAG_DESTINATION", default_value = DEFAULT_DESTINATION)]
    pub destination: String,

    /// Sent verbatim as `context_token`, as a proxy would (`{"ns":"emojivoto"}`: the client's
    /// namespace, whose ServiceProfile for the service takes precedence).
    #[arg(long, default_value = "")]
    pub context_token: String,

    /// `table`: a readable block per profile; `json`: one JSON object per profile and line.
    #[arg(short, long, value_enum, default_value_t = OutputFormat::Table)]
    pub output: OutputFormat,
}

// === impl ProfileArgs ===

impl ProfileArgs {
    /// The request a proxy would send for these flags.
    pub fn request(&self) -> GetDestination {
        GetDestination {
            scheme: SCHEME.into(),
            path: self.target.clone(),
            context_token: self.context_token.clone(),
        }
    }

    /// Streams every profile the server sends for the target to `out`, one at a time and
    /// flushed, until the server ends the stream or `out` is closed (both `Ok`).
    ///
    /// Errors: the connection ([`Error::Connect`]), a refused request or a stream ended with an
    /// error status ([`Error::Status`]), or `out` failing otherwise ([`Error::Output`]).
    pub async fn run(&self, out: &mut impl Write) -> Result<(), Error> {
        let channel = client::connect(&self.destination).await?;
        let mut client =
            DestinationClient::new(channel).max_decoding_message_size(MAX_MESSAGE_SIZE);
        let status = |status| Error::Status {
            rpc: "GetProfile",
            target: self.target.clone(),
            status,
        };
        let mut stream = client::response(
            "GetProfile",
            &self.target.clone(),
            client::RESPONSE_TIMEOUT,
            client.get_profile(self.request()),
        )
        .await?
        .into_inner();
        // A server may stay silent on purpose (spec §D.5: no endpoint profile for a pod whose
        // proxy has no inbound listen address): say so once, and keep waiting as a proxy does.
        let first = tokio::select! {
            first = stream.message() => first,
            () = tokio::time::sleep(SILENCE_HINT_AFTER) => {
                eprintln!(
                    "dst-diag: no profile for {} after {}s; still waiting. The destination sends none until it can answer: for a pod IP:PORT, not while the pod's proxy container lacks LINKERD2_PROXY_INBOUND_LISTEN_ADDR (its log says \"not sending an endpoint profile\")",
                    self.target,
                    SILENCE_HINT_AFTER.as_secs()
                );
                stream.message().await
            }
        };
        let mut next = first.map_err(status)?;
        while let Some(profile) = next {
            match output::write_profile(out, self.output, &profile) {
                Ok(()) => {}
                // A reader such as `head -5` that has seen enough is not a failure.
                Err(error) if error.kind() == io::ErrorKind::BrokenPipe => return Ok(()),
                Err(error) => return Err(Error::Output(error)),
            }
            next = stream.message().await.map_err(status)?;
        }
        client::report_stream_end("GetProfile", &self.target);
        Ok(())
    }
}
