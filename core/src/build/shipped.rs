//! The library's shipped image, as a precompile block reads it: found in
//! the library's `kiln-shipped/` folder, checked, converted into a kiln
//! image and looked up as the block cache's first tier; and the digests of
//! the declared sources that a shipped image records.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use kiln_image::{EntryData, PublicKey, TrustedKeys};
use kiln_ship::{Manifest, Shipped, ShippedFile};

use crate::cache::{Tier, TierEntry};
use crate::regular_file::{self, Links};
use crate::{Digest, Error, Key, Owner};

/// The largest shipped file read (a crate package is at most 10 MiB on
/// crates.io; git and path dependencies are not bound by that).
pub const SHIPPED_FILE_MAX: u64 = 512 << 20;
/// The largest declared source file hashed into a manifest.
const SOURCE_FILE_MAX: u64 = 256 << 20;

/// The bytes of the shipped image at `path`, read as every file someone
/// else may control is ([`crate::regular_file`]): a symbolic link, a FIFO,
/// a socket or a device under that name is refused without being
/// followed, waited on or read, and at most [`SHIPPED_FILE_MAX`] bytes are
/// read. `Ok(None)` when there is no file. What a precompile block and
/// `kiln ship` read.
///
/// ```
/// let dir = tempfile::tempdir()?;
/// let path = dir.path().join("my-kernels.kship");
/// assert!(kiln_core::build::read_shipped_file(&path)?.is_none());
/// std::os::unix::fs::symlink("/dev/zero", &path)?;
/// assert!(kiln_core::build::read_shipped_file(&path).is_err()); // not followed
/// # Ok::<(), std::io::Error>(())
/// ```
///
/// # Errors
/// The open's or read's error; an error saying what the file is when it
/// is not a regular file; [`std::io::ErrorKind::InvalidData`] when it is
/// larger than [`SHIPPED_FILE_MAX`].
pub fn read_shipped_file(path: &Path) -> std::io::Result<Option<Vec<u8>>> {
    match regular_file::read(path, Links::Refuse, SHIPPED_FILE_MAX) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(error) => Err(error),
    }
}

/// A shipped image that passed every check: its manifest and entries.
pub(super) struct ShippedSource {
    pub(super) path: PathBuf,
    pub(super) shipped: Arc<Shipped>,
}

/// Why a shipped image is not used.
pub(super) struct NotUsed {
    /// Why, in words.
    pub(super) why: String,
    /// The file is sound, but this signed build cannot vouch for it: it
    /// carries no signature by a trusted key.
    pub(super) unvouched: bool,
}

impl NotUsed {
    fn refused(why: impl Into<String>) -> NotUsed {
        NotUsed {
            why: why.into(),
            unvouched: false,
        }
    }
}

/// Reads the shipped image at `path`: `Ok(None)` when there is none,
/// `Err` when there is one that must not be used (not a regular file,
/// unreadable, damaged, holding an entry an image cannot hold, not signed
/// by `key` when the library names one, another block's), and, for a
/// signed build (`vouch`: the keys it trusts, its own among them), one
/// that no key of `vouch` signed.
pub(super) fn read(
    path: &Path,
    name: &str,
    key: Option<&PublicKey>,
    vouch: Option<&TrustedKeys>,
) -> Result<Option<ShippedSource>, NotUsed> {
    let bytes = match read_shipped_file(path) {
        Ok(Some(bytes)) => bytes,
        Ok(None) => return Ok(None),
        Err(error) => return Err(NotUsed::refused(format!("it cannot be read ({error})"))),
    };
    let file = ShippedFile::parse(&bytes).map_err(|error| NotUsed::refused(error.to_string()))?;
    if let Some(key) = key {
        file.check_signed_by(key)
            .map_err(|error| NotUsed::refused(error.to_string()))?;
    }
    if let Some(trusted) = vouch {
        let vouched = file
            .signers()
            .iter()
            .any(|signer| trusted.contains(signer) && file.check_signed_by(signer).is_ok());
        if !vouched {
            return Err(NotUsed {
                why: "KILN_SIGNING_KEY is set and no trusted key signed it (KILN_TRUSTED_KEYS, or \
                      the signing key itself), so this signed build cannot vouch for its entries: \
                      they are compiled here"
                    .to_owned(),
                unvouched: true,
            });
        }
    }
    let shipped = Shipped::unpack(&file).map_err(|error| NotUsed::refused(error.to_string()))?;
    if shipped.manifest.name != name {
        return Err(NotUsed::refused(format!(
            "it holds the image {:?}, this block writes {name:?}",
            shipped.manifest.name
        )));
    }
    Ok(Some(ShippedSource {
        path: path.to_owned(),
        shipped: Arc::new(shipped),
    }))
}

