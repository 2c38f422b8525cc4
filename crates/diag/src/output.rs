//! Rendering of the proxy API's messages: readable tables and JSON, for `Destination.Get`
//! updates (here), `Destination.GetProfile` profiles ([`profile_table`], [`profile_json`]) and
//! `InboundServerPolicies` servers ([`inbound_server_table`], [`inbound_server_json`]).
//!
//! The generated proto types do not implement serde, so the JSON is built by hand. Its shape is
//! fixed: every field of a message is present (`null` when unset), maps are objects with sorted
//! keys, addresses are `ip:port` strings, and durations are `{"seconds":N,"nanos":M}` as the
//! server's `--meshed-http2-client-params` flag takes them.

use linkerd_runtime::log::{escape_controls, escape_controls_owned};
use linkerd2_proxy_api::{
    destination::{
        Http2ClientParams, ProtocolHint, TlsIdentity, Update, WeightedAddr, WeightedAddrSet,
        http2_client_params::{FlowControl, Internals, KeepAlive},
        protocol_hint::Protocol,
        tls_identity::Strategy,
        update,
    },
    meta::{Metadata, metadata},
    net::TcpAddress,
};
use serde_json::{Map, Value, json};
use std::{
    collections::{BTreeMap, HashMap},
    io::{self, Write},
    net::SocketAddr,
};

mod inbound;
mod outbound;
mod profile;

pub use self::inbound::{
    authn_text, grpc_match_text, http_match_text, inbound_server_json, inbound_server_table,
    protocol_text, write_inbound_server,
};
pub use self::outbound::{
    metadata_text, outbound_policy_json, outbound_policy_table, write_outbound_policy,
};
pub use self::profile::{
    profile_json, profile_table, request_match_text, response_match_text, write_profile,
};
// Names and matches as `explain` prints them too.
#[cfg(test)]
pub(crate) use self::outbound::timeouts_text;
pub(crate) use self::{
    inbound::{
        authz_name, grpc_filter_text, host_text, http_filter_text, labels_name, network_text,
        route_name, scheme_text,
    },
    outbound::{grpc_retry_text, grpc_timeouts_text, http_retry_text, http_timeouts_text},
    profile::{duration_text, method_text},
};

/// How updates are printed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum OutputFormat {
    /// Readable text: a block per update (a header line, then aligned columns), or a table
    /// with a row per stream for `streams`.
    #[default]
    Table,
    /// One JSON object per update, or per stream for `streams`, on its own line
    /// (newline-delimited JSON).
    Json,
}

/// Text columns aligned on their widest cell, two spaces apart, without trailing spaces.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

/// The label that gets its own column instead of being listed with the others.
const ZONE_LABEL: &str = "zone";
/// The set label naming the linked cluster an `Add`'s addresses are in (multicluster remote
/// discovery and federated members, gateway-mirrored Services); absent: the local cluster.
const TARGET_CLUSTER_LABEL: &str = "target_cluster";

/// Writes `update` to `out` in `format` and flushes, so that a reader on a pipe sees each update
/// as soon as it arrives. Table blocks are followed by an empty line.
pub fn write_update(out: &mut impl Write, format: OutputFormat, update: &Update) -> io::Result<()> {
    match format {
        OutputFormat::Json => writeln!(out, "{}", update_json(update))?,
        OutputFormat::Table => writeln!(out, "{}\n", update_table(update))?,
    }
    out.flush()
}

/// The JSON object of one update: `{"add":{"addrs":[...],"metric_labels":{...}}}`,
/// `{"remove":{"addrs":["ip:port",...]}}`, `{"no_endpoints":{"exists":bool}}`, or `{}` for an
/// update with nothing set.
pub fn update_json(update: &Update) -> Value {
    match &update.update {
        Some(update::Update::Add(set)) => json!({ "add": addr_set_json(set) }),
        Some(update::Update::Remove(set)) => {
            let addrs: Vec<Value> = set
                .addrs
                .iter()
                .map(|a| Value::String(tcp_addr(Some(a))))
                .collect();
            json!({ "remove": { "addrs": addrs } })
        }
        Some(update::Update::NoEndpoints(none)) => {
            json!({ "no_endpoints": { "exists": none.exists } })
        }
        None => json!({}),
    }
}

