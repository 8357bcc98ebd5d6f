//! The `baton` binary: everything lives in the library; this maps the
//! command line's result to an exit status.

#![deny(unsafe_code)]

fn main() {
    baton::sys::limit_malloc_arenas();
    std::process::exit(baton::cli::main());
}
