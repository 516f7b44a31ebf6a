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
}
