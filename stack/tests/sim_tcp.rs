//! TCP between two real nodes (smoltcp over the node loop) on a simulated
//! segment: byte-exact echo transfers under loss, reordering, partitions and
//! MTU trouble, deterministic per seed.

use smoltcp::iface::SocketHandle;
use smoltcp::socket::tcp;
use smoltcp::time::{Duration, Instant};
use smoltcp::wire::IpAddress;
use svcroute_stack::runtime::{Context, Node, Role};
use svcroute_stack::sim::{
    self, NodeId, SegmentConfig, SegmentId, Sim, SimError, SimErrorKind, SimLink,
};

const ECHO_PORT: u16 = 7;
const BUF: usize = 64 * 1024;

/// The byte at offset `i` of the client's stream. It repeats only every
/// 512 KiB, so a duplicated, dropped or misplaced segment shows.
fn pattern(i: usize) -> u8 {
    (i.wrapping_mul(31) ^ (i >> 11)) as u8
}

fn tcp_socket() -> tcp::Socket<'static> {
    tcp::Socket::new(
        tcp::SocketBuffer::new(vec![0; BUF]),
        tcp::SocketBuffer::new(vec![0; BUF]),
    )
}

/// Listens on [`ECHO_PORT`] and sends everything back, then closes.
///
/// Store-and-forward (the default) holds the echo until the client's FIN, so
/// at any time data flows one way only. Full duplex echoes as bytes arrive —
/// which smoltcp 0.14 cannot always survive under loss (see
/// `full_duplex_echo_under_loss`).
#[derive(Default)]
struct EchoServer {
    full_duplex: bool,
    handle: Option<SocketHandle>,
    stream: Vec<u8>,
    echoed: usize,
}

impl Role for EchoServer {
    fn name(&self) -> &'static str {
        "echo-server"
    }

    fn start(&mut self, cx: &mut Context<'_>) {
        let mut s = tcp_socket();
        s.listen(ECHO_PORT).expect("listen");
        self.handle = Some(cx.ports[0].sockets.add(s));
    }

    fn poll(&mut self, cx: &mut Context<'_>) -> bool {
        let Some(h) = self.handle else { return false };
        let s = cx.ports[0].sockets.get_mut::<tcp::Socket<'_>>(h);
        let before = (self.stream.len(), self.echoed);
        while s.can_recv() {
            let stream = &mut self.stream;
            s.recv(|buf| {
                stream.extend_from_slice(buf);
                (buf.len(), ())
            })
            .expect("recv");
        }
        let echo_now = self.full_duplex || !s.may_recv();
        while echo_now && s.can_send() && self.echoed < self.stream.len() {
            self.echoed += s.send_slice(&self.stream[self.echoed..]).expect("send");
        }
        if !s.may_recv() && s.may_send() && self.echoed == self.stream.len() {
            s.close();
        }
        (self.stream.len(), self.echoed) != before
    }
}

/// Connects to the server, sends `total` patterned bytes, checks the echo.
struct EchoClient {
    server: IpAddress,
    total: usize,
    handle: Option<SocketHandle>,
    sent: usize,
    received: usize,
    first_mismatch: Option<usize>,
    done_at: Option<Instant>,
}

impl EchoClient {
    fn new(server: IpAddress, total: usize) -> Self {
        Self {
            server,
            total,
            handle: None,
            sent: 0,
            received: 0,
            first_mismatch: None,
            done_at: None,
        }
    }

    fn done(&self) -> bool {
        self.done_at.is_some()
    }
}

impl Role for EchoClient {
    fn name(&self) -> &'static str {
        "echo-client"
    }

    fn start(&mut self, cx: &mut Context<'_>) {
        let port = &mut cx.ports[0];
        let mut s = tcp_socket();
        s.connect(port.iface.context(), (self.server, ECHO_PORT), 49152)
            .expect("connect");
        self.handle = Some(port.sockets.add(s));
    }

    fn poll(&mut self, cx: &mut Context<'_>) -> bool {
        let Some(h) = self.handle else { return false };
        let s = cx.ports[0].sockets.get_mut::<tcp::Socket<'_>>(h);
        let before = (self.sent, self.received);
        while s.can_send() && self.sent < self.total {
            let (sent, total) = (self.sent, self.total);
            self.sent += s
                .send(|buf| {
                    let n = buf.len().min(total - sent);
                    for (i, b) in buf[..n].iter_mut().enumerate() {
                        *b = pattern(sent + i);
                    }
                    (n, n)
                })
                .expect("send");
        }
        while s.can_recv() {
            let (received, mismatch) = (self.received, &mut self.first_mismatch);
            self.received += s
                .recv(|buf| {
                    if mismatch.is_none() {
                        *mismatch = buf
                            .iter()
                            .enumerate()
                            .find(|&(i, &b)| b != pattern(received + i))
                            .map(|(i, _)| received + i);
                    }
                    (buf.len(), buf.len())
                })
                .expect("recv");
        }
        if self.sent == self.total && s.may_send() {
            // Half-close: the server echoes what it has, then closes too.
            s.close();
        }
        if self.received >= self.total && self.done_at.is_none() {
            self.done_at = Some(cx.now);
        }
        (self.sent, self.received) != before
    }
}

