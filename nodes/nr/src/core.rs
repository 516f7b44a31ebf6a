// Over 800 lines: the registration and discovery tables and the update rules between them (the table in the module doc) are one state machine.
//! The Name Resolver's protocol logic, sans-IO (STYLE 4, 5).
//!
//! [`NrCore`] holds the registration table (hash(FQDN) → FQDN, nSFF IDs),
//! the discovery table ((hash, requester) → what the requester was told) and
//! the fabric model. Call order:
//!
//! 1. [`NrCore::boot`] once, at the node's start (or [`NrCore::start`] to
//!    announce at once); [`NrCore::heard_fabric`] for every frame received
//!    on the fabric port; [`NrCore::handle_timeout`] whenever
//!    [`NrCore::poll_timeout`] is due;
//! 2. for each GFF packet addressed to the NR, [`NrCore::handle_message`];
//!    for each REST call, [`NrCore::register`] / [`NrCore::deregister`];
//!    operator commands such as [`NrCore::purge_all`] at any time;
//! 3. after each input, drain [`NrCore::poll_transmit`] until `None` and put
//!    every [`Transmit`] on the fabric; drain [`NrCore::take_stats`] into
//!    the node's counters.
//!
//! The core never reads a clock (`now` is an argument) and never touches a
//! socket. Every refusal and every dropped message is counted by reason.
//!
//! **Copies.** A lab's generated `nr_links` OR two link-disjoint paths to
//! the NR (docs/lab.md), so every registration, path request and link event
//! may arrive twice. A message identical, byte for byte, to one acted on
//! within `dedup_ms`, with no change to the registration table, the link
//! states or the discovery table's purge in between, is a copy: counted
//! `nr.duplicates_ignored` and dropped, so a path request is answered once
//! (and a request re-asked after an update is answered again). Copies that arrive later
//! are harmless anyway: a registration refreshes, a path request rewrites
//! the same discovery row ((name, requester) is its key) and is answered
//! again, a link event changes no state (`nr.link_events_repeated`), a
//! deregistration is refused (`drop.nr.not_registered`).
//!
//! Path updates (RFC 8677 §6.5; SPEC §1.2) go to *exactly* the nSFFs the
//! discovery table says are affected, in one packet over the OR of the
//! pathIDs to them. The NR mirrors what each recipient does with the update
//! (type 0: drop every entry resolved to a listed nSFF; type 1: drop every
//! entry whose forward or reverse pathID holds a listed link) on its own
//! discovery table, so the table keeps describing the nSFF caches.
//!
//! | event | affected | update |
//! |---|---|---|
//! | nSFF X deregisters name N | requesters of N that were told X | type 0 `[X]` |
//! | nSFF Y registers name N too | requesters of N for which the policy now picks another nSFF (Y) | type 0 `[their old serving nSFFs]` |
//! | link L down | requesters whose forward or reverse pathID holds L | type 1 `[L]` |
//! | link L up | requesters whose answer would now differ | type 0 `[their old serving nSFFs]` |
//! | discovery table overflowed, > 255 IDs, NR start, `purge-all` | every nSFF | type 0 `[255]` ALL NODES |

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use smoltcp::time::{Duration, Instant};
use svcroute_stack::stats::Counters;
use svcroute_stack::timer::TimerTable;
use svcroute_stack::wire::gff::{MessageType, PathId};
use svcroute_stack::wire::nr::{
    self, Fqdn, Ids, NsffId, PathRequest, PathResponse, PathUpdate, Registration, Repr, Resolution,
    Tlv, Tlvs, UpdateKind, ALL_NSFFS,
};

use svcroute_stack::wire::auth::{Keyring, Reject, DEFAULT_MAX_SENDERS, DEFAULT_WINDOW, SENDER_NR};

use crate::config::{ConfigError, KeyConfig, NrConfig};
use crate::fabric::{Endpoint, Fabric};

/// The start announcement goes out this long after the start at the latest
/// when nothing is heard on the fabric port before.
pub const ANNOUNCE_FALLBACK: Duration = Duration::from_secs(3);

svcroute_stack::timers! {
    /// The NR's timers.
    pub enum Timer {
        /// Nothing heard on the fabric since the start: announce anyway.
        AnnounceFallback,
        /// The earliest down link whose down state expires.
        LinkDownExpiry,
    }
}

/// A GFF packet the NR sends: the driver frames it (Ethernet, IPv6 with the
/// pathID as source ‖ destination, GFF header) and puts it on the fabric.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transmit {
    /// The pathID (OR of link IDs) to send over.
    pub path: PathId,
    /// The GFF type.
    pub msg_type: MessageType,
    /// The GFF payload: the NR message, signed when keys are configured.
    pub payload: Vec<u8>,
}

/// Why a registration or deregistration was refused. One exhaustive mapping
/// to the REST status ([`Refusal::status`]) and to a counter
/// ([`Refusal::reason`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Refusal {
    /// Another FQDN with the same 16-bit hash is registered.
    HashCollision,
    /// The registration table holds `max_names` names.
    NamesFull,
    /// The name has `max_instances` nSFFs.
    InstancesFull,
    /// The nSFF ID does not attach to the fabric (not in config).
    UnknownNsff,
    /// Deregistering something not registered.
    NotRegistered,
    /// The FQDN TLV does not hash to the message's hash.
    HashMismatch,
}

impl Refusal {
    /// The counter suffix (`drop.nr.<reason>`).
    pub const fn reason(self) -> &'static str {
        match self {
            Self::HashCollision => "nr.hash_collision",
            Self::NamesFull => "nr.names_full",
            Self::InstancesFull => "nr.instances_full",
            Self::UnknownNsff => "nr.unknown_nsff",
            Self::NotRegistered => "nr.not_registered",
            Self::HashMismatch => "nr.hash_mismatch",
        }
    }

    /// The REST status answering it.
    pub const fn status(self) -> u16 {
        match self {
            Self::HashCollision => 409,
            Self::NamesFull | Self::InstancesFull => 507,
            Self::UnknownNsff | Self::HashMismatch => 400,
            Self::NotRegistered => 404,
        }
    }
}

/// Why a GFF message to the NR was not acted on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MessageError {
    /// The payload does not parse.
    Malformed,
    /// Keys are configured and the message has no auth tag.
    AuthMissing,
    /// The tag names a key we do not have.
    AuthUnknownKey,
    /// The tag is wrong.
    AuthBad,
    /// A good tag, but no fresh sequence number: a replay, a stale or
    /// future one, none, or the replay table is full.
    Replay(Reject),
    /// A message type the NR does not take (responses, updates, transport).
    Unexpected,
    /// The requester is not attached to the fabric (not in config).
    UnknownRequester,
    /// No path from the NR to the requester.
    RequesterUnreachable,
    /// A link event for a link not in config.
    UnknownLink,
    /// A link event with a state other than up or down.
    BadLinkState,
    /// A registration or deregistration refused.
    Refused(Refusal),
}

impl MessageError {
    /// The counter suffix (`drop.<reason>`).
    pub const fn reason(self) -> &'static str {
        match self {
            Self::Malformed => "nr.malformed",
            Self::AuthMissing => "nr.auth_missing",
            Self::AuthUnknownKey => "nr.auth_unknown_key",
            Self::AuthBad => "nr.auth_bad",
            Self::Replay(r) => match r {
                Reject::Unsequenced => "nr.auth_unsequenced",
                Reject::Replayed => "nr.replayed",
                Reject::Stale => "nr.replay_stale",
                Reject::Future => "nr.replay_future",
                Reject::SendersFull => "nr.replay_senders_full",
                Reject::Unsigned => "nr.auth_missing",
                Reject::UnknownKey => "nr.auth_unknown_key",
                Reject::Bad => "nr.auth_bad",
                Reject::Malformed => "nr.malformed",
            },
            Self::Unexpected => "nr.unexpected_type",
            Self::UnknownRequester => "nr.unknown_requester",
            Self::RequesterUnreachable => "nr.requester_unreachable",
            Self::UnknownLink => "nr.unknown_link",
            Self::BadLinkState => "nr.bad_link_state",
            Self::Refused(r) => r.reason(),
        }
    }
}

/// What a successful registration did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Registered {
    /// A new name, or a new nSFF for a known name.
    Added,
    /// The nSFF was already registered for the name (soft state refreshed).
    Refreshed,
}

/// One name in the registration table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NameEntry {
    /// The FQDN, once some registration carried it (RFC-only nSFFs send the
    /// hash alone).
    pub fqdn: Option<Fqdn>,
    /// The nSFFs serving it.
    pub nsffs: BTreeSet<NsffId>,
    /// When it was first registered.
    pub since: Instant,
}

/// One discovery table row: what a requester was told about a name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Discovered {
    /// The serving nSFF.
    pub serving: NsffId,
    /// requester → serving.
    pub forward: PathId,
    /// serving → requester.
    pub reverse: PathId,
    /// When the answer was given.
    pub at: Instant,
}

/// A reachable nSFF serving the requested name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Candidate {
    /// The serving nSFF.
    pub nsff: NsffId,
    /// requester → it.
    pub forward: PathId,
    /// it → requester.
    pub reverse: PathId,
}

