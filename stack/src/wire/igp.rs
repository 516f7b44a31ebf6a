//! The SAR IGP **\[ext\]** (SPEC §2.3, §3): a link-state protocol between
//! neighbouring SARs over UDP port [`PORT`] — hellos every second (dead
//! after four) that also measure RTT, and reliably flooded, acknowledged
//! LSAs with sequence numbers and ages carrying router links, service
//! announcements, App-Metrics and sticky-table entries.
//!
//! Messages are serde types encoded with postcard inside an [`Envelope`]:
//!
//! ```text
//! envelope = version:u8 (=1)  msg_type:u8  auth:Option<key_id:u8 tag:[u8;16]>  body:bytes
//! body     = postcard(Hello | Lsa | LsAck | Probe)      (msg_type 1, 2, 3, 4)
//! tag      = HMAC-SHA256(secret, version ‖ msg_type ‖ body)[..16]
//! ```
//!
//! (postcard: integers other than `u8` as LEB128 varints, `Option` as a
//! 0/1 octet, byte strings and vectors as a varint count then the items,
//! enums as a varint variant index.) An unknown `msg_type` decodes to
//! [`Message::Unknown`] with its body kept, so a newer peer's messages can
//! be counted and skipped.
//!
//! Decoding is bounded: the datagram is at most [`MAX_DATAGRAM`] octets
//! (else [`Error::TooLong`]), so postcard can never allocate more than a
//! small multiple of that; envelope and body must be consumed exactly
//! ([`Error::BadLength`] for trailing octets); after decoding every vector
//! is checked against its cap (`MAX_*`, [`Error::TooLong`]) and every
//! value against its range ([`Error::Malformed`]). Names and App-Metrics
//! deserialize through their validating wire codecs ([`ServiceName`],
//! [`AppMetrics`]).

use std::net::{IpAddr, Ipv6Addr};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::appmetrics::AppMetrics;
use super::auth::{AuthCheck, AuthTag, AUTH_TAG_LEN};
use super::rosa::{Constraints, ServiceName};
use super::{Error, Result};

/// UDP port of the SAR IGP.
pub const PORT: u16 = 7470;

/// The envelope version we speak.
pub const VERSION: u8 = 1;

/// The `msg_type` of a [`Probe`] (the envelope's second octet: a receiver
/// can tell a probe before decoding it).
pub const MSG_PROBE: u8 = 4;

/// Hello interval, milliseconds.
pub const HELLO_INTERVAL_MS: u64 = 1_000;

/// A neighbour is dead after this long without a hello, milliseconds.
pub const DEAD_INTERVAL_MS: u64 = 4_000;

/// Largest datagram we send or accept: fits smoltcp's 16 KiB reassembly
/// buffer with the IPv6 and UDP headers.
pub const MAX_DATAGRAM: usize = 16_000;

/// Most neighbours echoed in one hello.
pub const MAX_NEIGHBORS: usize = 64;
/// Most links in a router-links LSA.
pub const MAX_LINKS: usize = 64;
/// Most prefixes in a router-links LSA.
pub const MAX_PREFIXES: usize = 64;
/// Most service announcements in one LSA part (more: use more parts).
pub const MAX_SERVICES: usize = 64;
/// Most App-Metrics entries in one LSA part.
pub const MAX_APP_METRICS: usize = 64;
/// Most sticky-table entries in one LSA part.
pub const MAX_STICKY: usize = 256;
/// Most LSA headers in one acknowledgement.
pub const MAX_ACKS: usize = 128;

/// A SAR's ID in the IGP (from config), unique in the domain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct RouterId(pub u32);

/// A neighbour's last hello as echoed back, for RTT: the receiver computes
/// `RTT = now − sent_at_us − held_us` on its own clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct HelloEcho {
    /// The neighbour whose hello is echoed.
    pub router_id: RouterId,
    /// That hello's sequence number.
    pub seq: u32,
    /// That hello's `sent_at_us`, unchanged (the neighbour's clock).
    pub sent_at_us: u64,
    /// How long the echoing SAR held it before this hello, microseconds.
    pub held_us: u64,
}

/// Hello (type 1): sent every [`HELLO_INTERVAL_MS`] to each neighbour.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Hello {
    /// The sender.
    pub router_id: RouterId,
    /// Increments with every hello.
    pub seq: u32,
    /// The sender's clock when sending, microseconds.
    pub sent_at_us: u64,
    /// The neighbours the sender hears, with their last hello echoed
    /// (two-way check and RTT). At most [`MAX_NEIGHBORS`].
    pub neighbors: Vec<HelloEcho>,
}

