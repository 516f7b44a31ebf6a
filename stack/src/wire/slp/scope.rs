//! Scope lists (RFC 2608 §6.4.1, §11), service types and their lists
//! (§4.1, §10.2), and naming authorities (§4.2, §10.1).
//!
//! All keep the octets they were parsed from, so a message re-emits exactly;
//! comparisons follow RFC 2608 §6.4 (escapes resolved, case and white space
//! folded).

use core::fmt;

use super::codec::{put_u16, Reader};
use super::text::{fold, is_attr_reserved, is_scope_reserved, is_ws, raw_ok, unescape_str};
use super::{ParseError, Syntax};
use crate::wire::Error;

/// One scope, as sent: reserved characters escaped (`BLDG 32`, `a\2cb`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Scope(String);

impl Scope {
    /// The scope named `name` (escaping what must be); [`Error::Malformed`]
    /// if empty, [`Error::TooLong`] if its escaped form exceeds 65535 octets.
    pub fn new(name: &str) -> Result<Self, Error> {
        if name.is_empty() {
            return Err(Error::Malformed);
        }
        let mut raw = String::with_capacity(name.len());
        super::text::escape_into(&mut raw, name, is_scope_reserved);
        if raw.len() > usize::from(u16::MAX) {
            return Err(Error::TooLong);
        }
        Ok(Self(raw))
    }

    /// `"DEFAULT"`, the scope of an unconfigured agent (RFC 2608 §11).
    pub fn default_scope() -> Self {
        Self("DEFAULT".to_owned())
    }

    /// A scope as it appears on the wire: `1*safe` with `\XX` escapes.
    pub fn parse(raw: &str) -> Result<Self, ParseError> {
        let bad = ParseError::Syntax(Syntax::ScopeList);
        if raw.is_empty() || !raw_ok(raw, is_scope_reserved) {
            return Err(bad);
        }
        unescape_str(raw, |_| true).ok_or(bad)?;
        Ok(Self(raw.to_owned()))
    }

    /// The scope as sent.
    pub fn as_raw(&self) -> &str {
        &self.0
    }

    /// The scope with escapes resolved.
    pub fn name(&self) -> String {
        // NOTE(unwrap): `parse` and `new` only admit well-formed UTF-8 escapes.
        unescape_str(&self.0, |_| true).unwrap()
    }

    /// Whether two scopes are the same: case and white space folded (RFC 2608 §6.4).
    pub fn matches(&self, other: &Self) -> bool {
        fold(&self.name()) == fold(&other.name())
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A `<scope-list>`: scopes separated by commas, possibly none.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct ScopeList(Vec<Scope>);

impl ScopeList {
    /// `scopes`, or [`Error::TooLong`] if the list exceeds 65535 octets.
    pub fn new(scopes: Vec<Scope>) -> Result<Self, Error> {
        if list_len(scopes.iter().map(Scope::as_raw)) > usize::from(u16::MAX) {
            return Err(Error::TooLong);
        }
        Ok(Self(scopes))
    }

    /// `DEFAULT` alone.
    pub fn default_scope() -> Self {
        Self(vec![Scope::default_scope()])
    }

    /// A list as on the wire; the empty string is the empty list.
    pub fn parse(s: &str) -> Result<Self, ParseError> {
        if s.is_empty() {
            return Ok(Self::default());
        }
        s.split(',')
            .map(Scope::parse)
            .collect::<Result<_, _>>()
            .map(Self)
    }

    /// The scopes.
    pub fn scopes(&self) -> &[Scope] {
        &self.0
    }

    /// Whether the list is empty.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether `scope` is in the list.
    pub fn contains(&self, scope: &Scope) -> bool {
        self.0.iter().any(|s| s.matches(scope))
    }

    /// Whether the lists share a scope.
    pub fn intersects(&self, other: &Self) -> bool {
        self.0.iter().any(|s| other.contains(s))
    }

    /// Whether every scope here is also in `other`.
    pub fn is_subset_of(&self, other: &Self) -> bool {
        self.0.iter().all(|s| other.contains(s))
    }

    /// Reads a `u16`-prefixed list.
    pub fn read(r: &mut Reader<'_>) -> Result<Self, ParseError> {
        Self::parse(r.str16()?)
    }

    /// Appends the list with its `u16` length prefix.
    pub fn encode(&self, out: &mut Vec<u8>) {
        encode_list(out, self.0.iter().map(Scope::as_raw));
    }

    /// Octets on the wire, prefix included.
    pub fn buffer_len(&self) -> usize {
        2 + list_len(self.0.iter().map(Scope::as_raw))
    }
}

impl fmt::Display for ScopeList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_list(f, self.0.iter().map(Scope::as_raw))
    }
}

