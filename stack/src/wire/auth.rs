//! Message authentication shared by our wire formats (SPEC §0): HMAC-SHA256
//! with a pre-shared key named by a `key_id` octet, the tag truncated to
//! [`AUTH_TAG_LEN`] octets.
//!
//! Each format decides *what* it signs (NR: the GFF type and the message
//! without its tag; ROSA: the first option octet, every other entry and, for
//! announcements, the source address; the SAR IGP: the envelope header and
//! the postcard body); this module only computes and compares tags, over a
//! list of byte strings fed to the MAC in order.

use ring::hmac;

/// Octets of an HMAC-SHA256 tag as we carry it (SPEC §0).
pub const AUTH_TAG_LEN: usize = 16;

/// An auth tag as carried on the wire: which pre-shared key, and the
/// truncated HMAC-SHA256.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AuthTag {
    /// The key's ID from config.
    pub key_id: u8,
    /// HMAC-SHA256 truncated to 16 octets.
    pub tag: [u8; AUTH_TAG_LEN],
}

impl AuthTag {
    /// The tag of `parts` (concatenated in order) under `secret`, labelled
    /// with `key_id`.
    pub fn sign(key_id: u8, secret: &[u8], parts: &[&[u8]]) -> Self {
        let key = hmac::Key::new(hmac::HMAC_SHA256, secret);
        let mut ctx = hmac::Context::with_key(&key);
        for part in parts {
            ctx.update(part);
        }
        let full = ctx.sign();
        let mut tag = [0; AUTH_TAG_LEN];
        tag.copy_from_slice(&full.as_ref()[..AUTH_TAG_LEN]);
        Self { key_id, tag }
    }

    /// Whether both tags are equal, compared without an early exit.
    pub fn ct_eq(&self, other: &Self) -> bool {
        let diff = self
            .tag
            .iter()
            .zip(&other.tag)
            .fold(0, |acc, (a, b)| acc | (a ^ b));
        diff == 0 && self.key_id == other.key_id
    }

    /// Check this received tag against `parts`, with the secret `secret_for`
    /// returns for its key ID.
    pub fn check<'k>(
        &self,
        secret_for: impl FnOnce(u8) -> Option<&'k [u8]>,
        parts: &[&[u8]],
    ) -> AuthCheck {
        let Some(secret) = secret_for(self.key_id) else {
            return AuthCheck::UnknownKey(self.key_id);
        };
        if Self::sign(self.key_id, secret, parts).ct_eq(self) {
            AuthCheck::Good(self.key_id)
        } else {
            AuthCheck::Bad(self.key_id)
        }
    }
}

/// What a verification found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AuthCheck {
    /// No auth tag.
    Unsigned,
    /// A tag with a key ID we have no secret for.
    UnknownKey(u8),
    /// A tag that does not match.
    Bad(u8),
    /// A good tag by this key.
    Good(u8),
}

impl AuthCheck {
    /// Whether the message carried a good tag.
    pub const fn is_good(self) -> bool {
        matches!(self, Self::Good(_))
    }
}

/// One pre-shared key of `[[nr.key]]` and `[[nsff.key]]` (SPEC §0).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeyConfig {
    /// The key ID carried in auth tags.
    pub id: u8,
    /// The shared secret: its UTF-8 octets, or (with `hex`) the octets
    /// its hex digits spell.
    pub secret: String,
    /// `secret` is hex (what `svcroute lab` writes: the same octets as a
    /// fwd node's `auth.secret`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub hex: bool,
}

impl KeyConfig {
    /// The secret's octets; `None` for empty or bad hex.
    pub fn bytes(&self) -> Option<Vec<u8>> {
        let b = if self.hex {
            let t = self.secret.as_bytes();
            if t.len() % 2 != 0 {
                return None;
            }
            t.chunks(2)
                .map(|c| {
                    core::str::from_utf8(c)
                        .ok()
                        .and_then(|h| u8::from_str_radix(h, 16).ok())
                })
                .collect::<Option<Vec<u8>>>()?
        } else {
            self.secret.as_bytes().to_vec()
        };
        (!b.is_empty()).then_some(b)
    }

