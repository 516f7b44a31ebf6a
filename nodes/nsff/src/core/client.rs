//! The client side: HTTP client connections and the request pump, cut into
//! its steps. Each round of [`Proxy::pump_client`] reads what arrived
//! ([`Client::read`]), decodes the request and routes it once its head is
//! complete ([`Proxy::head_step`], routing in [`super::route`]), relays
//! request and response between the client and the transaction or local
//! SF exchange it goes to ([`Proxy::relay_step`]) and writes what the
//! client is owed ([`Client::write`]); it ends with the connection's
//! fate ([`Client::settle`]).

use smoltcp::time::{Duration, Instant};
use svcroute_stack::http::{Decoded, Framing, RequestDecoder, RequestHead, ResponseDecoder};
use svcroute_stack::stats::Counters;
use svcroute_stack::wire::nr::Fqdn;
use svcroute_stack::wire::nsff::Txn;

use super::io::{ClientId, ConnId, Conns, JobId, PoolId, TcpState};
use super::refusal::Refusal;
use super::{streaming, Proxy, BUF_HIGH, CHUNK};
use crate::sfc;

/// What a client connection's current request goes to.
#[derive(Debug)]
pub(crate) enum Up {
    /// Between requests.
    Idle,
    /// Head seen, name being resolved.
    Resolving,
    /// Over a transaction. `finished`: the request has ended there;
    /// `final_head`: the final (not 1xx) response head has arrived.
    Remote {
        txn: Txn,
        finished: bool,
        final_head: bool,
    },
    /// To a local SF job (or a canned answer).
    Local { job: JobId },
}

/// One client connection.
#[derive(Debug)]
pub(crate) struct Client {
    /// Watches the remote response's heads (framing, keep-alive).
    rdec: ResponseDecoder,
    /// Last time anything moved on this connection.
    active: Instant,
    /// The pool it came from.
    pub(crate) pool: PoolId,
    pub(crate) conn: ConnId,
    dec: RequestDecoder,
    inbuf: Vec<u8>,
    /// Bytes of the current request not yet handed upstream.
    pub(crate) msg: Vec<u8>,
    msg_done: bool,
    pub(crate) up: Up,
    /// Response bytes not yet written to the socket.
    wbuf: Vec<u8>,
    close_after: bool,
    /// The request decoder failed: it says the same from now on
    /// (`svcroute_stack::http::ProtocolError`), so nothing more is decoded
    /// on this connection; its one answer goes out and it closes.
    poisoned: bool,
}

impl Client {
    pub(crate) fn new(now: Instant, conn: ConnId, pool: PoolId) -> Self {
        Self {
            pool,
            conn,
            dec: RequestDecoder::new(streaming()),
            inbuf: Vec::new(),
            msg: Vec::new(),
            msg_done: false,
            up: Up::Idle,
            wbuf: Vec::new(),
            close_after: false,
            poisoned: false,
            active: now,
            rdec: ResponseDecoder::new(streaming()),
        }
    }

    /// Whether [`Proxy::pump_client`] would do nothing for it now: an idle
    /// keep-alive connection (no request in progress, nothing buffered
    /// either way), established, with no new bytes, and within its idle
    /// limit. Anything else (bytes, the peer's FIN, a reset, the limit)
    /// makes it not quiet.
    pub(crate) fn quiet(&self, now: Instant, limit: Duration, io: &impl Conns) -> bool {
        if !matches!(self.up, Up::Idle)
            || self.close_after
            || self.msg_done
            || !self.inbuf.is_empty()
            || !self.msg.is_empty()
            || !self.wbuf.is_empty()
            || now - self.active >= limit
        {
            return false;
        }
        io.state(self.conn) == TcpState::Established && !io.can_recv(self.conn)
    }

    /// Answer the current request with the nSFF's own answer and close
    /// afterwards.
    pub(crate) fn refuse(&mut self, job: JobId) {
        self.up = Up::Local { job };
        self.close_after = true;
        self.msg.clear();
        self.inbuf.clear();
        self.msg_done = true;
    }

