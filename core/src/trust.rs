//! Whose code the cache accepts, and the key it signs with: the policy set
//! by `KILN_TRUSTED_KEYS`, `KILN_SIGNING_KEY` and `KILN_REMOTE_WRITE`.
//!
//! | variable | effect |
//! | --- | --- |
//! | `KILN_TRUSTED_KEYS=file1:file2` | files of trusted public keys (one key, 64 hex digits, per line; `#` comments; a `kiln keygen` `.pub` file is one), separated like `PATH`. When set, image files of `KILN_IMAGE_PATH` and remote-tier entries must carry a valid signature by one of these keys; signed disk-tier entries are checked again |
//! | `KILN_SIGNING_KEY=path` | the secret key file (`kiln keygen`) this process signs with: entries it stores in the remote tier, and images a build script's precompile block or `kiln bake` writes. Always a path, never the key itself |
//! | `KILN_REMOTE_WRITE=1` | store unsigned entries in the remote tier; only without `KILN_TRUSTED_KEYS` (readers that trust keys would refuse them) |
//!
//! Checking fails closed: a `KILN_TRUSTED_KEYS` file that cannot be read
//! (missing, unreadable, a line that is not a key) gives one warning and
//! trusts the keys of the other files, never none at all: with no usable
//! file nothing signed is accepted, and nothing unsigned either. A
//! `KILN_SIGNING_KEY` that cannot be read gives one warning and the
//! process signs nothing (so it writes nothing to the remote tier).
//!
//! What each tier does with the policy:
//!
//! - **images** (`KILN_IMAGE_PATH`): with trusted keys, an image file is
//!   merged only if a trusted key signed it; otherwise it is skipped with
//!   one warning and reported in the [`InitReport`](crate::InitReport)
//!   ([`InitReport::untrusted`](crate::InitReport::untrusted)). Embedded
//!   images are part of the program: an unsigned one is merged as before;
//!   one that carries signatures is merged only if one of them is a trusted
//!   key's.
//! - **remote tier** (`kiln-redis`): with trusted keys, an entry is used
//!   only if a trusted key signed it (its one-entry image, whose index
//!   names the `(owner, key)`, so a signed entry cannot be replayed under
//!   another key; entries a writer stored together share one batch
//!   signature, verified once per process and tier: see
//!   [`kiln_image::signature`]); otherwise it is refused (counted in
//!   [`Stats::tier_untrusted`](crate::Stats::tier_untrusted), one warning
//!   per process) and compiled. It writes only entries it can sign
//!   (`KILN_SIGNING_KEY`), or with `KILN_REMOTE_WRITE=1` and no trusted
//!   keys, unsigned ones: a reader is read-only by default.
//! - **disk tier**: entries this user's processes compiled are trusted (the
//!   directory is private: see [`crate::disk`]); a remote entry written
//!   through keeps its signature, in a segment of its own, and with
//!   trusted keys is served only while its signature verifies with them.

use std::collections::HashSet;
use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};

use kiln_image::{ImageError, SigningKey, TrustedKeys};

use crate::Error;

/// `KILN_TRUSTED_KEYS`: files of trusted public keys, separated like `PATH`.
pub const TRUSTED_KEYS: &str = "KILN_TRUSTED_KEYS";
/// `KILN_SIGNING_KEY`: the path of the secret key file to sign with.
pub const SIGNING_KEY: &str = "KILN_SIGNING_KEY";
/// `KILN_REMOTE_WRITE`: store unsigned entries in the remote tier (only
/// without trusted keys).
pub const REMOTE_WRITE: &str = "KILN_REMOTE_WRITE";

/// The trusted keys `KILN_TRUSTED_KEYS` names, read through `lookup`:
/// `None` when it is unset or empty (signatures are not required). Files
/// that cannot be used are left out with one warning each (per process),
/// so a broken setting trusts fewer keys, never turns checking off.
pub fn trusted_keys_from_lookup(lookup: impl Fn(&str) -> Option<OsString>) -> Option<TrustedKeys> {
    let value = lookup(TRUSTED_KEYS).filter(|value| !value.is_empty())?;
    let (keys, errors) = read_trusted_keys(&value);
    for error in errors {
        warn_once(format!(
            "{error}; images and remote entries that only its keys signed are refused"
        ));
    }
    Some(keys)
}

