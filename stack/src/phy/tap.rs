//! A Linux TAP device as a [`Link`] (and as a plain `smoltcp::phy::Device`).
//!
//! Plain mode opens the TAP through the `tun-tap` crate. Offload mode opens it
//! with a virtio-net header and TCP segmentation offloads (`IFF_VNET_HDR` +
//! `TUNSETOFFLOAD`, see `phy/sys.rs`): the kernel then hands over TCP
//! super-frames of up to 64 KiB whose checksum it left for us to complete,
//! and bulk transfers into a node run several times faster. We never send
//! super-frames: every frame we write carries an empty virtio-net header.
//!
//! The device does not create the TAP: `svcroute lab` (or the user, with
//! `ip tuntap add`) does, and attaches it to a bridge. Opening brings the
//! link up.

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, RawFd};

use smoltcp::phy::{self, DeviceCapabilities, Medium};
use smoltcp::time::Instant;
use tun_tap::{Iface, Mode};

use super::{sys, Link};

/// Largest frame accepted in offload mode.
pub const MAX_OFFLOAD_FRAME: usize = 65_536 + 14;

/// virtio-net header flag: the checksum at `csum_start + csum_offset` is only
/// the pseudo-header sum and must be completed.
const VNET_F_NEEDS_CSUM: u8 = 1;

enum Inner {
    Plain(Iface),
    Vnet(File),
}

/// An open TAP device.
pub struct TapLink {
    name: String,
    inner: Inner,
    mtu: usize,
}

impl TapLink {
    /// Open TAP `name`; with `offload`, negotiate the virtio-net header and
    /// TSO so the kernel may hand over 64 KiB super-frames.
    pub fn open(name: &str, offload: bool) -> io::Result<Self> {
        let ctx = |e: io::Error| io::Error::new(e.kind(), format!("TAP {name}: {e}"));
        let inner = if offload {
            Inner::Vnet(sys::open_tap_vnet(name).map_err(ctx)?)
        } else {
            let iface = Iface::without_packet_info(name, Mode::Tap).map_err(ctx)?;
            iface.set_non_blocking().map_err(ctx)?;
            Inner::Plain(iface)
        };
        sys::set_link_up(name).map_err(ctx)?;
        let mtu = sys::link_mtu(name).map_err(ctx)?;
        Ok(Self {
            name: name.to_owned(),
            inner,
            mtu,
        })
    }

    /// The TAP's interface name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether the TAP was opened with offloads.
    pub fn offload(&self) -> bool {
        matches!(self.inner, Inner::Vnet(_))
    }
}

fn would_block<T>(r: io::Result<T>) -> io::Result<Option<T>> {
    match r {
        Ok(v) => Ok(Some(v)),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(None),
        Err(e) => Err(e),
    }
}

impl Link for TapLink {
    fn recv(&mut self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        match &mut self.inner {
            Inner::Plain(iface) => would_block(iface.recv(buf)),
            Inner::Vnet(file) => {
                // The header and the frame land in their own buffers: no copy.
                let mut hdr = [0u8; sys::VNET_HDR_LEN];
                let Some(n) = would_block(sys::readv2(file.as_raw_fd(), &mut hdr, buf))? else {
                    return Ok(None);
                };
                let len = n.saturating_sub(sys::VNET_HDR_LEN).min(buf.len());
                if hdr[0] & VNET_F_NEEDS_CSUM != 0 {
                    let start = usize::from(u16::from_le_bytes([hdr[6], hdr[7]]));
                    let off = usize::from(u16::from_le_bytes([hdr[8], hdr[9]]));
                    complete_checksum(&mut buf[..len], start, off);
                }
                Ok(Some(len))
            }
        }
    }

    fn send(&mut self, frame: &[u8]) -> io::Result<bool> {
        let r = match &mut self.inner {
            Inner::Plain(iface) => would_block(iface.send(frame)),
            Inner::Vnet(file) => {
                // An empty header: no offload asked for this frame.
                let hdr = [0u8; sys::VNET_HDR_LEN];
                would_block(sys::writev2(file.as_raw_fd(), &hdr, frame))
            }
        };
        match r {
            Ok(Some(_)) => Ok(true),
            Ok(None) => Ok(false),
            // The kernel refuses a frame it finds malformed (EINVAL) or too
            // big (EMSGSIZE), and every frame while the TAP is down (EIO,
            // e.g. `ip link set TAP down` to cut a lab link): those frames
            // are lost, the node goes on and resumes when the link is up.
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::EINVAL | libc::EMSGSIZE | libc::EIO)
                ) =>
            {
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }

    fn max_frame(&self) -> usize {
        match self.inner {
            Inner::Plain(_) => self.mtu + 18,
            Inner::Vnet(_) => MAX_OFFLOAD_FRAME,
        }
    }

    fn mtu(&self) -> usize {
        self.mtu
    }

    fn raw_fd(&self) -> Option<RawFd> {
        Some(match &self.inner {
            Inner::Plain(iface) => iface.as_raw_fd(),
            Inner::Vnet(file) => file.as_raw_fd(),
        })
    }
}

/// Complete a partial checksum the way a virtio device does: sum everything
/// from `start` (the field holds the pseudo-header sum) and store the
/// complement at `start + off`.
pub(super) fn complete_checksum(frame: &mut [u8], start: usize, off: usize) {
    let at = start + off;
    if start >= frame.len() || at + 2 > frame.len() {
        return;
    }
    let sum = crate::wire::checksum::ones_complement_sum(&frame[start..], 0);
    let c = !sum;
    frame[at..at + 2].copy_from_slice(&c.to_be_bytes());
}

/// Receive token of [`TapLink`] used as a smoltcp device.
pub struct TapRxToken(Vec<u8>);
/// Transmit token of [`TapLink`] used as a smoltcp device.
pub struct TapTxToken<'a>(&'a mut TapLink);

impl phy::Device for TapLink {
    type RxToken<'a> = TapRxToken;
    type TxToken<'a> = TapTxToken<'a>;

    fn receive(&mut self, _now: Instant) -> Option<(TapRxToken, TapTxToken<'_>)> {
        let mut buf = vec![0; self.max_frame()];
        match self.recv(&mut buf) {
            Ok(Some(n)) => {
                buf.truncate(n);
                Some((TapRxToken(buf), TapTxToken(self)))
            }
            Ok(None) => None,
            Err(e) => {
                log::error!("TAP {}: receive failed: {e}", self.name);
                None
            }
        }
    }

    fn transmit(&mut self, _now: Instant) -> Option<TapTxToken<'_>> {
        Some(TapTxToken(self))
    }

    fn capabilities(&self) -> DeviceCapabilities {
        let mut caps = DeviceCapabilities::default();
        caps.medium = Medium::Ethernet;
        caps.max_transmission_unit = self.mtu + 14;
        caps
    }
}

impl phy::RxToken for TapRxToken {
    fn consume<R, F: FnOnce(&[u8]) -> R>(self, f: F) -> R {
        f(&self.0)
    }
}

impl phy::TxToken for TapTxToken<'_> {
    fn consume<R, F: FnOnce(&mut [u8]) -> R>(self, len: usize, f: F) -> R {
        let mut buf = vec![0; len];
        let r = f(&mut buf);
        if let Err(e) = self.0.send(&buf) {
            log::error!("TAP {}: send failed: {e}", self.0.name);
        }
        r
    }
}