    /// Read what arrived, while there is room.
    fn read(&mut self, io: &mut impl Conns) -> bool {
        let mut progress = false;
        while !self.close_after
            && self.inbuf.len() < BUF_HIGH
            && self.msg.len() < BUF_HIGH
            && io.can_recv(self.conn)
        {
            match io.recv(self.conn, CHUNK, &mut self.inbuf) {
                Some(0) | None => break,
                Some(_) => progress = true,
            }
        }
        progress
    }

    /// Write what the client is owed, as far as it fits.
    fn write(&mut self, io: &mut impl Conns) -> bool {
        if self.wbuf.is_empty() || !io.can_send(self.conn) {
            return false;
        }
        match io.send(self.conn, &self.wbuf) {
            Some(n) => {
                self.wbuf.drain(..n);
                n > 0
            }
            None => false,
        }
    }

    /// After a pump: close the connection once the exchange is over and it
    /// must close (or the peer sent its FIN), reset it after `limit` idle;
    /// `false` when it is gone.
    fn settle(
        &mut self,
        now: Instant,
        limit: Duration,
        io: &mut impl Conns,
        stats: &mut Counters,
    ) -> bool {
        let idle = matches!(self.up, Up::Idle) && self.wbuf.is_empty();
        // The peer's FIN (a fresh connection is SynReceived, not closing).
        let peer_done = io.state(self.conn) == TcpState::CloseWait;
        if idle && (self.close_after || peer_done && self.inbuf.is_empty()) {
            io.close(self.conn);
        }
        // An idle keep-alive connection (waiting for a request, or a client
        // that stopped reading) is dropped after `client_idle_timeout_s`.
        let waiting = matches!(self.up, Up::Idle) || !self.wbuf.is_empty();
        if waiting && now - self.active >= limit {
            stats.bump("nsff.clients_idle_closed");
            io.abort(self.conn);
        }
        !matches!(io.state(self.conn), TcpState::Closed | TcpState::TimeWait)
    }

    /// The response is over: the connection waits for the next request.
    fn next_request(&mut self) {
        self.up = Up::Idle;
        self.msg_done = false;
        self.rdec = ResponseDecoder::new(streaming());
    }
}

impl Proxy {
    /// Work on one client connection: `(progress, alive)`.
    pub(crate) fn pump_client(
        &mut self,
        now: Instant,
        io: &mut impl Conns,
        stats: &mut Counters,
        id: ClientId,
        c: &mut Client,
    ) -> (bool, bool) {
        let mut any = false;
        for _ in 0..64 {
            let mut progress = c.read(io);
            progress |= self.head_step(now, io, stats, id, c);
            progress |= self.relay_step(now, io, stats, c);
            progress |= c.write(io);
            any |= progress;
            if progress {
                c.active = now;
            }
            if !progress {
                break;
            }
        }
        let alive = c.settle(now, self.client_idle, io, stats);
        (any, alive)
    }

