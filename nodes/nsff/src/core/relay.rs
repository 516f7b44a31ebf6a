//! A byte relay between two ends — a TCP connection on one of the node's
//! ports, or a transport transaction — for TLS passthrough: whatever one end
//! sends, the other gets unmodified, in both directions at once; an end's
//! close (TCP FIN, the transaction's end marker) is passed on as a
//! half-close of the other end.
//!
//! ```text
//!   a ──read──▶ ab ──write──▶ b        a_eof ⇒ (ab drained) finish b
//!   a ◀──write── ba ◀──read── b        b_eof ⇒ (ba drained) finish a
//! ```
//!
//! `b` may be missing while the session is being set up (the ClientHello
//! is being read, the name resolved); `a`'s bytes then wait in `ab`. A
//! [`Pipe::cut`] pipe has no `b` any more: what `a` still sends is dropped,
//! `ba` holds at most an alert, and `a` is finished after it.

use smoltcp::time::Instant;
use smoltcp::wire::IpAddress;
use svcroute_stack::wire::nsff::Txn;

use super::io::{ConnId, Conns, TcpState};
use super::local::Evidence;
use crate::transport::Endpoint;

/// Bytes read per call.
const CHUNK: usize = 16 * 1024;

/// One end of a relay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum End {
    /// A TCP connection.
    Tcp(ConnId),
    /// A transport transaction.
    Txn(Txn),
}

/// Which end failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Side {
    /// `a`.
    A,
    /// `b`.
    B,
}

/// What reading an end gave.
enum Got {
    Data,
    Eof,
    Nothing,
    Failed,
}

/// A local SF's TLS port that `b` was dialed to: what the relay learns
/// about the SF's health (passive evidence, as for proxied HTTP).
#[derive(Debug, Clone, Copy)]
struct Watch {
    target: (IpAddress, u16),
    since: Instant,
    established: bool,
}

/// The relay state (see the module doc).
#[derive(Debug)]
pub(crate) struct Pipe {
    pub(crate) a: End,
    pub(crate) b: Option<End>,
    /// From `a`, not yet written to `b`.
    pub(crate) ab: Vec<u8>,
    /// From `b` (or an alert of ours), not yet written to `a`.
    pub(crate) ba: Vec<u8>,
    pub(crate) a_eof: bool,
    pub(crate) b_eof: bool,
    /// Our direction toward `a` is finished.
    pub(crate) a_fin: bool,
    /// Our direction toward `b` is finished.
    pub(crate) b_fin: bool,
    /// `b` is gone: drop what `a` sends.
    pub(crate) cut: bool,
    /// Octets written to `b` and to `a`.
    pub(crate) ab_bytes: u64,
    pub(crate) ba_bytes: u64,
    /// `b` is a new connection to a local SF, not yet judged.
    watch: Option<Watch>,
    /// What the relay learnt about that SF, for the caller to take.
    pub(crate) evidence: Option<((IpAddress, u16), Evidence)>,
}

impl Pipe {
    pub(crate) fn new(a: End) -> Self {
        Self {
            a,
            b: None,
            ab: Vec::new(),
            ba: Vec::new(),
            a_eof: false,
            b_eof: false,
            a_fin: false,
            b_fin: false,
            cut: false,
            ab_bytes: 0,
            ba_bytes: 0,
            watch: None,
            evidence: None,
        }
    }

    /// `b` was just dialed to the local SF at `target`: the first bytes
    /// from it say the SF is alive, a connect that fails says it refused
    /// ([`Pipe::evidence`]).
    pub(crate) fn watch(&mut self, target: (IpAddress, u16), now: Instant) {
        self.watch = Some(Watch {
            target,
            since: now,
            established: false,
        });
    }

    fn judge(&mut self, got: &Got) {
        let Some(w) = self.watch else {
            return;
        };
        let ev = match got {
            Got::Data => Evidence::Answered,
            Got::Failed if !w.established => Evidence::Refused { started: w.since },
            // Connected, then closed or reset before a byte: no verdict.
            Got::Failed | Got::Eof => {
                self.watch = None;
                return;
            }
            Got::Nothing => return,
        };
        self.watch = None;
        self.evidence = Some((w.target, ev));
    }

