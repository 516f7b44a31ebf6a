// Over 800 lines: the node loop, its ports and the Role trait it drives are one room.
//! The single-threaded node loop.
//!
//! A [`Node`] owns one or more [`Port`]s — a [`Link`] plus a smoltcp
//! [`Interface`] and [`SocketSet`] — and one [`Role`], the protocol logic. One
//! call of [`Node::poll`] does all the work that is due at `now`, in bounded
//! steps:
//!
//! 1. drain every link (up to [`RX_BUDGET`] frames per port) through the
//!    role's ingress shim into the port's queue device;
//! 2. repeat until quiet (at most [`MAX_ROUNDS`] rounds): `iface.poll` on every
//!    port, let the role react to sockets and timers, execute what the role
//!    injected, push smoltcp's output through the egress shim onto the links.
//!
//! [`Node::poll_at`] tells when the next call is due. The same `Node` runs
//! under the real driver ([`run`]: `poll(2)` on the link fds and the control
//! socket, signals, wall-clock time) and under the simulator
//! ([`crate::sim`]: virtual time), which is what makes whole topologies
//! testable deterministically.

use std::fs::File;
use std::io;
use std::os::fd::RawFd;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration as StdDuration;

use serde_json::{json, Value};
use smoltcp::iface::{Config, Interface, PollResult, SocketSet};
use smoltcp::time::{Duration, Instant};
use smoltcp::wire::{EthernetAddress, HardwareAddress, IpAddress, IpCidr};

use crate::ctl::{ControlServer, Request, SerialControl};
use crate::neighbor::{Action, Neighbors};
use crate::phy::impair::Shape;
use crate::phy::queue::QueueDevice;
use crate::phy::Link;
use crate::shim::{Direction, Outbox, Verdict};
use crate::stats::Counters;

/// Frames taken from one link per [`Node::poll`] call.
pub const RX_BUDGET: usize = 512;
/// Rounds of `iface.poll` → role → flush per [`Node::poll`] call.
pub const MAX_ROUNDS: usize = 16;

/// Static configuration of one port.
#[derive(Debug, Clone)]
pub struct PortConfig {
    /// Port name, unique within the node (e.g. `eth0`).
    pub name: String,
    /// The port's MAC address.
    pub mac: EthernetAddress,
    /// Addresses with prefix length.
    pub addrs: Vec<IpCidr>,
    /// Default gateways (at most one IPv4 and one IPv6).
    pub gateways: Vec<IpAddress>,
    /// IP MTU announced to smoltcp.
    pub mtu: usize,
    /// Limit on TCP segments smoltcp sends per poll, if any.
    pub max_burst: Option<usize>,
    /// Seed of smoltcp's random numbers (TCP initial sequence numbers,
    /// ephemeral ports, IP IDs). `None` derives it from the port name and
    /// MAC: reproducible, for simulations. A real node passes fresh
    /// randomness so a restarted node does not reuse its previous
    /// incarnation's sequence numbers on the same ports (RFC 6528).
    pub random_seed: Option<u64>,
}

/// The smoltcp half of a port: what a role touches.
pub struct PortStack {
    /// Port name.
    pub name: String,
    /// The smoltcp interface of this port.
    pub iface: Interface,
    /// Sockets bound to this port's interface.
    pub sockets: SocketSet<'static>,
    /// The default gateways configured on this port.
    pub gateways: Vec<IpAddress>,
    neighbors: Neighbors,
    ephemeral_port: u16,
    dev: QueueDevice,
}

