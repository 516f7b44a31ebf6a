// Over 800 lines: one wire family: six GFF message types share the TLV list, names and authentication.
//! Name resolver (NR) and fabric control messages: the payloads of GFF types
//! 3–8 (RFC 8677 §6.2–6.4, Figures 12–14; SPEC §1.1–1.2), byte-aligned
//! **\[ext\]**, plus the names they are about ([`Fqdn`], [`hash_fqdn`]) and
//! their authentication ([`append_auth`], [`verify`]).
//!
//! Every message is a fixed part followed by TLVs (`type:u8 len:u8 value`)
//! up to the end of the GFF payload **\[ext\]** (the RFC has TLVs nowhere;
//! SPEC gives them to registration and path request; we allow them after
//! every message so each can carry an auth tag):
//!
//! | GFF type | message         | fixed part                                                   |
//! |----------|-----------------|--------------------------------------------------------------|
//! | 3        | registration    | `flags:u8` (bit0 R/D, others 0), `hash:u16`, `nsff_id:u8`     |
//! | 4        | path request    | `hash:u16`, `nsff_id:u8` (requester)                          |
//! | 5        | path response   | `hash:u16`, `serving_nsff_id:u8`, `len:4 reserved:4`, pathID of `len`×4 octets |
//! | 6        | path update     | `type:u8` (0 nSFF IDs, 1 link IDs), `count:u8`, `count` × `id:u8` |
//! | 7        | link event      | `link_id:u8`, `state:u8` (0 down, 1 up) **\[ext\]**             |
//! | 8        | link hello      | `sender:u8` (node ID), `link_id:u8` (sender's outgoing link), `seq:u32` **\[ext\]** |
//!
//! | TLV | name          | value                                                        |
//! |-----|---------------|--------------------------------------------------------------|
//! | 1   | FQDN          | the canonical name ([`Fqdn`]): lower case, no trailing dot  |
//! | 2   | auth tag      | `key_id:u8` + 16 octets of HMAC-SHA256 **\[ext\]**; must be last |
//! | 3   | reverse path  | 32-octet pathID (path response: serving → requester)         |
//! | 4   | sequence      | `sender:u16 seq:u64` for replay protection ([`seal`]) **\[ext\]**; before the auth tag |
//!
//! Limits and choices: a path response's `len` is 0 (not found: then the
//! serving nSFF octet is 255) or 8 (our 256-bit pathIDs); reserved bits are
//! zero, else [`Error::Malformed`]; unknown TLVs, update types and link
//! states are kept and survive a round trip.
//!
//! NR messages are built and read whole, never edited in place, so this
//! module has [`Repr`]s over byte slices and no `Packet` views.

use core::fmt;
use core::str::FromStr;

use ring::digest;

use super::auth::{Keyring, Reject};
use super::gff::{MessageType, PathId, PATH_ID_LEN};
use super::{Error, Result};

/// An nSFF identifier: 0..=254 (255 means "all nSFFs" in a path update).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NsffId(u8);

impl NsffId {
    /// Largest nSFF ID.
    pub const MAX: u8 = 254;

    /// The ID `value`, or `None` for 255.
    pub const fn new(value: u8) -> Option<Self> {
        if value > Self::MAX {
            return None;
        }
        Some(Self(value))
    }

    /// The ID as a number.
    pub const fn value(self) -> u8 {
        self.0
    }
}

impl fmt::Display for NsffId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// The nSFF ID in a path update of type 0 that means "all nSFFs: purge the
/// whole cache"; also the serving nSFF octet of a "not found" path response.
pub const ALL_NSFFS: u8 = 0xff;

/// Longest FQDN, in octets, without the trailing dot (RFC 1035 §2.3.4).
pub const MAX_FQDN_LEN: usize = 253;

/// Longest label (RFC 1035 §2.3.4).
pub const MAX_LABEL_LEN: usize = 63;

/// A fully qualified domain name in canonical form: ASCII lower case, no
/// trailing dot, 1..=253 octets of labels of 1..=63 letters, digits and
/// hyphens that neither start nor end with a hyphen (RFC 1123 §2.1).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Fqdn(String);

impl Fqdn {
    /// Canonicalise `name` (lower case, drop one trailing dot) and check it.
    /// [`Error::TooLong`] for a name or label over the limits,
    /// [`Error::Malformed`] for anything else that is not a host name.
    pub fn new(name: &str) -> Result<Self> {
        let name = name.strip_suffix('.').unwrap_or(name);
        let lower = name.to_ascii_lowercase();
        check_canonical(&lower)?;
        Ok(Self(lower))
    }

    /// Whether `name` is already canonical (what the FQDN TLV must carry).
    pub fn is_canonical(name: &str) -> bool {
        check_canonical(name).is_ok()
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// RFC 8677's 16-bit hash of the name (SPEC §0).
    pub fn hash(&self) -> u16 {
        hash_canonical(self.0.as_bytes())
    }
}

impl FromStr for Fqdn {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        Self::new(s)
    }
}

impl AsRef<str> for Fqdn {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Fqdn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// hash(FQDN) of SPEC §0: the first two octets of SHA-256 over the
/// lower-cased name without its trailing dot, big-endian. Does not check
/// that `name` is a valid FQDN (see [`Fqdn`]).
pub fn hash_fqdn(name: &str) -> u16 {
    let name = name.strip_suffix('.').unwrap_or(name);
    hash_canonical(name.to_ascii_lowercase().as_bytes())
}

fn hash_canonical(name: &[u8]) -> u16 {
    let d = digest::digest(&digest::SHA256, name);
    let b = d.as_ref();
    u16::from_be_bytes([b[0], b[1]])
}

fn check_canonical(name: &str) -> Result<()> {
    if name.is_empty() {
        return Err(Error::Malformed);
    }
    if name.len() > MAX_FQDN_LEN {
        return Err(Error::TooLong);
    }
    for label in name.split('.') {
        let b = label.as_bytes();
        if b.len() > MAX_LABEL_LEN {
            return Err(Error::TooLong);
        }
        let ldh = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-';
        if b.is_empty() || !b.iter().all(ldh) || b[0] == b'-' || b[b.len() - 1] == b'-' {
            return Err(Error::Malformed);
        }
    }
    Ok(())
}

open_enum! {
    /// TLV type codes, an open enum.
    pub enum TlvType: u8 {
        /// 1: the FQDN.
        Fqdn = 1,
        /// 2: the auth tag **\[ext\]**.
        AuthTag = 2,
        /// 3: the reverse pathID **\[ext\]**.
        ReversePath = 3,
        /// 4: the sender's sequence number **\[ext\]**.
        Sequence = 4,
    }
}

// The auth tag TLV's value and the verification outcome are shared with the
// other formats (`wire::auth`); re-exported here so `nr::AuthTag` etc. keep working.
pub use super::auth::{AuthCheck, AuthTag, AUTH_TAG_LEN};

/// One TLV. Build a [`Tlvs`] list with [`Tlvs::new`], which checks them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Tlv<'a> {
    /// A canonical FQDN ([`Fqdn::is_canonical`]).
    Fqdn(&'a str),
    /// An auth tag; must be the last TLV.
    AuthTag(AuthTag),
    /// A reverse pathID.
    ReversePath(PathId),
    /// A sequence number: the sender ([`super::auth::SENDER_NR`] etc.) and
    /// its number ([`super::auth::Sequencer`]).
    Sequence {
        /// The sender ID.
        sender: u16,
        /// Its sequence number.
        seq: u64,
    },
    /// Any other TLV, kept verbatim: type not 1..=4, value at most 255 octets.
    Unknown {
        /// The type octet.
        tlv_type: u8,
        /// The value.
        value: &'a [u8],
    },
}

impl<'a> Tlv<'a> {
    /// The type.
    pub const fn tlv_type(&self) -> TlvType {
        match self {
            Self::Fqdn(_) => TlvType::Fqdn,
            Self::AuthTag(_) => TlvType::AuthTag,
            Self::ReversePath(_) => TlvType::ReversePath,
            Self::Sequence { .. } => TlvType::Sequence,
            Self::Unknown { tlv_type, .. } => TlvType::Unknown(*tlv_type),
        }
    }

