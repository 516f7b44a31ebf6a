//! HTTP service function chaining over the nNLM, in the simulator (RFC
//! 8677 §4, SPEC §1.4 "HTTP from local SFs"): a request is classified at
//! nSFF1 by a Host rule onto SPI 10 / SI 255; that row names SF A, local at
//! nSFF1, which gets the request with `NSH: spi=10; si=255`, does its work
//! and sends the request back to nSFF1 with SI 254; row (10, 254) names SF
//! B, served behind nSFF2; nSFF2 delivers it with `NSH: spi=10; si=254`
//! and SF B's response travels back the whole way.
//!
//! ```text
//!   client ─┐                                               ┌─ SF B (www.b.example)
//!   SF A ───┴ c ── nSFF1 ── n1 ── F1 ── fab ── F2 ── n2 ── nSFF2 ── s
//!   (www.a.example)                 │
//!                                   NR
//! ```
//!
//! SF A and SF B are [`NshSf`], a small NSH-aware SF written here: A relays
//! each request back to its nSFF with the SI decremented, B answers with
//! what it saw. Links as in `sim_chain.rs`.

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use serde_json::Value;
use smoltcp::iface::SocketHandle;
use smoltcp::socket::tcp;
use smoltcp::time::Duration;
use smoltcp::wire::IpAddress;
use svcroute_fwd::{Fwd, FwdConfig};
use svcroute_host::{Host, HostConfig};
use svcroute_nr::config::{AttachConfig, LinkConfig, NsffAttachConfig};
use svcroute_nr::{Nr, NrConfig};
use svcroute_nsff::sfc::{edit_head, head_len, NshHeader, RuleConfig};
use svcroute_nsff::{NnlmRowConfig, Nsff, NsffConfig, SfConfig};
use svcroute_stack::http::{Decoded, Limits, RequestDecoder, ResponseDecoder};
use svcroute_stack::runtime::{Context, Node, PortConfig, Role};
use svcroute_stack::sim::{self, NodeId, SegmentConfig, SegmentId, Sim, SimLink};

fn nr_config() -> NrConfig {
    let attach = |nsff, at: &str, link_in, link_out| NsffAttachConfig {
        nsff,
        at: at.into(),
        link_in,
        link_out,
    };
    NrConfig {
        rest_port: 0,
        self_attach: Some(AttachConfig {
            at: "f1".into(),
            link_in: 0,
            link_out: 1,
        }),
        attach: vec![attach(1, "f1", 2, 3), attach(2, "f2", 4, 5)],
        links: vec![
            LinkConfig {
                from: "f1".into(),
                to: "f2".into(),
                id: 10,
            },
            LinkConfig {
                from: "f2".into(),
                to: "f1".into(),
                id: 11,
            },
        ],
        ..NrConfig::default()
    }
}

fn fabric_port(sim: &mut Sim, seg: SegmentId, host: u8) -> (PortConfig, SimLink) {
    let subnet = seg.0 as u8;
    let cfg = PortConfig {
        addrs: Vec::new(),
        ..sim::port_config(&format!("f{subnet}"), subnet, host)
    };
    (cfg, sim.attach(seg))
}

/// What an [`NshSf`] saw: each request head as it arrived.
type Seen = Rc<RefCell<Vec<String>>>;

/// What an [`NshSf`] does with a request.
#[derive(Debug, Clone)]
enum Mode {
    /// Send it back to the nSFF at this address (port 80) with the SI one
    /// less and `X-Via: <name>`, and relay the response.
    Relay(IpAddress),
    /// Answer 200 with `X-Instance: <name>` and a body saying which `NSH`
    /// header and `Host` it saw.
    Answer,
}

#[derive(Debug)]
struct SfConn {
    sock: SocketHandle,
    inbuf: Vec<u8>,
    /// The relayed request's upstream connection, its unsent bytes, the
    /// response decoder.
    up: Option<(SocketHandle, Vec<u8>, ResponseDecoder)>,
    out: Vec<u8>,
}

/// A minimal NSH-aware SF (GET requests without bodies, keep-alive).
#[derive(Debug)]
struct NshSf {
    name: &'static str,
    mode: Mode,
    seen: Seen,
    listeners: Vec<SocketHandle>,
    conns: Vec<SfConn>,
    next_port: u16,
    /// Set by the test: the SF dies (every socket aborted, nothing listens:
    /// connects are reset).
    dead: Rc<Cell<bool>>,
}

