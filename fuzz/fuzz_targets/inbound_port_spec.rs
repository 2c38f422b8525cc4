//! `cargo fuzz run --features libfuzzer -s none inbound_port_spec`: [`linkerd_fuzz::inbound_port_spec`] under libFuzzer.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| linkerd_fuzz::inbound_port_spec(data));