/// One link of a router: to a neighbour SAR, with a cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Link {
    /// The neighbour.
    pub neighbor: RouterId,
    /// Cost of the link (e.g. derived from the RTT), at least 1.
    pub cost: u32,
}

/// An IPv6 prefix the router reaches directly.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Prefix {
    /// The address (host bits are kept as sent).
    pub addr: Ipv6Addr,
    /// Prefix length, 0..=128.
    pub len: u8,
}

/// Router-links LSA body.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct RouterLinks {
    /// The router's own address (where requests for it are sent).
    pub address: Ipv6Addr,
    /// Its links, at most [`MAX_LINKS`].
    pub links: Vec<Link>,
    /// Its connected prefixes, at most [`MAX_PREFIXES`].
    pub prefixes: Vec<Prefix>,
}

/// One announced service instance, as an origin SAR floods it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ServiceAnnouncement {
    /// The service.
    pub name: ServiceName,
    /// The instance's address.
    pub instance: IpAddr,
    /// The announcement's constraints (mode/policy, metrics).
    pub constraints: Constraints,
    /// Seconds the announcement stays valid from the LSA's origination.
    pub lifetime_s: u32,
}

/// App-Metrics of one anycast address, as its egress floods them.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct AppMetricsEntry {
    /// The anycast (ACL'd) address.
    pub anycast: IpAddr,
    /// Its sub-TLVs.
    pub metrics: AppMetrics,
}

/// What keys a sticky-table entry (SPEC §3 scenarios 1 and 2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum StickyKey {
    /// Service ID + flow label (scenario 1): the 20-bit flow label.
    FlowLabel(u32),
    /// Service ID + UE address (scenario 2).
    Ue(IpAddr),
}

/// One sticky-service table entry, propagated to the neighbour ingress group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct StickyEntry {
    /// The sticky service ID (anycast address).
    pub service_id: IpAddr,
    /// The flow.
    pub key: StickyKey,
    /// The sticky egress.
    pub egress: IpAddr,
    /// Seconds left on the entry's timer.
    pub remaining_s: u32,
}

/// What an LSA carries.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum LsaBody {
    /// The origin's links and prefixes.
    RouterLinks(RouterLinks),
    /// The services announced at the origin (the whole set of this part:
    /// an instance missing from a newer LSA is withdrawn).
    Services(Vec<ServiceAnnouncement>),
    /// The origin's App-Metrics.
    AppMetrics(Vec<AppMetricsEntry>),
    /// The origin's sticky-table entries.
    Sticky(Vec<StickyEntry>),
}

/// The kind of an LSA body (part of the LSA's identity).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum LsaKind {
    /// [`LsaBody::RouterLinks`].
    RouterLinks,
    /// [`LsaBody::Services`].
    Services,
    /// [`LsaBody::AppMetrics`].
    AppMetrics,
    /// [`LsaBody::Sticky`].
    Sticky,
}

impl LsaBody {
    /// The body's kind.
    pub const fn kind(&self) -> LsaKind {
        match self {
            Self::RouterLinks(_) => LsaKind::RouterLinks,
            Self::Services(_) => LsaKind::Services,
            Self::AppMetrics(_) => LsaKind::AppMetrics,
            Self::Sticky(_) => LsaKind::Sticky,
        }
    }
}

/// A link-state advertisement (type 2), flooded reliably: every receiver
/// acknowledges it with an [`LsAck`] and floods a newer one on.
///
/// `(origin, kind, part)` names an LSA; of two with the same name the
/// higher `seq` is newer. `age` counts seconds since origination (each hop
/// adds at least 1); an LSA is dropped at [`Lsa::MAX_AGE_S`].
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Lsa {
    /// The originating SAR.
    pub origin: RouterId,
    /// Which part of the origin's set of this kind (large sets are split).
    pub part: u16,
    /// Sequence number, incremented by the origin on each change.
    pub seq: u32,
    /// Age in seconds.
    pub age: u16,
    /// The content.
    pub body: LsaBody,
}

impl Lsa {
    /// Age at which an LSA is flushed, seconds.
    pub const MAX_AGE_S: u16 = 3600;

    /// The header that names this instance of the LSA.
    pub const fn header(&self) -> LsaHeader {
        LsaHeader {
            origin: self.origin,
            kind: self.body.kind(),
            part: self.part,
            seq: self.seq,
        }
    }
}

