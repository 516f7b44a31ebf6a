//! `slp_load`: an SLPv2 load generator for MDA benchmarks (`scripts/bench-mslp`).
//!
//! Runs on the kernel's stack (std sockets) in a namespace and drives one
//! directory agent:
//!
//! ```text
//! slp_load reg-udp   --da 10.0.0.1 --count 20000 --window 64
//! slp_load reg-tcp   --da 10.0.0.1 --count 20000 --conns 4 --window 16
//! slp_load query-udp --da 10.0.0.1 --duration 5 --window 8 --ids 100000
//! slp_load query-tcp --da 10.0.0.1 --duration 5 --conns 2 --window 4 --ids 100000
//! ```
//!
//! - `reg-*`: `--count` fresh SrvRegs (FRESH, MeshFwd RqstFwd unless
//!   `--no-mesh-fwd`) of distinct URLs `service:printer:lpr://<tag><i>/q`,
//!   i = `--start` .. `--start + --count`, attributes
//!   `(id=<i>),(zone=<i % 100>),(color=red)`. Over UDP, `--window`
//!   SrvRegs are outstanding at once (distinct XIDs) and are retransmitted
//!   after `--timeout-ms` (a retransmitted registration is acknowledged as a
//!   stale update); over TCP, `--conns` connections each keep `--window`
//!   SrvRegs pipelined.
//! - `query-*`: SrvRqsts for `service:printer:lpr` with the predicate
//!   `--predicate` (default `(&(color=red)(id={id}))`, `{id}` replaced by a
//!   pseudo-random number below `--ids`, `{zone}` by one below 100) for
//!   `--duration` seconds (or `--count` requests). UDP queries are not
//!   retransmitted: one unanswered after `--timeout-ms` (default 30 s for
//!   queries, 1 s for registrations) counts as lost.
//!
//! Latency is from a request's first transmission to its reply. The last
//! line on stdout is machine-readable:
//!
//! ```text
//! RESULT mode=reg-udp n=20000 ok=20000 err=0 lost=0 retrans=0 secs=4.210 rate=4750.6 \
//!        p50_us=13000 p99_us=21000 max_us=30000 entries=1.00 overflow=0
//! ```
//!
//! The exit status is 1 if any reply carried an error or any request went
//! unanswered.

// A load generator measures real time over the kernel's sockets, like a
// driver, not a role core (clippy.toml).
#![allow(clippy::disallowed_types, clippy::disallowed_methods)]

use std::collections::{BTreeMap, HashMap};
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use svcroute_stack::wire::slp::codec::List;
use svcroute_stack::wire::slp::{
    frame_len, AcceptId, AttrList, Body, ErrorCode, Extension, FwdId, Header, LangTag, MeshFwd,
    Message, Predicate, ScopeList, ServiceType, SlpString, SrvReg, SrvRqst, UrlEntry,
};

const USAGE: &str = "usage: slp_load reg-udp|reg-tcp|query-udp|query-tcp [--da ADDR] [--port N]
  [--count N] [--start N] [--tag S] [--window N] [--conns N] [--duration SECS]
  [--scope S] [--lifetime S] [--no-mesh-fwd] [--timeout-ms N] [--retries N]
  [--predicate P] [--ids N] [--seed N]";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Reg,
    Query,
}

#[derive(Debug, Clone)]
struct Opts {
    mode: String,
    kind: Kind,
    tcp: bool,
    da: SocketAddr,
    count: Option<u64>,
    start: u64,
    tag: String,
    window: usize,
    conns: usize,
    duration: Option<Duration>,
    scope: String,
    lifetime: u16,
    mesh_fwd: bool,
    timeout: Duration,
    retries: u32,
    predicate: String,
    ids: u64,
    seed: u64,
}

