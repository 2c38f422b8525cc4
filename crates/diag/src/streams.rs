//! `dst-diag streams`, `dst-diag stream ID` and `dst-diag proxy-status NS/POD`: what the
//! watch streams a server holds open were sent, read from its introspection API
//! (`proto/introspection.proto`), served on loopback: destination `127.0.0.1:9986`,
//! policy-controller `127.0.0.1:9980` (reach them with `kubectl port-forward`).

use linkerd_introspection_api::{
    GetStreamRequest, ListStreamsRequest, SentMessage, StreamInfo,
    introspection_client::IntrospectionClient,
};
use linkerd2_proxy_api::{
    destination::{DestinationProfile, Update},
    inbound::Server,
    outbound::OutboundPolicy,
};
use prost::Message;
use serde_json::{Value, json};
use std::{
    io::{self, Write},
    time::{SystemTime, UNIX_EPOCH},
};
use tonic::transport::Channel;

use crate::{
    Error,
    client::{self, MAX_MESSAGE_SIZE},
    output::{self, OutputFormat, Table},
};

/// Where `destination` serves its introspection API inside the pod.
pub const DEFAULT_DESTINATION_INTROSPECTION: &str = "http://127.0.0.1:9986";
/// Where `policy-controller` serves its introspection API inside the pod.
pub const DEFAULT_POLICY_INTROSPECTION: &str = "http://127.0.0.1:9980";

/// The flags of `dst-diag streams`.
#[derive(Clone, Debug, clap::Args)]
pub struct StreamsArgs {
    /// Only streams of this API: `Get`, `GetProfile` (destination), `WatchPort`, `Watch`
    /// (policy-controller), in any case (`getprofile`), also qualified by their service
    /// (`Destination.Get`, `OutboundPolicies.Watch`) or as gRPC paths
    /// (`io.linkerd.proxy.destination.Destination/Get`).
    #[arg(long, value_parser = api_argument)]
    pub api: Option<String>,

    /// Only streams of this client pod (`namespace/name`, or `namespace:name` as a proxy
    /// writes its workload), as its context token or workload names it.
    #[arg(long, value_parser = pod_argument)]
    pub pod: Option<String>,

    /// Only streams whose TCP peer has this IP address.
    #[arg(long)]
    pub peer: Option<String>,

    /// Only streams whose target contains this text.
    #[arg(long)]
    pub target: Option<String>,

    /// Only streams behind: they have not written out the newest view of what they follow
    /// (their topic; a multicluster `Get`'s Service, members and linked clusters).
    #[arg(long)]
    pub behind: bool,

    /// The introspection API: `http://host:port` or `host:port` (destination's by default;
    /// policy-controller's is `127.0.0.1:9980`).
    #[arg(long, env = "DST_DIAG_INTROSPECTION", default_value = DEFAULT_DESTINATION_INTROSPECTION)]
    pub introspection: String,

    /// `table`: one row per stream; `json`: one JSON object per stream and line.
    #[arg(short, long, value_enum, default_value_t = OutputFormat::Table)]
    pub output: OutputFormat,
}

/// The flags of `dst-diag stream`.
#[derive(Clone, Debug, clap::Args)]
pub struct StreamArgs {
    /// The stream's ID, as `dst-diag streams` lists it.
    pub id: u64,

    /// The introspection API: `http://host:port` or `host:port`.
    #[arg(long, env = "DST_DIAG_INTROSPECTION", default_value = DEFAULT_DESTINATION_INTROSPECTION)]
    pub introspection: String,

    /// `table`: the stream, then what it last sent as `dst-diag` prints that API's messages;
    /// `json`: one JSON object with both.
    #[arg(short, long, value_enum, default_value_t = OutputFormat::Table)]
    pub output: OutputFormat,
}

/// The flags of `dst-diag proxy-status`.
#[derive(Clone, Debug, clap::Args)]
pub struct ProxyStatusArgs {
    /// The pod whose proxy to show, `namespace/name` (or `namespace:name`, the form
    /// `dst-diag policy inbound` takes).
    #[arg(value_parser = pod_argument)]
    pub pod: String,

