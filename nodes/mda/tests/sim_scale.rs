//! Scale runs of real MDA drivers on the simulator (virtual time): the mSLP
//! mesh figures of `docs/bench.md`. Ignored in the normal suite (minutes of
//! CPU); `scripts/bench-mslp` runs them, or by hand:
//!
//! ```sh
//! cargo test --release -p svcroute-mda --test sim_scale -- --ignored --nocapture
//! MSLP_SIM_REGS=20000 cargo test --release -p svcroute-mda --test sim_scale -- --ignored --nocapture
//! ```
//!
//! One lossless segment (1 ms one-way delay), `MSLP_SIM_MDAS` MDAs (default
//! 10) peered in one scope, and a UDP SA that keeps `MSLP_SIM_WINDOW`
//! (default 64) SrvRegs outstanding, all to MDA 0. The test prints a
//! `SIM ...` line per figure with virtual and wall time (wall: the CPU cost
//! of simulating every node on one thread; virtual: link delays, TCP
//! windows and protocol timers, with CPU time counted as zero).
//!
//! 1. **Convergence:** `MSLP_SIM_REGS` (default 100,000) registrations
//!    accepted at MDA 0, until every MDA holds all of them (equal counts,
//!    then equal digests).
//! 2. **Catch-up from the log:** the last MDA crashes, `MSLP_SIM_MISSED`
//!    (default 10,000) more registrations are accepted at MDA 0, the MDA
//!    restarts from its persisted records, until it holds everything.
//! 3. **Catch-up from nothing:** the same MDA crashes again and restarts
//!    with an empty store (a wiped disk): anti-entropy alone refills it.

#![allow(clippy::disallowed_methods)] // wall-clock figures beside virtual time

mod slp_sim;

use std::time::Instant as WallInstant;

use slp_sim::{Sa, WALL};
use smoltcp::time::Duration;
use smoltcp::wire::IpAddress;
use svcroute_mda::core::Record;
use svcroute_mda::driver::{Mda, MdaConfig, MemStore, Persist};
use svcroute_stack::runtime::Node;
use svcroute_stack::sim::{ipv4, NodeId, SegmentConfig, SegmentId, Sim, SimLink};
use svcroute_stack::wire::slp::codec::List;
use svcroute_stack::wire::slp::{
    AcceptId, AttrList, Body, Extension, FwdId, Header, LangTag, MeshFwd, Message, ScopeList,
    ServiceType, SlpString, SrvReg, UrlEntry,
};

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Keeps nothing: the MDAs that never restart need no log.
struct Discard;

impl Persist for Discard {
    fn persist(&mut self, _record: &Record) -> std::io::Result<()> {
        Ok(())
    }
}

fn cfg(me: usize, n: usize) -> MdaConfig {
    MdaConfig {
        scopes: "x".into(),
        peers: (0..n)
            .filter(|j| *j != me)
            .map(|j| ipv4(0, j as u8 + 1).to_string())
            .collect(),
        // RFC timers (keepalive 200 s, timeout 300 s, beat 3 h) as a lab
        // MDA has them; no start wait, peers probed every 5 s.
        start_wait_ms: 0,
        peer_retry_s: 5,
        max_registrations: 10_000_000,
        ..MdaConfig::default()
    }
}

type MdaId = NodeId<Node<SimLink, Mda>>;

struct World {
    sim: Sim,
    lan: SegmentId,
    mdas: Vec<MdaId>,
    /// The records of the last MDA (the one that restarts).
    store: MemStore,
    sa: NodeId<Node<SimLink, Sa>>,
    n: usize,
    xid: u16,
    next_url: usize,
}

