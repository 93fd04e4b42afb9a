//! Company sign-in: any number of OpenID Connect providers by configuration
//! (`config::oidc`), each found through its discovery document and trusted only through its
//! published keys.
//!
//! `Providers` holds what each provider has told us: its endpoints (`discovery`) and its
//! signing keys (`jwks`). A background thread (`refresh`) fetches both at start and again every
//! `CONSOLED_OIDC_REFRESH_SECONDS`; a provider that has never answered is left out of
//! `GET /auth/providers` (and its `start` says `provider_unavailable`) until it does, while a
//! provider that answered once keeps its last good document through later failures. `signin`
//! turns a callback's code into an identity: the token exchange, the ID token's signature
//! (`jws`, `keys`) and claims, userinfo when the token lacks the address, and the provider's
//! own admission rules.
//!
//! Nothing here holds a database connection, and nothing here logs a token or a secret.

mod discovery;
mod jwks;
mod jws;
mod keys;
mod refresh;
pub mod signin;

use std::sync::{Arc, RwLock};

pub use discovery::Discovered;
pub use refresh::start;

use crate::config::OidcConfig;
use crate::locks::Unpoisoned;

/// One configured provider and what it has told us so far.
pub struct OidcProvider {
    pub config: OidcConfig,
    discovered: RwLock<Option<Arc<Discovered>>>,
    keys: jwks::KeyCache,
}

impl OidcProvider {
    fn new(config: OidcConfig) -> OidcProvider {
        OidcProvider {
            config,
            discovered: RwLock::new(None),
            keys: jwks::KeyCache::default(),
        }
    }

    /// The endpoints of the latest good discovery; `None` until the provider has answered.
    pub fn discovered(&self) -> Option<Arc<Discovered>> {
        self.discovered.read().unpoisoned().clone()
    }

    fn set_discovered(&self, discovered: Discovered, keys: Vec<keys::Key>) {
        self.keys.set(keys);
        *self.discovered.write().unpoisoned() = Some(Arc::new(discovered));
    }
}

/// Every configured OpenID Connect provider, in the order of `CONSOLED_OIDC_PROVIDERS`.
#[derive(Default)]
pub struct Providers {
    list: Vec<Arc<OidcProvider>>,
}

impl Providers {
    pub fn new(configs: &[OidcConfig]) -> Providers {
        Providers {
            list: configs
                .iter()
                .cloned()
                .map(OidcProvider::new)
                .map(Arc::new)
                .collect(),
        }
    }

    /// The provider of a short name, discovered or not.
    pub fn get(&self, name: &str) -> Option<&OidcProvider> {
        self.list
            .iter()
            .map(Arc::as_ref)
            .find(|p| p.config.name == name)
    }

    pub fn all(&self) -> impl Iterator<Item = &OidcProvider> {
        self.list.iter().map(Arc::as_ref)
    }

    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }
}
