//! `svcroute slp` against a fake DA on 127.0.0.1: the fake decodes every
//! request with `wire::slp`, asserts it is exactly the expected message and
//! answers; the test checks the CLI's output (text and `--json`) and exit
//! status. No root needed; every wait is bounded.

use std::io::{Read as _, Write as _};
use std::net::{TcpListener, UdpSocket};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::Value;
use svcroute_stack::wire::slp::{
    frame_len, AttrList, AttrRply, Body, DaAdvert, ErrorCode, Extension, FunctionId, FwdId, Header,
    Message, NamingAuthority, Predicate, ScopeList, ServiceType, ServiceTypeList, SlpString,
    SrvAck, SrvRply, SrvTypeRply, TagList, UrlEntry,
};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Via {
    Udp,
    Tcp,
}

type Log = Arc<Mutex<Vec<(Via, Message)>>>;

/// A DA on 127.0.0.1:PORT, UDP and TCP, answering with what `handler`
/// returns (raw datagrams/frames, so a test can send anything).
struct FakeDa {
    port: u16,
    log: Log,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

type Handler = dyn FnMut(Via, &Message) -> Vec<Vec<u8>> + Send;

impl FakeDa {
    fn start(handler: impl FnMut(Via, &Message) -> Vec<Vec<u8>> + Send + 'static) -> Self {
        // The same port number for UDP and TCP, like a DA on 427.
        let (udp, tcp) = (0..100)
            .find_map(|_| {
                let u = UdpSocket::bind("127.0.0.1:0").ok()?;
                let port = u.local_addr().ok()?.port();
                let t = TcpListener::bind(("127.0.0.1", port)).ok()?;
                Some((u, t))
            })
            .expect("a free port for UDP and TCP");
        let port = udp.local_addr().unwrap().port();
        let log: Log = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let handler: Arc<Mutex<Box<Handler>>> = Arc::new(Mutex::new(Box::new(handler)));
        udp.set_read_timeout(Some(Duration::from_millis(20)))
            .unwrap();
        tcp.set_nonblocking(true).unwrap();
        let u = {
            let (log, stop, handler) = (log.clone(), stop.clone(), handler.clone());
            std::thread::spawn(move || {
                let mut buf = vec![0_u8; 65_535];
                while !stop.load(Ordering::Relaxed) {
                    let Ok((n, from)) = udp.recv_from(&mut buf) else {
                        continue;
                    };
                    let m = Message::parse(&buf[..n]).expect("the client sends valid SLP");
                    log.lock().unwrap().push((Via::Udp, m.clone()));
                    for out in (handler.lock().unwrap())(Via::Udp, &m) {
                        udp.send_to(&out, from).unwrap();
                    }
                }
            })
        };
        let t = {
            let (log, stop) = (log.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let Ok((mut s, _)) = tcp.accept() else {
                        std::thread::sleep(Duration::from_millis(10));
                        continue;
                    };
                    s.set_nonblocking(false).unwrap();
                    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
                    let mut head = [0_u8; 5];
                    s.read_exact(&mut head).unwrap();
                    let mut frame = vec![0_u8; frame_len(&head).unwrap()];
                    frame[..5].copy_from_slice(&head);
                    s.read_exact(&mut frame[5..]).unwrap();
                    let m = Message::parse(&frame).expect("the client sends valid SLP");
                    log.lock().unwrap().push((Via::Tcp, m.clone()));
                    for out in (handler.lock().unwrap())(Via::Tcp, &m) {
                        s.write_all(&out).unwrap();
                    }
                }
            })
        };
        Self {
            port,
            log,
            stop,
            threads: vec![u, t],
        }
    }

    fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Stops the DA; what it received, in order.
    fn finish(mut self) -> Vec<(Via, Message)> {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            t.join().expect("fake DA thread");
        }
        std::mem::take(&mut *self.log.lock().unwrap())
    }
}

/// A reply to `req` (same XID and language).
fn reply(req: &Message, body: Body) -> Vec<u8> {
    Message::new(
        Header::new(req.header().xid, req.header().lang.clone()),
        body,
        vec![],
    )
    .unwrap()
    .to_bytes()
}

