//! What `sys::spawn_leader` hands to `execve`, made before the child
//! starts (it may not allocate): the program, its arguments and its
//! directory as C strings, and the environment, this process's with some
//! variables set over it.

use std::ffi::{CString, c_char};
use std::io;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::Path;
use std::sync::OnceLock;

pub struct ExecArgs {
    pub path: CString,
    pub dir: CString,
    argv: Vec<CString>,
    /// The variables set over this process's environment.
    own: Vec<CString>,
    names: Vec<&'static str>,
}

fn cstring(bytes: impl Into<Vec<u8>>) -> io::Result<CString> {
    let nul = "a NUL byte in the command, the directory or the environment";
    CString::new(bytes).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, nul))
}

/// This process's environment as `execve` takes it, read once (baton
/// changes its own only at startup, before any turn). An entry with a
/// NUL byte cannot be passed on, and is left out.
fn base_env() -> &'static [CString] {
    static ENV: OnceLock<Vec<CString>> = OnceLock::new();
    ENV.get_or_init(|| {
        std::env::vars_os()
            .filter_map(|(k, v)| {
                let mut entry = k.into_vec();
                entry.push(b'=');
                entry.extend_from_slice(v.as_bytes());
                CString::new(entry).ok()
            })
            .collect()
    })
}

impl ExecArgs {
    /// `program` with `args` (`argv[0]` is `program`), run in `dir`, with
    /// `env` over this process's environment.
    pub fn new(
        program: &str,
        args: &[&str],
        dir: &Path,
        env: &[(&'static str, String)],
    ) -> io::Result<ExecArgs> {
        let argv = std::iter::once(&program).chain(args).map(|a| cstring(*a));
        let argv: Vec<CString> = argv.collect::<io::Result<_>>()?;
        Ok(ExecArgs {
            path: argv[0].clone(),
            dir: cstring(dir.as_os_str().as_bytes())?,
            argv,
            own: env
                .iter()
                .map(|(k, v)| cstring(format!("{k}={v}")))
                .collect::<io::Result<_>>()?,
            names: env.iter().map(|(k, _)| *k).collect(),
        })
    }

    /// `argv`, ending in a null pointer; valid while `self` lives.
    pub fn argv(&self) -> Vec<*const c_char> {
        nul_terminated(self.argv.iter())
    }

    /// `envp`, ending in a null pointer; valid while `self` lives.
    pub fn envp(&self) -> Vec<*const c_char> {
        let overridden = |entry: &&CString| {
            let e = entry.as_bytes();
            self.names
                .iter()
                .any(|k| e.starts_with(k.as_bytes()) && e.get(k.len()) == Some(&b'='))
        };
        nul_terminated(
            base_env()
                .iter()
                .filter(|e| !overridden(e))
                .chain(&self.own),
        )
    }
}

fn nul_terminated<'a>(strings: impl Iterator<Item = &'a CString>) -> Vec<*const c_char> {
    strings
        .map(|c| c.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect()
}