fn parse_args() -> Result<Opts, String> {
    let mut args = std::env::args().skip(1);
    let mode = args.next().ok_or("no mode")?;
    let (kind, tcp) = match mode.as_str() {
        "reg-udp" => (Kind::Reg, false),
        "reg-tcp" => (Kind::Reg, true),
        "query-udp" => (Kind::Query, false),
        "query-tcp" => (Kind::Query, true),
        m => return Err(format!("unknown mode {m:?}")),
    };
    let mut da = "10.0.0.1".to_owned();
    let mut port = 427u16;
    let mut o = Opts {
        mode: mode.clone(),
        kind,
        tcp,
        da: "0.0.0.0:0".parse().map_err(|e| format!("{e}"))?,
        count: None,
        start: 0,
        tag: "r".into(),
        window: if tcp { 16 } else { 64 },
        conns: 4,
        duration: None,
        scope: "DEFAULT".into(),
        lifetime: u16::MAX,
        mesh_fwd: true,
        // A query over a big table can take long, and the DA answers in
        // order: a short timeout would count a backlog as lost.
        timeout: Duration::from_millis(if kind == Kind::Query { 30_000 } else { 1000 }),
        retries: 10,
        predicate: "(&(color=red)(id={id}))".into(),
        ids: 1,
        seed: 1,
    };
    while let Some(a) = args.next() {
        if a == "--no-mesh-fwd" {
            o.mesh_fwd = false;
            continue;
        }
        let v = args.next().ok_or_else(|| format!("{a} needs a value"))?;
        let num = |v: &str| v.parse::<u64>().map_err(|e| format!("{a} {v}: {e}"));
        match a.as_str() {
            "--da" => da = v,
            "--port" => port = u16::try_from(num(&v)?).map_err(|e| e.to_string())?,
            "--count" => o.count = Some(num(&v)?),
            "--start" => o.start = num(&v)?,
            "--tag" => o.tag = v,
            "--window" => o.window = num(&v)?.max(1) as usize,
            "--conns" => o.conns = num(&v)?.max(1) as usize,
            "--duration" => {
                let s: f64 = v.parse().map_err(|e| format!("{a} {v}: {e}"))?;
                o.duration = Some(Duration::from_secs_f64(s));
            }
            "--scope" => o.scope = v,
            "--lifetime" => o.lifetime = u16::try_from(num(&v)?).map_err(|e| e.to_string())?,
            "--timeout-ms" => o.timeout = Duration::from_millis(num(&v)?),
            "--retries" => o.retries = u32::try_from(num(&v)?).map_err(|e| e.to_string())?,
            "--predicate" => o.predicate = v,
            "--ids" => o.ids = num(&v)?.max(1),
            "--seed" => o.seed = num(&v)?,
            _ => return Err(format!("unknown option {a}")),
        }
    }
    let ip: std::net::IpAddr = da.parse().map_err(|e| format!("--da {da}: {e}"))?;
    o.da = SocketAddr::new(ip, port);
    if o.count.is_none() && o.duration.is_none() {
        if kind == Kind::Reg {
            return Err("reg-* needs --count".into());
        }
        o.duration = Some(Duration::from_secs(5));
    }
    if kind == Kind::Reg && o.duration.is_some() {
        return Err("reg-* takes --count, not --duration".into());
    }
    if !tcp && o.window > 30_000 {
        return Err("--window: at most 30000 outstanding XIDs".into());
    }
    Ok(o)
}

fn splitmix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Builds requests and judges replies.
struct Work {
    o: Opts,
    scopes: ScopeList,
    stype: ServiceType,
    version: u64,
}

/// What a reply said.
enum Outcome {
    Ok {
        entries: usize,
        overflow: bool,
    },
    Err(u16),
    /// Not a reply we wait for (wrong function, unparseable).
    Ignore,
}