fn reply_overflow(req: &Message, body: Body) -> Vec<u8> {
    let mut h = Header::new(req.header().xid, req.header().lang.clone());
    h.flags.overflow = true;
    Message::new(h, body, vec![]).unwrap().to_bytes()
}

fn ack(req: &Message, error: ErrorCode) -> Vec<u8> {
    reply(req, Body::SrvAck(SrvAck { error }))
}

fn s(v: &str) -> SlpString {
    SlpString::new(v).unwrap()
}

fn scopes(v: &str) -> ScopeList {
    ScopeList::parse(v).unwrap()
}

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
    elapsed: Duration,
}

impl Run {
    fn json(&self) -> Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| panic!("{e}: {}", self.stdout))
    }
}

#[track_caller]
#[allow(clippy::disallowed_methods)] // tests drive a real process in real time
fn slp(args: &[&str]) -> Run {
    let start = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_svcroute"))
        .arg("slp")
        .args(args)
        .env("RUST_LOG", "warn")
        .output()
        .expect("run svcroute");
    let run = Run {
        code: out.status.code().expect("exit status"),
        stdout: String::from_utf8(out.stdout).unwrap(),
        stderr: String::from_utf8(out.stderr).unwrap(),
        elapsed: start.elapsed(),
    };
    eprintln!(
        "svcroute slp {args:?} -> {}\nstdout:\n{}stderr:\n{}",
        run.code, run.stdout, run.stderr
    );
    run
}

/// Fast timing for every run.
const FAST: [&str; 4] = ["--retry-ms", "200", "--timeout-ms", "3000"];

