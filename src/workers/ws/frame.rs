//! WebSocket frames (RFC 6455 §5.2): a frame built, masked or not, and a
//! frame's header read and checked, without I/O. The client masks what it
//! sends and refuses a masked frame from the server (§5.1).

use super::error::Error;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Opcode {
    Continuation = 0x0,
    Text = 0x1,
    Binary = 0x2,
    Close = 0x8,
    Ping = 0x9,
    Pong = 0xa,
}

impl Opcode {
    fn from_bits(bits: u8) -> Option<Opcode> {
        let all = [
            Opcode::Continuation,
            Opcode::Text,
            Opcode::Binary,
            Opcode::Close,
            Opcode::Ping,
            Opcode::Pong,
        ];
        all.into_iter().find(|&op| op as u8 == bits)
    }

    /// Close, ping and pong: never fragmented, at most 125 bytes (§5.5).
    pub fn is_control(self) -> bool {
        self as u8 & 0x8 != 0
    }
}

/// Which end sent a frame: a client's frames are masked, a server's not.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    Client,
    Server,
}

/// The largest payload a control frame carries (§5.5).
pub const MAX_CONTROL: usize = 125;

/// A frame's bytes: `fin` set on the last frame of a message, `payload`
/// masked with `mask` when there is one (every frame a client sends).
pub fn encode(opcode: Opcode, fin: bool, payload: &[u8], mask: Option<[u8; 4]>) -> Vec<u8> {
    let mut out = Vec::with_capacity(payload.len() + 14);
    out.push(u8::from(fin) << 7 | opcode as u8);
    let masked = u8::from(mask.is_some()) << 7;
    match payload.len() {
        n @ 0..=125 => out.push(masked | n as u8),
        n @ 126..=0xffff => {
            out.push(masked | 126);
            out.extend_from_slice(&(n as u16).to_be_bytes());
        }
        n => {
            out.push(masked | 127);
            out.extend_from_slice(&(n as u64).to_be_bytes());
        }
    }
    let start = out.len() + mask.map_or(0, |key| key.len());
    if let Some(key) = mask {
        out.extend_from_slice(&key);
    }
    out.extend_from_slice(payload);
    if let Some(key) = mask {
        apply_mask(&mut out[start..], key);
    }
    out
}

/// Masks or unmasks `payload` in place (§5.3: the same XOR both ways).
pub fn apply_mask(payload: &mut [u8], key: [u8; 4]) {
    for (i, b) in payload.iter_mut().enumerate() {
        *b ^= key[i % 4];
    }
}

/// A frame's header, read and checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub fin: bool,
    pub opcode: Opcode,
    pub mask: Option<[u8; 4]>,
    /// Bytes of payload that follow the header.
    pub len: u64,
    /// Bytes of the header itself.
    pub size: usize,
}

impl Header {
    /// Reads the header at the start of `buf`, sent by `from`: None while
    /// `buf` holds less than the whole header. Refuses what RFC 6455 says
    /// to fail the connection for: reserved bits (no extension is
    /// negotiated), an unknown opcode, a fragmented or long control
    /// frame, a mask from a server or none from a client, and a 64-bit
    /// length with its top bit set.
    pub fn parse(buf: &[u8], from: Side) -> Result<Option<Header>, Error> {
        let (Some(&b0), Some(&b1)) = (buf.first(), buf.get(1)) else {
            return Ok(None);
        };
        if b0 & 0x70 != 0 {
            return Err(Error::Protocol(format!(
                "a frame with reserved bits set (0x{:x}) that no extension allows",
                b0 & 0x70
            )));
        }
        let opcode = Opcode::from_bits(b0 & 0x0f).ok_or_else(|| {
            Error::Protocol(format!("a frame with the unknown opcode 0x{:x}", b0 & 0x0f))
        })?;
        let fin = b0 & 0x80 != 0;
        let masked = b1 & 0x80 != 0;
        match (from, masked) {
            (Side::Server, true) => return Err(Error::Protocol("a masked frame".into())),
            (Side::Client, false) => {
                return Err(Error::Protocol("an unmasked client frame".into()));
            }
            _ => {}
        }
        let (len, mut size) = match b1 & 0x7f {
            126 => match buf.get(2..4) {
                Some(b) => (u64::from(u16::from_be_bytes([b[0], b[1]])), 4),
                None => return Ok(None),
            },
            127 => match buf.get(2..10) {
                Some(b) => (u64::from_be_bytes(b.try_into().expect("8 bytes")), 10),
                None => return Ok(None),
            },
            n => (u64::from(n), 2),
        };
        if len >> 63 != 0 {
            return Err(Error::Protocol(
                "a frame length with its top bit set".into(),
            ));
        }
        if opcode.is_control() && (!fin || len > MAX_CONTROL as u64) {
            return Err(Error::Protocol(format!(
                "a {opcode:?} frame that is fragmented or longer than {MAX_CONTROL} bytes"
            )));
        }
        let mask = match masked {
            false => None,
            true => match buf.get(size..size + 4) {
                Some(k) => Some([k[0], k[1], k[2], k[3]]),
                None => return Ok(None),
            },
        };
        size += mask.map_or(0, |k| k.len());
        Ok(Some(Header {
            fin,
            opcode,
            mask,
            len,
            size,
        }))
    }

    /// The whole frame's length, header and payload; the caller has
    /// checked that `len` fits its bound, so it fits a `usize`.
    pub fn frame_len(&self) -> usize {
        self.size + self.len as usize
    }

