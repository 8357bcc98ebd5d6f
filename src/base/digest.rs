//! SHA-256 (FIPS 180-4) implemented with the standard library only.
//!
//! baton needs a stable content digest (for fingerprints and integrity
//! checks) but must not pull in a crypto crate, so this is a small,
//! straightforward one-shot implementation. It is not constant-time and is
//! not meant for secrets; it only has to be correct and portable.
//!
//! Every accepted task's body is hashed on the connection's critical path,
//! so whole blocks go through the CPU's SHA extensions where it has them
//! (`sys::sha256_blocks`, detected at run time): about 9 µs for the
//! largest default body (16,000 bytes), where this portable code takes
//! about 55 (docs/performance.md, *SHA-256*). Both give the same digests
//! (tested below).

/// First 32 bits of the fractional parts of the cube roots of the first 64
/// primes (FIPS 180-4 §4.2.2).
const K: [u32; 64] = [
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
];

/// Initial hash value (FIPS 180-4 §5.3.3).
const H0: [u32; 8] = [
    0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
];

const BLOCK: usize = 64;

/// Returns the SHA-256 digest of `data`.
pub fn sha256(data: &[u8]) -> [u8; 32] {
    hash(data, |state, blocks| {
        if !crate::sys::sha256_blocks(state, blocks, &K) {
            portable(state, blocks);
        }
    })
}

/// The digest of `data`, its whole blocks (and then the padded tail)
/// handed to `compress`.
fn hash(data: &[u8], mut compress: impl FnMut(&mut [u32; 8], &[u8])) -> [u8; 32] {
    let mut state = H0;
    let whole = data.len() - data.len() % BLOCK;
    let (blocks, rest) = data.split_at(whole);
    compress(&mut state, blocks);

    // Padding: 0x80, zeros, then the message length in bits as a big-endian
    // u64. When the remainder leaves fewer than 9 free bytes the padding
    // spills into a second block, hence the two-block scratch buffer.
    let mut tail = [0u8; 2 * BLOCK];
    tail[..rest.len()].copy_from_slice(rest);
    tail[rest.len()] = 0x80;
    let tail_len = (rest.len() + 9).next_multiple_of(BLOCK);
    // Lengths are taken modulo 2^64 bits, as the standard specifies.
    let bit_len = (data.len() as u64).wrapping_mul(8);
    tail[tail_len - 8..tail_len].copy_from_slice(&bit_len.to_be_bytes());
    compress(&mut state, &tail[..tail_len]);

    let mut out = [0u8; 32];
    for (dst, word) in out.chunks_exact_mut(4).zip(state) {
        dst.copy_from_slice(&word.to_be_bytes());
    }
    out
}

/// Compresses whole blocks in portable code.
fn portable(state: &mut [u32; 8], blocks: &[u8]) {
    blocks
        .chunks_exact(BLOCK)
        .for_each(|block| compress(state, block));
}

/// Returns the SHA-256 digest of `data` as 64 lowercase hex characters.
pub fn sha256_hex(data: &[u8]) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let nibbles = sha256(data).into_iter().flat_map(|b| [b >> 4, b & 0x0f]);
    nibbles.map(|n| char::from(HEX[usize::from(n)])).collect()
}

