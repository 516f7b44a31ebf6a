//! Trace-style tests of the transport: two endpoints, A (nSFF 1, origin) and
//! B (nSFF 2, egress), joined by an in-memory network with a scripted fate
//! for every packet.

use proptest::prelude::*;

use super::*;

const A: u8 = 1;
const B: u8 = 2;

fn p_ab() -> PathId {
    PathId::link(1).with(4)
}

fn p_ba() -> PathId {
    PathId::link(3).with(6)
}

fn cfg() -> TransportConfig {
    TransportConfig::default()
}

fn ep(id: u8, cfg: &TransportConfig) -> Endpoint {
    // NOTE(unwrap): test IDs and configs are valid.
    Endpoint::new(NsffId::new(id).unwrap(), cfg.clone(), 0).unwrap()
}

fn t0() -> Instant {
    Instant::from_millis(1_000)
}

fn drain(e: &mut Endpoint) -> Vec<Transmit> {
    std::iter::from_fn(|| e.poll_transmit()).collect()
}

fn events(e: &mut Endpoint) -> Vec<Event> {
    std::iter::from_fn(|| e.poll_event()).collect()
}

/// A data packet's header and data.
fn data_of(t: &Transmit) -> Option<(DataRepr, Vec<u8>)> {
    if t.msg_type != MessageType::TransportData {
        return None;
    }
    let p = DataPacket::new_checked(&t.payload[..]).ok()?;
    Some((DataRepr::parse(&p).ok()?, p.data().to_vec()))
}

/// A NACK's sequence numbers.
fn nack_of(t: &Transmit) -> Option<Vec<u32>> {
    if t.msg_type != MessageType::TransportNack {
        return None;
    }
    let p = NackPacket::new_checked(&t.payload[..]).ok()?;
    Some(NackRepr::parse(&p).ok()?.seqs.iter().collect())
}

#[track_caller]
fn feed(e: &mut Endpoint, now: Instant, ts: Vec<Transmit>) {
    for t in ts {
        let _ = e.handle_packet(now, t.path, t.msg_type, &t.payload);
    }
}

fn payload(len: usize, salt: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u32).wrapping_mul(2_654_435_761).to_be_bytes()[0] ^ salt)
        .collect()
}

/// What happens to one packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    Deliver,
    Drop,
    Dup,
    /// Deliver this many ms late.
    Late(u8),
    /// Flip a bit.
    Corrupt,
}

/// Which way a packet goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Dir {
    AtoB,
    BtoA,
}

type FateFn = Box<dyn FnMut(Dir, &Transmit) -> Fate>;

/// Two endpoints, an in-memory network (1 ms one way) and two tiny
/// applications: A sends `request` on one transaction and reads the answer,
/// B reads the request and answers `response(request)` on the same one.
struct Net {
    a: Endpoint,
    b: Endpoint,
    now: Instant,
    order: u64,
    inflight: Vec<(Instant, u64, Dir, Transmit)>,
    fate: FateFn,
    request: Vec<u8>,
    request_sent: usize,
    txn: Option<Txn>,
    b_txn: Option<Txn>,
    got_request: Vec<u8>,
    request_done: bool,
    response: Vec<u8>,
    response_sent: usize,
    got_response: Vec<u8>,
    response_done: bool,
    a_events: Vec<Event>,
    b_events: Vec<Event>,
    /// Every packet put on the network, with its fate.
    log: Vec<(Dir, Transmit, Fate)>,
    /// Both apps end their message with [`Endpoint::send_last`] (the end
    /// marker joins the last data's window) instead of `send` then
    /// `finish`.
    last: bool,
    /// A's and B's `send_last` took the whole message (their direction is
    /// finished).
    ended: (bool, bool),
}

impl Net {
    fn new(cfg: &TransportConfig, request: Vec<u8>, fate: FateFn) -> Self {
        let mut a = ep(A, cfg);
        let now = t0();
        // NOTE(unwrap): a fresh endpoint has room.
        let txn = a.open(now, p_ab(), p_ba()).unwrap();
        Self {
            a,
            b: ep(B, cfg),
            now,
            order: 0,
            inflight: Vec::new(),
            fate,
            request,
            request_sent: 0,
            txn: Some(txn),
            b_txn: None,
            got_request: Vec::new(),
            request_done: false,
            response: Vec::new(),
            response_sent: 0,
            got_response: Vec::new(),
            response_done: false,
            a_events: Vec::new(),
            b_events: Vec::new(),
            log: Vec::new(),
            last: false,
            ended: (false, false),
        }
    }

    /// The same, both apps ending their messages with `send_last`.
    fn with_last(cfg: &TransportConfig, request: Vec<u8>, fate: FateFn) -> Self {
        Self {
            last: true,
            ..Self::new(cfg, request, fate)
        }
    }

    fn answer(request: &[u8]) -> Vec<u8> {
        let mut r: Vec<u8> = request.iter().rev().map(|b| b ^ 0x5a).collect();
        r.extend_from_slice(b"-response");
        r
    }

    fn apps(&mut self) {
        let now = self.now;
        let mut buf = vec![0; 65536];
        if let Some(txn) = self.txn {
            let rest = &self.request[self.request_sent..];
            if self.last && !self.ended.0 {
                if let Ok(n) = self.a.send_last(now, txn, rest) {
                    self.request_sent += n;
                    self.ended.0 = n == rest.len();
                }
            } else if !rest.is_empty() {
                if let Ok(n) = self.a.send(now, txn, rest) {
                    self.request_sent += n;
                }
            }
            if !self.last && self.request_sent == self.request.len() {
                let _ = self.a.finish(now, txn);
            }
            while let Ok(Some(n)) = self.a.recv(now, txn, &mut buf) {
                if n == 0 {
                    self.response_done = true;
                    break;
                }
                self.got_response.extend_from_slice(&buf[..n]);
            }
        }
        for e in events(&mut self.b) {
            if let Event::Opened { txn, .. } = e {
                self.b_txn = Some(txn);
            }
            self.b_events.push(e);
        }
        self.a_events.extend(events(&mut self.a));
        if let Some(txn) = self.b_txn {
            while let Ok(Some(n)) = self.b.recv(now, txn, &mut buf) {
                if n == 0 {
                    if !self.request_done {
                        self.request_done = true;
                        self.response = Self::answer(&self.got_request);
                    }
                    break;
                }
                self.got_request.extend_from_slice(&buf[..n]);
            }
            if self.request_done {
                let rest = &self.response[self.response_sent..];
                if self.last && !self.ended.1 {
                    if let Ok(n) = self.b.send_last(now, txn, rest) {
                        self.response_sent += n;
                        self.ended.1 = n == rest.len();
                    }
                } else if !rest.is_empty() {
                    if let Ok(n) = self.b.send(now, txn, rest) {
                        self.response_sent += n;
                    }
                }
                if !self.last && self.response_sent == self.response.len() {
                    let _ = self.b.finish(now, txn);
                }
            }
        }
        self.a_events.extend(events(&mut self.a));
        self.b_events.extend(events(&mut self.b));
    }