/// The keys of the `PATH`-like list of files `value`, and an error per file
/// that could not be used.
pub fn read_trusted_keys(value: &std::ffi::OsStr) -> (TrustedKeys, Vec<Error>) {
    let mut keys = TrustedKeys::default();
    let mut errors = Vec::new();
    for path in std::env::split_paths(value).filter(|path| !path.as_os_str().is_empty()) {
        match TrustedKeys::read_file(&path) {
            Ok(found) => keys.extend(found),
            Err(source) => errors.push(Error::TrustedKeys {
                path,
                source: Box::new(source),
            }),
        }
    }
    (keys, errors)
}

/// The signing key `KILN_SIGNING_KEY` names, read through `lookup`:
/// `Ok(None)` when it is unset or empty.
///
/// # Errors
/// [`Error::SigningKey`] when the file cannot be read or holds no key.
pub fn signing_key_from_lookup(
    lookup: impl Fn(&str) -> Option<OsString>,
) -> Result<Option<Arc<SigningKey>>, Error> {
    let Some(path) = lookup(SIGNING_KEY).filter(|value| !value.is_empty()) else {
        return Ok(None);
    };
    let path = PathBuf::from(path);
    SigningKey::read_file(&path)
        .map(|key| Some(Arc::new(key)))
        .map_err(|source| {
            // A key pasted into the variable must not reach a log.
            let text = path.to_string_lossy();
            let is_missing = matches!(&source, ImageError::Io { source, .. }
                if source.kind() == std::io::ErrorKind::NotFound);
            if is_missing && text.len() >= 32 && text.bytes().all(|b| b.is_ascii_hexdigit()) {
                Error::SigningKeyNotAPath
            } else {
                Error::SigningKey {
                    path,
                    source: Box::new(source),
                }
            }
        })
}

/// [`signing_key_from_lookup`] for a tier: an unusable key gives one
/// warning (per process) and no key, so the tier signs and writes nothing.
pub fn signing_key_or_warn(lookup: impl Fn(&str) -> Option<OsString>) -> Option<Arc<SigningKey>> {
    signing_key_from_lookup(lookup)
        .map_err(|error| warn_once(format!("{error}; nothing is signed or written remotely")))
        .ok()
        .flatten()
}

/// `image` signed with the key of `KILN_SIGNING_KEY` when it is set (read
/// from the process environment), or unchanged when it is not: the one
/// call a tool that writes images (`kiln bake`, a build script) needs.
///
/// ```
/// let image = kiln_image::ImageWriter::new(kiln_image::ImageMeta::new("doc", "1")).to_bytes()?;
/// // KILN_SIGNING_KEY is not set here: the bytes come back as they were.
/// assert_eq!(kiln_core::trust::sign_if_configured(image.clone())?, image);
/// # Ok::<(), kiln_core::Error>(())
/// ```
///
/// # Errors
/// [`Error::SigningKey`] when the variable is set and the file is not a
/// usable key (the caller asked for signed images: nothing is written
/// unsigned in their place); [`Error::Image`] when `image` is not an image.
pub fn sign_if_configured(image: Vec<u8>) -> Result<Vec<u8>, Error> {
    sign_if_configured_with(|name| std::env::var_os(name), image)
}

/// [`sign_if_configured`], reading the variable through `lookup`.
///
/// # Errors
/// As [`sign_if_configured`].
pub fn sign_if_configured_with(
    lookup: impl Fn(&str) -> Option<OsString>,
    image: Vec<u8>,
) -> Result<Vec<u8>, Error> {
    match signing_key_from_lookup(lookup)? {
        Some(key) => Ok(kiln_image::sign_image(&image, &key)?),
        None => Ok(image),
    }
}

/// The path `KILN_SIGNING_KEY` names, if set: a build script reruns when
/// the file changes.
pub fn signing_key_path(lookup: impl Fn(&str) -> Option<OsString>) -> Option<PathBuf> {
    lookup(SIGNING_KEY)
        .filter(|value| !value.is_empty())
        .map(PathBuf::from)
}

/// Whether an image (from `KILN_IMAGE_PATH`, or embedded when `embedded`)
/// may be merged under `trusted`, and the trusted key that signed it.
///
/// # Errors
/// The signature check's [`ImageError`] (unsigned, untrusted or invalid).
pub(crate) fn check_image(
    image: &kiln_image::Image,
    trusted: Option<&TrustedKeys>,
    embedded: bool,
) -> Result<Option<kiln_image::PublicKey>, ImageError> {
    match trusted {
        None => Ok(None),
        Some(_) if embedded && !image.is_signed() => Ok(None),
        Some(keys) => image.verify_signature(keys).map(Some),
    }
}

/// Whether an error is a signature refusal.
pub(crate) fn is_refusal(error: &ImageError) -> bool {
    matches!(
        error,
        ImageError::Unsigned | ImageError::UntrustedSigner { .. } | ImageError::BadSignature { .. }
    )
}

