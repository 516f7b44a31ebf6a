//! An AF_PACKET socket with PACKET_MMAP rings as a [`Link`]: how a node owns
//! an interface that is not a TAP — `eth0` inside a microVM (see
//! `docs/microvm.md`), or a veth a lab gives a node with `link = "packet"`.
//!
//! Both directions go through rings shared with the kernel, so frames move
//! without a system call each:
//!
//! ```text
//!   receive ring (TPACKET_V3): blocks of frames, handed over whole
//!   ┌─────────┬─────────┬─────────┬─────────┐
//!   │ block 0 │ block 1 │ block 2 │ block 3 │   the kernel fills a block, then
//!   │ f f f   │ f f     │ (kernel)│ (kernel)│   "retires" it to user space when
//!   └─────────┴─────────┴─────────┴─────────┘   it is full or `rx_retire_ms` passed;
//!        ▲ recv() copies frames out, then hands the block back; wraps to 0
//!
//!   transmit ring: fixed slots  [A][A][S][S][S][A]...   A available, S send request
//!        send() fills the next slot and marks it; flush() is one send(2) for
//!        every marked slot (one per node-loop pass, not one per frame)
//! ```
//!
//! Accounting (all in [`PacketCounters`], exported as `packet.*` counters):
//! every retired block, the blocks retired by the timer rather than by
//! filling, each wrap of either ring, frames the kernel dropped because the
//! receive ring was full (`drop.packet.rx_ring_full`, from
//! `PACKET_STATISTICS`), and a full transmit ring: the link first waits (a
//! blocking flush, at most [`TX_WAIT`]) for the kernel to free slots — that is
//! back-pressure, `packet.tx_ring_full` — and only if none frees refuses the
//! frame (`send` returns `false`, the node counts `drop.tx_not_sent`, and
//! `packet.tx_ring_full_refused` says why). No frame is lost uncounted.
//!
//! Opening the link keeps the kernel's own IP stack off the interface
//! (IPv6 disabled on it, ARP requests ignored, GRO off so frames arrive as
//! they were on the wire) and puts it into promiscuous mode: the node's MAC
//! is its own, not the interface's. A frame whose checksum the kernel left
//! partial (`TP_STATUS_CSUMNOTREADY`: a local sender with checksum offload
//! behind a veth) has its TCP/UDP checksum completed here, as the TAP link
//! does with a virtio-net header.
//!
//! The receive ring's cost is latency at low rates: a lone frame waits in
//! its block until the retire timer fires (`rx_retire_ms`, default 1 ms).

use std::cell::Cell;
use std::io;
use std::os::fd::RawFd;
use std::time::Duration;

use super::sys::{self, PacketSocket, TpacketReq3};
use super::Link;

/// Longest a flush waits for the kernel to free transmit slots when the
/// ring is full.
pub const TX_WAIT: Duration = Duration::from_millis(20);

/// Ring geometry of a [`PacketLink`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RingConfig {
    /// Size of one receive block in bytes (a multiple of 4096).
    pub rx_block_size: usize,
    /// Number of receive blocks.
    pub rx_blocks: usize,
    /// Milliseconds after which the kernel retires a block that is not full
    /// (at least 1).
    pub rx_retire_ms: u32,
    /// Number of transmit slots (rounded up to a whole block of slots).
    pub tx_frames: usize,
}

impl Default for RingConfig {
    /// 1 MiB of receive ring in 64 KiB blocks retired after 1 ms, 512
    /// transmit slots.
    fn default() -> Self {
        Self {
            rx_block_size: 64 * 1024,
            rx_blocks: 16,
            rx_retire_ms: 1,
            tx_frames: 512,
        }
    }
}