    fn value_len(&self) -> usize {
        match self {
            Self::Fqdn(s) => s.len(),
            Self::AuthTag(_) => 1 + AUTH_TAG_LEN,
            Self::ReversePath(_) => PATH_ID_LEN,
            Self::Sequence { .. } => 10,
            Self::Unknown { value, .. } => value.len(),
        }
    }

    /// Octets it occupies: 2 + value.
    pub fn buffer_len(&self) -> usize {
        2 + self.value_len()
    }

    fn check(&self) -> Result<()> {
        match self {
            Self::Fqdn(s) => check_canonical(s),
            Self::AuthTag(_) | Self::ReversePath(_) | Self::Sequence { .. } => Ok(()),
            Self::Unknown { tlv_type, value } => {
                if !matches!(TlvType::from(*tlv_type), TlvType::Unknown(_)) {
                    return Err(Error::Malformed);
                }
                if value.len() > 0xff {
                    return Err(Error::TooLong);
                }
                Ok(())
            }
        }
    }

    /// Parse the TLV at the start of `data`; returns it and its length.
    fn parse(data: &'a [u8]) -> Result<(Self, usize)> {
        let [t, len, rest @ ..] = data else {
            return Err(Error::BadLength);
        };
        let Some(value) = rest.get(..usize::from(*len)) else {
            return Err(Error::BadLength);
        };
        let tlv = match TlvType::from(*t) {
            TlvType::Fqdn => {
                let Ok(name) = core::str::from_utf8(value) else {
                    return Err(Error::Malformed);
                };
                check_canonical(name)?;
                Self::Fqdn(name)
            }
            TlvType::AuthTag => {
                let [key_id, tag @ ..] = value else {
                    return Err(Error::BadLength);
                };
                let Ok(tag) = <[u8; AUTH_TAG_LEN]>::try_from(tag) else {
                    return Err(Error::BadLength);
                };
                Self::AuthTag(AuthTag {
                    key_id: *key_id,
                    tag,
                })
            }
            TlvType::ReversePath => {
                let Some(p) = PathId::from_slice(value) else {
                    return Err(Error::BadLength);
                };
                Self::ReversePath(p)
            }
            TlvType::Sequence => {
                let Ok(v) = <[u8; 10]>::try_from(value) else {
                    return Err(Error::BadLength);
                };
                let mut q = [0; 8];
                q.copy_from_slice(&v[2..]);
                Self::Sequence {
                    sender: u16::from_be_bytes([v[0], v[1]]),
                    seq: u64::from_be_bytes(q),
                }
            }
            TlvType::Unknown(tlv_type) => Self::Unknown { tlv_type, value },
        };
        Ok((tlv, 2 + value.len()))
    }

    fn emit(&self, buf: &mut [u8]) {
        buf[0] = self.tlv_type().into();
        // At most 255: checked by Tlvs::new or read from one octet.
        buf[1] = self.value_len() as u8;
        let value = &mut buf[2..self.buffer_len()];
        match self {
            Self::Fqdn(s) => value.copy_from_slice(s.as_bytes()),
            Self::AuthTag(a) => {
                value[0] = a.key_id;
                value[1..].copy_from_slice(&a.tag);
            }
            Self::ReversePath(p) => value.copy_from_slice(p.as_bytes()),
            Self::Sequence { sender, seq } => {
                value[..2].copy_from_slice(&sender.to_be_bytes());
                value[2..].copy_from_slice(&seq.to_be_bytes());
            }
            Self::Unknown { value: v, .. } => value.copy_from_slice(v),
        }
    }
}

/// The TLVs of a message: a validated wire area ([`Repr::parse`]) or a
/// checked list ([`Tlvs::new`]).
#[derive(Debug, Clone, Copy)]
pub struct Tlvs<'a>(TlvSource<'a>);

#[derive(Debug, Clone, Copy)]
enum TlvSource<'a> {
    Wire(&'a [u8]),
    List(&'a [Tlv<'a>]),
}

impl<'a> Tlvs<'a> {
    /// No TLVs.
    pub const EMPTY: Self = Self(TlvSource::List(&[]));

