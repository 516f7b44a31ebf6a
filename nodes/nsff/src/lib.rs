//! The nsff role (RFC 8677 name-based SFC; SPEC §1): the name-based service
//! function forwarder.
//!
//! Where things live: [`driver`] holds [`Nsff`], the `Role` glue that runs
//! the sans-IO HTTP proxy [`core::Proxy`] on the node's smoltcp sockets;
//! [`config`] is the node file's `[nsff]`. The proxy drives two sans-IO
//! parts of its own:
//!
//! ```text
//!   core::Proxy (HTTP) ──► transport::Endpoint ──► GFF data / NACK over pathIDs
//!          │                      ▲
//!          └── cache::PathCache ──┘ FQDN → (forward, reverse, serving nSFF),
//!                 │                   path requests to the NR, path updates flush
//!                 └──► wire::nr PathRequest ──► NR
//! ```
//!
//! - [`transport`]: the nSFF-to-nSFF reliable transport (SPEC §1.3).
//! - [`cache`]: the FQDN → pathID cache with pending resolutions (SPEC §1.2).
//! - [`core`]: the HTTP proxy by `Host` name (or explicit proxy target)
//!   over the transport, local SFs with health checks, NR registration, in
//!   rooms (client side, SF connections, egress, TLS passthrough, local
//!   SFs) and one map of refusals to HTTP statuses and TLS alerts.
//! - [`driver`]: the [`Nsff`] role: sockets, pools, REST server, GFF in,
//!   classic SFF and transparent interception on the node's ports.
//! - [`tls`]: the SNI of a TLS ClientHello, for TLS passthrough on
//!   `https_port` (one transaction per TCP session, bytes relayed
//!   unmodified both ways; see [`core::passthrough`]).
//! - [`classic`]: the classic SFF beside it (SPEC §1.4 classic next hops):
//!   NSH over Ethernet, GRE or VXLAN-GPE in, nNLM lookup by (SPI, SI), TTL
//!   decremented, re-encapsulated toward the row's next hop
//!   (`[[nsff.nnlm]]`, `[nsff.classic]`).
//! - [`sfc`]: HTTP service function chaining: (SPI, SI) from the `NSH`
//!   request header or `[[nsff.classifier]]` rules, the nNLM row's name
//!   or `http-service` next hop decides where the request goes, 421 when
//!   nothing fits.
//! - [`rest`]: local SF registration over REST on `sf_port`
//!   (`POST /sf`, `DELETE /sf/<fqdn>`, `GET /sf`; `sf_rest_port` 8080);
//!   [`store`] keeps those SFs in `state_file` across restarts.
//! - [`health`]: when a local SF is up or down, from probes and from the
//!   exchanges proxied to it.
//! - [`transparent`]: transparent interception on the client port: TCP to
//!   `http_port`/`https_port` of *any* destination routed through the
//!   nSFF is terminated as that destination (`transparent` key; smoltcp
//!   `any_ip` behind a frame filter that keeps everything else out).
//!
//! See `docs/nsff.md`.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod cache;
pub mod classic;
pub mod config;
pub mod core;
pub mod driver;
pub mod health;
pub mod rest;
pub mod sfc;
pub mod store;
pub mod tls;
pub mod transparent;
pub mod transport;

pub use config::{NnlmRowConfig, NsffConfig, SfConfig};
pub use driver::Nsff;