/// Names one instance of an LSA (in acknowledgements).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct LsaHeader {
    /// The originating SAR.
    pub origin: RouterId,
    /// The body kind.
    pub kind: LsaKind,
    /// The part.
    pub part: u16,
    /// The sequence number acknowledged.
    pub seq: u32,
}

/// Acknowledgement of received LSAs (type 3).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct LsAck {
    /// The sender.
    pub router_id: RouterId,
    /// The LSAs acknowledged, at most [`MAX_ACKS`].
    pub acks: Vec<LsaHeader>,
}

/// An RTT probe (type 4) between two SARs that need not be neighbours:
/// an ingress measures the delay to each egress site it may choose
/// (SPEC §3's Delay). Sent over the routed IPv6 network to the other
/// SAR's address, UDP [`PORT`]; the probed SAR sends it back with `reply`
/// set and `router_id` its own, the other fields unchanged, so the prober
/// computes `RTT = now − sent_at_us` on its own clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Probe {
    /// The sender of this datagram.
    pub router_id: RouterId,
    /// The prober's sequence number.
    pub seq: u32,
    /// The prober's clock when it sent the probe, microseconds.
    pub sent_at_us: u64,
    /// `false`: a probe; `true`: the answer to one.
    pub reply: bool,
}

/// One IGP message.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Message {
    /// Type 1.
    Hello(Hello),
    /// Type 2.
    Lsa(Lsa),
    /// Type 3.
    LsAck(LsAck),
    /// Type 4.
    Probe(Probe),
    /// Any other type, body kept undecoded.
    Unknown {
        /// The type octet (not 1..=4).
        msg_type: u8,
        /// The postcard body.
        body: Vec<u8>,
    },
}

/// The auth part of an [`Envelope`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct EnvelopeAuth {
    /// The key's ID from config.
    pub key_id: u8,
    /// HMAC-SHA256 truncated to 16 octets.
    pub tag: [u8; AUTH_TAG_LEN],
}

/// What every IGP datagram is: postcard of this struct.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Envelope {
    /// [`VERSION`].
    pub version: u8,
    /// 1 hello, 2 LSA, 3 acknowledgement, 4 probe.
    pub msg_type: u8,
    /// The tag, when the sender has a key.
    pub auth: Option<EnvelopeAuth>,
    /// The postcard body.
    pub body: Vec<u8>,
}

impl Envelope {
    /// Decode a datagram's envelope (not yet the body): [`Error::TooLong`]
    /// over [`MAX_DATAGRAM`], [`Error::Malformed`] if it is not postcard of
    /// an envelope or the version is not 1, [`Error::BadLength`] for
    /// trailing octets.
    pub fn decode(datagram: &[u8]) -> Result<Self> {
        if datagram.len() > MAX_DATAGRAM {
            return Err(Error::TooLong);
        }
        let env: Self = take_exact(datagram)?;
        if env.version != VERSION {
            return Err(Error::Malformed);
        }
        Ok(env)
    }

    /// Check the tag against the secret `secret_for` gives for its key ID.
    pub fn verify<'k>(&self, secret_for: impl FnOnce(u8) -> Option<&'k [u8]>) -> AuthCheck {
        let Some(auth) = self.auth else {
            return AuthCheck::Unsigned;
        };
        let tag = AuthTag {
            key_id: auth.key_id,
            tag: auth.tag,
        };
        tag.check(secret_for, &self.signed_parts())
    }

    /// The message in the body. Errors as [`Envelope::decode`], plus
    /// [`Error::TooLong`] for a vector over its cap and [`Error::Malformed`]
    /// for an out-of-range value.
    pub fn message(&self) -> Result<Message> {
        let msg = match self.msg_type {
            1 => Message::Hello(take_exact(&self.body)?),
            2 => Message::Lsa(take_exact(&self.body)?),
            3 => Message::LsAck(take_exact(&self.body)?),
            4 => Message::Probe(take_exact(&self.body)?),
            msg_type => Message::Unknown {
                msg_type,
                body: self.body.clone(),
            },
        };
        msg.check()?;
        Ok(msg)
    }

    /// What the tag covers: version, type, body.
    fn signed_parts(&self) -> [&[u8]; 3] {
        [
            core::slice::from_ref(&self.version),
            core::slice::from_ref(&self.msg_type),
            &self.body,
        ]
    }
}

