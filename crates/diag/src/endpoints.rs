//! `dst-diag endpoints AUTHORITY`: the `Destination.Get` stream a proxy opens for an authority.

use linkerd2_proxy_api::destination::{GetDestination, destination_client::DestinationClient};
use std::io::{self, Write};

use crate::{
    Error,
    client::{self, DEFAULT_DESTINATION, MAX_MESSAGE_SIZE},
    output::{self, OutputFormat},
};

/// The scheme proxies put in `GetDestination.scheme`.
const SCHEME: &str = "k8s";

/// The flags of `dst-diag endpoints`.
#[derive(Clone, Debug, clap::Args)]
pub struct EndpointsArgs {
    /// The authority to resolve, as a proxy puts it in `GetDestination.path`
    /// (`web-svc.emojivoto.svc.cluster.local:80`).
    pub authority: String,

    /// The Destination service: `http://host:port`, or `host:port`.
    #[arg(long, env = "DST_DIAG_DESTINATION", default_value = DEFAULT_DESTINATION)]
    pub destination: String,

    /// Sent verbatim as `context_token`, as a proxy would
    /// (`{"ns":"emojivoto","nodeName":"ip-10-20-1-11.eu-west-1.compute.internal"}`).
    #[arg(long, default_value = "")]
    pub context_token: String,

    /// `table`: a readable block per update; `json`: one JSON object per update and line.
    #[arg(short, long, value_enum, default_value_t = OutputFormat::Table)]
    pub output: OutputFormat,
}

// === impl EndpointsArgs ===

impl EndpointsArgs {
    /// The request a proxy would send for these flags.
    pub fn request(&self) -> GetDestination {
        GetDestination {
            scheme: SCHEME.into(),
            path: self.authority.clone(),
            context_token: self.context_token.clone(),
        }
    }

    /// Streams the updates for the authority to `out`, one at a time and flushed, until the
    /// server ends the stream or `out` is closed (both `Ok`).
    ///
    /// Errors: the connection ([`Error::Connect`]), a refused request or a stream ended with an
    /// error status ([`Error::Status`]), or `out` failing otherwise ([`Error::Output`]).
    pub async fn run(&self, out: &mut impl Write) -> Result<(), Error> {
        let channel = client::connect(&self.destination).await?;
        let mut client =
            DestinationClient::new(channel).max_decoding_message_size(MAX_MESSAGE_SIZE);
        let status = |status| Error::Status {
            rpc: "Get",
            target: self.authority.clone(),
            status,
        };
        let mut stream = client::response(
            "Get",
            &self.authority.clone(),
            client::RESPONSE_TIMEOUT,
            client.get(self.request()),
        )
        .await?
        .into_inner();
        while let Some(update) = stream.message().await.map_err(status)? {
            match output::write_update(out, self.output, &update) {
                Ok(()) => {}
                // A reader such as `head -1` that has seen enough is not a failure.
                Err(error) if error.kind() == io::ErrorKind::BrokenPipe => return Ok(()),
                Err(error) => return Err(Error::Output(error)),
            }
        }
        client::report_stream_end("Get", &self.authority);
        Ok(())
    }
}
