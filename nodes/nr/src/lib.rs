//! # The nr role: RFC 8677's Name Resolver
//!
//! nSFFs register the names of their local service functions here and ask
//! where a name is served; the NR answers with the serving nSFF and the
//! forward and reverse pathIDs through the path-based fabric of `fwd` nodes,
//! and tells exactly the affected nSFFs when an answer goes stale.
//!
//! ```text
//!   nSFF ──GFF 3 registration──▶ ┐                          ┌─▶ registration table
//!   nSFF ──GFF 4 path request──▶ ├─ [Nr driver: ingress] ─▶ NrCore ─▶ discovery table
//!   fwd  ──GFF 7 link event────▶ ┘                          └─▶ fabric model (config)
//!   nSFF ◀─GFF 5 response / 6 update── [Nr driver: Outbox ToWire] ◀── poll_transmit
//!   orchestrator ──HTTP POST /register──▶ [REST on smoltcp TCP] ──▶ NrCore::register
//! ```
//!
//! - [`config`]: the `[nr]` section, with the fabric (links, attachments).
//! - [`fabric`]: the fabric model and shortest-path computation.
//! - [`core`]: [`NrCore`], the sans-IO resolver: tables, policy, updates.
//! - [`driver`]: [`Nr`], the [`svcroute_stack::runtime::Role`]: GFF in and
//!   out through the shim, REST on the node's smoltcp stack, ctl commands.
//!
//! See `docs/nr.md` for config keys, REST API, counters and a session.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod config;
pub mod core;
pub mod driver;
pub mod fabric;
mod rest;

pub use crate::config::{ConfigError, NrConfig};
pub use crate::core::{FewestLinks, NrCore, Policy, Refusal, Transmit};
pub use crate::driver::Nr;