    /// destination's introspection API; empty to leave destination out.
    #[arg(long, default_value = DEFAULT_DESTINATION_INTROSPECTION)]
    pub destination_introspection: String,

    /// policy-controller's introspection API; empty to leave the policy controller out.
    #[arg(long, default_value = DEFAULT_POLICY_INTROSPECTION)]
    pub policy_introspection: String,

    /// `table`: one row per stream; `json`: one JSON object per stream and line.
    #[arg(short, long, value_enum, default_value_t = OutputFormat::Table)]
    pub output: OutputFormat,
}

/// Connects to an introspection API given as `--introspection` (or another `flag`).
async fn connect(flag: &'static str, addr: &str) -> Result<IntrospectionClient<Channel>, Error> {
    let channel = client::connect_to(flag, addr).await?;
    Ok(IntrospectionClient::new(channel).max_decoding_message_size(MAX_MESSAGE_SIZE))
}

/// The open streams that match `request`. Errors: the connection, or a refused request
/// ([`Error::Status`] with the server's message, e.g. a pod not written `namespace/name`).
async fn list(
    flag: &'static str,
    addr: &str,
    request: ListStreamsRequest,
) -> Result<Vec<StreamInfo>, Error> {
    let mut api = connect(flag, addr).await?;
    let target = addr.to_string();
    let response = client::response(
        "ListStreams",
        &target,
        client::RESPONSE_TIMEOUT,
        api.list_streams(request),
    )
    .await?;
    Ok(response.into_inner().streams)
}

/// Writes `text` and a newline; a closed pipe is not an error.
fn emit(out: &mut impl Write, text: &str) -> Result<bool, Error> {
    match writeln!(out, "{text}").and_then(|()| out.flush()) {
        Ok(()) => Ok(true),
        Err(error) if error.kind() == io::ErrorKind::BrokenPipe => Ok(false),
        Err(error) => Err(Error::Output(error)),
    }
}

// === impl StreamsArgs ===

impl StreamsArgs {
    /// The request these flags make; the server checks the filters.
    pub fn request(&self) -> ListStreamsRequest {
        ListStreamsRequest {
            api: self.api.clone().unwrap_or_default(),
            pod: self.pod.clone().unwrap_or_default(),
            peer_ip: self.peer.clone().unwrap_or_default(),
            target_contains: self.target.clone().unwrap_or_default(),
            behind_only: self.behind,
        }
    }

    /// Prints the open streams that match, oldest first.
    ///
    /// Errors: the connection ([`Error::Connect`]), a refused filter ([`Error::Status`]), or
    /// `out` failing otherwise ([`Error::Output`]).
    pub async fn run(&self, out: &mut impl Write) -> Result<(), Error> {
        let streams = match list("--introspection", &self.introspection, self.request()).await {
            // The other container's API: say where that one is.
            Err(Error::Status { status, .. })
                if status.code() == tonic::Code::FailedPrecondition
                    && let Some(hint) = self.api.as_deref().and_then(served_by) =>
            {
                return Err(Error::Usage(format!("{}; {hint}", status.message())));
            }
            listed => listed?,
        };
        let now = SystemTime::now();
        match self.output {
            OutputFormat::Json => {
                for stream in &streams {
                    if !emit(out, &stream_json(stream).to_string())? {
                        return Ok(());
                    }
                }
            }
            OutputFormat::Table => {
                emit(out, &streams_table(&streams, now).render())?;
            }
        }
        Ok(())
    }
}

/// Where the streams of `api` are, for a server that refused to list them as another's: the
/// API of the other container is a common mistake (`--api WatchPort` on destination's port).
/// `None` for a name that is not one of the four.
fn served_by(api: &str) -> Option<String> {
    let (binary, default) = match server_of(api.trim())? {
        "destination" => ("destination", DEFAULT_DESTINATION_INTROSPECTION),
        _ => ("policy-controller", DEFAULT_POLICY_INTROSPECTION),
    };
    Some(format!(
        "ask {binary}'s introspection API (--introspection; the pod serves it on {} unless \
         --introspection-addr says otherwise)",
        address(default)
    ))
}

// === impl StreamArgs ===

