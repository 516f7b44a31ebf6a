//! Health of one local SF: active probes plus passive evidence from the
//! exchanges the nSFF proxies to it (sans-IO).
//!
//! ```text
//!   proxied exchange: response head ──► handle_success ──┐
//!   proxied connect refused/timed out ► handle_failure ──┤
//!   poll_probe(now) ─► driver connects ─► probe_done ────┴─► Some(Change::Up | Down)
//! ```
//!
//! An SF that answers proxied requests is alive, whatever a probe says: a
//! busy SF (a full listen backlog, a SYN lost or late on a loaded machine)
//! can fail a one-SYN probe while serving thousands of requests a second,
//! and declaring it down then turns a blip into hundreds of 502s. So:
//!
//! - **Success** (a proxied exchange got a response head, or a probe
//!   connected) resets the failure count and defers the next probe by
//!   `interval`: while traffic proves the SF alive, it is not probed.
//! - **Failure** (a probe, or a proxied connect, that was refused or timed
//!   out) counts only if nothing succeeded since that attempt started
//!   ([`Failure::Overtaken`]). Refused proxied connects count at most once
//!   per `interval` ([`Failure::SameIncident`]): a burst of them is one
//!   failed check, not `health_failures` of them. Probes are `interval`
//!   apart anyway.
//! - `failures` counted failures in a row take the SF down; the first
//!   success brings it back.
//! - A probe that could not even be attempted (no socket, no port) is
//!   [`Health::probe_not_started`]: retried after `interval`, not counted.
//!
//! Call order: [`Health::poll_probe`] each poll; if it says so, start a
//! probe and call [`Health::probe_started`] (or
//! [`Health::probe_not_started`]); when the probe connects, is refused or
//! passes [`Health::probe_deadline`], [`Health::probe_done`]. Feed proxied
//! outcomes at any time. Every call takes `now`; nothing reads a clock.

use smoltcp::time::{Duration, Instant};

/// How an SF is checked (`health_interval_ms`, `health_timeout_ms`,
/// `health_failures`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    /// Probe period; also the least time between two counted failures.
    pub interval: Duration,
    /// A probe not connected after this long failed.
    pub timeout: Duration,
    /// Counted failures in a row that take the SF down (at least 1).
    pub failures: u32,
}

/// A change of the SF's state, for the driver to act on (register or
/// deregister its name).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// It was down and answered: register its name again.
    Up,
    /// `failures` counted failures in a row: deregister its name.
    Down,
}

/// What became of one piece of failure evidence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// Counted; the SF stays as it was.
    Counted,
    /// Counted, and it was the last straw: the SF is now down.
    Down,
    /// Not counted: something succeeded after this attempt started.
    Overtaken,
    /// Not counted: a failure was counted less than `interval` ago (the
    /// same incident).
    SameIncident,
}

impl Failure {
    /// The state change it caused, if any.
    pub const fn change(self) -> Option<Change> {
        match self {
            Self::Down => Some(Change::Down),
            _ => None,
        }
    }
}

/// How a probe ended, and what that changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProbeResult {
    /// It connected; `Some(Change::Up)` if the SF was down.
    Connected(Option<Change>),
    /// It was refused or timed out.
    Failed(Failure),
}

/// Health of one local SF. A new one counts as up until it fails.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Health {
    up: bool,
    /// Counted failures in a row.
    fails: u32,
    last_success: Option<Instant>,
    last_counted_failure: Option<Instant>,
    /// When the probe in flight started.
    probe: Option<Instant>,
    /// No probe before this (`None`: at once).
    next_probe: Option<Instant>,
}

impl Default for Health {
    fn default() -> Self {
        Self::new()
    }
}

impl Health {
    /// A new SF: up, probed at the first poll.
    pub const fn new() -> Self {
        Self {
            up: true,
            fails: 0,
            last_success: None,
            last_counted_failure: None,
            probe: None,
            next_probe: None,
        }
    }

    /// Whether requests may go to it and its name is registered.
    pub const fn is_up(&self) -> bool {
        self.up
    }

    /// Counted failures in a row.
    pub const fn failures(&self) -> u32 {
        self.fails
    }

    /// Whether a probe is in flight.
    pub const fn probing(&self) -> bool {
        self.probe.is_some()
    }

    /// Whether a probe should start now: none is in flight and nothing
    /// proved the SF alive in the last `interval`.
    #[must_use]
    pub fn poll_probe(&self, now: Instant) -> bool {
        self.probe.is_none() && self.next_probe.is_none_or(|t| t <= now)
    }

