//! String rules shared by attributes, scopes, tags and filters (RFC 2608
//! §5, §6.4): `\XX` escapes, reserved characters, and the folding under which
//! SLP compares strings.

/// SPACE, CR, LF, TAB: the white space SLP folds (RFC 2608 §6.4).
pub(super) const fn is_ws(c: char) -> bool {
    matches!(c, ' ' | '\r' | '\n' | '\t')
}

/// `reserved` of RFC 2608 §5: `( ) , \ ! < = > ~` and CTL.
pub(super) const fn is_attr_reserved(c: char) -> bool {
    matches!(
        c,
        '(' | ')' | ',' | '\\' | '!' | '<' | '=' | '>' | '~' | '\0'..='\x1f' | '\x7f'
    )
}

/// `reserved` of RFC 2608 §6.4.1 (scopes and SLP SPIs): the attribute set
/// plus `; * +`.
pub(super) const fn is_scope_reserved(c: char) -> bool {
    is_attr_reserved(c) || matches!(c, ';' | '*' | '+')
}

/// `bad-tag` of RFC 2608 §5 plus `*`: never in an attribute tag.
pub(super) const fn is_bad_tag(c: char) -> bool {
    matches!(c, '\r' | '\n' | '\t' | '_' | '*')
}

/// `s` compared the SLP way: white space at the ends dropped, inner runs
/// folded to one SPACE, case folded (RFC 2608 §6.4).
pub fn fold(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for word in s.split(is_ws).filter(|w| !w.is_empty()) {
        if !out.is_empty() {
            out.push(' ');
        }
        out.extend(word.chars().flat_map(char::to_lowercase));
    }
    out
}

/// The octets `s` stands for, resolving `\XX` escapes. `escapable` says which
/// octets may be escaped (RFC 2608 §5: only reserved ones); `None` if an
/// escape is malformed or not allowed.
pub(super) fn unescape(s: &str, escapable: impl Fn(u8) -> bool) -> Option<Vec<u8>> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' {
            let v = hex_pair(b.get(i + 1..i + 3)?)?;
            if !escapable(v) {
                return None;
            }
            out.push(v);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    Some(out)
}

/// Like [`unescape`], the result as UTF-8.
pub(super) fn unescape_str(s: &str, escapable: impl Fn(u8) -> bool) -> Option<String> {
    String::from_utf8(unescape(s, escapable)?).ok()
}

/// The value of two hex digits.
pub(super) fn hex_pair(p: &[u8]) -> Option<u8> {
    let d = |c: u8| char::from(c).to_digit(16);
    match p {
        [h, l] => Some((d(*h)? * 16 + d(*l)?) as u8),
        _ => None,
    }
}

/// Appends `s` with every character `reserved` says escaped as `\XX`
/// (lower-case hex; reserved characters are all ASCII).
pub(super) fn escape_into(out: &mut String, s: &str, reserved: impl Fn(char) -> bool) {
    for c in s.chars() {
        if reserved(c) {
            push_escape(out, c as u8);
        } else {
            out.push(c);
        }
    }
}

/// Appends `\XX` for octet `b`.
pub(super) fn push_escape(out: &mut String, b: u8) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push('\\');
    out.push(char::from(HEX[usize::from(b >> 4)]));
    out.push(char::from(HEX[usize::from(b & 0xf)]));
}

/// Whether `s` uses only allowed raw characters and well-formed escapes.
pub(super) fn raw_ok(s: &str, reserved: impl Fn(char) -> bool) -> bool {
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' {
            if b.get(i + 1..i + 3).and_then(hex_pair).is_none() {
                return false;
            }
            i += 3;
        } else {
            // Reserved characters are ASCII, so a byte test is exact.
            if b[i].is_ascii() && reserved(char::from(b[i])) {
                return false;
            }
            i += 1;
        }
    }
    true
}

/// Shell-style match of `text` against `parts`, the pieces of a pattern
/// between its `*`s (so `["a", "", "b"]` is `a**b`); both already folded.
pub(super) fn glob(parts: &[String], text: &str) -> bool {
    let Some((first, rest)) = parts.split_first() else {
        return text.is_empty();
    };
    let Some(mut t) = text.strip_prefix(first.as_str()) else {
        return false;
    };
    let Some((last, middle)) = rest.split_last() else {
        // No star at all: exact match.
        return t.is_empty();
    };
    for p in middle {
        match t.find(p.as_str()) {
            Some(i) => t = &t[i + p.len()..],
            None => return false,
        }
    }
    t.ends_with(last.as_str())
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn folding() {
        assert_eq!(fold("  Some String  "), "some string");
        assert_eq!(fold("SOME    STRING"), "some string");
        assert_eq!(fold("a\t\r\nB"), "a b");
        assert_eq!(fold("ÄÖ"), "äö");
        assert_eq!(fold(" x  Y"), fold("X y "));
    }

    #[test]
    fn escapes() {
        assert_eq!(unescape(r"a\2cb\5C", |_| true).unwrap(), b"a,b\\");
        assert_eq!(unescape(r"\2", |_| true), None);
        assert_eq!(unescape(r"\zz", |_| true), None);
        assert_eq!(unescape(r"\41", |b| b == b','), None);
        let mut s = String::new();
        escape_into(&mut s, "a,b\\(c)\n", is_attr_reserved);
        assert_eq!(s, r"a\2cb\5c\28c\29\0a");
        assert!(raw_ok(&s, is_attr_reserved));
        assert!(!raw_ok("a,b", is_attr_reserved));
        assert!(!raw_ok(r"a\2", is_attr_reserved));
    }

    #[test]
    fn globbing() {
        let p = |s: &str| s.split('*').map(str::to_owned).collect::<Vec<_>>();
        for (pat, text, want) in [
            ("*bob*", "some bob i know", true),
            ("*bob*", "bigbob", true),
            ("*bob*", "bobby", true),
            ("*bob*", "bob", true),
            ("bob", "bob", true),
            ("bob", "bobby", false),
            ("b*b", "bob", true),
            ("b*b", "b", false),
            ("a*b*c", "abc", true),
            ("a*b*c", "acb", false),
            ("*", "", true),
            ("34*", "34foo", true),
        ] {
            assert_eq!(glob(&p(pat), text), want, "{pat} vs {text}");
        }
    }
}
