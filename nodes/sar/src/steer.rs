//! A packet for us with a ROSA option: the option is checked (RFC 8200
//! §4.2 for every option beside it), the core decides
//! ([`crate::Sar::decide`]) and the frame is rewritten by
//! `stack::shim::edit` — destination to the chosen instance, next SAR,
//! ingress or client, source to us, entries filled in — and routed.
//!
//! ```text
//!   Destination Options ─ rosa_option ─► refused (malformed, duplicate, unknown
//!        │                               must-not-skip option: Parameter Problem)
//!        └► Message ─ unknown entry ─► refused
//!             └► default policy (re-signed) ─► SAG hand-over ─► Sar::decide ─► Action
//!   Action ─► rewrite(target, fill) ─► Forwarder::route, or the gateway takes it
//! ```

use std::net::{IpAddr, Ipv6Addr};

use svcroute_stack::shim::edit::{self, AddrField, Fragment, Layout};
use svcroute_stack::wire::auth::AuthCheck;
use svcroute_stack::wire::ipv6opt::{self, OptionRepr, OptionType, UnknownAction};
use svcroute_stack::wire::rosa::{Constraint, Entry, Message, MessageKind};
use svcroute_stack::wire::Error as WireError;

use crate::config::{Facing, Settings};
use crate::datapath::{export, DataPath};
use crate::decide::{Action, DropReason, Fill, PacketView, PortKind};
use crate::forward::{addr_at, Verdict};
use crate::icmp::{ErrorKind, ETH_LEN};
use crate::sag::encap;