impl PortStack {
    fn new(cfg: &PortConfig, now: Instant) -> Self {
        let mut dev = QueueDevice::new(cfg.mtu);
        dev.set_max_burst(cfg.max_burst);
        let mut icfg = Config::new(HardwareAddress::Ethernet(cfg.mac));
        icfg.random_seed = cfg
            .random_seed
            .unwrap_or_else(|| seed_from(&cfg.name, cfg.mac));
        // RFC 6056: ephemeral ports start at a random point of 49152..=65535.
        let ephemeral_port = 49_152 + (icfg.random_seed.rotate_left(17) % 16_384) as u16;
        let mut iface = Interface::new(icfg, &mut dev, now);
        iface.update_ip_addrs(|a| {
            for cidr in &cfg.addrs {
                // NOTE: capacity is checked by config validation (MAX_ADDRS).
                if a.push(*cidr).is_err() {
                    log::warn!("port {}: address {cidr} over capacity, ignored", cfg.name);
                }
            }
        });
        for gw in &cfg.gateways {
            let r = match gw {
                IpAddress::Ipv4(v4) => iface.routes_mut().add_default_ipv4_route(*v4).map(drop),
                IpAddress::Ipv6(v6) => iface.routes_mut().add_default_ipv6_route(*v6).map(drop),
            };
            if r.is_err() {
                log::warn!("port {}: route via {gw} over capacity, ignored", cfg.name);
            }
        }
        Self {
            name: cfg.name.clone(),
            iface,
            sockets: SocketSet::new(Vec::new()),
            gateways: cfg.gateways.clone(),
            neighbors: Neighbors::new(cfg.mac),
            ephemeral_port,
            dev,
        }
    }

    /// Where a role should start allocating local ports for the connections
    /// it opens (49152..=65535). Drawn from the port's random seed, so a
    /// restarted node does not reopen its previous incarnation's 4-tuples,
    /// which peers may still hold as established (RFC 6056); reproducible in
    /// simulations.
    pub fn ephemeral_port(&self) -> u16 {
        self.ephemeral_port
    }

    /// The neighbour assist's table of this port (see [`crate::neighbor`]).
    pub fn neighbors(&self) -> &Neighbors {
        &self.neighbors
    }
}

/// Maximum number of addresses on one port (smoltcp feature
/// `iface-max-addr-count-8`).
pub const MAX_ADDRS: usize = 8;

fn seed_from(name: &str, mac: EthernetAddress) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in name.bytes().chain(mac.0) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x100_0000_01b3);
    }
    h
}

/// One port: a link plus its smoltcp stack.
pub struct Port<L> {
    /// The smoltcp side.
    pub stack: PortStack,
    /// The device side.
    pub link: L,
}

/// What a role sees while it reacts to sockets and timers.
pub struct Context<'a> {
    /// The current time.
    pub now: Instant,
    /// Every port's smoltcp side, in configuration order.
    pub ports: &'a mut [PortStack],
    /// The node's counters.
    pub stats: &'a mut Counters,
    /// Frames to inject.
    pub out: &'a mut Outbox,
    /// Answers to control requests the role deferred ([`ControlReply::Later`]).
    pub replies: &'a mut Vec<(u64, Value)>,
}

impl Context<'_> {
    /// Make sure smoltcp on port `port` can reach `addr` (or the gateway
    /// toward it) without waiting out its one-request-per-second limit: the
    /// neighbour assist tells smoltcp a binding it already knows, or sends
    /// its own ARP request / Neighbor Solicitation (at most one per
    /// neighbour per second). Call it before talking to a neighbour, e.g.
    /// before opening a connection to a peer. See [`crate::neighbor`].
    pub fn resolve(&mut self, port: usize, addr: IpAddress) {
        let Some(p) = self.ports.get_mut(port) else {
            return;
        };
        let action = p
            .neighbors
            .resolve(self.now, addr, p.iface.ip_addrs(), &p.gateways);
        match action {
            Action::ToStack(frame) => {
                self.stats.bump("neighbor.told");
                p.dev.rx.push_back(frame);
            }
            Action::ToWire(frame) => {
                self.stats.bump("neighbor.asked");
                p.dev.tx.push_back(frame);
            }
            Action::OffLink => self.stats.bump("neighbor.off_link"),
            Action::None | Action::Waiting => {}
        }
    }
}

/// What a role sees while its shim handles one frame.
pub struct FrameContext<'a> {
    /// The current time.
    pub now: Instant,
    /// The node's counters.
    pub stats: &'a mut Counters,
    /// Frames to inject.
    pub out: &'a mut Outbox,
}

