//! The local SFs room: the table of SFs this nSFF serves (from the node
//! file and from REST), their registrations at the NR, their health
//! (probes and the evidence of proxied exchanges), the REST operations on
//! the table and the state file behind a [`Persist`] hook.

use std::fmt;

use serde_json::{json, Value};
use smoltcp::time::{Duration, Instant};
use smoltcp::wire::IpAddress;
use svcroute_stack::shim::{Direction, Outbox};
use svcroute_stack::stats::Counters;
use svcroute_stack::timer::TimerTable;
use svcroute_stack::wire::gff::MessageType;
use svcroute_stack::wire::nr::{self, Fqdn, NsffId, Registration, Tlv, Tlvs};

use super::io::{ConnId, Conns, Dial, TcpState};
use super::{gff_frame, Fabric, Timer};
use crate::config::{ConfigError, NsffConfig, SfConfig};
use crate::health::{Change, Failure, Health, Policy, ProbeResult};
use crate::rest::{NewSf, Op, RestError};

/// The first gap between registrations, ms; it doubles up to
/// `register_interval_ms`.
pub(crate) const REGISTER_FIRST_GAP_MS: u64 = 1000;

/// Where REST-registered SFs are kept across restarts (`state_file`): the
/// core never touches a file itself.
pub trait Persist: fmt::Debug {
    /// The SFs saved last (none before the first save).
    fn load(&self) -> Result<Vec<SfConfig>, String>;
    /// Replace the saved SFs with `sfs`, atomically.
    fn save(&self, sfs: &[SfConfig]) -> Result<(), String>;
    /// Where they are kept, for messages.
    fn name(&self) -> String;
}

/// What a proxied exchange said about its SF (passive health evidence,
/// see [`crate::health`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Evidence {
    /// A response head came back (relaying TLS: the first bytes): the SF
    /// is alive.
    Answered,
    /// A new connection to it, started at `started`, was refused or timed
    /// out before it was established.
    Refused { started: Instant },
}

/// One local SF, from config or registered over REST.
#[derive(Debug)]
pub(crate) struct LocalSf {
    pub(crate) fqdn: Fqdn,
    pub(crate) addr: IpAddress,
    pub(crate) port: u16,
    pub(crate) tls_port: u16,
    /// Registered over REST (else from `[[nsff.sf]]`).
    pub(crate) rest: bool,
    health: Health,
    /// The health probe's connection while one is in flight.
    probe: Option<ConnId>,
}

impl LocalSf {
    /// As kept in the state file.
    fn config(&self) -> SfConfig {
        SfConfig {
            fqdn: self.fqdn.as_str().to_owned(),
            addr: std_ip(self.addr),
            port: self.port,
            tls_port: self.tls_port,
        }
    }

    pub(crate) fn json(&self) -> Value {
        json!({
            "fqdn": self.fqdn.as_str(), "addr": self.addr.to_string(), "port": self.port,
            "tls_port": self.tls_port, "source": if self.rest { "rest" } else { "config" },
            "healthy": self.health.is_up(), "failed_probes": self.health.failures(),
        })
    }
}

/// The local SFs and what is known about them.
#[derive(Debug)]
pub(crate) struct LocalSfs {
    /// Config ones first, then REST ones in registration order.
    pub(crate) sfs: Vec<LocalSf>,
    /// Where REST SFs are kept across restarts (`state_file`).
    persist: Option<Box<dyn Persist>>,
    /// SFs restored from the state file and dropped at start, for the
    /// counters at the first poll: (restored, dropped).
    pub(crate) restored: Option<(u64, u64)>,
    /// The gap before the next registration round, ms.
    register_gap_ms: u64,
    register_interval_ms: u64,
    max_sfs: usize,
    policy: Policy,
    /// `health_interval_ms` is not 0.
    health_on: bool,
    /// Health evidence from proxied exchanges, by SF address and port,
    /// applied at the end of the poll.
    pub(crate) evidence: Vec<((IpAddress, u16), Evidence)>,
}