/// The JSON object of one endpoint, with every field of `WeightedAddr`.
pub fn weighted_addr_json(addr: &WeightedAddr) -> Value {
    let hint = addr.protocol_hint.as_ref();
    json!({
        "addr": tcp_addr(addr.addr.as_ref()),
        "weight": addr.weight,
        "identity": identity(addr.tls_identity.as_ref()),
        "server_name": addr.tls_identity.as_ref().and_then(|id| id.server_name.as_ref()).map(|n| n.name.clone()),
        "protocol_hint": hint.and_then(protocol_name),
        "opaque_transport_port": hint.and_then(|h| h.opaque_transport).map(|t| t.inbound_port),
        "authority_override": addr.authority_override.as_ref().map(|a| a.authority_override.clone()),
        "metric_labels": labels_json(&addr.metric_labels),
        "http2": addr.http2.as_ref().map(http2_json),
        "resource_ref": addr.resource_ref.as_ref().map(metadata_json),
    })
}

/// The readable block of one update, without a trailing newline:
///
/// ```text
/// ADD 1 address (namespace=emojivoto,service=web-svc)
/// ADDRESS           CLUSTER  IDENTITY      ZONE        HINT  LABELS
/// 10.244.2.19:8080  local    web.emoji...  eu-west-1c  h2    deployment=web,pod=...
/// ```
///
/// `CLUSTER` is the `target_cluster` label (the linked cluster the address comes from): the
/// address's own (the whole set a federated stream's client holds, as the introspection API
/// shows it, mixes clusters), else the set's, else `local`.
///
/// `REMOVE n addresses` is followed by an `ADDRESS` column, `NO ENDPOINTS exists=true|false`
/// stands alone, and an update with nothing set is `EMPTY UPDATE`.
pub fn update_table(update: &Update) -> String {
    match &update.update {
        Some(update::Update::Add(set)) => {
            let mut block = format!("ADD {}", count(set.addrs.len()));
            if !set.metric_labels.is_empty() {
                block.push_str(&format!(" ({})", labels_line(&set.metric_labels, None)));
            }
            let cluster = set
                .metric_labels
                .get(TARGET_CLUSTER_LABEL)
                .map_or("local", String::as_str);
            with_table(block, &addrs_table_in(&set.addrs, Some(cluster)))
        }
        Some(update::Update::Remove(set)) => {
            let mut table = Table::new(["ADDRESS"]);
            for addr in &set.addrs {
                table.push([tcp_addr(Some(addr))]);
            }
            with_table(format!("REMOVE {}", count(set.addrs.len())), &table)
        }
        Some(update::Update::NoEndpoints(none)) => format!("NO ENDPOINTS exists={}", none.exists),
        None => "EMPTY UPDATE".into(),
    }
}

/// The endpoints as an `ADDRESS IDENTITY ZONE HINT LABELS` table, one row each, in order; the
/// zone label has its own column and is left out of `LABELS`.
pub fn addrs_table(addrs: &[WeightedAddr]) -> Table {
    addrs_table_in(addrs, None)
}