/// How the NR picks among several nSFFs serving one name (pluggable, SPEC §1.2).
pub trait Policy: core::fmt::Debug {
    /// The index in `candidates` (never empty, in nSFF ID order) to answer
    /// `requester` with.
    fn choose(&self, requester: NsffId, candidates: &[Candidate]) -> usize;
}

/// SPEC §1.2's policy: fewest links on the forward path, then lowest nSFF ID.
/// The requester itself, if it serves the name, has zero links and wins
/// (answer: serving = requester, empty pathIDs: deliver locally).
#[derive(Debug, Clone, Copy, Default)]
pub struct FewestLinks;

impl Policy for FewestLinks {
    fn choose(&self, _requester: NsffId, candidates: &[Candidate]) -> usize {
        candidates
            .iter()
            .enumerate()
            .min_by_key(|(_, c)| (c.forward.count(), c.nsff))
            .map_or(0, |(i, _)| i)
    }
}

#[derive(Debug, Clone, Copy)]
struct Limits {
    names: usize,
    instances: usize,
    discovery: usize,
    dedup: usize,
}

/// A GFF message acted on: its type and exact payload.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Seen {
    at: Instant,
    msg_type: MessageType,
    payload: Vec<u8>,
    /// It carried a sequence number: never to be acted on twice, so a
    /// table change does not forget it.
    signed: bool,
}

/// The Name Resolver. See the module documentation for the call order.
#[derive(Debug)]
pub struct NrCore {
    fabric: Fabric,
    limits: Limits,
    /// Keys, our sequence numbers and the replay guard.
    ring: Keyring,
    /// The latest `now` seen (what sent messages take their sequence
    /// numbers from), µs.
    clock_us: u64,
    announce_restart: bool,
    names: BTreeMap<u16, NameEntry>,
    discovery: BTreeMap<(u16, NsffId), Discovered>,
    /// A request could not be recorded: the table no longer describes every
    /// cache, so the next update goes to ALL NODES.
    discovery_overflow: bool,
    /// Messages acted on within the last `dedup_window`, oldest first.
    recent: VecDeque<Seen>,
    dedup_window: Duration,
    /// When each configured nSFF last sent a registration or path request.
    heard: BTreeMap<NsffId, Instant>,
    policy: Box<dyn Policy>,
    /// The start announcement waits for the first frame on the fabric port
    /// (or [`Timer::AnnounceFallback`]).
    announce_on_hearing: bool,
    /// Links a link event took down: when their down state expires unless
    /// a switch repeats it (`link_down_ttl_ms`).
    down_until: BTreeMap<u8, Instant>,
    link_down_ttl: Duration,
    timers: TimerTable<Timer>,
    out: VecDeque<Transmit>,
    stats: Counters,
}

impl NrCore {
    /// A resolver for `cfg` with the [`FewestLinks`] policy.
    pub fn new(cfg: &NrConfig) -> Result<Self, ConfigError> {
        let fabric = cfg.validate()?;
        Ok(Self {
            fabric,
            limits: Limits {
                names: cfg.max_names,
                instances: cfg.max_instances,
                discovery: cfg.max_discovery,
                dedup: cfg.max_dedup,
            },
            ring: Keyring::new(
                KeyConfig::pairs(&cfg.keys).map_err(ConfigError::BadKey)?,
                SENDER_NR,
                cfg.epoch_us,
            )
            .with_replay_limits(
                cfg.replay_max_age_s,
                DEFAULT_WINDOW,
                DEFAULT_MAX_SENDERS,
            ),
            clock_us: 0,
            announce_restart: cfg.announce_restart,
            names: BTreeMap::new(),
            discovery: BTreeMap::new(),
            discovery_overflow: false,
            recent: VecDeque::new(),
            dedup_window: Duration::from_millis(cfg.dedup_ms),
            heard: BTreeMap::new(),
            policy: Box::new(FewestLinks),
            announce_on_hearing: false,
            down_until: BTreeMap::new(),
            link_down_ttl: Duration::from_millis(cfg.link_down_ttl_ms),
            timers: TimerTable::default(),
            out: VecDeque::new(),
            stats: Counters::default(),
        })
    }

    /// Use `policy` to choose among serving nSFFs.
    pub fn with_policy(mut self, policy: Box<dyn Policy>) -> Self {
        self.policy = policy;
        self
    }

    /// The node starts: the NR's state is soft and was lost with the last
    /// process, so (if `announce_restart`) every nSFF is told to purge its
    /// cache (ALL NODES) and, per docs/nr.md, re-registers its SFs.
    pub fn start(&mut self, now: Instant) {
        self.tick(now);
        if self.announce_restart {
            self.purge_all();
        }
    }

    /// The node starts (`announce_restart`): the start announcement goes
    /// out when the first frame arrives on the fabric port (the fwd node's
    /// hellos come every second), not at once: a frame sent while the
    /// port's link is still coming up is lost without a trace. If nothing
    /// is heard for [`ANNOUNCE_FALLBACK`], it goes out anyway, and again
    /// when the first frame is heard.
    pub fn boot(&mut self, now: Instant) {
        if self.announce_restart {
            self.announce_on_hearing = true;
            self.timers
                .set(Timer::AnnounceFallback, now + ANNOUNCE_FALLBACK);
        }
    }

    /// A frame arrived on the fabric port: the port carries frames both
    /// ways now, so a start announcement waiting for that goes out
    /// (`true`: drain [`NrCore::poll_transmit`]).
    pub fn heard_fabric(&mut self, now: Instant) -> bool {
        self.tick(now);
        if !std::mem::take(&mut self.announce_on_hearing) {
            return false;
        }
        self.timers.stop(Timer::AnnounceFallback);
        self.start(now);
        true
    }

