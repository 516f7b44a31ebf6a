// Over 800 lines: one framer shared by the request and response decoders, the writer and the server connection; split with the framer's states it would scatter them.
//! HTTP/1.1 message framing over smoltcp TCP sockets.
//!
//! Every HTTP speaker in svcroute — the host role's server and load client,
//! the nSFF's terminating proxy — frames messages with the pieces in this
//! module. They are layered so that each user takes only what it needs:
//!
//! ```text
//!   ServerConn (requests in, responses out)      ClientConn (requests out, responses in)
//!        │                    │                        │                    │
//!   RequestDecoder        Writer ──── BodyEncoder ──── Writer        ResponseDecoder
//!        │   (sans-IO: bytes → Head / Data / End)       │   (head bytes + Body, partial writes)
//!        └──────────── tcp::Socket rx ring ─────────────┴──────────── tcp::Socket tx ring
//! ```
//!
//! - [`RequestDecoder`] and [`ResponseDecoder`] are sans-IO: they take bytes
//!   and hand back one [`Decoded`] event at a time (a parsed head, a slice of
//!   body *borrowed from the input*, the end of a message). The head is
//!   buffered (bounded by [`Limits::max_head_bytes`]) until its blank line is
//!   seen, then parsed once with `httparse`; bodies are never buffered by the
//!   decoder. `recv` runs a decoder straight off a socket's receive ring,
//!   looping over the ring's two contiguous halves, so a body slice can go
//!   from one socket's ring into another's without an intermediate copy.
//! - [`Writer`] queues outgoing messages: the head is serialised once into a
//!   small `Vec`, the body is a [`Body`] (shared `Rc<[u8]>`, owned `Vec`,
//!   `'static` bytes, or streamed through a [`BodyEncoder`]) and is written
//!   from where the last partial write stopped; nothing is copied but into
//!   the socket's transmit ring.
//! - [`ServerConn`] and [`ClientConn`] are the per-connection state machines
//!   built from those parts: keep-alive, pipelining, `Connection: close`,
//!   HTTP/1.0, `Expect: 100-continue`, error answers.
//!
//! Protocol violations are one enum, [`ProtocolError`], with one exhaustive
//! mapping to the status a server answers ([`ProtocolError::status`]).
//! Nothing here panics on any input, and every buffer is bounded by
//! [`Limits`]. No call busy-waits: when the peer has sent nothing new or the
//! transmit ring is full, calls return [`Decoded::NeedMore`] /
//! [`ServerEvent::Idle`] / [`ClientEvent::Idle`] and the caller polls again
//! after the next `iface.poll`.

use std::borrow::Cow;
use std::collections::VecDeque;
use std::rc::Rc;

use smoltcp::socket::tcp;

/// Default bound on the bytes of a message head (start line, headers, blank
/// line).
pub const DEFAULT_MAX_HEAD_BYTES: usize = 16 * 1024;
/// Default bound on the number of header fields in a head.
pub const DEFAULT_MAX_HEADERS: usize = 100;
/// Default bound on the bytes of a decoded body.
pub const DEFAULT_MAX_BODY_BYTES: u64 = 16 * 1024 * 1024;

/// Bound on the bytes of one chunk-size line (size plus extensions).
const MAX_CHUNK_LINE: usize = 4096;

/// Resource bounds applied while decoding a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Bytes of a head, including the terminating blank line; larger heads
    /// (and chunked trailer sections) fail with a 431.
    pub max_head_bytes: usize,
    /// Header fields in one head; more fail with a 431.
    pub max_headers: usize,
    /// Bytes of one decoded body; more fail with a 413.
    pub max_body_bytes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_head_bytes: DEFAULT_MAX_HEAD_BYTES,
            max_headers: DEFAULT_MAX_HEADERS,
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
        }
    }
}

/// A peer broke HTTP/1.1 framing or a [`Limits`] bound.
///
/// A decoder that returned one of these is poisoned: it returns the same
/// error from then on, and the connection must be closed (after writing the
/// [`status`](Self::status) answer, on the server side).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ProtocolError {
    /// The start line or a header field is not valid HTTP/1.1 syntax.
    #[error("malformed message head")]
    Malformed,
    /// A `Content-Length` value is not a decimal number that fits in 64 bits.
    #[error("invalid Content-Length")]
    BadContentLength,
    /// Several `Content-Length` values that differ.
    #[error("conflicting Content-Length values")]
    ConflictingContentLength,
    /// Both `Content-Length` and `Transfer-Encoding`: the request-smuggling
    /// ambiguity, refused outright.
    #[error("both Content-Length and Transfer-Encoding")]
    LengthAndTransferEncoding,
    /// A `Transfer-Encoding` we understand but that frames nothing sane:
    /// empty, `chunked` twice, `chunked` not last, or in an HTTP/1.0 message.
    #[error("invalid Transfer-Encoding")]
    BadTransferEncoding,
    /// A transfer coding other than `chunked` on a request.
    #[error("unsupported Transfer-Encoding")]
    UnsupportedTransferEncoding,
    /// Invalid chunked framing (size line, chunk terminator, trailer line).
    #[error("invalid chunked encoding")]
    BadChunk,
    /// The peer closed the connection in the middle of a message.
    #[error("connection closed mid-message")]
    Incomplete,
    /// The head is larger than [`Limits::max_head_bytes`].
    #[error("message head too large")]
    HeadTooLarge,
    /// More header fields than [`Limits::max_headers`].
    #[error("too many header fields")]
    TooManyHeaders,
    /// The chunked trailer section is larger than [`Limits::max_head_bytes`].
    #[error("trailer section too large")]
    TrailersTooLarge,
    /// The body is larger than [`Limits::max_body_bytes`].
    #[error("body too large")]
    BodyTooLarge,
    /// A well-formed HTTP version other than 1.0 or 1.1.
    #[error("unsupported HTTP version")]
    UnsupportedVersion,
}

impl ProtocolError {
    /// The status a server answers this error with.
    pub fn status(self) -> u16 {
        match self {
            Self::Malformed
            | Self::BadContentLength
            | Self::ConflictingContentLength
            | Self::LengthAndTransferEncoding
            | Self::BadTransferEncoding
            | Self::BadChunk
            | Self::Incomplete => 400,
            Self::BodyTooLarge => 413,
            Self::HeadTooLarge | Self::TooManyHeaders | Self::TrailersTooLarge => 431,
            Self::UnsupportedTransferEncoding => 501,
            Self::UnsupportedVersion => 505,
        }
    }
}

/// Misuse of a connection state machine's API (not a peer's fault).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum StateError {
    /// [`ServerConn::respond`] without a request waiting for its response.
    #[error("no request is waiting for a response")]
    NoPendingRequest,
    /// [`ClientConn::send`] on a connection that will not carry more requests.
    #[error("connection is closing")]
    Closing,
}

/// An HTTP version this module speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    /// HTTP/1.0: close after each message unless `Connection: keep-alive`.
    Http10,
    /// HTTP/1.1: persistent unless `Connection: close`.
    Http11,
}

impl Version {
    /// The version as on the wire, e.g. `HTTP/1.1`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Http10 => "HTTP/1.0",
            Self::Http11 => "HTTP/1.1",
        }
    }
}

/// One header field. The value keeps its raw bytes (it need not be UTF-8).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    /// Field name as received or given (compared case-insensitively).
    pub name: String,
    /// Field value, without surrounding whitespace.
    pub value: Vec<u8>,
}

/// An ordered list of header fields.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Headers {
    list: Vec<Header>,
}

impl Headers {
    /// An empty list.
    pub fn new() -> Self {
        Self::default()
    }

    /// Append a field.
    pub fn push(&mut self, name: impl Into<String>, value: impl Into<Vec<u8>>) {
        self.list.push(Header {
            name: name.into(),
            value: value.into(),
        });
    }

    /// The first value of `name` (case-insensitive).
    pub fn get(&self, name: &str) -> Option<&[u8]> {
        self.list
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case(name))
            .map(|h| h.value.as_slice())
    }

    /// Every value of `name` (case-insensitive), in order.
    pub fn get_all<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a [u8]> + 'a {
        self.list
            .iter()
            .filter(move |h| h.name.eq_ignore_ascii_case(name))
            .map(|h| h.value.as_slice())
    }

    /// Whether any value of `name` holds `token` in its comma-separated list
    /// (both case-insensitive), e.g. `has_token("connection", "close")`.
    pub fn has_token(&self, name: &str, token: &str) -> bool {
        self.get_all(name)
            .flat_map(|v| v.split(|&b| b == b','))
            .any(|t| trim(t).eq_ignore_ascii_case(token.as_bytes()))
    }

    /// Remove every field called `name` (case-insensitive); a proxy strips
    /// hop-by-hop fields this way.
    pub fn remove(&mut self, name: &str) {
        self.list.retain(|h| !h.name.eq_ignore_ascii_case(name));
    }

    /// The fields, in order.
    pub fn iter(&self) -> std::slice::Iter<'_, Header> {
        self.list.iter()
    }

    /// Number of fields.
    pub fn len(&self) -> usize {
        self.list.len()
    }

    /// Whether there are no fields.
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }
}

impl<'a> IntoIterator for &'a Headers {
    type Item = &'a Header;
    type IntoIter = std::slice::Iter<'a, Header>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

/// The parsed head of a received request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestHead {
    /// Method token, e.g. `GET`.
    pub method: String,
    /// Request target as sent, e.g. `/index.html`.
    pub target: String,
    /// Protocol version.
    pub version: Version,
    /// Header fields.
    pub headers: Headers,
}

impl RequestHead {
    /// Whether the client wants the connection kept open after the response.
    pub fn keep_alive(&self) -> bool {
        keep_alive(self.version, &self.headers)
    }

    /// Whether this is a `HEAD` request (its response carries no body).
    pub fn is_head(&self) -> bool {
        self.method == "HEAD"
    }

    /// Whether the client waits for `100 Continue` before sending its body.
    pub fn expects_continue(&self) -> bool {
        self.version == Version::Http11 && self.headers.has_token("expect", "100-continue")
    }
}

/// The parsed head of a received response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResponseHead {
    /// Protocol version.
    pub version: Version,
    /// Status code, e.g. 200.
    pub status: u16,
    /// Reason phrase (may be empty).
    pub reason: String,
    /// Header fields.
    pub headers: Headers,
}

impl ResponseHead {
    /// Whether the server keeps the connection open after this response.
    pub fn keep_alive(&self) -> bool {
        keep_alive(self.version, &self.headers)
    }
}

/// How a received message's body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// No body (no length on a request; HEAD, 1xx, 204, 304 responses).
    Empty,
    /// `Content-Length` bytes.
    Length(u64),
    /// `Transfer-Encoding: chunked`.
    Chunked,
    /// Until the peer closes (responses without length).
    UntilClose,
}

/// One event from a decoder.
///
/// A message is `Head`, zero or more `Data`, `End`. `Data` borrows from the
/// bytes handed to the decoder (or from the socket's receive ring): consume
/// it before the next call.
#[derive(Debug, PartialEq, Eq)]
pub enum Decoded<'a, H> {
    /// All input was consumed; call again with more.
    NeedMore,
    /// A complete head. The body framing is [`RequestDecoder::framing`].
    Head(H),
    /// A piece of body (chunk framing already removed).
    Data(&'a [u8]),
    /// The message is complete; the next call decodes the next message.
    End,
    /// Only from `recv`: the peer closed the connection between messages.
    Closed,
}

/// Incremental, sans-IO decoder of requests (server side).
///
/// Call [`decode`](Self::decode) with input until it returns `NeedMore`
/// (it then consumed everything) — or use [`recv`](Self::recv) to decode
/// straight off a socket. Requests follow each other on one decoder
/// (keep-alive, pipelining).
#[derive(Debug)]
pub struct RequestDecoder {
    framer: Framer,
}

impl RequestDecoder {
    /// A decoder enforcing `limits`.
    pub fn new(limits: Limits) -> Self {
        Self {
            framer: Framer::new(limits),
        }
    }

    /// Decode from `input`; returns the bytes consumed and one event.
    pub fn decode<'a>(
        &mut self,
        input: &'a [u8],
    ) -> Result<(usize, Decoded<'a, RequestHead>), ProtocolError> {
        decode_with(self, input)
    }

    /// Decode straight off `sock`'s receive ring, delivering at most
    /// `max_data` body bytes in one `Data` (for a proxy whose outgoing ring
    /// has only that much room; with 0 it stops before body data, returning
    /// `NeedMore` with [`at_data`](Self::at_data) true). Returns `NeedMore`
    /// when the ring holds nothing more to decode, `Closed` when the peer
    /// closed between messages.
    pub fn recv<'s>(
        &mut self,
        sock: &'s mut tcp::Socket<'_>,
        max_data: usize,
    ) -> Result<Decoded<'s, RequestHead>, ProtocolError> {
        recv_with(self, sock, max_data)
    }

    /// The peer closed: `Ok(false)` if that was between messages; an
    /// [`ProtocolError::Incomplete`] error if it cut a message short.
    pub fn finish(&mut self) -> Result<bool, ProtocolError> {
        self.framer.finish()
    }

    /// Body framing of the message being decoded (after its `Head`).
    pub fn framing(&self) -> Option<Framing> {
        self.framer.framing()
    }

    /// Whether the next `decode` hands out body bytes.
    pub fn at_data(&self) -> bool {
        self.framer.at_data()
    }

    /// Whether the decoder sits between messages with nothing buffered.
    pub fn is_idle(&self) -> bool {
        self.framer.is_idle()
    }
}

/// Incremental, sans-IO decoder of responses (client side).
///
/// Like [`RequestDecoder`]; in addition a response's framing depends on the
/// request: call [`set_head_request`](Self::set_head_request) before each
/// response to a `HEAD`. 1xx interim responses decode as `Head` + `End`.
#[derive(Debug)]
pub struct ResponseDecoder {
    framer: Framer,
    head_request: bool,
}

impl ResponseDecoder {
    /// A decoder enforcing `limits`.
    pub fn new(limits: Limits) -> Self {
        Self {
            framer: Framer::new(limits),
            head_request: false,
        }
    }

