//! The in-memory `smoltcp::phy::Device` between the node loop and smoltcp.
//!
//! The loop pushes frames the shim passed into `rx`; smoltcp's output lands in
//! `tx`, from where the loop takes it through the shim's egress. Buffers are
//! recycled through a free list so the steady state allocates nothing.

use std::collections::VecDeque;

use smoltcp::phy::{self, Checksum, ChecksumCapabilities, DeviceCapabilities, Medium};
use smoltcp::time::Instant;

/// Frame queues in both directions plus a buffer pool.
#[derive(Debug, Default)]
pub struct QueueDevice {
    /// Frames waiting for smoltcp.
    pub rx: VecDeque<Vec<u8>>,
    /// Frames smoltcp produced, waiting for the shim and the link.
    pub tx: VecDeque<Vec<u8>>,
    pool: Vec<Vec<u8>>,
    mtu: usize,
    max_burst: Option<usize>,
    verify_rx_checksums: bool,
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
        let mut b = self.pool.pop().unwrap_or_default();
        b.clear();
        b
    }

    /// Return a buffer to the pool.
    pub fn recycle(&mut self, buf: Vec<u8>) {
        if self.pool.len() < 256 {
            self.pool.push(buf);
        }
    }
}

/// Receive token of [`QueueDevice`].
#[derive(Debug)]
pub struct RxToken(Vec<u8>);

/// Transmit token of [`QueueDevice`].
#[derive(Debug)]
pub struct TxToken<'a>(&'a mut QueueDevice);

impl phy::Device for QueueDevice {
    type RxToken<'a> = RxToken;
    type TxToken<'a> = TxToken<'a>;

    fn receive(&mut self, _now: Instant) -> Option<(RxToken, TxToken<'_>)> {
        let frame = self.rx.pop_front()?;
        Some((RxToken(frame), TxToken(self)))
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
        // The buffer is dropped rather than pooled: the token has no way back
        // to the device. Frames reach smoltcp far less often than they are
        // pooled on the forwarding path, so this is acceptable.
        f(&self.0)
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