impl StreamArgs {
    /// Prints stream `id` and what it last sent, as `dst-diag` prints that API's messages.
    ///
    /// Errors: the connection ([`Error::Connect`]), an unknown ID ([`Error::Status`],
    /// `NotFound`), a message that does not decode ([`Error::Status`], `DataLoss`), or `out`
    /// failing otherwise ([`Error::Output`]).
    pub async fn run(&self, out: &mut impl Write) -> Result<(), Error> {
        let mut api = connect("--introspection", &self.introspection).await?;
        let target = format!("stream {}", self.id);
        let response = client::response(
            "GetStream",
            &target,
            client::RESPONSE_TIMEOUT,
            api.get_stream(GetStreamRequest { id: self.id }),
        )
        .await?
        .into_inner();
        let stream = response.stream.unwrap_or_default();
        let sent = match &response.last_sent {
            Some(sent) => Some(Sent::decode(sent).map_err(|status| Error::Status {
                rpc: "GetStream",
                target: target.clone(),
                status,
            })?),
            None => None,
        };
        let result = match self.output {
            OutputFormat::Json => {
                let mut object = stream_json(&stream);
                object["last_sent"] = sent.as_ref().map_or(Value::Null, Sent::json);
                writeln!(out, "{object}").and_then(|()| out.flush())
            }
            OutputFormat::Table => {
                let now = SystemTime::now();
                let header = streams_table(std::slice::from_ref(&stream), now).render();
                writeln!(out, "{header}\n").and_then(|()| match &sent {
                    None => writeln!(out, "(nothing sent yet)").and_then(|()| out.flush()),
                    Some(sent) => sent.write(out, self.output),
                })
            }
        };
        match result {
            Ok(()) => Ok(()),
            Err(error) if error.kind() == io::ErrorKind::BrokenPipe => Ok(()),
            Err(error) => Err(Error::Output(error)),
        }
    }
}

/// Each API the introspection API's filter names (`Get`, ...), with the gRPC service whose
/// method it is, in the order of `linkerd_runtime::introspect::APIS`.
const API_SERVICES: [(&str, &str); 4] = [
    (
        linkerd2_proxy_api::destination::destination_server::SERVICE_NAME,
        "Get",
    ),
    (
        linkerd2_proxy_api::destination::destination_server::SERVICE_NAME,
        "GetProfile",
    ),
    (
        linkerd2_proxy_api::inbound::inbound_server_policies_server::SERVICE_NAME,
        "WatchPort",
    ),
    (
        linkerd2_proxy_api::outbound::outbound_policies_server::SERVICE_NAME,
        "Watch",
    ),
];

/// `Destination` of `io.linkerd.proxy.destination.Destination`.
fn short_service(service: &str) -> &str {
    service.rsplit('.').next().unwrap_or(service)
}

/// An API argument, as the introspection API's filter names it (`Get`, `GetProfile`,
/// `WatchPort`, `Watch`), from any case, bare or qualified by its service as the README writes
/// them (`Destination.Get`, `io.linkerd.proxy.destination.Destination.Get`) or as its gRPC path
/// (`io.linkerd.proxy.destination.Destination/Get`, `/` first or not). The server takes the
/// bare names only, and another name, or a method under another service
/// (`Destination.Watch`), is a mistake in the command line: refused here (exit 2), naming
/// those it takes.
fn api_argument(api: &str) -> Result<String, String> {
    let api = api.trim();
    // A gRPC path names the service in full; a dotted name may name it short.
    let (service, method, short_ok) =
        if let Some((service, method)) = api.strip_prefix('/').unwrap_or(api).rsplit_once('/') {
            (Some(service), method, false)
        } else if let Some((service, method)) = api.rsplit_once('.') {
            (Some(service), method, true)
        } else {
            (None, api, true)
        };
    let service_matches = |full: &str| {
        service.is_none_or(|service| {
            service.eq_ignore_ascii_case(full)
                || (short_ok && service.eq_ignore_ascii_case(short_service(full)))
        })
    };
    API_SERVICES
        .iter()
        .find(|(full, known)| known.eq_ignore_ascii_case(method) && service_matches(full))
        .map(|(_, known)| known.to_string())
        .ok_or_else(|| {
            let qualified: Vec<String> = API_SERVICES
                .iter()
                .map(|(full, method)| format!("{}.{method}", short_service(full)))
                .collect();
            let (full, method) = API_SERVICES[0];
            format!(
                "unknown API {api:?}: expected one of {}, in any case, or qualified by its \
                 service: {} (or as a gRPC path, {full}/{method})",
                linkerd_runtime::introspect::APIS.join(", "),
                qualified.join(", "),
            )
        })
}