    /// Whether the response now awaited answers a `HEAD` (so has no body).
    pub fn set_head_request(&mut self, head: bool) {
        self.head_request = head;
    }

    /// Decode from `input`; returns the bytes consumed and one event.
    pub fn decode<'a>(
        &mut self,
        input: &'a [u8],
    ) -> Result<(usize, Decoded<'a, ResponseHead>), ProtocolError> {
        decode_with(self, input)
    }

    /// Decode straight off `sock`; see [`RequestDecoder::recv`]. A body
    /// delimited by close ends with `End` when the peer's FIN arrives.
    pub fn recv<'s>(
        &mut self,
        sock: &'s mut tcp::Socket<'_>,
        max_data: usize,
    ) -> Result<Decoded<'s, ResponseHead>, ProtocolError> {
        recv_with(self, sock, max_data)
    }

    /// The peer closed: `Ok(true)` if that ended a close-delimited body
    /// (deliver `End`), `Ok(false)` if it was between messages, an
    /// [`ProtocolError::Incomplete`] error if it cut a message short.
    pub fn finish(&mut self) -> Result<bool, ProtocolError> {
        self.framer.finish()
    }

    /// Body framing of the message being decoded (after its `Head`).
    pub fn framing(&self) -> Option<Framing> {
        self.framer.framing()
    }

    /// Whether the next `decode` hands out body bytes.
    pub fn at_data(&self) -> bool {
        self.framer.at_data()
    }

    /// Whether the decoder sits between messages with nothing buffered.
    pub fn is_idle(&self) -> bool {
        self.framer.is_idle()
    }
}

/// The body of an outgoing message.
///
/// Fixed bodies are written from where the last partial write stopped, so a
/// shared 10 MB body costs no copy but the one into the transmit ring.
#[derive(Debug, Clone, Default)]
pub enum Body {
    /// No body (`Content-Length: 0` where a length is due).
    #[default]
    Empty,
    /// Static bytes.
    Static(&'static [u8]),
    /// Shared bytes (e.g. a file served to many connections).
    Shared(Rc<[u8]>),
    /// Owned bytes (e.g. an echoed request body).
    Owned(Vec<u8>),
    /// Supplied later through [`Writer::write_body`] and ended with
    /// [`Writer::finish_body`]: with `Content-Length` if the length is known,
    /// chunked otherwise.
    Streamed {
        /// Total length if known.
        length: Option<u64>,
    },
}

impl Body {
    /// The bytes of a fixed body (empty for [`Body::Streamed`]).
    pub fn as_bytes(&self) -> &[u8] {
        match self {
            Self::Empty | Self::Streamed { .. } => &[],
            Self::Static(b) => b,
            Self::Shared(b) => b,
            Self::Owned(b) => b,
        }
    }

    /// The length if known (`None` for a chunked stream).
    pub fn len(&self) -> Option<u64> {
        match self {
            Self::Streamed { length } => *length,
            _ => Some(self.as_bytes().len() as u64),
        }
    }

    /// Whether the body is known to be empty.
    pub fn is_empty(&self) -> bool {
        self.len() == Some(0)
    }
}

impl From<Vec<u8>> for Body {
    fn from(v: Vec<u8>) -> Self {
        Self::Owned(v)
    }
}

impl From<Rc<[u8]>> for Body {
    fn from(v: Rc<[u8]>) -> Self {
        Self::Shared(v)
    }
}

impl From<&'static [u8]> for Body {
    fn from(v: &'static [u8]) -> Self {
        Self::Static(v)
    }
}

impl From<&'static str> for Body {
    fn from(v: &'static str) -> Self {
        Self::Static(v.as_bytes())
    }
}

/// An outgoing response.
///
/// `Content-Length`, `Transfer-Encoding` and `Connection` fields in
/// `headers` are not copied: the writer frames the body itself and decides
/// `Connection` (a `Connection: close` here makes the server close after
/// this response).
#[derive(Debug, Clone)]
pub struct Response {
    /// Status code.
    pub status: u16,
    /// Reason phrase.
    pub reason: Cow<'static, str>,
    /// Header fields.
    pub headers: Headers,
    /// Body; sent without its bytes in answer to `HEAD`, and not at all
    /// with 1xx, 204 or 304.
    pub body: Body,
}

impl Response {
    /// A response with the standard reason phrase and no body.
    pub fn new(status: u16) -> Self {
        Self {
            status,
            reason: Cow::Borrowed(reason_phrase(status)),
            headers: Headers::new(),
            body: Body::Empty,
        }
    }

    /// Set the body.
    #[must_use]
    pub fn with_body(mut self, body: impl Into<Body>) -> Self {
        self.body = body.into();
        self
    }

    /// Append a header field.
    #[must_use]
    pub fn with_header(mut self, name: impl Into<String>, value: impl Into<Vec<u8>>) -> Self {
        self.headers.push(name, value);
        self
    }
}

/// An outgoing request.
///
/// As with [`Response`], framing and `Connection` fields are the writer's;
/// `Connection: close` asks the server to close after answering. A `Host`
/// field is added if absent.
#[derive(Debug, Clone)]
pub struct Request {
    /// Method token.
    pub method: Cow<'static, str>,
    /// Request target, e.g. `/`.
    pub target: String,
    /// Header fields.
    pub headers: Headers,
    /// Body.
    pub body: Body,
}

impl Request {
    /// A request without body.
    pub fn new(method: impl Into<Cow<'static, str>>, target: impl Into<String>) -> Self {
        Self {
            method: method.into(),
            target: target.into(),
            headers: Headers::new(),
            body: Body::Empty,
        }
    }

    /// A `GET`.
    pub fn get(target: impl Into<String>) -> Self {
        Self::new("GET", target)
    }

    /// A `POST` of `body`.
    pub fn post(target: impl Into<String>, body: impl Into<Body>) -> Self {
        Self::new("POST", target).with_body(body)
    }

    /// Set the body.
    #[must_use]
    pub fn with_body(mut self, body: impl Into<Body>) -> Self {
        self.body = body.into();
        self
    }

    /// Append a header field.
    #[must_use]
    pub fn with_header(mut self, name: impl Into<String>, value: impl Into<Vec<u8>>) -> Self {
        self.headers.push(name, value);
        self
    }
}

/// What a writer puts in the `Connection` field of a response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Connection {
    /// Nothing (HTTP/1.1 persistence).
    Default,
    /// `Connection: keep-alive` (to an HTTP/1.0 client that asked for it).
    KeepAlive,
    /// `Connection: close`.
    Close,
}

/// Frames a streamed body into a socket: `Content-Length` bytes, chunks, or
/// nothing (answer to `HEAD`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyEncoder {
    /// Exactly this many more bytes.
    Length(u64),
    /// Chunked transfer coding.
    Chunked,
    /// No body may be sent; data is accepted and dropped.
    Discard,
}

impl BodyEncoder {
    /// Write as much of `data` as the transmit ring takes; returns the bytes
    /// of `data` accepted. A chunk is written only whole (header, data,
    /// CRLF), so a partial write never leaves broken framing.
    pub fn write(
        &mut self,
        sock: &mut tcp::Socket<'_>,
        data: &[u8],
    ) -> Result<usize, tcp::SendError> {
        match self {
            Self::Length(remaining) => {
                let n = clamp(*remaining, data.len());
                let sent = send_all(sock, &data[..n])?;
                *remaining -= sent as u64;
                Ok(sent)
            }
            Self::Chunked => {
                if data.is_empty() {
                    return Ok(0);
                }
                let free = sock.send_capacity() - sock.send_queue();
                let n = data.len().min(free.saturating_sub(hex_len(free) + 4));
                if n == 0 {
                    return Ok(0);
                }
                let mut line = [0u8; 20];
                let len = encode_hex(n, &mut line);
                // All three fit: `free` covers the header, data and CRLF.
                send_all(sock, &line[..len])?;
                send_all(sock, &data[..n])?;
                send_all(sock, b"\r\n")?;
                Ok(n)
            }
            Self::Discard => Ok(data.len()),
        }
    }

    /// End the body; `Ok(false)` while the ring has no room for the last
    /// chunk. Ending a `Length` body early leaves the peer waiting for the
    /// rest: the caller must then close the connection.
    pub fn finish(&mut self, sock: &mut tcp::Socket<'_>) -> Result<bool, tcp::SendError> {
        match self {
            Self::Length(remaining) => {
                if *remaining > 0 {
                    log::warn!("http: body ended {remaining} bytes short of its Content-Length");
                }
                Ok(true)
            }
            Self::Chunked => {
                const LAST: &[u8] = b"0\r\n\r\n";
                if sock.send_capacity() - sock.send_queue() < LAST.len() {
                    return Ok(false);
                }
                send_all(sock, LAST)?;
                Ok(true)
            }
            Self::Discard => Ok(true),
        }
    }
}

/// A queue of outgoing messages, written with partial-write bookkeeping.
///
/// Messages go out in the order pushed. Call [`flush`](Self::flush) on every
/// poll; it returns `Ok(true)` once everything is in the transmit ring. A
/// [`Body::Streamed`] message stays at the front until
/// [`finish_body`](Self::finish_body).
#[derive(Debug, Default)]
pub struct Writer {
    queue: VecDeque<Outgoing>,
}

impl Writer {
    /// An empty queue.
    pub fn new() -> Self {
        Self::default()
    }

    /// Queue a response. `head_request` suppresses the body bytes;
    /// `connection` is what the `Connection` field says.
    pub fn push_response(&mut self, resp: Response, head_request: bool, connection: Connection) {
        let mut head = Vec::with_capacity(128);
        push_all(
            &mut head,
            &[b"HTTP/1.1 ", resp.status.to_string().as_bytes(), b" "],
        );
        let reason = if is_clean_value(resp.reason.as_bytes()) {
            resp.reason.as_bytes()
        } else {
            b""
        };
        push_all(&mut head, &[reason, b"\r\n"]);
        push_user_headers(&mut head, &resp.headers);
        let bodiless = no_body_status(resp.status);
        let encoder = if bodiless {
            BodyEncoder::Discard
        } else {
            push_framing(&mut head, &resp.body)
        };
        match connection {
            Connection::Default => {}
            Connection::KeepAlive => head.extend_from_slice(b"Connection: keep-alive\r\n"),
            Connection::Close => head.extend_from_slice(b"Connection: close\r\n"),
        }
        head.extend_from_slice(b"\r\n");
        let (body, stream) = if bodiless || head_request {
            let stream = matches!(resp.body, Body::Streamed { .. }).then_some(BodyEncoder::Discard);
            (Body::Empty, stream)
        } else {
            match resp.body {
                Body::Streamed { .. } => (Body::Empty, Some(encoder)),
                body => (body, None),
            }
        };
        self.push(head, body, stream);
    }

    /// Queue a request; `host` fills the `Host` field unless the request has
    /// one.
    pub fn push_request(&mut self, req: Request, host: &str) {
        let mut head = Vec::with_capacity(128);
        let method = if is_token(req.method.as_bytes()) {
            req.method.as_bytes()
        } else {
            log::warn!("http: invalid method {:?}, sending GET", req.method);
            b"GET"
        };
        let target = if req.target.is_empty() || !is_clean_target(req.target.as_bytes()) {
            log::warn!("http: invalid request target {:?}, sending /", req.target);
            b"/".as_slice()
        } else {
            req.target.as_bytes()
        };
        push_all(&mut head, &[method, b" ", target, b" HTTP/1.1\r\n"]);
        if req.headers.get("host").is_none() && is_clean_value(host.as_bytes()) {
            push_all(&mut head, &[b"Host: ", host.as_bytes(), b"\r\n"]);
        }
        push_user_headers(&mut head, &req.headers);
        let expects_body = matches!(method, b"POST" | b"PUT" | b"PATCH");
        let encoder = if req.body.is_empty() && !expects_body {
            BodyEncoder::Discard
        } else {
            push_framing(&mut head, &req.body)
        };
        if req.headers.has_token("connection", "close") {
            head.extend_from_slice(b"Connection: close\r\n");
        }
        head.extend_from_slice(b"\r\n");
        let (body, stream) = match req.body {
            Body::Streamed { .. } => (Body::Empty, Some(encoder)),
            body => (body, None),
        };
        self.push(head, body, stream);
    }

    /// Queue an interim `100 Continue`.
    pub fn push_continue(&mut self) {
        self.push(b"HTTP/1.1 100 Continue\r\n\r\n".to_vec(), Body::Empty, None);
    }

    /// Move queued bytes into `sock`'s transmit ring. `Ok(true)` when the
    /// queue is empty; `Ok(false)` when the ring is full or a streamed body
    /// is in progress.
    pub fn flush(&mut self, sock: &mut tcp::Socket<'_>) -> Result<bool, tcp::SendError> {
        while let Some(out) = self.queue.front_mut() {
            if !out.flush_fixed(sock)? || out.stream.is_some() {
                return Ok(false);
            }
            self.queue.pop_front();
        }
        Ok(true)
    }

    /// Write body bytes of the streamed message at the front; returns the
    /// bytes accepted (0 while its head is not yet in the ring, or when no
    /// streamed message is at the front).
    pub fn write_body(
        &mut self,
        sock: &mut tcp::Socket<'_>,
        data: &[u8],
    ) -> Result<usize, tcp::SendError> {
        let Some(out) = self.queue.front_mut() else {
            return Ok(0);
        };
        if !out.flush_fixed(sock)? {
            return Ok(0);
        }
        match out.stream.as_mut() {
            Some(enc) => enc.write(sock, data),
            None => Ok(0),
        }
    }

    /// End the streamed body at the front; `Ok(false)` while that is not
    /// yet possible (head or last chunk not in the ring). Then flushes what
    /// follows.
    pub fn finish_body(&mut self, sock: &mut tcp::Socket<'_>) -> Result<bool, tcp::SendError> {
        let Some(out) = self.queue.front_mut() else {
            return Ok(false);
        };
        if !out.flush_fixed(sock)? {
            return Ok(false);
        }
        let Some(enc) = out.stream.as_mut() else {
            return Ok(false);
        };
        if !enc.finish(sock)? {
            return Ok(false);
        }
        self.queue.pop_front();
        self.flush(sock)?;
        Ok(true)
    }

