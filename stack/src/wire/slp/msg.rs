//! SLPv2 messages (RFC 2608 §8, §10) and mSLP's AntiEtrpRqst (RFC 3528
//! §4.6): the bodies, and [`Message`], which puts header, body and
//! extensions together.
//!
//! Bodies, after the header (every string is `u16 length, octets`):
//!
//! | function | fields |
//! |---|---|
//! | 1 SrvRqst | PRList, service type, scope list, predicate, SLP SPI |
//! | 2 SrvRply | error u16, URL entry count u16, URL entries |
//! | 3 SrvReg | URL entry, service type, scope list, attr list, # attr auths u8, auth blocks |
//! | 4 SrvDeReg | scope list, URL entry, tag list |
//! | 5 SrvAck | error u16 |
//! | 6 AttrRqst | PRList, URL, scope list, tag list, SLP SPI |
//! | 7 AttrRply | error u16, attr list, # attr auths u8, auth blocks |
//! | 8 DAAdvert | error u16, boot timestamp u32, URL, scope list, attr list, SPI list, # auths u8, auth blocks |
//! | 9 SrvTypeRqst | PRList, naming authority (0: IANA, 0xFFFF: all, no string), scope list |
//! | 10 SrvTypeRply | error u16, service type list |
//! | 11 SAAdvert | URL, scope list, attr list, # auths u8, auth blocks |
//! | 12 AntiEtrpRqst | type u16, count u16, accept ID entries |
//!
//! A reply with a non-zero error code may stop right after it (RFC 2608 §7);
//! such a reply parses with its other fields empty, and is always emitted
//! in full (empty fields, zero counts), which is what Wireshark and OpenSLP
//! expect.

use super::attr::{AttrList, TagList};
use super::codec::{put_u16, put_u32, List, Reader, SlpString};
use super::ext::{self, AcceptId, Extension, MeshFwd};
use super::filter::Predicate;
use super::header::{Fixed, Flags, FunctionId, Header, LangTag, FIXED_LEN, VERSION};
use super::scope::{NamingAuthority, ScopeList, ServiceType, ServiceTypeList};
use super::url::{auths_len, encode_auths, read_auths, AuthBlocks, UrlEntry};
use super::{ErrorCode, ParseError, Registration};
use crate::wire::Error;

/// URL entries of a SrvRply (count field: `u16`).
pub type UrlEntries = List<UrlEntry, 0xffff>;

/// Accept ID entries of an AntiEtrpRqst (count field: `u16`).
pub type AcceptIds = List<AcceptId, 0xffff>;

/// Service Request (RFC 2608 §8.1).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SrvRqst {
    /// Previous responders: dotted-decimal IPv4 addresses, comma separated.
    pub pr_list: SlpString,
    /// The type asked for; `service:directory-agent` for DA discovery.
    pub service_type: ServiceType,
    /// Scopes asked in; empty only for discovery.
    pub scopes: ScopeList,
    /// The predicate; empty matches every service.
    pub predicate: Predicate,
    /// The SLP SPI replies must be signed with; empty for none.
    pub spi: SlpString,
}

/// Service Reply (RFC 2608 §8.2).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct SrvRply {
    /// Error code.
    pub error: ErrorCode,
    /// Matching URLs.
    pub entries: UrlEntries,
}

/// Service Registration (RFC 2608 §8.3). FRESH is a header flag.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SrvReg {
    /// The URL and its lifetime.
    pub entry: UrlEntry,
    /// The service type, whatever the URL's scheme.
    pub service_type: ServiceType,
    /// The scopes registered in.
    pub scopes: ScopeList,
    /// The attributes; no attribute may mix value types.
    pub attrs: AttrList,
    /// Attribute authentication blocks.
    pub attr_auths: AuthBlocks,
}

/// Service Deregistration (RFC 2608 §10.6).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SrvDeReg {
    /// The scopes the service was registered in.
    pub scopes: ScopeList,
    /// The URL (its lifetime is ignored).
    pub entry: UrlEntry,
    /// Attributes to deregister; empty deregisters the service.
    pub tags: TagList,
}

/// Service Acknowledgment (RFC 2608 §8.4).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct SrvAck {
    /// Error code.
    pub error: ErrorCode,
}

/// Attribute Request (RFC 2608 §10.3).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AttrRqst {
    /// Previous responders.
    pub pr_list: SlpString,
    /// A full URL, or a service type.
    pub url: SlpString,
    /// Scopes asked in.
    pub scopes: ScopeList,
    /// Attributes asked for; empty for all.
    pub tags: TagList,
    /// The SLP SPI the reply must be signed with; empty for none.
    pub spi: SlpString,
}

