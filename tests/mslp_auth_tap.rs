//! SLP authentication (RFC 2608 §9.2; SPEC §4: BSD 0x8001 HMAC-SHA256,
//! 0x8002 Ed25519) over real TAPs: three MDAs whose `[[mda.keys]]` demand
//! signed registrations and signed DAAdverts from peers, and kernel
//! namespaces running `svcroute slp` as SA and UA. A signed registration is
//! accepted, forwarded and found with its block, which the UA verifies; an
//! unsigned, a wrongly signed and an unknown-SPI registration are refused
//! with AUTHENTICATION_ABSENT, _FAILED and _UNKNOWN; an MDA whose DAAdvert
//! is signed with the wrong key is never peered. Needs root.

mod common;

use common::{lab_name, root_or_skip, wait_until, Lab, BIN};
use serde_json::Value;
use svcroute_stack::wire::slp::auth::{ed25519_public, to_hex};

/// Ed25519 seeds: MDA n signs with `[n; 32]`; the SA with `SA_SEED`.
const SA_SEED: [u8; 32] = [0x5a; 32];
const HMAC: &str = "hex:736c702073686172656420736563726574"; // "slp shared secret"

fn hex(b: &[u8]) -> String {
    format!("hex:{}", to_hex(b))
}

fn public(seed: &[u8; 32]) -> String {
    hex(&ed25519_public(seed).unwrap())
}

/// `[node.config]` of an MDA: scope y, the others as peers, SA keys, and
/// the peer keys of MDAs 1 and 2; it signs as `spi` with `seed`.
fn mda_config(me: u8, spi: &str, seed: &[u8; 32]) -> String {
    let peers: Vec<String> = (1..=3)
        .filter(|n| *n != me)
        .map(|n| format!("\"10.0.0.{n}\""))
        .collect();
    format!(
        r#"scopes = "y"
peers = [{peers}]
start_wait_ms = 100
peer_retry_s = 1
keepalive_s = 5
timeout_s = 15
keys = [
  {{ spi = "sa-ed", bsd = "ed25519", key = "{sa_pub}", admits = ["sa"] }},
  {{ spi = "sa-hmac", bsd = "hmac-sha256", key = "{HMAC}", admits = ["sa"] }},
  {{ spi = "mda1", bsd = "ed25519", key = "{p1}", admits = ["peer"] }},
  {{ spi = "mda2", bsd = "ed25519", key = "{p2}", admits = ["peer"] }},
]
sign_keys = [{{ spi = "{spi}", bsd = "ed25519", key = "{seed}" }}]
"#,
        peers = peers.join(", "),
        sa_pub = public(&SA_SEED),
        p1 = public(&[1; 32]),
        p2 = public(&[2; 32]),
        seed = hex(seed),
    )
}

fn lab_text(name: &str) -> String {
    let mut t = format!("name = \"{name}\"\n[[segment]]\nname = \"lan0\"\n");
    // MDA 3 claims to be "mda2" but signs with another key: an impostor.
    for (n, spi, seed) in [
        (1, "mda1", [1; 32]),
        (2, "mda2", [2; 32]),
        (3, "mda2", [3; 32]),
    ] {
        t += &format!(
            "[[node]]\nname = \"mda{n}\"\nrole = \"mda\"\n[[node.port]]\nsegment = \"lan0\"\n\
             addrs = [\"10.0.0.{n}/24\"]\n[node.config]\n{}",
            mda_config(n, spi, &seed)
        );
    }
    for (h, a) in [("sa", 10), ("ua", 11)] {
        t += &format!(
            "[[host]]\nname = \"{h}\"\n[[host.iface]]\nsegment = \"lan0\"\naddrs = [\"10.0.0.{a}/24\"]\n"
        );
    }
    t
}

/// `svcroute slp --da 10.0.0.<mda> --scopes y ARGS...` from `host`: exit
/// code and stdout + stderr.
fn slp(lab: &Lab, host: &str, mda: u8, args: &[&str]) -> (Option<i32>, String) {
    let da = format!("10.0.0.{mda}");
    let mut cmd = vec![
        BIN,
        "slp",
        "--da",
        &da,
        "--scopes",
        "y",
        "--timeout-ms",
        "3000",
    ];
    cmd.extend_from_slice(args);
    let out = lab.exec(host, 20, &cmd);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code(), text)
}