    /// Whether nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    fn push(&mut self, head: Vec<u8>, body: Body, stream: Option<BodyEncoder>) {
        self.queue.push_back(Outgoing {
            head,
            head_off: 0,
            body,
            body_off: 0,
            stream,
        });
    }
}

/// A received request with its whole body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReceivedRequest {
    /// The head.
    pub head: RequestHead,
    /// The decoded body (chunk framing removed).
    pub body: Vec<u8>,
}

/// What [`ServerConn::poll`] has for the role.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerEvent {
    /// A complete request; answer it with [`ServerConn::respond`].
    Request(ReceivedRequest),
    /// The client broke the protocol; its error answer is queued and the
    /// connection closes after it (count it, nothing else to do).
    Error(ProtocolError),
    /// Nothing to do until the socket changes (poll again after
    /// `iface.poll`).
    Idle,
    /// The connection is over; the socket was closed (or reset). Re-arm
    /// the socket (`listen`) once it is closed and use a fresh `ServerConn`.
    Closed,
}

/// Server side of one HTTP/1.1 connection over one `tcp::Socket`.
///
/// Call order, on every wake-up after `iface.poll`: call
/// [`poll`](Self::poll) until it returns `Idle` or `Closed`; answer each
/// `Request` (now or on a later wake-up) with [`respond`](Self::respond).
/// Requests are handed out one at a time, in order; the next one is read
/// only once the previous response is fully in the transmit ring, so a slow
/// reader back-pressures a pipelining client through TCP. Bodies are
/// buffered whole, bounded by [`Limits::max_body_bytes`] (a streaming proxy
/// composes [`RequestDecoder`] and [`Writer`] itself).
///
/// On first contact it turns Nagle off on the socket (a response over one
/// segment otherwise meets the client's delayed ACK).
#[derive(Debug)]
pub struct ServerConn {
    decoder: RequestDecoder,
    out: Writer,
    phase: ServerPhase,
    head: Option<RequestHead>,
    body: Vec<u8>,
    seen_open: bool,
    peer_closed: bool,
}

impl ServerConn {
    /// A connection enforcing `limits`.
    pub fn new(limits: Limits) -> Self {
        Self {
            decoder: RequestDecoder::new(limits),
            out: Writer::new(),
            phase: ServerPhase::Reading,
            head: None,
            body: Vec::new(),
            seen_open: false,
            peer_closed: false,
        }
    }

    /// Write what is pending and read the next request; see the type docs.
    pub fn poll(&mut self, sock: &mut tcp::Socket<'_>) -> ServerEvent {
        if self.phase == ServerPhase::Closed {
            return ServerEvent::Closed;
        }
        if !sock.is_active() {
            if self.seen_open {
                self.phase = ServerPhase::Closed;
                return ServerEvent::Closed;
            }
            return ServerEvent::Idle;
        }
        if !self.seen_open {
            self.seen_open = true;
            sock.set_nagle_enabled(false);
        }
        match self.out.flush(sock) {
            Ok(true) => {}
            Ok(false) => return ServerEvent::Idle,
            Err(_) => return self.shut(sock),
        }
        match self.phase {
            ServerPhase::Reading => {}
            ServerPhase::Handling { .. } => return ServerEvent::Idle,
            ServerPhase::Draining | ServerPhase::Closed => return self.shut(sock),
        }
        match self.read(sock) {
            Ok(Some(req)) => ServerEvent::Request(req),
            Ok(None) => {
                // A `100 Continue` may have been queued while reading.
                if self.out.flush(sock).is_err() {
                    return self.shut(sock);
                }
                if self.peer_closed {
                    return self.shut(sock);
                }
                ServerEvent::Idle
            }
            Err(e) => {
                log::debug!("http: request error {e}, answering {}", e.status());
                self.head = None;
                self.body = Vec::new();
                let body = format!("{} {}\n", e.status(), reason_phrase(e.status()));
                let resp = Response::new(e.status()).with_body(body.into_bytes());
                self.out.push_response(resp, false, Connection::Close);
                self.phase = ServerPhase::Draining;
                // Best effort now; the next poll finishes and closes.
                let _ = self.out.flush(sock);
                ServerEvent::Error(e)
            }
        }
    }

    /// Queue the response to the request last handed out. It is written on
    /// this and following polls; a streamed body is fed with
    /// [`write_body`](Self::write_body).
    pub fn respond(&mut self, resp: Response) -> Result<(), StateError> {
        let ServerPhase::Handling {
            head_request,
            connection,
        } = self.phase
        else {
            return Err(StateError::NoPendingRequest);
        };
        let connection = if resp.headers.has_token("connection", "close") {
            Connection::Close
        } else {
            connection
        };
        self.out.push_response(resp, head_request, connection);
        self.phase = if connection == Connection::Close {
            ServerPhase::Draining
        } else {
            ServerPhase::Reading
        };
        Ok(())
    }

    /// Feed the streamed body of the response being written; returns the
    /// bytes accepted (see [`Writer::write_body`]).
    pub fn write_body(&mut self, sock: &mut tcp::Socket<'_>, data: &[u8]) -> usize {
        match self.out.write_body(sock, data) {
            Ok(n) => n,
            Err(_) => {
                self.phase = ServerPhase::Closed;
                0
            }
        }
    }

    /// End the streamed body of the response being written; `false` until
    /// done (see [`Writer::finish_body`]).
    pub fn finish_body(&mut self, sock: &mut tcp::Socket<'_>) -> bool {
        match self.out.finish_body(sock) {
            Ok(done) => done,
            Err(_) => {
                self.phase = ServerPhase::Closed;
                false
            }
        }
    }

    /// Whether a request was handed out and awaits its response.
    pub fn awaiting_response(&self) -> bool {
        matches!(self.phase, ServerPhase::Handling { .. })
    }

    /// Whether the connection is over.
    pub fn is_closed(&self) -> bool {
        self.phase == ServerPhase::Closed
    }

    fn read(
        &mut self,
        sock: &mut tcp::Socket<'_>,
    ) -> Result<Option<ReceivedRequest>, ProtocolError> {
        loop {
            match self.decoder.recv(sock, usize::MAX)? {
                Decoded::NeedMore => return Ok(None),
                Decoded::Closed => {
                    self.peer_closed = true;
                    return Ok(None);
                }
                Decoded::Head(head) => {
                    let framing = self.decoder.framing();
                    if head.expects_continue() && framing != Some(Framing::Empty) {
                        self.out.push_continue();
                    }
                    if let Some(Framing::Length(n)) = framing {
                        self.body.reserve(clamp(n, 1 << 20));
                    }
                    self.head = Some(head);
                }
                Decoded::Data(d) => self.body.extend_from_slice(d),
                Decoded::End => {
                    // A decoder yields `End` only after `Head`.
                    let head = self.head.take().ok_or(ProtocolError::Malformed)?;
                    let connection = match (head.keep_alive(), head.version) {
                        (false, _) => Connection::Close,
                        (true, Version::Http10) => Connection::KeepAlive,
                        (true, Version::Http11) => Connection::Default,
                    };
                    self.phase = ServerPhase::Handling {
                        head_request: head.is_head(),
                        connection,
                    };
                    let body = std::mem::take(&mut self.body);
                    return Ok(Some(ReceivedRequest { head, body }));
                }
            }
        }
    }

    fn shut(&mut self, sock: &mut tcp::Socket<'_>) -> ServerEvent {
        sock.close();
        self.phase = ServerPhase::Closed;
        ServerEvent::Closed
    }
}

/// How a [`ClientConn`] delivers a response body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyMode {
    /// Collect it into [`ReceivedResponse::body`] (bounded by
    /// [`Limits::max_body_bytes`]).
    Buffer,
    /// Count it into [`ReceivedResponse::body_len`] and drop it (load
    /// clients).
    Discard,
    /// Hand it out as [`ClientEvent::Head`], [`ClientEvent::Data`]…,
    /// [`ClientEvent::End`], straight from the receive ring (no limit on
    /// the total).
    Stream,
}

/// A received response (in [`BodyMode::Buffer`] or [`BodyMode::Discard`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReceivedResponse {
    /// The head.
    pub head: ResponseHead,
    /// The decoded body (empty in [`BodyMode::Discard`]).
    pub body: Vec<u8>,
    /// Bytes of decoded body received.
    pub body_len: u64,
}

/// What [`ClientConn::poll`] has for the role.
#[derive(Debug, PartialEq, Eq)]
pub enum ClientEvent<'s> {
    /// A complete response to the oldest request in flight.
    Response(ReceivedResponse),
    /// [`BodyMode::Stream`]: the head of the response.
    Head(ResponseHead),
    /// [`BodyMode::Stream`]: a piece of its body, borrowed from the ring.
    Data(&'s [u8]),
    /// [`BodyMode::Stream`]: the response is complete.
    End {
        /// Bytes of decoded body received.
        body_len: u64,
    },
    /// The server broke the protocol; the connection is aborted.
    Error(ProtocolError),
    /// Nothing to do until the socket changes.
    Idle,
    /// The connection is over (server closed, or a response said
    /// `Connection: close`, or the socket was reset). Requests still in
    /// flight are lost.
    Closed,
}

/// Client side of one HTTP/1.1 connection over one `tcp::Socket`.
///
/// [`send`](Self::send) queues requests (several may be in flight:
/// pipelining); [`poll`](Self::poll), called after every `iface.poll` until
/// it returns `Idle` or `Closed`, writes them (partial writes continue on the
/// next poll) and decodes the responses in order. The caller connects the
/// socket; requests may be queued before it is established.
#[derive(Debug)]
pub struct ClientConn {
    limits: Limits,
    host: String,
    decoder: ResponseDecoder,
    out: Writer,
    in_flight: VecDeque<InFlight>,
    /// Head of the response being received (`None` once handed out in
    /// stream mode).
    head: Option<ResponseHead>,
    body: Vec<u8>,
    body_len: u64,
    interim: bool,
    reusable: bool,
    close_pending: bool,
    seen_open: bool,
    closed: bool,
}

impl ClientConn {
    /// A connection to `host` (the `Host` field) enforcing `limits`.
    pub fn new(host: impl Into<String>, limits: Limits) -> Self {
        Self {
            limits,
            host: host.into(),
            decoder: ResponseDecoder::new(limits),
            out: Writer::new(),
            in_flight: VecDeque::new(),
            head: None,
            body: Vec::new(),
            body_len: 0,
            interim: false,
            reusable: true,
            close_pending: false,
            seen_open: false,
            closed: false,
        }
    }

    /// Queue `req`; its response is delivered per `mode`.
    pub fn send(&mut self, req: Request, mode: BodyMode) -> Result<(), StateError> {
        if !self.reusable || self.closed {
            return Err(StateError::Closing);
        }
        if req.headers.has_token("connection", "close") {
            self.reusable = false;
        }
        self.in_flight.push_back(InFlight {
            head_request: req.method == "HEAD",
            mode,
        });
        self.out.push_request(req, &self.host);
        Ok(())
    }

    /// Write pending requests and decode responses; see the type docs.
    pub fn poll<'s>(&mut self, sock: &'s mut tcp::Socket<'_>) -> ClientEvent<'s> {
        if self.closed {
            return ClientEvent::Closed;
        }
        if self.close_pending {
            sock.close();
            self.closed = true;
            return ClientEvent::Closed;
        }
        if !sock.is_open() {
            if self.seen_open {
                self.closed = true;
                return ClientEvent::Closed;
            }
            return ClientEvent::Idle;
        }
        if !sock.may_send() && !sock.may_recv() {
            // Still connecting.
            return ClientEvent::Idle;
        }
        if !self.seen_open {
            self.seen_open = true;
            sock.set_nagle_enabled(false);
        }
        // `InvalidState` here means the server half-closed: nothing more can
        // be sent, but its responses may still be read.
        let _ = self.out.flush(sock);
        let Some(front) = self.in_flight.front().copied() else {
            if !sock.may_recv() {
                sock.close();
                self.closed = true;
                return ClientEvent::Closed;
            }
            return ClientEvent::Idle;
        };
        self.decoder.set_head_request(front.head_request);
        let streaming = front.mode == BodyMode::Stream;
        loop {
            if streaming && self.decoder.at_data() {
                break;
            }
            // In stream mode, stop at body data: it is handed out below.
            let max_data = if streaming { 0 } else { usize::MAX };
            let ev = match self.decoder.recv(sock, max_data) {
                Ok(ev) => ev,
                Err(e) => return self.fail(sock, e),
            };
            match ev {
                Decoded::NeedMore if streaming && self.decoder.at_data() => break,
                Decoded::NeedMore => return ClientEvent::Idle,
                Decoded::Closed => {
                    sock.close();
                    self.closed = true;
                    return ClientEvent::Closed;
                }
                Decoded::Head(head) => {
                    if (100..200).contains(&head.status) && head.status != 101 {
                        self.interim = true;
                        continue;
                    }
                    if !head.keep_alive() || self.decoder.framing() == Some(Framing::UntilClose) {
                        self.reusable = false;
                    }
                    self.body = Vec::new();
                    self.body_len = 0;
                    if streaming {
                        return ClientEvent::Head(head);
                    }
                    self.head = Some(head);
                }
                Decoded::Data(d) => {
                    self.body_len += d.len() as u64;
                    if front.mode == BodyMode::Buffer {
                        if self.body_len > self.limits.max_body_bytes {
                            return self.fail(sock, ProtocolError::BodyTooLarge);
                        }
                        self.body.extend_from_slice(d);
                    }
                }
                Decoded::End => {
                    if std::mem::take(&mut self.interim) {
                        continue;
                    }
                    return self.complete();
                }
            }
        }
        // Streaming and at body data: hand out a slice of the ring.
        match self.decoder.recv(sock, usize::MAX) {
            Ok(Decoded::Data(d)) => {
                self.body_len += d.len() as u64;
                ClientEvent::Data(d)
            }
            Ok(Decoded::End) => self.complete(),
            Ok(Decoded::NeedMore | Decoded::Head(_)) => ClientEvent::Idle,
            Ok(Decoded::Closed) => {
                self.close_pending = true;
                ClientEvent::Idle
            }
            Err(e) => {
                self.close_pending = true;
                ClientEvent::Error(e)
            }
        }
    }

