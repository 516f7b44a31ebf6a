// Over 800 lines: one simulated world: segments, partitions, the virtual clock and the trace share the event queue.
//! In-memory L2 segments with a virtual clock: whole topologies in a unit test.
//!
//! A [`Sim`] owns a world of simulated Ethernet segments and the nodes attached
//! to them. Each node is a real [`Node`] — its role, its shim, its smoltcp
//! interfaces — whose ports are [`SimLink`]s instead of TAP devices. Nothing
//! touches the wall clock: time is virtual and jumps straight to the next thing
//! that can happen, so a transfer that takes minutes of simulated time under
//! heavy loss runs in milliseconds, and the same seed gives the same run.
//!
//! ```text
//!             segment 0 (loss, delay ± jitter, reordering, MTU, partitions)
//!   ┌────────────────────────────┬───────────────────────────┐
//!   │ SimLink (port 0)           │ SimLink (port 1)          │ SimLink (port 2)
//!   Node "a"                     Node "r" ── SimLink ── segment 1 ── Node "b"
//!
//!   Sim::drive_bounded: poll every node at `now` until none does anything,
//!   then jump `now` to the earliest frame delivery or node `poll_at`.
//! ```
//!
//! A segment behaves like a learning switch: it learns the source MAC of every
//! frame it carries, sends unicast frames to a known MAC's port only and floods
//! broadcast, multicast and unknown-destination frames to every other port.
//! Each copy of a frame gets its own fate when it is sent, in this order:
//!
//! 1. too big: the frame's payload (length minus the 14-byte Ethernet header)
//!    exceeds the segment's MTU — dropped once for all destinations;
//! 2. partitioned: sender and receiver are on opposite sides of an active
//!    [partition](Sim::partition) — dropped;
//! 3. lost, with the segment's loss probability;
//! 4. otherwise delivered after `delay` plus a uniform jitter in
//!    `[0, jitter]`, plus `reorder_delay` with the reordering probability (so
//!    frames sent later overtake it).
//!
//! Fates are decided at send time: a partition does not drop frames already in
//! flight. Every fate is counted per segment ([`SegmentStats`]) and folded into
//! a running [trace hash](Sim::trace_hash) (and, if [enabled](Sim::record_trace),
//! recorded as [`TraceEvent`]s), so a test can assert that two runs with the
//! same seed behave identically.
//!
//! Randomness comes from one small SplitMix64 generator per segment, seeded
//! from the simulation's seed and the segment's index; a segment without loss,
//! jitter or reordering draws no random numbers at all.
//!
//! ```
//! use smoltcp::time::Duration;
//! use svcroute_stack::sim::{SegmentConfig, Sim};
//! use svcroute_stack::runtime::{Context, Role};
//!
//! /// A role that does nothing (smoltcp still answers ARP and pings).
//! struct Idle;
//! impl Role for Idle {
//!     fn name(&self) -> &'static str { "idle" }
//!     fn start(&mut self, _cx: &mut Context<'_>) {}
//!     fn poll(&mut self, _cx: &mut Context<'_>) -> bool { false }
//! }
//!
//! let mut sim = Sim::new(42);
//! let lan = sim.add_segment(SegmentConfig { loss: 0.1, ..SegmentConfig::default() });
//! let port = sim.port(lan, 1); // eth0, 02:00:00:00:00:01, 10.0.0.1/24, fd00::1/64
//! let a = sim.add_role("a", vec![port], Idle);
//! let port = sim.port(lan, 2);
//! let _b = sim.add_role("b", vec![port], Idle);
//!
//! // Drive until a condition holds, or fail (never hang). Even idle stacks
//! // talk: smoltcp reports its IPv6 multicast groups (MLD) when it starts.
//! sim.record_trace(true);
//! let t = sim
//!     .drive_bounded(Duration::from_secs(1), 1000, |sim| sim.node(a).stats().rx_frames > 0)
//!     .unwrap();
//! println!("{t}: {:?}", sim.trace()[0]);
//! sim.run_for(Duration::from_secs(5)).unwrap();
//! assert_eq!(sim.stats(lan).too_big, 0);
//! ```

use std::any::Any;
use std::cell::{Ref, RefCell};
use std::cmp::Ordering;
use std::collections::{BTreeMap, BinaryHeap};
use std::fmt;
use std::io;
use std::marker::PhantomData;
use std::os::fd::RawFd;
use std::rc::Rc;

use smoltcp::time::{Duration, Instant};
use smoltcp::wire::{EthernetAddress, IpAddress, IpCidr, Ipv4Address, Ipv6Address};

use crate::phy::Link;
use crate::runtime::{Node, PortConfig, Role};

// The Ethernet II header the MTU check does not count.
use smoltcp::wire::ETHERNET_HEADER_LEN as ETH_HDR;

/// Steps [`Sim::run_for`] allows before it gives up.
pub const RUN_FOR_MAX_STEPS: u64 = 1_000_000;

/// Behaviour of one simulated segment.
///
/// Build it with struct-update syntax:
/// `SegmentConfig { loss: 0.1, ..SegmentConfig::default() }`.
#[derive(Debug, Clone, PartialEq)]
pub struct SegmentConfig {
    /// Largest payload (frame length minus the Ethernet header) carried;
    /// larger frames are dropped and counted as `too_big`. Default 1500.
    pub mtu: usize,
    /// Fixed one-way delay of every frame. Default 1 ms.
    pub delay: Duration,
    /// Extra delay drawn uniformly from `[0, jitter]` per frame. Default 0.
    pub jitter: Duration,
    /// Probability that a frame copy is lost, `0.0..=1.0`. Default 0.
    pub loss: f64,
    /// Probability that a frame copy is held back by `reorder_delay` so that
    /// later frames overtake it, `0.0..=1.0`. Default 0.
    pub reorder: f64,
    /// Extra delay of a reordered frame. Default 5 ms.
    pub reorder_delay: Duration,
}

