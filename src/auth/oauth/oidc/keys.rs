//! Signing keys as JSON Web Keys (RFC 7517), the signature algorithms accepted (RFC 7518), and
//! the check of a signature with `ring`.
//!
//! Accepted: RS256/384/512, PS256/384/512, ES256, ES384 and EdDSA (Ed25519), the asymmetric
//! algorithms providers sign ID tokens with. Refused whatever a key set says: `none` (no
//! signature at all) and the HMAC family (`HS*`, keyed with the client secret, which the provider
//! and every holder of the secret share, so it proves nothing about who made the token).

use ring::signature::{self, RsaPublicKeyComponents, UnparsedPublicKey, VerificationAlgorithm};
use serde_json::Value;

use crate::crypto::b64url_decode;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Alg {
    Rs256,
    Rs384,
    Rs512,
    Ps256,
    Ps384,
    Ps512,
    Es256,
    Es384,
    EdDsa,
}

impl Alg {
    /// The `alg` of a JWS header; the error says why it is refused.
    pub fn parse(alg: &str) -> Result<Alg, String> {
        Ok(match alg {
            "RS256" => Alg::Rs256,
            "RS384" => Alg::Rs384,
            "RS512" => Alg::Rs512,
            "PS256" => Alg::Ps256,
            "PS384" => Alg::Ps384,
            "PS512" => Alg::Ps512,
            "ES256" => Alg::Es256,
            "ES384" => Alg::Es384,
            "EdDSA" | "Ed25519" => Alg::EdDsa,
            "none" => return Err("alg none (an unsigned token) is refused".into()),
            a if a.starts_with("HS") => {
                return Err(format!(
                    "alg {a} (a MAC keyed with a shared secret) is refused"
                ))
            }
            other => return Err(format!("alg {:?} is not supported", printable(other))),
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Alg::Rs256 => "RS256",
            Alg::Rs384 => "RS384",
            Alg::Rs512 => "RS512",
            Alg::Ps256 => "PS256",
            Alg::Ps384 => "PS384",
            Alg::Ps512 => "PS512",
            Alg::Es256 => "ES256",
            Alg::Es384 => "ES384",
            Alg::EdDsa => "EdDSA",
        }
    }

    fn rsa(self) -> Option<&'static signature::RsaParameters> {
        Some(match self {
            Alg::Rs256 => &signature::RSA_PKCS1_2048_8192_SHA256,
            Alg::Rs384 => &signature::RSA_PKCS1_2048_8192_SHA384,
            Alg::Rs512 => &signature::RSA_PKCS1_2048_8192_SHA512,
            Alg::Ps256 => &signature::RSA_PSS_2048_8192_SHA256,
            Alg::Ps384 => &signature::RSA_PSS_2048_8192_SHA384,
            Alg::Ps512 => &signature::RSA_PSS_2048_8192_SHA512,
            _ => return None,
        })
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Material {
    Rsa {
        n: Vec<u8>,
        e: Vec<u8>,
    },
    /// Uncompressed points (0x04 || x || y).
    P256(Vec<u8>),
    P384(Vec<u8>),
    Ed25519(Vec<u8>),
}

/// A public key of a provider's key set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Key {
    pub kid: Option<String>,
    /// The key's own `alg`, when the set names one: then only that algorithm may use it.
    alg: Option<String>,
    material: Material,
}

impl Key {
    /// A signature key of a kind we verify with; `None` for anything else (an encryption key,
    /// a symmetric or unknown kind, a malformed one), which a key set may hold beside its
    /// signature keys.
    pub fn from_jwk(jwk: &Value) -> Option<Key> {
        if jwk["use"].as_str().is_some_and(|u| u != "sig") {
            return None;
        }
        let field = |name: &str| jwk[name].as_str().and_then(b64url_decode);
        let material = match (jwk["kty"].as_str()?, jwk["crv"].as_str()) {
            ("RSA", _) => Material::Rsa {
                n: without_leading_zeros(field("n")?),
                e: without_leading_zeros(field("e")?),
            },
            ("EC", Some("P-256")) => Material::P256(point(field("x")?, field("y")?, 32)?),
            ("EC", Some("P-384")) => Material::P384(point(field("x")?, field("y")?, 48)?),
            ("OKP", Some("Ed25519")) => {
                Material::Ed25519(field("x")?).with_len(signature::ED25519_PUBLIC_KEY_LEN)?
            }
            _ => return None,
        };
        Some(Key {
            kid: jwk["kid"].as_str().map(str::to_string),
            alg: jwk["alg"].as_str().map(str::to_string),
            material,
        })
    }