impl NshSf {
    fn new(name: &'static str, mode: Mode, seen: Seen) -> Self {
        Self {
            name,
            mode,
            seen,
            listeners: Vec::new(),
            conns: Vec::new(),
            next_port: 40000,
            dead: Rc::default(),
        }
    }

    fn listen(cx: &mut Context<'_>) -> SocketHandle {
        let mut s = tcp::Socket::new(
            tcp::SocketBuffer::new(vec![0; 65536]),
            tcp::SocketBuffer::new(vec![0; 65536]),
        );
        s.listen(80).unwrap();
        cx.ports[0].sockets.add(s)
    }

    /// A complete request head arrived on `c`.
    fn handle(&mut self, cx: &mut Context<'_>, c: &mut SfConn, mut req: Vec<u8>) {
        self.seen
            .borrow_mut()
            .push(String::from_utf8_lossy(&req).into_owned());
        let mut dec = RequestDecoder::new(Limits::default());
        let Ok((_, Decoded::Head(h))) = dec.decode(&req) else {
            panic!("{}: bad request head", self.name);
        };
        let nsh = h.headers.get("nsh").map(|v| NshHeader::parse(v).unwrap());
        match &self.mode {
            Mode::Answer => {
                let body = format!(
                    "instance={} nsh={} host={}\n",
                    self.name,
                    nsh.map_or("none".into(), |n| n.to_string()),
                    String::from_utf8_lossy(h.headers.get("host").unwrap_or(b"none")),
                );
                c.out.extend_from_slice(
                    format!(
                        "HTTP/1.1 200 OK\r\nX-Instance: {}\r\nContent-Length: {}\r\n\r\n{body}",
                        self.name,
                        body.len()
                    )
                    .as_bytes(),
                );
            }
            Mode::Relay(nsff) => {
                let n = nsh.expect("a relayed request carries NSH");
                let next = NshHeader { si: n.si - 1, ..n };
                edit_head(
                    &mut req,
                    &["nsh"],
                    &[("NSH", next.to_string()), ("X-Via", self.name.into())],
                )
                .unwrap();
                let mut s = tcp::Socket::new(
                    tcp::SocketBuffer::new(vec![0; 65536]),
                    tcp::SocketBuffer::new(vec![0; 65536]),
                );
                self.next_port += 1;
                let ps = &mut cx.ports[0];
                s.connect(ps.iface.context(), (*nsff, 80), self.next_port)
                    .unwrap();
                let h = ps.sockets.add(s);
                c.up = Some((h, req, ResponseDecoder::new(Limits::default())));
            }
        }
    }

    fn pump(&mut self, cx: &mut Context<'_>, c: &mut SfConn) -> bool {
        let mut any = false;
        let mut tmp = [0u8; 8192];
        if c.up.is_none() && c.out.is_empty() {
            let s = cx.ports[0].sockets.get_mut::<tcp::Socket>(c.sock);
            while let Ok(n @ 1..) = s.recv_slice(&mut tmp) {
                c.inbuf.extend_from_slice(&tmp[..n]);
                any = true;
            }
            if let Some(end) = head_len(&c.inbuf) {
                let req: Vec<u8> = c.inbuf.drain(..end).collect();
                self.handle(cx, c, req);
                any = true;
            }
        }
        if let Some((h, req, dec)) = &mut c.up {
            let s = cx.ports[0].sockets.get_mut::<tcp::Socket>(*h);
            if !req.is_empty() && s.can_send() {
                let n = s.send_slice(req).unwrap_or(0);
                req.drain(..n);
                any |= n > 0;
            }
            let mut done = false;
            while let Ok(n @ 1..) = s.recv_slice(&mut tmp) {
                any = true;
                c.out.extend_from_slice(&tmp[..n]);
                let mut at = 0;
                loop {
                    let (k, ev) = dec.decode(&tmp[at..n]).unwrap();
                    at += k;
                    match ev {
                        Decoded::End => {
                            done = true;
                            break;
                        }
                        Decoded::NeedMore => break,
                        _ => {}
                    }
                }
            }
            if done {
                s.close();
                c.up = None;
            }
        }
        let s = cx.ports[0].sockets.get_mut::<tcp::Socket>(c.sock);
        if !c.out.is_empty() && s.can_send() {
            let n = s.send_slice(&c.out).unwrap_or(0);
            c.out.drain(..n);
            any |= n > 0;
        }
        any
    }
}

