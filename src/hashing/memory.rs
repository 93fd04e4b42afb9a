//! The argon2 working memory of a hash thread, reused from hash to hash (`super`: taken at a
//! thread's first hash, given back after its keep time).

use argon2::password_hash::phc::{Output, ParamsString, PasswordHash, Salt};
use argon2::{Algorithm, Argon2, Block, Params, Version};

/// The argon2 working memory of one hash thread, for the service's parameters (argon2id v19,
/// m=19456 KiB, t=2, p=1: `Params::default()`).
pub(super) struct Memory {
    blocks: Vec<Block>,
}

impl Memory {
    pub(super) fn new() -> Memory {
        Memory {
            blocks: vec![Block::default(); Params::default().block_count()],
        }
    }

    pub(super) fn hash(&mut self, password: &str) -> Result<String, String> {
        let salt = crate::crypto::random_bytes::<16>();
        let mut out = [0u8; Params::DEFAULT_OUTPUT_LEN];
        Argon2::default()
            .hash_password_into_with_memory(password.as_bytes(), &salt, &mut out, &mut self.blocks)
            .map_err(|e| format!("argon2: {e}"))?;
        let phc = PasswordHash {
            algorithm: Algorithm::Argon2id.ident(),
            version: Some(Version::V0x13.into()),
            params: ParamsString::try_from(&Params::default()).map_err(|e| e.to_string())?,
            salt: Some(Salt::new(&salt).map_err(|e| e.to_string())?),
            hash: Some(Output::new(&out).map_err(|e| e.to_string())?),
        };
        Ok(phc.to_string())
    }

    /// False for a wrong password and for anything that is not an argon2 PHC string.
    pub(super) fn verify(&mut self, password: &str, phc: &str) -> bool {
        let Ok(parsed) = PasswordHash::new(phc) else {
            return false;
        };
        let (Some(salt), Some(expected)) = (&parsed.salt, &parsed.hash) else {
            return false;
        };
        let Ok(algorithm) = Algorithm::try_from(parsed.algorithm.as_str()) else {
            return false;
        };
        let Ok(params) = Params::try_from(&parsed) else {
            return false;
        };
        let version = parsed
            .version
            .and_then(|v| Version::try_from(v).ok())
            .unwrap_or_default();
        let mut out = vec![0u8; expected.len()];
        let argon = Argon2::new(algorithm, version, params.clone());
        let computed = if params.block_count() == self.blocks.len() {
            argon.hash_password_into_with_memory(
                password.as_bytes(),
                salt,
                &mut out,
                &mut self.blocks,
            )
        } else {
            // A hash made with other parameters (an older or newer setting): its own memory.
            argon.hash_password_into(password.as_bytes(), salt, &mut out)
        };
        computed.is_ok() && crate::crypto::constant_time_eq(&out, expected.as_bytes())
    }
}

/// Hashes on the calling thread with memory of its own; for start-up and the benchmark baseline.
pub fn hash_blocking(password: &str) -> Result<String, String> {
    Memory::new().hash(password)
}
