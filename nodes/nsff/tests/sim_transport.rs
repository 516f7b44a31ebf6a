//! The nSFF transport end to end over real fwd switches in the simulator,
//! with loss on the fabric link between the switches.
//!
//! ```text
//!            link 0 ◂ / 1 ▸ (F1's ports)      link 2 ◂ / 3 ▸ (F2's ports)
//!   A ─── s0 ─── F1 ────────── s1 (lossy) ────────── F2 ─── s2 ─── B
//! ```
//!
//! F1 = [s0: link 0, s1: link 1], F2 = [s1: link 2, s2: link 3]:
//! A → B is links 1 | 3, B → A is links 2 | 0.
//!
//! A (nSFF 1) runs transactions one after the other: it opens each toward B,
//! streams the request, finishes, and reads the response. B (nSFF 2) reads
//! each request and answers on the same transaction with every byte XOR
//! 0x5a (so a 10 MB request gets a 10 MB response).

use smoltcp::time::{Duration, Instant};
use smoltcp::wire::EthernetAddress;
use svcroute_fwd::core::gff_frame;
use svcroute_fwd::{Fwd, FwdConfig};
use svcroute_nsff::transport::{Endpoint, Event, TransportConfig, TxnStats};
use svcroute_stack::runtime::{Context, FrameContext, Node, PortConfig, Role};
use svcroute_stack::shim::{Direction, Verdict};
use svcroute_stack::sim::{self, NodeId, SegmentConfig, Sim, SimLink};
use svcroute_stack::wire::gff::{self, PathId};
use svcroute_stack::wire::nr::NsffId;
use svcroute_stack::wire::nsff::Txn;

fn path(links: &[u8]) -> PathId {
    links.iter().fold(PathId::ZERO, |p, &l| p.with(l))
}

