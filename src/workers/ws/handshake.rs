//! The opening handshake (RFC 6455 §4.1, §4.2.2) from the client's side:
//! the upgrade request, and the server's response checked, without I/O.

use super::base64;
use super::error::Error;
use super::sha1::sha1;
use crate::text::sanitize;

/// The GUID RFC 6455 §1.3 appends to the key before hashing.
pub const GUID: &str = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

/// The most a server's response head may take, status line to the blank
/// line; a real one is a few hundred bytes.
pub const MAX_RESPONSE: usize = 8 * 1024;

/// The `Sec-WebSocket-Accept` value a server must answer `key` with.
pub fn accept_for(key: &str) -> String {
    base64::encode(&sha1(format!("{key}{GUID}").as_bytes()))
}

/// The upgrade request for `path`, offering `key`. The host is always
/// `localhost`: over a Unix socket there is no other.
pub fn request(path: &str, key: &str) -> Result<String, Error> {
    let printable = |c: char| c.is_ascii_graphic();
    if !path.starts_with('/') || !path.chars().all(printable) {
        return Err(Error::RequestPath(path.to_string()));
    }
    Ok(format!(
        "GET {path} HTTP/1.1\r\n\
         Host: localhost\r\n\
         Upgrade: websocket\r\n\
         Connection: Upgrade\r\n\
         Sec-WebSocket-Key: {key}\r\n\
         Sec-WebSocket-Version: 13\r\n\r\n"
    ))
}

/// Where the response head in `buf` ends (just past its blank line), once
/// it is all there.
pub fn head_end(buf: &[u8]) -> Option<usize> {
    buf.windows(4).position(|w| w == b"\r\n\r\n").map(|i| i + 4)
}

/// Checks the server's response head (§4.1, the client's checks 1 to 6):
/// status 101, `Upgrade: websocket`, `Connection: Upgrade`, the accept
/// value `key` calls for, and no extension or subprotocol, since none was
/// asked for.
pub fn check_response(head: &[u8], key: &str) -> Result<(), Error> {
    let head = std::str::from_utf8(head)
        .map_err(|_| Error::Handshake("its response is not text".into()))?;
    let mut lines = head.split("\r\n");
    let status = lines.next().unwrap_or("");
    let code = status
        .strip_prefix("HTTP/1.1 ")
        .map(|s| s.split(' ').next());
    if code != Some(Some("101")) {
        return Err(Error::Handshake(format!(
            "it answered \"{}\" where \"HTTP/1.1 101 Switching Protocols\" was expected \
             (is this a WebSocket server's socket?)",
            sanitize::escape(status)
        )));
    }
    let mut seen = Seen::default();
    for line in lines.take_while(|l| !l.is_empty()) {
        let Some((name, value)) = line.split_once(':') else {
            return Err(Error::Handshake(format!(
                "a header line without a colon: \"{}\"",
                sanitize::escape(line)
            )));
        };
        seen.header(&name.trim().to_ascii_lowercase(), value.trim());
    }
    seen.check(key)
}

/// What the response's headers said that the client checks.
#[derive(Default)]
struct Seen<'a> {
    upgrade: bool,
    connection: bool,
    accept: Option<&'a str>,
    extra: Option<String>,
}

impl<'a> Seen<'a> {
    fn header(&mut self, name: &str, value: &'a str) {
        match name {
            "upgrade" => self.upgrade |= value.eq_ignore_ascii_case("websocket"),
            "connection" => {
                let mut tokens = value.split(',').map(str::trim);
                self.connection |= tokens.any(|t| t.eq_ignore_ascii_case("upgrade"));
            }
            "sec-websocket-accept" => self.accept = Some(value),
            "sec-websocket-extensions" | "sec-websocket-protocol" if !value.is_empty() => {
                self.extra = Some(format!("{name}: {value}"));
            }
            _ => {}
        }
    }

