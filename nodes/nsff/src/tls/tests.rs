//! SNI extraction: golden ClientHellos captured from curl and
//! `openssl s_client`, cut, refragmented, broken and fuzzed.

use proptest::prelude::*;

use super::*;

/// `curl --resolve www.example2.com:48443:127.0.0.1 https://www.example2.com:48443/`
/// (curl 7.88.1, OpenSSL 3.0): TLS 1.3 ClientHello, SNI www.example2.com, ALPN
/// h2 and http/1.1, padded to 512 octets; 517 octets.
const CURL_HELLO: &[&str] = &[
    "1603010200010001fc0303cab3e3d625243c4cea53745d7ea50ed7116bed4be463435d0343101830",
    "d55e2d2050c9578337093afc9a6056dab560a9080a6f658ef72e75f07785d5a5a7a819f4003e1302",
    "13031301c02cc030009fcca9cca8ccaac02bc02f009ec024c028006bc023c0270067c00ac0140039",
    "c009c0130033009d009c003d003c0035002f00ff010001750000001500130000107777772e657861",
    "6d706c65322e636f6d000b000403000102000a00160014001d0017001e0019001801000101010201",
    "0301040010000e000c02683208687474702f312e31001600000017000000310000000d002a002804",
    "0305030603080708080809080a080b08040805080604010501060103030301030204020502060200",
    "2b0009080304030303020301002d00020101003300260024001d002006c594507c1a3c6d200f89cf",
    "e851def052f5a0486a15cdae5c36f4a36e0b285c001500ad00000000000000000000000000000000",
    "00000000000000000000000000000000000000000000000000000000000000000000000000000000",
    "00000000000000000000000000000000000000000000000000000000000000000000000000000000",
    "00000000000000000000000000000000000000000000000000000000000000000000000000000000",
    "00000000000000000000000000000000000000000000000000000000000000000000000000",
];

/// `openssl s_client -connect 127.0.0.1:48443 -servername www.example2.com`
/// (OpenSSL 3.0.19); 322 octets.
const OPENSSL_HELLO: &[&str] = &[
    "160301013d01000139030360b5d73b00d81569210757160e4cf5fc1f197b1db5ec1200f868a8a20b",
    "324dfb200bdad8d4c358fdbe8a3945270c244385ca46dbc16092f088f104593817c4290a003e1302",
    "13031301c02cc030009fcca9cca8ccaac02bc02f009ec024c028006bc023c0270067c00ac0140039",
    "c009c0130033009d009c003d003c0035002f00ff010000b20000001500130000107777772e657861",
    "6d706c65322e636f6d000b000403000102000a00160014001d0017001e0019001801000101010201",
    "030104002300000016000000170000000d002a0028040305030603080708080809080a080b080408",
    "050806040105010601030303010302040205020602002b0009080304030303020301002d00020101",
    "003300260024001d00206609dd5eb357d9f0cfd31289a633515428ceb871db244e848fbf60150b2d",
    "fa0b",
];

/// `openssl s_client -connect 127.0.0.1:48444 -noservername`; 297 octets.
const NO_SNI_HELLO: &[&str] = &[
    "1603010124010001200303e2e19d9f58ae385db6b6801bddcad5ef8ff927de7f387ad861a399e66c",
    "ada7dc20ed3c07963a6d44c925cee1f7546c668dedfde42c20451198007f217da3dce8df003e1302",
    "13031301c02cc030009fcca9cca8ccaac02bc02f009ec024c028006bc023c0270067c00ac0140039",
    "c009c0130033009d009c003d003c0035002f00ff01000099000b000403000102000a00160014001d",
    "0017001e0019001801000101010201030104002300000016000000170000000d002a002804030503",
    "0603080708080809080a080b080408050806040105010601030303010302040205020602002b0009",
    "080304030303020301002d00020101003300260024001d002088846a85636ee9a5f4a71de8429ef1",
    "4d3a7d540bd43733e47800109761355c44",
];