    /// The driver started the probe [`Self::poll_probe`] asked for.
    pub fn probe_started(&mut self, now: Instant) {
        self.probe = Some(now);
    }

    /// The probe could not be attempted (a local limit): not the SF's
    /// fault; try again after `interval`.
    pub fn probe_not_started(&mut self, now: Instant, policy: &Policy) {
        self.probe = None;
        self.next_probe = Some(now + policy.interval);
    }

    /// When the probe in flight fails for want of an answer.
    pub fn probe_deadline(&self, policy: &Policy) -> Option<Instant> {
        self.probe.map(|t| t + policy.timeout)
    }

    /// When the driver must look next: the probe's deadline, or when the
    /// next probe is due (`None`: at the next poll, whenever that is).
    pub fn poll_at(&self, policy: &Policy) -> Option<Instant> {
        self.probe_deadline(policy).or(self.next_probe)
    }

    /// The probe in flight connected (`ok`) or was refused or timed out.
    /// The next one is due `interval` from now. Spurious calls (no probe
    /// in flight) are ignored: `None`.
    pub fn probe_done(&mut self, now: Instant, ok: bool, policy: &Policy) -> Option<ProbeResult> {
        let started = self.probe.take()?;
        self.next_probe = Some(now + policy.interval);
        Some(if ok {
            ProbeResult::Connected(self.handle_success(now, policy))
        } else {
            ProbeResult::Failed(self.count_failure(now, started, policy))
        })
    }

    /// The SF answered (a proxied exchange got its response head, or a
    /// probe connected). Returns [`Change::Up`] if it was down.
    pub fn handle_success(&mut self, now: Instant, policy: &Policy) -> Option<Change> {
        self.fails = 0;
        self.last_success = Some(self.last_success.map_or(now, |t| t.max(now)));
        // Traffic is the probe: the next one only after a quiet interval.
        let defer = now + policy.interval;
        self.next_probe = Some(self.next_probe.map_or(defer, |t| t.max(defer)));
        if self.up {
            return None;
        }
        self.up = true;
        Some(Change::Up)
    }

    /// A proxied connect started at `started` was refused or timed out at
    /// `now`. At most one such failure counts per `interval` (probes are
    /// that far apart anyway).
    pub fn handle_failure(&mut self, now: Instant, started: Instant, policy: &Policy) -> Failure {
        if self.last_success.is_some_and(|t| t >= started) {
            return Failure::Overtaken;
        }
        if self
            .last_counted_failure
            .is_some_and(|t| now < t + policy.interval)
        {
            return Failure::SameIncident;
        }
        self.count_failure(now, started, policy)
    }

