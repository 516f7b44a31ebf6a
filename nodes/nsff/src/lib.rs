//! The nsff role (RFC 8677 name-based SFC; SPEC §1): the name-based service
//! function forwarder.
//!
//! Being written. The parts so far are sans-IO:
//!
//! ```text
//!   HTTP proxy (later) ──► transport::Endpoint ──► GFF data / NACK over pathIDs
//!          │                      ▲
//!          └── cache::PathCache ──┘ FQDN → (forward, reverse, serving nSFF),
//!                 │                   path requests to the NR, path updates flush
//!                 └──► wire::nr PathRequest ──► NR
//! ```
//!
//! - [`transport`]: the nSFF-to-nSFF reliable transport (SPEC §1.3).
//! - [`cache`]: the FQDN → pathID cache with pending resolutions (SPEC §1.2).
//!
//! See `docs/nsff.md`.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod cache;
pub mod transport;