    /// Move whatever can move; `limit` bounds each direction's buffer
    /// (what is read from `a` ahead of `b`, and from `b` ahead of `a`). `Ok(progress)`, or the end that failed (a TCP reset or
    /// failed connect, a transaction gone).
    pub(crate) fn pump(
        &mut self,
        now: Instant,
        io: &mut impl Conns,
        ep: &mut Endpoint,
        limit: usize,
    ) -> Result<bool, Side> {
        let mut any = false;
        if !self.a_eof {
            match read(self.a, now, io, ep, &mut self.ab, limit) {
                Got::Data => any = true,
                Got::Eof => {
                    self.a_eof = true;
                    any = true;
                }
                Got::Nothing => {}
                Got::Failed => return Err(Side::A),
            }
        }
        if self.cut {
            self.ab.clear();
        }
        if let Some(b) = self.b {
            if let (Some(w), End::Tcp(c)) = (&mut self.watch, b) {
                w.established |= io.state(c) == TcpState::Established;
            }
            if !self.ab.is_empty() {
                let Ok(n) = write(b, now, io, ep, &self.ab) else {
                    self.judge(&Got::Failed);
                    return Err(Side::B);
                };
                self.ab.drain(..n);
                self.ab_bytes += n as u64;
                any |= n > 0;
            }
            if self.a_eof && self.ab.is_empty() && !self.b_fin && finish(b, now, io, ep) {
                self.b_fin = true;
                any = true;
            }
            if !self.b_eof {
                let got = read(b, now, io, ep, &mut self.ba, limit);
                self.judge(&got);
                match got {
                    Got::Data => any = true,
                    Got::Eof => {
                        self.b_eof = true;
                        any = true;
                    }
                    Got::Nothing => {}
                    Got::Failed => return Err(Side::B),
                }
            }
        }
        if !self.ba.is_empty() && !self.a_fin {
            let n = write(self.a, now, io, ep, &self.ba).map_err(|()| Side::A)?;
            self.ba.drain(..n);
            self.ba_bytes += n as u64;
            any |= n > 0;
        }
        if self.b_eof && self.ba.is_empty() && !self.a_fin && finish(self.a, now, io, ep) {
            self.a_fin = true;
            any = true;
        }
        Ok(any)
    }

    /// Both directions ended and everything was delivered.
    pub(crate) fn done(&self) -> bool {
        self.a_eof
            && self.a_fin
            && (self.b_fin || self.cut)
            && self.ab.is_empty()
            && self.ba.is_empty()
    }

    /// Give up on `b` (returned, for the caller to close): `a` gets
    /// `alert` if nothing of `b`'s went to it yet, then its direction is
    /// finished. `false` when bytes of `b` already reached `a`: the stream
    /// cannot be ended cleanly, the caller resets `a`.
    pub(crate) fn cut(&mut self, alert: Option<&[u8]>) -> (Option<End>, bool) {
        let b = self.b.take();
        let clean = self.ba_bytes == 0;
        self.cut = true;
        self.b_eof = true;
        self.ab.clear();
        self.ba.clear();
        if clean {
            if let Some(a) = alert {
                self.ba.extend_from_slice(a);
            }
        }
        (b, clean)
    }
}

/// Read from `end` into `buf` (up to `limit` octets held).
fn read(
    end: End,
    now: Instant,
    io: &mut impl Conns,
    ep: &mut Endpoint,
    buf: &mut Vec<u8>,
    limit: usize,
) -> Got {
    let mut got = Got::Nothing;
    let mut tmp = [0u8; CHUNK];
    match end {
        End::Tcp(c) => {
            while buf.len() < limit && io.can_recv(c) {
                let room = (limit - buf.len()).min(CHUNK);
                match io.recv(c, room, buf) {
                    Some(0) | None => break,
                    Some(_) => got = Got::Data,
                }
            }
            if matches!(got, Got::Nothing) && !io.can_recv(c) {
                return match io.state(c) {
                    TcpState::CloseWait
                    | TcpState::LastAck
                    | TcpState::Closing
                    | TcpState::TimeWait => Got::Eof,
                    TcpState::Closed => Got::Failed,
                    _ => Got::Nothing,
                };
            }
            got
        }
        End::Txn(txn) => {
            while buf.len() < limit {
                let room = (limit - buf.len()).min(CHUNK);
                match ep.recv(now, txn, &mut tmp[..room]) {
                    Ok(Some(0)) => {
                        return match got {
                            Got::Data => Got::Data,
                            _ => Got::Eof,
                        }
                    }
                    Ok(Some(n)) => {
                        buf.extend_from_slice(&tmp[..n]);
                        got = Got::Data;
                    }
                    Ok(None) => break,
                    Err(_) => return Got::Failed,
                }
            }
            got
        }
    }
}

/// Write what `end` takes of `data`.
fn write(
    end: End,
    now: Instant,
    io: &mut impl Conns,
    ep: &mut Endpoint,
    data: &[u8],
) -> Result<usize, ()> {
    match end {
        End::Tcp(c) => {
            if io.state(c) == TcpState::Closed {
                return Err(());
            }
            if !io.can_send(c) {
                return Ok(0);
            }
            io.send(c, data).ok_or(())
        }
        End::Txn(txn) => ep.send(now, txn, data).map_err(|_| ()),
    }
}

/// End our direction toward `end`; `false` if it cannot be done yet (a
/// connection still being set up: closing it now would abort it).
fn finish(end: End, now: Instant, io: &mut impl Conns, ep: &mut Endpoint) -> bool {
    match end {
        End::Tcp(c) => {
            if matches!(
                io.state(c),
                TcpState::Listen | TcpState::SynSent | TcpState::SynReceived
            ) {
                return false;
            }
            io.close(c);
            true
        }
        End::Txn(txn) => {
            let _ = ep.finish(now, txn);
            true
        }
    }
}
