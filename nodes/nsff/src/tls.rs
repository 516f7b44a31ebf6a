//! TLS SNI passthrough, the inspecting half: the service name a TLS client
//! asks for, read from its ClientHello without terminating TLS (SPEC §1.3,
//! §1.4; RFC 8446 §4.1.2 and §5.1, RFC 6066 §3).
//!
//! ```text
//! record      type:8 (0x16 handshake)  version:16 (0x03xx)  length:16 (1..=2^14)  fragment
//! handshake   msg_type:8 (1 client_hello)  length:24  body      (may span several records)
//! body        legacy_version:16  random:32 octets  session_id<0..32>:8
//!             cipher_suites<2..2^16-2>:16  compression_methods<1..2^8-1>:8
//!             extensions<0..2^16-1>:16 = { type:16 length:16 data }*
//! server_name (extension 0)  server_name_list<1..2^16-1>:16 = { name_type:8 (0 host_name) name<1..2^16-1>:16 }*
//! ```
//!
//! [`peek`] is a pure function of the bytes a client sent so far: it says
//! whether a complete ClientHello is there, and if so which name it asks
//! for, or why it is refused. It never reads past its input, allocates at
//! most [`MAX_HELLO`] octets (to join a ClientHello fragmented over several
//! records), and never panics; the node calls it again as bytes arrive and
//! stops reading at [`MAX_BUFFER`]. The bytes themselves are forwarded
//! unchanged: nothing here is ever written back.
//!
//! A [`Refusal`] maps to the one fatal alert the node sends before it closes
//! the connection ([`Refusal::alert`]); a plaintext alert before the
//! server's first flight is legal in every TLS version (RFC 8446 §6).

use svcroute_stack::wire::nr::Fqdn;

/// TLS record content type of handshake records.
pub const CONTENT_HANDSHAKE: u8 = 0x16;
/// Handshake message type of a ClientHello.
const HANDSHAKE_CLIENT_HELLO: u8 = 0x01;
/// Extension type `server_name` (RFC 6066 §3).
const EXT_SERVER_NAME: u16 = 0x0000;
/// `NameType` `host_name`.
const NAME_TYPE_HOST: u8 = 0x00;
/// Octets of a record header.
pub const RECORD_HEADER_LEN: usize = 5;
/// Largest record fragment a peer may send (RFC 8446 §5.1: 2^14).
pub const MAX_FRAGMENT: usize = 1 << 14;
/// Largest ClientHello body we buffer. Real ones are 200 octets to 2 KiB
/// (a post-quantum key share included); one record's worth is generous.
pub const MAX_HELLO: usize = MAX_FRAGMENT;
/// Most octets a client may send before its ClientHello is complete: a
/// [`MAX_HELLO`] hello spread over up to 16 records, with their headers.
pub const MAX_BUFFER: usize = MAX_HELLO + 4 + 16 * RECORD_HEADER_LEN;

/// What the bytes so far say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Peek {
    /// No complete ClientHello yet, and nothing wrong so far.
    NeedMore,
    /// A complete ClientHello asking for this name; `len` octets of the input
    /// (whole records) carry it.
    Name {
        /// The name of the `host_name` entry, canonical.
        name: Fqdn,
        /// Octets of the records that carry the ClientHello.
        len: usize,
    },
    /// Not something we pass through.
    Refused(Refusal),
}

/// Why a connection's first bytes are refused. Each is counted as
/// `nsff.tls_<as_str>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Refusal {
    /// The first octets are not a TLS handshake record (plain HTTP, say).
    NotTls,
    /// A handshake record, but the first message is not a ClientHello.
    NotClientHello,
    /// The ClientHello is longer than [`MAX_HELLO`] (or its records than
    /// [`MAX_BUFFER`]).
    Oversized,
    /// Lengths that do not add up, a zero-length or over-long record, a
    /// non-handshake record inside the hello, duplicate `server_name`.
    Malformed,
    /// A well-formed ClientHello without a `host_name` SNI entry.
    NoSni,
    /// The SNI name is not a host name (an IP literal, bad characters).
    BadName,
}

impl Refusal {
    /// The counter suffix.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::NotTls => "not_tls",
            Self::NotClientHello => "not_client_hello",
            Self::Oversized => "oversized",
            Self::Malformed => "malformed",
            Self::NoSni => "no_sni",
            Self::BadName => "bad_sni",
        }
    }

    /// The fatal alert sent before closing; `None` for a client that does
    /// not speak TLS at all (it would not understand one).
    pub const fn alert(self) -> Option<Alert> {
        match self {
            Self::NotTls => None,
            Self::NotClientHello => Some(Alert::UnexpectedMessage),
            Self::Oversized => Some(Alert::HandshakeFailure),
            Self::Malformed => Some(Alert::DecodeError),
            Self::NoSni => Some(Alert::MissingExtension),
            Self::BadName => Some(Alert::UnrecognizedName),
        }
    }
}

