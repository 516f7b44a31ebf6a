//! Attribute lists (RFC 2608 §5) and tag lists (§9.4).
//!
//! ```text
//! attr-list = attribute / attribute `,' attr-list
//! attribute = `(' attr-tag `=' attr-val-list `)' / attr-tag
//! attr-val  = intval / strval / boolval / opaque
//! opaque    = "\FF" 1*escape-val            escape-val = `\' HEXDIG HEXDIG
//! reserved  = `(' / `)' / `,' / `\' / `!' / `<' / `=' / `>' / `~' / CTL
//! bad-tag   = CR / LF / HTAB / `_'          (and `*' is not a tag character)
//! ```
//!
//! Every [`Attribute`] keeps the text it was parsed from, so an attribute
//! list re-emits octet for octet (authentication blocks sign those octets,
//! and AttrRply must return original case and white space, §10.4). Values
//! are typed as RFC 2608 §5 says: `true`/`false` (any case) are booleans,
//! `[-]1*DIGIT` within `i32` integers, `\FF…` opaque, anything else a string.
//! White space around a value is ignored for typing, as for comparison.
//! Only reserved characters may be escaped (§5: anything else is a
//! PARSE_ERROR); escapes are also accepted in tags. Empty values (`(a=)`)
//! are refused, as the grammar says.

use core::fmt;

use super::codec::Reader;
use super::text::{
    escape_into, fold, glob, hex_pair, is_attr_reserved, is_bad_tag, push_escape, raw_ok,
    unescape_str,
};
use super::{ParseError, Registration, Syntax};
use crate::wire::Error;

/// The DAAdvert keyword of a mesh-enhanced DA (RFC 3528 §5).
pub const MESH_ENHANCED: &str = "mesh-enhanced";

/// The DAAdvert attribute bounding how often SAs may refresh (RFC 2608 §8.5).
pub const MIN_REFRESH_INTERVAL: &str = "min-refresh-interval";

/// One attribute value, typed (RFC 2608 §5).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum AttrValue {
    /// `[-]1*DIGIT` in `i32` range.
    Integer(i32),
    /// `true` or `false`, any case.
    Boolean(bool),
    /// Any other string, escapes resolved, white space as sent.
    String(String),
    /// `\FF` followed by escaped octets: the octets.
    Opaque(Vec<u8>),
}

/// Which of the four types a value has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AttrType {
    /// [`AttrValue::Integer`].
    Integer,
    /// [`AttrValue::Boolean`].
    Boolean,
    /// [`AttrValue::String`].
    String,
    /// [`AttrValue::Opaque`].
    Opaque,
}

impl AttrValue {
    /// Its type.
    pub const fn kind(&self) -> AttrType {
        match self {
            Self::Integer(_) => AttrType::Integer,
            Self::Boolean(_) => AttrType::Boolean,
            Self::String(_) => AttrType::String,
            Self::Opaque(_) => AttrType::Opaque,
        }
    }

    /// The value an unescaped, non-opaque string stands for.
    pub(super) fn typed(s: String) -> Self {
        let t = s.trim_matches(super::text::is_ws);
        if t.eq_ignore_ascii_case("true") {
            return Self::Boolean(true);
        }
        if t.eq_ignore_ascii_case("false") {
            return Self::Boolean(false);
        }
        let digits = t.strip_prefix('-').unwrap_or(t);
        if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
            if let Ok(v) = t.parse::<i32>() {
                return Self::Integer(v);
            }
        }
        Self::String(s)
    }

    /// Parses one value as sent. `escapable` says which octets may be
    /// escaped in a non-opaque value.
    pub(super) fn parse_raw(
        raw: &str,
        reserved: impl Fn(char) -> bool,
        escapable: impl Fn(u8) -> bool,
    ) -> Option<Self> {
        if let Some(bytes) = parse_opaque(raw) {
            return bytes.map(Self::Opaque);
        }
        if raw.is_empty() || !raw_ok(raw, reserved) {
            return None;
        }
        unescape_str(raw, escapable).map(Self::typed)
    }

    fn format(&self, out: &mut String) {
        match self {
            Self::Integer(v) => out.push_str(&v.to_string()),
            Self::Boolean(v) => out.push_str(if *v { "true" } else { "false" }),
            Self::String(s) => escape_into(out, s, is_attr_reserved),
            Self::Opaque(b) => {
                out.push_str("\\ff");
                for &x in b {
                    push_escape(out, x);
                }
            }
        }
    }

    /// Whether this value, formatted, parses back as itself.
    fn representable(&self) -> bool {
        match self {
            Self::Integer(_) | Self::Boolean(_) => true,
            Self::Opaque(b) => !b.is_empty(),
            Self::String(s) => !s.is_empty() && Self::typed(s.clone()).kind() == AttrType::String,
        }
    }
}

