//! Runs the fuzz target bodies (`svcroute_stack::fuzz`) over a
//! deterministic corpus on stable, so CI exercises them without nightly and
//! cargo-fuzz. Inputs: pure random bytes, and mutations (byte flips,
//! truncation, splices) of well-formed seeds.

use etherparse::{IpHeaders, IpNumber, Ipv4Header, Ipv6Extensions, Ipv6FlowLabel, Ipv6Header};
use etherparse::{Ipv6RawExtHeader, PacketBuilder};
use svcroute_stack::fuzz;
use svcroute_stack::shim::edit;
use svcroute_stack::wire::ipv6opt::{OptionRepr, OptionType};

const CASES: usize = 4000;

/// xorshift64*: small, seeded, the same on every machine.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }

    fn bytes(&mut self, len: usize) -> Vec<u8> {
        (0..len).map(|_| self.next() as u8).collect()
    }
}

fn mutate(rng: &mut Rng, seed: &[u8]) -> Vec<u8> {
    let mut out = seed.to_vec();
    match rng.below(4) {
        0 => {
            for _ in 0..=rng.below(4) {
                if !out.is_empty() {
                    let i = rng.below(out.len());
                    out[i] = rng.next() as u8;
                }
            }
        }
        1 => out.truncate(rng.below(seed.len() + 1)),
        2 => {
            let i = rng.below(out.len() + 1);
            let n = rng.below(16);
            let extra = rng.bytes(n);
            out.splice(i..i, extra);
        }
        _ => {
            // Flip a length-ish field near the start of the interesting headers.
            if out.len() > 20 {
                let i = 14 + rng.below(out.len().min(120) - 14);
                out[i] = out[i].wrapping_add(rng.next() as u8 & 0x0f);
            }
        }
    }
    out
}

fn seeds() -> Vec<Vec<u8>> {
    let src6 = [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01];
    let dst6 = [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x02];
    let raw = |p: &[u8]| Ipv6RawExtHeader::new_raw(IpNumber::UDP, p).unwrap();
    let exts = Ipv6Extensions {
        hop_by_hop_options: Some(raw(&[0x01, 0x04, 0, 0, 0, 0])),
        destination_options: Some(raw(&[0x1e, 0x02, 0xaa, 0xbb, 0x01, 0x00])),
        ..Default::default()
    };
    let mut out = Vec::new();
    for exts in [Ipv6Extensions::default(), exts] {
        for l4 in 0..3 {
            let header = Ipv6Header {
                traffic_class: 0,
                flow_label: Ipv6FlowLabel::ZERO,
                payload_length: 0,
                next_header: IpNumber::UDP,
                hop_limit: 64,
                source: src6,
                destination: dst6,
            };
            let b = PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
                .ip(IpHeaders::Ipv6(header, exts.clone()));
            let mut f = Vec::new();
            match l4 {
                0 => b.udp(0x1234, 0x35).write(&mut f, b"hello"),
                1 => b.tcp(0x1234, 0x50, 7, 0x4000).write(&mut f, b"hello"),
                _ => b.icmpv6_echo_request(1, 2).write(&mut f, b"hello"),
            }
            .unwrap();
            out.push(f);
        }
    }
    let v4 = Ipv4Header::new(0, 64, IpNumber::UDP, [10, 0, 0, 1], [10, 0, 0, 2]).unwrap();
    let mut f = Vec::new();
    PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
        .ip(IpHeaders::Ipv4(v4, Default::default()))
        .tcp(1, 2, 3, 4)
        .write(&mut f, b"hello")
        .unwrap();
    out.push(f);
    // One with our header inserted.
    let mut f = out[0].clone();
    let opts = [
        OptionRepr::new(OptionType::Sticky, b"svc").unwrap(),
        OptionRepr::new(OptionType::Rosa, &[0x01, 0x02]).unwrap(),
    ];
    edit::insert_dest_opts(&mut f, &opts).unwrap();
    out.push(f);
    out
}