/// Logs `message` as a warning unless this process logged it already.
pub(crate) fn warn_once(message: String) {
    static SEEN: Mutex<Option<HashSet<String>>> = Mutex::new(None);
    let mut seen = SEEN.lock().unwrap_or_else(PoisonError::into_inner);
    if seen
        .get_or_insert_with(HashSet::new)
        .insert(message.clone())
    {
        tracing::warn!("{message}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn lookup<'a>(
        vars: &'a BTreeMap<&'static str, OsString>,
    ) -> impl Fn(&str) -> Option<OsString> + 'a {
        |name| vars.get(name).cloned()
    }

    #[test]
    fn trusted_keys_are_read_from_every_file_and_a_bad_file_trusts_fewer() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (
            SigningKey::from_secret_bytes([1; 32]).public_key(),
            SigningKey::from_secret_bytes([2; 32]).public_key(),
        );
        std::fs::write(dir.path().join("a.pub"), format!("{a}\n")).unwrap();
        std::fs::write(dir.path().join("b.keys"), format!("# farm\n{b} ci\n")).unwrap();
        std::fs::write(dir.path().join("bad.keys"), "not a key\n").unwrap();
        let list = |names: &[&str]| {
            std::env::join_paths(names.iter().map(|name| dir.path().join(name))).unwrap()
        };

        let vars = BTreeMap::from([(TRUSTED_KEYS, list(&["a.pub", "b.keys"]))]);
        let keys = trusted_keys_from_lookup(lookup(&vars)).expect("set");
        assert_eq!(keys, TrustedKeys::new([a, b]));

        let (keys, errors) = read_trusted_keys(&list(&["a.pub", "bad.keys", "missing"]));
        assert_eq!(keys, TrustedKeys::new([a]));
        assert_eq!(errors.len(), 2);
        assert!(errors[0].to_string().contains("bad.keys"), "{}", errors[0]);

        // Set but nothing usable: required, and nothing trusted.
        let vars = BTreeMap::from([(TRUSTED_KEYS, list(&["missing"]))]);
        assert_eq!(
            trusted_keys_from_lookup(lookup(&vars)),
            Some(TrustedKeys::default())
        );
        // Unset or empty: not required.
        assert_eq!(trusted_keys_from_lookup(lookup(&BTreeMap::new())), None);
        let vars = BTreeMap::from([(TRUSTED_KEYS, OsString::new())]);
        assert_eq!(trusted_keys_from_lookup(lookup(&vars)), None);
    }

    #[test]
    fn the_signing_key_is_a_path_and_an_unusable_one_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k");
        let key = SigningKey::from_secret_bytes([3; 32]);
        key.write_file(&path).unwrap();
        let vars = BTreeMap::from([(SIGNING_KEY, path.clone().into_os_string())]);
        let read = signing_key_from_lookup(lookup(&vars)).unwrap().unwrap();
        assert_eq!(read.public_key(), key.public_key());
        assert_eq!(signing_key_path(lookup(&vars)), Some(path));

        let image = kiln_image::ImageWriter::new(kiln_image::ImageMeta::new("t", "1"))
            .to_bytes()
            .unwrap();
        let signed = sign_if_configured_with(lookup(&vars), image.clone()).unwrap();
        let opened =
            kiln_image::Image::from_bytes(&signed, kiln_image::Verification::Full).unwrap();
        assert_eq!(opened.signers(), [key.public_key()]);
        assert_eq!(
            sign_if_configured_with(lookup(&BTreeMap::new()), image.clone()).unwrap(),
            image
        );

        // A key value instead of a path is not read as a key.
        let hex = "11".repeat(32);
        let vars = BTreeMap::from([(SIGNING_KEY, OsString::from(&hex))]);
        let error = signing_key_from_lookup(lookup(&vars)).expect_err("not a file");
        assert!(matches!(error, Error::SigningKeyNotAPath), "{error}");
        assert!(!error.to_string().contains(&hex), "{error}");
        let vars = BTreeMap::from([(SIGNING_KEY, dir.path().join("missing").into_os_string())]);
        let error = signing_key_from_lookup(lookup(&vars)).expect_err("missing");
        assert!(matches!(error, Error::SigningKey { .. }), "{error}");
        assert!(error.to_string().contains("missing"), "{error}");
        assert!(sign_if_configured_with(lookup(&vars), image).is_err());
        assert!(signing_key_or_warn(lookup(&vars)).is_none());
    }
}