/// `Some(Some(octets))` for a well-formed opaque value, `Some(None)` for one
/// that starts with `\FF` but is malformed, `None` for other values.
fn parse_opaque(raw: &str) -> Option<Option<Vec<u8>>> {
    let rest = raw
        .get(..3)
        .filter(|p| p.eq_ignore_ascii_case("\\ff"))
        .map(|_| &raw.as_bytes()[3..])?;
    if rest.is_empty() || rest.len() % 3 != 0 {
        return Some(None);
    }
    Some(
        rest.chunks(3)
            .map(|c| (c[0] == b'\\').then(|| hex_pair(&c[1..])).flatten())
            .collect(),
    )
}

/// One attribute: a keyword (no values) or a tag with values.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Attribute {
    raw: String,
    tag: String,
    values: Vec<AttrValue>,
}

impl Attribute {
    /// A keyword attribute; [`Error::Malformed`] if `tag` is empty or holds
    /// CR, LF, TAB, `_` or `*`.
    pub fn keyword(tag: &str) -> Result<Self, Error> {
        Self::new(tag, Vec::new())
    }

    /// An attribute with `values` (a keyword if none). [`Error::Malformed`]
    /// for a bad tag or a value that would not parse back as itself (an
    /// empty string or opaque, or a string that reads as another type).
    pub fn new(tag: &str, values: Vec<AttrValue>) -> Result<Self, Error> {
        if tag.is_empty()
            || tag.chars().any(is_bad_tag)
            || !values.iter().all(AttrValue::representable)
        {
            return Err(Error::Malformed);
        }
        let mut raw = String::new();
        if values.is_empty() {
            escape_into(&mut raw, tag, is_attr_reserved);
        } else {
            raw.push('(');
            escape_into(&mut raw, tag, is_attr_reserved);
            raw.push('=');
            for (i, v) in values.iter().enumerate() {
                if i > 0 {
                    raw.push(',');
                }
                v.format(&mut raw);
            }
            raw.push(')');
        }
        if raw.len() > usize::from(u16::MAX) {
            return Err(Error::TooLong);
        }
        Ok(Self {
            raw,
            tag: tag.to_owned(),
            values,
        })
    }

    /// The tag, escapes resolved.
    pub fn tag(&self) -> &str {
        &self.tag
    }

    /// The values; empty for a keyword.
    pub fn values(&self) -> &[AttrValue] {
        &self.values
    }

    /// Whether it is a keyword (a tag without values).
    pub fn is_keyword(&self) -> bool {
        self.values.is_empty()
    }

    /// The attribute as sent.
    pub fn as_raw(&self) -> &str {
        &self.raw
    }

    /// Whether its tag is `tag`, ignoring case and folding white space.
    pub fn has_tag(&self, tag: &str) -> bool {
        fold(&self.tag) == fold(tag)
    }