/// What the rings counted since the link was opened.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PacketCounters {
    /// Receive blocks taken from the kernel (each handed back once read).
    pub rx_blocks: u64,
    /// Of those, blocks the kernel retired because `rx_retire_ms` passed
    /// before they filled.
    pub rx_blocks_timeout: u64,
    /// Times reading went past the last receive block back to the first.
    pub rx_ring_wraps: u64,
    /// Frames the kernel dropped because no receive block was free.
    pub rx_ring_full: u64,
    /// Frames the kernel cut short (larger than a block's free room),
    /// dropped here.
    pub rx_truncated: u64,
    /// Frames whose partial TCP/UDP checksum was completed here.
    pub rx_csum_completed: u64,
    /// `send(2)` calls that pushed queued slots to the kernel.
    pub tx_flushes: u64,
    /// Times the filling position went past the last slot back to the first.
    pub tx_ring_wraps: u64,
    /// Times a frame found the transmit ring full and waited for room.
    pub tx_ring_full: u64,
    /// Frames refused because the ring stayed full after that wait.
    pub tx_ring_full_refused: u64,
    /// Frames refused because they do not fit the interface's MTU.
    pub tx_oversize: u64,
}

// struct tpacket_block_desc (version 1 header), <linux/if_packet.h>.
const BLK_STATUS: usize = 8;
const BLK_NUM_PKTS: usize = 12;
const BLK_FIRST_PKT: usize = 16;
// struct tpacket3_hdr.
const PKT_NEXT: usize = 0;
const PKT_SNAPLEN: usize = 12;
const PKT_LEN: usize = 16;
const PKT_STATUS: usize = 20;
const PKT_MAC: usize = 24;
/// Where a transmit slot's frame starts: TPACKET_ALIGN(sizeof(tpacket3_hdr)).
const TX_DATA: usize = 48;

const TP_STATUS_KERNEL: u32 = 0;
const TP_STATUS_USER: u32 = 1;
const TP_STATUS_COPY: u32 = 1 << 1;
const TP_STATUS_LOSING: u32 = 1 << 2;
const TP_STATUS_CSUMNOTREADY: u32 = 1 << 3;
const TP_STATUS_BLK_TMO: u32 = 1 << 5;
const TP_STATUS_AVAILABLE: u32 = 0;
const TP_STATUS_SEND_REQUEST: u32 = 1;

/// Transmit slots per transmit block.
const TX_SLOTS_PER_BLOCK: usize = 16;

/// An AF_PACKET socket on one interface, with its two rings.
pub struct PacketLink {
    name: String,
    sock: PacketSocket,
    mtu: usize,
    rx: RxRing,
    tx: TxRing,
    counters: PacketCounters,
    /// Kernel drops read so far (`PACKET_STATISTICS` resets on read, and
    /// a shared `&self` reads it when counters are asked for).
    kernel_drops: Cell<u64>,
}

/// Reading position in the receive ring.
#[derive(Debug)]
struct RxRing {
    block_size: usize,
    blocks: usize,
    /// The block read next (or being read).
    block: usize,
    /// Inside a block user space owns: next frame's offset, frames left.
    cur: Option<(usize, u32)>,
}

/// Filling position in the transmit ring.
#[derive(Debug)]
struct TxRing {
    /// Offset of the ring in the mapping.
    base: usize,
    slot_size: usize,
    slots: usize,
    block_size: usize,
    next: usize,
    /// Slots marked since the last flush.
    queued: usize,
}

impl TxRing {
    fn slot(&self, i: usize) -> usize {
        let per = self.block_size / self.slot_size;
        self.base + (i / per) * self.block_size + (i % per) * self.slot_size
    }
}

impl PacketLink {
    /// Open interface `name` with the default rings.
    pub fn open(name: &str) -> io::Result<Self> {
        Self::with_rings(name, RingConfig::default())
    }