    fn ship(&mut self) {
        for (dir, ts) in [
            (Dir::AtoB, drain(&mut self.a)),
            (Dir::BtoA, drain(&mut self.b)),
        ] {
            for mut t in ts {
                let fate = (self.fate)(dir, &t);
                self.log.push((dir, t.clone(), fate));
                let at = self.now + Duration::from_millis(1);
                match fate {
                    Fate::Drop => continue,
                    Fate::Deliver => {}
                    Fate::Dup => {
                        self.order += 1;
                        self.inflight.push((at, self.order, dir, t.clone()));
                    }
                    Fate::Late(ms) => {
                        self.order += 1;
                        let late = at + Duration::from_millis(u64::from(ms));
                        self.inflight.push((late, self.order, dir, t));
                        continue;
                    }
                    Fate::Corrupt => {
                        let i = t.payload.len() / 2;
                        t.payload[i] ^= 0x10;
                    }
                }
                self.order += 1;
                self.inflight.push((at, self.order, dir, t));
            }
        }
    }

    fn done(&self) -> bool {
        let closed = |ev: &[Event]| ev.iter().any(|e| matches!(e, Event::Closed { .. }));
        self.response_done && closed(&self.a_events) && closed(&self.b_events)
    }

    /// The one outcome loss can force on a correct transport (the two
    /// generals): both sides got all of the other's data, one closed, and
    /// every acknowledgement of the other's last packets, within the
    /// closer's linger, was lost, so the other gave up idle. Either side
    /// can be the one left waiting.
    fn last_ack_lost(&self) -> bool {
        let closed = |ev: &[Event]| ev.iter().any(|e| matches!(e, Event::Closed { .. }));
        let idle = |ev: &[Event]| {
            ev.iter().any(|e| {
                matches!(
                    e,
                    Event::Failed {
                        reason: FailReason::Idle,
                        ..
                    }
                )
            })
        };
        let finished = |ev: &[Event]| ev.iter().any(|e| matches!(e, Event::Finished { .. }));
        let (a, b) = (&self.a_events[..], &self.b_events[..]);
        self.response_done
            && finished(a)
            && finished(b)
            && ((closed(a) && idle(b)) || (closed(b) && idle(a)))
    }

    fn failed(&self) -> bool {
        let failed = |ev: &[Event]| ev.iter().any(|e| matches!(e, Event::Failed { .. }));
        failed(&self.a_events) || failed(&self.b_events)
    }

    /// Run until both sides closed the transaction, at most `limit` of
    /// virtual time; returns whether they did.
    fn run(&mut self, limit: Duration) -> bool {
        let end = self.now + limit;
        loop {
            self.apps();
            self.ship();
            if self.done() || self.failed() {
                return self.done();
            }
            let next = self
                .inflight
                .iter()
                .map(|f| f.0)
                .chain(self.a.poll_timeout())
                .chain(self.b.poll_timeout())
                .min();
            let Some(next) = next else {
                return false;
            };
            if next > end {
                return false;
            }
            self.now = self.now.max(next);
            self.inflight.sort_by_key(|f| (f.0, f.1));
            let now = self.now;
            let due = self.inflight.iter().take_while(|f| f.0 <= now).count();
            let ready: Vec<_> = self.inflight.drain(..due).collect();
            for (_, _, dir, t) in ready {
                let e = match dir {
                    Dir::AtoB => &mut self.b,
                    Dir::BtoA => &mut self.a,
                };
                let _ = e.handle_packet(now, t.path, t.msg_type, &t.payload);
            }
            self.a.handle_timeout(now);
            self.b.handle_timeout(now);
        }
    }

    #[track_caller]
    fn check(&self) {
        assert_eq!(self.got_request.len(), self.request.len());
        assert!(self.got_request == self.request, "request bytes differ");
        let want = Self::answer(&self.request);
        assert_eq!(self.got_response.len(), want.len());
        assert!(self.got_response == want, "response bytes differ");
    }

    /// Data packets on the log one way: (seq, window, data length, fate).
    fn data_log(&self, dir: Dir) -> Vec<(u32, u16, usize, Fate)> {
        self.log
            .iter()
            .filter(|(d, _, _)| *d == dir)
            .filter_map(|(_, t, f)| data_of(t).map(|(r, d)| (r.seq, r.window, d.len(), *f)))
            .collect()
    }
}

fn deliver_all() -> FateFn {
    Box::new(|_, _| Fate::Deliver)
}

/// Drop the first transmission of data packet `seq` going `dir`.
fn drop_first(dir: Dir, seq: u32) -> FateFn {
    let mut done = false;
    Box::new(move |d, t| {
        if !done && d == dir && data_of(t).is_some_and(|(r, _)| r.seq == seq) {
            done = true;
            return Fate::Drop;
        }
        Fate::Deliver
    })
}