/// A pod argument, as the introspection API's filter takes it: `namespace/name`.
///
/// `namespace:name`, the workload form a proxy sends and `dst-diag policy inbound` takes, is
/// rewritten to it (neither part of a Kubernetes name can hold `:` or `/`). Otherwise the
/// server checks the form; but an empty pod would ask it for every stream (an empty filter
/// matches all), so it is refused here.
fn pod_argument(pod: &str) -> Result<String, String> {
    if pod.trim().is_empty() {
        return Err("expected namespace/name, not an empty string".to_string());
    }
    match pod.split_once(':') {
        Some((ns, name))
            if !ns.is_empty() && !name.is_empty() && !name.contains(':') && !pod.contains('/') =>
        {
            Ok(format!("{ns}/{name}"))
        }
        _ => Ok(pod.to_string()),
    }
}

// === impl ProxyStatusArgs ===

impl ProxyStatusArgs {
    /// Prints every stream the pod's proxy holds on destination and policy-controller, and
    /// whether each is in sync (has written out the newest view of what it follows) or behind.
    ///
    /// A server that cannot be reached, does not answer, or is not an introspection API is
    /// left out: the other's streams are printed, then the run fails with [`Error::LeftOut`]
    /// (exit code 3), so that a script does not take a partial answer for the whole. It fails
    /// with [`Error::NoServer`] when neither answers, and with [`Error::Status`] when a server
    /// refuses the pod (`InvalidArgument`).
    pub async fn run(&self, out: &mut impl Write) -> Result<(), Error> {
        let request = ListStreamsRequest {
            pod: self.pod.clone(),
            ..ListStreamsRequest::default()
        };
        let servers = [
            (
                "destination",
                "--destination-introspection",
                &self.destination_introspection,
            ),
            (
                "policy",
                "--policy-introspection",
                &self.policy_introspection,
            ),
        ];
        match (
            address(&self.destination_introspection),
            address(&self.policy_introspection),
        ) {
            (d, p) if d.is_empty() && p.is_empty() => {
                return Err(Error::Usage(
                    "no server to ask: --destination-introspection and --policy-introspection are both empty".into(),
                ));
            }
            (d, p) if d == p => {
                return Err(Error::Usage(format!(
                    "--destination-introspection and --policy-introspection both name {d}: give each server's own introspection address (destination's {}, policy-controller's {})",
                    address(DEFAULT_DESTINATION_INTROSPECTION),
                    address(DEFAULT_POLICY_INTROSPECTION),
                )));
            }
            _ => {}
        }
        let mut rows = Vec::new();
        let mut unreachable = Vec::new();
        let mut answered = 0;
        for (server, flag, addr) in servers {
            if addr.trim().is_empty() {
                continue;
            }
            match list(flag, addr, request.clone()).await {
                Ok(streams) => {
                    answered += 1;
                    if let Some(warning) = foreign_streams(server, flag, addr, &streams) {
                        eprintln!("dst-diag: {warning}");
                    }
                    for stream in streams {
                        // Each row is labelled by the server its API belongs to, and listed
                        // once should two spellings of one address (`localhost`) name it.
                        let owner = server_of(&stream.api).unwrap_or(server);
                        if !rows
                            .iter()
                            .any(|(o, s): &(&str, StreamInfo)| *o == owner && s.id == stream.id)
                        {
                            rows.push((owner, stream));
                        }
                    }
                }
                // The server judged the request (the pod named): its answer is the run's.
                Err(error) if refuses_the_pod(&error) => return Err(error),
                // Refused, silent, or not this gRPC server (a wrong port): left out.
                Err(error) => unreachable.push((server, error)),
            }
        }
        let mut unreachable = unreachable.into_iter();
        let left_out = match (unreachable.next(), unreachable.next()) {
            (Some((_, destination)), Some((_, policy))) => {
                return Err(Error::NoServer {
                    destination: Box::new(destination),
                    policy: Box::new(policy),
                });
            }
            (Some((_, error)), None) if answered == 0 => return Err(error),
            (Some((server, error)), None) => Some(Error::LeftOut {
                server,
                source: Box::new(error),
            }),
            _ => None,
        };
        let now = SystemTime::now();
        match self.output {
            OutputFormat::Json => {
                for (server, stream) in &rows {
                    let mut object = stream_json(stream);
                    object["server"] = json!(server);
                    object["status"] = json!(sync_status(stream));
                    if !emit(out, &object.to_string())? {
                        return Ok(());
                    }
                }
            }
            OutputFormat::Table => {
                let mut table = Table::new([
                    "SERVER",
                    "ID",
                    "API",
                    "TARGET",
                    "SENT",
                    "LAST SENT",
                    "STATUS",
                ]);
                for (server, s) in &rows {
                    table.push([
                        server.to_string(),
                        s.id.to_string(),
                        s.api.clone(),
                        s.target.clone(),
                        s.messages_sent.to_string(),
                        ago(s.last_sent_at_unix_ms, now),
                        sync_status(s).to_string(),
                    ]);
                }
                let behind = rows.iter().filter(|(_, s)| s.behind).count();
                let summary = format!(
                    "{}: {} stream{}, {} in sync, {} behind",
                    linkerd_runtime::log::escape_controls(&self.pod),
                    rows.len(),
                    if rows.len() == 1 { "" } else { "s" },
                    rows.len() - behind,
                    behind
                );
                emit(out, &format!("{summary}\n{}", table.render()))?;
            }
        }
        left_out.map_or(Ok(()), Err)
    }
}