/// A role's answer to a control request.
#[derive(Debug)]
pub enum ControlReply {
    /// The answer, now.
    Now(Value),
    /// The role answers later through [`Context::replies`] with the request id.
    Later,
    /// The role does not know this command.
    Unknown,
}

/// The protocol logic of a node, driven by [`Node`].
///
/// Call order, per [`Node::poll`]: [`Role::ingress`] for every received frame,
/// [`Role::poll`] once if any frame arrived (before smoltcp sees them), then
/// rounds of (smoltcp poll, [`Role::poll`], [`Role::egress`] for every frame
/// smoltcp produced). [`Role::poll_at`] is asked before the node sleeps.
/// [`Role::start`] runs once before the first poll, [`Role::stop`] once when
/// the node is told to stop.
pub trait Role {
    /// The role's name (`host`, `sar`, ...).
    fn name(&self) -> &'static str;

    /// Create sockets and arm timers. Called once before the first poll.
    fn start(&mut self, cx: &mut Context<'_>);

    /// React to socket readiness and due timers. Returns whether anything
    /// happened (so the loop runs another round).
    fn poll(&mut self, cx: &mut Context<'_>) -> bool;

    /// When the role next needs [`Role::poll`] without any I/O.
    fn poll_at(&self, _now: Instant) -> Option<Instant> {
        None
    }

    /// Look at a frame received on `port` before smoltcp does.
    fn ingress(
        &mut self,
        _cx: &mut FrameContext<'_>,
        _port: usize,
        _frame: &mut Vec<u8>,
    ) -> Verdict {
        Verdict::Pass
    }

    /// Look at a frame smoltcp sends on `port` before the link does.
    fn egress(
        &mut self,
        _cx: &mut FrameContext<'_>,
        _port: usize,
        _frame: &mut Vec<u8>,
    ) -> Verdict {
        Verdict::Pass
    }

    /// Answer a role-specific control command (`args[0]` is the command).
    fn control(&mut self, _cx: &mut Context<'_>, _id: u64, _args: &[String]) -> ControlReply {
        ControlReply::Unknown
    }

    /// Bytes the role's egress shim may add to a packet smoltcp sends (e.g.
    /// a Destination Options header). The node announces an MTU smaller by
    /// this much to smoltcp, so edited packets still fit the link.
    fn header_reserve(&self) -> usize {
        0
    }

    /// Whether the node checks every received frame's structure (Ethernet,
    /// IP and transport header lengths) before the role's ingress sees it,
    /// dropping and counting malformed frames by reason. Endpoints want this;
    /// a role that forwards protocols smoltcp does not know turns it off.
    fn validate_ingress(&self) -> bool {
        true
    }

    /// Whether the role is ready to serve (reported by `ctl ping`).
    fn is_ready(&self) -> bool {
        true
    }

    /// Close sockets and flush state before the node exits.
    fn stop(&mut self, _cx: &mut Context<'_>) {}
}

/// A node: ports, a role, counters.
pub struct Node<L, R> {
    name: String,
    ports: Vec<PortStack>,
    links: Vec<L>,
    role: R,
    stats: Counters,
    out: Outbox,
    replies: Vec<(u64, Value)>,
    started: bool,
    scratch: Vec<u8>,
}

/// The role's view of a node at `now`: a [`Context`] borrowing the node's
/// fields (a macro, so the role itself stays borrowable beside it).
macro_rules! context {
    ($node:ident, $now:expr) => {
        Context {
            now: $now,
            ports: &mut $node.ports,
            stats: &mut $node.stats,
            out: &mut $node.out,
            replies: &mut $node.replies,
        }
    };
}

impl<L: Link, R: Role> Node<L, R> {
    /// Build a node from its ports and role at time `now`.
    pub fn new(
        name: impl Into<String>,
        ports: Vec<(PortConfig, L)>,
        role: R,
        now: Instant,
    ) -> Self {
        let reserve = role.header_reserve();
        let (stacks, links) = ports
            .into_iter()
            .map(|(mut cfg, link)| {
                cfg.mtu = cfg.mtu.saturating_sub(reserve).max(1280);
                (PortStack::new(&cfg, now), link)
            })
            .unzip();
        Self {
            name: name.into(),
            ports: stacks,
            links,
            role,
            stats: Counters::default(),
            out: Outbox::default(),
            replies: Vec::new(),
            started: false,
            scratch: Vec::new(),
        }
    }

    /// The node's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The role.
    pub fn role(&self) -> &R {
        &self.role
    }

    /// The role, mutably (for tests and drivers that feed it commands).
    pub fn role_mut(&mut self) -> &mut R {
        &mut self.role
    }

    /// The node's counters.
    pub fn stats(&self) -> &Counters {
        &self.stats
    }

    /// The ports' smoltcp sides.
    pub fn ports(&self) -> &[PortStack] {
        &self.ports
    }

    /// The links.
    pub fn links(&self) -> &[L] {
        &self.links
    }

    /// Do everything due at `now`. Returns whether anything happened; an `Err`
    /// is a link I/O failure (the node should stop).
    pub fn poll(&mut self, now: Instant) -> io::Result<bool> {
        let mut any = false;
        if !self.started {
            self.started = true;
            self.role.start(&mut context!(self, now));
            any = true;
        }
        if self.drain_links(now)? {
            any = true;
            // Before smoltcp sees what arrived, the role may prepare for it
            // (e.g. arm a listening socket per SYN its ingress counted).
            self.role.poll(&mut context!(self, now));
        }
        for _ in 0..MAX_ROUNDS {
            let mut progress = false;
            for p in &mut self.ports {
                if p.iface.poll(now, &mut p.dev, &mut p.sockets) != PollResult::None {
                    progress = true;
                }
            }
            progress |= self.role.poll(&mut context!(self, now));
            progress |= self.flush(now)?;
            any |= progress;
            if !progress {
                break;
            }
        }
        Ok(any)
    }

    /// When [`Node::poll`] is next due without I/O (`None`: only on I/O).
    pub fn poll_at(&mut self, now: Instant) -> Option<Instant> {
        let mut at = self.role.poll_at(now);
        for p in &mut self.ports {
            if !p.dev.rx.is_empty() || !p.dev.tx.is_empty() {
                return Some(now);
            }
            if let Some(t) = p.iface.poll_at(now, &p.sockets) {
                at = Some(at.map_or(t, |a| a.min(t)));
            }
        }
        at
    }

    /// Handle one control request; returns the answer unless the role defers it.
    pub fn control(&mut self, now: Instant, id: u64, args: &[String]) -> Option<Value> {
        let cmd = args.first().map(String::as_str).unwrap_or("");
        match cmd {
            "ping" => Some(json!({
                "name": self.name,
                "role": self.role.name(),
                "ready": self.role.is_ready(),
                "pid": std::process::id(),
            })),
            "stats" => {
                // Devices keep some counters themselves (ring accounting).
                let mut all = self.stats.clone();
                for link in &self.links {
                    for (name, n) in link.counters() {
                        all.add(name, n);
                    }
                }
                let mut v = serde_json::to_value(&all).unwrap_or(Value::Null);
                v["node"] = json!(self.name);
                v["role"] = json!(self.role.name());
                Some(v)
            }
            "impair" => Some(self.impair(&args[1..])),
            "ports" => Some(Value::Array(
                self.ports
                    .iter()
                    .zip(&self.links)
                    .map(|(p, l)| {
                        json!({
                            "name": p.name,
                            "mac": p.iface.hardware_addr().to_string(),
                            "addrs": p.iface.ip_addrs().iter().map(|a| a.to_string()).collect::<Vec<_>>(),
                            "mtu": l.mtu(),
                            "sockets": p.sockets.iter().count(),
                            "neighbors": p.neighbors.len(),
                        })
                    })
                    .collect(),
            )),
            _ => {
                match self.role.control(&mut context!(self, now), id, args) {
                    ControlReply::Now(v) => Some(v),
                    ControlReply::Later => None,
                    ControlReply::Unknown => Some(json!({
                        "error": format!("unknown command {cmd:?}; try: ping, stats, ports, impair, help"),
                    })),
                }
            }
        }
    }

    /// `impair [PORT [clear | delay MS jitter MS reorder PCT duplicate PCT
    /// corrupt PCT rate MBIT]]`: show or set what a port does to the frames
    /// it sends (see [`crate::phy::impair`]). PORT is an index or a name.
    fn impair(&mut self, args: &[String]) -> Value {
        let show = |i: usize, p: &PortStack, l: &L| {
            json!({
                "port": i,
                "name": p.name,
                "shape": l.shape().map(|s| s.args()),
                "describe": l.shape().map(|s| s.describe()),
            })
        };
        let Some(which) = args.first() else {
            return Value::Array(
                self.ports
                    .iter()
                    .zip(&self.links)
                    .enumerate()
                    .map(|(i, (p, l))| show(i, p, l))
                    .collect(),
            );
        };
        let i = match which.parse::<usize>() {
            Ok(i) if i < self.ports.len() => i,
            _ => match self.ports.iter().position(|p| &p.name == which) {
                Some(i) => i,
                None => return json!({ "error": format!("no port {which:?}") }),
            },
        };
        if args.len() > 1 {
            let shape = match Shape::parse(&args[1..]) {
                Ok(s) => s,
                Err(e) => return json!({ "error": e }),
            };
            if !self.links[i].set_shape(shape) {
                return json!({
                    "error": format!("port {} cannot be impaired (its link has no impairment layer)", self.ports[i].name),
                });
            }
        }
        show(i, &self.ports[i], &self.links[i])
    }

    /// Answers to deferred control requests, ready to send.
    pub fn take_replies(&mut self) -> Vec<(u64, Value)> {
        std::mem::take(&mut self.replies)
    }

    /// Stop the role and flush what it sends on the way out.
    pub fn stop(&mut self, now: Instant) -> io::Result<()> {
        self.role.stop(&mut context!(self, now));
        for p in &mut self.ports {
            p.iface.poll(now, &mut p.dev, &mut p.sockets);
        }
        self.flush(now).map(drop)
    }

    fn drain_links(&mut self, now: Instant) -> io::Result<bool> {
        let mut any = false;
        for (i, (p, link)) in self.ports.iter_mut().zip(&mut self.links).enumerate() {
            let max = link.max_frame();
            if self.scratch.len() < max {
                self.scratch.resize(max, 0);
            }
            for _ in 0..RX_BUDGET {
                // Read into one long-lived buffer and copy out only what
                // arrived: zero-filling a pooled buffer up to `max` (64 KiB
                // with offloads) per frame cost more than the copy.
                let Some(n) = link.recv(&mut self.scratch[..max])? else {
                    break;
                };
                any = true;
                let mut buf = p.dev.buffer();
                buf.extend_from_slice(&self.scratch[..n]);
                self.stats.rx_frames += 1;
                self.stats.rx_bytes += n as u64;
                if n < 14 {
                    self.stats.drop("rx_runt");
                    p.dev.recycle(buf);
                    continue;
                }
                if self.role.validate_ingress() {
                    if let Err(reason) = check_frame(&buf) {
                        self.stats.drop(reason);
                        p.dev.recycle(buf);
                        continue;
                    }
                }
                // Learn the sender's binding from the frame as it came off
                // the wire: the role's shim may rewrite its addresses.
                if let Action::ToStack(synth) = p.neighbors.glean(now, &buf, p.iface.ip_addrs()) {
                    self.stats.bump("neighbor.gleaned");
                    p.dev.rx.push_back(synth);
                }
                let mut fcx = FrameContext {
                    now,
                    stats: &mut self.stats,
                    out: &mut self.out,
                };
                match self.role.ingress(&mut fcx, i, &mut buf) {
                    Verdict::Pass => p.dev.rx.push_back(buf),
                    Verdict::Consume => p.dev.recycle(buf),
                    Verdict::Drop(reason) => {
                        self.stats.drop(reason);
                        p.dev.recycle(buf);
                    }
                }
            }
        }
        Ok(any)
    }

    /// Execute injected frames and push smoltcp's output through the egress
    /// shim onto the links.
    fn flush(&mut self, now: Instant) -> io::Result<bool> {
        let mut any = false;
        loop {
            let mut moved = false;
            for (port, dir, frame) in self.out.drain() {
                moved = true;
                let Some(p) = self.ports.get_mut(port) else {
                    self.stats.drop("inject_bad_port");
                    continue;
                };
                match dir {
                    Direction::ToStack => p.dev.rx.push_back(frame),
                    Direction::ToWire => {
                        send(&mut self.links[port], &mut self.stats, &frame)?;
                        p.dev.recycle(frame);
                    }
                }
            }
            for (i, (p, link)) in self.ports.iter_mut().zip(&mut self.links).enumerate() {
                while let Some(mut frame) = p.dev.tx.pop_front() {
                    moved = true;
                    let mut fcx = FrameContext {
                        now,
                        stats: &mut self.stats,
                        out: &mut self.out,
                    };
                    match self.role.egress(&mut fcx, i, &mut frame) {
                        Verdict::Pass => send(link, &mut self.stats, &frame)?,
                        Verdict::Consume => {}
                        Verdict::Drop(reason) => self.stats.drop(reason),
                    }
                    p.dev.recycle(frame);
                }
            }
            // Frames smoltcp must still see (injected ToStack) are handled by
            // the next iface.poll round; stop when nothing moved.
            if !moved || self.out.is_empty() {
                any |= moved;
                break;
            }
            any = true;
        }
        // One hand-over per pass for links that queue (a transmit ring).
        for link in &mut self.links {
            link.flush()?;
        }
        Ok(any)
    }
}

/// Structural check of a received frame: the reason it must be dropped, if any.
///
/// smoltcp drops malformed frames silently; checking here first gives every
/// drop a counter. Checksums are left to smoltcp.
pub fn check_frame(frame: &[u8]) -> Result<(), &'static str> {
    use etherparse::err::packet::SliceError;
    match u16::from_be_bytes([frame[12], frame[13]]) {
        0x0806 if frame.len() >= 14 + 28 => Ok(()),
        0x0806 => Err("malformed_arp"),
        0x0800 | 0x86dd => match etherparse::SlicedPacket::from_ethernet(frame) {
            // smoltcp 0.14 reassembles IPv4 but not IPv6 over Ethernet: it
            // would answer a fragment with a bogus Parameter Problem.
            Ok(p) => match p.net {
                Some(etherparse::NetSlice::Ipv6(v6)) if v6.is_payload_fragmented() => {
                    Err("ipv6_fragment_unsupported")
                }
                _ => Ok(()),
            },
            Err(SliceError::Len(_)) => Err("malformed_truncated"),
            Err(SliceError::Ipv4(_) | SliceError::Ipv4Exts(_)) => Err("malformed_ipv4"),
            Err(SliceError::Ipv6(_) | SliceError::Ipv6Exts(_) | SliceError::Ip(_)) => {
                Err("malformed_ipv6")
            }
            Err(SliceError::Tcp(_)) => Err("malformed_tcp"),
            Err(_) => Err("malformed_other"),
        },
        0x8100 | 0x88a8 => Err("vlan_unsupported"),
        _ => Err("unknown_ethertype"),
    }
}

fn send<L: Link>(link: &mut L, stats: &mut Counters, frame: &[u8]) -> io::Result<()> {
    if link.send(frame)? {
        stats.tx_frames += 1;
        stats.tx_bytes += frame.len() as u64;
    } else {
        stats.drop("tx_not_sent");
    }
    Ok(())
}

/// Options of the real driver.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// Path of the control socket (none: no control socket).
    pub control: Option<PathBuf>,
    /// A serial port that carries control requests instead (a microVM's
    /// virtio-serial port, see [`crate::ctl::SerialControl`]); wins over
    /// `control`.
    pub control_serial: Option<Arc<File>>,
    /// After doing work, keep polling without sleeping for this long (zero:
    /// sleep as soon as there is nothing to do). Trades a busy CPU for
    /// wake-up latency under load.
    pub busy_poll: StdDuration,
}

/// Why the real driver returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// SIGTERM or SIGINT.
    Signal,
}