fn args<'a>(da: &'a str, rest: &[&'a str]) -> Vec<&'a str> {
    let mut v = vec!["--da", da];
    v.extend_from_slice(&FAST);
    v.extend_from_slice(rest);
    v
}

const URL: &str = "service:printer:lpr://p.example:515/queue1";

#[test]
fn register_sends_exactly_the_srvreg_and_prints_the_ack() {
    let da = FakeDa::start(|_, m| vec![ack(m, ErrorCode::Ok)]);
    let addr = da.addr();
    let run = slp(&args(
        &addr,
        &[
            "register",
            URL,
            "--lifetime",
            "3600",
            "--attrs",
            "(a=1),(b=x,y),color",
            "--scopes",
            "eng,ops",
            "--lang",
            "de",
            "--xid",
            "4242",
        ],
    ));
    let got = da.finish();
    assert_eq!(run.code, 0);
    assert_eq!(
        run.stdout,
        format!("registered {URL} at {addr} (scopes eng,ops, lifetime 3600 s)\n")
    );
    assert_eq!(got.len(), 1, "one SrvReg, no retransmission");
    let (via, m) = &got[0];
    assert_eq!(*via, Via::Udp);
    assert_eq!(m.header().xid, 4242);
    assert_eq!(m.header().lang.as_str(), "de");
    assert!(m.header().flags.fresh, "fresh by default");
    assert!(!m.header().flags.mcast);
    assert!(m.extensions().is_empty(), "no MeshFwd unless asked");
    let Body::SrvReg(r) = m.body() else {
        panic!("want SrvReg, got {m:?}")
    };
    assert_eq!(r.entry, UrlEntry::new(3600, s(URL)));
    assert_eq!(
        r.service_type,
        ServiceType::parse("service:printer:lpr").unwrap()
    );
    assert_eq!(r.scopes, scopes("eng,ops"));
    assert_eq!(r.attrs, AttrList::parse("(a=1),(b=x,y),color").unwrap());
    assert!(r.attr_auths.is_empty());
}

#[test]
fn register_mesh_fwd_json() {
    let da = FakeDa::start(|_, m| vec![ack(m, ErrorCode::Ok)]);
    let addr = da.addr();
    let before = micros_since_1900();
    let run = slp(&args(
        &addr,
        &[
            "register",
            URL,
            "--type",
            "service:printer",
            "--mesh-fwd",
            "--json",
        ],
    ));
    let after = micros_since_1900();
    let got = da.finish();
    assert_eq!(run.code, 0);
    let (_, m) = &got[0];
    let Body::SrvReg(r) = m.body() else {
        panic!("want SrvReg")
    };
    assert_eq!(r.service_type.as_str(), "service:printer");
    assert_eq!(r.entry.lifetime, 10_800, "default lifetime");
    assert_eq!(r.scopes, ScopeList::default_scope());
    assert!(m.header().flags.fresh);
    let [Extension::MeshFwd(f)] = m.extensions() else {
        panic!("want exactly one MeshFwd, got {:?}", m.extensions())
    };
    assert_eq!(f.fwd, FwdId::RqstFwd);
    assert!(
        (before..=after).contains(&f.version),
        "version timestamp {} is now in µs since 1900 ({before}..{after})",
        f.version
    );
    assert_eq!(f.accept.timestamp, 0, "RqstFwd: accept timestamp 0");
    assert!(f.accept.da_url.is_empty());
    let j = run.json();
    assert_eq!(j["command"], "register");
    assert_eq!(j["url"], URL);
    assert_eq!(j["mesh_fwd"]["version_timestamp"], f.version);
    assert_eq!(j["results"][0]["agent"], addr);
    assert_eq!(j["results"][0]["error"], "OK");
    assert_eq!(j["results"][0]["error_code"], 0);
    assert_eq!(j["results"][0]["transport"], "udp");
    assert_eq!(j["results"][0]["xid"], m.header().xid);

    // An explicit version timestamp goes out as given.
    let da = FakeDa::start(|_, m| vec![ack(m, ErrorCode::Ok)]);
    let run = slp(&args(
        &da.addr(),
        &["register", URL, "--mesh-fwd", "--version-ts", "1234567"],
    ));
    assert_eq!(run.code, 0);
    assert_eq!(da.finish()[0].1.mesh_fwd().unwrap().version, 1_234_567);
}

#[allow(clippy::disallowed_methods)] // compared with the CLI's wall-clock version timestamp
fn micros_since_1900() -> u64 {
    let d = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    u64::try_from(d.as_micros()).unwrap() + 2_208_988_800 * 1_000_000
}

#[test]
fn srvack_error_code_is_named_with_nonzero_exit() {
    let da = FakeDa::start(|_, m| vec![ack(m, ErrorCode::ScopeNotSupported)]);
    let addr = da.addr();
    let run = slp(&args(&addr, &["register", URL, "--scopes", "nope"]));
    assert_eq!(run.code, 4);
    assert!(run.stdout.is_empty());
    assert!(
        run.stderr.contains(&format!(
            "{addr} refused the registration of {URL}: SCOPE_NOT_SUPPORTED (4)"
        )),
        "{}",
        run.stderr
    );
    let run = slp(&args(&addr, &["register", URL, "--json"]));
    assert_eq!(run.code, 4);
    let j = run.json();
    assert_eq!(j["results"][0]["error"], "SCOPE_NOT_SUPPORTED");
    assert_eq!(j["results"][0]["error_code"], 4);
    assert_eq!(da.finish().len(), 2);
}

#[test]
fn incremental_registration_clears_fresh() {
    let da = FakeDa::start(|_, m| vec![ack(m, ErrorCode::Ok)]);
    let run = slp(&args(
        &da.addr(),
        &["register", URL, "--incremental", "--attrs", "(c=30)"],
    ));
    assert_eq!(run.code, 0);
    let got = da.finish();
    assert!(!got[0].1.header().flags.fresh);
    // MeshFwd only with fresh registrations (RFC 3528 §4.3): refused before sending.
    let run = slp(&args(
        "127.0.0.1:9",
        &["register", URL, "--incremental", "--mesh-fwd"],
    ));
    assert_eq!(run.code, 2);
    assert!(run.stderr.contains("--mesh-fwd"), "{}", run.stderr);
}

#[test]
fn deregister_whole_and_by_tags() {
    let da = FakeDa::start(|_, m| vec![ack(m, ErrorCode::Ok)]);
    let addr = da.addr();
    let run = slp(&args(
        &addr,
        &["deregister", URL, "--mesh-fwd", "--scopes", "x"],
    ));
    assert_eq!(run.code, 0);
    assert_eq!(
        run.stdout,
        format!("deregistered {URL} at {addr} (scopes x)\n")
    );
    let run = slp(&args(
        &addr,
        &["deregister", URL, "--tags", "b,c*", "--json"],
    ));
    assert_eq!(run.code, 0);
    assert_eq!(run.json()["results"][0]["error"], "OK");
    let got = da.finish();
    assert_eq!(got.len(), 2);
    let Body::SrvDeReg(d) = got[0].1.body() else {
        panic!("want SrvDeReg")
    };
    assert_eq!(d.entry.url.as_str(), URL);
    assert_eq!(d.scopes, scopes("x"));
    assert!(d.tags.is_empty());
    assert_eq!(got[0].1.mesh_fwd().unwrap().fwd, FwdId::RqstFwd);
    let Body::SrvDeReg(d) = got[1].1.body() else {
        panic!("want SrvDeReg")
    };
    assert_eq!(d.tags, TagList::parse("b,c*").unwrap());
    assert!(got[1].1.extensions().is_empty());
    // A partial deregistration cannot carry MeshFwd.
    let run = slp(&args(
        &addr,
        &["deregister", URL, "--tags", "b", "--mesh-fwd"],
    ));
    assert_eq!(run.code, 2);
}

fn srv_rply(urls: &[(&str, u16)]) -> Body {
    Body::SrvRply(SrvRply {
        error: ErrorCode::Ok,
        entries: urls
            .iter()
            .map(|(u, l)| UrlEntry::new(*l, s(u)))
            .collect::<Vec<_>>()
            .try_into()
            .unwrap(),
    })
}

#[test]
fn find_prints_url_entries() {
    let da = FakeDa::start(|_, m| {
        let mut wrong = m.clone().into_parts().0;
        wrong.xid = wrong.xid.wrapping_add(1);
        vec![
            // Another transaction's reply first: ignored.
            Message::new(wrong, srv_rply(&[("service:bogus://x", 1)]), vec![])
                .unwrap()
                .to_bytes(),
            reply(
                m,
                srv_rply(&[
                    ("service:printer:lpr://a", 3600),
                    ("service:printer:ipp://b", 60),
                ]),
            ),
        ]
    });
    let addr = da.addr();
    let run = slp(&args(
        &addr,
        &[
            "find",
            "service:printer",
            "--predicate",
            "(&(a=1)(b=x*))",
            "--scopes",
            "eng",
        ],
    ));
    assert_eq!(run.code, 0);
    assert_eq!(
        run.stdout,
        "service:printer:lpr://a,3600\nservice:printer:ipp://b,60\n"
    );
    let run = slp(&args(&addr, &["find", "service:printer", "--json"]));
    assert_eq!(run.code, 0);
    let j = run.json();
    assert_eq!(j["entries"][0]["url"], "service:printer:lpr://a");
    assert_eq!(j["entries"][0]["lifetime"], 3600);
    assert_eq!(j["entries"][1]["lifetime"], 60);
    assert_eq!(j["entries"][1]["from"], addr);
    assert_eq!(j["replies"][0]["error"], "OK");
    let got = da.finish();
    let Body::SrvRqst(r) = got[0].1.body() else {
        panic!("want SrvRqst")
    };
    assert_eq!(r.service_type.as_str(), "service:printer");
    assert_eq!(r.predicate, Predicate::parse("(&(a=1)(b=x*))").unwrap());
    assert_eq!(r.scopes, scopes("eng"));
    assert!(r.pr_list.is_empty(), "unicast: empty PRList");
    assert!(!got[0].1.header().flags.mcast);
    let Body::SrvRqst(r) = got[1].1.body() else {
        panic!("want SrvRqst")
    };
    assert_eq!(r.scopes, ScopeList::default_scope());
    assert!(r.predicate.filter().is_none());
}

#[test]
fn find_error_code_fails_naming_it() {
    let da = FakeDa::start(|_, m| {
        vec![reply(
            m,
            Body::SrvRply(SrvRply {
                error: ErrorCode::LanguageNotSupported,
                entries: Default::default(),
            }),
        )]
    });
    let run = slp(&args(&da.addr(), &["find", "service:x", "--lang", "fr"]));
    da.finish();
    assert_eq!(run.code, 4);
    assert!(
        run.stderr.contains("LANGUAGE_NOT_SUPPORTED (1)"),
        "{}",
        run.stderr
    );
}

#[test]
fn overflow_on_udp_is_retried_over_tcp() {
    let many: Vec<(String, u16)> = (0..40)
        .map(|i| (format!("service:x://host-{i:02}.example"), 100 + i))
        .collect();
    let many2 = many.clone();
    let da = FakeDa::start(move |via, m| {
        let refs: Vec<(&str, u16)> = many2.iter().map(|(u, l)| (u.as_str(), *l)).collect();
        match via {
            // "Truncated to fit", OVERFLOW set.
            Via::Udp => vec![reply_overflow(m, srv_rply(&refs[..1]))],
            Via::Tcp => vec![reply(m, srv_rply(&refs))],
        }
    });
    let run = slp(&args(&da.addr(), &["find", "service:x", "--json"]));
    let got = da.finish();
    assert_eq!(run.code, 0);
    assert_eq!(got.len(), 2);
    assert_eq!((got[0].0, got[1].0), (Via::Udp, Via::Tcp));
    assert_eq!(got[0].1, got[1].1, "the same request, same XID, over TCP");
    let j = run.json();
    assert_eq!(j["entries"].as_array().unwrap().len(), 40);
    assert_eq!(j["replies"][0]["transport"], "tcp");
    assert_eq!(j["replies"][0]["overflow"], true);
    assert_eq!(j["replies"][0]["truncated"], false);
}

#[test]
fn forced_tcp() {
    let da = FakeDa::start(|_, m| vec![ack(m, ErrorCode::Ok)]);
    let run = slp(&args(&da.addr(), &["register", URL, "--tcp"]));
    assert_eq!(run.code, 0);
    let got = da.finish();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].0, Via::Tcp);
}