/// An introspection address as the flags may write it (`http://host:port/`), without its
/// scheme, trailing slash and surrounding whitespace: two spellings of one address compare
/// equal.
fn address(flag: &str) -> &str {
    flag.trim()
        .trim_start_matches("http://")
        .trim_end_matches('/')
}

/// The server whose API `api` is (`destination` or `policy`, as `proxy-status` labels them).
fn server_of(api: &str) -> Option<&'static str> {
    match api {
        "Get" | "GetProfile" => Some("destination"),
        "WatchPort" | "Watch" => Some("policy"),
        _ => None,
    }
}

/// A warning when the server asked as `server` (with `flag` `addr`) listed the other server's
/// streams: the flag most likely names the other's introspection address (newcomer finding:
/// destination's streams were shown as policy's, in sync, without a word).
fn foreign_streams(server: &str, flag: &str, addr: &str, streams: &[StreamInfo]) -> Option<String> {
    let mut apis: Vec<&str> = streams
        .iter()
        .map(|s| s.api.as_str())
        .filter(|api| server_of(api).is_some_and(|owner| owner != server))
        .collect();
    apis.sort_unstable();
    apis.dedup();
    let owner = server_of(apis.first()?)?;
    Some(format!(
        "{flag} {addr} listed {} streams, which are {owner}'s: is it {owner}'s introspection \
         address? They are shown as {owner}'s",
        apis.join(" and ")
    ))
}

/// Whether `error` is an introspection API refusing `proxy-status`'s request (`InvalidArgument`:
/// the pod named), rather than a server that cannot be reached or is not one.
fn refuses_the_pod(error: &Error) -> bool {
    matches!(error, Error::Status { status, .. } if status.code() == tonic::Code::InvalidArgument)
}

/// `SYNCED` when the stream has written out the newest view of what it follows, else
/// `BEHIND`.
pub fn sync_status(stream: &StreamInfo) -> &'static str {
    if stream.behind { "BEHIND" } else { "SYNCED" }
}

