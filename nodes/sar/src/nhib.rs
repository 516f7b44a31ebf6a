//! The NHIB (draft §3.4 Figure 3): what FIB entries point at.
//!
//! - **Routing entries**: per SAR of the domain, the IGP route to it — cost,
//!   next SAR and its address — indexed by a small slot number so a lookup
//!   is an array access ([`Nhib::set_routes`] after every SPF).
//! - **Scheduling entries**: every announced instance, local or learnt from
//!   a services LSA, with its metrics (capability, load, latency,
//!   preference), its steering and when it expires. Instances are keyed by
//!   (origin SAR, LSA part, name, address); the table holds at most `cap`.
//!
//! Every SAR keeps the instance rows (a transit SAR needs the instance
//! identities so that its hop-by-hop routing choice ties the same way as
//! the ingress's); the scheduling *state* (round-robin positions, WRR
//! weights) lives in FIB entries and is used only on client-facing SARs.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::{IpAddr, Ipv6Addr};

use smoltcp::time::Instant;
use svcroute_stack::wire::igp::RouterId;
use svcroute_stack::wire::rosa::ServiceName;

use crate::igp::Route;
use crate::policy::{Candidate, Metrics, Steering};

/// Names an instance row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct InstanceId(pub u32);

/// The LSA part of instances announced at this SAR (not flooded as such).
pub const LOCAL_PART: u16 = u16::MAX;

/// What identifies an instance row: (origin, part, name, address).
pub type InstanceKey = (RouterId, u16, ServiceName, IpAddr);

/// One scheduling entry: an announced instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Instance {
    /// The service.
    pub name: ServiceName,
    /// The instance's address.
    pub addr: IpAddr,
    /// The SAR it announced at.
    pub origin: RouterId,
    /// The services-LSA part it came in ([`LOCAL_PART`] if local).
    pub part: u16,
    /// Its announced metrics.
    pub metrics: Metrics,
    /// The steering its announcement asks for.
    pub steering: Steering,
    /// When it stops counting unless refreshed.
    pub expires: Instant,
    slot: u32,
}

/// The table is at its configured maximum size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Full;

/// Routing entries and scheduling entries.
#[derive(Debug, Clone)]
pub struct Nhib {
    rows: Vec<Option<Instance>>,
    free: Vec<u32>,
    by_key: HashMap<InstanceKey, InstanceId>,
    expiry: BTreeSet<(Instant, InstanceId)>,
    slots: HashMap<RouterId, u32>,
    /// By slot: the route to that SAR (cost 0 for us), `None` unreachable.
    routes: Vec<Option<Route>>,
    me: RouterId,
    me_addr: Ipv6Addr,
    len: usize,
    cap: usize,
}

impl Nhib {
    /// An empty NHIB of SAR `me` holding at most `cap` instances.
    pub fn new(me: RouterId, me_addr: Ipv6Addr, cap: usize) -> Self {
        let mut n = Self {
            rows: Vec::new(),
            free: Vec::new(),
            by_key: HashMap::new(),
            expiry: BTreeSet::new(),
            slots: HashMap::new(),
            routes: Vec::new(),
            me,
            me_addr,
            len: 0,
            cap,
        };
        n.set_routes(&BTreeMap::new());
        n
    }

    /// Number of instance rows.
    pub const fn len(&self) -> usize {
        self.len
    }

    /// Whether there are no instance rows.
    pub const fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The configured maximum.
    pub const fn capacity(&self) -> usize {
        self.cap
    }

    /// The row `id`.
    pub fn get(&self, id: InstanceId) -> Option<&Instance> {
        self.rows.get(id.0 as usize)?.as_ref()
    }

    /// The row under `key`.
    pub fn find(&self, key: &InstanceKey) -> Option<InstanceId> {
        self.by_key.get(key).copied()
    }

    /// Every row, in id order.
    pub fn iter(&self) -> impl Iterator<Item = (InstanceId, &Instance)> {
        self.rows
            .iter()
            .enumerate()
            .filter_map(|(i, r)| Some((InstanceId(i as u32), r.as_ref()?)))
    }

    /// The route to SAR `router` (ours: cost 0).
    pub fn route(&self, router: RouterId) -> Option<&Route> {
        let s = *self.slots.get(&router)?;
        self.routes.get(s as usize)?.as_ref()
    }

    /// The slot of the route to `id`'s SAR (see [`Nhib::slot_cost`]).
    pub fn slot_of(&self, id: InstanceId) -> Option<u32> {
        self.get(id).map(|r| r.slot)
    }