    /// Decode the current request; route it when its head is complete.
    fn head_step(
        &mut self,
        now: Instant,
        io: &mut impl Conns,
        stats: &mut Counters,
        id: ClientId,
        c: &mut Client,
    ) -> bool {
        let mut progress = false;
        while !c.msg_done
            && !c.poisoned
            && (!c.inbuf.is_empty() || c.dec.framing().is_some())
            && c.msg.len() < BUF_HIGH
        {
            match c.dec.decode(&c.inbuf) {
                Ok((n, ev)) => {
                    let ev = match ev {
                        Decoded::Head(h) => Some(Some(h)),
                        Decoded::End => Some(None),
                        Decoded::NeedMore | Decoded::Closed | Decoded::Data(_) => None,
                    };
                    c.msg.extend(c.inbuf.drain(..n));
                    progress |= n > 0;
                    match ev {
                        Some(Some(h)) => {
                            if !h.keep_alive() {
                                c.close_after = true;
                            }
                            c.rdec.set_head_request(h.is_head());
                            if h.headers.get_all("host").nth(1).is_some() {
                                // RFC 9112 §3.2: more than one Host line is 400.
                                stats.bump("nsff.bad_host");
                                stats.bump("nsff.duplicate_host");
                                c.poisoned = true;
                                self.refuse_client(now, io, c, &Refusal::DuplicateHost);
                                progress = true;
                                continue;
                            }
                            if h.target.starts_with("http://") {
                                // Explicit proxy: the SF gets origin-form,
                                // and the target's authority replaces Host
                                // end to end (RFC 9112 §3.2.2).
                                origin_form(&mut c.msg, &h.target);
                                if let Some(a) = authority(&h.target) {
                                    let _ = sfc::edit_head(&mut c.msg, &["host"], &[("Host", a)]);
                                }
                                stats.bump("nsff.absolute_form");
                            }
                            self.route(now, io, stats, id, c, &h);
                        }
                        Some(None) => c.msg_done = true,
                        None if n == 0 => break,
                        None => {}
                    }
                }
                Err(e) => {
                    stats.bump("nsff.bad_request");
                    c.poisoned = true;
                    self.refuse_client(now, io, c, &Refusal::BadRequest(e));
                    progress = true;
                }
            }
        }
        progress
    }

    /// Move the request upstream and the response back, for where the
    /// request goes.
    fn relay_step(
        &mut self,
        now: Instant,
        io: &mut impl Conns,
        stats: &mut Counters,
        c: &mut Client,
    ) -> bool {
        match c.up {
            Up::Idle | Up::Resolving => false,
            Up::Remote {
                txn,
                finished,
                final_head,
            } => self.relay_remote(now, stats, c, txn, finished, final_head),
            Up::Local { job } => self.relay_local(now, io, stats, c, job),
        }
    }

    /// Over a transaction: request bytes out, response bytes back.
    fn relay_remote(
        &mut self,
        now: Instant,
        stats: &mut Counters,
        c: &mut Client,
        txn: Txn,
        mut finished: bool,
        mut final_head: bool,
    ) -> bool {
        let mut progress = false;
        if !c.msg.is_empty() {
            // A complete request takes its end marker along
            // (one window, not two: docs/bench.md).
            let last = c.msg_done;
            let sent = if last {
                self.ep.send_last(now, txn, &c.msg)
            } else {
                self.ep.send(now, txn, &c.msg)
            };
            if let Ok(n) = sent {
                c.msg.drain(..n);
                progress |= n > 0;
                finished |= last && c.msg.is_empty();
            }
        }
        if c.msg_done && c.msg.is_empty() && !finished {
            let _ = self.ep.finish(now, txn);
            finished = true;
            progress = true;
        }
        c.up = Up::Remote {
            txn,
            finished,
            final_head,
        };
        let mut tmp = [0u8; CHUNK];
        while c.wbuf.len() < BUF_HIGH {
            match self.ep.recv(now, txn, &mut tmp) {
                Ok(Some(0)) => {
                    stats.bump("nsff.responses_remote");
                    self.txn_client.remove(&txn);
                    c.next_request();
                    progress = true;
                    break;
                }
                Ok(Some(n)) => {
                    let w = watch_response(&mut c.rdec, &mut final_head, &tmp[..n]);
                    // Bytes after the response's framing would
                    // answer the client's next request.
                    let keep = w.end.unwrap_or(n);
                    c.wbuf.extend_from_slice(&tmp[..keep]);
                    if keep < n {
                        stats.add("nsff.bytes_after_response", (n - keep) as u64);
                    }
                    c.close_after |= w.close;
                    progress = true;
                    if w.complete && finished {
                        // The client has the whole response:
                        // its next request need not wait for
                        // the end marker (docs/nsff.md).
                        stats.bump("nsff.responses_remote");
                        self.txn_client.remove(&txn);
                        self.detached.insert(txn);
                        self.drain_detached(now, stats, txn);
                        if self.detached.contains(&txn) {
                            stats.bump("nsff.responses_before_end");
                        }
                        c.next_request();
                        break;
                    }
                    c.up = Up::Remote {
                        txn,
                        finished,
                        final_head,
                    };
                }
                Ok(None) => break,
                Err(_) => {
                    // The transaction failed; the event handler
                    // already counted it.
                    stats.bump("nsff.txn_lost");
                    self.txn_client.remove(&txn);
                    c.up = if c.wbuf.is_empty() {
                        Up::Local {
                            job: self.sf.canned(&Refusal::TxnLost),
                        }
                    } else {
                        Up::Idle
                    };
                    c.close_after = true;
                    c.msg_done = true;
                    progress = true;
                    break;
                }
            }
        }
        progress
    }

