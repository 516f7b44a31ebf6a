//! SLP authentication across a mesh of real MDA drivers on smoltcp over a
//! lossy simulated segment: MDAs 1–3 sign their DAAdverts with their own
//! Ed25519 keys and admit each other; MDA 4 has no key and is never
//! peered. SAs must sign (HMAC-SHA256 or Ed25519): unsigned, forged and
//! unknown-SPI registrations get AUTHENTICATION_ABSENT, _FAILED and
//! _UNKNOWN; signed ones reach every authenticated MDA with their blocks.

mod slp_sim;

use ring::signature::{Ed25519KeyPair, KeyPair as _};
use slp_sim::World;
use smoltcp::time::Duration;
use svcroute_mda::core::{Admit, KeyList, SignKey, SignKeyList, VerifyKey};
use svcroute_mda::driver::MdaConfig;
use svcroute_stack::sim::ipv4;
use svcroute_stack::wire::slp::auth::{to_base64, to_hex, Signed};
use svcroute_stack::wire::slp::codec::List;
use svcroute_stack::wire::slp::{
    AcceptId, AttrList, Body, Bsd, ErrorCode, Extension, FwdId, Header, LangTag, MeshFwd, Message,
    ScopeList, ServiceType, Signer, SlpString, SrvDeReg, SrvReg, TagList, UrlEntry,
};

const N: usize = 4;
const HMAC: [u8; 16] = *b"sa shared secret";
const SA_SEED: [u8; 32] = [0x5a; 32];
/// 2033: the blocks outlive the test.
const EXPIRES: u32 = 2_000_000_000;

fn public(seed: &[u8; 32]) -> String {
    let pair = Ed25519KeyPair::from_seed_unchecked(seed).unwrap();
    format!("hex:{}", to_hex(pair.public_key().as_ref()))
}

fn cfg(me: usize) -> MdaConfig {
    let base = MdaConfig {
        scopes: "x".into(),
        peers: (0..N)
            .filter(|j| *j != me)
            .map(|j| ipv4(0, j as u8 + 1).to_string())
            .collect(),
        keepalive_s: 20,
        timeout_s: 60,
        beat_s: 60,
        start_wait_ms: 0,
        peer_retry_s: 5,
        ..MdaConfig::default()
    };
    if me == 3 {
        return base; // MDA 4: no keys at all.
    }
    let mut verify = vec![
        VerifyKey::new(
            "sa-hmac",
            "hmac-sha256",
            &format!("base64:{}", to_base64(&HMAC)),
            &[Admit::Sa],
        )
        .unwrap(),
        VerifyKey::new("sa-ed", "ed25519", &public(&SA_SEED), &[Admit::Sa]).unwrap(),
    ];
    for n in 1..=3_u8 {
        verify.push(
            VerifyKey::new(
                &format!("mda{n}"),
                "ed25519",
                &public(&[n; 32]),
                &[Admit::Peer],
            )
            .unwrap(),
        );
    }
    let me8 = me as u8 + 1;
    MdaConfig {
        keys: KeyList::new(verify).unwrap(),
        sign_keys: SignKeyList::new(vec![SignKey::new(
            &format!("mda{me8}"),
            "ed25519",
            &format!("hex:{}", to_hex(&[me8; 32])),
        )
        .unwrap()])
        .unwrap(),
        ..base
    }
}

fn url(k: usize) -> String {
    format!("service:printer:lpr://p{k}")
}

fn signed_reg(xid: u16, url: &str, attrs: &str, signers: &[&Signer], v: u64) -> Message {
    let mut entry = UrlEntry::new(u16::MAX, SlpString::new(url).unwrap());
    let attrs = AttrList::parse(attrs).unwrap();
    let mut attr_auths = List::default();
    for s in signers {
        entry
            .auths
            .push(s.sign(&Signed::Url(&entry.url), EXPIRES))
            .unwrap();
        attr_auths
            .push(s.sign(&Signed::Attrs(&attrs), EXPIRES))
            .unwrap();
    }
    let body = Body::SrvReg(SrvReg {
        entry,
        service_type: ServiceType::parse("service:printer:lpr").unwrap(),
        scopes: ScopeList::parse("x").unwrap(),
        attrs,
        attr_auths,
    });
    let mut h = Header::new(xid, LangTag::en());
    h.flags.fresh = true;
    let ext = Extension::MeshFwd(MeshFwd {
        fwd: FwdId::RqstFwd,
        version: v,
        accept: AcceptId::default(),
    });
    Message::new(h, body, vec![ext]).unwrap()
}

