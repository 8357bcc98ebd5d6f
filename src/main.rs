//! The `baton` binary: everything lives in the library; this maps the
//! command line's result to an exit status.

fn main() {
    std::process::exit(baton::cli::main());
}