#[test]
fn ipv6opt_corpus() {
    let mut rng = Rng(0x5eed_0001);
    let seeds: Vec<Vec<u8>> = vec![
        vec![
            0x11, 0x01, 0x1e, 0x04, 0xde, 0xad, 0xbe, 0xef, 0x3e, 0x03, 1, 2, 3, 0x5f, 0x00, 0x00,
        ],
        vec![0x3b, 0x00, 0x01, 0x04, 0x00, 0x00, 0x00, 0x00],
        vec![0x06, 0x00, 0x00, 0x00, 0x1e, 0x01, 0xaa, 0x00],
    ];
    for i in 0..CASES {
        let input = if i % 2 == 0 {
            let len = rng.below(80);
            rng.bytes(len)
        } else {
            let seed = &seeds[rng.below(seeds.len())];
            mutate(&mut rng, seed)
        };
        fuzz::ipv6opt(&input);
    }
}

#[test]
fn shim_edit_corpus() {
    let mut rng = Rng(0x5eed_0002);
    let seeds = seeds();
    let mut walkable = 0;
    let mut with_options = 0;
    for i in 0..CASES {
        let mut input = vec![rng.next() as u8];
        if i % 4 == 0 {
            let len = rng.below(120);
            input.extend(rng.bytes(len));
        } else {
            let seed = &seeds[rng.below(seeds.len())];
            input.extend(mutate(&mut rng, seed));
        }
        fuzz::shim_edit(&input);
        if let Ok(l) = edit::walk(&input[1..]) {
            walkable += 1;
            with_options += usize::from(l.dest_opts.is_some());
        }
    }
    // The corpus must reach past the parsers, not only bounce off them.
    assert!(walkable > CASES / 3, "only {walkable} walkable inputs");
    assert!(
        with_options > CASES / 20,
        "only {with_options} inputs with options"
    );
    // The untouched seeds too, with every selector class.
    for seed in &seeds {
        for selector in [0x00, 0x1f, 0x40, 0x80, 0xc5, 0xff] {
            let mut input = vec![selector];
            input.extend_from_slice(seed);
            fuzz::shim_edit(&input);
        }
    }
}

/// Every input a fuzzer once failed on, kept under `tests/regressions/`
/// as `<target>-<what>.bin`.
#[test]
fn regressions() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/regressions");
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let bytes = std::fs::read(&path).unwrap();
        match name.split_once('-').map(|(target, _)| target) {
            Some("ipv6opt") => fuzz::ipv6opt(&bytes),
            Some("shim_edit") => fuzz::shim_edit(&bytes),
            Some("nsh") => fuzz::nsh(&bytes),
            Some("gff") => fuzz::gff(&bytes),
            Some("gre") => fuzz::gre(&bytes),
            Some("vxlan_gpe") => fuzz::vxlan_gpe(&bytes),
            Some("nr") => fuzz::nr(&bytes),
            Some("nsff") => fuzz::nsff(&bytes),
            Some("rosa") => fuzz::rosa(&bytes),
            Some("sticky") => fuzz::sticky(&bytes),
            Some("appmetrics") => fuzz::appmetrics(&bytes),
            Some("igp") => fuzz::igp(&bytes),
            _ => panic!("{name}: regression files are named <target>-<what>.bin"),
        }
        seen += 1;
    }
    assert!(seen > 0);
}

/// Half random bytes, half mutated seeds, through `body`; `parses` says
/// whether an input got past the parser, and enough must.
#[track_caller]
fn sfc_corpus(seed: u64, seeds: &[Vec<u8>], body: fn(&[u8]), parses: impl Fn(&[u8]) -> bool) {
    let mut rng = Rng(seed);
    let mut parsed = 0;
    for i in 0..CASES {
        let input = if i % 2 == 0 {
            let len = rng.below(80);
            rng.bytes(len)
        } else {
            let seed = &seeds[rng.below(seeds.len())];
            mutate(&mut rng, seed)
        };
        body(&input);
        parsed += usize::from(parses(&input));
    }
    for seed in seeds {
        assert!(parses(seed), "seed does not parse: {seed:02x?}");
        body(seed);
    }
    assert!(parsed > CASES / 10, "only {parsed} inputs parsed");
}

