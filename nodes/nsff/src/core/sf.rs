//! The SF connections room: exchanges with local SFs ([`SfJob`]s, by
//! [`JobId`]), the idle keep-alive connections kept for reuse, and the
//! ephemeral ports new connections are opened from. Both the client side
//! (a request for a local SF) and the egress (a request over a
//! transaction) run their exchanges here.

use std::collections::BTreeMap;

use smoltcp::time::{Duration, Instant};
use smoltcp::wire::IpAddress;
use svcroute_stack::http::{Decoded, Framing, RequestHead, ResponseDecoder};
use svcroute_stack::stats::Counters;

use super::io::{ConnId, ConnectError, Conns, Dial, JobId, TcpState};
use super::local::Evidence;
use super::refusal::Refusal;
use super::{streaming, BUF_HIGH, CHUNK};

/// Idle SF connections kept for reuse, over all SFs.
const MAX_IDLE_SF: usize = 256;

/// Where an exchange is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stage {
    /// A new connection, opened at `since`, not yet seen established (a
    /// reused one proves nothing about connecting and starts `Open`).
    Connecting { since: Instant },
    /// Connected; no response head yet.
    Open,
    /// A response head was seen.
    Answered,
    /// The response ended (by its framing, by an error or by a close), or
    /// it is a canned answer.
    Done,
}

/// A local SF exchange: request bytes in, response bytes out.
#[derive(Debug)]
pub(crate) struct SfJob {
    /// The connection to the SF; `None` for a canned (error) response.
    pub(crate) sock: Option<ConnId>,
    pub(crate) stage: Stage,
    pub(crate) req: Vec<u8>,
    /// The whole request is in `req` (or went out).
    pub(crate) req_done: bool,
    rbuf: Vec<u8>,
    dec: ResponseDecoder,
    pub(crate) resp: Vec<u8>,
    /// The response head being decoded is a 1xx.
    interim: bool,
    /// The SF it talks to.
    pub(crate) target: Option<(IpAddress, u16)>,
    /// The request lets the connection stay open.
    req_keep_alive: bool,
    /// The response ended cleanly and keeps the connection open: the socket
    /// can carry the next request.
    reusable: bool,
    /// The response ends by close or says `Connection: close`: the client
    /// connection must close after it.
    pub(crate) close_client: bool,
    /// Health evidence not yet handed to the local SFs.
    pub(crate) evidence: Option<Evidence>,
}

impl SfJob {
    pub(crate) fn canned(why: &Refusal) -> Self {
        Self {
            sock: None,
            stage: Stage::Done,
            req: Vec::new(),
            req_done: true,
            rbuf: Vec::new(),
            dec: ResponseDecoder::new(streaming()),
            resp: why.response(),
            interim: false,
            target: None,
            req_keep_alive: false,
            reusable: false,
            close_client: false,
            evidence: None,
        }
    }

    /// The response ended (nothing more will be added to `resp`).
    pub(crate) fn resp_done(&self) -> bool {
        self.stage == Stage::Done
    }