    /// A failed attempt started at `started`: counted unless something
    /// succeeded since it started.
    fn count_failure(&mut self, now: Instant, started: Instant, policy: &Policy) -> Failure {
        if self.last_success.is_some_and(|t| t >= started) {
            return Failure::Overtaken;
        }
        self.last_counted_failure = Some(now);
        self.fails = self.fails.saturating_add(1);
        if self.up && self.fails >= policy.failures {
            self.up = false;
            return Failure::Down;
        }
        Failure::Counted
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const POLICY: Policy = Policy {
        interval: Duration::from_millis(2000),
        timeout: Duration::from_millis(1000),
        failures: 2,
    };

    fn at(ms: i64) -> Instant {
        Instant::from_millis(ms)
    }

    /// Start a probe at `start` and finish it at `end`.
    #[track_caller]
    fn probe(h: &mut Health, start: i64, end: i64, ok: bool) -> Option<ProbeResult> {
        assert!(h.poll_probe(at(start)), "no probe due at {start}: {h:?}");
        h.probe_started(at(start));
        h.probe_done(at(end), ok, &POLICY)
    }

    #[test]
    fn an_idle_sf_is_probed_every_interval() {
        let mut h = Health::new();
        assert!(h.is_up());
        assert_eq!(
            probe(&mut h, 0, 5, true),
            Some(ProbeResult::Connected(None))
        );
        assert!(!h.poll_probe(at(2004)));
        assert!(h.poll_probe(at(2005)));
        assert_eq!(h.probe_deadline(&POLICY), None);
        h.probe_started(at(2005));
        assert!(!h.poll_probe(at(9000)), "one probe at a time");
        assert_eq!(h.probe_deadline(&POLICY), Some(at(3005)));
    }

    /// The bench's flap: the SF serves a request every millisecond, two
    /// probes in a row are refused (its backlog full) or lost. Today's
    /// probe-only logic took it down; traffic in between must win.
    #[test]
    fn failed_probes_do_not_take_down_an_sf_that_answers_proxied_requests() {
        let mut h = Health::new();
        // Two probes, each failing, with proxied successes around them.
        h.probe_started(at(0));
        h.handle_success(at(500), &POLICY);
        assert_eq!(
            h.probe_done(at(1000), false, &POLICY),
            Some(ProbeResult::Failed(Failure::Overtaken))
        );
        h.handle_success(at(1500), &POLICY);
        // Traffic defers the probes: none due while requests succeed.
        for ms in (1500..10_000).step_by(1) {
            h.handle_success(at(ms), &POLICY);
            assert!(!h.poll_probe(at(ms)), "probed at {ms} despite traffic");
        }
        assert!(h.is_up());
        assert_eq!(h.failures(), 0);
    }

    /// A burst of refused proxied connects (a backlog momentarily full)
    /// is one failed check, not `failures` of them.
    #[test]
    fn a_burst_of_refused_connects_is_one_incident() {
        let mut h = Health::new();
        h.handle_success(at(0), &POLICY);
        assert_eq!(h.handle_failure(at(10), at(5), &POLICY), Failure::Counted);
        for ms in 11..200 {
            assert_eq!(
                h.handle_failure(at(ms), at(ms - 5), &POLICY),
                Failure::SameIncident
            );
        }
        assert!(h.is_up());
        assert_eq!(h.failures(), 1);
        // The SF answers again: the count starts over.
        h.handle_success(at(300), &POLICY);
        assert_eq!(h.failures(), 0);
        // A connect that started before that success failed late: the
        // success overtook it.
        assert_eq!(
            h.handle_failure(at(2500), at(250), &POLICY),
            Failure::Overtaken
        );
        assert!(h.is_up());
    }

    /// A killed SF: probes and proxied connects fail, nothing succeeds.
    /// It is down after `failures` counted failures, `interval` apart.
    #[test]
    fn a_dead_sf_is_taken_down_and_comes_back() {
        let mut h = Health::new();
        assert_eq!(
            probe(&mut h, 0, 3, true),
            Some(ProbeResult::Connected(None))
        );
        // Killed at 1000; clients retry, their connects time out or are
        // refused.
        assert_eq!(
            h.handle_failure(at(1100), at(1050), &POLICY),
            Failure::Counted
        );
        assert_eq!(
            h.handle_failure(at(1200), at(1150), &POLICY),
            Failure::SameIncident
        );
        // The probe due at 2003 fails after its timeout.
        assert_eq!(
            probe(&mut h, 2003, 3003, false),
            Some(ProbeResult::Failed(Failure::Down)),
            "{h:?}"
        );
        assert!(!h.is_up());
        // Probes go on while it is down; more failures change nothing.
        assert_eq!(
            probe(&mut h, 5003, 5004, false),
            Some(ProbeResult::Failed(Failure::Counted))
        );
        assert!(!h.is_up());
        // It restarts: the next probe connects, it is up again.
        assert!(h.poll_probe(at(7004)));
        h.probe_started(at(7004));
        assert!(h.probing());
        assert_eq!(
            h.probe_done(at(7005), true, &POLICY),
            Some(ProbeResult::Connected(Some(Change::Up)))
        );
        assert!(h.is_up());
        assert_eq!(h.failures(), 0);
    }

    /// Probe failures alone still take an idle SF down, as before.
    #[test]
    fn failed_probes_of_an_idle_sf_take_it_down() {
        let mut h = Health::new();
        assert_eq!(
            probe(&mut h, 0, 1000, false),
            Some(ProbeResult::Failed(Failure::Counted))
        );
        assert_eq!(
            probe(&mut h, 3000, 3001, false),
            Some(ProbeResult::Failed(Failure::Down))
        );
        assert_eq!(Failure::Down.change(), Some(Change::Down));
        assert_eq!(Failure::Counted.change(), None);
    }

    #[test]
    fn a_probe_not_attempted_is_no_failure_and_spurious_calls_are_harmless() {
        let mut h = Health::new();
        assert!(h.poll_probe(at(0)));
        h.probe_not_started(at(0), &POLICY);
        assert!(!h.poll_probe(at(1999)));
        assert_eq!(h.failures(), 0);
        assert_eq!(h.probe_done(at(100), false, &POLICY), None);
        assert_eq!(h.failures(), 0);
        assert!(h.is_up());
        // A success while up changes nothing; a late, older one does not
        // move the clock back.
        assert_eq!(h.handle_success(at(500), &POLICY), None);
        assert_eq!(h.handle_success(at(400), &POLICY), None);
        assert_eq!(
            h.handle_failure(at(600), at(450), &POLICY),
            Failure::Overtaken
        );
    }
}
