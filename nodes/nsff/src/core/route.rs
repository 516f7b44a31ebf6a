//! Where a client's request goes, decided once its head is complete:
//! classify it (SPI, SI), look the nNLM up ([`crate::sfc`]), then a local
//! SF, a transaction to the serving nSFF (once the name resolves), or the
//! nSFF's own refusal.

use smoltcp::time::Instant;
use svcroute_stack::http::RequestHead;
use svcroute_stack::stats::Counters;

use super::client::{request_name, request_path, Client, Up};
use super::io::{ClientId, Conns};
use super::local::std_ip;
use super::refusal::Refusal;
use super::Proxy;
use crate::cache::{Lookup, Route};
use crate::sfc::{self, Classified, Decision, NshHeader};

impl Proxy {
    /// Route a client request whose head just arrived (its bytes are at
    /// the start of `c.msg`): classify it (SPI, SI), look the nNLM up, and
    /// send it on to the name that gives (see [`sfc`]).
    pub(crate) fn route(
        &mut self,
        now: Instant,
        io: &mut impl Conns,
        stats: &mut Counters,
        id: ClientId,
        c: &mut Client,
        head: &RequestHead,
    ) {
        let name = request_name(head);
        let class = match head.headers.get(sfc::NSH_HEADER) {
            Some(v) => match NshHeader::parse(v) {
                Ok(n) => {
                    stats.bump("nsff.classified_header");
                    Classified::Header(n)
                }
                Err(e) => {
                    stats.bump("nsff.sfc_bad_nsh_header");
                    self.refuse_client(now, io, c, &Refusal::BadNshHeader(e));
                    return;
                }
            },
            None => {
                let src = io.remote(c.conn).map(|e| std_ip(e.addr));
                match self
                    .classifier
                    .classify(src, name.as_ref(), request_path(head))
                {
                    Some(n) => {
                        stats.bump("nsff.classified_rule");
                        Classified::Rule(n)
                    }
                    None => Classified::None,
                }
            }
        };
        let decision = sfc::decide(&self.nnlm, class, name.as_ref(), self.sfc_required);
        let (fqdn, nsh) = match decision {
            Decision::Unclassified | Decision::End(_) => {
                if matches!(decision, Decision::End(_)) {
                    stats.bump("nsff.sfc_end");
                } else if class == Classified::None {
                    stats.bump("nsff.unclassified");
                }
                let Some(fqdn) = name else {
                    stats.bump("nsff.bad_host");
                    self.refuse_client(now, io, c, &Refusal::NoHost);
                    return;
                };
                (fqdn, None)
            }
            Decision::ToName {
                fqdn,
                nsh,
                implicit,
            } => {
                stats.bump(if implicit {
                    "nsff.sfc_http_service"
                } else {
                    "nsff.sfc_to_name"
                });
                (fqdn, Some(nsh))
            }
            Decision::NoName(_) => {
                stats.bump("nsff.bad_host");
                self.refuse_client(now, io, c, &Refusal::NoHostForRow);
                return;
            }
            Decision::Misdirected(m) => {
                stats.bump("nsff.misdirected_421");
                stats.bump(m.counter());
                self.refuse_client(now, io, c, &Refusal::Misdirected(m));
                return;
            }
        };
        stats.bump("nsff.requests");
        let local = self.local.http(&fqdn);
        // The NSH header goes to the SF that gets the request (here, or at
        // the egress, told by the next-hop header); a request routed by its
        // own name carries neither. Whatever the sender put there is gone.
        let mut add = Vec::new();
        if let Some(n) = nsh {
            add.push(("NSH", n.to_string()));
            if local.is_none() {
                add.push(("NSH-Next-Hop", fqdn.as_str().to_owned()));
                stats.bump("nsff.sfc_remote");
            } else {
                stats.bump("nsff.sfc_nsh_added");
            }
        }
        let _ = sfc::edit_head(&mut c.msg, &[sfc::NSH_HEADER, sfc::NEXT_HOP_HEADER], &add);
        if let Some(target) = local {
            stats.bump("nsff.requests_local");
            let job = self.sf.connect(now, io, stats, target, head);
            c.up = Up::Local { job };
            return;
        }
        match self.cache.resolve(now, &fqdn, id.0) {
            Lookup::Hit(route) => self.open(now, io, stats, id, c, route),
            Lookup::Pending => {
                stats.bump("nsff.requests_waiting");
                c.up = Up::Resolving;
            }
            Lookup::Refused => {
                stats.bump("nsff.resolve_refused");
                self.refuse_client(now, io, c, &Refusal::ResolveRefused);
            }
        }
    }

    /// The request's name resolved: one transaction to the serving nSFF.
    pub(crate) fn open(
        &mut self,
        now: Instant,
        io: &mut impl Conns,
        stats: &mut Counters,
        id: ClientId,
        c: &mut Client,
        route: Route,
    ) {
        if route.serving == self.fabric.me {
            // The NR says we serve it, but no local SF has that name.
            stats.bump("nsff.served_here_unknown");
            self.refuse_client(now, io, c, &Refusal::ServedHereUnknown);
            return;
        }
        match self.ep.open(now, route.forward, route.reverse) {
            Ok(txn) => {
                stats.bump("nsff.txns_opened");
                self.txn_client.insert(txn, id);
                c.up = Up::Remote {
                    txn,
                    finished: false,
                    final_head: false,
                };
            }
            Err(_) => {
                stats.bump("nsff.txns_refused");
                self.refuse_client(now, io, c, &Refusal::TxnsRefused);
            }
        }
    }
}