impl Message {
    /// The type octet.
    pub const fn msg_type(&self) -> u8 {
        match self {
            Self::Hello(_) => 1,
            Self::Lsa(_) => 2,
            Self::LsAck(_) => 3,
            Self::Probe(_) => 4,
            Self::Unknown { msg_type, .. } => *msg_type,
        }
    }

    /// Check caps and ranges (see the module doc).
    pub fn check(&self) -> Result<()> {
        let cap = |len: usize, max: usize| {
            if len > max {
                Err(Error::TooLong)
            } else {
                Ok(())
            }
        };
        match self {
            Self::Hello(h) => cap(h.neighbors.len(), MAX_NEIGHBORS),
            Self::LsAck(a) => cap(a.acks.len(), MAX_ACKS),
            Self::Probe(_) => Ok(()),
            Self::Lsa(lsa) => {
                if lsa.age > Lsa::MAX_AGE_S {
                    return Err(Error::Malformed);
                }
                match &lsa.body {
                    LsaBody::RouterLinks(r) => {
                        cap(r.links.len(), MAX_LINKS)?;
                        cap(r.prefixes.len(), MAX_PREFIXES)?;
                        if r.prefixes.iter().any(|p| p.len > 128) {
                            return Err(Error::Malformed);
                        }
                        Ok(())
                    }
                    LsaBody::Services(s) => cap(s.len(), MAX_SERVICES),
                    LsaBody::AppMetrics(m) => cap(m.len(), MAX_APP_METRICS),
                    LsaBody::Sticky(s) => {
                        cap(s.len(), MAX_STICKY)?;
                        let bad_label = |e: &StickyEntry| matches!(e.key, StickyKey::FlowLabel(l) if l > 0xf_ffff);
                        if s.iter().any(bad_label) {
                            return Err(Error::Malformed);
                        }
                        Ok(())
                    }
                }
            }
            Self::Unknown { msg_type, .. } => {
                if (1..=4).contains(msg_type) {
                    return Err(Error::Malformed);
                }
                Ok(())
            }
        }
    }

    /// Encode as a datagram, signed with `(key_id, secret)` if given.
    /// Errors as [`Self::check`], and [`Error::TooLong`] if the datagram
    /// would exceed [`MAX_DATAGRAM`].
    pub fn encode(&self, key: Option<(u8, &[u8])>) -> Result<Vec<u8>> {
        self.check()?;
        let body = match self {
            Self::Hello(h) => to_vec(h)?,
            Self::Lsa(l) => to_vec(l)?,
            Self::LsAck(a) => to_vec(a)?,
            Self::Probe(p) => to_vec(p)?,
            Self::Unknown { body, .. } => body.clone(),
        };
        let mut env = Envelope {
            version: VERSION,
            msg_type: self.msg_type(),
            auth: None,
            body,
        };
        if let Some((key_id, secret)) = key {
            let tag = AuthTag::sign(key_id, secret, &env.signed_parts());
            env.auth = Some(EnvelopeAuth {
                key_id,
                tag: tag.tag,
            });
        }
        let out = to_vec(&env)?;
        if out.len() > MAX_DATAGRAM {
            return Err(Error::TooLong);
        }
        Ok(out)
    }

    /// Decode a datagram and check its tag: `(message, auth check)`. A node
    /// with a key drops anything but [`AuthCheck::Good`]. Errors as
    /// [`Envelope::decode`] and [`Envelope::message`].
    pub fn decode<'k>(
        datagram: &[u8],
        secret_for: impl FnOnce(u8) -> Option<&'k [u8]>,
    ) -> Result<(Self, AuthCheck)> {
        let env = Envelope::decode(datagram)?;
        let check = env.verify(secret_for);
        Ok((env.message()?, check))
    }
}

fn to_vec<T: Serialize>(value: &T) -> Result<Vec<u8>> {
    postcard::to_stdvec(value).map_err(|_| Error::Malformed)
}

/// Postcard-decode `bytes` as exactly one `T`.
fn take_exact<T: DeserializeOwned>(bytes: &[u8]) -> Result<T> {
    let (value, rest) = postcard::take_from_bytes::<T>(bytes).map_err(|e| match e {
        postcard::Error::DeserializeUnexpectedEnd => Error::Truncated,
        _ => Error::Malformed,
    })?;
    if !rest.is_empty() {
        return Err(Error::BadLength);
    }
    Ok(value)
}

#[cfg(test)]
mod test {
    use proptest::prelude::*;

    use super::*;
    use crate::wire::appmetrics::Metric;
    use crate::wire::rosa::{Constraint, Mode, Policy};

