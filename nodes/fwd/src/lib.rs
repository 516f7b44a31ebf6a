//! The `fwd` role: the path-based (LIPSIN-style bit-field) switch of the
//! operator fabric between nSFFs and the Name Resolver (RFC 8677 §4.2's
//! "Forwarders"; SPEC §1.1).
//!
//! Every *directed* fabric link has a link ID, one bit position 0..=255. A
//! pathID is the OR of the link IDs along a path; it travels as the IPv6
//! source ‖ destination of a GFF packet (next header 253). A switch sends a
//! packet arriving on port *q* out of every port *p ≠ q* whose outgoing link
//! ID is set in the pathID — several paths OR-ed together multicast — with the
//! hop limit decremented (dropped at 0). It keeps no forwarding table: the
//! packet carries its route.
//!
//! ```text
//!   port q ──► FwdCore::process ──► Verdict::Forward({p | bit(link_id(p)) ∧ p ≠ q})
//!                 │                    └► one copy per port, Ethernet dst = the
//!                 │                       neighbour's MAC (from its hellos)
//!                 ├► Verdict::Control: a link hello (type 8) → link state
//!                 └► Verdict::Drop(reason): counted as drop.<reason>
//!
//!   timers ──► FwdCore::handle_timeout: hellos every hello_ms on every port;
//!              a link silent for dead_ms is down → link events (type 7) to
//!              the NR over nr_path; hellos again → up → events again
//! ```
//!
//! Where things live: [`core`] holds [`FwdCore`], the sans-IO protocol
//! logic (verdicts, hellos, liveness, link events); [`driver`] holds
//! [`Fwd`], the thin `Role` glue that runs it inside a node's ingress shim;
//! [`config`] holds [`FwdConfig`], the `[fwd]` section of the node file.
//! See `docs/fwd.md`.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod config;
pub mod core;
pub mod driver;

pub use crate::config::{AuthConfig, ConfigError, FwdConfig};
pub use crate::core::FwdCore;
pub use crate::driver::Fwd;
