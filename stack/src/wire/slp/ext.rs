//! Extensions (RFC 2608 §9.1) and mSLP's Mesh Forwarding extension
//! (RFC 3528 §4.3), with the accept ID entry it shares with AntiEtrpRqst
//! (§4.1).
//!
//! ```text
//! Extension:
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |         Extension ID          |       Next Extension Offset   |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! | Offset, contd.|                Extension Data                 \
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//!
//! MeshFwd (ID 0x0006) data:
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |     Fwd-ID    |       Version Timestamp (u64) ...             |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |  ... Version Timestamp, cont'd.               | Accept ID ... \
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//!
//! Accept ID entry:
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                  Accept Timestamp (u64) ...                   |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |    Length of Accept DA URL    |         Accept DA URL         \
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! ```
//!
//! Offsets count from the start of the message. Extensions follow the body
//! and each other back to back: an extension's data runs to the next one's
//! offset (or, for the last, to the end of the message), so the chain can
//! only go forward and has no gaps. MeshFwd data must be exactly its
//! length. Unknown extensions from the optional (0x0000–0x3FFF), private
//! (0x8000–0x8FFF) and reserved (0x9000–0xFFFF) ranges are kept as
//! [`UnknownExt`] so that a message re-emits unchanged; the roles ignore
//! them. An unknown one from the mandatory range (0x4000–0x7FFF) fails the
//! parse with [`ParseError::OptionNotUnderstood`].

use super::codec::{put_u16, put_u24, put_u64, Reader, SlpString};
use super::ParseError;
use crate::wire::Error;

/// Extension ID of MeshFwd (RFC 3528 §7).
pub const MESH_FWD_ID: u16 = 0x0006;

/// Octets of an extension before its data.
pub const EXT_HEADER_LEN: usize = 5;

/// Whether a DA or SA must refuse a request carrying extension `id` it does
/// not understand (RFC 2608 §9.1).
pub const fn is_mandatory(id: u16) -> bool {
    matches!(id, 0x4000..=0x7fff)
}

open_enum! {
    /// The Fwd-ID of a MeshFwd extension (RFC 3528 §4.3).
    pub enum FwdId: u8 {
        /// 1: an MSA asks the accept DA to forward (accept timestamp 0).
        RqstFwd = 1,
        /// 2: forwarded by an MDA (accept timestamp set).
        Fwded = 2,
    }
}

/// An accept ID entry: who accepted an update, and when (RFC 3528 §4.1).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AcceptId {
    /// Microseconds since 1900-01-01 00:00 UTC; 0 in a RqstFwd MeshFwd.
    pub timestamp: u64,
    /// The accept DA's URL.
    pub da_url: SlpString,
}

impl AcceptId {
    /// Reads one entry.
    pub fn read(r: &mut Reader<'_>) -> Result<Self, ParseError> {
        Ok(Self {
            timestamp: r.u64()?,
            da_url: SlpString::read(r)?,
        })
    }

    /// Appends the entry.
    pub fn encode(&self, out: &mut Vec<u8>) {
        put_u64(out, self.timestamp);
        self.da_url.encode(out);
    }

    /// Octets on the wire.
    pub fn buffer_len(&self) -> usize {
        8 + self.da_url.buffer_len()
    }
}

/// The Mesh Forwarding extension (RFC 3528 §4.3), carried by SrvReg and
/// SrvDeReg between MSAs and MDAs.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct MeshFwd {
    /// RqstFwd from an MSA, Fwded between MDAs.
    pub fwd: FwdId,
    /// The MSA's version timestamp: microseconds since 1900-01-01 UTC.
    pub version: u64,
    /// The accept ID.
    pub accept: AcceptId,
}

impl MeshFwd {
    fn parse(data: &[u8]) -> Result<Self, ParseError> {
        let mut r = Reader::new(data);
        let m = Self {
            fwd: FwdId::from(r.u8()?),
            version: r.u64()?,
            accept: AcceptId::read(&mut r)?,
        };
        r.expect_empty()?;
        Ok(m)
    }

    fn encode_data(&self, out: &mut Vec<u8>) {
        out.push(self.fwd.into());
        put_u64(out, self.version);
        self.accept.encode(out);
    }

    fn data_len(&self) -> usize {
        1 + 8 + self.accept.buffer_len()
    }
}

/// An extension this module has no type for, kept as octets.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct UnknownExt {
    id: u16,
    data: Vec<u8>,
}

impl UnknownExt {
    /// Extension `id` with `data`; [`Error::Malformed`] for MeshFwd's ID and
    /// for the mandatory range (neither would parse back as unknown).
    pub fn new(id: u16, data: Vec<u8>) -> Result<Self, Error> {
        if id == MESH_FWD_ID || is_mandatory(id) {
            return Err(Error::Malformed);
        }
        Ok(Self { id, data })
    }

    /// The extension ID.
    pub const fn id(&self) -> u16 {
        self.id
    }

    /// The extension data.
    pub fn data(&self) -> &[u8] {
        &self.data
    }
}

/// One extension.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Extension {
    /// Mesh Forwarding (0x0006).
    MeshFwd(MeshFwd),
    /// Anything else that may be ignored.
    Unknown(UnknownExt),
}

impl Extension {
    /// The extension ID.
    pub const fn id(&self) -> u16 {
        match self {
            Self::MeshFwd(_) => MESH_FWD_ID,
            Self::Unknown(u) => u.id,
        }
    }

    /// Octets on the wire, header included.
    pub fn buffer_len(&self) -> usize {
        EXT_HEADER_LEN
            + match self {
                Self::MeshFwd(m) => m.data_len(),
                Self::Unknown(u) => u.data.len(),
            }
    }

    fn parse(id: u16, data: &[u8]) -> Result<Self, ParseError> {
        match id {
            MESH_FWD_ID => MeshFwd::parse(data).map(Self::MeshFwd),
            id if is_mandatory(id) => Err(ParseError::OptionNotUnderstood(id)),
            id => Ok(Self::Unknown(UnknownExt {
                id,
                data: data.to_vec(),
            })),
        }
    }
}

/// Reads the chain that starts at offset `first` of `msg`, the whole message.
/// The caller has checked that `first` lies after the header.
pub(super) fn read_chain(msg: &[u8], first: usize) -> Result<Vec<Extension>, ParseError> {
    let len = msg.len();
    let mut exts = Vec::new();
    let mut off = first;
    loop {
        if off + EXT_HEADER_LEN > len {
            return Err(ParseError::ExtensionOffset);
        }
        let mut r = Reader::new(&msg[off..]);
        let id = r.u16()?;
        let next = r.u24()? as usize;
        let end = match next {
            0 => len,
            n if n < off + EXT_HEADER_LEN || n + EXT_HEADER_LEN > len => {
                return Err(ParseError::ExtensionOffset)
            }
            n => n,
        };
        exts.push(Extension::parse(id, &msg[off + EXT_HEADER_LEN..end])?);
        if next == 0 {
            return Ok(exts);
        }
        off = next;
    }
}

/// Appends the chain; `out` already holds the message up to where the first
/// extension goes (offsets count from `out[0]`, so it must start there).
pub(super) fn encode_chain(exts: &[Extension], out: &mut Vec<u8>) {
    for (i, e) in exts.iter().enumerate() {
        let here = out.len();
        put_u16(out, e.id());
        let next = if i + 1 == exts.len() {
            0
        } else {
            here + e.buffer_len()
        };
        // NOTE: `Message::new` bounds the whole message to 24 bits.
        put_u24(out, next as u32);
        match e {
            Extension::MeshFwd(m) => m.encode_data(out),
            Extension::Unknown(u) => out.extend_from_slice(&u.data),
        }
    }
}

#[cfg(test)]
pub(super) mod test {
    use super::*;

    /// RFC 3528 Figure 7: MeshFwd, Fwded, version 0x0102030405060708, accept
    /// timestamp 0x1112131415161718 by "service:directory-agent://10.0.0.1"
    /// (34 octets). Placed at offset 0 of a pretend message.
    pub(in crate::wire::slp) static MESH_FWD: [u8; 5 + 1 + 8 + 8 + 2 + 34] = [
        0x00, 0x06, // extension ID MeshFwd
        0x00, 0x00, 0x00, // next extension offset: none
        0x02, // Fwd-ID Fwded
        0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, // version timestamp
        0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, // accept timestamp
        0x00, 0x22, // URL length 34
        b's', b'e', b'r', b'v', b'i', b'c', b'e', b':', b'd', b'i', b'r', b'e', b'c', b't', b'o',
        b'r', b'y', b'-', b'a', b'g', b'e', b'n', b't', b':', b'/', b'/', b'1', b'0', b'.', b'0',
        b'.', b'0', b'.', b'1',
    ];

    pub(in crate::wire::slp) fn mesh_fwd() -> MeshFwd {
        MeshFwd {
            fwd: FwdId::Fwded,
            version: 0x0102_0304_0506_0708,
            accept: AcceptId {
                timestamp: 0x1112_1314_1516_1718,
                da_url: SlpString::new("service:directory-agent://10.0.0.1").unwrap(),
            },
        }
    }

    #[test]
    fn mesh_fwd_golden() {
        let exts = read_chain(&MESH_FWD, 0).unwrap();
        assert_eq!(exts, [Extension::MeshFwd(mesh_fwd())]);
        let mut out = Vec::new();
        encode_chain(&exts, &mut out);
        assert_eq!(out, MESH_FWD);
        assert_eq!(exts[0].buffer_len(), MESH_FWD.len());
    }

    #[test]
    fn chains() {
        let unknown = UnknownExt::new(0x8123, vec![0xaa, 0xbb]).unwrap();
        let exts = [
            Extension::Unknown(unknown.clone()),
            Extension::MeshFwd(mesh_fwd()),
            Extension::Unknown(UnknownExt::new(0x0002, vec![]).unwrap()),
        ];
        let mut out = vec![0xa5; 3];
        encode_chain(&exts, &mut out);
        assert_eq!(&out[3..10], [0x81, 0x23, 0x00, 0x00, 0x0a, 0xaa, 0xbb]);
        assert_eq!(read_chain(&out, 3).unwrap(), exts);
        assert_eq!(u16::from_be_bytes([out[10], out[11]]), MESH_FWD_ID);
    }

    #[test]
    fn bad_chains() {
        // Points back into itself.
        let mut looped = vec![0x80, 0x00, 0x00, 0x00, 0x00];
        assert_eq!(read_chain(&looped, 0).unwrap().len(), 1);
        looped[4] = 0x01; // next at 1 < 0 + 5
        assert_eq!(read_chain(&looped, 0), Err(ParseError::ExtensionOffset));
        // Next offset leaves no room for a header.
        let mut short = vec![0x80, 0x00, 0x00, 0x00, 0x05, 0x00, 0x01];
        assert_eq!(read_chain(&short, 0), Err(ParseError::ExtensionOffset));
        short.extend_from_slice(&[0, 0, 0]);
        assert_eq!(read_chain(&short, 0).unwrap().len(), 2);
        // MeshFwd data longer or shorter than its fields.
        let mut long = MESH_FWD.to_vec();
        long.push(0);
        assert_eq!(read_chain(&long, 0), Err(ParseError::TrailingBytes));
        assert_eq!(
            read_chain(&MESH_FWD[..MESH_FWD.len() - 1], 0),
            Err(ParseError::Truncated)
        );
        // An unknown mandatory extension.
        assert_eq!(
            read_chain(&[0x40, 0x01, 0, 0, 0], 0),
            Err(ParseError::OptionNotUnderstood(0x4001))
        );
        assert_eq!(
            ParseError::OptionNotUnderstood(0x4001).error_code(),
            super::super::ErrorCode::OptionNotUnderstood
        );
        // Optional, private and reserved ranges are skipped.
        for id in [0x0001_u16, 0x3fff, 0x8000, 0x8fff, 0x9000, 0xffff] {
            let b = [(id >> 8) as u8, id as u8, 0, 0, 0, 0xee];
            assert_eq!(read_chain(&b, 0).unwrap()[0].id(), id);
        }
        assert_eq!(UnknownExt::new(0x0006, vec![]), Err(Error::Malformed));
        assert_eq!(UnknownExt::new(0x4000, vec![]), Err(Error::Malformed));
        for n in 0..MESH_FWD.len() {
            assert!(read_chain(&MESH_FWD[..n], 0).is_err(), "{n}");
        }
    }

    #[test]
    fn unknown_fwd_id_survives() {
        let mut b = MESH_FWD;
        b[5] = 0x07;
        let exts = read_chain(&b, 0).unwrap();
        let Extension::MeshFwd(m) = &exts[0] else {
            panic!("not MeshFwd")
        };
        assert_eq!(m.fwd, FwdId::Unknown(7));
        let mut out = Vec::new();
        encode_chain(&exts, &mut out);
        assert_eq!(out, b);
    }
}
