// Over 800 lines: one transaction state machine (send window, NACKs, RTO, reassembly) and the endpoint that owns them; its tests are in transport/tests.rs.
//! The nSFF-to-nSFF reliable transport (RFC 8677 §6.1.2, Figures 10 and 11;
//! SPEC §1.3): transactions of bytes carried in GFF types 1 (data) and 2
//! (NACK) over pathIDs, sans-IO.
//!
//! One [`Endpoint`] per nSFF owns every transaction it takes part in. A
//! transaction (an HTTP request and its response) has two directions: the
//! *request* from the origin nSFF (which [`Endpoint::open`]ed it) to the
//! egress nSFF over the forward pathID, and the *response* (flag RESPONSE)
//! back over the reverse pathID the OPEN packet carried. Each direction is a
//! byte stream ended by an empty data packet.
//!
//! ```text
//!   app ── open / send / finish ──► Endpoint ──► poll_transmit ──► GFF frames
//!   app ◄── poll_event / recv ───── Endpoint ◄── handle_packet ◄── GFF frames
//!                                      ▲  └────► poll_timeout ──► driver's timer
//!                                      └─────── handle_timeout(now)
//! ```
//!
//! # Windows
//!
//! A sender transmits in *windows* (rounds): it cuts up to `cwnd` packets
//! from its buffer, numbers them, writes the window's packet count in every
//! packet's `window` field, sends them all and waits. The receiver knows the
//! window `[base, base + window)` from any of its packets. When it holds the
//! whole window and the application has room for it, it sends a NACK with
//! count 0 ("the whole current window arrived"): the sender grows `cwnd` by
//! one (if the window was full, up to `max_window`) and starts the next
//! window. Missing packets are NACKed at once when a gap appears and again
//! on the reorder timer; the sender retransmits them and halves `cwnd` (once
//! per window, min 1).
//!
//! The end marker (an empty packet) does not count against `cwnd`: once the
//! application has finished, it joins the window that carries the last data
//! (up to `max_window` packets), so a small message is one window, not two.
//! An application that knows its last data ([`Endpoint::send_last`]) gets
//! the marker into that window; `send` then `finish` may already have
//! started the window without it.
//!
//! A NACK naming exactly the first sequence number *after* the sender's
//! current window is a cumulative acknowledgement (the receiver's "I expect
//! `base` next"): receivers send it when they see a duplicate of a window
//! they already acknowledged (their count-0 NACK was lost) and when their
//! repeat timer fires with nothing new arriving. Unlike a repeated count 0 it
//! can never acknowledge a *later* window by mistake. A sender retransmits a
//! NACKed packet only if it did not send it within the last half smoothed
//! RTT, so stale NACKs cost nothing.
//!
//! A whole lost window (or lost NACKs both ways) is recovered by the sender's
//! RTO: it resends the window's first unacknowledged packet, backing off
//! exponentially; after `max_retries` RTOs without any answer the
//! transaction fails.
//!
//! # Call order
//!
//! After any `handle_*`, `open`, `send`, `finish` or `recv`, drain
//! [`Endpoint::poll_transmit`] and [`Endpoint::poll_event`], then sleep until
//! [`Endpoint::poll_timeout`] or the next packet, and call
//! [`Endpoint::handle_timeout`] when the deadline passes (spurious calls are
//! harmless). Nothing here reads a clock.

use std::collections::{BTreeMap, BTreeSet, HashSet, VecDeque};

use serde::{Deserialize, Serialize};
use smoltcp::time::{Duration, Instant};
use svcroute_stack::wire::gff::{self, MessageType, PathId};
use svcroute_stack::wire::nr::NsffId;
use svcroute_stack::wire::nsff::{
    DataPacket, DataRepr, NackPacket, NackRepr, Open, Seqs, Txn, DATA_HEADER_LEN, NACK_HEADER_LEN,
    OPEN_HEADER_LEN,
};

// The IPv6 header in front of the GFF header.
use smoltcp::wire::IPV6_HEADER_LEN;

/// Transport settings: the `[nsff.transport]` section of the node file.
/// Every key is optional.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TransportConfig {
    /// IPv6 MTU of the fabric: a data packet's GFF payload is at most
    /// `mtu - 40 - 34` octets. Default 1500.
    pub mtu: usize,
    /// Congestion window of a new direction, in packets. Default 1 (RFC).
    pub initial_cwnd: u16,
    /// Largest congestion window, in packets, and the largest window a
    /// receiver accepts (domain-wide). 1..=256. Default 64.
    pub max_window: u16,
    /// Octets of application data a direction buffers before
    /// [`Endpoint::send`] pushes back. Default 256 KiB.
    pub send_buffer: usize,
    /// Octets of in-order data a direction holds for the application before
    /// it stops acknowledging. Default 256 KiB.
    pub recv_buffer: usize,
    /// Concurrent (not yet complete) transactions; more are refused and
    /// counted. Default 4096.
    pub max_txns: usize,
    /// RTO before the first RTT sample, ms. Default 200.
    pub rto_initial_ms: u64,
    /// Smallest RTO, ms. Default 30.
    pub rto_min_ms: u64,
    /// Largest RTO after backoff, and largest repeat interval, ms. Default 4000.
    pub rto_max_ms: u64,
    /// RTOs (and receiver repeats) without an answer before giving up. Default 8.
    pub max_retries: u32,
    /// Reorder timer: how long a receiver waits for missing packets before
    /// (re-)NACKing them, ms. Default 10.
    pub reorder_ms: u64,
    /// A transaction that hears nothing from its peer this long fails, ms.
    /// Default 60000.
    pub idle_timeout_ms: u64,
    /// How long a complete transaction keeps answering duplicates, ms.
    /// Default 5000.
    pub linger_ms: u64,
    /// Recently closed transaction IDs remembered so that a late OPEN
    /// duplicate does not start a transaction twice. Default 16384.
    pub closed_memory: usize,
    /// An egress transaction whose application has not said its request
    /// head is complete ([`Endpoint::head_complete`]) within this long
    /// fails (`FailReason::HeadTimeout`), ms; 0: no deadline. Default
    /// 10000. Such transactions are also the ones evicted, oldest of the
    /// origin holding the most first, when an OPEN arrives at `max_txns`.
    pub head_timeout_ms: u64,
}

impl Default for TransportConfig {
    fn default() -> Self {
        Self {
            mtu: 1500,
            initial_cwnd: 1,
            max_window: 64,
            send_buffer: 256 * 1024,
            recv_buffer: 256 * 1024,
            max_txns: 4096,
            rto_initial_ms: 200,
            rto_min_ms: 30,
            rto_max_ms: 4000,
            max_retries: 8,
            reorder_ms: 10,
            idle_timeout_ms: 60_000,
            linger_ms: 5000,
            closed_memory: 16384,
            head_timeout_ms: 10_000,
        }
    }
}