/// A service type (RFC 2608 §4.1): `service:printer:lpr`, `service:x.one`,
/// `http`. Never empty; no white space or reserved characters.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ServiceType(String);

impl ServiceType {
    /// `s` as a service type; [`ParseError::Syntax`] if empty or with a
    /// reserved character (so an omitted type in a SrvRqst is refused).
    pub fn parse(s: &str) -> Result<Self, ParseError> {
        let ok = !s.is_empty()
            && s.len() <= usize::from(u16::MAX)
            && s.chars().all(|c| !is_attr_reserved(c) && !is_ws(c));
        if !ok {
            return Err(ParseError::Syntax(Syntax::ServiceType));
        }
        Ok(Self(s.to_owned()))
    }

    /// `service:directory-agent`, what DA discovery asks for (RFC 2608 §8.1).
    pub fn directory_agent() -> Self {
        Self("service:directory-agent".to_owned())
    }

    /// `service:service-agent`, what SA discovery asks for (RFC 2608 §8.1).
    pub fn service_agent() -> Self {
        Self("service:service-agent".to_owned())
    }

    /// The type as sent.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether it is of the `service:` scheme.
    pub fn is_service_scheme(&self) -> bool {
        self.0
            .get(..8)
            .is_some_and(|p| p.eq_ignore_ascii_case("service:"))
    }

    /// The type name: after `service:` and before any concrete type
    /// (`printer` of `service:printer:lpr`), or the scheme of a generic URL.
    pub fn type_name(&self) -> &str {
        if self.is_service_scheme() {
            let rest = &self.0[8..];
            rest.split(':').next().unwrap_or(rest)
        } else {
            &self.0
        }
    }

    /// The concrete type of an abstract service type (`lpr` of
    /// `service:printer:lpr`).
    pub fn concrete_type(&self) -> Option<&str> {
        if !self.is_service_scheme() {
            return None;
        }
        self.0[8..].split_once(':').map(|(_, c)| c)
    }

    /// The naming authority: what follows the last `.` of the type name
    /// (RFC 2608 §4.1); `None` for IANA.
    pub fn naming_authority(&self) -> Option<&str> {
        self.type_name().rsplit_once('.').map(|(_, na)| na)
    }

    /// Whether a request for `self` matches a service registered as
    /// `registered`: the same type, ignoring case, or `self` is the abstract
    /// type of `registered` (`service:printer` matches `service:printer:lpr`).
    pub fn matches(&self, registered: &Self) -> bool {
        let (req, reg) = (self.0.as_bytes(), registered.0.as_bytes());
        if req.eq_ignore_ascii_case(reg) {
            return true;
        }
        self.is_service_scheme()
            && self.concrete_type().is_none()
            && reg.len() > req.len()
            && reg[req.len()] == b':'
            && reg[..req.len()].eq_ignore_ascii_case(req)
    }

    /// Reads a `u16`-prefixed type.
    pub fn read(r: &mut Reader<'_>) -> Result<Self, ParseError> {
        Self::parse(r.str16()?)
    }