/// The block cache's first tier: the library's shipped entries (each handed
/// over as an owned entry: the cache copies it into its aligned buffers).
/// Read-only.
pub(super) struct ShippedTier {
    shipped: Arc<Shipped>,
}

/// The name of the shipped tier in reports.
pub(super) const TIER_NAME: &str = "shipped";

impl ShippedTier {
    pub(super) fn new(shipped: Arc<Shipped>) -> ShippedTier {
        ShippedTier { shipped }
    }
}

impl Tier for ShippedTier {
    fn name(&self) -> &str {
        TIER_NAME
    }

    fn load_entry(&self, owner: &Owner, key: &Key) -> Result<Option<TierEntry>, Error> {
        let found = self.shipped.find(&owner.digest(), key.digest());
        Ok(found.cloned().map(TierEntry::Owned))
    }

    /// The shipped image is the package's: nothing is stored into it.
    fn store(&self, _owner: &Owner, _entry: &EntryData) -> Result<(), Error> {
        Ok(())
    }
}

/// The digest of each declared source inside the library (`crate_dir`):
/// relative paths without `..`, `/`-separated; a directory's digest covers
/// every file below it (names and contents). Sources outside the library
/// (absolute paths, such as a compiler's) are machine-specific and left
/// out; so is a source that cannot be read.
pub(super) fn source_digests(
    crate_dir: &Path,
    sources: &BTreeSet<PathBuf>,
) -> BTreeMap<String, Digest> {
    sources
        .iter()
        .filter_map(|source| {
            let name = relative_name(source)?;
            Some((name, digest_path(&crate_dir.join(source))?))
        })
        .collect()
}

/// `path` as a `/`-separated relative name, if it is relative and stays
/// inside the library.
fn relative_name(path: &Path) -> Option<String> {
    let mut parts = Vec::new();
    for component in path.components() {
        match component {
            Component::Normal(part) => parts.push(part.to_str()?.to_owned()),
            Component::CurDir => {}
            _ => return None,
        }
    }
    (!parts.is_empty()).then(|| parts.join("/"))
}

fn digest_path(path: &Path) -> Option<Digest> {
    let meta = std::fs::metadata(path).ok()?;
    if meta.is_file() {
        return digest_file(path);
    }
    let mut files = Vec::new();
    walk(path, Path::new(""), &mut files);
    files.sort();
    let mut hasher = blake3::Hasher::new_derive_key("kiln-core build source directory");
    for (name, digest) in files {
        hasher.update(&(name.len() as u64).to_le_bytes());
        hasher.update(name.as_bytes());
        hasher.update(&digest.0);
    }
    Some(Digest(*hasher.finalize().as_bytes()))
}

fn digest_file(path: &Path) -> Option<Digest> {
    let mut hasher = blake3::Hasher::new();
    let file = std::fs::File::open(path).ok()?;
    std::io::copy(&mut file.take(SOURCE_FILE_MAX), &mut hasher).ok()?;
    Some(Digest(*hasher.finalize().as_bytes()))
}

/// Every regular file below `dir` (no symbolic link followed), with its
/// name relative to where the walk began.
fn walk(dir: &Path, prefix: &Path, files: &mut Vec<(String, Digest)>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        let name = prefix.join(entry.file_name());
        if kind.is_dir() {
            walk(&entry.path(), &name, files);
        } else if kind.is_file()
            && let (Some(name), Some(digest)) = (relative_name(&name), digest_file(&entry.path()))
        {
            files.push((name, digest));
        }
    }
}

/// The declared sources whose digest differs from what `shipped` recorded
/// (or that it did not record), for the warning that says why shipped
/// entries no longer cover the block.
pub(super) fn changed_since(shipped: &Manifest, now: &BTreeMap<String, Digest>) -> Vec<String> {
    now.iter()
        .filter(|(name, digest)| shipped.sources.get(*name) != Some(digest))
        .map(|(name, _)| name.clone())
        .collect()
}

/// What a block watches for its shipped image: the file when anything is
/// there (used, refused or ignored: a fixed file is read), else the
/// `kiln-shipped/` folder when it exists (a file appearing there is read);
/// `None` when neither exists, since a watched path that does not exist
/// reruns a build script on every build.
pub(super) fn watched_path(shipped: &Path) -> Option<PathBuf> {
    if std::fs::symlink_metadata(shipped).is_ok() {
        return Some(shipped.to_owned());
    }
    shipped
        .parent()
        .filter(|dir| std::fs::symlink_metadata(dir).is_ok_and(|meta| meta.is_dir()))
        .map(Path::to_owned)
}