impl Default for SegmentConfig {
    fn default() -> Self {
        Self {
            mtu: 1500,
            delay: Duration::from_millis(1),
            jitter: Duration::ZERO,
            loss: 0.0,
            reorder: 0.0,
            reorder_delay: Duration::from_millis(5),
        }
    }
}

/// A segment of a [`Sim`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SegmentId(pub usize);

/// One attachment point on a segment: what [`Sim::partition`] talks about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SimPort {
    /// The segment.
    pub segment: SegmentId,
    /// The port's index on the segment, in attachment order.
    pub index: usize,
}

/// A partition created by [`Sim::partition`], to [heal](Sim::heal) later.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionId {
    segment: SegmentId,
    index: usize,
}

/// Per-segment counters, one per frame copy (except `too_big`, one per frame).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SegmentStats {
    /// Copies scheduled for delivery (reordered ones included).
    pub delivered: u64,
    /// Copies lost to the loss probability.
    pub lost: u64,
    /// Delivered copies that were held back by `reorder_delay`.
    pub reordered: u64,
    /// Frames dropped because their payload exceeded the MTU.
    pub too_big: u64,
    /// Copies dropped by an active partition.
    pub partitioned: u64,
}

/// What happened to one frame copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fate {
    /// Delivered at the given time.
    Delivered(Instant),
    /// Delivered late (held back by `reorder_delay`) at the given time.
    Reordered(Instant),
    /// Lost to the loss probability.
    Lost,
    /// Dropped by a partition.
    Partitioned,
    /// Dropped for exceeding the MTU (no destination: the whole frame).
    TooBig,
}

/// One entry of the simulation trace: a frame copy and its fate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceEvent {
    /// When the frame was sent.
    pub at: Instant,
    /// The segment it was sent on.
    pub segment: SegmentId,
    /// The sending port's index on the segment.
    pub from: usize,
    /// The receiving port's index (`None` for [`Fate::TooBig`]).
    pub to: Option<usize>,
    /// Frame length in bytes.
    pub len: usize,
    /// What happened to it.
    pub fate: Fate,
}

/// Something the simulator can drive: a node with virtual time.
///
/// Implemented for every [`Node<SimLink, R>`](Node); implement it for scripted
/// test peers (raw frame injectors, observers) that own [`SimLink`]s.
pub trait SimNode {
    /// Do everything due at `now`; return whether anything happened.
    fn poll(&mut self, now: Instant) -> io::Result<bool>;

    /// When [`SimNode::poll`] is next due without new frames (`None`: only
    /// when a frame arrives).
    fn poll_at(&mut self, now: Instant) -> Option<Instant>;

    /// A name for error messages.
    fn name(&self) -> &str;
}

impl<R: Role> SimNode for Node<SimLink, R> {
    fn poll(&mut self, now: Instant) -> io::Result<bool> {
        Self::poll(self, now)
    }

    fn poll_at(&mut self, now: Instant) -> Option<Instant> {
        Self::poll_at(self, now)
    }

    fn name(&self) -> &str {
        Self::name(self)
    }
}

/// A typed handle to a node added with [`Sim::add_node`].
pub struct NodeId<N> {
    index: usize,
    _node: PhantomData<fn() -> N>,
}

impl<N> NodeId<N> {
    /// The node's index in the simulation, in the order nodes were added.
    pub fn index(&self) -> usize {
        self.index
    }
}

impl<N> Clone for NodeId<N> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<N> Copy for NodeId<N> {}

impl<N> fmt::Debug for NodeId<N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "NodeId({})", self.index)
    }
}

/// Why [`Sim::drive_bounded`] stopped without its condition holding.
#[derive(Debug)]
pub enum SimErrorKind {
    /// Nothing was left to happen: no frame in flight, no node timer.
    Quiet,
    /// The next event lay beyond the virtual time allowed.
    TimeLimit,
    /// The step budget ran out (a node that is never quiet?).
    StepLimit,
    /// A node's link failed.
    Io {
        /// The node's name.
        node: String,
        /// The failure.
        error: io::Error,
    },
}

/// [`Sim::drive_bounded`] failed: the condition never held.
#[derive(Debug)]
pub struct SimError {
    /// Why it stopped.
    pub kind: SimErrorKind,
    /// Virtual time when it stopped.
    pub now: Instant,
    /// Steps taken by the simulation so far.
    pub steps: u64,
}

impl fmt::Display for SimError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (now, steps) = (self.now, self.steps);
        match &self.kind {
            SimErrorKind::Quiet => write!(
                f,
                "simulation went quiet at virtual time {now} after {steps} steps \
                 without reaching the condition"
            ),
            SimErrorKind::TimeLimit => write!(
                f,
                "virtual time limit hit at virtual time {now} after {steps} steps \
                 without reaching the condition"
            ),
            SimErrorKind::StepLimit => write!(
                f,
                "step limit hit at virtual time {now} after {steps} steps \
                 without reaching the condition"
            ),
            SimErrorKind::Io { node, error } => write!(
                f,
                "node {node} failed at virtual time {now} after {steps} steps: {error}"
            ),
        }
    }
}

impl std::error::Error for SimError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match &self.kind {
            SimErrorKind::Io { error, .. } => Some(error),
            _ => None,
        }
    }
}

