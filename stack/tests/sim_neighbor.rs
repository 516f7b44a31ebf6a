//! The neighbour assist (`stack::neighbor`) against smoltcp's one address
//! request per second per interface, on the simulator's virtual clock:
//! - a node that greets four neighbours at once reaches all of them within
//!   milliseconds when it resolves them through `Context::resolve`, and
//!   only after three seconds when it leaves resolution to smoltcp;
//! - a node busy resolving an absent neighbour answers a client that still
//!   has the node's MAC cached (the node restarted) at once and without
//!   asking for the client's address: the client's own packet taught it.
//!
//! Both over IPv4 (ARP) and IPv6 (NDP).

use smoltcp::iface::SocketHandle;
use smoltcp::phy::ChecksumCapabilities;
use smoltcp::socket::udp;
use smoltcp::time::{Duration, Instant};
use smoltcp::wire::{
    ArpPacket, EthernetFrame, EthernetProtocol, EthernetRepr, IpAddress, IpEndpoint, IpProtocol,
    IpRepr, Ipv4Address, Ipv6Packet, UdpPacket, UdpRepr,
};
use svcroute_stack::phy::Link;
use svcroute_stack::runtime::{Context, Node, Role};
use svcroute_stack::sim::{self, SegmentConfig, Sim, SimLink, SimNode};

const PORT: u16 = 7;

/// Sends one datagram to each target at `send_at` (resolving them first
/// when `resolve`), records what it receives, and echoes it when `echo`.
struct Greeter {
    targets: Vec<IpAddress>,
    send_at: Duration,
    resolve: bool,
    echo: bool,
    sock: Option<SocketHandle>,
    /// Greetings leave from their own socket: smoltcp's UDP send queue is
    /// FIFO, so a datagram to a neighbour that never answers would hold
    /// back the echoes behind it.
    greet: Option<SocketHandle>,
    start: Option<Instant>,
    sent: bool,
    got: Vec<(IpEndpoint, Instant)>,
}

impl Greeter {
    fn new(targets: Vec<IpAddress>, send_at: Duration, resolve: bool, echo: bool) -> Self {
        Self {
            targets,
            send_at,
            resolve,
            echo,
            sock: None,
            greet: None,
            start: None,
            sent: false,
            got: Vec::new(),
        }
    }
}

impl Role for Greeter {
    fn name(&self) -> &'static str {
        "greeter"
    }

    fn start(&mut self, cx: &mut Context<'_>) {
        let buf = || udp::PacketBuffer::new(vec![udp::PacketMetadata::EMPTY; 16], vec![0; 16 * 64]);
        let mut s = udp::Socket::new(buf(), buf());
        s.bind(PORT).unwrap();
        self.sock = Some(cx.ports[0].sockets.add(s));
        let mut g = udp::Socket::new(buf(), buf());
        g.bind(PORT + 1).unwrap();
        self.greet = Some(cx.ports[0].sockets.add(g));
        self.start = Some(cx.now);
    }

    fn poll(&mut self, cx: &mut Context<'_>) -> bool {
        let (Some(h), Some(g), Some(start)) = (self.sock, self.greet, self.start) else {
            return false;
        };
        let mut any = false;
        if !self.sent && cx.now >= start + self.send_at {
            self.sent = true;
            any = true;
            for t in self.targets.clone() {
                if self.resolve {
                    cx.resolve(0, t);
                }
                let s = cx.ports[0].sockets.get_mut::<udp::Socket>(g);
                s.send_slice(b"hello", IpEndpoint::new(t, PORT)).unwrap();
            }
        }
        for handle in [h, g] {
            let s = cx.ports[0].sockets.get_mut::<udp::Socket>(handle);
            while let Ok((data, meta)) = s.recv() {
                let data = data.to_vec();
                any = true;
                self.got.push((meta.endpoint, cx.now));
                if self.echo {
                    s.send_slice(&data, meta.endpoint).unwrap();
                }
            }
        }
        any
    }

    fn poll_at(&self, _now: Instant) -> Option<Instant> {
        match (self.sent, self.start) {
            (false, Some(s)) => Some(s + self.send_at),
            _ => None,
        }
    }
}

type GreeterId = sim::NodeId<Node<SimLink, Greeter>>;

fn addr(v6: bool, host: u8) -> IpAddress {
    if v6 {
        IpAddress::Ipv6(sim::ipv6(0, host))
    } else {
        IpAddress::Ipv4(sim::ipv4(0, host))
    }
}

/// Virtual time from the start until each of four neighbours got the
/// greeting of host 1.
fn greet_four(v6: bool, resolve: bool) -> Vec<Duration> {
    let mut sim = Sim::new(7);
    let seg = sim.add_segment(SegmentConfig::default());
    let t0 = sim.now();
    let targets = (2..=5).map(|h| addr(v6, h)).collect();
    let port = sim.port(seg, 1);
    let _sender = sim.add_role(
        "sender",
        vec![port],
        Greeter::new(targets, Duration::ZERO, resolve, false),
    );
    let peers: Vec<GreeterId> = (2..=5)
        .map(|h| {
            let port = sim.port(seg, h);
            sim.add_role(
                &format!("peer{h}"),
                vec![port],
                Greeter::new(Vec::new(), Duration::ZERO, false, false),
            )
        })
        .collect();
    sim.drive_bounded(Duration::from_secs(30), 1_000_000, |s| {
        peers.iter().all(|p| !s.node(*p).role().got.is_empty())
    })
    .expect("every neighbour is greeted");
    peers
        .iter()
        .map(|p| sim.node(*p).role().got[0].1 - t0)
        .collect()
}