/// The streams as rows: ID, API, POD, TARGET, PEER, SENT, LAST SENT, OPENED, BEHIND.
pub fn streams_table(streams: &[StreamInfo], now: SystemTime) -> Table {
    let mut table = Table::new([
        "ID",
        "API",
        "POD",
        "TARGET",
        "PEER",
        "SENT",
        "LAST SENT",
        "OPENED",
        "BEHIND",
    ]);
    for s in streams {
        table.push([
            s.id.to_string(),
            s.api.clone(),
            or_dash(&s.pod),
            s.target.clone(),
            or_dash(&s.peer),
            s.messages_sent.to_string(),
            ago(s.last_sent_at_unix_ms, now),
            ago(s.opened_at_unix_ms, now),
            if s.behind { "yes" } else { "no" }.to_string(),
        ]);
    }
    table
}

/// A stream as a JSON object, with the API's field names.
pub fn stream_json(s: &StreamInfo) -> Value {
    json!({
        "id": s.id,
        "api": s.api,
        "peer": s.peer,
        "client_identity": s.client_identity,
        "target": s.target,
        "pod": s.pod,
        "context_token": s.context_token,
        "opened_at_unix_ms": s.opened_at_unix_ms,
        "messages_sent": s.messages_sent,
        "last_sent_at_unix_ms": s.last_sent_at_unix_ms,
        "behind": s.behind,
    })
}

fn or_dash(s: &str) -> String {
    if s.is_empty() { "-".into() } else { s.into() }
}

/// `12s ago` for a time in milliseconds since the Unix epoch; `-` for 0 (never).
pub fn ago(unix_ms: i64, now: SystemTime) -> String {
    if unix_ms <= 0 {
        return "-".into();
    }
    let now_ms = now
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0);
    let secs = (now_ms - unix_ms).max(0) / 1000;
    match secs {
        0..60 => format!("{secs}s ago"),
        60..3600 => format!("{}m{}s ago", secs / 60, secs % 60),
        _ => format!("{}h{}m ago", secs / 3600, secs % 3600 / 60),
    }
}

/// A message a stream sent, decoded by its type name.
#[derive(Clone, Debug, PartialEq)]
pub enum Sent {
    /// `Destination.Get`: the whole set the proxy holds, as one update.
    Update(Update),
    /// `Destination.GetProfile`.
    Profile(Box<DestinationProfile>),
    /// `InboundServerPolicies.WatchPort`.
    Inbound(Box<Server>),
    /// `OutboundPolicies.Watch`.
    Outbound(Box<OutboundPolicy>),
}

impl Sent {
    /// Decodes `sent`. Errors: `DataLoss` naming the type for bytes that do not decode, or a
    /// type this client does not know.
    pub fn decode(sent: &SentMessage) -> Result<Self, tonic::Status> {
        let bytes = &sent.value[..];
        let fail = |e: prost::DecodeError| {
            tonic::Status::data_loss(format!("last sent {} does not decode: {e}", sent.type_name))
        };
        Ok(match sent.type_name.as_str() {
            "io.linkerd.proxy.destination.Update" => {
                Self::Update(Update::decode(bytes).map_err(fail)?)
            }
            "io.linkerd.proxy.destination.DestinationProfile" => {
                Self::Profile(Box::new(DestinationProfile::decode(bytes).map_err(fail)?))
            }
            "io.linkerd.proxy.inbound.Server" => {
                Self::Inbound(Box::new(Server::decode(bytes).map_err(fail)?))
            }
            "io.linkerd.proxy.outbound.OutboundPolicy" => {
                Self::Outbound(Box::new(OutboundPolicy::decode(bytes).map_err(fail)?))
            }
            other => {
                return Err(tonic::Status::data_loss(format!(
                    "last sent message of unknown type {other:?}"
                )));
            }
        })
    }

    /// Writes the message as `dst-diag` writes its API's stream.
    pub fn write(&self, out: &mut impl Write, format: OutputFormat) -> io::Result<()> {
        match self {
            Self::Update(update) => output::write_update(out, format, update),
            Self::Profile(profile) => output::write_profile(out, format, profile),
            Self::Inbound(server) => output::write_inbound_server(out, format, server),
            Self::Outbound(policy) => output::write_outbound_policy(out, format, policy),
        }
    }