#[test]
fn silent_da_times_out_after_retransmissions() {
    let da = FakeDa::start(|_, _| vec![]);
    let run = slp(&[
        "--da",
        &da.addr(),
        "--retry-ms",
        "100",
        "--timeout-ms",
        "700",
        "find",
        "service:x",
    ]);
    let got = da.finish();
    assert_eq!(run.code, 3);
    assert!(run.stderr.contains("no reply from"), "{}", run.stderr);
    assert!(run.elapsed < Duration::from_secs(5), "{:?}", run.elapsed);
    // Sent at 0, 100, 300 ms (doubling waits), then gave up at 700 ms.
    assert!((2..=4).contains(&got.len()), "{} transmissions", got.len());
    assert!(
        got.iter().all(|(_, m)| *m == got[0].1),
        "retransmissions are identical"
    );
}

#[test]
fn attrs_of_a_url() {
    let da = FakeDa::start(|_, m| {
        vec![reply(
            m,
            Body::AttrRply(AttrRply {
                error: ErrorCode::Ok,
                attrs: AttrList::parse("(a=1),(b=x,y),(c=true),(d=\\ff\\00\\01),kw").unwrap(),
                auths: Default::default(),
            }),
        )]
    });
    let addr = da.addr();
    let run = slp(&args(&addr, &["attrs", URL, "--tags", "a,b*"]));
    assert_eq!(run.code, 0);
    assert_eq!(run.stdout, "(a=1),(b=x,y),(c=true),(d=\\ff\\00\\01),kw\n");
    let run = slp(&args(&addr, &["attrs", "service:printer", "--json"]));
    assert_eq!(run.code, 0);
    let j = run.json();
    let attrs = &j["lists"][0]["attributes"];
    assert_eq!(attrs[0]["tag"], "a");
    assert_eq!(attrs[0]["values"][0], 1);
    assert_eq!(attrs[1]["values"][1], "y");
    assert_eq!(attrs[2]["values"][0], true);
    assert_eq!(attrs[3]["values"][0]["opaque"], "0001");
    assert_eq!(attrs[4]["tag"], "kw");
    let got = da.finish();
    let Body::AttrRqst(r) = got[0].1.body() else {
        panic!("want AttrRqst")
    };
    assert_eq!(r.url.as_str(), URL);
    assert_eq!(r.tags, TagList::parse("a,b*").unwrap());
    let Body::AttrRqst(r) = got[1].1.body() else {
        panic!("want AttrRqst")
    };
    assert_eq!(r.url.as_str(), "service:printer");
    assert!(r.tags.is_empty());
}