impl DataPath<'_> {
    /// A packet for us carrying a ROSA option: the core decides, the shim
    /// edits. `None`: no ROSA option, deliver it to smoltcp.
    pub(crate) fn rosa(
        &mut self,
        port: usize,
        frame: &mut Vec<u8>,
        layout: &Layout,
    ) -> Option<Verdict> {
        let at = layout.dest_opts.as_ref()?;
        let data = match rosa_option(&frame[at.range.clone()], at.range.start - ETH_LEN) {
            Ok(found) => found?,
            Err(refusal) => {
                if let OptionRefusal::Unrecognized {
                    pointer,
                    icmp: true,
                } = refusal
                {
                    let kind = ErrorKind::UnrecognizedOption { pointer };
                    self.fwd.icmp_error(self.now, self.stats, kind, port, frame);
                }
                return Some(Verdict::Drop(refusal.reason()));
            }
        };
        self.core.as_ref()?;
        if layout.fragment != Fragment::Whole {
            return Some(Verdict::Drop("sar.rosa_fragment"));
        }
        let mut msg = match Message::from_bytes(&data) {
            Ok(m) => m,
            // Inside an option (≤ 255 octets) only a name can be too long.
            Err(WireError::TooLong) => return Some(Verdict::Drop("sar.rosa_name_too_long")),
            Err(_) => return Some(Verdict::Drop("sar.rosa_malformed")),
        };
        // The codec keeps unknown entry types (so they survive a round
        // trip); a SAR refuses them: it cannot know what an entry it does
        // not understand would ask of it, and an announcement is installed
        // only whole.
        if msg
            .entries
            .iter()
            .any(|e| matches!(e, Entry::Unknown { .. }))
        {
            return Some(Verdict::Drop("sar.rosa_unknown_entry"));
        }
        // A second ROSA option in an earlier Destination Options header
        // (before a Routing header, say): which one counts is as ambiguous
        // as two in one header.
        if rosa_before(frame, at.range.start) {
            return Some(Verdict::Drop("sar.rosa_duplicate_option"));
        }
        // A request or response this hop would forward with its last hop
        // is refused before the core decides: a round-robin slot or a
        // hand-over must not be spent on a packet that goes nowhere.
        let forwarded = matches!(msg.kind, MessageKind::Request | MessageKind::Response);
        if forwarded && frame[ETH_LEN + 7] <= 1 {
            let kind = ErrorKind::HopLimitExceeded;
            self.fwd.icmp_error(self.now, self.stats, kind, port, frame);
            return Some(Verdict::Drop("sar.hop_limit_exceeded"));
        }
        let src = addr_at(frame, ETH_LEN + 8);
        let dst = addr_at(frame, ETH_LEN + 24);
        let mut kind = match self.s.ports[port].facing {
            Facing::Clients if self.s.ports[port].instances => PortKind::Client,
            Facing::Clients => PortKind::ClientOnly,
            Facing::Sars => PortKind::Sar,
        };
        if let Some(m) = with_default_policy(self.s, src, &msg) {
            msg = m;
        }
        match self.take_handover(frame, &mut msg) {
            Ok(true) => kind = PortKind::Client,
            Ok(false) => {}
            Err(reason) => return Some(Verdict::Drop(reason)),
        }
        let view = PacketView {
            src: IpAddr::V6(src),
            dst: IpAddr::V6(dst),
            rosa: &msg,
            port: kind,
        };
        let core = self.core.as_deref_mut()?;
        let action = core.decide(self.now, &view);
        export(core, self.stats);
        let me = IpAddr::V6(core.address());
        if let Some(v) = self.hand_to_gateway(port, frame, &msg, &action, me) {
            return Some(v);
        }
        let (target, fill) = match action {
            Action::Consumed => return Some(Verdict::Consume),
            Action::Drop(reason) => {
                if reason == DropReason::NoRoute && msg.kind == MessageKind::Request {
                    self.fwd
                        .icmp_error(self.now, self.stats, ErrorKind::NoRoute, port, frame);
                }
                // The core counted it (drop.sar.<reason>).
                return Some(Verdict::Consume);
            }
            Action::NotForUs => return Some(self.route(port, frame)),
            Action::ToInstance { instance, fill, .. } | Action::DeliverLocal { instance, fill } => {
                (instance, fill)
            }
            Action::ToNextSar { sar, fill, .. } => (sar, fill),
            Action::ResponseToIngress { ingress } => (ingress, Fill::default()),
            Action::ResponseToClient { client } => {
                if let Some(v) = self.give_back(port, frame, &msg, me) {
                    return Some(v);
                }
                (client, Fill::default())
            }
        };
        Some(self.rewrite(port, frame, &msg, fill, target, me, false))
    }

    /// Fill the option's entries, set destination `target` and source `me`,
    /// and route the result (inside UDP 7471 to `target` if `encap`).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn rewrite(
        &mut self,
        port: usize,
        frame: &mut Vec<u8>,
        msg: &Message,
        fill: Fill,
        target: IpAddr,
        me: IpAddr,
        encap: bool,
    ) -> Verdict {
        let IpAddr::V6(target6) = target else {
            return Verdict::Drop("sar.rosa_ipv4_target");
        };
        if self.fwd.owner_of(target6).is_some() {
            return Verdict::Drop("sar.rosa_target_is_us");
        }
        let orig = frame.clone();
        if fill != Fill::default() {
            let mut m = msg.clone();
            if let Some(c) = fill.client {
                m.set(Entry::Client(c));
            }
            if let Some(i) = fill.ingress {
                m.set(Entry::Ingress(i));
            }
            let Ok(bytes) = m.to_bytes() else {
                return Verdict::Drop("sar.rosa_too_long");
            };
            let Ok(opt) = OptionRepr::new(OptionType::Rosa, &bytes) else {
                return Verdict::Drop("sar.rosa_too_long");
            };
            if edit::insert_dest_opts(frame, &[opt]).is_err() {
                return Verdict::Drop("sar.rosa_edit_failed");
            }
        }
        if edit::rewrite_addr(frame, AddrField::Dst, target).is_err()
            || edit::rewrite_addr(frame, AddrField::Src, me).is_err()
        {
            *frame = orig;
            return Verdict::Drop("sar.rosa_edit_failed");
        }
        self.stats.bump("sar.rosa_rewritten");
        if let (true, IpAddr::V6(me6)) = (encap, me) {
            let Some(f) = encap::encapsulate(frame, me6, target6) else {
                *frame = orig;
                return Verdict::Drop("sag.encap_too_big");
            };
            self.stats.bump("sag.encap_tx");
            *frame = f;
        }
        let growth = frame.len().saturating_sub(orig.len());
        self.fwd
            .route(self.now, self.stats, port, frame, Some(&orig), growth)
    }
}

