//! The zcoder frame (docs/protocol.md §9): `ZCODER-AGENT/1 <n>\n` plus n
//! bytes of one flat JSON object, read under a byte bound and a deadline.

use serde_json::{Map, Value};
use std::io::{self, Read};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

/// The magic that starts a zcoder connection.
pub const ZCODER_MAGIC: &[u8] = b"ZCODER-AGENT/1 ";

/// Encodes one zcoder frame.
pub fn zcoder_frame(payload: &[u8]) -> Vec<u8> {
    let mut out = format!("ZCODER-AGENT/1 {}\n", payload.len()).into_bytes();
    out.extend_from_slice(payload);
    out
}

/// An ack frame's payload (docs/zcoder.md): `pong`, or one of zcoder's
/// statuses, with the instance's state.
#[derive(Clone, Debug, serde::Serialize)]
pub struct ZcoderAck<'a> {
    pub message_id: &'a str,
    pub protocol: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub queue_position: Option<usize>,
    pub state: &'a str,
    pub status: &'a str,
    #[serde(rename = "type")]
    pub kind: &'static str,
}

impl ZcoderAck<'_> {
    /// The ack as one frame.
    pub fn frame(&self) -> Vec<u8> {
        zcoder_frame(&serde_json::to_vec(self).expect("strings and numbers serialize"))
    }
}

/// What a zcoder request's payload says before its kind's own fields:
/// its message id (empty when not a string), whether it speaks protocol
/// 1, its `type`, and the `target_instance_id` a ping names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ZcoderHead {
    pub message_id: String,
    pub protocol_one: bool,
    pub kind: Option<String>,
    /// `None` when absent; `Some(None)` when not a string.
    pub target: Option<Option<String>>,
}

impl ZcoderHead {
    pub fn read(obj: &Map<String, Value>) -> ZcoderHead {
        let text = |k: &str| obj.get(k).and_then(Value::as_str).map(String::from);
        ZcoderHead {
            message_id: text("message_id").unwrap_or_default(),
            protocol_one: obj.get("protocol").and_then(Value::as_u64) == Some(1),
            kind: text("type"),
            target: obj
                .get("target_instance_id")
                .map(|_| text("target_instance_id")),
        }
    }
}

/// Why a zcoder frame could not be read.
#[derive(Debug, PartialEq, Eq)]
pub enum FrameError {
    BadHeader(String),
    TooLarge(usize),
    Short,
    Timeout,
    Io(String),
    NotFlat(String),
}

impl std::fmt::Display for FrameError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FrameError::BadHeader(m) => write!(f, "bad frame header: {m}"),
            FrameError::TooLarge(n) => write!(f, "frame of {n} bytes is over the limit"),
            FrameError::Short => f.write_str("frame payload ended early"),
            FrameError::Timeout => f.write_str("frame not completed within the I/O timeout"),
            FrameError::Io(m) => write!(f, "read failed: {m}"),
            FrameError::NotFlat(m) => write!(f, "payload is not one flat JSON object: {m}"),
        }
    }
}

/// Reads one zcoder frame (magic, decimal length, `\n`, payload) within a
/// deadline. `prefix` holds bytes already read from the stream.
pub fn read_zcoder_frame(
    stream: &mut UnixStream,
    prefix: &[u8],
    max: usize,
    timeout: Duration,
) -> Result<Map<String, Value>, FrameError> {
    let deadline = Instant::now() + timeout;
    let mut got = prefix.to_vec();
    // The header is the magic, at most 8 digits and `\n`.
    let header_max = ZCODER_MAGIC.len() + 9;
    let header_end = loop {
        if let Some(i) = got.iter().position(|&b| b == b'\n') {
            break i;
        }
        if got.len() >= header_max {
            return Err(FrameError::BadHeader("no newline after the length".into()));
        }
        let mut byte = [0u8; 64];
        let want = (header_max - got.len()).min(byte.len());
        let n = read_some(stream, &mut byte[..want], deadline)?;
        if n == 0 {
            return Err(FrameError::BadHeader(
                "connection closed in the header".into(),
            ));
        }
        got.extend_from_slice(&byte[..n]);
    };
    let n = zcoder_length(&got[..header_end], max)?;
    let mut payload = got[header_end + 1..].to_vec();
    payload.truncate(n);
    let mut filled = payload.len();
    payload.resize(n, 0);
    while filled < n {
        let k = read_some(stream, &mut payload[filled..], deadline)?;
        if k == 0 {
            return Err(FrameError::Short);
        }
        filled += k;
    }
    parse_flat(&payload)
}