    /// Appends it with its `u16` length prefix.
    pub fn encode(&self, out: &mut Vec<u8>) {
        super::codec::put_str16(out, &self.0);
    }

    /// Octets on the wire, prefix included.
    pub fn buffer_len(&self) -> usize {
        2 + self.0.len()
    }
}

impl fmt::Display for ServiceType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A `<srvtype-list>` (RFC 2608 §10.2).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct ServiceTypeList(Vec<ServiceType>);

impl ServiceTypeList {
    /// `types`, or [`Error::TooLong`] if the list exceeds 65535 octets.
    pub fn new(types: Vec<ServiceType>) -> Result<Self, Error> {
        if list_len(types.iter().map(ServiceType::as_str)) > usize::from(u16::MAX) {
            return Err(Error::TooLong);
        }
        Ok(Self(types))
    }

    /// A list as on the wire; the empty string is the empty list.
    pub fn parse(s: &str) -> Result<Self, ParseError> {
        if s.is_empty() {
            return Ok(Self::default());
        }
        s.split(',')
            .map(ServiceType::parse)
            .collect::<Result<_, _>>()
            .map(Self)
    }

    /// The types.
    pub fn types(&self) -> &[ServiceType] {
        &self.0
    }

    /// Reads a `u16`-prefixed list.
    pub fn read(r: &mut Reader<'_>) -> Result<Self, ParseError> {
        Self::parse(r.str16()?)
    }

    /// Appends the list with its `u16` length prefix.
    pub fn encode(&self, out: &mut Vec<u8>) {
        encode_list(out, self.0.iter().map(ServiceType::as_str));
    }

    /// Octets on the wire, prefix included.
    pub fn buffer_len(&self) -> usize {
        2 + list_len(self.0.iter().map(ServiceType::as_str))
    }
}

/// The naming authority of a SrvTypeRqst (RFC 2608 §10.1).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub enum NamingAuthority {
    /// Length 0: IANA-registered types only.
    #[default]
    Iana,
    /// Length 0xFFFF, no string: every type, whatever its authority.
    All,
    /// Types of this authority only.
    Named(AuthorityName),
}

/// A naming authority's name: 1 to 65534 octets, no reserved characters.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AuthorityName(String);

impl AuthorityName {
    /// `s`, or [`Error::Malformed`] if empty, 65535 octets or longer (0xFFFF
    /// means "all"), or with a reserved character.
    pub fn new(s: &str) -> Result<Self, Error> {
        if s.is_empty() || s.len() >= usize::from(u16::MAX) || s.chars().any(is_attr_reserved) {
            return Err(Error::Malformed);
        }
        Ok(Self(s.to_owned()))
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl NamingAuthority {
    const ALL: u16 = 0xffff;

    /// Reads the length and, unless it is 0 or 0xFFFF, the name.
    pub fn read(r: &mut Reader<'_>) -> Result<Self, ParseError> {
        match r.u16()? {
            0 => Ok(Self::Iana),
            Self::ALL => Ok(Self::All),
            n => {
                let s = r.str_of(usize::from(n))?;
                AuthorityName::new(s)
                    .map(Self::Named)
                    .map_err(|_| ParseError::Syntax(Syntax::NamingAuthority))
            }
        }
    }

    /// Appends the field.
    pub fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Self::Iana => put_u16(out, 0),
            Self::All => put_u16(out, Self::ALL),
            Self::Named(n) => super::codec::put_str16(out, &n.0),
        }
    }

    /// Octets on the wire.
    pub fn buffer_len(&self) -> usize {
        match self {
            Self::Iana | Self::All => 2,
            Self::Named(n) => 2 + n.0.len(),
        }
    }

    /// Whether a service type is asked for (RFC 2608 §10.1).
    pub fn admits(&self, t: &ServiceType) -> bool {
        match self {
            Self::All => true,
            Self::Iana => t.naming_authority().is_none(),
            Self::Named(n) => t
                .naming_authority()
                .is_some_and(|na| na.eq_ignore_ascii_case(&n.0)),
        }
    }
}