fn json_of(text: &str) -> Value {
    let line = text.lines().find(|l| l.starts_with('{')).unwrap_or("null");
    serde_json::from_str(line).unwrap_or(Value::Null)
}

/// The `find --json` entries for `url` at `mda`, asking for SPI `sa-ed` and
/// verifying with its public key.
fn signed_entry(lab: &Lab, mda: u8, url: &str) -> Option<Value> {
    let key = public(&SA_SEED);
    let (code, text) = slp(
        lab,
        "ua",
        mda,
        &[
            "--spi",
            "sa-ed",
            "--key",
            &key,
            "--json",
            "find",
            "service:printer",
        ],
    );
    if code != Some(0) {
        return None;
    }
    json_of(&text)["entries"]
        .as_array()?
        .iter()
        .find(|e| e["url"] == url)
        .cloned()
}

fn peer_up(lab: &Lab, node: &str, url: &str) -> bool {
    lab.ctl(node, &["peers"])
        .as_array()
        .is_some_and(|ps| ps.iter().any(|p| p["url"] == url && p["up"] == true))
}

fn counter(lab: &Lab, node: &str, name: &str) -> u64 {
    lab.stats(node)["named"][name].as_u64().unwrap_or(0)
}

#[test]
fn signed_registrations_are_accepted_and_unsigned_ones_refused() {
    if !root_or_skip() {
        return;
    }
    let name = lab_name('m', 'k');
    let lab = Lab::up(&name, &lab_text(&name));
    let u1 = "service:directory-agent://10.0.0.1";
    let u2 = "service:directory-agent://10.0.0.2";
    let u3 = "service:directory-agent://10.0.0.3";
    assert!(
        wait_until(30, || peer_up(&lab, "mda1", u2)
            && peer_up(&lab, "mda2", u1)),
        "MDAs 1 and 2 never peered: {} / {}",
        lab.ctl("mda1", &["peers"]),
        lab.ctl("mda2", &["peers"])
    );

    // A registration signed with Ed25519: accepted, forwarded with its
    // blocks, found at the other MDA, and the UA verifies the block.
    let seed = hex(&SA_SEED);
    let url = "service:printer://10.0.0.10/signed";
    let (code, text) = slp(
        &lab,
        "sa",
        1,
        &[
            "--spi",
            "sa-ed",
            "--bsd",
            "ed25519",
            "--key",
            &seed,
            "--json",
            "register",
            url,
            "--attrs",
            "(color=true)",
            "--lifetime",
            "600",
            "--mesh-fwd",
        ],
    );
    assert_eq!(code, Some(0), "{text}");
    assert_eq!(json_of(&text)["auth"]["spi"], "sa-ed", "{text}");
    assert!(
        wait_until(20, || signed_entry(&lab, 2, url)
            .is_some_and(|e| e["verified"] == true && e["auth_blocks"] == 1)),
        "mda2 never returned the signed registration with its block: {:?}",
        signed_entry(&lab, 2, url)
    );
    // The attribute list and its block, verified by the UA.
    let (code, text) = slp(
        &lab,
        "ua",
        2,
        &[
            "--spi",
            "sa-ed",
            "--key",
            &public(&SA_SEED),
            "--json",
            "attrs",
            url,
        ],
    );
    assert_eq!(code, Some(0), "{text}");
    let lists = json_of(&text)["lists"].clone();
    assert_eq!(lists[0]["attrs"], "(color=true)", "{text}");
    assert_eq!(lists[0]["verified"], true, "{text}");

    // HMAC-SHA256 with the right secret: accepted too.
    let (code, text) = slp(
        &lab,
        "sa",
        1,
        &[
            "--spi",
            "sa-hmac",
            "--bsd",
            "hmac-sha256",
            "--key",
            HMAC,
            "register",
            "service:printer://10.0.0.10/hmac",
            "--lifetime",
            "600",
        ],
    );
    assert_eq!(code, Some(0), "{text}");

    // Refusals, with RFC 2608 §7's codes (exit 4 names the code).
    let refused = |args: &[&str], want: &str| {
        let (code, text) = slp(&lab, "sa", 1, args);
        assert_eq!(code, Some(4), "{args:?}: {text}");
        assert!(text.contains(want), "{args:?}: want {want} in {text}");
    };
    let bad = "service:printer://10.0.0.10/bad";
    refused(&["register", bad], "AUTHENTICATION_ABSENT (6)");
    refused(
        &[
            "--spi",
            "sa-hmac",
            "--bsd",
            "hmac-sha256",
            "--key",
            "hex:0000000000000000000000000000000000",
            "register",
            bad,
        ],
        "AUTHENTICATION_FAILED (7)",
    );
    refused(
        &["--spi", "sa-ed", "--key", &hex(&[9; 32]), "register", bad],
        "AUTHENTICATION_FAILED (7)",
    );
    refused(
        &["--spi", "nobody", "--key", &seed, "register", bad],
        "AUTHENTICATION_UNKNOWN (5)",
    );
    // Asking for an SPI the MDA does not know.
    let (code, text) = slp(
        &lab,
        "ua",
        1,
        &["--spi", "nobody", "find", "service:printer"],
    );
    assert_eq!(code, Some(4), "{text}");
    assert!(text.contains("AUTHENTICATION_UNKNOWN (5)"), "{text}");
    for c in [
        "drop.mda.auth_absent",
        "drop.mda.auth_failed",
        "drop.mda.auth_unknown_spi",
    ] {
        assert!(counter(&lab, "mda1", c) >= 1, "{c}: {}", lab.stats("mda1"));
    }
    let (_, text) = slp(&lab, "ua", 1, &["find", "service:printer"]);
    assert!(
        !text.contains(bad),
        "a refused registration was stored: {text}"
    );

    // The impostor (MDA 3 signs as "mda2" with another key) is refused
    // (its probe answers send MDAs 1 and 2 to TCP, where its signed advert
    // fails) and never peered.
    let refused_impostor = || {
        counter(&lab, "mda1", "drop.mda.advert_auth_failed")
            + counter(&lab, "mda2", "drop.mda.advert_auth_failed")
            >= 2
    };
    assert!(
        wait_until(20, refused_impostor),
        "{}\n{}",
        lab.stats("mda1"),
        lab.stats("mda2")
    );
    assert!(counter(&lab, "mda1", "drop.mda.peer_unauthenticated") >= 1);
    assert!(!peer_up(&lab, "mda1", u3) && !peer_up(&lab, "mda2", u3));
    // A signed deregistration at MDA 2 removes it everywhere.
    let (code, text) = slp(
        &lab,
        "sa",
        2,
        &[
            "--spi",
            "sa-ed",
            "--key",
            &seed,
            "deregister",
            url,
            "--mesh-fwd",
        ],
    );
    assert_eq!(code, Some(0), "{text}");
    assert!(
        wait_until(20, || {
            let (c, t) = slp(&lab, "ua", 1, &["find", "service:printer"]);
            c == Some(0) && !t.contains(url)
        }),
        "mda1 still has the deregistered service"
    );
    // Still: MDAs 1 and 2 peered, the impostor not.
    assert!(peer_up(&lab, "mda1", u2) && peer_up(&lab, "mda2", u1));
    assert!(!peer_up(&lab, "mda1", u3) && !peer_up(&lab, "mda2", u3));
    lab.down();
}

