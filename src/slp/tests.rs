//! Unit tests of the client: argument parsing, groups, times, keys.

use super::args::*;
use super::auth::*;
use super::clock::*;
use super::ctx::*;
use super::fail::*;
use super::net::{Net, Timing};

use std::time::Duration;

use svcroute_stack::wire::slp::auth::{ed25519_public, to_hex};
use svcroute_stack::wire::slp::{AuthBlocks, Bsd, LangTag, Signed, Signer, SlpString};

#[test]
fn rfc3111_hash() {
    // RFC 3111 §4.2.1: slp_hash("service:service-agent") = 0x01d8.
    assert_eq!(slp_hash("service:service-agent"), 0x01d8);
    assert_eq!(slp_hash(""), 0);
}

#[test]
fn agents() {
    assert_eq!(
        parse_agent("10.0.0.1").unwrap(),
        "10.0.0.1:427".parse().unwrap()
    );
    assert_eq!(
        parse_agent("10.0.0.1:4270").unwrap(),
        "10.0.0.1:4270".parse().unwrap()
    );
    assert_eq!(
        parse_agent("fd00::1").unwrap(),
        "[fd00::1]:427".parse().unwrap()
    );
    assert_eq!(
        parse_agent("[fd00::1]").unwrap(),
        "[fd00::1]:427".parse().unwrap()
    );
    assert!(parse_agent("10.0.0.1:99999").is_err());
    assert!(parse_agent("10.0.0.1:notaport").is_err());
}

#[test]
fn times() {
    assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
    assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
    assert_eq!(rfc3339(1_700_000_000), "2023-11-14T22:13:20Z");
    assert_eq!(
        micros_since_1900(Duration::from_secs(1)),
        (SECS_1900_TO_1970 + 1) * 1_000_000
    );
}

#[test]
fn v6_groups() {
    let c = Ctx {
        net: Net {
            timing: Timing {
                retry: Duration::from_secs(2),
                max: Duration::from_secs(15),
            },
            bind: None,
            force_tcp: false,
            ttl: 255,
        },
        dest: Dest::Das(vec![]),
        lang: LangTag::en(),
        scopes: None,
        json: false,
        next_xid: std::cell::Cell::new(1),
        auth: None,
    };
    let g = |k| c.group(Some((5, 0)), None, &k).to_string();
    assert_eq!(g(GroupFor::DaDiscovery), "[ff05::123]:427");
    assert_eq!(g(GroupFor::Svrloc), "[ff05::116]:427");
    assert_eq!(
        g(GroupFor::SrvRqst("service:service-agent")),
        "[ff05::1:11d8]:427"
    );
    assert_eq!(
        c.group(None, None, &GroupFor::Svrloc).to_string(),
        "239.255.255.253:427"
    );
}

#[derive(clap::Parser)]
struct Cli {
    #[command(flatten)]
    args: SlpArgs,
}

fn ctx_of(argv: &[&str]) -> Result<Ctx, Fail> {
    use clap::Parser as _;
    let mut full = vec!["slp", "--da", "127.0.0.1"];
    full.extend_from_slice(argv);
    Ctx::new(&Cli::try_parse_from(full).unwrap().args.common)
}

#[test]
fn auth_options_are_checked_and_named() {
    use clap::Parser as _;
    for (argv, want) in [
        (&["--spi", "a,b", "find", "x"][..], "--spi"),
        (&["--spi", "k", "--bsd", "dsa", "find", "x"][..], "--bsd"),
        (
            &["--spi", "k", "--key", "hex:zz", "find", "x"][..],
            "bad --key",
        ),
        (
            &["--spi", "k", "--key", "0011", "find", "x"][..],
            "hex:, base64: or file:",
        ),
    ] {
        let e = ctx_of(argv).err().expect("refused");
        assert_eq!(e.exit_code(), 2);
        assert!(e.to_string().contains(want), "{argv:?}: {e}");
    }
    // --key needs --spi (clap), --auth-lifetime too (ours).
    assert!(Cli::try_parse_from(["slp", "--key", "hex:00", "find", "x"]).is_err());
    assert!(ctx_of(&["--auth-lifetime", "5", "find", "x"]).is_err());
    // Signing needs a key; a short HMAC secret is refused when used.
    let c = ctx_of(&["--spi", "k", "find", "x"]).unwrap();
    assert!(c.auth.as_ref().unwrap().signer().is_err());
    let c = ctx_of(&[
        "--spi",
        "k",
        "--bsd",
        "hmac-sha256",
        "--key",
        "hex:00",
        "find",
        "x",
    ])
    .unwrap();
    let e = c.auth.as_ref().unwrap().signer().unwrap_err();
    assert!(e.to_string().contains("at least 16"), "{e}");
    assert_eq!(c.spi().as_str(), "k");
}

#[test]
fn replies_are_verified_with_the_key() {
    let seed = [4; 32];
    let signer = Signer::new("k", Bsd::Ed25519, &seed).unwrap();
    let url = SlpString::new("service:x://h").unwrap();
    let mut blocks = AuthBlocks::default();
    blocks
        .push(signer.sign(&Signed::Url(&url), u32::MAX))
        .unwrap();
    // The public key, or the private key (its public half is derived
    // unless it is a 32-octet seed, which reads as a public key).
    let public = format!("hex:{}", to_hex(&ed25519_public(&seed).unwrap()));
    let c = ctx_of(&["--spi", "k", "--key", &public, "find", "x"]).unwrap();
    let check = c.check().unwrap().unwrap();
    assert_eq!(
        verified(Some(&check), &blocks, &Signed::Url(&url), "u"),
        Some(true)
    );
    let other = SlpString::new("service:x://evil").unwrap();
    assert_eq!(
        verified(Some(&check), &blocks, &Signed::Url(&other), "u"),
        Some(false)
    );
    assert_eq!(
        verified(
            Some(&check),
            &AuthBlocks::default(),
            &Signed::Url(&url),
            "u"
        ),
        Some(false)
    );
    assert_eq!(verified(None, &blocks, &Signed::Url(&url), "u"), None);
    // No --key: nothing to check with.
    let c = ctx_of(&["--spi", "k", "find", "x"]).unwrap();
    assert!(c.check().unwrap().is_none());
}

#[test]
fn bad_input_is_named() {
    for (r, want) in [
        (parse_url("nourl").map(|_| ()), "nourl"),
        (parse_url("service:x:// h").map(|_| ()), "white space"),
        (parse_attrs("(a=1").map(|_| ()), "(a=1"),
        (parse_attrs("(a=1,true)").map(|_| ()), "mixes"),
        (parse_predicate("(a=1").map(|_| ()), "(a=1"),
        (parse_scopes("a,,b").map(|_| ()), "a,,b"),
        (parse_tags("a,,b").map(|_| ()), "a,,b"),
    ] {
        let e = r.unwrap_err();
        assert_eq!(e.exit_code(), 2);
        assert!(e.to_string().contains(want), "{e}");
    }
    assert!(parse_url("service:printer:lpr://p.example:515/q").is_ok());
    assert!(parse_url("http://example.org/").is_ok());
}
