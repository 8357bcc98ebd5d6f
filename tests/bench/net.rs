//! The client side of the benchmarks, and the baselines written in Rust:
//! a line client with deadlines, the request lines baton reads, and the
//! floor servers (a bare echo; store each request as a file, then echo).

use serde_json::{Value, json};
use std::fs::{self, File, OpenOptions};
use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

/// Read and write deadline of every benchmark connection.
pub const IO_TIMEOUT: Duration = Duration::from_secs(20);

/// A persistent connection that sends a line and reads one line back.
pub struct LineClient {
    w: UnixStream,
    r: BufReader<UnixStream>,
    buf: Vec<u8>,
}

impl LineClient {
    pub fn connect(path: &Path) -> io::Result<LineClient> {
        let w = UnixStream::connect(path)?;
        w.set_read_timeout(Some(IO_TIMEOUT))?;
        w.set_write_timeout(Some(IO_TIMEOUT))?;
        let r = BufReader::with_capacity(1 << 16, w.try_clone()?);
        Ok(LineClient {
            w,
            r,
            buf: Vec::with_capacity(1 << 16),
        })
    }

    /// Connects to a baton instance and says `initialize`.
    pub fn baton(path: &Path) -> Result<LineClient, String> {
        let mut c = LineClient::connect(path).map_err(|e| format!("connect: {e}"))?;
        let answer = c
            .round_trip(&init_line(0))
            .map_err(|e| format!("initialize: {e}"))?;
        if !contains(answer, b"\"result\"") {
            return Err(format!(
                "initialize answered {}",
                String::from_utf8_lossy(answer)
            ));
        }
        Ok(c)
    }

    /// Writes `line` (with its `\n`) and returns the next line read.
    pub fn round_trip(&mut self, line: &[u8]) -> io::Result<&[u8]> {
        self.w.write_all(line)?;
        self.read_line()
    }

    pub fn read_line(&mut self) -> io::Result<&[u8]> {
        self.buf.clear();
        let n = self.r.read_until(b'\n', &mut self.buf)?;
        if n == 0 || self.buf.last() != Some(&b'\n') {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "connection closed",
            ));
        }
        Ok(&self.buf)
    }
}

pub fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

fn line(v: &Value) -> Vec<u8> {
    let mut out = serde_json::to_vec(v).expect("serializes");
    out.push(b'\n');
    out
}

pub fn init_line(id: u64) -> Vec<u8> {
    line(&json!({"jsonrpc": "2.0", "id": id, "method": "initialize",
        "params": {"protocol_version": 1, "client": {"name": "baton-bench", "version": "1"}}}))
}

/// A `message/send` from a plain sender (no instance id).
pub fn send_line(id: u64, message_id: &str, target: &str, body: &str) -> Vec<u8> {
    line(
        &json!({"jsonrpc": "2.0", "id": id, "method": "message/send",
        "params": {"message_id": message_id, "target_instance_id": target,
                   "body": body, "sender": {}, "hop": 0}}),
    )
}

pub fn subscribe_line(id: u64) -> Vec<u8> {
    line(&json!({"jsonrpc": "2.0", "id": id, "method": "events/subscribe", "params": {}}))
}

/// Checks that a `message/send` answer says `accepted`.
pub fn check_accepted(answer: &[u8]) -> Result<(), String> {
    if contains(answer, b"\"status\":\"accepted\"") {
        Ok(())
    } else {
        Err(format!(
            "message/send answered {}",
            String::from_utf8_lossy(answer).trim()
        ))
    }
}

/// What a floor server does with each request line before echoing it.
#[derive(Clone)]
pub enum Store {
    /// Nothing: a bare echo.
    Echo,
    /// Create `tmp/<n>`, write, rename into `inbox/`; with `durable`, fsync
    /// the file before the rename and the directory after it.
    Files { dir: PathBuf, durable: bool },
}

/// A floor server: one accept thread, one thread per connection, like
/// baton's listener. Stopped (and its socket removed) on drop.
pub struct Floor {
    pub path: PathBuf,
    stop: Arc<AtomicBool>,
}