    /// Feed the streamed body of the request being written; returns the
    /// bytes accepted (see [`Writer::write_body`]).
    pub fn write_body(&mut self, sock: &mut tcp::Socket<'_>, data: &[u8]) -> usize {
        self.out.write_body(sock, data).unwrap_or(0)
    }

    /// End the streamed body of the request being written; `false` until
    /// done (see [`Writer::finish_body`]).
    pub fn finish_body(&mut self, sock: &mut tcp::Socket<'_>) -> bool {
        self.out.finish_body(sock).unwrap_or(false)
    }

    /// Requests sent or queued whose responses have not completed.
    pub fn in_flight(&self) -> usize {
        self.in_flight.len()
    }

    /// Whether more requests may be sent on this connection.
    pub fn is_reusable(&self) -> bool {
        self.reusable && !self.closed
    }

    /// Whether the connection is over.
    pub fn is_closed(&self) -> bool {
        self.closed
    }

    fn complete(&mut self) -> ClientEvent<'static> {
        self.in_flight.pop_front();
        if !self.reusable && self.in_flight.is_empty() {
            self.close_pending = true;
        }
        let body_len = std::mem::take(&mut self.body_len);
        match self.head.take() {
            Some(head) => ClientEvent::Response(ReceivedResponse {
                head,
                body: std::mem::take(&mut self.body),
                body_len,
            }),
            None => ClientEvent::End { body_len },
        }
    }

    fn fail(&mut self, sock: &mut tcp::Socket<'_>, e: ProtocolError) -> ClientEvent<'static> {
        log::debug!("http: response error {e}");
        sock.abort();
        self.closed = true;
        self.reusable = false;
        ClientEvent::Error(e)
    }
}

/// The standard reason phrase of `status` (empty if unknown).
pub fn reason_phrase(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        101 => "Switching Protocols",
        200 => "OK",
        201 => "Created",
        202 => "Accepted",
        204 => "No Content",
        206 => "Partial Content",
        301 => "Moved Permanently",
        302 => "Found",
        303 => "See Other",
        304 => "Not Modified",
        307 => "Temporary Redirect",
        308 => "Permanent Redirect",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        411 => "Length Required",
        413 => "Content Too Large",
        414 => "URI Too Long",
        415 => "Unsupported Media Type",
        417 => "Expectation Failed",
        421 => "Misdirected Request",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        505 => "HTTP Version Not Supported",
        _ => "",
    }
}

// ---------------------------------------------------------------------------
// Decoding internals
// ---------------------------------------------------------------------------

/// The framing engine shared by both decoders: head accumulation and body
/// de-framing. Head *parsing* is the wrappers' (see [`ParseHead`]).
#[derive(Debug)]
struct Framer {
    limits: Limits,
    state: FrameState,
    /// Bytes of the head seen so far (bounded by `limits.max_head_bytes`).
    head: Vec<u8>,
    framing: Option<Framing>,
    /// Body bytes delivered for the current message.
    body_seen: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FrameState {
    /// Accumulating a head.
    Head,
    /// The head in `Framer::head` is complete and must be parsed.
    HeadDone,
    /// `Content-Length` bytes left.
    Length(u64),
    /// Inside a chunked body.
    Chunked(Chunk),
    /// Body until the peer closes.
    UntilClose,
    /// The connection has ended (after a close-delimited body).
    Closed,
    /// A protocol error poisoned the decoder.
    Failed(ProtocolError),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Chunk {
    /// Reading hex digits of a chunk size.
    Size {
        value: u64,
        digits: bool,
        line: usize,
    },
    /// After the digits: whitespace and extensions up to CR.
    Ext { value: u64, line: usize },
    /// CR of the size line seen, LF due.
    SizeLf { value: u64 },
    /// Chunk data left.
    Data(u64),
    /// CR after chunk data due.
    DataCr,
    /// LF after chunk data due.
    DataLf,
    /// At the start of a trailer line (or the final CRLF).
    TrailerStart { total: usize },
    /// Inside a trailer line.
    TrailerLine { total: usize },
    /// CR of a trailer line seen, LF due.
    TrailerLf { total: usize },
    /// CR of the final blank line seen, LF due.
    FinalLf,
}

/// What [`Framer::advance`] stopped at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    NeedMore,
    HeadDone,
    AtData,
    End,
}

impl Framer {
    fn new(limits: Limits) -> Self {
        Self {
            limits,
            state: FrameState::Head,
            head: Vec::new(),
            framing: None,
            body_seen: 0,
        }
    }

    fn fail<T>(&mut self, e: ProtocolError) -> Result<T, ProtocolError> {
        self.state = FrameState::Failed(e);
        self.head = Vec::new();
        Err(e)
    }

    fn framing(&self) -> Option<Framing> {
        self.framing
    }

    fn at_data(&self) -> bool {
        match self.state {
            FrameState::Length(n) | FrameState::Chunked(Chunk::Data(n)) => n > 0,
            FrameState::UntilClose => true,
            _ => false,
        }
    }

    fn is_idle(&self) -> bool {
        self.state == FrameState::Head && self.head.is_empty()
    }

    /// Process framing bytes of `input` up to the next event; never consumes
    /// body data (see [`Self::take_data`]).
    fn advance(&mut self, input: &[u8]) -> Result<(usize, Step), ProtocolError> {
        match self.state {
            FrameState::Failed(e) => Err(e),
            FrameState::Closed => Ok((0, Step::NeedMore)),
            FrameState::HeadDone => Ok((0, Step::HeadDone)),
            FrameState::Head => self.advance_head(input),
            FrameState::Length(0) => Ok((0, self.end_message())),
            FrameState::Length(_) | FrameState::UntilClose => Ok((0, Step::AtData)),
            FrameState::Chunked(_) => self.advance_chunked(input),
        }
    }

    fn advance_head(&mut self, input: &[u8]) -> Result<(usize, Step), ProtocolError> {
        let mut start = 0;
        if self.head.is_empty() {
            // RFC 9112 §2.2: ignore empty lines before a start line.
            start = input
                .iter()
                .position(|&b| b != b'\r' && b != b'\n')
                .unwrap_or(input.len());
        }
        let fresh = &input[start..];
        let base = self.head.len();
        let byte_at = |i: usize, head: &[u8]| -> u8 {
            if i < base {
                head[i]
            } else {
                fresh[i - base]
            }
        };
        let mut end = None;
        for (i, &b) in fresh.iter().enumerate() {
            if b != b'\n' {
                continue;
            }
            let pos = base + i;
            // A line feed ends the head if the line it ends is empty:
            // "\n\n" or "\n\r\n".
            let blank = (pos >= 1 && byte_at(pos - 1, &self.head) == b'\n')
                || (pos >= 2
                    && byte_at(pos - 1, &self.head) == b'\r'
                    && byte_at(pos - 2, &self.head) == b'\n');
            if blank {
                end = Some(i + 1);
                break;
            }
        }
        let take = end.unwrap_or(fresh.len());
        if base + take > self.limits.max_head_bytes {
            return self.fail(ProtocolError::HeadTooLarge);
        }
        self.head.extend_from_slice(&fresh[..take]);
        if end.is_some() {
            self.state = FrameState::HeadDone;
            Ok((start + take, Step::HeadDone))
        } else {
            Ok((start + take, Step::NeedMore))
        }
    }

    /// The parsed head's framing; the body starts.
    fn begin_body(&mut self, framing: Framing) {
        self.head.clear();
        self.framing = Some(framing);
        self.body_seen = 0;
        self.state = match framing {
            Framing::Empty => FrameState::Length(0),
            Framing::Length(n) => FrameState::Length(n),
            Framing::Chunked => FrameState::Chunked(Chunk::Size {
                value: 0,
                digits: false,
                line: 0,
            }),
            Framing::UntilClose => FrameState::UntilClose,
        };
    }

    fn end_message(&mut self) -> Step {
        self.state = FrameState::Head;
        self.head.clear();
        Step::End
    }

    fn advance_chunked(&mut self, input: &[u8]) -> Result<(usize, Step), ProtocolError> {
        let FrameState::Chunked(mut chunk) = self.state else {
            return Ok((0, Step::NeedMore));
        };
        let max_trailer = self.limits.max_head_bytes;
        let mut used = 0;
        loop {
            if let Chunk::Data(n) = chunk {
                if n > 0 {
                    self.state = FrameState::Chunked(chunk);
                    return Ok((used, Step::AtData));
                }
                chunk = Chunk::DataCr;
            }
            let Some(&b) = input.get(used) else {
                self.state = FrameState::Chunked(chunk);
                return Ok((used, Step::NeedMore));
            };
            used += 1;
            chunk = match chunk {
                Chunk::Size {
                    value,
                    digits,
                    line,
                } => {
                    let line = line + 1;
                    if line > MAX_CHUNK_LINE {
                        return self.fail(ProtocolError::BadChunk);
                    }
                    if let Some(d) = hex_digit(b) {
                        let Some(value) = value.checked_mul(16).and_then(|v| v.checked_add(d))
                        else {
                            return self.fail(ProtocolError::BadChunk);
                        };
                        Chunk::Size {
                            value,
                            digits: true,
                            line,
                        }
                    } else if !digits {
                        return self.fail(ProtocolError::BadChunk);
                    } else if b == b'\r' {
                        Chunk::SizeLf { value }
                    } else if b == b';' || b == b' ' || b == b'\t' {
                        Chunk::Ext { value, line }
                    } else {
                        return self.fail(ProtocolError::BadChunk);
                    }
                }
                Chunk::Ext { value, line } => {
                    let line = line + 1;
                    if line > MAX_CHUNK_LINE {
                        return self.fail(ProtocolError::BadChunk);
                    }
                    match b {
                        b'\r' => Chunk::SizeLf { value },
                        b'\t' | 0x20..=0x7e | 0x80..=0xff => Chunk::Ext { value, line },
                        _ => return self.fail(ProtocolError::BadChunk),
                    }
                }
                Chunk::SizeLf { value } => {
                    if b != b'\n' {
                        return self.fail(ProtocolError::BadChunk);
                    }
                    if value == 0 {
                        Chunk::TrailerStart { total: 0 }
                    } else if self.body_seen.saturating_add(value) > self.limits.max_body_bytes {
                        return self.fail(ProtocolError::BodyTooLarge);
                    } else {
                        Chunk::Data(value)
                    }
                }
                Chunk::Data(_) | Chunk::DataCr => {
                    if b != b'\r' {
                        return self.fail(ProtocolError::BadChunk);
                    }
                    Chunk::DataLf
                }
                Chunk::DataLf => {
                    if b != b'\n' {
                        return self.fail(ProtocolError::BadChunk);
                    }
                    Chunk::Size {
                        value: 0,
                        digits: false,
                        line: 0,
                    }
                }
                Chunk::TrailerStart { total } => match b {
                    b'\r' => Chunk::FinalLf,
                    b'\n' => return self.fail(ProtocolError::BadChunk),
                    _ => Chunk::TrailerLine { total: total + 1 },
                },
                Chunk::TrailerLine { total } => match b {
                    b'\r' => Chunk::TrailerLf { total: total + 1 },
                    b'\n' => return self.fail(ProtocolError::BadChunk),
                    _ => Chunk::TrailerLine { total: total + 1 },
                },
                Chunk::TrailerLf { total } => {
                    if b != b'\n' {
                        return self.fail(ProtocolError::BadChunk);
                    }
                    Chunk::TrailerStart { total: total + 1 }
                }
                Chunk::FinalLf => {
                    if b != b'\n' {
                        return self.fail(ProtocolError::BadChunk);
                    }
                    return Ok((used, self.end_message()));
                }
            };
            if let Chunk::TrailerStart { total }
            | Chunk::TrailerLine { total }
            | Chunk::TrailerLf { total } = chunk
            {
                if total > max_trailer {
                    return self.fail(ProtocolError::TrailersTooLarge);
                }
            }
        }
    }

    /// Consume body data at the front of `input` (call when
    /// [`Self::at_data`]).
    fn take_data<'a>(&mut self, input: &'a [u8]) -> Result<(usize, &'a [u8]), ProtocolError> {
        let n = match &mut self.state {
            FrameState::Failed(e) => return Err(*e),
            FrameState::Length(rem) | FrameState::Chunked(Chunk::Data(rem)) => {
                let n = clamp(*rem, input.len());
                *rem -= n as u64;
                n
            }
            FrameState::UntilClose => input.len(),
            _ => 0,
        };
        self.body_seen += n as u64;
        if self.body_seen > self.limits.max_body_bytes {
            return self.fail(ProtocolError::BodyTooLarge);
        }
        Ok((n, &input[..n]))
    }

    fn finish(&mut self) -> Result<bool, ProtocolError> {
        match self.state {
            FrameState::Failed(e) => Err(e),
            FrameState::Closed => Ok(false),
            FrameState::Head if self.head.is_empty() => {
                self.state = FrameState::Closed;
                Ok(false)
            }
            FrameState::UntilClose => {
                self.state = FrameState::Closed;
                self.head.clear();
                Ok(true)
            }
            _ => self.fail(ProtocolError::Incomplete),
        }
    }
}

/// The per-direction half of a decoder: parse a complete head.
trait ParseHead {
    type Head;
    fn framer(&mut self) -> &mut Framer;
    /// Parse the complete head in `framer().head` and start its body.
    fn parse_head(&mut self) -> Result<Self::Head, ProtocolError>;
}

impl ParseHead for RequestDecoder {
    type Head = RequestHead;

    fn framer(&mut self) -> &mut Framer {
        &mut self.framer
    }

