//! `--spi`, `--bsd`, `--key`: signing registrations, checking the blocks
//! of replies (RFC 2608 §8.5, §9.2.1), and `svcroute slp keygen`.

use serde_json::{json, Value};
use svcroute_stack::wire::slp::auth::{
    bsd_from_name, bsd_name, ed25519_public, key_from_text, random_key, spi_ok, to_hex,
};
use svcroute_stack::wire::slp::{AuthBlocks, Bsd, Signed, Signer, SlpString, Verifier};

use super::args::Common;
use super::clock::now_since_1970;
use super::fail::{input, Fail};

/// `--spi`, `--bsd`, `--key`, `--auth-lifetime`.
pub(super) struct Auth {
    pub(super) spi: SlpString,
    pub(super) bsd: Bsd,
    /// The key's octets, if `--key` was given.
    pub(super) key: Option<Vec<u8>>,
    pub(super) lifetime: Option<u32>,
}

impl Auth {
    pub(super) fn new(c: &Common) -> Result<Option<Self>, Fail> {
        let Some(spi) = &c.spi else {
            if c.key.is_some() || c.auth_lifetime.is_some() {
                return Err(input("--key and --auth-lifetime need --spi"));
            }
            return Ok(None);
        };
        if !spi_ok(spi) {
            return Err(input(format!(
                "bad --spi '{spi}': want a scope-like name without , ( ) \\ ! < = > ~ ; * +"
            )));
        }
        let bsd = bsd_from_name(&c.bsd).ok_or_else(|| {
            input(format!(
                "bad --bsd '{}': want ed25519 or hmac-sha256",
                c.bsd
            ))
        })?;
        let key = match &c.key {
            Some(k) => Some(key_from_text(k).map_err(|e| input(format!("bad --key: {e}")))?),
            None => None,
        };
        Ok(Some(Self {
            spi: SlpString::new(spi.clone()).map_err(|_| input("--spi too long"))?,
            bsd,
            key,
            lifetime: c.auth_lifetime,
        }))
    }

    /// The signer for a registration or deregistration.
    pub(super) fn signer(&self) -> Result<Signer, Fail> {
        let Some(key) = &self.key else {
            return Err(input(
                "--spi on register/deregister signs: give the signing key with --key",
            ));
        };
        Signer::new(&self.spi, self.bsd, key).map_err(|e| input(format!("bad --key: {e}")))
    }

    /// The verifier for replies, if `--key` was given.
    pub(super) fn verifier(&self) -> Result<Option<Verifier>, Fail> {
        let Some(key) = &self.key else {
            return Ok(None);
        };
        let bad = |e: svcroute_stack::wire::slp::auth::KeyError| input(format!("bad --key: {e}"));
        let v = match self.bsd {
            // A public key has 32 octets; a PKCS#8 private key gives its own.
            Bsd::Ed25519 if key.len() != 32 => {
                let pk = ed25519_public(key).map_err(bad)?;
                Verifier::new(&self.spi, self.bsd, &pk)
            }
            _ => Verifier::new(&self.spi, self.bsd, key),
        };
        v.map(Some).map_err(bad)
    }

    pub(super) fn json(&self, expires: u32) -> Value {
        json!({ "spi": self.spi.as_str(), "bsd": bsd_name(self.bsd), "expires": expires })
    }
}

/// Seconds since 1970 now, as authentication block timestamps count them.
pub(super) fn unix_now() -> u32 {
    u32::try_from(now_since_1970().as_secs()).unwrap_or(u32::MAX)
}

/// Checks replies' blocks (`--spi` with `--key`).
pub(super) struct Check {
    pub(super) verifier: Verifier,
    pub(super) now: u32,
}

impl Check {
    /// Whether one of `blocks` is a good block of our SPI for `what`.
    pub(super) fn good(&self, blocks: &AuthBlocks, what: &Signed<'_>) -> bool {
        blocks
            .iter()
            .any(|b| self.verifier.verify(what, b, self.now).is_ok())
    }
}

/// Whether a reply's item passes `--key` verification: `None` without a
/// key; a failing item is dropped with a warning (RFC 2608 §8.5: a UA that
/// can verify MUST discard what fails).
pub(super) fn verified(
    check: Option<&Check>,
    blocks: &AuthBlocks,
    what: &Signed<'_>,
    name: &str,
) -> Option<bool> {
    let c = check?;
    let good = c.good(blocks, what);
    if !good {
        eprintln!(
            "svcroute: slp: warning: {name}: no good authentication block for SPI {}, dropped",
            c.verifier.spi()
        );
    }
    Some(good)
}

/// `svcroute slp keygen`: fresh key material as key text.
pub(super) fn keygen(c: &Common, out: Option<&std::path::Path>) -> Result<(), Fail> {
    let bsd = bsd_from_name(&c.bsd).ok_or_else(|| {
        input(format!(
            "bad --bsd '{}': want ed25519 or hmac-sha256",
            c.bsd
        ))
    })?;
    let key = random_key().ok_or_else(|| Fail::Other("the system random source failed".into()))?;
    let private = format!("hex:{}", to_hex(&key));
    let public = match bsd {
        Bsd::Ed25519 => Some(format!(
            "hex:{}",
            to_hex(&ed25519_public(&key).map_err(|e| Fail::Other(e.to_string()))?)
        )),
        _ => None,
    };
    if let Some(path) = out {
        use std::io::Write as _;
        use std::os::unix::fs::OpenOptionsExt as _;
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)
            .map_err(|e| Fail::Other(format!("{}: {e}", path.display())))?;
        writeln!(f, "{private}").map_err(|e| Fail::Other(format!("{}: {e}", path.display())))?;
    }
    let shown_private = match out {
        Some(p) => format!("file:{}", p.display()),
        None => private,
    };
    if c.json {
        outln!(
            "{}",
            json!({ "bsd": bsd_name(bsd), "private": shown_private, "public": public })
        );
    } else {
        outln!("bsd: {}", bsd_name(bsd));
        outln!("private: {shown_private}");
        if let Some(p) = public {
            outln!("public: {p}");
        }
    }
    Ok(())
}
