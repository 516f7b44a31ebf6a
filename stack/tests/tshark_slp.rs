//! Wireshark agrees with us: every SLP message type we emit, sent in a
//! UDP/IPv4 datagram to port 427, decodes in tshark with the function,
//! length, flags, XID, language tag, next-extension offset, URLs, scopes,
//! attribute/tag lists, auth blocks and error codes we meant, and nothing is
//! malformed. Skips, saying so, when `tshark` is not on PATH.
//!
//! Expert info appears only where Wireshark always adds it: for a non-zero
//! error code, and for AntiEtrpRqst (function 12, RFC 3528), which Wireshark
//! 4.0 does not know beyond the header. Wireshark does not decode SLP
//! extensions (the MeshFwd message is checked up to its body) nor the
//! authentication blocks of an AttrRply (only their count).

use std::io::Write;
use std::process::Command;

use etherparse::PacketBuilder;
use svcroute_stack::wire::slp::attr::MESH_ENHANCED;
use svcroute_stack::wire::slp::codec::List;
use svcroute_stack::wire::slp::*;

mod common;
use common::pcap;

fn s(v: &str) -> SlpString {
    SlpString::new(v).unwrap()
}

fn scopes(v: &str) -> ScopeList {
    ScopeList::parse(v).unwrap()
}

/// What tshark should show for one message.
struct Expect {
    /// URL fields, comma separated.
    urls: &'static str,
    /// Scope-list fields, comma separated.
    scopes: &'static str,
    /// The non-empty [`DETAIL_FIELDS`], `|` separated.
    details: &'static str,
    /// Expert info: only for error codes and the function ID it does not know.
    expert: &'static str,
}