    fn hello() -> Message {
        Message::Hello(Hello {
            router_id: RouterId(1),
            seq: 2,
            sent_at_us: 1000,
            neighbors: vec![HelloEcho {
                router_id: RouterId(0x80),
                seq: 7,
                sent_at_us: 5,
                held_us: 300,
            }],
        })
    }

    /// version 1, type 1, no auth, body of 11 octets: router 1, seq 2,
    /// sent_at 1000 (0xe8 0x07), one neighbour: router 0x80 (0x80 0x01),
    /// seq 7, sent_at 5, held 300 (0xac 0x02).
    static HELLO_BYTES: [u8; 15] = [
        0x01, 0x01, 0x00, 0x0b, // version, type, auth None, body length 11
        0x01, 0x02, 0xe8, 0x07, 0x01, // router_id, seq, sent_at_us, 1 neighbour
        0x80, 0x01, 0x07, 0x05, 0xac, 0x02, // router_id 128, seq, sent_at_us, held_us
    ];

    fn lsa(body: LsaBody) -> Message {
        Message::Lsa(Lsa {
            origin: RouterId(9),
            part: 0,
            seq: 42,
            age: 1,
            body,
        })
    }

    fn services() -> LsaBody {
        LsaBody::Services(vec![ServiceAnnouncement {
            name: "service.org/video".parse().unwrap(),
            instance: "fd00::9".parse().unwrap(),
            constraints: Constraints(vec![
                Constraint::ModePolicy {
                    mode: Mode::Scheduling,
                    policy: Policy::RoundRobin,
                },
                Constraint::Capability(10),
            ]),
            lifetime_s: 30,
        }])
    }

    fn all() -> Vec<Message> {
        vec![
            hello(),
            lsa(LsaBody::RouterLinks(RouterLinks {
                address: "fd00::1".parse().unwrap(),
                links: vec![Link {
                    neighbor: RouterId(2),
                    cost: 10,
                }],
                prefixes: vec![Prefix {
                    addr: "fd00:1::".parse().unwrap(),
                    len: 64,
                }],
            })),
            lsa(services()),
            lsa(LsaBody::AppMetrics(vec![AppMetricsEntry {
                anycast: "fd00:aa::1".parse().unwrap(),
                metrics: AppMetrics::new(vec![Metric::Capacity(5)]).unwrap(),
            }])),
            lsa(LsaBody::Sticky(vec![StickyEntry {
                service_id: "fd00:aa::1".parse().unwrap(),
                key: StickyKey::FlowLabel(0x12345),
                egress: "fd00::3".parse().unwrap(),
                remaining_s: 300,
            }])),
            Message::LsAck(LsAck {
                router_id: RouterId(3),
                acks: vec![LsaHeader {
                    origin: RouterId(9),
                    kind: LsaKind::Services,
                    part: 0,
                    seq: 42,
                }],
            }),
            Message::Unknown {
                msg_type: 0x7f,
                body: vec![1, 2, 3],
            },
        ]
    }

    #[test]
    fn golden_hello() {
        let bytes = hello().encode(None).unwrap();
        assert_eq!(bytes, HELLO_BYTES);
        let (msg, check) = Message::decode(&bytes, |_| None).unwrap();
        assert_eq!(msg, hello());
        assert_eq!(check, AuthCheck::Unsigned);
        let env = Envelope::decode(&bytes).unwrap();
        assert_eq!((env.version, env.msg_type, env.auth), (1, 1, None));
        assert_eq!(env.body, &HELLO_BYTES[4..]);
    }

    #[test]
    fn golden_ack() {
        // version, type 3, auth None, body 7: router 3, 1 ack: origin 9,
        // kind Services (variant 1), part 0, seq 42.
        let want = [0x01, 0x03, 0x00, 0x06, 0x03, 0x01, 0x09, 0x01, 0x00, 0x2a];
        assert_eq!(all()[5].encode(None).unwrap(), want);
    }

    #[test]
    fn round_trips() {
        for msg in all() {
            for key in [None, Some((4, &b"igp-secret"[..]))] {
                let bytes = msg.encode(key).unwrap();
                let (back, check) =
                    Message::decode(&bytes, |k| (k == 4).then_some(&b"igp-secret"[..])).unwrap();
                assert_eq!(back, msg);
                let want = if key.is_some() {
                    AuthCheck::Good(4)
                } else {
                    AuthCheck::Unsigned
                };
                assert_eq!(check, want);
            }
        }
    }

