//! [`TrustPolicy`]: the trusted keys, the signing key and whether to write
//! unsigned remote entries, read once per process and handed to every tier.

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use kiln_image::{Image, SignatureError, SigningKey, TrustedKeys};

use super::{Admission, Origin};

/// The trust policy of a process: `KILN_TRUSTED_KEYS`, `KILN_SIGNING_KEY`
/// and `KILN_REMOTE_WRITE` (see the [module docs](super)).
///
/// [`Settings`](crate::settings::Settings) builds it, from the same reading
/// as every other switch; the process's settings
/// ([`Settings::process`](crate::settings::Settings::process)) are read
/// once, and every tier and the init share clones of their policy: one
/// [`TrustedKeys`] (and its memo of verified batch roots). The signing key
/// file is read on first use ([`TrustPolicy::signing_key`]), once for all
/// clones: a process that never signs never opens it.
///
/// ```
/// use kiln_core::settings::Settings;
///
/// // Nothing set: nothing required, nothing signed, no unsigned remote writes.
/// let policy = Settings::default().trust;
/// assert!(policy.trusted_keys.is_none());
/// assert!(policy.signing_key().is_none());
/// // A tool's `--trusted-key` adds to the variable's keys (and requires them).
/// let key = kiln_image::SigningKey::from_secret_bytes([1; 32]).public_key();
/// let policy = policy.with_trusted_keys(kiln_image::TrustedKeys::new([key]));
/// assert!(policy.trusted_keys.as_ref().is_some_and(|keys| keys.contains(&key)));
/// ```
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct TrustPolicy {
    /// `KILN_TRUSTED_KEYS`: when set, what comes from elsewhere must be
    /// signed by one of these keys ([`super::admit`]); `None`: signatures
    /// are not required.
    pub trusted_keys: Option<TrustedKeys>,
    /// `KILN_REMOTE_WRITE`: store unsigned entries in the remote tier
    /// (honoured only without trusted keys).
    pub remote_write: bool,
    /// `KILN_SIGNING_KEY`, read on first use.
    signing: Arc<Signing>,
}

/// The signing key's path and, once read, the key (shared by clones).
#[derive(Debug, Default)]
struct Signing {
    path: Option<PathBuf>,
    key: OnceLock<Option<Arc<SigningKey>>>,
}

/// Policies are equal when they trust the same keys, sign with the same
/// key file (or key) and agree on unsigned remote writes.
impl PartialEq for TrustPolicy {
    fn eq(&self, other: &TrustPolicy) -> bool {
        let signer = |policy: &TrustPolicy| {
            policy
                .signing
                .key
                .get()
                .and_then(|key| key.as_ref().map(|key| key.public_key()))
        };
        self.trusted_keys == other.trusted_keys
            && self.remote_write == other.remote_write
            && self.signing.path == other.signing.path
            && signer(self) == signer(other)
    }
}

impl Eq for TrustPolicy {}

impl TrustPolicy {
    /// The policy `vars` give, read now: each call reads the trusted-keys
    /// files again and has a memo of its own. Unusable trusted-keys files
    /// give one warning each (per process) and trust fewer keys. Only
    /// [`Settings`](crate::settings::Settings) calls it: a process's policy
    /// is its settings' ([`Settings::process`](crate::settings::Settings::process)).
    pub(crate) fn parse(vars: &crate::settings::Vars) -> TrustPolicy {
        let lookup = vars.lookup();
        TrustPolicy {
            trusted_keys: super::trusted_keys_from_lookup(&lookup),
            remote_write: crate::env::switch(
                super::REMOTE_WRITE,
                vars.get(super::REMOTE_WRITE),
                false,
            ),
            signing: Arc::new(Signing {
                path: super::signing_key_path(&lookup),
                key: OnceLock::new(),
            }),
        }
    }

    /// A policy that signs with `key` (for a tier configured in code).
    pub fn with_signing_key(mut self, key: Arc<SigningKey>) -> TrustPolicy {
        let signing = Signing {
            path: None,
            key: OnceLock::from(Some(key)),
        };
        self.signing = Arc::new(signing);
        self
    }

    /// The policy with `more` trusted keys added (a tool's `--trusted-key`):
    /// signatures are then required even if `KILN_TRUSTED_KEYS` is unset.
    /// The set keeps its memo.
    pub fn with_trusted_keys(mut self, more: TrustedKeys) -> TrustPolicy {
        match &mut self.trusted_keys {
            Some(keys) => keys.extend(more),
            None => self.trusted_keys = Some(more),
        }
        self
    }

    /// The signing key (`KILN_SIGNING_KEY`), read from its file on the first
    /// call of any clone: `None` when unset, or (after one warning per
    /// process) when the file is not a usable key, so nothing is signed.
    pub fn signing_key(&self) -> Option<Arc<SigningKey>> {
        self.signing
            .key
            .get_or_init(|| {
                let path = self.signing.path.clone()?;
                super::signing_key_or_warn(|name| {
                    (name == super::SIGNING_KEY).then(|| path.clone().into_os_string())
                })
            })
            .clone()
    }

    /// Whether `KILN_SIGNING_KEY` is set (whether or not the file is usable).
    pub fn signs(&self) -> bool {
        self.signing.path.is_some() || self.signing.key.get().is_some_and(Option::is_some)
    }

    /// [`super::admit`] under this policy's trusted keys.
    ///
    /// # Errors
    /// As [`super::admit`].
    pub fn admit(&self, image: &Image, origin: Origin) -> Result<Admission, SignatureError> {
        super::admit(self.trusted_keys.as_ref(), image, origin)
    }
}