#[test]
fn open_data_end_trace() {
    let mut a = ep(A, &cfg());
    let mut b = ep(B, &cfg());
    let now = t0();
    let txn = a.open(now, p_ab(), p_ba()).unwrap();
    assert_eq!(txn, Txn::new(NsffId::new(A).unwrap(), 0));
    let req = payload(3000, 1);
    assert_eq!(a.send(now, txn, &req), Ok(3000));
    a.finish(now, txn).unwrap();

    // cwnd 1: one OPEN packet, window 1, as much data as fits after the prefix.
    let out = drain(&mut a);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].path, p_ab());
    let (r, d) = data_of(&out[0]).unwrap();
    assert_eq!(
        r,
        DataRepr {
            seq: 0,
            window: 1,
            txn,
            response: false,
            open: Some(Open {
                origin: NsffId::new(A).unwrap(),
                reverse: p_ba()
            }),
        }
    );
    assert_eq!(d, req[..cfg().max_data(true)]);

    // B accepts it and acknowledges the window with count 0 over the reverse path.
    feed(&mut b, now, out);
    assert_eq!(
        events(&mut b),
        [
            Event::Opened {
                txn,
                origin: NsffId::new(A).unwrap(),
                rev_path: p_ba(),
                fwd_path: p_ab()
            },
            Event::Readable { txn }
        ]
    );
    let acks = drain(&mut b);
    assert_eq!(acks.len(), 1);
    assert_eq!(acks[0].path, p_ba());
    assert_eq!(nack_of(&acks[0]), Some(vec![]));

    // cwnd 2: the rest in two packets, and the end marker `finish` queued
    // meanwhile joins them beyond cwnd (it carries no data): window 3.
    let now = now + Duration::from_millis(2);
    feed(&mut a, now, acks);
    assert_eq!(a.cwnd(txn), Some(2));
    let out = drain(&mut a);
    let seen: Vec<_> = out
        .iter()
        .map(|t| data_of(t).map(|(r, d)| (r.seq, r.window, r.open.is_some(), d.len())))
        .collect();
    let rest = 3000 - cfg().max_data(true);
    assert_eq!(
        seen,
        [
            Some((1, 3, false, cfg().max_data(false))),
            Some((2, 3, false, rest - cfg().max_data(false))),
            Some((3, 3, false, 0))
        ]
    );
    feed(&mut b, now, out);
    let mut buf = vec![0; 4000];
    assert_eq!(b.recv(now, txn, &mut buf), Ok(Some(3000)));
    assert_eq!(buf[..3000], req[..]);
    assert_eq!(b.recv(now, txn, &mut buf), Ok(Some(0)));
    assert_eq!(events(&mut b), [Event::Finished { txn }]);
    let acks = drain(&mut b);
    assert_eq!(acks.iter().map(nack_of).collect::<Vec<_>>(), [Some(vec![])]);
    // The window was full of data (2 of cwnd 2): cwnd grows.
    let now = now + Duration::from_millis(2);
    feed(&mut a, now, acks);
    assert_eq!(a.cwnd(txn), Some(3));
    assert_eq!(events(&mut a), [Event::Acked { txn }]);

    // The response: same txn, RESPONSE and OPEN set, over the reverse path.
    assert_eq!(b.send(now, txn, b"HTTP/1.1 200 OK\r\n\r\n"), Ok(19));
    b.finish(now, txn).unwrap();
    let out = drain(&mut b);
    assert_eq!(out[0].path, p_ba());
    let (r, d) = data_of(&out[0]).unwrap();
    assert!(r.response);
    assert_eq!(r.txn, txn);
    assert_eq!(
        r.open.map(|o| (o.origin.value(), o.reverse)),
        Some((B, p_ab()))
    );
    assert_eq!(d, b"HTTP/1.1 200 OK\r\n\r\n");
    let mut now = now;
    feed(&mut a, now, out);
    for _ in 0..3 {
        now += Duration::from_millis(2);
        feed(&mut b, now, drain(&mut a));
        now += Duration::from_millis(2);
        feed(&mut a, now, drain(&mut b));
    }
    assert_eq!(a.recv(now, txn, &mut buf), Ok(Some(19)));
    assert_eq!(a.recv(now, txn, &mut buf), Ok(Some(0)));
    let ev = events(&mut a);
    assert!(ev.contains(&Event::Closed { txn }), "{ev:?}");
    let ev = events(&mut b);
    assert!(ev.contains(&Event::Closed { txn }), "{ev:?}");
    assert_eq!((a.active(), b.active()), (0, 0));
    assert_eq!(a.stats().completed, 1);
    assert_eq!(a.totals().retransmits + b.totals().retransmits, 0);

    // Lingering state goes after linger_ms; a late OPEN duplicate then
    // does not start the transaction again.
    let later = now + Duration::from_millis(cfg().linger_ms + 1);
    b.handle_timeout(later);
    assert!(b.is_empty());
    let mut a2 = ep(A, &cfg());
    let t2 = a2.open(later, p_ab(), p_ba()).unwrap();
    assert_eq!(t2, txn);
    a2.send(later, t2, b"again").unwrap();
    assert_eq!(
        b.handle_packet(
            later,
            p_ab(),
            MessageType::TransportData,
            &drain(&mut a2)[0].payload
        ),
        Err(PacketError::UnknownTxn)
    );
    assert_eq!(b.stats().late_opens, 1);
    assert!(events(&mut b).is_empty());
}

#[test]
fn small_transaction_completes() {
    let mut n = Net::new(
        &cfg(),
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".to_vec(),
        deliver_all(),
    );
    assert!(n.run(Duration::from_secs(5)));
    n.check();
    assert_eq!(n.a.totals().retransmits, 0);
    assert_eq!(n.a.totals().rtos + n.b.totals().rtos, 0);
}

