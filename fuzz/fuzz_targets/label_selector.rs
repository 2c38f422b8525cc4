//! `cargo fuzz run --features libfuzzer -s none label_selector`: [`linkerd_fuzz::label_selector`] under libFuzzer.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| linkerd_fuzz::label_selector(data));
