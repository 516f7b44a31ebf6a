//! # The mda role: a mesh-enhanced SLPv2 directory agent (being written)
//!
//! - `core`: the sans-IO DA and mesh state machine.
//! - `wal`: the write-ahead log that makes an acknowledged registration
//!   survive a crash.

#![forbid(unsafe_code)]
#![warn(missing_docs)]
