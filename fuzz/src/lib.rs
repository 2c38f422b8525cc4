//! Fuzz targets of every input surface of the linkerd-destination pod (issue 19 item 1).
//!
//! Each target is a function of arbitrary bytes that feeds them to one surface the way the pod
//! receives them (a `Get` path, a `PortSpec`, a state file, an `AdmissionReview` body, ...) and
//! panics when the answer breaks a property of that surface: more than "no panic" wherever
//! there is something to check (an admitted object decodes, an error names what it refused, a
//! parsed value prints back to itself). They run three ways:
//!
//! - `cargo test -p linkerd-fuzz`: every file of `corpus/<target>/` (seeded from the bundled
//!   fixtures) and `regressions/<target>/` (inputs that once failed), then a fixed, seeded
//!   series of mutations of them ([`mutate`]): reproducible, and fast in a debug build;
//! - `cargo xtask fuzz [--inputs N] [--seconds S]`: each `fuzz_targets/<target>.rs` under
//!   `cargo fuzz` (libFuzzer, coverage-guided by LLVM's SanitizerCoverage, which stable Rust
//!   emits with `-Cpasses=sancov-module`; `--sanitizer none`, so no nightly toolchain is
//!   needed);
//! - by hand: `cargo fuzz run --features libfuzzer -s none <target>`.

#![deny(rust_2018_idioms)]
#![forbid(unsafe_code)]

pub mod cluster;
pub mod crds;
pub mod mutate;
mod targets;

pub use self::targets::{
    get_path, inbound_port_spec, label_selector, outbound_traffic_spec, policy_admission,
    port_list, route_match, sp_admission, state_file,
};

/// One fuzz target: its name (the `fuzz_targets/` binary, the `corpus/` and `regressions/`
/// folders) and its function.
#[derive(Clone, Copy, Debug)]
pub struct Target {
    pub name: &'static str,
    pub run: fn(&[u8]),
}

/// Every target, in the order `cargo xtask fuzz` runs them.
pub const TARGETS: &[Target] = &[
    Target {
        name: "get_path",
        run: get_path,
    },
    Target {
        name: "inbound_port_spec",
        run: inbound_port_spec,
    },
    Target {
        name: "outbound_traffic_spec",
        run: outbound_traffic_spec,
    },
    Target {
        name: "state_file",
        run: state_file,
    },
    Target {
        name: "sp_admission",
        run: sp_admission,
    },
    Target {
        name: "policy_admission",
        run: policy_admission,
    },
    Target {
        name: "port_list",
        run: port_list,
    },
    Target {
        name: "label_selector",
        run: label_selector,
    },
    Target {
        name: "route_match",
        run: route_match,
    },
];