impl World {
    fn new(n: usize, window: usize) -> Self {
        let mut sim = Sim::new(7);
        let lan = sim.add_segment(SegmentConfig::default());
        let store = MemStore::default();
        let mut mdas = Vec::new();
        for i in 0..n {
            let persist: Box<dyn Persist> = if i == n - 1 {
                Box::new(store.clone())
            } else {
                Box::new(Discard)
            };
            let role = Mda::new(&format!("mda{i}"), cfg(i, n), persist, Vec::new(), WALL).unwrap();
            let port = sim.port(lan, i as u8 + 1);
            mdas.push(sim.add_role(&format!("mda{i}"), vec![port], role));
        }
        let port = sim.port(lan, 200);
        let sa = sim.add_role("sa", vec![port], Sa::new(window, 512).strict());
        Self {
            sim,
            lan,
            mdas,
            store,
            sa,
            n,
            xid: 0,
            next_url: 0,
        }
    }

    fn core(&self, i: usize) -> &svcroute_mda::core::Mda {
        self.sim.node(self.mdas[i]).role().core().unwrap()
    }

    /// Queue `count` fresh registrations (MeshFwd) at MDA `at`.
    fn register(&mut self, at: usize, count: usize) {
        let st = ServiceType::parse("service:printer:lpr").unwrap();
        let scopes = ScopeList::parse("x").unwrap();
        let to = IpAddress::Ipv4(ipv4(0, at as u8 + 1));
        for _ in 0..count {
            let i = self.next_url;
            self.next_url += 1;
            self.xid = self.xid.wrapping_add(1);
            let mut h = Header::new(self.xid, LangTag::en());
            h.flags.fresh = true;
            let body = Body::SrvReg(SrvReg {
                entry: UrlEntry::new(
                    0xffff,
                    SlpString::new(format!("service:printer:lpr://r{i}/q")).unwrap(),
                ),
                service_type: st.clone(),
                scopes: scopes.clone(),
                attrs: AttrList::parse(&format!("(id={i}),(zone={}),(color=red)", i % 100))
                    .unwrap(),
                attr_auths: List::default(),
            });
            let ext = Extension::MeshFwd(MeshFwd {
                fwd: FwdId::RqstFwd,
                version: WALL + 1,
                accept: AcceptId::default(),
            });
            let m = Message::new(h, body, vec![ext]).unwrap();
            self.sim
                .node_mut(self.sa)
                .role_mut()
                .queue
                .push_back((to, m.to_bytes(), self.xid));
        }
    }

    fn drive_until_acked(&mut self, max: Duration) {
        let sa = self.sa;
        self.sim
            .drive_bounded(max, 200_000_000, |s| s.node(sa).role().idle())
            .unwrap_or_else(|e| panic!("SA never got all acks: {e}"));
    }

    /// Drive until every MDA in `which` holds `count` states, then check
    /// that their digests agree.
    fn drive_until_all_hold(&mut self, which: &[usize], count: usize, max: Duration) {
        let ids: Vec<MdaId> = which.iter().map(|i| self.mdas[*i]).collect();
        let r = self.sim.drive_bounded(max, 200_000_000, |s| {
            ids.iter().all(|id| {
                s.node(*id)
                    .role()
                    .core()
                    .is_some_and(|c| c.registration_count() == count)
            })
        });
        if let Err(e) = r {
            let counts: Vec<usize> = which
                .iter()
                .map(|i| self.core(*i).registration_count())
                .collect();
            panic!("MDAs {which:?} never all held {count}: {e}; counts {counts:?}");
        }
        let d0 = self.core(which[0]).digest();
        for i in which {
            assert_eq!(self.core(*i).digest(), d0, "MDA {i} differs");
        }
    }

    fn restart_last(&mut self, records: Vec<Record>) {
        let i = self.n - 1;
        let store = MemStore::default();
        store.0.borrow_mut().extend(records.iter().cloned());
        let name = format!("mda{i}r{}", self.sim.steps());
        let role = Mda::new(
            &name,
            cfg(i, self.n),
            Box::new(store.clone()),
            records,
            WALL,
        )
        .unwrap();
        let port = self.sim.port(self.lan, i as u8 + 1);
        self.mdas[i] = self.sim.add_role(&name, vec![port], role);
        self.store = store;
    }
}

fn secs(d: Duration) -> f64 {
    d.total_micros() as f64 / 1e6
}

