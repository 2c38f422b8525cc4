//! `cargo fuzz run --features libfuzzer -s none policy_admission`: [`linkerd_fuzz::policy_admission`] under libFuzzer.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| linkerd_fuzz::policy_admission(data));
