//! The egress: a transaction opened toward us carries one request for a
//! local SF (or, by its first octet, a TLS session: [`super::passthrough`]).
//! Its bytes are decoded up to the head, the SF is chosen by `Host` (or by
//! the ingress's `NSH-Next-Hop`), the exchange runs in the SF room, and the
//! response goes back on the same transaction.

use smoltcp::time::Instant;
use svcroute_stack::http::{Decoded, RequestDecoder};
use svcroute_stack::stats::Counters;
use svcroute_stack::wire::nr::Fqdn;
use svcroute_stack::wire::nsff::Txn;

use super::client::request_name;
use super::io::{Conns, JobId};
use super::refusal::Refusal;
use super::relay::{End, Pipe};
use super::{streaming, Proxy, BUF_HIGH, CHUNK};
use crate::{sfc, tls};

/// An egress transaction.
#[derive(Debug)]
pub(crate) struct Egress {
    dec: RequestDecoder,
    held: Vec<u8>,
    scanned: usize,
    /// The request's last byte arrived (by its framing).
    req_complete: bool,
    req_eof: bool,
    pub(crate) job: Option<JobId>,
    finished: bool,
    /// The transport was told the head is complete.
    head_done: bool,
    /// A TLS passthrough transaction (its first octet was a handshake
    /// record): the transaction (`a`) relayed to the SF's TLS port (`b`).
    pub(crate) tls: Option<Pipe>,
}

impl Egress {
    pub(crate) fn new() -> Self {
        Self {
            dec: RequestDecoder::new(streaming()),
            held: Vec::new(),
            scanned: 0,
            req_complete: false,
            req_eof: false,
            job: None,
            finished: false,
            head_done: false,
            tls: None,
        }
    }
}

impl Proxy {
    /// Work on one egress transaction; whether anything happened.
    pub(crate) fn pump_egress(
        &mut self,
        now: Instant,
        io: &mut impl Conns,
        stats: &mut Counters,
        txn: Txn,
        e: &mut Egress,
    ) -> bool {
        if e.tls.is_some() {
            return self.pump_egress_tls(now, io, stats, e);
        }
        let mut any = false;
        let mut tmp = [0u8; CHUNK];
        while !e.req_eof && e.held.len() < BUF_HIGH {
            match self.ep.recv(now, txn, &mut tmp) {
                Ok(Some(0)) => {
                    e.req_eof = true;
                    any = true;
                }
                Ok(Some(n)) => {
                    e.held.extend_from_slice(&tmp[..n]);
                    any = true;
                }
                Ok(None) | Err(_) => break,
            }
        }
        if e.job.is_none() && e.held.first().copied().is_some_and(tls::is_tls_start) {
            // No request line starts with a TLS handshake record: this
            // transaction is a passthrough session (see `docs/nsff.md`).
            let mut p = Pipe::new(End::Txn(txn));
            p.ab = std::mem::take(&mut e.held);
            p.a_eof = e.req_eof;
            e.tls = Some(p);
            return self.pump_egress_tls(now, io, stats, e) || any;
        }
        if e.job.is_none() && !e.held.is_empty() {
            any |= self.egress_head(now, io, stats, e);
        }
        let Some(jid) = e.job else {
            if e.req_eof {
                // Ended before a head.
                e.job = Some(self.sf.canned(&Refusal::EgressEmpty));
                self.ep.head_complete(txn);
            }
            return any;
        };
        if !e.head_done {
            // The request is decided (an exchange or a refusal): no longer
            // an unfinished head to time out or evict.
            e.head_done = true;
            self.ep.head_complete(txn);
        }
        let Some(j) = self.sf.jobs.get_mut(&jid) else {
            return any;
        };
        if j.sock.is_some() && !j.resp_done() {
            // Decode the rest to know where the request ends (the end
            // marker of the transaction may come a window later).
            while !e.req_complete {
                let Some(input) = e.held.get(e.scanned..) else {
                    break;
                };
                match e.dec.decode(input) {
                    Ok((n, ev)) => {
                        e.scanned += n;
                        match ev {
                            Decoded::End => e.req_complete = true,
                            Decoded::NeedMore => break,
                            _ if n == 0 => break,
                            _ => {}
                        }
                    }
                    Err(_) => break,
                }
            }
            // At most BUF_HIGH queued toward the SF; `held` has its own
            // limit, which stops reading the transaction.
            if j.req.len() < BUF_HIGH {
                j.req.append(&mut e.held);
                e.scanned = 0;
            }
            j.req_done = (e.req_eof || e.req_complete) && e.held.is_empty();
        } else {
            e.held.clear();
            e.scanned = 0;
        }
        if self.has_sf_port {
            any |= j.pump(io, stats);
        }
        if let (Some(ev), Some(t)) = (j.evidence.take(), j.target) {
            self.local.evidence.push((t, ev));
        }
        let mut ended = false;
        if !j.resp.is_empty() {
            // A complete response takes its end marker along (one window).
            let sent = if j.resp_done() {
                self.ep.send_last(now, txn, &j.resp)
            } else {
                self.ep.send(now, txn, &j.resp)
            };
            if let Ok(n) = sent {
                j.resp.drain(..n);
                any |= n > 0;
                ended = j.resp_done() && j.resp.is_empty();
            }
        }
        if j.resp_done() && j.resp.is_empty() && !e.finished {
            if !ended {
                let _ = self.ep.finish(now, txn);
            }
            e.finished = true;
            stats.bump("nsff.egress_responses");
            self.sf.remove(now, io, jid);
            any = true;
        }
        any
    }

    /// Find the request's head (the bytes stay in `held`; `scanned` of them
    /// went through the decoder already) and start its exchange.
    fn egress_head(
        &mut self,
        now: Instant,
        io: &mut impl Conns,
        stats: &mut Counters,
        e: &mut Egress,
    ) -> bool {
        let mut any = false;
        while let Some(input) = e.held.get(e.scanned..) {
            match e.dec.decode(input) {
                Ok((n, Decoded::Head(h))) => {
                    e.scanned += n;
                    let name = match h.headers.get(sfc::NEXT_HOP_HEADER) {
                        // The ingress chose the SF by the nNLM: deliver
                        // to it (with the NSH header, without this one).
                        Some(v) => {
                            stats.bump("nsff.egress_sfc");
                            if let Some(d) =
                                sfc::edit_head(&mut e.held, &[sfc::NEXT_HOP_HEADER], &[])
                            {
                                e.scanned = e.scanned.saturating_add_signed(d);
                            }
                            std::str::from_utf8(v)
                                .ok()
                                .and_then(|v| Fqdn::new(&v.trim().to_ascii_lowercase()).ok())
                        }
                        None => request_name(&h),
                    };
                    let sf = name.as_ref().and_then(|n| self.local.http(n));
                    e.job = Some(match sf {
                        Some(target) => {
                            stats.bump("nsff.egress_requests");
                            self.sf.connect(now, io, stats, target, &h)
                        }
                        None => {
                            stats.bump("nsff.egress_no_sf");
                            self.sf.canned(&Refusal::EgressNoSf)
                        }
                    });
                    any = true;
                    break;
                }
                Ok((n, Decoded::NeedMore)) => {
                    e.scanned += n;
                    break;
                }
                Ok((n, _)) => {
                    e.scanned += n;
                    if n == 0 {
                        break;
                    }
                }
                Err(err) => {
                    stats.bump("nsff.egress_bad_request");
                    e.job = Some(self.sf.canned(&Refusal::EgressBadRequest(err)));
                    break;
                }
            }
        }
        any
    }
}
