//! The wire target: baton's wire parsers. Shared by the cargo-fuzz
//! target `wire` (tests/fuzz/fuzz_targets/wire.rs) and the std-only loop
//! of tests/reliability/fuzz.rs; it needs std, serde_json and baton only.
//!
//! The first byte of an input picks the parser (`% 5`) and the line or
//! frame bound (`>> 4`); the rest is what a peer sends. The checks are
//! those of `tests/hostile.rs`: no panic, never a buffer past the bound,
//! an invalid object answered with one line, a frame length only from 1
//! to the bound, a flat payload only of scalars, a frame read back as the
//! payload it was made of.

use baton::server::SendRequest;
use baton::wire::{self, Incoming, LineReader, ReadError};
use serde_json::Value;
use std::io::Write;
use std::os::unix::net::UnixStream;
use std::time::Duration;

/// Bounds around the reader's growth steps and `BATON_MAX_BYTES`' range.
const MAXES: [usize; 8] = [1, 16, 1024, 4095, 4097, 5000, 65536, 16 * 1024 * 1024];
/// Socket pairs buffer this much whole; longer inputs are cut.
const MAX_INPUT: usize = 60 * 1024;
const T: Duration = Duration::from_secs(1);

/// One input: the first byte picks the parser and the bound.
pub fn run(data: &[u8]) {
    let Some((&select, input)) = data.split_first() else {
        return;
    };
    let max = MAXES[usize::from(select >> 4) % MAXES.len()];
    match select % 5 {
        0 => envelope(input),
        1 => send_params(input),
        2 => zcoder_header(input, max),
        3 => lines(input, max),
        _ => frame(input, max, usize::from(select)),
    }
}

/// Every answer the server writes for a line is one line of JSON.
fn one_line(bytes: &[u8]) {
    assert_eq!(bytes.last(), Some(&b'\n'));
    assert_eq!(bytes.iter().filter(|&&b| b == b'\n').count(), 1);
    serde_json::from_slice::<Value>(bytes).expect("an answer is JSON");
}

fn envelope(line: &[u8]) {
    match wire::classify(line) {
        Incoming::Invalid { id, code, message } => {
            assert!(matches!(code, wire::PARSE_ERROR | wire::INVALID_REQUEST));
            assert!(matches!(
                id.to_value(),
                Value::Null | Value::String(_) | Value::Number(_)
            ));
            one_line(&wire::error_line(&id, code, &message, None));
        }
        Incoming::Request { id, method, params } => {
            assert!(matches!(
                id.to_value(),
                Value::Null | Value::String(_) | Value::Number(_)
            ));
            one_line(&wire::result_line(&id, &Value::Null));
            if method == "message/send" {
                if let Value::Object(p) = params {
                    let _ = SendRequest::read(&p);
                }
            }
        }
        Incoming::Notification { .. } | Incoming::Reply { .. } => {}
    }
}

fn send_params(input: &[u8]) {
    let Ok(Value::Object(p)) = serde_json::from_slice::<Value>(input) else {
        return;
    };
    if let Err(e) = SendRequest::read(&p).map_err(baton::server::RpcError::from) {
        assert_eq!(e.code, wire::INVALID_PARAMS);
        assert!(e.message.starts_with("invalid params: "));
    }
}

fn zcoder_header(input: &[u8], max: usize) {
    let end = input
        .iter()
        .position(|&b| b == b'\n')
        .unwrap_or(input.len());
    if let Ok(n) = wire::zcoder_length(&input[..end], max) {
        assert!((1..=max).contains(&n));
    }
    let payload = input.get(end + 1..).unwrap_or_default();
    flat(payload);
    // A frame made of a payload reads back as that payload.
    if !payload.is_empty() && payload.len() + 32 <= MAX_INPUT {
        let made = wire::zcoder_frame(payload);
        let got = wire::read_zcoder_frame(&mut loaded(&made), b"", payload.len(), T);
        assert_eq!(got.ok(), wire::parse_flat(payload).ok());
    }
}

fn flat(payload: &[u8]) {
    if let Ok(obj) = wire::parse_flat(payload) {
        assert!(obj.values().all(|v| !v.is_object() && !v.is_array()));
    }
}

/// A socket pair holding `input`, its writing end closed.
fn loaded(input: &[u8]) -> UnixStream {
    let (a, mut b) = UnixStream::pair().expect("socketpair");
    b.write_all(&input[..input.len().min(MAX_INPUT)])
        .expect("write");
    a
}

fn lines(input: &[u8], max: usize) {
    let mut reader = LineReader::new(loaded(input), max);
    loop {
        let got = reader.read_line(Some(T), T).map(<[u8]>::to_vec);
        assert!(reader.capacity() <= max + 1, "buffer past the bound");
        match got {
            Ok(line) => {
                assert!(line.len() <= max && !line.contains(&b'\n'));
                envelope(&line);
            }
            Err(ReadError::Eof | ReadError::Truncated | ReadError::TooLarge) => return,
            Err(e) => panic!("a closed stream gave {e:?}"),
        }
    }
}

/// The server's zcoder path (header line, then exactly n bytes) and the
/// client's (`read_zcoder_frame`, part of the frame already read).
fn frame(input: &[u8], max: usize, split: usize) {
    let mut reader = LineReader::new(loaded(input), max);
    if let Ok(header) = reader.read_line(Some(T), T) {
        if let Ok(n) = wire::zcoder_length(header, max) {
            match reader.read_exact_within(n, T) {
                Ok(payload) => {
                    assert_eq!(payload.len(), n);
                    assert!(payload.capacity() <= max, "payload past the bound");
                    flat(&payload);
                }
                Err(ReadError::Truncated) => {}
                Err(e) => panic!("a closed stream gave {e:?}"),
            }
        }
    }
    assert!(reader.capacity() <= max + 1, "buffer past the bound");

    let input = &input[..input.len().min(MAX_INPUT)];
    let (prefix, rest) = input.split_at(split.min(input.len()));
    let mut stream = loaded(rest);
    match wire::read_zcoder_frame(&mut stream, prefix, max, T) {
        Ok(obj) => assert!(obj.values().all(|v| !v.is_object() && !v.is_array())),
        Err(wire::FrameError::Timeout) => panic!("a closed stream timed out"),
        Err(_) => {}
    }
}
