//! Real MDA drivers over smoltcp on a simulated segment: a mesh of ten under
//! 20 % loss and a partition converges; version resolution and tombstones
//! hold across the mesh; a restarted MDA catches up from its log plus
//! anti-entropy.
//!
//! `MDA_SIM_REGS` sets the number of registrations of the big test
//! (default: the 10,000 in release builds, which CI runs, ~15 s;
//! 1,000 in debug builds).

mod slp_sim;

use slp_sim::{Sa, WALL};
use smoltcp::time::Duration;
use smoltcp::wire::IpAddress;
use svcroute_mda::driver::{Mda, MdaConfig, MemStore};
use svcroute_stack::runtime::Node;
use svcroute_stack::sim::{ipv4, SegmentConfig, Sim, SimLink, SimPort};
use svcroute_stack::wire::slp::codec::List;
use svcroute_stack::wire::slp::{
    AcceptId, AttrList, Body, Extension, FwdId, Header, LangTag, MeshFwd, Message, ScopeList,
    ServiceType, SlpString, SrvDeReg, SrvReg, TagList, UrlEntry,
};

fn cfg(me: usize, n: usize) -> MdaConfig {
    MdaConfig {
        scopes: "x".into(),
        peers: (0..n)
            .filter(|j| *j != me)
            .map(|j| ipv4(0, j as u8 + 1).to_string())
            .collect(),
        keepalive_s: 20,
        timeout_s: 60,
        beat_s: 60,
        start_wait_ms: 0,
        peer_retry_s: 5,
        ..MdaConfig::default()
    }
}

type MdaNode = Node<SimLink, Mda>;

struct World {
    sim: Sim,
    mdas: Vec<svcroute_stack::sim::NodeId<MdaNode>>,
    stores: Vec<MemStore>,
    sa: svcroute_stack::sim::NodeId<Node<SimLink, Sa>>,
    n: usize,
    xid: u16,
}

impl World {
    fn new(seed: u64, n: usize, loss: f64) -> Self {
        let mut sim = Sim::new(seed);
        let lan = sim.add_segment(SegmentConfig {
            loss,
            ..SegmentConfig::default()
        });
        let mut mdas = Vec::new();
        let mut stores = Vec::new();
        for i in 0..n {
            let store = MemStore::default();
            let role = Mda::new(
                &format!("mda{i}"),
                cfg(i, n),
                Box::new(store.clone()),
                Vec::new(),
                WALL,
            )
            .unwrap();
            let port = sim.port(lan, i as u8 + 1);
            mdas.push(sim.add_role(&format!("mda{i}"), vec![port], role));
            stores.push(store);
        }
        let port = sim.port(lan, 200);
        let sa = sim.add_role("sa", vec![port], Sa::new(32, 256).strict());
        Self {
            sim,
            mdas,
            stores,
            sa,
            n,
            xid: 0,
        }
    }

    fn core(&self, i: usize) -> &svcroute_mda::core::Mda {
        self.sim.node(self.mdas[i]).role().core().unwrap()
    }

    fn digests(&self) -> Vec<u64> {
        (0..self.n).map(|i| self.core(i).digest()).collect()
    }

    fn converged(&self, count: usize) -> bool {
        let d = self.digests();
        d.iter().all(|x| *x == d[0]) && self.core(0).registration_count() == count
    }

    fn port(&self, i: usize) -> SimPort {
        self.sim.node(self.mdas[i]).links()[0].port()
    }

    fn send(&mut self, at: usize, body: Body, version: u64, fresh: bool) {
        self.xid += 1;
        let mut h = Header::new(self.xid, LangTag::en());
        h.flags.fresh = fresh;
        let ext = Extension::MeshFwd(MeshFwd {
            fwd: FwdId::RqstFwd,
            version,
            accept: AcceptId::default(),
        });
        let m = Message::new(h, body, vec![ext]).unwrap();
        self.sim
            .node_mut(self.sa)
            .role_mut()
            .push(IpAddress::Ipv4(ipv4(0, at as u8 + 1)), &m);
    }

    fn register(&mut self, at: usize, url: &str, attrs: &str, version: u64) {
        let body = Body::SrvReg(SrvReg {
            entry: UrlEntry::new(0xffff, SlpString::new(url).unwrap()),
            service_type: ServiceType::parse("service:printer:lpr").unwrap(),
            scopes: ScopeList::parse("x").unwrap(),
            attrs: AttrList::parse(attrs).unwrap(),
            attr_auths: List::default(),
        });
        self.send(at, body, version, true);
    }

    fn deregister(&mut self, at: usize, url: &str, version: u64) {
        let body = Body::SrvDeReg(SrvDeReg {
            scopes: ScopeList::parse("x").unwrap(),
            entry: UrlEntry::new(0, SlpString::new(url).unwrap()),
            tags: TagList::default(),
        });
        self.send(at, body, version, false);
    }

    #[track_caller]
    fn drive_until_acked(&mut self, max: Duration) {
        let sa = self.sa;
        self.sim
            .drive_bounded(max, 50_000_000, |s| s.node(sa).role().idle())
            .unwrap_or_else(|e| panic!("SA never got all acks: {e}"));
    }