/// A setting out of range.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// `mtu` leaves no room for data after the headers.
    #[error("transport.mtu {0} is too small (at least {min})", min = IPV6_HEADER_LEN + gff::HEADER_LEN + OPEN_HEADER_LEN + 1)]
    Mtu(usize),
    /// `max_window` is 0 or above 256.
    #[error("transport.max_window {0} must be 1..=256")]
    MaxWindow(u16),
    /// `initial_cwnd` is 0 or above `max_window`.
    #[error("transport.initial_cwnd {0} must be 1..=max_window")]
    InitialCwnd(u16),
    /// A buffer holds less than one packet's data.
    #[error("transport.{0} must hold at least one packet ({1} octets)")]
    Buffer(&'static str, usize),
    /// `max_txns` is 0.
    #[error("transport.max_txns must be at least 1")]
    MaxTxns,
    /// A timer is 0 or the RTO bounds are inverted.
    #[error("transport timers must be non-zero and rto_min_ms <= rto_max_ms")]
    Timers,
}

impl TransportConfig {
    /// Check the ranges.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.mtu < IPV6_HEADER_LEN + gff::HEADER_LEN + OPEN_HEADER_LEN + 1 || self.mtu > 65535 {
            return Err(ConfigError::Mtu(self.mtu));
        }
        if self.max_window == 0 || self.max_window > 256 {
            return Err(ConfigError::MaxWindow(self.max_window));
        }
        if self.initial_cwnd == 0 || self.initial_cwnd > self.max_window {
            return Err(ConfigError::InitialCwnd(self.initial_cwnd));
        }
        let mss = self.max_data(false);
        if self.send_buffer < mss {
            return Err(ConfigError::Buffer("send_buffer", mss));
        }
        if self.recv_buffer < mss {
            return Err(ConfigError::Buffer("recv_buffer", mss));
        }
        if self.max_txns == 0 {
            return Err(ConfigError::MaxTxns);
        }
        if self.rto_initial_ms == 0
            || self.rto_min_ms == 0
            || self.reorder_ms == 0
            || self.idle_timeout_ms == 0
            || self.rto_min_ms > self.rto_max_ms
        {
            return Err(ConfigError::Timers);
        }
        Ok(())
    }

    /// Data octets in one packet (with or without the OPEN prefix).
    pub const fn max_data(&self, open: bool) -> usize {
        let header = if open {
            OPEN_HEADER_LEN
        } else {
            DATA_HEADER_LEN
        };
        self.mtu
            .saturating_sub(IPV6_HEADER_LEN + gff::HEADER_LEN + header)
    }

    const fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }
}

/// Something for the application.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A peer opened a transaction toward us (we are its egress): read the
    /// request with [`Endpoint::recv`], answer with [`Endpoint::send`] on the
    /// same `txn`.
    Opened {
        /// The transaction.
        txn: Txn,
        /// The nSFF that opened it.
        origin: NsffId,
        /// The pathID our answers take.
        rev_path: PathId,
        /// The pathID the request arrived on.
        fwd_path: PathId,
    },
    /// New in-order data to [`Endpoint::recv`] (edge-triggered: once until the
    /// next `recv`).
    Readable {
        /// The transaction.
        txn: Txn,
    },
    /// The peer ended its direction: after the buffered data, `recv` returns
    /// end of stream.
    Finished {
        /// The transaction.
        txn: Txn,
    },
    /// [`Endpoint::send`] has room again after it pushed back.
    Writable {
        /// The transaction.
        txn: Txn,
    },
    /// Our direction, end marker included, is acknowledged.
    Acked {
        /// The transaction.
        txn: Txn,
    },
    /// Both directions are done and read; the ID is no longer usable.
    Closed {
        /// The transaction.
        txn: Txn,
    },
    /// The transaction is gone.
    Failed {
        /// The transaction.
        txn: Txn,
        /// Why.
        reason: FailReason,
    },
}

/// Why a transaction failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FailReason {
    /// `max_retries` RTOs without an answer.
    Timeout,
    /// Nothing heard from the peer for `idle_timeout_ms`.
    Idle,
    /// Sequence numbers ran out (a 5 TB direction).
    SeqExhausted,
    /// Egress: no complete request head within `head_timeout_ms`.
    HeadTimeout,
    /// Egress: its head still incomplete, evicted to let a new OPEN in at
    /// `max_txns`.
    Evicted,
}

impl FailReason {
    /// A short tag.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Timeout => "timeout",
            Self::Idle => "idle",
            Self::SeqExhausted => "seq_exhausted",
            Self::HeadTimeout => "head_timeout",
            Self::Evicted => "evicted",
        }
    }
}

/// Why [`Endpoint::open`] refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum OpenError {
    /// `max_txns` transactions are in progress.
    #[error("too many transactions")]
    TooManyTxns,
}

/// Why a stream operation failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum StreamError {
    /// No such transaction (never, or no longer).
    #[error("unknown transaction")]
    UnknownTxn,
    /// Our direction was already finished.
    #[error("direction already finished")]
    Finished,
}

/// Why a received packet was dropped (also counted in [`Stats`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PacketError {
    /// Not a transport type.
    #[error("not a transport message")]
    NotTransport,
    /// RFC 1071 checksum wrong.
    #[error("bad checksum")]
    BadChecksum,
    /// Unparsable.
    #[error("malformed")]
    Malformed,
    /// No such transaction and not an OPEN.
    #[error("unknown transaction")]
    UnknownTxn,
    /// An OPEN at `max_txns`.
    #[error("transaction refused")]
    Refused,
}

/// A packet to send: `payload` goes into a GFF packet of `msg_type` over `path`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transmit {
    /// The pathID.
    pub path: PathId,
    /// GFF type: transport data or NACK.
    pub msg_type: MessageType,
    /// The GFF payload.
    pub payload: Vec<u8>,
}

/// Counters of one direction pair.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TxnStats {
    /// Data packets sent the first time.
    pub data_out: u64,
    /// Data packets resent because a NACK asked.
    pub retransmits: u64,
    /// Data packets resent by the RTO.
    pub rto_retransmits: u64,
    /// RTO expiries.
    pub rtos: u64,
    /// Data packets received (duplicates included).
    pub data_in: u64,
    /// Duplicates received.
    pub duplicates: u64,
    /// NACKs with count 0 sent / received.
    pub acks_out: u64,
    /// NACKs with count 0 received.
    pub acks_in: u64,
    /// NACKs with count > 0 sent.
    pub nacks_out: u64,
    /// NACKs with count > 0 received.
    pub nacks_in: u64,
    /// Application octets sent (first transmissions).
    pub bytes_out: u64,
    /// Application octets delivered in order.
    pub bytes_in: u64,
    /// Congestion window increases.
    pub cwnd_grows: u64,
    /// Congestion window halvings.
    pub cwnd_cuts: u64,
}

