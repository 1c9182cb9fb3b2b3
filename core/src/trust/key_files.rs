//! Key files: trusted public keys (`KILN_TRUSTED_KEYS`, `--trusted-key`)
//! and secret signing keys (`KILN_SIGNING_KEY`, `kiln sign --key`,
//! `kiln keygen`), read through [`crate::regular_file`] (a regular file of
//! bounded size, never a FIFO or a device; links are followed, since secret
//! mounts reach key files through them).
//!
//! A secret key file that users other than its owner may read or write
//! (any group or other permission bit) is refused before it is read, with
//! an error that says to `chmod 600` it: a key others can read signs for
//! them too.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use kiln_image::{KeyError, SigningKey, TrustedKeys};

use crate::Error;
use crate::regular_file::{self, Access, Links};

/// The largest secret key file read: 64 hex digits and white space.
const SIGNING_KEY_MAX_BYTES: u64 = 1024;
/// The largest trusted-keys file read.
const TRUSTED_KEYS_MAX_BYTES: u64 = 1 << 20;

/// The trusted keys `KILN_TRUSTED_KEYS` names, read through `lookup`:
/// `None` when it is unset (signatures are not required). Checking fails
/// closed: set but naming no file (empty, `:`, `KILN_TRUSTED_KEYS=$KEYS`
/// with `KEYS` unset) trusts no key, with one warning (per process), and
/// files that cannot be used are left out with one warning each, so a
/// broken setting trusts fewer keys, never turns checking off.
pub fn trusted_keys_from_lookup(lookup: impl Fn(&str) -> Option<OsString>) -> Option<TrustedKeys> {
    let value = lookup(super::TRUSTED_KEYS)?;
    if std::env::split_paths(&value).all(|path| path.as_os_str().is_empty()) {
        super::warn_once(
            "KILN_TRUSTED_KEYS is set but names no file: no key is trusted, so only the \
             program's own images and this user's own compiles are served (name the files of \
             the keys to trust, or unset the variable to check no signature)"
                .to_owned(),
        );
        return Some(TrustedKeys::default());
    }
    let (keys, errors) = read_trusted_keys(&value);
    for error in errors {
        super::warn_once(format!(
            "{error}; images and remote entries that only its keys signed are refused"
        ));
    }
    Some(keys)
}

/// The keys of the `PATH`-like list of files `value`, and an error per file
/// that could not be used.
pub fn read_trusted_keys(value: &OsStr) -> (TrustedKeys, Vec<Error>) {
    let mut keys = TrustedKeys::default();
    let mut errors = Vec::new();
    for path in std::env::split_paths(value).filter(|path| !path.as_os_str().is_empty()) {
        match read_trusted_keys_file(&path) {
            Ok(found) => keys.extend(found),
            Err(source) => errors.push(Error::TrustedKeys {
                path,
                source: Box::new(source),
            }),
        }
    }
    (keys, errors)
}

/// Reads a trusted-keys file ([`TrustedKeys::parse`]: one public key per
/// line, `#` comments; a `.pub` file written by `kiln keygen` is one).
///
/// Whoever can write a trusted-keys file can add a key, so it is read only
/// if nobody but this user (or root) can change it: the file must be owned
/// by this process's effective user or by root and not writable by group
/// or others, and so must every directory above it (and above where its
/// links lead), as ssh requires of `authorized_keys`
/// ([`regular_file::shared_ancestor`]). The error says how to fix it.
///
/// # Errors
/// [`KeyError::Io`] when the file cannot be read, is not a regular file,
/// is larger than 1 MiB, or others may change it (kind
/// [`std::io::ErrorKind::PermissionDenied`]); [`KeyError::Invalid`]
/// naming the file and the first line that is not a key.
pub fn read_trusted_keys_file(path: &Path) -> Result<TrustedKeys, KeyError> {
    let io = |source| KeyError::Io {
        action: "read the trusted keys",
        path: path.to_owned(),
        source,
    };
    let file = regular_file::open(path, Access::Read, Links::Follow).map_err(io)?;
    let meta = file.metadata().map_err(io)?;
    if let Some(why) = changeable_by_others(path, &meta).map_err(io)? {
        return Err(io(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            why,
        )));
    }
    let bytes = regular_file::read_file(
        file,
        meta.len().min(TRUSTED_KEYS_MAX_BYTES),
        TRUSTED_KEYS_MAX_BYTES,
    )
    .map_err(io)?;
    if bytes.len() as u64 > TRUSTED_KEYS_MAX_BYTES {
        return Err(io(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("larger than {TRUSTED_KEYS_MAX_BYTES} bytes"),
        )));
    }
    let text = String::from_utf8(bytes).map_err(|_| {
        KeyError::Invalid(format!(
            "{}: not text, so not a trusted-keys file",
            path.display()
        ))
    })?;
    TrustedKeys::parse(&text)
        .map_err(|error| KeyError::Invalid(format!("{}: {error}", path.display())))
}