    fn parse_head(&mut self) -> Result<RequestHead, ProtocolError> {
        let limits = self.framer.limits;
        let mut slots = vec![httparse::EMPTY_HEADER; limits.max_headers];
        let mut req = httparse::Request::new(&mut slots);
        let parsed = req.parse(&self.framer.head);
        let head = match parsed {
            Ok(httparse::Status::Complete(_)) => {
                let (Some(method), Some(target), Some(minor)) = (req.method, req.path, req.version)
                else {
                    return Err(ProtocolError::Malformed);
                };
                RequestHead {
                    method: method.to_owned(),
                    target: target.to_owned(),
                    version: if minor == 0 {
                        Version::Http10
                    } else {
                        Version::Http11
                    },
                    headers: copy_headers(req.headers),
                }
            }
            Ok(httparse::Status::Partial) => return Err(ProtocolError::Malformed),
            Err(httparse::Error::TooManyHeaders) => return Err(ProtocolError::TooManyHeaders),
            Err(httparse::Error::Version) if names_other_version(&self.framer.head) => {
                return Err(ProtocolError::UnsupportedVersion);
            }
            Err(_) => return Err(ProtocolError::Malformed),
        };
        let framing = request_framing(&head)?;
        if let Framing::Length(n) = framing {
            if n > limits.max_body_bytes {
                return Err(ProtocolError::BodyTooLarge);
            }
        }
        self.framer.begin_body(framing);
        Ok(head)
    }
}

impl ParseHead for ResponseDecoder {
    type Head = ResponseHead;

    fn framer(&mut self) -> &mut Framer {
        &mut self.framer
    }

    fn parse_head(&mut self) -> Result<ResponseHead, ProtocolError> {
        let limits = self.framer.limits;
        let mut slots = vec![httparse::EMPTY_HEADER; limits.max_headers];
        let mut resp = httparse::Response::new(&mut slots);
        let head = match resp.parse(&self.framer.head) {
            Ok(httparse::Status::Complete(_)) => {
                let (Some(minor), Some(status)) = (resp.version, resp.code) else {
                    return Err(ProtocolError::Malformed);
                };
                ResponseHead {
                    version: if minor == 0 {
                        Version::Http10
                    } else {
                        Version::Http11
                    },
                    status,
                    reason: resp.reason.unwrap_or_default().to_owned(),
                    headers: copy_headers(resp.headers),
                }
            }
            Ok(httparse::Status::Partial) => return Err(ProtocolError::Malformed),
            Err(httparse::Error::TooManyHeaders) => return Err(ProtocolError::TooManyHeaders),
            Err(httparse::Error::Version) if names_other_version(&self.framer.head) => {
                return Err(ProtocolError::UnsupportedVersion);
            }
            Err(_) => return Err(ProtocolError::Malformed),
        };
        let framing = response_framing(&head, self.head_request)?;
        if let Framing::Length(n) = framing {
            if n > limits.max_body_bytes {
                return Err(ProtocolError::BodyTooLarge);
            }
        }
        self.framer.begin_body(framing);
        Ok(head)
    }
}

fn decode_with<'a, P: ParseHead>(
    p: &mut P,
    input: &'a [u8],
) -> Result<(usize, Decoded<'a, P::Head>), ProtocolError> {
    let (used, step) = p.framer().advance(input)?;
    match step {
        Step::NeedMore => Ok((used, Decoded::NeedMore)),
        Step::End => Ok((used, Decoded::End)),
        Step::HeadDone => parse_or_fail(p).map(|h| (used, Decoded::Head(h))),
        Step::AtData => match p.framer().take_data(&input[used..])? {
            (0, _) => Ok((used, Decoded::NeedMore)),
            (n, data) => Ok((used + n, Decoded::Data(data))),
        },
    }
}

fn parse_or_fail<P: ParseHead>(p: &mut P) -> Result<P::Head, ProtocolError> {
    match p.parse_head() {
        Ok(h) => Ok(h),
        Err(e) => p.framer().fail(e),
    }
}

/// One framing step on the contiguous front of a receive ring, with an
/// owned result (so the ring may be read again in the same call).
enum OwnedStep<H> {
    NeedMore,
    Head(H),
    End,
    AtData,
}

fn recv_with<'s, P: ParseHead>(
    p: &mut P,
    sock: &'s mut tcp::Socket<'_>,
    max_data: usize,
) -> Result<Decoded<'s, P::Head>, ProtocolError> {
    // Framing bytes first, looping over the ring's contiguous parts: a head
    // straddling the wrap needs two `recv` calls.
    while !p.framer().at_data() {
        // Events due without input (a body-less message's `End`) come first:
        // `recv` fails without calling back once the peer's FIN is read.
        match p.framer().advance(&[])? {
            (_, Step::End) => return Ok(Decoded::End),
            (_, Step::HeadDone) => return parse_or_fail(p).map(Decoded::Head),
            (_, Step::AtData) => break,
            (_, Step::NeedMore) => {}
        }
        let res = sock.recv(|buf| {
            let (n, step) = match p.framer().advance(buf) {
                Ok(x) => x,
                Err(e) => return (0, Err(e)),
            };
            let step = match step {
                Step::NeedMore => Ok((n, OwnedStep::NeedMore)),
                Step::AtData => Ok((n, OwnedStep::AtData)),
                Step::End => Ok((n, OwnedStep::End)),
                Step::HeadDone => parse_or_fail(p).map(|h| (n, OwnedStep::Head(h))),
            };
            (n, step)
        });
        let step = match res {
            Ok(r) => r?,
            Err(e) => return recv_closed(p, sock.is_open(), e),
        };
        match step {
            (0, OwnedStep::NeedMore) => return Ok(Decoded::NeedMore),
            (_, OwnedStep::NeedMore | OwnedStep::AtData) => {}
            (_, OwnedStep::Head(h)) => return Ok(Decoded::Head(h)),
            (_, OwnedStep::End) => return Ok(Decoded::End),
        }
    }
    // Body data, borrowed straight from the ring.
    let open = sock.is_open();
    let framer = p.framer();
    let res = sock.recv(|buf| {
        let buf: &'s [u8] = buf;
        let lim = buf.len().min(max_data);
        match framer.take_data(&buf[..lim]) {
            Ok((n, data)) => (n, Ok(data)),
            Err(e) => (0, Err(e)),
        }
    });
    match res {
        Ok(Ok([])) => Ok(Decoded::NeedMore),
        Ok(Ok(data)) => Ok(Decoded::Data(data)),
        Ok(Err(e)) => Err(e),
        Err(e) => recv_closed(p, open, e),
    }
}

/// `recv` failed: the peer finished, or the socket is not yet (`open`) or
/// no longer open.
fn recv_closed<P: ParseHead, T>(
    p: &mut P,
    open: bool,
    e: tcp::RecvError,
) -> Result<Decoded<'static, T>, ProtocolError> {
    if e == tcp::RecvError::InvalidState && open {
        // Listening or handshaking: nothing yet.
        return Ok(Decoded::NeedMore);
    }
    match p.framer().finish()? {
        true => Ok(Decoded::End),
        false => Ok(Decoded::Closed),
    }
}

fn copy_headers(raw: &[httparse::Header<'_>]) -> Headers {
    Headers {
        list: raw
            .iter()
            .map(|h| Header {
                name: h.name.to_owned(),
                value: h.value.to_vec(),
            })
            .collect(),
    }
}

/// Whether a head that httparse refused for its version names a
/// well-formed `HTTP/x.y` other than 1.0/1.1 (505, not 400).
fn names_other_version(head: &[u8]) -> bool {
    let line_end = head.iter().position(|&b| b == b'\n').unwrap_or(head.len());
    let line = trim(&head[..line_end]);
    // A request line ends with the version; a status line starts with it.
    let candidates = [
        line.rsplit(|&b| b == b' ').next().unwrap_or(&[]),
        line.split(|&b| b == b' ').next().unwrap_or(&[]),
    ];
    candidates.iter().any(|tok| {
        let Some(v) = tok.strip_prefix(b"HTTP/") else {
            return false;
        };
        let mut parts = v.splitn(2, |&b| b == b'.');
        let major = parts.next().unwrap_or(&[]);
        let minor = parts.next();
        let digits = |s: &[u8]| !s.is_empty() && s.len() <= 3 && s.iter().all(u8::is_ascii_digit);
        digits(major) && minor.is_none_or(digits)
    })
}

/// RFC 9112 §6.3 for requests, strict.
fn request_framing(head: &RequestHead) -> Result<Framing, ProtocolError> {
    let length = content_length(&head.headers)?;
    let Some(coding) = transfer_coding(&head.headers)? else {
        return Ok(length.map_or(Framing::Empty, Framing::Length));
    };
    if length.is_some() {
        return Err(ProtocolError::LengthAndTransferEncoding);
    }
    if head.version == Version::Http10 {
        return Err(ProtocolError::BadTransferEncoding);
    }
    match coding {
        Coding::ChunkedOnly => Ok(Framing::Chunked),
        Coding::ChunkedLast | Coding::NotChunked => Err(ProtocolError::UnsupportedTransferEncoding),
        Coding::Invalid => Err(ProtocolError::BadTransferEncoding),
    }
}

/// RFC 9112 §6.3 for responses, strict about the CL+TE ambiguity.
fn response_framing(head: &ResponseHead, head_request: bool) -> Result<Framing, ProtocolError> {
    if head_request || no_body_status(head.status) {
        return Ok(Framing::Empty);
    }
    let length = content_length(&head.headers)?;
    let Some(coding) = transfer_coding(&head.headers)? else {
        return Ok(length.map_or(Framing::UntilClose, Framing::Length));
    };
    if length.is_some() {
        return Err(ProtocolError::LengthAndTransferEncoding);
    }
    match coding {
        // The other codings are the application's to undo.
        Coding::ChunkedOnly | Coding::ChunkedLast => Ok(Framing::Chunked),
        // "chunked" not last: the body runs until close.
        Coding::NotChunked => Ok(Framing::UntilClose),
        Coding::Invalid => Err(ProtocolError::BadTransferEncoding),
    }
}

/// What a `Transfer-Encoding` list amounts to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Coding {
    /// Exactly `chunked`.
    ChunkedOnly,
    /// Other codings, then `chunked` once, last.
    ChunkedLast,
    /// Only codings other than `chunked`.
    NotChunked,
    /// Empty, or `chunked` repeated or followed by another coding.
    Invalid,
}

fn transfer_coding(headers: &Headers) -> Result<Option<Coding>, ProtocolError> {
    let mut present = false;
    let mut codings: Vec<&[u8]> = Vec::new();
    for value in headers.get_all("transfer-encoding") {
        present = true;
        codings.extend(
            value
                .split(|&b| b == b',')
                .map(trim)
                .filter(|t| !t.is_empty()),
        );
    }
    if !present {
        return Ok(None);
    }
    let is_chunked = |t: &[u8]| t.eq_ignore_ascii_case(b"chunked");
    let chunked = codings.iter().filter(|t| is_chunked(t)).count();
    let coding = match (codings.len(), chunked) {
        (0, _) => Coding::Invalid,
        (1, 1) => Coding::ChunkedOnly,
        (_, 0) => Coding::NotChunked,
        (_, 1) if codings.last().is_some_and(|t| is_chunked(t)) => Coding::ChunkedLast,
        _ => Coding::Invalid,
    };
    Ok(Some(coding))
}

/// All `Content-Length` values (several fields, or comma lists) must agree.
fn content_length(headers: &Headers) -> Result<Option<u64>, ProtocolError> {
    let mut length = None;
    for value in headers.get_all("content-length") {
        for item in value.split(|&b| b == b',') {
            let n = parse_decimal(trim(item)).ok_or(ProtocolError::BadContentLength)?;
            match length {
                Some(prev) if prev != n => return Err(ProtocolError::ConflictingContentLength),
                _ => length = Some(n),
            }
        }
    }
    Ok(length)
}

fn parse_decimal(s: &[u8]) -> Option<u64> {
    if s.is_empty() || s.len() > 19 {
        return None;
    }
    s.iter().try_fold(0u64, |acc, &b| {
        let d = char::from(b).to_digit(10)?;
        acc.checked_mul(10)?.checked_add(u64::from(d))
    })
}

fn hex_digit(b: u8) -> Option<u64> {
    char::from(b).to_digit(16).map(u64::from)
}

fn keep_alive(version: Version, headers: &Headers) -> bool {
    if headers.has_token("connection", "close") {
        return false;
    }
    match version {
        Version::Http10 => headers.has_token("connection", "keep-alive"),
        Version::Http11 => true,
    }
}

/// Statuses whose responses never carry a body.
fn no_body_status(status: u16) -> bool {
    (100..200).contains(&status) || status == 204 || status == 304
}

fn trim(s: &[u8]) -> &[u8] {
    s.trim_ascii()
}

/// `min(a, b)` for a `u64` bound on a `usize` length.
fn clamp(a: u64, b: usize) -> usize {
    usize::try_from(a).map_or(b, |a| a.min(b))
}

// ---------------------------------------------------------------------------
// Encoding internals
// ---------------------------------------------------------------------------

/// One queued message: its head bytes and body, with write offsets.
#[derive(Debug)]
struct Outgoing {
    head: Vec<u8>,
    head_off: usize,
    body: Body,
    body_off: usize,
    /// `Some` for a streamed body, until it is finished.
    stream: Option<BodyEncoder>,
}

impl Outgoing {
    /// Write the rest of the head and fixed body; `Ok(true)` when done.
    fn flush_fixed(&mut self, sock: &mut tcp::Socket<'_>) -> Result<bool, tcp::SendError> {
        if self.head_off < self.head.len() {
            self.head_off += send_all(sock, &self.head[self.head_off..])?;
            if self.head_off < self.head.len() {
                return Ok(false);
            }
        }
        let body = self.body.as_bytes();
        if self.body_off < body.len() {
            self.body_off += send_all(sock, &body[self.body_off..])?;
            if self.body_off < body.len() {
                return Ok(false);
            }
        }
        Ok(true)
    }
}

/// Enqueue as much of `data` as the ring takes (looping over its wrap).
fn send_all(sock: &mut tcp::Socket<'_>, data: &[u8]) -> Result<usize, tcp::SendError> {
    let mut sent = 0;
    while sent < data.len() {
        let n = sock.send_slice(&data[sent..])?;
        if n == 0 {
            break;
        }
        sent += n;
    }
    Ok(sent)
}

fn push_all(out: &mut Vec<u8>, parts: &[&[u8]]) {
    for p in parts {
        out.extend_from_slice(p);
    }
}