impl TxnStats {
    fn add(&mut self, o: &Self) {
        self.data_out += o.data_out;
        self.retransmits += o.retransmits;
        self.rto_retransmits += o.rto_retransmits;
        self.rtos += o.rtos;
        self.data_in += o.data_in;
        self.duplicates += o.duplicates;
        self.acks_out += o.acks_out;
        self.acks_in += o.acks_in;
        self.nacks_out += o.nacks_out;
        self.nacks_in += o.nacks_in;
        self.bytes_out += o.bytes_out;
        self.bytes_in += o.bytes_in;
        self.cwnd_grows += o.cwnd_grows;
        self.cwnd_cuts += o.cwnd_cuts;
    }
}

/// Endpoint counters: the closed transactions' [`TxnStats`] summed in
/// `txns`, plus the endpoint's own.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Sums over closed and failed transactions ([`Endpoint::totals`] adds
    /// the live ones).
    pub txns: TxnStats,
    /// Transactions we opened.
    pub opened: u64,
    /// Transactions peers opened toward us.
    pub accepted: u64,
    /// Opens refused at `max_txns` (ours and peers').
    pub refused: u64,
    /// Transactions closed complete.
    pub completed: u64,
    /// Transactions failed.
    pub failed: u64,
    /// Packets dropped for a bad checksum.
    pub bad_checksum: u64,
    /// Packets dropped as unparsable.
    pub malformed: u64,
    /// Packets for no known transaction.
    pub unknown_txn: u64,
    /// OPEN duplicates for recently closed transactions.
    pub late_opens: u64,
    /// Data packets outside the receive window.
    pub out_of_window: u64,
    /// Count-0 NACKs ignored as stale.
    pub stale_acks: u64,
    /// NACKed packets not resent because they were just sent.
    pub nack_suppressed: u64,
    /// Egress transactions evicted (head incomplete) to let an OPEN in at
    /// `max_txns`.
    pub evicted: u64,
    /// Egress transactions failed for no complete head in time.
    pub head_timeouts: u64,
}

/// Which end of a transaction we are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    /// We opened it: we send the request, receive the response.
    Origin,
    /// A peer opened it: we receive the request, send the response.
    Egress,
}

/// A transport endpoint: every transaction of one nSFF. See the module doc
/// for the call order.
#[derive(Debug)]
pub struct Endpoint {
    id: NsffId,
    cfg: TransportConfig,
    txns: BTreeMap<Txn, Conn>,
    /// Every transaction's next deadline ([`Conn::armed`]), earliest
    /// first: the timers are found without walking every transaction
    /// (thousands linger at a few thousand requests per second).
    timers: BTreeSet<(Instant, Txn)>,
    active: usize,
    next_counter: u32,
    lingering: VecDeque<Txn>,
    closed: VecDeque<Txn>,
    closed_set: HashSet<Txn>,
    /// Egress heads are tracked ([`Endpoint::track_heads`]).
    track_heads: bool,
    transmits: VecDeque<Transmit>,
    events: VecDeque<Event>,
    stats: Stats,
    /// Due transactions `handle_timeout` looked at (the cost the timer
    /// index keeps to what is due).
    #[cfg(test)]
    deadline_scans: std::cell::Cell<u64>,
}

impl Endpoint {
    /// An endpoint for nSFF `id`; `first_counter` seeds the transaction
    /// counter (a restarted node should not reuse its recent IDs).
    pub fn new(id: NsffId, cfg: TransportConfig, first_counter: u32) -> Result<Self, ConfigError> {
        cfg.validate()?;
        Ok(Self {
            id,
            cfg,
            txns: BTreeMap::new(),
            timers: BTreeSet::new(),
            active: 0,
            next_counter: first_counter & Txn::MAX_COUNTER,
            lingering: VecDeque::new(),
            closed: VecDeque::new(),
            closed_set: HashSet::new(),
            track_heads: false,
            transmits: VecDeque::new(),
            events: VecDeque::new(),
            stats: Stats::default(),
            #[cfg(test)]
            deadline_scans: std::cell::Cell::new(0),
        })
    }

    /// Our nSFF ID.
    pub const fn id(&self) -> NsffId {
        self.id
    }

    /// The settings.
    pub const fn config(&self) -> &TransportConfig {
        &self.cfg
    }

    /// Endpoint counters (closed transactions summed).
    pub const fn stats(&self) -> &Stats {
        &self.stats
    }

    /// [`Stats::txns`] plus every live transaction's counters.
    pub fn totals(&self) -> TxnStats {
        let mut t = self.stats.txns;
        for c in self.txns.values() {
            t.add(&c.stats);
        }
        t
    }

    /// One live transaction's counters.
    pub fn txn_stats(&self, txn: Txn) -> Option<&TxnStats> {
        self.txns.get(&txn).map(|c| &c.stats)
    }

    /// A live transaction's current congestion window (packets).
    pub fn cwnd(&self, txn: Txn) -> Option<u16> {
        self.txns.get(&txn).map(|c| c.send.cwnd)
    }

    /// Transactions in progress (not lingering).
    pub const fn active(&self) -> usize {
        self.active
    }

    /// Transactions held, lingering ones included.
    pub fn len(&self) -> usize {
        self.txns.len()
    }

    /// Whether no transaction is held.
    pub fn is_empty(&self) -> bool {
        self.txns.is_empty()
    }

    /// Open a transaction toward the nSFF at the end of `dst_path`; the
    /// response comes back on `rev_path` (which the OPEN packet carries).
    pub fn open(
        &mut self,
        now: Instant,
        dst_path: PathId,
        rev_path: PathId,
    ) -> Result<Txn, OpenError> {
        if self.active >= self.cfg.max_txns {
            self.stats.refused += 1;
            return Err(OpenError::TooManyTxns);
        }
        let txn = loop {
            let t = Txn::new(self.id, self.next_counter);
            self.next_counter = (self.next_counter + 1) & Txn::MAX_COUNTER;
            if !self.txns.contains_key(&t) && !self.closed_set.contains(&t) {
                break t;
            }
        };
        let open = Open {
            origin: self.id,
            reverse: rev_path,
        };
        let conn = Conn::new(&self.cfg, Side::Origin, dst_path, open, now);
        self.txns.insert(txn, conn);
        self.rearm(txn);
        self.active += 1;
        self.stats.opened += 1;
        Ok(txn)
    }

    /// Octets [`Self::send`] would take now.
    pub fn send_capacity(&self, txn: Txn) -> Result<usize, StreamError> {
        let c = self.txns.get(&txn).ok_or(StreamError::UnknownTxn)?;
        if c.send.fin != Fin::Open {
            return Err(StreamError::Finished);
        }
        Ok(self.cfg.send_buffer.saturating_sub(c.send.buf.len()))
    }

