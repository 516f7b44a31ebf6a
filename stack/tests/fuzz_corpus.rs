//! Runs the fuzz target bodies (`svcroute_stack::wire::fuzz`) over a
//! deterministic corpus on stable, so CI exercises them without nightly and
//! cargo-fuzz. Inputs: pure random bytes, and mutations (byte flips,
//! truncation, splices) of well-formed seeds.

use etherparse::{IpHeaders, IpNumber, Ipv4Header, Ipv6Extensions, Ipv6FlowLabel, Ipv6Header};
use etherparse::{Ipv6RawExtHeader, PacketBuilder};
use svcroute_stack::shim::edit;
use svcroute_stack::wire::fuzz;
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
            _ => panic!("{name}: regression files are named <target>-<what>.bin"),
        }
        seen += 1;
    }
    assert!(seen > 0);
}