/// `send_last` of a small message: data and end marker in one window of 2
/// at cwnd 1, one count-0 ack per direction; six packets in all, where
/// `send` then `finish` takes eight (a window for each end marker).
#[test]
fn send_last_makes_a_small_transaction_one_window_each_way() {
    let req = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".to_vec();
    let mut n = Net::with_last(&cfg(), req.clone(), deliver_all());
    assert!(n.run(Duration::from_secs(5)));
    n.check();
    let resp_len = Net::answer(&req).len();
    assert_eq!(
        n.data_log(Dir::AtoB),
        [(0, 2, req.len(), Fate::Deliver), (1, 2, 0, Fate::Deliver)]
    );
    assert_eq!(
        n.data_log(Dir::BtoA),
        [(0, 2, resp_len, Fate::Deliver), (1, 2, 0, Fate::Deliver)]
    );
    let acks = |d: Dir| {
        n.log
            .iter()
            .filter(|(dir, t, _)| *dir == d && nack_of(t) == Some(vec![]))
            .count()
    };
    assert_eq!((acks(Dir::AtoB), acks(Dir::BtoA)), (1, 1));
    assert_eq!(n.log.len(), 6);

    // The same with `send` then `finish`: each end marker a window later.
    let mut old = Net::new(&cfg(), req, deliver_all());
    assert!(old.run(Duration::from_secs(5)));
    old.check();
    assert_eq!(old.data_log(Dir::AtoB).len(), 2);
    assert_eq!(old.log.len(), 8);
}

#[test]
fn send_last_of_more_than_the_send_buffer_ends_after_the_rest() {
    let cfg = TransportConfig {
        send_buffer: 4000,
        ..cfg()
    };
    let mut n = Net::with_last(&cfg, payload(20_000, 9), deliver_all());
    assert!(n.run(Duration::from_secs(5)));
    n.check();
    // Exactly one end marker each way, at the end.
    for dir in [Dir::AtoB, Dir::BtoA] {
        let log = n.data_log(dir);
        let ends: Vec<_> = log.iter().filter(|(_, _, len, _)| *len == 0).collect();
        assert_eq!(ends.len(), 1, "{dir:?}: {log:?}");
        assert_eq!(log.last().map(|l| l.2), Some(0));
    }
}

#[test]
fn lost_end_marker_sharing_the_window_recovered_both_ways() {
    let mut lost = (false, false);
    let mut n = Net::with_last(
        &cfg(),
        payload(300, 10),
        Box::new(move |d, t| {
            let end = data_of(t).is_some_and(|(r, data)| r.seq == 1 && data.is_empty());
            let first = match d {
                Dir::AtoB => &mut lost.0,
                Dir::BtoA => &mut lost.1,
            };
            if end && !*first {
                *first = true;
                return Fate::Drop;
            }
            Fate::Deliver
        }),
    );
    assert!(n.run(Duration::from_secs(5)));
    n.check();
    for dir in [Dir::AtoB, Dir::BtoA] {
        let log = n.data_log(dir);
        assert_eq!(log[1], (1, 2, 0, Fate::Drop), "{dir:?}: {log:?}");
        assert!(log[2..].contains(&(1, 2, 0, Fate::Deliver)), "{log:?}");
    }
    // Recovered by the receivers' NACKs (reorder timer), not by RTOs.
    assert_eq!(n.a.totals().rtos + n.b.totals().rtos, 0);
}

#[test]
fn lost_data_before_its_end_marker_recovered_both_ways() {
    // The request's OPEN packet: its end marker reaches a B that has no
    // such transaction yet; A's RTO resends the OPEN packet.
    let mut n = Net::with_last(&cfg(), payload(300, 11), drop_first(Dir::AtoB, 0));
    assert!(n.run(Duration::from_secs(5)));
    n.check();
    assert_eq!(n.b.stats().unknown_txn, 1);
    // The response's data: its end marker opens a gap A NACKs at once.
    let mut n = Net::with_last(&cfg(), payload(300, 12), drop_first(Dir::BtoA, 0));
    assert!(n.run(Duration::from_secs(5)));
    n.check();
    assert_eq!(n.b.totals().retransmits, 1);
    assert_eq!(n.b.totals().rtos, 0);
}

#[test]
fn lost_lone_end_marker_recovered() {
    // `send` then `finish` of one packet: windows [0], [1 = end marker].
    let mut n = Net::new(&cfg(), payload(300, 13), drop_first(Dir::AtoB, 1));
    assert!(n.run(Duration::from_secs(5)));
    n.check();
    assert!(n.data_log(Dir::AtoB).contains(&(1, 1, 0, Fate::Drop)));
}

#[test]
fn empty_request_is_just_an_end_marker() {
    let mut n = Net::new(&cfg(), Vec::new(), deliver_all());
    assert!(n.run(Duration::from_secs(5)));
    n.check();
    let log = n.data_log(Dir::AtoB);
    assert_eq!(log, [(0, 1, 0, Fate::Deliver)]);
}

#[test]
fn lost_open_packet_recovered_by_rto() {
    let mut n = Net::new(&cfg(), payload(5000, 2), drop_first(Dir::AtoB, 0));
    assert!(n.run(Duration::from_secs(5)));
    n.check();
    let t = n.a.totals();
    assert_eq!(t.rtos, 1);
    assert_eq!(t.rto_retransmits, 1);
}

#[test]
fn lost_middle_packet_recovered_by_nack() {
    let mut n = Net::new(&cfg(), payload(200_000, 3), drop_first(Dir::AtoB, 20));
    assert!(n.run(Duration::from_secs(5)));
    n.check();
    let (a, b) = (n.a.totals(), n.b.totals());
    assert_eq!(a.retransmits, 1);
    assert_eq!(a.rtos, 0);
    assert!(b.nacks_out >= 1);
    assert_eq!(a.cwnd_cuts, 1);
}

#[test]
fn lost_last_data_packet_recovered_by_reorder_timer() {
    // 2 windows of 1, 2, 3... packets: seq 5 is the last of window 3 (3..=5).
    let mut n = Net::new(&cfg(), payload(20_000, 4), drop_first(Dir::AtoB, 5));
    assert!(n.run(Duration::from_secs(5)));
    n.check();
    assert!(n
        .data_log(Dir::AtoB)
        .contains(&(5, 3, cfg().max_data(false), Fate::Drop)));
    assert_eq!(n.a.totals().retransmits, 1);
    assert_eq!(n.a.totals().rtos, 0);
}