impl LocalSfs {
    /// The node file's SFs, then the state file's.
    pub(crate) fn new(
        cfg: &NsffConfig,
        persist: Option<Box<dyn Persist>>,
    ) -> Result<Self, ConfigError> {
        let mut sfs: Vec<LocalSf> = cfg
            .sfs()?
            .into_iter()
            .zip(&cfg.sf)
            .map(|((fqdn, a, port), c)| LocalSf {
                fqdn,
                addr: IpAddress::from(a),
                port,
                tls_port: c.tls_port,
                rest: false,
                health: Health::new(),
                probe: None,
            })
            .collect();
        let restored = match &persist {
            Some(st) => {
                let saved = st.load().map_err(ConfigError::StateFile)?;
                Some(restore(&mut sfs, saved, cfg.max_sfs, st.as_ref())?)
            }
            None => None,
        };
        Ok(Self {
            sfs,
            persist,
            restored,
            register_gap_ms: REGISTER_FIRST_GAP_MS,
            register_interval_ms: cfg.register_interval_ms,
            max_sfs: cfg.max_sfs,
            policy: Policy {
                interval: Duration::from_millis(cfg.health_interval_ms),
                timeout: Duration::from_millis(cfg.health_timeout_ms),
                failures: cfg.health_failures,
            },
            health_on: cfg.health_interval_ms != 0,
            evidence: Vec::new(),
        })
    }

    /// Count what the start restored (once).
    pub(crate) fn count_restored(&mut self, stats: &mut Counters) {
        if let Some((restored, dropped)) = self.restored.take() {
            stats.add("nsff.state_sfs_restored", restored);
            stats.add("nsff.state_sfs_dropped", dropped);
        }
    }

    /// A healthy local SF serving `fqdn`.
    pub(crate) fn http(&self, fqdn: &Fqdn) -> Option<(IpAddress, u16)> {
        self.sfs
            .iter()
            .find(|s| &s.fqdn == fqdn && s.health.is_up())
            .map(|s| (s.addr, s.port))
    }

    /// A healthy local SF serving `fqdn`: its address and TLS port.
    pub(crate) fn tls(&self, fqdn: &Fqdn) -> Option<(IpAddress, u16)> {
        self.sfs
            .iter()
            .find(|s| &s.fqdn == fqdn && s.health.is_up())
            .map(|s| (s.addr, s.tls_port))
    }

    /// When a health probe is next due.
    pub(crate) fn poll_timeout(&self) -> Option<Instant> {
        self.sfs
            .iter()
            .filter_map(|s| s.health.poll_at(&self.policy))
            .min()
            .filter(|_| self.health_on)
    }

    /// Send our registrations (healthy SFs only), and arm the next round:
    /// soon again at first, since a registration sent before the fabric
    /// or the NR was up is lost, and nothing says so.
    pub(crate) fn register(
        &mut self,
        now: Instant,
        fabric: &Fabric,
        timers: &mut TimerTable<Timer>,
        out: &mut Outbox,
        stats: &mut Counters,
    ) {
        for sf in &self.sfs {
            if sf.health.is_up() {
                send_registration(fabric, &sf.fqdn, false, out);
                stats.bump("nsff.registrations_sent");
            }
        }
        let gap = self.register_gap_ms.min(self.register_interval_ms);
        self.register_gap_ms = gap.saturating_mul(2);
        timers.set(Timer::Register, now + Duration::from_millis(gap));
    }