    /// The TLVs in `list`, in order. [`Error::Malformed`] for a non-canonical
    /// FQDN, an `Unknown` with a known type, or an auth tag that is not last;
    /// [`Error::TooLong`] for a value over 255 octets.
    pub fn new(list: &'a [Tlv<'a>]) -> Result<Self> {
        for (i, tlv) in list.iter().enumerate() {
            tlv.check()?;
            if matches!(tlv, Tlv::AuthTag(_)) && i + 1 != list.len() {
                return Err(Error::Malformed);
            }
        }
        Ok(Self(TlvSource::List(list)))
    }

    fn from_wire(area: &'a [u8]) -> Result<Self> {
        let mut pos = 0;
        while pos < area.len() {
            let (tlv, len) = Tlv::parse(&area[pos..])?;
            pos += len;
            if matches!(tlv, Tlv::AuthTag(_)) && pos != area.len() {
                return Err(Error::Malformed);
            }
        }
        Ok(Self(TlvSource::Wire(area)))
    }

    /// Iterate the TLVs.
    pub fn iter(&self) -> impl Iterator<Item = Tlv<'a>> + 'a {
        let (mut wire, list): (&'a [u8], &'a [Tlv<'a>]) = match self.0 {
            TlvSource::Wire(w) => (w, &[]),
            TlvSource::List(l) => (&[], l),
        };
        // A wire area was validated, so parsing cannot fail.
        core::iter::from_fn(move || {
            let (tlv, len) = Tlv::parse(wire).ok()?;
            wire = &wire[len..];
            Some(tlv)
        })
        .chain(list.iter().copied())
    }

    /// The first FQDN TLV.
    pub fn fqdn(&self) -> Option<&'a str> {
        self.iter().find_map(|t| match t {
            Tlv::Fqdn(s) => Some(s),
            _ => None,
        })
    }

    /// The auth tag, if any.
    pub fn auth(&self) -> Option<AuthTag> {
        self.iter().find_map(|t| match t {
            Tlv::AuthTag(a) => Some(a),
            _ => None,
        })
    }

    /// The first sequence TLV: (sender, seq).
    pub fn sequence(&self) -> Option<(u16, u64)> {
        self.iter().find_map(|t| match t {
            Tlv::Sequence { sender, seq } => Some((sender, seq)),
            _ => None,
        })
    }

    /// The first reverse pathID TLV.
    pub fn reverse_path(&self) -> Option<PathId> {
        self.iter().find_map(|t| match t {
            Tlv::ReversePath(p) => Some(p),
            _ => None,
        })
    }

    /// Octets the TLVs occupy.
    pub fn buffer_len(&self) -> usize {
        match self.0 {
            TlvSource::Wire(w) => w.len(),
            TlvSource::List(l) => l.iter().map(Tlv::buffer_len).sum(),
        }
    }

    fn emit(&self, buf: &mut [u8]) {
        match self.0 {
            TlvSource::Wire(w) => buf[..w.len()].copy_from_slice(w),
            TlvSource::List(l) => {
                let mut pos = 0;
                for tlv in l {
                    tlv.emit(&mut buf[pos..]);
                    pos += tlv.buffer_len();
                }
            }
        }
    }
}

impl PartialEq for Tlvs<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.iter().eq(other.iter())
    }
}

impl Eq for Tlvs<'_> {}

/// The IDs listed in a path update: at most 255.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ids<'a>(&'a [u8]);

impl<'a> Ids<'a> {
    /// Wrap `ids`; [`Error::TooLong`] over 255.
    pub const fn new(ids: &'a [u8]) -> Result<Self> {
        if ids.len() > 0xff {
            return Err(Error::TooLong);
        }
        Ok(Self(ids))
    }

    /// The IDs.
    pub const fn as_slice(&self) -> &'a [u8] {
        self.0
    }
}

open_enum! {
    /// What a path update lists, an open enum.
    pub enum UpdateKind: u8 {
        /// 0: nSFF IDs (RFC 8677 Figure 14's legend; [`ALL_NSFFS`] = all).
        NsffIds = 0,
        /// 1: link IDs.
        LinkIds = 1,
    }
}

open_enum! {
    /// A link's state in a link event, an open enum.
    pub enum LinkState: u8 {
        /// 0: no hello for 3 s.
        Down = 0,
        /// 1: hellos again.
        Up = 1,
    }
}

/// Registration (GFF type 3), RFC 8677 Figure 12.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Registration<'a> {
    /// The R/D bit: deregister instead of register.
    pub deregister: bool,
    /// hash(FQDN).
    pub hash: u16,
    /// The nSFF the SF is attached to.
    pub nsff_id: NsffId,
    /// TLVs (FQDN, auth).
    pub tlvs: Tlvs<'a>,
}

/// Path request (GFF type 4), RFC 8677 Figure 13.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PathRequest<'a> {
    /// hash(FQDN) asked for.
    pub hash: u16,
    /// The requesting nSFF.
    pub requester: NsffId,
    /// TLVs (FQDN, auth).
    pub tlvs: Tlvs<'a>,
}

/// Where a name resolved to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Resolution {
    /// The nSFF serving the name.
    pub serving: NsffId,
    /// The pathID requester → serving nSFF.
    pub forward: PathId,
}

/// Path response (GFF type 5), RFC 8677 Figure 13 plus hash and serving nSFF **\[ext\]**.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PathResponse<'a> {
    /// hash(FQDN) answered.
    pub hash: u16,
    /// `None`: not found (`len` 0).
    pub resolution: Option<Resolution>,
    /// TLVs (reverse path, FQDN, auth).
    pub tlvs: Tlvs<'a>,
}

/// Path update (GFF type 6), RFC 8677 Figure 14.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PathUpdate<'a> {
    /// What `ids` are.
    pub kind: UpdateKind,
    /// The nSFF or link IDs whose cache entries to drop.
    pub ids: Ids<'a>,
    /// TLVs (auth).
    pub tlvs: Tlvs<'a>,
}

/// Link event (GFF type 7), fwd → NR **\[ext\]**.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkEvent<'a> {
    /// The directed link.
    pub link_id: u8,
    /// Its new state.
    pub state: LinkState,
    /// TLVs (auth).
    pub tlvs: Tlvs<'a>,
}

/// Link hello (GFF type 8), sent every second on each fabric port **\[ext\]**.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkHello<'a> {
    /// The sending node's ID (fwd or nSFF, from the lab config).
    pub sender: u8,
    /// The link ID of the sender's port towards the receiver.
    pub link_id: u8,
    /// Sequence number, incremented per hello.
    pub seq: u32,
    /// TLVs (auth).
    pub tlvs: Tlvs<'a>,
}