/// One message of each type we emit (and a SrvReg with MeshFwd), and what
/// tshark should make of it.
fn messages() -> Vec<(Message, Expect)> {
    let lang = LangTag::new("en").unwrap();
    let h = |xid: u16| Header::new(xid, lang.clone());
    let entry = |url: &str| UrlEntry::new(300, s(url));
    let auth = AuthBlock::new(Bsd::HmacSha256, 0x6000_0000, s("k1"), vec![0x5a; 32]).unwrap();
    let mesh = MeshFwd {
        fwd: FwdId::Fwded,
        version: 0x0000_0e8d_4a51_0000,
        accept: AcceptId {
            timestamp: 0x0000_0e8d_4a51_0001,
            da_url: s("service:directory-agent://10.0.0.1"),
        },
    };
    let m = |h: Header, b: Body| Message::new(h, b, Vec::new()).unwrap();
    let mut fresh = h(0x1003);
    fresh.flags.fresh = true;
    let mut mcast = h(0x1001);
    mcast.flags.mcast = true;
    vec![
        (
            m(
                mcast,
                Body::SrvRqst(SrvRqst {
                    pr_list: s("10.0.0.9"),
                    service_type: ServiceType::parse("service:printer").unwrap(),
                    scopes: scopes("DEFAULT,lab"),
                    predicate: Predicate::new("(&(q<=3)(x=*))").unwrap(),
                    spi: SlpString::default(),
                }),
            ),
            Expect {
                urls: "",
                scopes: "DEFAULT,lab",
                details: r"10.0.0.9|service:printer|(&(q<=3)(x=*))",
                expert: "",
            },
        ),
        (
            m(
                h(0x1002),
                Body::SrvRply(SrvRply {
                    error: ErrorCode::Ok,
                    entries: List::new(vec![
                        entry("service:printer:lpr://10.0.0.5"),
                        UrlEntry {
                            lifetime: 60,
                            url: s("service:printer:http://10.0.0.6"),
                            auths: List::new(vec![auth.clone()]).unwrap(),
                        },
                    ])
                    .unwrap(),
                }),
            ),
            Expect {
                urls: "service:printer:lpr://10.0.0.5,service:printer:http://10.0.0.6",
                scopes: "",
                details: r"0|2|0x8001|k1|300,60",
                expert: "",
            },
        ),
        (
            m(
                fresh,
                Body::SrvReg(SrvReg {
                    entry: entry("service:printer:lpr://10.0.0.5"),
                    service_type: ServiceType::parse("service:printer:lpr").unwrap(),
                    scopes: scopes("DEFAULT"),
                    attrs: AttrList::parse(r"(q=3),(name=a\2cb),x-ok").unwrap(),
                    attr_auths: List::default(),
                }),
            ),
            Expect {
                urls: "service:printer:lpr://10.0.0.5",
                scopes: "DEFAULT",
                details: r"service:printer:lpr|(q=3),(name=a\2cb),x-ok|300",
                expert: "",
            },
        ),
        (
            m(
                h(0x1004),
                Body::SrvDeReg(SrvDeReg {
                    scopes: scopes("DEFAULT"),
                    entry: entry("service:printer:lpr://10.0.0.5"),
                    tags: TagList::default(),
                }),
            ),
            Expect {
                urls: "service:printer:lpr://10.0.0.5",
                scopes: "DEFAULT",
                details: r"300",
                expert: "",
            },
        ),
        (
            m(
                h(0x1005),
                Body::SrvAck(SrvAck {
                    error: ErrorCode::RefreshRejected,
                }),
            ),
            Expect {
                urls: "",
                scopes: "",
                details: r"15",
                expert: "Expert Info (Error/Response): Error: SrvReg sent too soon",
            },
        ),
        (
            m(
                h(0x1006),
                Body::AttrRqst(AttrRqst {
                    pr_list: SlpString::default(),
                    url: s("service:printer:lpr://10.0.0.5"),
                    scopes: scopes("DEFAULT"),
                    tags: TagList::parse("q,x-*").unwrap(),
                    spi: SlpString::default(),
                }),
            ),
            Expect {
                urls: "service:printer:lpr://10.0.0.5",
                scopes: "DEFAULT",
                details: r"q,x-*",
                expert: "",
            },
        ),
        (
            m(
                h(0x1007),
                Body::AttrRply(AttrRply {
                    error: ErrorCode::Ok,
                    attrs: AttrList::parse("(q=3),x-ok").unwrap(),
                    auths: List::new(vec![auth.clone()]).unwrap(),
                }),
            ),
            Expect {
                urls: "",
                scopes: "",
                details: r"0|(q=3),x-ok",
                expert: "",
            },
        ),
        (
            m(
                h(0x0000),
                Body::DaAdvert(DaAdvert {
                    error: ErrorCode::Ok,
                    boot_timestamp: 0x6000_0000,
                    url: s("service:directory-agent://10.0.0.1"),
                    scopes: scopes("DEFAULT,lab"),
                    attrs: AttrList::new(vec![Attribute::keyword(MESH_ENHANCED).unwrap()]).unwrap(),
                    spi_list: s("k1"),
                    auths: List::new(vec![auth.clone()]).unwrap(),
                }),
            ),
            Expect {
                urls: "service:directory-agent://10.0.0.1",
                scopes: "DEFAULT,lab",
                details: r"0|mesh-enhanced|0x8001|k1|k1",
                expert: "",
            },
        ),
        (
            m(
                h(0x1009),
                Body::SrvTypeRqst(SrvTypeRqst {
                    pr_list: SlpString::default(),
                    naming_authority: NamingAuthority::All,
                    scopes: scopes("DEFAULT"),
                }),
            ),
            Expect {
                urls: "",
                scopes: "DEFAULT",
                details: r"65535",
                expert: "",
            },
        ),
        (
            m(
                h(0x100a),
                Body::SrvTypeRply(SrvTypeRply {
                    error: ErrorCode::Ok,
                    types: ServiceTypeList::parse("service:printer:lpr,service:x.one").unwrap(),
                }),
            ),
            Expect {
                urls: "",
                scopes: "",
                details: r"0|service:printer:lpr,service:x.one",
                expert: "",
            },
        ),
        (
            m(
                h(0x100b),
                Body::SaAdvert(SaAdvert {
                    url: s("service:service-agent://10.0.0.5"),
                    scopes: scopes("DEFAULT"),
                    attrs: AttrList::parse("(service-type=printer)").unwrap(),
                    auths: List::default(),
                }),
            ),
            Expect {
                urls: "service:service-agent://10.0.0.5",
                scopes: "DEFAULT",
                details: r"(service-type=printer)",
                expert: "",
            },
        ),
        (
            m(
                h(0x100c),
                Body::AntiEtrpRqst(AntiEtrpRqst {
                    kind: AntiEntropyType::Selective,
                    accept_ids: List::new(vec![mesh.accept.clone()]).unwrap(),
                }),
            ),
            Expect {
                urls: "",
                scopes: "",
                details: r"",
                expert: "Expert Info (Error/Response): Unknown Function Type: 12",
            },
        ),
        (
            Message::new(
                fresh_with(0x100d),
                Body::SrvReg(SrvReg {
                    entry: entry("service:x://10.0.0.7"),
                    service_type: ServiceType::parse("service:x").unwrap(),
                    scopes: scopes("lab"),
                    attrs: AttrList::default(),
                    attr_auths: List::default(),
                }),
                vec![Extension::MeshFwd(mesh)],
            )
            .unwrap(),
            Expect {
                urls: "service:x://10.0.0.7",
                scopes: "lab",
                details: r"service:x|300",
                expert: "",
            },
        ),
    ]
}

