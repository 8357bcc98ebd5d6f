//! The client: the handshake, then text messages sent as single masked
//! frames and received whole (continuations joined, pings answered,
//! a close answered), over a Unix socket or any `Stream`. Every read is
//! bounded twice: by a deadline, and by `Options::max_message`.

use super::error::{self, Error};
use super::frame::{self, Header, Opcode, Side};
use super::{base64, handshake};
use crate::sys;
use std::io::{self, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

/// The bound on one message unless `Options` says otherwise.
pub const DEFAULT_MAX_MESSAGE: usize = 16 << 20;

/// How much one read asks for.
const READ_CHUNK: usize = 64 * 1024;

/// Close codes (RFC 6455 §7.4.1).
const CLOSE_NORMAL: u16 = 1000;
const CLOSE_PROTOCOL: u16 = 1002;
const CLOSE_TOO_BIG: u16 = 1009;

/// A byte stream the client runs over: a Unix socket, or a test's own.
pub trait Stream: Read + Write {
    /// Bounds each read that follows; None lets it wait.
    fn set_read_timeout(&mut self, timeout: Option<Duration>) -> io::Result<()>;
}

impl Stream for UnixStream {
    fn set_read_timeout(&mut self, timeout: Option<Duration>) -> io::Result<()> {
        UnixStream::set_read_timeout(self, timeout)
    }
}

/// What a connection is opened with.
#[derive(Clone, Debug)]
pub struct Options {
    /// The request line's path.
    pub request_path: String,
    /// The bound on the handshake, on each write, and at first on each
    /// `recv_text` (`Client::set_read_timeout` changes the last).
    pub timeout: Duration,
    /// The most bytes one message may have, its fragments together.
    pub max_message: usize,
}

impl Options {
    pub fn new(timeout: Duration) -> Options {
        Options {
            request_path: "/".to_string(),
            timeout,
            max_message: DEFAULT_MAX_MESSAGE,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Open,
    /// We sent a close and wait for the server's.
    CloseSent,
    /// Both closes have gone by.
    Closed,
    /// The connection failed (a protocol error, an I/O error, an end
    /// without a close): nothing more is read or sent.
    Failed,
}

pub struct Client<S> {
    stream: S,
    /// Bytes read and not yet taken as frames.
    buf: Vec<u8>,
    /// A fragmented message so far: its opcode and payload.
    message: Option<(Opcode, Vec<u8>)>,
    max_message: usize,
    read_timeout: Option<Duration>,
    state: State,
}

/// A wait with a deadline, for the error that says what timed out.
struct Wait {
    op: &'static str,
    total: Option<Duration>,
    deadline: Option<Instant>,
}

impl Wait {
    fn new(op: &'static str, total: Option<Duration>) -> Wait {
        let deadline = total.map(|t| Instant::now() + t);
        Wait {
            op,
            total,
            deadline,
        }
    }

    /// The time left, or the timeout when there is none.
    fn left(&self) -> Result<Option<Duration>, Error> {
        let Some(deadline) = self.deadline else {
            return Ok(None);
        };
        let left = deadline.saturating_duration_since(Instant::now());
        match left.is_zero() {
            true => Err(self.timed_out()),
            false => Ok(Some(left)),
        }
    }

    fn timed_out(&self) -> Error {
        let (op, after) = (self.op, self.total.unwrap_or_default());
        Error::TimedOut { op, after }
    }
}

impl Client<UnixStream> {
    /// Connects to the WebSocket server on the Unix socket at `path` and
    /// upgrades, all within `options.timeout`.
    pub fn connect(path: &Path, options: &Options) -> Result<Self, Error> {
        let connect = |source| Error::Connect {
            path: path.to_path_buf(),
            source,
        };
        // A listener whose backlog is full refuses at once rather than
        // making the connect wait (sys::connect_nowait).
        let stream = sys::connect_nowait(path).map_err(connect)?;
        stream.set_nonblocking(false).map_err(connect)?;
        let write_timeout = options.timeout.max(Duration::from_millis(1));
        stream
            .set_write_timeout(Some(write_timeout))
            .map_err(connect)?;
        Client::handshake(stream, options)
    }
}

impl<S: Stream> Client<S> {
    /// Upgrades `stream` (RFC 6455 §4.1): sends the request with a fresh
    /// key and reads the response head, at most
    /// `handshake::MAX_RESPONSE` bytes within `options.timeout`.
    pub fn handshake(stream: S, options: &Options) -> Result<Self, Error> {
        // A `Sec-WebSocket-Key`: 16 random bytes, base64 (§4.1, item 7).
        let key = base64::encode(&random::<16>()?);
        let request = handshake::request(&options.request_path, &key)?;
        let mut client = Client::new(stream, options);
        let wait = Wait::new("handshake", Some(options.timeout));
        let sent = client.stream.write_all(request.as_bytes());
        sent.and_then(|()| client.stream.flush())
            .map_err(error::io("handshake", options.timeout))?;
        let too_long = || {
            let max = handshake::MAX_RESPONSE;
            Error::Handshake(format!("its response head is longer than {max} bytes"))
        };
        let end = loop {
            if let Some(end) = handshake::head_end(&client.buf) {
                break end;
            }
            if client.buf.len() >= handshake::MAX_RESPONSE {
                return Err(too_long());
            }
            client.fill(&wait).map_err(|e| match e {
                Error::Eof => Error::Handshake("it closed the connection before answering".into()),
                e => e,
            })?;
        };
        if end > handshake::MAX_RESPONSE {
            return Err(too_long());
        }
        handshake::check_response(&client.buf[..end], &key)?;
        client.buf.drain(..end);
        Ok(client)
    }

    /// A client on a stream already upgraded.
    fn new(stream: S, options: &Options) -> Self {
        Client {
            stream,
            buf: Vec::new(),
            message: None,
            max_message: options.max_message,
            read_timeout: Some(options.timeout),
            state: State::Open,
        }
    }

    /// How long `recv_text` waits for a whole message; None: as long as
    /// it takes. A message half read when the time runs out is kept, and
    /// the next call goes on with it.
    pub fn set_read_timeout(&mut self, timeout: Option<Duration>) {
        self.read_timeout = timeout;
    }

    pub fn get_ref(&self) -> &S {
        &self.stream
    }

    /// Sends `text` as one text message, in one frame.
    pub fn send_text(&mut self, text: &str) -> Result<(), Error> {
        if self.state != State::Open {
            return Err(Error::Closed);
        }
        self.send_frame(Opcode::Text, text.as_bytes())
    }

    /// The next text message; None once the server has closed the
    /// WebSocket (its close answered). Pings are answered on the way.
    pub fn recv_text(&mut self) -> Result<Option<String>, Error> {
        match self.state {
            State::Closed => return Ok(None),
            State::Failed => return Err(Error::Closed),
            State::Open | State::CloseSent => {}
        }
        let got = self.recv_message();
        if let Err(e) = &got {
            self.fail_on(e);
        }
        let (opcode, bytes) = match got? {
            Some(message) => message,
            None => return Ok(None),
        };
        if opcode == Opcode::Binary {
            let len = bytes.len();
            return Err(Error::NotText { len });
        }
        match String::from_utf8(bytes) {
            Ok(text) => Ok(Some(text)),
            Err(_) => {
                let e = Error::Protocol("a text message that is not UTF-8".into());
                self.fail_on(&e);
                Err(e)
            }
        }
    }

    /// Closes the WebSocket (RFC 6455 §7.1.2): sends a close, then reads
    /// until the server's, dropping messages that were still on the way.
    pub fn close(&mut self) -> Result<(), Error> {
        if self.state == State::Open {
            self.send_frame(Opcode::Close, &CLOSE_NORMAL.to_be_bytes())?;
            self.state = State::CloseSent;
        }
        loop {
            match self.recv_text() {
                Ok(None) => return Ok(()),
                Ok(Some(_)) | Err(Error::NotText { .. }) => {}
                // The server may end the connection without its close.
                Err(Error::Eof | Error::Closed) => return Ok(()),
                Err(e) => return Err(e),
            }
        }
    }

    /// The next whole data message, answering control frames on the way;
    /// None at the server's close.
    fn recv_message(&mut self) -> Result<Option<(Opcode, Vec<u8>)>, Error> {
        let wait = Wait::new("read", self.read_timeout);
        loop {
            let (head, payload) = self.next_frame(&wait)?;
            match head.opcode {
                Opcode::Ping if self.state == State::Open => {
                    self.send_frame(Opcode::Pong, &payload)?;
                }
                Opcode::Ping | Opcode::Pong => {}
                Opcode::Close => return self.closed_by_server(&payload).map(|()| None),
                Opcode::Text | Opcode::Binary | Opcode::Continuation => {
                    if let Some(message) = self.gather(head, payload)? {
                        return Ok(Some(message));
                    }
                }
            }
        }
    }

    /// Adds a data frame to the message it belongs to; the message once
    /// its last frame is in.
    fn gather(
        &mut self,
        head: Header,
        payload: Vec<u8>,
    ) -> Result<Option<(Opcode, Vec<u8>)>, Error> {
        let (opcode, bytes) = match (head.opcode, self.message.take()) {
            (Opcode::Continuation, Some((opcode, mut so_far))) => {
                so_far.extend_from_slice(&payload);
                (opcode, so_far)
            }
            (Opcode::Continuation, None) => {
                let why = "a continuation frame with no message to continue";
                return Err(Error::Protocol(why.into()));
            }
            (_, Some(_)) => {
                let why = "a new message before the last one's final frame";
                return Err(Error::Protocol(why.into()));
            }
            (opcode, None) => (opcode, payload),
        };
        if head.fin {
            return Ok(Some((opcode, bytes)));
        }
        self.message = Some((opcode, bytes));
        Ok(None)
    }

    /// The server's close: answered with its code, unless it answers ours.
    fn closed_by_server(&mut self, payload: &[u8]) -> Result<(), Error> {
        if payload.len() == 1 {
            return Err(Error::Protocol("a close frame of one byte".into()));
        }
        if self.state == State::Open {
            self.send_frame(Opcode::Close, &payload[..payload.len().min(2)])?;
        }
        self.state = State::Closed;
        Ok(())
    }

    /// The next frame whole, checked against the message bound as soon
    /// as its header is in, before its payload is read.
    fn next_frame(&mut self, wait: &Wait) -> Result<(Header, Vec<u8>), Error> {
        loop {
            if let Some(head) = Header::parse(&self.buf, Side::Server)? {
                let so_far = match (head.opcode, &self.message) {
                    (Opcode::Continuation, Some((_, bytes))) => bytes.len(),
                    _ => 0,
                };
                let room = self.max_message.saturating_sub(so_far);
                if head.len > room as u64 {
                    let limit = self.max_message;
                    return Err(Error::TooLarge { limit });
                }
                if self.buf.len() >= head.frame_len() {
                    let payload = head.payload(&self.buf);
                    self.buf.drain(..head.frame_len());
                    return Ok((head, payload));
                }
            }
            self.fill(wait)?;
        }
    }

    /// Reads what the stream has, waiting no later than `wait` allows.
    fn fill(&mut self, wait: &Wait) -> Result<(), Error> {
        let timeout = wait.left()?;
        let after = wait.total.unwrap_or_default();
        self.stream
            .set_read_timeout(timeout)
            .map_err(error::io(wait.op, after))?;
        let old = self.buf.len();
        self.buf.resize(old + READ_CHUNK, 0);
        let read = loop {
            match self.stream.read(&mut self.buf[old..]) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                other => break other,
            }
        };
        let n = *read.as_ref().unwrap_or(&0);
        self.buf.truncate(old + n);
        match read.map_err(error::io(wait.op, after))? {
            0 => Err(Error::Eof),
            _ => Ok(()),
        }
    }

    /// Writes one frame, masked with a fresh key (RFC 6455 §5.3).
    fn send_frame(&mut self, opcode: Opcode, payload: &[u8]) -> Result<(), Error> {
        let bytes = frame::encode(opcode, true, payload, Some(random()?));
        let sent = self.stream.write_all(&bytes);
        let sent = sent.and_then(|()| self.stream.flush());
        sent.map_err(|source| {
            // Part of a frame may have gone: the stream cannot go on.
            self.state = State::Failed;
            Error::Io {
                op: "write",
                source,
            }
        })
    }

    /// Fails the connection after `e` (RFC 6455 §7.1.7) when `e` leaves it
    /// unusable; a timeout does not, nor does an unwanted binary message.
    /// The close that says why is sent if it can be.
    fn fail_on(&mut self, e: &Error) {
        let code = match e {
            Error::TimedOut { .. } | Error::NotText { .. } => return,
            Error::Protocol(_) => Some(CLOSE_PROTOCOL),
            Error::TooLarge { .. } => Some(CLOSE_TOO_BIG),
            _ => None,
        };
        if let (Some(code), State::Open) = (code, self.state) {
            let _ = self.send_frame(Opcode::Close, &code.to_be_bytes());
        }
        self.state = State::Failed;
    }
}

/// `N` random bytes: one `getrandom` where there is one, else
/// `/dev/urandom`.
fn random<const N: usize>() -> Result<[u8; N], Error> {
    let mut out = [0u8; N];
    if sys::fill_random(&mut out).is_ok() {
        return Ok(out);
    }
    let read = std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut out));
    read.map(|()| out).map_err(|source| Error::Io {
        op: "key (reading /dev/urandom)",
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;

    /// A server as a script: the chunks it sends, each one read, and None
    /// where it goes quiet (that read times out); after the last, the end.
    #[derive(Default)]
    struct Script {
        reads: VecDeque<Option<Vec<u8>>>,
        written: Vec<u8>,
    }

    impl Read for Script {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            match self.reads.pop_front() {
                None => Ok(0),
                Some(None) => Err(io::ErrorKind::WouldBlock.into()),
                Some(Some(mut bytes)) => {
                    let n = bytes.len().min(buf.len());
                    buf[..n].copy_from_slice(&bytes[..n]);
                    if n < bytes.len() {
                        self.reads.push_front(Some(bytes.split_off(n)));
                    }
                    Ok(n)
                }
            }
        }
    }

    impl Write for Script {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.written.extend_from_slice(buf);
            Ok(buf.len())
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    impl Stream for Script {
        fn set_read_timeout(&mut self, _: Option<Duration>) -> io::Result<()> {
            Ok(())
        }
    }

    fn script(reads: Vec<Option<Vec<u8>>>) -> Script {
        let reads = reads.into();
        Script {
            reads,
            ..Script::default()
        }
    }

    /// A client past the handshake, reading `reads`.
    fn client(reads: Vec<Option<Vec<u8>>>) -> Client<Script> {
        Client::new(script(reads), &Options::new(Duration::from_secs(5)))
    }

    /// A frame as the server sends it: unmasked.
    fn from_server(opcode: Opcode, fin: bool, payload: &[u8]) -> Option<Vec<u8>> {
        Some(frame::encode(opcode, fin, payload, None))
    }

    /// The frames the client wrote, each of which must be masked: their
    /// opcodes, payloads unmasked, and keys.
    fn sent(client: &Client<Script>) -> Vec<(Opcode, Vec<u8>, [u8; 4])> {
        let (written, mut at, mut out) = (&client.get_ref().written, 0, Vec::new());
        while at < written.len() {
            let head = Header::parse(&written[at..], Side::Client)
                .unwrap()
                .unwrap();
            let key = head.mask.expect("masked");
            out.push((head.opcode, head.payload(&written[at..]), key));
            at += head.frame_len();
        }
        out
    }

    fn close_code(code: u16) -> Vec<u8> {
        code.to_be_bytes().to_vec()
    }

    // RFC 6455 §5.7: "Hello" unmasked, then "Hel" + "lo" with the
    // example ping between the fragments, every byte read on its own.
    #[test]
    fn rfc6455_messages_and_a_ping_between_fragments() {
        let mut bytes = vec![0x81, 0x05, 0x48, 0x65, 0x6c, 0x6c, 0x6f];
        bytes.extend([0x01, 0x03, 0x48, 0x65, 0x6c]);
        bytes.extend([0x89, 0x05, 0x48, 0x65, 0x6c, 0x6c, 0x6f]);
        bytes.extend([0x80, 0x02, 0x6c, 0x6f]);
        let mut c = client(bytes.into_iter().map(|b| Some(vec![b])).collect());
        assert_eq!(c.recv_text().unwrap().as_deref(), Some("Hello"));
        assert!(sent(&c).is_empty());
        assert_eq!(c.recv_text().unwrap().as_deref(), Some("Hello"));
        let pongs: Vec<_> = sent(&c).into_iter().map(|(op, p, _)| (op, p)).collect();
        assert_eq!(pongs, [(Opcode::Pong, b"Hello".to_vec())]);
        assert!(matches!(c.recv_text(), Err(Error::Eof)));
    }

    // RFC 6455 §5.7's 256-byte and 64 KiB binary messages (not text:
    // reported, dropped, and the connection goes on), then 64 KiB of text.
    #[test]
    fn sixteen_and_sixty_four_bit_lengths() {
        let text = "x".repeat(65536);
        let mut c = client(vec![
            from_server(Opcode::Binary, true, &[1; 256]),
            from_server(Opcode::Binary, true, &[2; 65536]),
            from_server(Opcode::Text, true, text.as_bytes()),
        ]);
        assert!(matches!(c.recv_text(), Err(Error::NotText { len: 256 })));
        let e = c.recv_text().unwrap_err();
        assert_eq!(
            e.to_string(),
            "the server sent a binary WebSocket message (65536 bytes) where text was expected"
        );
        assert_eq!(c.recv_text().unwrap(), Some(text));
    }

    #[test]
    fn a_message_over_the_bound_fails_before_its_payload_is_read() {
        let mut options = Options::new(Duration::from_secs(5));
        options.max_message = 10;
        // A frame claiming a terabyte: only its header ever arrives.
        let huge = vec![0x81, 0x7f, 0, 0, 0x01, 0, 0, 0, 0, 0];
        let fragments = [
            from_server(Opcode::Text, false, b"123456"),
            from_server(Opcode::Continuation, true, b"78901"),
        ];
        for reads in [vec![Some(huge)], fragments.to_vec()] {
            let mut c = Client::new(script(reads), &options);
            let e = c.recv_text().unwrap_err();
            assert!(matches!(e, Error::TooLarge { limit: 10 }), "{e:?}");
            assert!(
                e.to_string().contains("larger than the limit of 10 bytes"),
                "{e}"
            );
            let closes: Vec<_> = sent(&c).into_iter().map(|(op, p, _)| (op, p)).collect();
            assert_eq!(closes, [(Opcode::Close, close_code(1009))]);
            assert!(matches!(c.recv_text(), Err(Error::Closed)));
            assert!(matches!(c.send_text("x"), Err(Error::Closed)));
        }
        // Exactly at the bound is fine.
        let mut c = Client::new(
            script(vec![from_server(Opcode::Text, true, b"1234567890")]),
            &options,
        );
        assert_eq!(c.recv_text().unwrap().as_deref(), Some("1234567890"));
    }

    #[test]
    fn protocol_errors_fail_the_connection_with_1002() {
        let masked = frame::encode(Opcode::Text, true, b"Hello", Some([1, 2, 3, 4]));
        let cases = [
            (vec![Some(masked)], "a masked frame"),
            (
                vec![from_server(Opcode::Continuation, true, b"lo")],
                "no message to continue",
            ),
            (
                vec![
                    from_server(Opcode::Text, false, b"Hel"),
                    from_server(Opcode::Text, true, b"lo"),
                ],
                "a new message before",
            ),
            (
                vec![from_server(Opcode::Text, true, &[0xff, 0xfe])],
                "not UTF-8",
            ),
            (
                vec![from_server(Opcode::Close, true, &[0x03])],
                "close frame of one byte",
            ),
        ];
        for (reads, words) in cases {
            let mut c = client(reads);
            let e = c.recv_text().unwrap_err();
            assert!(
                matches!(e, Error::Protocol(_)) && e.to_string().contains(words),
                "{e}"
            );
            let closes: Vec<_> = sent(&c).into_iter().map(|(op, p, _)| (op, p)).collect();
            assert_eq!(closes, [(Opcode::Close, close_code(1002))], "{words}");
            assert!(matches!(c.recv_text(), Err(Error::Closed)));
        }
    }

    #[test]
    fn the_servers_close_is_answered_and_ends_the_messages() {
        let mut c = client(vec![from_server(
            Opcode::Close,
            true,
            &[0x03, 0xe8, b'b', b'y', b'e'],
        )]);
        assert_eq!(c.recv_text().unwrap(), None);
        let closes: Vec<_> = sent(&c).into_iter().map(|(op, p, _)| (op, p)).collect();
        assert_eq!(closes, [(Opcode::Close, close_code(1000))]);
        assert_eq!(c.recv_text().unwrap(), None);
        assert!(matches!(c.send_text("late"), Err(Error::Closed)));
        c.close().unwrap();
        assert_eq!(sent(&c).len(), 1, "no second close");
    }

    #[test]
    fn close_waits_for_the_servers_close_and_drops_what_comes_first() {
        let mut c = client(vec![
            from_server(Opcode::Text, true, b"still on the way"),
            from_server(Opcode::Ping, true, b"p"),
            from_server(Opcode::Close, true, &close_code(1000)),
        ]);
        c.close().unwrap();
        let ops: Vec<_> = sent(&c).into_iter().map(|(op, p, _)| (op, p)).collect();
        assert_eq!(
            ops,
            [(Opcode::Close, close_code(1000))],
            "no pong after a close"
        );
        assert_eq!(c.recv_text().unwrap(), None);
    }

    #[test]
    fn a_timeout_keeps_the_half_read_message() {
        let last = frame::encode(Opcode::Continuation, true, b"lo", None);
        let mut c = client(vec![
            from_server(Opcode::Text, false, b"Hel"),
            Some(last[..3].to_vec()),
            None,
            Some(last[3..].to_vec()),
        ]);
        c.set_read_timeout(Some(Duration::from_secs(2)));
        let e = c.recv_text().unwrap_err();
        let words = "WebSocket read timed out after 2.0s (is the server stuck, or busy?)";
        assert_eq!(e.to_string(), words);
        assert_eq!(c.recv_text().unwrap().as_deref(), Some("Hello"));
    }

    #[test]
    fn text_goes_out_as_one_masked_frame_with_a_fresh_key() {
        let mut c = client(vec![]);
        for i in 0..8 {
            c.send_text(&format!("message {i}")).unwrap();
        }
        let frames = sent(&c);
        let texts: Vec<_> = frames
            .iter()
            .map(|(op, p, _)| (*op, String::from_utf8_lossy(p)))
            .collect();
        let want: Vec<_> = (0..8)
            .map(|i| (Opcode::Text, format!("message {i}").into()))
            .collect();
        assert_eq!(texts, want);
        assert!(
            frames.iter().any(|f| f.2 != frames[0].2),
            "the same key eight times"
        );
        assert!(c.get_ref().written[0] == 0x81, "FIN and text");
    }

    #[test]
    fn the_handshake_is_bounded_in_bytes_and_time() {
        let options = Options::new(Duration::from_secs(3));
        let long = format!(
            "HTTP/1.1 101 OK\r\n{}",
            "X-Padding: yyyyyyyyyy\r\n".repeat(400)
        );
        let cases = [
            (vec![Some(long.into_bytes())], "longer than 8192 bytes"),
            (
                vec![Some(b"HTTP/1.1 101 OK\r\n".to_vec()), None],
                "handshake timed out after 3.0s",
            ),
            (vec![], "closed the connection before answering"),
            (
                vec![Some(b"HTTP/1.1 404 Not Found\r\n\r\n".to_vec())],
                "answered \"HTTP/1.1 404 Not Found\"",
            ),
        ];
        for (reads, words) in cases {
            let e = Client::handshake(script(reads), &options)
                .err()
                .expect("refused");
            assert!(e.to_string().contains(words), "{e}");
        }
        let mut bad_path = options.clone();
        bad_path.request_path = "no-slash".into();
        let e = Client::handshake(script(vec![]), &bad_path)
            .err()
            .expect("refused");
        assert!(matches!(e, Error::RequestPath(_)), "{e}");
    }
}