#[test]
fn types_with_naming_authority() {
    let da = FakeDa::start(|_, m| {
        vec![reply(
            m,
            Body::SrvTypeRply(SrvTypeRply {
                error: ErrorCode::Ok,
                types: ServiceTypeList::parse("service:printer,service:x.acme").unwrap(),
            }),
        )]
    });
    let addr = da.addr();
    let run = slp(&args(&addr, &["types", "--na", "*"]));
    assert_eq!(run.code, 0);
    assert_eq!(run.stdout, "service:printer\nservice:x.acme\n");
    let run = slp(&args(&addr, &["types", "--json", "--scopes", "a"]));
    assert_eq!(run.json()["types"][1], "service:x.acme");
    let run = slp(&args(&addr, &["types", "--na", "acme"]));
    assert_eq!(run.code, 0);
    let got = da.finish();
    let na = |i: usize| match got[i].1.body() {
        Body::SrvTypeRqst(r) => r.naming_authority.clone(),
        b => panic!("want SrvTypeRqst, got {b:?}"),
    };
    assert_eq!(na(0), NamingAuthority::All);
    assert_eq!(na(1), NamingAuthority::Iana);
    assert!(matches!(na(2), NamingAuthority::Named(n) if n.as_str() == "acme"));
}

fn da_advert(url: &str, scopes_: &str, attrs: &str, boot: u32) -> Body {
    Body::DaAdvert(DaAdvert {
        error: ErrorCode::Ok,
        boot_timestamp: boot,
        url: s(url),
        scopes: scopes(scopes_),
        attrs: AttrList::parse(attrs).unwrap(),
        spi_list: SlpString::default(),
        auths: Default::default(),
    })
}

