//! Predicates: LDAPv3 search filters (RFC 2254) with SLP's matching rules
//! (RFC 2608 §8.1, §5, §6.4).
//!
//! ```text
//! filter     = "(" filtercomp ")"
//! filtercomp = "&" 1*filter / "|" 1*filter / "!" filter / item
//! item       = attr "=*"                          ; presence
//!            / attr "=" [initial] *("*" any) ...  ; substring: '=' only
//!            / attr ("=" / "~=" / ">=" / "<=") value
//! ```
//!
//! SLP semantics, as implemented:
//! - A term has the type its value reads as (integer, boolean, opaque
//!   `\FF…`, else string) and only matches registered values of that type:
//!   `(x=33)` does not match `x=true`. Wildcard terms are strings:
//!   `(x=34*)` matches `x=34foo`, not `x=3432`.
//! - Strings compare with case and white space folded; `<=`/`>=` order
//!   folded strings by UTF-8 octets, integers numerically, opaque values
//!   octet-wise. Booleans only compare with `=`. `~=` is `=`.
//! - Wildcards with anything but `=`, and the extensible match `:=`, are
//!   PARSE_ERRORs (§8.1). So are empty values, unbalanced parentheses,
//!   `(&)`, escapes of unreserved characters, and nesting deeper than
//!   [`MAX_DEPTH`].
//! - A term is compared with each value of a multi-valued attribute and the
//!   results ORed. Negation follows RFC 2608's example, `(!(y=0))` matches
//!   `y=0,1` "since y can be nonzero": `!` is pushed down to the terms (De
//!   Morgan), and a negated term holds if *some* value fails it. A negated
//!   presence test holds if the attribute is absent; any other term on an
//!   absent attribute or a keyword is false, negated or not (LDAP's
//!   "undefined").
//!
//! White space is allowed around filters and around an attribute name.

use core::fmt;

use super::attr::{fold_part, AttrList, AttrValue};
use super::codec::Reader;
use super::text::{fold, glob, is_attr_reserved, is_bad_tag, is_ws, raw_ok, unescape_str};
use super::{ParseError, Syntax};
use crate::wire::Error;

/// Deepest nesting of parentheses accepted: parsing and evaluation recurse.
pub const MAX_DEPTH: usize = 32;

/// A comparison operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    /// `=`
    Eq,
    /// `~=`: approximately equal; here the same as `=`.
    Approx,
    /// `>=`
    Ge,
    /// `<=`
    Le,
}

/// A parsed search filter.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Filter {
    /// `(&…)`: all hold.
    And(Vec<Self>),
    /// `(|…)`: one holds.
    Or(Vec<Self>),
    /// `(!…)`
    Not(Box<Self>),
    /// `(tag=*)`: the attribute is present (keywords included).
    Present(String),
    /// `(tag=a*b)`: a string value matches the pattern; the pieces between
    /// stars, folded.
    Substring(String, Vec<String>),
    /// `(tag op value)`.
    Compare(String, Op, AttrValue),
}

impl Filter {
    /// Parses a filter; [`ParseError::Syntax`] if it breaks the grammar.
    pub fn parse(s: &str) -> Result<Self, ParseError> {
        let mut p = Parser {
            s: s.as_bytes(),
            i: 0,
        };
        let f = p.filter(0).ok_or(ParseError::Syntax(Syntax::Predicate))?;
        p.ws();
        if p.i != p.s.len() {
            return Err(ParseError::Syntax(Syntax::Predicate));
        }
        Ok(f)
    }

    /// Whether a service with attributes `attrs` satisfies the filter.
    pub fn matches(&self, attrs: &AttrList) -> bool {
        self.eval(attrs, false)
    }