#[test]
fn resolving_through_the_assist_reaches_many_neighbours_at_once() {
    for v6 in [false, true] {
        let assisted = greet_four(v6, true);
        assert!(
            assisted.iter().all(|d| *d < Duration::from_millis(100)),
            "v6={v6}: {assisted:?}"
        );
        // The limit the assist works around: smoltcp alone asks for one
        // neighbour per second.
        let alone = greet_four(v6, false);
        let last = alone.iter().max().unwrap();
        assert!(*last >= Duration::from_secs(3), "v6={v6}: {alone:?}");
    }
}

/// A kernel-like client whose neighbour entry for the server is still
/// cached (the server restarted): it sends one UDP datagram straight to the
/// server's MAC at `send_at`, never answers ARP or NDP, and records when the
/// echo arrives and how often the server asked for its address.
struct CachedClient {
    link: SimLink,
    v6: bool,
    send_at: Instant,
    sent: bool,
    echo_at: Option<Instant>,
    asked: usize,
}

impl CachedClient {
    fn ip(&self, host: u8) -> IpAddress {
        addr(self.v6, host)
    }

    fn datagram(&self) -> Vec<u8> {
        let (src, dst) = (self.ip(2), self.ip(1));
        let udp = UdpRepr {
            src_port: PORT,
            dst_port: PORT,
        };
        let payload = b"hello";
        let ip = IpRepr::new(
            src,
            dst,
            IpProtocol::Udp,
            udp.header_len() + payload.len(),
            64,
        );
        let mut buf = vec![0; 14 + ip.buffer_len() + udp.header_len() + payload.len()];
        EthernetRepr {
            src_addr: sim::mac(0, 2),
            dst_addr: sim::mac(0, 1),
            ethertype: if self.v6 {
                EthernetProtocol::Ipv6
            } else {
                EthernetProtocol::Ipv4
            },
        }
        .emit(&mut EthernetFrame::new_unchecked(&mut buf[..]));
        let caps = ChecksumCapabilities::default();
        ip.emit(&mut buf[14..], &caps);
        let at = 14 + ip.header_len();
        udp.emit(
            &mut UdpPacket::new_unchecked(&mut buf[at..]),
            &src,
            &dst,
            payload.len(),
            |p| p.copy_from_slice(payload),
            &caps,
        );
        buf
    }

    /// Whether `frame` is a request for our address (ARP or NS).
    fn asks_for_us(&self, frame: &[u8]) -> bool {
        let Ok(eth) = EthernetFrame::new_checked(frame) else {
            return false;
        };
        match eth.ethertype() {
            EthernetProtocol::Arp => ArpPacket::new_checked(eth.payload()).is_ok_and(|a| {
                IpAddress::from(Ipv4Address::from(
                    <[u8; 4]>::try_from(a.target_protocol_addr()).unwrap(),
                )) == self.ip(2)
            }),
            EthernetProtocol::Ipv6 => Ipv6Packet::new_checked(eth.payload()).is_ok_and(|p| {
                let IpAddress::Ipv6(me) = self.ip(2) else {
                    return false;
                };
                p.next_header() == IpProtocol::Icmpv6
                    && p.payload().first() == Some(&135)
                    && p.payload().get(8..24) == Some(&me.octets()[..])
            }),
            _ => false,
        }
    }

    fn is_echo(frame: &[u8]) -> bool {
        frame.len() > 14 && frame.ends_with(b"hello") && frame[0..6] == sim::mac(0, 2).0
    }
}

impl SimNode for CachedClient {
    fn poll(&mut self, now: Instant) -> std::io::Result<bool> {
        let mut any = false;
        if !self.sent && now >= self.send_at {
            self.sent = true;
            any = true;
            let f = self.datagram();
            self.link.send(&f)?;
        }
        let mut buf = vec![0; 2048];
        while let Some(n) = self.link.recv(&mut buf)? {
            any = true;
            let f = &buf[..n];
            if self.asks_for_us(f) {
                self.asked += 1;
            } else if Self::is_echo(f) && self.echo_at.is_none() {
                self.echo_at = Some(now);
            }
        }
        Ok(any)
    }

    fn poll_at(&mut self, _now: Instant) -> Option<Instant> {
        (!self.sent).then_some(self.send_at)
    }

    fn name(&self) -> &str {
        "cached-client"
    }
}

#[test]
fn a_node_resolving_an_absent_neighbour_answers_a_client_it_never_asked_for() {
    for v6 in [false, true] {
        let mut sim = Sim::new(9);
        let seg = sim.add_segment(SegmentConfig::default());
        let port = sim.port(seg, 1);
        // The server keeps smoltcp busy asking for host 99, which never
        // answers, and echoes whatever it receives.
        let server = sim.add_role(
            "server",
            vec![port],
            Greeter::new(vec![addr(v6, 99)], Duration::ZERO, false, true),
        );
        let send_at = sim.now() + Duration::from_millis(10);
        let link = sim.attach(seg);
        let client = sim.add_node(CachedClient {
            link,
            v6,
            send_at,
            sent: false,
            echo_at: None,
            asked: 0,
        });
        sim.drive_bounded(Duration::from_secs(10), 1_000_000, |s| {
            s.node(client).echo_at.is_some()
        })
        .expect("the echo comes back");
        let c = sim.node(client);
        // The server learnt the client's MAC from the datagram itself: it
        // answered without asking (the client would never have told it).
        assert_eq!(c.asked, 0, "v6={v6}");
        assert!(
            c.echo_at.unwrap() - send_at < Duration::from_millis(100),
            "v6={v6}"
        );
        assert_eq!(
            sim.node(server).stats().get("neighbor.gleaned"),
            1,
            "v6={v6}"
        );
    }
}