    /// Open interface `name` with rings of geometry `cfg`.
    pub fn with_rings(name: &str, cfg: RingConfig) -> io::Result<Self> {
        let ctx = |e: io::Error| io::Error::new(e.kind(), format!("AF_PACKET on {name}: {e}"));
        if cfg.rx_block_size == 0
            || cfg.rx_block_size % 4096 != 0
            || cfg.rx_blocks == 0
            || cfg.rx_retire_ms == 0
            || cfg.tx_frames == 0
        {
            return Err(ctx(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("bad ring geometry {cfg:?}"),
            )));
        }
        keep_kernel_off(name);
        sys::set_link_up(name).map_err(ctx)?;
        let mtu = sys::link_mtu(name).map_err(ctx)?;
        // A slot holds the header and the largest frame (VLAN tag room
        // included), rounded up to a power of two.
        let slot_size = (TX_DATA + mtu + 18).next_power_of_two().max(2048);
        let block_size = slot_size * TX_SLOTS_PER_BLOCK;
        let tx_blocks = cfg.tx_frames.div_ceil(TX_SLOTS_PER_BLOCK);
        let rx_req = TpacketReq3 {
            block_size: cfg.rx_block_size as u32,
            block_nr: cfg.rx_blocks as u32,
            frame_size: 2048,
            frame_nr: (cfg.rx_block_size / 2048 * cfg.rx_blocks) as u32,
            retire_blk_tov: cfg.rx_retire_ms,
            ..TpacketReq3::default()
        };
        let tx_req = TpacketReq3 {
            block_size: block_size as u32,
            block_nr: tx_blocks as u32,
            frame_size: slot_size as u32,
            frame_nr: (tx_blocks * TX_SLOTS_PER_BLOCK) as u32,
            ..TpacketReq3::default()
        };
        let sock = PacketSocket::open(name, &rx_req, &tx_req, TX_WAIT).map_err(ctx)?;
        let rx_len = cfg.rx_block_size * cfg.rx_blocks;
        debug_assert_eq!(sock.map.len(), rx_len + block_size * tx_blocks);
        Ok(Self {
            name: name.to_owned(),
            sock,
            mtu,
            rx: RxRing {
                block_size: cfg.rx_block_size,
                blocks: cfg.rx_blocks,
                block: 0,
                cur: None,
            },
            tx: TxRing {
                base: rx_len,
                slot_size,
                slots: tx_blocks * TX_SLOTS_PER_BLOCK,
                block_size,
                next: 0,
                queued: 0,
            },
            counters: PacketCounters::default(),
            kernel_drops: Cell::new(0),
        })
    }

    /// The interface's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// What the rings counted so far.
    pub fn ring_counters(&self) -> PacketCounters {
        self.take_kernel_drops();
        PacketCounters {
            rx_ring_full: self.kernel_drops.get(),
            ..self.counters
        }
    }

    /// Number of transmit slots.
    pub fn tx_slots(&self) -> usize {
        self.tx.slots
    }

    /// Slots queued by [`Link::send`] and not yet flushed.
    pub fn tx_queued(&self) -> usize {
        self.tx.queued
    }

    fn take_kernel_drops(&self) {
        match self.sock.take_rx_drops() {
            Ok(n) => self.kernel_drops.set(self.kernel_drops.get() + n),
            Err(e) => log::debug!("AF_PACKET on {}: PACKET_STATISTICS: {e}", self.name),
        }
    }

    /// Hand the current receive block back and move to the next.
    fn release_block(&mut self) {
        let base = self.rx.block * self.rx.block_size;
        self.sock.map.store_u32(base + BLK_STATUS, TP_STATUS_KERNEL);
        self.rx.cur = None;
        self.rx.block += 1;
        if self.rx.block == self.rx.blocks {
            self.rx.block = 0;
            self.counters.rx_ring_wraps += 1;
        }
    }

    /// Push queued slots to the kernel; with `wait`, until sent or
    /// [`TX_WAIT`] passes.
    fn kick(&mut self, wait: bool) -> io::Result<()> {
        self.counters.tx_flushes += 1;
        match self.sock.kick_tx(wait) {
            Ok(()) => {
                self.tx.queued = 0;
                Ok(())
            }
            // Queued slots stay marked and go with the next flush: the
            // device queue was busy, the wait timed out, or the interface
            // is down (`ip link set X down` to cut a lab link) — frames then
            // wait in the ring, and the ring filling up is counted.
            Err(e)
                if e.kind() == io::ErrorKind::WouldBlock
                    || e.kind() == io::ErrorKind::Interrupted
                    || matches!(
                        e.raw_os_error(),
                        Some(libc::ENOBUFS | libc::ENETDOWN | libc::ENXIO | libc::ETIMEDOUT)
                    ) =>
            {
                Ok(())
            }
            Err(e) => Err(io::Error::new(
                e.kind(),
                format!("AF_PACKET on {}: send: {e}", self.name),
            )),
        }
    }
}