    /// When [`NrCore::handle_timeout`] is next due.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.timers.next_timeout()
    }

    /// Act on the timers due at `now` (a spurious call does nothing).
    pub fn handle_timeout(&mut self, now: Instant) {
        self.tick(now);
        while let Some(t) = self.timers.expire(now) {
            match t {
                // Nothing heard yet: announce anyway, and again on hearing.
                Timer::AnnounceFallback => self.start(now),
                Timer::LinkDownExpiry => self.expire_downs(now),
            }
        }
    }

    /// The next packet to send, if any.
    #[must_use]
    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        self.out.pop_front()
    }

    /// Counters since the last call (`nr.*` events, `drop.nr.*` reasons).
    pub fn take_stats(&mut self) -> Counters {
        std::mem::take(&mut self.stats)
    }

    /// Counters not yet taken.
    pub fn stats(&self) -> &Counters {
        &self.stats
    }

    /// The fabric model.
    pub fn fabric(&self) -> &Fabric {
        &self.fabric
    }

    /// The registration table, by hash.
    pub fn names(&self) -> &BTreeMap<u16, NameEntry> {
        &self.names
    }

    /// The discovery table, by (hash, requester).
    pub fn discovery(&self) -> &BTreeMap<(u16, NsffId), Discovered> {
        &self.discovery
    }

    /// When each nSFF last sent the NR a registration or path request that
    /// parsed (and authenticated, with keys): whether its path to the NR
    /// works.
    pub fn last_heard(&self) -> &BTreeMap<NsffId, Instant> {
        &self.heard
    }

    /// Whether keys are configured (then every message must be signed).
    pub fn authenticates(&self) -> bool {
        self.ring.is_keyed()
    }

    fn tick(&mut self, now: Instant) {
        self.clock_us = self.clock_us.max(now.total_micros().max(0) as u64);
    }

    /// Handle the payload of a GFF packet of type `msg_type` addressed to
    /// the NR. Errors are already counted.
    pub fn handle_message(
        &mut self,
        now: Instant,
        msg_type: MessageType,
        payload: &[u8],
    ) -> Result<(), MessageError> {
        let r = self.dispatch(now, msg_type, payload);
        if let Err(e) = r {
            self.stats.drop(e.reason());
        }
        r
    }

    fn dispatch(
        &mut self,
        now: Instant,
        msg_type: MessageType,
        payload: &[u8],
    ) -> Result<(), MessageError> {
        if msg_type == MessageType::LinkHello {
            // The fwd node on the NR's link says hello to whatever is at the
            // other end: not for the NR, not wrong either.
            self.stats.bump("nr.hellos_ignored");
            return Ok(());
        }
        if !matches!(
            msg_type,
            MessageType::Registration | MessageType::PathRequest | MessageType::LinkEvent
        ) {
            return Err(MessageError::Unexpected);
        }
        self.tick(now);
        let sequence = nr::authenticate(&self.ring, msg_type, payload).map_err(|r| match r {
            Reject::Unsigned => MessageError::AuthMissing,
            Reject::UnknownKey => MessageError::AuthUnknownKey,
            Reject::Bad => MessageError::AuthBad,
            Reject::Malformed => MessageError::Malformed,
            other => MessageError::Replay(other),
        })?;
        let repr = Repr::parse(msg_type, payload).map_err(|_| MessageError::Malformed)?;
        let from = match &repr {
            Repr::Registration(m) => Some(m.nsff_id),
            Repr::PathRequest(m) => Some(m.requester),
            _ => None,
        };
        if let Some(nsff) = from.filter(|&n| self.fabric.knows(n)) {
            self.heard.insert(nsff, now);
        }
        if self.is_copy(now, msg_type, payload) {
            self.stats.bump("nr.duplicates_ignored");
            return Ok(());
        }
        // A redundant copy was let through above; anything else seen
        // before is a replay (a signed message is unique by its number).
        if let Some((sender, seq)) = sequence {
            self.ring
                .fresh(self.clock_us, sender, seq)
                .map_err(MessageError::Replay)?;
        }
        let r = self.act(now, repr);
        self.remember(now, msg_type, payload, sequence.is_some());
        r
    }

    /// Act on a parsed, authenticated message that is no copy.
    fn act(&mut self, now: Instant, repr: Repr<'_>) -> Result<(), MessageError> {
        match repr {
            Repr::Registration(m) => {
                let fqdn = match m.tlvs.fqdn() {
                    // The TLV parser only accepts canonical names.
                    Some(s) => Some(Fqdn::new(s).map_err(|_| MessageError::Malformed)?),
                    None => None,
                };
                let r = if m.deregister {
                    self.try_deregister(m.hash, fqdn.as_ref(), m.nsff_id)
                        .map(|()| "nr.deregistrations")
                } else {
                    self.try_register(now, m.hash, fqdn, m.nsff_id).map(|r| {
                        if r == Registered::Refreshed {
                            self.stats.bump("nr.registrations_refreshed");
                        }
                        "nr.registrations"
                    })
                };
                let counter = r.map_err(MessageError::Refused)?;
                self.stats.bump(counter);
                Ok(())
            }
            Repr::PathRequest(m) => self.request(now, m),
            Repr::LinkEvent(m) => {
                let up = match m.state {
                    nr::LinkState::Up => true,
                    nr::LinkState::Down => false,
                    nr::LinkState::Unknown(_) => return Err(MessageError::BadLinkState),
                };
                let r = self.link_event(now, m.link_id, up).map(drop);
                if r.is_ok() {
                    self.note_link_event(now, m.link_id, up);
                }
                r
            }
            // Filtered above.
            _ => Err(MessageError::Unexpected),
        }
    }

    /// Whether `payload` repeats a message acted on within the dedup window
    /// with no change to the tables since.
    fn is_copy(&mut self, now: Instant, msg_type: MessageType, payload: &[u8]) -> bool {
        while self
            .recent
            .front()
            .is_some_and(|s| now >= s.at + self.dedup_window)
        {
            self.recent.pop_front();
        }
        self.recent
            .iter()
            .any(|s| s.msg_type == msg_type && s.payload == payload)
    }

    /// Remember a message acted on, to know its copies.
    fn remember(&mut self, now: Instant, msg_type: MessageType, payload: &[u8], signed: bool) {
        if self.dedup_window == Duration::ZERO {
            return;
        }
        if self.recent.len() >= self.limits.dedup {
            self.stats.bump("nr.dedup_untracked");
            return;
        }
        self.recent.push_back(Seen {
            at: now,
            msg_type,
            payload: payload.to_vec(),
            signed,
        });
    }

    /// A name, an nSFF of a name or a link state changed, or the discovery
    /// table was purged: a message seen before may now be answered
    /// differently (a request re-asked after an update, a flap: deregister,
    /// register, deregister), so no unsigned one is a copy any more. A
    /// signed message is unique by its sequence number (a resend is a new
    /// number): its copies stay copies, so a copy that took the longer
    /// path past a table change is ignored, not counted a replay.
    fn tables_changed(&mut self) {
        self.recent.retain(|s| s.signed);
    }

    /// Register `nsff` for the name with `hash` (and `fqdn`, if known):
    /// registration over GFF and `POST /register`. A name seen before with
    /// another FQDN is a hash collision and refused. A new nSFF for a name
    /// others resolved sends them a path update when the policy would now
    /// answer them differently.
    pub fn register(
        &mut self,
        now: Instant,
        hash: u16,
        fqdn: Option<Fqdn>,
        nsff: NsffId,
    ) -> Result<Registered, Refusal> {
        let r = self.try_register(now, hash, fqdn, nsff);
        match r {
            Ok(_) => self.stats.bump("nr.registrations"),
            Err(e) => self.stats.drop(e.reason()),
        }
        r
    }

    fn try_register(
        &mut self,
        now: Instant,
        hash: u16,
        fqdn: Option<Fqdn>,
        nsff: NsffId,
    ) -> Result<Registered, Refusal> {
        if !self.fabric.knows(nsff) {
            return Err(Refusal::UnknownNsff);
        }
        if fqdn.as_ref().is_some_and(|f| f.hash() != hash) {
            return Err(Refusal::HashMismatch);
        }
        let Some(entry) = self.names.get_mut(&hash) else {
            if self.names.len() >= self.limits.names {
                return Err(Refusal::NamesFull);
            }
            self.names.insert(
                hash,
                NameEntry {
                    fqdn,
                    nsffs: BTreeSet::from([nsff]),
                    since: now,
                },
            );
            self.tables_changed();
            return Ok(Registered::Added);
        };
        match (&entry.fqdn, fqdn) {
            (Some(have), Some(new)) if *have != new => return Err(Refusal::HashCollision),
            (None, Some(new)) => entry.fqdn = Some(new),
            _ => {}
        }
        if entry.nsffs.contains(&nsff) {
            return Ok(Registered::Refreshed);
        }
        if entry.nsffs.len() >= self.limits.instances {
            return Err(Refusal::InstancesFull);
        }
        entry.nsffs.insert(nsff);
        self.tables_changed();
        // Requesters of this name for whom the answer changes (the new
        // instance is closer): tell them to drop what they were told.
        let mut ids = BTreeSet::new();
        let mut recipients = BTreeSet::new();
        let rows: Vec<_> = self
            .discovery
            .iter()
            .filter(|((h, _), _)| *h == hash)
            .map(|(k, d)| (k.1, *d))
            .collect();
        for (requester, d) in rows {
            let now_answer = self.resolve(hash, requester);
            if now_answer.is_some_and(|c| c.nsff != d.serving || c.forward != d.forward) {
                ids.insert(d.serving.value());
                recipients.insert(requester);
            }
        }
        self.notify(UpdateKind::NsffIds, &ids, &recipients);
        Ok(Registered::Added)
    }

    /// Deregister `nsff` from the name with `hash` (R/D bit, `DELETE
    /// /register/...`). The requesters that were told `nsff` for this name
    /// get a type-0 update naming it.
    pub fn deregister(
        &mut self,
        _now: Instant,
        hash: u16,
        fqdn: Option<&Fqdn>,
        nsff: NsffId,
    ) -> Result<(), Refusal> {
        let r = self.try_deregister(hash, fqdn, nsff);
        match r {
            Ok(()) => self.stats.bump("nr.deregistrations"),
            Err(e) => self.stats.drop(e.reason()),
        }
        r
    }

    fn try_deregister(
        &mut self,
        hash: u16,
        fqdn: Option<&Fqdn>,
        nsff: NsffId,
    ) -> Result<(), Refusal> {
        if fqdn.is_some_and(|f| f.hash() != hash) {
            return Err(Refusal::HashMismatch);
        }
        let Some(entry) = self.names.get_mut(&hash) else {
            return Err(Refusal::NotRegistered);
        };
        if let (Some(have), Some(f)) = (&entry.fqdn, fqdn) {
            if have != f {
                // The other name of a collision: never registered.
                return Err(Refusal::NotRegistered);
            }
        }
        if !entry.nsffs.remove(&nsff) {
            return Err(Refusal::NotRegistered);
        }
        if entry.nsffs.is_empty() {
            self.names.remove(&hash);
        }
        self.tables_changed();
        let recipients: BTreeSet<NsffId> = self
            .discovery
            .iter()
            .filter(|((h, _), d)| *h == hash && d.serving == nsff)
            .map(|((_, r), _)| *r)
            .collect();
        self.notify(
            UpdateKind::NsffIds,
            &BTreeSet::from([nsff.value()]),
            &recipients,
        );
        Ok(())
    }

    /// A link event from a fwd node (or an operator): recompute; returns
    /// whether the state changed. Down: the requesters whose forward or
    /// reverse pathID holds the link get a type-1 update. Up: requesters
    /// whose answer would now differ (serving nSFF, forward *or* reverse
    /// pathID: a reverse detour left in place would carry every response
    /// the long way) get a type-0 update naming the nSFF they were told.
    pub fn link_event(&mut self, now: Instant, link: u8, up: bool) -> Result<bool, MessageError> {
        self.tick(now);
        let changed = self
            .fabric
            .set_link(link, up)
            .map_err(|_| MessageError::UnknownLink)?;
        self.stats
            .bump(if up { "nr.link_up" } else { "nr.link_down" });
        if !changed {
            // Both switches of a link report it, and a redundant path to
            // the NR may bring each report twice.
            self.stats.bump("nr.link_events_repeated");
            return Ok(false);
        }
        self.tables_changed();
        if up {
            let mut ids = BTreeSet::new();
            let mut recipients = BTreeSet::new();
            let rows: Vec<_> = self.discovery.iter().map(|(k, d)| (*k, *d)).collect();
            for ((hash, requester), d) in rows {
                let now_answer = self.resolve(hash, requester);
                if now_answer.is_none_or(|c| {
                    c.nsff != d.serving || c.forward != d.forward || c.reverse != d.reverse
                }) {
                    ids.insert(d.serving.value());
                    recipients.insert(requester);
                }
            }
            self.notify(UpdateKind::NsffIds, &ids, &recipients);
        } else {
            let recipients: BTreeSet<NsffId> = self
                .discovery
                .iter()
                .filter(|(_, d)| d.forward.bit(link) || d.reverse.bit(link))
                .map(|((_, r), _)| *r)
                .collect();
            self.notify(UpdateKind::LinkIds, &BTreeSet::from([link]), &recipients);
        }
        Ok(true)
    }

    /// A link event from the fabric said `link` is `up`: a down state
    /// holds for `link_down_ttl_ms` from the last time a switch said so.
    fn note_link_event(&mut self, now: Instant, link: u8, up: bool) {
        if up || self.link_down_ttl == Duration::ZERO {
            self.down_until.remove(&link);
        } else {
            self.down_until.insert(link, now + self.link_down_ttl);
        }
        self.arm_down_expiry();
    }

    fn arm_down_expiry(&mut self) {
        match self.down_until.values().min() {
            Some(&t) => self.timers.set(Timer::LinkDownExpiry, t),
            None => self.timers.stop(Timer::LinkDownExpiry),
        }
    }

    /// Down states nobody repeated: the link is up again (as for an "up"
    /// link event), counted `nr.link_down_expired`.
    fn expire_downs(&mut self, now: Instant) {
        let due: Vec<u8> = self
            .down_until
            .iter()
            .filter(|&(_, &t)| t <= now)
            .map(|(&l, _)| l)
            .collect();
        for link in due {
            self.down_until.remove(&link);
            if self.fabric.down_links().bit(link) {
                self.stats.bump("nr.link_down_expired");
                log::warn!(
                    "nr: link {link} down for {} with no switch repeating it: up again",
                    self.link_down_ttl
                );
                let _ = self.link_event(now, link, true);
            }
        }
        self.arm_down_expiry();
    }

    /// Send ALL NODES (type 0, ID 255) to every nSFF and forget the
    /// discovery table (ctl `purge-all`, NR start).
    pub fn purge_all(&mut self) {
        let all: Vec<NsffId> = self.fabric.nsffs().map(|(id, _)| id).collect();
        let path = self.path_to(all.iter().copied());
        self.discovery.clear();
        self.discovery_overflow = false;
        self.tables_changed();
        if path.is_zero() {
            return;
        }
        self.stats.bump("nr.updates_all_nodes");
        self.send_update(path, UpdateKind::NsffIds, &[ALL_NSFFS]);
    }

    fn request(&mut self, now: Instant, m: PathRequest<'_>) -> Result<(), MessageError> {
        let requester = m.requester;
        if !self.fabric.knows(requester) {
            return Err(MessageError::UnknownRequester);
        }
        let Some(back) = self.fabric.path(Endpoint::Nr, Endpoint::Nsff(requester)) else {
            return Err(MessageError::RequesterUnreachable);
        };
        self.stats.bump("nr.requests");
        let entry = self.names.get(&m.hash);
        // A request naming the other FQDN of a collision is not found.
        let same_name = match (entry.and_then(|e| e.fqdn.as_ref()), m.tlvs.fqdn()) {
            (Some(have), Some(asked)) => have.as_str() == asked,
            _ => true,
        };
        let fqdn = entry.and_then(|e| e.fqdn.clone());
        let found = if same_name {
            self.resolve(m.hash, requester)
        } else {
            self.stats.bump("nr.requests_fqdn_mismatch");
            None
        };
        let mut payload;
        match found {
            Some(c) => {
                self.stats.bump("nr.responses_found");
                self.record(m.hash, requester, c, now);
                let mut tlvs = vec![Tlv::ReversePath(c.reverse)];
                if let Some(f) = &fqdn {
                    tlvs.push(Tlv::Fqdn(f.as_str()));
                }
                let repr = Repr::PathResponse(PathResponse {
                    hash: m.hash,
                    resolution: Some(Resolution {
                        serving: c.nsff,
                        forward: c.forward,
                    }),
                    tlvs: Tlvs::new(&tlvs).map_err(|_| MessageError::Malformed)?,
                });
                payload = vec![0; repr.buffer_len()];
                repr.emit(&mut payload);
            }
            None => {
                self.stats.bump("nr.responses_not_found");
                self.discovery.remove(&(m.hash, requester));
                let repr = Repr::PathResponse(PathResponse {
                    hash: m.hash,
                    resolution: None,
                    tlvs: Tlvs::EMPTY,
                });
                payload = vec![0; repr.buffer_len()];
                repr.emit(&mut payload);
            }
        }
        self.push(back, MessageType::PathResponse, payload);
        Ok(())
    }

    fn record(&mut self, hash: u16, requester: NsffId, c: Candidate, now: Instant) {
        let key = (hash, requester);
        if !self.discovery.contains_key(&key) && self.discovery.len() >= self.limits.discovery {
            self.stats.drop("nr.discovery_full");
            self.discovery_overflow = true;
            return;
        }
        self.discovery.insert(
            key,
            Discovered {
                serving: c.nsff,
                forward: c.forward,
                reverse: c.reverse,
                at: now,
            },
        );
    }

    /// What the NR would answer `requester` for `hash` now.
    pub fn resolve(&self, hash: u16, requester: NsffId) -> Option<Candidate> {
        let entry = self.names.get(&hash)?;
        let candidates: Vec<Candidate> = entry
            .nsffs
            .iter()
            .filter_map(|&s| {
                let forward = self
                    .fabric
                    .path(Endpoint::Nsff(requester), Endpoint::Nsff(s))?;
                let reverse = self
                    .fabric
                    .path(Endpoint::Nsff(s), Endpoint::Nsff(requester))?;
                Some(Candidate {
                    nsff: s,
                    forward,
                    reverse,
                })
            })
            .collect();
        if candidates.is_empty() {
            return None;
        }
        let i = self.policy.choose(requester, &candidates);
        candidates.get(i).copied()
    }

    /// Send a path update listing `ids` to `recipients` over the OR of the
    /// paths to them, and mirror its effect on the discovery table.
    fn notify(&mut self, kind: UpdateKind, ids: &BTreeSet<u8>, recipients: &BTreeSet<NsffId>) {
        if recipients.is_empty() {
            return;
        }
        if self.discovery_overflow || ids.len() > usize::from(u8::MAX) {
            self.purge_all();
            return;
        }
        let path = self.path_to(recipients.iter().copied());
        if !path.is_zero() {
            let list: Vec<u8> = ids.iter().copied().collect();
            self.stats.bump(match kind {
                UpdateKind::LinkIds => "nr.updates_links",
                _ => "nr.updates_nsffs",
            });
            self.send_update(path, kind, &list);
        }
        // What each recipient drops from its cache, we drop from the table.
        self.discovery.retain(|(_, r), d| {
            if !recipients.contains(r) {
                return true;
            }
            match kind {
                UpdateKind::LinkIds => ids.iter().all(|&l| !d.forward.bit(l) && !d.reverse.bit(l)),
                _ => !ids.contains(&d.serving.value()),
            }
        });
    }

    /// The OR of the NR's paths to `to`; unreachable ones are counted.
    fn path_to(&mut self, to: impl Iterator<Item = NsffId>) -> PathId {
        let mut path = PathId::ZERO;
        for n in to {
            match self.fabric.path(Endpoint::Nr, Endpoint::Nsff(n)) {
                Some(p) => path |= p,
                None => self.stats.drop("nr.update_unreachable"),
            }
        }
        path
    }

    fn send_update(&mut self, path: PathId, kind: UpdateKind, ids: &[u8]) {
        // At most 255 IDs: callers check.
        let Ok(ids) = Ids::new(ids) else {
            return;
        };
        let repr = Repr::PathUpdate(PathUpdate {
            kind,
            ids,
            tlvs: Tlvs::EMPTY,
        });
        let mut payload = vec![0; repr.buffer_len()];
        repr.emit(&mut payload);
        self.push(path, MessageType::PathUpdate, payload);
    }

    fn push(&mut self, path: PathId, msg_type: MessageType, mut payload: Vec<u8>) {
        nr::seal(&mut self.ring, self.clock_us, msg_type, &mut payload);
        self.out.push_back(Transmit {
            path,
            msg_type,
            payload,
        });
    }
}

