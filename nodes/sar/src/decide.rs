//! Request and response decisions of SPEC §2.3 (draft §3.4 Figure 4), as
//! pure functions over a parsed packet view. The SAR core adds the FIB
//! lookup and the policy pick ([`crate::Sar::decide`]); the driver does the
//! IPv6 surgery (`stack::shim::edit`: rewrite the destination — and the
//! source to the SAR's own address —, set the entries named in [`Fill`],
//! re-emit the option) and forwards.
//!
//! | message      | arrives                       | action |
//! |--------------|-------------------------------|--------|
//! | any          | destination not ours          | [`Action::NotForUs`]: plain IPv6 forwarding |
//! | request      | client port, client-facing SAR | pick by the service's steering: [`Action::ToInstance`] (scheduled), [`Action::ToNextSar`] (routed), [`Action::DeliverLocal`] (the instance is ours); Client/Ingress filled in if absent |
//! | request      | SAR port                      | route: [`Action::DeliverLocal`] or [`Action::ToNextSar`] (never back to the SAR it came from) |
//! | response     | any port                      | Ingress ours: [`Action::ResponseToClient`], else [`Action::ResponseToIngress`] |
//! | announcement, withdrawal | client port       | installed or removed: [`Action::Consumed`] |
//!
//! Anything else is [`Action::Drop`] with a [`DropReason`], counted as
//! `drop.sar.<reason>`.

use std::net::IpAddr;

use svcroute_stack::wire::igp::RouterId;
use svcroute_stack::wire::rosa::{Message, MessageKind, ServiceName};

/// Which kind of port a packet came in on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PortKind {
    /// Facing clients and service instances.
    Client,
    /// Facing clients only (not in `instance_ports`): requests as from
    /// [`PortKind::Client`], announcements refused.
    ClientOnly,
    /// Facing other SARs (or the SAG).
    Sar,
}

/// What the decision needs of a packet: its addresses, its parsed ROSA
/// option and the port it came in on.
#[derive(Debug, Clone, Copy)]
pub struct PacketView<'a> {
    /// IPv6 (or IPv4) source.
    pub src: IpAddr,
    /// Destination.
    pub dst: IpAddr,
    /// The ROSA option.
    pub rosa: &'a Message,
    /// Where it came in.
    pub port: PortKind,
}

/// Entries the driver adds to a request before forwarding (they were
/// absent; a client-facing ingress fills them in).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Fill {
    /// Set the Client entry to this.
    pub client: Option<IpAddr>,
    /// Set the Ingress entry to this.
    pub ingress: Option<IpAddr>,
}

/// What to do with a ROSA packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Action {
    /// Request: rewrite the destination to `instance` (a scheduling choice
    /// at the ingress, or an ingress decision by App-Metrics cost).
    ToInstance {
        /// The chosen instance.
        instance: IpAddr,
        /// The SAR it announced at.
        origin: RouterId,
        /// Entries to fill in.
        fill: Fill,
    },
    /// Request: rewrite the destination to the next SAR on the path to the
    /// best instance.
    ToNextSar {
        /// The next SAR's address.
        sar: IpAddr,
        /// Its router ID.
        router: RouterId,
        /// The instance the path leads to (informational: each SAR on the
        /// path decides again, consistently).
        instance: IpAddr,
        /// Entries to fill in.
        fill: Fill,
    },
    /// Request: the chosen instance is attached here: rewrite the
    /// destination to it and send it on the client port.
    DeliverLocal {
        /// The local instance.
        instance: IpAddr,
        /// Entries to fill in.
        fill: Fill,
    },
    /// Response: rewrite the destination to the client's ingress SAR.
    ResponseToIngress {
        /// The Ingress entry.
        ingress: IpAddr,
    },
    /// Response: we are the ingress: rewrite the destination to the client.
    ResponseToClient {
        /// The Client entry.
        client: IpAddr,
    },
    /// An announcement or withdrawal, taken into the tables.
    Consumed,
    /// Not addressed to us: ordinary IPv6 forwarding.
    NotForUs,
    /// Drop (counted).
    Drop(DropReason),
}