    #[test]
    fn auth_good_bad_missing() {
        let bytes = lsa(services()).encode(Some((4, b"igp-secret"))).unwrap();
        let env = Envelope::decode(&bytes).unwrap();
        let auth = env.auth.unwrap();
        let want = AuthTag::sign(4, b"igp-secret", &[&[1, 2], &env.body]);
        assert_eq!(auth.tag, want.tag);
        assert_eq!(env.verify(|_| Some(&b"igp-secret"[..])), AuthCheck::Good(4));
        assert_eq!(env.verify(|_| Some(&b"wrong"[..])), AuthCheck::Bad(4));
        assert_eq!(env.verify(|_| None), AuthCheck::UnknownKey(4));
        // Any change to the body or the type breaks the tag.
        let mut forged = env.clone();
        *forged.body.last_mut().unwrap() ^= 1;
        assert_eq!(
            forged.verify(|_| Some(&b"igp-secret"[..])),
            AuthCheck::Bad(4)
        );
        let mut retyped = env.clone();
        retyped.msg_type = 3;
        assert_eq!(
            retyped.verify(|_| Some(&b"igp-secret"[..])),
            AuthCheck::Bad(4)
        );
        // Stripping the tag leaves an unsigned message.
        let mut stripped = env;
        stripped.auth = None;
        assert_eq!(
            stripped.verify(|_| Some(&b"igp-secret"[..])),
            AuthCheck::Unsigned
        );
    }

    #[test]
    fn truncated_at_every_octet() {
        for msg in all() {
            let bytes = msg.encode(Some((1, b"k"))).unwrap();
            for cut in 0..bytes.len() {
                assert!(
                    Message::decode(&bytes[..cut], |_| None).is_err(),
                    "{msg:?} cut {cut}"
                );
            }
        }
    }

    #[test]
    fn trailing_and_over_long() {
        let mut bytes = hello().encode(None).unwrap();
        bytes.push(0);
        assert_eq!(Message::decode(&bytes, |_| None), Err(Error::BadLength));
        // Trailing octets inside the body.
        let mut env = Envelope::decode(&hello().encode(None).unwrap()).unwrap();
        env.body.push(0);
        let bytes = postcard::to_stdvec(&env).unwrap();
        assert_eq!(Message::decode(&bytes, |_| None), Err(Error::BadLength));
        // Over-long datagram.
        assert_eq!(
            Message::decode(&vec![0; MAX_DATAGRAM + 1], |_| None),
            Err(Error::TooLong)
        );
        // Caps.
        let Message::Hello(mut h) = hello() else {
            unreachable!()
        };
        h.neighbors = vec![h.neighbors[0]; MAX_NEIGHBORS + 1];
        assert_eq!(Message::Hello(h.clone()).encode(None), Err(Error::TooLong));
        // A peer that ignores the cap is refused on decode too.
        let env = Envelope {
            version: 1,
            msg_type: 1,
            auth: None,
            body: postcard::to_stdvec(&h).unwrap(),
        };
        let bytes = postcard::to_stdvec(&env).unwrap();
        assert_eq!(Message::decode(&bytes, |_| None), Err(Error::TooLong));
        // A body within its caps that does not fit one datagram: 64 ×
        // App-Metrics of 1 KiB.
        let big = AppMetrics::new(vec![Metric::Unknown {
            metric_type: 9,
            value: vec![0; 1020],
        }])
        .unwrap();
        let entry = AppMetricsEntry {
            anycast: "fd00::1".parse().unwrap(),
            metrics: big,
        };
        let many = lsa(LsaBody::AppMetrics(vec![entry; MAX_APP_METRICS]));
        assert!(matches!(many.encode(None), Err(Error::TooLong)));
        // The largest sticky and service parts do fit.
        let sticky = StickyEntry {
            service_id: "fd00::1".parse().unwrap(),
            key: StickyKey::Ue("fd00::2".parse().unwrap()),
            egress: "fd00::3".parse().unwrap(),
            remaining_s: u32::MAX,
        };
        assert!(lsa(LsaBody::Sticky(vec![sticky; MAX_STICKY]))
            .encode(None)
            .is_ok());
        let LsaBody::Services(one) = services() else {
            unreachable!()
        };
        let mut longest = one[0].clone();
        longest.name = "a"
            .repeat(crate::wire::rosa::MAX_SEGMENT_LEN)
            .parse()
            .unwrap();
        assert!(lsa(LsaBody::Services(vec![longest; MAX_SERVICES]))
            .encode(None)
            .is_ok());
    }

