//! The RFC 8677 example in small, in the simulator: a client asks nSFF1 for
//! `www.example2.com` by `Host` header; nSFF1 resolves the name at the NR,
//! carries the request over the fabric (two fwd switches, loss between
//! them) to nSFF2, which proxies it to its local SF and returns the response
//! on the same transaction.
//!
//! ```text
//!   client ─┐                                               ┌─ sf2 (www.example2.com)
//!   sf1 ────┴ c ── nSFF1 ── n1 ── F1 ── lossy ── F2 ── n2 ── nSFF2 ── s
//!   (www.example.com)              │
//!                                  NR
//! ```
//!
//! Links: F1 → NR 0, NR → F1 1, F1 → nSFF1 2, nSFF1 → F1 3,
//! F2 → nSFF2 4, nSFF2 → F2 5, F1 → F2 10, F2 → F1 11.

use serde_json::Value;
use smoltcp::time::Duration;
use smoltcp::wire::{
    ArpOperation, ArpPacket, ArpRepr, EthernetAddress, EthernetFrame, EthernetProtocol,
    EthernetRepr, Ipv4Address,
};
use svcroute_fwd::{Fwd, FwdConfig};
use svcroute_host::{Host, HostConfig};
use svcroute_nr::config::{AttachConfig, LinkConfig, NsffAttachConfig};
use svcroute_nr::{Nr, NrConfig};
use svcroute_nsff::cache::{CacheConfig, StaticRoute};
use svcroute_nsff::{Nsff, NsffConfig, SfConfig};
use svcroute_stack::phy::Link;
use svcroute_stack::runtime::{Node, PortConfig};
use svcroute_stack::sim::{self, NodeId, SegmentConfig, SegmentId, Sim, SimLink, SimPort};
use svcroute_stack::wire::nr::NsffId;

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

/// A fabric port: no addresses (GFF only).
fn fabric_port(sim: &mut Sim, seg: SegmentId, host: u8) -> (PortConfig, SimLink) {
    let subnet = seg.0 as u8;
    let cfg = PortConfig {
        addrs: Vec::new(),
        ..sim::port_config(&format!("f{subnet}"), subnet, host)
    };
    (cfg, sim.attach(seg))
}

type HostId = NodeId<Node<SimLink, Host>>;
type NrId = NodeId<Node<SimLink, Nr>>;
type NsffNode = NodeId<Node<SimLink, Nsff>>;

struct World {
    sim: Sim,
    client: HostId,
    sfs: Vec<HostId>,
    /// SF1's port and nSFF1's client-side port (to cut SF1 off).
    sf1_cut: (SimPort, SimPort),
    /// The client's port.
    client_port: SimPort,
    /// nSFF2's fabric port and F2's port toward it.
    n2_cut: (SimPort, SimPort),
    nr: NrId,
    nsff1: NsffNode,
    nsff2: NsffNode,
    client_seg: SegmentId,
}

fn world(seed: u64, loss: f64) -> World {
    world_with(seed, loss, Vec::new())
}

/// The world, nSFF1 with `statics` prepopulated in its cache.
fn world_with(seed: u64, loss: f64, statics: Vec<StaticRoute>) -> World {
    world_tuned(seed, loss, statics, |_| {})
}

