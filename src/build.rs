//! Build script: on Linux, the binary is linked with `src/layout.ld`,
//! which puts the functions an instance runs from its start to idle next
//! to each other. The kernel maps a binary's code in 64 KiB windows around
//! each page first run, so spread out they kept most of the text resident
//! in every instance (docs/performance.md, "Idle RSS: the code's layout").
//! The script only orders sections; a function it does not name (another
//! toolchain's hashes, new code) is laid out as before. GNU ld and LLD
//! read it; `BATON_LINK_LAYOUT=0` leaves it out for a linker that does
//! not (docs/packaging.md).

use std::env;

fn main() {
    println!("cargo:rerun-if-changed=src/layout.ld");
    println!("cargo:rerun-if-env-changed=BATON_LINK_LAYOUT");
    let linux = env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux");
    let off = env::var("BATON_LINK_LAYOUT").as_deref() == Ok("0");
    if !linux || off {
        return;
    }
    let dir = env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    // One argument each, whatever the path holds (`-Wl,` splits at commas).
    for arg in [
        "-Xlinker",
        "-T",
        "-Xlinker",
        &format!("{dir}/src/layout.ld"),
    ] {
        println!("cargo:rustc-link-arg-bins={arg}");
    }
}