/// Why the Destination Options header of a packet for us is refused
/// before the core sees its ROSA option.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OptionRefusal {
    /// The header or one of its options does not parse.
    Malformed,
    /// Two ROSA options: which one would count is ambiguous (as two Service
    /// entries would be, docs/wire/rosa.md).
    Duplicate,
    /// An option we do not know whose action bits say discard (RFC 8200
    /// §4.2); `icmp`: answer Parameter Problem code 2 at `pointer` (bits
    /// `10`, and `11`, since the destination is our unicast address).
    Unrecognized { pointer: u32, icmp: bool },
}

impl OptionRefusal {
    /// The drop reason (`drop.sar.*`).
    const fn reason(self) -> &'static str {
        match self {
            Self::Malformed => "sar.rosa_malformed",
            Self::Duplicate => "sar.rosa_duplicate_option",
            Self::Unrecognized { .. } => "sar.dest_opts_unknown_option",
        }
    }
}

/// The ROSA option data in `hdr`, a Destination Options header that starts
/// `offset` octets into an IPv6 packet addressed to us; `Ok(None)` if it
/// has none. We are the destination, so RFC 8200 §4.2 applies to every
/// option: one we do not know whose action bits are not "skip" discards
/// the packet, whichever position it has.
fn rosa_option(hdr: &[u8], offset: usize) -> Result<Option<Vec<u8>>, OptionRefusal> {
    let hdr = ipv6opt::Packet::new_checked(hdr).map_err(|_| OptionRefusal::Malformed)?;
    let mut options = hdr.options_iter();
    let mut found = None;
    loop {
        // The options area starts 2 octets into the header.
        let pointer = u32::try_from(offset + 2 + options.position()).unwrap_or(u32::MAX);
        let Some(opt) = options.next() else {
            break;
        };
        match opt.map_err(|_| OptionRefusal::Malformed)? {
            OptionRepr::Rosa(d) => {
                if found.replace(d.as_bytes().to_vec()).is_some() {
                    return Err(OptionRefusal::Duplicate);
                }
            }
            OptionRepr::Unknown { option_type, .. } => {
                match OptionType::from(option_type).unknown_action() {
                    UnknownAction::Skip => {}
                    UnknownAction::Discard => {
                        return Err(OptionRefusal::Unrecognized {
                            pointer,
                            icmp: false,
                        })
                    }
                    UnknownAction::DiscardIcmp | UnknownAction::DiscardIcmpUnlessMulticast => {
                        return Err(OptionRefusal::Unrecognized {
                            pointer,
                            icmp: true,
                        })
                    }
                }
            }
            OptionRepr::Pad1 | OptionRepr::PadN(_) | OptionRepr::Sticky(_) => {}
        }
    }
    Ok(found)
}

/// Whether a Destination Options header that starts before `last` (the
/// one in front of the upper layer) holds a ROSA option.
fn rosa_before(frame: &[u8], last: usize) -> bool {
    let mut nh = frame[ETH_LEN + 6];
    let mut at = ETH_LEN + 40;
    while at < last {
        let Some(h) = frame.get(at..at + 2) else {
            return false;
        };
        let len = match nh {
            // Hop-by-Hop, Routing, Destination Options.
            0 | 43 | 60 => (usize::from(h[1]) + 1) * 8,
            // Fragment.
            44 => 8,
            // Authentication Header (RFC 4302: 4-octet units, minus 2).
            51 => (usize::from(h[1]) + 2) * 4,
            _ => return false,
        };
        if nh == 60 {
            let has_rosa = frame
                .get(at..at + len)
                .and_then(|b| ipv6opt::Packet::new_checked(b).ok())
                .is_some_and(|p| {
                    p.options_iter()
                        .any(|o| matches!(o, Ok(OptionRepr::Rosa(_))))
                });
            if has_rosa {
                return true;
            }
        }
        nh = h[0];
        at += len;
    }
    false
}