/// The world, nSFF1's configuration changed by `tune`.
fn world_tuned(
    seed: u64,
    loss: f64,
    statics: Vec<StaticRoute>,
    tune: impl FnOnce(&mut NsffConfig),
) -> World {
    let mut sim = Sim::new(seed);
    let s_nr = sim.add_segment(SegmentConfig::default());
    let s_n1 = sim.add_segment(SegmentConfig::default());
    let s_lossy = sim.add_segment(SegmentConfig {
        loss,
        ..SegmentConfig::default()
    });
    let s_n2 = sim.add_segment(SegmentConfig::default());
    let s_c = sim.add_segment(SegmentConfig::default());
    let s_sf = sim.add_segment(SegmentConfig::default());

    let mut f2_n2 = None;
    for (name, id, ports, links) in [
        (
            "f1",
            1,
            vec![
                fabric_port(&mut sim, s_nr, 100),
                fabric_port(&mut sim, s_n1, 100),
                fabric_port(&mut sim, s_lossy, 100),
            ],
            vec![0, 2, 10],
        ),
        (
            "f2",
            2,
            vec![
                fabric_port(&mut sim, s_lossy, 101),
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
        if name == "f2" {
            f2_n2 = Some(ports[1].1.port());
        }
        sim.add_role(name, ports, Fwd::new(&cfg, &macs).unwrap());
    }
    let nr_port = fabric_port(&mut sim, s_nr, 1);
    let nr = sim.add_role("nr", vec![nr_port], Nr::new(nr_config()).unwrap());

    let sf1_addr = sim::ipv4(s_c.0 as u8, 3);
    let mut n1 = NsffConfig {
        nsff_id: 1,
        fabric_port: 0,
        client_port: 1,
        link_in: 2,
        link_out: 3,
        nr_links: vec![3, 0],
        cache: CacheConfig {
            statics,
            ..CacheConfig::default()
        },
        sf: vec![SfConfig {
            fqdn: "www.example.com".into(),
            addr: std::net::Ipv4Addr::from(sf1_addr.octets()).into(),
            port: 80,
            tls_port: 443,
        }],
        ..NsffConfig::default()
    };
    tune(&mut n1);
    let ports = vec![fabric_port(&mut sim, s_n1, 1), sim.port(s_c, 1)];
    let nsff1_client_port = ports[1].1.port();
    let nsff1 = sim.add_role("nsff1", ports, Nsff::new(n1).unwrap());

    let sf2_addr = sim::ipv4(s_sf.0 as u8, 2);
    let n2 = NsffConfig {
        nsff_id: 2,
        fabric_port: 0,
        client_port: 1,
        link_in: 4,
        link_out: 5,
        nr_links: vec![5, 11, 0],
        sf: vec![
            SfConfig {
                fqdn: "www.example2.com".into(),
                addr: std::net::Ipv4Addr::from(sf2_addr.octets()).into(),
                port: 80,
                tls_port: 443,
            },
            // A second instance of SF1's name, used when SF1 is down.
            SfConfig {
                fqdn: "www.example.com".into(),
                addr: std::net::Ipv4Addr::from(sf2_addr.octets()).into(),
                port: 80,
                tls_port: 443,
            },
        ],
        ..NsffConfig::default()
    };
    let ports = vec![fabric_port(&mut sim, s_n2, 1), sim.port(s_sf, 1)];
    let n2_cut = (ports[0].1.port(), f2_n2.unwrap());
    let nsff2 = sim.add_role("nsff2", ports, Nsff::new(n2).unwrap());

    let mut sfs = Vec::new();
    let mut sf1_port = None;
    for (name, seg, host) in [("sf1", s_c, 3), ("sf2", s_sf, 2)] {
        let cfg = HostConfig {
            instance: Some(name.into()),
            ..HostConfig::default()
        };
        let p = sim.port(seg, host);
        if name == "sf1" {
            sf1_port = Some(p.1.port());
        }
        sfs.push(sim.add_role(name, vec![p], Host::new(name, cfg).unwrap()));
    }
    let p = sim.port(s_c, 2);
    let client_port = p.1.port();
    let client = sim.add_role(
        "client",
        vec![p],
        Host::new("client", HostConfig::default()).unwrap(),
    );
    World {
        sim,
        client,
        sfs,
        sf1_cut: (sf1_port.unwrap(), nsff1_client_port),
        client_port,
        n2_cut,
        nr,
        nsff1,
        nsff2,
        client_seg: s_c,
    }
}

/// Let registrations settle, then run one client job to completion.
fn job(w: &mut World, job: &str) -> Value {
    job_then(w, job, Duration::from_secs(5))
}

/// [`job`], then run `after` more.
fn job_then(w: &mut World, job: &str, after: Duration) -> Value {
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
        .drive_bounded(Duration::from_secs(3600), 50_000_000, |s| {
            s.node(client).role().jobs_running() == 0
        })
        .unwrap();
    // Let the last transactions' end markers arrive.
    w.sim.run_for(after).unwrap();
    let mut r = w.sim.node_mut(client).take_replies();
    assert_eq!(r.len(), 1);
    r.remove(0).1
}

const REMOTE: &str = "get http://NSFF1/bytes/3000 --requests 20 --concurrency 2 --verify \
                      --host www.example2.com --timeout-ms 300000";

fn remote_chain(seed: u64, loss: f64) -> (Value, u64, u64) {
    let mut w = world(seed, loss);
    let r = job(&mut w, REMOTE);
    assert_eq!(r["ok"], 20, "seed {seed} loss {loss}: {r:#}");
    assert_eq!(r["status"]["200"], 20, "{r:#}");
    assert_eq!(r["body_bytes"], 60_000, "{r:#}");
    assert_eq!(r["first_response"]["headers"]["x-instance"], "sf2", "{r:#}");
    let n1 = w.sim.node(w.nsff1);
    let n2 = w.sim.node(w.nsff2);
    assert_eq!(n1.stats().get("nsff.responses_remote"), 20);
    assert_eq!(n2.stats().get("nsff.egress_responses"), 20);
    assert_eq!(w.sim.node(w.sfs[1]).stats().get("http.requests"), 20);
    // Connections to the SF are reused (2 client connections in parallel).
    let conns = n2.stats().get("nsff.sf_connections");
    assert!(conns <= 4, "{conns} SF connections for 20 requests");
    assert_eq!(n2.stats().get("nsff.sf_reused") + conns, 20);
    eprintln!("seed {seed} loss {loss}: nsff1 {:?}", n1.stats());
    eprintln!("nsff2 {:?}", n2.stats());
    let retrans = n1.role().endpoint().totals().retransmits
        + n1.role().endpoint().totals().rto_retransmits
        + n2.role().endpoint().totals().retransmits
        + n2.role().endpoint().totals().rto_retransmits;
    (r, w.sim.trace_hash(), retrans)
}

#[test]
fn remote_name_through_the_chain_without_loss() {
    let (_, _, retrans) = remote_chain(1, 0.0);
    assert_eq!(retrans, 0);
}

#[test]
fn remote_name_through_the_chain_at_10_percent_loss() {
    let (_, _, retrans) = remote_chain(2, 0.10);
    assert!(retrans > 0, "loss must cause retransmissions");
}

#[test]
fn big_post_through_the_chain_at_10_percent_loss() {
    let mut w = world(5, 0.10);
    let r = job(
        &mut w,
        "post http://NSFF1/echo --body-size 300000 --requests 2 \
         --host www.example2.com --timeout-ms 300000",
    );
    assert_eq!(r["ok"], 2, "{r:#}");
    assert_eq!(r["first_response"]["headers"]["x-instance"], "sf2", "{r:#}");
}

#[test]
fn one_mebibyte_get_at_10_percent_loss_verified() {
    let mut w = world(6, 0.10);
    let r = job(
        &mut w,
        "get http://NSFF1/bytes/1048576 --requests 2 --verify \
         --host www.example2.com --timeout-ms 600000",
    );
    assert_eq!(r["ok"], 2, "{r:#}");
    assert_eq!(r["body_bytes"], 2 * 1_048_576, "{r:#}");
}

/// What a small keep-alive request costs on the fabric: the request with its
/// end marker in one window, its count-0 ack, the response with its end
/// marker in one window, its ack: six transport frames, nothing resent. With
/// each end marker in a window of its own it took eight, plus the probes of
/// acks that looked stale (8.6 per request on the TAP bench; see
/// `docs/bench.md`, "Round trips per request").
#[test]
fn a_keep_alive_request_costs_six_fabric_frames() {
    const N: u64 = 10;
    let mut w = world(7, 0.0);
    let r = job(
        &mut w,
        "get http://NSFF1/bytes/1024 --requests 10 --concurrency 1 --verify \
         --host www.example2.com --timeout-ms 60000",
    );
    assert_eq!(r["ok"], N, "{r:#}");
    assert_eq!(r["body_bytes"], N * 1024, "{r:#}");
    let n1 = w.sim.node(w.nsff1);
    let n2 = w.sim.node(w.nsff2);
    // One client connection, one transaction per request, all closed.
    assert_eq!(n1.stats().get("nsff.clients_accepted"), 1);
    assert_eq!(n1.role().endpoint().stats().opened, N);
    assert_eq!(n1.stats().get("nsff.responses_remote"), N);
    assert_eq!(n1.role().endpoint().stats().completed, N);
    assert_eq!(n2.role().endpoint().stats().completed, N);
    let t1 = n1.role().endpoint().totals();
    let t2 = n2.role().endpoint().totals();
    let frames = |t: &svcroute_nsff::transport::TxnStats| {
        t.data_out + t.retransmits + t.rto_retransmits + t.acks_out + t.nacks_out
    };
    // Per side: a data packet and the end marker per request, one ack for
    // the other's window, nothing else.
    for (name, t) in [("nsff1", &t1), ("nsff2", &t2)] {
        assert_eq!(
            (t.data_out, t.acks_out, t.nacks_out),
            (2 * N, N, 0),
            "{name}: {t:?}"
        );
        assert_eq!(t.retransmits + t.rto_retransmits, 0, "{name}: {t:?}");
    }
    assert_eq!(frames(&t1) + frames(&t2), 6 * N);
}

/// At 10 % loss (seed 2) one response's end marker is lost after its data
/// arrived: nSFF1 answers the client by the response's own framing, takes
/// the next request, and still reads the transaction to its end so that it
/// closes (every request verified by the client).
#[test]
fn a_response_complete_by_its_framing_does_not_wait_for_its_end_marker() {
    let mut w = world(2, 0.10);
    let r = job(&mut w, REMOTE);
    assert_eq!(r["ok"], 20, "{r:#}");
    let n1 = w.sim.node(w.nsff1);
    assert!(n1.stats().get("nsff.responses_before_end") >= 1);
    assert_eq!(n1.stats().get("nsff.responses_remote"), 20);
    assert_eq!(n1.stats().get("nsff.bytes_after_response"), 0);
    // Detached or not, every transaction completed at both ends.
    let e1 = n1.role().endpoint().stats();
    let e2 = w.sim.node(w.nsff2).role().endpoint().stats();
    assert_eq!((e1.completed, e1.failed), (20, 0));
    assert_eq!((e2.completed, e2.failed), (20, 0));
    assert_eq!(n1.role().endpoint().active(), 0);
}

#[test]
fn local_name_goes_to_the_local_sf() {
    let mut w = world(3, 0.0);
    let r = job(
        &mut w,
        "get http://NSFF1/bytes/2000 --requests 5 --verify --host www.example.com:80",
    );
    assert_eq!(r["ok"], 5, "{r:#}");
    assert_eq!(r["first_response"]["headers"]["x-instance"], "sf1", "{r:#}");
    assert_eq!(w.sim.node(w.nsff1).stats().get("nsff.responses_local"), 5);
    assert_eq!(w.sim.node(w.sfs[0]).stats().get("http.requests"), 5);
    assert_eq!(w.sim.node(w.sfs[1]).stats().get("http.requests"), 0);
}

#[test]
fn unknown_name_gets_502() {
    let mut w = world(4, 0.0);
    let r = job(
        &mut w,
        "get http://NSFF1/ --requests 3 --host www.nowhere.example",
    );
    assert_eq!(r["status"]["502"], 3, "{r:#}");
    assert_eq!(w.sim.node(w.nsff1).stats().get("nsff.unknown_name"), 3);
}

#[test]
fn same_seed_same_trace() {
    let (a, ha, _) = remote_chain(9, 0.10);
    let (b, hb, _) = remote_chain(9, 0.10);
    assert_eq!(ha, hb);
    assert_eq!(a, b);
    let (_, hc, _) = remote_chain(10, 0.10);
    assert_ne!(ha, hc);
}

#[test]
fn thirty_percent_loss_small_and_large() {
    let mut w = world(11, 0.30);
    let r = job(
        &mut w,
        "get http://NSFF1/bytes/200000 --requests 6 --concurrency 3 --verify \
         --host www.example2.com --timeout-ms 3000000",
    );
    assert_eq!(r["ok"], 6, "{r:#}");
    assert_eq!(r["body_bytes"], 6 * 200_000, "{r:#}");
    let t = w.sim.node(w.nsff2).role().endpoint().totals();
    assert!(t.retransmits > 0, "NACK retransmissions at 30% loss");
}

#[test]
fn path_update_flushes_and_the_next_request_resolves_again() {
    let mut w = world(12, 0.0);
    let one = "get http://NSFF1/ --requests 2 --host www.example2.com";
    let r = job(&mut w, one);
    assert_eq!(r["ok"], 2, "{r:#}");
    let sent = |w: &World| w.sim.node(w.nsff1).stats().get("nsff.path_requests_sent");
    assert_eq!(sent(&w), 1, "one resolution, then cache hits");
    let regs = w.sim.node(w.nsff2).stats().get("nsff.registrations_sent");
    // ALL NODES: every nSFF flushes its cache and registers again.
    let now = w.sim.now();
    let nr = w.nr;
    let v = w
        .sim
        .node_mut(nr)
        .control(now, 9, &["purge-all".to_owned()]);
    assert!(v.is_some());
    let r = job(&mut w, one);
    assert_eq!(r["ok"], 2, "{r:#}");
    assert_eq!(sent(&w), 2, "resolved again after the flush");
    assert!(w.sim.node(w.nsff2).stats().get("nsff.registrations_sent") > regs);
    assert!(w.sim.node(w.nsff1).stats().get("nsff.path_updates") >= 2);
}

#[test]
fn prepopulated_path_needs_no_resolution() {
    let mut w = world_with(
        13,
        0.0,
        vec![StaticRoute {
            fqdn: "www.example2.com".into(),
            forward_links: vec![3, 10, 4],
            reverse_links: vec![5, 11, 2],
            serving: 2,
        }],
    );
    let r = job(
        &mut w,
        "get http://NSFF1/bytes/5000 --requests 3 --verify --host www.example2.com",
    );
    assert_eq!(r["ok"], 3, "{r:#}");
    assert_eq!(
        w.sim.node(w.nsff1).stats().get("nsff.path_requests_sent"),
        0
    );
}

#[test]
fn ten_megabyte_get_and_post_at_10_percent_loss() {
    let mut w = world(14, 0.10);
    let r = job(
        &mut w,
        "get http://NSFF1/bytes/10485760 --verify --host www.example2.com --timeout-ms 3000000",
    );
    assert_eq!(r["ok"], 1, "{r:#}");
    assert_eq!(r["body_bytes"], 10_485_760, "{r:#}");
    let r = job(
        &mut w,
        "post http://NSFF1/echo --body-size 10485760 --host www.example2.com --timeout-ms 3000000",
    );
    assert_eq!(r["ok"], 1, "{r:#}");
    assert_eq!(r["status"]["200"], 1, "{r:#}");
    eprintln!("10 MB: {r:#}");
}

/// The proxy streams bodies: one over the HTTP decoders' default 16 MiB
/// cap passes (it used to end in a 502 from nSFF2).
#[test]
fn a_body_over_sixteen_mebibytes_streams_through() {
    let mut w = world(16, 0.0);
    let r = job(
        &mut w,
        "get http://NSFF1/bytes/17000000 --verify --host www.example2.com --timeout-ms 3000000",
    );
    assert_eq!(r["ok"], 1, "{r:#}");
    assert_eq!(r["body_bytes"], 17_000_000, "{r:#}");
}

#[test]
fn a_hundred_concurrent_requests_each_get_their_own_response() {
    let mut w = world(15, 0.0);
    let r = job(
        &mut w,
        "get http://NSFF1/bytes/5000 --requests 300 --concurrency 100 --verify \
         --host www.example2.com --timeout-ms 300000",
    );
    assert_eq!(r["ok"], 300, "{r:#}");
    assert_eq!(r["body_bytes"], 300 * 5000, "{r:#}");
}

#[test]
fn sf_down_deregisters_and_the_name_is_served_elsewhere() {
    let mut w = world(16, 0.0);
    let one = "get http://NSFF1/ --requests 1 --host www.example.com --timeout-ms 60000";
    let r = job(&mut w, one);
    assert_eq!(r["first_response"]["headers"]["x-instance"], "sf1", "{r:#}");
    // SF1 dies (cut off from nSFF1).
    let (a, b) = w.sf1_cut;
    w.sim.partition(&[a], &[b]);
    w.sim.run_for(Duration::from_secs(8)).unwrap();
    let n1 = w.sim.node(w.nsff1).stats();
    assert_eq!(n1.get("nsff.sf_down"), 1);
    assert_eq!(n1.get("nsff.deregistrations_sent"), 1);
    // The next request is resolved at the NR: nSFF2's instance answers.
    let r = job(&mut w, one);
    assert_eq!(r["ok"], 1, "{r:#}");
    assert_eq!(r["first_response"]["headers"]["x-instance"], "sf2", "{r:#}");
}

#[test]
fn an_sf_that_went_down_and_restarted_gets_fresh_connections() {
    // Quick health checks: SF1 is down and up again while nSFF1 would still
    // keep an idle connection to it.
    let mut w = world_tuned(18, 0.0, Vec::new(), |c| {
        c.health_interval_ms = 200;
        c.health_timeout_ms = 200;
    });
    let one = "get http://NSFF1/ --requests 1 --host www.example.com --timeout-ms 60000";
    let r = job_then(&mut w, one, Duration::from_millis(500));
    assert_eq!(r["first_response"]["headers"]["x-instance"], "sf1", "{r:#}");
    // nSFF1 keeps its connection to SF1 for the next request.
    assert_eq!(w.sim.node(w.nsff1).stats().get("nsff.sf_connections"), 1);
    // SF1 dies: cut off from everything, it never sends again.
    let (old, nsff1_port) = w.sf1_cut;
    w.sim.partition(&[old], &[nsff1_port, w.client_port]);
    w.sim
        .drive_bounded(Duration::from_secs(60), 10_000_000, |s| {
            s.node(w.nsff1).stats().get("nsff.sf_down") == 1
        })
        .unwrap();
    // SF1 restarts: a new process with the same addresses and no memory of
    // its connections, which announces itself (gratuitous ARP) on boot.
    let (cfg, mut link) = w.sim.port(w.client_seg, 3);
    w.sim.partition(&[old], &[link.port()]);
    let ip = sim::ipv4(w.client_seg.0 as u8, 3);
    link.send(&gratuitous_arp(cfg.mac, ip)).unwrap();
    let cfg = PortConfig {
        random_seed: Some(0x5eed),
        ..cfg
    };
    let host = HostConfig {
        instance: Some("sf1b".into()),
        ..HostConfig::default()
    };
    let sf1b = w
        .sim
        .add_role("sf1b", vec![(cfg, link)], Host::new("sf1b", host).unwrap());
    w.sim
        .drive_bounded(Duration::from_secs(60), 10_000_000, |s| {
            s.node(w.nsff1).stats().get("nsff.sf_up") == 1
        })
        .unwrap();
    // Requests are local again and reach the new process: none goes over a
    // connection of the old one (the new one would reset it: 502).
    let r = job(
        &mut w,
        "get http://NSFF1/ --requests 3 --host www.example.com --timeout-ms 60000",
    );
    let n1 = w.sim.node(w.nsff1).stats();
    assert_eq!(r["ok"], 3, "{r:#}\n{n1:?}");
    assert_eq!(
        r["first_response"]["headers"]["x-instance"], "sf1b",
        "{r:#}"
    );
    assert_eq!(n1.get("nsff.sf_closed_early"), 0, "{n1:?}");
    assert_eq!(n1.get("nsff.sf_idle_dropped"), 1, "{n1:?}");
    assert_eq!(w.sim.node(sf1b).stats().get("http.requests"), 3);
}

fn two() -> NsffId {
    NsffId::new(2).unwrap()
}

/// A gratuitous ARP request from `mac` for `ip` (what a booting host sends).
fn gratuitous_arp(mac: EthernetAddress, ip: Ipv4Address) -> Vec<u8> {
    let arp = ArpRepr::EthernetIpv4 {
        operation: ArpOperation::Request,
        source_hardware_addr: mac,
        source_protocol_addr: ip,
        target_hardware_addr: EthernetAddress([0; 6]),
        target_protocol_addr: ip,
    };
    let eth = EthernetRepr {
        src_addr: mac,
        dst_addr: EthernetAddress::BROADCAST,
        ethertype: EthernetProtocol::Arp,
    };
    let mut buf = vec![0; eth.buffer_len() + arp.buffer_len()];
    let mut frame = EthernetFrame::new_unchecked(&mut buf);
    eth.emit(&mut frame);
    arp.emit(&mut ArpPacket::new_unchecked(frame.payload_mut()));
    buf
}

#[test]
fn registrations_lost_at_start_are_sent_again_soon() {
    let mut w = world(19, 0.0);
    // nSFF2 starts before its switch can forward anything: its first
    // registrations (and the NR's ALL NODES on start) are lost.
    let (a, b) = w.n2_cut;
    let cut = w.sim.partition(&[a], &[b]);
    w.sim.run_for(Duration::from_millis(500)).unwrap();
    let nr = w.nr;
    // nSFF2 serves www.example2.com and www.example.com (with nSFF1).
    let nsff2_names = |s: &Sim| {
        let names = s.node(nr).role().core().names();
        names.values().filter(|e| e.nsffs.contains(&two())).count()
    };
    assert_eq!(nsff2_names(&w.sim), 0);
    assert!(w.sim.node(w.nsff2).stats().get("nsff.registrations_sent") >= 2);
    // The switch is up: well before the 30 s refresh, the NR knows nSFF2's
    // names and the chain serves them.
    w.sim.heal(cut);
    w.sim
        .drive_bounded(Duration::from_secs(10), 10_000_000, |s| nsff2_names(s) == 2)
        .unwrap();
    let r = job(
        &mut w,
        "get http://NSFF1/ --requests 1 --host www.example2.com",
    );
    assert_eq!(r["ok"], 1, "{r:#}");
}

#[test]
fn a_restarted_nr_learns_the_names_again_from_periodic_registrations() {
    let mut w = world(17, 0.0);
    let one = "get http://NSFF1/ --requests 1 --host www.example2.com";
    let r = job(&mut w, one);
    assert_eq!(r["ok"], 1, "{r:#}");
    // The NR loses its tables (a restart that announced nothing).
    let nr = w.nr;
    *w.sim.node_mut(nr).role_mut() = Nr::new(nr_config()).unwrap();
    assert!(w.sim.node(nr).role().core().names().is_empty());
    w.sim.run_for(Duration::from_secs(31)).unwrap();
    // Both names are back (registration refresh every 30 s).
    assert_eq!(w.sim.node(nr).role().core().names().len(), 2);
    // Traffic goes on.
    let r = job(&mut w, one);
    assert_eq!(r["ok"], 1, "{r:#}");
}

/// RFC 8677 §5.3: nSFF1 keeps its connection to SF1 between requests
/// with TCP keep-alives, past the 30 s it used to close it at, and the
/// next request reuses it (health probes off: only keep-alives talk).
/// 45 s: SF1, a smoltcp host, ends a connection 60 s after the last
/// segment inside its window, and keep-alives are outside it by design.
#[test]
fn an_idle_sf_connection_is_kept_by_keepalives_and_reused() {
    let mut w = world_tuned(21, 0.0, Vec::new(), |c| c.health_interval_ms = 0);
    let one = "get http://NSFF1/ --requests 1 --host www.example.com --timeout-ms 60000";
    let r = job(&mut w, one);
    assert_eq!(r["first_response"]["headers"]["x-instance"], "sf1", "{r:#}");
    w.sim.run_for(Duration::from_secs(45)).unwrap();
    let r = job(&mut w, one);
    assert_eq!(r["ok"], 1, "{r:#}");
    let n1 = w.sim.node(w.nsff1).stats();
    assert_eq!(
        (n1.get("nsff.sf_connections"), n1.get("nsff.sf_reused")),
        (1, 1),
        "{n1:?}"
    );
    assert_eq!(n1.get("nsff.sf_idle_lost"), 0, "{n1:?}");
}

/// An SF that vanishes while nSFF1 holds an idle connection to it: the
/// unanswered keep-alives lose the connection within three intervals,
/// long before `sf_idle_timeout_s`.
#[test]
fn keepalives_find_an_sf_that_vanished() {
    let mut w = world_tuned(22, 0.0, Vec::new(), |c| c.health_interval_ms = 0);
    let one = "get http://NSFF1/ --requests 1 --host www.example.com --timeout-ms 60000";
    let r = job(&mut w, one);
    assert_eq!(r["ok"], 1, "{r:#}");
    let (a, b) = w.sf1_cut;
    w.sim.partition(&[a], &[b]);
    w.sim.run_for(Duration::from_secs(60)).unwrap();
    let n1 = w.sim.node(w.nsff1).stats();
    assert_eq!(n1.get("nsff.sf_idle_lost"), 1, "{n1:?}");
    assert_eq!(n1.get("nsff.sf_idle_expired"), 0, "{n1:?}");
}
