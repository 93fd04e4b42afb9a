//! Server keys: the data key that seals TOTP secrets (docs/OPERATIONS.md, "Sealed TOTP secrets") and the key
//! that signs CSRF tokens (`http::csrf`).
//!
//! A sealed secret is `0x01 ‖ key id (4) ‖ nonce (12) ‖ ChaCha20-Poly1305(secret) ‖ tag (16)`:
//! 53 bytes for a 20-byte secret. The key id is the first 4 bytes of an HMAC of the key, so an
//! operator never names keys and a secret says which key opens it. The associated data binds
//! the sealed secret to its user (and to the header), so a row copied to another user does not
//! open. A stored value of any other shape is a secret stored before sealing (always 20 bytes):
//! it still works, and is sealed at the next start with a key (`reseal`).
//!
//! The AEAD and the HMAC are ring's, already in the tree through rustls.

pub mod reseal;

use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, CHACHA20_POLY1305, NONCE_LEN};

use crate::config::keys::{Key32, KeySettings};
use crate::crypto;

const VERSION: u8 = 1;
const KID_LEN: usize = 4;
const HEADER_LEN: usize = 1 + KID_LEN;
const TAG_LEN: usize = 16;
/// What the associated data starts with: the purpose, so a sealed value of another kind (if one
/// is ever added) cannot pass for a TOTP secret.
const TOTP_AAD: &[u8] = b"consoled totp secret v1";

/// One data key: its id and the two keys derived from it (sealing, CSRF), each under its own
/// label, so neither use can stand in for the other.
#[derive(Clone)]
struct DataKey {
    id: [u8; KID_LEN],
    seal: [u8; 32],
    csrf: [u8; 32],
}

impl DataKey {
    fn new(key: &Key32) -> DataKey {
        let derive = |label: &[u8]| crypto::hmac_sha256(&key.0, &[label]);
        let id = derive(b"consoled data key id v1");
        DataKey {
            id: id[..KID_LEN].try_into().expect("4 bytes"),
            seal: derive(b"consoled totp seal v1"),
            csrf: derive(b"consoled csrf v1"),
        }
    }

    fn aead(&self) -> LessSafeKey {
        LessSafeKey::new(UnboundKey::new(&CHACHA20_POLY1305, &self.seal).expect("32-byte key"))
    }
}

/// Why a stored secret could not be opened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OpenError {
    /// Sealed under a key this process does not have (its id, hex).
    UnknownKey(String),
    /// Sealed under a known key, but it does not open: altered, or another user's.
    Forged,
}

impl std::fmt::Display for OpenError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OpenError::UnknownKey(id) => write!(
                f,
                "sealed under data key {id}, which is neither CONSOLED_DATA_KEY nor in \
                 CONSOLED_DATA_KEY_OLD"
            ),
            OpenError::Forged => f.write_str("does not open: altered or copied from another user"),
        }
    }
}

/// The data keys of this process: the current one (seals) and the old ones (open only).
#[derive(Clone, Default)]
pub struct DataKeys {
    current: Option<DataKey>,
    old: Vec<DataKey>,
}

impl DataKeys {
    pub fn from_settings(settings: &KeySettings) -> DataKeys {
        DataKeys {
            current: settings.data.as_ref().map(DataKey::new),
            old: settings.data_old.iter().map(DataKey::new).collect(),
        }
    }

    /// The current key's id (hex), if a key is configured.
    pub fn current_id(&self) -> Option<String> {
        self.current.as_ref().map(|k| hex(&k.id))
    }

    /// The CSRF key derived from the current data key, if one is configured.
    pub fn derived_csrf_key(&self) -> Option<[u8; 32]> {
        self.current.as_ref().map(|k| k.csrf)
    }

    /// The stored form of a TOTP secret of `user_id`: sealed under the current key, or the
    /// secret itself when no key is configured (the start-up warning says so).
    pub fn seal_totp(&self, user_id: i64, secret: &[u8]) -> Vec<u8> {
        let Some(key) = &self.current else {
            return secret.to_vec();
        };
        let mut header = [0u8; HEADER_LEN];
        header[0] = VERSION;
        header[1..].copy_from_slice(&key.id);
        let nonce = crypto::random_bytes::<NONCE_LEN>();
        let mut body = secret.to_vec();
        key.aead()
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(aad(user_id, &header)),
                &mut body,
            )
            .expect("a 20-byte secret fits ChaCha20-Poly1305's limits");
        [&header[..], &nonce, &body].concat()
    }

    /// The secret in a stored value of `user_id` (sealed, or stored before sealing).
    pub fn open_totp(&self, user_id: i64, stored: &[u8]) -> Result<Vec<u8>, OpenError> {
        let Some((header, nonce, body)) = split(stored) else {
            return Ok(stored.to_vec());
        };
        let key = self
            .keys()
            .find(|k| k.id == header[1..])
            .ok_or_else(|| OpenError::UnknownKey(hex(&header[1..])))?;
        let nonce = Nonce::try_assume_unique_for_key(nonce).map_err(|_| OpenError::Forged)?;
        let mut body = body.to_vec();
        let plain = key
            .aead()
            .open_in_place(nonce, Aad::from(aad(user_id, header)), &mut body)
            .map_err(|_| OpenError::Forged)?;
        Ok(plain.to_vec())
    }

    /// Whether a stored value is already in the form `seal_totp` would give it now: sealed under
    /// the current key (or, without a key, anything: nothing can be sealed).
    pub fn is_current(&self, stored: &[u8]) -> bool {
        match (&self.current, split(stored)) {
            (None, _) => true,
            (Some(key), Some((header, _, _))) => header[1..] == key.id,
            (Some(_), None) => false,
        }
    }

    fn keys(&self) -> impl Iterator<Item = &DataKey> {
        self.current.iter().chain(&self.old)
    }
}

/// Whether a stored value is sealed (by any key) rather than a secret stored before sealing.
pub fn is_sealed(stored: &[u8]) -> bool {
    split(stored).is_some()
}

/// (header, nonce, ciphertext and tag) of a sealed value; `None` for a secret stored as it is.
/// Secrets stored before sealing are 20 bytes, shorter than any sealed value.
fn split(stored: &[u8]) -> Option<(&[u8], &[u8], &[u8])> {
    if stored.len() < HEADER_LEN + NONCE_LEN + TAG_LEN + 1 || stored[0] != VERSION {
        return None;
    }
    let (header, rest) = stored.split_at(HEADER_LEN);
    let (nonce, body) = rest.split_at(NONCE_LEN);
    Some((header, nonce, body))
}

fn aad(user_id: i64, header: &[u8]) -> Vec<u8> {
    [TOTP_AAD, &user_id.to_be_bytes(), header].concat()
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A new random key in standard base64, for `consoled keys generate`.
pub fn generate() -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(crypto::random_bytes::<32>())
}

#[cfg(test)]
mod tests;