    #[test]
    fn impossible_values() {
        // Version 2.
        let mut bytes = hello().encode(None).unwrap();
        bytes[0] = 2;
        assert_eq!(Message::decode(&bytes, |_| None), Err(Error::Malformed));
        // Bad option tag, bad enum variant.
        let mut bytes = hello().encode(None).unwrap();
        bytes[2] = 2;
        assert_eq!(Message::decode(&bytes, |_| None), Err(Error::Malformed));
        let mut bytes = all()[5].encode(None).unwrap();
        bytes[7] = 9; // LsaKind variant 9
        assert_eq!(Message::decode(&bytes, |_| None), Err(Error::Malformed));
        // Prefix length 129, flow label over 20 bits, age over the maximum.
        let bad = lsa(LsaBody::RouterLinks(RouterLinks {
            address: Ipv6Addr::UNSPECIFIED,
            links: vec![],
            prefixes: vec![Prefix {
                addr: Ipv6Addr::UNSPECIFIED,
                len: 129,
            }],
        }));
        assert_eq!(bad.encode(None), Err(Error::Malformed));
        let bad = lsa(LsaBody::Sticky(vec![StickyEntry {
            service_id: "fd00::1".parse().unwrap(),
            key: StickyKey::FlowLabel(0x10_0000),
            egress: "fd00::3".parse().unwrap(),
            remaining_s: 1,
        }]));
        assert_eq!(bad.encode(None), Err(Error::Malformed));
        let Message::Lsa(mut old) = lsa(services()) else {
            unreachable!()
        };
        old.age = Lsa::MAX_AGE_S + 1;
        assert_eq!(Message::Lsa(old).encode(None), Err(Error::Malformed));
        // An invalid service name inside an LSA.
        let good = lsa(services()).encode(None).unwrap();
        let env = Envelope::decode(&good).unwrap();
        let pos = env.body.windows(3).position(|w| w == b"ser").unwrap();
        let mut body = env.body.clone();
        body[pos] = b'/';
        let bytes = postcard::to_stdvec(&Envelope { body, ..env }).unwrap();
        assert_eq!(Message::decode(&bytes, |_| None), Err(Error::Malformed));
        // Unknown with a known type.
        let bad = Message::Unknown {
            msg_type: 2,
            body: vec![],
        };
        assert_eq!(bad.encode(None), Err(Error::Malformed));
    }

    /// version 1, type 4, no auth, body of 5 octets: router 2, seq 3,
    /// sent_at 200 (0xc8 0x01), reply.
    static PROBE_BYTES: [u8; 9] = [
        0x01, 0x04, 0x00, 0x05, // version, type, auth None, body length 5
        0x02, 0x03, 0xc8, 0x01, 0x01, // router_id, seq, sent_at_us, reply
    ];

    #[test]
    fn golden_probe() {
        let probe = Message::Probe(Probe {
            router_id: RouterId(2),
            seq: 3,
            sent_at_us: 200,
            reply: true,
        });
        assert_eq!(probe.encode(None).unwrap(), PROBE_BYTES);
        assert_eq!(Message::decode(&PROBE_BYTES, |_| None).unwrap().0, probe);
        // A reply octet other than 0/1 is not a bool.
        let mut bad = PROBE_BYTES;
        bad[8] = 2;
        assert_eq!(Message::decode(&bad, |_| None), Err(Error::Malformed));
        // Truncated body.
        let mut short = PROBE_BYTES[..8].to_vec();
        short[3] = 4;
        assert_eq!(Message::decode(&short, |_| None), Err(Error::Truncated));
    }

    #[test]
    fn header_names_the_lsa() {
        let Message::Lsa(l) = lsa(services()) else {
            unreachable!()
        };
        assert_eq!(
            l.header(),
            LsaHeader {
                origin: RouterId(9),
                kind: LsaKind::Services,
                part: 0,
                seq: 42
            }
        );
    }

    fn arb_addr() -> impl Strategy<Value = IpAddr> {
        crate::wire::rosa::test::arb_addr()
    }

