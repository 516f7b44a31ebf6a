//! TLS passthrough (SPEC §1.3: one TCP session = one transaction in each
//! direction; §1.4: the ClientHello's SNI names the service). A client
//! connection on `https_port` is a [`TlsSession`]: its ClientHello is read
//! ([`tls::peek`]) until the SNI names the service, the name is routed like
//! a `Host` (a local SF's `tls_port`, or one transaction for the whole TCP
//! session), and the bytes, the hello first, are relayed unmodified both
//! ways by a [`Pipe`]. The egress side (a transaction whose first octet is
//! a handshake record) reads the same hello and relays to its SF's
//! `tls_port`. Refusals are one fatal TLS alert and a close
//! ([`TlsRefusal`]).

use serde_json::{json, Value};
use smoltcp::time::Instant;
use svcroute_stack::stats::Counters;
use svcroute_stack::wire::nr::Fqdn;

use super::egress::Egress;
use super::io::{ClientId, ConnId, Conns, PoolId, TcpState};
use super::refusal::TlsRefusal;
use super::relay::{End, Pipe, Side};
use super::{Proxy, BUF_HIGH};
use crate::cache::{Lookup, Route};
use crate::tls::{self, Alert, Peek};

/// A TLS passthrough session on `https_port`: the client connection (`a`
/// of the pipe) relayed, once its ClientHello named the service, to a
/// local SF's TLS port or over one transaction (`b`).
#[derive(Debug)]
pub(crate) struct TlsSession {
    /// The pool it came from.
    pool: PoolId,
    pipe: Pipe,
    pub(crate) stage: TlsStage,
    /// Last time anything moved.
    active: Instant,
}

impl TlsSession {
    pub(crate) fn new(now: Instant, conn: ConnId, pool: PoolId) -> Self {
        Self {
            pool,
            pipe: Pipe::new(End::Tcp(conn)),
            stage: TlsStage::Hello,
            active: now,
        }
    }
}

/// Where a TLS session is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum TlsStage {
    /// Reading the ClientHello.
    Hello,
    /// The SNI name is being resolved at the NR.
    Resolving(Fqdn),
    /// Relaying to a local SF (`Local`) or over a transaction.
    Relay { name: Fqdn, local: bool },
    /// Refused or cut: an alert (if any) goes out, the client's bytes are
    /// dropped, the connection closes.
    Closing,
    /// Both directions ended cleanly (counted once).
    Done,
}

impl Proxy {
    /// Work on one TLS session; `(progress, alive)`.
    pub(crate) fn pump_tls(
        &mut self,
        now: Instant,
        io: &mut impl Conns,
        stats: &mut Counters,
        id: ClientId,
        t: &mut TlsSession,
    ) -> (bool, bool) {
        let mut any = false;
        for _ in 0..64 {
            let limit = if t.stage == TlsStage::Hello {
                tls::MAX_BUFFER
            } else {
                BUF_HIGH
            };
            let (up, down) = (t.pipe.ab_bytes, t.pipe.ba_bytes);
            let moved = t.pipe.pump(now, io, &mut self.ep, limit);
            self.local.evidence.extend(t.pipe.evidence.take());
            if matches!(t.stage, TlsStage::Relay { .. } | TlsStage::Done) {
                stats.add("nsff.tls_bytes_up", t.pipe.ab_bytes - up);
                stats.add("nsff.tls_bytes_down", t.pipe.ba_bytes - down);
            }
            let mut progress = match moved {
                Ok(p) => p,
                Err(Side::A) => {
                    // The client reset the connection (or it never came up).
                    if !matches!(t.stage, TlsStage::Closing | TlsStage::Done) {
                        stats.bump("nsff.tls_client_reset");
                    }
                    if let Some(b) = t.pipe.b.take() {
                        self.release_end(now, io, b, true);
                    }
                    return (true, false);
                }
                Err(Side::B) => {
                    // The SF reset or was unreachable, or the transaction
                    // failed.
                    stats.bump("nsff.tls_upstream_lost");
                    self.refuse_tls(now, io, t, TlsRefusal::UpstreamLost);
                    true
                }
            };
            if t.stage == TlsStage::Hello {
                match tls::peek(&t.pipe.ab) {
                    Peek::NeedMore => {
                        if t.pipe.a_eof {
                            stats.bump("nsff.tls_truncated");
                            self.refuse_tls(now, io, t, TlsRefusal::Truncated);
                            progress = true;
                        }
                    }
                    Peek::Refused(r) => {
                        stats.bump(&format!("nsff.tls_{}", r.as_str()));
                        self.refuse_tls(now, io, t, TlsRefusal::Hello(r));
                        progress = true;
                    }
                    Peek::Name { name, .. } => {
                        stats.bump("nsff.tls_sessions");
                        self.route_tls(now, io, stats, id, t, name);
                        progress = true;
                    }
                }
            }
            if matches!(t.stage, TlsStage::Relay { .. }) && t.pipe.done() {
                stats.bump("nsff.tls_completed");
                t.stage = TlsStage::Done;
            }
            any |= progress;
            if progress {
                t.active = now;
            } else {
                break;
            }
        }
        let End::Tcp(c) = t.pipe.a else {
            return (any, false);
        };
        // Nothing either way for `client_idle_timeout_s`: closed.
        if now - t.active >= self.client_idle {
            stats.bump("nsff.tls_idle_closed");
            io.abort(c);
        }
        let gone = matches!(io.state(c), TcpState::Closed | TcpState::TimeWait);
        (any, !gone)
    }