/// The alert descriptions we send (RFC 8446 §6; 112 is RFC 6066's).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Alert {
    /// 10: the first handshake message is not a ClientHello.
    UnexpectedMessage,
    /// 40: we will not handle this hello (too big).
    HandshakeFailure,
    /// 50: the hello does not parse.
    DecodeError,
    /// 80: no path to the service (tables full, transaction lost, SF gone).
    InternalError,
    /// 109: no SNI, which name-based routing needs.
    MissingExtension,
    /// 112: the name is unknown (RFC 6066 §3) or not a host name.
    UnrecognizedName,
}

impl Alert {
    /// The description code.
    pub const fn code(self) -> u8 {
        match self {
            Self::UnexpectedMessage => 10,
            Self::HandshakeFailure => 40,
            Self::DecodeError => 50,
            Self::InternalError => 80,
            Self::MissingExtension => 109,
            Self::UnrecognizedName => 112,
        }
    }

    /// The whole alert record: type 21, version 0x0303 (RFC 8446 §5.1
    /// `legacy_record_version`), length 2, level 2 (fatal), description.
    pub const fn record(self) -> [u8; 7] {
        [0x15, 0x03, 0x03, 0x00, 0x02, 0x02, self.code()]
    }
}

/// Look at the first bytes of a connection (see the module doc).
pub fn peek(buf: &[u8]) -> Peek {
    match hello(buf) {
        Ok(Some((body, len))) => match server_name(&body) {
            Ok(name) => Peek::Name { name, len },
            Err(r) => Peek::Refused(r),
        },
        Ok(None) if buf.len() >= MAX_BUFFER => Peek::Refused(Refusal::Oversized),
        Ok(None) => Peek::NeedMore,
        Err(r) => Peek::Refused(r),
    }
}

/// Whether a transaction's first octet says TLS passthrough (a handshake
/// record) rather than an HTTP request: no request line starts with 0x16.
pub fn is_tls_start(first: u8) -> bool {
    first == CONTENT_HANDSHAKE
}

/// The ClientHello body (joined from its records) and the octets of the
/// records carrying it; `None` while incomplete.
fn hello(buf: &[u8]) -> Result<Option<(Vec<u8>, usize)>, Refusal> {
    let mut hs: Vec<u8> = Vec::new();
    let mut at = 0;
    loop {
        let Some(header) = buf.get(at..at + RECORD_HEADER_LEN) else {
            // A partial header can already be refused.
            return check_partial_header(buf.get(at..).unwrap_or_default(), at == 0);
        };
        if header[0] != CONTENT_HANDSHAKE {
            return Err(if at == 0 {
                Refusal::NotTls
            } else {
                Refusal::Malformed
            });
        }
        if header[1] != 0x03 {
            return Err(if at == 0 {
                Refusal::NotTls
            } else {
                Refusal::Malformed
            });
        }
        let len = usize::from(u16::from_be_bytes([header[3], header[4]]));
        if len == 0 || len > MAX_FRAGMENT {
            return Err(Refusal::Malformed);
        }
        let start = at + RECORD_HEADER_LEN;
        let Some(fragment) = buf.get(start..start + len) else {
            // The record is not complete; its start may already say enough.
            let partial = buf.get(start..).unwrap_or_default();
            let mut probe = hs.clone();
            probe.extend_from_slice(partial);
            check_handshake_header(&probe)?;
            return Ok(None);
        };
        at = start + len;
        if hs.len() + fragment.len() > MAX_HELLO + 4 {
            // Only what is needed is kept; a message longer than that is
            // refused below by its length field.
            let room = (MAX_HELLO + 4).saturating_sub(hs.len());
            hs.extend_from_slice(&fragment[..room.min(fragment.len())]);
        } else {
            hs.extend_from_slice(fragment);
        }
        let Some(body_len) = check_handshake_header(&hs)? else {
            continue;
        };
        if hs.len() >= 4 + body_len {
            hs.truncate(4 + body_len);
            hs.drain(..4);
            return Ok(Some((hs, at)));
        }
        if at >= MAX_BUFFER {
            return Err(Refusal::Oversized);
        }
    }
}

