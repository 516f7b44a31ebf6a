//! The frame pipeline between a link and smoltcp.
//!
//! Every frame passes the shim twice at most: on **ingress** (link → smoltcp)
//! and on **egress** (smoltcp → link). For each, the node's role returns a
//! [`Verdict`]: pass the (possibly rewritten) frame on, consume it (the role
//! took it: a router forwarded it, a control plane handled it), or drop it
//! with a reason that lands in the node's counters. At any time the role may
//! also [inject](Outbox) frames toward a port's wire or a port's smoltcp.
//!
//! [`edit`] holds the generic frame surgery every role needs: walking IPv6
//! extension headers, inserting and stripping our Destination Options header,
//! and rewriting addresses with an incremental checksum fix.

pub mod edit;

/// What happens to a frame the shim looked at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Hand the frame (as it now is in the buffer) to the next layer.
    Pass,
    /// The role took the frame; nothing more happens to it here.
    Consume,
    /// Discard the frame, counting `reason` (a short `snake_case` tag).
    Drop(&'static str),
}

/// Where an injected frame goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// Out of the port's link (skips the egress shim).
    ToWire,
    /// Into the port's smoltcp interface (skips the ingress shim).
    ToStack,
}

/// Frames a role injects while handling a frame or a timer.
#[derive(Debug, Default)]
pub struct Outbox {
    frames: Vec<(usize, Direction, Vec<u8>)>,
}

impl Outbox {
    /// Queue `frame` for `port` in direction `dir`.
    pub fn inject(&mut self, port: usize, dir: Direction, frame: Vec<u8>) {
        self.frames.push((port, dir, frame));
    }

    /// Whether nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.frames.is_empty()
    }

    /// Take every queued frame, in the order they were injected.
    pub fn drain(&mut self) -> std::vec::Drain<'_, (usize, Direction, Vec<u8>)> {
        self.frames.drain(..)
    }
}
