//! Role `sag`: the glue between the SAR data path and the [`Gateway`]
//! (`crate::sag`), sans-IO.
//!
//! ```text
//!   request whose pick is `*` = us ─► hand_to_gateway ─► Gateway::handle_request
//!         (DNS answers, timers: the driver) ─► Done ─► finish ─► routed, or
//!                                                      Address Unreachable to the client
//!   request from another domain's SAG ─► take_handover: we become its ingress
//!   response to such a request ─► give_back: to that SAG, with the client's Ingress
//! ```

use std::net::IpAddr;

use smoltcp::time::{Duration, Instant};
use svcroute_stack::shim::edit::{self, AddrField, Fragment};
use svcroute_stack::stats::Counters;
use svcroute_stack::wire::rosa::{
    Constraint, Constraints, Entry, EntryType, Message, MessageKind, ServiceName,
};

use crate::datapath::DataPath;
use crate::decide::{Action, Fill};
use crate::forward::Verdict;
use crate::icmp::ErrorKind;
use crate::sag::{self, encap, Done, Gateway, Taken};
use crate::{Sar, Settings};

impl DataPath<'_> {
    /// A request another domain's SAG handed over (a SAG entry not ours)
    /// makes us its ingress. Its Ingress entry is remembered and removed,
    /// so the core fills in ours and schedules as for a client of ours.
    /// `Ok(true)`: taken so; `Ok(false)`: not such a request (or not a SAG).
    pub(crate) fn take_handover(
        &mut self,
        frame: &[u8],
        msg: &mut Message,
    ) -> Result<bool, &'static str> {
        let Some(gw) = self.gw.as_deref_mut() else {
            return Ok(false);
        };
        let me = IpAddr::V6(self.s.core.igp.address);
        let r = handover_in(gw, self.now, frame, msg, me, self.rx_encap);
        export_gw(gw, self.stats);
        r
    }

    /// A SAG's request whose FIB pick is `*`, that is us: the gateway
    /// takes it. `None`: not such a request.
    pub(crate) fn hand_to_gateway(
        &mut self,
        port: usize,
        frame: &mut Vec<u8>,
        msg: &Message,
        action: &Action,
        me: IpAddr,
    ) -> Option<Verdict> {
        let gw = self.gw.as_deref_mut()?;
        let (Action::ToInstance { instance, fill, .. } | Action::DeliverLocal { instance, fill }) =
            *action
        else {
            return None;
        };
        if instance != me || msg.kind != MessageKind::Request {
            return None;
        }
        let client = fill.client.or(msg.client());
        let ingress = fill.ingress.or(msg.ingress());
        let (Some(IpAddr::V6(client)), Some(IpAddr::V6(ingress)), Some(service)) =
            (client, ingress, msg.service())
        else {
            self.stats.drop("sag.not_ipv6");
            return Some(Verdict::Consume);
        };
        let taken = Taken {
            port,
            frame: std::mem::take(frame),
            client,
            ingress,
            service: service.clone(),
            msg: msg.clone(),
            stage: sag::Stage::default(),
        };
        let done = gw.handle_request(self.now, taken);
        export_gw(gw, self.stats);
        if let Some(d) = done {
            self.finish(d);
        }
        Some(Verdict::Consume)
    }

    /// The response to a request another domain's SAG handed us (its SAG
    /// entry is not ours): back to that SAG, with the client's own Ingress
    /// again. `None`: not such a response (or not a SAG).
    pub(crate) fn give_back(
        &mut self,
        port: usize,
        frame: &mut Vec<u8>,
        msg: &Message,
        me: IpAddr,
    ) -> Option<Verdict> {
        let gw = self.gw.as_deref_mut()?;
        let sag = msg.sag().filter(|s| *s != me)?;
        let key = flow_key(frame, msg, false);
        let back = key.and_then(|k| gw.handover_back(self.now, &k));
        export_gw(gw, self.stats);
        let Some(back) = back else {
            if key.is_none() {
                self.stats.drop("sag.handover_malformed");
            }
            return Some(Verdict::Consume);
        };
        let fill = Fill {
            client: None,
            ingress: Some(back.ingress),
        };
        Some(self.rewrite(port, frame, msg, fill, sag, me, back.encap))
    }

    /// A request the gateway is done with: routed toward its server, or
    /// refused with Destination Unreachable (address unreachable) to its
    /// client.
    pub(crate) fn finish(&mut self, d: Done) {
        let Done {
            mut taken,
            result,
            encap_to,
        } = d;
        match result {
            Ok(()) => {
                if let Some(to) = encap_to {
                    let me = self.s.core.igp.address;
                    let Some(f) = encap::encapsulate(&taken.frame, me, to) else {
                        self.stats.drop("sag.encap_too_big");
                        return;
                    };
                    self.stats.bump("sag.encap_tx");
                    taken.frame = f;
                }
                // Queued on the routed-frame queue; a refusal is counted.
                if let Verdict::Drop(reason) = self.route(taken.port, &mut taken.frame) {
                    self.stats.drop(reason);
                }
            }
            Err(_) => {
                let mut about = taken.frame;
                if edit::rewrite_addr(&mut about, AddrField::Src, IpAddr::V6(taken.client)).is_ok()
                {
                    let kind = ErrorKind::AddressUnreachable;
                    self.fwd
                        .icmp_error(self.now, self.stats, kind, taken.port, &about);
                }
            }
        }
    }
}