fn fresh_with(xid: u16) -> Header {
    let mut h = Header::new(xid, LangTag::new("en").unwrap());
    h.flags.fresh = true;
    h
}

fn frame(i: usize, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    PacketBuilder::ethernet2([0x02, 0, 0, 0, 0, 0x01], [0x02, 0, 0, 0, 0, 0x02])
        .ipv4([10, 0, 0, 9], [10, 0, 0, 1], 64)
        .udp(0xc000 + i as u16, PORT)
        .write(&mut out, payload)
        .unwrap();
    out
}

/// All scope-list fields tshark has, one per message type that carries one.
const SCOPE_FIELDS: [&str; 6] = [
    "srvloc.srvreq.scopelist",
    "srvloc.srvdereq.scopelist",
    "srvloc.attrreq.scopelist",
    "srvloc.daadvert.scopelist",
    "srvloc.srvtypereq.scopelist",
    "srvloc.saadvert.scopelist",
];

/// Other fields worth checking: error code, PRList, service types, predicate,
/// URL count, attribute and tag lists, auth blocks, SPIs, lifetimes, naming
/// authority length.
const DETAIL_FIELDS: [&str; 18] = [
    "srvloc.errv2",
    "srvloc.srvreq.prlist",
    "srvloc.srvreq.srvtypelist",
    "srvloc.srvreq.srvtype",
    "srvloc.srvreq.predicate",
    "srvloc.srvreq.urlcount",
    "srvloc.srvreq.attrlist",
    "srvloc.attrrply.attrlist",
    "srvloc.daadvert.attrlist",
    "srvloc.saadvert.attrlist",
    "srvloc.attrreq.taglist",
    "srvloc.srvdereq.taglist",
    "srvloc.srvtyperply.srvtypelist",
    "srvloc.authblkv2_bsd",
    "srvloc.authblkv2.slpspi",
    "srvloc.daadvert.slpspi",
    "srvloc.url.lifetime",
    "srvloc.srvtypereq.nameauthlistlen",
];

/// All URL fields tshark has.
const URL_FIELDS: [&str; 4] = [
    "srvloc.url.url",
    "srvloc.attrreq.url",
    "srvloc.daadvert.url",
    "srvloc.saadvert.url",
];