    /// Queue as much of `data` as fits; returns how much that was (0 when the
    /// buffer is full: wait for [`Event::Writable`]).
    pub fn send(&mut self, now: Instant, txn: Txn, data: &[u8]) -> Result<usize, StreamError> {
        self.queue(now, txn, data, false)
    }

    /// [`Self::send`] the last data of our direction: if all of `data` fits,
    /// the direction also ends after it, as if [`Self::finish`] followed.
    /// Unlike `send` then `finish`, the end marker leaves in the same window
    /// as the data instead of a window of its own a round trip later. An
    /// application that knows its message is complete (HTTP framing) calls
    /// this; when it returns less than `data.len()`, the direction is still
    /// open and the rest goes in a later `send_last`.
    pub fn send_last(&mut self, now: Instant, txn: Txn, data: &[u8]) -> Result<usize, StreamError> {
        self.queue(now, txn, data, true)
    }

    /// End our direction after the queued data.
    pub fn finish(&mut self, now: Instant, txn: Txn) -> Result<(), StreamError> {
        let c = self.txns.get_mut(&txn).ok_or(StreamError::UnknownTxn)?;
        if c.send.fin != Fin::Open {
            return Err(StreamError::Finished);
        }
        c.send.fin = Fin::Queued;
        self.pump(now, txn);
        Ok(())
    }

    /// Queue what fits of `data`; end the direction after it if `last` and
    /// all of it fit. The window starts only after both, so the end marker
    /// can join it.
    fn queue(
        &mut self,
        now: Instant,
        txn: Txn,
        data: &[u8],
        last: bool,
    ) -> Result<usize, StreamError> {
        let cap = self.cfg.send_buffer;
        let c = self.txns.get_mut(&txn).ok_or(StreamError::UnknownTxn)?;
        if c.send.fin != Fin::Open {
            return Err(StreamError::Finished);
        }
        let n = data.len().min(cap.saturating_sub(c.send.buf.len()));
        c.send.buf.extend(&data[..n]);
        if n < data.len() {
            c.send.blocked = true;
        } else if last {
            c.send.fin = Fin::Queued;
        }
        self.pump(now, txn);
        Ok(n)
    }

    /// Read in-order data: `Some(n > 0)` octets, `Some(0)` at the end of the
    /// peer's direction, `None` when nothing is there yet.
    pub fn recv(
        &mut self,
        now: Instant,
        txn: Txn,
        buf: &mut [u8],
    ) -> Result<Option<usize>, StreamError> {
        let c = self.txns.get_mut(&txn).ok_or(StreamError::UnknownTxn)?;
        let r = &mut c.recv;
        r.readable_signalled = false;
        if r.app.is_empty() {
            if r.finished {
                r.eof_read = true;
                self.pump(now, txn);
                return Ok(Some(0));
            }
            return Ok(None);
        }
        let n = buf.len().min(r.app.len());
        for (d, s) in buf.iter_mut().zip(r.app.drain(..n)) {
            *d = s;
        }
        self.pump(now, txn);
        Ok(Some(n))
    }

    /// Octets buffered for [`Self::recv`].
    pub fn readable(&self, txn: Txn) -> Result<usize, StreamError> {
        let c = self.txns.get(&txn).ok_or(StreamError::UnknownTxn)?;
        Ok(c.recv.app.len())
    }

    /// Forget a transaction now (the application gave up on it); the peer
    /// times out.
    pub fn abort(&mut self, txn: Txn) {
        self.remove(txn);
    }

    /// Track the request heads of egress transactions (an application that
    /// calls [`Endpoint::head_complete`]): from now, an egress transaction
    /// whose head is not complete within `head_timeout_ms` fails, and an
    /// OPEN at `max_txns` evicts the oldest such transaction of the origin
    /// holding the most of them instead of being refused.
    pub fn track_heads(&mut self, on: bool) {
        self.track_heads = on;
    }

    /// The application has the complete request head of egress
    /// transaction `txn` (or knows what it carries): it is no longer
    /// subject to `head_timeout_ms` nor evicted under pressure.
    pub fn head_complete(&mut self, txn: Txn) {
        if let Some(c) = self.txns.get_mut(&txn) {
            if c.pending_head.take().is_some() {
                self.rearm(txn);
            }
        }
    }

    /// At `max_txns`: fail the oldest egress transaction whose head is
    /// still incomplete, of the origin that holds the most of them
    /// (fairness: one origin's flood evicts its own first). Whether one was.
    fn evict_one(&mut self) -> bool {
        let mut per_origin: BTreeMap<NsffId, usize> = BTreeMap::new();
        for c in self.txns.values() {
            if let Some((o, _, _)) = c.pending_head {
                *per_origin.entry(o).or_default() += 1;
            }
        }
        let Some((&origin, _)) = per_origin
            .iter()
            .max_by_key(|&(o, n)| (*n, std::cmp::Reverse(*o)))
        else {
            return false;
        };
        let victim = self
            .txns
            .iter()
            .filter_map(|(t, c)| match c.pending_head {
                Some((o, at, _)) if o == origin => Some((at, *t)),
                _ => None,
            })
            .min()
            .map(|(_, t)| t);
        let Some(txn) = victim else {
            return false;
        };
        self.stats.evicted += 1;
        self.fail(txn, FailReason::Evicted);
        true
    }

    /// Handle a GFF packet of type `msg_type` that arrived over `path`.
    pub fn handle_packet(
        &mut self,
        now: Instant,
        path: PathId,
        msg_type: MessageType,
        payload: &[u8],
    ) -> Result<(), PacketError> {
        match msg_type {
            MessageType::TransportData => self.handle_data(now, path, payload),
            MessageType::TransportNack => self.handle_nack(now, payload),
            _ => Err(PacketError::NotTransport),
        }
    }

