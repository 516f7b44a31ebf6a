//! # The sar role: a ROSA Service Address Router (sans-IO core)
//!
//! A SAR routes on *service addresses* (SPEC §2, draft-trossen-rtgwg-rosa-
//! arch): a client sends its first packet for a service to its ingress SAR
//! with a ROSA option naming the service; the SAR picks an instance — by a
//! scheduling policy at the ingress, or by routing towards the best instance
//! over the SAR IGP — and rewrites the destination; the instance's response
//! comes back through the ingress, which tells the client which instance
//! answered, so the rest of the transaction goes there directly.
//!
//! ```text
//!   instance ─ announcement (0x3E, HMAC) ─►┐
//!   client ── request ────────────────────►│ decide ─► Action (rewrite to instance / next SAR,
//!   instance ─ response ──────────────────►│            deliver, response to ingress / client, drop)
//!                                          ▼
//!        ┌────────────── Sar (core) ─────────────────────────────┐
//!        │ FIB: name ─longest segment prefix─► FibEntry          │
//!        │        (hash per prefix length, full name compared)   │
//!        │ NHIB: instances (metrics, lifetime) + routes per SAR  │
//!        │ policy: random, RR, smooth WRR, min-metric, App-Metrics│
//!        │         shortest / constraint-based routing           │
//!        │ IGP: hellos + RTT, reliable flooding, LSDB, Dijkstra  │
//!        └──────────────────────┬────────────────────────────────┘
//!   neighbour SARs ◄── Transmit { to_neighbor, bytes } (UDP 7470) ──► handle_igp
//! ```
//!
//! - [`fib`]: the longest-segment-prefix table.
//! - [`nhib`]: instance rows and routing entries.
//! - [`policy`]: steering and the picks, as pure functions.
//! - [`decide`]: request/response decisions over a packet view.
//! - [`igp`]: the link-state protocol; [`spf`]: Dijkstra.
//! - [`core`]: [`Sar`], which ties them together (call order there).
//! - [`sim`]: a deterministic in-memory bus of SAR cores, for tests and
//!   benchmarks.
//!
//! The node around the core (the only I/O, STYLE.md 6):
//!
//! - [`driver`]: [`driver::SarNode`], the `sar` role: the IPv6 router, the
//!   ROSA data path through `stack::shim::edit`, the IGP over UDP 7470.
//! - [`config`]: the `[sar]` section of a node file.
//! - [`router`]: the IPv6 routing table; [`icmp`]: ICMPv6 errors;
//!   [`frag`]: IPv6 fragments of IGP datagrams larger than a link's MTU.
//! - [`sag`]: the Service Access Gateway (role `sag`, a SAR that
//!   originates `*`): DNS resolution with a TTL cache, the stateful proxy
//!   to non-ROSA servers, hand-overs between domains' SAGs.
//!
//! See `docs/sar.md`. The core does no I/O and reads no clock: time is
//! always the `now` passed in.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod config;
mod control;
pub mod core;
mod counters;
pub(crate) mod datapath;
pub mod decide;
pub mod driver;
pub mod fib;
pub mod forward;
pub mod frag;
pub mod fuzz;
mod gateway;
pub mod icmp;
pub mod igp;
pub mod nhib;
pub mod policy;
pub mod router;
pub mod sag;
pub mod sim;
pub mod spf;
mod steer;
pub mod sticky;
mod sticky_path;
#[cfg(test)]
mod tests;

pub use crate::config::{SarConfig, Settings};
pub use crate::core::{Announced, Config, FibEntry, Sar};
pub use crate::counters::Counters;
pub use crate::decide::{Action, AnnounceError, Choice, DropReason, Fill, PacketView, PortKind};
pub use crate::driver::SarNode;
pub use crate::igp::{IgpConfig, Key, LinkId, Transmit};
pub use crate::policy::{EntrySteering, RoutePolicy, SchedPolicy, Steering};