    fn parse(raw: &str) -> Option<Self> {
        let (tag_raw, values) = match raw.strip_prefix('(') {
            Some(inner) => {
                let inner = inner.strip_suffix(')')?;
                let (tag, vals) = inner.split_once('=')?;
                let values = vals
                    .split(',')
                    .map(|v| AttrValue::parse_raw(v, is_attr_reserved, is_reserved_octet))
                    .collect::<Option<Vec<_>>>()?;
                (tag, values)
            }
            None => (raw, Vec::new()),
        };
        if tag_raw.is_empty() || !raw_ok(tag_raw, is_attr_reserved) {
            return None;
        }
        let tag = unescape_str(tag_raw, is_reserved_octet)?;
        if tag.chars().any(is_bad_tag) {
            return None;
        }
        Some(Self {
            raw: raw.to_owned(),
            tag,
            values,
        })
    }
}

fn is_reserved_octet(b: u8) -> bool {
    b.is_ascii() && is_attr_reserved(char::from(b))
}

/// An `<attr-list>` (RFC 2608 §5), possibly empty. Immutable and shared:
/// a clone is a reference count (a directory agent keeps a registration's
/// list as registered and as shown, usually the same).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct AttrList(std::sync::Arc<[Attribute]>);

impl AttrList {
    /// `attrs`, or [`Error::TooLong`] if the list exceeds 65535 octets.
    pub fn new(attrs: Vec<Attribute>) -> Result<Self, Error> {
        let len = attrs.iter().map(|a| a.raw.len() + 1).sum::<usize>();
        if len.saturating_sub(1) > usize::from(u16::MAX) {
            return Err(Error::TooLong);
        }
        Ok(Self(attrs.into()))
    }

    /// A list as on the wire; [`ParseError::Syntax`] if it breaks the grammar.
    pub fn parse(s: &str) -> Result<Self, ParseError> {
        let bad = ParseError::Syntax(Syntax::AttrList);
        let mut attrs = Vec::new();
        let mut rest = s;
        while !rest.is_empty() {
            // A parenthesised attribute runs to its `)`: values hold no raw `)`.
            let end = if rest.starts_with('(') {
                rest.find(')').ok_or(bad)? + 1
            } else {
                rest.find(',').unwrap_or(rest.len())
            };
            attrs.push(Attribute::parse(&rest[..end]).ok_or(bad)?);
            rest = &rest[end..];
            if let Some(r) = rest.strip_prefix(',') {
                if r.is_empty() {
                    return Err(bad);
                }
                rest = r;
            } else if !rest.is_empty() {
                return Err(bad);
            }
        }
        Ok(Self(attrs.into()))
    }

    /// The attributes.
    pub fn attributes(&self) -> &[Attribute] {
        &self.0
    }

    /// Whether the list is empty.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The first attribute with tag `tag` (case and white space folded).
    pub fn get(&self, tag: &str) -> Option<&Attribute> {
        let tag = fold(tag);
        self.0.iter().find(|a| fold(&a.tag) == tag)
    }

    /// Whether the DA is mesh-enhanced: the list has the `mesh-enhanced`
    /// keyword (RFC 3528 §5).
    pub fn is_mesh_enhanced(&self) -> bool {
        self.get(MESH_ENHANCED).is_some()
    }

    /// The DA's `min-refresh-interval` in seconds, if it is one integer (RFC 2608 §8.5).
    pub fn min_refresh_interval(&self) -> Option<i32> {
        match self.get(MIN_REFRESH_INTERVAL)?.values() {
            [AttrValue::Integer(v)] => Some(*v),
            _ => None,
        }
    }

    /// The attributes `tags` selects (all for an empty tag list), as sent.
    pub fn select(&self, tags: &TagList) -> Self {
        Self(
            self.0
                .iter()
                .filter(|a| tags.selects(&a.tag))
                .cloned()
                .collect(),
        )
    }

    /// `Err` if an attribute mixes value types (`x=4,true`): a SrvReg with
    /// such a list gets INVALID_REGISTRATION (RFC 2608 §5).
    pub fn check_types(&self) -> Result<(), Registration> {
        for a in self.0.iter() {
            if let Some((first, rest)) = a.values.split_first() {
                if rest.iter().any(|v| v.kind() != first.kind()) {
                    return Err(Registration::MixedTypes);
                }
            }
        }
        Ok(())
    }