    /// To a local SF exchange (or a canned answer).
    fn relay_local(
        &mut self,
        now: Instant,
        io: &mut impl Conns,
        stats: &mut Counters,
        c: &mut Client,
        job: JobId,
    ) -> bool {
        let mut progress = false;
        let Some(j) = self.sf.jobs.get_mut(&job) else {
            c.up = Up::Idle;
            return false;
        };
        if j.sock.is_some() && !j.resp_done() {
            // At most BUF_HIGH queued toward the SF: the
            // rest waits in `msg`, whose limit stops the
            // reads (the client's window closes).
            if j.req.len() < BUF_HIGH {
                j.req.append(&mut c.msg);
            }
            j.req_done = c.msg_done && c.msg.is_empty();
        } else {
            // A canned answer, or the SF answered before
            // the request ended: the rest goes nowhere.
            c.msg.clear();
        }
        if self.has_sf_port {
            progress |= j.pump(io, stats);
        }
        if let (Some(ev), Some(t)) = (j.evidence.take(), j.target) {
            self.local.evidence.push((t, ev));
        }
        if !j.resp.is_empty() && c.wbuf.len() < BUF_HIGH {
            c.wbuf.append(&mut j.resp);
            progress = true;
        }
        if j.close_client {
            c.close_after = true;
        }
        let done = j.resp_done() && j.resp.is_empty();
        if done && (c.msg_done || c.close_after) {
            stats.bump("nsff.responses_local");
            self.sf.remove(now, io, job);
            c.up = Up::Idle;
            c.msg_done = false;
            progress = true;
        }
        progress
    }

    /// Answer the client's current request with `why` and close afterwards.
    /// Whatever the request was already going to (a transaction, a local
    /// SF exchange) is let go.
    pub(crate) fn refuse_client(
        &mut self,
        now: Instant,
        io: &mut impl Conns,
        c: &mut Client,
        why: &Refusal,
    ) {
        match std::mem::replace(&mut c.up, Up::Idle) {
            Up::Remote { txn, .. } => {
                self.ep.abort(txn);
                self.txn_client.remove(&txn);
            }
            Up::Local { job } => self.sf.remove(now, io, job),
            Up::Idle | Up::Resolving => {}
        }
        let job = self.sf.canned(why);
        c.refuse(job);
    }

    /// Read a detached transaction (its client has the whole response) up
    /// to its end marker, so that it closes; forget it then, or when it
    /// failed. Bytes after the response's framing are dropped and counted.
    pub(crate) fn drain_detached(&mut self, now: Instant, stats: &mut Counters, txn: Txn) {
        let mut tmp = [0u8; 512];
        loop {
            match self.ep.recv(now, txn, &mut tmp) {
                Ok(Some(0)) | Err(_) => {
                    self.detached.remove(&txn);
                    return;
                }
                Ok(Some(n)) => stats.add("nsff.bytes_after_response", n as u64),
                Ok(None) => return,
            }
        }
    }

    /// A client connection is gone: its transaction is aborted, its job
    /// ended, its connection reset and its pool slot given back.
    pub(crate) fn drop_client(
        &mut self,
        now: Instant,
        io: &mut impl Conns,
        stats: &mut Counters,
        c: Client,
    ) {
        match c.up {
            Up::Remote { txn, .. } => {
                self.ep.abort(txn);
                self.txn_client.remove(&txn);
            }
            Up::Local { job } => self.sf.remove(now, io, job),
            Up::Idle | Up::Resolving => {}
        }
        io.discard(c.conn, Some(c.pool));
        stats.bump("nsff.clients_closed");
    }
}