impl Link for PacketLink {
    fn recv(&mut self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        loop {
            let Some((off, left)) = self.rx.cur else {
                let base = self.rx.block * self.rx.block_size;
                let status = self.sock.map.load_u32(base + BLK_STATUS);
                if status & TP_STATUS_USER == 0 {
                    return Ok(None);
                }
                self.counters.rx_blocks += 1;
                if status & TP_STATUS_BLK_TMO != 0 {
                    self.counters.rx_blocks_timeout += 1;
                }
                let n = self.sock.map.load_u32(base + BLK_NUM_PKTS);
                let first = self.sock.map.load_u32(base + BLK_FIRST_PKT) as usize;
                self.rx.cur = Some((base + first, n));
                continue;
            };
            if left == 0 {
                self.release_block();
                continue;
            }
            let map = &self.sock.map;
            let status = map.load_u32(off + PKT_STATUS);
            let snap = map.load_u32(off + PKT_SNAPLEN) as usize;
            let len = map.load_u32(off + PKT_LEN) as usize;
            let mac = usize::from(map.load_u16(off + PKT_MAC));
            let next = map.load_u32(off + PKT_NEXT) as usize;
            let n = snap.min(buf.len());
            map.read(off + mac, &mut buf[..n]);
            self.rx.cur = Some((off + next, left - 1));
            if status & TP_STATUS_LOSING != 0 {
                self.take_kernel_drops();
            }
            if status & TP_STATUS_COPY != 0 || snap < len {
                self.counters.rx_truncated += 1;
                continue;
            }
            if status & TP_STATUS_CSUMNOTREADY != 0 {
                if let Some((start, at)) = partial_checksum_at(&buf[..n]) {
                    super::tap::complete_checksum(&mut buf[..n], start, at - start);
                    self.counters.rx_csum_completed += 1;
                }
            }
            return Ok(Some(n));
        }
    }

    fn send(&mut self, frame: &[u8]) -> io::Result<bool> {
        if frame.len() < 14 || frame.len() > self.mtu + 18 {
            self.counters.tx_oversize += 1;
            return Ok(false);
        }
        let mut slot = self.tx.slot(self.tx.next);
        if self.sock.map.load_u32(slot + PKT_STATUS) != TP_STATUS_AVAILABLE {
            // Full: everything queued goes to the kernel now, and we wait
            // (bounded) for it to give slots back.
            self.counters.tx_ring_full += 1;
            self.kick(true)?;
            slot = self.tx.slot(self.tx.next);
            if self.sock.map.load_u32(slot + PKT_STATUS) != TP_STATUS_AVAILABLE {
                self.counters.tx_ring_full_refused += 1;
                return Ok(false);
            }
        }
        let map = &self.sock.map;
        map.write(slot + TX_DATA, frame);
        map.store_u32(slot + PKT_NEXT, 0);
        map.store_u32(slot + PKT_SNAPLEN, frame.len() as u32);
        map.store_u32(slot + PKT_LEN, frame.len() as u32);
        map.store_u32(slot + PKT_STATUS, TP_STATUS_SEND_REQUEST);
        self.tx.queued += 1;
        self.tx.next += 1;
        if self.tx.next == self.tx.slots {
            self.tx.next = 0;
            self.counters.tx_ring_wraps += 1;
        }
        Ok(true)
    }

    fn flush(&mut self) -> io::Result<()> {
        if self.tx.queued == 0 {
            return Ok(());
        }
        self.kick(false)
    }

    fn max_frame(&self) -> usize {
        self.mtu + 18
    }

    fn mtu(&self) -> usize {
        self.mtu
    }