    /// Whether this key may check a signature made with `alg`.
    pub fn fits(&self, alg: Alg) -> bool {
        if self
            .alg
            .as_deref()
            .is_some_and(|a| Alg::parse(a) != Ok(alg))
        {
            return false;
        }
        matches!(
            (&self.material, alg),
            (Material::Rsa { .. }, a) if a.rsa().is_some()
        ) || matches!(
            (&self.material, alg),
            (Material::P256(_), Alg::Es256)
                | (Material::P384(_), Alg::Es384)
                | (Material::Ed25519(_), Alg::EdDsa)
        )
    }

    /// Whether `signature` is this key's signature of `message` under `alg`.
    pub fn verify(&self, alg: Alg, message: &[u8], signature: &[u8]) -> bool {
        if !self.fits(alg) {
            return false;
        }
        let with = |algorithm: &'static dyn VerificationAlgorithm, key: &[u8]| {
            UnparsedPublicKey::new(algorithm, key)
                .verify(message, signature)
                .is_ok()
        };
        match (&self.material, alg) {
            (Material::Rsa { n, e }, _) => alg.rsa().is_some_and(|params| {
                RsaPublicKeyComponents { n, e }
                    .verify(params, message, signature)
                    .is_ok()
            }),
            (Material::P256(p), Alg::Es256) => with(&signature::ECDSA_P256_SHA256_FIXED, p),
            (Material::P384(p), Alg::Es384) => with(&signature::ECDSA_P384_SHA384_FIXED, p),
            (Material::Ed25519(x), Alg::EdDsa) => with(&signature::ED25519, x),
            _ => false,
        }
    }
}

impl Material {
    fn with_len(self, len: usize) -> Option<Material> {
        match &self {
            Material::Ed25519(x) if x.len() == len => Some(self),
            _ => None,
        }
    }
}

/// The usable keys of a JWK Set (`{"keys": [...]}`); an error when it is not one or holds no
/// key we can verify with.
pub fn parse_set(set: &Value) -> Result<Vec<Key>, String> {
    let keys = set["keys"]
        .as_array()
        .ok_or("the key set has no \"keys\" list")?;
    let usable: Vec<Key> = keys.iter().filter_map(Key::from_jwk).collect();
    if usable.is_empty() {
        return Err(format!(
            "none of the key set's {} keys is a signature key of a supported kind",
            keys.len()
        ));
    }
    Ok(usable)
}

/// What a key set offers for a token's header.
#[derive(Debug)]
pub enum Choice<'a> {
    Found(&'a Key),
    /// No key with that `kid` (perhaps a key newer than the cached set).
    Unknown,
    /// No `kid` and more than one key that fits (OpenID Connect Core 10.1 requires a `kid`
    /// then).
    Ambiguous,
}

/// The key of `kid` (which must fit `alg`), or without `kid` the one key that fits `alg`.
pub fn choose<'a>(keys: &'a [Key], kid: Option<&str>, alg: Alg) -> Choice<'a> {
    let mut fitting = keys.iter().filter(|k| k.fits(alg));
    match kid {
        Some(kid) => fitting
            .find(|k| k.kid.as_deref() == Some(kid))
            .map_or(Choice::Unknown, Choice::Found),
        None => match (fitting.next(), fitting.next()) {
            (Some(key), None) => Choice::Found(key),
            (None, _) => Choice::Unknown,
            (Some(_), Some(_)) => Choice::Ambiguous,
        },
    }
}