    /// The frame's payload, unmasked, from `frame` (the bytes this
    /// header was read from, at least `frame_len` of them).
    pub fn payload(&self, frame: &[u8]) -> Vec<u8> {
        let mut payload = frame[self.size..self.frame_len()].to_vec();
        if let Some(key) = self.mask {
            apply_mask(&mut payload, key);
        }
        payload
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reads one whole frame from `bytes`: its header and payload.
    fn decode(bytes: &[u8], from: Side) -> (Header, Vec<u8>) {
        let head = Header::parse(bytes, from).unwrap().expect("a whole header");
        assert_eq!(head.frame_len(), bytes.len(), "one frame, all of it");
        (head, head.payload(bytes))
    }

    const KEY: [u8; 4] = [0x37, 0xfa, 0x21, 0x3d];

    // RFC 6455 §5.7, each example both ways.
    #[test]
    fn rfc6455_hello_frames() {
        let unmasked = [0x81, 0x05, 0x48, 0x65, 0x6c, 0x6c, 0x6f];
        assert_eq!(encode(Opcode::Text, true, b"Hello", None), unmasked);
        let (head, payload) = decode(&unmasked, Side::Server);
        assert_eq!(
            (head.fin, head.opcode, head.mask),
            (true, Opcode::Text, None)
        );
        assert_eq!(payload, b"Hello");

        let masked = [
            0x81, 0x85, 0x37, 0xfa, 0x21, 0x3d, 0x7f, 0x9f, 0x4d, 0x51, 0x58,
        ];
        assert_eq!(encode(Opcode::Text, true, b"Hello", Some(KEY)), masked);
        let (head, payload) = decode(&masked, Side::Client);
        assert_eq!((head.opcode, head.mask), (Opcode::Text, Some(KEY)));
        assert_eq!(payload, b"Hello");
    }

    #[test]
    fn rfc6455_fragmented_hello() {
        let first = [0x01, 0x03, 0x48, 0x65, 0x6c];
        let last = [0x80, 0x02, 0x6c, 0x6f];
        assert_eq!(encode(Opcode::Text, false, b"Hel", None), first);
        assert_eq!(encode(Opcode::Continuation, true, b"lo", None), last);
        let (head, payload) = decode(&first, Side::Server);
        assert_eq!(
            (head.fin, head.opcode, &payload[..]),
            (false, Opcode::Text, &b"Hel"[..])
        );
        let (head, payload) = decode(&last, Side::Server);
        assert_eq!(
            (head.fin, head.opcode, &payload[..]),
            (true, Opcode::Continuation, &b"lo"[..])
        );
    }

    #[test]
    fn rfc6455_ping_and_pong() {
        let ping = [0x89, 0x05, 0x48, 0x65, 0x6c, 0x6c, 0x6f];
        assert_eq!(encode(Opcode::Ping, true, b"Hello", None), ping);
        assert_eq!(decode(&ping, Side::Server).1, b"Hello");
        let pong = [
            0x8a, 0x85, 0x37, 0xfa, 0x21, 0x3d, 0x7f, 0x9f, 0x4d, 0x51, 0x58,
        ];
        assert_eq!(encode(Opcode::Pong, true, b"Hello", Some(KEY)), pong);
        let (head, payload) = decode(&pong, Side::Client);
        assert_eq!((head.opcode, &payload[..]), (Opcode::Pong, &b"Hello"[..]));
    }

    #[test]
    fn rfc6455_16_and_64_bit_lengths() {
        let body: Vec<u8> = (0..=255u8).cycle().take(65536).collect();
        for (n, head) in [
            (256, &[0x82, 0x7e, 0x01, 0x00][..]),
            (65536, &[0x82, 0x7f, 0, 0, 0, 0, 0, 0x01, 0x00, 0x00][..]),
        ] {
            let frame = encode(Opcode::Binary, true, &body[..n], None);
            assert_eq!(&frame[..head.len()], head, "{n} bytes");
            let (h, payload) = decode(&frame, Side::Server);
            assert_eq!((h.len, h.size), (n as u64, head.len()));
            assert_eq!(payload, &body[..n]);
        }
        // The edges between the three forms.
        for (n, size) in [(125, 2), (126, 4), (65535, 4)] {
            let frame = encode(Opcode::Binary, true, &body[..n], None);
            assert_eq!(decode(&frame, Side::Server).0.size, size, "{n} bytes");
        }
    }

    #[test]
    fn a_partial_header_asks_for_more() {
        let frame = encode(Opcode::Binary, true, &[7; 300], Some(KEY));
        for cut in 0..8 {
            assert_eq!(
                Header::parse(&frame[..cut], Side::Client).unwrap(),
                None,
                "{cut}"
            );
        }
        assert!(Header::parse(&frame[..8], Side::Client).unwrap().is_some());
    }

    #[test]
    fn refuses_what_rfc6455_fails_the_connection_for() {
        let bad: [(&[u8], Side, &str); 7] = [
            (&[0x81, 0x85, 1, 2, 3, 4], Side::Server, "masked"),
            (&[0x81, 0x05], Side::Client, "unmasked"),
            (&[0xc1, 0x00], Side::Server, "reserved bits"),
            (&[0x83, 0x00], Side::Server, "opcode 0x3"),
            (&[0x09, 0x00], Side::Server, "fragmented"),
            (&[0x88, 0x7e, 0x00, 0x7e], Side::Server, "longer than 125"),
            (
                &[0x82, 0x7f, 0x80, 0, 0, 0, 0, 0, 0, 0],
                Side::Server,
                "top bit",
            ),
        ];
        for (bytes, from, words) in bad {
            let e = Header::parse(bytes, from).unwrap_err().to_string();
            assert!(e.contains(words), "{bytes:x?}: {e}");
        }
    }
}