impl Role for NshSf {
    fn name(&self) -> &'static str {
        "nsh-sf"
    }

    fn start(&mut self, cx: &mut Context<'_>) {
        for _ in 0..4 {
            self.listeners.push(Self::listen(cx));
        }
    }

    fn poll(&mut self, cx: &mut Context<'_>) -> bool {
        if self.dead.get() {
            let socks = self.listeners.drain(..);
            let conns = self
                .conns
                .drain(..)
                .flat_map(|c| [Some(c.sock), c.up.map(|u| u.0)]);
            for h in socks.chain(conns.flatten()) {
                cx.ports[0].sockets.get_mut::<tcp::Socket>(h).abort();
            }
            return false;
        }
        let mut any = false;
        let mut i = 0;
        while i < self.listeners.len() {
            let h = self.listeners[i];
            if cx.ports[0].sockets.get::<tcp::Socket>(h).state() == tcp::State::Listen {
                i += 1;
                continue;
            }
            self.listeners[i] = Self::listen(cx);
            self.conns.push(SfConn {
                sock: h,
                inbuf: Vec::new(),
                up: None,
                out: Vec::new(),
            });
            any = true;
        }
        let mut conns = std::mem::take(&mut self.conns);
        for c in &mut conns {
            for _ in 0..16 {
                if !self.pump(cx, c) {
                    break;
                }
                any = true;
            }
            let s = cx.ports[0].sockets.get_mut::<tcp::Socket>(c.sock);
            if s.state() == tcp::State::CloseWait && c.up.is_none() && c.out.is_empty() {
                s.close();
            }
        }
        self.conns = conns;
        any
    }
}

type NsffNode = NodeId<Node<SimLink, Nsff>>;
type HostId = NodeId<Node<SimLink, Host>>;

struct World {
    sim: Sim,
    client: HostId,
    nsff1: NsffNode,
    nsff2: NsffNode,
    client_seg: SegmentId,
    seen_a: Seen,
    seen_b: Seen,
    /// Kills SF A.
    kill_a: Rc<Cell<bool>>,
}

fn row(spi: u32, si: u32, next_hop: &str, te: &str) -> NnlmRowConfig {
    NnlmRowConfig {
        spi,
        si,
        next_hop: next_hop.into(),
        te: te.into(),
        port: None,
        vni: None,
    }
}

fn rule(host: &str, path_prefix: Option<&str>, spi: u32, si: u32) -> RuleConfig {
    RuleConfig {
        source: None,
        host: Some(host.into()),
        path_prefix: path_prefix.map(Into::into),
        spi,
        si,
    }
}