/// A UA asking MDA 1 for its DAAdvert signed with SPI `mda1` (by UDP, cut
/// short with OVERFLOW, then by TCP) verifies the block with MDA 1's public
/// key: the signature's expiry is in the future of real time.
#[test]
fn a_ua_verifies_the_signed_daadvert() {
    if !root_or_skip() {
        return;
    }
    let name = lab_name('m', 'v');
    let lab = Lab::up(&name, &lab_text(&name));
    let (code, text) = slp(
        &lab,
        "ua",
        1,
        &["--spi", "mda1", "--key", &public(&[1; 32]), "--json", "das"],
    );
    assert_eq!(code, Some(0), "{text}");
    let da = json_of(&text)["das"][0].clone();
    assert_eq!(da["verified"], true, "{text}");
    assert_eq!(da["spi_list"], "sa-ed,sa-hmac,mda1,mda2", "{text}");
    // Without --key nothing is verified; the block still comes (and a
    // request without SPI gets none).
    let (code, text) = slp(&lab, "ua", 1, &["--spi", "mda1", "--json", "das"]);
    assert_eq!(code, Some(0), "{text}");
    assert_eq!(json_of(&text)["das"][0]["auth_blocks"], 1, "{text}");
    let (_, text) = slp(&lab, "ua", 1, &["--json", "das"]);
    assert_eq!(json_of(&text)["das"][0]["auth_blocks"], 0, "{text}");
    lab.down();
}