impl Work {
    fn new(o: Opts) -> Result<Self, String> {
        let scopes = ScopeList::parse(&o.scope).map_err(|e| format!("--scope: {e:?}"))?;
        let stype = ServiceType::parse("service:printer:lpr").map_err(|e| format!("{e:?}"))?;
        // A version timestamp (µs since 1900) shared by every SrvReg of
        // this run, so a retransmission is the same update.
        let since_1970 = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_micros() as u64);
        let version = 2_208_988_800 * 1_000_000 + since_1970;
        Ok(Self {
            o,
            scopes,
            stype,
            version,
        })
    }

    /// Request number `k` (0-based) with `xid`.
    fn request(&self, k: u64, xid: u16) -> Vec<u8> {
        let mut h = Header::new(xid, LangTag::en());
        let (body, ext) = match self.o.kind {
            Kind::Reg => {
                let i = self.o.start + k;
                h.flags.fresh = true;
                let url = format!("service:printer:lpr://{}{i}/q", self.o.tag);
                let attrs = format!("(id={i}),(zone={}),(color=red)", i % 100);
                let body = Body::SrvReg(SrvReg {
                    entry: UrlEntry::new(self.o.lifetime, SlpString::new(url).expect("url")),
                    service_type: self.stype.clone(),
                    scopes: self.scopes.clone(),
                    attrs: AttrList::parse(&attrs).expect("attrs"),
                    attr_auths: List::default(),
                });
                let ext = if self.o.mesh_fwd {
                    vec![Extension::MeshFwd(MeshFwd {
                        fwd: FwdId::RqstFwd,
                        version: self.version,
                        accept: AcceptId::default(),
                    })]
                } else {
                    Vec::new()
                };
                (body, ext)
            }
            Kind::Query => {
                let r = splitmix(self.o.seed ^ k.wrapping_mul(0x2545_f491_4f6c_dd1d));
                let p = self
                    .o
                    .predicate
                    .replace("{id}", &(r % self.o.ids).to_string())
                    .replace("{zone}", &((r >> 32) % 100).to_string());
                let body = Body::SrvRqst(SrvRqst {
                    pr_list: SlpString::default(),
                    service_type: self.stype.clone(),
                    scopes: self.scopes.clone(),
                    predicate: Predicate::parse(&p).expect("predicate"),
                    spi: SlpString::default(),
                });
                (body, Vec::new())
            }
        };
        Message::new(h, body, ext).expect("message").to_bytes()
    }

    fn judge(&self, m: &Message) -> Outcome {
        let overflow = m.header().flags.overflow;
        match (self.o.kind, m.body()) {
            (Kind::Reg, Body::SrvAck(a)) if a.error == ErrorCode::Ok => Outcome::Ok {
                entries: 1,
                overflow,
            },
            (Kind::Reg, Body::SrvAck(a)) => Outcome::Err(a.error.into()),
            (Kind::Query, Body::SrvRply(r)) if r.error == ErrorCode::Ok => Outcome::Ok {
                entries: r.entries.len(),
                overflow,
            },
            (Kind::Query, Body::SrvRply(r)) => Outcome::Err(r.error.into()),
            _ => Outcome::Ignore,
        }
    }

    /// Whether request number `k` is to be issued, `now` being `elapsed`
    /// after the start.
    fn more(&self, k: u64, elapsed: Duration) -> bool {
        self.o.count.is_none_or(|n| k < n) && self.o.duration.is_none_or(|d| elapsed < d)
    }
}

#[derive(Debug, Default)]
struct Stats {
    ok: u64,
    errors: BTreeMap<u16, u64>,
    lost: u64,
    retrans: u64,
    entries: u64,
    overflow: u64,
    lat_us: Vec<u32>,
}

impl Stats {
    fn merge(&mut self, o: Self) {
        self.ok += o.ok;
        for (c, n) in o.errors {
            *self.errors.entry(c).or_default() += n;
        }
        self.lost += o.lost;
        self.retrans += o.retrans;
        self.entries += o.entries;
        self.overflow += o.overflow;
        self.lat_us.extend(o.lat_us);
    }

    fn record(&mut self, outcome: Outcome, sent: Instant) -> bool {
        match outcome {
            Outcome::Ok { entries, overflow } => {
                self.ok += 1;
                self.entries += entries as u64;
                self.overflow += u64::from(overflow);
            }
            Outcome::Err(c) => *self.errors.entry(c).or_default() += 1,
            Outcome::Ignore => return false,
        }
        let us = sent.elapsed().as_micros();
        self.lat_us.push(u32::try_from(us).unwrap_or(u32::MAX));
        true
    }
}

