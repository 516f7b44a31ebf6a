//! Shortest paths over the router-links LSAs (Dijkstra), and the
//! "virtual node behind all instances" of the draft's anycast extension of
//! multi-criteria routing (draft §3.5.2, SPEC §2.3).
//!
//! A link `u → v` of cost `c` (from `u`'s router-links LSA) is used only if
//! `v`'s LSA lists `u` too (the two-way check of OSPF), so a dead router's
//! stale LSA cannot attract traffic. Labels are `(cost, first hop)` compared
//! lexicographically: of several equal-cost paths the one leaving through
//! the lower router ID wins, so the result is deterministic.
//!
//! The best instance of a service is the shortest path to a virtual node
//! `V` with an edge `origin(i) → V` of cost `e(i)` per instance `i`: since
//! `V` has no other edges, `dist(V) = min_i dist(origin(i)) + e(i)`, which
//! is what [`crate::policy::route`] computes over the candidates using the
//! distances found here (the test `virtual_node_equals_min` checks the
//! two agree by running Dijkstra on the extended graph).

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::net::Ipv6Addr;

use svcroute_stack::wire::igp::{RouterId, RouterLinks};

/// The result for one destination router.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Path {
    /// Sum of link costs.
    pub cost: u64,
    /// The neighbour the path leaves through (the destination itself for a
    /// neighbour; `me` for `me`).
    pub first_hop: RouterId,
    /// The destination's own address (from its router-links LSA).
    pub addr: Ipv6Addr,
}

