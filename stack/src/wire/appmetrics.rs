//! IP-layer App-Metrics sub-TLVs (SPEC §3; draft-dunbar-lsr-5g-edge-compute-
//! ospf-ext-03 §5.3), as the egress SAR floods them for each ACL'd anycast
//! address inside the SAR IGP's App-Metrics LSA ([`super::igp`]).
//!
//! OSPF-style sub-TLVs, back to back:
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |             Type              |            Length             |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                      Value (Length octets)                    ~
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! ```
//!
//! | type | sub-TLV               | value                                        | length |
//! |------|-----------------------|----------------------------------------------|--------|
//! | 1    | Aggregated Load Index | `period_s:u32 index:u32`                      | 8      |
//! | 2    | Raw Load              | `period_s:u32` + to/from packets, to/from bytes as u64 | 36 |
//! | 3    | Capacity Index        | `u32`                                        | 4      |
//! | 4    | Preference Index      | `u32`                                        | 4      |
//! | 5    | Tunnel **\[ext\]**     | `u32`: 1 IPv6-in-IPv6, 2 GRE                  | 4      |
//! | 6    | Aggregated Cost **\[ext\]** | `u32`                                   | 4      |
//!
//! The types are ours **\[ext\]**: the draft leaves them TBD (and gives Raw
//! Load and Capacity the same TBD3); SPEC widens Raw Load's counters to u64.
//! Types 5 and 6 are ours too: the tunnel the egress asks ingresses to use
//! (draft-dunbar-6man sticky service §4.4: "the tunnel type supported by the
//! original Sticky Egress node"), and the draft's §4 aggregated cost, which
//! OSPF carries in a prefix metric and our IGP carries here.
//! A known type with another length is [`Error::BadLength`]; unknown types
//! are kept verbatim. A list holds at most [`MAX_TLVS`] sub-TLVs and at most
//! [`MAX_LEN`] octets.

use serde::{Deserialize, Serialize};

use super::{Error, Result};

/// Most sub-TLVs in one list.
pub const MAX_TLVS: usize = 16;

/// Most octets of one encoded list.
pub const MAX_LEN: usize = 1024;

open_enum! {
    /// The sub-TLV type, an open enum.
    ///
    /// `Unknown`: Any other value.
    pub enum MetricType: u16 {
        /// 1: Aggregated Load Index.
        AggregatedLoad = 1,
        /// 2: Raw Load.
        RawLoad = 2,
        /// 3: Capacity Index.
        Capacity = 3,
        /// 4: Preference Index.
        Preference = 4,
        /// 5: the tunnel the egress asks for **\[ext\]**.
        Tunnel = 5,
        /// 6: Aggregated Cost **\[ext\]**.
        AggregatedCost = 6,
    }
}

/// The raw counters of one measurement period.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct RawLoad {
    /// Measurement period in seconds.
    pub period_s: u32,
    /// Packets to the anycast server.
    pub to_packets: u64,
    /// Packets from the anycast server.
    pub from_packets: u64,
    /// Octets to the anycast server.
    pub to_bytes: u64,
    /// Octets from the anycast server.
    pub from_bytes: u64,
}

/// One App-Metrics sub-TLV.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Metric {
    /// 1: the weighted index of one measurement period.
    AggregatedLoad {
        /// Measurement period in seconds.
        period_s: u32,
        /// Index = w1·ToPackets + w2·FromPackets + w3·ToBytes + w4·FromBytes.
        index: u32,
    },
    /// 2: the raw counters.
    RawLoad(RawLoad),
    /// 3: the site's capacity index.
    Capacity(u32),
    /// 4: the site's preference index.
    Preference(u32),
    /// 5: the tunnel type the egress asks for (1 IPv6-in-IPv6, 2 GRE;
    /// other values kept) **\[ext\]**.
    Tunnel(u32),
    /// 6: the egress's aggregated cost of reaching the server (draft §4)
    /// **\[ext\]**.
    AggregatedCost(u32),
    /// Any other type, kept verbatim.
    Unknown {
        /// The type.
        metric_type: u16,
        /// The value.
        value: Vec<u8>,
    },
}

// Fixed value lengths.
const AGGREGATED_LEN: usize = 8;
const RAW_LEN: usize = 4 + 4 * 8;
const INDEX_LEN: usize = 4;

impl Metric {
    /// The sub-TLV type.
    pub fn metric_type(&self) -> MetricType {
        match self {
            Self::AggregatedLoad { .. } => MetricType::AggregatedLoad,
            Self::RawLoad(_) => MetricType::RawLoad,
            Self::Capacity(_) => MetricType::Capacity,
            Self::Preference(_) => MetricType::Preference,
            Self::Tunnel(_) => MetricType::Tunnel,
            Self::AggregatedCost(_) => MetricType::AggregatedCost,
            Self::Unknown { metric_type, .. } => MetricType::Unknown(*metric_type),
        }
    }

    fn value_len(&self) -> usize {
        match self {
            Self::AggregatedLoad { .. } => AGGREGATED_LEN,
            Self::RawLoad(_) => RAW_LEN,
            Self::Capacity(_) | Self::Preference(_) | Self::Tunnel(_) | Self::AggregatedCost(_) => {
                INDEX_LEN
            }
            Self::Unknown { value, .. } => value.len(),
        }
    }

    /// Octets the sub-TLV occupies: 4 + value.
    pub fn buffer_len(&self) -> usize {
        4 + self.value_len()
    }

    /// Parse one sub-TLV from its type and value.
    pub fn parse(metric_type: u16, value: &[u8]) -> Result<Self> {
        let u32_at = |i: usize| -> u32 {
            let mut b = [0; 4];
            b.copy_from_slice(&value[i..i + 4]);
            u32::from_be_bytes(b)
        };
        let u64_at = |i: usize| -> u64 {
            let mut b = [0; 8];
            b.copy_from_slice(&value[i..i + 8]);
            u64::from_be_bytes(b)
        };
        let t = MetricType::from(metric_type);
        let want = match t {
            MetricType::AggregatedLoad => AGGREGATED_LEN,
            MetricType::RawLoad => RAW_LEN,
            MetricType::Capacity
            | MetricType::Preference
            | MetricType::Tunnel
            | MetricType::AggregatedCost => INDEX_LEN,
            MetricType::Unknown(_) => value.len(),
        };
        if value.len() != want {
            return Err(Error::BadLength);
        }
        // Lengths checked above, so the slices below are in bounds.
        Ok(match t {
            MetricType::AggregatedLoad => Self::AggregatedLoad {
                period_s: u32_at(0),
                index: u32_at(4),
            },
            MetricType::RawLoad => Self::RawLoad(RawLoad {
                period_s: u32_at(0),
                to_packets: u64_at(4),
                from_packets: u64_at(12),
                to_bytes: u64_at(20),
                from_bytes: u64_at(28),
            }),
            MetricType::Capacity => Self::Capacity(u32_at(0)),
            MetricType::Preference => Self::Preference(u32_at(0)),
            MetricType::Tunnel => Self::Tunnel(u32_at(0)),
            MetricType::AggregatedCost => Self::AggregatedCost(u32_at(0)),
            MetricType::Unknown(metric_type) => Self::Unknown {
                metric_type,
                value: value.to_vec(),
            },
        })
    }

    fn emit(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&u16::from(self.metric_type()).to_be_bytes());
        // At most MAX_LEN: AppMetrics::check ran.
        out.extend_from_slice(&(self.value_len() as u16).to_be_bytes());
        match self {
            Self::AggregatedLoad { period_s, index } => {
                out.extend_from_slice(&period_s.to_be_bytes());
                out.extend_from_slice(&index.to_be_bytes());
            }
            Self::RawLoad(r) => {
                out.extend_from_slice(&r.period_s.to_be_bytes());
                for v in [r.to_packets, r.from_packets, r.to_bytes, r.from_bytes] {
                    out.extend_from_slice(&v.to_be_bytes());
                }
            }
            Self::Capacity(v) | Self::Preference(v) | Self::Tunnel(v) | Self::AggregatedCost(v) => {
                out.extend_from_slice(&v.to_be_bytes());
            }
            Self::Unknown { value, .. } => out.extend_from_slice(value),
        }
    }
}

/// A list of App-Metrics sub-TLVs, in wire order. Serialized (serde) as its
/// wire encoding, validated on the way in.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "Vec<u8>", into = "Vec<u8>")]
pub struct AppMetrics(Vec<Metric>);

impl AppMetrics {
    /// A checked list: [`Error::TooLong`] over [`MAX_TLVS`] sub-TLVs or
    /// [`MAX_LEN`] octets, [`Error::Malformed`] for an `Unknown` with a
    /// known type.
    pub fn new(list: Vec<Metric>) -> Result<Self> {
        let m = Self(list);
        m.check()?;
        Ok(m)
    }

    /// The sub-TLVs.
    pub fn metrics(&self) -> &[Metric] {
        &self.0
    }

    /// Parse an encoded list: [`Error::BadLength`] for a sub-TLV cut short
    /// or of the wrong length for its type, [`Error::TooLong`] as [`Self::new`].
    pub fn parse(data: &[u8]) -> Result<Self> {
        if data.len() > MAX_LEN {
            return Err(Error::TooLong);
        }
        let mut list = Vec::new();
        let mut rest = data;
        while !rest.is_empty() {
            let [t0, t1, l0, l1, tail @ ..] = rest else {
                return Err(Error::BadLength);
            };
            let len = usize::from(u16::from_be_bytes([*l0, *l1]));
            let Some(value) = tail.get(..len) else {
                return Err(Error::BadLength);
            };
            if list.len() == MAX_TLVS {
                return Err(Error::TooLong);
            }
            list.push(Metric::parse(u16::from_be_bytes([*t0, *t1]), value)?);
            rest = &tail[len..];
        }
        Ok(Self(list))
    }

    /// Octets of the encoding.
    pub fn buffer_len(&self) -> usize {
        self.0.iter().map(Metric::buffer_len).sum()
    }

    fn check(&self) -> Result<()> {
        if self.0.len() > MAX_TLVS || self.buffer_len() > MAX_LEN {
            return Err(Error::TooLong);
        }
        for m in &self.0 {
            if let Metric::Unknown { metric_type, .. } = m {
                if !matches!(MetricType::from(*metric_type), MetricType::Unknown(_)) {
                    return Err(Error::Malformed);
                }
            }
        }
        Ok(())
    }

    /// The encoding (infallible: [`Self::new`] and [`Self::parse`] checked).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.buffer_len());
        for m in &self.0 {
            m.emit(&mut out);
        }
        out
    }

    /// The first Aggregated Load Index: `(period_s, index)`.
    pub fn aggregated_load(&self) -> Option<(u32, u32)> {
        self.0.iter().find_map(|m| match m {
            Metric::AggregatedLoad { period_s, index } => Some((*period_s, *index)),
            _ => None,
        })
    }

    /// The first Raw Load.
    pub fn raw_load(&self) -> Option<RawLoad> {
        self.0.iter().find_map(|m| match m {
            Metric::RawLoad(r) => Some(*r),
            _ => None,
        })
    }

    /// The first Capacity Index.
    pub fn capacity(&self) -> Option<u32> {
        self.0.iter().find_map(|m| match m {
            Metric::Capacity(v) => Some(*v),
            _ => None,
        })
    }

    /// The first Preference Index.
    pub fn preference(&self) -> Option<u32> {
        self.0.iter().find_map(|m| match m {
            Metric::Preference(v) => Some(*v),
            _ => None,
        })
    }

    /// The first Tunnel sub-TLV's value.
    pub fn tunnel(&self) -> Option<u32> {
        self.0.iter().find_map(|m| match m {
            Metric::Tunnel(v) => Some(*v),
            _ => None,
        })
    }

    /// The first Aggregated Cost.
    pub fn aggregated_cost(&self) -> Option<u32> {
        self.0.iter().find_map(|m| match m {
            Metric::AggregatedCost(v) => Some(*v),
            _ => None,
        })
    }
}

impl TryFrom<Vec<u8>> for AppMetrics {
    type Error = Error;

    fn try_from(data: Vec<u8>) -> Result<Self> {
        Self::parse(&data)
    }
}

impl From<AppMetrics> for Vec<u8> {
    fn from(m: AppMetrics) -> Self {
        m.to_bytes()
    }
}

#[cfg(test)]
pub(crate) mod test {
    use proptest::prelude::*;

    use super::*;

    /// All four sub-TLVs and an unknown type 0x0100 with two octets.
    static LIST_BYTES: [u8; 74] = [
        0x00, 0x01, 0x00, 0x08, // Aggregated Load Index, 8 octets
        0x00, 0x00, 0x0e, 0x10, // period 3600 s
        0x00, 0x00, 0x01, 0x2c, // index 300
        0x00, 0x02, 0x00, 0x24, // Raw Load, 36 octets
        0x00, 0x00, 0x00, 0x0a, // period 10 s
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, // to packets 1
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, // from packets 2
        0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, // to bytes 2^32
        0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, // from bytes max
        0x00, 0x03, 0x00, 0x04, 0x00, 0x00, 0x00, 0x64, // Capacity Index 100
        0x00, 0x04, 0x00, 0x04, 0x00, 0x00, 0x00, 0x05, // Preference Index 5
        0x01, 0x00, 0x00, 0x02, 0xab, 0xcd, // unknown 0x0100, 2 octets
    ];

    fn list() -> AppMetrics {
        AppMetrics::new(vec![
            Metric::AggregatedLoad {
                period_s: 3600,
                index: 300,
            },
            Metric::RawLoad(RawLoad {
                period_s: 10,
                to_packets: 1,
                from_packets: 2,
                to_bytes: 1 << 32,
                from_bytes: u64::MAX,
            }),
            Metric::Capacity(100),
            Metric::Preference(5),
            Metric::Unknown {
                metric_type: 0x0100,
                value: vec![0xab, 0xcd],
            },
        ])
        .unwrap()
    }

    #[test]
    fn test_parse() {
        let m = AppMetrics::parse(&LIST_BYTES).unwrap();
        assert_eq!(m, list());
        assert_eq!(m.aggregated_load(), Some((3600, 300)));
        assert_eq!(m.raw_load().unwrap().from_bytes, u64::MAX);
        assert_eq!(m.capacity(), Some(100));
        assert_eq!(m.preference(), Some(5));
        assert_eq!(m.metrics().len(), 5);
    }

    #[test]
    fn test_emit() {
        assert_eq!(list().buffer_len(), LIST_BYTES.len());
        assert_eq!(list().to_bytes(), LIST_BYTES);
        // An empty list is empty.
        assert_eq!(AppMetrics::parse(&[]).unwrap(), AppMetrics::default());
        assert!(AppMetrics::default().to_bytes().is_empty());
    }

    #[test]
    fn test_construct() {
        // Built field by field into a 0xa5 buffer.
        let mut bytes = vec![0xa5; 12];
        bytes[0..2].copy_from_slice(&1_u16.to_be_bytes());
        bytes[2..4].copy_from_slice(&8_u16.to_be_bytes());
        bytes[4..8].copy_from_slice(&3600_u32.to_be_bytes());
        bytes[8..12].copy_from_slice(&300_u32.to_be_bytes());
        assert_eq!(bytes, LIST_BYTES[..12]);
    }

    #[test]
    fn truncated_at_every_octet() {
        let boundaries = [12, 52, 60, 68];
        for cut in 1..LIST_BYTES.len() {
            let r = AppMetrics::parse(&LIST_BYTES[..cut]);
            if boundaries.contains(&cut) {
                assert!(r.is_ok(), "cut {cut}");
            } else {
                assert_eq!(r, Err(Error::BadLength), "cut {cut}");
            }
        }
    }

    #[test]
    fn impossible_and_over_long() {
        // Known types with the wrong length.
        assert_eq!(
            AppMetrics::parse(&[0, 3, 0, 3, 0, 0, 0]),
            Err(Error::BadLength)
        );
        assert_eq!(
            AppMetrics::parse(&[0, 1, 0, 4, 0, 0, 0, 0]),
            Err(Error::BadLength)
        );
        // Too many sub-TLVs, too many octets.
        let many: Vec<u8> = [0, 9, 0, 0].repeat(MAX_TLVS + 1);
        assert_eq!(AppMetrics::parse(&many), Err(Error::TooLong));
        assert!(AppMetrics::parse(&many[..4 * MAX_TLVS]).is_ok());
        assert_eq!(
            AppMetrics::parse(&vec![0; MAX_LEN + 1]),
            Err(Error::TooLong)
        );
        let big = Metric::Unknown {
            metric_type: 9,
            value: vec![0; MAX_LEN],
        };
        assert_eq!(AppMetrics::new(vec![big]), Err(Error::TooLong));
        let bad = Metric::Unknown {
            metric_type: 3,
            value: vec![],
        };
        assert_eq!(AppMetrics::new(vec![bad]), Err(Error::Malformed));
    }

    /// Tunnel GRE and Aggregated Cost 30 **\[ext\]**.
    static EXT_BYTES: [u8; 16] = [
        0x00, 0x05, 0x00, 0x04, 0x00, 0x00, 0x00, 0x02, // Tunnel: GRE
        0x00, 0x06, 0x00, 0x04, 0x00, 0x00, 0x00, 0x1e, // Aggregated Cost 30
    ];

    #[test]
    fn tunnel_and_aggregated_cost() {
        let m = AppMetrics::parse(&EXT_BYTES).unwrap();
        assert_eq!(
            m.metrics(),
            &[Metric::Tunnel(2), Metric::AggregatedCost(30)]
        );
        assert_eq!((m.tunnel(), m.aggregated_cost()), (Some(2), Some(30)));
        assert_eq!(m.to_bytes(), EXT_BYTES);
        // A four-octet type with three octets of value.
        let short = [0x00, 0x05, 0x00, 0x03, 0x00, 0x00, 0x02];
        assert_eq!(AppMetrics::parse(&short), Err(Error::BadLength));
    }

    #[test]
    fn unknown_code_points_survive() {
        for v in [0_u16, 1, 4, 5, 6, 7, 0xffff] {
            assert_eq!(u16::from(MetricType::from(v)), v);
        }
        let bytes = [0xff, 0xff, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x07];
        let m = AppMetrics::parse(&bytes).unwrap();
        assert_eq!(m.metrics()[0].metric_type(), MetricType::Unknown(0xffff));
        assert_eq!(m.to_bytes(), bytes);
    }

    #[test]
    fn serde_as_wire() {
        let bytes = postcard::to_stdvec(&list()).unwrap();
        // A varint length (74 < 128: one octet), then the wire octets.
        assert_eq!(bytes[0], 74);
        assert_eq!(&bytes[1..], LIST_BYTES);
        assert_eq!(postcard::from_bytes::<AppMetrics>(&bytes).unwrap(), list());
        assert!(postcard::from_bytes::<AppMetrics>(&[3, 0, 1, 0]).is_err());
    }

    pub(crate) fn arb_metrics() -> impl Strategy<Value = AppMetrics> {
        let one = prop_oneof![
            (any::<u32>(), any::<u32>())
                .prop_map(|(period_s, index)| Metric::AggregatedLoad { period_s, index }),
            any::<(u32, u64, u64, u64, u64)>().prop_map(|(p, a, b, c, d)| Metric::RawLoad(
                RawLoad {
                    period_s: p,
                    to_packets: a,
                    from_packets: b,
                    to_bytes: c,
                    from_bytes: d,
                }
            )),
            any::<u32>().prop_map(Metric::Capacity),
            any::<u32>().prop_map(Metric::Preference),
            any::<u32>().prop_map(Metric::Tunnel),
            any::<u32>().prop_map(Metric::AggregatedCost),
            (7_u16.., proptest::collection::vec(any::<u8>(), 0..16))
                .prop_map(|(metric_type, value)| Metric::Unknown { metric_type, value }),
        ];
        proptest::collection::vec(one, 0..MAX_TLVS).prop_map(|l| AppMetrics::new(l).unwrap())
    }

    proptest! {
        #[test]
        fn emit_parse_round_trip(m in arb_metrics()) {
            let bytes = m.to_bytes();
            prop_assert_eq!(bytes.len(), m.buffer_len());
            prop_assert_eq!(AppMetrics::parse(&bytes).unwrap(), m);
        }

        #[test]
        fn parse_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..120)) {
            crate::fuzz::appmetrics(&bytes);
        }
    }
}