    /// Active health checks: a TCP connect to each SF that nothing proved
    /// alive in the last `health_interval_ms` (see [`crate::health`]).
    /// `health_failures` counted failures in a row deregister the name at
    /// the NR (and local requests for it are resolved elsewhere); the first
    /// success after that registers it again. Returns whether anything
    /// happened, and the SFs whose idle connections are now to be dropped.
    // The probe's inputs (time, connections, local ports) and outputs
    // (registrations, counters, connections to drop) are all distinct.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn health_checks(
        &mut self,
        now: Instant,
        io: &mut impl Conns,
        next_local_port: &mut u16,
        fabric: &Fabric,
        out: &mut Outbox,
        stats: &mut Counters,
        drop_idle: &mut Vec<(IpAddress, u16)>,
    ) -> bool {
        if !self.health_on {
            return false;
        }
        let policy = self.policy;
        let mut any = false;
        for i in 0..self.sfs.len() {
            let sf = &mut self.sfs[i];
            if let Some(sock) = sf.probe {
                let state = io.state(sock);
                let ok = state == TcpState::Established;
                let expired = sf.health.probe_deadline(&policy).is_some_and(|t| now >= t);
                if !ok && state != TcpState::Closed && !expired {
                    continue;
                }
                io.abort(sock);
                io.remove(sock);
                sf.probe = None;
                any = true;
                if !ok {
                    stats.bump("nsff.health_failures");
                }
                match sf.health.probe_done(now, ok, &policy) {
                    Some(ProbeResult::Connected(change)) => {
                        self.health_change(fabric, out, stats, i, change);
                    }
                    Some(ProbeResult::Failed(f)) => {
                        self.failure_verdict(fabric, out, stats, i, f, drop_idle);
                    }
                    None => {}
                }
            } else if sf.health.poll_probe(now) {
                let local = *next_local_port;
                *next_local_port = if local == u16::MAX { 49152 } else { local + 1 };
                let dial = Dial::Probe {
                    timeout: policy.timeout,
                };
                match io.connect((sf.addr, sf.port), local, dial) {
                    Ok(c) => {
                        sf.probe = Some(c);
                        sf.health.probe_started(now);
                        stats.bump("nsff.health_probes");
                    }
                    Err(_) => {
                        // Our side could not even try: not the SF's fault.
                        sf.health.probe_not_started(now, &policy);
                        stats.bump("nsff.health_probes_not_started");
                    }
                }
                any = true;
            }
        }
        any
    }

    /// Feed what proxied exchanges said about their SFs into every local
    /// SF at that address and port (several names may share one).
    pub(crate) fn apply_evidence(
        &mut self,
        now: Instant,
        fabric: &Fabric,
        out: &mut Outbox,
        stats: &mut Counters,
        drop_idle: &mut Vec<(IpAddress, u16)>,
    ) {
        if !self.health_on {
            // Health checks off: nothing would ever bring an SF back.
            self.evidence.clear();
            return;
        }
        if self.evidence.is_empty() {
            return;
        }
        let policy = self.policy;
        for (target, ev) in std::mem::take(&mut self.evidence) {
            if matches!(ev, Evidence::Refused { .. }) {
                stats.bump("nsff.sf_refused");
            }
            for i in 0..self.sfs.len() {
                let sf = &self.sfs[i];
                // Evidence from HTTP exchanges (`port`) or TLS relays
                // (`tls_port`).
                if sf.addr != target.0 || (sf.port != target.1 && sf.tls_port != target.1) {
                    continue;
                }
                match ev {
                    Evidence::Answered => {
                        let change = self.sfs[i].health.handle_success(now, &policy);
                        self.health_change(fabric, out, stats, i, change);
                    }
                    Evidence::Refused { started } => {
                        let f = self.sfs[i].health.handle_failure(now, started, &policy);
                        self.failure_verdict(fabric, out, stats, i, f, drop_idle);
                    }
                }
            }
        }
    }

    /// Act on failure evidence about SF `i`: count what was discounted,
    /// drop its idle connections unless it answered meanwhile, and take it
    /// down if that was the last straw.
    fn failure_verdict(
        &mut self,
        fabric: &Fabric,
        out: &mut Outbox,
        stats: &mut Counters,
        i: usize,
        f: Failure,
        drop_idle: &mut Vec<(IpAddress, u16)>,
    ) {
        match f {
            Failure::Overtaken => {
                // It answered another exchange since: alive, connections too.
                stats.bump("nsff.health_failures_overtaken");
                return;
            }
            Failure::SameIncident => stats.bump("nsff.health_failures_same_incident"),
            Failure::Counted | Failure::Down => {}
        }
        // The SF took no new connection: its idle keep-alive connections
        // are dead, or stale once it restarts (the new process resets them
        // on first use, failing that request). The next requests connect
        // afresh.
        drop_idle.push((self.sfs[i].addr, self.sfs[i].port));
        self.health_change(fabric, out, stats, i, f.change());
    }

    /// Register or deregister SF `i`'s name after its health changed.
    fn health_change(
        &self,
        fabric: &Fabric,
        out: &mut Outbox,
        stats: &mut Counters,
        i: usize,
        change: Option<Change>,
    ) {
        let sf = &self.sfs[i];
        match change {
            None => {}
            Some(Change::Up) => {
                stats.bump("nsff.sf_up");
                log::info!(
                    "nsff: SF {} at {}:{} is up, registering",
                    sf.fqdn,
                    sf.addr,
                    sf.port
                );
                send_registration(fabric, &sf.fqdn, false, out);
                stats.bump("nsff.registrations_sent");
            }
            Some(Change::Down) => {
                stats.bump("nsff.sf_down");
                log::warn!(
                    "nsff: SF {} at {}:{} is down, deregistering",
                    sf.fqdn,
                    sf.addr,
                    sf.port
                );
                send_registration(fabric, &sf.fqdn, true, out);
                stats.bump("nsff.deregistrations_sent");
            }
        }
    }

    /// Carry out one REST operation on the SF table; a removed SF lands in
    /// `removed` (its sockets are let go by [`LocalSfs::forget`]).
    // Inputs (time, the operation, the fabric, the timers) and outputs
    // (registrations, counters, removed SFs) are all distinct.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn apply_rest(
        &mut self,
        now: Instant,
        op: Op,
        fabric: &Fabric,
        timers: &mut TimerTable<Timer>,
        out: &mut Outbox,
        stats: &mut Counters,
        removed: &mut Vec<LocalSf>,
    ) -> Result<(u16, Value), RestError> {
        let conflict = |reason: String| RestError {
            status: 409,
            field: Some("fqdn"),
            reason,
        };
        match op {
            Op::List => Ok((200, self.list_json(fabric.me))),
            Op::Show(fqdn) => self
                .sfs
                .iter()
                .find(|s| s.fqdn == fqdn)
                .map(|s| (200, s.json()))
                .ok_or_else(|| RestError::new(404, format!("no local SF {fqdn}"))),
            Op::Add(NewSf {
                fqdn,
                addr,
                port,
                tls_port,
            }) => {
                let addr = IpAddress::from(addr);
                if let Some(e) = self.sfs.iter().find(|s| s.fqdn == fqdn) {
                    if !e.rest {
                        return Err(conflict(format!(
                            "{fqdn} is configured in the node file ([[nsff.sf]])"
                        )));
                    }
                    if (e.addr, e.port, e.tls_port) != (addr, port, tls_port) {
                        return Err(conflict(format!(
                            "{fqdn} is already registered at {}:{}; DELETE it first",
                            e.addr, e.port
                        )));
                    }
                    // The same SF again (it restarted, say): refresh.
                    stats.bump("nsff.rest_sf_refreshed");
                    if e.health.is_up() {
                        send_registration(fabric, &fqdn, false, out);
                        stats.bump("nsff.registrations_sent");
                    }
                    return Ok((200, e.json()));
                }
                if let Some(e) = self.sfs.iter().find(|s| s.fqdn.hash() == fqdn.hash()) {
                    return Err(conflict(format!(
                        "{fqdn} has the same 16-bit name hash as local SF {} (RFC 8677)",
                        e.fqdn
                    )));
                }
                if self.sfs.len() >= self.max_sfs {
                    return Err(RestError::new(
                        507,
                        format!("this nSFF has max_sfs = {} local SFs", self.max_sfs),
                    ));
                }
                let sf = LocalSf {
                    fqdn,
                    addr,
                    port,
                    tls_port,
                    rest: true,
                    health: Health::new(),
                    probe: None,
                };
                self.save(Some(&sf), None, stats)?;
                let fqdn = &sf.fqdn;
                log::info!("nsff: REST registered SF {fqdn} at {addr}:{port}");
                send_registration(fabric, fqdn, false, out);
                stats.bump("nsff.registrations_sent");
                // Registrations are not acknowledged: repeat soon, as at start.
                self.register_gap_ms = REGISTER_FIRST_GAP_MS;
                timers.set(
                    Timer::Register,
                    now + Duration::from_millis(REGISTER_FIRST_GAP_MS),
                );
                stats.bump("nsff.rest_sf_added");
                let v = sf.json();
                self.sfs.push(sf);
                Ok((201, v))
            }
            Op::Remove(fqdn) => {
                let Some(i) = self.sfs.iter().position(|s| s.fqdn == fqdn) else {
                    return Err(RestError::new(404, format!("no local SF {fqdn}")));
                };
                if !self.sfs[i].rest {
                    return Err(conflict(format!(
                        "{fqdn} is configured in the node file ([[nsff.sf]]), not removable over REST"
                    )));
                }
                self.save(None, Some(&fqdn), stats)?;
                let sf = self.sfs.remove(i);
                log::info!("nsff: REST removed SF {fqdn}");
                send_registration(fabric, &fqdn, true, out);
                stats.bump("nsff.deregistrations_sent");
                stats.bump("nsff.rest_sf_removed");
                removed.push(sf);
                Ok((204, Value::Null))
            }
        }
    }

    /// `GET /sf`.
    pub(crate) fn list_json(&self, me: NsffId) -> Value {
        json!({
            "nsff_id": me.value(),
            "max_sfs": self.max_sfs,
            "sfs": self.sfs.iter().map(LocalSf::json).collect::<Vec<Value>>(),
        })
    }

    /// Save the REST SFs as they are after a change (`add` appended,
    /// `remove` left out) before it is made: if the state file cannot be
    /// written, the change is refused (500) and nothing changes.
    fn save(
        &self,
        add: Option<&LocalSf>,
        remove: Option<&Fqdn>,
        stats: &mut Counters,
    ) -> Result<(), RestError> {
        let Some(persist) = &self.persist else {
            return Ok(());
        };
        let sfs: Vec<SfConfig> = self
            .sfs
            .iter()
            .filter(|s| s.rest && Some(&s.fqdn) != remove)
            .chain(add)
            .map(LocalSf::config)
            .collect();
        persist.save(&sfs).map_err(|e| {
            stats.bump("nsff.state_write_errors");
            log::error!("nsff: {e}");
            RestError::new(500, format!("not saved, nothing changed: {e}"))
        })
    }

    /// Let go of a removed SF's probe; returns the SF whose idle
    /// connections go too. Exchanges in progress finish on their own
    /// connections.
    pub(crate) fn forget(sf: LocalSf, io: &mut impl Conns) -> (IpAddress, u16) {
        if let Some(sock) = sf.probe {
            io.abort(sock);
            io.remove(sock);
        }
        (sf.addr, sf.port)
    }
}

