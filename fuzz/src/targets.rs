//! The fuzz targets, one module per input surface. Each `pub fn(&[u8])` panics when the
//! surface breaks one of its properties (the module docs list them).

mod admission;
mod get;
mod policy_requests;
mod ports;
mod routes;
mod selector;
mod state_file;

pub use self::{
    admission::{policy_admission, sp_admission},
    get::get_path,
    policy_requests::{inbound_port_spec, outbound_traffic_spec},
    ports::port_list,
    routes::route_match,
    selector::label_selector,
    state_file::state_file,
};

/// The longest error message a client may get back: gRPC statuses travel in HTTP/2 headers,
/// and every error echoes at most 256 bytes of what it refused (plus fixed text).
const MAX_MESSAGE: usize = 1024;

/// `data` as text: gRPC strings and annotation values are UTF-8, so other bytes never reach
/// the parsers.
fn text(data: &[u8]) -> Option<&str> {
    std::str::from_utf8(data).ok()
}