#[test]
fn das_unicast() {
    let da = FakeDa::start(|_, m| {
        vec![reply(
            m,
            da_advert(
                "service:directory-agent://127.0.0.1",
                "x,y",
                "mesh-enhanced,(min-refresh-interval=5)",
                1_700_000_000,
            ),
        )]
    });
    let addr = da.addr();
    let run = slp(&args(&addr, &["das"]));
    assert_eq!(run.code, 0);
    assert_eq!(
        run.stdout,
        format!(
            "service:directory-agent://127.0.0.1 scopes=x,y boot=1700000000 (2023-11-14T22:13:20Z) \
             mesh-enhanced=yes from={addr} attrs=mesh-enhanced,(min-refresh-interval=5)\n"
        )
    );
    let run = slp(&args(&addr, &["das", "--json"]));
    let j = run.json();
    let d = &j["das"][0];
    assert_eq!(d["url"], "service:directory-agent://127.0.0.1");
    assert_eq!(d["scopes"], serde_json::json!(["x", "y"]));
    assert_eq!(d["mesh_enhanced"], true);
    assert_eq!(d["boot_timestamp"], 1_700_000_000);
    assert_eq!(d["going_down"], false);
    let got = da.finish();
    let Body::SrvRqst(r) = got[0].1.body() else {
        panic!("want SrvRqst")
    };
    assert_eq!(r.service_type, ServiceType::directory_agent());
    assert!(r.scopes.is_empty(), "das asks every DA by default");
}

/// A DA answering multicast DA discovery per RFC 2608 §6.3 (silent when its
/// address is in the PRList) and unicast requests.
fn convergent_da(da_scopes: &'static str) -> FakeDa {
    FakeDa::start(move |_, m| {
        let from_prlist = |pr: &SlpString| pr.split(',').any(|a| a.trim() == "127.0.0.1");
        match m.body() {
            Body::SrvRqst(r) if r.service_type == ServiceType::directory_agent() => {
                assert!(m.header().flags.mcast, "DA discovery is multicast");
                if from_prlist(&r.pr_list) {
                    return vec![];
                }
                vec![reply(
                    m,
                    da_advert("service:directory-agent://127.0.0.1", da_scopes, "", 7),
                )]
            }
            Body::SrvRqst(_) => {
                assert!(!m.header().flags.mcast, "DAs are asked by unicast");
                vec![reply(m, srv_rply(&[("service:x://found", 9)]))]
            }
            Body::SrvReg(_) => vec![ack(m, ErrorCode::Ok)],
            b => panic!("unexpected {b:?}"),
        }
    })
}