    fn eval(&self, attrs: &AttrList, neg: bool) -> bool {
        match self {
            Self::And(fs) if !neg => fs.iter().all(|f| f.eval(attrs, false)),
            Self::And(fs) => fs.iter().any(|f| f.eval(attrs, true)),
            Self::Or(fs) if !neg => fs.iter().any(|f| f.eval(attrs, false)),
            Self::Or(fs) => fs.iter().all(|f| f.eval(attrs, true)),
            Self::Not(f) => f.eval(attrs, !neg),
            Self::Present(tag) => attrs.get(tag).is_some() != neg,
            Self::Substring(tag, parts) => {
                let test = |v: &AttrValue| match v {
                    AttrValue::String(s) => glob(parts, &fold(s)),
                    _ => false,
                };
                term(attrs, tag, neg, test)
            }
            Self::Compare(tag, op, want) => term(attrs, tag, neg, |v| compare(v, *op, want)),
        }
    }
}

/// ORs `test` over the values of `tag` (its negation, if `neg`); false for
/// an absent attribute or a keyword.
fn term(attrs: &AttrList, tag: &str, neg: bool, test: impl Fn(&AttrValue) -> bool) -> bool {
    attrs
        .get(tag)
        .is_some_and(|a| a.values().iter().any(|v| test(v) != neg))
}

fn compare(have: &AttrValue, op: Op, want: &AttrValue) -> bool {
    use core::cmp::Ordering;
    let ord = match (have, want) {
        (AttrValue::Integer(a), AttrValue::Integer(b)) => a.cmp(b),
        (AttrValue::String(a), AttrValue::String(b)) => fold(a).cmp(&fold(b)),
        (AttrValue::Opaque(a), AttrValue::Opaque(b)) => a.cmp(b),
        (AttrValue::Boolean(a), AttrValue::Boolean(b)) => {
            return matches!(op, Op::Eq | Op::Approx) && a == b;
        }
        _ => return false,
    };
    match op {
        Op::Eq | Op::Approx => ord == Ordering::Equal,
        Op::Ge => ord != Ordering::Less,
        Op::Le => ord != Ordering::Greater,
    }
}

struct Parser<'a> {
    s: &'a [u8],
    i: usize,
}

impl Parser<'_> {
    fn ws(&mut self) {
        while self.s.get(self.i).is_some_and(|&b| is_ws(char::from(b))) {
            self.i += 1;
        }
    }

    fn eat(&mut self, b: u8) -> Option<()> {
        (self.s.get(self.i) == Some(&b)).then(|| self.i += 1)
    }

    fn filter(&mut self, depth: usize) -> Option<Filter> {
        if depth >= MAX_DEPTH {
            return None;
        }
        self.ws();
        self.eat(b'(')?;
        self.ws();
        let f = match *self.s.get(self.i)? {
            b'&' => {
                self.i += 1;
                Filter::And(self.list(depth)?)
            }
            b'|' => {
                self.i += 1;
                Filter::Or(self.list(depth)?)
            }
            b'!' => {
                self.i += 1;
                let f = self.filter(depth + 1)?;
                self.ws();
                Filter::Not(Box::new(f))
            }
            _ => self.item()?,
        };
        self.eat(b')')?;
        Some(f)
    }

    fn list(&mut self, depth: usize) -> Option<Vec<Filter>> {
        let mut fs = Vec::new();
        loop {
            self.ws();
            if self.s.get(self.i) != Some(&b'(') {
                break;
            }
            fs.push(self.filter(depth + 1)?);
        }
        self.ws();
        (!fs.is_empty()).then_some(fs)
    }

    fn item(&mut self) -> Option<Filter> {
        // The attribute runs to the operator; the value to the closing `)`.
        let start = self.i;
        let op_at = start + self.s[start..].iter().position(|b| b"=~<>()".contains(b))?;
        let (op, value_at) = match (self.s[op_at], self.s.get(op_at + 1)) {
            (b'=', _) => (Op::Eq, op_at + 1),
            (b'~', Some(b'=')) => (Op::Approx, op_at + 2),
            (b'>', Some(b'=')) => (Op::Ge, op_at + 2),
            (b'<', Some(b'=')) => (Op::Le, op_at + 2),
            _ => return None,
        };
        let end = value_at + self.s[value_at..].iter().position(|&b| b == b')')?;
        // Inputs are &str and every delimiter is ASCII: the slices are UTF-8.
        let tag_raw = core::str::from_utf8(&self.s[start..op_at]).ok()?;
        let value = core::str::from_utf8(&self.s[value_at..end]).ok()?;
        self.i = end;

        let tag_raw = tag_raw.trim_matches(is_ws);
        let tag_char = |c: char| is_attr_reserved(c) || is_bad_tag(c) || c == ':';
        if tag_raw.is_empty() || !raw_ok(tag_raw, tag_char) {
            return None;
        }
        let tag = unescape_str(tag_raw, is_filter_escapable)?;
        if value.contains('(') {
            return None;
        }
        if value == "*" {
            return (op == Op::Eq).then_some(Filter::Present(tag));
        }
        if value.contains('*') {
            if op != Op::Eq {
                return None;
            }
            let parts = value
                .split('*')
                .map(|p| unescape_str(p, is_filter_escapable).map(|u| fold_part(&u)))
                .collect::<Option<Vec<_>>>()?;
            let n = parts.len();
            let parts = parts
                .into_iter()
                .enumerate()
                .map(|(i, p)| match (i, i + 1 == n) {
                    (0, _) => p.trim_start().to_owned(),
                    (_, true) => p.trim_end().to_owned(),
                    _ => p,
                })
                .collect();
            return Some(Filter::Substring(tag, parts));
        }
        let reserved = |c: char| matches!(c, '\\' | '\0');
        let v = AttrValue::parse_raw(value, reserved, is_filter_escapable)?;
        Some(Filter::Compare(tag, op, v))
    }
}