    /// `(id, secret)` pairs of `keys`, or the ID of the first bad one.
    pub fn pairs(keys: &[Self]) -> Result<Vec<(u8, Vec<u8>)>, u8> {
        let mut ids = std::collections::BTreeSet::new();
        keys.iter()
            .map(|k| match k.bytes() {
                Some(b) if ids.insert(k.id) => Ok((k.id, b)),
                _ => Err(k.id),
            })
            .collect()
    }
}

/// Sequence numbers for replay protection **\[ext\]**: a sender's clock in
/// microseconds since the UNIX epoch, strictly increasing (one more than
/// the last when the clock has not moved). A restarted sender starts above
/// what it sent before, so its receivers need no state from it.
///
/// Sans-IO: [`Sequencer::new`] takes the wall clock once (the driver reads
/// it), [`Sequencer::next`] the node's monotonic time since then.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sequencer {
    epoch_us: u64,
    last: u64,
}

impl Sequencer {
    /// A sequencer whose monotonic time 0 is `epoch_us` on the wall clock.
    pub const fn new(epoch_us: u64) -> Self {
        Self { epoch_us, last: 0 }
    }

    /// The next sequence number at monotonic time `mono_us`.
    pub fn next(&mut self, mono_us: u64) -> u64 {
        let s = self
            .epoch_us
            .saturating_add(mono_us)
            .max(self.last.saturating_add(1));
        self.last = s;
        s
    }
}

/// What a [`ReplayGuard`] found about a (sender, sequence number).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Freshness {
    /// Not seen before and within the age limit: act on it.
    Fresh,
    /// Seen before, or below the sender's window: a replay.
    Replayed,
    /// Older than the age limit.
    Stale,
    /// Further ahead of our clock than the age limit.
    Future,
    /// A new sender while the table is full of live ones.
    SendersFull,
}

/// Default age limit of a sequence number, s.
pub const DEFAULT_MAX_AGE_S: u64 = 60;
/// Default sequence numbers remembered per sender (reordering tolerated).
pub const DEFAULT_WINDOW: usize = 64;
/// Default senders tracked.
pub const DEFAULT_MAX_SENDERS: usize = 1024;

/// Replay protection for authenticated messages **\[ext\]**: per sender,
/// the last `window` sequence numbers accepted; a number seen before or
/// below that window is a replay, one further than `max_age` from our
/// clock is stale (or from the future). Consult it only for messages whose
/// tag checked good, so that forgeries cannot move a window.
///
/// A guard that restarts forgets its windows: a message captured less than
/// `max_age` before can then be played once more (docs/security.md).
#[derive(Debug, Clone)]
pub struct ReplayGuard {
    epoch_us: u64,
    max_age_us: u64,
    window: usize,
    max_senders: usize,
    seen: std::collections::BTreeMap<u16, std::collections::BTreeSet<u64>>,
}

impl ReplayGuard {
    /// A guard whose monotonic time 0 is `epoch_us` on the wall clock, with
    /// the default limits.
    pub fn new(epoch_us: u64) -> Self {
        Self::with_limits(
            epoch_us,
            DEFAULT_MAX_AGE_S,
            DEFAULT_WINDOW,
            DEFAULT_MAX_SENDERS,
        )
    }

    /// A guard with an age limit of `max_age_s`, `window` numbers per sender
    /// (at least 1) and at most `max_senders` senders.
    pub fn with_limits(epoch_us: u64, max_age_s: u64, window: usize, max_senders: usize) -> Self {
        Self {
            epoch_us,
            max_age_us: max_age_s.saturating_mul(1_000_000),
            window: window.max(1),
            max_senders,
            seen: std::collections::BTreeMap::new(),
        }
    }

    /// Whether `seq` from `sender` is fresh at monotonic time `mono_us`;
    /// a fresh one is remembered.
    pub fn check(&mut self, mono_us: u64, sender: u16, seq: u64) -> Freshness {
        let wall = self.epoch_us.saturating_add(mono_us);
        if seq.saturating_add(self.max_age_us) < wall {
            return Freshness::Stale;
        }
        if seq > wall.saturating_add(self.max_age_us) {
            return Freshness::Future;
        }
        if !self.seen.contains_key(&sender) && self.seen.len() >= self.max_senders {
            // Senders whose newest number is stale can be forgotten: all
            // they ever sent is refused as stale anyway.
            let horizon = wall.saturating_sub(self.max_age_us);
            self.seen
                .retain(|_, s| s.last().is_some_and(|&top| top >= horizon));
            if self.seen.len() >= self.max_senders {
                return Freshness::SendersFull;
            }
        }
        let w = self.seen.entry(sender).or_default();
        if w.contains(&seq) || (w.len() >= self.window && w.first().is_some_and(|&f| seq < f)) {
            return Freshness::Replayed;
        }
        w.insert(seq);
        while w.len() > self.window {
            w.pop_first();
        }
        Freshness::Fresh
    }

