//! # The ROSA endpoint shim (SPEC §2.2)
//!
//! ROSA puts service names into an IPv6 Destination Options header (option
//! `0x3E`) instead of into DNS. The shim sits between smoltcp and the wire
//! and does an endpoint's part of it, so that smoltcp's TCP and UDP never
//! see anything but one stable peer per service:
//!
//! ```text
//!  client host                                             instance host
//!  smoltcp ── [V] ──┐                                   ┌── [CIP] ── smoltcp
//!                   │ egress: V→ingress + Request       │ ingress: src→Client
//!                   ▼                                   │ egress: CIP→SAR + Response
//!   (CIP,SAR){Request} ──► ingress SAR ──(SAR,SI){Request}──►│ (until the first direct packet)
//!   (SAR,CIP){Response} ◄── SAR ◄──(SI,SAR){Response} ───────┘
//!   (CIP,SI) plain ──────────────────────────────────────────► (affinity: no option)
//!   (SI,CIP) plain ◄──────── ingress: src SI→V ◄──────────────── direct
//! ```
//!
//! - **Client side.** A service name gets a virtual address `V` inside
//!   `virtual_prefix` (the name's SPEC §0 hash as the host part). smoltcp
//!   connects to `V` through a route of the virtual prefix via the ingress
//!   SAR. Until a Service Response arrives for a transport flow, each of its
//!   packets leaves toward the ingress SAR with a Service Request (Client,
//!   Ingress, Service, Port). The Response's Instance binds the flow: later
//!   packets go straight to the instance, plain, and the instance's packets
//!   are rewritten to come from `V`.
//! - **Instance side.** A request delivered to us has its source rewritten
//!   to its Client entry; our answers carry a Service Response (Client,
//!   Ingress, Service, Port, Instance) to our own SAR until the client's
//!   first plain packet of the flow arrives, then go straight to the client.
//!   Announcements leave at start and every `lifetime/3`, withdrawals at stop.
//!
//! A *transaction* is one transport flow (TCP connection, or UDP local and
//! remote port pair): each picks its instance afresh, and keeps it.
//!
//! [`Shim`] is sans-IO: frames, `now` and counters in; verdicts, frames to
//! send and next hops to resolve out. `crate::Host` drives it; in TUN mode
//! ([`tun`], `svcroute shim --tun`) [`tun::TunShim`] drives it for a kernel
//! client's packets instead of smoltcp's. The wire view of every step is in
//! `docs/shim.md`.

mod config;
pub(crate) mod frame;
mod neighbor;
mod shim;
pub mod tun;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tun_tests;

pub use config::{RosaConfig, ServeConfig, LIFETIME_RANGE};
pub use neighbor::{ASK_INTERVAL, MAX_BINDINGS, MAX_PARKED, PARK_TIMEOUT};
pub use shim::{OpenError, PortInfo, Shim, Target, SWEEP_INTERVAL};

/// Octets the shim may add to a packet smoltcp sends: a Destination
/// Options header with the largest ROSA request or response it builds
/// (Client, Ingress, Instance and SAG as IPv6, Port, a 128-octet name:
/// 208 octets of option data), padded to 8.
pub const HEADER_RESERVE: usize = 216;
