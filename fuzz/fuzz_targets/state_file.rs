//! `cargo fuzz run --features libfuzzer -s none state_file`: [`linkerd_fuzz::state_file`] under libFuzzer.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| linkerd_fuzz::state_file(data));
