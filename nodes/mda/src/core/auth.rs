//! The MDA's keys (RFC 2608 §9.2, SPEC §4) and the authentication rules
//! for SAs' updates (RFC 2608 §7, §8.3, §9.3, §10.6, §12.5) and peers'
//! DAAdverts (RFC 3528 §8).
//!
//! Keys come from configuration (`[[mda.keys]]`, `[[mda.sign_keys]]`): an
//! SLP SPI, a BSD (`hmac-sha256` or `ed25519`) and key text (`hex:…`,
//! `base64:…`, `file:PATH`; see `wire::slp::auth::key_from_text`). They are
//! checked when the configuration is read, so a bad one names its list and
//! SPI before the node starts.
//!
//! A verification key *admits* SAs (a SrvReg/SrvDeReg with a good block by
//! it is accepted), peers (a DAAdvert with a good block by it may start a
//! peering), or both. As soon as one key admits SAs, every SrvReg and
//! SrvDeReg from an SA must carry good URL (and, for a SrvReg, attribute)
//! blocks; as soon as one admits peers, every DAAdvert we act on must carry
//! a good block by such a key.

use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use svcroute_stack::wire::slp::auth::{
    bsd_from_name, key_from_text, KeyError, Signed, VerifyError,
};
use svcroute_stack::wire::slp::{
    AuthBlock, AuthBlocks, Bsd, DaAdvert, ErrorCode, Signer, SlpString, SrvDeReg, SrvReg, Verifier,
};

use super::store::Reg;
use crate::config::ConfigError;

/// What a good block by a verification key admits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Admit {
    /// SrvReg / SrvDeReg from service agents.
    Sa,
    /// DAAdverts of would-be mesh peers.
    Peer,
}

/// A `[[mda.keys]]` entry as written in the configuration (its `Debug`
/// hides the key text).
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeyEntry {
    /// The SLP SPI (RFC 2608 §9.2): a scope-like name.
    pub spi: String,
    /// `hmac-sha256` (BSD 0x8001) or `ed25519` (BSD 0x8002).
    pub bsd: String,
    /// The HMAC secret or the Ed25519 public key, as key text.
    pub key: String,
    /// What a good block by this key admits: `"sa"`, `"peer"`, or both.
    pub admits: Vec<Admit>,
}

impl fmt::Debug for KeyEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyEntry")
            .field("spi", &self.spi)
            .field("bsd", &self.bsd)
            .field("admits", &self.admits)
            .finish_non_exhaustive()
    }
}

impl fmt::Debug for SignKeyEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SignKeyEntry")
            .field("spi", &self.spi)
            .field("bsd", &self.bsd)
            .finish_non_exhaustive()
    }
}

/// A key this MDA verifies blocks with: a checked [`KeyEntry`].
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(try_from = "KeyEntry", into = "KeyEntry")]
pub struct VerifyKey {
    entry: KeyEntry,
    verifier: Verifier,
}

impl VerifyKey {
    /// A key for `spi` (`bsd` by name, `key` as key text) admitting `admits`.
    pub fn new(spi: &str, bsd: &str, key: &str, admits: &[Admit]) -> Result<Self, ConfigError> {
        Self::try_from(KeyEntry {
            spi: spi.to_owned(),
            bsd: bsd.to_owned(),
            key: key.to_owned(),
            admits: admits.to_vec(),
        })
    }

    /// The SPI.
    pub const fn spi(&self) -> &SlpString {
        self.verifier.spi()
    }

    /// The verifier.
    pub const fn verifier(&self) -> &Verifier {
        &self.verifier
    }

    /// Whether a good block by this key admits `what`.
    pub fn admits(&self, what: Admit) -> bool {
        self.entry.admits.contains(&what)
    }
}

fn key_error(list: &'static str, spi: &str, problem: impl ToString) -> ConfigError {
    ConfigError::Key {
        list,
        spi: spi.to_owned(),
        problem: problem.to_string(),
    }
}

fn bsd_of(list: &'static str, spi: &str, bsd: &str) -> Result<Bsd, ConfigError> {
    bsd_from_name(bsd).ok_or_else(|| {
        key_error(
            list,
            spi,
            format!("bsd {bsd:?}: want \"hmac-sha256\" or \"ed25519\""),
        )
    })
}

impl TryFrom<KeyEntry> for VerifyKey {
    type Error = ConfigError;

