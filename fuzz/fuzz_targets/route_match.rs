//! `cargo fuzz run --features libfuzzer -s none route_match`: [`linkerd_fuzz::route_match`] under libFuzzer.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| linkerd_fuzz::route_match(data));