    /// Senders tracked.
    pub fn senders(&self) -> usize {
        self.seen.len()
    }
}

/// Why an authenticated message family refused a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reject {
    /// Keys are configured and the message has no tag.
    Unsigned,
    /// The tag names a key we do not have.
    UnknownKey,
    /// The tag does not match.
    Bad,
    /// A good tag but no sequence number.
    Unsequenced,
    /// A replay ([`Freshness::Replayed`]).
    Replayed,
    /// [`Freshness::Stale`].
    Stale,
    /// [`Freshness::Future`].
    Future,
    /// [`Freshness::SendersFull`].
    SendersFull,
    /// Too short for its trailer, or not parseable.
    Malformed,
}

impl Reject {
    /// The counter suffix: `drop.<role>_<suffix>`.
    pub const fn suffix(self) -> &'static str {
        match self {
            Self::Unsigned => "auth_missing",
            Self::UnknownKey => "auth_unknown_key",
            Self::Bad => "auth_bad",
            Self::Unsequenced => "auth_unsequenced",
            Self::Replayed => "replayed",
            Self::Stale => "replay_stale",
            Self::Future => "replay_future",
            Self::SendersFull => "replay_senders_full",
            Self::Malformed => "auth_malformed",
        }
    }

    /// The refusal for a tag check that was not good (`None` for good).
    pub const fn from_check(c: AuthCheck) -> Option<Self> {
        match c {
            AuthCheck::Good(_) => None,
            AuthCheck::Unsigned => Some(Self::Unsigned),
            AuthCheck::UnknownKey(_) => Some(Self::UnknownKey),
            AuthCheck::Bad(_) => Some(Self::Bad),
        }
    }

    /// The refusal for a freshness that is not fresh (`None` for fresh).
    pub const fn from_freshness(f: Freshness) -> Option<Self> {
        match f {
            Freshness::Fresh => None,
            Freshness::Replayed => Some(Self::Replayed),
            Freshness::Stale => Some(Self::Stale),
            Freshness::Future => Some(Self::Future),
            Freshness::SendersFull => Some(Self::SendersFull),
        }
    }
}

/// Octets of a [`seal`] trailer: `sender:u16 seq:u64 key_id:u8 tag:16`.
pub const TRAILER_LEN: usize = 2 + 8 + 1 + AUTH_TAG_LEN;

/// Append an authentication trailer **\[ext\]** to `payload`, a message
/// of the one-octet type `msg_type` with no room for TLVs (the nSFF
/// transport): `sender:u16 seq:u64 key_id:u8` and the tag over `msg_type`
/// and everything before the tag.
pub fn seal(payload: &mut Vec<u8>, msg_type: u8, sender: u16, seq: u64, key_id: u8, secret: &[u8]) {
    payload.extend_from_slice(&sender.to_be_bytes());
    payload.extend_from_slice(&seq.to_be_bytes());
    payload.push(key_id);
    let t = AuthTag::sign(key_id, secret, &[&[msg_type], payload]);
    payload.extend_from_slice(&t.tag);
}

/// Check and strip a [`seal`] trailer: the message without it and its
/// (sender, seq) when the tag is good. The replay check is the caller's
/// ([`ReplayGuard`]), after this.
pub fn unseal<'a, 'k>(
    payload: &'a [u8],
    msg_type: u8,
    secret_for: impl FnOnce(u8) -> Option<&'k [u8]>,
) -> Result<(&'a [u8], u16, u64), Reject> {
    let Some(body_len) = payload.len().checked_sub(TRAILER_LEN) else {
        return Err(Reject::Unsigned);
    };
    let (signed, tag) = payload.split_at(payload.len() - AUTH_TAG_LEN);
    let tr = &signed[body_len..];
    let sender = u16::from_be_bytes([tr[0], tr[1]]);
    let mut s = [0; 8];
    s.copy_from_slice(&tr[2..10]);
    let seq = u64::from_be_bytes(s);
    let mut t = [0; AUTH_TAG_LEN];
    t.copy_from_slice(tag);
    let got = AuthTag {
        key_id: tr[10],
        tag: t,
    };
    match Reject::from_check(got.check(secret_for, &[&[msg_type], signed])) {
        Some(r) => Err(r),
        None => Ok((&payload[..body_len], sender, seq)),
    }
}