    fn try_from(entry: KeyEntry) -> Result<Self, ConfigError> {
        const LIST: &str = "keys";
        let bsd = bsd_of(LIST, &entry.spi, &entry.bsd)?;
        let octets = key_from_text(&entry.key)
            .map_err(|e| key_error(LIST, &entry.spi, format!("key: {e}")))?;
        let verifier = Verifier::new(&entry.spi, bsd, &octets).map_err(|e| {
            key_error(
                LIST,
                &entry.spi,
                match e {
                    KeyError::Spi(_) => e.to_string(),
                    _ => format!("key: {e}"),
                },
            )
        })?;
        if entry.admits.is_empty() {
            return Err(key_error(
                LIST,
                &entry.spi,
                "admits: name \"sa\" and/or \"peer\"",
            ));
        }
        Ok(Self { entry, verifier })
    }
}

impl From<VerifyKey> for KeyEntry {
    fn from(k: VerifyKey) -> Self {
        k.entry
    }
}

/// A `[[mda.sign_keys]]` entry as written in the configuration (its
/// `Debug` hides the key text).
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SignKeyEntry {
    /// The SLP SPI.
    pub spi: String,
    /// `hmac-sha256` or `ed25519`.
    pub bsd: String,
    /// The HMAC secret, or the Ed25519 private key (32-octet seed or PKCS#8).
    pub key: String,
}

/// A key this MDA signs its DAAdverts with: a checked [`SignKeyEntry`].
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(try_from = "SignKeyEntry", into = "SignKeyEntry")]
pub struct SignKey {
    entry: SignKeyEntry,
    signer: Arc<Signer>,
}

impl SignKey {
    /// A signing key for `spi` (`bsd` by name, `key` as key text).
    pub fn new(spi: &str, bsd: &str, key: &str) -> Result<Self, ConfigError> {
        Self::try_from(SignKeyEntry {
            spi: spi.to_owned(),
            bsd: bsd.to_owned(),
            key: key.to_owned(),
        })
    }

    /// The signer.
    pub fn signer(&self) -> &Signer {
        &self.signer
    }
}

impl TryFrom<SignKeyEntry> for SignKey {
    type Error = ConfigError;

    fn try_from(entry: SignKeyEntry) -> Result<Self, ConfigError> {
        const LIST: &str = "sign_keys";
        let bsd = bsd_of(LIST, &entry.spi, &entry.bsd)?;
        let octets = key_from_text(&entry.key)
            .map_err(|e| key_error(LIST, &entry.spi, format!("key: {e}")))?;
        let signer = Signer::new(&entry.spi, bsd, &octets).map_err(|e| {
            key_error(
                LIST,
                &entry.spi,
                match e {
                    KeyError::Spi(_) => e.to_string(),
                    _ => format!("key: {e}"),
                },
            )
        })?;
        Ok(Self {
            entry,
            signer: Arc::new(signer),
        })
    }
}

impl From<SignKey> for SignKeyEntry {
    fn from(k: SignKey) -> Self {
        k.entry
    }
}

/// `[[mda.keys]]`: verification keys with distinct SPIs.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(try_from = "Vec<VerifyKey>", into = "Vec<VerifyKey>")]
pub struct KeyList(Vec<VerifyKey>);

impl KeyList {
    /// `keys`, or [`ConfigError::Key`] if two share an SPI.
    pub fn new(keys: Vec<VerifyKey>) -> Result<Self, ConfigError> {
        Self::try_from(keys)
    }

    /// The keys.
    pub fn keys(&self) -> &[VerifyKey] {
        &self.0
    }
}

impl TryFrom<Vec<VerifyKey>> for KeyList {
    type Error = ConfigError;

    fn try_from(keys: Vec<VerifyKey>) -> Result<Self, ConfigError> {
        for (i, k) in keys.iter().enumerate() {
            if keys[..i].iter().any(|o| o.spi() == k.spi()) {
                return Err(key_error("keys", k.spi(), "a second key with this SPI"));
            }
        }
        Ok(Self(keys))
    }
}

impl From<KeyList> for Vec<VerifyKey> {
    fn from(k: KeyList) -> Self {
        k.0
    }
}

/// `[[mda.sign_keys]]`: signing keys with distinct SPIs.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(try_from = "Vec<SignKey>", into = "Vec<SignKey>")]
pub struct SignKeyList(Vec<SignKey>);

impl SignKeyList {
    /// `keys`, or [`ConfigError::Key`] if two share an SPI.
    pub fn new(keys: Vec<SignKey>) -> Result<Self, ConfigError> {
        Self::try_from(keys)
    }

