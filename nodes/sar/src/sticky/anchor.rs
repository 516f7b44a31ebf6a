//! The egress's flows: where each client flow of an attached anycast
//! server came from, so replies can go back through the same ingress
//! (draft §5.1, tunnel mode), and so a moved UE keeps its transport
//! (**\[ext\]**, below).
//!
//! ```text
//!   to the server: (anycast, proto, server port, client port, flow label) ─► Flow
//!       first packet: anchor = current = the client's address; ingress = tunnel source
//!       later, from another address (the UE moved): current = it, source rewritten to anchor
//!   from the server: (anycast, proto, server port, anchor, client port) ─► Flow
//!       destination rewritten anchor → current; tunnelled to the flow's ingress
//! ```
//!
//! **Moved UEs [ext].** After a move the draft's UE has a new address, but
//! the server's TCP knows the old one. The egress, which sees every packet
//! of the flow, keeps the address the flow started with (the *anchor*)
//! and translates: the server keeps talking to the anchor, the UE to the
//! server from its new address. A flow is recognised by its ports and
//! flow label (the UE's shim keeps the label stable across the move).

use std::collections::HashMap;
use std::hash::BuildHasherDefault;
use std::net::Ipv6Addr;

use rustc_hash::FxHasher;

use super::tunnel::TunnelKind;

type Fx = BuildHasherDefault<FxHasher>;

/// A client flow as the server side sees it, minus the client address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FlowId {
    /// The anycast address.
    pub anycast: Ipv6Addr,
    /// TCP or UDP.
    pub proto: u8,
    /// The server's port.
    pub server_port: u16,
    /// The client's port.
    pub client_port: u16,
    /// The client's flow label.
    pub label: u32,
}

/// One flow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Flow {
    /// The client address the flow started with.
    pub anchor: Ipv6Addr,
    /// The client's address now.
    pub current: Ipv6Addr,
    /// The ingress its last packet came through, and the tunnel.
    pub ingress: Option<(Ipv6Addr, TunnelKind)>,
    /// Node time of its last packet, seconds.
    pub last: u32,
}

/// What [`Flows::to_server`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToServer {
    /// A new flow, remembered.
    New,
    /// A known flow from its anchor address.
    Known,
    /// A known flow from a new address: rewrite the source to `anchor`.
    Moved {
        /// The address the server knows.
        anchor: Ipv6Addr,
    },
    /// Not remembered: the table is full.
    Full,
}

/// The flows. See the module docs.
#[derive(Debug, Clone)]
pub struct Flows {
    timer_s: u32,
    max: usize,
    fwd: HashMap<FlowId, Flow, Fx>,
    /// (anycast, proto, server port, anchor, client port) → its label.
    rev: HashMap<(Ipv6Addr, u8, u16, Ipv6Addr, u16), u32, Fx>,
}

impl Flows {
    /// An empty table: flows live `timer_s` after their last packet, at
    /// most `max` of them.
    pub fn new(timer_s: u32, max: usize) -> Self {
        Self {
            timer_s,
            max,
            fwd: HashMap::default(),
            rev: HashMap::default(),
        }
    }

    /// Flows held.
    pub fn len(&self) -> usize {
        self.fwd.len()
    }

    /// Whether none is held.
    pub fn is_empty(&self) -> bool {
        self.fwd.is_empty()
    }

    /// A packet from `client` to the server, through `ingress` (`None`:
    /// not tunnelled).
    pub fn to_server(
        &mut self,
        id: FlowId,
        client: Ipv6Addr,
        ingress: Option<(Ipv6Addr, TunnelKind)>,
        now_s: u32,
    ) -> ToServer {
        let timer = self.timer_s;
        if let Some(f) = self.fwd.get_mut(&id) {
            if now_s.wrapping_sub(f.last) < timer {
                f.last = now_s;
                if ingress.is_some() {
                    f.ingress = ingress;
                }
                f.current = client;
                return if client == f.anchor {
                    ToServer::Known
                } else {
                    ToServer::Moved { anchor: f.anchor }
                };
            }
            let old = *f;
            self.rev.remove(&(
                id.anycast,
                id.proto,
                id.server_port,
                old.anchor,
                id.client_port,
            ));
            self.fwd.remove(&id);
        }
        if self.fwd.len() >= self.max {
            return ToServer::Full;
        }
        self.fwd.insert(
            id,
            Flow {
                anchor: client,
                current: client,
                ingress,
                last: now_s,
            },
        );
        self.rev.insert(
            (id.anycast, id.proto, id.server_port, client, id.client_port),
            id.label,
        );
        ToServer::New
    }