fn world(seed: u64) -> World {
    let mut sim = Sim::new(seed);
    let s_nr = sim.add_segment(SegmentConfig::default());
    let s_n1 = sim.add_segment(SegmentConfig::default());
    let s_fab = sim.add_segment(SegmentConfig::default());
    let s_n2 = sim.add_segment(SegmentConfig::default());
    let s_c = sim.add_segment(SegmentConfig::default());
    let s_sf = sim.add_segment(SegmentConfig::default());
    for (name, id, ports, links) in [
        (
            "f1",
            1,
            vec![
                fabric_port(&mut sim, s_nr, 100),
                fabric_port(&mut sim, s_n1, 100),
                fabric_port(&mut sim, s_fab, 100),
            ],
            vec![0, 2, 10],
        ),
        (
            "f2",
            2,
            vec![
                fabric_port(&mut sim, s_fab, 101),
                fabric_port(&mut sim, s_n2, 101),
            ],
            vec![11, 4],
        ),
    ] {
        let cfg = FwdConfig {
            node_id: id,
            link_ids: links,
            ..FwdConfig::default()
        };
        let macs: Vec<_> = ports.iter().map(|(c, _)| c.mac).collect();
        sim.add_role(name, ports, Fwd::new(&cfg, &macs).unwrap());
    }
    let nr_port = fabric_port(&mut sim, s_nr, 1);
    sim.add_role("nr", vec![nr_port], Nr::new(nr_config()).unwrap());

    let nsff1_addr = sim::ipv4(s_c.0 as u8, 1);
    let sfa_addr = sim::ipv4(s_c.0 as u8, 3);
    let n1 = NsffConfig {
        nsff_id: 1,
        link_in: 2,
        link_out: 3,
        nr_links: vec![3, 0],
        sfc_required: true,
        sf: vec![SfConfig {
            fqdn: "www.a.example".into(),
            addr: std::net::Ipv4Addr::from(sfa_addr.octets()).into(),
            port: 80,
            tls_port: 443,
        }],
        classifier: vec![
            rule("www.chain.example", None, 10, 255),
            rule("www.b.example", Some("/direct"), 20, 255),
            rule("www.b.example", Some("/classic"), 30, 255),
        ],
        nnlm: vec![
            row(10, 255, "www.a.example", "http"),
            row(10, 254, "www.b.example/any/path", "http"),
            row(20, 255, "http-service", "http"),
            row(30, 255, "10.9.9.9", "gre"),
        ],
        ..NsffConfig::default()
    };
    let ports = vec![fabric_port(&mut sim, s_n1, 1), sim.port(s_c, 1)];
    let nsff1 = sim.add_role("nsff1", ports, Nsff::new(n1).unwrap());

    let sfb_addr = sim::ipv4(s_sf.0 as u8, 2);
    let n2 = NsffConfig {
        nsff_id: 2,
        link_in: 4,
        link_out: 5,
        nr_links: vec![5, 11, 0],
        sf: vec![SfConfig {
            fqdn: "www.b.example".into(),
            addr: std::net::Ipv4Addr::from(sfb_addr.octets()).into(),
            port: 80,
            tls_port: 443,
        }],
        ..NsffConfig::default()
    };
    let ports = vec![fabric_port(&mut sim, s_n2, 1), sim.port(s_sf, 1)];
    let nsff2 = sim.add_role("nsff2", ports, Nsff::new(n2).unwrap());

    let seen_a = Seen::default();
    let seen_b = Seen::default();
    let p = sim.port(s_c, 3);
    let sfa = NshSf::new("sfa", Mode::Relay(nsff1_addr.into()), seen_a.clone());
    let kill_a = sfa.dead.clone();
    sim.add_role("sfa", vec![p], sfa);
    let p = sim.port(s_sf, 2);
    sim.add_role(
        "sfb",
        vec![p],
        NshSf::new("sfb", Mode::Answer, seen_b.clone()),
    );
    let p = sim.port(s_c, 2);
    let client = sim.add_role(
        "client",
        vec![p],
        Host::new("client", HostConfig::default()).unwrap(),
    );
    World {
        sim,
        client,
        nsff1,
        nsff2,
        client_seg: s_c,
        seen_a,
        seen_b,
        kill_a,
    }
}

/// Let registrations settle, then run one client job to completion.
fn job(w: &mut World, job: &str) -> Value {
    w.sim.run_for(Duration::from_millis(500)).unwrap();
    let args: Vec<String> = job
        .replace("NSFF1", &sim::ipv4(w.client_seg.0 as u8, 1).to_string())
        .split_whitespace()
        .map(str::to_owned)
        .collect();
    let now = w.sim.now();
    let client = w.client;
    assert!(w.sim.node_mut(client).control(now, 1, &args).is_none());
    w.sim
        .drive_bounded(Duration::from_secs(600), 10_000_000, |s| {
            s.node(client).role().jobs_running() == 0
        })
        .unwrap();
    w.sim.run_for(Duration::from_secs(2)).unwrap();
    let mut r = w.sim.node_mut(client).take_replies();
    assert_eq!(r.len(), 1);
    r.remove(0).1
}

#[track_caller]
fn header_of(head: &str, name: &str) -> Option<String> {
    head.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.trim()
            .eq_ignore_ascii_case(name)
            .then(|| v.trim().to_owned())
    })
}