    /// The message as `dst-diag -o json` prints it.
    pub fn json(&self) -> Value {
        match self {
            Self::Update(update) => output::update_json(update),
            Self::Profile(profile) => output::profile_json(profile),
            Self::Inbound(server) => output::inbound_server_json(server),
            Self::Outbound(policy) => output::outbound_policy_json(policy),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// API names are taken in any case and trimmed; others are refused naming those it takes
    /// (tester finding: `--api get` exited 1 with the server's refusal).
    #[test]
    fn api_names_are_taken_in_any_case() {
        for (given, taken) in [
            ("get", "Get"),
            (" GETPROFILE ", "GetProfile"),
            ("watchport", "WatchPort"),
            ("Watch", "Watch"),
        ] {
            assert_eq!(api_argument(given).as_deref(), Ok(taken), "{given}");
        }
        for unknown in ["Gets", "", "watch-port"] {
            assert_eq!(api_argument(unknown), Err(unknown_api(unknown)));
        }
    }

    /// The expected refusal of `api`.
    fn unknown_api(api: &str) -> String {
        format!(
            "unknown API {api:?}: expected one of Get, GetProfile, WatchPort, Watch, in any case, \
             or qualified by its service: Destination.Get, Destination.GetProfile, \
             InboundServerPolicies.WatchPort, OutboundPolicies.Watch (or as a gRPC path, \
             io.linkerd.proxy.destination.Destination/Get)"
        )
    }

    /// The table of services names the APIs the servers record, in their order.
    #[test]
    fn every_recorded_api_has_its_service() {
        let methods: Vec<&str> = API_SERVICES.iter().map(|(_, method)| *method).collect();
        assert_eq!(methods, linkerd_runtime::introspect::APIS);
    }

    /// The qualified names the README writes (`Destination.Get`) and the gRPC paths are taken
    /// too, in any case; a method under another service is refused (tester finding).
    #[test]
    fn api_names_qualified_by_their_service_are_taken() {
        for (given, taken) in [
            ("Destination.Get", "Get"),
            ("destination.getprofile", "GetProfile"),
            (" InboundServerPolicies.WatchPort ", "WatchPort"),
            ("OutboundPolicies.Watch", "Watch"),
            ("io.linkerd.proxy.destination.Destination/Get", "Get"),
            (
                "/io.linkerd.proxy.destination.Destination/GetProfile",
                "GetProfile",
            ),
            (
                "IO.LINKERD.PROXY.INBOUND.INBOUNDSERVERPOLICIES/WATCHPORT",
                "WatchPort",
            ),
            ("io.linkerd.proxy.outbound.OutboundPolicies.Watch", "Watch"),
        ] {
            assert_eq!(api_argument(given).as_deref(), Ok(taken), "{given}");
        }
        for wrong in [
            "Destination.Watch",
            "OutboundPolicies.Get",
            "InboundServerPolicies.Watch",
            "io.linkerd.proxy.destination.Destination/WatchPort",
            "Destination/Get",
            "Destination.",
            ".Get",
            "proxy.destination.Destination.Get",
            "Destination.Get.Get",
        ] {
            assert_eq!(
                api_argument(wrong),
                Err(unknown_api(wrong.trim())),
                "{wrong}"
            );
        }
    }

    /// Newcomer finding: asking the policy controller itself for `Watch` streams, and finding
    /// none, pointed at the policy controller.
    #[test]
    fn the_other_server_is_named_with_its_default_address() {
        assert_eq!(served_by("Other"), None);
        // The server trims the name it is given; so does the hint.
        assert_eq!(served_by(" WatchPort "), served_by("WatchPort"));
        let hint = served_by("WatchPort").expect("a hint");
        assert!(hint.contains("policy-controller's"), "{hint}");
        assert!(hint.contains("127.0.0.1:9980"), "{hint}");
        let hint = served_by("GetProfile").expect("a hint");
        assert!(hint.contains("destination's"), "{hint}");
        assert!(hint.contains("127.0.0.1:9986"), "{hint}");
    }

    #[test]
    fn streams_of_the_other_server_are_named() {
        let get = info(1, false);
        let watch_port = StreamInfo {
            api: "WatchPort".into(),
            ..info(2, false)
        };
        assert_eq!(
            foreign_streams("policy", "--policy-introspection", "127.0.0.1:9986", std::slice::from_ref(&get)),
            Some(
                "--policy-introspection 127.0.0.1:9986 listed Get streams, which are destination's: \
                 is it destination's introspection address? They are shown as destination's"
                    .into()
            )
        );
        assert_eq!(
            foreign_streams(
                "destination",
                "--destination-introspection",
                "x",
                &[get, watch_port.clone()]
            )
            .as_deref()
            .map(|w| w.starts_with(
                "--destination-introspection x listed WatchPort streams, which are policy's"
            )),
            Some(true)
        );
        assert_eq!(
            foreign_streams("policy", "--policy-introspection", "x", &[watch_port]),
            None
        );
    }

    #[test]
    fn a_pod_is_written_namespace_slash_name_or_as_a_proxy_writes_it() {
        assert_eq!(
            pod_argument("emojivoto/web-0").as_deref(),
            Ok("emojivoto/web-0")
        );
        assert_eq!(
            pod_argument("emojivoto:web-0").as_deref(),
            Ok("emojivoto/web-0")
        );
        // Anything else goes to the server as written, which names what is wrong with it.
        for other in ["web-0", ":web-0", "emojivoto:", "a:b/c", "a:b:c"] {
            assert_eq!(pod_argument(other).as_deref(), Ok(other));
        }
        assert!(pod_argument(" ").is_err());
    }

    fn info(id: u64, behind: bool) -> StreamInfo {
        StreamInfo {
            id,
            api: "Get".into(),
            peer: "127.0.0.1:50000".into(),
            client_identity: String::new(),
            target: "web-svc.emojivoto.svc.cluster.local:80".into(),
            pod: "emojivoto/vote-bot-0".into(),
            context_token: "{}".into(),
            opened_at_unix_ms: 1_000_000,
            messages_sent: 3,
            last_sent_at_unix_ms: 1_030_000,
            behind,
        }
    }

    #[test]
    fn streams_render_as_aligned_rows() {
        let now = UNIX_EPOCH + Duration::from_millis(1_095_000);
        let table = streams_table(&[info(1, false), info(12, true)], now).render();
        assert_eq!(
            table,
            "ID  API  POD                   TARGET                                  PEER             SENT  LAST SENT  OPENED     BEHIND\n\
             1   Get  emojivoto/vote-bot-0  web-svc.emojivoto.svc.cluster.local:80  127.0.0.1:50000  3     1m5s ago   1m35s ago  no\n\
             12  Get  emojivoto/vote-bot-0  web-svc.emojivoto.svc.cluster.local:80  127.0.0.1:50000  3     1m5s ago   1m35s ago  yes"
        );
        assert_eq!(ago(0, now), "-");
        assert_eq!(ago(1_094_500, now), "0s ago");
        let later = UNIX_EPOCH + Duration::from_millis(10_000_000);
        assert_eq!(ago(10_000_000 - 7_260_000, later), "2h1m ago");
    }

    /// A client's pod or target with a line break or a terminal escape stays on its row.
    #[test]
    fn control_characters_in_cells_are_escaped() {
        let now = UNIX_EPOCH + Duration::from_millis(1_095_000);
        let mut stream = info(1, false);
        stream.pod = "\u{1b}[31mEVIL/p".into();
        stream.target = "web\r\n12  Get  forged".into();
        let table = streams_table(&[stream], now).render();
        assert_eq!(table.lines().count(), 2, "{table}");
        assert!(
            table.contains(r"\u{1b}[31mEVIL/p  web\r\n12  Get  forged  127.0.0.1:50000"),
            "{table}"
        );
    }

    #[test]
    fn a_message_that_does_not_decode_is_named() {
        let status = Sent::decode(&SentMessage {
            type_name: "io.linkerd.proxy.inbound.Server".into(),
            value: vec![0xff, 0xff],
        })
        .unwrap_err();
        assert_eq!(status.code(), tonic::Code::DataLoss);
        assert!(
            status
                .message()
                .starts_with("last sent io.linkerd.proxy.inbound.Server does not decode"),
            "{}",
            status.message()
        );
        let status = Sent::decode(&SentMessage {
            type_name: "x.Y".into(),
            value: vec![],
        })
        .unwrap_err();
        assert_eq!(
            status.message(),
            "last sent message of unknown type \"x.Y\""
        );
    }
}
