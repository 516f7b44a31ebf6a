//! TLS SNI passthrough in the simulator: a client connects to nSFF1's port
//! 443 and sends a ClientHello naming `www.example2.com`; nSFF1 resolves the
//! name at the NR and relays the whole TCP session over one transaction to
//! nSFF2, which connects to the SF's TLS port. The two [`Peer`]s play TLS as
//! far as a relay can tell: the server answers the hello with a "flight",
//! the client then sends more, which the server echoes, and each side's
//! close reaches the other as a half-close. Every byte must arrive
//! unmodified, in both directions, with and without loss on the fabric.
//!
//! ```text
//!   client ─┐                                               ┌─ tls2 (www.example2.com :443)
//!   tls1 ───┴ c ── nSFF1 ── n1 ── F1 ── lossy ── F2 ── n2 ── nSFF2 ── s
//!   (www.example.com :8443, local)  │
//!                                   NR
//! ```

use smoltcp::iface::SocketHandle;
use smoltcp::socket::tcp;
use smoltcp::time::Duration;
use smoltcp::wire::{IpAddress, IpListenEndpoint};
use svcroute_fwd::{Fwd, FwdConfig};
use svcroute_nr::config::{AttachConfig, LinkConfig, NsffAttachConfig};
use svcroute_nr::{Nr, NrConfig};
use svcroute_nsff::{Nsff, NsffConfig, SfConfig};
use svcroute_stack::runtime::{Context, Node, PortConfig, Role};
use svcroute_stack::sim::{self, NodeId, SegmentConfig, SegmentId, Sim, SimLink};

/// The alert nSFF1 answers an unknown name with (fatal, unrecognized_name).
const UNRECOGNIZED_NAME: [u8; 7] = [0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x70];

/// One end of a pretend TLS session (see the module doc).
#[derive(Debug, Default)]
struct Peer {
    /// Client: where to connect. Server: `None`, listens on `port`.
    target: Option<IpAddress>,
    port: u16,
    sock: Option<SocketHandle>,
    /// Client: the ClientHello. Server: its length (what comes before the
    /// echoed part).
    hello: Vec<u8>,
    hello_len: usize,
    /// Octets of the server's answer to the hello.
    flight_len: usize,
    /// Client: what it sends once the whole flight is in.
    tail: Vec<u8>,
    out: Vec<u8>,
    rx: Vec<u8>,
    queued_tail: bool,
    queued_flight: bool,
    /// We closed our direction.
    closed: bool,
    /// The peer closed its direction.
    eof: bool,
}

fn flight(n: usize) -> Vec<u8> {
    (0..n).map(|k| (k * 7 % 251) as u8).collect()
}

impl Role for Peer {
    fn name(&self) -> &'static str {
        "peer"
    }

    fn start(&mut self, cx: &mut Context<'_>) {
        let mut s = tcp::Socket::new(
            tcp::SocketBuffer::new(vec![0; 65536]),
            tcp::SocketBuffer::new(vec![0; 65536]),
        );
        match self.target {
            Some(addr) => {
                s.connect(cx.ports[0].iface.context(), (addr, self.port), 40000)
                    .unwrap();
                self.out = self.hello.clone();
            }
            None => s
                .listen(IpListenEndpoint {
                    addr: None,
                    port: self.port,
                })
                .unwrap(),
        }
        self.sock = Some(cx.ports[0].sockets.add(s));
    }

    fn poll(&mut self, cx: &mut Context<'_>) -> bool {
        let Some(h) = self.sock else {
            return false;
        };
        let s = cx.ports[0].sockets.get_mut::<tcp::Socket>(h);
        let mut any = false;
        let mut buf = [0u8; 4096];
        while s.can_recv() {
            let n = s.recv_slice(&mut buf).unwrap();
            self.rx.extend_from_slice(&buf[..n]);
            any = true;
            if self.target.is_none() && self.rx.len() > self.hello_len {
                // Server: echo what follows the hello (after the flight).
                let from = self.rx.len() - n;
                let echo = &self.rx[from.max(self.hello_len)..];
                if self.queued_flight {
                    self.out.extend_from_slice(echo);
                }
            }
        }
        if self.target.is_none() && !self.queued_flight && self.rx.len() >= self.hello_len {
            self.queued_flight = true;
            let mut f = flight(self.flight_len);
            f.extend_from_slice(&self.rx[self.hello_len..]);
            f.append(&mut self.out);
            self.out = f;
            any = true;
        }
        if self.target.is_some() && !self.queued_tail && self.rx.len() >= self.flight_len {
            self.queued_tail = true;
            self.out.extend_from_slice(&self.tail);
            any = true;
        }
        if !self.out.is_empty() && s.can_send() {
            let n = s.send_slice(&self.out).unwrap();
            self.out.drain(..n);
            any |= n > 0;
        }
        let peer_closed = matches!(
            s.state(),
            tcp::State::CloseWait | tcp::State::LastAck | tcp::State::TimeWait | tcp::State::Closed
        ) && !s.can_recv();
        if peer_closed && !self.eof {
            self.eof = true;
            any = true;
        }
        // The client closes after its tail; the server after the client.
        let may_close = if self.target.is_some() {
            self.queued_tail
        } else {
            self.eof && self.queued_flight
        };
        if may_close && self.out.is_empty() && !self.closed && s.may_send() {
            s.close();
            self.closed = true;
            any = true;
        }
        any
    }

    fn poll_at(&self, now: smoltcp::time::Instant) -> Option<smoltcp::time::Instant> {
        (!self.out.is_empty()).then(|| now + Duration::from_millis(10))
    }
}