/// Build the payload of a registration (for tests and test roles).
pub fn registration(deregister: bool, fqdn: &Fqdn, nsff: NsffId) -> Vec<u8> {
    let tlvs = [Tlv::Fqdn(fqdn.as_str())];
    let repr = Repr::Registration(Registration {
        deregister,
        hash: fqdn.hash(),
        nsff_id: nsff,
        // NOTE(unwrap): a canonical Fqdn makes a valid TLV list.
        tlvs: Tlvs::new(&tlvs).unwrap_or(Tlvs::EMPTY),
    });
    let mut b = vec![0; repr.buffer_len()];
    repr.emit(&mut b);
    b
}

/// Build the payload of a path request (for tests and test roles).
pub fn path_request(hash: u16, requester: NsffId) -> Vec<u8> {
    let repr = Repr::PathRequest(PathRequest {
        hash,
        requester,
        tlvs: Tlvs::EMPTY,
    });
    let mut b = vec![0; repr.buffer_len()];
    repr.emit(&mut b);
    b
}

#[cfg(test)]
mod test {
    use super::*;
    use crate::config::{AttachConfig, KeyConfig, LinkConfig, NsffAttachConfig};
    use svcroute_stack::wire::auth::SENDER_FWD;

    const T0: Instant = Instant::ZERO;