/// Dijkstra from `me` over `routers` (origin → its live router-links LSA).
/// Routers not reachable (or without an LSA) are absent from the result;
/// `me` is present with cost 0 if it has an LSA.
pub fn shortest_paths(
    me: RouterId,
    routers: &BTreeMap<RouterId, &RouterLinks>,
) -> BTreeMap<RouterId, Path> {
    let mut done: BTreeMap<RouterId, Path> = BTreeMap::new();
    let Some(mine) = routers.get(&me) else {
        return done;
    };
    let mut heap = BinaryHeap::new();
    heap.push(Reverse((0_u64, me, me, mine.address)));
    while let Some(Reverse((cost, first_hop, node, addr))) = heap.pop() {
        if done.contains_key(&node) {
            continue;
        }
        done.insert(
            node,
            Path {
                cost,
                first_hop,
                addr,
            },
        );
        let Some(lsa) = routers.get(&node) else {
            continue;
        };
        for link in &lsa.links {
            let v = link.neighbor;
            if done.contains_key(&v) {
                continue;
            }
            let Some(back) = routers.get(&v) else {
                continue;
            };
            if !back.links.iter().any(|l| l.neighbor == node) {
                continue;
            }
            let fh = if node == me { v } else { first_hop };
            let c = cost.saturating_add(u64::from(link.cost.max(1)));
            heap.push(Reverse((c, fh, v, back.address)));
        }
    }
    done
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use svcroute_stack::wire::igp::Link;

    use super::*;

    fn graph(n: u32, edges: &[(u32, u32, u32)]) -> BTreeMap<RouterId, RouterLinks> {
        let mut g: BTreeMap<RouterId, RouterLinks> = (0..n)
            .map(|i| {
                (
                    RouterId(i),
                    RouterLinks {
                        address: Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, i as u16),
                        links: vec![],
                        prefixes: vec![],
                    },
                )
            })
            .collect();
        for &(a, b, c) in edges {
            g.get_mut(&RouterId(a)).unwrap().links.push(Link {
                neighbor: RouterId(b),
                cost: c,
            });
            g.get_mut(&RouterId(b)).unwrap().links.push(Link {
                neighbor: RouterId(a),
                cost: c,
            });
        }
        g
    }

    fn refs(g: &BTreeMap<RouterId, RouterLinks>) -> BTreeMap<RouterId, &RouterLinks> {
        g.iter().map(|(k, v)| (*k, v)).collect()
    }

    #[test]
    fn diamond_with_tiebreak_and_two_way_check() {
        //   0 -1- 1 -1- 3
        //   0 -1- 2 -1- 3     (equal cost: first hop 1 wins)
        //   3 -1- 4 only in 3's LSA (4 does not list 3): unused
        let mut g = graph(5, &[(0, 1, 1), (1, 3, 1), (0, 2, 1), (2, 3, 1)]);
        g.get_mut(&RouterId(3)).unwrap().links.push(Link {
            neighbor: RouterId(4),
            cost: 1,
        });
        let p = shortest_paths(RouterId(0), &refs(&g));
        assert_eq!(p[&RouterId(0)].cost, 0);
        assert_eq!(p[&RouterId(3)].cost, 2);
        assert_eq!(p[&RouterId(3)].first_hop, RouterId(1));
        assert_eq!(p[&RouterId(2)].first_hop, RouterId(2));
        assert_eq!(
            p[&RouterId(3)].addr,
            Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 3)
        );
        assert!(!p.contains_key(&RouterId(4)));
        // Without our own LSA nothing is reachable.
        g.remove(&RouterId(0));
        assert!(shortest_paths(RouterId(0), &refs(&g)).is_empty());
    }

    /// Floyd–Warshall reference.
    #[allow(clippy::needless_range_loop)] // the textbook triple loop
    fn all_pairs(n: usize, edges: &[(u32, u32, u32)]) -> Vec<Vec<Option<u64>>> {
        let mut d = vec![vec![None; n]; n];
        for (i, row) in d.iter_mut().enumerate() {
            row[i] = Some(0);
        }
        for &(a, b, c) in edges {
            let c = u64::from(c.max(1));
            for (x, y) in [(a, b), (b, a)] {
                let e = &mut d[x as usize][y as usize];
                *e = Some(e.map_or(c, |v| v.min(c)));
            }
        }
        for k in 0..n {
            for i in 0..n {
                for j in 0..n {
                    if let (Some(a), Some(b)) = (d[i][k], d[k][j]) {
                        if d[i][j].is_none_or(|v| a + b < v) {
                            d[i][j] = Some(a + b);
                        }
                    }
                }
            }
        }
        d
    }

    fn arb_graph() -> impl Strategy<Value = (usize, Vec<(u32, u32, u32)>)> {
        (2_usize..12).prop_flat_map(|n| {
            let edge = (0..n as u32, 0..n as u32, 1_u32..20);
            (
                Just(n),
                proptest::collection::vec(edge, 0..30)
                    .prop_map(|v| v.into_iter().filter(|(a, b, _)| a != b).collect()),
            )
        })
    }

    proptest! {
        #[allow(clippy::needless_range_loop)]
        #[test]
        fn matches_floyd_warshall((n, edges) in arb_graph()) {
            let g = graph(n as u32, &edges);
            let d = all_pairs(n, &edges);
            for src in 0..n {
                let p = shortest_paths(RouterId(src as u32), &refs(&g));
                for dst in 0..n {
                    let got = p.get(&RouterId(dst as u32));
                    prop_assert_eq!(got.map(|x| x.cost), d[src][dst]);
                    if let Some(x) = got {
                        if dst != src {
                            // The first hop is a neighbour on a shortest path.
                            let fh = x.first_hop.0 as usize;
                            let link = edges.iter().filter(|(a, b, _)| {
                                (*a as usize == src && *b as usize == fh) || (*b as usize == src && *a as usize == fh)
                            }).map(|(_, _, c)| u64::from(*c)).min();
                            prop_assert_eq!(Some(link.unwrap() + d[fh][dst].unwrap()), d[src][dst]);
                        }
                    }
                }
            }
        }

        /// The virtual-node construction: Dijkstra on the graph extended by
        /// a node V behind every instance equals the min over instances.
        #[test]
        fn virtual_node_equals_min(
            (n, edges) in arb_graph(),
            instances in proptest::collection::vec((0_u32..12, 0_u32..10), 1..5),
        ) {
            let instances: Vec<(u32, u32)> = instances.into_iter().filter(|(o, _)| (*o as usize) < n).collect();
            prop_assume!(!instances.is_empty());
            let v = n as u32;
            let mut g = graph(n as u32 + 1, &edges);
            // Directed edges origin → V (cost e + 1 ≥ 1); V lists them back
            // so the two-way check passes, with cost "infinite" so no path
            // leaves V.
            for &(o, e) in &instances {
                g.get_mut(&RouterId(o)).unwrap().links.push(Link { neighbor: RouterId(v), cost: e + 1 });
                g.get_mut(&RouterId(v)).unwrap().links.push(Link { neighbor: RouterId(o), cost: u32::MAX });
            }
            let plain = shortest_paths(RouterId(0), &refs(&graph(n as u32, &edges)));
            let ext = shortest_paths(RouterId(0), &refs(&g));
            let want = instances.iter().filter_map(|(o, e)| plain.get(&RouterId(*o)).map(|p| p.cost + u64::from(*e) + 1)).min();
            prop_assert_eq!(ext.get(&RouterId(v)).map(|p| p.cost), want);
        }
    }
}