    /// Reads a `u16`-prefixed list.
    pub fn read(r: &mut Reader<'_>) -> Result<Self, ParseError> {
        Self::parse(r.str16()?)
    }

    /// Appends the list with its `u16` length prefix.
    pub fn encode(&self, out: &mut Vec<u8>) {
        super::codec::put_u16(out, (self.buffer_len() - 2) as u16);
        for (i, a) in self.0.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            out.extend_from_slice(a.raw.as_bytes());
        }
    }

    /// Octets on the wire, prefix included.
    pub fn buffer_len(&self) -> usize {
        2 + self
            .0
            .iter()
            .map(|a| a.raw.len() + 1)
            .sum::<usize>()
            .saturating_sub(1)
    }
}

impl fmt::Display for AttrList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, a) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            f.write_str(&a.raw)?;
        }
        Ok(())
    }
}

/// A `<tag-list>` (RFC 2608 §9.4): tags with `*` wildcards, as in AttrRqst
/// and SrvDeReg. Empty means "all attributes" / "the whole service".
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct TagList {
    raw: String,
    patterns: Vec<Vec<String>>,
}

impl TagList {
    /// A list as on the wire.
    pub fn parse(s: &str) -> Result<Self, ParseError> {
        let bad = ParseError::Syntax(Syntax::TagList);
        if s.len() > usize::from(u16::MAX) {
            return Err(bad);
        }
        let mut patterns = Vec::new();
        if !s.is_empty() {
            for item in s.split(',') {
                let tag_char = |c: char| is_attr_reserved(c) || (is_bad_tag(c) && c != '*');
                if item.is_empty() || !raw_ok(item, tag_char) {
                    return Err(bad);
                }
                let parts = item
                    .split('*')
                    .map(|p| unescape_str(p, is_reserved_octet).map(|u| fold_part(&u)))
                    .collect::<Option<Vec<_>>>()
                    .ok_or(bad)?;
                patterns.push(parts);
            }
        }
        Ok(Self {
            raw: s.to_owned(),
            patterns,
        })
    }

    /// The list as sent.
    pub fn as_raw(&self) -> &str {
        &self.raw
    }

    /// Whether the list is empty.
    pub fn is_empty(&self) -> bool {
        self.patterns.is_empty()
    }

    /// Whether an item of the list matches `tag` (never, for an empty list).
    pub fn matches(&self, tag: &str) -> bool {
        let tag = fold(tag);
        self.patterns.iter().any(|p| glob(p, &tag))
    }

    /// Whether `tag` is selected: the list is empty or matches it.
    pub fn selects(&self, tag: &str) -> bool {
        self.is_empty() || self.matches(tag)
    }

    /// Reads a `u16`-prefixed list.
    pub fn read(r: &mut Reader<'_>) -> Result<Self, ParseError> {
        Self::parse(r.str16()?)
    }

    /// Appends the list with its `u16` length prefix.
    pub fn encode(&self, out: &mut Vec<u8>) {
        super::codec::put_str16(out, &self.raw);
    }

    /// Octets on the wire, prefix included.
    pub fn buffer_len(&self) -> usize {
        2 + self.raw.len()
    }
}

/// Folds one piece of a wildcard pattern: case, and inner white space runs.
/// Ends are kept (a piece's end abuts a `*`).
pub(super) fn fold_part(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut in_ws = false;
    for c in s.chars() {
        if super::text::is_ws(c) {
            if !in_ws {
                out.push(' ');
            }
            in_ws = true;
        } else {
            in_ws = false;
            out.extend(c.to_lowercase());
        }
    }
    out
}

#[cfg(test)]
pub(super) mod test {
    use proptest::prelude::*;

    use super::*;

    fn attrs(s: &str) -> AttrList {
        AttrList::parse(s).unwrap()
    }

