//! Address ranges (`10.0.0.0/8`, `2001:db8::/32`, or one address) for
//! `CONSOLED_TRUSTED_PROXIES`: proxy fleets and load balancers are configured as ranges.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

/// An IPv4 or IPv6 network; a single address is the network of its full length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Net {
    base: IpAddr,
    prefix: u8,
}

impl Net {
    /// Whether `ip` is inside (IPv4-mapped IPv6 addresses count as IPv4).
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.base, ip.to_canonical()) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                mask32(u32::from(ip), self.prefix) == u32::from(net)
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                mask128(u128::from(ip), self.prefix) == u128::from(net)
            }
            _ => false,
        }
    }
}

fn mask32(bits: u32, prefix: u8) -> u32 {
    bits & u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0)
}

fn mask128(bits: u128, prefix: u8) -> u128 {
    bits & u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0)
}

/// Why a range was refused, for the configuration's error message.
#[derive(Debug, PartialEq, Eq)]
pub struct BadNet(pub &'static str);

impl FromStr for Net {
    type Err = BadNet;

    fn from_str(s: &str) -> Result<Net, BadNet> {
        let (addr, prefix) = match s.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (s, None),
        };
        let ip: IpAddr = addr
            .trim()
            .parse()
            .map_err(|_| BadNet("not an IP address or range"))?;
        let ip = ip.to_canonical();
        let max = if ip.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            None => max,
            Some(p) => {
                p.trim()
                    .parse::<u8>()
                    .ok()
                    .filter(|&p| p <= max)
                    .ok_or(if ip.is_ipv4() {
                        BadNet("an IPv4 prefix length is 0 to 32")
                    } else {
                        BadNet("an IPv6 prefix length is 0 to 128")
                    })?
            }
        };
        let base = match ip {
            IpAddr::V4(v4) => IpAddr::V4(mask32(u32::from(v4), prefix).into()),
            IpAddr::V6(v6) => IpAddr::V6(mask128(u128::from(v6), prefix).into()),
        };
        // `10.0.0.1/8` is most likely a typo for a host or for `10.0.0.0/8`: refused, not guessed.
        if base != ip {
            return Err(BadNet(
                "host bits are set below the prefix (write the network's first address)",
            ));
        }
        Ok(Net { base, prefix })
    }
}

impl fmt::Display for Net {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let max = if self.base.is_ipv4() { 32 } else { 128 };
        if self.prefix == max {
            write!(f, "{}", self.base)
        } else {
            write!(f, "{}/{}", self.base, self.prefix)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn net(s: &str) -> Net {
        s.parse().unwrap()
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn ranges_and_single_addresses() {
        let loopback = net("127.0.0.0/8");
        assert!(loopback.contains(ip("127.0.0.1")) && loopback.contains(ip("127.255.0.9")));
        assert!(!loopback.contains(ip("128.0.0.1")) && !loopback.contains(ip("::1")));
        assert!(loopback.contains(ip("::ffff:127.0.0.2")));
        let one = net("10.0.0.1");
        assert!(one.contains(ip("10.0.0.1")) && !one.contains(ip("10.0.0.2")));
        let v6 = net("2001:db8::/32");
        assert!(v6.contains(ip("2001:db8:ffff::1")) && !v6.contains(ip("2001:db9::1")));
        assert!(net("::1").contains(ip("::1")));
        assert!(net("0.0.0.0/0").contains(ip("8.8.8.8")));
        assert!(net("::/0").contains(ip("2001:db8::1")) && !net("::/0").contains(ip("1.2.3.4")));
        assert!(net("172.16.0.0/12").contains(ip("172.31.255.255")));
        assert!(!net("172.16.0.0/12").contains(ip("172.32.0.0")));
        assert_eq!(net(" 192.168.0.0 / 16 ").to_string(), "192.168.0.0/16");
        assert_eq!(net("10.0.0.1/32").to_string(), "10.0.0.1");
    }

    #[test]
    fn refusals_say_why() {
        for (bad, why) in [
            ("10.0.0.0/33", "0 to 32"),
            ("::/129", "0 to 128"),
            ("10.0.0.1/8", "host bits"),
            ("localhost", "not an IP"),
            ("10.0.0.0/x", "0 to 32"),
            ("", "not an IP"),
        ] {
            let err = bad.parse::<Net>().unwrap_err();
            assert!(err.0.contains(why), "{bad}: {}", err.0);
        }
    }
}