    fn raw_fd(&self) -> Option<RawFd> {
        Some(self.sock.raw_fd())
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        let c = self.ring_counters();
        vec![
            ("packet.rx_blocks", c.rx_blocks),
            ("packet.rx_blocks_timeout", c.rx_blocks_timeout),
            ("packet.rx_ring_wraps", c.rx_ring_wraps),
            ("drop.packet.rx_ring_full", c.rx_ring_full),
            ("drop.packet.rx_truncated", c.rx_truncated),
            ("packet.rx_csum_completed", c.rx_csum_completed),
            ("packet.tx_flushes", c.tx_flushes),
            ("packet.tx_ring_wraps", c.tx_ring_wraps),
            ("packet.tx_ring_full", c.tx_ring_full),
            ("packet.tx_ring_full_refused", c.tx_ring_full_refused),
            ("packet.tx_oversize", c.tx_oversize),
        ]
    }
}

impl Drop for PacketLink {
    fn drop(&mut self) {
        // What is still queued goes out (best effort) before the rings go.
        let _ = Link::flush(self);
    }
}

/// Keep the kernel's IP stack off interface `name`: no IPv6 (no link-local
/// address, no DAD, no router solicitations), no ARP answers. Best effort:
/// a namespace may lack the knobs, and an interface without addresses
/// answers nothing anyway.
fn keep_kernel_off(name: &str) {
    for (path, value) in [
        (format!("/proc/sys/net/ipv6/conf/{name}/disable_ipv6"), "1"),
        (format!("/proc/sys/net/ipv4/conf/{name}/arp_ignore"), "8"),
    ] {
        if let Err(e) = std::fs::write(&path, value) {
            log::debug!("{path}: {e}");
        }
    }
    if let Err(e) = sys::set_gro_off(name) {
        log::debug!("{name}: GRO off: {e}");
    }
}

/// Where a frame's partial TCP/UDP checksum lives: (start of the transport
/// header, offset of its checksum field), both from the frame's start.
fn partial_checksum_at(frame: &[u8]) -> Option<(usize, usize)> {
    let ethertype = u16::from_be_bytes([*frame.get(12)?, *frame.get(13)?]);
    let (next, at) = match ethertype {
        0x0800 => {
            let ihl = usize::from(frame.get(14)? & 0x0f) * 4;
            (*frame.get(14 + 9)?, 14 + ihl)
        }
        0x86dd => {
            let mut next = *frame.get(14 + 6)?;
            let mut at = 14 + 40;
            // Hop-by-Hop, Routing, Destination Options, Fragment.
            while matches!(next, 0 | 43 | 60 | 44) {
                let len = if next == 44 {
                    8
                } else {
                    (usize::from(*frame.get(at + 1)?) + 1) * 8
                };
                next = *frame.get(at)?;
                at += len;
            }
            (next, at)
        }
        _ => return None,
    };
    let field = match next {
        6 => 16,
        17 => 6,
        _ => return None,
    };
    (at + field + 2 <= frame.len()).then_some((at, at + field))
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn the_partial_checksum_is_found_behind_ipv4_and_ipv6_headers() {
        let mut v4 = vec![0u8; 14 + 24 + 20];
        v4[12..14].copy_from_slice(&[0x08, 0x00]);
        v4[14] = 0x46; // IHL 6: 24-byte header
        v4[14 + 9] = 6;
        assert_eq!(partial_checksum_at(&v4), Some((38, 54)));
        let mut v6 = vec![0u8; 14 + 40 + 8 + 8];
        v6[12..14].copy_from_slice(&[0x86, 0xdd]);
        v6[14 + 6] = 60; // Destination Options, 8 bytes, then UDP
        v6[54] = 17;
        assert_eq!(partial_checksum_at(&v6), Some((62, 68)));
        // Too short for the checksum field, or not TCP/UDP: nothing.
        assert_eq!(partial_checksum_at(&v6[..66]), None);
        v6[54] = 58;
        assert_eq!(partial_checksum_at(&v6), None);
        assert_eq!(partial_checksum_at(&[0u8; 10]), None);
    }
}