fn without_leading_zeros(mut bytes: Vec<u8>) -> Vec<u8> {
    let zeros = bytes.iter().take_while(|b| **b == 0).count();
    bytes.drain(..zeros.min(bytes.len().saturating_sub(1)));
    bytes
}

/// An uncompressed curve point; each coordinate must have the curve's full size (RFC 7518 6.2.1).
fn point(x: Vec<u8>, y: Vec<u8>, size: usize) -> Option<Vec<u8>> {
    if x.len() != size || y.len() != size {
        return None;
    }
    Some([&[0x04], x.as_slice(), y.as_slice()].concat())
}

pub(super) fn printable(s: &str) -> String {
    s.chars().filter(|c| !c.is_control()).take(64).collect()
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::crypto::b64url;
    use ring::rand::SystemRandom;
    use ring::signature::{EcdsaKeyPair, Ed25519KeyPair, KeyPair};
    use serde_json::json;

    /// A P-256 key pair for tests: its JWK and a signing function.
    pub fn es256_key(kid: &str) -> (Value, impl Fn(&[u8]) -> Vec<u8>) {
        let rng = SystemRandom::new();
        let alg = &signature::ECDSA_P256_SHA256_FIXED_SIGNING;
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(alg, &rng).unwrap();
        let pair = EcdsaKeyPair::from_pkcs8(alg, pkcs8.as_ref(), &rng).unwrap();
        let public = pair.public_key().as_ref().to_vec();
        let jwk = json!({"kty": "EC", "crv": "P-256", "kid": kid, "use": "sig",
                         "x": b64url(&public[1..33]), "y": b64url(&public[33..])});
        let sign = move |m: &[u8]| {
            pair.sign(&SystemRandom::new(), m)
                .unwrap()
                .as_ref()
                .to_vec()
        };
        (jwk, sign)
    }

    fn rsa_vectors() -> Value {
        serde_json::from_str(include_str!("rsa_vectors.json")).unwrap()
    }

    /// (signing input, signature) of a compact JWS.
    fn split(jws: &str) -> (&str, Vec<u8>) {
        let (input, sig) = jws.rsplit_once('.').unwrap();
        (input, b64url_decode(sig).unwrap())
    }

    #[test]
    fn rsa_signatures_made_elsewhere_verify() {
        // Made with Node.js's crypto, not ring: an independent implementation.
        let v = rsa_vectors();
        let key = Key::from_jwk(&v["jwk"]).unwrap();
        for (alg, name) in [(Alg::Rs256, "RS256"), (Alg::Ps256, "PS256")] {
            let (input, sig) = split(v[name].as_str().unwrap());
            assert!(key.verify(alg, input.as_bytes(), &sig), "{name}");
            let mut forged = sig.clone();
            forged[10] ^= 1;
            assert!(!key.verify(alg, input.as_bytes(), &forged), "{name} forged");
            assert!(!key.verify(alg, b"another message", &sig), "{name} other");
        }
        let (input, sig) = split(v["RS256"].as_str().unwrap());
        assert!(
            !key.verify(Alg::Ps256, input.as_bytes(), &sig),
            "padding matters"
        );
        assert!(
            !key.verify(Alg::Rs384, input.as_bytes(), &sig),
            "hash matters"
        );
    }

    #[test]
    fn ec_and_ed25519_signatures_verify() {
        let (jwk, sign) = es256_key("ec1");
        let key = Key::from_jwk(&jwk).unwrap();
        let sig = sign(b"message");
        assert!(key.verify(Alg::Es256, b"message", &sig));
        assert!(!key.verify(Alg::Es256, b"messagE", &sig));
        assert!(!key.verify(Alg::Es384, b"message", &sig));

        let rng = SystemRandom::new();
        let pkcs8 = Ed25519KeyPair::generate_pkcs8(&rng).unwrap();
        let pair = Ed25519KeyPair::from_pkcs8(pkcs8.as_ref()).unwrap();
        let jwk = json!({"kty": "OKP", "crv": "Ed25519",
                         "x": b64url(pair.public_key().as_ref())});
        let key = Key::from_jwk(&jwk).unwrap();
        assert!(key.verify(Alg::EdDsa, b"m", pair.sign(b"m").as_ref()));
        assert!(!key.verify(Alg::Es256, b"m", pair.sign(b"m").as_ref()));
    }

    #[test]
    fn none_and_hmac_are_refused_by_name() {
        assert!(Alg::parse("none").unwrap_err().contains("unsigned"));
        for hs in ["HS256", "HS384", "HS512"] {
            assert!(
                Alg::parse(hs).unwrap_err().contains("shared secret"),
                "{hs}"
            );
        }
        assert!(Alg::parse("RS1").is_err());
        assert!(Alg::parse("rs256").is_err(), "names are case-sensitive");
        for name in [
            "RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384",
        ] {
            assert_eq!(Alg::parse(name).unwrap().name(), name);
        }
    }

    #[test]
    fn key_sets_keep_only_usable_signature_keys() {
        let v = rsa_vectors();
        let (ec, _) = es256_key("ec1");
        let set = json!({"keys": [
            v["jwk"], ec,
            {"kty": "RSA", "use": "enc", "n": "AQAB", "e": "AQAB", "kid": "enc"},
            {"kty": "oct", "k": "c2VjcmV0", "kid": "hmac"},
            {"kty": "EC", "crv": "P-256", "x": "AAAA", "y": "AAAA", "kid": "short"},
            {"kty": "EC", "crv": "P-521", "x": "AA", "y": "AA"},
        ]});
        let keys = parse_set(&set).unwrap();
        let kids: Vec<_> = keys.iter().map(|k| k.kid.clone().unwrap()).collect();
        assert_eq!(kids, ["rsa-test", "ec1"]);
        assert!(parse_set(&json!({"keys": [{"kty": "oct", "k": "x"}]})).is_err());
        assert!(parse_set(&json!([])).is_err());
    }

    #[test]
    fn a_key_serves_only_its_own_algorithm() {
        let v = rsa_vectors();
        let mut jwk = v["jwk"].clone();
        jwk["alg"] = json!("PS256");
        let key = Key::from_jwk(&jwk).unwrap();
        let (input, sig) = split(v["RS256"].as_str().unwrap());
        assert!(!key.verify(Alg::Rs256, input.as_bytes(), &sig));
        assert!(key.fits(Alg::Ps256) && !key.fits(Alg::Rs256) && !key.fits(Alg::Es256));
    }

    #[test]
    fn keys_are_chosen_by_kid_or_as_the_only_fit() {
        let (a, _) = es256_key("a");
        let (b, _) = es256_key("b");
        let rsa = Key::from_jwk(&rsa_vectors()["jwk"]).unwrap();
        let keys = parse_set(&json!({"keys": [a, b]})).unwrap();
        assert!(
            matches!(choose(&keys, Some("b"), Alg::Es256), Choice::Found(k) if k.kid.as_deref() == Some("b"))
        );
        assert!(matches!(
            choose(&keys, Some("c"), Alg::Es256),
            Choice::Unknown
        ));
        assert!(matches!(
            choose(&keys, Some("a"), Alg::Rs256),
            Choice::Unknown
        ));
        assert!(matches!(choose(&keys, None, Alg::Es256), Choice::Ambiguous));
        let mixed = vec![keys[0].clone(), rsa];
        assert!(
            matches!(choose(&mixed, None, Alg::Rs256), Choice::Found(k) if k.kid.as_deref() == Some("rsa-test"))
        );
    }
}