/// Pre-shared keys of one message family, the first signs (SPEC §0), with
/// this node's sequence numbers and its receivers' replay guard: what the
/// roles hold for the NR messages and the nSFF transport.
#[derive(Debug, Clone)]
pub struct Keyring {
    keys: Vec<(u8, Vec<u8>)>,
    sender: u16,
    seq: Sequencer,
    guard: ReplayGuard,
}

/// Sender IDs in sequence numbers: an nSFF is its nSFF ID.
pub const SENDER_NR: u16 = 0x100;
/// A fwd node is this plus its node ID.
pub const SENDER_FWD: u16 = 0x200;

impl Keyring {
    /// Keys `keys` (none: unkeyed, nothing is signed or checked), sending as
    /// `sender`, wall clock `epoch_us` at monotonic 0.
    pub fn new(keys: Vec<(u8, Vec<u8>)>, sender: u16, epoch_us: u64) -> Self {
        Self {
            keys,
            sender,
            seq: Sequencer::new(epoch_us),
            guard: ReplayGuard::new(epoch_us),
        }
    }

    /// No keys.
    pub fn none() -> Self {
        Self::new(Vec::new(), 0, 0)
    }

    /// Replace the replay guard's limits.
    #[must_use]
    pub fn with_replay_limits(mut self, max_age_s: u64, window: usize, max_senders: usize) -> Self {
        self.guard = ReplayGuard::with_limits(self.seq.epoch_us, max_age_s, window, max_senders);
        self
    }

    /// Whether keys are configured.
    pub fn is_keyed(&self) -> bool {
        !self.keys.is_empty()
    }

    /// The signing key.
    pub fn signer(&self) -> Option<(u8, &[u8])> {
        self.keys.first().map(|(i, s)| (*i, s.as_slice()))
    }

    /// The secret of key `id`.
    pub fn secret(&self, id: u8) -> Option<&[u8]> {
        self.keys
            .iter()
            .find(|(k, _)| *k == id)
            .map(|(_, s)| s.as_slice())
    }

    /// The next sequence number at monotonic `mono_us`, with our sender ID.
    pub fn next_seq(&mut self, mono_us: u64) -> (u16, u64) {
        (self.sender, self.seq.next(mono_us))
    }

    /// The replay check of an authenticated (sender, seq).
    pub fn fresh(&mut self, mono_us: u64, sender: u16, seq: u64) -> Result<(), Reject> {
        match Reject::from_freshness(self.guard.check(mono_us, sender, seq)) {
            Some(r) => Err(r),
            None => Ok(()),
        }
    }

    /// [`seal`] `payload` when keyed.
    pub fn seal_trailer(&mut self, mono_us: u64, msg_type: u8, payload: &mut Vec<u8>) {
        let Some((id, _)) = self.signer() else {
            return;
        };
        let (sender, seq) = self.next_seq(mono_us);
        let secret = self.keys[0].1.clone();
        seal(payload, msg_type, sender, seq, id, &secret);
    }