/// Checks a record header cut short (the first one: is it TLS at all).
fn check_partial_header(part: &[u8], first: bool) -> Result<Option<(Vec<u8>, usize)>, Refusal> {
    let bad = if first {
        Refusal::NotTls
    } else {
        Refusal::Malformed
    };
    match part {
        [t, ..] if *t != CONTENT_HANDSHAKE => Err(bad),
        [_, v, ..] if *v != 0x03 => Err(bad),
        _ => Ok(None),
    }
}

/// The body length of the handshake message starting `hs`, once its
/// header is there; refuses a message that is not a ClientHello or too long.
fn check_handshake_header(hs: &[u8]) -> Result<Option<usize>, Refusal> {
    match hs.first() {
        None => return Ok(None),
        Some(&t) if t != HANDSHAKE_CLIENT_HELLO => return Err(Refusal::NotClientHello),
        Some(_) => {}
    }
    let Some(l) = hs.get(1..4) else {
        return Ok(None);
    };
    let len = usize::from(l[0]) << 16 | usize::from(l[1]) << 8 | usize::from(l[2]);
    if len > MAX_HELLO {
        return Err(Refusal::Oversized);
    }
    Ok(Some(len))
}

/// A cursor over a ClientHello body (STYLE 2); every length is checked
/// against what is left.
struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], Refusal> {
        if n > self.buf.len() {
            return Err(Refusal::Malformed);
        }
        let (head, rest) = self.buf.split_at(n);
        self.buf = rest;
        Ok(head)
    }

    fn u8(&mut self) -> Result<u8, Refusal> {
        Ok(self.take(1)?[0])
    }

    fn u16(&mut self) -> Result<u16, Refusal> {
        let b = self.take(2)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }

    /// A reader over a vector with a `u8` length.
    fn sub8(&mut self) -> Result<Self, Refusal> {
        let n = self.u8()?;
        Ok(Reader {
            buf: self.take(usize::from(n))?,
        })
    }

    /// A reader over a vector with a `u16` length.
    fn sub16(&mut self) -> Result<Self, Refusal> {
        let n = self.u16()?;
        Ok(Reader {
            buf: self.take(usize::from(n))?,
        })
    }

    fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }
}

/// The `host_name` of a ClientHello body.
fn server_name(body: &[u8]) -> Result<Fqdn, Refusal> {
    let mut r = Reader { buf: body };
    let _legacy_version = r.u16()?;
    let _random = r.take(32)?;
    if r.sub8()?.buf.len() > 32 {
        return Err(Refusal::Malformed);
    }
    let suites = r.sub16()?;
    if suites.buf.len() < 2 || suites.buf.len() % 2 != 0 {
        return Err(Refusal::Malformed);
    }
    if r.sub8()?.is_empty() {
        return Err(Refusal::Malformed);
    }
    if r.is_empty() {
        // TLS 1.2 and older may omit the extensions: no SNI.
        return Err(Refusal::NoSni);
    }
    let mut exts = r.sub16()?;
    if !r.is_empty() {
        return Err(Refusal::Malformed);
    }
    let mut found: Option<&[u8]> = None;
    let mut seen_sni = false;
    while !exts.is_empty() {
        let ty = exts.u16()?;
        let mut data = exts.sub16()?;
        if ty != EXT_SERVER_NAME {
            continue;
        }
        if seen_sni {
            return Err(Refusal::Malformed);
        }
        seen_sni = true;
        let mut list = data.sub16()?;
        if !data.is_empty() || list.is_empty() {
            return Err(Refusal::Malformed);
        }
        while !list.is_empty() {
            let name_type = list.u8()?;
            let name = list.sub16()?;
            if name.is_empty() {
                return Err(Refusal::Malformed);
            }
            // Only one host_name may be given (RFC 6066 §3); the first wins.
            if name_type == NAME_TYPE_HOST && found.is_none() {
                found = Some(name.buf);
            }
        }
    }
    let name = found.ok_or(Refusal::NoSni)?;
    let name = core::str::from_utf8(name).map_err(|_| Refusal::BadName)?;
    let name = Fqdn::new(name).map_err(|_| Refusal::BadName)?;
    // "Literal IPv4 and IPv6 addresses are not permitted" (RFC 6066 §3): a
    // name whose last label is all digits is an address, not a service.
    let last = name.as_str().rsplit('.').next().unwrap_or_default();
    if last.bytes().all(|b| b.is_ascii_digit()) {
        return Err(Refusal::BadName);
    }
    Ok(name)
}

#[cfg(test)]
pub(crate) mod tests;
