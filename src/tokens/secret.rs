//! The form of an API token's secret: the fixed prefix `csdt_`, 43 random base62 characters
//! (256 bits, as every bearer secret here), and 6 base62 characters of the CRC-32 of those 43
//! (GitHub's `ghp_` tokens carry one the same way). The prefix lets secret scanners recognise a
//! leaked token (`csdt_[0-9A-Za-z]{49}`); the checksum lets a mistyped or truncated one be refused
//! without a database lookup.
//!
//! Tokens of the first form (`csd_` and 43 base64url characters, no checksum) keep working: their
//! form is checked, then they are looked up. The new prefix is not `csd_` plus something, so a
//! new token cut short can never pass for an old one.

use crate::crypto::random_bytes;

pub const PREFIX: &str = "csdt_";
/// The prefix of the first form.
pub const LEGACY_PREFIX: &str = "csd_";

const RANDOM: usize = 43;
const CHECK: usize = 6;
const LEGACY: usize = 43;
const BASE62: &[u8; 62] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/// What a presented secret looks like, before any lookup.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// The current form with a correct checksum: worth a lookup.
    Checked,
    /// The first form (no checksum): worth a lookup.
    Legacy,
    /// Neither: refused at once.
    Malformed,
}

/// A new secret of the current form.
pub fn mint() -> String {
    let mut random = String::with_capacity(RANDOM);
    while random.len() < RANDOM {
        // 248 = 4 * 62: bytes below it map onto the alphabet evenly.
        for b in random_bytes::<64>() {
            if b < 248 && random.len() < RANDOM {
                random.push(BASE62[(b % 62) as usize] as char);
            }
        }
    }
    let check = checksum(&random);
    format!("{PREFIX}{random}{check}")
}

pub fn shape(secret: &str) -> Shape {
    if let Some(rest) = secret.strip_prefix(PREFIX) {
        let checked = rest.len() == RANDOM + CHECK
            && rest.bytes().all(|b| b.is_ascii_alphanumeric())
            && checksum(&rest[..RANDOM]) == rest[RANDOM..];
        return if checked {
            Shape::Checked
        } else {
            Shape::Malformed
        };
    }
    match secret.strip_prefix(LEGACY_PREFIX) {
        Some(rest)
            if rest.len() == LEGACY
                && rest
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_') =>
        {
            Shape::Legacy
        }
        _ => Shape::Malformed,
    }
}

/// CRC-32 (IEEE 802.3, as zlib) of `random`, in 6 base62 digits, most significant first.
fn checksum(random: &str) -> String {
    let mut n = crc32(random.as_bytes());
    let mut digits = [b'0'; CHECK];
    for d in digits.iter_mut().rev() {
        *d = BASE62[(n % 62) as usize];
        n /= 62;
    }
    String::from_utf8_lossy(&digits).into_owned()
}

/// Bit by bit: a token is checked once per request, so a table buys nothing worth its size.
fn crc32(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = (crc >> 1) ^ (0xEDB8_8320 & (crc & 1).wrapping_neg());
        }
    }
    !crc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32_is_zlibs() {
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
        assert_eq!(crc32(b""), 0);
    }

    #[test]
    fn a_minted_secret_checks_and_is_fresh() {
        let s = mint();
        assert_eq!(s.len(), PREFIX.len() + RANDOM + CHECK);
        assert_eq!(shape(&s), Shape::Checked);
        assert_ne!(mint(), s);
    }

    #[test]
    fn a_mistyped_or_truncated_secret_is_malformed() {
        let s = mint();
        for cut in [1, 6, 7, RANDOM + CHECK - LEGACY] {
            assert_eq!(shape(&s[..s.len() - cut]), Shape::Malformed, "cut {cut}");
        }
        // One character changed anywhere after the prefix.
        for at in PREFIX.len()..s.len() {
            let mut b = s.clone().into_bytes();
            b[at] = if b[at] == b'a' { b'b' } else { b'a' };
            let typo = String::from_utf8(b).unwrap();
            assert_eq!(shape(&typo), Shape::Malformed, "{typo}");
        }
        // Cut to the length of the old form, a new token is still not one of the old form.
        assert_eq!(shape(&s[..LEGACY_PREFIX.len() + LEGACY]), Shape::Malformed);
        for junk in ["", "csdt_", "csd_", "Bearer", "csd_nope", &"x".repeat(60)] {
            assert_eq!(shape(junk), Shape::Malformed, "{junk}");
        }
    }

    #[test]
    fn the_first_form_is_recognised() {
        let old = format!("{LEGACY_PREFIX}{}", crate::crypto::new_token());
        assert_eq!(shape(&old), Shape::Legacy);
        assert_eq!(shape(&old[..old.len() - 1]), Shape::Malformed);
        assert_eq!(shape(&format!("{old}x")), Shape::Malformed);
    }
}
