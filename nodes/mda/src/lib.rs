//! # The mda role: a mesh-enhanced SLPv2 directory agent
//!
//! An RFC 2608 directory agent that, with the `mesh-enhanced` keyword in
//! its DAAdvert, peers with every other MDA sharing a scope and keeps their
//! registration databases equal (RFC 3528: accept IDs, version timestamps,
//! direct forwarding, anti-entropy, tombstones).
//!
//! ```text
//!   UDP/TCP 427 (smoltcp) ── driver::Mda (Role) ── frames, sockets, Persist hook
//!                                   │  handle_udp / handle_tcp / tcp_* / handle_timeout
//!                                   ▼
//!                            core::Mda (sans-IO) ── Event::Persist ──► WAL (before the SrvAck)
//!                                   └─ Transmit (UDP / TCP) ──► sockets
//! ```
//!
//! - [`core`]: the sans-IO DA and mesh state machine.
//! - [`driver`]: the [`Role`](svcroute_stack::runtime::Role) over smoltcp.
//! - [`config`]: the `[mda]` section of the node file.
//! - [`store`]: the [`Persist`](driver::Persist) of a running node, over the WAL.
//! - `wal`: the write-ahead log that makes an acknowledged registration
//!   survive a crash.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod config;
pub mod core;
pub mod driver;
pub mod store;
pub mod wal;