/// Attribute Reply (RFC 2608 §10.4).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct AttrRply {
    /// Error code.
    pub error: ErrorCode,
    /// The attributes.
    pub attrs: AttrList,
    /// Attribute authentication blocks (0 or 1).
    pub auths: AuthBlocks,
}

/// Directory Agent Advertisement (RFC 2608 §8.5; RFC 3528 §5 for
/// `mesh-enhanced`, see [`AttrList::is_mesh_enhanced`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct DaAdvert {
    /// Error code; 0 when multicast.
    pub error: ErrorCode,
    /// DA stateless boot timestamp, seconds since 1970; 0: going down.
    pub boot_timestamp: u32,
    /// `service:directory-agent://<addr>`.
    pub url: SlpString,
    /// The DA's scopes.
    pub scopes: ScopeList,
    /// The DA's attributes.
    pub attrs: AttrList,
    /// SLP SPIs the DA can verify, comma separated.
    pub spi_list: SlpString,
    /// Authentication blocks.
    pub auths: AuthBlocks,
}

/// Service Type Request (RFC 2608 §10.1).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct SrvTypeRqst {
    /// Previous responders.
    pub pr_list: SlpString,
    /// Which naming authorities' types.
    pub naming_authority: NamingAuthority,
    /// Scopes asked in.
    pub scopes: ScopeList,
}

/// Service Type Reply (RFC 2608 §10.2).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct SrvTypeRply {
    /// Error code.
    pub error: ErrorCode,
    /// The service types.
    pub types: ServiceTypeList,
}

/// Service Agent Advertisement (RFC 2608 §8.6).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct SaAdvert {
    /// `service:service-agent://<addr>`.
    pub url: SlpString,
    /// The SA's scopes.
    pub scopes: ScopeList,
    /// The SA's attributes.
    pub attrs: AttrList,
    /// Authentication blocks.
    pub auths: AuthBlocks,
}

open_enum! {
    /// The anti-entropy type of an AntiEtrpRqst (RFC 3528 §4.6).
    pub enum AntiEntropyType: u16 {
        /// 1: states with an accept ID after one listed.
        Selective = 1,
        /// 2: those, and every state of an accept DA not listed.
        Complete = 2,
    }
}

/// Anti-entropy Request (RFC 3528 §4.6).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AntiEtrpRqst {
    /// Selective or complete.
    pub kind: AntiEntropyType,
    /// The requester's summary vector (or part of it).
    pub accept_ids: AcceptIds,
}

/// A message body, one variant per function ID.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Body {
    /// 1
    SrvRqst(SrvRqst),
    /// 2
    SrvRply(SrvRply),
    /// 3
    SrvReg(SrvReg),
    /// 4
    SrvDeReg(SrvDeReg),
    /// 5
    SrvAck(SrvAck),
    /// 6
    AttrRqst(AttrRqst),
    /// 7
    AttrRply(AttrRply),
    /// 8
    DaAdvert(DaAdvert),
    /// 9
    SrvTypeRqst(SrvTypeRqst),
    /// 10
    SrvTypeRply(SrvTypeRply),
    /// 11
    SaAdvert(SaAdvert),
    /// 12
    AntiEtrpRqst(AntiEtrpRqst),
}

impl Body {
    /// The function ID this body goes with.
    pub const fn function(&self) -> FunctionId {
        match self {
            Self::SrvRqst(_) => FunctionId::SrvRqst,
            Self::SrvRply(_) => FunctionId::SrvRply,
            Self::SrvReg(_) => FunctionId::SrvReg,
            Self::SrvDeReg(_) => FunctionId::SrvDeReg,
            Self::SrvAck(_) => FunctionId::SrvAck,
            Self::AttrRqst(_) => FunctionId::AttrRqst,
            Self::AttrRply(_) => FunctionId::AttrRply,
            Self::DaAdvert(_) => FunctionId::DaAdvert,
            Self::SrvTypeRqst(_) => FunctionId::SrvTypeRqst,
            Self::SrvTypeRply(_) => FunctionId::SrvTypeRply,
            Self::SaAdvert(_) => FunctionId::SaAdvert,
            Self::AntiEtrpRqst(_) => FunctionId::AntiEtrpRqst,
        }
    }

    /// The error code, for replies; `None` for requests.
    pub const fn error(&self) -> Option<ErrorCode> {
        match self {
            Self::SrvRply(SrvRply { error, .. })
            | Self::SrvAck(SrvAck { error })
            | Self::AttrRply(AttrRply { error, .. })
            | Self::DaAdvert(DaAdvert { error, .. })
            | Self::SrvTypeRply(SrvTypeRply { error, .. }) => Some(*error),
            _ => None,
        }
    }

