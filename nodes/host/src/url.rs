//! The `http://` URLs the host client fetches: a literal address, or a
//! service name that only ROSA can reach (a host node has no resolver; see
//! `docs/shim.md`).

use core::fmt;

use smoltcp::wire::IpAddress;

/// What a URL names: an address, or a service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UrlHost {
    /// A literal IPv4 or `[IPv6]` address.
    Addr(IpAddress),
    /// Anything else: a name (e.g. `service.org`), reachable by ROSA.
    Name(String),
}

/// A parsed `http://HOST[:PORT]/PATH` URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Url {
    /// Server address or service name.
    pub host: UrlHost,
    /// Server port (default 80).
    pub port: u16,
    /// Path and query, starting with `/`.
    pub path: String,
    /// The `Host` header value (authority as written).
    pub authority: String,
}

impl Url {
    /// Parse `text`; the error says what is wrong.
    pub fn parse(text: &str) -> Result<Self, String> {
        let rest = text
            .strip_prefix("http://")
            .ok_or_else(|| format!("{text:?}: only http:// URLs are supported"))?;
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        let bracketed = authority.starts_with('[');
        let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
            let end = v6
                .find(']')
                .ok_or_else(|| format!("{text:?}: unclosed '['"))?;
            let port = match &v6[end + 1..] {
                "" => None,
                p => Some(
                    p.strip_prefix(':')
                        .ok_or_else(|| format!("{text:?}: bad port"))?,
                ),
            };
            (&v6[..end], port)
        } else {
            match authority.rsplit_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (authority, None),
            }
        };
        let host = match host.parse::<IpAddress>() {
            Ok(a) => UrlHost::Addr(a),
            Err(_) if bracketed => {
                return Err(format!("{text:?}: {host:?} is not an IPv6 address"));
            }
            Err(_) if is_name(host) => UrlHost::Name(host.to_owned()),
            Err(_) => {
                return Err(format!(
                    "{text:?}: {host:?} is neither an address nor a name"
                ))
            }
        };
        let port = match port {
            None => 80,
            Some(p) => p
                .parse::<u16>()
                .ok()
                .filter(|&p| p != 0)
                .ok_or_else(|| format!("{text:?}: port {p:?} is not 1..65535"))?,
        };
        if path.bytes().any(|b| b.is_ascii_control() || b == b' ') {
            return Err(format!("{text:?}: path has spaces or control characters"));
        }
        Ok(Self {
            host,
            port,
            path: path.to_owned(),
            authority: authority.to_owned(),
        })
    }
}

impl Url {
    /// The address, for a URL that names one.
    pub fn addr(&self) -> Option<IpAddress> {
        match self.host {
            UrlHost::Addr(a) => Some(a),
            UrlHost::Name(_) => None,
        }
    }

    /// The name, for a URL that names a service.
    pub fn name(&self) -> Option<&str> {
        match &self.host {
            UrlHost::Addr(_) => None,
            UrlHost::Name(n) => Some(n),
        }
    }
}

/// A host name: 1..=253 visible ASCII octets, none of `/ * @ [ ]`.
fn is_name(s: &str) -> bool {
    (1..=253).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_graphic() && !matches!(b, b'/' | b'*' | b'@' | b'[' | b']'))
}

impl fmt::Display for Url {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "http://{}{}", self.authority, self.path)
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn parses_v4_v6_ports_and_paths() {
        let u = Url::parse("http://10.0.0.20:8000/x?y=1").unwrap();
        assert_eq!(u.addr(), Some("10.0.0.20".parse::<IpAddress>().unwrap()));
        assert_eq!(
            (u.port, u.path.as_str(), u.authority.as_str()),
            (8000, "/x?y=1", "10.0.0.20:8000")
        );
        let u = Url::parse("http://[fd00::2]/").unwrap();
        assert_eq!((u.port, u.path.as_str()), (80, "/"));
        let u = Url::parse("http://[fd00::2]:81").unwrap();
        assert_eq!((u.port, u.path.as_str()), (81, "/"));
        assert_eq!(u.to_string(), "http://[fd00::2]:81/");
    }

    #[test]
    fn names_are_kept_for_rosa() {
        let u = Url::parse("http://service.org:8080/video/a?b").unwrap();
        assert_eq!(u.host, UrlHost::Name("service.org".into()));
        assert_eq!((u.port, u.path.as_str()), (8080, "/video/a?b"));
        assert_eq!(u.name(), Some("service.org"));
        assert_eq!(u.addr(), None);
        assert_eq!(Url::parse("http://service.org").unwrap().port, 80);
    }

    #[test]
    fn rejects_what_it_cannot_fetch() {
        for bad in [
            "https://10.0.0.1/",
            "http://[example.com]/",
            "http:///",
            "http://a*b/",
            "http://10.0.0.1:0/",
            "http://10.0.0.1:99999/",
            "http://[fd00::1/",
            "http://10.0.0.1/a b",
        ] {
            assert!(Url::parse(bad).is_err(), "{bad}");
        }
    }
}