/// Send a (de)registration of `fqdn` to the NR.
pub(crate) fn send_registration(fabric: &Fabric, fqdn: &Fqdn, deregister: bool, out: &mut Outbox) {
    let tlvs = [Tlv::Fqdn(fqdn.as_str())];
    let repr = nr::Repr::Registration(Registration {
        deregister,
        hash: fqdn.hash(),
        nsff_id: fabric.me,
        tlvs: Tlvs::new(&tlvs).unwrap_or(Tlvs::EMPTY),
    });
    let mut b = vec![0; repr.buffer_len()];
    repr.emit(&mut b);
    fabric.seal_nr(MessageType::Registration, &mut b);
    out.inject(
        fabric.port,
        Direction::ToWire,
        gff_frame(fabric.mac, fabric.nr_path, MessageType::Registration, &b),
    );
}

/// Append the SFs saved in the state file to `sfs` (the config ones) as
/// REST SFs: (restored, dropped). One the node file now configures (by
/// name or name hash) or beyond `max_sfs` is dropped with a warning: the
/// node file wins, and the state file forgets it at the next change. A
/// name that is not an FQDN means the file is not ours to trust: an error.
fn restore(
    sfs: &mut Vec<LocalSf>,
    saved: Vec<SfConfig>,
    max_sfs: usize,
    store: &dyn Persist,
) -> Result<(u64, u64), ConfigError> {
    let (mut restored, mut dropped) = (0, 0);
    let name = store.name();
    for c in saved {
        let fqdn = Fqdn::new(&c.fqdn.to_ascii_lowercase())
            .map_err(|_| ConfigError::StateFile(format!("{name}: bad fqdn {:?}", c.fqdn)))?;
        let clash = sfs
            .iter()
            .find(|s| s.fqdn == fqdn || s.fqdn.hash() == fqdn.hash());
        if let Some(e) = clash {
            log::warn!(
                "nsff: {name}: SF {fqdn} dropped, it clashes with {} ({})",
                e.fqdn,
                if e.rest {
                    "saved twice"
                } else {
                    "in the node file"
                }
            );
            dropped += 1;
            continue;
        }
        if sfs.len() >= max_sfs {
            log::warn!("nsff: {name}: SF {fqdn} dropped, max_sfs = {max_sfs} reached");
            dropped += 1;
            continue;
        }
        log::info!(
            "nsff: restored REST SF {fqdn} at {}:{} from {name}",
            c.addr,
            c.port,
        );
        sfs.push(LocalSf {
            fqdn,
            addr: IpAddress::from(c.addr),
            port: c.port,
            tls_port: c.tls_port,
            rest: true,
            health: Health::new(),
            probe: None,
        });
        restored += 1;
    }
    Ok((restored, dropped))
}

pub(crate) fn std_ip(a: IpAddress) -> core::net::IpAddr {
    match a {
        IpAddress::Ipv4(a) => core::net::IpAddr::V4(a),
        IpAddress::Ipv6(a) => core::net::IpAddr::V6(a),
    }
}