    /// Octets on the wire.
    pub fn buffer_len(&self) -> usize {
        match self {
            Self::SrvRqst(m) => {
                m.pr_list.buffer_len()
                    + m.service_type.buffer_len()
                    + m.scopes.buffer_len()
                    + m.predicate.buffer_len()
                    + m.spi.buffer_len()
            }
            Self::SrvRply(m) => 4 + m.entries.iter().map(UrlEntry::buffer_len).sum::<usize>(),
            Self::SrvReg(m) => {
                m.entry.buffer_len()
                    + m.service_type.buffer_len()
                    + m.scopes.buffer_len()
                    + m.attrs.buffer_len()
                    + auths_len(&m.attr_auths)
            }
            Self::SrvDeReg(m) => m.scopes.buffer_len() + m.entry.buffer_len() + m.tags.buffer_len(),
            Self::SrvAck(_) => 2,
            Self::AttrRqst(m) => {
                m.pr_list.buffer_len()
                    + m.url.buffer_len()
                    + m.scopes.buffer_len()
                    + m.tags.buffer_len()
                    + m.spi.buffer_len()
            }
            Self::AttrRply(m) => 2 + m.attrs.buffer_len() + auths_len(&m.auths),
            Self::DaAdvert(m) => {
                6 + m.url.buffer_len()
                    + m.scopes.buffer_len()
                    + m.attrs.buffer_len()
                    + m.spi_list.buffer_len()
                    + auths_len(&m.auths)
            }
            Self::SrvTypeRqst(m) => {
                m.pr_list.buffer_len() + m.naming_authority.buffer_len() + m.scopes.buffer_len()
            }
            Self::SrvTypeRply(m) => 2 + m.types.buffer_len(),
            Self::SaAdvert(m) => {
                m.url.buffer_len()
                    + m.scopes.buffer_len()
                    + m.attrs.buffer_len()
                    + auths_len(&m.auths)
            }
            Self::AntiEtrpRqst(m) => {
                4 + m.accept_ids.iter().map(AcceptId::buffer_len).sum::<usize>()
            }
        }
    }