    /// Run the timers due at `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        let due: Vec<Txn> = self
            .timers
            .iter()
            .take_while(|(t, _)| *t <= now)
            .map(|(_, txn)| *txn)
            .collect();
        #[cfg(test)]
        self.deadline_scans
            .set(self.deadline_scans.get() + due.len() as u64);
        for txn in due {
            self.on_deadline(now, txn);
            self.rearm(txn);
        }
    }

    /// The timers of `txn` that are due at `now`.
    fn on_deadline(&mut self, now: Instant, txn: Txn) {
        {
            let Some(c) = self.txns.get_mut(&txn) else {
                return;
            };
            if let Phase::Lingering { until } = c.phase {
                if until <= now {
                    self.remove(txn);
                }
                return;
            }
            if now >= c.last_rx + TransportConfig::ms(self.cfg.idle_timeout_ms) {
                self.fail(txn, FailReason::Idle);
                return;
            }
            if c.pending_head
                .and_then(|(_, _, d)| d)
                .is_some_and(|d| d <= now)
            {
                self.stats.head_timeouts += 1;
                self.fail(txn, FailReason::HeadTimeout);
                return;
            }
            if c.send.rto_at.is_some_and(|t| t <= now) {
                if let Err(reason) = c.on_rto(now, &self.cfg, txn, &mut self.transmits) {
                    self.fail(txn, reason);
                    return;
                }
            }
        }
        if let Some(c) = self.txns.get_mut(&txn) {
            if c.recv.timer_at.is_some_and(|t| t <= now) {
                c.on_recv_timer(now, &self.cfg, txn, &mut self.transmits);
            }
        }
    }

    /// The earliest timer, if any.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let next = self.timers.first().map(|(t, _)| *t);
        // The index must agree with the transactions (every path that moves
        // a deadline ends in `rearm`); checked where it costs nothing in
        // production.
        #[cfg(debug_assertions)]
        {
            let scanned = self
                .txns
                .values()
                .filter_map(|c| c.deadline(&self.cfg))
                .min();
            debug_assert_eq!(next, scanned, "transport timer index out of date");
        }
        next
    }

    /// Put `txn`'s current deadline into the timer index (or take it out
    /// when the transaction is gone).
    fn rearm(&mut self, txn: Txn) {
        let Some(c) = self.txns.get_mut(&txn) else {
            return;
        };
        let at = c.deadline(&self.cfg);
        if at == c.armed {
            return;
        }
        if let Some(old) = c.armed {
            self.timers.remove(&(old, txn));
        }
        if let Some(at) = at {
            self.timers.insert((at, txn));
        }
        c.armed = at;
    }

    /// The next packet to send.
    #[must_use]
    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        self.transmits.pop_front()
    }

    /// The next application event.
    #[must_use]
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    fn handle_data(
        &mut self,
        now: Instant,
        path: PathId,
        payload: &[u8],
    ) -> Result<(), PacketError> {
        let Ok(packet) = DataPacket::new_checked(payload) else {
            self.stats.malformed += 1;
            return Err(PacketError::Malformed);
        };
        if !packet.verify_checksum() {
            self.stats.bad_checksum += 1;
            return Err(PacketError::BadChecksum);
        }
        let repr = match DataRepr::parse(&packet) {
            Ok(r) if r.window != 0 => r,
            _ => {
                self.stats.malformed += 1;
                return Err(PacketError::Malformed);
            }
        };
        let txn = repr.txn;
        let ours = txn.origin() == self.id.value();
        // Responses belong to transactions we opened, requests to others'.
        if repr.response != ours {
            self.stats.malformed += 1;
            return Err(PacketError::Malformed);
        }
        if !self.txns.contains_key(&txn) {
            let Some(open) = repr.open.filter(|_| !ours) else {
                self.stats.unknown_txn += 1;
                return Err(PacketError::UnknownTxn);
            };
            if open.origin.value() != txn.origin() {
                self.stats.malformed += 1;
                return Err(PacketError::Malformed);
            }
            if self.closed_set.contains(&txn) {
                self.stats.late_opens += 1;
                return Err(PacketError::UnknownTxn);
            }
            if self.active >= self.cfg.max_txns && !(self.track_heads && self.evict_one()) {
                self.stats.refused += 1;
                return Err(PacketError::Refused);
            }
            let reply = Open {
                origin: self.id,
                reverse: path,
            };
            let mut conn = Conn::new(&self.cfg, Side::Egress, open.reverse, reply, now);
            let head_deadline = (self.cfg.head_timeout_ms != 0)
                .then(|| now + TransportConfig::ms(self.cfg.head_timeout_ms));
            if self.track_heads {
                conn.pending_head = Some((open.origin, now, head_deadline));
            }
            self.txns.insert(txn, conn);
            self.active += 1;
            self.stats.accepted += 1;
            self.events.push_back(Event::Opened {
                txn,
                origin: open.origin,
                rev_path: open.reverse,
                fwd_path: path,
            });
        }
        let Some(c) = self.txns.get_mut(&txn) else {
            return Err(PacketError::UnknownTxn);
        };
        c.last_rx = now;
        c.on_data(
            now,
            &self.cfg,
            txn,
            &repr,
            packet.data(),
            &mut self.transmits,
            &mut self.stats,
        );
        self.pump(now, txn);
        Ok(())
    }

    fn handle_nack(&mut self, now: Instant, payload: &[u8]) -> Result<(), PacketError> {
        let parsed = NackPacket::new_checked(payload)
            .ok()
            .and_then(|p| NackRepr::parse(&p).ok());
        let Some(nack) = parsed else {
            self.stats.malformed += 1;
            return Err(PacketError::Malformed);
        };
        let Some(c) = self.txns.get_mut(&nack.txn) else {
            self.stats.unknown_txn += 1;
            return Err(PacketError::UnknownTxn);
        };
        c.last_rx = now;
        let seqs: Vec<u32> = nack.seqs.iter().collect();
        c.on_nack(
            now,
            &self.cfg,
            nack.txn,
            &seqs,
            &mut self.transmits,
            &mut self.stats,
        );
        self.pump(now, nack.txn);
        Ok(())
    }

    /// After any change to `txn`: deliver, acknowledge, start windows, raise
    /// events, retire a finished transaction; then re-index its deadline.
    fn pump(&mut self, now: Instant, txn: Txn) {
        self.pump_streams(now, txn);
        self.rearm(txn);
    }

    fn pump_streams(&mut self, now: Instant, txn: Txn) {
        let Some(c) = self.txns.get_mut(&txn) else {
            return;
        };
        c.recv.deliver(
            now,
            &self.cfg,
            txn,
            c.to_peer,
            &mut c.stats,
            &mut self.transmits,
        );
        if let Err(reason) = c.start_window(now, &self.cfg, txn, &mut self.transmits) {
            self.fail(txn, reason);
            return;
        }
        let r = &mut c.recv;
        if !r.app.is_empty() && !r.readable_signalled {
            r.readable_signalled = true;
            self.events.push_back(Event::Readable { txn });
        }
        if r.finished && !r.fin_reported {
            r.fin_reported = true;
            self.events.push_back(Event::Finished { txn });
        }
        let s = &mut c.send;
        if s.blocked && s.buf.len() < self.cfg.send_buffer {
            s.blocked = false;
            self.events.push_back(Event::Writable { txn });
        }
        if s.fin == Fin::Acked && !s.ack_reported {
            s.ack_reported = true;
            self.events.push_back(Event::Acked { txn });
        }
        if c.phase == Phase::Active && s.fin == Fin::Acked && c.recv.eof_read {
            c.phase = Phase::Lingering {
                until: now + TransportConfig::ms(self.cfg.linger_ms),
            };
            self.active -= 1;
            self.stats.completed += 1;
            self.events.push_back(Event::Closed { txn });
            self.lingering.push_back(txn);
            while self.lingering.len() > self.cfg.max_txns {
                if let Some(old) = self.lingering.pop_front() {
                    self.remove(old);
                }
            }
        }
    }

    fn fail(&mut self, txn: Txn, reason: FailReason) {
        if self.txns.contains_key(&txn) {
            self.stats.failed += 1;
            self.events.push_back(Event::Failed { txn, reason });
            self.remove(txn);
        }
    }

    fn remove(&mut self, txn: Txn) {
        let Some(c) = self.txns.remove(&txn) else {
            return;
        };
        if let Some(at) = c.armed {
            self.timers.remove(&(at, txn));
        }
        if c.phase == Phase::Active {
            self.active -= 1;
        } else if let Some(i) = self.lingering.iter().position(|t| *t == txn) {
            // Lingering ends about in the order it began (one `linger_ms`):
            // the transaction is at or near the front.
            self.lingering.remove(i);
        }
        self.stats.txns.add(&c.stats);
        if self.closed_set.insert(txn) {
            self.closed.push_back(txn);
        }
        while self.closed.len() > self.cfg.closed_memory {
            if let Some(old) = self.closed.pop_front() {
                self.closed_set.remove(&old);
            }
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Active,
    Lingering { until: Instant },
}

/// Our direction's end marker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fin {
    /// More data may come.
    Open,
    /// [`Endpoint::finish`] called; the marker is not sent yet.
    Queued,
    /// The marker is in the current window.
    Sent,
    /// The marker is acknowledged.
    Acked,
}