type ClientNode = Node<SimLink, EchoClient>;
type ServerNode = Node<SimLink, EchoServer>;

struct World {
    sim: Sim,
    lan: SegmentId,
    client: NodeId<ClientNode>,
    server: NodeId<ServerNode>,
}

/// What [`world`] builds.
struct Setup {
    seed: u64,
    segment: SegmentConfig,
    bytes: usize,
    v6: bool,
    full_duplex: bool,
}

impl Default for Setup {
    fn default() -> Self {
        Self {
            seed: 1,
            segment: SegmentConfig::default(),
            bytes: 64 * 1024,
            v6: false,
            full_duplex: false,
        }
    }
}

/// A client (host 1) and an echo server (host 2) on one segment.
fn world(setup: Setup) -> World {
    let mut sim = Sim::new(setup.seed);
    let lan = sim.add_segment(setup.segment);
    let server_ip = if setup.v6 {
        IpAddress::Ipv6(sim::ipv6(0, 2))
    } else {
        IpAddress::Ipv4(sim::ipv4(0, 2))
    };
    let port = sim.port(lan, 1);
    let client = sim.add_role(
        "client",
        vec![port],
        EchoClient::new(server_ip, setup.bytes),
    );
    let port = sim.port(lan, 2);
    let server = EchoServer {
        full_duplex: setup.full_duplex,
        ..EchoServer::default()
    };
    let server = sim.add_role("server", vec![port], server);
    World {
        sim,
        lan,
        client,
        server,
    }
}

impl World {
    fn client(&self) -> &EchoClient {
        self.sim.node(self.client).role()
    }

    /// Drive until the client has its whole echo back.
    fn finish(&mut self) -> Result<Instant, SimError> {
        let client = self.client;
        self.sim
            .drive_bounded(Duration::from_secs(600), 200_000, |s| {
                s.node(client).role().done()
            })
    }

    #[track_caller]
    fn assert_byte_exact(&self) {
        let c = self.client();
        assert_eq!(c.first_mismatch, None, "echo differs");
        assert_eq!((c.sent, c.received), (c.total, c.total));
        assert_eq!(self.sim.node(self.server).role().echoed, c.total);
    }
}

fn lossy() -> SegmentConfig {
    SegmentConfig {
        loss: 0.1,
        jitter: Duration::from_micros(300),
        reorder: 0.05,
        ..SegmentConfig::default()
    }
}

#[test]
fn clean_segment_transfer_is_byte_exact() {
    let mut w = world(Setup {
        bytes: 1 << 20,
        ..Setup::default()
    });
    w.finish().unwrap();
    w.assert_byte_exact();
    let s = w.sim.stats(w.lan);
    assert_eq!(
        (s.lost, s.reordered, s.too_big, s.partitioned),
        (0, 0, 0, 0)
    );
    assert!(s.delivered > 2 * (1 << 20) / 1460, "{s:?}");
}

#[test]
fn clean_segment_full_duplex_echo() {
    let mut w = world(Setup {
        bytes: 256 * 1024,
        full_duplex: true,
        ..Setup::default()
    });
    w.finish().unwrap();
    w.assert_byte_exact();
}

#[test]
fn ipv6_transfer_with_neighbour_discovery() {
    let mut w = world(Setup {
        v6: true,
        ..Setup::default()
    });
    w.finish().unwrap();
    w.assert_byte_exact();
}

#[test]
fn lossy_reordering_segment_transfer_completes() {
    for seed in 1..=8 {
        let mut w = world(Setup {
            seed,
            segment: lossy(),
            bytes: 128 * 1024,
            ..Setup::default()
        });
        w.finish().unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        w.assert_byte_exact();
        let s = w.sim.stats(w.lan);
        assert!(s.lost > 10 && s.reordered > 2, "seed {seed}: {s:?}");
    }
}