#[test]
fn a_two_sf_chain_by_spi_and_si() {
    let mut w = world(1);
    let r = job(
        &mut w,
        "get http://NSFF1/x --requests 3 --host www.chain.example --timeout-ms 60000",
    );
    assert_eq!(r["ok"], 3, "{r:#}");
    assert_eq!(r["status"]["200"], 3, "{r:#}");
    let first = &r["first_response"];
    assert_eq!(first["headers"]["x-instance"], "sfb", "{r:#}");
    // SF B got the request at SI 254 with the request's own Host.
    assert_eq!(
        first["body"], "instance=sfb nsh=spi=10; si=254 host=www.chain.example\n",
        "{r:#}"
    );
    // SF A got each request at SI 255 from nSFF1 (the classifier's rule).
    let a = w.seen_a.borrow().clone();
    assert_eq!(a.len(), 3, "{a:?}");
    for head in &a {
        assert_eq!(header_of(head, "nsh").as_deref(), Some("spi=10; si=255"));
        assert_eq!(
            header_of(head, "host").as_deref(),
            Some("www.chain.example")
        );
        assert_eq!(header_of(head, "nsh-next-hop"), None);
    }
    // SF B: SI 254, SF A's mark, and no nSFF-internal header.
    let b = w.seen_b.borrow().clone();
    assert_eq!(b.len(), 3, "{b:?}");
    for head in &b {
        assert_eq!(header_of(head, "nsh").as_deref(), Some("spi=10; si=254"));
        assert_eq!(header_of(head, "x-via").as_deref(), Some("sfa"));
        assert_eq!(header_of(head, "nsh-next-hop"), None);
        assert!(head.starts_with("GET /x HTTP/1.1\r\n"), "{head}");
    }
    let n1 = w.sim.node(w.nsff1).stats();
    let n2 = w.sim.node(w.nsff2).stats();
    assert_eq!(n1.get("nsff.classified_rule"), 3, "{n1:?}");
    assert_eq!(n1.get("nsff.classified_header"), 3, "{n1:?}");
    assert_eq!(n1.get("nsff.sfc_to_name"), 6, "{n1:?}");
    assert_eq!(n1.get("nsff.sfc_nsh_added"), 3, "{n1:?}");
    assert_eq!(n1.get("nsff.sfc_remote"), 3, "{n1:?}");
    assert_eq!(n1.get("nsff.misdirected_421"), 0, "{n1:?}");
    assert_eq!(n2.get("nsff.egress_sfc"), 3, "{n2:?}");
    assert_eq!(n2.get("nsff.egress_responses"), 3, "{n2:?}");
}

#[test]
fn http_service_rows_take_the_requests_own_name() {
    let mut w = world(2);
    let r = job(
        &mut w,
        "get http://NSFF1/direct/1 --requests 2 --host www.b.example --timeout-ms 60000",
    );
    assert_eq!(r["ok"], 2, "{r:#}");
    assert_eq!(
        r["first_response"]["body"], "instance=sfb nsh=spi=20; si=255 host=www.b.example\n",
        "{r:#}"
    );
    assert!(w.seen_a.borrow().is_empty());
    let n1 = w.sim.node(w.nsff1).stats();
    assert_eq!(n1.get("nsff.sfc_http_service"), 2, "{n1:?}");
}

#[test]
fn unclassified_and_misrouted_requests_get_421() {
    let mut w = world(3);
    // No rule for the name, and classification is required.
    let r = job(
        &mut w,
        "get http://NSFF1/ --requests 2 --host www.other.example",
    );
    assert_eq!(r["status"]["421"], 2, "{r:#}");
    let body = r["first_response"]["body"].as_str().unwrap();
    assert!(body.contains("no SFC classification"), "{body}");
    // A classic row is not for HTTP.
    let r = job(
        &mut w,
        "get http://NSFF1/classic --requests 1 --host www.b.example",
    );
    assert_eq!(r["status"]["421"], 1, "{r:#}");
    let body = r["first_response"]["body"].as_str().unwrap();
    assert!(body.contains("classic gre row"), "{body}");
    // A rule whose path does not match: unclassified.
    let r = job(
        &mut w,
        "get http://NSFF1/other --requests 1 --host www.b.example",
    );
    assert_eq!(r["status"]["421"], 1, "{r:#}");
    let n1 = w.sim.node(w.nsff1).stats();
    assert_eq!(n1.get("nsff.misdirected_421"), 4, "{n1:?}");
    assert_eq!(n1.get("nsff.sfc_unclassified_421"), 3, "{n1:?}");
    assert_eq!(n1.get("nsff.sfc_row_not_http"), 1, "{n1:?}");
    assert_eq!(n1.get("nsff.requests"), 0, "{n1:?}");
    assert!(w.seen_a.borrow().is_empty() && w.seen_b.borrow().is_empty());
}

#[test]
fn same_seed_same_trace() {
    let run = |seed| {
        let mut w = world(seed);
        let r = job(
            &mut w,
            "get http://NSFF1/x --requests 2 --host www.chain.example --timeout-ms 60000",
        );
        (r["ok"].clone(), w.sim.trace_hash())
    };
    assert_eq!(run(7), run(7));
}