#[derive(Debug)]
struct Conn {
    side: Side,
    /// Where our data and our NACKs go.
    to_peer: PathId,
    /// The OPEN prefix of our direction's first packet.
    open: Open,
    send: Sender,
    recv: Receiver,
    stats: TxnStats,
    last_rx: Instant,
    phase: Phase,
    /// The deadline this transaction has in [`Endpoint::timers`].
    armed: Option<Instant>,
    /// Egress, request head not complete yet: (origin, opened at, head
    /// deadline if any). `None` once [`Endpoint::head_complete`].
    pending_head: Option<(NsffId, Instant, Option<Instant>)>,
}

#[derive(Debug)]
struct Sent {
    packet: Vec<u8>,
    last_sent: Instant,
}

#[derive(Debug)]
struct Sender {
    buf: VecDeque<u8>,
    blocked: bool,
    fin: Fin,
    ack_reported: bool,
    next_seq: u32,
    /// The current window's unacknowledged packets.
    window: BTreeMap<u32, Sent>,
    window_end: u32,
    window_started: Instant,
    window_full: bool,
    window_resent: bool,
    window_cut: bool,
    /// A count-0 that looked stale was answered with a probe this window.
    window_probed: bool,
    /// How long after the window left that count-0 came.
    probed_age: Option<Duration>,
    cwnd: u16,
    srtt: Option<Duration>,
    rttvar: Duration,
    min_rtt: Option<Duration>,
    backoff: u32,
    retries: u32,
    rto_at: Option<Instant>,
}

#[derive(Debug)]
struct Receiver {
    /// In-order data for the application.
    app: VecDeque<u8>,
    /// Received, not yet moved to `app` (empty = end marker).
    ooo: BTreeMap<u32, Vec<u8>>,
    next_deliver: u32,
    base: u32,
    window: Option<u16>,
    highest: Option<u32>,
    fin_seq: Option<u32>,
    finished: bool,
    fin_reported: bool,
    eof_read: bool,
    readable_signalled: bool,
    timer_at: Option<Instant>,
    backoff: u32,
    repeats: u32,
    last_reack: Option<Instant>,
}

impl Conn {
    fn new(cfg: &TransportConfig, side: Side, to_peer: PathId, open: Open, now: Instant) -> Self {
        Self {
            side,
            to_peer,
            open,
            send: Sender {
                buf: VecDeque::new(),
                blocked: false,
                fin: Fin::Open,
                ack_reported: false,
                next_seq: 0,
                window: BTreeMap::new(),
                window_end: 0,
                window_started: now,
                window_full: false,
                window_resent: false,
                window_cut: false,
                window_probed: false,
                probed_age: None,
                cwnd: cfg.initial_cwnd,
                srtt: None,
                rttvar: Duration::ZERO,
                min_rtt: None,
                backoff: 0,
                retries: 0,
                rto_at: None,
            },
            recv: Receiver {
                app: VecDeque::new(),
                ooo: BTreeMap::new(),
                next_deliver: 0,
                base: 0,
                window: None,
                highest: None,
                fin_seq: None,
                finished: false,
                fin_reported: false,
                eof_read: false,
                readable_signalled: false,
                timer_at: None,
                backoff: 0,
                repeats: 0,
                last_reack: None,
            },
            stats: TxnStats::default(),
            last_rx: now,
            phase: Phase::Active,
            armed: None,
            pending_head: None,
        }
    }

    fn deadline(&self, cfg: &TransportConfig) -> Option<Instant> {
        if let Phase::Lingering { until } = self.phase {
            return Some(until);
        }
        let idle = self.last_rx + TransportConfig::ms(cfg.idle_timeout_ms);
        let head = self.pending_head.and_then(|(_, _, d)| d);
        [self.send.rto_at, self.recv.timer_at, Some(idle), head]
            .into_iter()
            .flatten()
            .min()
    }

    fn rto(&self, cfg: &TransportConfig) -> Duration {
        let base = match self.send.srtt {
            Some(srtt) => (srtt + self.send.rttvar * 4).max(TransportConfig::ms(cfg.rto_min_ms)),
            None => TransportConfig::ms(cfg.rto_initial_ms),
        };
        let backed = base * (1u32 << self.send.backoff.min(16));
        backed.min(TransportConfig::ms(cfg.rto_max_ms))
    }