    /// When keyed, [`unseal`] `payload` and check its freshness: the
    /// message without its trailer; unkeyed, `payload` as it is.
    pub fn unseal_trailer<'a>(
        &mut self,
        mono_us: u64,
        msg_type: u8,
        payload: &'a [u8],
    ) -> Result<&'a [u8], Reject> {
        if !self.is_keyed() {
            return Ok(payload);
        }
        let keys = &self.keys;
        let (body, sender, seq) = unseal(payload, msg_type, |k| {
            keys.iter()
                .find(|(i, _)| *i == k)
                .map(|(_, s)| s.as_slice())
        })?;
        self.fresh(mono_us, sender, seq)?;
        Ok(body)
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn sign_and_check() {
        // RFC 4231 test case 2: key "Jefe", data "what do ya want for nothing?".
        let t = AuthTag::sign(7, b"Jefe", &[b"what do ya want ", b"for nothing?"]);
        assert_eq!(
            t.tag,
            [
                0x5b, 0xdc, 0xc1, 0x46, 0xbf, 0x60, 0x75, 0x4e, 0x6a, 0x04, 0x24, 0x26, 0x08, 0x95,
                0x75, 0xc7
            ]
        );
        assert_eq!(t.key_id, 7);
        let parts: [&[u8]; 1] = [b"what do ya want for nothing?"];
        assert_eq!(t.check(|_| Some(&b"Jefe"[..]), &parts), AuthCheck::Good(7));
        assert_eq!(t.check(|_| Some(&b"jefe"[..]), &parts), AuthCheck::Bad(7));
        assert_eq!(t.check(|_| None, &parts), AuthCheck::UnknownKey(7));
        assert!(AuthCheck::Good(1).is_good());
        assert!(!AuthCheck::Unsigned.is_good());
    }

    #[test]
    fn sequencer_increases_and_follows_the_clock() {
        let mut s = Sequencer::new(1_000_000);
        assert_eq!(s.next(0), 1_000_000);
        assert_eq!(s.next(0), 1_000_001);
        assert_eq!(s.next(5_000_000), 6_000_000);
        // A restarted sender starts at its (later) wall clock: above.
        assert!(Sequencer::new(7_000_000).next(0) > 6_000_000);
    }

    #[test]
    fn replay_guard_window_age_and_senders() {
        const E: u64 = 100_000_000_000;
        let mut g = ReplayGuard::with_limits(E, 60, 4, 2);
        assert_eq!(g.check(0, 1, E), Freshness::Fresh);
        assert_eq!(g.check(0, 1, E), Freshness::Replayed);
        // Another sender has its own window.
        assert_eq!(g.check(0, 2, E), Freshness::Fresh);
        // Reordering within the window is fine, once.
        for s in [E + 5, E + 3, E + 4] {
            assert_eq!(g.check(0, 1, s), Freshness::Fresh);
        }
        assert_eq!(g.check(0, 1, E + 3), Freshness::Replayed);
        // Window full (E, E+3, E+4, E+5): below it is a replay.
        assert_eq!(g.check(0, 1, E + 6), Freshness::Fresh);
        assert_eq!(g.check(0, 1, E + 1), Freshness::Replayed);
        // Age.
        assert_eq!(g.check(61_000_000, 1, E + 7), Freshness::Stale);
        assert_eq!(g.check(0, 1, E + 61_000_000), Freshness::Future);
        // Senders full while both are live; a stale one is forgotten.
        assert_eq!(g.check(0, 3, E + 8), Freshness::SendersFull);
        assert_eq!(g.check(200_000_000, 3, E + 200_000_000), Freshness::Fresh);
        assert_eq!(g.senders(), 1);
    }

    #[test]
    fn trailer_seal_unseal() {
        const E: u64 = 100_000_000_000;
        let mut a = Keyring::new(vec![(3, b"k".to_vec())], 1, E);
        let mut b = Keyring::new(vec![(3, b"k".to_vec())], 2, E);
        let mut p = b"hello".to_vec();
        a.seal_trailer(10, 1, &mut p);
        assert_eq!(p.len(), 5 + TRAILER_LEN);
        assert_eq!(b.unseal_trailer(20, 1, &p), Ok(&b"hello"[..]));
        // Replayed, retyped, altered, unsigned, unknown key.
        assert_eq!(b.unseal_trailer(30, 1, &p), Err(Reject::Replayed));
        assert_eq!(b.unseal_trailer(30, 2, &p), Err(Reject::Bad));
        let mut q = p.clone();
        q[0] ^= 1;
        assert_eq!(b.unseal_trailer(30, 1, &q), Err(Reject::Bad));
        assert_eq!(b.unseal_trailer(30, 1, b"hi"), Err(Reject::Unsigned));
        let mut c = Keyring::new(vec![(4, b"k".to_vec())], 1, E);
        let mut r = b"x".to_vec();
        c.seal_trailer(0, 1, &mut r);
        assert_eq!(b.unseal_trailer(30, 1, &r), Err(Reject::UnknownKey));
        // Unkeyed: passes through, signs nothing.
        let mut n = Keyring::none();
        let mut u = b"x".to_vec();
        n.seal_trailer(0, 1, &mut u);
        assert_eq!(u, b"x");
        assert_eq!(n.unseal_trailer(0, 1, &p), Ok(&p[..]));
    }
}