    #[test]
    fn rfc2608_example() {
        // RFC 2608 §10.5.
        let s = r"(Name=Igore),(Description=For developers only),(Protocol=LPR),(location-description=12th floor),(Operator=James Dornan \3cdornan@monster\3e),(media-size=na-letter),(resolution=res-600),x-OK";
        let l = attrs(s);
        assert_eq!(l.attributes().len(), 8);
        assert_eq!(l.to_string(), s);
        assert_eq!(
            l.get("operator").unwrap().values(),
            [AttrValue::String("James Dornan <dornan@monster>".into())]
        );
        assert!(l.get("X-ok").unwrap().is_keyword());
        assert_eq!(l.get("nope"), None);
        let tags = TagList::parse("resolution,loc*").unwrap();
        assert_eq!(
            l.select(&tags).to_string(),
            "(location-description=12th floor),(resolution=res-600)"
        );
        let tags = TagList::parse("x-*,resolution,protocol").unwrap();
        assert_eq!(
            l.select(&tags).to_string(),
            "(Protocol=LPR),(resolution=res-600),x-OK"
        );
    }

    #[test]
    fn value_types() {
        let l =
            attrs(r"(a=1,-22, 7 ),(b=TRUE,false),(c=x,1x,  s p ),(d=\FF\00\2c\ff),(e=2147483648)");
        use AttrValue as V;
        assert_eq!(
            l.get("a").unwrap().values(),
            [V::Integer(1), V::Integer(-22), V::Integer(7)]
        );
        assert_eq!(
            l.get("b").unwrap().values(),
            [V::Boolean(true), V::Boolean(false)]
        );
        assert_eq!(
            l.get("c").unwrap().values(),
            [
                V::String("x".into()),
                V::String("1x".into()),
                V::String("  s p ".into())
            ]
        );
        assert_eq!(
            l.get("d").unwrap().values(),
            [V::Opaque(vec![0x00, 0x2c, 0xff])]
        );
        assert_eq!(
            l.get("e").unwrap().values(),
            [V::String("2147483648".into())]
        );
        assert_eq!(l.check_types(), Ok(()));
        assert_eq!(
            attrs(r"(x=4,true,sue,\ff\00\00)").check_types(),
            Err(Registration::MixedTypes)
        );
    }

    #[test]
    fn escaping() {
        let a = Attribute::new(
            "a(b)",
            vec![
                AttrValue::String("x,y\\z=<>!~\n".into()),
                AttrValue::String("*ok*".into()),
            ],
        )
        .unwrap();
        assert_eq!(a.as_raw(), r"(a\28b\29=x\2cy\5cz\3d\3c\3e\21\7e\0a,*ok*)");
        let l = AttrList::new(vec![a.clone()]).unwrap();
        assert_eq!(AttrList::parse(&l.to_string()), Ok(l));
        assert_eq!(
            attrs(r"(a\28b\29=1)").get("a(b)").unwrap().values(),
            [AttrValue::Integer(1)]
        );
        // Escapes of reserved characters only (RFC 2608 §5).
        let bad = Err(ParseError::Syntax(Syntax::AttrList));
        for s in [
            r"(a=\41)",
            r"(a=\2)",
            r"(a=\zz)",
            r"(a=\FF)",
            r"(a=\FF\0)",
            r"(a=\FFx)",
            "(a=b,c",
            "(a=b)x",
            "(a=b),",
            ",a",
            "a,,b",
            "(a)",
            "(=1)",
            "(a=)",
            "(a=1,)",
            "(a=(b))",
            "a=b",
            "a(b",
            "a_b",
            "a*",
            "(a\tb=1)",
            "(a=x\ny)",
            "a)",
        ] {
            assert_eq!(AttrList::parse(s), bad, "{s:?}");
        }
    }