/// Why users other than this one (and root) could change the trusted-keys
/// file `path` (opened, `meta` from its descriptor), and how to fix it; or
/// `None`.
#[cfg(unix)]
fn changeable_by_others(path: &Path, meta: &std::fs::Metadata) -> std::io::Result<Option<String>> {
    use std::os::unix::fs::MetadataExt;
    let me = rustix::process::geteuid().as_raw();
    let mode = meta.mode() & 0o7777;
    let shown = path.display();
    if meta.uid() != me && meta.uid() != 0 {
        return Ok(Some(format!(
            "owned by user {} (this process runs as user {me}), who could add a key: give it \
             to this user or root (`chown`), mode 644 or narrower",
            meta.uid()
        )));
    }
    if mode & 0o022 != 0 {
        return Ok(Some(format!(
            "writable by other users (mode {mode:o}), who could add a key: run `chmod go-w {shown}`"
        )));
    }
    Ok(regular_file::shared_ancestor(path)?.map(|why| {
        format!(
            "{why}, so another user could replace the file: keep trusted keys in a directory \
             only this user or root may write"
        )
    }))
}

/// Ownership and modes are not checked where the platform has none.
#[cfg(not(unix))]
fn changeable_by_others(_: &Path, _: &std::fs::Metadata) -> std::io::Result<Option<String>> {
    Ok(None)
}

/// Reads a secret key file: 64 hex digits (white space around them
/// ignored), in a regular file that only its owner may read and write.
///
/// # Errors
/// [`Error::SigningKeyExposed`] when group or other permission bits are
/// set (checked before anything is read; fix with `chmod 600`);
/// [`Error::KeyFile`] when the file cannot be read or holds no key (the
/// message never quotes the file's content).
pub fn read_signing_key(path: &Path) -> Result<SigningKey, Error> {
    let key_file = |source| Error::KeyFile {
        path: path.to_owned(),
        source: Box::new(source),
    };
    let io = |source| {
        key_file(KeyError::Io {
            action: "read the signing key",
            path: path.to_owned(),
            source,
        })
    };
    let not_a_key = || {
        key_file(KeyError::Invalid(format!(
            "{} is not a kiln signing key file (a regular file of 64 hex digits; `kiln keygen` \
             writes one)",
            path.display()
        )))
    };
    let file = regular_file::open(path, Access::Read, Links::Follow).map_err(io)?;
    let meta = file.metadata().map_err(io)?;
    #[cfg(unix)]
    {
        let mode = std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o7777;
        if mode & 0o077 != 0 {
            return Err(Error::SigningKeyExposed {
                path: path.to_owned(),
                mode,
            });
        }
    }
    let bytes = regular_file::read_file(
        file,
        meta.len().min(SIGNING_KEY_MAX_BYTES),
        SIGNING_KEY_MAX_BYTES,
    )
    .map_err(io)?;
    if bytes.len() as u64 > SIGNING_KEY_MAX_BYTES {
        return Err(not_a_key());
    }
    let text = std::str::from_utf8(&bytes).map_err(|_| not_a_key())?;
    SigningKey::from_secret_hex(text).map_err(|_| not_a_key())
}

/// Writes `key`'s secret to a new file at `path`, readable and writable by
/// its owner only (mode 0600 on Unix, given at creation, so the file never
/// exists with a wider mode). An existing file is never overwritten.
///
/// # Errors
/// [`Error::KeyFile`] when the file exists or cannot be written.
pub fn write_signing_key(key: &SigningKey, path: &Path) -> Result<(), Error> {
    use std::io::Write;
    let io = |action| {
        move |source| Error::KeyFile {
            path: path.to_owned(),
            source: Box::new(KeyError::Io {
                action,
                path: path.to_owned(),
                source,
            }),
        }
    };
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options.open(path).map_err(io("create the signing key"))?;
    let text = format!("{}\n", key.to_secret_hex());
    file.write_all(text.as_bytes())
        .and_then(|()| file.sync_all())
        .map_err(io("write the signing key"))
}

