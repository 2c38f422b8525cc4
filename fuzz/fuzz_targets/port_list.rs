//! `cargo fuzz run --features libfuzzer -s none port_list`: [`linkerd_fuzz::port_list`] under libFuzzer.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| linkerd_fuzz::port_list(data));