    /// The keys.
    pub fn keys(&self) -> &[SignKey] {
        &self.0
    }
}

impl TryFrom<Vec<SignKey>> for SignKeyList {
    type Error = ConfigError;

    fn try_from(keys: Vec<SignKey>) -> Result<Self, ConfigError> {
        for (i, k) in keys.iter().enumerate() {
            if keys[..i]
                .iter()
                .any(|o| o.signer().spi() == k.signer().spi())
            {
                return Err(key_error(
                    "sign_keys",
                    k.signer().spi(),
                    "a second key with this SPI",
                ));
            }
        }
        Ok(Self(keys))
    }
}

impl From<SignKeyList> for Vec<SignKey> {
    fn from(k: SignKeyList) -> Self {
        k.0
    }
}

/// The keys as the core uses them.
#[derive(Debug, Clone, Default)]
pub struct Keys {
    /// Verification keys.
    pub verify: KeyList,
    /// Signing keys (DAAdverts).
    pub sign: SignKeyList,
}

impl Keys {
    /// The verifier of `spi` if its key admits `what`.
    pub(super) fn verifier(&self, spi: &str, what: Admit) -> Option<&Verifier> {
        self.verify
            .keys()
            .iter()
            .find(|k| k.spi().as_str() == spi && k.admits(what))
            .map(VerifyKey::verifier)
    }

    /// Whether we can verify blocks of `spi` (it is in our SPI list).
    pub(super) fn knows(&self, spi: &str) -> bool {
        self.verify.keys().iter().any(|k| k.spi().as_str() == spi)
    }

    /// Whether SAs must authenticate their updates.
    pub(super) fn sa_required(&self) -> bool {
        self.verify.keys().iter().any(|k| k.admits(Admit::Sa))
    }

    /// Whether peers must authenticate their DAAdverts.
    pub(super) fn peer_required(&self) -> bool {
        self.verify.keys().iter().any(|k| k.admits(Admit::Peer))
    }

    /// Our DAAdvert's SLP SPI list: every SPI we can verify.
    pub(super) fn spi_list(&self) -> String {
        let spis: Vec<&str> = self
            .verify
            .keys()
            .iter()
            .map(|k| k.spi().as_str())
            .collect();
        spis.join(",")
    }

    /// The signer of `spi`.
    pub(super) fn signer(&self, spi: &str) -> Option<&Signer> {
        self.sign
            .keys()
            .iter()
            .map(SignKey::signer)
            .find(|s| s.spi().as_str() == spi)
    }

    /// Every signer.
    pub(super) fn signers(&self) -> impl Iterator<Item = &Signer> {
        self.sign.keys().iter().map(SignKey::signer)
    }

    /// Check every block in `blocks` against `what` (SA keys only).
    fn check_blocks(
        &self,
        blocks: &AuthBlocks,
        what: &Signed<'_>,
        now: u32,
    ) -> Result<(), Refusal> {
        for b in blocks {
            let Some(v) = self.verifier(b.spi(), Admit::Sa) else {
                return Err(Refusal::UnknownSpi);
            };
            match v.verify(what, b, now) {
                Ok(()) => {}
                Err(VerifyError::Expired) => return Err(Refusal::Expired),
                Err(VerifyError::Bsd) => return Err(Refusal::WrongBsd),
                Err(VerifyError::Spi | VerifyError::Authenticator) => return Err(Refusal::Failed),
            }
        }
        Ok(())
    }

    /// The authentication rules for an SA's SrvReg (RFC 2608 §8.3, §9.3,
    /// §12.5) at `now` (seconds since 1970); `live` is the registration it
    /// would replace or update.
    pub(super) fn check_reg(
        &self,
        r: &SrvReg,
        fresh: bool,
        live: Option<&Reg>,
        now: u32,
    ) -> Result<(), Refusal> {
        self.check_blocks(&r.entry.auths, &Signed::Url(&r.entry.url), now)?;
        self.check_blocks(&r.attr_auths, &Signed::Attrs(&r.attrs), now)?;
        let signed = !r.entry.auths.is_empty() || !r.attr_auths.is_empty();
        if !fresh {
            // §9.3: no incremental updates of signed registrations, and an
            // incremental update cannot carry a signature over all attributes.
            if signed || live.is_some_and(|o| !o.url_auths.is_empty()) {
                return Err(Refusal::Incremental);
            }
            if self.sa_required() {
                return Err(Refusal::Absent);
            }
            return Ok(());
        }
        // Every SPI signs both the URL and the attribute list.
        let url_spis = spis(&r.entry.auths);
        if url_spis != spis(&r.attr_auths) {
            return Err(Refusal::Absent);
        }
        if self.sa_required() && url_spis.is_empty() {
            return Err(Refusal::Absent);
        }
        // §8.3: the same SPIs as the registration it replaces.
        if let Some(o) = live {
            if spis(&o.url_auths).iter().any(|s| !url_spis.contains(s)) {
                return Err(Refusal::MissingSpi);
            }
        }
        Ok(())
    }