    /// A reply from the server of `anycast` to `client` (the anchor): the
    /// flow, if known and live.
    pub fn from_server(
        &mut self,
        anycast: Ipv6Addr,
        proto: u8,
        server_port: u16,
        client: Ipv6Addr,
        client_port: u16,
        now_s: u32,
    ) -> Option<Flow> {
        let label = *self
            .rev
            .get(&(anycast, proto, server_port, client, client_port))?;
        let id = FlowId {
            anycast,
            proto,
            server_port,
            client_port,
            label,
        };
        let f = self.fwd.get_mut(&id)?;
        if now_s.wrapping_sub(f.last) >= self.timer_s {
            return None;
        }
        f.last = now_s;
        Some(*f)
    }

    /// Drop flows whose timer ran out; how many.
    pub fn sweep(&mut self, now_s: u32) -> usize {
        let before = self.fwd.len();
        let timer = self.timer_s;
        self.fwd.retain(|_, f| now_s.wrapping_sub(f.last) < timer);
        let fwd = &self.fwd;
        self.rev.retain(|(a, p, sp, _, cp), label| {
            fwd.contains_key(&FlowId {
                anycast: *a,
                proto: *p,
                server_port: *sp,
                client_port: *cp,
                label: *label,
            })
        });
        before - self.fwd.len()
    }

    /// Every live flow.
    pub fn iter(&self, now_s: u32) -> impl Iterator<Item = (&FlowId, &Flow)> + '_ {
        self.fwd
            .iter()
            .filter(move |(_, f)| now_s.wrapping_sub(f.last) < self.timer_s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(s: &str) -> Ipv6Addr {
        s.parse().unwrap()
    }

    #[test]
    fn a_moved_client_is_translated_both_ways() {
        let mut f = Flows::new(300, 10);
        let id = FlowId {
            anycast: a("fd00:aa::1"),
            proto: 6,
            server_port: 80,
            client_port: 40000,
            label: 0x1234,
        };
        let ra = Some((a("fd00:a::1"), TunnelKind::Ipip));
        let rb = Some((a("fd00:b::1"), TunnelKind::Ipip));
        assert_eq!(f.to_server(id, a("fd00:1::5"), ra, 0), ToServer::New);
        assert_eq!(f.to_server(id, a("fd00:1::5"), ra, 1), ToServer::Known);
        let back = f
            .from_server(id.anycast, 6, 80, a("fd00:1::5"), 40000, 1)
            .unwrap();
        assert_eq!((back.current, back.ingress), (a("fd00:1::5"), ra));
        // The UE moved to Rb's segment with a new address.
        assert_eq!(
            f.to_server(id, a("fd00:2::5"), rb, 2),
            ToServer::Moved {
                anchor: a("fd00:1::5")
            }
        );
        let back = f
            .from_server(id.anycast, 6, 80, a("fd00:1::5"), 40000, 2)
            .unwrap();
        assert_eq!((back.current, back.ingress), (a("fd00:2::5"), rb));
        // Another label on the same ports is another flow.
        let other = FlowId { label: 0x999, ..id };
        assert_eq!(f.to_server(other, a("fd00:3::5"), None, 2), ToServer::New);
        assert_eq!(f.len(), 2);
    }

    #[test]
    fn flows_expire_and_the_cap_holds() {
        let mut f = Flows::new(10, 1);
        let id = FlowId {
            anycast: a("fd00:aa::1"),
            proto: 17,
            server_port: 53,
            client_port: 1,
            label: 1,
        };
        assert_eq!(f.to_server(id, a("fd00:1::5"), None, 0), ToServer::New);
        assert_eq!(
            f.to_server(FlowId { label: 2, ..id }, a("fd00:1::6"), None, 0),
            ToServer::Full
        );
        assert!(f
            .from_server(id.anycast, 17, 53, a("fd00:1::5"), 1, 10)
            .is_none());
        assert_eq!(f.sweep(10), 1);
        assert!(f.is_empty());
        // Expired, the same id starts afresh with a new anchor.
        assert_eq!(f.to_server(id, a("fd00:9::9"), None, 20), ToServer::New);
    }
}