fn nsh_seeds() -> Vec<Vec<u8>> {
    use svcroute_stack::wire::nsh::{
        ContextHeader, ContextHeaders, Metadata, NextProtocol, Packet, Repr, Spi, Ttl,
        UnknownMetadata,
    };
    let ctx = [ContextHeader::new(0x0101, 0x81, &[0xaa, 0xbb, 0xcc]).unwrap()];
    let base = Repr {
        oam: false,
        ttl: Ttl::MAX,
        next_protocol: NextProtocol::Ipv4,
        spi: Spi::new(0x123).unwrap(),
        si: 0xff,
        metadata: Metadata::Md1([7; 16]),
    };
    let reprs = [
        base,
        Repr {
            next_protocol: NextProtocol::Http,
            metadata: Metadata::Md2(ContextHeaders::new(&ctx).unwrap()),
            ..base
        },
        Repr {
            metadata: Metadata::Md2(ContextHeaders::EMPTY),
            ..base
        },
        Repr {
            metadata: Metadata::Unknown(UnknownMetadata::new(0xf, &[1, 2, 3, 4]).unwrap()),
            ..base
        },
    ];
    reprs
        .iter()
        .map(|r| {
            let mut b = vec![0; r.buffer_len() + 4];
            r.emit(&mut Packet::new_unchecked(&mut b[..]));
            b
        })
        .collect()
}

#[test]
fn nsh_corpus() {
    use svcroute_stack::wire::nsh::{Packet, Repr};
    sfc_corpus(0x5eed_0101, &nsh_seeds(), fuzz::nsh, |b| {
        Packet::new_checked(b).is_ok_and(|p| Repr::parse(&p).is_ok())
    });
}

#[test]
fn gff_corpus() {
    use svcroute_stack::wire::gff::{MessageType, Packet, PathId, Repr};
    let seeds: Vec<Vec<u8>> = [MessageType::TransportData, MessageType::LinkHello]
        .iter()
        .map(|&msg_type| {
            let repr = Repr {
                msg_type,
                path_id: PathId::link(3).with(200),
            };
            let mut b = vec![0x11; repr.buffer_len() + 6];
            repr.emit(&mut Packet::new_unchecked(&mut b[..]));
            b
        })
        .collect();
    sfc_corpus(0x5eed_0102, &seeds, fuzz::gff, |b| {
        Packet::new_checked(b).is_ok_and(|p| Repr::parse(&p).is_ok())
    });
}

#[test]
fn gre_corpus() {
    use svcroute_stack::wire::gre::{Packet, ProtocolType, Repr};
    let seeds: Vec<Vec<u8>> = [true, false]
        .iter()
        .map(|&checksum| {
            let repr = Repr {
                protocol_type: ProtocolType::Nsh,
                checksum,
            };
            let mut b = nsh_seeds()[0].clone();
            b.splice(0..0, vec![0; repr.buffer_len()]);
            let mut p = Packet::new_unchecked(&mut b[..]);
            repr.emit(&mut p);
            p.fill_checksum();
            b
        })
        .collect();
    sfc_corpus(0x5eed_0103, &seeds, fuzz::gre, |b| {
        Packet::new_checked(b).is_ok_and(|p| Repr::parse(&p).is_ok())
    });
}

#[test]
fn vxlan_gpe_corpus() {
    use svcroute_stack::wire::vxlan_gpe::{NextProtocol, Packet, Repr, Vni};
    let repr = Repr {
        next_protocol: NextProtocol::Nsh,
        vni: Vni::new(0x12_3456).unwrap(),
        bum: false,
        oam: true,
    };
    let mut b = nsh_seeds()[1].clone();
    b.splice(0..0, [0; 8]);
    repr.emit(&mut Packet::new_unchecked(&mut b[..]));
    sfc_corpus(0x5eed_0104, &[b], fuzz::vxlan_gpe, |b| {
        Packet::new_checked(b).is_ok_and(|p| Repr::parse(&p).is_ok())
    });
}