/// Copy user header fields, except those the writer owns; fields that would
/// break the head (CR/LF in a value, a non-token name) are dropped.
fn push_user_headers(out: &mut Vec<u8>, headers: &Headers) {
    for h in headers {
        let owned = ["content-length", "transfer-encoding", "connection"]
            .iter()
            .any(|n| h.name.eq_ignore_ascii_case(n));
        if owned {
            continue;
        }
        if !is_token(h.name.as_bytes()) || !is_clean_value(&h.value) {
            log::warn!("http: dropping invalid header field {:?}", h.name);
            continue;
        }
        push_all(out, &[h.name.as_bytes(), b": ", &h.value, b"\r\n"]);
    }
}

/// Write the framing field for `body`; returns how a streamed body is
/// encoded.
fn push_framing(out: &mut Vec<u8>, body: &Body) -> BodyEncoder {
    match body.len() {
        Some(n) => {
            push_all(
                out,
                &[b"Content-Length: ", n.to_string().as_bytes(), b"\r\n"],
            );
            BodyEncoder::Length(n)
        }
        None => {
            out.extend_from_slice(b"Transfer-Encoding: chunked\r\n");
            BodyEncoder::Chunked
        }
    }
}

fn is_token(s: &[u8]) -> bool {
    !s.is_empty()
        && s.iter()
            .all(|&b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

fn is_clean_value(s: &[u8]) -> bool {
    s.iter().all(|&b| b == b'\t' || (b >= 0x20 && b != 0x7f))
}

fn is_clean_target(s: &[u8]) -> bool {
    s.iter().all(|&b| b > 0x20 && b != 0x7f)
}

/// Number of hex digits of `n`.
fn hex_len(n: usize) -> usize {
    let bits = usize::BITS - n.leading_zeros();
    (bits as usize).div_ceil(4).max(1)
}

/// `n` in hex followed by CRLF into `out`; returns the length.
fn encode_hex(n: usize, out: &mut [u8; 20]) -> usize {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let len = hex_len(n);
    for (i, slot) in out[..len].iter_mut().enumerate() {
        let shift = 4 * (len - 1 - i);
        *slot = HEX[(n >> shift) & 0xf];
    }
    out[len] = b'\r';
    out[len + 1] = b'\n';
    len + 2
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ServerPhase {
    /// Reading the next request.
    Reading,
    /// A request was handed out; its response is due.
    Handling {
        head_request: bool,
        connection: Connection,
    },
    /// Close once the queued bytes are in the ring.
    Draining,
    /// Over.
    Closed,
}

#[derive(Debug, Clone, Copy)]
struct InFlight {
    head_request: bool,
    mode: BodyMode,
}

#[cfg(test)]
mod test {
    use super::*;

    use proptest::prelude::*;
    use smoltcp::iface::{Config, Interface, SocketHandle, SocketSet};
    use smoltcp::phy::{Loopback, Medium};
    use smoltcp::time::{Duration, Instant};
    use smoltcp::wire::{EthernetAddress, IpAddress, IpCidr};

    // ----- sans-IO decoder helpers -------------------------------------

    /// Owned decoder events, with adjacent data merged.
    #[derive(Debug, Clone, PartialEq, Eq)]
    enum Ev<H> {
        Head(H),
        Body(Vec<u8>),
        End,
    }

    trait Dec {
        type H;
        fn dec<'a>(
            &mut self,
            input: &'a [u8],
        ) -> Result<(usize, Decoded<'a, Self::H>), ProtocolError>;
    }

    impl Dec for RequestDecoder {
        type H = RequestHead;
        fn dec<'a>(
            &mut self,
            input: &'a [u8],
        ) -> Result<(usize, Decoded<'a, RequestHead>), ProtocolError> {
            self.decode(input)
        }
    }

    impl Dec for ResponseDecoder {
        type H = ResponseHead;
        fn dec<'a>(
            &mut self,
            input: &'a [u8],
        ) -> Result<(usize, Decoded<'a, ResponseHead>), ProtocolError> {
            self.decode(input)
        }
    }

    /// Feed `pieces` in order, collecting events.
    fn feed<D: Dec>(d: &mut D, pieces: &[&[u8]]) -> Result<Vec<Ev<D::H>>, ProtocolError> {
        let mut evs = Vec::new();
        for piece in pieces {
            let mut off = 0;
            for _ in 0..100_000 {
                let (n, ev) = d.dec(&piece[off..])?;
                assert!(n <= piece.len() - off, "consumed more than given");
                off += n;
                match ev {
                    Decoded::NeedMore => {
                        assert_eq!(off, piece.len(), "NeedMore must consume all input");
                        break;
                    }
                    Decoded::Head(h) => evs.push(Ev::Head(h)),
                    Decoded::Data(b) => {
                        assert!(!b.is_empty(), "empty Data");
                        match evs.last_mut() {
                            Some(Ev::Body(v)) => v.extend_from_slice(b),
                            _ => evs.push(Ev::Body(b.to_vec())),
                        }
                    }
                    Decoded::End => evs.push(Ev::End),
                    Decoded::Closed => panic!("decode never returns Closed"),
                }
            }
        }
        Ok(evs)
    }

    fn req_events(limits: Limits, msg: &[u8]) -> Result<Vec<Ev<RequestHead>>, ProtocolError> {
        feed(&mut RequestDecoder::new(limits), &[msg])
    }

    /// Decoding `msg` whole, split at every byte boundary and byte by byte
    /// gives the same result.
    #[track_caller]
    fn every_split<D: Dec>(mk: impl Fn() -> D, msg: &[u8]) -> Result<Vec<Ev<D::H>>, ProtocolError>
    where
        D::H: PartialEq + std::fmt::Debug,
    {
        let whole = feed(&mut mk(), &[msg]);
        for i in 0..=msg.len() {
            let split = feed(&mut mk(), &[&msg[..i], &msg[i..]]);
            assert_eq!(split, whole, "split at {i}");
        }
        let bytes: Vec<&[u8]> = msg.chunks(1).collect();
        assert_eq!(feed(&mut mk(), &bytes), whole, "byte by byte");
        whole
    }

    fn req_every_split(msg: &[u8]) -> Result<Vec<Ev<RequestHead>>, ProtocolError> {
        every_split(|| RequestDecoder::new(Limits::default()), msg)
    }

    fn bodies<H>(evs: &[Ev<H>]) -> Vec<Vec<u8>> {
        // One body per message (empty if none).
        let mut out = Vec::new();
        let mut cur = Vec::new();
        for ev in evs {
            match ev {
                Ev::Head(_) => cur.clear(),
                Ev::Body(b) => cur.extend_from_slice(b),
                Ev::End => out.push(std::mem::take(&mut cur)),
            }
        }
        out
    }

    fn heads(evs: &[Ev<RequestHead>]) -> Vec<&RequestHead> {
        evs.iter()
            .filter_map(|e| match e {
                Ev::Head(h) => Some(h),
                _ => None,
            })
            .collect()
    }

    // ----- request parsing ----------------------------------------------

    const PIPELINE: &[u8] = b"GET /a HTTP/1.1\r\nHost: x\r\n\r\n\
        POST /b HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello\
        POST /c HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n\
        3\r\nabc\r\n0\r\n\r\n\
        GET /d HTTP/1.0\r\n\r\n";

    #[test]
    fn pipeline_split_everywhere() {
        let evs = req_every_split(PIPELINE).unwrap();
        let hs = heads(&evs);
        let targets: Vec<_> = hs.iter().map(|h| h.target.as_str()).collect();
        assert_eq!(targets, ["/a", "/b", "/c", "/d"]);
        assert_eq!(
            bodies(&evs),
            [
                b"".to_vec(),
                b"hello".to_vec(),
                b"abc".to_vec(),
                b"".to_vec()
            ]
        );
        assert_eq!(hs[0].headers.get("HOST"), Some(&b"x"[..]));
        assert!(hs[0].keep_alive());
        assert_eq!(hs[3].version, Version::Http10);
        assert!(!hs[3].keep_alive());
    }

    #[test]
    fn framing_is_reported() {
        let mut d = RequestDecoder::new(Limits::default());
        let (_, ev) = d
            .decode(b"POST / HTTP/1.1\r\nContent-Length: 3\r\n\r\n")
            .unwrap();
        assert!(matches!(ev, Decoded::Head(_)));
        assert_eq!(d.framing(), Some(Framing::Length(3)));
        assert!(d.at_data());
        assert!(!d.is_idle());
    }

    #[test]
    fn keep_alive_rules() {
        let head = |raw: &[u8]| match &req_events(Limits::default(), raw).unwrap()[0] {
            Ev::Head(h) => h.clone(),
            _ => panic!("no head"),
        };
        assert!(head(b"GET / HTTP/1.1\r\n\r\n").keep_alive());
        assert!(!head(b"GET / HTTP/1.1\r\nConnection: close\r\n\r\n").keep_alive());
        assert!(!head(b"GET / HTTP/1.1\r\nConnection: foo, Close\r\n\r\n").keep_alive());
        assert!(!head(b"GET / HTTP/1.0\r\n\r\n").keep_alive());
        assert!(head(b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n").keep_alive());
        let h = head(b"POST / HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\n");
        assert!(h.expects_continue());
        assert!(head(b"HEAD / HTTP/1.1\r\n\r\n").is_head());
    }

    #[test]
    fn leading_empty_lines_and_bare_lf() {
        let evs = req_every_split(b"\r\n\r\nGET / HTTP/1.1\nHost: y\n\n").unwrap();
        assert_eq!(heads(&evs)[0].headers.get("host"), Some(&b"y"[..]));
        assert_eq!(evs.last(), Some(&Ev::End));
    }

    #[test]
    fn chunked_extensions_and_trailers() {
        let msg = b"POST /c HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n\
            4;name=val;q=\"a b\"\r\nWiki\r\n\
            5 \t; x\r\npedia\r\n\
            E\r\n in\r\n\r\nchunks.\r\n\
            00\r\nExpires: never\r\nX-T: y\r\n\r\n\
            GET /next HTTP/1.1\r\n\r\n";
        let evs = req_every_split(msg).unwrap();
        assert_eq!(bodies(&evs)[0], b"Wikipedia in\r\n\r\nchunks.");
        assert_eq!(heads(&evs)[1].target, "/next");
    }

    #[test]
    fn chunked_uppercase_hex_and_leading_zeros() {
        let msg = b"POST / HTTP/1.1\r\nTransfer-Encoding: Chunked\r\n\r\n\
            000A\r\n0123456789\r\n0\r\n\r\n";
        let evs = req_every_split(msg).unwrap();
        assert_eq!(bodies(&evs)[0], b"0123456789");
    }

    #[test]
    fn chunked_errors() {
        let te = "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n";
        let bad = [
            "x\r\n",                 // not hex
            ";ext\r\n",              // no digits
            "3\r\nabcX",             // data not followed by CRLF
            "3\r\nabc\rX",           // CR not followed by LF
            "3\nabc\r\n",            // bare LF in size line
            "3;ext\x01\r\n",         // control byte in extension
            "11111111111111111\r\n", // overflows 64 bits
            "0\r\nTrailer\n\r\n",    // bare LF in trailer
            "0\r\n\rX",              // final CR without LF
        ];
        for tail in bad {
            let msg = format!("{te}{tail}");
            assert_eq!(
                req_every_split(msg.as_bytes()),
                Err(ProtocolError::BadChunk),
                "{tail:?}"
            );
        }
        let long_ext = format!("{te}1;{}\r\n", "e".repeat(MAX_CHUNK_LINE));
        assert_eq!(
            req_events(Limits::default(), long_ext.as_bytes()),
            Err(ProtocolError::BadChunk)
        );
    }

    #[test]
    fn chunked_limits() {
        let limits = Limits {
            max_body_bytes: 10,
            max_head_bytes: 64,
            ..Limits::default()
        };
        let te = "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n";
        let ok = format!("{te}5\r\naaaaa\r\n5\r\nbbbbb\r\n0\r\n\r\n");
        assert!(req_events(limits, ok.as_bytes()).is_ok());
        let big = format!("{te}5\r\naaaaa\r\n6\r\n");
        assert_eq!(
            req_events(limits, big.as_bytes()),
            Err(ProtocolError::BodyTooLarge)
        );
        let trailers = format!("{te}0\r\nX: {}\r\n\r\n", "t".repeat(70));
        assert_eq!(
            req_events(limits, trailers.as_bytes()),
            Err(ProtocolError::TrailersTooLarge)
        );
    }

    /// Every request error, its status, and that the decoder stays poisoned.
    #[test]
    fn request_errors_map_to_status() {
        use ProtocolError::*;
        let cases: &[(&str, ProtocolError, u16)] = &[
            ("GET / HTTP/1.1\r\nBad Header\r\n\r\n", Malformed, 400),
            ("GET / HTTP/1.1\r\n: empty\r\n\r\n", Malformed, 400),
            ("G(T / HTTP/1.1\r\n\r\n", Malformed, 400),
            ("GET / FOO/1.1\r\n\r\n", Malformed, 400),
            ("GET / HTTP/2.0\r\n\r\n", UnsupportedVersion, 505),
            ("GET / HTTP/1.2\r\n\r\n", UnsupportedVersion, 505),
            ("GET / HTTP/3\r\n\r\n", UnsupportedVersion, 505),
            (
                "POST / HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
                LengthAndTransferEncoding,
                400,
            ),
            (
                "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n",
                LengthAndTransferEncoding,
                400,
            ),
            (
                "POST / HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n",
                ConflictingContentLength,
                400,
            ),
            ("POST / HTTP/1.1\r\nContent-Length: 3, 4\r\n\r\n", ConflictingContentLength, 400),
            ("POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n", BadContentLength, 400),
            ("POST / HTTP/1.1\r\nContent-Length: +1\r\n\r\n", BadContentLength, 400),
            ("POST / HTTP/1.1\r\nContent-Length: 0x10\r\n\r\n", BadContentLength, 400),
            ("POST / HTTP/1.1\r\nContent-Length:\r\n\r\n", BadContentLength, 400),
            (
                "POST / HTTP/1.1\r\nContent-Length: 99999999999999999999\r\n\r\n",
                BadContentLength,
                400,
            ),
            ("POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n", UnsupportedTransferEncoding, 501),
            (
                "POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
                UnsupportedTransferEncoding,
                501,
            ),
            (
                "POST / HTTP/1.1\r\nTransfer-Encoding: chunked, chunked\r\n\r\n",
                BadTransferEncoding,
                400,
            ),
            (
                "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
                BadTransferEncoding,
                400,
            ),
            (
                "POST / HTTP/1.1\r\nTransfer-Encoding: chunked, gzip\r\n\r\n",
                BadTransferEncoding,
                400,
            ),
            ("POST / HTTP/1.1\r\nTransfer-Encoding: ,\r\n\r\n", BadTransferEncoding, 400),
            ("POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", BadTransferEncoding, 400),
            ("POST / HTTP/1.1\r\nContent-Length: 16777217\r\n\r\n", BodyTooLarge, 413),
        ];
        for &(raw, err, status) in cases {
            assert_eq!(req_every_split(raw.as_bytes()), Err(err), "{raw:?}");
            assert_eq!(err.status(), status, "{err:?}");
            let mut d = RequestDecoder::new(Limits::default());
            assert_eq!(feed(&mut d, &[raw.as_bytes()]), Err(err));
            assert_eq!(
                d.decode(b"GET / HTTP/1.1\r\n\r\n").map(|_| ()),
                Err(err),
                "poisoned"
            );
        }
        // Equal duplicates are one length.
        let dup = b"POST / HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 2, 2\r\n\r\nok";
        assert_eq!(bodies(&req_every_split(dup).unwrap()), [b"ok".to_vec()]);
    }

    #[test]
    fn head_limits() {
        let limits = Limits {
            max_head_bytes: 64,
            max_headers: 3,
            ..Limits::default()
        };
        let mk = || RequestDecoder::new(limits);
        let exactly = format!("GET / HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(64 - 23));
        assert_eq!(exactly.len(), 64);
        assert!(every_split(mk, exactly.as_bytes()).is_ok());
        let over = format!("GET / HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(64 - 22));
        assert_eq!(
            every_split(mk, over.as_bytes()),
            Err(ProtocolError::HeadTooLarge)
        );
        // Never terminated: fails as soon as the bound is passed.
        let endless = vec![b'a'; 65];
        assert_eq!(every_split(mk, &endless), Err(ProtocolError::HeadTooLarge));
        let many = b"GET / HTTP/1.1\r\nA: 1\r\nB: 2\r\nC: 3\r\nD: 4\r\n\r\n";
        assert_eq!(every_split(mk, many), Err(ProtocolError::TooManyHeaders));
        assert_eq!(ProtocolError::HeadTooLarge.status(), 431);
        assert_eq!(ProtocolError::TooManyHeaders.status(), 431);
        assert_eq!(ProtocolError::TrailersTooLarge.status(), 431);
        let limits = Limits {
            max_body_bytes: 4,
            ..Limits::default()
        };
        assert_eq!(
            req_events(limits, b"POST / HTTP/1.1\r\nContent-Length: 5\r\n\r\n"),
            Err(ProtocolError::BodyTooLarge)
        );
    }

    #[test]
    fn eof_handling() {
        let mut d = RequestDecoder::new(Limits::default());
        assert_eq!(d.finish(), Ok(false));
        let mut d = RequestDecoder::new(Limits::default());
        feed(&mut d, &[b"GET / HT"]).unwrap();
        assert_eq!(d.finish(), Err(ProtocolError::Incomplete));
        assert_eq!(ProtocolError::Incomplete.status(), 400);
        let mut d = RequestDecoder::new(Limits::default());
        feed(
            &mut d,
            &[b"POST / HTTP/1.1\r\nContent-Length: 5\r\n\r\nabc"],
        )
        .unwrap();
        assert_eq!(d.finish(), Err(ProtocolError::Incomplete));
        let mut d = RequestDecoder::new(Limits::default());
        feed(&mut d, &[b"GET / HTTP/1.1\r\n\r\n"]).unwrap();
        assert!(d.is_idle());
        assert_eq!(d.finish(), Ok(false));
    }

    // ----- response parsing ---------------------------------------------

    fn resp_every_split(
        head_request: bool,
        msg: &[u8],
    ) -> Result<Vec<Ev<ResponseHead>>, ProtocolError> {
        every_split(
            || {
                let mut d = ResponseDecoder::new(Limits::default());
                d.set_head_request(head_request);
                d
            },
            msg,
        )
    }

    #[test]
    fn responses_without_body() {
        // HEAD: Content-Length describes the absent body.
        let evs = resp_every_split(true, b"HTTP/1.1 200 OK\r\nContent-Length: 99\r\n\r\n").unwrap();
        assert_eq!(evs.len(), 2);
        for status in ["204 No Content", "304 Not Modified", "100 Continue"] {
            let msg = format!("HTTP/1.1 {status}\r\nContent-Length: 5\r\n\r\n");
            let evs = resp_every_split(false, msg.as_bytes()).unwrap();
            assert_eq!(evs.len(), 2, "{status}");
        }
        // Interim then final on one decoder.
        let msg = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi";
        let evs = resp_every_split(false, msg).unwrap();
        assert_eq!(evs.len(), 5);
        assert_eq!(bodies(&evs), [b"".to_vec(), b"hi".to_vec()]);
    }

    #[test]
    fn response_bodies() {
        let msg =
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\n";
        assert_eq!(
            bodies(&resp_every_split(false, msg).unwrap()),
            [b"hi".to_vec()]
        );
        let evs = resp_every_split(false, b"HTTP/1.0 200 OK\r\n\r\nuntil close").unwrap();
        assert_eq!(evs.last(), Some(&Ev::Body(b"until close".to_vec())));
        let mut d = ResponseDecoder::new(Limits::default());
        feed(&mut d, &[b"HTTP/1.0 200 OK\r\n\r\nxyz"]).unwrap();
        assert_eq!(d.framing(), Some(Framing::UntilClose));
        assert_eq!(d.finish(), Ok(true));
        assert_eq!(d.finish(), Ok(false));
        let te_cl = b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n";
        assert_eq!(
            resp_every_split(false, te_cl),
            Err(ProtocolError::LengthAndTransferEncoding)
        );
        assert_eq!(
            resp_every_split(false, b"HTTP/2.0 200 OK\r\n\r\n"),
            Err(ProtocolError::UnsupportedVersion)
        );
        assert_eq!(
            resp_every_split(false, b"HTTP/1.1 2x0 OK\r\n\r\n"),
            Err(ProtocolError::Malformed)
        );
    }

    #[test]
    fn hex_helpers() {
        let mut buf = [0u8; 20];
        for (n, s) in [
            (0usize, "0"),
            (0xa, "a"),
            (0x10, "10"),
            (0xfff, "fff"),
            (0x1000, "1000"),
        ] {
            let len = encode_hex(n, &mut buf);
            assert_eq!(&buf[..len], format!("{s}\r\n").as_bytes());
            assert_eq!(hex_len(n), s.len());
        }
        let len = encode_hex(usize::MAX, &mut buf);
        assert_eq!(len, 18);
    }

    #[test]
    fn every_error_has_a_client_error_or_server_error_status() {
        use ProtocolError::*;
        let all = [
            Malformed,
            BadContentLength,
            ConflictingContentLength,
            LengthAndTransferEncoding,
            BadTransferEncoding,
            UnsupportedTransferEncoding,
            BadChunk,
            Incomplete,
            HeadTooLarge,
            TooManyHeaders,
            TrailersTooLarge,
            BodyTooLarge,
            UnsupportedVersion,
        ];
        for e in all {
            assert!((400..600).contains(&e.status()));
            assert!(!reason_phrase(e.status()).is_empty());
        }
    }

    // ----- properties ---------------------------------------------------

    /// Fragments that make random messages reach deep parser states.
    const FRAGMENTS: &[&str] = &[
        "GET / HTTP/1.1\r\n",
        "POST /p HTTP/1.1\r\n",
        "HTTP/1.1 200 OK\r\n",
        "GET / HTTP/1.0\r\n",
        "Content-Length: 5\r\n",
        "Content-Length: 0\r\n",
        "Transfer-Encoding: chunked\r\n",
        "Connection: close\r\n",
        "\r\n",
        "\n",
        "5\r\n",
        "0\r\n",
        "a;x=y\r\n",
        "hello",
        "X: y\r\n",
        ":",
        " ",
        "\r",
    ];

    fn message() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            proptest::collection::vec(any::<u8>(), 0..512),
            proptest::collection::vec(proptest::sample::select(FRAGMENTS), 0..24)
                .prop_map(|f| f.concat().into_bytes()),
        ]
    }

    /// The fuzz target's body (`fuzz/fuzz_targets/http.rs`) over messages
    /// that exercise every decoder state, whole, cut and in every piece size.
    #[test]
    fn fuzz_body_holds_on_messages_in_every_state() {
        let msgs: [&[u8]; 8] = [
            b"GET / HTTP/1.1\r\nHost: a\r\n\r\nGET /2 HTTP/1.1\r\nHost: a\r\n\r\n",
            b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello",
            b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5;x=1\r\nhello\r\n0\r\nT: 1\r\n\r\n",
            b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nFFFFFFFFFFFFFFFFFFFF\r\n",
            b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
            b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcXY",
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
            b"HTTP/1.1 200 OK\r\n\r\nuntil close",
        ];
        for m in msgs {
            for sel in 0..=255u8 {
                let mut b = vec![sel];
                b.extend_from_slice(m);
                crate::fuzz::http(&b);
                b.truncate(b.len() / 2);
                crate::fuzz::http(&b);
            }
        }
    }

    proptest! {
        #[test]
        fn fuzz_body_holds_on_random_bytes(b in proptest::collection::vec(any::<u8>(), 0..256)) {
            crate::fuzz::http(&b);
        }

        #[test]
        fn request_decoder_total(data in message(), cut in any::<usize>(), small in any::<bool>()) {
            let limits = if small {
                Limits { max_head_bytes: 64, max_headers: 2, max_body_bytes: 8 }
            } else {
                Limits::default()
            };
            let whole = feed(&mut RequestDecoder::new(limits), &[&data]);
            let cut = cut % (data.len() + 1);
            let split = feed(&mut RequestDecoder::new(limits), &[&data[..cut], &data[cut..]]);
            prop_assert_eq!(&split, &whole);
            if let Ok(evs) = whole {
                // Well-formed event sequence: Head (Body)* End, repeated.
                let mut in_msg = false;
                for ev in &evs {
                    match ev {
                        Ev::Head(_) => { prop_assert!(!in_msg); in_msg = true; }
                        Ev::Body(_) => prop_assert!(in_msg),
                        Ev::End => { prop_assert!(in_msg); in_msg = false; }
                    }
                }
            }
        }

        #[test]
        fn response_decoder_total(data in message(), head in any::<bool>()) {
            let mut d = ResponseDecoder::new(Limits::default());
            d.set_head_request(head);
            if feed(&mut d, &[&data]).is_ok() {
                let _ = d.finish();
            }
        }
    }

    // ----- socket level: two smoltcp sockets over one loopback interface -

    const PORT: u16 = 80;
    const STEPS: usize = 200_000;

    struct Lab {
        iface: Interface,
        dev: Loopback,
        sockets: SocketSet<'static>,
        server: SocketHandle,
        client: SocketHandle,
        now: Instant,
    }

    impl Lab {
        fn new(buf: usize) -> Self {
            let mut dev = Loopback::new(Medium::Ethernet);
            let now = Instant::from_millis(0);
            let cfg = Config::new(EthernetAddress([0x02, 0, 0, 0, 0, 0x01]).into());
            let mut iface = Interface::new(cfg, &mut dev, now);
            iface.update_ip_addrs(|a| {
                a.push(IpCidr::new(IpAddress::v4(127, 0, 0, 1), 8)).unwrap();
            });
            let mk = || {
                tcp::Socket::new(
                    tcp::SocketBuffer::new(vec![0; buf]),
                    tcp::SocketBuffer::new(vec![0; buf]),
                )
            };
            let mut sockets = SocketSet::new(Vec::new());
            let mut srv = mk();
            srv.listen(PORT).unwrap();
            let server = sockets.add(srv);
            let client = sockets.add(mk());
            let cx = iface.context();
            sockets
                .get_mut::<tcp::Socket<'_>>(client)
                .connect(cx, (IpAddress::v4(127, 0, 0, 1), PORT), 49152)
                .unwrap();
            Self {
                iface,
                dev,
                sockets,
                server,
                client,
                now,
            }
        }

        fn step(&mut self) {
            self.iface.poll(self.now, &mut self.dev, &mut self.sockets);
            match self.iface.poll_delay(self.now, &self.sockets) {
                Some(Duration::ZERO) => {}
                Some(d) => self.now += d.min(Duration::from_millis(50)),
                None => self.now += Duration::from_millis(50),
            }
        }

        fn server(&mut self) -> &mut tcp::Socket<'static> {
            self.sockets.get_mut(self.server)
        }

        fn client(&mut self) -> &mut tcp::Socket<'static> {
            self.sockets.get_mut(self.client)
        }
    }

    /// Echo handler: the body back (or the target if there is none), with
    /// the method and target in headers.
    fn echo(req: ReceivedRequest) -> Response {
        let body = if req.body.is_empty() {
            req.head.target.clone().into_bytes()
        } else {
            req.body
        };
        Response::new(200)
            .with_header("X-Method", req.head.method)
            .with_header("X-Target", req.head.target)
            .with_body(body)
    }

    #[derive(Default)]
    struct ServerLog {
        requests: usize,
        errors: Vec<ProtocolError>,
        closed: bool,
    }

    fn serve(conn: &mut ServerConn, sock: &mut tcp::Socket<'_>, log: &mut ServerLog) {
        loop {
            match conn.poll(sock) {
                ServerEvent::Request(req) => {
                    log.requests += 1;
                    conn.respond(echo(req)).unwrap();
                }
                ServerEvent::Error(e) => log.errors.push(e),
                ServerEvent::Closed => {
                    log.closed = true;
                    break;
                }
                ServerEvent::Idle => break,
            }
        }
    }

    /// Run the lab until `client` says done; the server echoes.
    fn drive(
        lab: &mut Lab,
        server: &mut ServerConn,
        log: &mut ServerLog,
        mut client: impl FnMut(&mut tcp::Socket<'static>) -> bool,
    ) {
        for _ in 0..STEPS {
            lab.step();
            serve(server, lab.server(), log);
            if client(lab.client()) {
                return;
            }
        }
        panic!("lab never finished");
    }

    /// Poll a `ClientConn` collecting buffered responses; done after `n`.
    fn collect(conn: &mut ClientConn, sock: &mut tcp::Socket<'_>, out: &mut Vec<ReceivedResponse>) {
        loop {
            match conn.poll(sock) {
                ClientEvent::Response(r) => out.push(r),
                ClientEvent::Idle | ClientEvent::Closed => break,
                ev => panic!("unexpected {ev:?}"),
            }
        }
    }

    fn pattern(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i * 7 + i / 251) as u8).collect()
    }

    #[test]
    fn keep_alive_many_requests_one_connection() {
        let mut lab = Lab::new(1000);
        let mut server = ServerConn::new(Limits::default());
        let mut log = ServerLog::default();
        let mut client = ClientConn::new("lab", Limits::default());
        let mut got = Vec::new();
        let n = 50;
        client.send(Request::get("/0"), BodyMode::Buffer).unwrap();
        drive(&mut lab, &mut server, &mut log, |sock| {
            collect(&mut client, sock, &mut got);
            if client.in_flight() == 0 && got.len() < n {
                let target = format!("/{}", got.len());
                client.send(Request::get(target), BodyMode::Buffer).unwrap();
            }
            got.len() == n
        });
        for (i, r) in got.iter().enumerate() {
            assert_eq!(r.head.status, 200);
            assert_eq!(r.body, format!("/{i}").as_bytes());
            assert_eq!(r.head.headers.get("x-method"), Some(&b"GET"[..]));
        }
        assert_eq!(log.requests, n);
        assert!(!log.closed && !server.is_closed() && client.is_reusable());
        assert_eq!(lab.client().state(), tcp::State::Established);
    }

    #[test]
    fn post_10mb_echoed_byte_exact() {
        // Ring sizes that are not powers of two, so wraps fall mid-head and
        // mid-chunk.
        let mut lab = Lab::new(65_000);
        let limits = Limits::default();
        let mut server = ServerConn::new(limits);
        let mut log = ServerLog::default();
        let mut client = ClientConn::new("lab", limits);
        let body: Rc<[u8]> = pattern(10 * 1024 * 1024 + 13).into();
        client
            .send(
                Request::post("/big", Body::Shared(body.clone())),
                BodyMode::Buffer,
            )
            .unwrap();
        let mut got = Vec::new();
        drive(&mut lab, &mut server, &mut log, |sock| {
            collect(&mut client, sock, &mut got);
            !got.is_empty()
        });
        assert_eq!(got[0].body_len, body.len() as u64);
        assert!(got[0].body == *body, "echoed body differs");
        assert_eq!(
            Rc::strong_count(&body),
            1,
            "writer released the shared body"
        );
    }

    #[test]
    fn chunked_request_streamed_from_client() {
        let mut lab = Lab::new(4099);
        let mut server = ServerConn::new(Limits::default());
        let mut log = ServerLog::default();
        let mut client = ClientConn::new("lab", Limits::default());
        let data = pattern(200_003);
        let req = Request::post("/chunks", Body::Streamed { length: None });
        client.send(req, BodyMode::Buffer).unwrap();
        let (mut off, mut finished, mut got) = (0, false, Vec::new());
        let mut sizes = [1usize, 7, 100, 3000, 65_536].into_iter().cycle();
        drive(&mut lab, &mut server, &mut log, |sock| {
            while off < data.len() {
                let end = (off + sizes.next().unwrap()).min(data.len());
                let n = client.write_body(sock, &data[off..end]);
                if n == 0 {
                    break;
                }
                off += n;
            }
            if off == data.len() && !finished {
                finished = client.finish_body(sock);
            }
            collect(&mut client, sock, &mut got);
            !got.is_empty()
        });
        assert!(got[0].body == data, "chunked body differs");
    }

    #[test]
    fn streamed_chunked_response_and_client_modes() {
        let mut lab = Lab::new(8192);
        let mut server = ServerConn::new(Limits::default());
        let mut client = ClientConn::new("lab", Limits::default());
        let data = pattern(300_001);
        let shared: Rc<[u8]> = data.clone().into();
        client
            .send(Request::get("/stream"), BodyMode::Stream)
            .unwrap();
        client
            .send(Request::get("/discard"), BodyMode::Discard)
            .unwrap();
        client
            .send(Request::get("/buffer"), BodyMode::Buffer)
            .unwrap();
        let (mut streamed, mut events, mut done) = (Vec::new(), Vec::new(), Vec::new());
        let mut sent = 0;
        let mut streaming = false;
        for _ in 0..STEPS {
            lab.step();
            let sock = lab.server();
            loop {
                match server.poll(sock) {
                    ServerEvent::Request(req) if req.head.target == "/stream" => {
                        let resp = Response::new(200).with_body(Body::Streamed { length: None });
                        server.respond(resp).unwrap();
                        streaming = true;
                    }
                    ServerEvent::Request(_) => {
                        server
                            .respond(Response::new(200).with_body(shared.clone()))
                            .unwrap();
                    }
                    ServerEvent::Idle => break,
                    ev => panic!("server: {ev:?}"),
                }
            }
            if streaming {
                while sent < data.len() {
                    let n = server.write_body(sock, &data[sent..(sent + 5000).min(data.len())]);
                    if n == 0 {
                        break;
                    }
                    sent += n;
                }
                if sent == data.len() && server.finish_body(sock) {
                    streaming = false;
                    // The next request may be read now.
                    while let ServerEvent::Request(_) = server.poll(sock) {
                        server
                            .respond(Response::new(200).with_body(shared.clone()))
                            .unwrap();
                    }
                }
            }
            let sock = lab.client();
            loop {
                match client.poll(sock) {
                    ClientEvent::Head(h) => events.push(format!("head {}", h.status)),
                    ClientEvent::Data(d) => streamed.extend_from_slice(d),
                    ClientEvent::End { body_len } => events.push(format!("end {body_len}")),
                    ClientEvent::Response(r) => done.push(r),
                    ClientEvent::Idle => break,
                    ev => panic!("client: {ev:?}"),
                }
            }
            if done.len() == 2 {
                break;
            }
        }
        assert_eq!(done.len(), 2, "lab never finished");
        assert_eq!(
            events,
            ["head 200".to_owned(), format!("end {}", data.len())]
        );
        assert_eq!(streamed.len(), data.len());
        assert!(streamed == data, "streamed body differs");
        assert_eq!(done[0].body_len, data.len() as u64);
        assert!(done[0].body.is_empty(), "discarded");
        assert!(done[1].body == data, "buffered body differs");
    }

    #[test]
    fn pipelined_requests_answer_in_order() {
        let mut lab = Lab::new(2048);
        let mut server = ServerConn::new(Limits::default());
        let mut log = ServerLog::default();
        let mut client = ClientConn::new("lab", Limits::default());
        let big = pattern(5000);
        for i in 0..10 {
            let req = match i % 3 {
                0 => Request::get(format!("/{i}")),
                1 => Request::post(format!("/{i}"), big.clone()),
                _ => Request::new("HEAD", format!("/{i}")),
            };
            client.send(req, BodyMode::Buffer).unwrap();
        }
        assert_eq!(client.in_flight(), 10);
        let mut got = Vec::new();
        drive(&mut lab, &mut server, &mut log, |sock| {
            collect(&mut client, sock, &mut got);
            got.len() == 10
        });
        for (i, r) in got.iter().enumerate() {
            assert_eq!(
                r.head.headers.get("x-target"),
                Some(format!("/{i}").as_bytes())
            );
            match i % 3 {
                0 => assert_eq!(r.body, format!("/{i}").as_bytes()),
                1 => assert!(r.body == big, "POST body differs"),
                _ => {
                    assert!(r.body.is_empty());
                    let len = format!("/{i}").len().to_string();
                    assert_eq!(r.head.headers.get("content-length"), Some(len.as_bytes()));
                }
            }
        }
        assert_eq!(log.requests, 10);
    }

    /// Send raw bytes, read the raw answer until the server's FIN.
    fn raw_exchange(buf: usize, request: &[u8]) -> (Vec<u8>, ServerLog) {
        let mut lab = Lab::new(buf);
        let mut server = ServerConn::new(Limits::default());
        let mut log = ServerLog::default();
        let mut sent = 0;
        let mut got = Vec::new();
        drive(&mut lab, &mut server, &mut log, |sock| {
            if sock.may_send() && sent < request.len() {
                sent += sock.send_slice(&request[sent..]).unwrap();
            }
            loop {
                let r = sock.recv(|b| {
                    got.extend_from_slice(b);
                    (b.len(), b.len())
                });
                match r {
                    Ok(0) | Err(tcp::RecvError::InvalidState) => return false,
                    Ok(_) => {}
                    Err(tcp::RecvError::Finished) => return true,
                }
            }
        });
        (got, log)
    }

    #[test]
    fn malformed_request_gets_400_and_close() {
        let (got, log) = raw_exchange(
            4096,
            b"GET /ok HTTP/1.1\r\n\r\nGET / HTTP/1.1\r\nBad Header\r\n\r\n",
        );
        let text = String::from_utf8_lossy(&got);
        let (first, rest) = text.split_once("\r\n\r\n/ok").unwrap();
        assert!(first.starts_with("HTTP/1.1 200 OK\r\n"), "{text}");
        assert!(rest.starts_with("HTTP/1.1 400 Bad Request\r\n"), "{text}");
        assert!(rest.contains("\r\nConnection: close\r\n"), "{text}");
        assert!(rest.ends_with("\r\n\r\n400 Bad Request\n"), "{text}");
        assert_eq!(log.errors, [ProtocolError::Malformed]);
        assert!(log.closed);
    }

    #[test]
    fn oversize_header_gets_431() {
        let mut req = b"GET / HTTP/1.1\r\nX-Big: ".to_vec();
        req.extend(std::iter::repeat_n(b'a', 20_000));
        req.extend_from_slice(b"\r\n\r\n");
        let (got, log) = raw_exchange(4096, &req);
        let text = String::from_utf8_lossy(&got);
        assert!(
            text.starts_with("HTTP/1.1 431 Request Header Fields Too Large\r\n"),
            "{text}"
        );
        assert!(text.contains("\r\nConnection: close\r\n"));
        assert_eq!(log.errors, [ProtocolError::HeadTooLarge]);
    }

    #[test]
    fn smuggling_and_version_answers() {
        let cases: &[(&[u8], &str)] = &[
            (
                b"POST / HTTP/1.1\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
                "HTTP/1.1 400 ",
            ),
            (b"POST / HTTP/1.1\r\nTransfer-Encoding: br\r\n\r\n", "HTTP/1.1 501 "),
            (b"GET / HTTP/2.0\r\n\r\n", "HTTP/1.1 505 "),
        ];
        for &(req, want) in cases {
            let (got, log) = raw_exchange(4096, req);
            assert!(
                got.starts_with(want.as_bytes()),
                "{}",
                String::from_utf8_lossy(&got)
            );
            assert!(log.closed);
        }
    }

    #[test]
    fn raw_chunked_request_with_trailers_and_http10_close() {
        let req = b"POST /c HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n\
            3;ext=1\r\nabc\r\n2\r\nde\r\n0\r\nX-Trailer: t\r\n\r\n\
            GET /last HTTP/1.0\r\n\r\n";
        let (got, log) = raw_exchange(64, req);
        let text = String::from_utf8_lossy(&got);
        assert!(text.contains("Content-Length: 5\r\n\r\nabcde"), "{text}");
        // HTTP/1.0 without keep-alive: answered, then closed.
        assert!(text.ends_with("Connection: close\r\n\r\n/last"), "{text}");
        assert_eq!(log.requests, 2);
        assert!(log.errors.is_empty() && log.closed);
    }

    #[test]
    fn expect_continue_and_connection_close() {
        let mut lab = Lab::new(4096);
        let mut server = ServerConn::new(Limits::default());
        let mut log = ServerLog::default();
        let mut client = ClientConn::new("lab", Limits::default());
        let req = Request::post("/e", b"body".to_vec())
            .with_header("Expect", "100-continue")
            .with_header("Connection", "close");
        client.send(req, BodyMode::Buffer).unwrap();
        assert_eq!(
            client.send(Request::get("/x"), BodyMode::Buffer),
            Err(StateError::Closing)
        );
        let mut got = Vec::new();
        let mut closed = false;
        drive(&mut lab, &mut server, &mut log, |sock| {
            loop {
                match client.poll(sock) {
                    ClientEvent::Response(r) => got.push(r),
                    ClientEvent::Closed => {
                        closed = true;
                        break;
                    }
                    ClientEvent::Idle => break,
                    ev => panic!("{ev:?}"),
                }
            }
            closed
        });
        for _ in 0..100 {
            lab.step();
            serve(&mut server, lab.server(), &mut log);
        }
        assert!(log.closed);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].body, b"body");
        assert_eq!(got[0].head.headers.get("connection"), Some(&b"close"[..]));
        assert!(client.is_closed());
    }

    #[test]
    fn response_until_close_from_raw_server() {
        let mut lab = Lab::new(4096);
        let mut client = ClientConn::new("lab", Limits::default());
        client.send(Request::get("/"), BodyMode::Buffer).unwrap();
        let mut got = Vec::new();
        let mut answered = false;
        for _ in 0..STEPS {
            lab.step();
            let sock = lab.server();
            if sock.can_recv() && !answered {
                sock.recv(|b| (b.len(), ())).unwrap();
                sock.send_slice(b"HTTP/1.0 200 OK\r\nServer: raw\r\n\r\nuntil the end")
                    .unwrap();
                sock.close();
                answered = true;
            }
            collect(&mut client, lab.client(), &mut got);
            if client.is_closed() {
                break;
            }
        }
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].body, b"until the end");
        assert!(!client.is_reusable());
    }

    #[test]
    fn respond_without_request_is_an_error() {
        let mut server = ServerConn::new(Limits::default());
        assert_eq!(
            server.respond(Response::new(200)),
            Err(StateError::NoPendingRequest)
        );
        assert!(!server.awaiting_response());
    }
}
