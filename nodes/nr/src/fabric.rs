//! The NR's model of the path-based fabric (SPEC §1.1) and path computation.
//!
//! The fabric is a directed graph of fwd nodes whose edges are link IDs (one
//! pathID bit each). nSFFs and the NR hang off fwd nodes by two more links:
//! `link_out` (node → fwd) and `link_in` (fwd → node; the bit that makes the
//! fwd deliver to the node). A path from endpoint A to endpoint B is
//!
//! ```text
//!   A.link_out | shortest fwd path A.at → B.at | B.link_in
//! ```
//!
//! over links that are up, shortest by hop count (breadth-first search;
//! among equally short paths the one found first when every node's links
//! are tried in increasing link-ID order, so the answer is deterministic).
//! A path from an endpoint to itself is the empty pathID.

use std::collections::{BTreeMap, VecDeque};

use svcroute_stack::wire::gff::PathId;
use svcroute_stack::wire::nr::NsffId;

/// Where a node (an nSFF or the NR) attaches to the fabric.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attach {
    /// The fwd node.
    pub at: String,
    /// Link ID fwd → node.
    pub link_in: u8,
    /// Link ID node → fwd.
    pub link_out: u8,
}

/// A path's end.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Endpoint {
    /// The NR itself.
    Nr,
    /// An nSFF.
    Nsff(NsffId),
}

/// A link event named a link the fabric does not have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UnknownLink(pub u8);

/// The fabric: fwd nodes, their directed links, attachments, link states.
#[derive(Debug, Clone)]
pub struct Fabric {
    own: Attach,
    nsffs: BTreeMap<NsffId, Attach>,
    /// fwd node → (link ID, next fwd node), sorted by link ID.
    adj: BTreeMap<String, Vec<(u8, String)>>,
    /// Every configured link ID.
    known: PathId,
    /// Links reported down.
    down: PathId,
}

impl Fabric {
    /// A fabric from validated configuration (link IDs unique).
    pub fn new(
        own: Attach,
        nsffs: BTreeMap<NsffId, Attach>,
        links: Vec<(String, String, u8)>,
    ) -> Self {
        let mut known = PathId::link(own.link_in).with(own.link_out);
        for a in nsffs.values() {
            known = known.with(a.link_in).with(a.link_out);
        }
        let mut adj: BTreeMap<String, Vec<(u8, String)>> = BTreeMap::new();
        for (from, to, id) in links {
            known.set_bit(id);
            adj.entry(from).or_default().push((id, to));
        }
        for v in adj.values_mut() {
            v.sort();
        }
        Self {
            own,
            nsffs,
            adj,
            known,
            down: PathId::ZERO,
        }
    }

    /// Where the NR attaches.
    pub fn own(&self) -> &Attach {
        &self.own
    }