fn gen(len: usize, salt: u32) -> Vec<u8> {
    let mut x = u64::from(salt) * 0x9e37_79b9 + 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn xform(b: &[u8]) -> Vec<u8> {
    b.iter().map(|b| b ^ 0x5a).collect()
}

/// One transaction of the client.
#[derive(Debug)]
struct Job {
    request: Vec<u8>,
    txn: Option<Txn>,
    sent: usize,
    response: Vec<u8>,
    started: Option<Instant>,
    done: Option<Instant>,
}

/// A server-side transaction: request so far, response once the request
/// ended, octets of it sent.
type Served = (Txn, Vec<u8>, Option<Vec<u8>>, usize);

/// What an endpoint node does with its transactions.
enum App {
    Client { jobs: Vec<Job>, current: usize },
    Server { open: Vec<Served> },
}

/// A test node: one port, one transport endpoint, one app.
struct TNode {
    ep: Endpoint,
    to_peer: PathId,
    from_peer: PathId,
    mac: EthernetAddress,
    app: App,
    failures: Vec<Event>,
}

impl TNode {
    fn run_app(&mut self, now: Instant) {
        let mut buf = vec![0; 64 * 1024];
        while let Some(ev) = self.ep.poll_event() {
            match ev {
                Event::Opened { txn, .. } => {
                    if let App::Server { open } = &mut self.app {
                        open.push((txn, Vec::new(), None, 0));
                    }
                }
                Event::Failed { .. } => self.failures.push(ev),
                _ => {}
            }
        }
        match &mut self.app {
            App::Client { jobs, current } => {
                let Some(job) = jobs.get_mut(*current) else {
                    return;
                };
                let txn = match job.txn {
                    Some(t) => t,
                    None => {
                        let Ok(t) = self.ep.open(now, self.to_peer, self.from_peer) else {
                            return;
                        };
                        job.txn = Some(t);
                        job.started = Some(now);
                        t
                    }
                };
                if job.sent < job.request.len() {
                    if let Ok(n) = self.ep.send(now, txn, &job.request[job.sent..]) {
                        job.sent += n;
                    }
                }
                if job.sent == job.request.len() {
                    let _ = self.ep.finish(now, txn);
                }
                while let Ok(Some(n)) = self.ep.recv(now, txn, &mut buf) {
                    if n == 0 {
                        job.done = Some(now);
                        *current += 1;
                        break;
                    }
                    job.response.extend_from_slice(&buf[..n]);
                }
            }
            App::Server { open } => {
                for (txn, req, resp, sent) in open.iter_mut() {
                    while let Ok(Some(n)) = self.ep.recv(now, *txn, &mut buf) {
                        if n == 0 {
                            if resp.is_none() {
                                *resp = Some(xform(req));
                            }
                            break;
                        }
                        req.extend_from_slice(&buf[..n]);
                    }
                    if let Some(r) = resp {
                        if *sent < r.len() {
                            if let Ok(n) = self.ep.send(now, *txn, &r[*sent..]) {
                                *sent += n;
                            }
                        }
                        if *sent == r.len() {
                            let _ = self.ep.finish(now, *txn);
                        }
                    }
                }
            }
        }
    }

    fn flush(&mut self, cx: &mut Context<'_>) -> bool {
        let mut any = false;
        while let Some(t) = self.ep.poll_transmit() {
            let frame = gff_frame(
                EthernetAddress::BROADCAST,
                self.mac,
                t.path,
                t.msg_type,
                gff::HOP_LIMIT,
                &t.payload,
            );
            cx.out.inject(0, Direction::ToWire, frame);
            any = true;
        }
        any
    }
}

impl Role for TNode {
    fn name(&self) -> &'static str {
        "transport-test"
    }

    fn start(&mut self, cx: &mut Context<'_>) {
        self.run_app(cx.now);
        self.flush(cx);
    }

    fn poll(&mut self, cx: &mut Context<'_>) -> bool {
        if self.ep.poll_timeout().is_some_and(|t| t <= cx.now) {
            self.ep.handle_timeout(cx.now);
        }
        self.run_app(cx.now);
        self.flush(cx)
    }

    fn poll_at(&self, _now: Instant) -> Option<Instant> {
        self.ep.poll_timeout()
    }

    fn validate_ingress(&self) -> bool {
        false
    }

    fn ingress(&mut self, cx: &mut FrameContext<'_>, _port: usize, frame: &mut Vec<u8>) -> Verdict {
        if frame.len() >= 54 && frame[12..14] == [0x86, 0xdd] && frame[20] == gff::NEXT_HEADER {
            if let Ok(p) = gff::Packet::new_checked(&frame[54..]) {
                if let Ok(r) = gff::Repr::parse(&p) {
                    // Hellos and anything else not transport are ignored.
                    let _ = self
                        .ep
                        .handle_packet(cx.now, r.path_id, r.msg_type, p.payload());
                }
            }
        }
        // Data is handled at the next poll (the sim polls every node each step).
        self.run_app(cx.now);
        while let Some(t) = self.ep.poll_transmit() {
            let frame = gff_frame(
                EthernetAddress::BROADCAST,
                self.mac,
                t.path,
                t.msg_type,
                gff::HOP_LIMIT,
                &t.payload,
            );
            cx.out.inject(0, Direction::ToWire, frame);
        }
        Verdict::Consume
    }

    fn egress(&mut self, _cx: &mut FrameContext<'_>, _port: usize, _f: &mut Vec<u8>) -> Verdict {
        Verdict::Consume
    }
}

type TN = NodeId<Node<SimLink, TNode>>;

struct World {
    sim: Sim,
    a: TN,
    b: TN,
}

fn port(sim: &mut Sim, seg: sim::SegmentId, host: u8) -> (PortConfig, SimLink) {
    let subnet = seg.0 as u8;
    let cfg = PortConfig {
        addrs: Vec::new(),
        ..sim::port_config(&format!("s{subnet}"), subnet, host)
    };
    (cfg, sim.attach(seg))
}

fn world(seed: u64, loss: f64, sizes: &[usize]) -> World {
    let mut sim = Sim::new(seed);
    let s0 = sim.add_segment(SegmentConfig::default());
    let s1 = sim.add_segment(SegmentConfig {
        loss,
        ..SegmentConfig::default()
    });
    let s2 = sim.add_segment(SegmentConfig::default());
    for (name, id, ports, links) in [
        (
            "f1",
            1,
            vec![port(&mut sim, s0, 1), port(&mut sim, s1, 1)],
            [0, 1],
        ),
        (
            "f2",
            2,
            vec![port(&mut sim, s1, 2), port(&mut sim, s2, 2)],
            [2, 3],
        ),
    ] {
        let cfg = FwdConfig {
            node_id: id,
            link_ids: links.to_vec(),
            ..FwdConfig::default()
        };
        let macs: Vec<EthernetAddress> = ports.iter().map(|(c, _)| c.mac).collect();
        sim.add_role(name, ports, Fwd::new(&cfg, &macs).unwrap());
    }
    let pa = port(&mut sim, s0, 10);
    let pb = port(&mut sim, s2, 11);
    let tcfg = TransportConfig::default();
    let jobs = sizes
        .iter()
        .enumerate()
        .map(|(i, &len)| Job {
            request: gen(len, i as u32),
            txn: None,
            sent: 0,
            response: Vec::new(),
            started: None,
            done: None,
        })
        .collect();
    let a = TNode {
        ep: Endpoint::new(NsffId::new(1).unwrap(), tcfg.clone(), 0).unwrap(),
        to_peer: path(&[1, 3]),
        from_peer: path(&[2, 0]),
        mac: pa.0.mac,
        app: App::Client { jobs, current: 0 },
        failures: Vec::new(),
    };
    let b = TNode {
        ep: Endpoint::new(NsffId::new(2).unwrap(), tcfg, 0).unwrap(),
        to_peer: path(&[2, 0]),
        from_peer: path(&[1, 3]),
        mac: pb.0.mac,
        app: App::Server { open: Vec::new() },
        failures: Vec::new(),
    };
    let a = sim.add_role("a", vec![pa], a);
    let b = sim.add_role("b", vec![pb], b);
    World { sim, a, b }
}