    fn id(v: u8) -> NsffId {
        NsffId::new(v).unwrap()
    }

    fn name(s: &str) -> Fqdn {
        Fqdn::new(s).unwrap()
    }

    /// ```text
    ///   NR(in 0, out 1)   nSFF1(in 2, out 3)        nSFF3 (in 6, out 7)
    ///        └──── f1 ──10──▶ f2 ──12──▶ f3 ──── nSFF2 (in 4, out 5)
    ///              f1 ◀─11─── f2 ◀─13─── f3
    ///              f1 ──14──▶ f4 ──15──▶ f3   (detour, one way)
    ///              f3 ──16──▶ f4 ──17──▶ f1
    /// ```
    /// nSFF3 hangs off f2.
    fn config() -> NrConfig {
        let link = |from: &str, to: &str, id| LinkConfig {
            from: from.into(),
            to: to.into(),
            id,
        };
        let attach = |nsff, at: &str, link_in, link_out| NsffAttachConfig {
            nsff,
            at: at.into(),
            link_in,
            link_out,
        };
        NrConfig {
            announce_restart: false,
            self_attach: Some(AttachConfig {
                at: "f1".into(),
                link_in: 0,
                link_out: 1,
            }),
            attach: vec![
                attach(1, "f1", 2, 3),
                attach(2, "f3", 4, 5),
                attach(3, "f2", 6, 7),
            ],
            links: vec![
                link("f1", "f2", 10),
                link("f2", "f1", 11),
                link("f2", "f3", 12),
                link("f3", "f2", 13),
                link("f1", "f4", 14),
                link("f4", "f3", 15),
                link("f3", "f4", 16),
                link("f4", "f1", 17),
            ],
            // The traces send the same message again at T0 on purpose
            // (refreshes, retries); copies have their own tests.
            dedup_ms: 0,
            ..NrConfig::default()
        }
    }

    fn nr() -> NrCore {
        NrCore::new(&config()).unwrap()
    }

    fn path(links: &[u8]) -> PathId {
        links.iter().fold(PathId::ZERO, |p, &l| p.with(l))
    }

    /// NR → nSFF n.
    fn to(n: u8) -> PathId {
        match n {
            1 => path(&[1, 2]),
            2 => path(&[1, 10, 12, 4]),
            3 => path(&[1, 10, 6]),
            _ => unreachable!(),
        }
    }

    fn reg(nr: &mut NrCore, fqdn: &str, nsff: u8) -> Result<(), MessageError> {
        let p = registration(false, &name(fqdn), id(nsff));
        nr.handle_message(T0, MessageType::Registration, &p)
    }

    fn dereg(nr: &mut NrCore, fqdn: &str, nsff: u8) -> Result<(), MessageError> {
        let p = registration(true, &name(fqdn), id(nsff));
        nr.handle_message(T0, MessageType::Registration, &p)
    }

    fn ask(nr: &mut NrCore, fqdn: &str, requester: u8) -> Result<(), MessageError> {
        let p = path_request(name(fqdn).hash(), id(requester));
        nr.handle_message(T0, MessageType::PathRequest, &p)
    }

    /// Exactly the packets the NR has to send.
    #[track_caller]
    fn sent(nr: &mut NrCore) -> Vec<(PathId, Repr<'static>)> {
        let mut v = Vec::new();
        while let Some(t) = nr.poll_transmit() {
            let payload: &'static [u8] = Vec::leak(t.payload);
            v.push((t.path, Repr::parse(t.msg_type, payload).unwrap()));
        }
        v
    }

    /// The one path response sent: (path, serving, forward, reverse).
    #[track_caller]
    fn response(nr: &mut NrCore) -> (PathId, Option<(u8, PathId, PathId)>) {
        let v = sent(nr);
        assert_eq!(v.len(), 1, "{v:?}");
        let (p, Repr::PathResponse(r)) = v[0] else {
            panic!("not a response: {v:?}");
        };
        (
            p,
            r.resolution.map(|res| {
                (
                    res.serving.value(),
                    res.forward,
                    r.tlvs.reverse_path().unwrap(),
                )
            }),
        )
    }

    /// The one path update sent: (path, kind, ids).
    #[track_caller]
    fn update(nr: &mut NrCore) -> (PathId, UpdateKind, Vec<u8>) {
        let v = sent(nr);
        assert_eq!(v.len(), 1, "{v:?}");
        let (p, Repr::PathUpdate(u)) = v[0] else {
            panic!("not an update: {v:?}");
        };
        (p, u.kind, u.ids.as_slice().to_vec())
    }

    #[test]
    fn register_then_resolve_with_forward_and_reverse_paths() {
        let mut nr = nr();
        reg(&mut nr, "www.example2.com", 2).unwrap();
        assert!(sent(&mut nr).is_empty());
        let e = &nr.names()[&name("www.example2.com").hash()];
        assert_eq!(e.fqdn, Some(name("www.example2.com")));
        assert_eq!(e.nsffs, BTreeSet::from([id(2)]));
        ask(&mut nr, "www.example2.com", 1).unwrap();
        // nSFF1 (f1) → f2 → f3 → nSFF2, and back f3 → f2 → f1.
        assert_eq!(
            response(&mut nr),
            (
                to(1),
                Some((2, path(&[3, 10, 12, 4]), path(&[5, 13, 11, 2])))
            )
        );
        let d = nr.discovery()[&(name("www.example2.com").hash(), id(1))];
        assert_eq!(d.serving, id(2));
        assert_eq!(nr.stats().get("nr.responses_found"), 1);
    }

    #[test]
    fn not_found_has_len_zero_and_is_not_recorded() {
        let mut nr = nr();
        ask(&mut nr, "nowhere.example", 3).unwrap();
        assert_eq!(response(&mut nr), (to(3), None));
        assert!(nr.discovery().is_empty());
        assert_eq!(nr.stats().get("nr.responses_not_found"), 1);
        // An unknown requester gets nothing.
        assert_eq!(
            ask(&mut nr, "nowhere.example", 9),
            Err(MessageError::UnknownRequester)
        );
        assert!(sent(&mut nr).is_empty());
        assert_eq!(nr.stats().get("drop.nr.unknown_requester"), 1);
    }

    #[test]
    fn hash_collision_is_refused_and_counted() {
        let mut nr = nr();
        // Find two names with the same 16-bit hash.
        let mut seen = BTreeMap::new();
        let (a, b) = (0..)
            .find_map(|i| {
                let n = format!("n{i}.example");
                let h = name(&n).hash();
                seen.insert(h, n.clone()).map(|old| (old, n))
            })
            .unwrap();
        reg(&mut nr, &a, 1).unwrap();
        assert_eq!(
            reg(&mut nr, &b, 2),
            Err(MessageError::Refused(Refusal::HashCollision))
        );
        assert_eq!(nr.stats().get("drop.nr.hash_collision"), 1);
        assert_eq!(nr.names()[&name(&a).hash()].nsffs, BTreeSet::from([id(1)]));
        // REST path: same refusal, status 409.
        let r = nr.register(T0, name(&b).hash(), Some(name(&b)), id(3));
        assert_eq!(r.map_err(Refusal::status), Err(409));
        // Asking for b (with its FQDN) is not answered with a's server.
        let mut p = path_request(name(&b).hash(), id(3));
        p.extend_from_slice(&[1, b.len() as u8]);
        p.extend_from_slice(b.as_bytes());
        nr.handle_message(T0, MessageType::PathRequest, &p).unwrap();
        assert_eq!(response(&mut nr).1, None);
        // Deregistering b does not touch a.
        assert_eq!(
            nr.deregister(T0, name(&b).hash(), Some(&name(&b)), id(1)),
            Err(Refusal::NotRegistered)
        );
        assert_eq!(nr.names().len(), 1);
    }

