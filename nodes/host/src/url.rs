//! The `http://` URLs the host client fetches: literal addresses only (a
//! host node has no resolver; names belong to the roles that route by name).

use core::fmt;

use smoltcp::wire::IpAddress;

/// A parsed `http://ADDR[:PORT]/PATH` URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Url {
    /// Server address.
    pub addr: IpAddress,
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
        let addr: IpAddress = host.parse().map_err(|_| {
            format!("{text:?}: {host:?} is not an IP address (no DNS in a host node)")
        })?;
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
            addr,
            port,
            path: path.to_owned(),
            authority: authority.to_owned(),
        })
    }
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
        assert_eq!(u.addr, "10.0.0.20".parse::<IpAddress>().unwrap());
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
    fn rejects_what_it_cannot_fetch() {
        for bad in [
            "https://10.0.0.1/",
            "http://example.com/",
            "http://10.0.0.1:0/",
            "http://10.0.0.1:99999/",
            "http://[fd00::1/",
            "http://10.0.0.1/a b",
        ] {
            assert!(Url::parse(bad).is_err(), "{bad}");
        }
    }
}
