//! `cargo fuzz run --features libfuzzer -s none sp_admission`: [`linkerd_fuzz::sp_admission`] under libFuzzer.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| linkerd_fuzz::sp_admission(data));