/// A ClientHello (TLS 1.3 shape) naming `name`, in one record.
fn client_hello(name: &str) -> Vec<u8> {
    let mut body = vec![0x03, 0x03];
    body.extend_from_slice(&[0xa5; 32]);
    body.push(0);
    body.extend_from_slice(&[0x00, 0x02, 0x13, 0x01, 0x01, 0x00]);
    let n = name.len() as u16;
    let mut sni = vec![0x00, 0x00];
    sni.extend_from_slice(&(n + 5).to_be_bytes());
    sni.extend_from_slice(&(n + 3).to_be_bytes());
    sni.push(0);
    sni.extend_from_slice(&n.to_be_bytes());
    sni.extend_from_slice(name.as_bytes());
    // supported_versions: TLS 1.3.
    let mut exts = sni;
    exts.extend_from_slice(&[0x00, 0x2b, 0x00, 0x03, 0x02, 0x03, 0x04]);
    body.extend_from_slice(&(exts.len() as u16).to_be_bytes());
    body.extend_from_slice(&exts);
    let mut hs = vec![0x01, 0x00];
    hs.extend_from_slice(&(body.len() as u16).to_be_bytes());
    hs.extend_from_slice(&body);
    let mut rec = vec![0x16, 0x03, 0x01];
    rec.extend_from_slice(&(hs.len() as u16).to_be_bytes());
    rec.extend_from_slice(&hs);
    rec
}

fn nr_config() -> NrConfig {
    let attach = |nsff, at: &str, link_in, link_out| NsffAttachConfig {
        nsff,
        at: at.into(),
        link_in,
        link_out,
    };
    let link = |from: &str, to: &str, id| LinkConfig {
        from: from.into(),
        to: to.into(),
        id,
    };
    NrConfig {
        rest_port: 0,
        self_attach: Some(AttachConfig {
            at: "f1".into(),
            link_in: 0,
            link_out: 1,
        }),
        attach: vec![attach(1, "f1", 2, 3), attach(2, "f2", 4, 5)],
        links: vec![link("f1", "f2", 10), link("f2", "f1", 11)],
        ..NrConfig::default()
    }
}

fn fabric_port(sim: &mut Sim, seg: SegmentId, host: u8) -> (PortConfig, SimLink) {
    let subnet = seg.0 as u8;
    let cfg = PortConfig {
        addrs: Vec::new(),
        ..sim::port_config(&format!("f{subnet}"), subnet, host)
    };
    (cfg, sim.attach(seg))
}

type PeerId = NodeId<Node<SimLink, Peer>>;
type NsffNode = NodeId<Node<SimLink, Nsff>>;

struct World {
    sim: Sim,
    client: PeerId,
    /// The SF behind nSFF2 (`www.example2.com`) and the local one at nSFF1
    /// (`www.example.com`).
    tls2: PeerId,
    tls1: PeerId,
    nsff1: NsffNode,
    nsff2: NsffNode,
}

fn sf(fqdn: &str, addr: smoltcp::wire::Ipv4Address, tls_port: u16) -> SfConfig {
    SfConfig {
        fqdn: fqdn.into(),
        addr: std::net::Ipv4Addr::from(addr.octets()).into(),
        port: 80,
        tls_port,
    }
}

/// The world; the client asks for `name` and, once the server's
/// `flight_len` octets are in, sends `tail_len` more and closes.
fn world(seed: u64, loss: f64, name: &str, flight_len: usize, tail_len: usize) -> World {
    world_hello(seed, loss, client_hello(name), flight_len, tail_len)
}

