//! Base64 (RFC 4648 §4, the standard alphabet with `=` padding), for the
//! WebSocket handshake's key and accept values.

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// Encodes `data` with padding.
pub fn encode(data: &[u8]) -> String {
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = u32::from_be_bytes([0, b[0], b[1], b[2]]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i) & 0x3f) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Decodes padded base64; None for anything else (a character outside
/// the alphabet, a wrong length, padding in the middle, or bits left over
/// after the last byte, which RFC 4648 §3.5 lets a decoder refuse).
pub fn decode(text: &str) -> Option<Vec<u8>> {
    let bytes = text.as_bytes();
    if bytes.len() % 4 != 0 {
        return None;
    }
    let mut out = Vec::with_capacity(bytes.len() / 4 * 3);
    let groups = bytes.chunks_exact(4);
    let last = groups.len().saturating_sub(1);
    for (g, group) in groups.enumerate() {
        let pad = group.iter().rev().take_while(|&&c| c == b'=').count();
        if pad > 2 || (pad > 0 && g != last) {
            return None;
        }
        let mut n = 0u32;
        for &c in &group[..4 - pad] {
            let v = ALPHABET.iter().position(|&a| a == c)?;
            n = n << 6 | v as u32;
        }
        n <<= 6 * pad;
        let [_, b0, b1, b2] = n.to_be_bytes();
        let decoded = [b0, b1, b2];
        let (keep, spare) = decoded.split_at(3 - pad);
        if spare.iter().any(|&b| b != 0) {
            return None;
        }
        out.extend_from_slice(keep);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    // RFC 4648 §10.
    const VECTORS: [(&str, &str); 7] = [
        ("", ""),
        ("f", "Zg=="),
        ("fo", "Zm8="),
        ("foo", "Zm9v"),
        ("foob", "Zm9vYg=="),
        ("fooba", "Zm9vYmE="),
        ("foobar", "Zm9vYmFy"),
    ];

    #[test]
    fn rfc4648_vectors() {
        for (plain, coded) in VECTORS {
            assert_eq!(encode(plain.as_bytes()), coded, "{plain:?}");
            assert_eq!(
                decode(coded).as_deref(),
                Some(plain.as_bytes()),
                "{coded:?}"
            );
        }
    }

    #[test]
    fn every_byte_round_trips() {
        let all: Vec<u8> = (0..=255).collect();
        for n in 0..all.len() {
            assert_eq!(decode(&encode(&all[n..])).as_deref(), Some(&all[n..]));
        }
        assert_eq!(encode(&[0xfb, 0xff]), "+/8=");
    }

    #[test]
    fn refuses_what_is_not_padded_base64() {
        for bad in [
            "Zg", "Zg=", "Z===", "Zg==Zg==", "Zm9v!A==", "Zh==", "Zm9=", "====",
        ] {
            assert_eq!(decode(bad), None, "{bad:?}");
        }
    }
}