    /// Appends the body.
    pub fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Self::SrvRqst(m) => {
                m.pr_list.encode(out);
                m.service_type.encode(out);
                m.scopes.encode(out);
                m.predicate.encode(out);
                m.spi.encode(out);
            }
            Self::SrvRply(m) => {
                put_u16(out, m.error.into());
                put_u16(out, m.entries.len() as u16);
                for e in &m.entries {
                    e.encode(out);
                }
            }
            Self::SrvReg(m) => {
                m.entry.encode(out);
                m.service_type.encode(out);
                m.scopes.encode(out);
                m.attrs.encode(out);
                encode_auths(&m.attr_auths, out);
            }
            Self::SrvDeReg(m) => {
                m.scopes.encode(out);
                m.entry.encode(out);
                m.tags.encode(out);
            }
            Self::SrvAck(m) => put_u16(out, m.error.into()),
            Self::AttrRqst(m) => {
                m.pr_list.encode(out);
                m.url.encode(out);
                m.scopes.encode(out);
                m.tags.encode(out);
                m.spi.encode(out);
            }
            Self::AttrRply(m) => {
                put_u16(out, m.error.into());
                m.attrs.encode(out);
                encode_auths(&m.auths, out);
            }
            Self::DaAdvert(m) => {
                put_u16(out, m.error.into());
                put_u32(out, m.boot_timestamp);
                m.url.encode(out);
                m.scopes.encode(out);
                m.attrs.encode(out);
                m.spi_list.encode(out);
                encode_auths(&m.auths, out);
            }
            Self::SrvTypeRqst(m) => {
                m.pr_list.encode(out);
                m.naming_authority.encode(out);
                m.scopes.encode(out);
            }
            Self::SrvTypeRply(m) => {
                put_u16(out, m.error.into());
                m.types.encode(out);
            }
            Self::SaAdvert(m) => {
                m.url.encode(out);
                m.scopes.encode(out);
                m.attrs.encode(out);
                encode_auths(&m.auths, out);
            }
            Self::AntiEtrpRqst(m) => {
                put_u16(out, m.kind.into());
                put_u16(out, m.accept_ids.len() as u16);
                for a in &m.accept_ids {
                    a.encode(out);
                }
            }
        }
    }

    /// Reads the body of a `function` message: all of `r`.
    pub fn read(function: FunctionId, r: &mut Reader<'_>) -> Result<Self, ParseError> {
        let body = match function {
            FunctionId::SrvRqst => Self::SrvRqst(SrvRqst {
                pr_list: SlpString::read(r)?,
                service_type: ServiceType::read(r)?,
                scopes: ScopeList::read(r)?,
                predicate: Predicate::read(r)?,
                spi: SlpString::read(r)?,
            }),
            FunctionId::SrvRply => {
                let error = ErrorCode::from(r.u16()?);
                if short_error(error, r) {
                    return Ok(Self::SrvRply(SrvRply {
                        error,
                        ..SrvRply::default()
                    }));
                }
                let n = usize::from(r.u16()?);
                let entries = List::read_n(r, n, UrlEntry::read)?;
                Self::SrvRply(SrvRply { error, entries })
            }
            FunctionId::SrvReg => {
                let reg = SrvReg {
                    entry: UrlEntry::read(r)?,
                    service_type: ServiceType::read(r)?,
                    scopes: ScopeList::read(r)?,
                    attrs: AttrList::read(r)?,
                    attr_auths: read_auths(r)?,
                };
                reg.attrs
                    .check_types()
                    .map_err(ParseError::InvalidRegistration)?;
                Self::SrvReg(reg)
            }
            FunctionId::SrvDeReg => Self::SrvDeReg(SrvDeReg {
                scopes: ScopeList::read(r)?,
                entry: UrlEntry::read(r)?,
                tags: TagList::read(r)?,
            }),
            FunctionId::SrvAck => Self::SrvAck(SrvAck {
                error: ErrorCode::from(r.u16()?),
            }),
            FunctionId::AttrRqst => Self::AttrRqst(AttrRqst {
                pr_list: SlpString::read(r)?,
                url: SlpString::read(r)?,
                scopes: ScopeList::read(r)?,
                tags: TagList::read(r)?,
                spi: SlpString::read(r)?,
            }),
            FunctionId::AttrRply => {
                let error = ErrorCode::from(r.u16()?);
                if short_error(error, r) {
                    return Ok(Self::AttrRply(AttrRply {
                        error,
                        ..AttrRply::default()
                    }));
                }
                Self::AttrRply(AttrRply {
                    error,
                    attrs: AttrList::read(r)?,
                    auths: read_auths(r)?,
                })
            }
            FunctionId::DaAdvert => {
                let error = ErrorCode::from(r.u16()?);
                if short_error(error, r) {
                    return Ok(Self::DaAdvert(DaAdvert {
                        error,
                        ..DaAdvert::default()
                    }));
                }
                Self::DaAdvert(DaAdvert {
                    error,
                    boot_timestamp: r.u32()?,
                    url: SlpString::read(r)?,
                    scopes: ScopeList::read(r)?,
                    attrs: AttrList::read(r)?,
                    spi_list: SlpString::read(r)?,
                    auths: read_auths(r)?,
                })
            }
            FunctionId::SrvTypeRqst => Self::SrvTypeRqst(SrvTypeRqst {
                pr_list: SlpString::read(r)?,
                naming_authority: NamingAuthority::read(r)?,
                scopes: ScopeList::read(r)?,
            }),
            FunctionId::SrvTypeRply => {
                let error = ErrorCode::from(r.u16()?);
                if short_error(error, r) {
                    return Ok(Self::SrvTypeRply(SrvTypeRply {
                        error,
                        ..SrvTypeRply::default()
                    }));
                }
                Self::SrvTypeRply(SrvTypeRply {
                    error,
                    types: ServiceTypeList::read(r)?,
                })
            }
            FunctionId::SaAdvert => Self::SaAdvert(SaAdvert {
                url: SlpString::read(r)?,
                scopes: ScopeList::read(r)?,
                attrs: AttrList::read(r)?,
                auths: read_auths(r)?,
            }),
            FunctionId::AntiEtrpRqst => {
                let kind = AntiEntropyType::from(r.u16()?);
                let n = usize::from(r.u16()?);
                let accept_ids = List::read_n(r, n, AcceptId::read)?;
                Self::AntiEtrpRqst(AntiEtrpRqst { kind, accept_ids })
            }
            FunctionId::Unknown(id) => return Err(ParseError::Function(id)),
        };
        r.expect_empty()?;
        Ok(body)
    }
}

/// A reply that stops after a non-zero error code (RFC 2608 §7).
fn short_error(error: ErrorCode, r: &Reader<'_>) -> bool {
    !error.is_ok() && !r.any_left()
}