/// [`world`], the client's first bytes `hello`.
fn world_hello(seed: u64, loss: f64, hello: Vec<u8>, flight_len: usize, tail_len: usize) -> World {
    let mut sim = Sim::new(seed);
    let s_nr = sim.add_segment(SegmentConfig::default());
    let s_n1 = sim.add_segment(SegmentConfig::default());
    let s_lossy = sim.add_segment(SegmentConfig {
        loss,
        ..SegmentConfig::default()
    });
    let s_n2 = sim.add_segment(SegmentConfig::default());
    let s_c = sim.add_segment(SegmentConfig::default());
    let s_sf = sim.add_segment(SegmentConfig::default());
    let fwds = [
        (
            "f1",
            1,
            vec![(s_nr, 100), (s_n1, 100), (s_lossy, 100)],
            vec![0, 2, 10],
        ),
        ("f2", 2, vec![(s_lossy, 101), (s_n2, 101)], vec![11, 4]),
    ];
    for (name, id, segs, links) in fwds {
        let ports: Vec<_> = segs
            .into_iter()
            .map(|(s, h)| fabric_port(&mut sim, s, h))
            .collect();
        let cfg = FwdConfig {
            node_id: id,
            link_ids: links,
            ..FwdConfig::default()
        };
        let macs: Vec<_> = ports.iter().map(|(c, _)| c.mac).collect();
        sim.add_role(name, ports, Fwd::new(&cfg, &macs).unwrap());
    }
    let nr_port = fabric_port(&mut sim, s_nr, 1);
    sim.add_role("nr", vec![nr_port], Nr::new(nr_config()).unwrap());

    let tls1_addr = sim::ipv4(s_c.0 as u8, 3);
    let n1 = NsffConfig {
        nsff_id: 1,
        link_in: 2,
        link_out: 3,
        nr_links: vec![3, 0],
        health_interval_ms: 0,
        sf: vec![sf("www.example.com", tls1_addr, 8443)],
        ..NsffConfig::default()
    };
    let ports = vec![fabric_port(&mut sim, s_n1, 1), sim.port(s_c, 1)];
    let nsff1 = sim.add_role("nsff1", ports, Nsff::new(n1).unwrap());
    let tls2_addr = sim::ipv4(s_sf.0 as u8, 2);
    let n2 = NsffConfig {
        nsff_id: 2,
        link_in: 4,
        link_out: 5,
        nr_links: vec![5, 11, 0],
        health_interval_ms: 0,
        sf: vec![sf("www.example2.com", tls2_addr, 443)],
        ..NsffConfig::default()
    };
    let ports = vec![fabric_port(&mut sim, s_n2, 1), sim.port(s_sf, 1)];
    let nsff2 = sim.add_role("nsff2", ports, Nsff::new(n2).unwrap());

    let server = |port| Peer {
        port,
        hello_len: hello.len(),
        flight_len,
        ..Peer::default()
    };
    let p = sim.port(s_sf, 2);
    let tls2 = sim.add_role("tls2", vec![p], server(443));
    let p = sim.port(s_c, 3);
    let tls1 = sim.add_role("tls1", vec![p], server(8443));
    // The client starts after the names are registered.
    sim.run_for(Duration::from_millis(500)).unwrap();
    let p = sim.port(s_c, 2);
    let client = sim.add_role(
        "client",
        vec![p],
        Peer {
            target: Some(sim::ipv4(s_c.0 as u8, 1).into()),
            port: 443,
            hello: hello.clone(),
            flight_len,
            tail: (0..tail_len).map(|k| (k % 253) as u8).collect(),
            ..Peer::default()
        },
    );
    World {
        sim,
        client,
        tls2,
        tls1,
        nsff1,
        nsff2,
    }
}

/// Run until the client has seen the server close (or fail).
fn run(w: &mut World) {
    let client = w.client;
    w.sim
        .drive_bounded(Duration::from_secs(600), 50_000_000, |s| {
            s.node(client).role().eof
        })
        .unwrap();
    // Let the last FINs, acknowledgements and end markers arrive.
    w.sim.run_for(Duration::from_secs(2)).unwrap();
}

#[track_caller]
fn assert_relayed(w: &World, server: PeerId, flight_len: usize, tail_len: usize) {
    let c = w.sim.node(w.client).role();
    let s = w.sim.node(server).role();
    let mut want_up = c.hello.clone();
    want_up.extend_from_slice(&c.tail);
    assert_eq!(s.rx.len(), want_up.len(), "octets at the server");
    assert!(s.rx == want_up, "the server got other bytes");
    let mut want_down = flight(flight_len);
    want_down.extend_from_slice(&c.tail);
    assert_eq!(c.rx.len(), flight_len + tail_len, "octets at the client");
    assert!(c.rx == want_down, "the client got other bytes");
    // Each side's close reached the other.
    assert!(s.eof && s.closed && c.eof && c.closed);
}