#[test]
fn tshark_decodes_our_slp() {
    if Command::new("tshark").arg("--version").output().is_err() {
        eprintln!("SKIP tshark_decodes_our_slp: tshark not on PATH");
        return;
    }
    let msgs = messages();
    let frames: Vec<Vec<u8>> = msgs
        .iter()
        .enumerate()
        .map(|(i, (m, _))| {
            let b = m.to_bytes();
            assert_eq!(Message::parse(&b).as_ref(), Ok(m));
            frame(i, &b)
        })
        .collect();
    let path = std::env::temp_dir().join(format!("svcroute-slp-{}.pcap", std::process::id()));
    std::fs::File::create(&path)
        .and_then(|mut f| f.write_all(&pcap(&frames)))
        .unwrap();

    // Wireshark's view alone: no personal plugin (wireshark/svcroute.lua,
    // installed by `scripts/setup --wireshark-plugin`) under this HOME.
    let home = std::env::temp_dir().join("svcroute-tshark-no-plugins");
    let mut cmd = Command::new("tshark");
    cmd.env("HOME", &home);
    cmd.arg("-r").arg(&path);
    cmd.args(["-T", "fields", "-E", "separator=|", "-E", "aggregator=,"]);
    let fields = [
        "srvloc.version",
        "srvloc.function",
        "srvloc.pktlen",
        "srvloc.xid",
        "srvloc.langtag",
        "srvloc.flags_v2",
        "srvloc.nextextoff",
        "_ws.expert",
        "_ws.malformed",
    ];
    for f in fields
        .iter()
        .chain(&URL_FIELDS)
        .chain(&SCOPE_FIELDS)
        .chain(&DETAIL_FIELDS)
    {
        cmd.args(["-e", f]);
    }
    let out = cmd.output().unwrap();
    let verbose = Command::new("tshark")
        .env("HOME", &home)
        .arg("-r")
        .arg(&path)
        .arg("-V")
        .output();
    if let Ok(dir) = std::env::var("SLP_PCAP_KEEP") {
        std::fs::copy(&path, std::path::Path::new(&dir).join("slp.pcap")).unwrap();
    }
    let _ = std::fs::remove_file(&path);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "tshark failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("{stdout}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), msgs.len(), "{stdout}");
    let non_empty = |cols: &[&str], sep: &str| {
        let v: Vec<&str> = cols.iter().copied().filter(|c| !c.is_empty()).collect();
        v.join(sep)
    };
    for (line, (m, want)) in lines.iter().zip(&msgs) {
        let cols: Vec<&str> = line.split('|').collect();
        let what = format!("{:?}: {line}", m.function());
        assert_eq!(cols.len(), 9 + 4 + 6 + 18, "{what}");
        assert_eq!(cols[0], "2", "version, {what}");
        assert_eq!(
            cols[1],
            u8::from(m.function()).to_string(),
            "function, {what}"
        );
        assert_eq!(cols[2], m.buffer_len().to_string(), "length, {what}");
        assert_eq!(cols[3], m.header().xid.to_string(), "XID, {what}");
        assert_eq!(cols[4], "en", "language tag, {what}");
        let flags = format!("0x{:04x}", m.header().flags.bits());
        assert_eq!(cols[5], flags, "flags, {what}");
        let neo = m.extensions().first().map_or(0, |_| {
            m.buffer_len()
                - m.extensions()
                    .iter()
                    .map(Extension::buffer_len)
                    .sum::<usize>()
        });
        assert_eq!(cols[6], neo.to_string(), "next extension offset, {what}");
        assert_eq!(cols[7], want.expert, "expert info, {what}");
        assert_eq!(cols[8], "", "malformed, {what}");
        assert_eq!(non_empty(&cols[9..13], ","), want.urls, "URLs, {what}");
        assert_eq!(non_empty(&cols[13..19], ","), want.scopes, "scopes, {what}");
        assert_eq!(non_empty(&cols[19..], "|"), want.details, "details, {what}");
    }
    // The verbose dissection flags nothing either.
    if let Ok(v) = verbose {
        let text = String::from_utf8_lossy(&v.stdout);
        assert!(!text.contains("Malformed"), "{text}");
        let experts = text.matches("[Expert Info").count();
        assert_eq!(experts, 2, "{text}"); // REFRESH_REJECTED, function 12
    }
}