    /// The nSFFs the fabric knows, in ID order.
    pub fn nsffs(&self) -> impl Iterator<Item = (NsffId, &Attach)> + '_ {
        self.nsffs.iter().map(|(id, a)| (*id, a))
    }

    /// Whether `nsff` attaches somewhere.
    pub fn knows(&self, nsff: NsffId) -> bool {
        self.nsffs.contains_key(&nsff)
    }

    /// Every configured link ID as a set.
    pub fn known_links(&self) -> PathId {
        self.known
    }

    /// The links reported down.
    pub fn down_links(&self) -> PathId {
        self.down
    }

    /// The directed links between fwd nodes: (from, to, id), by node then ID.
    pub fn links(&self) -> impl Iterator<Item = (&str, &str, u8)> + '_ {
        self.adj.iter().flat_map(|(from, v)| {
            v.iter()
                .map(move |(id, to)| (from.as_str(), to.as_str(), *id))
        })
    }

    /// Record link `id` as up or down; returns whether its state changed.
    pub fn set_link(&mut self, id: u8, up: bool) -> Result<bool, UnknownLink> {
        if !self.known.bit(id) {
            return Err(UnknownLink(id));
        }
        let was_up = !self.down.bit(id);
        if up {
            self.down.clear_bit(id);
        } else {
            self.down.set_bit(id);
        }
        Ok(was_up != up)
    }

    /// The pathID from `from` to `to` over links that are up, if any.
    pub fn path(&self, from: Endpoint, to: Endpoint) -> Option<PathId> {
        if from == to {
            return Some(PathId::ZERO);
        }
        let a = self.attach(from)?;
        let b = self.attach(to)?;
        if self.down.bit(a.link_out) || self.down.bit(b.link_in) {
            return None;
        }
        let middle = self.fwd_path(&a.at, &b.at)?;
        Some(middle.with(a.link_out).with(b.link_in))
    }

    fn attach(&self, e: Endpoint) -> Option<&Attach> {
        match e {
            Endpoint::Nr => Some(&self.own),
            Endpoint::Nsff(id) => self.nsffs.get(&id),
        }
    }

    /// Breadth-first search over up links between fwd nodes.
    fn fwd_path(&self, from: &str, to: &str) -> Option<PathId> {
        if from == to {
            return Some(PathId::ZERO);
        }
        // node → (previous node, link ID used to reach it)
        let mut prev: BTreeMap<&str, (&str, u8)> = BTreeMap::new();
        let mut queue = VecDeque::from([from]);
        while let Some(n) = queue.pop_front() {
            let Some(next) = self.adj.get(n) else {
                continue;
            };
            for (id, m) in next {
                if self.down.bit(*id) || m == from || prev.contains_key(m.as_str()) {
                    continue;
                }
                prev.insert(m, (n, *id));
                if m == to {
                    let mut path = PathId::ZERO;
                    let mut at = to;
                    while at != from {
                        // NOTE: every node on the chain back was inserted with its predecessor.
                        let (p, link) = prev.get(at)?;
                        path.set_bit(*link);
                        at = p;
                    }
                    return Some(path);
                }
                queue.push_back(m);
            }
        }
        None
    }
}

#[cfg(test)]
mod test {
    use super::*;

    fn id(v: u8) -> NsffId {
        NsffId::new(v).unwrap()
    }

    fn at(node: &str, link_in: u8, link_out: u8) -> Attach {
        Attach {
            at: node.into(),
            link_in,
            link_out,
        }
    }

    /// f1 ⇄ f2 ⇄ f3 and a long way f1 → f4 → f3; NR on f1, nSFF 1 on f1,
    /// nSFF 2 on f3.
    fn fabric() -> Fabric {
        let links = [
            ("f1", "f2", 10),
            ("f2", "f1", 11),
            ("f2", "f3", 12),
            ("f3", "f2", 13),
            ("f1", "f4", 14),
            ("f4", "f3", 15),
        ]
        .map(|(a, b, i)| (a.to_owned(), b.to_owned(), i))
        .to_vec();
        let nsffs = BTreeMap::from([(id(1), at("f1", 2, 3)), (id(2), at("f3", 4, 5))]);
        Fabric::new(at("f1", 0, 1), nsffs, links)
    }

    #[test]
    fn shortest_paths_and_detours() {
        let mut f = fabric();
        let (n1, n2) = (Endpoint::Nsff(id(1)), Endpoint::Nsff(id(2)));
        let fwd = PathId::link(3).with(10).with(12).with(4);
        assert_eq!(f.path(n1, n2), Some(fwd));
        assert_eq!(
            f.path(n2, n1),
            Some(PathId::link(5).with(13).with(11).with(2))
        );
        assert_eq!(f.path(Endpoint::Nr, n1), Some(PathId::link(1).with(2)));
        assert_eq!(f.path(n1, n1), Some(PathId::ZERO));
        assert_eq!(f.set_link(12, false), Ok(true));
        assert_eq!(f.set_link(12, false), Ok(false));
        assert_eq!(
            f.path(n1, n2),
            Some(PathId::link(3).with(14).with(15).with(4))
        );
        assert_eq!(f.set_link(13, false), Ok(true));
        assert_eq!(f.path(n2, n1), None);
        assert_eq!(f.set_link(99, false), Err(UnknownLink(99)));
        assert_eq!(f.set_link(12, true), Ok(true));
        assert_eq!(f.path(n1, n2), Some(fwd));
        // An attachment link down cuts its node off.
        f.set_link(4, false).unwrap();
        assert_eq!(f.path(n1, n2), None);
        assert_eq!(f.path(Endpoint::Nsff(id(9)), n1), None);
    }
}