/// The payload length a zcoder header line (without its `\n`) declares:
/// decimal, 1 to `max`.
pub fn zcoder_length(header: &[u8], max: usize) -> Result<usize, FrameError> {
    if !header.starts_with(ZCODER_MAGIC) {
        return Err(FrameError::BadHeader("missing ZCODER-AGENT/1".into()));
    }
    let digits = &header[ZCODER_MAGIC.len()..];
    if digits.is_empty() || digits.len() > 8 || !digits.iter().all(u8::is_ascii_digit) {
        return Err(FrameError::BadHeader(
            "length is not a decimal number".into(),
        ));
    }
    // At most 8 digits: no overflow.
    let n = (digits.iter()).fold(0, |n, d| n * 10 + usize::from(d - b'0'));
    if n == 0 {
        return Err(FrameError::BadHeader("length is zero".into()));
    }
    if n > max {
        return Err(FrameError::TooLarge(n));
    }
    Ok(n)
}

/// One read into `buf` before `deadline`: how many bytes, 0 at the end.
pub(super) fn read_some(
    stream: &mut UnixStream,
    buf: &mut [u8],
    deadline: Instant,
) -> Result<usize, FrameError> {
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(FrameError::Timeout);
        }
        stream
            .set_read_timeout(Some(left))
            .map_err(|e| FrameError::Io(e.to_string()))?;
        match stream.read(buf) {
            Ok(n) => return Ok(n),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if super::timed_out(&e) => return Err(FrameError::Timeout),
            Err(e) => return Err(FrameError::Io(e.to_string())),
        }
    }
}

/// Parses a payload that must be one JSON object whose values are all
/// scalars (zcoder's parser reads nothing else).
pub fn parse_flat(payload: &[u8]) -> Result<Map<String, Value>, FrameError> {
    let v: Value =
        serde_json::from_slice(payload).map_err(|e| FrameError::NotFlat(e.to_string()))?;
    let Value::Object(obj) = v else {
        return Err(FrameError::NotFlat("not an object".into()));
    };
    if let Some((k, _)) = obj
        .iter()
        .find(|(_, v)| matches!(v, Value::Object(_) | Value::Array(_)))
    {
        return Err(FrameError::NotFlat(format!("field {k:?} is nested")));
    }
    Ok(obj)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn zcoder_frame_round_trip_and_refusals() {
        let t = Duration::from_secs(1);
        let frame = zcoder_frame(br#"{"type":"ping","protocol":1}"#);
        let (mut a, mut b) = UnixStream::pair().unwrap();
        b.write_all(&frame).unwrap();
        let obj = read_zcoder_frame(&mut a, b"", 65536, t).unwrap();
        assert_eq!(obj["type"], "ping");

        let cases: &[(&[u8], FrameError)] = &[
            (
                b"ZCODER-AGENT/1 0\n",
                FrameError::BadHeader("length is zero".into()),
            ),
            (
                b"ZCODER-AGENT/1 1x\n",
                FrameError::BadHeader("length is not a decimal number".into()),
            ),
            (b"ZCODER-AGENT/1 70000\n", FrameError::TooLarge(70000)),
            (b"ZCODER-AGENT/1 10\n{}", FrameError::Short),
            (
                b"ZCODER-AGENT/1 8\n{\"a\":[]}",
                FrameError::NotFlat("field \"a\" is nested".into()),
            ),
        ];
        for (input, want) in cases {
            let (mut a, mut b) = UnixStream::pair().unwrap();
            b.write_all(input).unwrap();
            drop(b);
            assert_eq!(
                &read_zcoder_frame(&mut a, b"", 65536, t).unwrap_err(),
                want,
                "{}",
                String::from_utf8_lossy(input)
            );
        }
    }
}