    #[track_caller]
    fn drive_until_converged(&mut self, count: usize, max: Duration) {
        let start = self.sim.now();
        let mdas = self.mdas.clone();
        let n = self.n;
        let r = self.sim.drive_bounded(max, 50_000_000, |s| {
            let core = |i: usize| s.node(mdas[i]).role().core();
            // Counts first (cheap); digests only once every count is right.
            if !(0..n).all(|i| core(i).is_some_and(|c| c.registration_count() == count)) {
                return false;
            }
            let d: Vec<u64> = (0..n).filter_map(|i| core(i).map(|c| c.digest())).collect();
            d.iter().all(|x| *x == d[0])
        });
        if let Err(e) = r {
            let counts: Vec<usize> = (0..n).map(|i| self.core(i).registration_count()).collect();
            panic!(
                "no convergence after {} : {e}; counts {counts:?}",
                self.sim.now() - start
            );
        }
    }

    fn live(&self, i: usize, url: &str) -> Option<String> {
        self.core(i)
            .registration(url, &LangTag::en())
            .filter(|r| !r.deleted)
            .map(|r| r.attrs.to_string())
    }
}

fn url(k: usize) -> String {
    format!("service:printer:lpr://p{k}")
}

#[test]
fn ten_mdas_converge_under_loss_and_a_healed_partition() {
    let regs: usize = std::env::var("MDA_SIM_REGS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(if cfg!(debug_assertions) {
            1_000
        } else {
            10_000
        });
    let n = 10;
    // The SA (window 32, 2 s RTO, 20 % loss) needs ~3.6 s of virtual time
    // per registration; bounds scale with the count.
    let bound = Duration::from_secs(3600 + 8 * regs as u64);
    let mut w = World::new(1, n, 0.2);
    // Let the mesh form.
    w.sim.run_for(Duration::from_secs(30)).unwrap();
    let peered = (0..n)
        .filter(|i| w.core(*i).active_peers().len() == n - 1)
        .count();
    eprintln!("peered after 30 s: {peered}/{n}");
    // First half, then a partition, then the rest.
    let half = regs / 2;
    for k in 0..half {
        w.register(k % n, &url(k), "(r=1)", 1);
    }
    w.drive_until_acked(bound);
    eprintln!(
        "first half acked at {} after {} steps",
        w.sim.now(),
        w.sim.steps()
    );
    let a: Vec<SimPort> = (0..n / 2).map(|i| w.port(i)).collect();
    let b: Vec<SimPort> = (n / 2..n).map(|i| w.port(i)).collect();
    let cut = w.sim.partition(&a, &b);
    for k in half..regs {
        w.register(k % n, &url(k), "(r=1)", 1);
    }
    w.drive_until_acked(bound);
    eprintln!(
        "second half acked at {} after {} steps",
        w.sim.now(),
        w.sim.steps()
    );
    w.sim.run_for(Duration::from_secs(90)).unwrap();
    eprintln!("healing at {} after {} steps", w.sim.now(), w.sim.steps());
    w.sim.heal(cut);
    w.drive_until_converged(regs, bound);
    eprintln!(
        "{regs} registrations converged at {} (virtual), {} SA sends",
        w.sim.now(),
        w.sim.node(w.sa).role().sent
    );
    assert!(w.converged(regs));
}

#[test]
fn versions_tombstones_and_restart_across_the_mesh() {
    let n = 3;
    let mut w = World::new(2, n, 0.1);
    w.sim.run_for(Duration::from_secs(30)).unwrap();
    // MDA 0 is cut off from MDAs 1 and 2.
    let cut = w.sim.partition(&[w.port(0)], &[w.port(1), w.port(2)]);
    // A newer version at MDA 1; its older version reaches MDA 0 later.
    w.register(1, &url(1), "(v=2)", 200);
    w.drive_until_acked(Duration::from_secs(600));
    w.register(0, &url(1), "(v=1)", 100);
    // A registration deregistered at MDA 2, and a late older SrvReg at MDA 0.
    w.register(2, &url(2), "", 10);
    w.drive_until_acked(Duration::from_secs(600));
    w.deregister(2, &url(2), 30);
    w.register(0, &url(2), "late", 20);
    w.drive_until_acked(Duration::from_secs(600));
    assert_eq!(w.live(0, &url(1)).as_deref(), Some("(v=1)"));
    assert!(w.live(0, &url(2)).is_some());
    w.sim.run_for(Duration::from_secs(90)).unwrap();
    w.sim.heal(cut);
    w.drive_until_converged(2, Duration::from_secs(1800));
    for i in 0..n {
        assert_eq!(w.live(i, &url(1)).as_deref(), Some("(v=2)"), "MDA {i}");
        assert!(w.live(i, &url(2)).is_none(), "MDA {i}: resurrected");
    }

    // MDA 2 crashes; registrations go on elsewhere; it restarts from its
    // persisted records and catches up by anti-entropy.
    w.sim.node_mut(w.mdas[2]).role_mut().crash();
    for k in 10..20 {
        w.register(k % 2, &url(k), "", 1);
    }
    w.drive_until_acked(Duration::from_secs(600));
    let records = w.stores[2].0.borrow().clone();
    assert!(!records.is_empty());
    let store = MemStore::default();
    store.0.borrow_mut().extend(records.iter().cloned());
    let role = Mda::new("mda2b", cfg(2, n), Box::new(store.clone()), records, WALL).unwrap();
    let lan = w.port(0).segment;
    let port = w.sim.port(lan, 3);
    w.mdas[2] = w.sim.add_role("mda2b", vec![port], role);
    w.stores[2] = store;
    w.drive_until_converged(12, Duration::from_secs(1800));
    assert!(w.live(2, &url(15)).is_some());
    assert!(w.live(2, &url(2)).is_none());
}