fn unhex(lines: &[&str]) -> Vec<u8> {
    let s: String = lines.concat();
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

#[track_caller]
fn name_of(p: Peek) -> (String, usize) {
    match p {
        Peek::Name { name, len } => (name.as_str().to_owned(), len),
        other => panic!("{other:?}"),
    }
}

/// A ClientHello body with these extensions.
fn body(exts: &[(u16, Vec<u8>)]) -> Vec<u8> {
    let mut b = vec![0x03, 0x03];
    b.extend_from_slice(&[0xa5; 32]);
    b.push(32);
    b.extend_from_slice(&[0x5a; 32]);
    b.extend_from_slice(&[0x00, 0x04, 0x13, 0x01, 0x13, 0x02]);
    b.extend_from_slice(&[0x01, 0x00]);
    let mut e = Vec::new();
    for (ty, data) in exts {
        e.extend_from_slice(&ty.to_be_bytes());
        e.extend_from_slice(&(data.len() as u16).to_be_bytes());
        e.extend_from_slice(data);
    }
    b.extend_from_slice(&(e.len() as u16).to_be_bytes());
    b.extend_from_slice(&e);
    b
}

/// A `server_name` extension with these (name_type, name) entries.
fn sni(entries: &[(u8, &[u8])]) -> (u16, Vec<u8>) {
    let mut list = Vec::new();
    for (t, n) in entries {
        list.push(*t);
        list.extend_from_slice(&(n.len() as u16).to_be_bytes());
        list.extend_from_slice(n);
    }
    let mut d = (list.len() as u16).to_be_bytes().to_vec();
    d.extend_from_slice(&list);
    (0, d)
}

/// The handshake message for `body`, in records of at most `size` octets.
fn records(body: &[u8], size: usize) -> Vec<u8> {
    let mut hs = vec![0x01];
    hs.extend_from_slice(&(body.len() as u32).to_be_bytes()[1..]);
    hs.extend_from_slice(body);
    let mut out = Vec::new();
    for chunk in hs.chunks(size) {
        out.extend_from_slice(&[0x16, 0x03, 0x01]);
        out.extend_from_slice(&(chunk.len() as u16).to_be_bytes());
        out.extend_from_slice(chunk);
    }
    out
}

/// A ClientHello with these SNI entries (type, name).
pub(crate) fn hello_for(entries: &[(u8, &[u8])]) -> Vec<u8> {
    records(
        &body(&[(0x000a, vec![0, 2, 0, 0x1d]), sni(entries)]),
        1 << 14,
    )
}

#[test]
fn golden_curl_hello_names_the_service() {
    let h = unhex(CURL_HELLO);
    assert_eq!(h.len(), 517);
    assert_eq!(name_of(peek(&h)), ("www.example2.com".into(), 517));
    // What follows the hello (the client's next flight) does not matter.
    let mut more = h.clone();
    more.extend_from_slice(&[0x14, 0x03, 0x03, 0x00, 0x01, 0x01, 0x17, 0x03]);
    assert_eq!(name_of(peek(&more)), ("www.example2.com".into(), 517));
}

#[test]
fn golden_openssl_hello_names_the_service() {
    let h = unhex(OPENSSL_HELLO);
    assert_eq!(h.len(), 322);
    assert_eq!(name_of(peek(&h)), ("www.example2.com".into(), 322));
}

#[test]
fn golden_hello_without_sni_is_refused() {
    let h = unhex(NO_SNI_HELLO);
    assert_eq!(h.len(), 297);
    assert_eq!(peek(&h), Peek::Refused(Refusal::NoSni));
    assert_eq!(Refusal::NoSni.alert(), Some(Alert::MissingExtension));
}

#[test]
fn every_cut_of_a_golden_hello_needs_more() {
    for golden in [CURL_HELLO, OPENSSL_HELLO, NO_SNI_HELLO] {
        let h = unhex(golden);
        for cut in 0..h.len() {
            assert_eq!(peek(&h[..cut]), Peek::NeedMore, "cut {cut}");
        }
    }
}

#[test]
fn a_hello_fragmented_over_records_is_joined() {
    let h = unhex(CURL_HELLO);
    let body = &h[9..];
    for size in [1, 2, 3, 4, 5, 7, 100, 511, 512] {
        let r = records(body, size);
        let (name, len) = name_of(peek(&r));
        assert_eq!(
            (name.as_str(), len),
            ("www.example2.com", r.len()),
            "size {size}"
        );
        for cut in 0..r.len() {
            assert_eq!(peek(&r[..cut]), Peek::NeedMore, "size {size} cut {cut}");
        }
    }
}

#[test]
fn not_tls_is_refused_from_the_first_octets() {
    for b in [
        &b"GET / HTTP/1.1\r\nHost: www.example2.com\r\n\r\n"[..],
        b"G",
        b"\x16\x02",
        b"\x17\x03\x03\x00\x05hello",
        b"SSH-2.0-OpenSSH_9.2\r\n",
    ] {
        assert_eq!(peek(b), Peek::Refused(Refusal::NotTls), "{b:?}");
    }
    assert_eq!(Refusal::NotTls.alert(), None);
    assert_eq!(peek(b""), Peek::NeedMore);
    assert_eq!(peek(b"\x16"), Peek::NeedMore);
    assert_eq!(peek(b"\x16\x03"), Peek::NeedMore);
    assert!(is_tls_start(0x16));
    assert!(!is_tls_start(b'G'));
}

#[test]
fn another_handshake_message_is_refused() {
    // A ServerHello (type 2) header.
    let r = [0x16, 0x03, 0x03, 0x00, 0x04, 0x02, 0x00, 0x00, 0x00];
    assert_eq!(peek(&r), Peek::Refused(Refusal::NotClientHello));
    // Said as soon as the type octet is there.
    assert_eq!(peek(&r[..6]), Peek::Refused(Refusal::NotClientHello));
}

#[test]
fn impossible_lengths_are_refused() {
    // A ClientHello announcing 64 KiB: refused from its header alone.
    let r = [0x16, 0x03, 0x01, 0x00, 0x10, 0x01, 0x01, 0x00, 0x00];
    assert_eq!(peek(&r), Peek::Refused(Refusal::Oversized));
    // A record over 2^14 octets and an empty one.
    assert_eq!(
        peek(&[0x16, 0x03, 0x01, 0x40, 0x01]),
        Peek::Refused(Refusal::Malformed)
    );
    assert_eq!(
        peek(&[0x16, 0x03, 0x01, 0x00, 0x00]),
        Peek::Refused(Refusal::Malformed)
    );
    // An alert record in the middle of a fragmented hello.
    let h = unhex(CURL_HELLO);
    let mut r = records(&h[9..], 100);
    r.splice(105..105, [0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x28]);
    assert_eq!(peek(&r), Peek::Refused(Refusal::Malformed));
    // The body's inner lengths disagree with the message length.
    let mut b = body(&[sni(&[(0, b"a.example")])]);
    b.push(0);
    assert_eq!(
        peek(&records(&b, 1 << 14)),
        Peek::Refused(Refusal::Malformed)
    );
    let b = body(&[sni(&[(0, b"a.example")])]);
    assert_eq!(
        peek(&records(&b[..b.len() - 1], 1 << 14)),
        Peek::Refused(Refusal::Malformed)
    );
    // Session ID over 32 octets, no cipher suites, no compression methods.
    let mut b = body(&[]);
    b[34] = 33;
    assert_eq!(
        peek(&records(&b, 1 << 14)),
        Peek::Refused(Refusal::Malformed)
    );
    // Endless tiny records never make a hello: refused at MAX_BUFFER.
    let mut r = Vec::new();
    r.extend_from_slice(&[0x16, 0x03, 0x01, 0x00, 0x04, 0x01, 0x00, 0x30, 0x00]);
    while r.len() < MAX_BUFFER + 10 {
        r.extend_from_slice(&[0x16, 0x03, 0x01, 0x00, 0x01, 0x00]);
    }
    assert_eq!(peek(&r), Peek::Refused(Refusal::Oversized));
}

#[test]
fn server_name_entries() {
    let (n, _) = name_of(peek(&hello_for(&[(0, b"WWW.Example2.COM.")])));
    assert_eq!(n, "www.example2.com");
    // Another name type first: the host_name is taken.
    let (n, _) = name_of(peek(&hello_for(&[(1, b"xyz"), (0, b"a.example")])));
    assert_eq!(n, "a.example");
    for bad in [
        &b"10.0.1.1"[..],
        b"under_score.example",
        b"caf\xc3\xa9.example",
        b"-a.example",
    ] {
        assert_eq!(
            peek(&hello_for(&[(0, bad)])),
            Peek::Refused(Refusal::BadName),
            "{bad:?}"
        );
    }
    assert_eq!(Refusal::BadName.alert(), Some(Alert::UnrecognizedName));
    // No host_name entry; an empty list; an empty name.
    assert_eq!(
        peek(&hello_for(&[(1, b"x")])),
        Peek::Refused(Refusal::NoSni)
    );
    assert_eq!(peek(&hello_for(&[])), Peek::Refused(Refusal::Malformed));
    assert_eq!(
        peek(&hello_for(&[(0, b"")])),
        Peek::Refused(Refusal::Malformed)
    );
    // Two server_name extensions.
    let b = body(&[sni(&[(0, b"a.example")]), sni(&[(0, b"b.example")])]);
    assert_eq!(
        peek(&records(&b, 1 << 14)),
        Peek::Refused(Refusal::Malformed)
    );
    // Bytes after the list inside the extension.
    let (ty, mut d) = sni(&[(0, b"a.example")]);
    d.push(0);
    assert_eq!(
        peek(&records(&body(&[(ty, d)]), 1 << 14)),
        Peek::Refused(Refusal::Malformed)
    );
    // A TLS 1.2 hello without any extensions block.
    let b = body(&[]);
    assert_eq!(
        peek(&records(&b[..b.len() - 2], 1 << 14)),
        Peek::Refused(Refusal::NoSni)
    );
}

#[test]
fn alert_records() {
    assert_eq!(
        Alert::UnrecognizedName.record(),
        [0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x70]
    );
    let all = [
        Refusal::NotTls,
        Refusal::NotClientHello,
        Refusal::Oversized,
        Refusal::Malformed,
        Refusal::NoSni,
        Refusal::BadName,
    ];
    let names: std::collections::BTreeSet<_> = all.iter().map(|r| r.as_str()).collect();
    assert_eq!(names.len(), all.len());
    assert_eq!(Alert::InternalError.code(), 80);
    assert_eq!(Alert::DecodeError.code(), 50);
    assert_eq!(Alert::HandshakeFailure.code(), 40);
    assert_eq!(Alert::UnexpectedMessage.code(), 10);
}

fn label() -> impl Strategy<Value = String> {
    "[a-z0-9]([a-z0-9-]{0,10}[a-z0-9])?"
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..2048)) {
        if let Peek::Name { len, .. } = peek(&bytes) {
            prop_assert!(len <= bytes.len());
        }
    }

    #[test]
    fn records_with_random_content_never_panic(
        bytes in proptest::collection::vec(any::<u8>(), 0..1024),
        size in 1usize..300,
    ) {
        // Past the record layer: random handshake octets.
        let mut hs = vec![0x01, 0x00];
        hs.extend_from_slice(&(bytes.len() as u16).to_be_bytes());
        hs.extend_from_slice(&bytes);
        let r = records(&hs[4..], size);
        let _ = peek(&r);
    }

    #[test]
    fn mutated_golden_never_panics(at in 0usize..517, x in 1u8..=255, cut in 0usize..=517) {
        let mut h = unhex(CURL_HELLO);
        h[at] ^= x;
        let p = peek(&h[..cut]);
        if let Peek::Name { len, .. } = p {
            prop_assert!(len <= cut);
        }
    }

    #[test]
    fn built_hellos_round_trip(
        labels in proptest::collection::vec(label(), 1..5),
        tld in "[a-z]{2,6}",
        pad in 0usize..600,
        before in any::<bool>(),
        size in 1usize..700,
    ) {
        let mut name = labels.join(".");
        name.push('.');
        name.push_str(&tld);
        let other = (0x0015u16, vec![0; pad]);
        let s = sni(&[(0, name.as_bytes())]);
        let exts = if before { vec![other, s] } else { vec![s, other] };
        let r = records(&body(&exts), size);
        prop_assert_eq!(peek(&r), Peek::Name { name: Fqdn::new(&name).unwrap(), len: r.len() });
    }
}