/// An NR or fabric control message, high level.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Repr<'a> {
    /// Type 3.
    Registration(Registration<'a>),
    /// Type 4.
    PathRequest(PathRequest<'a>),
    /// Type 5.
    PathResponse(PathResponse<'a>),
    /// Type 6.
    PathUpdate(PathUpdate<'a>),
    /// Type 7.
    LinkEvent(LinkEvent<'a>),
    /// Type 8.
    LinkHello(LinkHello<'a>),
}

// Fixed parts, octet offsets (all big-endian):
//
//   registration:  0 flags | 1..3 hash | 3 nsff_id | 4.. TLVs
//   path request:  0..2 hash | 2 nsff_id | 3.. TLVs
//   path response: 0..2 hash | 2 serving | 3 len:4 rsvd:4 | 4..4+len*4 pathID | TLVs
//   path update:   0 type | 1 count | 2..2+count ids | TLVs
//   link event:    0 link_id | 1 state | 2.. TLVs
//   link hello:    0 sender | 1 link_id | 2..6 seq | 6.. TLVs
mod field {
    use core::ops::Range;

    pub(super) const REG_FLAGS: usize = 0;
    pub(super) const REG_HASH: Range<usize> = 1..3;
    pub(super) const REG_NSFF: usize = 3;
    pub(super) const REG_LEN: usize = 4;
    pub(super) const REG_DEREGISTER: u8 = 0x01;

    pub(super) const REQ_HASH: Range<usize> = 0..2;
    pub(super) const REQ_NSFF: usize = 2;
    pub(super) const REQ_LEN: usize = 3;

    pub(super) const RSP_HASH: Range<usize> = 0..2;
    pub(super) const RSP_NSFF: usize = 2;
    pub(super) const RSP_LEN: usize = 3;
    pub(super) const RSP_PATH: usize = 4;

    pub(super) const UPD_KIND: usize = 0;
    pub(super) const UPD_COUNT: usize = 1;
    pub(super) const UPD_IDS: usize = 2;

    pub(super) const EVT_LINK: usize = 0;
    pub(super) const EVT_STATE: usize = 1;
    pub(super) const EVT_LEN: usize = 2;

    pub(super) const HELLO_SENDER: usize = 0;
    pub(super) const HELLO_LINK: usize = 1;
    pub(super) const HELLO_SEQ: Range<usize> = 2..6;
    pub(super) const HELLO_LEN: usize = 6;
}

/// Words of a 256-bit pathID, as the path response's `len` carries it.
const PATH_WORDS: u8 = (PATH_ID_LEN / 4) as u8;

fn be16(b: &[u8]) -> u16 {
    u16::from_be_bytes([b[0], b[1]])
}

fn nsff_id(value: u8) -> Result<NsffId> {
    NsffId::new(value).ok_or(Error::Malformed)
}

impl<'a> Repr<'a> {
    /// Parse the payload of a GFF packet of type `msg_type`.
    ///
    /// [`Error::Malformed`] for a type that is not an NR message, reserved
    /// bits set, nSFF ID 255 where an ID is required, a non-canonical FQDN or
    /// an auth tag that is not last; [`Error::Truncated`] if the fixed part
    /// is cut short; [`Error::BadLength`] for a TLV overrunning the payload,
    /// a known TLV of the wrong size or a path response `len` other than 0 or 8.
    pub fn parse(msg_type: MessageType, payload: &'a [u8]) -> Result<Self> {
        let fixed = |len: usize| {
            if payload.len() < len {
                return Err(Error::Truncated);
            }
            Ok(&payload[..len])
        };
        Ok(match msg_type {
            MessageType::Registration => {
                let b = fixed(field::REG_LEN)?;
                let flags = b[field::REG_FLAGS];
                if flags & !field::REG_DEREGISTER != 0 {
                    return Err(Error::Malformed);
                }
                Self::Registration(Registration {
                    deregister: flags & field::REG_DEREGISTER != 0,
                    hash: be16(&b[field::REG_HASH]),
                    nsff_id: nsff_id(b[field::REG_NSFF])?,
                    tlvs: Tlvs::from_wire(&payload[field::REG_LEN..])?,
                })
            }
            MessageType::PathRequest => {
                let b = fixed(field::REQ_LEN)?;
                Self::PathRequest(PathRequest {
                    hash: be16(&b[field::REQ_HASH]),
                    requester: nsff_id(b[field::REQ_NSFF])?,
                    tlvs: Tlvs::from_wire(&payload[field::REQ_LEN..])?,
                })
            }
            MessageType::PathResponse => {
                let b = fixed(field::RSP_PATH)?;
                let len_byte = b[field::RSP_LEN];
                if len_byte & 0x0f != 0 {
                    return Err(Error::Malformed);
                }
                let words = len_byte >> 4;
                let serving = b[field::RSP_NSFF];
                let (resolution, rest) = match words {
                    0 if serving == ALL_NSFFS => (None, field::RSP_PATH),
                    0 => return Err(Error::Malformed),
                    PATH_WORDS => {
                        let end = field::RSP_PATH + PATH_ID_LEN;
                        let forward = fixed(end)?;
                        let forward = PathId::from_slice(&forward[field::RSP_PATH..end])
                            .ok_or(Error::BadLength)?;
                        let serving = nsff_id(serving)?;
                        (Some(Resolution { serving, forward }), end)
                    }
                    _ => return Err(Error::BadLength),
                };
                Self::PathResponse(PathResponse {
                    hash: be16(&b[field::RSP_HASH]),
                    resolution,
                    tlvs: Tlvs::from_wire(&payload[rest..])?,
                })
            }
            MessageType::PathUpdate => {
                let b = fixed(field::UPD_IDS)?;
                let end = field::UPD_IDS + usize::from(b[field::UPD_COUNT]);
                let ids = &fixed(end)?[field::UPD_IDS..];
                Self::PathUpdate(PathUpdate {
                    kind: UpdateKind::from(b[field::UPD_KIND]),
                    ids: Ids(ids),
                    tlvs: Tlvs::from_wire(&payload[end..])?,
                })
            }
            MessageType::LinkEvent => {
                let b = fixed(field::EVT_LEN)?;
                Self::LinkEvent(LinkEvent {
                    link_id: b[field::EVT_LINK],
                    state: LinkState::from(b[field::EVT_STATE]),
                    tlvs: Tlvs::from_wire(&payload[field::EVT_LEN..])?,
                })
            }
            MessageType::LinkHello => {
                let b = fixed(field::HELLO_LEN)?;
                let s = &b[field::HELLO_SEQ];
                Self::LinkHello(LinkHello {
                    sender: b[field::HELLO_SENDER],
                    link_id: b[field::HELLO_LINK],
                    seq: u32::from_be_bytes([s[0], s[1], s[2], s[3]]),
                    tlvs: Tlvs::from_wire(&payload[field::HELLO_LEN..])?,
                })
            }
            MessageType::TransportData | MessageType::TransportNack | MessageType::Unknown(_) => {
                return Err(Error::Malformed)
            }
        })
    }

    /// The GFF type that carries this message.
    pub const fn message_type(&self) -> MessageType {
        match self {
            Self::Registration(_) => MessageType::Registration,
            Self::PathRequest(_) => MessageType::PathRequest,
            Self::PathResponse(_) => MessageType::PathResponse,
            Self::PathUpdate(_) => MessageType::PathUpdate,
            Self::LinkEvent(_) => MessageType::LinkEvent,
            Self::LinkHello(_) => MessageType::LinkHello,
        }
    }

    /// The TLVs.
    pub const fn tlvs(&self) -> &Tlvs<'a> {
        match self {
            Self::Registration(m) => &m.tlvs,
            Self::PathRequest(m) => &m.tlvs,
            Self::PathResponse(m) => &m.tlvs,
            Self::PathUpdate(m) => &m.tlvs,
            Self::LinkEvent(m) => &m.tlvs,
            Self::LinkHello(m) => &m.tlvs,
        }
    }

    fn fixed_len(&self) -> usize {
        match self {
            Self::Registration(_) => field::REG_LEN,
            Self::PathRequest(_) => field::REQ_LEN,
            Self::PathResponse(m) => match m.resolution {
                None => field::RSP_PATH,
                Some(_) => field::RSP_PATH + PATH_ID_LEN,
            },
            Self::PathUpdate(m) => field::UPD_IDS + m.ids.0.len(),
            Self::LinkEvent(_) => field::EVT_LEN,
            Self::LinkHello(_) => field::HELLO_LEN,
        }
    }

    /// Octets [`Self::emit`] writes.
    pub fn buffer_len(&self) -> usize {
        self.fixed_len() + self.tlvs().buffer_len()
    }

    /// Write the message at the start of `buf`.
    ///
    /// # Panics
    /// If `buf` is shorter than [`Self::buffer_len`].
    pub fn emit(&self, buf: &mut [u8]) {
        match self {
            Self::Registration(m) => {
                buf[field::REG_FLAGS] = if m.deregister {
                    field::REG_DEREGISTER
                } else {
                    0
                };
                buf[field::REG_HASH].copy_from_slice(&m.hash.to_be_bytes());
                buf[field::REG_NSFF] = m.nsff_id.0;
            }
            Self::PathRequest(m) => {
                buf[field::REQ_HASH].copy_from_slice(&m.hash.to_be_bytes());
                buf[field::REQ_NSFF] = m.requester.0;
            }
            Self::PathResponse(m) => {
                buf[field::RSP_HASH].copy_from_slice(&m.hash.to_be_bytes());
                match m.resolution {
                    None => {
                        buf[field::RSP_NSFF] = ALL_NSFFS;
                        buf[field::RSP_LEN] = 0;
                    }
                    Some(r) => {
                        buf[field::RSP_NSFF] = r.serving.0;
                        buf[field::RSP_LEN] = PATH_WORDS << 4;
                        buf[field::RSP_PATH..field::RSP_PATH + PATH_ID_LEN]
                            .copy_from_slice(r.forward.as_bytes());
                    }
                }
            }
            Self::PathUpdate(m) => {
                buf[field::UPD_KIND] = m.kind.into();
                // At most 255: Ids::new checked it.
                buf[field::UPD_COUNT] = m.ids.0.len() as u8;
                buf[field::UPD_IDS..field::UPD_IDS + m.ids.0.len()].copy_from_slice(m.ids.0);
            }
            Self::LinkEvent(m) => {
                buf[field::EVT_LINK] = m.link_id;
                buf[field::EVT_STATE] = m.state.into();
            }
            Self::LinkHello(m) => {
                buf[field::HELLO_SENDER] = m.sender;
                buf[field::HELLO_LINK] = m.link_id;
                buf[field::HELLO_SEQ].copy_from_slice(&m.seq.to_be_bytes());
            }
        }
        let start = self.fixed_len();
        self.tlvs().emit(&mut buf[start..]);
    }
}

/// Octets an auth tag TLV occupies.
pub const AUTH_TLV_LEN: usize = 2 + 1 + AUTH_TAG_LEN;

/// The auth tag of a message: HMAC-SHA256 with `secret` over the GFF type
/// octet followed by `unsigned` (the message as emitted, without its auth
/// TLV), truncated to 16 octets (SPEC §0) **\[ext\]**.
pub fn sign(msg_type: MessageType, unsigned: &[u8], key_id: u8, secret: &[u8]) -> AuthTag {
    AuthTag::sign(key_id, secret, &[&[u8::from(msg_type)], unsigned])
}

/// Append an auth tag TLV to `msg`, an emitted message of type `msg_type`
/// without one (its TLVs run to its end, so the tag becomes the last).
pub fn append_auth(msg: &mut Vec<u8>, msg_type: MessageType, key_id: u8, secret: &[u8]) {
    let auth = sign(msg_type, msg, key_id, secret);
    let start = msg.len();
    msg.resize(start + AUTH_TLV_LEN, 0);
    Tlv::AuthTag(auth).emit(&mut msg[start..]);
}

/// Check the auth tag of `payload`, a message of type `msg_type`, with the
/// secret `secret_for` returns for its key ID. Errors as [`Repr::parse`].
pub fn verify<'k>(
    msg_type: MessageType,
    payload: &[u8],
    secret_for: impl FnOnce(u8) -> Option<&'k [u8]>,
) -> Result<AuthCheck> {
    let repr = Repr::parse(msg_type, payload)?;
    let Some(auth) = repr.tlvs().auth() else {
        return Ok(AuthCheck::Unsigned);
    };
    // Parse put the auth TLV last, so it is the final AUTH_TLV_LEN octets.
    let unsigned = &payload[..payload.len() - AUTH_TLV_LEN];
    Ok(auth.check(secret_for, &[&[u8::from(msg_type)], unsigned]))
}

/// Octets [`seal`] adds to a message: a sequence and an auth TLV.
pub const SEAL_LEN: usize = 2 + 10 + AUTH_TLV_LEN;

/// Sign `msg` (an emitted message of type `msg_type` whose TLVs run to its
/// end) when `ring` is keyed: append a sequence TLV with the next number
/// and the auth tag over both. Unkeyed: nothing.
pub fn seal(ring: &mut Keyring, mono_us: u64, msg_type: MessageType, msg: &mut Vec<u8>) {
    let Some((key_id, secret)) = ring.signer() else {
        return;
    };
    let secret = secret.to_vec();
    let (sender, seq) = ring.next_seq(mono_us);
    let t = Tlv::Sequence { sender, seq };
    let start = msg.len();
    msg.resize(start + t.buffer_len(), 0);
    t.emit(&mut msg[start..]);
    append_auth(msg, msg_type, key_id, &secret);
}

/// Check `payload` (type `msg_type`) against `ring`: unkeyed, `Ok(None)`;
/// keyed, a good tag over a message with a sequence TLV gives its
/// (sender, seq) — the replay check ([`Keyring::fresh`]) is the caller's,
/// so it can let a redundant copy through first.
pub fn authenticate(
    ring: &Keyring,
    msg_type: MessageType,
    payload: &[u8],
) -> core::result::Result<Option<(u16, u64)>, Reject> {
    if !ring.is_keyed() {
        return Ok(None);
    }
    let check = verify(msg_type, payload, |k| ring.secret(k)).map_err(|_| Reject::Malformed)?;
    if let Some(r) = Reject::from_check(check) {
        return Err(r);
    }
    let repr = Repr::parse(msg_type, payload).map_err(|_| Reject::Malformed)?;
    repr.tlvs().sequence().map(Some).ok_or(Reject::Unsequenced)
}

/// [`authenticate`], then the replay check.
pub fn open(
    ring: &mut Keyring,
    mono_us: u64,
    msg_type: MessageType,
    payload: &[u8],
) -> core::result::Result<(), Reject> {
    if let Some((sender, seq)) = authenticate(ring, msg_type, payload)? {
        ring.fresh(mono_us, sender, seq)?;
    }
    Ok(())
}

#[cfg(test)]
mod test {
    use proptest::prelude::*;

    use super::*;

    fn id(v: u8) -> NsffId {
        NsffId::new(v).unwrap()
    }

    /// Registration: deregister, hash 0x1234, nSFF 7, FQDN TLV "a.io".
    static REGISTRATION: [u8; 10] = [
        0x01, // flags: R/D = deregister
        0x12, 0x34, // hash
        0x07, // nSFF ID
        0x01, 0x04, b'a', b'.', b'i', b'o', // TLV 1 FQDN, 4 octets
    ];

    /// Path request: hash 0xbeef, requester 2, an unknown TLV 0x80 of 1 octet.
    static PATH_REQUEST: [u8; 6] = [
        0xbe, 0xef, // hash
        0x02, // requester
        0x80, 0x01, 0x5a, // TLV 0x80, 1 octet
    ];

    /// Path response: hash 0xbeef, serving 9, len 8 words, forward pathID
    /// (link 3), then TLV 3 with the reverse pathID (link 4).
    fn path_response_bytes() -> Vec<u8> {
        let mut b = vec![
            0xbe, 0xef, // hash
            0x09, // serving nSFF
            0x80, // len 8, reserved 0
        ];
        b.extend_from_slice(PathId::link(3).as_bytes()); // 0x10 then 31 zeros
        b.extend_from_slice(&[0x03, 0x20]); // TLV 3, 32 octets
        b.extend_from_slice(PathId::link(4).as_bytes()); // 0x08 then 31 zeros
        b
    }

    /// Path update: link IDs 3 and 200.
    static PATH_UPDATE: [u8; 4] = [0x01, 0x02, 0x03, 0xc8];
    /// Link event: link 17 down.
    static LINK_EVENT: [u8; 2] = [0x11, 0x00];
    /// Link hello: node 5 over link 6, seq 0x01020304.
    static LINK_HELLO: [u8; 6] = [0x05, 0x06, 0x01, 0x02, 0x03, 0x04];

    static FQDN_TLV: [Tlv<'static>; 1] = [Tlv::Fqdn("a.io")];
    static UNKNOWN_TLV: [Tlv<'static>; 1] = [Tlv::Unknown {
        tlv_type: 0x80,
        value: &[0x5a],
    }];
    static REVERSE_TLV: [Tlv<'static>; 1] = [Tlv::ReversePath(PathId::link(4))];

    fn reprs() -> Vec<(Repr<'static>, Vec<u8>)> {
        vec![
            (
                Repr::Registration(Registration {
                    deregister: true,
                    hash: 0x1234,
                    nsff_id: id(7),
                    tlvs: Tlvs::new(&FQDN_TLV).unwrap(),
                }),
                REGISTRATION.to_vec(),
            ),
            (
                Repr::PathRequest(PathRequest {
                    hash: 0xbeef,
                    requester: id(2),
                    tlvs: Tlvs::new(&UNKNOWN_TLV).unwrap(),
                }),
                PATH_REQUEST.to_vec(),
            ),
            (
                Repr::PathResponse(PathResponse {
                    hash: 0xbeef,
                    resolution: Some(Resolution {
                        serving: id(9),
                        forward: PathId::link(3),
                    }),
                    tlvs: Tlvs::new(&REVERSE_TLV).unwrap(),
                }),
                path_response_bytes(),
            ),
            (
                Repr::PathResponse(PathResponse {
                    hash: 0xbeef,
                    resolution: None,
                    tlvs: Tlvs::EMPTY,
                }),
                vec![0xbe, 0xef, 0xff, 0x00],
            ),
            (
                Repr::PathUpdate(PathUpdate {
                    kind: UpdateKind::LinkIds,
                    ids: Ids::new(&[3, 200]).unwrap(),
                    tlvs: Tlvs::EMPTY,
                }),
                PATH_UPDATE.to_vec(),
            ),
            (
                Repr::LinkEvent(LinkEvent {
                    link_id: 17,
                    state: LinkState::Down,
                    tlvs: Tlvs::EMPTY,
                }),
                LINK_EVENT.to_vec(),
            ),
            (
                Repr::LinkHello(LinkHello {
                    sender: 5,
                    link_id: 6,
                    seq: 0x0102_0304,
                    tlvs: Tlvs::EMPTY,
                }),
                LINK_HELLO.to_vec(),
            ),
        ]
    }

    #[test]
    fn fqdn_rules() {
        let f = Fqdn::new("WWW.Example.COM.").unwrap();
        assert_eq!(f.as_str(), "www.example.com");
        assert_eq!(f.hash(), hash_fqdn("www.example.com"));
        assert_eq!(hash_fqdn("WWW.example.com."), hash_fqdn("www.example.com"));
        // SHA-256("www.example.com") = 80fc0fb9...
        assert_eq!(hash_fqdn("www.example.com"), 0x80fc);
        assert!(Fqdn::is_canonical("a-1.b"));
        for bad in ["", ".", "a..b", "-a.b", "a-.b", "a_b.c", "é.com", "a b"] {
            assert_eq!(Fqdn::new(bad), Err(Error::Malformed), "{bad:?}");
        }
        assert!(!Fqdn::is_canonical("A.b"));
        assert!(!Fqdn::is_canonical("a.b."));
        let label = "a".repeat(63);
        assert!(Fqdn::new(&label).is_ok());
        assert_eq!(Fqdn::new(&"a".repeat(64)), Err(Error::TooLong));
        let long = [label.as_str(); 4].join("."); // 255
        assert_eq!(Fqdn::new(&long), Err(Error::TooLong));
        assert!(Fqdn::new(&long[2..]).is_ok()); // 253
        assert_eq!("x.y".parse::<Fqdn>().unwrap().to_string(), "x.y");
    }

    #[test]
    fn test_deconstruct() {
        let Repr::Registration(m) = Repr::parse(MessageType::Registration, &REGISTRATION).unwrap()
        else {
            panic!("not a registration");
        };
        assert!(m.deregister);
        assert_eq!(m.hash, 0x1234);
        assert_eq!(m.nsff_id.value(), 7);
        assert_eq!(m.tlvs.fqdn(), Some("a.io"));
        assert_eq!(m.tlvs.auth(), None);
        let b = path_response_bytes();
        let Repr::PathResponse(m) = Repr::parse(MessageType::PathResponse, &b).unwrap() else {
            panic!("not a path response");
        };
        assert_eq!(m.resolution.unwrap().forward, PathId::link(3));
        assert_eq!(m.tlvs.reverse_path(), Some(PathId::link(4)));
        assert_eq!(b[4], 0x10);
        assert_eq!(b[38], 0x08);
    }

    #[test]
    fn test_construct() {
        // Each message written into a 0xa5-filled buffer gives the golden bytes.
        for (repr, bytes) in reprs() {
            let mut buf = vec![0xa5; repr.buffer_len()];
            repr.emit(&mut buf);
            assert_eq!(buf, bytes, "{repr:?}");
        }
    }

    #[test]
    fn test_parse() {
        for (repr, bytes) in reprs() {
            let parsed = Repr::parse(repr.message_type(), &bytes).unwrap();
            assert_eq!(parsed, repr);
            assert_eq!(parsed.buffer_len(), bytes.len());
        }
    }

    #[test]
    fn test_emit() {
        for (repr, bytes) in reprs() {
            let parsed = Repr::parse(repr.message_type(), &bytes).unwrap();
            let mut buf = vec![0x5a; parsed.buffer_len()];
            parsed.emit(&mut buf);
            assert_eq!(buf, bytes);
        }
    }

    #[test]
    fn truncated_and_impossible() {
        use MessageType as T;
        for (repr, bytes) in reprs() {
            let fixed = repr.buffer_len() - repr.tlvs().buffer_len();
            for cut in 0..fixed {
                assert_eq!(
                    Repr::parse(repr.message_type(), &bytes[..cut]),
                    Err(Error::Truncated),
                    "{repr:?} cut at {cut}"
                );
            }
        }
        // TLV overrunning the payload.
        assert_eq!(
            Repr::parse(T::Registration, &REGISTRATION[..9]),
            Err(Error::BadLength)
        );
        assert_eq!(
            Repr::parse(T::Registration, &REGISTRATION[..5]),
            Err(Error::BadLength)
        );
        // Reserved flag bits; nSFF ID 255.
        let mut b = REGISTRATION;
        b[0] = 0x02;
        assert_eq!(Repr::parse(T::Registration, &b), Err(Error::Malformed));
        b[0] = 0x00;
        b[3] = 0xff;
        assert_eq!(Repr::parse(T::Registration, &b), Err(Error::Malformed));
        // Non-canonical FQDN.
        let mut b = REGISTRATION;
        b[6] = b'A';
        assert_eq!(Repr::parse(T::Registration, &b), Err(Error::Malformed));
        // Path response: len 4, reserved bits, not found with a serving nSFF.
        let mut b = path_response_bytes();
        b[3] = 0x40;
        assert_eq!(Repr::parse(T::PathResponse, &b), Err(Error::BadLength));
        b[3] = 0x81;
        assert_eq!(Repr::parse(T::PathResponse, &b), Err(Error::Malformed));
        assert_eq!(
            Repr::parse(T::PathResponse, &[0, 0, 9, 0]),
            Err(Error::Malformed)
        );
        // Reverse path TLV of the wrong size.
        assert_eq!(
            Repr::parse(T::PathResponse, &[0, 0, 0xff, 0, 3, 1, 0]),
            Err(Error::BadLength)
        );
        // Path update count past the end.
        assert_eq!(
            Repr::parse(T::PathUpdate, &[0x00, 0x03, 1, 2]),
            Err(Error::Truncated)
        );
        // Not NR types.
        for t in [T::TransportData, T::TransportNack, T::Unknown(0)] {
            assert_eq!(Repr::parse(t, &LINK_EVENT), Err(Error::Malformed));
        }
        // Constructors.
        assert_eq!(Ids::new(&[0; 256]), Err(Error::TooLong));
        assert!(Tlvs::new(&[Tlv::Fqdn("A.b")]).is_err());
        assert!(Tlvs::new(&[Tlv::Unknown {
            tlv_type: 1,
            value: &[]
        }])
        .is_err());
        let auth = Tlv::AuthTag(AuthTag {
            key_id: 1,
            tag: [0; 16],
        });
        assert_eq!(Tlvs::new(&[auth, Tlv::Fqdn("a.b")]), Err(Error::Malformed));
        assert!(NsffId::new(255).is_none());
    }

    #[test]
    fn unknown_survives() {
        use MessageType as T;
        let upd = [0x07, 0x01, 0xff, 0x99, 0x00];
        let repr = Repr::parse(T::PathUpdate, &upd).unwrap();
        let Repr::PathUpdate(m) = repr else {
            panic!("not a path update");
        };
        assert_eq!(m.kind, UpdateKind::Unknown(7));
        assert_eq!(
            m.tlvs.iter().collect::<Vec<_>>(),
            [Tlv::Unknown {
                tlv_type: 0x99,
                value: &[]
            }]
        );
        let mut out = vec![0; repr.buffer_len()];
        repr.emit(&mut out);
        assert_eq!(out, upd);
        let evt = [0x01, 0x42];
        let repr = Repr::parse(T::LinkEvent, &evt).unwrap();
        assert!(matches!(
            repr,
            Repr::LinkEvent(LinkEvent {
                state: LinkState::Unknown(0x42),
                ..
            })
        ));
        for v in 0..=0xff_u8 {
            assert_eq!(u8::from(UpdateKind::from(v)), v);
            assert_eq!(u8::from(LinkState::from(v)), v);
            assert_eq!(u8::from(TlvType::from(v)), v);
        }
    }

    #[test]
    fn auth_tags() {
        let secret = b"pre-shared";
        let mut msg = REGISTRATION.to_vec();
        let t = MessageType::Registration;
        assert_eq!(verify(t, &msg, |_| None), Ok(AuthCheck::Unsigned));
        append_auth(&mut msg, t, 3, secret);
        assert_eq!(msg.len(), REGISTRATION.len() + AUTH_TLV_LEN);
        assert_eq!(&msg[10..13], &[0x02, 0x11, 0x03]);
        let keys = |k: u8| (k == 3).then_some(&secret[..]);
        assert_eq!(verify(t, &msg, keys), Ok(AuthCheck::Good(3)));
        assert_eq!(verify(t, &msg, |_| None), Ok(AuthCheck::UnknownKey(3)));
        assert_eq!(
            verify(t, &msg, |_| Some(&b"other"[..])),
            Ok(AuthCheck::Bad(3))
        );
        // The tag covers the type: the same octets as a path request do not verify.
        let mut req = PATH_REQUEST.to_vec();
        append_auth(&mut req, MessageType::PathRequest, 3, secret);
        let mut flipped = req.clone();
        flipped[0] ^= 1;
        assert_eq!(
            verify(MessageType::PathRequest, &flipped, keys),
            Ok(AuthCheck::Bad(3))
        );
        assert_eq!(
            verify(MessageType::PathRequest, &req, keys),
            Ok(AuthCheck::Good(3))
        );
        // And it parses with the tag as the last TLV.
        let repr = Repr::parse(t, &msg).unwrap();
        assert_eq!(repr.tlvs().auth().unwrap().key_id, 3);
        // Something after the tag is refused.
        msg.extend_from_slice(&[0x80, 0x00]);
        assert_eq!(verify(t, &msg, keys), Err(Error::Malformed));
    }

    fn arb_tlvs() -> impl Strategy<Value = Vec<(u8, Vec<u8>)>> {
        proptest::collection::vec(
            (
                prop_oneof![Just(1_u8), Just(3_u8), 5_u8..=0xff],
                proptest::collection::vec(any::<u8>(), 0..40),
            ),
            0..4,
        )
    }

    fn to_tlv<'a>(t: u8, v: &'a [u8], names: &'a [String]) -> Tlv<'a> {
        match t {
            1 => Tlv::Fqdn(&names[v.len() % names.len()]),
            3 => Tlv::ReversePath(PathId::link(v.first().copied().unwrap_or(0))),
            t => Tlv::Unknown {
                tlv_type: t,
                value: v,
            },
        }
    }

    proptest! {
        #[test]
        fn emit_parse_round_trip(
            kind in 3_u8..=8,
            a in any::<u8>(),
            b in 0_u8..=254,
            hash in any::<u16>(),
            seq in any::<u32>(),
            found in any::<bool>(),
            ids in proptest::collection::vec(any::<u8>(), 0..10),
            raw in arb_tlvs(),
            auth in proptest::option::of(any::<u8>()),
        ) {
            let names = vec!["a.b".to_string(), "x-1.example.org".to_string()];
            let list: Vec<_> = raw.iter().map(|(t, v)| to_tlv(*t, v, &names)).collect();
            let tlvs = Tlvs::new(&list).unwrap();
            let repr = match kind {
                3 => Repr::Registration(Registration { deregister: a & 1 != 0, hash, nsff_id: id(b), tlvs }),
                4 => Repr::PathRequest(PathRequest { hash, requester: id(b), tlvs }),
                5 => Repr::PathResponse(PathResponse {
                    hash,
                    resolution: found.then(|| Resolution { serving: id(b), forward: PathId::link(a) }),
                    tlvs,
                }),
                6 => Repr::PathUpdate(PathUpdate { kind: UpdateKind::from(a), ids: Ids::new(&ids).unwrap(), tlvs }),
                7 => Repr::LinkEvent(LinkEvent { link_id: a, state: LinkState::from(b), tlvs }),
                _ => Repr::LinkHello(LinkHello { sender: a, link_id: b, seq, tlvs }),
            };
            let mut bytes = vec![0xa5; repr.buffer_len()];
            repr.emit(&mut bytes);
            let parsed = Repr::parse(repr.message_type(), &bytes).unwrap();
            prop_assert_eq!(parsed, repr);
            let mut again = vec![0x5a; parsed.buffer_len()];
            parsed.emit(&mut again);
            prop_assert_eq!(&again, &bytes);
            if let Some(key) = auth {
                append_auth(&mut again, repr.message_type(), key, b"k");
                let got = verify(repr.message_type(), &again, |_| Some(&b"k"[..]));
                prop_assert_eq!(got, Ok(AuthCheck::Good(key)));
            }
        }

        #[test]
        fn parse_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            crate::fuzz::nr(&bytes);
        }
    }

    #[test]
    fn seal_and_open_with_replay() {
        const E: u64 = 100_000_000_000;
        let keys = || vec![(5, b"fabric-secret".to_vec())];
        let mut nsff = Keyring::new(keys(), 1, E);
        let mut nr = Keyring::new(keys(), super::super::auth::SENDER_NR, E);
        let tlv = [Tlv::Fqdn("a.example")];
        let repr = Repr::Registration(Registration {
            deregister: true,
            hash: hash_fqdn("a.example"),
            nsff_id: NsffId::new(1).unwrap(),
            tlvs: Tlvs::new(&tlv).unwrap(),
        });
        let mut m = vec![0; repr.buffer_len()];
        repr.emit(&mut m);
        let plain = m.clone();
        seal(&mut nsff, 0, MessageType::Registration, &mut m);
        assert_eq!(m.len(), plain.len() + SEAL_LEN);
        let back = Repr::parse(MessageType::Registration, &m).unwrap();
        assert_eq!(back.tlvs().sequence(), Some((1, E)));
        assert_eq!(back.tlvs().fqdn(), Some("a.example"));
        assert_eq!(open(&mut nr, 1, MessageType::Registration, &m), Ok(()));
        assert_eq!(
            open(&mut nr, 2, MessageType::Registration, &m),
            Err(Reject::Replayed)
        );
        assert_eq!(
            open(&mut nr, 2, MessageType::Registration, &plain),
            Err(Reject::Unsigned)
        );
        // Signed but with no sequence: refused.
        let mut old = plain.clone();
        append_auth(&mut old, MessageType::Registration, 5, b"fabric-secret");
        assert_eq!(
            open(&mut nr, 2, MessageType::Registration, &old),
            Err(Reject::Unsequenced)
        );
        // The sequence is under the tag.
        let mut forged = m.clone();
        let at = plain.len() + 2 + 9;
        forged[at] ^= 1;
        assert_eq!(
            open(&mut nr, 2, MessageType::Registration, &forged),
            Err(Reject::Bad)
        );
        // The next one from the same sender is fresh.
        let mut m2 = plain.clone();
        seal(&mut nsff, 3, MessageType::Registration, &mut m2);
        assert_eq!(open(&mut nr, 4, MessageType::Registration, &m2), Ok(()));
        // Unkeyed rings check nothing.
        assert_eq!(
            open(&mut Keyring::none(), 0, MessageType::Registration, &plain),
            Ok(())
        );
    }
}