/// [`addrs_table`], with a `CLUSTER` column after `ADDRESS` when `cluster` is given: each
/// address's own `target_cluster` label, else `cluster`.
fn addrs_table_in(addrs: &[WeightedAddr], cluster: Option<&str>) -> Table {
    let mut header = vec!["ADDRESS"];
    header.extend(cluster.map(|_| "CLUSTER"));
    header.extend(["IDENTITY", "ZONE", "HINT", "LABELS"]);
    let mut table = Table {
        header: header.into_iter().map(String::from).collect(),
        rows: Vec::new(),
    };
    for addr in addrs {
        let mut row = vec![tcp_addr(addr.addr.as_ref())];
        row.extend(cluster.map(|set| {
            addr.metric_labels
                .get(TARGET_CLUSTER_LABEL)
                .map_or(set, String::as_str)
                .to_string()
        }));
        row.extend([
            identity(addr.tls_identity.as_ref()).unwrap_or_else(|| "-".into()),
            or_dash(addr.metric_labels.get(ZONE_LABEL).cloned()),
            hint_text(addr.protocol_hint.as_ref()),
            or_dash(Some(labels_line(&addr.metric_labels, Some(ZONE_LABEL)))),
        ]);
        table.rows.push(row);
    }
    table
}

// === impl Table ===

impl Table {
    /// A table with these column names and no rows.
    pub fn new<const N: usize>(header: [&str; N]) -> Self {
        Self {
            header: header.iter().map(|h| h.to_string()).collect(),
            rows: Vec::new(),
        }
    }

    /// Appends a row; it should have one cell per column. Control characters in a cell are
    /// shown escaped (`\n`, `\u{1b}`): cells hold what clients and the cluster named (a
    /// stream's target, a label), and a line break or a terminal escape there would forge rows
    /// or recolour the terminal.
    pub fn push<const N: usize>(&mut self, row: [String; N]) {
        self.rows
            .push(row.into_iter().map(escape_controls_owned).collect());
    }

    /// Whether no row was pushed.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The header and the rows, one line each, joined by newlines (no trailing newline).
    pub fn render(&self) -> String {
        let lines = std::iter::once(&self.header).chain(&self.rows);
        let mut widths = vec![0; self.header.len()];
        for line in lines.clone() {
            for (width, cell) in widths.iter_mut().zip(line) {
                *width = (*width).max(cell.chars().count());
            }
        }
        let rendered: Vec<String> = lines
            .map(|line| {
                let last = line.len().saturating_sub(1);
                let mut text = String::new();
                for (i, (cell, width)) in line.iter().zip(&widths).enumerate() {
                    if i == last {
                        text.push_str(cell);
                    } else {
                        text.push_str(&format!("{cell:<width$}  "));
                    }
                }
                text.trim_end().to_string()
            })
            .collect();
        rendered.join("\n")
    }
}

fn with_table(header: String, table: &Table) -> String {
    let header = escape_controls(&header);
    if table.is_empty() {
        header.into_owned()
    } else {
        format!("{header}\n{}", table.render())
    }
}

/// Appends `table`'s lines to `lines`, if it has rows.
pub(crate) fn push_table(lines: &mut Vec<String>, table: &Table) {
    if !table.is_empty() {
        lines.extend(table.render().split('\n').map(str::to_string));
    }
}

/// `n`, or `none` for 0.
pub(crate) fn count_or_none(n: usize) -> String {
    if n == 0 { "none".into() } else { n.to_string() }
}

/// `lines` (one line each: tables go in through [`push_table`]) joined by newlines, control
/// characters in each shown escaped as [`Table::push`] shows them: the lines of a readable
/// block carry names that clients and the cluster chose (a Service's, a route's), which must
/// not break lines or recolour the terminal.
pub(crate) fn join_lines(lines: &[String]) -> String {
    lines
        .iter()
        .map(|line| escape_controls(line))
        .collect::<Vec<_>>()
        .join("\n")
}

fn count(n: usize) -> String {
    if n == 1 {
        "1 address".into()
    } else {
        format!("{n} addresses")
    }
}

fn or_dash(text: Option<String>) -> String {
    text.filter(|t| !t.is_empty()).unwrap_or_else(|| "-".into())
}

