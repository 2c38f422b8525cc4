//! `cargo fuzz run --features libfuzzer -s none get_path`: [`linkerd_fuzz::get_path`] under libFuzzer.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| linkerd_fuzz::get_path(data));
