//! A submitted second-factor code, told apart by its shape: a TOTP code or a recovery code.

use crate::error::{ApiError, ApiResult};
use crate::http::json::Fields;
use crate::http::Request;

/// Recovery codes are 10 random bytes: 16 base32 characters, shown in groups of 4. 80 bits keep
/// the unsalted SHA-256 we store out of reach of an offline search.
pub const RECOVERY_CODE_CHARS: usize = 16;

/// A submitted code, told apart by its shape.
#[derive(Debug, PartialEq, Eq)]
pub enum Factor {
    /// Six ASCII digits.
    Totp(String),
    /// A recovery code, normalised: lower case, no separators.
    Recovery(String),
}

impl Factor {
    /// Spaces and hyphens are ignored (apps show `123 456`, recovery codes are grouped) and
    /// recovery codes are case-insensitive. Any other shape is 400 `invalid_input`.
    pub fn parse(raw: &str) -> ApiResult<Factor> {
        let malformed = || ApiError::invalid("code", "6 digits or a recovery code");
        if raw.len() > 64 {
            return Err(malformed());
        }
        let compact: String = raw
            .chars()
            .filter(|c| !matches!(c, ' ' | '-'))
            .collect::<String>()
            .to_ascii_lowercase();
        if compact.len() == 6 && compact.bytes().all(|b| b.is_ascii_digit()) {
            Ok(Factor::Totp(compact))
        } else if compact.len() == RECOVERY_CODE_CHARS
            && compact
                .bytes()
                .all(|b| matches!(b, b'a'..=b'z' | b'2'..=b'7'))
        {
            Ok(Factor::Recovery(compact))
        } else {
            Err(malformed())
        }
    }

    pub fn from_body(req: &Request) -> ApiResult<Factor> {
        Factor::parse(Fields::parse(&req.body)?.string("code")?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Code;

    #[test]
    fn code_shapes() {
        let totp = |s: &str| Factor::Totp(s.to_string());
        let recovery = |s: &str| Factor::Recovery(s.to_string());
        assert_eq!(Factor::parse("123456").unwrap(), totp("123456"));
        assert_eq!(Factor::parse(" 123 456 ").unwrap(), totp("123456"));
        assert_eq!(
            Factor::parse("ABCD-efgh-2345-6777").unwrap(),
            recovery("abcdefgh23456777")
        );
        assert_eq!(
            Factor::parse("abcdefgh23456777").unwrap(),
            recovery("abcdefgh23456777")
        );
        for bad in [
            "",
            "12345",
            "1234567",
            "12345a",
            "١٢٣٤٥٦",
            "abcd-efgh-2345-677",
            "abcd-efgh-2345-6771",
            "abcd-efgh-2345-67770",
            &"1".repeat(100),
        ] {
            let e = Factor::parse(bad).unwrap_err();
            assert_eq!(e.code, Code::InvalidInput, "{bad:?}");
        }
    }
}