    #[test]
    fn policy_fewest_links_then_lowest_id() {
        let mut nr = nr();
        // Served at nSFF2 (f3, 4 links from nSFF1) and nSFF3 (f2, 3 links).
        reg(&mut nr, "svc.example", 2).unwrap();
        reg(&mut nr, "svc.example", 3).unwrap();
        ask(&mut nr, "svc.example", 1).unwrap();
        assert_eq!(response(&mut nr).1.unwrap().0, 3);
        // From nSFF2's point of view nSFF3 is closer too.
        ask(&mut nr, "svc.example", 2).unwrap();
        assert_eq!(response(&mut nr).1.unwrap().0, 2, "local wins: zero links");
        // Equal distance: lowest ID. nSFF1 and nSFF2 seen from nSFF3 are both 3 links.
        reg(&mut nr, "eq.example", 2).unwrap();
        reg(&mut nr, "eq.example", 1).unwrap();
        ask(&mut nr, "eq.example", 3).unwrap();
        assert_eq!(response(&mut nr).1.unwrap().0, 1);

        // A pluggable policy: highest ID.
        #[derive(Debug)]
        struct Highest;
        impl Policy for Highest {
            fn choose(&self, _r: NsffId, c: &[Candidate]) -> usize {
                c.len() - 1
            }
        }
        let mut nr = NrCore::new(&config())
            .unwrap()
            .with_policy(Box::new(Highest));
        reg(&mut nr, "svc.example", 2).unwrap();
        reg(&mut nr, "svc.example", 3).unwrap();
        ask(&mut nr, "svc.example", 1).unwrap();
        assert_eq!(response(&mut nr).1.unwrap().0, 3);
    }

    #[test]
    fn deregistration_updates_exactly_who_resolved_it() {
        let mut nr = nr();
        reg(&mut nr, "a.example", 2).unwrap();
        reg(&mut nr, "b.example", 2).unwrap();
        ask(&mut nr, "a.example", 1).unwrap();
        ask(&mut nr, "a.example", 3).unwrap();
        ask(&mut nr, "b.example", 3).unwrap();
        let _ = sent(&mut nr);
        // nSFF1 asked for a only, nSFF3 for a and b; nSFF2 serves.
        dereg(&mut nr, "a.example", 2).unwrap();
        assert_eq!(
            update(&mut nr),
            (to(1) | to(3), UpdateKind::NsffIds, vec![2])
        );
        assert!(!nr.names().contains_key(&name("a.example").hash()));
        // Type 0 [2] makes nSFF3 drop b's entry too; the table mirrors it.
        assert!(nr.discovery().is_empty());
        // Nobody resolved b any more: deregistering it sends nothing.
        dereg(&mut nr, "b.example", 2).unwrap();
        assert!(sent(&mut nr).is_empty());
        assert_eq!(
            dereg(&mut nr, "b.example", 2),
            Err(MessageError::Refused(Refusal::NotRegistered))
        );
    }

    #[test]
    fn a_closer_new_instance_updates_those_it_would_serve() {
        let mut nr = nr();
        reg(&mut nr, "svc.example", 2).unwrap();
        ask(&mut nr, "svc.example", 1).unwrap(); // → nSFF2, 4 links
        ask(&mut nr, "svc.example", 2).unwrap(); // → itself
        let _ = sent(&mut nr);
        // nSFF3 is closer to nSFF1, not to nSFF2 (which serves itself).
        reg(&mut nr, "svc.example", 3).unwrap();
        assert_eq!(update(&mut nr), (to(1), UpdateKind::NsffIds, vec![2]));
        assert_eq!(nr.discovery().len(), 1);
        ask(&mut nr, "svc.example", 1).unwrap();
        assert_eq!(response(&mut nr).1.unwrap().0, 3);
        // A farther instance changes nobody's answer: no update.
        reg(&mut nr, "svc.example", 1).unwrap();
        let v = sent(&mut nr);
        // nSFF1 itself now serves it locally: its answer changes.
        assert_eq!(v.len(), 1);
        // Registering again is a refresh: nothing sent.
        reg(&mut nr, "svc.example", 1).unwrap();
        assert!(sent(&mut nr).is_empty());
    }

    #[test]
    fn link_down_recomputes_and_updates_affected_only() {
        let mut nr = nr();
        reg(&mut nr, "far.example", 2).unwrap();
        reg(&mut nr, "mid.example", 3).unwrap();
        ask(&mut nr, "far.example", 1).unwrap(); // 3,10,12,4 / 5,13,11,2
        ask(&mut nr, "mid.example", 1).unwrap(); // 3,10,6 / 7,11,2
        let _ = sent(&mut nr);
        // f2 → f3 fails: only the far.example requester is affected.
        let ev = [12, 0];
        nr.handle_message(T0, MessageType::LinkEvent, &ev).unwrap();
        assert_eq!(update(&mut nr), (to(1), UpdateKind::LinkIds, vec![12]));
        assert_eq!(nr.discovery().len(), 1);
        // Re-resolving takes the detour f1 → f4 → f3.
        ask(&mut nr, "far.example", 1).unwrap();
        assert_eq!(
            response(&mut nr).1,
            Some((2, path(&[3, 14, 15, 4]), path(&[5, 13, 11, 2])))
        );
        // A duplicate event changes nothing.
        nr.handle_message(T0, MessageType::LinkEvent, &ev).unwrap();
        assert!(sent(&mut nr).is_empty());
        // Back up: the detour is longer than the direct way, so nSFF1 is
        // told to drop what it got from nSFF2.
        nr.handle_message(T0, MessageType::LinkEvent, &[12, 1])
            .unwrap();
        assert_eq!(update(&mut nr), (to(1), UpdateKind::NsffIds, vec![2]));
        // A reverse-path link (f2 → f1) down affects both rows' owner.
        ask(&mut nr, "far.example", 1).unwrap();
        let _ = sent(&mut nr);
        nr.handle_message(T0, MessageType::LinkEvent, &[11, 0])
            .unwrap();
        // The update to nSFF1 goes over f1 → nSFF1 directly.
        assert_eq!(update(&mut nr), (to(1), UpdateKind::LinkIds, vec![11]));
        assert!(nr.discovery().is_empty());
        // Unknown link, unknown state.
        assert_eq!(
            nr.handle_message(T0, MessageType::LinkEvent, &[99, 0]),
            Err(MessageError::UnknownLink)
        );
        assert_eq!(
            nr.handle_message(T0, MessageType::LinkEvent, &[10, 7]),
            Err(MessageError::BadLinkState)
        );
    }

    /// One forged "down" does not keep a link down: unless a switch says
    /// it again within `link_down_ttl_ms`, it expires and the link is up
    /// (with the updates an "up" brings). Repeats keep it down; an
    /// operator's down never expires.
    #[test]
    fn a_link_down_nobody_repeats_expires() {
        let at = |ms: i64| Instant::from_millis(ms);
        let mut nr = nr();
        assert_eq!(nr.poll_timeout(), None);
        nr.handle_message(at(0), MessageType::LinkEvent, &[12, 0])
            .unwrap();
        assert!(nr.fabric().down_links().bit(12));
        assert_eq!(nr.poll_timeout(), Some(at(15_000)));
        // Repeated at 10 s: down until 25 s.
        nr.handle_message(at(10_000), MessageType::LinkEvent, &[12, 0])
            .unwrap();
        nr.handle_timeout(at(15_000));
        assert!(nr.fabric().down_links().bit(12));
        assert_eq!(nr.poll_timeout(), Some(at(25_000)));
        nr.handle_timeout(at(25_000));
        assert!(!nr.fabric().down_links().bit(12), "expired");
        assert_eq!(nr.stats().get("nr.link_down_expired"), 1);
        assert_eq!(nr.poll_timeout(), None);
        // An up in between ends the clock.
        nr.handle_message(at(30_000), MessageType::LinkEvent, &[12, 0])
            .unwrap();
        nr.handle_message(at(31_000), MessageType::LinkEvent, &[12, 1])
            .unwrap();
        assert_eq!(nr.poll_timeout(), None);
        // The operator's down stays.
        nr.link_event(at(40_000), 12, false).unwrap();
        nr.handle_timeout(at(100_000));
        assert!(nr.fabric().down_links().bit(12));
        assert_eq!(nr.stats().get("nr.link_down_expired"), 1);
    }

    #[test]
    fn link_up_that_shortens_only_the_reverse_path_updates() {
        let mut nr = nr();
        reg(&mut nr, "far.example", 2).unwrap();
        // f3 → f2 is down before nSFF1 asks: the forward path is the usual
        // one, the reverse takes the detour f3 → f4 → f1.
        nr.handle_message(T0, MessageType::LinkEvent, &[13, 0])
            .unwrap();
        assert!(sent(&mut nr).is_empty());
        ask(&mut nr, "far.example", 1).unwrap();
        assert_eq!(
            response(&mut nr).1,
            Some((2, path(&[3, 10, 12, 4]), path(&[5, 16, 17, 2])))
        );
        // Back up: same serving nSFF, same forward path, but a shorter way
        // back, so nSFF1 must re-resolve or its responses keep the detour.
        nr.handle_message(T0, MessageType::LinkEvent, &[13, 1])
            .unwrap();
        assert_eq!(update(&mut nr), (to(1), UpdateKind::NsffIds, vec![2]));
        assert!(nr.discovery().is_empty());
        ask(&mut nr, "far.example", 1).unwrap();
        assert_eq!(
            response(&mut nr).1,
            Some((2, path(&[3, 10, 12, 4]), path(&[5, 13, 11, 2])))
        );
    }