    /// Start a window if none is in flight and there is something to send.
    fn start_window(
        &mut self,
        now: Instant,
        cfg: &TransportConfig,
        txn: Txn,
        out: &mut VecDeque<Transmit>,
    ) -> Result<(), FailReason> {
        if self.phase != Phase::Active || !self.send.window.is_empty() {
            return Ok(());
        }
        let rto = self.rto(cfg);
        let s = &mut self.send;
        let has_fin = s.fin == Fin::Queued;
        if s.buf.is_empty() && !has_fin {
            return Ok(());
        }
        // Cut the window's packets first: the count goes into each.
        let mut chunks: Vec<Vec<u8>> = Vec::new();
        let mut seq = s.next_seq;
        while chunks.len() < usize::from(s.cwnd) && !s.buf.is_empty() {
            let n = s.buf.len().min(cfg.max_data(seq == 0));
            chunks.push(s.buf.drain(..n).collect());
            seq += 1;
        }
        // `cwnd` counts data packets. The end marker carries none: it joins
        // the window of the last data even when that window is full, as long
        // as the window stays within `max_window` (which every receiver
        // accepts). A window of its own would cost the direction one more
        // round trip, and a small HTTP message (one data packet at cwnd 1)
        // would take two windows instead of one.
        let data_packets = chunks.len();
        let fin = has_fin && s.buf.is_empty() && data_packets < usize::from(cfg.max_window);
        if fin {
            chunks.push(Vec::new());
        }
        let count = chunks.len() as u32;
        if s.next_seq.checked_add(count).is_none_or(|e| e == u32::MAX) {
            return Err(FailReason::SeqExhausted);
        }
        // At most max_window <= 256 packets.
        let w = chunks.len() as u16;
        s.window_full = data_packets >= usize::from(s.cwnd);
        s.window_started = now;
        s.window_resent = false;
        s.window_cut = false;
        s.window_probed = false;
        s.probed_age = None;
        for data in chunks {
            let seq = s.next_seq;
            s.next_seq += 1;
            let repr = DataRepr {
                seq,
                window: w,
                txn,
                response: self.side == Side::Egress,
                open: (seq == 0).then_some(self.open),
            };
            let mut packet = vec![0; repr.buffer_len(data.len())];
            repr.emit(&mut DataPacket::new_unchecked(&mut packet[..]), &data);
            self.stats.data_out += 1;
            self.stats.bytes_out += data.len() as u64;
            out.push_back(Transmit {
                path: self.to_peer,
                msg_type: MessageType::TransportData,
                payload: packet.clone(),
            });
            s.window.insert(
                seq,
                Sent {
                    packet,
                    last_sent: now,
                },
            );
        }
        s.window_end = s.next_seq;
        if fin {
            s.fin = Fin::Sent;
        }
        s.rto_at = Some(now + rto);
        Ok(())
    }

    fn on_rto(
        &mut self,
        now: Instant,
        cfg: &TransportConfig,
        _txn: Txn,
        out: &mut VecDeque<Transmit>,
    ) -> Result<(), FailReason> {
        self.send.rto_at = None;
        let Some((_, first)) = self.send.window.iter_mut().next() else {
            return Ok(());
        };
        self.stats.rtos += 1;
        if self.send.retries >= cfg.max_retries {
            return Err(FailReason::Timeout);
        }
        self.send.retries += 1;
        self.send.backoff += 1;
        first.last_sent = now;
        out.push_back(Transmit {
            path: self.to_peer,
            msg_type: MessageType::TransportData,
            payload: first.packet.clone(),
        });
        self.stats.rto_retransmits += 1;
        self.send.window_resent = true;
        if !self.send.window_cut {
            self.send.window_cut = true;
            self.send.cwnd = (self.send.cwnd / 2).max(1);
            self.stats.cwnd_cuts += 1;
        }
        self.send.rto_at = Some(now + self.rto(cfg));
        Ok(())
    }

    /// The whole current window arrived.
    fn window_acked(&mut self, now: Instant, cfg: &TransportConfig, grow: bool) {
        let s = &mut self.send;
        if !s.window_resent {
            let sample = now - s.window_started;
            s.min_rtt = Some(s.min_rtt.map_or(sample, |m| m.min(sample)));
            match s.srtt {
                None => {
                    s.srtt = Some(sample);
                    s.rttvar = sample / 2;
                }
                Some(srtt) => {
                    let diff = if srtt > sample {
                        srtt - sample
                    } else {
                        sample - srtt
                    };
                    s.rttvar = (s.rttvar * 3 + diff) / 4;
                    s.srtt = Some((srtt * 7 + sample) / 8);
                }
            }
        }
        s.window.clear();
        if s.fin == Fin::Sent {
            s.fin = Fin::Acked;
        }
        if grow && s.window_full && s.cwnd < cfg.max_window {
            s.cwnd += 1;
            self.stats.cwnd_grows += 1;
        }
        s.backoff = 0;
        s.retries = 0;
        s.rto_at = None;
    }

