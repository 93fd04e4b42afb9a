//! The form of a password that is hashed and compared (Unicode NFC), and what a comparison
//! found (`Verdict`): a hash made before passwords were normalised is of the form as typed.

use std::borrow::Cow;

/// What a password check found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Wrong,
    Right,
    /// Right as typed only: the stored hash is of a form that was not normalised (made before
    /// passwords were); the caller may store the normalised form's hash instead.
    RightAsTyped,
}

impl Verdict {
    pub fn is_right(self) -> bool {
        self != Verdict::Wrong
    }
}

/// The form of a password that is hashed and compared: Unicode NFC (RFC 8265's OpaqueString
/// profile normalises passwords so; NFKC would also fold characters a user chose on purpose,
/// such as full-width letters, into others).
pub fn normalise(password: &str) -> Cow<'_, str> {
    use unicode_normalization::{is_nfc_quick, IsNormalized, UnicodeNormalization};
    if is_nfc_quick(password.chars()) == IsNormalized::Yes {
        return Cow::Borrowed(password);
    }
    let nfc: String = password.nfc().collect();
    if nfc == password {
        Cow::Borrowed(password)
    } else {
        Cow::Owned(nfc)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_normalised_form_is_nfc_and_borrowed_when_it_already_is() {
        assert_eq!(normalise("cafe\u{301}"), "caf\u{e9}");
        assert!(matches!(normalise("caf\u{e9}"), Cow::Borrowed(_)));
        assert!(matches!(normalise("plain ascii"), Cow::Borrowed(_)));
        // NFC, not NFKC: a full-width letter stays what the user chose.
        assert_eq!(normalise("\u{ff21}"), "\u{ff21}");
        assert!(Verdict::RightAsTyped.is_right() && !Verdict::Wrong.is_right());
    }
}