    #[test]
    fn all_nodes_on_start_purge_and_discovery_overflow() {
        let mut cfg = config();
        cfg.announce_restart = true;
        cfg.max_discovery = 1;
        let mut nr = NrCore::new(&cfg).unwrap();
        nr.start(T0);
        assert_eq!(
            update(&mut nr),
            (to(1) | to(2) | to(3), UpdateKind::NsffIds, vec![ALL_NSFFS])
        );
        reg(&mut nr, "svc.example", 2).unwrap();
        ask(&mut nr, "svc.example", 1).unwrap();
        ask(&mut nr, "svc.example", 3).unwrap(); // not recorded: table full
        assert_eq!(sent(&mut nr).len(), 2);
        assert_eq!(nr.stats().get("drop.nr.discovery_full"), 1);
        assert_eq!(nr.discovery().len(), 1);
        // The table no longer knows every cache: the update goes to all.
        dereg(&mut nr, "svc.example", 2).unwrap();
        assert_eq!(
            update(&mut nr),
            (to(1) | to(2) | to(3), UpdateKind::NsffIds, vec![ALL_NSFFS])
        );
        assert!(nr.discovery().is_empty());
        nr.purge_all();
        assert_eq!(update(&mut nr).2, vec![ALL_NSFFS]);
    }

    fn at(ms: u64) -> Instant {
        Instant::from_millis(ms as i64)
    }

    /// Each message twice, 3 ms apart: the copy a second path brings.
    #[track_caller]
    fn twice(nr: &mut NrCore, ms: u64, msg_type: MessageType, payload: &[u8]) {
        nr.handle_message(at(ms), msg_type, payload).unwrap();
        nr.handle_message(at(ms + 3), msg_type, payload).unwrap();
    }

    #[test]
    fn copies_within_the_dedup_window_are_ignored() {
        let mut nr = NrCore::new(&NrConfig {
            dedup_ms: 50,
            ..config()
        })
        .unwrap();
        let fqdn = name("far.example");
        // A registration: one name, one nSFF, counted once.
        twice(
            &mut nr,
            0,
            MessageType::Registration,
            &registration(false, &fqdn, id(2)),
        );
        assert_eq!(nr.names()[&fqdn.hash()].nsffs, BTreeSet::from([id(2)]));
        assert_eq!(nr.stats().get("nr.registrations"), 1);
        assert_eq!(nr.stats().get("nr.duplicates_ignored"), 1);
        assert_eq!(nr.last_heard()[&id(2)], at(3));
        // A path request: answered once, one discovery row.
        let ask = path_request(fqdn.hash(), id(1));
        twice(&mut nr, 10, MessageType::PathRequest, &ask);
        let want = Some((2, path(&[3, 10, 12, 4]), path(&[5, 13, 11, 2])));
        assert_eq!(response(&mut nr), (to(1), want));
        assert_eq!(nr.discovery().len(), 1);
        assert_eq!(nr.stats().get("nr.requests"), 1);
        // A retry once the window has passed is a new request: answered,
        // the same row rewritten.
        nr.handle_message(at(60), MessageType::PathRequest, &ask)
            .unwrap();
        assert_eq!(response(&mut nr), (to(1), want));
        assert_eq!(nr.discovery().len(), 1);
        assert_eq!(nr.discovery()[&(fqdn.hash(), id(1))].at, at(60));
        // A link event: one update.
        twice(&mut nr, 100, MessageType::LinkEvent, &[12, 0]);
        assert_eq!(update(&mut nr), (to(1), UpdateKind::LinkIds, vec![12]));
        assert_eq!(nr.stats().get("nr.link_down"), 1);
        // The update flushed nSFF1's entry; it asks again at once, the same
        // bytes as before the link went down: a new question, answered
        // over the detour.
        nr.handle_message(at(105), MessageType::PathRequest, &ask)
            .unwrap();
        assert_eq!(
            response(&mut nr).1,
            Some((2, path(&[3, 14, 15, 4]), path(&[5, 13, 11, 2])))
        );
        // A deregistration: no refusal for the copy.
        twice(
            &mut nr,
            200,
            MessageType::Registration,
            &registration(true, &fqdn, id(2)),
        );
        assert!(nr.names().is_empty());
        assert_eq!(nr.stats().get("nr.deregistrations"), 1);
        assert_eq!(nr.stats().get("nr.duplicates_ignored"), 4);
        assert_eq!(nr.stats().get("nr.requests"), 3);
        assert_eq!(nr.stats().drops(), 0, "{:?}", nr.stats());
        // Only the last message about a name or link is remembered: a flap
        // inside the window is acted on, every step of it.
        let reg_msg = registration(false, &fqdn, id(2));
        let dereg_msg = registration(true, &fqdn, id(2));
        for (ms, msg) in [(300, &reg_msg), (301, &dereg_msg), (302, &reg_msg)] {
            nr.handle_message(at(ms), MessageType::Registration, msg)
                .unwrap();
        }
        assert_eq!(nr.names()[&fqdn.hash()].nsffs, BTreeSet::from([id(2)]));
        for (ms, state) in [(310, 1), (311, 0), (312, 1)] {
            nr.handle_message(at(ms), MessageType::LinkEvent, &[12, state])
                .unwrap();
        }
        assert_eq!(nr.fabric().down_links(), PathId::ZERO);
        assert_eq!(nr.stats().get("nr.duplicates_ignored"), 4);
        // The window remembers at most `max_dedup` messages; beyond, a
        // message is acted on unremembered, and so is its copy.
        let mut nr = NrCore::new(&NrConfig {
            dedup_ms: 50,
            max_dedup: 1,
            ..config()
        })
        .unwrap();
        let ask_2 = path_request(fqdn.hash(), id(2));
        nr.handle_message(at(0), MessageType::PathRequest, &ask_2)
            .unwrap();
        twice(&mut nr, 1, MessageType::PathRequest, &ask);
        assert_eq!(nr.stats().get("nr.dedup_untracked"), 2);
        assert_eq!(nr.stats().get("nr.requests"), 3);
        assert_eq!(nr.recent.len(), 1);
    }

    /// Copies that arrive after the window (or with `dedup_ms = 0`) are
    /// acted on again, and that is harmless: nothing is added twice.
    #[test]
    fn late_copies_are_idempotent() {
        let mut nr = nr();
        let fqdn = name("far.example");
        let reg_msg = registration(false, &fqdn, id(2));
        twice(&mut nr, 0, MessageType::Registration, &reg_msg);
        assert_eq!(nr.names().len(), 1);
        assert_eq!(nr.names()[&fqdn.hash()].nsffs, BTreeSet::from([id(2)]));
        assert_eq!(nr.stats().get("nr.registrations_refreshed"), 1);
        // Two answers, the same, and one discovery row.
        twice(
            &mut nr,
            10,
            MessageType::PathRequest,
            &path_request(fqdn.hash(), id(1)),
        );
        let v = sent(&mut nr);
        assert_eq!(v.len(), 2, "{v:?}");
        assert_eq!(v[0], v[1]);
        assert_eq!(nr.discovery().len(), 1);
        // The second report of a link changes nothing and is counted.
        twice(&mut nr, 20, MessageType::LinkEvent, &[12, 0]);
        assert_eq!(update(&mut nr), (to(1), UpdateKind::LinkIds, vec![12]));
        assert_eq!(nr.stats().get("nr.link_events_repeated"), 1);
        assert_eq!(nr.fabric().down_links(), path(&[12]));
        // The second deregistration is refused and counted, nothing else.
        let dereg_msg = registration(true, &fqdn, id(2));
        nr.handle_message(at(30), MessageType::Registration, &dereg_msg)
            .unwrap();
        assert_eq!(
            nr.handle_message(at(33), MessageType::Registration, &dereg_msg),
            Err(MessageError::Refused(Refusal::NotRegistered))
        );
        assert!(nr.names().is_empty());
        assert!(sent(&mut nr).is_empty());
        assert_eq!(nr.stats().get("nr.duplicates_ignored"), 0);
    }

    #[test]
    fn caps_refuse_with_counted_reasons() {
        let mut cfg = config();
        cfg.max_names = 2;
        cfg.max_instances = 2;
        let mut nr = NrCore::new(&cfg).unwrap();
        reg(&mut nr, "a.example", 1).unwrap();
        reg(&mut nr, "b.example", 1).unwrap();
        assert_eq!(
            reg(&mut nr, "c.example", 1),
            Err(MessageError::Refused(Refusal::NamesFull))
        );
        reg(&mut nr, "a.example", 2).unwrap();
        assert_eq!(
            reg(&mut nr, "a.example", 3),
            Err(MessageError::Refused(Refusal::InstancesFull))
        );
        assert_eq!(
            reg(&mut nr, "a.example", 9),
            Err(MessageError::Refused(Refusal::UnknownNsff))
        );
        assert_eq!(nr.stats().get("drop.nr.names_full"), 1);
        assert_eq!(nr.stats().get("drop.nr.instances_full"), 1);
        assert_eq!(nr.stats().get("drop.nr.unknown_nsff"), 1);
        assert_eq!(Refusal::NamesFull.status(), 507);
        // A flood of unique names stays bounded.
        for i in 0..1000 {
            let _ = reg(&mut nr, &format!("flood{i}.example"), 1);
        }
        assert_eq!(nr.names().len(), 2);
    }

