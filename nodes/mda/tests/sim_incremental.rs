//! Incremental registrations and partial deregistrations across a mesh of
//! real MDA drivers on smoltcp over a lossy simulated segment: random
//! fresh, incremental, partial and complete updates — a third of them late,
//! older than updates already sent — at random MDAs, through a partition
//! (the updates cross it by anti-entropy only) and a crash and restart from
//! the log. Every MDA must end up showing exactly the accepted operations
//! applied in version order.

mod slp_sim;

use std::collections::{BTreeMap, BTreeSet};

use slp_sim::World;
use smoltcp::time::Duration;
use svcroute_mda::core::merge;
use svcroute_mda::driver::{Mda, MdaConfig, MemStore};
use svcroute_stack::sim::ipv4;
use svcroute_stack::wire::slp::codec::List;
use svcroute_stack::wire::slp::{
    AcceptId, AttrList, Attribute, Body, ErrorCode, Extension, FwdId, Header, LangTag, MeshFwd,
    Message, ScopeList, ServiceType, SlpString, SrvDeReg, SrvReg, TagList, UrlEntry,
};

const N: usize = 5;

fn cfg(me: usize) -> MdaConfig {
    MdaConfig {
        scopes: "x".into(),
        peers: (0..N)
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

/// One SA operation.
#[derive(Debug, Clone)]
enum Op {
    Fresh(String),
    Incr(String),
    Partial(String),
    Dereg,
}

/// What every MDA must show for `ops`: applied in version order (RFC 2608
/// §8.3, §9.3, §10.6).
fn model(ops: &[(u64, Op)]) -> Option<String> {
    let mut ops = ops.to_vec();
    ops.sort_by_key(|(v, _)| *v);
    let mut st: Option<Vec<Attribute>> = None;
    for (_, op) in ops {
        st = match (op, st) {
            (Op::Fresh(a), _) => Some(AttrList::parse(&a).unwrap().attributes().to_vec()),
            (Op::Dereg, _) => None,
            (Op::Incr(a), Some(cur)) => Some(merge(&cur, &AttrList::parse(&a).unwrap())),
            (Op::Partial(t), Some(cur)) => {
                let tags = TagList::parse(&t).unwrap();
                Some(cur.into_iter().filter(|a| !tags.matches(a.tag())).collect())
            }
            (_, None) => None,
        };
    }
    st.map(|v| AttrList::new(v).unwrap().to_string())
}

fn message(xid: u16, fresh: bool, body: Body, version: u64) -> Message {
    let mut h = Header::new(xid, LangTag::en());
    h.flags.fresh = fresh;
    let ext = Extension::MeshFwd(MeshFwd {
        fwd: FwdId::RqstFwd,
        version,
        accept: AcceptId::default(),
    });
    Message::new(h, body, vec![ext]).unwrap()
}

fn srv_reg(url: &str, attrs: &str) -> Body {
    Body::SrvReg(SrvReg {
        entry: UrlEntry::new(u16::MAX, SlpString::new(url).unwrap()),
        service_type: ServiceType::parse("service:printer:lpr").unwrap(),
        scopes: ScopeList::parse("x").unwrap(),
        attrs: AttrList::parse(attrs).unwrap(),
        attr_auths: List::default(),
    })
}

fn srv_dereg(url: &str, tags: &str) -> Body {
    Body::SrvDeReg(SrvDeReg {
        scopes: ScopeList::parse("x").unwrap(),
        entry: UrlEntry::new(0, SlpString::new(url).unwrap()),
        tags: TagList::parse(tags).unwrap(),
    })
}

fn url(k: usize) -> String {
    format!("service:printer:lpr://p{k}")
}

fn splitmix(s: &mut u64) -> u64 {
    *s = s.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *s;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

struct Run {
    w: World,
    rng: u64,
    urls: Vec<String>,
    next_v: u64,
    used: BTreeSet<u64>,
    /// (url, version, op, xid) of every operation sent.
    sent: Vec<(String, u64, Op, u16)>,
    kinds: BTreeMap<&'static str, usize>,
}

impl Run {
    fn pick(&mut self, n: u64) -> u64 {
        splitmix(&mut self.rng) % n
    }

    /// A version: the next one, or (a third of the time) an older one.
    fn version(&mut self) -> u64 {
        self.next_v += 100;
        loop {
            let v = if self.pick(3) == 0 {
                let back = 100 * (1 + self.pick(8)) + 1 + self.pick(99);
                self.next_v - back
            } else {
                self.next_v
            };
            if self.used.insert(v) {
                return v;
            }
        }
    }

    /// Queue one random operation at a random MDA among `up`.
    fn random_op(&mut self, up: &[usize]) {
        let k = self.pick(self.urls.len() as u64) as usize;
        let u = self.urls[k].clone();
        let v = self.version();
        let tag = |r: &mut Self| ["a", "b", "c"][r.pick(3) as usize];
        // Incremental updates go where the registration is (RFC 2608 §8.3:
        // updates go to the DAs it was registered with).
        let live: Vec<usize> = up
            .iter()
            .copied()
            .filter(|i| self.w.live(*i, &u).is_some())
            .collect();
        let kind = self.pick(20);
        let xid = self.w.next_xid();
        let (op, at, m) = if kind < 3 || live.is_empty() {
            let a = format!(
                "({}={}),({}={})",
                tag(self),
                self.pick(9),
                tag(self),
                self.pick(9)
            );
            let at = up[self.pick(up.len() as u64) as usize];
            (
                Op::Fresh(a.clone()),
                at,
                message(xid, true, srv_reg(&u, &a), v),
            )
        } else if kind < 18 {
            let at = live[self.pick(live.len() as u64) as usize];
            if kind < 13 {
                let a = format!("({}={})", tag(self), self.pick(9));
                (
                    Op::Incr(a.clone()),
                    at,
                    message(xid, false, srv_reg(&u, &a), v),
                )
            } else {
                let t = ["a", "b,c", "c*", "b"][self.pick(4) as usize];
                (
                    Op::Partial(t.into()),
                    at,
                    message(xid, false, srv_dereg(&u, t), v),
                )
            }
        } else {
            let at = up[self.pick(up.len() as u64) as usize];
            (Op::Dereg, at, message(xid, false, srv_dereg(&u, ""), v))
        };
        *self
            .kinds
            .entry(match op {
                Op::Fresh(_) => "fresh",
                Op::Incr(_) => "incremental",
                Op::Partial(_) => "partial",
                Op::Dereg => "deregistration",
            })
            .or_insert(0) += 1;
        self.w.send(at, &m);
        self.sent.push((u, v, op, xid));
    }

    /// Every MDA in `which` shows the accepted operations in version order.
    #[track_caller]
    fn check(&self, which: &[usize], when: &str) {
        let mut by_url: BTreeMap<&str, Vec<(u64, Op)>> = BTreeMap::new();
        for (u, v, op, xid) in &self.sent {
            let code = self.w.answer(*xid).expect("every operation was answered");
            assert!(
                matches!(code, ErrorCode::Ok | ErrorCode::InvalidUpdate),
                "{when}: {op:?} got {code:?}"
            );
            if code == ErrorCode::Ok {
                by_url.entry(u).or_default().push((*v, op.clone()));
            }
        }
        for u in &self.urls {
            let want = model(by_url.get(u.as_str()).map_or(&[][..], Vec::as_slice));
            for i in which {
                assert_eq!(self.w.live(*i, u), want, "{when}: MDA {}, {u}", i + 1);
            }
        }
    }
}

#[test]
fn incremental_updates_converge_to_the_version_order_result_under_loss() {
    let mut r = Run {
        w: World::new(7, 0.2, (0..N).map(cfg).collect()),
        rng: 0x1dea,
        urls: (0..4).map(url).collect(),
        next_v: 1_000_000,
        used: BTreeSet::new(),
        sent: Vec::new(),
        kinds: BTreeMap::new(),
    };
    let all: Vec<usize> = (0..N).collect();
    r.w.sim.run_for(Duration::from_secs(30)).unwrap();

    // Registrations everywhere first, then updates with the mesh whole.
    for k in 0..r.urls.len() {
        let xid = r.w.next_xid();
        let v = r.version();
        let u = r.urls[k].clone();
        let m = message(xid, true, srv_reg(&u, "(a=0),(b=0),(c=0)"), v);
        r.w.send(k % N, &m);
        r.sent
            .push((u, v, Op::Fresh("(a=0),(b=0),(c=0)".into()), xid));
    }
    r.w.drive_until_acked(Duration::from_secs(600));
    r.w.drive_until_equal(&all, Duration::from_secs(600));
    for _ in 0..40 {
        r.random_op(&all);
    }
    r.w.drive_until_acked(Duration::from_secs(1200));
    r.w.drive_until_equal(&all, Duration::from_secs(1200));
    r.check(&all, "whole mesh");

    // A partition: each side takes updates; they cross by anti-entropy.
    let a: Vec<_> = [0, 1].iter().map(|i| r.w.port(*i)).collect();
    let b: Vec<_> = [2, 3, 4].iter().map(|i| r.w.port(*i)).collect();
    let cut = r.w.sim.partition(&a, &b);
    r.w.sim.run_for(Duration::from_secs(90)).unwrap();
    for _ in 0..60 {
        let up = if r.pick(2) == 0 {
            vec![0, 1]
        } else {
            vec![2, 3, 4]
        };
        r.random_op(&up);
    }
    r.w.drive_until_acked(Duration::from_secs(1200));
    r.w.sim.heal(cut);
    r.w.drive_until_equal(&all, Duration::from_secs(1800));
    r.check(&all, "after the partition");

    // MDA 5 crashes, updates go on, it restarts from its log and catches up.
    r.w.sim.node_mut(r.w.mdas[4]).role_mut().crash();
    for _ in 0..40 {
        r.random_op(&[0, 1, 2, 3]);
    }
    r.w.drive_until_acked(Duration::from_secs(1200));
    let records = r.w.stores[4].0.borrow().clone();
    let store = MemStore::default();
    store.0.borrow_mut().extend(records.iter().cloned());
    let role = Mda::new(
        "mda5b",
        cfg(4),
        Box::new(store.clone()),
        records,
        slp_sim::WALL,
    )
    .unwrap();
    let port = r.w.sim.port(r.w.lan, 5);
    r.w.mdas[4] = r.w.sim.add_role("mda5b", vec![port], role);
    r.w.stores[4] = store;
    r.w.drive_until_equal(&all, Duration::from_secs(1800));
    r.check(&all, "after the restart");

    assert_eq!(r.kinds.len(), 4, "{:?}", r.kinds);
    let stale: u64 = (0..N)
        .map(|i| {
            r.w.core(i)
                .counters()
                .get("mda.stale_update")
                .copied()
                .unwrap_or(0)
        })
        .sum();
    assert!(stale > 0, "late updates were resolved as stale somewhere");
    let forwarded: u64 = (0..N)
        .map(|i| {
            r.w.core(i)
                .counters()
                .get("mda.forwarded")
                .copied()
                .unwrap_or(0)
        })
        .sum();
    assert!(forwarded > 0);
    eprintln!(
        "{} operations {:?}, converged at {} (virtual)",
        r.sent.len(),
        r.kinds,
        r.w.sim.now()
    );
}