fn handover_in(
    gw: &mut Gateway,
    now: Instant,
    frame: &[u8],
    msg: &mut Message,
    me: IpAddr,
    encap: bool,
) -> Result<bool, &'static str> {
    let Some(sag) = msg.sag().filter(|s| *s != me) else {
        return Ok(false);
    };
    if msg.kind != MessageKind::Request || msg.ingress() == Some(me) {
        return Ok(false);
    }
    let (Some(key), Some(ingress)) = (flow_key(frame, msg, true), msg.ingress()) else {
        return Err("sag.handover_malformed");
    };
    gw.handover_in(now, key, ingress, sag, encap)
        .ok_or("sag.handovers_full")?;
    msg.remove(EntryType::Ingress);
    Ok(true)
}

/// The client's flow of a request (`request`: the client's port is the
/// source port) or of a response (the destination port).
fn flow_key(frame: &[u8], msg: &Message, request: bool) -> Option<sag::HandoverKey> {
    let port = msg.port()?;
    let l = edit::walk(frame).ok()?;
    if l.fragment == Fragment::Later || l.upper_protocol != port.proto {
        return None;
    }
    let at = l.upper_offset + if request { 0 } else { 2 };
    let b = frame.get(at..at + 2)?;
    Some(sag::HandoverKey {
        client: msg.client()?,
        proto: port.proto,
        client_port: u16::from_be_bytes([b[0], b[1]]),
        service_port: port.port,
    })
}

/// The gateway's counters since the last call, into the node's.
pub(crate) fn export_gw(gw: &mut Gateway, stats: &mut Counters) {
    for (k, v) in gw.drain_counters() {
        stats.add(k, v);
    }
}

/// Announce `*` at `core` with the configured SAG as its instance, as if
/// the SAG had announced it here (signed with our first announcement key).
/// Returns when to announce again; `None` if no SAG is configured.
pub(crate) fn announce_sag(s: &Settings, core: &mut Sar, now: Instant) -> Option<Instant> {
    let sag = s.sag?;
    let lifetime = s.core.default_lifetime_s.max(3);
    let mut msg = Message {
        kind: MessageKind::Announcement,
        entries: vec![
            Entry::Service(ServiceName::WILDCARD),
            Entry::Instance(IpAddr::V6(sag)),
            Entry::Constraint(Constraints(vec![Constraint::LifetimeS(lifetime)])),
        ],
    };
    if let Some((id, secret)) = s.announce_keys.iter().next() {
        if msg.sign(*id, secret, sag).is_err() {
            log::warn!("{}: cannot sign the SAG announcement", s.name);
        }
    }
    if let Err(e) = core.handle_announcement(now, IpAddr::V6(sag), &msg) {
        log::warn!("{}: SAG announcement refused: {e:?}", s.name);
    }
    Some(now + Duration::from_secs(u64::from(lifetime / 3).max(1)))
}