    const EPOCH: u64 = 1_700_000_000_000_000;

    fn keyed_nr() -> NrCore {
        let mut cfg = config();
        cfg.keys = vec![KeyConfig {
            id: 7,
            secret: "s3cret".into(),
            hex: false,
        }];
        cfg.epoch_us = EPOCH;
        NrCore::new(&cfg).unwrap()
    }

    /// An nSFF's ring with the NR's key.
    fn nsff_ring(sender: u16) -> Keyring {
        Keyring::new(vec![(7, b"s3cret".to_vec())], sender, EPOCH)
    }

    fn sealed(ring: &mut Keyring, t: MessageType, mut m: Vec<u8>) -> Vec<u8> {
        nr::seal(ring, 0, t, &mut m);
        m
    }

    #[test]
    fn authenticated_messages_only_when_keyed() {
        let mut nr = keyed_nr();
        let t = MessageType::Registration;
        let plain = registration(false, &name("a.example"), id(2));
        assert_eq!(
            nr.handle_message(T0, t, &plain),
            Err(MessageError::AuthMissing)
        );
        let mut wrong = plain.clone();
        nr::seal(
            &mut Keyring::new(vec![(7, b"other".to_vec())], 2, EPOCH),
            0,
            t,
            &mut wrong,
        );
        assert_eq!(nr.handle_message(T0, t, &wrong), Err(MessageError::AuthBad));
        let mut unknown = plain.clone();
        nr::seal(
            &mut Keyring::new(vec![(8, b"s3cret".to_vec())], 2, EPOCH),
            0,
            t,
            &mut unknown,
        );
        assert_eq!(
            nr.handle_message(T0, t, &unknown),
            Err(MessageError::AuthUnknownKey)
        );
        // A good tag with no sequence number (the old format): refused.
        let mut unsequenced = plain.clone();
        nr::append_auth(&mut unsequenced, t, 7, b"s3cret");
        assert_eq!(
            nr.handle_message(T0, t, &unsequenced),
            Err(MessageError::Replay(Reject::Unsequenced))
        );
        assert!(nr.names().is_empty());
        let good = sealed(&mut nsff_ring(2), t, plain);
        nr.handle_message(T0, t, &good).unwrap();
        assert_eq!(nr.names().len(), 1);
        for r in [
            "nr.auth_missing",
            "nr.auth_bad",
            "nr.auth_unknown_key",
            "nr.auth_unsequenced",
        ] {
            assert_eq!(nr.stats().get(&format!("drop.{r}")), 1, "{r}");
        }
        // What the NR sends is sealed with key 7 and its own sequence.
        let req = sealed(
            &mut nsff_ring(1),
            MessageType::PathRequest,
            path_request(name("a.example").hash(), id(1)),
        );
        nr.handle_message(T0, MessageType::PathRequest, &req)
            .unwrap();
        let t = nr.poll_transmit().unwrap();
        let mut nsff = nsff_ring(1);
        assert_eq!(
            nr::authenticate(&nsff, t.msg_type, &t.payload),
            Ok(Some((SENDER_NR, EPOCH)))
        );
        assert_eq!(nr::open(&mut nsff, 0, t.msg_type, &t.payload), Ok(()));
    }

    /// Two paths to the NR: the copy of one signed message can arrive
    /// after another message changed the tables. It is still a copy
    /// (ignored), not a replay; past the dedup window it would be one.
    #[test]
    fn a_signed_copy_after_a_table_change_is_still_a_copy() {
        let mut cfg = config();
        cfg.keys = vec![KeyConfig {
            id: 7,
            secret: "s3cret".into(),
            hex: false,
        }];
        cfg.epoch_us = EPOCH;
        cfg.dedup_ms = 50;
        let mut nr = NrCore::new(&cfg).unwrap();
        let mut n2 = nsff_ring(2);
        let t = MessageType::Registration;
        let a = sealed(&mut n2, t, registration(false, &name("a.example"), id(2)));
        let mut b = registration(false, &name("b.example"), id(2));
        nr::seal(&mut n2, 1000, t, &mut b);
        let ms = Duration::from_millis;
        nr.handle_message(T0, t, &a).unwrap();
        nr.handle_message(T0 + ms(1), t, &b).unwrap();
        assert_eq!(nr.names().len(), 2);
        assert_eq!(nr.handle_message(T0 + ms(2), t, &a), Ok(()));
        assert_eq!(nr.stats().get("nr.duplicates_ignored"), 1);
        assert_eq!(nr.stats().get("drop.nr.replayed"), 0);
        assert_eq!(
            nr.handle_message(T0 + ms(60), t, &a),
            Err(MessageError::Replay(Reject::Replayed))
        );
    }

    /// A captured deregistration or link event played again later is
    /// dropped and counted; a fresh one from the same sender is not.
    #[test]
    fn replays_are_dropped_and_counted() {
        let mut nr = keyed_nr();
        let mut n2 = nsff_ring(2);
        let t = MessageType::Registration;
        let reg = sealed(&mut n2, t, registration(false, &name("a.example"), id(2)));
        nr.handle_message(T0, t, &reg).unwrap();
        let mut dereg = registration(true, &name("a.example"), id(2));
        nr::seal(&mut n2, 1000, t, &mut dereg);
        nr.handle_message(T0 + Duration::from_secs(1), t, &dereg)
            .unwrap();
        assert!(nr.names().is_empty());
        // Registered again; the captured deregistration replayed after the
        // dedup window does nothing.
        let mut again = registration(false, &name("a.example"), id(2));
        nr::seal(&mut n2, 2_000_000, t, &mut again);
        nr.handle_message(T0 + Duration::from_secs(2), t, &again)
            .unwrap();
        assert_eq!(
            nr.handle_message(T0 + Duration::from_secs(3), t, &dereg),
            Err(MessageError::Replay(Reject::Replayed))
        );
        assert_eq!(nr.names().len(), 1);
        assert_eq!(nr.stats().get("drop.nr.replayed"), 1);
        // A link event from a switch, replayed: dropped.
        let mut f1 = nsff_ring(SENDER_FWD + 1);
        let ev = Repr::LinkEvent(nr::LinkEvent {
            link_id: 10,
            state: nr::LinkState::Down,
            tlvs: Tlvs::EMPTY,
        });
        let mut down = vec![0; ev.buffer_len()];
        ev.emit(&mut down);
        nr::seal(&mut f1, 3_000_000, MessageType::LinkEvent, &mut down);
        nr.handle_message(T0 + Duration::from_secs(3), MessageType::LinkEvent, &down)
            .unwrap();
        nr.link_event(T0 + Duration::from_secs(4), 10, true)
            .unwrap();
        assert_eq!(
            nr.handle_message(T0 + Duration::from_secs(5), MessageType::LinkEvent, &down),
            Err(MessageError::Replay(Reject::Replayed))
        );
        assert_eq!(nr.stats().get("drop.nr.replayed"), 2);
        // A message older than replay_max_age_s is stale even to a
        // restarted NR (which remembers no window).
        let mut fresh_nr = keyed_nr();
        assert_eq!(
            fresh_nr.handle_message(T0 + Duration::from_secs(120), t, &dereg),
            Err(MessageError::Replay(Reject::Stale))
        );
        assert_eq!(fresh_nr.stats().get("drop.nr.replay_stale"), 1);
    }

    #[test]
    fn garbage_is_dropped_and_counted() {
        let mut nr = nr();
        for (t, p) in [
            (MessageType::Registration, &[0x00, 0x01][..]),
            (MessageType::PathRequest, &[0xff][..]),
            (MessageType::PathResponse, &[0, 0, 0xff, 0][..]),
            (MessageType::TransportData, &[][..]),
        ] {
            assert!(nr.handle_message(T0, t, p).is_err());
        }
        assert_eq!(nr.stats().get("drop.nr.malformed"), 2);
        assert_eq!(nr.stats().get("drop.nr.unexpected_type"), 2);
        // A switch's hello is no garbage: counted, not dropped.
        assert!(nr.handle_message(T0, MessageType::LinkHello, b"hi").is_ok());
        assert_eq!(nr.stats().get("nr.hellos_ignored"), 1);
        assert_eq!(nr.stats().get("drop.nr.unexpected_type"), 2);
        // Registration whose FQDN TLV does not match the hash.
        let mut p = registration(false, &name("a.example"), id(1));
        p[1] ^= 0xff;
        assert_eq!(
            nr.handle_message(T0, MessageType::Registration, &p),
            Err(MessageError::Refused(Refusal::HashMismatch))
        );
        assert!(sent(&mut nr).is_empty());
    }
}