#[test]
fn a_tls_session_crosses_the_chain_in_one_transaction() {
    let mut w = world(1, 0.0, "www.example2.com", 20_000, 5_000);
    run(&mut w);
    assert_relayed(&w, w.tls2, 20_000, 5_000);
    let n1 = w.sim.node(w.nsff1).stats();
    let n2 = w.sim.node(w.nsff2).stats();
    assert_eq!(n1.get("nsff.tls_sessions_remote"), 1, "{n1:?}");
    assert_eq!(n1.get("nsff.tls_completed"), 1, "{n1:?}");
    assert_eq!(n1.get("nsff.tls_closed"), 1, "{n1:?}");
    assert_eq!(n1.get("nsff.tls_bytes_down"), 25_000);
    let up = w.sim.node(w.client).role().hello.len() as u64 + 5_000;
    assert_eq!(n1.get("nsff.tls_bytes_up"), up);
    // One transaction for the whole session, in each direction.
    assert_eq!(w.sim.node(w.nsff1).role().endpoint().stats().opened, 1);
    assert_eq!(w.sim.node(w.nsff2).role().endpoint().stats().accepted, 1);
    assert_eq!(n2.get("nsff.egress_tls_sessions"), 1, "{n2:?}");
    assert_eq!(n2.get("nsff.txns_closed"), 1, "{n2:?}");
    // Not HTTP on either side.
    assert_eq!(n1.get("nsff.requests"), 0);
    assert_eq!(n2.get("nsff.egress_requests"), 0);
}

#[test]
fn a_large_tls_session_at_10_percent_loss() {
    let mut w = world(2, 0.10, "www.example2.com", 300_000, 200_000);
    run(&mut w);
    assert_relayed(&w, w.tls2, 300_000, 200_000);
    let n1 = w.sim.node(w.nsff1).role().endpoint().totals();
    let n2 = w.sim.node(w.nsff2).role().endpoint().totals();
    assert!(n1.retransmits + n2.retransmits + n1.rto_retransmits + n2.rto_retransmits > 0);
    assert_eq!(w.sim.node(w.nsff1).stats().get("nsff.tls_completed"), 1);
}

#[test]
fn a_local_name_goes_to_the_local_sf_tls_port() {
    let mut w = world(3, 0.0, "www.example.com", 10_000, 3_000);
    run(&mut w);
    assert_relayed(&w, w.tls1, 10_000, 3_000);
    let n1 = w.sim.node(w.nsff1).stats();
    assert_eq!(n1.get("nsff.tls_sessions_local"), 1, "{n1:?}");
    assert_eq!(n1.get("nsff.tls_completed"), 1, "{n1:?}");
    assert_eq!(w.sim.node(w.nsff1).role().endpoint().stats().opened, 0);
}

#[test]
fn an_unknown_name_gets_an_alert_and_a_close() {
    let mut w = world(4, 0.0, "www.nowhere.example", 100, 0);
    run(&mut w);
    let c = w.sim.node(w.client).role();
    assert_eq!(c.rx, UNRECOGNIZED_NAME);
    let n1 = w.sim.node(w.nsff1).stats();
    assert_eq!(n1.get("nsff.tls_unknown_name"), 1, "{n1:?}");
    assert_eq!(n1.get("nsff.tls_completed"), 0, "{n1:?}");
    assert!(w.sim.node(w.tls2).role().rx.is_empty());
}

#[test]
fn same_seed_same_trace() {
    let hash = |seed| {
        let mut w = world(seed, 0.1, "www.example2.com", 50_000, 10_000);
        run(&mut w);
        assert_relayed(&w, w.tls2, 50_000, 10_000);
        w.sim.trace_hash()
    };
    assert_eq!(hash(7), hash(7));
}

#[test]
fn plain_http_on_443_is_closed_without_an_answer() {
    let mut w = world_hello(
        5,
        0.0,
        b"GET / HTTP/1.1\r\nHost: www.example2.com\r\n\r\n".to_vec(),
        10,
        0,
    );
    run(&mut w);
    assert!(w.sim.node(w.client).role().rx.is_empty());
    let n1 = w.sim.node(w.nsff1).stats();
    assert_eq!(n1.get("nsff.tls_not_tls"), 1, "{n1:?}");
    assert_eq!(n1.get("nsff.tls_sessions"), 0, "{n1:?}");
    assert_eq!(w.sim.node(w.nsff1).role().endpoint().stats().opened, 0);
}

#[test]
fn a_hello_without_sni_gets_missing_extension() {
    // The same hello with the server_name extension's type changed to an
    // unknown one (0xfafa, a GREASE value).
    let mut hello = client_hello("www.example2.com");
    let at = hello
        .windows(4)
        .position(|w| w == [0x00, 0x00, 0x00, 0x15])
        .unwrap();
    hello[at..at + 2].copy_from_slice(&[0xfa, 0xfa]);
    let mut w = world_hello(6, 0.0, hello, 10, 0);
    run(&mut w);
    let c = w.sim.node(w.client).role();
    assert_eq!(c.rx, [0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 109]);
    let n1 = w.sim.node(w.nsff1).stats();
    assert_eq!(n1.get("nsff.tls_no_sni"), 1, "{n1:?}");
}