/// `ip:port`, or a bracketed note saying why the address cannot be read (it is printed, not
/// dropped: the point of this tool is to show what the server sent).
fn tcp_addr(addr: Option<&TcpAddress>) -> String {
    let Some(addr) = addr else {
        return "<no address>".into();
    };
    if u16::try_from(addr.port).is_err() {
        return format!("<invalid port {}>", addr.port);
    }
    match SocketAddr::try_from(*addr) {
        Ok(sa) => sa.to_string(),
        Err(_) => format!("<no IP>:{}", addr.port),
    }
}

/// The identity the client verifies: the DNS-like name or the URI.
fn identity(id: Option<&TlsIdentity>) -> Option<String> {
    match id?.strategy.as_ref()? {
        Strategy::DnsLikeIdentity(dns) => Some(dns.name.clone()),
        Strategy::UriLikeIdentity(uri) => Some(uri.uri.clone()),
    }
}

fn protocol_name(hint: &ProtocolHint) -> Option<&'static str> {
    match hint.protocol? {
        Protocol::H2(_) => Some("h2"),
        Protocol::Opaque(_) => Some("opaque"),
    }
}

/// `h2`, `opaque`, `opaque (transport 4143)`, `transport 4143` or `-`.
fn hint_text(hint: Option<&ProtocolHint>) -> String {
    let protocol = hint.and_then(protocol_name);
    let transport = hint
        .and_then(|h| h.opaque_transport)
        .map(|t| t.inbound_port);
    match (protocol, transport) {
        (Some(p), Some(port)) => format!("{p} (transport {port})"),
        (Some(p), None) => p.into(),
        (None, Some(port)) => format!("transport {port}"),
        (None, None) => "-".into(),
    }
}

/// `k=v` pairs sorted by key and joined by commas, leaving out `skip`.
fn labels_line(labels: &HashMap<String, String>, skip: Option<&str>) -> String {
    let sorted: BTreeMap<&String, &String> = labels
        .iter()
        .filter(|(k, _)| Some(k.as_str()) != skip)
        .collect();
    sorted
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

fn labels_json(labels: &HashMap<String, String>) -> Value {
    Value::Object(
        labels
            .iter()
            .map(|(k, v)| (k.clone(), Value::String(v.clone())))
            .collect::<Map<_, _>>(),
    )
}

fn addr_set_json(set: &WeightedAddrSet) -> Value {
    json!({
        "addrs": set.addrs.iter().map(weighted_addr_json).collect::<Vec<_>>(),
        "metric_labels": labels_json(&set.metric_labels),
    })
}

fn http2_json(params: &Http2ClientParams) -> Value {
    json!({
        "flow_control": params.flow_control.as_ref().map(|f: &FlowControl| json!({
            "initial_connection_window_size": f.initial_connection_window_size,
            "initial_stream_window_size": f.initial_stream_window_size,
            "adaptive_flow_control": f.adaptive_flow_control,
        })),
        "keep_alive": params.keep_alive.as_ref().map(|k: &KeepAlive| json!({
            "interval": k.interval.as_ref().map(duration_json),
            "timeout": k.timeout.as_ref().map(duration_json),
            "while_idle": k.while_idle,
        })),
        "internals": params.internals.as_ref().map(|i: &Internals| json!({
            "max_concurrent_reset_streams": i.max_concurrent_reset_streams,
            "max_frame_size": i.max_frame_size,
            "max_send_buf_size": i.max_send_buf_size,
        })),
    })
}

fn duration_json(d: &prost_types::Duration) -> Value {
    json!({ "seconds": d.seconds, "nanos": d.nanos })
}

fn metadata_json(meta: &Metadata) -> Value {
    match &meta.kind {
        Some(metadata::Kind::Default(name)) => json!({ "default": name }),
        Some(metadata::Kind::Resource(r)) => json!({
            "resource": {
                "group": r.group,
                "kind": r.kind,
                "name": r.name,
                "namespace": r.namespace,
                "section": r.section,
                "port": r.port,
            }
        }),
        None => json!({}),
    }
}

#[cfg(test)]
mod tests;