/// A world of simulated segments and nodes under one virtual clock.
///
/// Build segments ([`Sim::add_segment`]), attach ports to them
/// ([`Sim::attach`], [`Sim::port`]), build nodes over those ports at
/// [`Sim::now`] and hand them over ([`Sim::add_node`]); then
/// [`Sim::drive_bounded`] until a condition holds, reading nodes back with
/// [`Sim::node`]. Nodes are polled in the order they were added.
pub struct Sim {
    fabric: Rc<RefCell<Fabric>>,
    nodes: Vec<Box<dyn Slot>>,
    steps: u64,
    seed: u64,
}

impl Sim {
    /// An empty world at virtual time zero; `seed` drives every segment's loss,
    /// jitter and reordering.
    pub fn new(seed: u64) -> Self {
        Self {
            fabric: Rc::new(RefCell::new(Fabric {
                now: Instant::ZERO,
                segments: Vec::new(),
                seq: 0,
                tracer: Tracer::default(),
            })),
            nodes: Vec::new(),
            steps: 0,
            seed,
        }
    }

    /// The current virtual time.
    pub fn now(&self) -> Instant {
        self.fabric.borrow().now
    }

    /// Steps taken so far (rounds of polling every node).
    pub fn steps(&self) -> u64 {
        self.steps
    }

    /// Add a segment.
    pub fn add_segment(&mut self, cfg: SegmentConfig) -> SegmentId {
        let mut fabric = self.fabric.borrow_mut();
        let id = SegmentId(fabric.segments.len());
        let seed = self.seed ^ (id.0 as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        fabric.segments.push(Segment {
            cfg,
            rng: SplitMix64(seed),
            ports: Vec::new(),
            macs: BTreeMap::new(),
            partitions: Vec::new(),
            stats: SegmentStats::default(),
        });
        id
    }

    /// Change a segment's behaviour from now on (frames in flight keep their
    /// fate).
    pub fn reconfigure(&mut self, seg: SegmentId, cfg: SegmentConfig) {
        self.fabric.borrow_mut().segments[seg.0].cfg = cfg;
    }

    /// Attach a new port to `seg`. Dropping the link detaches the port.
    ///
    /// # Panics
    ///
    /// If `seg` is not a segment of this simulation.
    pub fn attach(&mut self, seg: SegmentId) -> SimLink {
        let mut fabric = self.fabric.borrow_mut();
        let ports = &mut fabric.segments[seg.0].ports;
        ports.push(PortQueue {
            inbound: BinaryHeap::new(),
            attached: true,
        });
        SimLink {
            fabric: Rc::clone(&self.fabric),
            port: SimPort {
                segment: seg,
                index: ports.len() - 1,
            },
        }
    }

    /// Attach a port for host number `host` to `seg` with a ready
    /// configuration: [`port_config`]`("eth<seg>", seg, host)`.
    ///
    /// # Panics
    ///
    /// If `seg` is not a segment of this simulation or its index exceeds 255.
    pub fn port(&mut self, seg: SegmentId, host: u8) -> (PortConfig, SimLink) {
        let subnet = u8::try_from(seg.0).expect("Sim::port: at most 256 segments");
        let cfg = port_config(&format!("eth{subnet}"), subnet, host);
        (cfg, self.attach(seg))
    }

    /// Hand a node over to the simulation.
    pub fn add_node<N: SimNode + 'static>(&mut self, node: N) -> NodeId<N> {
        self.nodes.push(Box::new(node));
        NodeId {
            index: self.nodes.len() - 1,
            _node: PhantomData,
        }
    }