#[test]
fn nr_corpus() {
    use svcroute_stack::wire::gff::{MessageType, PathId};
    use svcroute_stack::wire::nr::*;
    let id = |v| NsffId::new(v).unwrap();
    let fqdn = [Tlv::Fqdn("svc.example.org")];
    let reverse = [Tlv::ReversePath(PathId::link(9))];
    let ids = [1, 2, ALL_NSFFS];
    let reprs = [
        Repr::Registration(Registration {
            deregister: false,
            hash: hash_fqdn("svc.example.org"),
            nsff_id: id(1),
            tlvs: Tlvs::new(&fqdn).unwrap(),
        }),
        Repr::PathRequest(PathRequest {
            hash: 0xbeef,
            requester: id(2),
            tlvs: Tlvs::new(&fqdn).unwrap(),
        }),
        Repr::PathResponse(PathResponse {
            hash: 0xbeef,
            resolution: Some(Resolution {
                serving: id(3),
                forward: PathId::link(4).with(5),
            }),
            tlvs: Tlvs::new(&reverse).unwrap(),
        }),
        Repr::PathUpdate(PathUpdate {
            kind: UpdateKind::NsffIds,
            ids: Ids::new(&ids).unwrap(),
            tlvs: Tlvs::EMPTY,
        }),
        Repr::LinkEvent(LinkEvent {
            link_id: 7,
            state: LinkState::Down,
            tlvs: Tlvs::EMPTY,
        }),
        Repr::LinkHello(LinkHello {
            sender: 1,
            link_id: 2,
            seq: 3,
            tlvs: Tlvs::EMPTY,
        }),
    ];
    let seeds: Vec<Vec<u8>> = reprs
        .iter()
        .flat_map(|r| {
            let t = r.message_type();
            let mut b = vec![0; r.buffer_len()];
            r.emit(&mut b);
            let mut signed = b.clone();
            append_auth(&mut signed, t, 2, b"secret");
            [b, signed].map(|m| [vec![u8::from(t)], m].concat())
        })
        .collect();
    sfc_corpus(0x5eed_0105, &seeds, fuzz::nr, |b| {
        b.split_first()
            .is_some_and(|(&t, m)| Repr::parse(MessageType::from(t & 0x0f), m).is_ok())
    });
}

#[test]
fn nsff_corpus() {
    use svcroute_stack::wire::gff::PathId;
    use svcroute_stack::wire::nr::NsffId;
    use svcroute_stack::wire::nsff::*;
    let data = DataRepr {
        seq: 7,
        window: 16,
        txn: Txn::new(NsffId::new(3).unwrap(), 9),
        response: false,
        open: Some(Open {
            origin: NsffId::new(3).unwrap(),
            reverse: PathId::link(1).with(2),
        }),
    };
    let mut seeds = Vec::new();
    for repr in [data, DataRepr { open: None, ..data }] {
        let mut b = vec![0; repr.buffer_len(5)];
        repr.emit(&mut DataPacket::new_unchecked(&mut b[..]), b"GET /");
        seeds.push([vec![0x00], b].concat());
    }
    let nack = NackRepr {
        txn: data.txn,
        seqs: Seqs::new(&[1, 2, 5]).unwrap(),
    };
    let mut b = vec![0; nack.buffer_len()];
    nack.emit(&mut NackPacket::new_unchecked(&mut b[..]));
    seeds.push([vec![0x01], b].concat());
    sfc_corpus(0x5eed_0106, &seeds, fuzz::nsff, |b| {
        let Some((&sel, rest)) = b.split_first() else {
            return false;
        };
        if sel & 1 == 1 {
            return NackPacket::new_checked(rest).is_ok_and(|p| NackRepr::parse(&p).is_ok());
        }
        let mut fixed = rest.to_vec();
        let Ok(mut p) = DataPacket::new_checked(&mut fixed[..]) else {
            return false;
        };
        p.fill_checksum();
        DataRepr::parse(&DataPacket::new_unchecked(&fixed[..])).is_ok()
    });
}

