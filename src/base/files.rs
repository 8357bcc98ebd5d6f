//! A private file appears under its name whole or not at all, is read
//! back without ever waiting on what stands in its place, and a directory
//! that holds private state is ours alone: one way to write such a file (a
//! mode-0600 temporary file, renamed into place), one way to read one back
//! (non-blocking, never through a symlink, a regular file or nothing,
//! bounded), and one check of such a directory, shared by the registry and
//! the spool.
//!
//! Syncing the directory after a rename is left to the caller: the spool
//! shares its `inbox/` syncs among concurrent acceptances (`DirSync`), and
//! the registry does not sync at all.
//!
//! Every operation the spool performs that changes what a crash could
//! leave goes through here (or `spool/dirsync.rs`, which syncs its
//! directories): with the `failpoints` feature, `record` can note each
//! one for the crash-state explorer; without it `note!` is nothing.

use crate::sys;
use std::fmt;
use std::fs::{self, File, FileType, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::Path;

#[cfg(feature = "failpoints")]
pub mod record;

/// Notes a file-system operation that succeeded (`record::Op`, named
/// `Op` in `$op`) for a recorder, with the `failpoints` feature only;
/// without it the expression is not even compiled.
macro_rules! note {
    ($op:expr) => {
        #[cfg(feature = "failpoints")]
        $crate::base::files::record::note(|| {
            #[allow(unused_imports)]
            use $crate::base::files::record::Op;
            $op
        });
    };
}
pub(crate) use note;

/// How far `write_private_fresh` has got, for a caller's fail points.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// The bytes are written, not yet synced.
    Written,
    /// The file is as durable as asked; the rename comes next.
    Renaming,
}

/// Writes `bytes` to `tmp`, syncs it if `fsync`, and renames it to
/// `dest`, removing first whatever an earlier failure left at `tmp`.
/// `tmp` must be on `dest`'s file system.
pub fn write_private(tmp: &Path, dest: &Path, bytes: &[u8], fsync: bool) -> io::Result<()> {
    let _ = remove_file(tmp);
    write_private_fresh(tmp, dest, bytes, fsync, |_| Ok(()))
}

/// Like `write_private` for a `tmp` name nothing may hold: anything there
/// (a symlink planted on it, say) refuses the write. `tmp` is created
/// mode 0600, never through a symlink; `at` runs at each `Step`, and an
/// error from it stops the write there.
pub fn write_private_fresh(
    tmp: &Path,
    dest: &Path,
    bytes: &[u8],
    fsync: bool,
    at: impl Fn(Step) -> io::Result<()>,
) -> io::Result<()> {
    let f = create_new(tmp, false)?;
    write_fresh(f, tmp, bytes, fsync, at)?;
    rename(tmp, dest)
}

/// The steps of a fresh write between the create and the rename.
fn write_fresh(
    mut f: File,
    tmp: &Path,
    bytes: &[u8],
    fsync: bool,
    at: impl Fn(Step) -> io::Result<()>,
) -> io::Result<()> {
    write_all(&mut f, tmp, bytes)?;
    at(Step::Written)?;
    if fsync {
        sync_file(&f, tmp)?;
    }
    at(Step::Renaming)
}

/// A directory held open, so that a name in it is found without walking
/// the directory's path again: the spool's `tmp/`, `inbox/` and
/// `processing/`, where every accepted task is created and renamed
/// (docs/performance.md, *The spool's directories held open*). `path`
/// names it in errors and notes. A directory removed or replaced while
/// held is opened again by its path when a name in it is not found, so a
/// spool repaired while its instance runs works again without a restart,
/// as it did when every operation walked the path.
pub struct Dir {
    fd: std::sync::RwLock<std::os::fd::OwnedFd>,
    path: std::path::PathBuf,
}