/// Feed response bytes to `dec` to see its final head: whether the client
/// connection must close after the response (it says `Connection: close`,
/// its body ends by close, or it is broken), and whether the final response
/// is complete by its own framing. `final_head` carries between calls that
/// the final (not 1xx) head has been seen.
pub(crate) fn watch_response(
    dec: &mut ResponseDecoder,
    final_head: &mut bool,
    mut bytes: &[u8],
) -> Watched {
    let mut w = Watched::default();
    let mut seen = 0;
    loop {
        let Ok((n, ev)) = dec.decode(bytes) else {
            w.close = true;
            return w;
        };
        match &ev {
            Decoded::Head(h) => {
                let interim = (100..200).contains(&h.status) && h.status != 101;
                if !interim && (!h.keep_alive() || dec.framing() == Some(Framing::UntilClose)) {
                    w.close = true;
                }
                // 101 hands the connection over: never "complete".
                *final_head = !interim && h.status != 101;
            }
            Decoded::End if *final_head => {
                *final_head = false;
                w.complete = true;
                w.end.get_or_insert(seen + n);
            }
            _ => {}
        }
        seen += n;
        bytes = &bytes[n..];
        // `End` may come after the last body byte, consuming nothing: ask
        // once more; `NeedMore` says everything was seen.
        let ended = matches!(ev, Decoded::End);
        if matches!(ev, Decoded::NeedMore) || n == 0 && !ended {
            return w;
        }
    }
}

/// What [`watch_response`] saw in a remote response's bytes.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Watched {
    /// The client connection must close after this response.
    pub(crate) close: bool,
    /// The final response ended, by its own framing.
    pub(crate) complete: bool,
    /// Where in the bytes it ended: what follows is not the client's.
    pub(crate) end: Option<usize>,
}

/// Replace the absolute-form `target` in the request line at the start of
/// `head` by its origin form (the path, `/` if none).
pub(crate) fn origin_form(head: &mut Vec<u8>, target: &str) {
    let line_end = head
        .windows(2)
        .position(|w| w == b"\r\n")
        .unwrap_or(head.len());
    let Some(at) = head[..line_end]
        .windows(target.len())
        .position(|w| w == target.as_bytes())
    else {
        return;
    };
    let rest = target.strip_prefix("http://").unwrap_or(target);
    let path = rest.find('/').map_or("/", |i| &rest[i..]);
    head.splice(at..at + target.len(), path.bytes());
}

/// The authority of an absolute-form `target` (`http://authority/...`).
pub(crate) fn authority(target: &str) -> Option<String> {
    let rest = target.strip_prefix("http://")?;
    let a = rest.split(['/', '?']).next().unwrap_or(rest);
    (!a.is_empty()).then(|| a.to_owned())
}

/// The path of a request's target (absolute-form: after the authority).
pub(crate) fn request_path(h: &RequestHead) -> &str {
    match h.target.strip_prefix("http://") {
        Some(rest) => rest.find('/').map_or("/", |i| &rest[i..]),
        None => &h.target,
    }
}

/// The service a request names: the authority of an absolute-form target
/// (explicit proxy), else the `Host` header; without port, lowercased.
pub(crate) fn request_name(h: &RequestHead) -> Option<Fqdn> {
    let target = h
        .target
        .strip_prefix("http://")
        .map(|rest| rest.split('/').next().unwrap_or(rest));
    let host = match target {
        Some(t) => t,
        None => std::str::from_utf8(h.headers.get("host")?).ok()?,
    };
    let name = strip_port(host.trim()).to_ascii_lowercase();
    Fqdn::new(&name).ok()
}

fn strip_port(h: &str) -> &str {
    if h.starts_with('[') {
        return h;
    }
    match h.rsplit_once(':') {
        Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
        _ => h,
    }
}