#[test]
fn multicast_convergence_stops_when_prlist_silences_everyone() {
    let da = convergent_da("x");
    let group = da.addr();
    let run = slp(&[
        "--multicast",
        "--group",
        &group,
        "--retry-ms",
        "100",
        "--timeout-ms",
        "5000",
        "das",
    ]);
    let got = da.finish();
    assert_eq!(run.code, 0);
    assert!(run
        .stdout
        .starts_with("service:directory-agent://127.0.0.1 scopes=x boot=7 "));
    assert_eq!(
        got.len(),
        2,
        "first request, then one with the PRList: {got:?}"
    );
    let pr = |i: usize| match got[i].1.body() {
        Body::SrvRqst(r) => r.pr_list.as_str().to_owned(),
        b => panic!("{b:?}"),
    };
    assert_eq!(pr(0), "");
    assert_eq!(pr(1), "127.0.0.1");
    assert_eq!(got[0].1.header().xid, got[1].1.header().xid, "same XID");
    assert!(run.elapsed < Duration::from_secs(3), "{:?}", run.elapsed);
}

#[test]
fn multicast_find_uses_the_discovered_da() {
    let da = convergent_da("DEFAULT");
    let group = da.addr();
    let run = slp(&[
        "--multicast",
        "--group",
        &group,
        "--retry-ms",
        "100",
        "find",
        "service:x",
    ]);
    let got = da.finish();
    assert_eq!(run.code, 0);
    assert_eq!(run.stdout, "service:x://found,9\n");
    assert_eq!(got.len(), 3);
    let Body::SrvRqst(r) = got[2].1.body() else {
        panic!("want SrvRqst")
    };
    assert_eq!(r.service_type.as_str(), "service:x");
    assert!(r.pr_list.is_empty());
}

#[test]
fn multicast_register_uses_the_scopes_the_da_supports() {
    let da = convergent_da("b,c");
    let group = da.addr();
    let run = slp(&[
        "--multicast",
        "--group",
        &group,
        "--retry-ms",
        "100",
        "--scopes",
        "a,b",
        "register",
        URL,
        "--mesh-fwd",
    ]);
    let got = da.finish();
    assert_eq!(run.code, 0);
    let Body::SrvRqst(r) = got[0].1.body() else {
        panic!("want SrvRqst")
    };
    assert_eq!(r.scopes, scopes("a,b"), "discovery asks for our scopes");
    let (via, m) = got.last().unwrap();
    assert_eq!(*via, Via::Udp);
    let Body::SrvReg(r) = m.body() else {
        panic!("want SrvReg, got {m:?}")
    };
    assert_eq!(
        r.scopes,
        scopes("b"),
        "RFC 2608 §8.3: our scopes the DA supports"
    );
    assert!(m.mesh_fwd().is_some());
    assert_eq!(m.function(), FunctionId::SrvReg);
}

#[test]
fn multicast_without_any_responder_is_no_reply() {
    let da = FakeDa::start(|_, _| vec![]);
    let group = da.addr();
    let run = slp(&[
        "--multicast",
        "--group",
        &group,
        "--retry-ms",
        "100",
        "--timeout-ms",
        "500",
        "--json",
        "find",
        "service:x",
    ]);
    let got = da.finish();
    assert_eq!(run.code, 3);
    assert!(
        run.stderr.contains("no DA or SA answered"),
        "{}",
        run.stderr
    );
    assert_eq!(run.json()["entries"], serde_json::json!([]));
    // DA discovery first (SVRLOC-DA), then the SAs, both retransmitted.
    let types: Vec<String> = got
        .iter()
        .map(|(_, m)| match m.body() {
            Body::SrvRqst(r) => r.service_type.as_str().to_owned(),
            b => panic!("{b:?}"),
        })
        .collect();
    assert!(types.len() >= 4, "{types:?}");
    assert_eq!(types[0], "service:directory-agent");
    assert_eq!(types.last().unwrap(), "service:x");
    assert!(got.iter().all(|(_, m)| m.header().flags.mcast));
}

#[test]
fn registration_must_succeed_at_every_da() {
    let ok = FakeDa::start(|_, m| vec![ack(m, ErrorCode::Ok)]);
    let busy = FakeDa::start(|_, m| vec![ack(m, ErrorCode::DaBusyNow)]);
    let (a, b) = (ok.addr(), busy.addr());
    let run = slp(&["--da", &a, "--da", &b, "register", URL, "--lifetime", "60"]);
    assert_eq!(run.code, 4);
    assert!(run.stdout.contains(&format!("registered {URL} at {a}")));
    assert!(run.stderr.contains("DA_BUSY_NOW (11)"), "{}", run.stderr);
    assert_eq!(ok.finish().len(), 1);
    assert_eq!(busy.finish().len(), 1);
}