impl Dir {
    /// Opens the directory at `path`, never through a symlink.
    pub fn open(path: &Path) -> io::Result<Dir> {
        Ok(Dir {
            fd: std::sync::RwLock::new(Dir::open_fd(path)?),
            path: path.to_path_buf(),
        })
    }

    fn open_fd(path: &Path) -> io::Result<std::os::fd::OwnedFd> {
        let f = OpenOptions::new()
            .read(true)
            .custom_flags(sys::O_DIRECTORY | sys::O_NOFOLLOW)
            .open(path)?;
        Ok(f.into())
    }

    /// Runs `op` on the directory held; if a name was not found, once
    /// more on the directory at `path` now.
    fn with<T>(&self, op: impl Fn(std::os::fd::BorrowedFd<'_>) -> io::Result<T>) -> io::Result<T> {
        use std::os::fd::AsFd;
        let read = || self.fd.read().unwrap_or_else(|e| e.into_inner());
        // (The read guard must be gone before the write below.)
        let first = op(read().as_fd());
        match first {
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                let fresh = Dir::open_fd(&self.path)?;
                *self.fd.write().unwrap_or_else(|e| e.into_inner()) = fresh;
                op(read().as_fd())
            }
            r => r,
        }
    }

    /// `name` for a system call: one file name, nothing else.
    fn c_name(name: &str) -> io::Result<std::ffi::CString> {
        if name.is_empty() || name.contains('/') {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{name:?} is not a file name"),
            ));
        }
        std::ffi::CString::new(name).map_err(|_| io::ErrorKind::InvalidInput.into())
    }

    /// Creates `name` here, as `create_new` does (mode 0600, never through
    /// a symlink, never over anything).
    pub fn create_new(&self, name: &str) -> io::Result<File> {
        let c = Dir::c_name(name)?;
        let f = self.with(|dir| sys::open_at(dir, &c, true))?;
        note!(Op::Create(self.path.join(name)));
        Ok(f)
    }

    /// Opens `name` here to read, as `open_regular` opens (the caller
    /// checks what it is).
    pub fn open_read(&self, name: &str) -> io::Result<File> {
        let c = Dir::c_name(name)?;
        self.with(|dir| sys::open_at(dir, &c, false))
    }

    /// Renames `name` here to the same name in `to`.
    pub fn rename_into(&self, name: &str, to: &Dir) -> io::Result<()> {
        let c = Dir::c_name(name)?;
        self.with(|from| to.with(|dest| sys::rename_at(from, dest, &c)))?;
        note!(Op::Rename {
            from: self.path.join(name),
            to: to.path.join(name)
        });
        Ok(())
    }
}

/// `write_private_fresh` for the file `name` created in `tmp` and renamed
/// into `dest`, both held open; `tmp_path` is the file's path in `tmp`.
pub fn write_private_fresh_in(
    (tmp, dest): (&Dir, &Dir),
    name: &str,
    tmp_path: &Path,
    bytes: &[u8],
    fsync: bool,
    at: impl Fn(Step) -> io::Result<()>,
) -> io::Result<()> {
    let f = tmp.create_new(name)?;
    write_fresh(f, tmp_path, bytes, fsync, at)?;
    tmp.rename_into(name, dest)
}

/// Creates `path`, which must not exist, mode 0600, never through a
/// symlink, to write from its start or (`append`) to append to.
pub fn create_new(path: &Path, append: bool) -> io::Result<File> {
    let f = OpenOptions::new()
        .write(!append)
        .append(append)
        .create_new(true)
        .mode(0o600)
        .custom_flags(sys::O_NOFOLLOW)
        .open(path)?;
    note!(Op::Create(path.into()));
    Ok(f)
}

/// Cuts `f`, the file at `path`, to `len` bytes.
#[cfg_attr(not(feature = "failpoints"), allow(unused_variables))]
pub fn truncate(f: &File, path: &Path, len: u64) -> io::Result<()> {
    f.set_len(len)?;
    note!(Op::Truncate {
        path: path.into(),
        len
    });
    Ok(())
}