/// In a filter, reserved characters and `*` may be escaped (RFC 2254 `\2a`).
fn is_filter_escapable(b: u8) -> bool {
    b == b'*' || (b.is_ascii() && is_attr_reserved(char::from(b)))
}

/// A SrvRqst predicate: a search filter, or empty (match everything). Keeps
/// the string as sent.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Predicate {
    raw: String,
    filter: Option<Filter>,
}

impl Predicate {
    /// A predicate as on the wire; empty (or only white space) means none.
    pub fn parse(s: &str) -> Result<Self, ParseError> {
        if s.len() > usize::from(u16::MAX) {
            return Err(ParseError::Syntax(Syntax::Predicate));
        }
        let filter = if s.trim_matches(is_ws).is_empty() {
            None
        } else {
            Some(Filter::parse(s)?)
        };
        Ok(Self {
            raw: s.to_owned(),
            filter,
        })
    }

    /// `s` as a predicate, for sending: [`Error::Malformed`] if it does not parse.
    pub fn new(s: &str) -> Result<Self, Error> {
        Self::parse(s).map_err(|_| Error::Malformed)
    }

    /// The predicate as sent.
    pub fn as_raw(&self) -> &str {
        &self.raw
    }

    /// The filter, if any.
    pub const fn filter(&self) -> Option<&Filter> {
        self.filter.as_ref()
    }

    /// Whether a service with `attrs` satisfies it (always, if empty).
    pub fn matches(&self, attrs: &AttrList) -> bool {
        self.filter.as_ref().is_none_or(|f| f.matches(attrs))
    }

    /// Reads a `u16`-prefixed predicate.
    pub fn read(r: &mut Reader<'_>) -> Result<Self, ParseError> {
        Self::parse(r.str16()?)
    }

    /// Appends it with its `u16` length prefix.
    pub fn encode(&self, out: &mut Vec<u8>) {
        super::codec::put_str16(out, &self.raw);
    }

    /// Octets on the wire, prefix included.
    pub fn buffer_len(&self) -> usize {
        2 + self.raw.len()
    }
}

impl fmt::Display for Predicate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.raw)
    }
}

#[cfg(test)]
pub(super) mod test {
    use proptest::prelude::*;

    use super::*;

    fn attrs(s: &str) -> AttrList {
        AttrList::parse(s).unwrap()
    }

