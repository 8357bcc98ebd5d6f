//! A task file is whole or absent, and named for its place in the queue:
//! `<sequence, 16 digits>-<id>.json`, holding the task as JSON whose body
//! matches its digest. What the files say and how they are read back
//! (bounded, never through a symlink, never waiting on a FIFO or a
//! device in a file's place); the spool only renames them.

use super::{Sender, Task};
use crate::base::digest::sha256_hex;
use crate::base::error::Invalid;
use crate::base::error::{Error, Result};
use crate::base::files;
use crate::wire::TaskMode;
use serde::Serialize;
use serde_json::value::RawValue;
use std::fs;
use std::path::Path;

pub(super) const SEQ_WIDTH: usize = 16;

/// Sequence numbers are below this, a tenth of what a name's 16 digits
/// hold: numbering on from any number read back (a file's name, the
/// `sequence` lease) never reaches a name of more digits, which would not
/// be read back as a task's. Nothing baton writes comes near it.
pub(super) const SEQ_LIMIT: u64 = 10u64.pow(SEQ_WIDTH as u32 - 1);

/// The largest spool file read back; anything bigger is bad data. A task
/// file holds what its request line held (the body as its sender spelt
/// it, up to six times its size: `config::line_bound`) and what the
/// instance adds; so a receipt holds a reply of the body limit at most.
pub(super) const MAX_TASK_FILE: u64 = crate::base::config::MAX_BYTES_CEILING + 64 * 1024;

/// A body on its way into a task file or an event (`wire::body::BodyText`).
pub use crate::wire::body::BodyText as Body;

/// A task as its file holds it: `Task`'s fields in `Task`'s order, with
/// the body as a `Body`.
#[derive(Serialize)]
pub(super) struct TaskFile<'a> {
    message_id: &'a str,
    pub(super) body: Body<'a>,
    sender: &'a Sender,
    hop: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    in_reply_to: &'a Option<String>,
    mode: TaskMode,
    accepted_at: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    peer_pid: Option<u32>,
    wire: &'a str,
    digest: &'a str,
    seq: u64,
}

impl<'a> TaskFile<'a> {
    pub(super) fn new(t: &'a Task, body_json: Option<&'a RawValue>) -> TaskFile<'a> {
        TaskFile {
            message_id: &t.message_id,
            body: Body::new(&t.body, body_json),
            sender: &t.sender,
            hop: t.hop,
            in_reply_to: &t.in_reply_to,
            mode: t.mode,
            accepted_at: t.accepted_at,
            peer_pid: t.peer_pid,
            wire: &t.wire,
            digest: &t.digest,
            seq: t.seq,
        }
    }
}

pub(super) fn file_name(seq: u64, id: &str) -> String {
    // By hand rather than `format!`: one of these per accepted task.
    if seq >= 10u64.pow(SEQ_WIDTH as u32) {
        return format!("{seq}-{id}.json");
    }
    let mut digits = [b'0'; SEQ_WIDTH];
    let mut n = seq;
    for d in digits.iter_mut().rev() {
        *d = b'0' + (n % 10) as u8;
        n /= 10;
    }
    let mut name = String::with_capacity(SEQ_WIDTH + id.len() + 6);
    name.push_str(std::str::from_utf8(&digits).expect("ASCII digits"));
    name.push('-');
    name.push_str(id);
    name.push_str(".json");
    name
}

pub(super) fn parse_file_name(name: &str) -> Option<(u64, &str)> {
    let stem = name.strip_suffix(".json")?;
    let (seq, id) = stem.split_once('-')?;
    // Digits only: `parse` would take a leading `+`, and two names would
    // hold one place in the queue.
    if seq.len() != SEQ_WIDTH
        || !seq.bytes().all(|b| b.is_ascii_digit())
        || !crate::wire::valid_text_id(id)
    {
        return None;
    }
    Some((seq.parse().ok().filter(|&s| s < SEQ_LIMIT)?, id))
}

pub(super) fn receipt_name(id: &str) -> String {
    format!("{id}.json")
}

/// Reads a spool file back (bounded; never waiting on, nor following, what
/// stands in its place: `files::read_regular`).
pub(super) fn read_bounded(path: &Path) -> std::io::Result<Vec<u8>> {
    files::read_regular(path, MAX_TASK_FILE)
}

/// Reads a spool file back, as `read_bounded`: `Ok(Err(why))` when its
/// bytes cannot be had (bad data, not a regular file, gone), an error
/// when a resource ran short, which is no verdict on the file.
pub(super) fn read_checked(path: &Path) -> Result<std::result::Result<Vec<u8>, Invalid>> {
    match read_bounded(path) {
        Ok(b) => Ok(Ok(b)),
        Err(e) if crate::sys::shortage(&e).is_some() => Err(Error::io("read", path, e)),
        Err(e) => Ok(Err(Invalid(e.to_string()))),
    }
}

/// The task in the file `path`, named for `id`, if it reads back whole.
pub(super) fn read_task(path: &Path, id: &str) -> Option<Task> {
    parse_task(&read_bounded(path).ok()?, id).ok()
}

/// Parses and checks a task file: valid JSON, the id in its name, and a
/// body that matches its digest.
pub(super) fn parse_task(bytes: &[u8], id: &str) -> std::result::Result<Task, Invalid> {
    let task: Task =
        serde_json::from_slice(bytes).map_err(|e| Invalid(format!("not a task: {e}")))?;
    if task.message_id != id {
        return Err(format!(
            "file name says {id:?} but the task says {:?}",
            task.message_id
        )
        .into());
    }
    if sha256_hex(task.body.as_bytes()) != task.digest {
        return Err("body does not match its digest".into());
    }
    Ok(task)
}

/// Names of the regular files in a spool subdirectory, sorted.
pub(super) fn list(dir: &Path) -> Result<Vec<String>> {
    let failed = |e| Error::io("read directory", dir, e);
    let mut out = Vec::new();
    for entry in fs::read_dir(dir).map_err(failed)? {
        out.extend(entry.map_err(failed)?.file_name().into_string().ok());
    }
    out.sort();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names_are_the_zero_padded_sequence_then_the_id() {
        for seq in [0, 7, 1234567, 10u64.pow(16) - 1, 10u64.pow(16), u64::MAX] {
            assert_eq!(
                file_name(seq, "a.b-c"),
                format!("{seq:0width$}-a.b-c.json", width = SEQ_WIDTH)
            );
        }
        assert_eq!(parse_file_name(&file_name(42, "x")), Some((42, "x")));
        let last = SEQ_LIMIT - 1;
        assert_eq!(parse_file_name(&file_name(last, "x")), Some((last, "x")));
        assert_eq!(parse_file_name(&file_name(SEQ_LIMIT, "x")), None);
        assert_eq!(parse_file_name("+000000000000042-x.json"), None);
    }
}