/// An announcement at this SAR without a mode+policy gets the configured
/// default; a good tag is re-made with the same key (the SAR holds it).
fn with_default_policy(s: &Settings, src: Ipv6Addr, msg: &Message) -> Option<Message> {
    let (mode, policy) = s.default_policy?;
    if msg.kind != MessageKind::Announcement
        || msg.constraints().and_then(|c| c.mode_policy()).is_some()
    {
        return None;
    }
    let key = if s.announce_keys.is_empty() {
        None
    } else {
        match msg.verify(src, |id| s.announce_keys.get(&id).map(Vec::as_slice)) {
            AuthCheck::Good(id) => Some(id),
            // The core refuses it and counts why.
            _ => return None,
        }
    };
    let mut m = msg.clone();
    let mut c = m.constraints().cloned().unwrap_or_default();
    c.0.insert(0, Constraint::ModePolicy { mode, policy });
    m.set(Entry::Constraint(c));
    if let Some(id) = key {
        m.sign(id, s.announce_keys.get(&id)?, src).ok()?;
    }
    m.check().ok()?;
    Some(m)
}

#[cfg(test)]
pub(crate) mod tests {
    use smoltcp::wire::EthernetAddress;
    use svcroute_stack::runtime::PortConfig;
    use svcroute_stack::wire::rosa::{Constraints, Mode, Policy};

    use super::*;
    use crate::config::SarConfig;

    /// Settings of SAR `s1` with one port (fd00:a::1/64) and `extra`
    /// `[sar]` lines.
    pub(crate) fn settings(extra: &str) -> Settings {
        let cfg: SarConfig = toml::from_str(&format!("router_id = 1\n{extra}")).unwrap();
        let port = PortConfig {
            name: "eth0".into(),
            mac: EthernetAddress([2, 0, 0, 0, 0, 1]),
            addrs: vec!["fd00:a::1/64".parse().unwrap()],
            gateways: Vec::new(),
            mtu: 1500,
            max_burst: None,
            random_seed: None,
        };
        cfg.settings("s1", &[port]).unwrap()
    }

    /// An announcement of `svc.example` with `constraints`.
    pub(crate) fn announcement(constraints: Vec<Constraint>) -> Message {
        Message {
            kind: MessageKind::Announcement,
            entries: vec![
                Entry::Service("svc.example".parse().unwrap()),
                Entry::Constraint(Constraints(constraints)),
            ],
        }
    }

    #[test]
    fn the_default_policy_fills_announcements_without_one_and_re_signs() {
        let key = "00112233445566778899aabbccddeeff";
        let s = settings(&format!(
            "default_policy = \"scheduling/weighted\"\n\
             announce_keys = [{{ key_id = 3, secret = \"{key}\" }}]"
        ));
        let secret = s.announce_keys[&3].clone();
        let src: Ipv6Addr = "fd00:a::9".parse().unwrap();
        let mut m = announcement(vec![Constraint::Capability(5)]);
        m.sign(3, &secret, src).unwrap();
        let out = with_default_policy(&s, src, &m).expect("filled in");
        let c = out.constraints().unwrap();
        assert_eq!(c.mode_policy(), Some((Mode::Scheduling, Policy::Weighted)));
        assert_eq!(c.capability(), Some(5));
        assert_eq!(
            out.verify(src, |id| s.announce_keys.get(&id).map(Vec::as_slice)),
            AuthCheck::Good(3)
        );
        // A policy of its own is kept; a bad tag is left for the core to refuse.
        let mut own = announcement(vec![Constraint::ModePolicy {
            mode: Mode::Routing,
            policy: Policy::Shortest,
        }]);
        own.sign(3, &secret, src).unwrap();
        assert_eq!(with_default_policy(&s, src, &own), None);
        let mut forged = announcement(Vec::new());
        forged.sign(3, b"not the secret at all", src).unwrap();
        assert_eq!(with_default_policy(&s, src, &forged), None);
        // No default configured: nothing changes.
        assert_eq!(with_default_policy(&settings(""), src, &m), None);
    }
}