/// Why a ROSA packet was dropped. [`DropReason::reason`] is its counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DropReason {
    /// A request without a Service entry.
    NoService,
    /// A request from a SAR port, or a response, without a Client entry.
    NoClient,
    /// A request from a SAR port, or a response, without an Ingress entry.
    NoIngress,
    /// No FIB entry (not even `*`) with a reachable instance.
    NoRoute,
    /// A request from a client port at a SAR that is not client facing.
    NotClientFacing,
    /// The next SAR is the one the request came from.
    Loop,
    /// An announcement or withdrawal from a SAR port (they come from
    /// instances; SARs flood them in the IGP).
    AnnouncementFromSar,
    /// An announcement or withdrawal on a client port that is not an
    /// instance port (`instance_ports`).
    AnnouncementNotInstancePort,
    /// A message kind we do not know.
    UnknownKind,
    /// An announcement or withdrawal refused.
    Announce(AnnounceError),
}

impl DropReason {
    /// The counter (`drop.sar.<reason>`).
    pub const fn reason(self) -> &'static str {
        match self {
            Self::NoService => "drop.sar.no_service",
            Self::NoClient => "drop.sar.no_client",
            Self::NoIngress => "drop.sar.no_ingress",
            Self::NoRoute => "drop.sar.no_route",
            Self::NotClientFacing => "drop.sar.not_client_facing",
            Self::Loop => "drop.sar.loop",
            Self::AnnouncementFromSar => "drop.sar.announcement_from_sar",
            Self::AnnouncementNotInstancePort => "drop.sar.announcement_not_instance_port",
            Self::UnknownKind => "drop.sar.unknown_kind",
            Self::Announce(e) => e.reason(),
        }
    }
}

/// Why an announcement or withdrawal was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AnnounceError {
    /// Keys are configured and it has no Auth entry.
    AuthMissing,
    /// The tag does not verify.
    AuthBad,
    /// The tag names a key we do not have.
    AuthUnknownKey,
    /// No Service entry.
    NoService,
    /// The FIB is full (a new service name).
    FibFull,
    /// The NHIB is full.
    NhibFull,
    /// The service has its maximum number of instances.
    ServiceFull,
    /// This SAR has its maximum number of local instances.
    LocalFull,
    /// The instance is an IPv4 address: no SAR can steer a request to it
    /// (the data path rewrites IPv6 only), so it is not installed.
    Ipv4Instance,
}

impl AnnounceError {
    /// The counter (`drop.sar.<reason>`).
    pub const fn reason(self) -> &'static str {
        match self {
            Self::AuthMissing => "drop.sar.announce_auth_missing",
            Self::AuthBad => "drop.sar.announce_auth_bad",
            Self::AuthUnknownKey => "drop.sar.announce_auth_unknown_key",
            Self::NoService => "drop.sar.announce_no_service",
            Self::FibFull => "drop.sar.fib_full",
            Self::NhibFull => "drop.sar.nhib_full",
            Self::ServiceFull => "drop.sar.service_instances_full",
            Self::LocalFull => "drop.sar.local_instances_full",
            Self::Ipv4Instance => "drop.sar.announce_ipv4_instance",
        }
    }
}

/// The first step of a decision, before any table is consulted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Classified<'a> {
    /// Decided already (responses, drops, not for us).
    Done(Action),
    /// A request to resolve.
    Request {
        /// The service asked for.
        service: &'a ServiceName,
        /// From a client port (the ingress schedules) or a SAR port (route).
        from_client: bool,
        /// Entries to fill in.
        fill: Fill,
    },
    /// An announcement or withdrawal for the tables.
    Control,
}

/// Classify a packet for a SAR whose addresses `is_mine` recognises and
/// whose own (Ingress) address is `me`.
pub fn classify<'a>(
    view: &PacketView<'a>,
    me: IpAddr,
    is_mine: impl Fn(IpAddr) -> bool,
) -> Classified<'a> {
    use Classified::Done;
    if !is_mine(view.dst) {
        return Done(Action::NotForUs);
    }
    let msg = view.rosa;
    match msg.kind {
        MessageKind::Request => {
            let Some(service) = msg.service() else {
                return Done(Action::Drop(DropReason::NoService));
            };
            let fill = match view.port {
                PortKind::Client | PortKind::ClientOnly => Fill {
                    client: msg.client().is_none().then_some(view.src),
                    ingress: msg.ingress().is_none().then_some(me),
                },
                PortKind::Sar => {
                    if msg.client().is_none() {
                        return Done(Action::Drop(DropReason::NoClient));
                    }
                    if msg.ingress().is_none() {
                        return Done(Action::Drop(DropReason::NoIngress));
                    }
                    Fill::default()
                }
            };
            Classified::Request {
                service,
                from_client: matches!(view.port, PortKind::Client | PortKind::ClientOnly),
                fill,
            }
        }
        MessageKind::Response => Done(response(msg, &is_mine)),
        MessageKind::Announcement | MessageKind::Withdrawal => match view.port {
            PortKind::Client => Classified::Control,
            PortKind::Sar => Done(Action::Drop(DropReason::AnnouncementFromSar)),
            PortKind::ClientOnly => Done(Action::Drop(DropReason::AnnouncementNotInstancePort)),
        },
        MessageKind::Unknown(_) => Done(Action::Drop(DropReason::UnknownKind)),
    }
}