fn list_len<'a>(items: impl Iterator<Item = &'a str>) -> usize {
    let mut n = 0;
    let mut count = 0;
    for s in items {
        n += s.len();
        count += 1;
    }
    n + count.max(1) - 1
}

fn encode_list<'a>(out: &mut Vec<u8>, items: impl Iterator<Item = &'a str> + Clone) {
    put_u16(out, list_len(items.clone()) as u16);
    for (i, s) in items.enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(s.as_bytes());
    }
}

fn write_list<'a>(f: &mut fmt::Formatter<'_>, items: impl Iterator<Item = &'a str>) -> fmt::Result {
    for (i, s) in items.enumerate() {
        if i > 0 {
            f.write_str(",")?;
        }
        f.write_str(s)?;
    }
    Ok(())
}

#[cfg(test)]
pub(super) mod test {
    use proptest::prelude::*;

    use super::*;

    fn scopes(s: &str) -> ScopeList {
        ScopeList::parse(s).unwrap()
    }

    #[test]
    fn scope_lists() {
        assert!(scopes("").is_empty());
        let l = scopes(r"DEFAULT,BLDG 32,a\2cb");
        assert_eq!(l.scopes().len(), 3);
        assert_eq!(l.scopes()[2].name(), "a,b");
        assert_eq!(l.to_string(), r"DEFAULT,BLDG 32,a\2cb");
        assert!(l.contains(&Scope::parse("default").unwrap()));
        assert!(l.contains(&Scope::new("bldg   32").unwrap()));
        assert!(l.contains(&Scope::new("A,B").unwrap()));
        assert!(!l.contains(&Scope::new("x").unwrap()));
        assert!(scopes("x,default").intersects(&l));
        assert!(scopes("default").is_subset_of(&l));
        assert!(!scopes("default,x").is_subset_of(&l));
        let bad = Err(ParseError::Syntax(Syntax::ScopeList));
        for s in [
            "a,", ",a", "a,,b", "a*", "a;b", "a+b", "a(b", r"a\2", r"a\ff", "a\tb", "a=b",
        ] {
            assert_eq!(ScopeList::parse(s), bad, "{s:?}");
        }
        assert_eq!(Scope::new("a;b*").unwrap().as_raw(), r"a\3bb\2a");
        assert_eq!(Scope::new(""), Err(Error::Malformed));
    }

    #[test]
    fn scope_list_wire() {
        let mut out = Vec::new();
        scopes("a,b").encode(&mut out);
        assert_eq!(out, [0x00, 0x03, b'a', b',', b'b']);
        assert_eq!(scopes("a,b").buffer_len(), 5);
        let mut out = Vec::new();
        ScopeList::default().encode(&mut out);
        assert_eq!(out, [0, 0]);
        assert_eq!(
            ScopeList::read(&mut Reader::new(&[0, 1, b','])),
            Err(ParseError::Syntax(Syntax::ScopeList))
        );
    }

    #[test]
    fn service_types() {
        let t = |s: &str| ServiceType::parse(s).unwrap();
        let lpr = t("service:printer:lpr");
        assert_eq!(lpr.type_name(), "printer");
        assert_eq!(lpr.concrete_type(), Some("lpr"));
        assert!(lpr.is_service_scheme());
        assert!(t("service:printer").matches(&lpr));
        assert!(t("SERVICE:Printer").matches(&lpr));
        assert!(t("service:printer:lpr").matches(&lpr));
        assert!(!t("service:printer:http").matches(&lpr));
        assert!(!t("service:print").matches(&lpr));
        assert!(!lpr.matches(&t("service:printer")));
        assert_eq!(t("service:x.one").naming_authority(), Some("one"));
        assert_eq!(t("service:abstract.two:y").naming_authority(), Some("two"));
        assert_eq!(t("service:tftp").naming_authority(), None);
        assert_eq!(t("http").type_name(), "http");
        assert!(t("http").matches(&t("HTTP")));
        for bad in ["", "a b", "a,b", "a(b", "x\\2c"] {
            assert_eq!(
                ServiceType::parse(bad),
                Err(ParseError::Syntax(Syntax::ServiceType)),
                "{bad:?}"
            );
        }
        let l = ServiceTypeList::parse("service:a,http").unwrap();
        assert_eq!(l.types().len(), 2);
        assert!(ServiceTypeList::parse("a,").is_err());
    }