/// Found over TAPs: the first window's RTT sample was inflated (here: its
/// packet arrives 8 ms late), so the honest count-0 for the end marker's
/// window came back sooner than half that "fastest" RTT and was taken for a
/// stale duplicate. The requester must not sit out an RTO on it: it asks
/// again at once and the receiver's cumulative re-ack settles it.
#[test]
fn a_fast_honest_ack_after_a_slow_first_window_is_not_lost() {
    let mut first = true;
    let mut n = Net::new(
        &cfg(),
        payload(100, 7),
        Box::new(move |d, t| {
            if d == Dir::AtoB && first && data_of(t).is_some() {
                first = false;
                return Fate::Late(8);
            }
            Fate::Deliver
        }),
    );
    assert!(n.run(Duration::from_secs(5)));
    n.check();
    // Windows [0] and [1 = end marker]; the end marker's ack looked stale.
    assert!(n.data_log(Dir::AtoB).contains(&(1, 1, 0, Fate::Deliver)));
    assert_eq!(n.a.stats().stale_acks, 1);
    assert_eq!(n.a.totals().rtos, 0, "the requester waited for an RTO");
}

/// Over TAPs a transaction's first window often waits longer than the
/// rest (here: 8 ms late); its RTT sample then set a minimum that made every
/// later honest ack look stale, and every window cost a probe round trip.
/// The probe's answer now confirms the ack, and its age becomes a sample.
#[test]
fn a_slow_first_window_does_not_make_every_later_ack_look_stale() {
    let mut first = true;
    let mut n = Net::new(
        &cfg(),
        payload(200_000, 9),
        Box::new(move |d, t| {
            if d == Dir::AtoB && first && data_of(t).is_some() {
                first = false;
                return Fate::Late(8);
            }
            Fate::Deliver
        }),
    );
    assert!(n.run(Duration::from_secs(30)));
    n.check();
    let windows = n.a.totals().acks_in;
    assert!(windows > 10, "{windows}");
    assert!(
        n.a.stats().stale_acks <= 2,
        "{} of {windows} acks looked stale",
        n.a.stats().stale_acks
    );
    assert_eq!(n.a.totals().rtos, 0);
}

#[test]
fn lost_end_marker_recovered() {
    let len = cfg().max_data(true) + 2 * cfg().max_data(false);
    // Windows: [0], [1, 2, 3 = end marker].
    let mut n = Net::new(&cfg(), payload(len, 5), drop_first(Dir::AtoB, 3));
    assert!(n.run(Duration::from_secs(5)));
    n.check();
    assert!(n.data_log(Dir::AtoB).contains(&(3, 3, 0, Fate::Drop)));
}

#[test]
fn lost_response_end_marker_and_acks_recovered() {
    let mut dropped_acks = 0;
    let mut n = Net::new(
        &cfg(),
        payload(30_000, 6),
        Box::new(move |d, t| {
            // Every other count-0 ack B sends, and the response's end marker once.
            if d == Dir::BtoA && nack_of(t).is_some_and(|s| s.is_empty()) {
                dropped_acks += 1;
                if dropped_acks % 2 == 1 {
                    return Fate::Drop;
                }
            }
            Fate::Deliver
        }),
    );
    assert!(n.run(Duration::from_secs(10)));
    n.check();
}

#[test]
fn reordering_is_undone() {
    let mut i = 0u32;
    let mut n = Net::new(
        &cfg(),
        payload(300_000, 7),
        Box::new(move |_, _| {
            i += 1;
            if i % 7 == 3 {
                Fate::Late(3)
            } else {
                Fate::Deliver
            }
        }),
    );
    assert!(n.run(Duration::from_secs(10)));
    n.check();
}

#[test]
fn duplicates_are_suppressed() {
    let mut n = Net::new(&cfg(), payload(100_000, 8), Box::new(|_, _| Fate::Dup));
    assert!(n.run(Duration::from_secs(10)));
    n.check();
    assert!(n.b.totals().duplicates > 10);
    assert!(n.a.totals().duplicates > 10);
}

#[test]
fn bad_checksum_is_dropped_and_counted() {
    let mut done = false;
    let mut n = Net::new(
        &cfg(),
        payload(50_000, 9),
        Box::new(move |d, t| {
            if !done && d == Dir::AtoB && data_of(t).is_some_and(|(r, _)| r.seq == 7) {
                done = true;
                return Fate::Corrupt;
            }
            Fate::Deliver
        }),
    );
    assert!(n.run(Duration::from_secs(5)));
    n.check();
    assert_eq!(n.b.stats().bad_checksum, 1);
    assert_eq!(n.a.totals().retransmits, 1);

    // Direct: a corrupted packet is refused with the reason.
    let mut a = ep(A, &cfg());
    let mut b = ep(B, &cfg());
    let txn = a.open(t0(), p_ab(), p_ba()).unwrap();
    a.send(t0(), txn, b"x").unwrap();
    let mut t = drain(&mut a).remove(0);
    t.payload[3] ^= 1;
    assert_eq!(
        b.handle_packet(t0(), t.path, t.msg_type, &t.payload),
        Err(PacketError::BadChecksum)
    );
    assert_eq!(
        b.handle_packet(t0(), t.path, t.msg_type, &t.payload[..5]),
        Err(PacketError::Malformed)
    );
    assert_eq!(
        b.handle_packet(t0(), t.path, MessageType::PathRequest, &t.payload),
        Err(PacketError::NotTransport)
    );
    assert!(b.is_empty());
}

#[test]
fn windows_respect_max_window_and_cwnd_grows_by_one() {
    let cfg = TransportConfig {
        max_window: 4,
        ..cfg()
    };
    let mut n = Net::new(&cfg, payload(100_000, 10), deliver_all());
    assert!(n.run(Duration::from_secs(5)));
    n.check();
    let log = n.data_log(Dir::AtoB);
    // Windows of 1, 2, 3, then 4 forever.
    let windows: Vec<u16> = log.iter().map(|l| l.1).collect();
    assert_eq!(windows[..10], [1, 2, 2, 3, 3, 3, 4, 4, 4, 4]);
    assert!(windows.iter().all(|w| *w <= 4));
    assert_eq!(n.a.totals().cwnd_grows, 3);
}