    #[test]
    fn construction_refuses_what_would_not_parse_back() {
        let s = |v: &str| Attribute::new("a", vec![AttrValue::String(v.into())]);
        assert_eq!(s("12").unwrap_err(), Error::Malformed);
        assert_eq!(s(" true").unwrap_err(), Error::Malformed);
        assert_eq!(s("").unwrap_err(), Error::Malformed);
        assert_eq!(s(r"\ff\00").unwrap(), s(r"\ff\00").unwrap());
        assert_eq!(
            Attribute::new("a", vec![AttrValue::Opaque(vec![])]).unwrap_err(),
            Error::Malformed
        );
        assert_eq!(Attribute::keyword("a_b").unwrap_err(), Error::Malformed);
        assert_eq!(Attribute::keyword("").unwrap_err(), Error::Malformed);
        let k = Attribute::keyword(MESH_ENHANCED).unwrap();
        let l = AttrList::new(vec![k]).unwrap();
        assert!(l.is_mesh_enhanced());
        assert_eq!(l.to_string(), "mesh-enhanced");
        assert!(!attrs("(mesh=1)").is_mesh_enhanced());
        assert_eq!(
            attrs("(min-refresh-interval=30)").min_refresh_interval(),
            Some(30)
        );
        assert_eq!(
            attrs("(min-refresh-interval=x)").min_refresh_interval(),
            None
        );
    }

    #[test]
    fn tag_lists() {
        let t = TagList::parse("*bob*,x-*,exact").unwrap();
        for (tag, want) in [
            ("some bob I know", true),
            ("bigbob", true),
            ("BOBBY", true),
            ("x-ok", true),
            ("X-", true),
            ("exact", true),
            ("EXACT ", true),
            ("exactly", false),
            ("y", false),
        ] {
            assert_eq!(t.matches(tag), want, "{tag}");
        }
        assert!(TagList::default().selects("any"));
        assert!(!TagList::default().matches("any"));
        for bad in ["a,", ",", "a_b", "a(b", "a\tb", r"a\41"] {
            assert!(TagList::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn wire() {
        let l = attrs("(a=1),k");
        let mut out = Vec::new();
        l.encode(&mut out);
        assert_eq!(out, b"\x00\x07(a=1),k");
        assert_eq!(l.buffer_len(), out.len());
        assert_eq!(AttrList::read(&mut Reader::new(&out)), Ok(l));
        let mut out = Vec::new();
        AttrList::default().encode(&mut out);
        assert_eq!(out, [0, 0]);
    }

    pub(in crate::wire::slp) mod strategy {
        use proptest::prelude::*;

        use super::super::*;

        fn value() -> impl Strategy<Value = AttrValue> {
            prop_oneof![
                any::<i32>().prop_map(AttrValue::Integer),
                any::<bool>().prop_map(AttrValue::Boolean),
                "[ -~é\n]{1,10}"
                    .prop_map(AttrValue::String)
                    .prop_filter("types as a string", AttrValue::representable),
                proptest::collection::vec(any::<u8>(), 1..5).prop_map(AttrValue::Opaque),
            ]
        }

        pub(in crate::wire::slp) fn attribute() -> impl Strategy<Value = Attribute> {
            (
                "[a-zA-Z0-9 ()=,!<>~-]{1,8}",
                proptest::collection::vec(value(), 0..3),
            )
                .prop_map(|(tag, values)| Attribute::new(&tag, values).unwrap())
        }

        pub(in crate::wire::slp) fn attr_list() -> impl Strategy<Value = AttrList> {
            proptest::collection::vec(attribute(), 0..4).prop_map(|v| AttrList::new(v).unwrap())
        }

        pub(in crate::wire::slp) fn tag_list() -> impl Strategy<Value = TagList> {
            proptest::collection::vec("[a-z*-]{1,6}", 0..3)
                .prop_map(|v| TagList::parse(&v.join(",")).unwrap())
        }
    }

    proptest! {
        #[test]
        fn roundtrip(l in strategy::attr_list()) {
            let text = l.to_string();
            let back = AttrList::parse(&text).unwrap();
            prop_assert_eq!(&back, &l);
            for (a, b) in back.attributes().iter().zip(l.attributes()) {
                prop_assert_eq!(a.tag(), b.tag());
                prop_assert_eq!(a.values(), b.values());
            }
        }

        #[test]
        fn parse_never_panics(s in "[(),=a-z0-9\\\\ *_!fF]{0,24}") {
            if let Ok(l) = AttrList::parse(&s) {
                prop_assert_eq!(l.to_string(), s);
            }
        }
    }
}