    /// The path cost to the SAR in route slot `slot`; `None`: unreachable.
    #[inline]
    pub fn slot_cost(&self, slot: u32) -> Option<u64> {
        self.routes.get(slot as usize)?.as_ref().map(|r| r.cost)
    }

    /// The route in slot `slot`.
    #[inline]
    pub fn slot_route(&self, slot: u32) -> Option<&Route> {
        self.routes.get(slot as usize)?.as_ref()
    }

    /// Whether `id`'s SAR is reachable.
    pub fn reachable(&self, id: InstanceId) -> bool {
        self.get(id).is_some_and(|r| {
            self.routes
                .get(r.slot as usize)
                .is_some_and(Option::is_some)
        })
    }

    /// What a policy sees of `id`.
    pub fn candidate(&self, id: InstanceId) -> Option<Candidate> {
        let r = self.get(id)?;
        let cost = self
            .routes
            .get(r.slot as usize)
            .and_then(|x| x.as_ref().map(|x| x.cost));
        Some(Candidate {
            addr: r.addr,
            origin: r.origin,
            path_cost: cost,
            metrics: r.metrics,
        })
    }

    /// Add a row: [`Full`] at the cap, or if the key exists.
    pub fn insert(
        &mut self,
        key: InstanceKey,
        metrics: Metrics,
        steering: Steering,
        expires: Instant,
    ) -> Result<InstanceId, Full> {
        if self.len >= self.cap || self.by_key.contains_key(&key) {
            return Err(Full);
        }
        let (origin, part, name, addr) = key.clone();
        let slot = self.slot(origin);
        let row = Instance {
            name,
            addr,
            origin,
            part,
            metrics,
            steering,
            expires,
            slot,
        };
        let id = if let Some(i) = self.free.pop() {
            self.rows[i as usize] = Some(row);
            InstanceId(i)
        } else {
            self.rows.push(Some(row));
            InstanceId((self.rows.len() - 1) as u32)
        };
        self.by_key.insert(key, id);
        self.expiry.insert((expires, id));
        self.len += 1;
        Ok(id)
    }

    /// Refresh a row's metrics, steering and expiry; the old metrics and
    /// steering.
    pub fn update(
        &mut self,
        id: InstanceId,
        metrics: Metrics,
        steering: Steering,
        expires: Instant,
    ) -> Option<(Metrics, Steering)> {
        let r = self.rows.get_mut(id.0 as usize)?.as_mut()?;
        let old = (r.metrics, r.steering);
        r.metrics = metrics;
        r.steering = steering;
        if r.expires != expires {
            self.expiry.remove(&(r.expires, id));
            r.expires = expires;
            self.expiry.insert((expires, id));
        }
        Some(old)
    }

    /// Remove a row.
    pub fn remove(&mut self, id: InstanceId) -> Option<Instance> {
        let r = self.rows.get_mut(id.0 as usize)?.take()?;
        self.by_key
            .remove(&(r.origin, r.part, r.name.clone(), r.addr));
        self.expiry.remove(&(r.expires, id));
        self.free.push(id.0);
        self.len -= 1;
        Some(r)
    }

    /// The earliest expiry.
    pub fn next_expiry(&self) -> Option<Instant> {
        self.expiry.first().map(|(t, _)| *t)
    }

    /// The rows expired at `now` (not removed: the caller does, so the FIB
    /// follows).
    pub fn expired(&self, now: Instant) -> Vec<InstanceId> {
        self.expiry
            .iter()
            .take_while(|(t, _)| *t <= now)
            .map(|(_, id)| *id)
            .collect()
    }

    /// Take the routes of a new SPF run.
    pub fn set_routes(&mut self, routes: &BTreeMap<RouterId, Route>) {
        for r in &mut self.routes {
            *r = None;
        }
        for (router, route) in routes {
            let s = self.slot(*router);
            self.routes[s as usize] = Some(*route);
        }
        // We always reach ourselves, whatever SPF says.
        let me = self.me;
        let s = self.slot(me);
        self.routes[s as usize] = Some(Route {
            cost: 0,
            addr: self.me_addr,
            next_hop: me,
            next_hop_addr: self.me_addr,
            link: None,
        });
    }

    fn slot(&mut self, router: RouterId) -> u32 {
        if let Some(s) = self.slots.get(&router) {
            return *s;
        }
        let s = self.routes.len() as u32;
        self.routes.push(None);
        self.slots.insert(router, s);
        s
    }
}
