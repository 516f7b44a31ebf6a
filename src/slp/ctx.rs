//! Where requests go: the `--da` agents or multicast DA discovery (RFC 2608
//! §12.2.1) and the RFC 3111 groups, and the context every command needs
//! (transport, language, scopes, XIDs, authentication).

use std::net::{IpAddr, Ipv6Addr, SocketAddr, SocketAddrV6};
use std::time::Duration;

use svcroute_stack::wire::slp::{
    Body, Extension, FunctionId, Header, LangTag, Message, Predicate, Scope, ScopeList,
    ServiceType, SlpString, SrvRqst, MCAST_V4, PORT,
};

use super::args::{iface_index, parse_scopes, Common};
use super::auth::{unix_now, Auth, Check};
use super::clock::random_xid;
use super::fail::{input, Fail};
use super::net::{Net, NetError, Reply, Timing};

/// The IPv6 SLP groups (RFC 3111 §4.1).
pub(super) const SVRLOC: u16 = 0x116;
pub(super) const SVRLOC_DA: u16 = 0x123;

/// The group-id of the Service Location range for a service type (RFC 3111 §4.1).
pub(super) fn slp_hash(service_type: &str) -> u16 {
    let h = service_type
        .bytes()
        .fold(0_u32, |h, b| h.wrapping_mul(33).wrapping_add(u32::from(b)));
    // Low 10 bits: 0-1023.
    (h & 0x3ff) as u16
}

/// Which multicast group a request goes to.
pub(super) enum GroupFor<'a> {
    /// SrvRqst for service:directory-agent: SVRLOC-DA.
    DaDiscovery,
    /// Other SrvRqsts: FF0X::1:1000 + hash(type).
    SrvRqst(&'a str),
    /// SrvTypeRqst, AttrRqst: SVRLOC.
    Svrloc,
}

pub(super) enum Dest {
    /// Unicast to these DAs.
    Das(Vec<SocketAddr>),
    /// DA discovery by multicast, then the DAs (or the SAs).
    Multicast {
        v6: Option<(u16, u32)>,
        group: Option<SocketAddr>,
    },
}

/// What every command needs.
pub(super) struct Ctx {
    pub(super) net: Net,
    pub(super) dest: Dest,
    pub(super) lang: LangTag,
    pub(super) scopes: Option<String>,
    pub(super) json: bool,
    pub(super) next_xid: std::cell::Cell<u16>,
    pub(super) auth: Option<Auth>,
}

/// One agent's answer, or why there was none.
pub(super) struct Outcome {
    pub(super) agent: SocketAddr,
    pub(super) result: Result<Reply, NetError>,
}

impl Ctx {
    pub(super) fn new(c: &Common) -> Result<Self, Fail> {
        let lang = LangTag::new(&c.lang).map_err(|_| {
            input(format!(
                "bad language tag '{}': want e.g. en, de-CH, es-419",
                c.lang
            ))
        })?;
        if c.retry_ms == 0 || c.timeout_ms == 0 {
            return Err(input("--retry-ms and --timeout-ms must be at least 1"));
        }
        let dest = match (c.da.is_empty(), c.multicast) {
            (false, true) => return Err(input("give either --da or --multicast, not both")),
            (true, false) => {
                return Err(input(
                    "say where to send: --da ADDR[:PORT] (repeatable) or --multicast",
                ))
            }
            (false, false) => Dest::Das(c.da.clone()),
            (true, true) => Dest::Multicast {
                v6: if c.ipv6 {
                    let idx = c.iface.as_deref().map(iface_index).transpose()?;
                    if c.mcast_scope <= 2 && idx.is_none() && c.group.is_none() {
                        return Err(input(
                            "IPv6 node- and link-local multicast needs --iface NAME|INDEX",
                        ));
                    }
                    Some((c.mcast_scope, idx.unwrap_or(0)))
                } else {
                    None
                },
                group: c.group,
            },
        };
        Ok(Self {
            net: Net {
                timing: Timing {
                    retry: Duration::from_millis(c.retry_ms),
                    max: Duration::from_millis(c.timeout_ms),
                },
                bind: c.bind,
                force_tcp: c.tcp,
                ttl: c.ttl,
            },
            dest,
            lang,
            scopes: c.scopes.clone(),
            json: c.json,
            next_xid: std::cell::Cell::new(c.xid.unwrap_or_else(random_xid)),
            auth: Auth::new(c)?,
        })
    }

    /// The SPI requests ask for (empty: none).
    pub(super) fn spi(&self) -> SlpString {
        self.auth
            .as_ref()
            .map(|a| a.spi.clone())
            .unwrap_or_default()
    }

    /// Verification of replies, with `--spi` and `--key`.
    pub(super) fn check(&self) -> Result<Option<Check>, Fail> {
        let Some(a) = &self.auth else {
            return Ok(None);
        };
        Ok(a.verifier()?.map(|verifier| Check {
            verifier,
            now: unix_now(),
        }))
    }

    pub(super) fn scopes_or_default(&self) -> Result<ScopeList, Fail> {
        match &self.scopes {
            Some(s) => parse_scopes(s),
            None => Ok(ScopeList::default_scope()),
        }
    }

    /// A request with the next XID.
    pub(super) fn message(
        &self,
        body: Body,
        fresh: bool,
        ext: Vec<Extension>,
    ) -> Result<Message, Fail> {
        let xid = self.next_xid.get();
        self.next_xid.set(xid.wrapping_add(1));
        let mut h = Header::new(xid, self.lang.clone());
        h.flags.fresh = fresh;
        Message::new(h, body, ext).map_err(|e| input(format!("the request cannot be encoded: {e}")))
    }