    /// (filter, attribute list, expected match).
    #[rustfmt::skip]
    pub(in crate::wire::slp) static CASES: &[(&str, &str, bool)] = &[
        // RFC 2608 §8.1.
        ("(x=3)", "(x=1,2,3)", true),
        ("(!(Y=0))", "(y=0,1)", true),
        ("(!(y=0))", "(y=0)", false),
        ("(x=33)", "(x=true)", false),
        ("(y=foo)", "(y=FOO)", true),
        ("(|(x=33)(y=foo))", "(x=true),(y=foo)", true),
        ("(x=34*)", "(x=34foo)", true),
        ("(x=34*)", "(x=3432)", false),
        ("(keyword=*)", "keyword", true),
        ("(user=wump)", "(user=wump),(x=1)", true),
        ("(&(q<=3)(speed>=1000))", "(q=2),(speed=1000)", true),
        ("(&(q<=3)(speed>=1000))", "(q=4),(speed=1000)", false),
        ("(&(q<=3)(speed>=1000))", "(q=3),(speed=999)", false),
        // RFC 2608 §6.4: case and white space folding.
        ("(s=SOME    STRING)", "(s=  Some String  )", true),
        ("(s=some string)", "(s=somestring)", false),
        ("(S = x)", "(s=x)", true),
        ("(s=x y)", "(s=xy)", false),
        ("( s =x)", "(s=x)", true),
        // Presence.
        ("(a=*)", "(a=1)", true),
        ("(a=*)", "(b=1)", false),
        ("(!(a=*))", "(b=1)", true),
        ("(!(a=*))", "a", false),
        // Wildcards.
        ("(s=*bob*)", "(s=some BOB i know)", true),
        ("(s=b*b)", "(s=bob)", true),
        ("(s=b*b)", "(s=b)", false),
        ("(s=*x)", "(s=abx ),(t=1)", true),
        ("(s=a\\2a*)", "(s=a*c)", true),
        ("(s=a\\2a*)", "(s=abc)", false),
        ("(s=a\\2ab)", "(s=a*b)", true),
        ("(s=**)", "(s=anything)", true),
        ("(s=*)", "s", true),
        // Integers, booleans, opaque.
        ("(n>=-5)", "(n=-5)", true),
        ("(n<=-6)", "(n=-5)", false),
        ("(n=007)", "(n=7)", true),
        ("(n=7)", "(n=seven)", false),
        ("(n>=10)", "(n=9)", false),
        ("(n>=10)", "(n=9,10)", true),
        ("(b=TRUE)", "(b=true)", true),
        ("(b=false)", "(b=true)", false),
        ("(b>=true)", "(b=true)", false),
        ("(b~=True)", "(b=true)", true),
        ("(o=\\ff\\00\\01)", "(o=\\FF\\00\\01)", true),
        ("(o=\\ff\\00)", "(o=\\FF\\00\\01)", false),
        ("(o>=\\ff\\00)", "(o=\\FF\\00\\01)", true),
        ("(o=\\ff\\00)", "(o=\\5cff\\5c00)", false),
        // Strings order by folded octets.
        ("(s>=b)", "(s=Apple)", false),
        ("(s<=b)", "(s=Apple)", true),
        ("(s~=APPLE)", "(s=apple)", true),
        // Boolean operators.
        ("(&(a=1)(b=2))", "(a=1),(b=2)", true),
        ("(&(a=1)(b=2))", "(a=1),(b=3)", false),
        ("(|(a=9)(b=9))", "(a=1),(b=2)", false),
        ("(!(&(a=1)(b=2)))", "(a=1),(b=3)", true),
        ("(!(|(a=1)(b=2)))", "(a=1),(b=3)", false),
        ("(!(|(a=2)(b=2)))", "(a=1),(b=3)", true),
        ("(!(|(a=1)(b=2)))", "(a=1),(b=2)", false),
        ("(!(!(a=1)))", "(a=1)", true),
        ("(!(a=1))", "b", false),
        ("(!(a=1))", "a", false),
        ("(a=1)", "a", false),
        (" ( & (a=1) ( b=2 ) ) ", "(a=1),(b=2)", true),
        // Escaped reserved characters in values and tags.
        ("(op=James Dornan \\3cdornan@monster\\3e)", "(op=James Dornan \\3cdornan@monster\\3e)", true),
        ("(a\\28b\\29=1)", "(a\\28b\\29=1)", true),
        ("(a=x\\2cy)", "(a=x\\2cy)", true),
        ("(a=x=y)", "(a=x\\3dy)", true),
    ];