struct Pending {
    k: u64,
    first: Instant,
    last: Instant,
    tries: u32,
    bytes: Vec<u8>,
}

/// UDP: one socket, `window` requests outstanding under distinct XIDs.
fn run_udp(w: &Work, t0: Instant) -> io::Result<Stats> {
    let bind: SocketAddr = if w.o.da.is_ipv4() {
        "0.0.0.0:0".parse().expect("addr")
    } else {
        "[::]:0".parse().expect("addr")
    };
    let sock = UdpSocket::bind(bind)?;
    sock.connect(w.o.da)?;
    let tick = Duration::from_millis(5).min(w.o.timeout);
    sock.set_read_timeout(Some(tick))?;
    let mut st = Stats::default();
    let mut inflight: HashMap<u16, Pending> = HashMap::new();
    let mut next_k = 0u64;
    let mut xid = (w.o.seed as u16).wrapping_mul(7919);
    let mut buf = vec![0u8; 65_536];
    let mut last_scan = Instant::now();
    let drain_limit = w.o.timeout * (w.o.retries + 1) + Duration::from_secs(1);
    let mut issuing_ended: Option<Instant> = None;
    loop {
        let now = Instant::now();
        while inflight.len() < w.o.window && w.more(next_k, now - t0) {
            loop {
                xid = xid.wrapping_add(1);
                if xid != 0 && !inflight.contains_key(&xid) {
                    break;
                }
            }
            let bytes = w.request(next_k, xid);
            let at = Instant::now();
            match sock.send(&bytes) {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
            inflight.insert(
                xid,
                Pending {
                    k: next_k,
                    first: at,
                    last: at,
                    tries: 1,
                    bytes,
                },
            );
            next_k += 1;
        }
        if !w.more(next_k, now - t0) {
            let ended = *issuing_ended.get_or_insert(now);
            if inflight.is_empty() {
                break;
            }
            if now - ended > drain_limit {
                st.lost += inflight.len() as u64;
                break;
            }
        }
        match sock.recv(&mut buf) {
            Ok(n) => {
                if let Ok(m) = Message::parse(&buf[..n]) {
                    let x = m.header().xid;
                    if let Some(p) = inflight.get(&x) {
                        if st.record(w.judge(&m), p.first) {
                            inflight.remove(&x);
                        }
                    }
                }
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) => {}
            // ICMP port unreachable and the like: keep going, retransmits cover it.
            Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {}
            Err(e) => return Err(e),
        }
        let now = Instant::now();
        if now - last_scan >= tick {
            last_scan = now;
            let mut gone = Vec::new();
            for (x, p) in &mut inflight {
                if now - p.last < w.o.timeout {
                    continue;
                }
                if w.o.kind == Kind::Query || p.tries > w.o.retries {
                    gone.push(*x);
                    continue;
                }
                let _ = sock.send(&p.bytes);
                p.last = now;
                p.tries += 1;
                st.retrans += 1;
            }
            for x in gone {
                if let Some(p) = inflight.remove(&x) {
                    st.lost += 1;
                    if w.o.kind == Kind::Reg {
                        eprintln!("slp_load: request {} never answered", p.k);
                    }
                }
            }
        }
    }
    Ok(st)
}

/// TCP: one connection, `window` requests pipelined; request numbers come
/// from the shared counter `next`.
fn run_tcp_conn(w: &Work, next: &AtomicU64, t0: Instant) -> io::Result<Stats> {
    let mut s = TcpStream::connect_timeout(&w.o.da, Duration::from_secs(5))?;
    s.set_nodelay(true)?;
    s.set_read_timeout(Some(Duration::from_secs(30)))?;
    let mut st = Stats::default();
    let mut inflight: HashMap<u16, (u64, Instant)> = HashMap::new();
    let mut xid = (w.o.seed as u16).wrapping_add(next.load(Ordering::Relaxed) as u16);
    let mut rx: Vec<u8> = Vec::with_capacity(1 << 16);
    let mut buf = vec![0u8; 1 << 16];
    let mut out = Vec::new();
    let mut done = false;
    loop {
        out.clear();
        while !done && inflight.len() < w.o.window {
            let k = next.fetch_add(1, Ordering::Relaxed);
            if !w.more(k, t0.elapsed()) {
                done = true;
                break;
            }
            xid = xid.wrapping_add(1);
            let bytes = w.request(k, xid);
            inflight.insert(xid, (k, Instant::now()));
            out.extend_from_slice(&bytes);
        }
        if !out.is_empty() {
            s.write_all(&out)?;
        }
        if inflight.is_empty() {
            break;
        }
        let n = match s.read(&mut buf) {
            Ok(0) => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the DA closed the connection",
                ))
            }
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        rx.extend_from_slice(&buf[..n]);
        let mut off = 0;
        while let Some(len) = frame_len(&rx[off..]) {
            if len < 16 {
                return Err(io::Error::new(io::ErrorKind::InvalidData, "bad SLP frame"));
            }
            if rx.len() - off < len {
                break;
            }
            if let Ok(m) = Message::parse(&rx[off..off + len]) {
                let x = m.header().xid;
                if let Some((_, sent)) = inflight.get(&x).copied() {
                    if st.record(w.judge(&m), sent) {
                        inflight.remove(&x);
                    }
                }
            }
            off += len;
        }
        rx.drain(..off);
    }
    Ok(st)
}