    /// The ClientHello named `name`: a local SF's TLS port, or the name
    /// is resolved like an HTTP request's and one transaction opened.
    fn route_tls(
        &mut self,
        now: Instant,
        io: &mut impl Conns,
        stats: &mut Counters,
        id: ClientId,
        t: &mut TlsSession,
        name: Fqdn,
    ) {
        if let Some(target) = self.local.tls(&name) {
            match self.sf.dial(io, target) {
                Ok(c) => {
                    stats.bump("nsff.tls_sessions_local");
                    t.pipe.b = Some(End::Tcp(c));
                    t.pipe.watch(target, now);
                    t.stage = TlsStage::Relay { name, local: true };
                }
                Err(_) => {
                    stats.bump("nsff.tls_sf_failed");
                    self.refuse_tls(now, io, t, TlsRefusal::SfConnect);
                }
            }
            return;
        }
        match self.cache.resolve(now, &name, id.0) {
            Lookup::Hit(route) => {
                t.stage = TlsStage::Resolving(name);
                self.open_tls(now, io, stats, t, route);
            }
            Lookup::Pending => {
                stats.bump("nsff.tls_waiting");
                t.stage = TlsStage::Resolving(name);
            }
            Lookup::Refused => {
                stats.bump("nsff.tls_resolve_refused");
                self.refuse_tls(now, io, t, TlsRefusal::ResolveRefused);
            }
        }
    }

    /// The name of a resolving session resolved: one transaction carries
    /// the whole session.
    pub(crate) fn open_tls(
        &mut self,
        now: Instant,
        io: &mut impl Conns,
        stats: &mut Counters,
        t: &mut TlsSession,
        route: Route,
    ) {
        let TlsStage::Resolving(name) = &t.stage else {
            return;
        };
        let name = name.clone();
        if route.serving == self.fabric.me {
            stats.bump("nsff.tls_served_here_unknown");
            self.refuse_tls(now, io, t, TlsRefusal::ServedHereUnknown);
            return;
        }
        match self.ep.open(now, route.forward, route.reverse) {
            Ok(txn) => {
                stats.bump("nsff.tls_sessions_remote");
                t.pipe.b = Some(End::Txn(txn));
                t.stage = TlsStage::Relay { name, local: false };
            }
            Err(_) => {
                stats.bump("nsff.tls_txns_refused");
                self.refuse_tls(now, io, t, TlsRefusal::TxnsRefused);
            }
        }
    }

    /// End a session without (or without more of) its upstream: its alert
    /// to the client if no upstream byte reached it yet and then a FIN;
    /// otherwise the TLS stream cannot end cleanly and the client gets a
    /// reset.
    pub(crate) fn refuse_tls(
        &mut self,
        now: Instant,
        io: &mut impl Conns,
        t: &mut TlsSession,
        why: TlsRefusal,
    ) {
        let record = why.alert().map(Alert::record);
        let (b, clean) = t.pipe.cut(record.as_ref().map(|r| &r[..]));
        if let Some(b) = b {
            self.release_end(now, io, b, true);
        }
        t.stage = TlsStage::Closing;
        if !clean {
            if let End::Tcp(c) = t.pipe.a {
                io.abort(c);
            }
        }
    }

    /// A session is gone: its upstream let go, its connection reset and
    /// its pool slot given back.
    pub(crate) fn drop_tls(
        &mut self,
        now: Instant,
        io: &mut impl Conns,
        stats: &mut Counters,
        mut t: TlsSession,
    ) {
        if let Some(b) = t.pipe.b.take() {
            let done = t.pipe.done();
            self.release_end(now, io, b, !done);
        }
        if let End::Tcp(c) = t.pipe.a {
            io.discard(c, Some(t.pool));
        }
        stats.bump("nsff.tls_closed");
    }

    /// Let go of a relay end: a transaction is forgotten if `abort` (else it
    /// lingers in the endpoint); a connection is reset and removed if
    /// `abort`, else closed and swept once its FIN went out.
    pub(crate) fn release_end(&mut self, now: Instant, io: &mut impl Conns, end: End, abort: bool) {
        match end {
            End::Tcp(c) => {
                if abort || matches!(io.state(c), TcpState::Closed | TcpState::TimeWait) {
                    io.abort(c);
                    io.remove(c);
                } else {
                    io.release(now, c);
                }
            }
            End::Txn(txn) => {
                if abort {
                    self.ep.abort(txn);
                }
            }
        }
    }