    /// Move bytes between the buffers and the SF connection.
    pub(crate) fn pump(&mut self, io: &mut impl Conns, stats: &mut Counters) -> bool {
        let Some(s) = self.sock else {
            return false;
        };
        if self.resp_done() {
            return false;
        }
        let mut any = false;
        match (io.state(s), self.stage) {
            (TcpState::SynSent, _) => {}
            (TcpState::Closed, Stage::Connecting { since }) => {
                // Reset or timed out while connecting: refused.
                self.evidence = Some(Evidence::Refused { started: since });
                self.stage = Stage::Open;
            }
            (_, Stage::Connecting { .. }) => self.stage = Stage::Open,
            _ => {}
        }
        if !self.req.is_empty() && io.can_send(s) {
            if let Some(n) = io.send(s, &self.req) {
                self.req.drain(..n);
                any |= n > 0;
            }
        }
        while self.resp.len() < BUF_HIGH && io.can_recv(s) {
            match io.recv(s, CHUNK, &mut self.rbuf) {
                Some(0) | None => break,
                Some(_) => any = true,
            }
        }
        let mut budget = 1024;
        while (!self.rbuf.is_empty() || self.dec.framing().is_some()) && !self.resp_done() {
            budget -= 1;
            if budget == 0 {
                break;
            }
            match self.dec.decode(&self.rbuf) {
                Ok((n, ev)) => {
                    if let Decoded::Head(h) = &ev {
                        if self.stage != Stage::Answered {
                            self.stage = Stage::Answered;
                            self.evidence = Some(Evidence::Answered);
                        }
                        // 1xx (but 101) is interim: its End is not the response's.
                        self.interim = (100..200).contains(&h.status) && h.status != 101;
                        if !self.interim {
                            self.close_client =
                                !h.keep_alive() || self.dec.framing() == Some(Framing::UntilClose);
                            self.reusable = h.keep_alive()
                                && self.req_keep_alive
                                && self.dec.framing() != Some(Framing::UntilClose)
                                && h.status != 101;
                        }
                    }
                    let end = matches!(ev, Decoded::End) && !std::mem::take(&mut self.interim);
                    let more = matches!(ev, Decoded::NeedMore);
                    self.resp.extend(self.rbuf.drain(..n));
                    if end {
                        self.stage = Stage::Done;
                        // Reusable only if nothing else came and the whole
                        // request went out.
                        self.reusable &= self.rbuf.is_empty()
                            && self.req.is_empty()
                            && self.req_done
                            && io.state(s) == TcpState::Established;
                        if !self.reusable {
                            io.close(s);
                        }
                        return true;
                    }
                    if more {
                        break;
                    }
                }
                Err(e) => {
                    self.reusable = false;
                    stats.bump("nsff.sf_bad_response");
                    if self.resp.is_empty() {
                        self.resp = Refusal::SfBadResponse(e).response();
                    }
                    self.stage = Stage::Done;
                }
            }
        }
        if !self.resp_done() && !io.may_recv(s) && self.rbuf.is_empty() {
            let state = io.state(s);
            let ended = if state == TcpState::Closed || state == TcpState::SynSent {
                false
            } else {
                self.dec.finish().unwrap_or(false)
            };
            if !ended
                && matches!(
                    state,
                    TcpState::Closed
                        | TcpState::CloseWait
                        | TcpState::LastAck
                        | TcpState::TimeWait
                        | TcpState::Closing
                )
            {
                stats.bump("nsff.sf_closed_early");
                if self.resp.is_empty() {
                    self.resp = Refusal::SfClosed.response();
                }
            }
            if ended || state != TcpState::SynSent && state != TcpState::Established {
                self.stage = Stage::Done;
                any = true;
            }
        }
        if self.resp_done() {
            self.reusable = false;
            io.close(s);
        }
        any
    }
}

/// The exchanges with local SFs and the connections they run on.
#[derive(Debug)]
pub(crate) struct SfConns {
    pub(crate) jobs: BTreeMap<JobId, SfJob>,
    next_job: u64,
    /// Open SF connections between requests: (SF, connection, idle since).
    idle: Vec<((IpAddress, u16), ConnId, Instant)>,
    /// The local port the next connection from `sf_port` is opened from.
    pub(crate) next_local_port: u16,
    /// An idle connection is closed after this long (`sf_idle_timeout_s`).
    idle_for: Duration,
    /// TCP keep-alives while idle (`sf_keepalive_s`).
    keepalive: Option<Duration>,
}

impl SfConns {
    pub(crate) fn new(idle_for: Duration, keepalive: Option<Duration>) -> Self {
        Self {
            jobs: BTreeMap::new(),
            next_job: 1,
            idle: Vec::new(),
            next_local_port: 49152,
            idle_for,
            keepalive,
        }
    }

    pub(crate) fn add(&mut self, job: SfJob) -> JobId {
        let id = JobId(self.next_job);
        self.next_job += 1;
        self.jobs.insert(id, job);
        id
    }

    /// A canned answer as a job.
    pub(crate) fn canned(&mut self, why: &Refusal) -> JobId {
        self.add(SfJob::canned(why))
    }