    fn arb_message() -> impl Strategy<Value = Message> {
        let echo = (any::<u32>(), any::<u32>(), any::<u64>(), any::<u64>()).prop_map(
            |(r, seq, sent_at_us, held_us)| HelloEcho {
                router_id: RouterId(r),
                seq,
                sent_at_us,
                held_us,
            },
        );
        let hello = (
            any::<u32>(),
            any::<u32>(),
            any::<u64>(),
            proptest::collection::vec(echo, 0..4),
        )
            .prop_map(|(r, seq, sent_at_us, neighbors)| {
                Message::Hello(Hello {
                    router_id: RouterId(r),
                    seq,
                    sent_at_us,
                    neighbors,
                })
            });
        let svc = (
            crate::wire::rosa::test::arb_name(),
            arb_addr(),
            crate::wire::rosa::test::arb_constraints(),
            any::<u32>(),
        )
            .prop_map(
                |(name, instance, constraints, lifetime_s)| ServiceAnnouncement {
                    name,
                    instance,
                    constraints,
                    lifetime_s,
                },
            );
        let am = (arb_addr(), crate::wire::appmetrics::test::arb_metrics())
            .prop_map(|(anycast, metrics)| AppMetricsEntry { anycast, metrics });
        let sticky = (
            arb_addr(),
            any::<u32>(),
            arb_addr(),
            any::<u32>(),
            any::<bool>(),
        )
            .prop_map(
                |(service_id, label, egress, remaining_s, by_ue)| StickyEntry {
                    service_id,
                    key: if by_ue {
                        StickyKey::Ue(egress)
                    } else {
                        StickyKey::FlowLabel(label & 0xf_ffff)
                    },
                    egress,
                    remaining_s,
                },
            );
        let links = (
            any::<[u8; 16]>(),
            proptest::collection::vec((any::<u32>(), any::<u32>()), 0..4),
            proptest::collection::vec((any::<[u8; 16]>(), 0_u8..=128), 0..4),
        )
            .prop_map(|(a, l, p)| RouterLinks {
                address: a.into(),
                links: l
                    .into_iter()
                    .map(|(n, cost)| Link {
                        neighbor: RouterId(n),
                        cost,
                    })
                    .collect(),
                prefixes: p
                    .into_iter()
                    .map(|(a, len)| Prefix {
                        addr: a.into(),
                        len,
                    })
                    .collect(),
            });
        let body = prop_oneof![
            links.prop_map(LsaBody::RouterLinks),
            proptest::collection::vec(svc, 0..4).prop_map(LsaBody::Services),
            proptest::collection::vec(am, 0..3).prop_map(LsaBody::AppMetrics),
            proptest::collection::vec(sticky, 0..8).prop_map(LsaBody::Sticky),
        ];
        let lsa = (
            any::<u32>(),
            any::<u16>(),
            any::<u32>(),
            0..=Lsa::MAX_AGE_S,
            body,
        )
            .prop_map(|(o, part, seq, age, body)| {
                Message::Lsa(Lsa {
                    origin: RouterId(o),
                    part,
                    seq,
                    age,
                    body,
                })
            });
        let header =
            (any::<u32>(), 0_u8..4, any::<u16>(), any::<u32>()).prop_map(|(o, k, part, seq)| {
                LsaHeader {
                    origin: RouterId(o),
                    kind: [
                        LsaKind::RouterLinks,
                        LsaKind::Services,
                        LsaKind::AppMetrics,
                        LsaKind::Sticky,
                    ][usize::from(k)],
                    part,
                    seq,
                }
            });
        let ack = (any::<u32>(), proptest::collection::vec(header, 0..6)).prop_map(|(r, acks)| {
            Message::LsAck(LsAck {
                router_id: RouterId(r),
                acks,
            })
        });
        let probe = (any::<u32>(), any::<u32>(), any::<u64>(), any::<bool>()).prop_map(
            |(r, seq, sent_at_us, reply)| {
                Message::Probe(Probe {
                    router_id: RouterId(r),
                    seq,
                    sent_at_us,
                    reply,
                })
            },
        );
        let unknown = (5_u8.., proptest::collection::vec(any::<u8>(), 0..16))
            .prop_map(|(msg_type, body)| Message::Unknown { msg_type, body });
        prop_oneof![hello, lsa, ack, probe, unknown]
    }

    proptest! {
        #[test]
        fn encode_decode_round_trip(msg in arb_message(), key in any::<Option<u8>>()) {
            let bytes = msg.encode(key.map(|k| (k, &b"s"[..]))).unwrap();
            let (back, check) = Message::decode(&bytes, |_| Some(&b"s"[..])).unwrap();
            prop_assert_eq!(back, msg.clone());
            prop_assert_eq!(check, key.map_or(AuthCheck::Unsigned, AuthCheck::Good));
            crate::fuzz::igp(&bytes);
        }

        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            crate::fuzz::igp(&bytes);
        }
    }
}