/// The signing key `KILN_SIGNING_KEY` names, read through `lookup`:
/// `Ok(None)` when it is unset or empty.
///
/// # Errors
/// [`Error::SigningKey`] when the file cannot be read or holds no key;
/// [`Error::SigningKeyExposed`] when others may read it;
/// [`Error::SigningKeyNotAPath`] when the variable holds what looks like a
/// key rather than a path (never echoed).
pub fn signing_key_from_lookup(
    lookup: impl Fn(&str) -> Option<OsString>,
) -> Result<Option<Arc<SigningKey>>, Error> {
    let Some(path) = signing_key_path(lookup) else {
        return Ok(None);
    };
    match read_signing_key(&path) {
        Ok(key) => Ok(Some(Arc::new(key))),
        Err(Error::KeyFile { source, .. }) => {
            // A key pasted into the variable must not reach a log.
            let text = path.to_string_lossy();
            let is_missing = matches!(&*source, KeyError::Io { source, .. }
                if source.kind() == std::io::ErrorKind::NotFound);
            if is_missing && text.len() >= 32 && text.bytes().all(|b| b.is_ascii_hexdigit()) {
                Err(Error::SigningKeyNotAPath)
            } else {
                Err(Error::SigningKey { path, source })
            }
        }
        Err(other) => Err(other),
    }
}

/// [`signing_key_from_lookup`] for a tier: an unusable key gives one
/// warning (per process) and no key, so the tier signs and writes nothing.
pub fn signing_key_or_warn(lookup: impl Fn(&str) -> Option<OsString>) -> Option<Arc<SigningKey>> {
    signing_key_from_lookup(lookup)
        .map_err(|error| {
            super::warn_once(format!("{error}; nothing is signed or written remotely"))
        })
        .ok()
        .flatten()
}

/// `image` signed with the key of `KILN_SIGNING_KEY` when `lookup` (the
/// variables of the process's `Settings`: `settings.vars().lookup()`) sets
/// it, or unchanged when it does not: the one call a tool that writes
/// images (`kiln bake`, a build script) needs.
///
/// ```
/// use kiln_core::settings::Settings;
///
/// let image = kiln_image::ImageWriter::new(kiln_image::ImageMeta::new("doc", "1")).to_bytes()?;
/// // KILN_SIGNING_KEY is not set here: the bytes come back as they were.
/// let settings = Settings::default();
/// let signed = kiln_core::trust::sign_if_configured(settings.vars().lookup(), image.clone())?;
/// assert_eq!(signed, image);
/// # Ok::<(), kiln_core::Error>(())
/// ```
///
/// # Errors
/// [`Error::SigningKey`] (or [`Error::SigningKeyExposed`]) when the
/// variable is set and the file is not a usable key (the caller asked for
/// signed images: nothing is written unsigned in their place);
/// [`Error::Image`] when `image` is not an image.
pub fn sign_if_configured(
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
    lookup(super::SIGNING_KEY)
        .filter(|value| !value.is_empty())
        .map(PathBuf::from)
}

