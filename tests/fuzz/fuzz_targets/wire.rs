//! Fuzzes baton's wire parsers with libFuzzer: the checks are in
//! `tests/reliability/fuzz/wire.rs`, which the std-only loop of
//! tests/reliability/fuzz.rs runs too.
//!
//! Run it from the repository root (docs/testing.md):
//!     cargo +nightly fuzz run --fuzz-dir tests/fuzz wire

#![no_main]

#[path = "../../reliability/fuzz/wire.rs"]
mod wire;

libfuzzer_sys::fuzz_target!(|data: &[u8]| wire::run(data));
