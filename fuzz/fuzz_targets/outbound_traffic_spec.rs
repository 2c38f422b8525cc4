//! `cargo fuzz run --features libfuzzer -s none outbound_traffic_spec`: [`linkerd_fuzz::outbound_traffic_spec`] under libFuzzer.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| linkerd_fuzz::outbound_traffic_spec(data));
