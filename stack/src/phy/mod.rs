//! Devices: the things that move whole Ethernet frames in and out of a node.
//!
//! Every device implements [`Link`], the one raw-frame interface the node loop
//! ([`crate::runtime`]) drives. smoltcp never talks to a device directly: the
//! loop drains a link into the [shim](crate::shim), hands the frames the shim
//! passes to smoltcp through an in-memory queue device, and pushes smoltcp's
//! output back through the shim onto the link. That keeps a router's data path
//! (which never reaches smoltcp) and an endpoint's (which does) on one path.
//!
//! ```text
//!   TapLink / SimLink ──recv──▶ shim ingress ──▶ QueueDevice ──▶ smoltcp
//!          ▲                                                      │
//!          └──────send──── shim egress ◀── QueueDevice ◀──────────┘
//! ```
//!
//! - [`tap`]: a Linux TAP device (optionally with virtio-net offloads).
//! - [`sim`]: in-memory L2 segments with a virtual clock, for deterministic
//!   multi-node tests.
//! - [`queue`]: the in-memory `smoltcp::phy::Device` the loop feeds.
//! - [`pcap`]: a link wrapper that records every frame to a pcap file.

use std::io;
use std::os::fd::RawFd;

pub mod pcap;
pub mod queue;
pub mod sim;
#[allow(unsafe_code)]
pub(crate) mod sys;
pub mod tap;

/// A raw Ethernet frame link under the node loop.
///
/// Implementations are non-blocking: `recv` returns `Ok(None)` when no frame
/// is pending, `send` returns `Ok(false)` when the frame was not sent (queue
/// full, link down, frame refused; the caller counts the drop). An `Err` is
/// a real failure of the device; the node logs it and stops cleanly.
pub trait Link {
    /// Receive one frame into `buf`, returning its length.
    ///
    /// A frame longer than `buf` is truncated by the device; size `buf` with
    /// [`Link::max_frame`].
    fn recv(&mut self, buf: &mut [u8]) -> io::Result<Option<usize>>;

    /// Send one whole frame.
    fn send(&mut self, frame: &[u8]) -> io::Result<bool>;

    /// The largest frame this link can deliver, in bytes (Ethernet header
    /// included). With TAP offloads this is far above the MTU.
    fn max_frame(&self) -> usize;

    /// The MTU of the link (IP packet size, Ethernet header excluded).
    fn mtu(&self) -> usize;

    /// A file descriptor that becomes readable when frames are pending, for
    /// `poll(2)`. `None` for links without one (the simulated segment).
    fn raw_fd(&self) -> Option<RawFd>;
}

impl<L: Link + ?Sized> Link for Box<L> {
    fn recv(&mut self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        (**self).recv(buf)
    }
    fn send(&mut self, frame: &[u8]) -> io::Result<bool> {
        (**self).send(frame)
    }
    fn max_frame(&self) -> usize {
        (**self).max_frame()
    }
    fn mtu(&self) -> usize {
        (**self).mtu()
    }
    fn raw_fd(&self) -> Option<RawFd> {
        (**self).raw_fd()
    }
}