    /// A job toward the local SF at (addr, port), or a canned 502.
    pub(crate) fn connect(
        &mut self,
        now: Instant,
        io: &mut impl Conns,
        stats: &mut Counters,
        (addr, port): (IpAddress, u16),
        req: &RequestHead,
    ) -> JobId {
        let mut dec = ResponseDecoder::new(streaming());
        dec.set_head_request(req.is_head());
        let mut job = SfJob {
            sock: None,
            stage: Stage::Open,
            req: Vec::new(),
            req_done: false,
            rbuf: Vec::new(),
            dec,
            resp: Vec::new(),
            interim: false,
            target: Some((addr, port)),
            req_keep_alive: req.keep_alive(),
            reusable: false,
            close_client: false,
            evidence: None,
        };
        // An idle connection to the same SF, if one is still open.
        while let Some(i) = self.idle.iter().position(|e| e.0 == (addr, port)) {
            let (_, c, _) = self.idle.swap_remove(i);
            if io.state(c) == TcpState::Established && io.may_send(c) && !io.can_recv(c) {
                if self.keepalive.is_some() {
                    io.keep_alive(c, None);
                }
                stats.bump("nsff.sf_reused");
                job.sock = Some(c);
                return self.add(job);
            }
            io.release(now, c);
        }
        let c = match self.dial(io, (addr, port)) {
            Ok(c) => c,
            Err(ConnectError::NoPort) => {
                stats.bump("nsff.sf_failed");
                return self.canned(&Refusal::NoSfPort);
            }
            Err(ConnectError::Connect) => {
                stats.bump("nsff.sf_connect_error");
                return self.canned(&Refusal::SfConnect);
            }
        };
        stats.bump("nsff.sf_connections");
        job.sock = Some(c);
        job.stage = Stage::Connecting { since: now };
        self.add(job)
    }

    /// A new connection from `sf_port` to (addr, port).
    pub(crate) fn dial(
        &mut self,
        io: &mut impl Conns,
        to: (IpAddress, u16),
    ) -> Result<ConnId, ConnectError> {
        let local = self.next_local_port;
        self.next_local_port = if local == u16::MAX { 49152 } else { local + 1 };
        io.connect(to, local, Dial::Exchange)
    }

    /// End job `id`: its connection goes idle for reuse if the exchange
    /// left it clean, else it closes.
    pub(crate) fn remove(&mut self, now: Instant, io: &mut impl Conns, id: JobId) {
        let Some(j) = self.jobs.remove(&id) else {
            return;
        };
        let Some(c) = j.sock else {
            return;
        };
        let state = io.state(c);
        if let (true, Some(t)) = (j.reusable && j.resp.is_empty(), j.target) {
            if state == TcpState::Established && self.idle.len() < MAX_IDLE_SF {
                if self.keepalive.is_some() {
                    io.keep_alive(c, self.keepalive);
                }
                self.idle.push((t, c, now));
                return;
            }
        }
        if state == TcpState::Closed || state == TcpState::TimeWait {
            io.remove(c);
        } else {
            // Let the FIN go out; swept by the driver.
            io.release(now, c);
        }
    }

    /// Close the idle connections to `target` (it refused a new one, or it
    /// is gone); `count`: count each as `nsff.sf_idle_dropped`.
    pub(crate) fn drop_idle(
        &mut self,
        now: Instant,
        io: &mut impl Conns,
        stats: &mut Counters,
        target: (IpAddress, u16),
        count: bool,
    ) {
        self.idle.retain(|&(t, c, _)| {
            if t != target {
                return true;
            }
            io.release(now, c);
            if count {
                stats.bump("nsff.sf_idle_dropped");
            }
            false
        });
    }

    /// Close idle connections that the SF closed (`nsff.sf_idle_closed`),
    /// that were lost, reset or unanswered keep-alives
    /// (`nsff.sf_idle_lost`), that have bytes nobody asked for, or that
    /// idled `idle_for` (`nsff.sf_idle_expired`).
    pub(crate) fn sweep(&mut self, now: Instant, io: &mut impl Conns, stats: &mut Counters) {
        let idle_for = self.idle_for;
        self.idle.retain(|&(_, c, since)| {
            let state = io.state(c);
            let why = match state {
                TcpState::Established if io.can_recv(c) => "nsff.sf_idle_unasked",
                TcpState::Established if now - since >= idle_for => "nsff.sf_idle_expired",
                TcpState::Established => return true,
                TcpState::Closed => "nsff.sf_idle_lost",
                _ => "nsff.sf_idle_closed",
            };
            stats.bump(why);
            io.release(now, c);
            false
        });
    }
}