/// A response addressed to us: to the client if we are its Ingress, else
/// on to the Ingress.
pub fn response(msg: &Message, is_mine: impl Fn(IpAddr) -> bool) -> Action {
    let Some(ingress) = msg.ingress() else {
        return Action::Drop(DropReason::NoIngress);
    };
    if !is_mine(ingress) {
        return Action::ResponseToIngress { ingress };
    }
    match msg.client() {
        Some(client) => Action::ResponseToClient { client },
        None => Action::Drop(DropReason::NoClient),
    }
}

/// The resolved choice for a request, as [`crate::Sar::resolve`] gives it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Choice {
    /// The instance.
    pub instance: IpAddr,
    /// The SAR it announced at.
    pub origin: RouterId,
    /// Picked by a scheduling policy (send straight to the instance).
    pub scheduled: bool,
    /// The instance is attached to this SAR.
    pub local: bool,
    /// The next SAR towards `origin` (routed, not local).
    pub next_sar: Option<(RouterId, IpAddr)>,
}

/// The action for a resolved request that came from `src`.
pub fn request_action(choice: &Choice, fill: Fill, src: IpAddr) -> Action {
    if choice.local {
        return Action::DeliverLocal {
            instance: choice.instance,
            fill,
        };
    }
    if choice.scheduled {
        return Action::ToInstance {
            instance: choice.instance,
            origin: choice.origin,
            fill,
        };
    }
    match choice.next_sar {
        Some((_, sar)) if sar == src => Action::Drop(DropReason::Loop),
        Some((router, sar)) => Action::ToNextSar {
            sar,
            router,
            instance: choice.instance,
            fill,
        },
        None => Action::Drop(DropReason::NoRoute),
    }
}

#[cfg(test)]
mod tests {
    use smoltcp::wire::IpProtocol;
    use svcroute_stack::wire::rosa::{Entry, FlowPort};

    use super::*;

    const ME: &str = "fd00::1";

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn mine(a: IpAddr) -> bool {
        a == ip(ME) || a == ip("10.0.0.1")
    }

    fn msg(kind: MessageKind, entries: Vec<Entry>) -> Message {
        Message { kind, entries }
    }

    fn request(client: bool, ingress: bool) -> Message {
        let mut e = vec![Entry::Service("svc.org/x".parse().unwrap())];
        if client {
            e.push(Entry::Client(ip("fd01::c")));
        }
        if ingress {
            e.push(Entry::Ingress(ip(ME)));
        }
        e.push(Entry::Port(FlowPort {
            proto: IpProtocol::Tcp,
            port: 80,
        }));
        msg(MessageKind::Request, e)
    }

