//! # svcroute-stack: what every svcroute node shares
//!
//! A svcroute node is one single-threaded process that owns its own smoltcp
//! TCP/IP stack over a TAP device. This crate is everything such a node is
//! made of, except its protocol logic (the *role*, in `nodes/<role>`):
//!
//! ```text
//!          role (sans-IO core + driver)         nodes/<role>
//!        ─────────────────────────────────────────────────────
//!   runtime::Node   ports, timers, control, counters   runtime.rs, ctl.rs, stats.rs
//!     ├─ smoltcp Interface + SocketSet per port      (http.rs frames HTTP on TCP sockets)
//!     ├─ shim: ingress/egress verdicts per frame      shim/ (edit: IPv6 ext-header surgery)
//!     └─ phy::Link per port: TAP | simulated segment  phy/
//!   wire/: packet formats, smoltcp style
//! ```
//!
//! - [`phy`] moves whole Ethernet frames: [`phy::tap`] over the kernel.
//! - [`sim`] runs whole nodes on in-memory segments with a virtual clock.
//! - [`shim`] sees every frame before smoltcp (ingress) and after it (egress);
//!   routers forward there, endpoints insert and strip IPv6 options there.
//! - [`runtime`] is the node loop: [`runtime::Node`] does the work due at a
//!   given time, [`runtime::run`] drives it with `poll(2)` and real time.
//! - [`http`] frames HTTP/1.1 messages over smoltcp TCP sockets.
//! - [`wire`] holds the packet formats, one module per protocol.
//! - [`timer`] is the one timer shape of every role core.
//! - [`rest`] is the small JSON-over-HTTP server of the roles' REST APIs.
//!
//! No module but `phy::sys` uses `unsafe`.

#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod ctl;
#[doc(hidden)]
pub mod fuzz;
pub mod http;
pub mod listen;
pub mod neighbor;
pub mod phy;
pub mod rest;
pub mod runtime;
pub mod shim;
pub mod sim;
pub mod stats;
pub mod timer;
pub mod wire;