    /// Build a [`Node`] for `role` over `ports` at the current time and hand
    /// it over: `Node::new` plus [`Sim::add_node`].
    pub fn add_role<R: Role + 'static>(
        &mut self,
        name: &str,
        ports: Vec<(PortConfig, SimLink)>,
        role: R,
    ) -> NodeId<Node<SimLink, R>> {
        let node = Node::new(name, ports, role, self.now());
        self.add_node(node)
    }

    /// A node, for assertions.
    ///
    /// # Panics
    ///
    /// If `id` comes from another simulation and names a node of another type.
    pub fn node<N: SimNode + 'static>(&self, id: NodeId<N>) -> &N {
        self.nodes[id.index]
            .as_any()
            .downcast_ref()
            .expect("NodeId of another simulation")
    }

    /// A node, mutably (to give its role commands).
    ///
    /// # Panics
    ///
    /// If `id` comes from another simulation and names a node of another type.
    pub fn node_mut<N: SimNode + 'static>(&mut self, id: NodeId<N>) -> &mut N {
        self.nodes[id.index]
            .as_any_mut()
            .downcast_mut()
            .expect("NodeId of another simulation")
    }

    /// Cut `a` off from `b`: frames between a port of `a` and a port of `b`
    /// are dropped (and counted) until [`Sim::heal`]. Ports in neither set are
    /// unaffected.
    ///
    /// # Panics
    ///
    /// If the ports are not all on one segment.
    pub fn partition(&mut self, a: &[SimPort], b: &[SimPort]) -> PartitionId {
        let segment = a.first().or(b.first()).map_or(SegmentId(0), |p| p.segment);
        assert!(
            a.iter().chain(b).all(|p| p.segment == segment),
            "Sim::partition: ports on different segments"
        );
        let side = |ports: &[SimPort]| ports.iter().map(|p| p.index).collect();
        let mut fabric = self.fabric.borrow_mut();
        let partitions = &mut fabric.segments[segment.0].partitions;
        partitions.push(Some((side(a), side(b))));
        PartitionId {
            segment,
            index: partitions.len() - 1,
        }
    }

    /// Remove a partition. Healing twice is harmless.
    pub fn heal(&mut self, id: PartitionId) {
        self.fabric.borrow_mut().segments[id.segment.0].partitions[id.index] = None;
    }

    /// A segment's counters.
    pub fn stats(&self, seg: SegmentId) -> SegmentStats {
        self.fabric.borrow().segments[seg.0].stats
    }

    /// Record every frame fate as a [`TraceEvent`] from now on (or stop).
    /// The [trace hash](Sim::trace_hash) is kept either way.
    pub fn record_trace(&mut self, on: bool) {
        let mut fabric = self.fabric.borrow_mut();
        match (on, fabric.tracer.events.is_some()) {
            (true, false) => fabric.tracer.events = Some(Vec::new()),
            (false, true) => fabric.tracer.events = None,
            _ => {}
        }
    }

    /// The recorded trace (empty unless [`Sim::record_trace`] is on).
    pub fn trace(&self) -> Ref<'_, [TraceEvent]> {
        Ref::map(self.fabric.borrow(), |f| {
            f.tracer.events.as_deref().unwrap_or(&[])
        })
    }

    /// A hash of every frame fate so far, frame contents included: equal
    /// hashes mean (with overwhelming probability) identical runs.
    pub fn trace_hash(&self) -> u64 {
        self.fabric.borrow().tracer.hash
    }

    /// Run the world until `until` holds, returning the virtual time it did.
    ///
    /// Each step polls every node once at the current time; when a step does
    /// nothing, virtual time jumps to the earliest frame delivery or node
    /// `poll_at`. `until` is checked before every step.
    ///
    /// Fails, rather than hanging, when nothing is left to happen, when the
    /// next event lies more than `max_time` of virtual time ahead of the
    /// start, after `max_steps` steps, or when a node's link fails.
    pub fn drive_bounded(
        &mut self,
        max_time: Duration,
        max_steps: u64,
        mut until: impl FnMut(&Self) -> bool,
    ) -> Result<Instant, SimError> {
        let deadline = self.now() + max_time;
        let step_limit = self.steps.saturating_add(max_steps);
        loop {
            if until(self) {
                return Ok(self.now());
            }
            if self.steps >= step_limit {
                return Err(self.error(SimErrorKind::StepLimit));
            }
            if self.step()? {
                continue;
            }
            match self.next_event() {
                None => return Err(self.error(SimErrorKind::Quiet)),
                Some(t) if t > deadline => return Err(self.error(SimErrorKind::TimeLimit)),
                Some(t) => {
                    let mut fabric = self.fabric.borrow_mut();
                    fabric.now = fabric.now.max(t);
                }
            }
        }
    }

    /// Run the world for `d` of virtual time, whatever happens; the clock ends
    /// exactly `d` later. Fails only on a link failure or after
    /// [`RUN_FOR_MAX_STEPS`] steps.
    pub fn run_for(&mut self, d: Duration) -> Result<(), SimError> {
        let end = self.now() + d;
        match self.drive_bounded(d, RUN_FOR_MAX_STEPS, |_| false) {
            Err(SimError {
                kind: SimErrorKind::Quiet | SimErrorKind::TimeLimit,
                ..
            }) => {
                self.fabric.borrow_mut().now = end;
                Ok(())
            }
            Err(e) => Err(e),
            Ok(_) => unreachable!("the condition never holds"),
        }
    }

    /// Poll every node once at the current time.
    fn step(&mut self) -> Result<bool, SimError> {
        self.steps += 1;
        let now = self.now();
        let mut any = false;
        for i in 0..self.nodes.len() {
            match self.nodes[i].poll(now) {
                Ok(a) => any |= a,
                Err(error) => {
                    let node = self.nodes[i].name().to_owned();
                    return Err(self.error(SimErrorKind::Io { node, error }));
                }
            }
        }
        Ok(any)
    }

    /// The earliest future frame delivery or node timer.
    fn next_event(&mut self) -> Option<Instant> {
        let now = self.now();
        let mut next = self.fabric.borrow().next_delivery(now);
        for node in &mut self.nodes {
            if let Some(t) = node.poll_at(now) {
                next = Some(next.map_or(t, |n| n.min(t)));
            }
        }
        next
    }

    fn error(&self, kind: SimErrorKind) -> SimError {
        SimError {
            kind,
            now: self.now(),
            steps: self.steps,
        }
    }
}

impl fmt::Debug for Sim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let fabric = self.fabric.borrow();
        f.debug_struct("Sim")
            .field("now", &fabric.now)
            .field("segments", &fabric.segments.len())
            .field("nodes", &self.nodes.len())
            .field("steps", &self.steps)
            .finish()
    }
}

/// One port on a simulated segment, as a [`Link`] for a [`Node`].
///
/// `recv` hands out frames whose delivery time has come, earliest first;
/// `send` puts a frame on the segment (always accepted: the segment decides
/// its fate). There is no file descriptor: the [`Sim`] knows when to poll.
pub struct SimLink {
    fabric: Rc<RefCell<Fabric>>,
    port: SimPort,
}

impl SimLink {
    /// Where this link is attached.
    pub fn port(&self) -> SimPort {
        self.port
    }
}

impl fmt::Debug for SimLink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SimLink").field("port", &self.port).finish()
    }
}

impl Link for SimLink {
    fn recv(&mut self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        let mut fabric = self.fabric.borrow_mut();
        let now = fabric.now;
        let queue = &mut fabric.segments[self.port.segment.0].ports[self.port.index].inbound;
        if queue.peek().is_none_or(|f| f.at > now) {
            return Ok(None);
        }
        let Some(frame) = queue.pop() else {
            return Ok(None);
        };
        let n = frame.data.len().min(buf.len());
        buf[..n].copy_from_slice(&frame.data[..n]);
        Ok(Some(n))
    }