/// A whole SLP message: header, body and extensions. At most
/// [`Message::MAX_LEN`] octets, so it always encodes.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Message {
    header: Header,
    body: Body,
    extensions: Vec<Extension>,
}

impl Message {
    /// Longest message the 24-bit Length field can describe.
    pub const MAX_LEN: usize = 0x00ff_ffff;

    /// A message; [`Error::TooLong`] over [`Message::MAX_LEN`] octets,
    /// [`Error::Malformed`] for a SrvReg whose attributes mix value types
    /// (it would not parse back).
    pub fn new(header: Header, body: Body, extensions: Vec<Extension>) -> Result<Self, Error> {
        if let Body::SrvReg(reg) = &body {
            reg.attrs.check_types().map_err(|_| Error::Malformed)?;
        }
        let m = Self {
            header,
            body,
            extensions,
        };
        if m.buffer_len() > Self::MAX_LEN {
            return Err(Error::TooLong);
        }
        Ok(m)
    }

    /// The header.
    pub const fn header(&self) -> &Header {
        &self.header
    }

    /// The body.
    pub const fn body(&self) -> &Body {
        &self.body
    }

    /// The extensions, in order.
    pub fn extensions(&self) -> &[Extension] {
        &self.extensions
    }

    /// The parts.
    pub fn into_parts(self) -> (Header, Body, Vec<Extension>) {
        (self.header, self.body, self.extensions)
    }

    /// The function ID.
    pub const fn function(&self) -> FunctionId {
        self.body.function()
    }

    /// The MeshFwd extension, if there is one (the first, if several).
    pub fn mesh_fwd(&self) -> Option<&MeshFwd> {
        self.extensions.iter().find_map(|e| match e {
            Extension::MeshFwd(m) => Some(m),
            Extension::Unknown(_) => None,
        })
    }

    /// Octets on the wire.
    pub fn buffer_len(&self) -> usize {
        self.header.buffer_len()
            + self.body.buffer_len()
            + self
                .extensions
                .iter()
                .map(Extension::buffer_len)
                .sum::<usize>()
    }

    /// Appends the message to `out` (offsets count from the message's start,
    /// wherever in `out` that is).
    pub fn emit(&self, out: &mut Vec<u8>) {
        let mut buf = Vec::with_capacity(self.buffer_len());
        let len = self.buffer_len() as u32;
        let body_end = self.header.buffer_len() + self.body.buffer_len();
        let neo = if self.extensions.is_empty() {
            0
        } else {
            body_end as u32
        };
        self.header.emit(self.function(), len, neo, &mut buf);
        self.body.encode(&mut buf);
        debug_assert_eq!(buf.len(), body_end);
        ext::encode_chain(&self.extensions, &mut buf);
        debug_assert_eq!(buf.len(), self.buffer_len());
        out.extend_from_slice(&buf);
    }

    /// The message as a new buffer.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.emit(&mut out);
        out
    }

    /// Parses one whole message: a UDP payload or one TCP frame (see
    /// [`frame_len`](super::frame_len)).
    pub fn parse(bytes: &[u8]) -> Result<Self, ParseError> {
        let mut r = Reader::new(bytes);
        let fixed = Fixed::read(&mut r)?;
        if fixed.version != VERSION {
            return Err(ParseError::Version(fixed.version));
        }
        if fixed.length as usize != bytes.len() {
            return Err(ParseError::Length {
                declared: fixed.length,
                actual: bytes.len(),
            });
        }
        let flags = Flags::from_bits(fixed.flags)?;
        let function = FunctionId::from(fixed.function);
        if let FunctionId::Unknown(id) = function {
            return Err(ParseError::Function(id));
        }
        let lang = match LangTag::new(fixed.lang) {
            Ok(lang) => lang,
            Err(_) if fixed.lang.is_empty() && function == FunctionId::SrvReg => {
                return Err(ParseError::InvalidRegistration(Registration::NoLanguageTag))
            }
            Err(_) => return Err(ParseError::LanguageTag),
        };
        let header_len = FIXED_LEN + fixed.lang.len();
        debug_assert_eq!(r.used(), header_len);

        let neo = fixed.neo as usize;
        let (body_end, extensions) = if neo == 0 {
            (bytes.len(), Vec::new())
        } else if neo < header_len {
            return Err(ParseError::ExtensionOffset);
        } else {
            (neo, ext::read_chain(bytes, neo)?)
        };
        let mut body_r = r.sub(body_end - header_len)?;
        let body = Body::read(function, &mut body_r)?;
        Ok(Self {
            header: Header {
                flags,
                xid: fixed.xid,
                lang,
            },
            body,
            extensions,
        })
    }
}
