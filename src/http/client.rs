//! The client's address: the one value every per-client limit and the fair hash admission key on.
//!
//! Without trusted proxies it is the socket peer. When the peer is a trusted proxy, it comes from
//! exactly one header the operator names (`CONSOLED_CLIENT_IP_HEADER`):
//!
//! - `X-Forwarded-For` (the default) is a list: every line of it, in order, is one list (as HTTP
//!   joins repeated lines), and the client is the right-most hop that is not a trusted proxy.
//!   Hops a client writes are always left of the one our proxy appends, so they never count.
//! - Any other name (e.g. `X-Real-IP`) is a single value the proxy overwrites: exactly one line
//!   holding one address, else the request counts as coming from the proxy itself.
//!
//! The server hands us every line of a header, not only the first (tiny_http's `get` shows
//! only the first; a client's own line would otherwise precede the one HAProxy appends).
//!
//! An IPv6 client counts by its /64: one subscriber usually holds a whole /64, so a limit per
//! single IPv6 address would be a limit per nothing.

use std::fmt;
use std::net::{IpAddr, Ipv6Addr};

/// The header a proxy appends to (a list); any other configured name is read as one value.
pub const FORWARDED_FOR: &str = "x-forwarded-for";

/// A client as limits count it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Client(Option<IpAddr>);

impl Client {
    pub fn of(ip: Option<IpAddr>) -> Client {
        Client(ip.map(|ip| match ip {
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => IpAddr::V4(v4),
                None => {
                    let s = v6.segments();
                    IpAddr::V6(Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
                }
            },
            v4 => v4,
        }))
    }

    pub fn ip(self) -> Option<IpAddr> {
        self.0
    }
}

impl fmt::Display for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            None => f.write_str("unknown"),
            Some(IpAddr::V6(v6)) => write!(f, "{v6}/64"),
            Some(v4) => write!(f, "{v4}"),
        }
    }
}

/// Where the client's address comes from (configuration).
#[derive(Clone, Debug)]
pub struct Source {
    /// Addresses and ranges (`CONSOLED_TRUSTED_PROXIES`).
    pub trusted_proxies: Vec<super::net::Net>,
    /// Lower-case header name.
    pub header: String,
}

impl Source {
    /// Whether `peer` is a trusted proxy (whose connections carry many clients).
    pub fn is_proxy(&self, peer: IpAddr) -> bool {
        let peer = peer.to_canonical();
        self.trusted_proxies.iter().any(|net| net.contains(peer))
    }

    /// The client's address for a request from `peer` with these (lower-case) header lines.
    pub fn resolve(&self, peer: Option<IpAddr>, headers: &[(String, String)]) -> Option<IpAddr> {
        // A dual-stack listener reports IPv4 peers as `::ffff:a.b.c.d`.
        let peer = peer?.to_canonical();
        if !self.is_proxy(peer) {
            return Some(peer);
        }
        let mut lines = headers
            .iter()
            .filter(|(n, _)| *n == self.header)
            .map(|(_, v)| v.as_str());
        if self.header != FORWARDED_FOR {
            return match (lines.next(), lines.next()) {
                (Some(one), None) => Some(parse_hop(one).unwrap_or(peer)),
                _ => Some(peer),
            };
        }
        let hops: Vec<&str> = lines.flat_map(|l| l.split(',')).map(str::trim).collect();
        let mut nearest = peer;
        for hop in hops.iter().rev().filter(|h| !h.is_empty()) {
            match parse_hop(hop) {
                Some(ip) if self.is_proxy(ip) => nearest = ip,
                Some(ip) => return Some(ip),
                // Nothing left of a hop we cannot read is trustworthy.
                None => break,
            }
        }
        Some(nearest)
    }
}

/// An address as proxies write it: `1.2.3.4`, `1.2.3.4:5678`, `2001:db8::1`, `[2001:db8::1]:80`.
fn parse_hop(hop: &str) -> Option<IpAddr> {
    let hop = hop.trim();
    hop.parse::<IpAddr>()
        .ok()
        .or_else(|| hop.parse::<std::net::SocketAddr>().ok().map(|s| s.ip()))
        .map(|ip| ip.to_canonical())
}

#[cfg(test)]
mod tests {
    use super::*;

    const PROXY: &str = "10.0.0.1";