    fn send(&mut self, frame: &[u8]) -> io::Result<bool> {
        self.fabric.borrow_mut().transmit(self.port, frame);
        Ok(true)
    }

    fn max_frame(&self) -> usize {
        self.mtu() + ETH_HDR
    }

    fn mtu(&self) -> usize {
        self.fabric.borrow().segments[self.port.segment.0].cfg.mtu
    }

    fn raw_fd(&self) -> Option<RawFd> {
        None
    }
}

impl Drop for SimLink {
    fn drop(&mut self) {
        // A link may be dropped while the fabric is borrowed only if a node
        // panicked mid-poll; then there is nothing left to tidy.
        if let Ok(mut fabric) = self.fabric.try_borrow_mut() {
            let port = &mut fabric.segments[self.port.segment.0].ports[self.port.index];
            port.attached = false;
            port.inbound.clear();
        }
    }
}

/// The MAC address of host `host` on subnet `subnet`: `02:00:00:00:subnet:host`.
pub fn mac(subnet: u8, host: u8) -> EthernetAddress {
    EthernetAddress([0x02, 0, 0, 0, subnet, host])
}

/// The IPv4 address of host `host` on subnet `subnet`: `10.0.subnet.host`.
pub fn ipv4(subnet: u8, host: u8) -> Ipv4Address {
    Ipv4Address::new(10, 0, subnet, host)
}

/// The IPv6 address of host `host` on subnet `subnet`: `fd00:0:0:subnet::host`.
pub fn ipv6(subnet: u8, host: u8) -> Ipv6Address {
    Ipv6Address::new(0xfd00, 0, 0, subnet.into(), 0, 0, 0, host.into())
}

/// A port configuration for host `host` on subnet `subnet`: [`mac`], [`ipv4`]
/// `/24` and [`ipv6`] `/64`, MTU 1500, no gateways, no burst limit. Adjust
/// fields with struct-update syntax.
pub fn port_config(name: &str, subnet: u8, host: u8) -> PortConfig {
    PortConfig {
        name: name.to_owned(),
        mac: mac(subnet, host),
        addrs: vec![
            IpCidr::new(IpAddress::Ipv4(ipv4(subnet, host)), 24),
            IpCidr::new(IpAddress::Ipv6(ipv6(subnet, host)), 64),
        ],
        gateways: Vec::new(),
        mtu: 1500,
        max_burst: None,
        random_seed: None,
    }
}

/// What [`Sim`] keeps per node: the node plus a way back to its type.
trait Slot {
    fn poll(&mut self, now: Instant) -> io::Result<bool>;
    fn poll_at(&mut self, now: Instant) -> Option<Instant>;
    fn name(&self) -> &str;
    fn as_any(&self) -> &dyn Any;
    fn as_any_mut(&mut self) -> &mut dyn Any;
}

impl<N: SimNode + 'static> Slot for N {
    fn poll(&mut self, now: Instant) -> io::Result<bool> {
        SimNode::poll(self, now)
    }
    fn poll_at(&mut self, now: Instant) -> Option<Instant> {
        SimNode::poll_at(self, now)
    }
    fn name(&self) -> &str {
        SimNode::name(self)
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}

/// Everything the links share: the clock, the segments, the trace.
struct Fabric {
    now: Instant,
    segments: Vec<Segment>,
    /// Send order of frame copies, to keep equal delivery times in order.
    seq: u64,
    tracer: Tracer,
}

impl Fabric {
    fn transmit(&mut self, from: SimPort, frame: &[u8]) {
        let Self {
            now,
            segments,
            seq,
            tracer,
        } = self;
        let now = *now;
        let seg = &mut segments[from.segment.0];
        let mut event = TraceEvent {
            at: now,
            segment: from.segment,
            from: from.index,
            to: None,
            len: frame.len(),
            fate: Fate::TooBig,
        };
        let content = fnv1a(FNV_OFFSET, frame);
        if frame.len().saturating_sub(ETH_HDR) > seg.cfg.mtu {
            seg.stats.too_big += 1;
            tracer.record(&event, content);
            return;
        }
        let dst = frame
            .get(0..6)
            .map(|d| [d[0], d[1], d[2], d[3], d[4], d[5]]);
        if let Some(src) = frame.get(6..12) {
            if src[0] & 1 == 0 {
                let src = [src[0], src[1], src[2], src[3], src[4], src[5]];
                seg.macs.insert(src, from.index);
            }
        }
        let only = match dst {
            Some(d) if d[0] & 1 == 0 => seg.macs.get(&d).copied(),
            _ => None,
        };
        let data: Rc<[u8]> = Rc::from(frame);
        for to in 0..seg.ports.len() {
            if to == from.index || !seg.ports[to].attached || only.is_some_and(|o| o != to) {
                continue;
            }
            event.to = Some(to);
            event.fate = seg.fate(from.index, to, now);
            tracer.record(&event, content);
            if let Fate::Delivered(at) | Fate::Reordered(at) = event.fate {
                *seq += 1;
                seg.ports[to].inbound.push(InFlight {
                    at,
                    seq: *seq,
                    data: Rc::clone(&data),
                });
            }
        }
    }