/// `write_all` to `f`, the file at `path`, from its current offset.
#[cfg_attr(not(feature = "failpoints"), allow(unused_variables))]
pub fn write_all(f: &mut File, path: &Path, bytes: &[u8]) -> io::Result<()> {
    f.write_all(bytes)?;
    note!(Op::Write {
        path: path.into(),
        offset: io::Seek::stream_position(f).map_or(0, |end| end - bytes.len() as u64),
        bytes: bytes.to_vec(),
    });
    Ok(())
}

/// fsync of `f`, the file at `path`.
#[cfg_attr(not(feature = "failpoints"), allow(unused_variables))]
pub fn sync_file(f: &File, path: &Path) -> io::Result<()> {
    f.sync_all()?;
    note!(Op::Fsync(path.into()));
    Ok(())
}

/// Replaces what `f`, the file at `path`, holds with `bytes`: cut to
/// nothing, then written from its current offset (0 for a file just
/// opened).
pub fn replace_contents(f: &mut File, path: &Path, bytes: &[u8]) -> io::Result<()> {
    truncate(f, path, 0)?;
    write_all(f, path, bytes)
}

/// `fs::rename`.
pub fn rename(from: &Path, to: &Path) -> io::Result<()> {
    fs::rename(from, to)?;
    note!(Op::Rename {
        from: from.into(),
        to: to.into()
    });
    Ok(())
}

/// `fs::remove_file`.
pub fn remove_file(path: &Path) -> io::Result<()> {
    fs::remove_file(path)?;
    note!(Op::Unlink(path.into()));
    Ok(())
}

/// Creates `path` and its missing parents with `mode`, as
/// `DirBuilder::recursive` does (a directory already there is no error).
pub fn create_dir_all(path: &Path, mode: u32) -> io::Result<()> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(mode)
        .create(path)?;
    note!(Op::Mkdir(path.into()));
    Ok(())
}

/// Opens (creating it mode 0600 if missing, never truncating) a file to
/// read and write, never following a link nor waiting on what stands in
/// its place.
pub fn open_or_create(path: &Path) -> io::Result<File> {
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(sys::O_NOFOLLOW | sys::O_NONBLOCK | sys::O_NOCTTY)
        .open(path)?;
    note!(Op::Create(path.into()));
    Ok(f)
}

/// Writes `bytes` as the whole of `path` (mode 0600, a regular file or
/// nothing: never through a symlink, never waiting on a FIFO), in one
/// open, write and close.
pub fn write_in_place(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let mut opts = OpenOptions::new();
    opts.write(true).create(true).truncate(true).mode(0o600);
    let mut f = open_regular(path, &mut opts)?;
    note!(Op::Create(path.into()));
    note!(Op::Truncate {
        path: path.into(),
        len: 0
    });
    write_all(&mut f, path, bytes)
}

/// Sets the modification time of the regular file at `path` (opened to
/// write, never through a symlink nor waiting on what stands there).
/// Not noted: the explorer's states carry no times.
pub fn set_modified(path: &Path, time: std::time::SystemTime) -> io::Result<()> {
    OpenOptions::new()
        .write(true)
        .custom_flags(sys::O_NOFOLLOW | sys::O_NONBLOCK | sys::O_NOCTTY)
        .open(path)
        .and_then(|f| f.set_modified(time))
}

/// Reads a small file back, at most `max` bytes. The open never waits
/// (`O_NONBLOCK`: a FIFO, a device or a socket planted on the name does not
/// hang the reader) and never follows a symlink in the last component
/// (`O_NOFOLLOW`); what was opened must be a regular file (checked on the
/// descriptor, so nothing can swap it in between), or the error, of kind
/// `InvalidData`, says what it is. A file longer than `max` is refused
/// the same way.
pub fn read_regular(path: &Path, max: u64) -> io::Result<Vec<u8>> {
    let f = open_regular(path, OpenOptions::new().read(true))?;
    let mut out = Vec::new();
    f.take(max + 1).read_to_end(&mut out)?;
    if out.len() as u64 > max {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("it is larger than {max} bytes"),
        ));
    }
    Ok(out)
}