    fn on_nack(
        &mut self,
        now: Instant,
        cfg: &TransportConfig,
        _txn: Txn,
        seqs: &[u32],
        out: &mut VecDeque<Transmit>,
        stats: &mut Stats,
    ) {
        if seqs.is_empty() {
            self.stats.acks_in += 1;
            if self.send.window.is_empty() {
                return;
            }
            // A count-0 NACK sooner than half the fastest RTT after the
            // window left is probably a duplicate of the last window's. But
            // RTT samples are noisy, so ask rather than guess: resend the
            // window's last packet once. A receiver that has the window
            // answers with the unambiguous cumulative re-ack; one that has
            // not NACKs what it misses.
            let age = now - self.send.window_started;
            if age <= self.send.min_rtt.unwrap_or(Duration::ZERO) / 2 {
                stats.stale_acks += 1;
                let s = &mut self.send;
                if !s.window_probed {
                    s.window_probed = true;
                    s.probed_age = Some(age);
                    s.window_resent = true;
                    if let Some((_, last)) = s.window.iter_mut().next_back() {
                        last.last_sent = now;
                        out.push_back(Transmit {
                            path: self.to_peer,
                            msg_type: MessageType::TransportData,
                            payload: last.packet.clone(),
                        });
                        self.stats.retransmits += 1;
                    }
                }
                return;
            }
            self.window_acked(now, cfg, true);
            return;
        }
        self.stats.nacks_in += 1;
        if self.send.window.is_empty() {
            return;
        }
        if seqs == [self.send.window_end] {
            // "I expect the packet after your window": cumulative ack.
            // After a probe it says the count 0 that looked stale was
            // honest: the window grows as that count 0 would have grown it,
            // and its age is an RTT sample, or the minimum a slow first
            // window set would keep every later ack looking stale. A
            // duplicate that slipped through cannot pull the minimum down
            // by more than a factor of 4 at once.
            let honest = self.send.probed_age.take();
            if let Some(age) = honest {
                let s = &mut self.send;
                s.min_rtt = Some(s.min_rtt.map_or(age, |m| m.min(age.max(m / 4))));
            }
            self.window_acked(now, cfg, honest.is_some());
            return;
        }
        if seqs.iter().any(|s| self.send.window.contains_key(s)) {
            // The receiver is alive and talks about this window.
            self.send.retries = 0;
            self.send.backoff = 0;
        }
        let guard = self
            .send
            .srtt
            .map_or(TransportConfig::ms(cfg.rto_min_ms) / 2, |s| s / 2);
        let mut resent = false;
        for seq in seqs {
            let Some(sent) = self.send.window.get_mut(seq) else {
                continue;
            };
            if now - sent.last_sent < guard {
                stats.nack_suppressed += 1;
                continue;
            }
            sent.last_sent = now;
            out.push_back(Transmit {
                path: self.to_peer,
                msg_type: MessageType::TransportData,
                payload: sent.packet.clone(),
            });
            self.stats.retransmits += 1;
            resent = true;
        }
        if resent {
            self.send.window_resent = true;
            if !self.send.window_cut {
                self.send.window_cut = true;
                self.send.cwnd = (self.send.cwnd / 2).max(1);
                self.stats.cwnd_cuts += 1;
            }
            self.send.rto_at = Some(now + self.rto(cfg));
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn on_data(
        &mut self,
        now: Instant,
        cfg: &TransportConfig,
        txn: Txn,
        repr: &DataRepr,
        data: &[u8],
        out: &mut VecDeque<Transmit>,
        stats: &mut Stats,
    ) {
        self.stats.data_in += 1;
        let r = &mut self.recv;
        let seq = repr.seq;
        if seq < r.base {
            // A window we acknowledged: its sender missed our count 0.
            self.stats.duplicates += 1;
            let quiet = TransportConfig::ms(cfg.reorder_ms) / 2;
            if r.last_reack.is_none_or(|t| now - t >= quiet) {
                r.last_reack = Some(now);
                nack(out, self.to_peer, txn, &[r.base], &mut self.stats);
            }
            return;
        }
        if seq - r.base >= u32::from(cfg.max_window) || r.fin_seq.is_some_and(|f| seq > f) {
            stats.out_of_window += 1;
            return;
        }
        if seq < r.next_deliver || r.ooo.contains_key(&seq) {
            // Probably the sender's RTO probe: say what is still missing.
            self.stats.duplicates += 1;
            let missing = r.missing();
            let quiet = TransportConfig::ms(cfg.reorder_ms) / 2;
            if !missing.is_empty() && r.last_reack.is_none_or(|t| now - t >= quiet) {
                r.last_reack = Some(now);
                nack(out, self.to_peer, txn, &missing, &mut self.stats);
            }
            return;
        }
        if data.is_empty() {
            r.fin_seq = Some(seq);
        }
        r.ooo.insert(seq, data.to_vec());
        if r.window.is_none() {
            r.window = Some(repr.window.min(cfg.max_window));
        }
        r.backoff = 0;
        r.repeats = 0;
        // A gap just opened: NACK it at once.
        let from = r.highest.map_or(r.base, |h| h + 1).max(r.base);
        if seq > from {
            let missing: Vec<u32> = (from..seq)
                .filter(|s| !r.ooo.contains_key(s) && *s >= r.next_deliver)
                .collect();
            if !missing.is_empty() {
                nack(out, self.to_peer, txn, &missing, &mut self.stats);
            }
        }
        r.highest = Some(r.highest.map_or(seq, |h| h.max(seq)));
        if r.timer_at.is_none() {
            r.timer_at = Some(now + TransportConfig::ms(cfg.reorder_ms));
        }
    }

    fn on_recv_timer(
        &mut self,
        now: Instant,
        cfg: &TransportConfig,
        txn: Txn,
        out: &mut VecDeque<Transmit>,
    ) {
        let r = &mut self.recv;
        r.timer_at = None;
        if r.repeats >= cfg.max_retries {
            return;
        }
        let missing = r.missing();
        if missing.is_empty() {
            // Everything of the window is here: either the application has
            // not made room (it will) or we wait for the next window.
            if !r.ooo.is_empty() || r.finished {
                return;
            }
            nack(out, self.to_peer, txn, &[r.base], &mut self.stats);
        } else {
            nack(out, self.to_peer, txn, &missing, &mut self.stats);
        }
        r.repeats += 1;
        let step = TransportConfig::ms(cfg.reorder_ms) * (1u32 << r.backoff.min(16));
        r.backoff += 1;
        r.timer_at = Some(now + step.min(TransportConfig::ms(cfg.rto_max_ms)));
    }
}

impl Receiver {
    /// The current window's end, if known.
    fn end(&self) -> Option<u32> {
        let end = self.base + u32::from(self.window?);
        Some(self.fin_seq.map_or(end, |f| end.min(f + 1)))
    }

    /// Sequence numbers of the current window not received (only
    /// `[base, ...)` when the window size is unknown: nothing).
    fn missing(&self) -> Vec<u32> {
        let Some(end) = self.end() else {
            return Vec::new();
        };
        (self.next_deliver.max(self.base)..end)
            .filter(|s| !self.ooo.contains_key(s))
            .collect()
    }

    /// Move in-order data to the application while it has room; acknowledge
    /// a window that is complete and delivered.
    fn deliver(
        &mut self,
        now: Instant,
        cfg: &TransportConfig,
        txn: Txn,
        to_peer: PathId,
        stats: &mut TxnStats,
        out: &mut VecDeque<Transmit>,
    ) {
        while let Some(entry) = self.ooo.first_entry() {
            if *entry.key() != self.next_deliver {
                break;
            }
            if entry.get().is_empty() {
                entry.remove();
                self.next_deliver += 1;
                self.finished = true;
                break;
            }
            if self.app.len() + entry.get().len() > cfg.recv_buffer {
                break;
            }
            let data = entry.remove();
            stats.bytes_in += data.len() as u64;
            self.app.extend(data);
            self.next_deliver += 1;
        }
        let Some(end) = self.end() else {
            return;
        };
        if self.next_deliver < end {
            return;
        }
        nack(out, to_peer, txn, &[], stats);
        self.base = end;
        self.window = None;
        self.highest = None;
        self.backoff = 0;
        self.repeats = 0;
        // The repeat timer re-acks a window whose next one does not come.
        // After the end marker none will: a lost count 0 is answered when
        // the sender's RTO resends into the acknowledged window, so a
        // finished direction needs no wake-up.
        self.timer_at = (!self.finished).then(|| now + TransportConfig::ms(cfg.reorder_ms));
    }
}

fn nack(out: &mut VecDeque<Transmit>, path: PathId, txn: Txn, seqs: &[u32], stats: &mut TxnStats) {
    // At most max_window (256) sequence numbers: fits Seqs and the MTU.
    let Ok(seqs) = Seqs::new(seqs) else {
        return;
    };
    if seqs.is_empty() {
        stats.acks_out += 1;
    } else {
        stats.nacks_out += 1;
    }
    let repr = NackRepr { txn, seqs };
    let mut payload = vec![0; repr.buffer_len()];
    repr.emit(&mut NackPacket::new_unchecked(&mut payload[..]));
    debug_assert!(payload.len() >= NACK_HEADER_LEN);
    out.push_back(Transmit {
        path,
        msg_type: MessageType::TransportNack,
        payload,
    });
}

#[cfg(test)]
mod tests;