    fn check(self, key: &str) -> Result<(), Error> {
        let missing = |what: &str| Err(Error::Handshake(format!("its response has no {what}")));
        if !self.upgrade {
            return missing("\"Upgrade: websocket\"");
        }
        if !self.connection {
            return missing("\"Connection: Upgrade\"");
        }
        let want = accept_for(key);
        match self.accept {
            None => missing("Sec-WebSocket-Accept"),
            Some(got) if got != want => Err(Error::Handshake(format!(
                "its Sec-WebSocket-Accept is \"{}\" where \"{want}\" was expected",
                sanitize::escape(got)
            ))),
            Some(_) => match self.extra {
                Some(extra) => Err(Error::Handshake(format!(
                    "it chose \"{}\", which was not offered",
                    sanitize::escape(&extra)
                ))),
                None => Ok(()),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // RFC 6455 §1.3's example (and §4.2.2's, §11.3.3's).
    const KEY: &str = "dGhlIHNhbXBsZSBub25jZQ==";
    const ACCEPT: &str = "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=";

    fn response(headers: &str) -> String {
        format!("HTTP/1.1 101 Switching Protocols\r\n{headers}\r\n")
    }

    const GOOD: &str = "Upgrade: websocket\r\nConnection: Upgrade\r\n\
                        Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n";

    #[test]
    fn rfc6455_example_key_and_accept() {
        // §1.3 gives the SHA-1 too.
        let digest = sha1(format!("{KEY}{GUID}").as_bytes());
        let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(hex, "b37a4f2cc0624f1690f64606cf385945b2bec4ea");
        assert_eq!(accept_for(KEY), ACCEPT);
        // The example key is the nonce "the sample nonce", 16 bytes.
        assert_eq!(base64::encode(b"the sample nonce"), KEY);
    }

    #[test]
    fn the_request_line_and_headers() {
        let req = request("/", KEY).unwrap();
        assert_eq!(
            req,
            "GET / HTTP/1.1\r\nHost: localhost\r\nUpgrade: websocket\r\n\
             Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\
             Sec-WebSocket-Version: 13\r\n\r\n"
        );
        assert!(
            request("/rpc?x=1", KEY)
                .unwrap()
                .starts_with("GET /rpc?x=1 HTTP/1.1\r\n")
        );
        for bad in ["", "rpc", "/a b", "/a\r\nX: y"] {
            assert!(
                matches!(request(bad, KEY), Err(Error::RequestPath(_))),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn accepts_the_rfc_response_in_any_case() {
        check_response(response(GOOD).as_bytes(), KEY).unwrap();
        let shouted = "UPGRADE: WebSocket\r\nconnection: keep-alive, Upgrade\r\n\
                       sec-websocket-accept:s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\nServer: x\r\n";
        check_response(response(shouted).as_bytes(), KEY).unwrap();
    }

    #[test]
    fn refuses_a_response_that_does_not_upgrade() {
        let wrong_accept = GOOD.replace(ACCEPT, "AAAAAAAAAAAAAAAAAAAAAAAAAAA=");
        let cases = [
            (
                "HTTP/1.1 404 Not Found\r\n\r\n".to_string(),
                "\"HTTP/1.1 404 Not Found\"",
            ),
            (
                "HTTP/1.1 1010\r\n\r\n".to_string(),
                "\"HTTP/1.1 1010\" where",
            ),
            (
                "SSH-2.0-OpenSSH\r\n\r\n".to_string(),
                "WebSocket server's socket",
            ),
            (
                response("Connection: Upgrade\r\n"),
                "no \"Upgrade: websocket\"",
            ),
            (
                response("Upgrade: websocket\r\n"),
                "no \"Connection: Upgrade\"",
            ),
            (
                response("Upgrade: websocket\r\nConnection: Upgrade\r\n"),
                "no Sec-WebSocket-Accept",
            ),
            (
                response(&wrong_accept),
                "\"AAAAAAAAAAAAAAAAAAAAAAAAAAA=\" where",
            ),
            (
                response(&format!(
                    "{GOOD}Sec-WebSocket-Extensions: permessage-deflate\r\n"
                )),
                "not offered",
            ),
            (response(&format!("{GOOD}bogus\r\n")), "without a colon"),
        ];
        for (text, words) in cases {
            let e = check_response(text.as_bytes(), KEY)
                .unwrap_err()
                .to_string();
            assert!(e.contains(words), "{text:?}: {e}");
        }
        let e = check_response(b"HTTP/1.1 101\x1b]0;x\x07\r\n\r\n", KEY).unwrap_err();
        assert!(
            e.to_string()
                .contains(r#"answered "HTTP/1.1 101\e]0;x\u{7}""#),
            "{e}"
        );
    }

    #[test]
    fn the_head_ends_at_the_blank_line() {
        assert_eq!(head_end(b"HTTP/1.1 101 x\r\nA: b\r\n"), None);
        assert_eq!(head_end(b"HTTP/1.1 101 x\r\n\r\n\x81\x00"), Some(18));
    }
}