    /// An egress transaction that carries a TLS session: read its
    /// ClientHello, connect to the SF that serves the SNI name on its TLS
    /// port, then relay.
    pub(crate) fn pump_egress_tls(
        &mut self,
        now: Instant,
        io: &mut impl Conns,
        stats: &mut Counters,
        e: &mut Egress,
    ) -> bool {
        let Some(mut p) = e.tls.take() else {
            return false;
        };
        let mut any = false;
        for _ in 0..64 {
            let hello = p.b.is_none() && !p.cut;
            let limit = if hello { tls::MAX_BUFFER } else { BUF_HIGH };
            let moved = p.pump(now, io, &mut self.ep, limit);
            self.local.evidence.extend(p.evidence.take());
            let mut progress = match moved {
                Ok(x) => x,
                Err(Side::A) => {
                    // The transaction is gone (its Failed event cleans up).
                    if let Some(b) = p.b.take() {
                        stats.bump("nsff.egress_tls_lost");
                        self.release_end(now, io, b, true);
                    }
                    p.cut = true;
                    p.a_eof = true;
                    p.a_fin = true;
                    break;
                }
                Err(Side::B) => {
                    stats.bump("nsff.egress_tls_sf_lost");
                    let record = TlsRefusal::UpstreamLost.alert().map(Alert::record);
                    if let (Some(b), _) = p.cut(record.as_ref().map(|r| &r[..])) {
                        self.release_end(now, io, b, true);
                    }
                    true
                }
            };
            if hello {
                let refused = match tls::peek(&p.ab) {
                    Peek::NeedMore if p.a_eof => {
                        Some(("nsff.egress_tls_truncated".into(), TlsRefusal::Truncated))
                    }
                    Peek::NeedMore => None,
                    Peek::Refused(r) => Some((
                        format!("nsff.egress_tls_{}", r.as_str()),
                        TlsRefusal::Hello(r),
                    )),
                    Peek::Name { name, .. } => match self.local.tls(&name) {
                        Some(target) => match self.sf.dial(io, target) {
                            Ok(c) => {
                                stats.bump("nsff.egress_tls_sessions");
                                p.b = Some(End::Tcp(c));
                                p.watch(target, now);
                                progress = true;
                                None
                            }
                            Err(_) => {
                                Some(("nsff.egress_tls_sf_failed".into(), TlsRefusal::SfConnect))
                            }
                        },
                        None => Some(("nsff.egress_tls_no_sf".into(), TlsRefusal::UnknownName)),
                    },
                };
                if let Some((counter, why)) = refused {
                    stats.bump(&counter);
                    let record = why.alert().map(Alert::record);
                    let _ = p.cut(record.as_ref().map(|r| &r[..]));
                    progress = true;
                }
            }
            any |= progress;
            if !progress {
                break;
            }
        }
        if p.b.is_some() || p.cut {
            // The hello is read: connected, or refused.
            if let End::Txn(txn) = p.a {
                self.ep.head_complete(txn);
            }
        }
        e.tls = Some(p);
        any
    }

    /// `ctl <node> tls`.
    pub(crate) fn tls_control(&self, https_port: u16) -> Value {
        let stage = |s: &TlsStage| match s {
            TlsStage::Hello => ("hello", None),
            TlsStage::Resolving(n) => ("resolving", Some(n.as_str().to_owned())),
            TlsStage::Relay { name, local: true } => ("local", Some(name.as_str().to_owned())),
            TlsStage::Relay { name, .. } => ("remote", Some(name.as_str().to_owned())),
            TlsStage::Closing => ("closing", None),
            TlsStage::Done => ("done", None),
        };
        let sessions: Vec<Value> = self
            .tls
            .iter()
            .map(|(id, t)| {
                let (st, name) = stage(&t.stage);
                let txn = match t.pipe.b {
                    Some(End::Txn(txn)) => Some(txn.value()),
                    _ => None,
                };
                json!({
                    "id": id.0, "stage": st, "name": name, "txn": txn,
                    "bytes_up": t.pipe.ab_bytes, "bytes_down": t.pipe.ba_bytes,
                })
            })
            .collect();
        let egress: Vec<Value> = self
            .egress
            .iter()
            .filter_map(|(txn, e)| {
                let p = e.tls.as_ref()?;
                Some(json!({
                    "txn": txn.value(), "connected": p.b.is_some(), "cut": p.cut,
                    "bytes_to_sf": p.ab_bytes, "bytes_from_sf": p.ba_bytes,
                }))
            })
            .collect();
        json!({
            "https_port": https_port,
            "sessions": sessions,
            "egress": egress,
        })
    }
}