    /// The earliest delivery after `now` on any port. Frames due at or before
    /// `now` are left to their receivers (a port whose link no node polls
    /// must not stall the clock).
    fn next_delivery(&self, now: Instant) -> Option<Instant> {
        self.segments
            .iter()
            .flat_map(|s| &s.ports)
            .filter_map(|p| p.inbound.peek().map(|f| f.at))
            .filter(|&at| at > now)
            .min()
    }
}

struct Segment {
    cfg: SegmentConfig,
    rng: SplitMix64,
    ports: Vec<PortQueue>,
    /// Learned MAC → port index.
    macs: BTreeMap<[u8; 6], usize>,
    /// Partitions by id; `None` once healed.
    partitions: Vec<Option<(Vec<usize>, Vec<usize>)>>,
    stats: SegmentStats,
}

impl Segment {
    /// Decide (and count) the fate of one copy from `from` to `to`.
    fn fate(&mut self, from: usize, to: usize, now: Instant) -> Fate {
        let cut = self.partitions.iter().flatten().any(|(a, b)| {
            (a.contains(&from) && b.contains(&to)) || (b.contains(&from) && a.contains(&to))
        });
        if cut {
            self.stats.partitioned += 1;
            return Fate::Partitioned;
        }
        if self.cfg.loss > 0.0 && self.rng.chance(self.cfg.loss) {
            self.stats.lost += 1;
            return Fate::Lost;
        }
        let mut at = now + self.cfg.delay;
        let jitter = self.cfg.jitter.total_micros();
        if jitter > 0 {
            at += Duration::from_micros(self.rng.below(jitter + 1));
        }
        self.stats.delivered += 1;
        if self.cfg.reorder > 0.0 && self.rng.chance(self.cfg.reorder) {
            self.stats.reordered += 1;
            return Fate::Reordered(at + self.cfg.reorder_delay);
        }
        Fate::Delivered(at)
    }
}

struct PortQueue {
    inbound: BinaryHeap<InFlight>,
    attached: bool,
}

/// A frame copy on its way to one port. Ordered so that the max-heap pops the
/// earliest delivery, and equal times in send order.
struct InFlight {
    at: Instant,
    seq: u64,
    data: Rc<[u8]>,
}

impl PartialEq for InFlight {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}

impl Eq for InFlight {}

impl PartialOrd for InFlight {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for InFlight {
    fn cmp(&self, other: &Self) -> Ordering {
        (other.at, other.seq).cmp(&(self.at, self.seq))
    }
}

#[derive(Default)]
struct Tracer {
    hash: u64,
    events: Option<Vec<TraceEvent>>,
}

impl Tracer {
    fn record(&mut self, e: &TraceEvent, content: u64) {
        let (fate, when) = match e.fate {
            Fate::Delivered(at) => (0u8, at.total_micros()),
            Fate::Reordered(at) => (1, at.total_micros()),
            Fate::Lost => (2, 0),
            Fate::Partitioned => (3, 0),
            Fate::TooBig => (4, 0),
        };
        let to = e.to.map_or(u64::MAX, |t| t as u64);
        let mut h = if self.hash == 0 {
            FNV_OFFSET
        } else {
            self.hash
        };
        for word in [
            e.at.total_micros() as u64,
            e.segment.0 as u64,
            e.from as u64,
            to,
            e.len as u64,
            u64::from(fate),
            when as u64,
            content,
        ] {
            h = fnv1a(h, &word.to_le_bytes());
        }
        self.hash = h;
        if let Some(events) = &mut self.events {
            events.push(*e);
        }
    }
}

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;

fn fnv1a(mut h: u64, bytes: &[u8]) -> u64 {
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x100_0000_01b3);
    }
    h
}

/// SplitMix64 (Steele, Lea, Flood 2014): tiny, fast, good enough for fates.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A uniform float in `[0, 1)`.
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// True with probability `p`.
    fn chance(&mut self, p: f64) -> bool {
        self.unit() < p
    }

    /// A uniform integer in `[0, n)` (`n > 0`; the modulo bias is negligible
    /// for the small `n` of jitter in microseconds).
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

#[cfg(test)]
mod test {
    use super::*;

    const BCAST: [u8; 6] = [0xff; 6];

    fn frame(dst: [u8; 6], src: EthernetAddress, len: usize, tag: u8) -> Vec<u8> {
        let mut f = vec![tag; len.max(ETH_HDR)];
        f[0..6].copy_from_slice(&dst);
        f[6..12].copy_from_slice(&src.0);
        f[12..14].copy_from_slice(&[0x88, 0xb5]);
        f
    }