    #[test]
    fn naming_authorities() {
        let read = |b: &[u8]| NamingAuthority::read(&mut Reader::new(b));
        assert_eq!(read(&[0, 0]), Ok(NamingAuthority::Iana));
        assert_eq!(read(&[0xff, 0xff]), Ok(NamingAuthority::All));
        let one = NamingAuthority::Named(AuthorityName::new("one").unwrap());
        assert_eq!(read(&[0, 3, b'o', b'n', b'e']), Ok(one.clone()));
        assert_eq!(read(&[0, 3, b'o', b'n']), Err(ParseError::Truncated));
        assert_eq!(
            read(&[0, 1, b',']),
            Err(ParseError::Syntax(Syntax::NamingAuthority))
        );
        let t = |s: &str| ServiceType::parse(s).unwrap();
        assert!(one.admits(&t("service:x.ONE")));
        assert!(!one.admits(&t("service:x")));
        assert!(NamingAuthority::Iana.admits(&t("service:x")));
        assert!(NamingAuthority::All.admits(&t("service:x.two")));
        assert_eq!(
            AuthorityName::new(&"a".repeat(0xffff)),
            Err(Error::Malformed)
        );
        for na in [NamingAuthority::Iana, NamingAuthority::All, one] {
            let mut out = Vec::new();
            na.encode(&mut out);
            assert_eq!(out.len(), na.buffer_len());
            assert_eq!(read(&out), Ok(na));
        }
    }

    pub(in crate::wire::slp) mod strategy {
        use proptest::prelude::*;

        use super::super::*;

        pub(in crate::wire::slp) fn scope_list() -> impl Strategy<Value = ScopeList> {
            proptest::collection::vec("[ -~é]{1,8}", 0..4).prop_map(|v| {
                ScopeList::new(v.iter().map(|s| Scope::new(s).unwrap()).collect()).unwrap()
            })
        }

        pub(in crate::wire::slp) fn service_type() -> impl Strategy<Value = ServiceType> {
            "(service:)?[a-z][a-z0-9.+-]{0,10}(:[a-z]{1,5})?"
                .prop_map(|s| ServiceType::parse(&s).unwrap())
        }

        pub(in crate::wire::slp) fn service_types() -> impl Strategy<Value = ServiceTypeList> {
            proptest::collection::vec(service_type(), 0..4)
                .prop_map(|v| ServiceTypeList::new(v).unwrap())
        }

        pub(in crate::wire::slp) fn naming_authority() -> impl Strategy<Value = NamingAuthority> {
            prop_oneof![
                Just(NamingAuthority::Iana),
                Just(NamingAuthority::All),
                "[a-z]{1,6}".prop_map(|s| NamingAuthority::Named(AuthorityName::new(&s).unwrap())),
            ]
        }
    }

    proptest! {
        #[test]
        fn scope_list_roundtrip(l in strategy::scope_list()) {
            let mut out = Vec::new();
            l.encode(&mut out);
            prop_assert_eq!(out.len(), l.buffer_len());
            prop_assert_eq!(ScopeList::read(&mut Reader::new(&out)), Ok(l));
        }

        #[test]
        fn scope_names_survive_escaping(name in "[ -~é]{1,12}") {
            let s = Scope::new(&name).unwrap();
            prop_assert_eq!(s.name(), name);
            prop_assert_eq!(Scope::parse(s.as_raw()), Ok(s));
        }
    }
}