#[test]
fn cwnd_halves_once_per_window() {
    let mut a = ep(A, &cfg());
    let mut b = ep(B, &cfg());
    let mut now = t0();
    let txn = a.open(now, p_ab(), p_ba()).unwrap();
    a.send(now, txn, &payload(200_000, 11)).unwrap();
    // Grow to 8 cleanly.
    for _ in 0..7 {
        let out = drain(&mut a);
        now += Duration::from_millis(10);
        feed(&mut b, now, out);
        feed(&mut a, now, drain(&mut b));
    }
    assert_eq!(a.cwnd(txn), Some(8));
    let out = drain(&mut a);
    let seqs: Vec<u32> = out
        .iter()
        .filter_map(|t| data_of(t).map(|(r, _)| r.seq))
        .collect();
    assert_eq!(seqs.len(), 8);
    now += Duration::from_millis(10);
    // Lose two: B NACKs at once when the gap shows.
    let kept: Vec<_> = out
        .into_iter()
        .enumerate()
        .filter(|(i, _)| *i != 2 && *i != 5)
        .map(|(_, t)| t)
        .collect();
    feed(&mut b, now, kept);
    let nacks = drain(&mut b);
    assert_eq!(
        nacks.iter().filter_map(nack_of).collect::<Vec<_>>(),
        [vec![seqs[2]], vec![seqs[5]]]
    );
    feed(&mut a, now + Duration::from_millis(10), nacks);
    assert_eq!(a.cwnd(txn), Some(4), "halved once for the window");
    let resent: Vec<u32> = drain(&mut a)
        .iter()
        .filter_map(|t| data_of(t).map(|(r, _)| r.seq))
        .collect();
    assert_eq!(resent, [seqs[2], seqs[5]]);
    assert_eq!(a.txn_stats(txn).unwrap().cwnd_cuts, 1);
    // A NACK for a packet just resent is suppressed.
    let list = [seqs[2]];
    let again = vec![Transmit {
        path: p_ba(),
        msg_type: MessageType::TransportNack,
        payload: {
            let repr = NackRepr {
                txn,
                seqs: Seqs::new(&list).unwrap(),
            };
            let mut p = vec![0; repr.buffer_len()];
            repr.emit(&mut NackPacket::new_unchecked(&mut p[..]));
            p
        },
    }];
    feed(&mut a, now + Duration::from_millis(10), again);
    assert!(drain(&mut a).is_empty());
    assert_eq!(a.stats().nack_suppressed, 1);
}

#[test]
fn transaction_caps_refuse_and_count() {
    let cfg = TransportConfig {
        max_txns: 2,
        ..cfg()
    };
    let mut a = ep(A, &cfg);
    let now = t0();
    a.open(now, p_ab(), p_ba()).unwrap();
    let t = a.open(now, p_ab(), p_ba()).unwrap();
    assert_eq!(a.open(now, p_ab(), p_ba()), Err(OpenError::TooManyTxns));
    assert_eq!(a.stats().refused, 1);
    a.abort(t);
    assert!(a.open(now, p_ab(), p_ba()).is_ok());

    // Incoming OPENs beyond the cap are refused too.
    let mut b = ep(B, &cfg);
    let mut c = ep(3, &TransportConfig::default());
    for i in 0..3 {
        let txn = c.open(now, p_ab(), p_ba()).unwrap();
        c.send(now, txn, b"hi").unwrap();
        let t = drain(&mut c).remove(0);
        let r = b.handle_packet(now, t.path, t.msg_type, &t.payload);
        assert_eq!(r.is_ok(), i < 2, "{i}: {r:?}");
    }
    assert_eq!(b.stats().refused, 1);
    assert_eq!(b.stats().accepted, 2);
}

#[test]
fn black_hole_fails_after_max_retries() {
    let mut n = Net::new(&cfg(), payload(1000, 12), Box::new(|_, _| Fate::Drop));
    assert!(!n.run(Duration::from_secs(60)));
    let txn = n.txn.unwrap();
    assert_eq!(
        n.a_events.last(),
        Some(&Event::Failed {
            txn,
            reason: FailReason::Timeout
        })
    );
    let t = n.a.totals();
    assert_eq!(t.rtos, u64::from(cfg().max_retries) + 1);
    assert_eq!(t.rto_retransmits, u64::from(cfg().max_retries));
    assert_eq!(n.a.stats().failed, 1);
    assert!(n.a.is_empty());
    // 200 ms doubling, capped at 4 s: 0.2 + 0.4 + ... + 4 + 4 + 4 + 4.
    let took = n.now - t0();
    assert!(
        took >= Duration::from_secs(20) && took <= Duration::from_secs(25),
        "{took}"
    );
    assert_eq!(n.a.send(n.now, txn, b"x"), Err(StreamError::UnknownTxn));
}

#[test]
fn silent_peer_fails_idle() {
    let cfg = TransportConfig {
        idle_timeout_ms: 2000,
        ..cfg()
    };
    let mut a = ep(A, &cfg);
    let mut b = ep(B, &cfg);
    let txn = a.open(t0(), p_ab(), p_ba()).unwrap();
    a.send(t0(), txn, b"partial request").unwrap();
    feed(&mut b, t0(), drain(&mut a));
    let _ = events(&mut b);
    let mut now = t0();
    while let Some(t) = b.poll_timeout() {
        now = t;
        b.handle_timeout(now);
    }
    assert_eq!(
        events(&mut b),
        [Event::Failed {
            txn,
            reason: FailReason::Idle
        }]
    );
    assert_eq!(now - t0(), Duration::from_secs(2));
}

#[test]
fn txn_ids_wrap_and_skip_live_ones() {
    let mut a = Endpoint::new(NsffId::new(7).unwrap(), cfg(), Txn::MAX_COUNTER).unwrap();
    let t1 = a.open(t0(), p_ab(), p_ba()).unwrap();
    let t2 = a.open(t0(), p_ab(), p_ba()).unwrap();
    assert_eq!((t1.origin(), t1.counter()), (7, Txn::MAX_COUNTER));
    assert_eq!((t2.origin(), t2.counter()), (7, 0));
    assert_eq!(t1.value(), 0x07ff_ffff);
}