/// Per run: virtual time of each transaction and both endpoints' counters.
struct Outcome {
    times: Vec<Duration>,
    a: TxnStats,
    b: TxnStats,
    hash: u64,
}

fn run(seed: u64, loss: f64, sizes: &[usize]) -> Outcome {
    let mut w = world(seed, loss, sizes);
    let a = w.a;
    let finished = |s: &Sim| match &s.node(a).role().app {
        App::Client { jobs, current } => *current == jobs.len(),
        App::Server { .. } => false,
    };
    let r = w
        .sim
        .drive_bounded(Duration::from_secs(3600), 200_000_000, finished);
    let an = w.sim.node(w.a).role();
    let bn = w.sim.node(w.b).role();
    assert!(
        r.is_ok(),
        "seed {seed} loss {loss}: {r:?}; a failures {:?} b failures {:?}",
        an.failures,
        bn.failures
    );
    assert!(an.failures.is_empty() && bn.failures.is_empty());
    let App::Client { jobs, .. } = &an.app else {
        unreachable!()
    };
    let App::Server { open } = &bn.app else {
        unreachable!()
    };
    assert_eq!(open.len(), jobs.len());
    let mut times = Vec::new();
    for (job, (_, req, _, _)) in jobs.iter().zip(open) {
        assert!(req == &job.request, "request bytes differ");
        assert!(job.response == xform(&job.request), "response bytes differ");
        times.push(job.done.unwrap() - job.started.unwrap());
    }
    Outcome {
        times,
        a: an.ep.totals(),
        b: bn.ep.totals(),
        hash: w.sim.trace_hash(),
    }
}

const SMALL: usize = 200;
const BIG: usize = 10 * 1024 * 1024;

fn report(name: &str, loss: f64, o: &Outcome) {
    eprintln!(
        "{name} loss {:.0}%: times {:?}; A retransmits {} (rto {}) cwnd cuts {}; B retransmits {} (rto {}) cwnd cuts {}",
        loss * 100.0,
        o.times,
        o.a.retransmits,
        o.a.rto_retransmits,
        o.a.cwnd_cuts,
        o.b.retransmits,
        o.b.rto_retransmits,
        o.b.cwnd_cuts,
    );
}

#[test]
fn small_and_10mb_transactions_without_loss() {
    let o = run(1, 0.0, &[SMALL, BIG]);
    report("lossless", 0.0, &o);
    assert_eq!(o.a.retransmits + o.b.retransmits, 0);
}

#[test]
fn small_and_10mb_transactions_at_10_percent_loss() {
    let o = run(2, 0.10, &[SMALL, BIG, SMALL]);
    report("10%", 0.10, &o);
    assert!(
        o.a.retransmits > 0 && o.b.retransmits > 0,
        "NACK retransmissions in both directions"
    );
}

#[test]
fn small_and_10mb_transactions_at_30_percent_loss() {
    let o = run(3, 0.30, &[SMALL, BIG, SMALL]);
    report("30%", 0.30, &o);
    assert!(
        o.a.retransmits > 0 && o.b.retransmits > 0,
        "NACK retransmissions in both directions"
    );
}

#[test]
fn same_seed_same_trace() {
    let sizes = [SMALL, 300_000, SMALL];
    let (x, y, z) = (
        run(7, 0.3, &sizes),
        run(7, 0.3, &sizes),
        run(8, 0.3, &sizes),
    );
    assert_eq!(x.hash, y.hash);
    assert_eq!(x.times, y.times);
    assert_ne!(x.hash, z.hash);
}