impl Floor {
    pub fn start(path: PathBuf, store: Store) -> Result<Floor, String> {
        if let Store::Files { dir, .. } = &store {
            for d in [dir.clone(), dir.join("tmp"), dir.join("inbox")] {
                crate::world::mkdir(&d).map_err(|e| format!("{}: {e}", d.display()))?;
            }
        }
        let listener = UnixListener::bind(&path).map_err(|e| format!("bind: {e}"))?;
        let stop = Arc::new(AtomicBool::new(false));
        let s = Arc::clone(&stop);
        let seq = Arc::new(AtomicU64::new(0));
        thread::spawn(move || {
            for conn in listener.incoming() {
                if s.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(conn) = conn else { continue };
                let (store, seq) = (store.clone(), Arc::clone(&seq));
                thread::spawn(move || floor_connection(conn, &store, &seq));
            }
        });
        Ok(Floor { path, stop })
    }
}

impl Drop for Floor {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = UnixStream::connect(&self.path);
        let _ = fs::remove_file(&self.path);
    }
}

fn floor_connection(conn: UnixStream, store: &Store, seq: &AtomicU64) {
    let _ = conn.set_write_timeout(Some(IO_TIMEOUT));
    let Ok(mut w) = conn.try_clone() else { return };
    let mut r = BufReader::with_capacity(1 << 16, conn);
    let mut buf = Vec::with_capacity(1 << 16);
    loop {
        buf.clear();
        match r.read_until(b'\n', &mut buf) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        if let Store::Files { dir, durable } = store {
            let n = seq.fetch_add(1, Ordering::Relaxed);
            let name = format!("{n:016}.json");
            if store_file(dir, &name, &buf, *durable, *durable).is_err() {
                return;
            }
        }
        if w.write_all(&buf).is_err() {
            return;
        }
    }
}

/// The design's minimum for one durable task: create, write, (fsync),
/// rename, (fsync the directory).
pub fn store_file(
    dir: &Path,
    name: &str,
    data: &[u8],
    file_sync: bool,
    dir_sync: bool,
) -> io::Result<()> {
    let tmp = dir.join("tmp").join(name);
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&tmp)?;
    f.write_all(data)?;
    if file_sync {
        f.sync_all()?;
    }
    drop(f);
    let inbox = dir.join("inbox");
    fs::rename(&tmp, inbox.join(name))?;
    if dir_sync {
        File::open(&inbox)?.sync_all()?;
    }
    Ok(())
}

/// The raw loop: `writers` threads each storing `each` files durably in
/// `dir` as fast as they can, files `from..from + each` of each. Without
/// `dir_sync` it skips the directory fsync (not durable: the ceiling of
/// what sharing those syncs can gain). Returns the wall time.
pub fn raw_writers(
    dir: &Path,
    writers: usize,
    from: usize,
    each: usize,
    data: &[u8],
    dir_sync: bool,
) -> Result<Duration, String> {
    for d in [dir.to_path_buf(), dir.join("tmp"), dir.join("inbox")] {
        crate::world::mkdir(&d).map_err(|e| format!("{}: {e}", d.display()))?;
    }
    let t0 = Instant::now();
    let results: Vec<io::Result<()>> = thread::scope(|s| {
        let handles: Vec<_> = (0..writers)
            .map(|w| {
                s.spawn(move || {
                    for i in from..from + each {
                        store_file(dir, &format!("w{w}-{i:08}.json"), data, true, dir_sync)?;
                    }
                    Ok(())
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err(io::Error::other("panic"))))
            .collect()
    });
    let wall = t0.elapsed();
    for r in results {
        r.map_err(|e| format!("raw writer: {e}"))?;
    }
    Ok(wall)
}

/// The Rust one-shot client (`--oneshot SOCKET`), the baseline of `baton
/// send` when socat is missing: stdin to the socket, half-close, the
/// socket to stdout until the server closes.
pub fn oneshot(socket: &str) -> i32 {
    let mut input = Vec::new();
    if io::stdin().read_to_end(&mut input).is_err() {
        return 2;
    }
    let Ok(mut s) = UnixStream::connect(socket) else {
        return 1;
    };
    let _ = s.set_read_timeout(Some(IO_TIMEOUT));
    if s.write_all(&input).is_err() || s.shutdown(std::net::Shutdown::Write).is_err() {
        return 1;
    }
    let mut out = Vec::new();
    if s.read_to_end(&mut out).is_err() {
        return 1;
    }
    if io::stdout().write_all(&out).is_err() {
        return 1;
    }
    0
}