/// Opens a file as `opts` say, never through a symlink and never waiting
/// on what stands at `path` (`O_NONBLOCK`: a FIFO opens at once;
/// `O_NOCTTY`: a terminal never becomes ours), and only if the opened
/// file is a regular one; otherwise the error, of kind `InvalidData`, says
/// what it is. So does a failed open when what stands there is no regular
/// file (a socket, which open(2) refuses with ENXIO; a symlink, ELOOP):
/// the name's kind, not the raw error number.
pub fn open_regular(path: &Path, opts: &mut OpenOptions) -> io::Result<File> {
    let opened = (opts.custom_flags(sys::O_NOFOLLOW | sys::O_NONBLOCK | sys::O_NOCTTY)).open(path);
    let f = opened.map_err(|e| match fs::symlink_metadata(path) {
        Ok(m) if !m.is_file() => not_regular(m.file_type()),
        _ => e,
    })?;
    let kind = f.metadata()?.file_type();
    if !kind.is_file() {
        return Err(not_regular(kind));
    }
    Ok(f)
}

fn not_regular(kind: FileType) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("it is {}, not a regular file", kind_of(kind)),
    )
}

/// What a file type is, in words ("a FIFO").
pub fn kind_of(t: FileType) -> &'static str {
    let kinds = [
        (FileType::is_file as fn(&FileType) -> bool, "a regular file"),
        (FileType::is_dir, "a directory"),
        (FileType::is_symlink, "a symlink"),
        (FileType::is_fifo, "a FIFO"),
        (FileType::is_socket, "a socket"),
        (FileType::is_char_device, "a character device"),
        (FileType::is_block_device, "a block device"),
    ];
    let kind = kinds.into_iter().find(|(is, _)| is(&t));
    kind.map_or("an unknown kind of file", |(_, name)| name)
}

/// A directory for a unit test (`sys::scratch`, in the lowest layer so
/// that every layer's tests may use it).
#[cfg(test)]
pub(crate) use crate::sys::scratch;

/// Why a directory cannot hold private state.
#[derive(Debug)]
pub enum DirError {
    /// It was missing and could not be created.
    Create(io::Error),
    /// It could not be looked at.
    Inspect(io::Error),
    /// It is there but not ours alone; the reason reads after the path
    /// ("is a symlink").
    Unsafe(String),
}

impl fmt::Display for DirError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DirError::Create(e) | DirError::Inspect(e) => e.fmt(f),
            DirError::Unsafe(reason) => f.write_str(reason),
        }
    }
}