    fn source(header: &str) -> Source {
        Source {
            trusted_proxies: vec![PROXY.parse().unwrap(), "10.0.0.2".parse().unwrap()],
            header: header.into(),
        }
    }

    fn resolve(header: &str, peer: &str, lines: &[(&str, &str)]) -> String {
        let lines: Vec<(String, String)> = lines
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect();
        source(header)
            .resolve(Some(peer.parse().unwrap()), &lines)
            .unwrap()
            .to_string()
    }

    #[test]
    fn untrusted_peer_is_the_client_whatever_it_sends() {
        let xff = [("x-forwarded-for", "1.1.1.1"), ("x-real-ip", "2.2.2.2")];
        assert_eq!(resolve(FORWARDED_FOR, "9.9.9.9", &xff), "9.9.9.9");
        assert_eq!(resolve("x-real-ip", "9.9.9.9", &xff), "9.9.9.9");
    }

    #[test]
    fn forwarded_for_takes_the_right_most_untrusted_hop() {
        let one = [("x-forwarded-for", "6.6.6.6, 8.8.8.8")];
        assert_eq!(resolve(FORWARDED_FOR, PROXY, &one), "8.8.8.8");
        // Two proxies of ours in a row: skip both.
        let chain = [("x-forwarded-for", "6.6.6.6, 8.8.8.8, 10.0.0.2")];
        assert_eq!(resolve(FORWARDED_FOR, PROXY, &chain), "8.8.8.8");
        let ported = [("x-forwarded-for", "[2001:db8::7]:443")];
        assert_eq!(resolve(FORWARDED_FOR, PROXY, &ported), "2001:db8::7");
        // Nothing usable: the proxy itself.
        assert_eq!(resolve(FORWARDED_FOR, PROXY, &[]), PROXY);
        let junk = [("x-forwarded-for", "not-an-ip")];
        assert_eq!(resolve(FORWARDED_FOR, PROXY, &junk), PROXY);
        let junk_left = [("x-forwarded-for", "junk, 10.0.0.2")];
        assert_eq!(resolve(FORWARDED_FOR, PROXY, &junk_left), "10.0.0.2");
    }

    /// HAProxy's `option forwardfor` appends its own line: the client's line comes first.
    #[test]
    fn a_line_the_client_adds_never_chooses_the_address() {
        let two = [
            ("x-forwarded-for", "6.6.6.6"),
            ("x-forwarded-for", "8.8.8.8"),
        ];
        assert_eq!(resolve(FORWARDED_FOR, PROXY, &two), "8.8.8.8");
    }

    #[test]
    fn single_value_header_needs_exactly_one_line() {
        let one = [("x-real-ip", "8.8.8.8")];
        assert_eq!(resolve("x-real-ip", PROXY, &one), "8.8.8.8");
        // A proxy that appended instead of overwriting: not trusted.
        let two = [("x-real-ip", "6.6.6.6"), ("x-real-ip", "8.8.8.8")];
        assert_eq!(resolve("x-real-ip", PROXY, &two), PROXY);
        let list = [("x-real-ip", "6.6.6.6, 8.8.8.8")];
        assert_eq!(resolve("x-real-ip", PROXY, &list), PROXY);
        // The other header is ignored when this one is named.
        let other = [("x-forwarded-for", "8.8.8.8")];
        assert_eq!(resolve("x-real-ip", PROXY, &other), PROXY);
    }

    #[test]
    fn a_proxy_seen_through_a_dual_stack_listener_is_still_trusted() {
        let one = [("x-forwarded-for", "8.8.8.8")];
        assert_eq!(resolve(FORWARDED_FOR, "::ffff:10.0.0.1", &one), "8.8.8.8");
    }

    #[test]
    fn ipv6_clients_count_by_their_64() {
        let a = Client::of(Some("2001:db8:1:2:aaaa::1".parse().unwrap()));
        let b = Client::of(Some("2001:db8:1:2:bbbb::9".parse().unwrap()));
        assert_eq!(a, b);
        assert_eq!(a.to_string(), "2001:db8:1:2::/64");
        let mapped = Client::of(Some("::ffff:1.2.3.4".parse().unwrap()));
        assert_eq!(mapped.to_string(), "1.2.3.4");
        assert_eq!(Client::of(None).to_string(), "unknown");
    }
}