#[test]
fn bad_input_is_refused_before_sending() {
    let da = FakeDa::start(|_, m| vec![ack(m, ErrorCode::Ok)]);
    let addr = da.addr();
    for (rest, want) in [
        (vec!["register", "not a url"], "bad URL 'not a url'"),
        (vec!["register", "nourl"], "bad URL 'nourl'"),
        (
            vec!["register", URL, "--attrs", "(a=1"],
            "bad attribute list '(a=1'",
        ),
        (
            vec!["register", URL, "--attrs", "(a=1,x)"],
            "mixes value types",
        ),
        (vec!["register", URL, "--lifetime", "0"], "--lifetime"),
        (
            vec!["register", URL, "--scopes", "a,,b"],
            "bad scope list 'a,,b'",
        ),
        (
            vec!["register", URL, "--lang", "english!"],
            "bad language tag",
        ),
        (
            vec!["find", "service:x", "--predicate", "(a=1"],
            "bad predicate '(a=1'",
        ),
        (vec!["find", "bad type"], "bad service type 'bad type'"),
        (vec!["attrs", URL, "--tags", "a,,b"], "bad tag list"),
        (vec!["types", "--na", "a,b"], "bad naming authority"),
        (vec!["deregister", "x"], "bad URL 'x'"),
    ] {
        let run = slp(&args(&addr, &rest));
        assert_eq!(run.code, 2, "{rest:?}");
        assert!(run.stderr.contains(want), "{rest:?}: {}", run.stderr);
        assert!(!run.stderr.contains("panicked"));
    }
    let run = slp(&["find", "service:x"]);
    assert_eq!(run.code, 2);
    assert!(run.stderr.contains("--da ADDR[:PORT]"), "{}", run.stderr);
    // (No name lookup: the port is refused first.)
    let run = slp(&["--da", "10.0.0.1:99999", "find", "service:x"]);
    assert_eq!(run.code, 2);
    assert!(run.stderr.contains("10.0.0.1:99999"), "{}", run.stderr);
    let run = slp(&["--da", "127.0.0.1", "--multicast", "das"]);
    assert_eq!(run.code, 2);
    assert!(da.finish().is_empty(), "nothing was sent");
}

/// Run `svcroute ARGS` with its stdout a pipe whose reader is already gone
/// (`| head -0`); its exit status and stderr.
#[allow(clippy::disallowed_methods)] // tests drive a real process in real time
fn with_closed_stdout(args: &[&str]) -> (Option<i32>, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_svcroute"))
        .args(args)
        .env("RUST_LOG", "warn")
        .env("RUST_BACKTRACE", "1")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run svcroute");
    drop(child.stdout.take());
    let deadline = Instant::now() + Duration::from_secs(20);
    while child.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "svcroute did not exit");
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_closed_stdout_ends_slp_and_ctl_quietly() {
    let da = FakeDa::start(|_, m| vec![reply(m, srv_rply(&[("service:printer:lpr://a", 60)]))]);
    let addr = da.addr();
    let mut a = vec!["slp"];
    a.extend(args(&addr, &["find", "service:printer"]));
    let (code, err) = with_closed_stdout(&a);
    assert_eq!(code, Some(141), "like SIGPIPE: {err}");
    assert!(
        !err.contains("panicked") && !err.contains("backtrace"),
        "{err}"
    );
    // `svcroute ctl SOCK ... | grep -q`: a control socket that answers.
    let dir = std::env::temp_dir().join(format!("svcroute-pipe-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("n.sock");
    let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
    let server = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let mut line = [0_u8; 64];
        let _ = s.read(&mut line);
        s.write_all(br#"{"named": {"mda.rx_udp": 1}, "pid": 1}"#)
            .unwrap();
    });
    let sock = path.to_string_lossy().into_owned();
    let (code, err) = with_closed_stdout(&["ctl", &sock, "stats"]);
    server.join().unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(code, Some(141), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}
