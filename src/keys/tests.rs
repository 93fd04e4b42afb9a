//! Unit tests of sealing.
use super::*;
use crate::config::keys::Key32;

fn keys(current: u8, old: &[u8]) -> DataKeys {
    DataKeys::from_settings(&KeySettings {
        data: Some(Key32([current; 32])),
        data_old: old.iter().map(|&b| Key32([b; 32])).collect(),
        csrf: None,
    })
}

#[test]
fn a_sealed_secret_opens_for_its_user_only() {
    let k = keys(1, &[]);
    let secret = b"12345678901234567890";
    let sealed = k.seal_totp(42, secret);
    assert_eq!(sealed.len(), 53);
    assert!(is_sealed(&sealed) && k.is_current(&sealed));
    assert!(!sealed.windows(20).any(|w| w == secret));
    assert_eq!(k.open_totp(42, &sealed).unwrap(), secret);
    assert_eq!(k.open_totp(43, &sealed), Err(OpenError::Forged));
    let mut altered = sealed.clone();
    altered[30] ^= 1;
    assert_eq!(k.open_totp(42, &altered), Err(OpenError::Forged));
    // Two seals of one secret differ (random nonce).
    assert_ne!(k.seal_totp(42, secret), sealed);
}

#[test]
fn old_keys_open_and_only_the_current_one_seals() {
    let before = keys(1, &[]);
    let sealed = before.seal_totp(7, b"abcdefghijabcdefghij");
    let after = keys(2, &[1]);
    assert!(!after.is_current(&sealed));
    assert_eq!(
        after.open_totp(7, &sealed).unwrap(),
        b"abcdefghijabcdefghij"
    );
    let resealed = after.seal_totp(7, b"abcdefghijabcdefghij");
    assert!(after.is_current(&resealed));
    match keys(3, &[]).open_totp(7, &sealed) {
        Err(OpenError::UnknownKey(id)) => assert_eq!(Some(id), before.current_id()),
        other => panic!("{other:?}"),
    }
}

#[test]
fn without_a_key_secrets_stay_as_they_are_and_old_ones_still_open() {
    let none = DataKeys::default();
    assert_eq!(
        none.seal_totp(1, b"abcdefghijabcdefghij"),
        b"abcdefghijabcdefghij"
    );
    let k = keys(1, &[]);
    let plain = b"abcdefghijabcdefghij".to_vec();
    assert!(!is_sealed(&plain) && !k.is_current(&plain));
    assert_eq!(k.open_totp(1, &plain).unwrap(), plain);
    assert!(none.derived_csrf_key().is_none());
    assert_ne!(k.derived_csrf_key().unwrap(), [1; 32]);
    assert_eq!(k.current_id().unwrap().len(), 8);
}