#[cfg(test)]
mod tests {
    use super::super::{SIGNING_KEY, TRUSTED_KEYS};
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
        // Unset: not required.
        assert_eq!(trusted_keys_from_lookup(lookup(&BTreeMap::new())), None);
    }

    #[test]
    fn set_but_naming_no_file_trusts_no_key_never_nothing_checked() {
        for empty in ["", ":", "::", if cfg!(windows) { ";" } else { ":" }] {
            let vars = BTreeMap::from([(TRUSTED_KEYS, OsString::from(empty))]);
            assert_eq!(
                trusted_keys_from_lookup(lookup(&vars)),
                Some(TrustedKeys::default()),
                "{empty:?}"
            );
        }
    }

    #[cfg(unix)]
    #[test]
    fn a_trusted_keys_file_others_may_change_is_refused_saying_how_to_fix_it() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let key = SigningKey::from_secret_bytes([7; 32]).public_key();
        let path = dir.path().join("fleet.pub");
        std::fs::write(&path, format!("{key}\n")).unwrap();
        for fine in [0o644, 0o600, 0o444, 0o640] {
            set_mode(&path, fine);
            assert_eq!(
                read_trusted_keys_file(&path).unwrap(),
                TrustedKeys::new([key])
            );
        }
        for open in [0o666, 0o664, 0o646, 0o622] {
            set_mode(&path, open);
            let error = read_trusted_keys_file(&path).expect_err("others may write it");
            let text = crate::ErrorChain(&error).to_string();
            assert!(
                text.contains(&format!("chmod go-w {}", path.display())),
                "{open:o}: {text}"
            );
            // Through the variable: no key trusted, checking still on.
            let vars = BTreeMap::from([(TRUSTED_KEYS, path.clone().into_os_string())]);
            assert_eq!(
                trusted_keys_from_lookup(lookup(&vars)),
                Some(TrustedKeys::default())
            );
        }
        // A directory above it others may write: they could swap the file.
        set_mode(&path, 0o644);
        let shared = dir.path().join("shared");
        std::fs::create_dir(&shared).unwrap();
        let inside = shared.join("fleet.pub");
        std::fs::copy(&path, &inside).unwrap();
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o777)).unwrap();
        let error = read_trusted_keys_file(&inside).expect_err("shared");
        let text = crate::ErrorChain(&error).to_string();
        assert!(
            text.contains("writable by other users") && text.contains("shared"),
            "{text}"
        );
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert!(read_trusted_keys_file(&inside).is_ok());
    }

    #[test]
    fn the_signing_key_is_a_path_and_an_unusable_one_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k");
        let key = SigningKey::from_secret_bytes([3; 32]);
        write_signing_key(&key, &path).unwrap();
        let vars = BTreeMap::from([(SIGNING_KEY, path.clone().into_os_string())]);
        let read = signing_key_from_lookup(lookup(&vars)).unwrap().unwrap();
        assert_eq!(read.public_key(), key.public_key());
        assert_eq!(signing_key_path(lookup(&vars)), Some(path.clone()));
        assert!(
            matches!(write_signing_key(&key, &path), Err(Error::KeyFile { .. })),
            "an existing key file is never overwritten"
        );

        let image = kiln_image::ImageWriter::new(kiln_image::ImageMeta::new("t", "1"))
            .to_bytes()
            .unwrap();
        let signed = sign_if_configured(lookup(&vars), image.clone()).unwrap();
        let opened =
            kiln_image::Image::from_bytes(&signed, kiln_image::Verification::Full).unwrap();
        assert_eq!(opened.signers(), [key.public_key()]);
        assert_eq!(
            sign_if_configured(lookup(&BTreeMap::new()), image.clone()).unwrap(),
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
        assert!(sign_if_configured(lookup(&vars), image).is_err());
        assert!(signing_key_or_warn(lookup(&vars)).is_none());

        // A file that is not a key says so without quoting it.
        let bad = dir.path().join("bad.key");
        std::fs::write(&bad, "hunter2 hunter2").unwrap();
        set_mode(&bad, 0o600);
        let error = read_signing_key(&bad).expect_err("not a key");
        assert!(!error.to_string().contains("hunter2"), "{error}");
    }

    #[cfg(unix)]
    fn set_mode(path: &Path, mode: u32) {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    #[cfg(not(unix))]
    fn set_mode(_: &Path, _: u32) {}

    #[cfg(unix)]
    #[test]
    fn a_secret_key_others_may_read_is_refused_and_the_message_says_chmod_600() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("release.key");
        let key = SigningKey::from_secret_bytes([4; 32]);
        write_signing_key(&key, &path).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "written private");
        for open in [0o644, 0o640, 0o604, 0o660, 0o602] {
            set_mode(&path, open);
            let error = read_signing_key(&path).expect_err("exposed");
            assert!(
                matches!(error, Error::SigningKeyExposed { mode, .. } if mode == open),
                "{open:o}: {error}"
            );
            let text = error.to_string();
            assert!(text.contains("chmod 600"), "{text}");
            assert!(!text.contains(&key.to_secret_hex()), "{text}");
            let vars = BTreeMap::from([(SIGNING_KEY, path.clone().into_os_string())]);
            assert!(matches!(
                signing_key_from_lookup(lookup(&vars)),
                Err(Error::SigningKeyExposed { .. })
            ));
        }
        for private in [0o600, 0o400] {
            set_mode(&path, private);
            assert_eq!(
                read_signing_key(&path).unwrap().public_key(),
                key.public_key()
            );
        }
    }

    #[test]
    fn key_files_that_are_devices_or_fifos_are_refused_before_reading() {
        let zero = Path::new("/dev/zero");
        assert!(matches!(
            read_trusted_keys_file(zero),
            Err(KeyError::Io { .. })
        ));
        assert!(matches!(read_signing_key(zero), Err(Error::KeyFile { .. })));
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("keys");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(made.success());
        // Opening a FIFO for reading would block with no writer: refused
        // without blocking, so this returns.
        assert!(read_trusted_keys_file(&fifo).is_err());
        assert!(read_signing_key(&fifo).is_err());
    }
}
