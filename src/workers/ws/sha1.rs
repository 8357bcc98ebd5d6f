//! SHA-1 (FIPS 180-4 §6.1), written here for the one thing baton needs it
//! for: the WebSocket handshake's `Sec-WebSocket-Accept` (RFC 6455 §4.2.2).
//! SHA-1 is broken for collisions; the handshake uses it only to show that
//! the server understood the upgrade, never for security.

/// The initial hash value (FIPS 180-4 §5.3.1).
const H0: [u32; 5] = [0x67452301, 0xefcdab89, 0x98badcfe, 0x10325476, 0xc3d2e1f0];

/// Returns the SHA-1 digest of `data`.
pub fn sha1(data: &[u8]) -> [u8; 20] {
    let mut state = H0;
    let mut blocks = data.chunks_exact(64);
    for block in &mut blocks {
        compress(&mut state, block);
    }
    // Padding (§5.1.1): a 1 bit, zeros, then the length in bits as a
    // big-endian u64, filling one or two final blocks.
    let rest = blocks.remainder();
    let mut tail = [0u8; 128];
    tail[..rest.len()].copy_from_slice(rest);
    tail[rest.len()] = 0x80;
    let end = if rest.len() < 56 { 64 } else { 128 };
    let bits = (data.len() as u64).wrapping_mul(8);
    tail[end - 8..end].copy_from_slice(&bits.to_be_bytes());
    for block in tail[..end].chunks_exact(64) {
        compress(&mut state, block);
    }
    let mut out = [0u8; 20];
    for (to, word) in out.chunks_exact_mut(4).zip(state) {
        to.copy_from_slice(&word.to_be_bytes());
    }
    out
}

/// Applies the SHA-1 compression function to one 512-bit block (§6.1.2).
fn compress(state: &mut [u32; 5], block: &[u8]) {
    let mut w = [0u32; 80];
    for (t, word) in block.chunks_exact(4).enumerate() {
        w[t] = u32::from_be_bytes([word[0], word[1], word[2], word[3]]);
    }
    for t in 16..80 {
        w[t] = (w[t - 3] ^ w[t - 8] ^ w[t - 14] ^ w[t - 16]).rotate_left(1);
    }
    let [mut a, mut b, mut c, mut d, mut e] = *state;
    for (t, wt) in w.iter().enumerate() {
        let (f, k) = match t {
            0..20 => ((b & c) | (!b & d), 0x5a827999),
            20..40 => (b ^ c ^ d, 0x6ed9eba1),
            40..60 => ((b & c) | (b & d) | (c & d), 0x8f1bbcdc),
            _ => (b ^ c ^ d, 0xca62c1d6),
        };
        let temp = a
            .rotate_left(5)
            .wrapping_add(f)
            .wrapping_add(e)
            .wrapping_add(k)
            .wrapping_add(*wt);
        (e, d, c, b, a) = (d, c, b.rotate_left(30), a, temp);
    }
    for (s, v) in state.iter_mut().zip([a, b, c, d, e]) {
        *s = s.wrapping_add(v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(digest: [u8; 20]) -> String {
        digest.iter().map(|b| format!("{b:02x}")).collect()
    }

    // FIPS 180-4's examples (csrc.nist.gov, SHA1.pdf) and RFC 3174 §7.3.
    #[test]
    fn published_vectors() {
        let cases: [(&[u8], &str); 3] = [
            (b"abc", "a9993e364706816aba3e25717850c26c9cd0d89d"),
            (
                b"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
                "84983e441c3bd26ebaae4aa1f95129e5e54670f1",
            ),
            (b"", "da39a3ee5e6b4b0d3255bfef95601890afd80709"),
        ];
        for (input, want) in cases {
            assert_eq!(
                hex(sha1(input)),
                want,
                "{:?}",
                String::from_utf8_lossy(input)
            );
        }
    }

    #[test]
    fn one_million_a() {
        let input = vec![b'a'; 1_000_000];
        assert_eq!(
            hex(sha1(&input)),
            "34aa973cd4c4daa4f61eeb2bdbad27316534016f"
        );
    }

    // RFC 3174 §7.3's fourth test (64 bytes, ten times), and the lengths at
    // the padding's edge, where the length no longer fits the last block
    // (55 fits, 56 does not; 64 is one whole block), as Python's hashlib
    // gives them.
    #[test]
    fn rfc3174_repeated_and_padding_edges() {
        let input = b"0123456701234567012345670123456701234567012345670123456701234567".repeat(10);
        assert_eq!(
            hex(sha1(&input)),
            "dea356a2cddd90c7a7ecedc5ebb563934f460452"
        );
        let want = [
            (55, "c1c8bbdc22796e28c0e15163d20899b65621d65a"),
            (56, "c2db330f6083854c99d4b5bfb6e8f29f201be699"),
            (64, "0098ba824b5c16427bd7a1122a5a442a25ec644d"),
        ];
        for (n, digest) in want {
            assert_eq!(hex(sha1(&vec![b'a'; n])), digest, "{n} bytes");
        }
    }
}