#[test]
fn slow_reader_holds_back_acks() {
    let cfg = TransportConfig {
        recv_buffer: 8192,
        ..cfg()
    };
    let mut a = ep(A, &cfg);
    let mut b = ep(B, &cfg);
    let mut now = t0();
    let txn = a.open(now, p_ab(), p_ba()).unwrap();
    let req = payload(40_000, 13);
    a.send(now, txn, &req).unwrap();
    a.finish(now, txn).unwrap();
    let mut got = Vec::new();
    let mut buf = vec![0; 4096];
    for _ in 0..200 {
        now += Duration::from_millis(1);
        feed(&mut b, now, drain(&mut a));
        feed(&mut a, now, drain(&mut b));
        // Never more buffered than the receive buffer.
        assert!(b.readable(txn).unwrap() <= 8192);
        if let Ok(Some(n)) = b.recv(now, txn, &mut buf) {
            got.extend_from_slice(&buf[..n]);
        }
    }
    assert_eq!(got, req);
}

#[test]
fn config_validation() {
    assert!(cfg().validate().is_ok());
    let bad = |f: fn(&mut TransportConfig)| {
        let mut c = cfg();
        f(&mut c);
        c.validate().is_err()
    };
    assert!(bad(|c| c.mtu = 100));
    assert!(bad(|c| c.max_window = 0));
    assert!(bad(|c| c.max_window = 300));
    assert!(bad(|c| c.initial_cwnd = 65));
    assert!(bad(|c| c.send_buffer = 10));
    assert!(bad(|c| c.max_txns = 0));
    assert!(bad(|c| c.rto_min_ms = 5000));
    let c: TransportConfig = serde_json::from_str(r#"{"max_window": 8}"#).unwrap();
    assert_eq!(c.max_window, 8);
    assert_eq!(c.mtu, 1500);
    assert!(serde_json::from_str::<TransportConfig>(r#"{"nope": 1}"#).is_err());
}

/// A xorshift64* stream of fates: `drop`, `dup`, `late` and `corrupt` in
/// per-mille. NACKs are never held back (see `docs/nsff.md`, "Limits": a
/// count-0 NACK overtaken by a whole window can acknowledge the wrong one).
fn random_fates(seed: u64, drop: u32, dup: u32, late: u32, corrupt: u32) -> FateFn {
    let mut x = seed | 1;
    Box::new(move |_, t| {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        let r = x.wrapping_mul(0x2545_f491_4f6c_dd1d);
        let roll = (r >> 33) as u32 % 1000;
        let late_ms = ((r >> 20) % 20) as u8 + 1;
        match roll {
            r if r < drop => Fate::Drop,
            r if r < drop + dup => Fate::Dup,
            r if r < drop + dup + late && t.msg_type == MessageType::TransportData => {
                Fate::Late(late_ms)
            }
            // NACKs have no checksum (RFC 8677 Figure 11): the link layer's
            // FCS is what keeps them intact.
            r if r < drop + dup + late + corrupt && t.msg_type == MessageType::TransportData => {
                Fate::Corrupt
            }
            _ => Fate::Deliver,
        }
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn random_schedules_deliver_exact_bytes(
        len in 0usize..120_000,
        salt in any::<u8>(),
        seed in any::<u64>(),
        drop in 0u32..300,
        dup in 0u32..100,
        late in 0u32..200,
        corrupt in 0u32..50,
        max_window in 1u16..32,
        last in any::<bool>(),
    ) {
        let cfg = TransportConfig { max_window, max_retries: 30, ..cfg() };
        let fates = random_fates(seed, drop, dup, late, corrupt);
        let mut n = if last {
            Net::with_last(&cfg, payload(len, salt), fates)
        } else {
            Net::new(&cfg, payload(len, salt), fates)
        };
        let ok = n.run(Duration::from_secs(3600)) || n.last_ack_lost();
        prop_assert!(ok, "did not complete: a {:?} b {:?}", n.a_events, n.b_events);
        n.check();
    }
}

/// Found by `random_schedules_deliver_exact_bytes` (29 % loss both ways):
/// every acknowledgement of the responder's last window within the
/// requester's linger was lost; the requester has everything, the
/// responder gives up idle — what any finite linger allows.
#[test]
fn heavy_loss_may_cost_the_responder_its_last_acknowledgement_never_bytes() {
    let cfg = TransportConfig {
        max_window: 3,
        max_retries: 30,
        ..cfg()
    };
    let mut n = Net::new(
        &cfg,
        payload(29_631, 0),
        random_fates(3_448_654_663_144_199_794, 291, 2, 6, 32),
    );
    let ok = n.run(Duration::from_secs(3600)) || n.last_ack_lost();
    assert!(ok, "a {:?} b {:?}", n.a_events, n.b_events);
    n.check();
}

/// The mirror case, also found by `random_schedules_deliver_exact_bytes`
/// (20 % loss, 16 % late): the responder closed, and every acknowledgement
/// of the requester's end marker within its linger was lost; the requester
/// has the whole response and gives up idle.
#[test]
fn heavy_loss_may_cost_the_requester_its_last_acknowledgement_never_bytes() {
    let cfg = TransportConfig {
        max_window: 2,
        max_retries: 30,
        ..cfg()
    };
    let mut n = Net::new(
        &cfg,
        payload(12_675, 0),
        random_fates(12_023_250_428_409_153_420, 195, 35, 158, 0),
    );
    let done = n.run(Duration::from_secs(3600));
    assert!(
        done || n.last_ack_lost(),
        "a {:?} b {:?}",
        n.a_events,
        n.b_events
    );
    n.check();
}

/// Run one small transaction between `a` (origin) and `b` (egress) to its
/// end at both; the time after it.
fn one_small_transaction(
    a: &mut Endpoint,
    b: &mut Endpoint,
    mut now: Instant,
    salt: u8,
) -> Instant {
    let txn = a.open(now, p_ab(), p_ba()).unwrap();
    let req = payload(100, salt);
    a.send(now, txn, &req).unwrap();
    a.finish(now, txn).unwrap();
    let mut buf = vec![0; 4096];
    let (mut b_eof, mut a_eof, mut a_closed) = (false, false, false);
    for _ in 0..50 {
        now += Duration::from_millis(1);
        feed(b, now, drain(a));
        let _ = events(b);
        while !b_eof {
            match b.recv(now, txn, &mut buf) {
                Ok(Some(0)) => {
                    b_eof = true;
                    b.send(now, txn, &payload(300, salt)).unwrap();
                    b.finish(now, txn).unwrap();
                }
                Ok(Some(_)) => {}
                _ => break,
            }
        }
        feed(a, now, drain(b));
        while !a_eof {
            match a.recv(now, txn, &mut buf) {
                Ok(Some(0)) => a_eof = true,
                Ok(Some(_)) => {}
                _ => break,
            }
        }
        a_closed |= events(a)
            .iter()
            .any(|e| matches!(e, Event::Closed { txn: t } if *t == txn));
        if a_closed {
            // B's last ack is on its way; let it land.
            feed(b, now, drain(a));
            let _ = events(b);
            return now;
        }
    }
    panic!("transaction {txn:?} did not complete");
}

/// Thousands of transactions linger after a burst of requests. Finding the
/// next timer must not walk them: before the timer index, `poll_timeout` and
/// `handle_timeout` computed every held transaction's deadline on each call
/// (the node calls `poll_timeout` on every loop iteration), which made each
/// nSFF of the chain cost ~100 µs of CPU per request at 3000 requests/s.
/// Only due transactions are looked at now; the lingering ones still go
/// when due.
#[test]
fn timers_do_not_walk_lingering_transactions() {
    let cfg = cfg();
    let mut a = ep(A, &cfg);
    let mut b = ep(B, &cfg);
    let mut now = t0();
    let n = 1500;
    for i in 0..n {
        now = one_small_transaction(&mut a, &mut b, now, i as u8);
    }
    assert_eq!((a.len(), a.active()), (n, 0));
    assert_eq!(b.len(), n);
    assert_eq!(a.stats().completed, n as u64);
    // The first lingering transaction goes linger_ms after it closed: none
    // is due yet.
    let first_due = a
        .poll_timeout()
        .expect("lingering transactions have timers");
    assert!(first_due > now);
    a.deadline_scans.set(0);
    for _ in 0..1000 {
        assert_eq!(a.poll_timeout(), Some(first_due));
        a.handle_timeout(now);
    }
    assert_eq!(a.deadline_scans.get(), 0, "timers walked idle transactions");
    assert_eq!(a.len(), n);
    // When they are due, each is looked at once and removed.
    let end = now + Duration::from_millis(cfg.linger_ms + 1);
    a.handle_timeout(end);
    assert_eq!(a.deadline_scans.get(), n as u64);
    assert!(a.is_empty());
    assert_eq!(a.poll_timeout(), None);
}

/// Issue 12: a flood of OPENs whose heads never finish does not lock a
/// tracking egress out. At `max_txns` a new OPEN evicts the oldest
/// unfinished transaction of the origin holding the most (counted,
/// `Failed { Evicted }`); a transaction whose head completed is never
/// evicted; unfinished ones fail after `head_timeout_ms`.
#[test]
fn unfinished_heads_are_evicted_under_pressure_and_time_out() {
    let cfg = TransportConfig {
        max_txns: 4,
        ..cfg()
    };
    let now = t0();
    let mut b = ep(B, &cfg);
    b.track_heads(true);
    let mut flood = ep(7, &TransportConfig::default());
    let mut legit = ep(3, &TransportConfig::default());
    let open_from = |e: &mut Endpoint, b: &mut Endpoint, at: Instant| {
        let txn = e.open(at, p_ab(), p_ba()).unwrap();
        e.send(at, txn, b"GET / HT").unwrap();
        let t = drain(e).remove(0);
        (txn, b.handle_packet(at, t.path, t.msg_type, &t.payload))
    };
    // One legitimate transaction whose head completed, then the flood.
    let (first, r) = open_from(&mut legit, &mut b, now);
    assert!(r.is_ok());
    b.head_complete(first);
    let mut flooded = Vec::new();
    for i in 0..3 {
        let (t, r) = open_from(&mut flood, &mut b, now + Duration::from_millis(i));
        assert!(r.is_ok());
        flooded.push(t);
    }
    events(&mut b);
    // Full: more flood OPENs evict the flood's own oldest, not `first`.
    for i in 0..10 {
        let (_, r) = open_from(&mut flood, &mut b, now + Duration::from_millis(10 + i));
        assert!(r.is_ok(), "{i}: {r:?}");
    }
    assert_eq!(b.stats().evicted, 10);
    assert_eq!(b.stats().refused, 0);
    let failed: Vec<Event> = events(&mut b)
        .into_iter()
        .filter(|e| matches!(e, Event::Failed { .. }))
        .collect();
    assert_eq!(failed.len(), 10);
    assert!(failed
        .iter()
        .all(|e| matches!(e, Event::Failed { reason: FailReason::Evicted, txn } if *txn != first)));
    assert!(failed.contains(&Event::Failed {
        txn: flooded[0],
        reason: FailReason::Evicted
    }));
    // A legitimate OPEN during the flood gets in.
    let (second, r) = open_from(&mut legit, &mut b, now + Duration::from_millis(50));
    assert!(r.is_ok(), "{r:?}");
    b.head_complete(second);
    // Unfinished heads time out; completed ones stay.
    b.handle_timeout(now + Duration::from_millis(10_100));
    let timed_out = events(&mut b)
        .into_iter()
        .filter(|e| {
            matches!(
                e,
                Event::Failed {
                    reason: FailReason::HeadTimeout,
                    ..
                }
            )
        })
        .count();
    assert_eq!(timed_out, 2);
    assert_eq!(b.stats().head_timeouts, 2);
    assert_eq!(b.len(), 2, "first and second remain");
}