/// Applies the SHA-256 compression function to one 512-bit block.
fn compress(state: &mut [u32; 8], block: &[u8]) {
    debug_assert_eq!(block.len(), BLOCK);
    let mut w = [0u32; 64];
    for (word, bytes) in w.iter_mut().zip(block.chunks_exact(4)) {
        *word = u32::from_be_bytes(bytes.try_into().expect("chunk is 4 bytes"));
    }
    for t in 16..64 {
        let s0 = w[t - 15].rotate_right(7) ^ w[t - 15].rotate_right(18) ^ (w[t - 15] >> 3);
        let s1 = w[t - 2].rotate_right(17) ^ w[t - 2].rotate_right(19) ^ (w[t - 2] >> 10);
        w[t] = w[t - 16]
            .wrapping_add(s0)
            .wrapping_add(w[t - 7])
            .wrapping_add(s1);
    }

    let [mut a, mut b, mut c, mut d, mut e, mut f, mut g, mut h] = *state;
    for (&k, &wt) in K.iter().zip(w.iter()) {
        let s1 = e.rotate_right(6) ^ e.rotate_right(11) ^ e.rotate_right(25);
        let ch = (e & f) ^ (!e & g);
        let t1 = h
            .wrapping_add(s1)
            .wrapping_add(ch)
            .wrapping_add(k)
            .wrapping_add(wt);
        let s0 = a.rotate_right(2) ^ a.rotate_right(13) ^ a.rotate_right(22);
        let maj = (a & b) ^ (a & c) ^ (b & c);
        let t2 = s0.wrapping_add(maj);
        h = g;
        g = f;
        f = e;
        e = d.wrapping_add(t1);
        d = c;
        c = b;
        b = a;
        a = t1.wrapping_add(t2);
    }

    for (s, v) in state.iter_mut().zip([a, b, c, d, e, f, g, h]) {
        *s = s.wrapping_add(v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fips_empty() {
        assert_eq!(
            sha256_hex(b""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }

    #[test]
    fn fips_abc() {
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn fips_448_bits() {
        assert_eq!(
            sha256_hex(b"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"
        );
    }

    #[test]
    fn fips_million_a() {
        let data = vec![b'a'; 1_000_000];
        assert_eq!(
            sha256_hex(&data),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"
        );
    }

    /// Lengths around the padding boundaries, where one- versus two-block
    /// padding is decided. Expected values come from coreutils `sha256sum`,
    /// an independent implementation, fed the same `a..z` cycling bytes.
    #[test]
    fn padding_boundaries_match_sha256sum() {
        let cases = [
            "595615dbe4f0f407ae397d08b4c2cb870cb9b0e11937416f950c5160acf9c005",
            "784f623b787495078e93ff28a25b581df0584055a7e71d8cd90c454716b92f51",
            "5ca3e1ef5207490eac01a795e5cc94d59582a5118bf9534665c8668d87aa647c",
            "2fcd5a0d60e4c941381fcc4e00a4bf8be422c3ddfafb93c809e8d1e2bfffae8e",
            "1b3cd1877ab2f2f19f7be001722554f336cb799df0329de0bb4c118dc6abc06d",
        ];
        for (len, want) in [55, 56, 63, 64, 65].into_iter().zip(cases) {
            let data: Vec<u8> = (0..len).map(|i| b'a' + (i % 26) as u8).collect();
            assert_eq!(sha256_hex(&data), want, "length {len}");
        }
    }

    /// The standard vectors on each path this CPU has, and the portable
    /// code against the SHA extensions on random lengths and bytes.
    #[test]
    fn the_sha_extensions_and_the_portable_code_agree() {
        let hex = |d: [u8; 32]| d.iter().map(|b| format!("{b:02x}")).collect::<String>();
        let million = vec![b'a'; 1_000_000];
        let vectors: [(&[u8], &str); 4] = [
            (
                b"",
                "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
            ),
            (
                b"abc",
                "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
            ),
            (
                b"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
                "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1",
            ),
            (
                &million,
                "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0",
            ),
        ];
        let extensions = |data: &[u8]| {
            let mut used = true;
            let d = hash(data, |state, blocks| {
                used &= crate::sys::sha256_blocks(state, blocks, &K);
            });
            used.then_some(d)
        };
        let has = extensions(b"").is_some();
        #[cfg(target_arch = "x86_64")]
        assert_eq!(has, std::arch::is_x86_feature_detected!("sha"));
        for (data, want) in vectors {
            assert_eq!(hex(hash(data, portable)), want);
            assert_eq!(hex(sha256(data)), want);
            if has {
                assert_eq!(extensions(data).map(hex).as_deref(), Some(want));
            }
        }
        // Every tail length (0 to 129 bytes: one block of padding or two),
        // then 300 random lengths up to 20,000 bytes; xorshift bytes, the
        // same on every run.
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut lengths: Vec<usize> = (0..130).collect();
        lengths.extend((0..300).map(|_| (next() % 20_001) as usize));
        for len in lengths {
            let data: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            let want = hash(&data, portable);
            assert_eq!(sha256(&data), want, "length {len}");
            if has {
                assert_eq!(extensions(&data), Some(want), "length {len}");
            }
        }
    }

    #[test]
    fn raw_and_hex_agree() {
        let raw = sha256(b"abc");
        assert_eq!(raw[0], 0xba);
        assert_eq!(raw[31], 0xad);
        let hex = sha256_hex(b"abc");
        assert_eq!(hex.len(), 64);
        assert!(hex.bytes().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f')));
    }
}