fn run_tcp(w: &Arc<Work>, t0: Instant) -> io::Result<Stats> {
    let next = Arc::new(AtomicU64::new(0));
    let handles: Vec<_> = (0..w.o.conns)
        .map(|_| {
            let (w, next) = (Arc::clone(w), Arc::clone(&next));
            std::thread::spawn(move || run_tcp_conn(&w, &next, t0))
        })
        .collect();
    let mut st = Stats::default();
    for h in handles {
        let r = h
            .join()
            .map_err(|_| io::Error::other("a connection thread panicked"))?;
        st.merge(r?);
    }
    Ok(st)
}

fn pct(sorted: &[u32], p: f64) -> u32 {
    if sorted.is_empty() {
        return 0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn main() -> ExitCode {
    let o = match parse_args() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("slp_load: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let w = match Work::new(o) {
        Ok(w) => Arc::new(w),
        Err(e) => {
            eprintln!("slp_load: {e}");
            return ExitCode::from(2);
        }
    };
    let t0 = Instant::now();
    let r = if w.o.tcp {
        run_tcp(&w, t0)
    } else {
        run_udp(&w, t0)
    };
    let secs = t0.elapsed().as_secs_f64();
    let mut st = match r {
        Ok(st) => st,
        Err(e) => {
            eprintln!("slp_load: {}: {e}", w.o.mode);
            return ExitCode::from(1);
        }
    };
    st.lat_us.sort_unstable();
    let n = st.ok + st.errors.values().sum::<u64>() + st.lost;
    let err: u64 = st.errors.values().sum();
    let codes: Vec<String> = st.errors.iter().map(|(c, n)| format!("{c}:{n}")).collect();
    if !codes.is_empty() {
        eprintln!("slp_load: error codes (code:count) {}", codes.join(" "));
    }
    println!(
        "RESULT mode={} n={n} ok={} err={err} lost={} retrans={} secs={secs:.3} rate={:.1} \
         p50_us={} p99_us={} max_us={} entries={:.2} overflow={}",
        w.o.mode,
        st.ok,
        st.lost,
        st.retrans,
        st.ok as f64 / secs,
        pct(&st.lat_us, 0.50),
        pct(&st.lat_us, 0.99),
        st.lat_us.last().copied().unwrap_or(0),
        if st.ok > 0 {
            st.entries as f64 / st.ok as f64
        } else {
            0.0
        },
        st.overflow,
    );
    if err > 0 || st.lost > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}