#[test]
#[ignore = "minutes of CPU: scripts/bench-mslp, or --ignored --nocapture"]
fn mesh_of_ten_convergence_and_catch_up() {
    let n = env("MSLP_SIM_MDAS", 10);
    let regs = env("MSLP_SIM_REGS", 100_000);
    let missed = env("MSLP_SIM_MISSED", 10_000);
    let window = env("MSLP_SIM_WINDOW", 64);
    let all: Vec<usize> = (0..n).collect();
    let bound = Duration::from_secs(3600 + regs as u64 / 10);
    let mut w = World::new(n, window);

    // The mesh forms.
    let v0 = w.sim.now();
    let t0 = WallInstant::now();
    let ids = w.mdas.clone();
    w.sim
        .drive_bounded(Duration::from_secs(120), 10_000_000, |s| {
            ids.iter().all(|id| {
                s.node(*id)
                    .role()
                    .core()
                    .is_some_and(|c| c.active_peers().len() == n - 1)
            })
        })
        .expect("the mesh never formed");
    println!(
        "SIM mesh_formed mdas={n} virtual_s={:.3} wall_s={:.3}",
        secs(w.sim.now() - v0),
        t0.elapsed().as_secs_f64()
    );
    w.sim.run_for(Duration::from_secs(5)).unwrap();

    // 1. Convergence of `regs` registrations accepted at MDA 0.
    w.register(0, regs);
    let v0 = w.sim.now();
    let t0 = WallInstant::now();
    w.drive_until_acked(bound);
    let (va, ta) = (w.sim.now() - v0, t0.elapsed().as_secs_f64());
    w.drive_until_all_hold(&all, regs, bound);
    let (vc, tc) = (w.sim.now() - v0, t0.elapsed().as_secs_f64());
    println!(
        "SIM converge mdas={n} regs={regs} window={window} acked_virtual_s={:.3} \
         acked_wall_s={ta:.3} converged_virtual_s={:.3} converged_wall_s={tc:.3} \
         lag_virtual_s={:.3} sim_steps={}",
        secs(va),
        secs(vc),
        secs(vc - va),
        w.sim.steps()
    );

    // 2. The last MDA crashes; `missed` more registrations; it restarts
    //    from its records and catches up.
    let last = n - 1;
    w.sim.node_mut(w.mdas[last]).role_mut().crash();
    let others: Vec<usize> = (0..last).collect();
    w.register(0, missed);
    w.drive_until_acked(bound);
    w.drive_until_all_hold(&others, regs + missed, bound);
    let records = w.store.0.borrow().clone();
    let n_records = records.len();
    let v0 = w.sim.now();
    let t0 = WallInstant::now();
    w.restart_last(records);
    w.drive_until_all_hold(&all, regs + missed, bound);
    let c = w.core(last).counters().clone();
    println!(
        "SIM catch_up_log mdas={n} held={regs} missed={missed} replayed_records={n_records} \
         virtual_s={:.3} wall_s={:.3} fwded_installed={} stale={}",
        secs(w.sim.now() - v0),
        t0.elapsed().as_secs_f64(),
        c.get("mda.fwded_installed").copied().unwrap_or(0),
        c.get("mda.stale_update").copied().unwrap_or(0),
    );

    // 3. It crashes again and comes back with nothing.
    w.sim.node_mut(w.mdas[last]).role_mut().crash();
    w.sim.run_for(Duration::from_secs(1)).unwrap();
    let v0 = w.sim.now();
    let t0 = WallInstant::now();
    w.restart_last(Vec::new());
    w.drive_until_all_hold(&all, regs + missed, bound);
    let c = w.core(last).counters().clone();
    println!(
        "SIM catch_up_empty mdas={n} total={} virtual_s={:.3} wall_s={:.3} \
         fwded_installed={} stale={}",
        regs + missed,
        secs(w.sim.now() - v0),
        t0.elapsed().as_secs_f64(),
        c.get("mda.fwded_installed").copied().unwrap_or(0),
        c.get("mda.stale_update").copied().unwrap_or(0),
    );
}