    #[test]
    fn evaluate_table() {
        for &(f, a, want) in CASES {
            let filter = Filter::parse(f).unwrap_or_else(|e| panic!("{f}: {e}"));
            assert_eq!(filter.matches(&attrs(a)), want, "{f} on {a}");
        }
    }

    #[test]
    fn malformed_filters() {
        let bad = Err(ParseError::Syntax(Syntax::Predicate));
        for f in [
            "",
            "a=1",
            "(a=1",
            "(a=1))",
            "((a=1))",
            "()",
            "(&)",
            "(|)",
            "(!)",
            "(!(a=1)(b=2))",
            "(=1)",
            "( =1)",
            "(a)",
            "(a!=1)",
            "(a=)",
            "(a>=x*)",
            "(a<=*)",
            "(a~=x*)",
            "(a=x(y)",
            "(a=\\41)",
            "(a=\\4)",
            "(a=\\ff)",
            "(a=\\ff\\0g)",
            "(a:dn:=x)",
            "(a*=1)",
            "(a=1)(b=2)",
            "(&(a=1)x)",
            "(a>1)",
            "(a=1) x",
            "(a\\2=1)",
        ] {
            assert_eq!(Filter::parse(f), bad, "{f:?}");
        }
        assert_eq!(
            ParseError::Syntax(Syntax::Predicate).error_code(),
            super::super::ErrorCode::ParseError
        );
    }

    #[test]
    fn depth_is_bounded() {
        let deep = |n: usize| format!("{}(a=1){}", "(!".repeat(n), ")".repeat(n));
        assert!(Filter::parse(&deep(MAX_DEPTH - 1)).is_ok());
        assert!(Filter::parse(&deep(MAX_DEPTH)).is_err());
        assert!(Filter::parse(&deep(100_000)).is_err());
        assert!(Filter::parse(&"(".repeat(100_000)).is_err());
    }

    #[test]
    fn predicates() {
        let p = Predicate::parse("").unwrap();
        assert!(p.filter().is_none());
        assert!(p.matches(&attrs("(a=1)")));
        assert!(Predicate::parse("  ")
            .unwrap()
            .matches(&AttrList::default()));
        let p = Predicate::parse("(a=1)").unwrap();
        assert!(p.matches(&attrs("(a=1)")));
        assert!(!p.matches(&AttrList::default()));
        assert_eq!(p.as_raw(), "(a=1)");
        assert_eq!(Predicate::new("(a"), Err(Error::Malformed));
        let mut out = Vec::new();
        p.encode(&mut out);
        assert_eq!(out, b"\x00\x05(a=1)");
        assert_eq!(Predicate::read(&mut Reader::new(&out)), Ok(p));
    }

    proptest! {
        #[test]
        fn parse_never_panics(s in "[()&|!=~<>*a-c0-9\\\\ fF]{0,30}") {
            if let Ok(f) = Filter::parse(&s) {
                let _ = f.matches(&attrs("(a=1,b),(b=true),c"));
            }
        }

        #[test]
        fn double_negation_is_identity(n in -3_i32..3, vals in proptest::collection::vec(-3_i32..3, 0..3)) {
            let list = if vals.is_empty() {
                "a".to_owned()
            } else {
                format!("(a={})", vals.iter().map(i32::to_string).collect::<Vec<_>>().join(","))
            };
            let a = attrs(&list);
            let f = Filter::parse(&format!("(a>={n})")).unwrap();
            let ff = Filter::parse(&format!("(!(!(a>={n})))")).unwrap();
            prop_assert_eq!(f.matches(&a), ff.matches(&a));
        }
    }
}