/// Run `node` on real links until SIGTERM/SIGINT: the driver of DESIGN.md
/// "The loop". Returns on a signal; an `Err` is an I/O failure of a link or
/// the control socket.
#[allow(clippy::disallowed_methods)] // the driver is where real time enters
pub fn run<L: Link, R: Role>(node: &mut Node<L, R>, opts: &RunOptions) -> io::Result<Exit> {
    crate::phy::sys::install_stop_handlers()?;
    let clock = std::time::Instant::now();
    let now = || Instant::from_micros(clock.elapsed().as_micros() as i64);
    let mut ctl = match (&opts.control_serial, &opts.control) {
        (Some(port), _) => Some(Control::Serial(SerialControl::new(port.clone())?)),
        (None, Some(path)) => Some(Control::Socket(ControlServer::bind(path)?)),
        (None, None) => None,
    };
    let mut fds = Vec::new();
    let busy_poll = Duration::from_micros(opts.busy_poll.as_micros() as u64);
    let mut last_work = Instant::ZERO;
    loop {
        if crate::phy::sys::stop_requested() {
            node.stop(now())?;
            return Ok(Exit::Signal);
        }
        let t = now();
        let mut worked = node.poll(t)?;
        if let Some(ctl) = &mut ctl {
            let asked = ctl.poll(|id, req: &Request| node.control(t, id, &req.args))?;
            let replies = node.take_replies();
            for (id, v) in &replies {
                ctl.reply(*id, v);
            }
            if asked || !replies.is_empty() {
                // A control request may have made work (a client job).
                worked |= node.poll(now())?;
            }
        }
        let t = now();
        if worked {
            last_work = t;
        }
        let mut timeout = match node.poll_at(t) {
            Some(at) if at <= t => Some(StdDuration::ZERO),
            Some(at) => Some(StdDuration::from_micros((at - t).total_micros())),
            None => None,
        };
        // Opt-in busy-poll: right after work, look again at once instead of
        // sleeping, for up to `busy_poll`; waking a sleeping CPU costs more
        // than a request at high rates (see docs/bench.md).
        if t - last_work < busy_poll {
            timeout = Some(StdDuration::ZERO);
        }
        // Frames an impairment holds leave when due.
        if let Some(at) = node.links.iter().filter_map(Link::poll_at).min() {
            let d = at.saturating_duration_since(std::time::Instant::now());
            timeout = Some(timeout.map_or(d, |t| t.min(d)));
        }
        fds.clear();
        fds.extend(node.links.iter().filter_map(Link::raw_fd));
        if let Some(ctl) = &ctl {
            ctl.fds(&mut fds);
        }
        crate::phy::sys::wait_readable(&fds, timeout.map(|d| d.min(StdDuration::from_secs(1))))?;
    }
}

/// Where control requests come from: the usual socket, or a serial port.
enum Control {
    Socket(ControlServer),
    Serial(SerialControl),
}

impl Control {
    fn poll(&mut self, handle: impl FnMut(u64, &Request) -> Option<Value>) -> io::Result<bool> {
        match self {
            Self::Socket(c) => c.poll(handle),
            Self::Serial(c) => c.poll(handle),
        }
    }

    fn reply(&mut self, id: u64, v: &Value) {
        match self {
            Self::Socket(c) => c.reply(id, v),
            Self::Serial(c) => c.reply(id, v),
        }
    }

    fn fds(&self, out: &mut Vec<RawFd>) {
        match self {
            Self::Socket(c) => c.fds(out),
            Self::Serial(c) => c.fds(out),
        }
    }
}

/// Convert a smoltcp duration to std.
pub fn to_std(d: Duration) -> StdDuration {
    StdDuration::from_micros(d.total_micros())
}
