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
//!   TapLink / PacketLink / SimLink ──recv──▶ shim ingress ──▶ QueueDevice ──▶ smoltcp
//!          ▲                                                      │
//!          └──send, flush── shim egress ◀── QueueDevice ◀─────────┘
//! ```
//!
//! - [`tap`]: a Linux TAP device (optionally with virtio-net offloads).
//! - [`packet`]: an AF_PACKET socket with mapped receive and transmit rings,
//!   on any interface (a microVM's `eth0`, a veth).
//! - [`guest`]: what a microVM's init needs from the kernel.
//! - [`queue`]: the in-memory `smoltcp::phy::Device` the loop feeds.
//! - [`pcap`]: a link wrapper that records every frame to a pcap file.
//! - [`impair`]: a link wrapper that delays, reorders, duplicates, corrupts
//!   and rate-limits what a node sends (`ctl <node> impair`).
//!
//! The simulated world that runs whole nodes on in-memory segments
//! ([`crate::sim`], whose `SimLink` is a `Link` too) builds on the node
//! loop, so it sits beside this module, not in it.

use std::io;
use std::os::fd::RawFd;

pub mod guest;
pub mod impair;
pub mod packet;
pub mod pcap;
pub mod queue;
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

    /// Send one whole frame. A link with a transmit queue of its own may
    /// only queue it until [`Link::flush`].
    fn send(&mut self, frame: &[u8]) -> io::Result<bool>;

    /// Hand every queued frame to the device: the node loop calls it once
    /// per pass, after the frames of that pass were sent (one system call
    /// per batch on a ring). Links that send at once do nothing.
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }

    /// Counters the device keeps itself (ring accounting), as absolute
    /// values; the node adds them to its `stats` answer. Names follow the
    /// node's scheme: `<device>.<event>`, drops `drop.<device>.<reason>`.
    fn counters(&self) -> Vec<(&'static str, u64)> {
        Vec::new()
    }

    /// The largest frame this link can deliver, in bytes (Ethernet header
    /// included). With TAP offloads this is far above the MTU.
    fn max_frame(&self) -> usize;

    /// The MTU of the link (IP packet size, Ethernet header excluded).
    fn mtu(&self) -> usize;

    /// A file descriptor that becomes readable when frames are pending, for
    /// `poll(2)`. `None` for links without one (the simulated segment).
    fn raw_fd(&self) -> Option<RawFd>;

    /// When the link has frames of its own to send (held by an
    /// [`impair::ImpairLink`]): the driver wakes then and calls
    /// [`Link::flush`].
    fn poll_at(&self) -> Option<std::time::Instant> {
        None
    }

    /// The impairment in force, for links that can impair (`None`: this
    /// link cannot).
    fn shape(&self) -> Option<impair::Shape> {
        None
    }

    /// Impair what is sent from now on; `false` if this link cannot.
    fn set_shape(&mut self, _shape: impair::Shape) -> bool {
        false
    }
}

impl<L: Link + ?Sized> Link for Box<L> {
    fn recv(&mut self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        (**self).recv(buf)
    }
    fn send(&mut self, frame: &[u8]) -> io::Result<bool> {
        (**self).send(frame)
    }
    fn flush(&mut self) -> io::Result<()> {
        (**self).flush()
    }
    fn counters(&self) -> Vec<(&'static str, u64)> {
        (**self).counters()
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
    fn poll_at(&self) -> Option<std::time::Instant> {
        (**self).poll_at()
    }
    fn shape(&self) -> Option<impair::Shape> {
        (**self).shape()
    }
    fn set_shape(&mut self, shape: impair::Shape) -> bool {
        (**self).set_shape(shape)
    }
}
