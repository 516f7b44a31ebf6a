// Over 800 lines: one wire family: the option header, its entry types, service names and constraints each have a parser and an emitter that must stay in step.
//! The ROSA option (IPv6 destination option `0x3E`, SPEC §2.1; the message
//! figures of draft-trossen-rtgwg-rosa-arch-01 §3.2): service announcements,
//! requests, responses and withdrawals as a one-octet header and a list of
//! `type:u8 len:u8 value` entries.
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |  Ver  |  Msg  |  Entry Type   |   Entry Len   |  Value ...    |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |  Entry Type   |   Entry Len   |  Value ...                    ~
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! ```
//!
//! Ver is 1; Msg is 1 announcement, 2 request, 3 response, 4 withdrawal
//! (others parse as [`MessageKind::Unknown`]). Entries:
//!
//! | type | entry      | value                                                      |
//! |------|------------|------------------------------------------------------------|
//! | 1    | Service    | name segments `seg_type:u16 (=1) seg_len:u16 bytes` ([`ServiceName`]) |
//! | 2    | Client     | IPv6 (16) or IPv4 (4) address                              |
//! | 3    | Ingress    | IPv6 (16) or IPv4 (4) address                              |
//! | 4    | Instance   | IPv6 (16) or IPv4 (4) address                              |
//! | 5    | Port       | `proto:u8 port:u16` of the client's transport flow         |
//! | 6    | Constraint | nested `type:u8 len:u8 value` ([`Constraint`])             |
//! | 7    | SAG        | IPv6 (16) or IPv4 (4) address                              |
//! | 8    | Auth       | `key_id:u8` + 16 octets of HMAC-SHA256 ([`Message::sign`]) |
//!
//! Limits and choices (also in `docs/wire/rosa.md`):
//! - the option data is at most 255 octets: emitting more is
//!   [`Error::TooLong`], never a truncation;
//! - a service name encodes to at most [`MAX_NAME_LEN`] octets, so a
//!   response with IPv6 addresses, a SAG entry and an auth tag still fits;
//! - each known entry type (and each known constraint type) appears at most
//!   once, else [`Error::Malformed`] — which entries a message kind needs is
//!   the roles' business;
//! - unknown entry types, constraint types and message kinds are kept and
//!   survive a round trip, so `parse` then `emit` reproduces the octets.
//!
//! Two layers, smoltcp style: [`Packet`], a view of the option data with the
//! fixed octet and an [`Entries`] iterator of raw entries; [`Message`], the
//! owned high-level form the shim and the SAR build, edit and re-emit (the
//! option is small and rewritten whole).

use core::fmt;
use core::str::FromStr;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ring::digest;
use serde::{Deserialize, Serialize};
use smoltcp::wire::IpProtocol;

use super::auth::{AuthCheck, AuthTag, AUTH_TAG_LEN};
use super::ipv6opt::MAX_OPTION_DATA;
use super::{Error, Result};

/// The only version we speak.
pub const VERSION: u8 = 1;

/// Most octets a [`ServiceName`] occupies on the wire (its segments with
/// their 4-octet headers). Chosen so the largest message we build — a
/// response with Client, Ingress, Instance and SAG as IPv6 addresses, a
/// Port and an auth tag (1 + 4×18 + 5 + 19 = 97 octets) — plus a Service
/// entry of 2 + 128 octets stays within 255, with 28 octets to spare.
pub const MAX_NAME_LEN: usize = 128;

/// Longest segment: a one-segment name of [`MAX_NAME_LEN`] octets.
pub const MAX_SEGMENT_LEN: usize = MAX_NAME_LEN - SEGMENT_HEADER_LEN;

/// The RFC 8609 name segment type we carry (generic name segment).
pub const SEGMENT_TYPE: u16 = 1;

const SEGMENT_HEADER_LEN: usize = 4;

/// Octets of an auth entry's value: `key_id` and the tag.
pub const AUTH_VALUE_LEN: usize = 1 + AUTH_TAG_LEN;

open_enum! {
    /// The message kind (the low nibble of the first octet), an open enum.
    ///
    /// `Unknown`: Any other nibble (0, 5..=15). Values above 15 cannot be emitted.
    pub enum MessageKind: u8 {
        /// 1: instance → its SAR, flooded to the ingress SARs.
        Announcement = 1,
        /// 2: client → ingress SAR → instance.
        Request = 2,
        /// 3: instance → ingress SAR → client.
        Response = 3,
        /// 4: instance → its SAR: the service is gone from this instance.
        Withdrawal = 4,
    }
}

impl MessageKind {
    /// Whether messages of this kind sign the IPv6 source address too:
    /// announcements and withdrawals, which are not rewritten en route.
    pub const fn signs_source(self) -> bool {
        matches!(self, Self::Announcement | Self::Withdrawal)
    }
}

open_enum! {
    /// An entry's type octet, an open enum.
    ///
    /// `Unknown`: Any other value.
    pub enum EntryType: u8 {
        /// 1: the service name.
        Service = 1,
        /// 2: the client's address.
        Client = 2,
        /// 3: the ingress SAR's address.
        Ingress = 3,
        /// 4: the service instance's address.
        Instance = 4,
        /// 5: the client's transport protocol and port.
        Port = 5,
        /// 6: announcement constraints.
        Constraint = 6,
        /// 7: the address of the SAG handling an inter-domain request.
        Sag = 7,
        /// 8: the auth tag.
        Auth = 8,
    }
}

/// A service name: RFC 8609-style segments, kept in their wire encoding
/// (the canonical encoding SPEC §0 hashes).
///
/// Textual form: segments joined by `/` (`service.org/video/x`); `*` is the
/// empty name, the wildcard the SAG originates. A segment is 1 to
/// [`MAX_SEGMENT_LEN`] visible ASCII octets (`0x21..=0x7e`) other than `/`
/// and `*`; the whole encoding is at most [`MAX_NAME_LEN`] octets. Names are
/// case-sensitive octet strings, as in RFC 8609: `Service.org` and
/// `service.org` differ (configure lower-case domains).
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "Vec<u8>", into = "Vec<u8>")]
pub struct ServiceName(Vec<u8>);

impl ServiceName {
    /// The empty name `*`.
    pub const WILDCARD: Self = Self(Vec::new());

    /// A name from its wire encoding (a Service entry's value).
    /// [`Error::TooLong`] over [`MAX_NAME_LEN`] octets, [`Error::BadLength`]
    /// for a segment running past the end, [`Error::Malformed`] for a segment
    /// type other than 1 or an empty or invalid segment.
    pub fn from_wire(bytes: &[u8]) -> Result<Self> {
        if bytes.len() > MAX_NAME_LEN {
            return Err(Error::TooLong);
        }
        let mut rest = bytes;
        while !rest.is_empty() {
            let [t0, t1, l0, l1, tail @ ..] = rest else {
                return Err(Error::BadLength);
            };
            if u16::from_be_bytes([*t0, *t1]) != SEGMENT_TYPE {
                return Err(Error::Malformed);
            }
            let len = usize::from(u16::from_be_bytes([*l0, *l1]));
            let Some(segment) = tail.get(..len) else {
                return Err(Error::BadLength);
            };
            check_segment(segment)?;
            rest = &tail[len..];
        }
        Ok(Self(bytes.to_vec()))
    }

    /// A name from its segments, in order. Errors as [`Self::from_wire`].
    pub fn from_segments<'s>(segments: impl IntoIterator<Item = &'s [u8]>) -> Result<Self> {
        let mut wire = Vec::new();
        for segment in segments {
            check_segment(segment)?;
            if wire.len() + SEGMENT_HEADER_LEN + segment.len() > MAX_NAME_LEN {
                return Err(Error::TooLong);
            }
            wire.extend_from_slice(&SEGMENT_TYPE.to_be_bytes());
            // At most MAX_SEGMENT_LEN octets: checked above.
            wire.extend_from_slice(&(segment.len() as u16).to_be_bytes());
            wire.extend_from_slice(segment);
        }
        Ok(Self(wire))
    }

    /// The wire encoding (what a Service entry carries and what is hashed).
    pub fn as_wire(&self) -> &[u8] {
        &self.0
    }

    /// Whether this is the wildcard `*`.
    pub fn is_wildcard(&self) -> bool {
        self.0.is_empty()
    }

    /// The segments, in order.
    pub fn segments(&self) -> Segments<'_> {
        Segments(&self.0)
    }

    /// Number of segments (0 for `*`).
    pub fn segment_count(&self) -> usize {
        self.segments().count()
    }

    /// The wire encoding of the first `n` segments (all of them if there are
    /// fewer): FIB lookups hash each prefix, longest first.
    pub fn prefix_wire(&self, n: usize) -> &[u8] {
        let mut end = 0;
        for _ in 0..n {
            let Some(len) = segment_len_at(&self.0, end) else {
                break;
            };
            end += SEGMENT_HEADER_LEN + len;
        }
        &self.0[..end]
    }

    /// The name made of the first `n` segments.
    pub fn prefix(&self, n: usize) -> Self {
        Self(self.prefix_wire(n).to_vec())
    }

    /// Whether `self` is a segment-wise prefix of `other` (`*` is a prefix
    /// of every name).
    pub fn is_prefix_of(&self, other: &Self) -> bool {
        other.prefix_wire(self.segment_count()) == self.as_wire()
    }

    /// The lookup hash of SPEC §0: the first 8 octets of SHA-256 over the
    /// wire encoding, as a big-endian u64. Never decides alone: compare the
    /// full names on a match.
    pub fn name_hash(&self) -> u64 {
        name_hash(&self.0)
    }
}

/// The lookup hash of a name's wire encoding (see [`ServiceName::name_hash`]);
/// for hashing prefixes ([`ServiceName::prefix_wire`]) without copying.
pub fn name_hash(wire: &[u8]) -> u64 {
    let d = digest::digest(&digest::SHA256, wire);
    let mut first = [0; 8];
    first.copy_from_slice(&d.as_ref()[..8]);
    u64::from_be_bytes(first)
}

fn check_segment(segment: &[u8]) -> Result<()> {
    if segment.len() > MAX_SEGMENT_LEN {
        return Err(Error::TooLong);
    }
    let ok = |b: &u8| (0x21..=0x7e).contains(b) && *b != b'/' && *b != b'*';
    if segment.is_empty() || !segment.iter().all(ok) {
        return Err(Error::Malformed);
    }
    Ok(())
}

/// Length of the segment whose header starts at `pos` in a valid encoding.
fn segment_len_at(wire: &[u8], pos: usize) -> Option<usize> {
    let header = wire.get(pos..pos + SEGMENT_HEADER_LEN)?;
    Some(usize::from(u16::from_be_bytes([header[2], header[3]])))
}

/// The segments of a [`ServiceName`], see [`ServiceName::segments`].
#[derive(Debug, Clone)]
pub struct Segments<'a>(&'a [u8]);

impl<'a> Iterator for Segments<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<Self::Item> {
        // The encoding was validated when the name was built.
        let len = segment_len_at(self.0, 0)?;
        let segment = self.0.get(SEGMENT_HEADER_LEN..SEGMENT_HEADER_LEN + len)?;
        self.0 = &self.0[SEGMENT_HEADER_LEN + len..];
        Some(segment)
    }
}

impl FromStr for ServiceName {
    type Err = Error;

    /// Parse the textual form (`service.org/video`, or `*`).
    fn from_str(s: &str) -> Result<Self> {
        if s == "*" {
            return Ok(Self::WILDCARD);
        }
        if s.is_empty() {
            return Err(Error::Malformed);
        }
        Self::from_segments(s.split('/').map(str::as_bytes))
    }
}

impl fmt::Display for ServiceName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_wildcard() {
            return f.write_str("*");
        }
        for (i, segment) in self.segments().enumerate() {
            if i > 0 {
                f.write_str("/")?;
            }
            // Segments are visible ASCII (checked when built).
            f.write_str(core::str::from_utf8(segment).unwrap_or("?"))?;
        }
        Ok(())
    }
}

impl fmt::Debug for ServiceName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ServiceName({self})")
    }
}

impl TryFrom<Vec<u8>> for ServiceName {
    type Error = Error;

    fn try_from(wire: Vec<u8>) -> Result<Self> {
        Self::from_wire(&wire)
    }
}

impl From<ServiceName> for Vec<u8> {
    fn from(name: ServiceName) -> Self {
        name.0
    }
}

/// The client's transport flow (Port entry).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FlowPort {
    /// Transport protocol (TCP, UDP, ...).
    pub proto: IpProtocol,
    /// Destination port of the flow.
    pub port: u16,
}

open_enum! {
    /// The mode of a Constraint's mode+policy entry, an open enum.
    #[derive(Serialize, Deserialize)]
    ///
    /// `Unknown`: Any other value.
    pub enum Mode: u8 {
        /// 0: routing-based steering over the IGP.
        Routing = 0,
        /// 1: scheduling at the ingress SAR.
        Scheduling = 1,
    }
}

open_enum! {
    /// The policy of a Constraint's mode+policy entry, an open enum.
    #[derive(Serialize, Deserialize)]
    ///
    /// `Unknown`: Any other value.
    pub enum Policy: u8 {
        /// 0: shortest path.
        Shortest = 0,
        /// 1: uniformly random.
        Random = 1,
        /// 2: round robin.
        RoundRobin = 2,
        /// 3: weighted round robin by capability.
        Weighted = 3,
        /// 4: lowest reported metric.
        MinMetric = 4,
        /// 5: App-Metrics cost (SPEC §3).
        AppMetricsCost = 5,
    }
}

/// One nested entry of a Constraint entry (`type:u8 len:u8 value`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Constraint {
    /// 1: `mode:u8 policy:u8`.
    ModePolicy {
        /// Routing or scheduling.
        mode: Mode,
        /// How to pick among instances.
        policy: Policy,
    },
    /// 2: capability (weight for weighted round robin), u32.
    Capability(u32),
    /// 3: load, u32 (lower is better).
    Load(u32),
    /// 4: latency in microseconds, u32.
    LatencyUs(u32),
    /// 5: preference, u32.
    Preference(u32),
    /// 6: lifetime of the announcement in seconds, u32.
    LifetimeS(u32),
    /// Any other type, kept verbatim (type not 1..=6, value ≤ 255 octets).
    Unknown {
        /// The type octet.
        kind: u8,
        /// The value.
        value: Vec<u8>,
    },
}

impl Constraint {
    /// The type octet.
    pub fn kind(&self) -> u8 {
        match self {
            Self::ModePolicy { .. } => 1,
            Self::Capability(_) => 2,
            Self::Load(_) => 3,
            Self::LatencyUs(_) => 4,
            Self::Preference(_) => 5,
            Self::LifetimeS(_) => 6,
            Self::Unknown { kind, .. } => *kind,
        }
    }

    fn value_len(&self) -> usize {
        match self {
            Self::ModePolicy { .. } => 2,
            Self::Unknown { value, .. } => value.len(),
            _ => 4,
        }
    }

    fn buffer_len(&self) -> usize {
        2 + self.value_len()
    }

    fn check(&self) -> Result<()> {
        if let Self::Unknown { kind, value } = self {
            if (1..=6).contains(kind) {
                return Err(Error::Malformed);
            }
            if value.len() > MAX_OPTION_DATA {
                return Err(Error::TooLong);
            }
        }
        Ok(())
    }

    fn parse(kind: u8, value: &[u8]) -> Result<Self> {
        let u32_value = || -> Result<u32> {
            let Ok(v) = <[u8; 4]>::try_from(value) else {
                return Err(Error::BadLength);
            };
            Ok(u32::from_be_bytes(v))
        };
        Ok(match kind {
            1 => {
                let [mode, policy] = value else {
                    return Err(Error::BadLength);
                };
                Self::ModePolicy {
                    mode: Mode::from(*mode),
                    policy: Policy::from(*policy),
                }
            }
            2 => Self::Capability(u32_value()?),
            3 => Self::Load(u32_value()?),
            4 => Self::LatencyUs(u32_value()?),
            5 => Self::Preference(u32_value()?),
            6 => Self::LifetimeS(u32_value()?),
            kind => Self::Unknown {
                kind,
                value: value.to_vec(),
            },
        })
    }

    fn emit(&self, out: &mut Vec<u8>) {
        out.push(self.kind());
        // At most 255: check() ran.
        out.push(self.value_len() as u8);
        match self {
            Self::ModePolicy { mode, policy } => out.extend([u8::from(*mode), u8::from(*policy)]),
            Self::Capability(v)
            | Self::Load(v)
            | Self::LatencyUs(v)
            | Self::Preference(v)
            | Self::LifetimeS(v) => out.extend_from_slice(&v.to_be_bytes()),
            Self::Unknown { value, .. } => out.extend_from_slice(value),
        }
    }
}

/// The nested entries of a Constraint entry, in wire order.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Constraints(pub Vec<Constraint>);

impl Constraints {
    /// The mode and policy, if given.
    pub fn mode_policy(&self) -> Option<(Mode, Policy)> {
        self.0.iter().find_map(|c| match c {
            Constraint::ModePolicy { mode, policy } => Some((*mode, *policy)),
            _ => None,
        })
    }

    /// The capability, if given.
    pub fn capability(&self) -> Option<u32> {
        self.0.iter().find_map(|c| match c {
            Constraint::Capability(v) => Some(*v),
            _ => None,
        })
    }

    /// The load, if given.
    pub fn load(&self) -> Option<u32> {
        self.0.iter().find_map(|c| match c {
            Constraint::Load(v) => Some(*v),
            _ => None,
        })
    }

    /// The latency in microseconds, if given.
    pub fn latency_us(&self) -> Option<u32> {
        self.0.iter().find_map(|c| match c {
            Constraint::LatencyUs(v) => Some(*v),
            _ => None,
        })
    }

    /// The preference, if given.
    pub fn preference(&self) -> Option<u32> {
        self.0.iter().find_map(|c| match c {
            Constraint::Preference(v) => Some(*v),
            _ => None,
        })
    }

    /// The lifetime in seconds, if given.
    pub fn lifetime_s(&self) -> Option<u32> {
        self.0.iter().find_map(|c| match c {
            Constraint::LifetimeS(v) => Some(*v),
            _ => None,
        })
    }

    /// Parse a Constraint entry's value. [`Error::BadLength`] for a nested
    /// entry running past the end or of the wrong size, [`Error::Malformed`]
    /// for a repeated known type.
    pub fn parse(value: &[u8]) -> Result<Self> {
        let mut list = Vec::new();
        let mut seen = 0_u8;
        for raw in TlvIter::new(value) {
            let (kind, v) = raw?;
            if (1..=6).contains(&kind) {
                if seen & (1 << kind) != 0 {
                    return Err(Error::Malformed);
                }
                seen |= 1 << kind;
            }
            list.push(Constraint::parse(kind, v)?);
        }
        Ok(Self(list))
    }

    /// Octets the nested entries occupy.
    pub fn buffer_len(&self) -> usize {
        self.0.iter().map(Constraint::buffer_len).sum()
    }

    fn check(&self) -> Result<()> {
        let mut seen = 0_u8;
        for c in &self.0 {
            c.check()?;
            let kind = c.kind();
            if (1..=6).contains(&kind) {
                if seen & (1 << kind) != 0 {
                    return Err(Error::Malformed);
                }
                seen |= 1 << kind;
            }
        }
        if self.buffer_len() > MAX_OPTION_DATA {
            return Err(Error::TooLong);
        }
        Ok(())
    }

    fn emit(&self, out: &mut Vec<u8>) {
        for c in &self.0 {
            c.emit(out);
        }
    }
}

/// One entry of a ROSA message.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Entry {
    /// 1: the service name.
    Service(ServiceName),
    /// 2: the client's address.
    Client(IpAddr),
    /// 3: the ingress SAR's address.
    Ingress(IpAddr),
    /// 4: the service instance's address.
    Instance(IpAddr),
    /// 5: the client's transport protocol and port.
    Port(FlowPort),
    /// 6: announcement constraints.
    Constraint(Constraints),
    /// 7: the SAG's address.
    Sag(IpAddr),
    /// 8: the auth tag, see [`Message::sign`].
    Auth(AuthTag),
    /// Any other entry, kept verbatim (type not 1..=8, value ≤ 255 octets).
    Unknown {
        /// The type octet.
        entry_type: u8,
        /// The value.
        value: Vec<u8>,
    },
}

impl Entry {
    /// The entry's type.
    pub fn entry_type(&self) -> EntryType {
        match self {
            Self::Service(_) => EntryType::Service,
            Self::Client(_) => EntryType::Client,
            Self::Ingress(_) => EntryType::Ingress,
            Self::Instance(_) => EntryType::Instance,
            Self::Port(_) => EntryType::Port,
            Self::Constraint(_) => EntryType::Constraint,
            Self::Sag(_) => EntryType::Sag,
            Self::Auth(_) => EntryType::Auth,
            Self::Unknown { entry_type, .. } => EntryType::Unknown(*entry_type),
        }
    }

    fn value_len(&self) -> usize {
        match self {
            Self::Service(name) => name.as_wire().len(),
            Self::Client(a) | Self::Ingress(a) | Self::Instance(a) | Self::Sag(a) => addr_len(a),
            Self::Port(_) => 3,
            Self::Constraint(c) => c.buffer_len(),
            Self::Auth(_) => AUTH_VALUE_LEN,
            Self::Unknown { value, .. } => value.len(),
        }
    }

    /// Octets the entry occupies: 2 + value.
    pub fn buffer_len(&self) -> usize {
        2 + self.value_len()
    }

    fn check(&self) -> Result<()> {
        match self {
            Self::Constraint(c) => c.check(),
            Self::Unknown { entry_type, value } => {
                if !matches!(EntryType::from(*entry_type), EntryType::Unknown(_)) {
                    return Err(Error::Malformed);
                }
                if value.len() > MAX_OPTION_DATA {
                    return Err(Error::TooLong);
                }
                Ok(())
            }
            // Names are at most MAX_NAME_LEN, the rest fixed-size.
            _ => Ok(()),
        }
    }

    /// Parse an entry from its type and value.
    pub fn parse(entry_type: u8, value: &[u8]) -> Result<Self> {
        Ok(match EntryType::from(entry_type) {
            EntryType::Service => Self::Service(ServiceName::from_wire(value)?),
            EntryType::Client => Self::Client(parse_addr(value)?),
            EntryType::Ingress => Self::Ingress(parse_addr(value)?),
            EntryType::Instance => Self::Instance(parse_addr(value)?),
            EntryType::Sag => Self::Sag(parse_addr(value)?),
            EntryType::Port => {
                let [proto, p0, p1] = value else {
                    return Err(Error::BadLength);
                };
                Self::Port(FlowPort {
                    proto: IpProtocol::from(*proto),
                    port: u16::from_be_bytes([*p0, *p1]),
                })
            }
            EntryType::Constraint => Self::Constraint(Constraints::parse(value)?),
            EntryType::Auth => {
                let [key_id, tag @ ..] = value else {
                    return Err(Error::BadLength);
                };
                let Ok(tag) = <[u8; AUTH_TAG_LEN]>::try_from(tag) else {
                    return Err(Error::BadLength);
                };
                Self::Auth(AuthTag {
                    key_id: *key_id,
                    tag,
                })
            }
            EntryType::Unknown(entry_type) => Self::Unknown {
                entry_type,
                value: value.to_vec(),
            },
        })
    }

    fn emit(&self, out: &mut Vec<u8>) {
        out.push(self.entry_type().into());
        // At most 255: check() ran.
        out.push(self.value_len() as u8);
        match self {
            Self::Service(name) => out.extend_from_slice(name.as_wire()),
            Self::Client(a) | Self::Ingress(a) | Self::Instance(a) | Self::Sag(a) => match a {
                IpAddr::V4(a) => out.extend_from_slice(&a.octets()),
                IpAddr::V6(a) => out.extend_from_slice(&a.octets()),
            },
            Self::Port(p) => {
                out.push(p.proto.into());
                out.extend_from_slice(&p.port.to_be_bytes());
            }
            Self::Constraint(c) => c.emit(out),
            Self::Auth(a) => {
                out.push(a.key_id);
                out.extend_from_slice(&a.tag);
            }
            Self::Unknown { value, .. } => out.extend_from_slice(value),
        }
    }
}

const fn addr_len(a: &IpAddr) -> usize {
    match a {
        IpAddr::V4(_) => 4,
        IpAddr::V6(_) => 16,
    }
}

fn parse_addr(value: &[u8]) -> Result<IpAddr> {
    if let Ok(v4) = <[u8; 4]>::try_from(value) {
        return Ok(IpAddr::V4(Ipv4Addr::from(v4)));
    }
    if let Ok(v6) = <[u8; 16]>::try_from(value) {
        return Ok(IpAddr::V6(Ipv6Addr::from(v6)));
    }
    Err(Error::BadLength)
}

/// `type:u8 len:u8 value` triples over an area; an error ends the iteration.
#[derive(Debug, Clone)]
struct TlvIter<'a> {
    rest: &'a [u8],
    failed: bool,
}

impl<'a> TlvIter<'a> {
    const fn new(area: &'a [u8]) -> Self {
        Self {
            rest: area,
            failed: false,
        }
    }
}

impl<'a> Iterator for TlvIter<'a> {
    type Item = Result<(u8, &'a [u8])>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.rest.is_empty() {
            return None;
        }
        let parsed = match self.rest {
            [t, len, tail @ ..] => tail
                .get(..usize::from(*len))
                .map(|v| (*t, v, &tail[usize::from(*len)..])),
            _ => None,
        };
        let Some((t, value, rest)) = parsed else {
            self.failed = true;
            return Some(Err(Error::BadLength));
        };
        self.rest = rest;
        Some(Ok((t, value)))
    }
}

// The option data:
//
// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
// |  Ver  |  Msg  |  Entries (type:u8 len:u8 value)...            ~
// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
mod field {
    use core::ops::RangeFrom;

    pub(super) const VER_MSG: usize = 0;
    pub(super) const ENTRIES: RangeFrom<usize> = 1..;
}

/// A read/write view of ROSA option data (what follows the option's type
/// and length octets).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wrap a buffer without checking it; see [`Self::check_len`].
    pub const fn new_unchecked(buffer: T) -> Self {
        Self { buffer }
    }

    /// [`Self::new_unchecked`] followed by [`Self::check_len`].
    pub fn new_checked(buffer: T) -> Result<Self> {
        let packet = Self::new_unchecked(buffer);
        packet.check_len()?;
        Ok(packet)
    }

    /// Ensure no accessor panics: at least the first octet
    /// ([`Error::Truncated`]) and at most 255 octets ([`Error::TooLong`]).
    /// Entries are checked as they are iterated.
    pub fn check_len(&self) -> Result<()> {
        let len = self.buffer.as_ref().len();
        if len < field::ENTRIES.start {
            return Err(Error::Truncated);
        }
        if len > MAX_OPTION_DATA {
            return Err(Error::TooLong);
        }
        Ok(())
    }

    /// Give the buffer back.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The version nibble.
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::VER_MSG] >> 4
    }

    /// The message kind nibble.
    pub fn msg_kind(&self) -> MessageKind {
        MessageKind::from(self.buffer.as_ref()[field::VER_MSG] & 0x0f)
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> Packet<&'a T> {
    /// The entries area, borrowed from the buffer.
    pub fn entries_area(&self) -> &'a [u8] {
        &self.buffer.as_ref()[field::ENTRIES]
    }

    /// Iterate the entries as `(type, value)`; a truncated entry yields
    /// [`Error::BadLength`] and ends the iteration.
    pub fn entries(&self) -> Entries<'a> {
        Entries(TlvIter::new(self.entries_area()))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Set the version nibble (only the low 4 bits of `value` are used).
    pub fn set_version(&mut self, value: u8) {
        let b = &mut self.buffer.as_mut()[field::VER_MSG];
        *b = (*b & 0x0f) | (value << 4);
    }

    /// Set the message kind nibble (only the low 4 bits are used).
    pub fn set_msg_kind(&mut self, value: MessageKind) {
        let b = &mut self.buffer.as_mut()[field::VER_MSG];
        *b = (*b & 0xf0) | (u8::from(value) & 0x0f);
    }

    /// The entries area, mutably.
    pub fn entries_area_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[field::ENTRIES]
    }
}

/// The raw entries of a [`Packet`]: `(type, value)`.
#[derive(Debug, Clone)]
pub struct Entries<'a>(TlvIter<'a>);

impl<'a> Iterator for Entries<'a> {
    type Item = Result<(EntryType, &'a [u8])>;

    fn next(&mut self) -> Option<Self::Item> {
        Some(self.0.next()?.map(|(t, v)| (EntryType::from(t), v)))
    }
}

impl core::iter::FusedIterator for Entries<'_> {}

/// A ROSA message, high level: its kind and its entries in wire order.
///
/// Build one, [`Self::sign`] it if a key is configured, and [`Self::emit`]
/// or [`Self::to_bytes`] it as the data of a [`super::ipv6opt::OptionRepr::Rosa`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Message {
    /// The message kind.
    pub kind: MessageKind,
    /// The entries, in wire order.
    pub entries: Vec<Entry>,
}

impl Message {
    /// A message of `kind` without entries.
    pub const fn new(kind: MessageKind) -> Self {
        Self {
            kind,
            entries: Vec::new(),
        }
    }

    /// Parse option data: [`Error::Truncated`] if empty, [`Error::TooLong`]
    /// over 255 octets, [`Error::Malformed`] for a version other than 1, a
    /// repeated known entry or a bad name, [`Error::BadLength`] for an entry
    /// running past the end or of the wrong size for its type.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(packet: &Packet<&T>) -> Result<Self> {
        packet.check_len()?;
        if packet.version() != VERSION {
            return Err(Error::Malformed);
        }
        let mut entries = Vec::new();
        let mut seen = 0_u16;
        for raw in packet.entries() {
            let (t, value) = raw?;
            let entry = Entry::parse(t.into(), value)?;
            note_known(&mut seen, entry.entry_type())?;
            entries.push(entry);
        }
        Ok(Self {
            kind: packet.msg_kind(),
            entries,
        })
    }

    /// [`Self::parse`] of a byte slice.
    pub fn from_bytes(data: &[u8]) -> Result<Self> {
        Self::parse(&Packet::new_checked(data)?)
    }

    /// Octets [`Self::emit`] writes (may exceed 255: emit then fails).
    pub fn buffer_len(&self) -> usize {
        1 + self.entries.iter().map(Entry::buffer_len).sum::<usize>()
    }

    /// Check that the message can be emitted: [`Error::TooLong`] over 255
    /// octets or for an over-long unknown value, [`Error::Malformed`] for a
    /// kind above 15, an `Unknown` entry or constraint with a known type, or
    /// a repeated known entry or constraint.
    pub fn check(&self) -> Result<()> {
        if u8::from(self.kind) > 0x0f {
            return Err(Error::Malformed);
        }
        let mut seen = 0_u16;
        for e in &self.entries {
            e.check()?;
            note_known(&mut seen, e.entry_type())?;
        }
        if self.buffer_len() > MAX_OPTION_DATA {
            return Err(Error::TooLong);
        }
        Ok(())
    }

    /// Write the option data at the start of `packet`'s buffer. Errors as
    /// [`Self::check`], and [`Error::Truncated`] if the buffer is shorter
    /// than [`Self::buffer_len`].
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) -> Result<()> {
        let bytes = self.to_bytes()?;
        let Some(dst) = packet.buffer.as_mut().get_mut(..bytes.len()) else {
            return Err(Error::Truncated);
        };
        dst.copy_from_slice(&bytes);
        Ok(())
    }

    /// The option data. Errors as [`Self::check`].
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        self.check()?;
        let mut out = Vec::with_capacity(self.buffer_len());
        out.push((VERSION << 4) | u8::from(self.kind));
        for e in &self.entries {
            e.emit(&mut out);
        }
        Ok(out)
    }

    /// The first entry of `entry_type`.
    pub fn entry(&self, entry_type: EntryType) -> Option<&Entry> {
        self.entries.iter().find(|e| e.entry_type() == entry_type)
    }

    /// Replace the entry of the same type as `entry`, or add it (before the
    /// auth entry, if any). Rewriting invalidates an auth tag: sign again.
    pub fn set(&mut self, entry: Entry) {
        let t = entry.entry_type();
        if let Some(slot) = self.entries.iter_mut().find(|e| e.entry_type() == t) {
            *slot = entry;
            return;
        }
        let at = self
            .entries
            .iter()
            .position(|e| matches!(e, Entry::Auth(_)))
            .unwrap_or(self.entries.len());
        self.entries.insert(at, entry);
    }

    /// Remove every entry of `entry_type`; whether there was one.
    pub fn remove(&mut self, entry_type: EntryType) -> bool {
        let before = self.entries.len();
        self.entries.retain(|e| e.entry_type() != entry_type);
        self.entries.len() != before
    }

    /// The service name.
    pub fn service(&self) -> Option<&ServiceName> {
        match self.entry(EntryType::Service)? {
            Entry::Service(name) => Some(name),
            _ => None,
        }
    }

    /// The Client address.
    pub fn client(&self) -> Option<IpAddr> {
        self.addr(EntryType::Client)
    }

    /// The Ingress address.
    pub fn ingress(&self) -> Option<IpAddr> {
        self.addr(EntryType::Ingress)
    }

    /// The Instance address.
    pub fn instance(&self) -> Option<IpAddr> {
        self.addr(EntryType::Instance)
    }

    /// The SAG address.
    pub fn sag(&self) -> Option<IpAddr> {
        self.addr(EntryType::Sag)
    }

    /// The client's transport flow.
    pub fn port(&self) -> Option<FlowPort> {
        match self.entry(EntryType::Port)? {
            Entry::Port(p) => Some(*p),
            _ => None,
        }
    }

    /// The constraints.
    pub fn constraints(&self) -> Option<&Constraints> {
        match self.entry(EntryType::Constraint)? {
            Entry::Constraint(c) => Some(c),
            _ => None,
        }
    }

    /// The auth tag.
    pub fn auth(&self) -> Option<AuthTag> {
        match self.entry(EntryType::Auth)? {
            Entry::Auth(a) => Some(*a),
            _ => None,
        }
    }

    fn addr(&self, entry_type: EntryType) -> Option<IpAddr> {
        match self.entry(entry_type)? {
            Entry::Client(a) | Entry::Ingress(a) | Entry::Instance(a) | Entry::Sag(a) => Some(*a),
            _ => None,
        }
    }

    /// Sign with key `key_id`: drop any auth entry, then append one whose
    /// tag is HMAC-SHA256 (truncated to 16 octets) over the first octet
    /// (version and kind), every other entry as emitted, in order, and — for
    /// announcements and withdrawals ([`MessageKind::signs_source`]) — the
    /// 16 octets of `src`, the packet's IPv6 source address. Errors as
    /// [`Self::check`] (the tag adds 19 octets).
    pub fn sign(&mut self, key_id: u8, secret: &[u8], src: Ipv6Addr) -> Result<()> {
        self.remove(EntryType::Auth);
        let signed = self.to_bytes()?;
        let src = src.octets();
        let tag = AuthTag::sign(key_id, secret, &self.signed_parts(&signed, &src));
        self.entries.push(Entry::Auth(tag));
        self.check()
    }

    /// Check the auth entry against the secret `secret_for` gives for its
    /// key ID, for a packet from `src` (see [`Self::sign`]).
    pub fn verify<'k>(
        &self,
        src: Ipv6Addr,
        secret_for: impl FnOnce(u8) -> Option<&'k [u8]>,
    ) -> AuthCheck {
        let Some(tag) = self.auth() else {
            return AuthCheck::Unsigned;
        };
        let mut unsigned = self.clone();
        unsigned.remove(EntryType::Auth);
        let Ok(signed) = unsigned.to_bytes() else {
            return AuthCheck::Bad(tag.key_id);
        };
        let src = src.octets();
        tag.check(secret_for, &self.signed_parts(&signed, &src))
    }

    fn signed_parts<'b>(&self, signed: &'b [u8], src: &'b [u8; 16]) -> [&'b [u8]; 2] {
        let src: &[u8] = if self.kind.signs_source() { src } else { &[] };
        [signed, src]
    }
}

/// Record a known entry type in `seen`; [`Error::Malformed`] if repeated.
fn note_known(seen: &mut u16, t: EntryType) -> Result<()> {
    if matches!(t, EntryType::Unknown(_)) {
        return Ok(());
    }
    let bit = 1_u16 << u8::from(t);
    if *seen & bit != 0 {
        return Err(Error::Malformed);
    }
    *seen |= bit;
    Ok(())
}

#[cfg(test)]
pub(crate) mod test {
    use proptest::prelude::*;

    use super::*;

    /// A request for `service.org/video` (TCP port 80) from fd00::1 via the
    /// ingress 10.0.0.1.
    static REQUEST_BYTES: [u8; 56] = [
        0x12, // ver 1, msg 2 (request)
        0x02, 0x10, // Client, 16 octets
        0xfd, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, //
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, // fd00::1
        0x03, 0x04, 0x0a, 0x00, 0x00, 0x01, // Ingress, 4 octets: 10.0.0.1
        0x01, 0x18, // Service, 24 octets
        0x00, 0x01, 0x00, 0x0b, // segment type 1, 11 octets
        b's', b'e', b'r', b'v', b'i', b'c', b'e', b'.', b'o', b'r', b'g', //
        0x00, 0x01, 0x00, 0x05, // segment type 1, 5 octets
        b'v', b'i', b'd', b'e', b'o', //
        0x05, 0x03, 0x06, 0x00, 0x50, // Port: TCP (6), 80
    ];

    /// An announcement of `foo.com` by instance fd00::9, scheduled by
    /// weighted round robin with capability 100, lifetime 30 s, then an
    /// unknown entry 0x42 and an unknown constraint 0x63.
    static ANNOUNCEMENT_BYTES: [u8; 55] = [
        0x11, // ver 1, msg 1 (announcement)
        0x04, 0x10, // Instance, 16 octets
        0xfd, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, //
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x09, // fd00::9
        0x01, 0x0b, // Service, 11 octets
        0x00, 0x01, 0x00, 0x07, b'f', b'o', b'o', b'.', b'c', b'o', b'm', //
        0x06, 0x12, // Constraint, 18 octets
        0x01, 0x02, 0x01, 0x03, // mode scheduling, policy weighted
        0x02, 0x04, 0x00, 0x00, 0x00, 0x64, // capability 100
        0x06, 0x04, 0x00, 0x00, 0x00, 0x1e, // lifetime 30 s
        0x63, 0x00, // unknown constraint 0x63, empty
        0x42, 0x01, 0xaa, // unknown entry 0x42, one octet
    ];

    fn request() -> Message {
        Message {
            kind: MessageKind::Request,
            entries: vec![
                Entry::Client("fd00::1".parse().unwrap()),
                Entry::Ingress("10.0.0.1".parse().unwrap()),
                Entry::Service("service.org/video".parse().unwrap()),
                Entry::Port(FlowPort {
                    proto: IpProtocol::Tcp,
                    port: 80,
                }),
            ],
        }
    }

    fn announcement() -> Message {
        Message {
            kind: MessageKind::Announcement,
            entries: vec![
                Entry::Instance("fd00::9".parse().unwrap()),
                Entry::Service("foo.com".parse().unwrap()),
                Entry::Constraint(Constraints(vec![
                    Constraint::ModePolicy {
                        mode: Mode::Scheduling,
                        policy: Policy::Weighted,
                    },
                    Constraint::Capability(100),
                    Constraint::LifetimeS(30),
                    Constraint::Unknown {
                        kind: 0x63,
                        value: vec![],
                    },
                ])),
                Entry::Unknown {
                    entry_type: 0x42,
                    value: vec![0xaa],
                },
            ],
        }
    }

    #[test]
    fn test_deconstruct() {
        let packet = Packet::new_checked(&REQUEST_BYTES[..]).unwrap();
        assert_eq!(packet.version(), 1);
        assert_eq!(packet.msg_kind(), MessageKind::Request);
        assert_eq!(packet.entries_area(), &REQUEST_BYTES[1..]);
        let entries: Vec<_> = packet.entries().collect::<Result<_>>().unwrap();
        assert_eq!(entries.len(), 4);
        assert_eq!(entries[0], (EntryType::Client, &REQUEST_BYTES[3..19]));
        assert_eq!(entries[1], (EntryType::Ingress, &[10, 0, 0, 1][..]));
        assert_eq!(entries[2].0, EntryType::Service);
        assert_eq!(entries[3], (EntryType::Port, &[6, 0, 80][..]));

        let msg = Message::parse(&packet).unwrap();
        assert_eq!(msg.client(), Some("fd00::1".parse().unwrap()));
        assert_eq!(msg.ingress(), Some("10.0.0.1".parse().unwrap()));
        let name = msg.service().unwrap();
        assert_eq!(name.to_string(), "service.org/video");
        assert_eq!(
            name.segments().collect::<Vec<_>>(),
            [&b"service.org"[..], b"video"]
        );
        assert_eq!(msg.port().unwrap().port, 80);
        assert_eq!(msg.instance(), None);
        assert_eq!(msg.auth(), None);

        let msg = Message::from_bytes(&ANNOUNCEMENT_BYTES).unwrap();
        let c = msg.constraints().unwrap();
        assert_eq!(c.mode_policy(), Some((Mode::Scheduling, Policy::Weighted)));
        assert_eq!(c.capability(), Some(100));
        assert_eq!(c.lifetime_s(), Some(30));
        assert_eq!(c.load(), None);
        assert_eq!(msg, announcement());
    }

    #[test]
    fn test_construct() {
        let mut bytes = vec![0xa5; REQUEST_BYTES.len()];
        let mut packet = Packet::new_unchecked(&mut bytes);
        packet.set_version(1);
        packet.set_msg_kind(MessageKind::Request);
        packet
            .entries_area_mut()
            .copy_from_slice(&REQUEST_BYTES[1..]);
        assert_eq!(packet.version(), 1);
        assert_eq!(packet.msg_kind(), MessageKind::Request);
        assert_eq!(bytes, REQUEST_BYTES);
    }

    #[test]
    fn test_parse() {
        assert_eq!(Message::from_bytes(&REQUEST_BYTES).unwrap(), request());
        assert_eq!(
            Message::from_bytes(&ANNOUNCEMENT_BYTES).unwrap(),
            announcement()
        );
    }

    #[test]
    fn test_emit() {
        for (msg, want) in [
            (request(), &REQUEST_BYTES[..]),
            (announcement(), &ANNOUNCEMENT_BYTES[..]),
        ] {
            assert_eq!(msg.buffer_len(), want.len());
            let mut bytes = vec![0xa5; msg.buffer_len()];
            msg.emit(&mut Packet::new_unchecked(&mut bytes)).unwrap();
            assert_eq!(bytes, want);
            assert_eq!(msg.to_bytes().unwrap(), want);
            // A short buffer is an error, not a panic.
            let mut short = vec![0; want.len() - 1];
            assert_eq!(
                msg.emit(&mut Packet::new_unchecked(&mut short)),
                Err(Error::Truncated)
            );
        }
    }

    #[test]
    fn every_kind_and_entry() {
        for kind in 0..=0x0f {
            let mut msg = request();
            msg.kind = MessageKind::from(kind);
            msg.set(Entry::Instance("fd00::2".parse().unwrap()));
            msg.set(Entry::Sag("fd00::3".parse().unwrap()));
            let bytes = msg.to_bytes().unwrap();
            assert_eq!(bytes[0], 0x10 | kind);
            assert_eq!(Message::from_bytes(&bytes).unwrap(), msg);
        }
        assert_eq!(
            Message::new(MessageKind::Unknown(0x10)).to_bytes(),
            Err(Error::Malformed)
        );
        // set() replaces in place.
        let mut msg = request();
        msg.set(Entry::Client("fd00::7".parse().unwrap()));
        assert_eq!(msg.entries.len(), 4);
        assert_eq!(msg.client(), Some("fd00::7".parse().unwrap()));
        assert!(msg.remove(EntryType::Port));
        assert!(!msg.remove(EntryType::Port));
    }

    #[test]
    fn names() {
        let name: ServiceName = "service.org/video/x".parse().unwrap();
        assert_eq!(name.segment_count(), 3);
        assert_eq!(name.to_string(), "service.org/video/x");
        assert_eq!(name.prefix(1).to_string(), "service.org");
        assert_eq!(name.prefix(0), ServiceName::WILDCARD);
        assert_eq!(name.prefix(9), name);
        assert!(name.prefix(2).is_prefix_of(&name));
        assert!(ServiceName::WILDCARD.is_prefix_of(&name));
        assert!(!name.is_prefix_of(&name.prefix(2)));
        assert_eq!(name.prefix_wire(1), &REQUEST_BYTES[27..42]);

        let star: ServiceName = "*".parse().unwrap();
        assert!(star.is_wildcard());
        assert_eq!(star.to_string(), "*");
        assert_eq!(star.as_wire(), &[] as &[u8]);

        // SHA-256("") = e3b0c442 98fc1c14 ...
        assert_eq!(star.name_hash(), 0xe3b0_c442_98fc_1c14);
        assert_eq!(name_hash(name.as_wire()), name.name_hash());
        assert_ne!(name.name_hash(), name.prefix(2).name_hash());

        for bad in ["", "/", "a/", "/a", "a//b", "a b", "a/*", "a*b", "é", "**"] {
            assert_eq!(bad.parse::<ServiceName>(), Err(Error::Malformed), "{bad:?}");
        }
        // Limits: one segment of 124 octets fits, 125 does not; 25 one-octet
        // segments (25 × 5 = 125 octets) fit, 26 do not.
        let long = "a".repeat(MAX_SEGMENT_LEN);
        assert_eq!(
            long.parse::<ServiceName>().unwrap().as_wire().len(),
            MAX_NAME_LEN
        );
        let longer = "a".repeat(MAX_SEGMENT_LEN + 1);
        assert_eq!(longer.parse::<ServiceName>(), Err(Error::TooLong));
        let many = vec!["a"; 25].join("/");
        assert!(many.parse::<ServiceName>().is_ok());
        let too_many = vec!["a"; 26].join("/");
        assert_eq!(too_many.parse::<ServiceName>(), Err(Error::TooLong));

        // Wire: segment type must be 1, segments non-empty and in bounds.
        assert_eq!(
            ServiceName::from_wire(&[0, 2, 0, 1, b'a']),
            Err(Error::Malformed)
        );
        assert_eq!(ServiceName::from_wire(&[0, 1, 0, 0]), Err(Error::Malformed));
        assert_eq!(
            ServiceName::from_wire(&[0, 1, 0, 2, b'a']),
            Err(Error::BadLength)
        );
        assert_eq!(ServiceName::from_wire(&[0, 1, 0]), Err(Error::BadLength));
        assert_eq!(
            ServiceName::from_wire(&[0; MAX_NAME_LEN + 1]),
            Err(Error::TooLong)
        );
    }

    #[test]
    fn name_serde() {
        let name: ServiceName = "service.org/video".parse().unwrap();
        let bytes = postcard::to_stdvec(&name).unwrap();
        assert_eq!(bytes[0] as usize, name.as_wire().len());
        assert_eq!(postcard::from_bytes::<ServiceName>(&bytes).unwrap(), name);
        // A bad name does not deserialize.
        assert!(postcard::from_bytes::<ServiceName>(&[2, 0, 1]).is_err());
    }

    #[test]
    fn truncated_at_every_octet() {
        for bytes in [&REQUEST_BYTES[..], &ANNOUNCEMENT_BYTES[..]] {
            assert_eq!(Message::from_bytes(&[]), Err(Error::Truncated));
            for cut in 1..bytes.len() {
                let r = Message::from_bytes(&bytes[..cut]);
                // A cut may fall exactly between entries: that is a shorter
                // valid message; anywhere else it is an error.
                if let Ok(m) = r {
                    assert_eq!(m.to_bytes().unwrap(), &bytes[..cut]);
                } else {
                    assert!(matches!(r, Err(Error::BadLength)), "cut {cut}: {r:?}");
                }
            }
        }
    }

    #[test]
    fn impossible_and_over_long() {
        // Version 2.
        assert_eq!(Message::from_bytes(&[0x22]), Err(Error::Malformed));
        // Address of 5 octets, port of 2.
        assert_eq!(
            Message::from_bytes(&[0x12, 0x02, 0x05, 1, 2, 3, 4, 5]),
            Err(Error::BadLength)
        );
        assert_eq!(
            Message::from_bytes(&[0x12, 0x05, 0x02, 6, 0]),
            Err(Error::BadLength)
        );
        // Auth of 16 octets.
        let mut auth = vec![0x11, 0x08, 0x10];
        auth.extend([0; 16]);
        assert_eq!(Message::from_bytes(&auth), Err(Error::BadLength));
        // Constraint: nested entry overruns, wrong u32 size, repeated.
        assert_eq!(
            Message::from_bytes(&[0x11, 0x06, 0x03, 0x02, 0x04, 0x00]),
            Err(Error::BadLength)
        );
        assert_eq!(
            Message::from_bytes(&[0x11, 0x06, 0x05, 0x02, 0x03, 0, 0, 1]),
            Err(Error::BadLength)
        );
        assert_eq!(
            Message::from_bytes(&[0x11, 0x06, 0x08, 0x01, 0x02, 0, 0, 0x01, 0x02, 1, 1]),
            Err(Error::Malformed)
        );
        // Repeated known entry.
        assert_eq!(
            Message::from_bytes(&[0x12, 0x03, 0x04, 10, 0, 0, 1, 0x03, 0x04, 10, 0, 0, 2]),
            Err(Error::Malformed)
        );
        // Unknown entries may repeat.
        assert!(Message::from_bytes(&[0x12, 0x42, 0x00, 0x42, 0x00]).is_ok());
        // Over 255 octets of data.
        let mut big = vec![0x12];
        for _ in 0..2 {
            big.extend([0x42, 0x7f]);
            big.extend([0; 0x7f]);
        }
        assert_eq!(big.len(), 259);
        assert_eq!(Message::from_bytes(&big), Err(Error::TooLong));
        // Emission refuses to exceed 255 octets, and bad Unknowns.
        let mut msg = request(); // 56 octets
        msg.entries.push(Entry::Unknown {
            entry_type: 0x42,
            value: vec![0; 197], // 56 + 199 = 255
        });
        assert_eq!(msg.to_bytes().unwrap().len(), 255);
        msg.entries.push(Entry::Unknown {
            entry_type: 0x43,
            value: vec![],
        });
        assert_eq!(msg.to_bytes(), Err(Error::TooLong));
        let mut buf = [0; 300];
        assert_eq!(
            msg.emit(&mut Packet::new_unchecked(&mut buf[..])),
            Err(Error::TooLong)
        );
        let bad = Message {
            kind: MessageKind::Request,
            entries: vec![Entry::Unknown {
                entry_type: 2,
                value: vec![],
            }],
        };
        assert_eq!(bad.to_bytes(), Err(Error::Malformed));
        let bad = Message {
            kind: MessageKind::Request,
            entries: vec![Entry::Unknown {
                entry_type: 0x42,
                value: vec![0; 256],
            }],
        };
        assert_eq!(bad.to_bytes(), Err(Error::TooLong));
    }

    #[test]
    fn unknown_code_points_survive() {
        // Kind 9, unknown entry 0xff with 2 octets, Constraint with an
        // unknown mode and policy.
        let bytes = [
            0x19, 0xff, 0x02, 0xbe, 0xef, 0x06, 0x04, 0x01, 0x02, 0x07, 0x09,
        ];
        let msg = Message::from_bytes(&bytes).unwrap();
        assert_eq!(msg.kind, MessageKind::Unknown(9));
        assert_eq!(msg.entries[0].entry_type(), EntryType::Unknown(0xff));
        assert_eq!(
            msg.constraints().unwrap().mode_policy(),
            Some((Mode::Unknown(7), Policy::Unknown(9)))
        );
        assert_eq!(msg.to_bytes().unwrap(), bytes);
        for v in 0..=0xff_u8 {
            assert_eq!(u8::from(EntryType::from(v)), v);
            assert_eq!(u8::from(MessageKind::from(v)), v);
            assert_eq!(u8::from(Mode::from(v)), v);
            assert_eq!(u8::from(Policy::from(v)), v);
        }
    }

    #[test]
    fn auth_good_bad_missing() {
        let src: Ipv6Addr = "fd00::9".parse().unwrap();
        let keys = |id| (id == 3).then_some(&b"announce-secret"[..]);
        let mut msg = announcement();
        assert_eq!(msg.verify(src, keys), AuthCheck::Unsigned);
        msg.sign(3, b"announce-secret", src).unwrap();
        assert!(matches!(msg.entries.last(), Some(Entry::Auth(_))));
        assert_eq!(msg.verify(src, keys), AuthCheck::Good(3));

        // The tag covers the first octet, the other entries and the source.
        let bytes = msg.to_bytes().unwrap();
        let mut want = ANNOUNCEMENT_BYTES.to_vec();
        want.extend(src.octets());
        let tag = AuthTag::sign(3, b"announce-secret", &[&want]);
        assert_eq!(msg.auth(), Some(tag));
        assert_eq!(&bytes[..ANNOUNCEMENT_BYTES.len()], ANNOUNCEMENT_BYTES);
        assert_eq!(&bytes[ANNOUNCEMENT_BYTES.len()..][..3], &[0x08, 0x11, 0x03]);

        // Parsed from the wire, it still verifies.
        let parsed = Message::from_bytes(&bytes).unwrap();
        assert_eq!(parsed.verify(src, keys), AuthCheck::Good(3));
        // Another source, a changed entry, a flipped tag bit, another key.
        assert_eq!(
            parsed.verify("fd00::8".parse().unwrap(), keys),
            AuthCheck::Bad(3)
        );
        let mut changed = parsed.clone();
        changed.set(Entry::Instance("fd00::66".parse().unwrap()));
        assert_eq!(changed.verify(src, keys), AuthCheck::Bad(3));
        let mut flipped = bytes.clone();
        *flipped.last_mut().unwrap() ^= 1;
        let flipped = Message::from_bytes(&flipped).unwrap();
        assert_eq!(flipped.verify(src, keys), AuthCheck::Bad(3));
        assert_eq!(
            parsed.verify(src, |_| Some(&b"other"[..])),
            AuthCheck::Bad(3)
        );
        assert_eq!(parsed.verify(src, |_| None), AuthCheck::UnknownKey(3));

        // Requests do not sign the source (SARs rewrite it); re-signing
        // replaces the tag.
        let mut req = request();
        req.sign(1, b"k", src).unwrap();
        req.sign(1, b"k", src).unwrap();
        assert_eq!(req.entries.len(), 5);
        assert_eq!(
            req.verify("fd00::1234".parse().unwrap(), |_| Some(&b"k"[..])),
            AuthCheck::Good(1)
        );
        // A message too full for the tag refuses to be signed.
        let mut full = request();
        full.entries.push(Entry::Unknown {
            entry_type: 0x42,
            value: vec![0; 190],
        });
        assert_eq!(full.sign(1, b"k", src), Err(Error::TooLong));
    }

    pub(crate) fn arb_addr() -> impl Strategy<Value = IpAddr> {
        prop_oneof![
            any::<[u8; 4]>().prop_map(|a| IpAddr::V4(a.into())),
            any::<[u8; 16]>().prop_map(|a| IpAddr::V6(a.into())),
        ]
    }

    pub(crate) fn arb_name() -> impl Strategy<Value = ServiceName> {
        proptest::collection::vec("[a-z0-9.\\-]{1,12}", 0..5)
            .prop_map(|segs| ServiceName::from_segments(segs.iter().map(|s| s.as_bytes())).unwrap())
    }

    pub(crate) fn arb_constraints() -> impl Strategy<Value = Constraints> {
        let one = prop_oneof![
            (any::<u8>(), any::<u8>()).prop_map(|(m, p)| Constraint::ModePolicy {
                mode: Mode::from(m),
                policy: Policy::from(p),
            }),
            any::<u32>().prop_map(Constraint::Capability),
            any::<u32>().prop_map(Constraint::Load),
            any::<u32>().prop_map(Constraint::LatencyUs),
            any::<u32>().prop_map(Constraint::Preference),
            any::<u32>().prop_map(Constraint::LifetimeS),
            (7_u8.., proptest::collection::vec(any::<u8>(), 0..8))
                .prop_map(|(kind, value)| Constraint::Unknown { kind, value }),
        ];
        proptest::collection::vec(one, 0..6).prop_map(|list| {
            let mut seen = 0_u8;
            Constraints(
                list.into_iter()
                    .filter(|c| {
                        let k = c.kind();
                        if k > 6 {
                            return true;
                        }
                        let new = seen & (1 << k) == 0;
                        seen |= 1 << k;
                        new
                    })
                    .collect(),
            )
        })
    }

    pub(crate) fn arb_message() -> impl Strategy<Value = Message> {
        let entry = prop_oneof![
            arb_name().prop_map(Entry::Service),
            arb_addr().prop_map(Entry::Client),
            arb_addr().prop_map(Entry::Ingress),
            arb_addr().prop_map(Entry::Instance),
            arb_addr().prop_map(Entry::Sag),
            (any::<u8>(), any::<u16>()).prop_map(|(p, port)| Entry::Port(FlowPort {
                proto: IpProtocol::from(p),
                port
            })),
            arb_constraints().prop_map(Entry::Constraint),
            (9_u8.., proptest::collection::vec(any::<u8>(), 0..16))
                .prop_map(|(entry_type, value)| Entry::Unknown { entry_type, value }),
        ];
        (0_u8..16, proptest::collection::vec(entry, 0..10)).prop_map(|(kind, list)| {
            let mut msg = Message::new(MessageKind::from(kind));
            for e in list {
                if matches!(e, Entry::Unknown { .. }) {
                    msg.entries.push(e);
                } else {
                    msg.set(e);
                }
                if msg.buffer_len() > MAX_OPTION_DATA - 2 * AUTH_VALUE_LEN {
                    msg.entries.pop();
                }
            }
            msg
        })
    }

    proptest! {
        #[test]
        fn emit_parse_round_trip(msg in arb_message(), key in any::<u8>(), src in any::<[u8; 16]>()) {
            let bytes = msg.to_bytes().unwrap();
            prop_assert!(bytes.len() <= MAX_OPTION_DATA);
            prop_assert_eq!(bytes.len(), msg.buffer_len());
            let parsed = Message::from_bytes(&bytes).unwrap();
            prop_assert_eq!(&parsed, &msg);
            prop_assert_eq!(parsed.to_bytes().unwrap(), bytes);

            let src = Ipv6Addr::from(src);
            let mut signed = msg.clone();
            signed.sign(key, b"secret", src).unwrap();
            let parsed = Message::from_bytes(&signed.to_bytes().unwrap()).unwrap();
            prop_assert_eq!(parsed.verify(src, |_| Some(&b"secret"[..])), AuthCheck::Good(key));
        }

        #[test]
        fn names_round_trip(name in arb_name()) {
            let text = name.to_string();
            prop_assert_eq!(text.parse::<ServiceName>().unwrap(), name.clone());
            prop_assert_eq!(ServiceName::from_wire(name.as_wire()).unwrap(), name);
        }

        #[test]
        fn parse_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            crate::fuzz::rosa(&bytes);
        }
    }
}