/// Creates `path` with mode 0700 when `create` says so and it is missing,
/// then checks it without following a symlink: a directory, neither `/`
/// nor `$HOME`, owned by the effective uid, with no group or other
/// permission bits.
pub fn private_dir(path: &Path, create: bool) -> Result<(), DirError> {
    if create {
        match fs::DirBuilder::new().mode(0o700).create(path) {
            Ok(()) => {
                note!(Op::Mkdir(path.into()));
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(DirError::Create(e)),
        }
    }
    let meta = fs::symlink_metadata(path).map_err(DirError::Inspect)?;
    let refuse = |reason: String| Err(DirError::Unsafe(reason));
    if meta.file_type().is_symlink() {
        return refuse("is a symlink".into());
    }
    if !meta.is_dir() {
        return refuse("is not a directory".into());
    }
    let same = |other: &Path| {
        fs::metadata(other).is_ok_and(|m| m.dev() == meta.dev() && m.ino() == meta.ino())
    };
    if same(Path::new("/")) {
        return refuse("is the root directory".into());
    }
    let home = std::env::var_os("HOME").filter(|h| !h.is_empty());
    if home.is_some_and(|h| same(Path::new(&h))) {
        return refuse("is your home directory".into());
    }
    let me = crate::base::accounts::owner();
    if meta.uid() != me {
        let whose = match crate::base::accounts::target() {
            Some(a) => format!("by {} (uid {me})", a.name),
            None => format!("by you (uid {me})"),
        };
        return refuse(format!("is owned by uid {}, not {whose}", meta.uid()));
    }
    if meta.mode() & 0o077 != 0 {
        return refuse(format!(
            "has mode {:04o}, which gives group or other access (it must be 0700)",
            meta.mode() & 0o7777
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_private_write_replaces_a_leftover_and_lands_whole_with_mode_0600() {
        let dir = scratch("files-write");
        private_dir(&dir, true).unwrap();
        let (tmp, dest) = (dir.join("t.tmp"), dir.join("f.json"));
        fs::write(&tmp, b"left by a crash").unwrap();
        write_private(&tmp, &dest, b"{}", true).unwrap();
        assert_eq!(fs::read(&dest).unwrap(), b"{}");
        assert!(!tmp.exists());
        assert_eq!(fs::metadata(&dest).unwrap().mode() & 0o777, 0o600);

        // A fresh name that is taken refuses the write.
        std::os::unix::fs::symlink(&dest, &tmp).unwrap();
        let e = write_private_fresh(&tmp, &dest, b"[]", false, |_| Ok(())).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AlreadyExists);
        fs::remove_file(&tmp).unwrap();

        let e = write_private_fresh(&tmp, &dest, b"[]", false, |s| match s {
            Step::Written => Err(io::Error::other("stop")),
            Step::Renaming => Ok(()),
        })
        .unwrap_err();
        assert_eq!(e.to_string(), "stop");
        assert_eq!(fs::read(&dest).unwrap(), b"{}", "the old file stays whole");
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_read_back_takes_only_a_regular_file_within_its_bound() {
        let dir = scratch("files-read");
        private_dir(&dir, true).unwrap();
        let file = dir.join("f.json");
        fs::write(&file, b"0123456789").unwrap();
        assert_eq!(read_regular(&file, 10).unwrap(), b"0123456789");
        let e = read_regular(&file, 9).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        assert_eq!(e.to_string(), "it is larger than 9 bytes");
        let sub = dir.join("d");
        fs::create_dir(&sub).unwrap();
        let e = read_regular(&sub, 10).unwrap_err();
        assert_eq!(e.to_string(), "it is a directory, not a regular file");
        let link = dir.join("l");
        std::os::unix::fs::symlink(&file, &link).unwrap();
        let e = read_regular(&link, 10).unwrap_err();
        assert_eq!(e.to_string(), "it is a symlink, not a regular file");
        // open(2) refuses a socket (ENXIO): the error names the kind.
        let sock = dir.join("s");
        let _listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
        let e = read_regular(&sock, 10).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        assert_eq!(e.to_string(), "it is a socket, not a regular file");
        let gone = read_regular(&dir.join("none"), 10).unwrap_err();
        assert_eq!(gone.kind(), io::ErrorKind::NotFound);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_private_dir_is_created_0700_and_an_open_one_is_refused() {
        let dir = scratch("files-dir");
        assert!(matches!(
            private_dir(&dir, false),
            Err(DirError::Inspect(_))
        ));
        private_dir(&dir, true).unwrap();
        assert_eq!(fs::metadata(&dir).unwrap().mode() & 0o777, 0o700);
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o750)).unwrap();
        let e = private_dir(&dir, true).unwrap_err().to_string();
        assert_eq!(
            e,
            "has mode 0750, which gives group or other access (it must be 0700)"
        );
        let file = dir.join("f");
        fs::write(&file, b"").unwrap();
        let e = private_dir(&file, false).unwrap_err().to_string();
        assert_eq!(e, "is not a directory");
        fs::remove_dir_all(&dir).unwrap();
    }
}
