//! Fuzzes what baton reads back from disk (manifests, task files, receipt
//! logs, legacy receipts, `meta.json`, `sequence`) with libFuzzer: the
//! checks are in `tests/reliability/fuzz/disk.rs`, which the std-only loop of
//! tests/reliability/fuzz.rs runs too. Each input is written into a fresh
//! spool under a scratch directory of this process, in the system's
//! temporary directory.
//!
//! Run it from the repository root (docs/testing.md):
//!     cargo +nightly fuzz run --fuzz-dir tests/fuzz disk

#![no_main]

// Its seeds are for the std-only loop.
#[allow(dead_code)]
#[path = "../../reliability/fuzz/disk.rs"]
mod disk;

use std::path::PathBuf;
use std::sync::OnceLock;

fn scratch() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("baton-fuzz-disk.{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("make the scratch directory");
        dir
    })
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| disk::run(scratch(), data));