    fn view<'a>(m: &'a Message, dst: &str, port: PortKind) -> PacketView<'a> {
        PacketView {
            src: ip("fd01::c"),
            dst: ip(dst),
            rosa: m,
            port,
        }
    }

    #[test]
    fn requests() {
        let m = request(false, false);
        let c = classify(&view(&m, ME, PortKind::Client), ip(ME), mine);
        assert_eq!(
            c,
            Classified::Request {
                service: m.service().unwrap(),
                from_client: true,
                fill: Fill {
                    client: Some(ip("fd01::c")),
                    ingress: Some(ip(ME)),
                },
            }
        );
        let m = request(true, true);
        let c = classify(&view(&m, "10.0.0.1", PortKind::Client), ip(ME), mine);
        assert!(matches!(c, Classified::Request { fill, .. } if fill == Fill::default()));
        // From a SAR, Client and Ingress must be there.
        for (cl, ing, want) in [
            (false, true, DropReason::NoClient),
            (true, false, DropReason::NoIngress),
        ] {
            let m = request(cl, ing);
            let c = classify(&view(&m, ME, PortKind::Sar), ip(ME), mine);
            assert_eq!(c, Classified::Done(Action::Drop(want)));
        }
        let m = request(true, true);
        assert!(matches!(
            classify(&view(&m, ME, PortKind::Sar), ip(ME), mine),
            Classified::Request {
                from_client: false,
                ..
            }
        ));
        // Not ours: plain forwarding; no service: drop.
        assert_eq!(
            classify(&view(&m, "fd00::99", PortKind::Sar), ip(ME), mine),
            Classified::Done(Action::NotForUs)
        );
        let m = msg(MessageKind::Request, vec![Entry::Client(ip("fd01::c"))]);
        assert_eq!(
            classify(&view(&m, ME, PortKind::Client), ip(ME), mine),
            Classified::Done(Action::Drop(DropReason::NoService))
        );
        let m = msg(MessageKind::Unknown(9), vec![]);
        assert_eq!(
            classify(&view(&m, ME, PortKind::Client), ip(ME), mine),
            Classified::Done(Action::Drop(DropReason::UnknownKind))
        );
    }

    #[test]
    fn responses() {
        let resp = |ingress: &str| {
            msg(
                MessageKind::Response,
                vec![
                    Entry::Client(ip("fd01::c")),
                    Entry::Ingress(ip(ingress)),
                    Entry::Service("svc.org".parse().unwrap()),
                    Entry::Instance(ip("fd02::9")),
                ],
            )
        };
        let m = resp("fd00::5");
        assert_eq!(
            classify(&view(&m, ME, PortKind::Client), ip(ME), mine),
            Classified::Done(Action::ResponseToIngress {
                ingress: ip("fd00::5")
            })
        );
        let m = resp(ME);
        assert_eq!(
            classify(&view(&m, ME, PortKind::Sar), ip(ME), mine),
            Classified::Done(Action::ResponseToClient {
                client: ip("fd01::c")
            })
        );
        let m = msg(MessageKind::Response, vec![Entry::Ingress(ip(ME))]);
        assert_eq!(response(&m, mine), Action::Drop(DropReason::NoClient));
        let m = msg(MessageKind::Response, vec![Entry::Client(ip(ME))]);
        assert_eq!(response(&m, mine), Action::Drop(DropReason::NoIngress));
    }

    #[test]
    fn announcements_only_from_client_ports() {
        for kind in [MessageKind::Announcement, MessageKind::Withdrawal] {
            let m = msg(kind, vec![]);
            assert_eq!(
                classify(&view(&m, ME, PortKind::Client), ip(ME), mine),
                Classified::Control
            );
            assert_eq!(
                classify(&view(&m, ME, PortKind::Sar), ip(ME), mine),
                Classified::Done(Action::Drop(DropReason::AnnouncementFromSar))
            );
            // A client port that is not an instance port refuses them too.
            assert_eq!(
                classify(&view(&m, ME, PortKind::ClientOnly), ip(ME), mine),
                Classified::Done(Action::Drop(DropReason::AnnouncementNotInstancePort))
            );
        }
        // Requests from it are still a client's.
        let m = request(false, false);
        match classify(&view(&m, ME, PortKind::ClientOnly), ip(ME), mine) {
            Classified::Request { from_client, .. } => assert!(from_client),
            c => panic!("{c:?}"),
        }
    }

    #[test]
    fn request_actions() {
        let base = Choice {
            instance: ip("fd02::9"),
            origin: RouterId(7),
            scheduled: false,
            local: false,
            next_sar: Some((RouterId(3), ip("fd00::3"))),
        };
        let fill = Fill::default();
        assert_eq!(
            request_action(&base, fill, ip("fd01::c")),
            Action::ToNextSar {
                sar: ip("fd00::3"),
                router: RouterId(3),
                instance: ip("fd02::9"),
                fill
            }
        );
        assert_eq!(
            request_action(&base, fill, ip("fd00::3")),
            Action::Drop(DropReason::Loop)
        );
        let sched = Choice {
            scheduled: true,
            ..base
        };
        assert_eq!(
            request_action(&sched, fill, ip("fd00::3")),
            Action::ToInstance {
                instance: ip("fd02::9"),
                origin: RouterId(7),
                fill
            }
        );
        let local = Choice {
            local: true,
            ..sched
        };
        assert_eq!(
            request_action(&local, fill, ip("fd00::3")),
            Action::DeliverLocal {
                instance: ip("fd02::9"),
                fill
            }
        );
        let lost = Choice {
            next_sar: None,
            ..base
        };
        assert_eq!(
            request_action(&lost, fill, ip("fd00::3")),
            Action::Drop(DropReason::NoRoute)
        );
    }
}