#[test]
fn rosa_corpus() {
    use svcroute_stack::wire::rosa::*;
    let name: ServiceName = "service.org/video".parse().unwrap();
    let mut seeds = Vec::new();
    for kind in 1..=4 {
        let mut msg = Message::new(MessageKind::from(kind));
        msg.set(Entry::Client("fd00::1".parse().unwrap()));
        msg.set(Entry::Ingress("10.0.0.1".parse().unwrap()));
        msg.set(Entry::Service(name.clone()));
        msg.set(Entry::Port(FlowPort {
            proto: smoltcp::wire::IpProtocol::Tcp,
            port: 80,
        }));
        msg.set(Entry::Instance("fd00::9".parse().unwrap()));
        msg.set(Entry::Constraint(Constraints(vec![
            Constraint::ModePolicy {
                mode: Mode::Scheduling,
                policy: Policy::Weighted,
            },
            Constraint::LifetimeS(30),
        ])));
        seeds.push(msg.to_bytes().unwrap());
        msg.sign(2, b"secret", "fd00::9".parse().unwrap()).unwrap();
        seeds.push(msg.to_bytes().unwrap());
    }
    sfc_corpus(0x5eed_0201, &seeds, fuzz::rosa, |b| {
        Message::from_bytes(b).is_ok()
    });
}

#[test]
fn sticky_corpus() {
    use svcroute_stack::wire::sticky::*;
    let seeds: Vec<Vec<u8>> = [
        StickyDst::egress("fd00::a".parse().unwrap()),
        StickyDst(vec![
            StickyTlv::Egress("10.0.0.7".parse().unwrap()),
            StickyTlv::Apn6(Apn6Id {
                level: 1,
                service_id: 2,
                flow_id: 3,
            }),
        ]),
    ]
    .iter()
    .map(|o| o.to_bytes().unwrap())
    .collect();
    sfc_corpus(0x5eed_0202, &seeds, fuzz::sticky, |b| {
        StickyDst::parse(b).is_ok()
    });
}

#[test]
fn appmetrics_corpus() {
    use svcroute_stack::wire::appmetrics::*;
    let m = AppMetrics::new(vec![
        Metric::AggregatedLoad {
            period_s: 10,
            index: 7,
        },
        Metric::RawLoad(RawLoad {
            period_s: 10,
            to_packets: 1,
            from_packets: 2,
            to_bytes: 3,
            from_bytes: 4,
        }),
        Metric::Capacity(100),
        Metric::Preference(1),
    ])
    .unwrap();
    let one = AppMetrics::new(vec![Metric::Capacity(5)]).unwrap();
    sfc_corpus(
        0x5eed_0203,
        &[m.to_bytes(), one.to_bytes()],
        fuzz::appmetrics,
        |b| AppMetrics::parse(b).is_ok(),
    );
}

#[test]
fn igp_corpus() {
    use svcroute_stack::wire::igp::*;
    use svcroute_stack::wire::rosa::Constraints;
    let hello = Message::Hello(Hello {
        router_id: RouterId(1),
        seq: 2,
        sent_at_us: 1000,
        neighbors: vec![HelloEcho {
            router_id: RouterId(2),
            seq: 1,
            sent_at_us: 5,
            held_us: 10,
        }],
    });
    let lsa = Message::Lsa(Lsa {
        origin: RouterId(9),
        part: 0,
        seq: 3,
        age: 1,
        body: LsaBody::Services(vec![ServiceAnnouncement {
            name: "service.org".parse().unwrap(),
            instance: "fd00::9".parse().unwrap(),
            constraints: Constraints::default(),
            lifetime_s: 30,
        }]),
    });
    let ack = Message::LsAck(LsAck {
        router_id: RouterId(3),
        acks: vec![LsaHeader {
            origin: RouterId(9),
            kind: LsaKind::Services,
            part: 0,
            seq: 3,
        }],
    });
    let mut seeds = Vec::new();
    for m in [hello, lsa, ack] {
        seeds.push(m.encode(None).unwrap());
        seeds.push(m.encode(Some((2, b"secret"))).unwrap());
    }
    sfc_corpus(0x5eed_0204, &seeds, fuzz::igp, |b| {
        Message::decode(b, |_| None).is_ok()
    });
}