    #[track_caller]
    fn recv_all(link: &mut SimLink) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        let mut buf = [0u8; 2048];
        while let Some(n) = link.recv(&mut buf).unwrap() {
            out.push(buf[..n].to_vec());
        }
        out
    }

    fn advance(sim: &Sim, d: Duration) {
        let mut f = sim.fabric.borrow_mut();
        f.now += d;
    }

    fn three() -> (Sim, SegmentId, [SimLink; 3]) {
        let mut sim = Sim::new(1);
        let seg = sim.add_segment(SegmentConfig::default());
        let links = [sim.attach(seg), sim.attach(seg), sim.attach(seg)];
        (sim, seg, links)
    }

    #[test]
    fn floods_after_delay_then_learns() {
        let (sim, seg, [mut a, mut b, mut c]) = three();
        a.send(&frame(BCAST, mac(0, 1), 60, 1)).unwrap();
        assert!(recv_all(&mut b).is_empty(), "delivered before the delay");
        advance(&sim, Duration::from_millis(1));
        assert_eq!(recv_all(&mut b).len(), 1);
        assert_eq!(recv_all(&mut c).len(), 1);
        assert!(recv_all(&mut a).is_empty(), "echoed to the sender");

        // b's MAC is unknown: flooded. a's MAC is learned: unicast to a only.
        b.send(&frame(mac(0, 3).0, mac(0, 2), 60, 2)).unwrap();
        c.send(&frame(mac(0, 1).0, mac(0, 3), 60, 3)).unwrap();
        advance(&sim, Duration::from_millis(1));
        assert_eq!(recv_all(&mut a).len(), 2);
        assert_eq!(recv_all(&mut c).len(), 1);
        assert!(recv_all(&mut b).is_empty());
        assert_eq!(sim.stats(seg).delivered, 2 + 2 + 1);
    }

    #[test]
    fn equal_times_keep_send_order_and_recv_truncates() {
        let (sim, _, [mut a, mut b, _c]) = three();
        for tag in 0..10 {
            a.send(&frame(BCAST, mac(0, 1), 100, tag)).unwrap();
        }
        advance(&sim, Duration::from_millis(1));
        let got = recv_all(&mut b);
        let tags: Vec<u8> = got.iter().map(|f| f[20]).collect();
        assert_eq!(tags, (0..10).collect::<Vec<_>>());
        a.send(&frame(BCAST, mac(0, 1), 100, 0)).unwrap();
        advance(&sim, Duration::from_millis(1));
        let mut small = [0u8; 30];
        assert_eq!(b.recv(&mut small).unwrap(), Some(30));
    }

    #[test]
    fn mtu_drops_and_counts_once() {
        let mut sim = Sim::new(1);
        let seg = sim.add_segment(SegmentConfig {
            mtu: 1000,
            ..SegmentConfig::default()
        });
        let (mut a, mut b, mut c) = (sim.attach(seg), sim.attach(seg), sim.attach(seg));
        assert_eq!((a.mtu(), a.max_frame()), (1000, 1014));
        a.send(&frame(BCAST, mac(0, 1), 1014, 0)).unwrap();
        a.send(&frame(BCAST, mac(0, 1), 1015, 0)).unwrap();
        advance(&sim, Duration::from_millis(1));
        assert_eq!(recv_all(&mut b).len(), 1);
        assert_eq!(recv_all(&mut c).len(), 1);
        let s = sim.stats(seg);
        assert_eq!((s.delivered, s.too_big), (2, 1));
    }

    #[test]
    fn partition_blocks_and_heal_resumes() {
        let (mut sim, seg, [mut a, mut b, mut c]) = three();
        let p = sim.partition(&[a.port()], &[b.port()]);
        a.send(&frame(BCAST, mac(0, 1), 60, 0)).unwrap();
        b.send(&frame(BCAST, mac(0, 2), 60, 0)).unwrap();
        advance(&sim, Duration::from_millis(1));
        assert!(recv_all(&mut a).is_empty());
        assert!(recv_all(&mut b).is_empty());
        assert_eq!(recv_all(&mut c).len(), 2, "c is on neither side");
        assert_eq!(sim.stats(seg).partitioned, 2);

        sim.heal(p);
        sim.heal(p);
        a.send(&frame(BCAST, mac(0, 1), 60, 0)).unwrap();
        advance(&sim, Duration::from_millis(1));
        assert_eq!(recv_all(&mut b).len(), 1);
        assert_eq!(sim.stats(seg).partitioned, 2);
    }

    #[test]
    fn loss_rate_is_roughly_the_configured_one() {
        let mut sim = Sim::new(9);
        let seg = sim.add_segment(SegmentConfig {
            loss: 0.2,
            ..SegmentConfig::default()
        });
        let (mut a, mut b) = (sim.attach(seg), sim.attach(seg));
        for _ in 0..5000 {
            a.send(&frame(BCAST, mac(0, 1), 60, 0)).unwrap();
        }
        advance(&sim, Duration::from_millis(1));
        let got = recv_all(&mut b).len() as u64;
        let s = sim.stats(seg);
        assert_eq!(s.lost + s.delivered, 5000);
        assert_eq!(got, s.delivered);
        assert!(
            (900..1100).contains(&s.lost),
            "lost {} of 5000 at 20%",
            s.lost
        );
    }

    #[test]
    fn reordered_frames_are_overtaken() {
        let mut sim = Sim::new(3);
        let seg = sim.add_segment(SegmentConfig {
            reorder: 0.3,
            ..SegmentConfig::default()
        });
        let (mut a, mut b) = (sim.attach(seg), sim.attach(seg));
        for tag in 0..100 {
            a.send(&frame(BCAST, mac(0, 1), 60, tag)).unwrap();
        }
        advance(&sim, Duration::from_millis(10));
        let tags: Vec<u8> = recv_all(&mut b).iter().map(|f| f[20]).collect();
        let mut sorted = tags.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..100).collect::<Vec<_>>(), "all arrive once");
        assert_ne!(tags, sorted, "none overtaken");
        assert!(sim.stats(seg).reordered > 0);
    }

    #[test]
    fn detached_port_gets_nothing_and_does_not_stall() {
        let (sim, seg, [mut a, b, mut c]) = three();
        drop(b);
        a.send(&frame(BCAST, mac(0, 1), 60, 0)).unwrap();
        assert_eq!(sim.stats(seg).delivered, 1);
        advance(&sim, Duration::from_millis(1));
        assert_eq!(recv_all(&mut c).len(), 1);
        assert_eq!(sim.fabric.borrow().next_delivery(sim.now()), None);
    }

    fn lossy_trace(seed: u64) -> (u64, Vec<TraceEvent>) {
        let mut sim = Sim::new(seed);
        sim.record_trace(true);
        let seg = sim.add_segment(SegmentConfig {
            loss: 0.3,
            jitter: Duration::from_micros(500),
            reorder: 0.1,
            ..SegmentConfig::default()
        });
        let (mut a, _b, _c) = (sim.attach(seg), sim.attach(seg), sim.attach(seg));
        for tag in 0..50 {
            a.send(&frame(BCAST, mac(0, 1), 60 + usize::from(tag), tag))
                .unwrap();
        }
        let trace = sim.trace().to_vec();
        (sim.trace_hash(), trace)
    }

    #[test]
    fn same_seed_same_trace_other_seed_other_trace() {
        let (h1, t1) = lossy_trace(5);
        let (h2, t2) = lossy_trace(5);
        let (h3, t3) = lossy_trace(6);
        assert_eq!(t1.len(), 100);
        assert_eq!((h1, &t1), (h2, &t2));
        assert_ne!(h1, h3);
        assert_ne!(t1, t3);
    }

    /// A scripted peer: broadcasts a frame every `every` until `count` sent,
    /// counts what it hears.
    struct Beacon {
        link: SimLink,
        every: Duration,
        next: Instant,
        left: u32,
        heard: u32,
    }

    impl SimNode for Beacon {
        fn poll(&mut self, now: Instant) -> io::Result<bool> {
            let mut any = false;
            let mut buf = [0u8; 1514];
            while self.link.recv(&mut buf)?.is_some() {
                self.heard += 1;
                any = true;
            }
            if self.left > 0 && now >= self.next {
                self.link.send(&frame(BCAST, mac(0, 9), 60, 0))?;
                self.left -= 1;
                self.next = now + self.every;
                any = true;
            }
            Ok(any)
        }

        fn poll_at(&mut self, _now: Instant) -> Option<Instant> {
            (self.left > 0).then_some(self.next)
        }

        fn name(&self) -> &str {
            "beacon"
        }
    }

    fn beacons(loss: f64) -> (Sim, NodeId<Beacon>, NodeId<Beacon>) {
        let mut sim = Sim::new(2);
        let seg = sim.add_segment(SegmentConfig {
            loss,
            ..SegmentConfig::default()
        });
        let beacon = |sim: &mut Sim, every| {
            let link = sim.attach(seg);
            sim.add_node(Beacon {
                link,
                every: Duration::from_millis(every),
                next: Instant::ZERO,
                left: 5,
                heard: 0,
            })
        };
        let a = beacon(&mut sim, 10);
        let b = beacon(&mut sim, 100);
        (sim, a, b)
    }

    #[test]
    fn drive_jumps_virtual_time_to_events() {
        let (mut sim, a, b) = beacons(0.0);
        let t = sim
            .drive_bounded(Duration::from_secs(10), 1000, |s| s.node(b).heard == 5)
            .unwrap();
        // a's fifth beacon leaves at 40 ms and arrives 1 ms later.
        assert_eq!(t, Instant::from_millis(41));
        assert!(sim.steps() < 50, "{} steps for 10 events", sim.steps());
        sim.node_mut(a).heard = 0;
        sim.drive_bounded(Duration::from_secs(10), 1000, |s| s.node(a).heard == 4)
            .unwrap();
        assert_eq!(sim.now(), Instant::from_millis(401));
    }

    #[test]
    fn drive_fails_when_quiet_or_out_of_time_or_steps() {
        let (mut sim, _, b) = beacons(1.0);
        let e = sim
            .drive_bounded(Duration::from_secs(10), 1000, |s| s.node(b).heard > 0)
            .unwrap_err();
        assert!(matches!(e.kind, SimErrorKind::Quiet), "{e}");
        assert_eq!(e.now, Instant::from_millis(400));
        assert!(
            e.to_string().contains("quiet at virtual time 0.400s"),
            "{e}"
        );

        // a hears b's beacons at 1, 101, ... 401 ms.
        let (mut sim, a, _) = beacons(0.0);
        let e = sim
            .drive_bounded(Duration::from_millis(100), 1000, |s| s.node(a).heard == 5)
            .unwrap_err();
        assert!(matches!(e.kind, SimErrorKind::TimeLimit), "{e}");

        let (mut sim, _, b) = beacons(0.0);
        let e = sim.drive_bounded(Duration::from_secs(10), 3, |s| s.node(b).heard == 5);
        assert!(matches!(e.unwrap_err().kind, SimErrorKind::StepLimit));
    }

    #[test]
    fn run_for_ends_exactly_later() {
        let (mut sim, a, _) = beacons(0.0);
        sim.run_for(Duration::from_millis(25)).unwrap();
        assert_eq!(sim.now(), Instant::from_millis(25));
        assert_eq!(sim.node(a).heard, 1);
        sim.run_for(Duration::from_secs(5)).unwrap();
        assert_eq!(sim.now(), Instant::from_millis(5025));
        assert_eq!(sim.node(a).heard, 5);
    }

    #[test]
    fn port_helper_addresses() {
        let mut sim = Sim::new(0);
        let _lan = sim.add_segment(SegmentConfig::default());
        let wan = sim.add_segment(SegmentConfig::default());
        let (cfg, link) = sim.port(wan, 7);
        assert_eq!(cfg.name, "eth1");
        assert_eq!(cfg.mac, EthernetAddress([2, 0, 0, 0, 1, 7]));
        assert_eq!(cfg.addrs[0].to_string(), "10.0.1.7/24");
        assert_eq!(cfg.addrs[1].to_string(), "fd00:0:0:1::7/64");
        assert_eq!(
            link.port(),
            SimPort {
                segment: wan,
                index: 0
            }
        );
    }
}