/// smoltcp 0.14 can deadlock a full-duplex stream under loss: after an RTO
/// both ends rewind their send sequence, so each end's ACKs carry a sequence
/// number below what the other has already received; the other drops them as
/// out of window without reading their acknowledgement, and both retransmit
/// every 60 s forever. With seed 11 this happens after ~38 KB. Run with
/// `--ignored` to check a smoltcp upgrade.
#[test]
#[ignore = "smoltcp 0.14 full-duplex deadlock after RTO under loss"]
fn full_duplex_echo_under_loss() {
    let mut w = world(Setup {
        seed: 11,
        segment: lossy(),
        bytes: 128 * 1024,
        full_duplex: true,
        ..Setup::default()
    });
    w.finish().unwrap();
    w.assert_byte_exact();
}

#[test]
fn same_seed_same_run_other_seed_other_run() {
    let run = |seed| {
        let mut w = world(Setup {
            seed,
            segment: lossy(),
            bytes: 128 * 1024,
            ..Setup::default()
        });
        w.sim.record_trace(true);
        let t = w.finish().unwrap();
        w.assert_byte_exact();
        let trace = w.sim.trace().to_vec();
        (t, w.sim.trace_hash(), trace)
    };
    let (t1, h1, trace1) = run(11);
    let (t2, h2, trace2) = run(11);
    let (_, h3, trace3) = run(12);
    assert_eq!(t1, t2, "completion time differs for the same seed");
    assert_eq!(h1, h2);
    assert!(trace1 == trace2, "traces differ for the same seed");
    assert_ne!(h1, h3, "another seed gave the same run");
    assert!(trace1 != trace3);
}

#[test]
fn partition_stops_delivery_and_healing_resumes_it() {
    let mut w = world(Setup {
        seed: 3,
        bytes: 512 * 1024,
        ..Setup::default()
    });
    let server = w.server;
    w.sim
        .drive_bounded(Duration::from_secs(60), 100_000, |s| {
            s.node(server).role().stream.len() >= 64 * 1024
        })
        .unwrap();
    let a = w.sim.node(w.client).links()[0].port();
    let b = w.sim.node(w.server).links()[0].port();
    let cut = w.sim.partition(&[a], &[b]);
    // Let frames already in flight land.
    w.sim.run_for(Duration::from_millis(50)).unwrap();
    let got = w.sim.node(server).role().stream.len();
    let before = w.sim.stats(w.lan);
    w.sim.run_for(Duration::from_secs(10)).unwrap();
    let during = w.sim.stats(w.lan);
    assert_eq!(
        w.sim.node(server).role().stream.len(),
        got,
        "bytes crossed a partition"
    );
    assert_eq!(during.delivered, before.delivered);
    assert!(during.partitioned > before.partitioned, "nobody even tried");

    w.sim.heal(cut);
    w.finish().unwrap();
    w.assert_byte_exact();
    assert!(w.sim.stats(w.lan).delivered > during.delivered);
}

#[test]
fn mtu_too_small_for_the_ports_is_counted_and_never_completes() {
    let mut w = world(Setup {
        segment: SegmentConfig {
            mtu: 1000,
            ..SegmentConfig::default()
        },
        bytes: 32 * 1024,
        ..Setup::default()
    });
    let client = w.client;
    let e = w
        .sim
        .drive_bounded(Duration::from_secs(30), 100_000, |s| {
            s.node(client).role().done()
        })
        .unwrap_err();
    assert!(matches!(e.kind, SimErrorKind::TimeLimit), "{e}");
    let s = w.sim.stats(w.lan);
    assert!(s.too_big > 0, "{s:?}");
    // ARP and the handshake fit; full-size segments do not.
    assert!(s.delivered > 0);
    assert_eq!(w.sim.node(w.server).role().stream.len(), 0);
}

#[test]
fn total_loss_fails_instead_of_hanging() {
    let mut w = world(Setup {
        segment: SegmentConfig {
            loss: 1.0,
            ..SegmentConfig::default()
        },
        bytes: 1024,
        ..Setup::default()
    });
    let e = w.finish().unwrap_err();
    assert!(matches!(e.kind, SimErrorKind::TimeLimit), "{e}");
    let msg = e.to_string();
    assert!(
        msg.contains("virtual time") && msg.contains("steps"),
        "{msg}"
    );
    assert_eq!(w.sim.stats(w.lan).delivered, 0);
}