fn signed_dereg(xid: u16, url: &str, signers: &[&Signer], v: u64) -> Message {
    let mut entry = UrlEntry::new(0, SlpString::new(url).unwrap());
    for s in signers {
        entry
            .auths
            .push(s.sign(&Signed::Url(&entry.url), EXPIRES))
            .unwrap();
    }
    let body = Body::SrvDeReg(SrvDeReg {
        scopes: ScopeList::parse("x").unwrap(),
        entry,
        tags: TagList::default(),
    });
    let ext = Extension::MeshFwd(MeshFwd {
        fwd: FwdId::RqstFwd,
        version: v,
        accept: AcceptId::default(),
    });
    Message::new(Header::new(xid, LangTag::en()), body, vec![ext]).unwrap()
}

#[test]
fn authenticated_mesh_under_loss() {
    let mut w = World::new(3, 0.2, (0..N).map(cfg).collect());
    w.sim.run_for(Duration::from_secs(120)).unwrap();
    let authenticated = [0, 1, 2];
    for i in authenticated {
        let want: Vec<String> = authenticated
            .iter()
            .filter(|j| **j != i)
            .map(|j| format!("service:directory-agent://10.0.0.{}", j + 1))
            .collect();
        assert_eq!(w.core(i).active_peers(), want, "MDA {}", i + 1);
    }
    assert!(w.core(3).active_peers().is_empty(), "MDA 4 was peered");
    let refused: u64 = authenticated
        .iter()
        .map(|i| {
            let c = w.core(*i).counters();
            c.get("drop.mda.peer_unauthenticated").copied().unwrap_or(0)
                + c.get("drop.mda.advert_auth_absent").copied().unwrap_or(0)
        })
        .sum();
    assert!(refused > 0);

    let hmac = Signer::new("sa-hmac", Bsd::HmacSha256, &HMAC).unwrap();
    let ed = Signer::new("sa-ed", Bsd::Ed25519, &SA_SEED).unwrap();
    let forged = Signer::new("sa-ed", Bsd::Ed25519, &[1; 32]).unwrap();
    let stranger = Signer::new("elsewhere", Bsd::HmacSha256, &HMAC).unwrap();
    let mut expect = Vec::new();
    let cases: [(usize, &[&Signer], ErrorCode); 6] = [
        (0, &[&hmac], ErrorCode::Ok),
        (1, &[&ed], ErrorCode::Ok),
        (2, &[&hmac, &ed], ErrorCode::Ok),
        (0, &[], ErrorCode::AuthenticationAbsent),
        (1, &[&forged], ErrorCode::AuthenticationFailed),
        (2, &[&stranger], ErrorCode::AuthenticationUnknown),
    ];
    for (k, (at, signers, code)) in cases.iter().enumerate() {
        let xid = w.next_xid();
        w.send(*at, &signed_reg(xid, &url(k), "(k=1)", signers, 10));
        expect.push((xid, *code));
    }
    w.drive_until_acked(Duration::from_secs(600));
    for (xid, code) in &expect {
        assert_eq!(w.answer(*xid), Some(*code), "XID {xid}");
    }
    w.drive_until_equal(&authenticated, Duration::from_secs(600));
    for i in authenticated {
        for (k, (_, signers, _)) in cases.iter().enumerate().take(3) {
            let r = w.core(i).registration(&url(k), &LangTag::en()).unwrap();
            assert!(!r.deleted);
            assert_eq!(r.url_auths.len(), signers.len(), "MDA {} p{k}", i + 1);
            for (b, s) in r.url_auths.iter().zip(signers.iter()) {
                assert_eq!(s.verifier().verify(&Signed::Url(&r.url), b, 0), Ok(()));
            }
        }
        for k in 3..6 {
            assert!(w.core(i).registration(&url(k), &LangTag::en()).is_none());
        }
    }
    assert_eq!(w.core(3).registration_count(), 0, "nothing leaked to MDA 4");

    // A deregistration must carry every SPI the service was registered with.
    let xid = w.next_xid();
    w.send(1, &signed_dereg(xid, &url(2), &[&hmac], 20));
    let xid2 = w.next_xid();
    w.send(1, &signed_dereg(xid2, &url(0), &[&hmac], 20));
    w.drive_until_acked(Duration::from_secs(600));
    assert_eq!(w.answer(xid), Some(ErrorCode::AuthenticationAbsent));
    assert_eq!(w.answer(xid2), Some(ErrorCode::Ok));
    w.drive_until_equal(&authenticated, Duration::from_secs(600));
    for i in authenticated {
        assert!(w.live(i, &url(0)).is_none());
        assert!(w.live(i, &url(2)).is_some());
    }
    // Keepalives keep the authenticated peerings up.
    w.sim.run_for(Duration::from_secs(300)).unwrap();
    for i in authenticated {
        assert_eq!(w.core(i).active_peers().len(), 2, "MDA {}", i + 1);
        assert!(w.core(i).counters()["mda.keepalive_heard"] > 10);
    }
}
