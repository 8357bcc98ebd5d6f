//! The std-only fuzz loop (issue 32): the checks of the cargo-fuzz
//! targets `wire` and `disk` (tests/reliability/fuzz/), run in process on a
//! fixed number of inputs made from valid seeds (a request line, a zcoder
//! frame, a manifest, a task file, receipt lines, `meta.json`,
//! `sequence`) by byte flips, truncation, splicing and inserted NULs,
//! newlines, huge numbers and invalid UTF-8. No libFuzzer, no time bound:
//! the same seed makes the same inputs on any machine. The seed is
//! printed, and `BATON_FUZZ_SEED` (decimal, or hex with `0x`) replays it.

// In this package, not in the fuzz crate's (tests/fuzz, which `cargo
// package` leaves out): the packaged tests build without it.
#[path = "fuzz/disk.rs"]
mod disk;
#[path = "fuzz/wire.rs"]
mod wire;

use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::path::PathBuf;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use crate::util::Rng;

/// The seed of this run: `BATON_FUZZ_SEED` (decimal or 0x-hex), else the
/// clock.
fn fuzz_seed() -> u64 {
    let Ok(v) = std::env::var("BATON_FUZZ_SEED") else {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        return now.as_nanos() as u64 ^ (u64::from(std::process::id()) << 40);
    };
    let t = v.trim();
    let parsed = match t.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => t.parse(),
    };
    parsed.unwrap_or_else(|_| panic!("BATON_FUZZ_SEED={v:?} is not a number"))
}

/// Which target an input goes to.
#[derive(Clone, Copy, Debug)]
enum Target {
    Wire,
    Disk,
}

/// A valid input of one selector: `select % modulus == selector`.
struct Seed {
    target: Target,
    selector: u8,
    bytes: Vec<u8>,
}

const SEND: &str = r#"{"jsonrpc":"2.0","id":7,"method":"message/send","params":{"message_id":"m-1","target_instance_id":"4242-1234567890123456","body":"fix the build: grüße","sender":{"instance_id":"77-1","name":"ops","workspace":"/work/ops"},"hop":1,"mode":"queue","in_reply_to":null}}"#;
const PARAMS: &str = r#"{"message_id":"m-1","target_instance_id":"4242-1234567890123456","body":"x","sender":{"name":"ops"},"hop":0,"mode":"steer"}"#;
const PAYLOAD: &str = r#"{"type":"enqueue","protocol":1,"message_id":"m-2","sender_instance_id":"cli-77","body":"hello","created_at":1788012102}"#;

fn seeds() -> Vec<Seed> {
    let seed = |target, selector, bytes: Vec<u8>| Seed {
        target,
        selector,
        bytes,
    };
    let frame = baton::wire::zcoder_frame(PAYLOAD.as_bytes());
    let lines =
        format!("{SEND}\n{{\"jsonrpc\":\"2.0\",\"id\":\"a\",\"method\":\"ping\"}}\n{SEND}\n");
    let other = disk::seed_receipt()
        .split(|&b| b == b'\n')
        .next()
        .map(|l| String::from_utf8_lossy(l).replace(disk::ID, "4242-3"))
        .unwrap_or_default();
    let log = [
        disk::seed_receipt(),
        format!("{other}\n").into_bytes(),
        disk::seed_receipt(),
    ]
    .concat();
    vec![
        seed(Target::Wire, 0, SEND.into()),
        seed(Target::Wire, 1, PARAMS.into()),
        seed(Target::Wire, 2, frame.clone()),
        seed(Target::Wire, 3, lines.into_bytes()),
        seed(Target::Wire, 4, frame),
        seed(Target::Disk, 0, disk::seed_manifest()),
        seed(Target::Disk, 1, disk::seed_task_file()),
        seed(Target::Disk, 2, log),
        seed(Target::Disk, 3, disk::seed_receipt()),
        seed(Target::Disk, 4, disk::seed_meta()),
        seed(Target::Disk, 5, b"1024\n".to_vec()),
    ]
}

/// What mutations insert: NULs, newlines, numbers past every integer
/// type, invalid UTF-8, JSON that no value serializes to.
const FRAGMENTS: &[&[u8]] = &[
    b"\0",
    b"\n",
    b"\r\n",
    b"\xff",
    b"\xc0\x80",
    b"\xed\xa0\x80",
    b"\xf4\x90\x80\x80",
    b"18446744073709551615",
    b"18446744073709551616",
    b"99999999999999999999999999",
    b"9999999999999999",
    b"-9223372036854775809",
    b"-1",
    b"1e999",
    b"-0",
    b"0.5",
    b"\"\\ud800\"",
    b"\"\\u0000\"",
    b"null",
    b"[]",
    b"{}",
    b"[[[[[[[[",
    b",",
    b"\"",
    b"\\",
    b"}",
];

