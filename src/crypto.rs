//! Random tokens, token hashes, constant-time comparison, base32 and TOTP (RFC 6238).
//!
//! Every bearer secret we hand out (session, CSRF, API and mail tokens, recovery codes) is 32
//! random bytes or more of entropy, so a single SHA-256 is the right stored form: a slow password
//! hash adds nothing against a 256-bit secret and would cost a hash per request.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use sha2::{Digest, Sha256};

pub fn random_bytes<const N: usize>() -> [u8; N] {
    let mut buf = [0u8; N];
    getrandom::fill(&mut buf).expect("the operating system's random source failed");
    buf
}

/// 32 random bytes, base64url without padding (43 characters).
pub fn new_token() -> String {
    URL_SAFE_NO_PAD.encode(random_bytes::<32>())
}

pub fn b64url(bytes: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(bytes)
}

pub fn b64url_decode(s: &str) -> Option<Vec<u8>> {
    URL_SAFE_NO_PAD.decode(s.trim_end_matches('=')).ok()
}

/// The stored form of a token.
pub fn token_hash(token: &str) -> Vec<u8> {
    Sha256::digest(token.as_bytes()).to_vec()
}

pub fn sha256(data: &[u8]) -> [u8; 32] {
    Sha256::digest(data).into()
}

pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

const BASE32: &[u8; 32] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";

/// RFC 4648 base32 without padding (authenticator apps' secret format).
pub fn base32_encode(data: &[u8]) -> String {
    let mut out = String::new();
    let (mut buffer, mut bits) = (0u32, 0u32);
    for &b in data {
        buffer = buffer << 8 | b as u32;
        bits += 8;
        while bits >= 5 {
            out.push(BASE32[(buffer >> (bits - 5) & 31) as usize] as char);
            bits -= 5;
        }
    }
    if bits > 0 {
        out.push(BASE32[(buffer << (5 - bits) & 31) as usize] as char);
    }
    out
}

pub fn base32_decode(s: &str) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    let (mut buffer, mut bits) = (0u32, 0u32);
    for c in s.trim_end_matches('=').bytes() {
        let v = BASE32.iter().position(|&x| x == c.to_ascii_uppercase())? as u32;
        buffer = (buffer << 5 | v) & 0xFFFF;
        bits += 5;
        if bits >= 8 {
            out.push((buffer >> (bits - 8)) as u8);
            bits -= 8;
        }
    }
    Some(out)
}

pub const TOTP_STEP: u64 = 30;

/// The 6-digit SHA-1 TOTP code of `secret` for time step `step`.
pub fn totp_code(secret: &[u8], step: u64) -> String {
    totp_lite::totp_custom::<totp_lite::Sha1>(TOTP_STEP, 6, secret, step * TOTP_STEP)
}

/// The time step of a code within ±1 step of `now` (Unix seconds) that equals `code`, if any.
/// Every candidate is compared in constant time.
pub fn totp_match(secret: &[u8], code: &str, now: u64) -> Option<u64> {
    let current = now / TOTP_STEP;
    let mut found = None;
    for step in [current.saturating_sub(1), current, current + 1] {
        if constant_time_eq(totp_code(secret, step).as_bytes(), code.as_bytes()) && found.is_none()
        {
            found = Some(step);
        }
    }
    found
}

pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// HMAC-SHA-256 of the concatenation of `parts`.
pub fn hmac_sha256(key: &[u8], parts: &[&[u8]]) -> [u8; 32] {
    use ring::hmac;
    let mut ctx = hmac::Context::with_key(&hmac::Key::new(hmac::HMAC_SHA256, key));
    for part in parts {
        ctx.update(part);
    }
    ctx.sign().as_ref().try_into().expect("32 bytes")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc6238_appendix_b_sha1_vectors() {
        // The RFC's 8-digit SHA-1 values; the 6-digit code is their last six digits.
        let secret = b"12345678901234567890";
        let vectors = [
            (59u64, "94287082"),
            (1111111109, "07081804"),
            (1111111111, "14050471"),
            (1234567890, "89005924"),
            (2000000000, "69279037"),
            (20000000000, "65353130"),
        ];
        for (time, eight) in vectors {
            let full = totp_lite::totp_custom::<totp_lite::Sha1>(30, 8, secret, time);
            assert_eq!(full, eight, "t={time}");
            assert_eq!(totp_code(secret, time / 30), eight[2..], "t={time}");
        }
    }

    #[test]
    fn totp_window_is_one_step_each_way() {
        let secret = b"12345678901234567890";
        let now = 1_000_000_020;
        let step = now / 30;
        for (s, ok) in [
            (step - 2, false),
            (step - 1, true),
            (step, true),
            (step + 1, true),
            (step + 2, false),
        ] {
            let code = totp_code(secret, s);
            assert_eq!(
                totp_match(secret, &code, now) == Some(s),
                ok,
                "step offset {}",
                s as i64 - step as i64
            );
        }
        assert_eq!(totp_match(secret, "abcdef", now), None);
    }

    #[test]
    fn base32_round_trip() {
        assert_eq!(base32_encode(b"foobar"), "MZXW6YTBOI");
        assert_eq!(base32_decode("MZXW6YTBOI").unwrap(), b"foobar");
        let secret = random_bytes::<20>();
        assert_eq!(base32_decode(&base32_encode(&secret)).unwrap(), secret);
        assert!(base32_decode("not base32!").is_none());
    }

    #[test]
    fn tokens_are_43_url_safe_characters() {
        let t = new_token();
        assert_eq!(t.len(), 43);
        assert!(t
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'));
        assert_ne!(t, new_token());
        assert_eq!(token_hash(&t).len(), 32);
    }

    #[test]
    fn constant_time_eq_basics() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"ab"));
    }
}