    pub(super) fn group(
        &self,
        v6: Option<(u16, u32)>,
        over: Option<SocketAddr>,
        kind: &GroupFor<'_>,
    ) -> SocketAddr {
        if let Some(g) = over {
            return g;
        }
        match v6 {
            None => SocketAddr::new(IpAddr::from(MCAST_V4), PORT),
            Some((scope, ifindex)) => {
                let (hi, lo) = match kind {
                    GroupFor::DaDiscovery => (0, SVRLOC_DA),
                    GroupFor::Svrloc => (0, SVRLOC),
                    GroupFor::SrvRqst(t) => (1, 0x1000 + slp_hash(t)),
                };
                let a = Ipv6Addr::new(0xff00 | scope, 0, 0, 0, 0, 0, hi, lo);
                SocketAddr::V6(SocketAddrV6::new(a, PORT, 0, ifindex))
            }
        }
    }

    /// Multicast DA discovery (RFC 2608 §12.2.1): the DAAdverts of live DAs
    /// (boot timestamp not 0) answering for `scopes`, signed with `spi`
    /// if not empty (only `das` asks: a DA that cannot sign with it stays
    /// silent to a multicast request).
    pub(super) fn discover(
        &self,
        v6: Option<(u16, u32)>,
        over: Option<SocketAddr>,
        scopes: &ScopeList,
        predicate: &Predicate,
        spi: SlpString,
    ) -> Result<Vec<Reply>, Fail> {
        let req = self.message(
            Body::SrvRqst(SrvRqst {
                pr_list: SlpString::default(),
                service_type: ServiceType::directory_agent(),
                scopes: scopes.clone(),
                predicate: predicate.clone(),
                spi,
            }),
            false,
            vec![],
        )?;
        let group = self.group(v6, over, &GroupFor::DaDiscovery);
        let replies = self
            .net
            .multicast(group, &req, &[FunctionId::DaAdvert])
            .map_err(|e| Fail::Other(e.to_string()))?;
        Ok(replies
            .into_iter()
            .filter(|r| match r.msg.body() {
                Body::DaAdvert(d) => {
                    if d.boot_timestamp == 0 {
                        log::info!("{}: DA {} is going down, not used", r.from, d.url);
                    }
                    d.boot_timestamp != 0
                }
                _ => false,
            })
            .collect())
    }

    /// A query: to each `--da`; or to the DAs multicast discovery finds, or
    /// without DAs by multicast convergence to the SAs.
    pub(super) fn query(
        &self,
        body: Body,
        expect: &[FunctionId],
        group: &GroupFor<'_>,
    ) -> Result<Vec<Outcome>, Fail> {
        let req = self.message(body, false, vec![])?;
        let agents = match &self.dest {
            Dest::Das(das) => das.clone(),
            Dest::Multicast { v6, group: over } => {
                let scopes = match req.body() {
                    Body::SrvRqst(r) => r.scopes.clone(),
                    Body::AttrRqst(r) => r.scopes.clone(),
                    Body::SrvTypeRqst(r) => r.scopes.clone(),
                    _ => ScopeList::default(),
                };
                let das = self.discover(
                    *v6,
                    *over,
                    &scopes,
                    &Predicate::default(),
                    SlpString::default(),
                )?;
                if das.is_empty() {
                    log::info!("no DA found: asking the SAs by multicast");
                    let g = self.group(*v6, *over, group);
                    let replies = self
                        .net
                        .multicast(g, &req, expect)
                        .map_err(|e| Fail::Other(e.to_string()))?;
                    return Ok(replies
                        .into_iter()
                        .map(|r| Outcome {
                            agent: r.from,
                            result: Ok(r),
                        })
                        .collect());
                }
                das.iter().map(|r| r.from).collect()
            }
        };
        Ok(agents
            .into_iter()
            .map(|agent| Outcome {
                agent,
                result: self.net.unicast(agent, &req, expect),
            })
            .collect())
    }

    /// Where a SrvReg/SrvDeReg goes, with the scopes to put in it: `--da`
    /// with all our scopes, or each discovered DA with the scopes of ours
    /// it supports (RFC 2608 §8.3).
    pub(super) fn registration_targets(
        &self,
        scopes: &ScopeList,
    ) -> Result<Vec<(SocketAddr, ScopeList)>, Fail> {
        match &self.dest {
            Dest::Das(das) => Ok(das.iter().map(|a| (*a, scopes.clone())).collect()),
            Dest::Multicast { v6, group } => {
                let das = self.discover(
                    *v6,
                    *group,
                    scopes,
                    &Predicate::default(),
                    SlpString::default(),
                )?;
                let mut out = Vec::new();
                for r in das {
                    let Body::DaAdvert(d) = r.msg.body() else {
                        continue;
                    };
                    let common: Vec<Scope> = scopes
                        .scopes()
                        .iter()
                        .filter(|s| d.scopes.contains(s))
                        .cloned()
                        .collect();
                    if common.is_empty() {
                        log::info!("DA {} ({}) serves none of our scopes", d.url, r.from);
                        continue;
                    }
                    // NOTE: a subset of a list that encoded encodes.
                    let list = ScopeList::new(common)
                        .map_err(|e| Fail::Other(format!("scope list: {e}")))?;
                    out.push((r.from, list));
                }
                if out.is_empty() {
                    return Err(Fail::NoReply(format!(
                        "multicast DA discovery found no DA for scopes {scopes}"
                    )));
                }
                Ok(out)
            }
        }
    }
}
