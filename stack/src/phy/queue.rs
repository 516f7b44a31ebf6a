//! The in-memory `smoltcp::phy::Device` between the node loop and smoltcp.
//!
//! The loop pushes frames the shim passed into `rx`; smoltcp's output lands in
//! `tx`, from where the loop takes it through the shim's egress. Buffers are
//! recycled through a free list shared with the receive tokens (smoltcp
//! drops a token once it has read the frame), so the steady state allocates
//! nothing.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;

use smoltcp::phy::{self, Checksum, ChecksumCapabilities, DeviceCapabilities, Medium};
use smoltcp::time::Instant;

/// Frame queues in both directions plus a buffer pool.
#[derive(Debug, Default)]
pub struct QueueDevice {
    /// Frames waiting for smoltcp.
    pub rx: VecDeque<Vec<u8>>,
    /// Frames smoltcp produced, waiting for the shim and the link.
    pub tx: VecDeque<Vec<u8>>,
    pool: Pool,
    mtu: usize,
    max_burst: Option<usize>,
    verify_rx_checksums: bool,
}

/// Free buffers, shared by the device and its receive tokens.
#[derive(Debug, Default, Clone)]
struct Pool(Rc<RefCell<Vec<Vec<u8>>>>);

/// Most buffers kept for reuse.
const POOL_MAX: usize = 1024;

impl Pool {
    fn take(&self) -> Vec<u8> {
        let mut b = self.0.borrow_mut().pop().unwrap_or_default();
        b.clear();
        b
    }

    fn give(&self, buf: Vec<u8>) {
        let mut pool = self.0.borrow_mut();
        if pool.len() < POOL_MAX {
            pool.push(buf);
        }
    }
}

impl QueueDevice {
    /// A device announcing `mtu` (IP MTU) to smoltcp.
    pub fn new(mtu: usize) -> Self {
        Self {
            mtu,
            verify_rx_checksums: true,
            ..Self::default()
        }
    }

    /// Limit smoltcp's TCP burst (segments per poll) to `n`.
    pub fn set_max_burst(&mut self, n: Option<usize>) {
        self.max_burst = n;
    }

    /// Take a cleared buffer from the pool (or a new one).
    pub fn buffer(&mut self) -> Vec<u8> {
        self.pool.take()
    }

    /// Return a buffer to the pool.
    pub fn recycle(&mut self, buf: Vec<u8>) {
        self.pool.give(buf);
    }
}

/// Receive token of [`QueueDevice`]: gives its buffer back when consumed.
#[derive(Debug)]
pub struct RxToken(Vec<u8>, Pool);

/// Transmit token of [`QueueDevice`].
#[derive(Debug)]
pub struct TxToken<'a>(&'a mut QueueDevice);

impl phy::Device for QueueDevice {
    type RxToken<'a> = RxToken;
    type TxToken<'a> = TxToken<'a>;

    fn receive(&mut self, _now: Instant) -> Option<(RxToken, TxToken<'_>)> {
        let frame = self.rx.pop_front()?;
        Some((RxToken(frame, self.pool.clone()), TxToken(self)))
    }

    fn transmit(&mut self, _now: Instant) -> Option<TxToken<'_>> {
        Some(TxToken(self))
    }

    fn capabilities(&self) -> DeviceCapabilities {
        let mut caps = DeviceCapabilities::default();
        caps.medium = Medium::Ethernet;
        caps.max_transmission_unit = self.mtu + 14;
        caps.max_burst_size = self.max_burst;
        let mut sums = ChecksumCapabilities::default();
        if !self.verify_rx_checksums {
            sums.tcp = Checksum::Tx;
            sums.udp = Checksum::Tx;
        }
        caps.checksum = sums;
        caps
    }
}

impl phy::RxToken for RxToken {
    fn consume<R, F: FnOnce(&[u8]) -> R>(self, f: F) -> R {
        let r = f(&self.0);
        self.1.give(self.0);
        r
    }
}

impl phy::TxToken for TxToken<'_> {
    fn consume<R, F: FnOnce(&mut [u8]) -> R>(self, len: usize, f: F) -> R {
        let mut buf = self.0.buffer();
        buf.resize(len, 0);
        let r = f(&mut buf);
        self.0.tx.push_back(buf);
        r
    }
}