    /// The rules for an SA's SrvDeReg (RFC 2608 §10.6).
    pub(super) fn check_dereg(
        &self,
        r: &SrvDeReg,
        live: Option<&Reg>,
        now: u32,
    ) -> Result<(), Refusal> {
        self.check_blocks(&r.entry.auths, &Signed::Url(&r.entry.url), now)?;
        let signed_reg = live.is_some_and(|o| !o.url_auths.is_empty());
        if !r.tags.is_empty() && signed_reg {
            return Err(Refusal::Incremental);
        }
        if let Some(o) = live {
            let have = spis(&r.entry.auths);
            if spis(&o.url_auths).iter().any(|s| !have.contains(s)) {
                return Err(Refusal::MissingSpi);
            }
        }
        if self.sa_required() && r.entry.auths.is_empty() {
            return Err(Refusal::Absent);
        }
        Ok(())
    }

    /// Whether a DAAdvert may be acted on when peers must authenticate: a
    /// good, unexpired block by a key admitting peers. `Err` is the counter.
    pub(super) fn check_advert(&self, a: &DaAdvert, now: u32) -> Result<(), &'static str> {
        if !self.peer_required() {
            return Ok(());
        }
        let mut any = false;
        for b in &a.auths {
            if let Some(v) = self.verifier(b.spi(), Admit::Peer) {
                any = true;
                if v.verify(&Signed::da_advert(a), b, now).is_ok() {
                    return Ok(());
                }
            }
        }
        Err(if any {
            "drop.mda.advert_auth_failed"
        } else {
            "drop.mda.advert_auth_absent"
        })
    }
}

/// The SPIs of `blocks`, sorted, without repeats.
fn spis(blocks: &AuthBlocks) -> Vec<&str> {
    let mut v: Vec<&str> = blocks.iter().map(|b| b.spi().as_str()).collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// Why an SA's SrvReg or SrvDeReg is refused for authentication.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum Refusal {
    /// A block names an SPI we have no SA key for.
    UnknownSpi,
    /// A block does not verify.
    Failed,
    /// A block's BSD is not its key's.
    WrongBsd,
    /// A block's authenticator expired.
    Expired,
    /// No blocks where they are required (or URL and attribute blocks
    /// for different SPIs).
    Absent,
    /// The update lacks a block for an SPI the registration was made with.
    MissingSpi,
    /// An incremental update or partial deregistration of a signed
    /// registration, or a signed incremental update.
    Incremental,
}

impl Refusal {
    /// The code the SA gets (RFC 2608 §7): the single mapping.
    pub(super) const fn code(self) -> ErrorCode {
        match self {
            Self::UnknownSpi => ErrorCode::AuthenticationUnknown,
            Self::Absent | Self::MissingSpi => ErrorCode::AuthenticationAbsent,
            Self::Failed | Self::WrongBsd | Self::Expired | Self::Incremental => {
                ErrorCode::AuthenticationFailed
            }
        }
    }

    /// The counter of the refusal.
    pub(super) const fn counter(self) -> &'static str {
        match self {
            Self::UnknownSpi => "drop.mda.auth_unknown_spi",
            Self::Failed => "drop.mda.auth_failed",
            Self::WrongBsd => "drop.mda.auth_wrong_bsd",
            Self::Expired => "drop.mda.auth_expired",
            Self::Absent => "drop.mda.auth_absent",
            Self::MissingSpi => "drop.mda.auth_missing_spi",
            Self::Incremental => "drop.mda.auth_incremental",
        }
    }
}

/// The block of `spi` among `blocks`.
pub(super) fn block_of<'a>(blocks: &'a AuthBlocks, spi: &str) -> Option<&'a AuthBlock> {
    blocks.iter().find(|b| b.spi().as_str() == spi)
}