/// Proxied exchanges are health evidence: while requests to an SF keep
/// succeeding more often than `health_interval_ms` (2 s), it is not probed.
/// (Probe-only checks probed every SF every 2 s whatever its traffic, and
/// two refused probes took a busy SF down: docs/bench.md.)
#[test]
fn sfs_answering_proxied_requests_are_not_probed() {
    let mut w = world(3);
    w.sim.run_for(Duration::from_millis(500)).unwrap();
    let probes = |w: &World| {
        (
            w.sim.node(w.nsff1).stats().get("nsff.health_probes"),
            w.sim.node(w.nsff2).stats().get("nsff.health_probes"),
        )
    };
    // Each nSFF probed its SF once at start.
    let before = probes(&w);
    assert_eq!(before, (1, 1));
    let start = w.sim.now();
    // One request every ~0.5 s for over 10 s: SF A (local at nSFF1) and
    // SF B (behind nSFF2) answer each.
    let mut ok = 0;
    while w.sim.now() - start < Duration::from_secs(10) {
        let r = chain_request(&mut w);
        assert_eq!(r["ok"], 1, "{r:#}");
        ok += 1;
        w.sim.run_for(Duration::from_millis(500)).unwrap();
    }
    assert!(ok >= 10, "{ok} requests");
    assert_eq!(probes(&w), before, "probed while answering traffic");
    // Traffic stops: probes resume every interval.
    w.sim.run_for(Duration::from_secs(5)).unwrap();
    let (p1, p2) = probes(&w);
    assert!(p1 >= before.0 + 2 && p2 >= before.1 + 2, "{:?}", (p1, p2));
    for n in [w.nsff1, w.nsff2] {
        let s = w.sim.node(n).stats();
        assert_eq!(s.get("nsff.sf_down"), 0, "{s:?}");
        assert_eq!(s.get("nsff.health_failures"), 0, "{s:?}");
    }
}

/// One `Connection: close` request for `www.chain.example` (SF A, then SF
/// B), run to completion: the client's reply.
fn chain_request(w: &mut World) -> Value {
    let url = format!("http://{}/x", sim::ipv4(w.client_seg.0 as u8, 1));
    let args: Vec<String> = ["get", &url, "--host", "www.chain.example", "--close"]
        .into_iter()
        .map(str::to_owned)
        .collect();
    let (client, now) = (w.client, w.sim.now());
    assert!(w.sim.node_mut(client).control(now, 1, &args).is_none());
    w.sim
        .drive_bounded(Duration::from_secs(60), 10_000_000, |s| {
            s.node(client).role().jobs_running() == 0
        })
        .unwrap();
    let mut r = w.sim.node_mut(client).take_replies();
    assert_eq!(r.len(), 1);
    r.remove(0).1
}

/// A refused proxied connect is failure evidence: an SF that dies while
/// serving is taken down by it plus one failed probe, where probe-only
/// checks needed two failed probes.
#[test]
fn a_refused_proxied_connect_counts_toward_down() {
    let mut w = world(4);
    w.sim.run_for(Duration::from_millis(500)).unwrap();
    for _ in 0..4 {
        let r = chain_request(&mut w);
        assert_eq!(r["ok"], 1, "{r:#}");
        w.sim.run_for(Duration::from_millis(300)).unwrap();
    }
    let n1 = |w: &World, k: &str| w.sim.node(w.nsff1).stats().get(k);
    assert_eq!(n1(&w, "nsff.health_probes"), 1);

    // SF A dies; the next request's connect to it is reset: 502, one
    // counted failure, still up.
    w.kill_a.set(true);
    w.sim.run_for(Duration::from_millis(10)).unwrap();
    let r = chain_request(&mut w);
    assert_eq!(r["status"]["502"], 1, "{r:#}");
    assert_eq!(n1(&w, "nsff.sf_refused"), 1);
    assert_eq!(n1(&w, "nsff.sf_down"), 0);
    // More refusals at once are the same incident.
    let r = chain_request(&mut w);
    assert_eq!(r["status"]["502"], 1, "{r:#}");
    assert_eq!(n1(&w, "nsff.health_failures_same_incident"), 1);
    assert_eq!(n1(&w, "nsff.sf_down"), 0);

    // The probe, due an interval after the last success, fails too: down,
    // deregistered.
    w.sim.run_for(Duration::from_secs(3)).unwrap();
    assert_eq!(n1(&w, "nsff.sf_down"), 1);
    assert_eq!(n1(&w, "nsff.health_failures"), 1, "one failed probe");
    assert_eq!(n1(&w, "nsff.deregistrations_sent"), 1);
}