/// A copy of `seed` with 1 to 4 byte-level mutations (splices from
/// `others`); one in 20 is left whole.
fn mutate(r: &mut Rng, seed: &[u8], others: &[Seed]) -> Vec<u8> {
    let mut b = seed.to_vec();
    if r.one_in(20) {
        return b;
    }
    for _ in 0..1 + r.below(4) {
        let at = r.below(b.len() + 1);
        match r.below(10) {
            0 if !b.is_empty() => {
                let i = r.below(b.len());
                b[i] ^= 1 << r.below(8);
            }
            1 if !b.is_empty() => {
                let i = r.below(b.len());
                b[i] = r.byte();
            }
            2 | 3 => {
                let frag = *r.pick(FRAGMENTS);
                b.splice(at..at, frag.iter().copied());
            }
            4 => b.truncate(at),
            5 if at < b.len() => {
                let end = (at + 1 + r.below(24)).min(b.len());
                b.drain(at..end);
            }
            6 if at < b.len() => {
                let end = (at + 1 + r.below(64)).min(b.len());
                let dup = b[at..end].to_vec();
                b.splice(at..at, dup);
            }
            7 => {
                // A piece of another seed, in place of a piece of this one.
                let from = &r.pick(others).bytes;
                let start = r.below(from.len() + 1);
                let piece = &from[start..(start + r.below(64)).min(from.len())];
                let end = (at + r.below(16)).min(b.len());
                b.splice(at..end, piece.iter().copied());
            }
            8 => {
                // A number in place of the digits that start here.
                let end = at + b[at..].iter().take_while(|c| c.is_ascii_digit()).count();
                let frag = *r.pick(&FRAGMENTS[7..16]);
                b.splice(at..end, frag.iter().copied());
            }
            _ => b.insert(at, r.byte()),
        }
    }
    b
}

/// A selector byte of `target` for `selector`, the other bits random.
fn select(r: &mut Rng, target: Target, selector: u8) -> u8 {
    let modulus = match target {
        Target::Wire => 5,
        Target::Disk => 6,
    };
    loop {
        let b = r.byte();
        if b % modulus == selector {
            return b;
        }
    }
}

fn show(bytes: &[u8]) -> String {
    bytes.iter().map(|b| b.escape_ascii().to_string()).collect()
}

/// Runs `wires` inputs of the wire target, then `disks` of the disk
/// target (each costs a spool opened twice). Panics (after printing the
/// input, its number and the seed) at the first that fails a check.
pub fn fuzz_loop(test: &str, wires: usize, disks: usize) {
    let seed = fuzz_seed();
    eprintln!("{test}: seed {seed} (BATON_FUZZ_SEED={seed} replays it)");
    let mut r = Rng::new(seed);
    let seeds = seeds();
    let scratch = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("fuzz-{test}.{}", std::process::id()));
    std::fs::create_dir_all(&scratch).unwrap();
    let started = Instant::now();
    for n in 0..wires + disks {
        let wire = n < wires;
        let pool: Vec<&Seed> = seeds
            .iter()
            .filter(|s| matches!(s.target, Target::Wire) == wire)
            .collect();
        let s = *r.pick(&pool);
        let mut data = vec![select(&mut r, s.target, s.selector)];
        data.extend(mutate(&mut r, &s.bytes, &seeds));
        let ran = catch_unwind(AssertUnwindSafe(|| match s.target {
            Target::Wire => wire::run(&data),
            Target::Disk => disk::run(&scratch, &data),
        }));
        if let Err(panic) = ran {
            eprintln!(
                "\n{test}: input {n} ({:?} target, {} bytes) failed: \"{}\"\nseed {seed}: replay with\n    BATON_SLOW=1 BATON_FUZZ_SEED={seed} cargo test --features failpoints --test reliability {test}\n",
                s.target,
                data.len(),
                show(&data)
            );
            resume_unwind(panic);
        }
    }
    let _ = std::fs::remove_dir_all(&scratch);
    eprintln!(
        "{test}: {wires} wire and {disks} disk inputs in {:.1} s, seed {seed}",
        started.elapsed().as_secs_f64()
    );
}

/// Inputs the loop found, each of which failed before its fix: what it
/// is, and the input (its first byte picks the disk target's file).
const DISK_REGRESSIONS: &[(&str, &[u8])] = &[
    // Numbered on from it, an accepted task was named past the 16 digits
    // of a task file's name, and set aside at the next open as not a task.
    ("a sequence of 19 digits", b"\x051029999999999999999\n"),
    // Numbered on from it, the next number overflowed.
    ("a sequence of u64::MAX", b"\x0518446744073709551615"),
];

/// Runs the inputs of `DISK_REGRESSIONS` through the disk target.
pub fn regressions(test: &str) {
    let scratch = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("fuzz-{test}.{}", std::process::id()));
    std::fs::create_dir_all(&scratch).unwrap();
    for (what, data) in DISK_REGRESSIONS {
        let ran = catch_unwind(AssertUnwindSafe(|| disk::run(&scratch, data)));
        if let Err(panic) = ran {
            eprintln!("{test}: {what} (\"{}\") failed", show(data));
            resume_unwind(panic);
        }
    }
    let _ = std::fs::remove_dir_all(&scratch);
}
