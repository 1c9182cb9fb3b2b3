//! [`DiskCache`]: one process's handle on a cache directory.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::SystemTime;

use kiln_image::{Digest, EntryData, ImageWriter, SignatureError};

use super::compact::{self, Scope, entry_cost, segment_meta};
use super::config::DiskConfig;
use super::dir::{Dir, open_checked, warn_unavailable};
use super::hit::{DiskHit, Payloads};
use super::lock::DirLock;
use super::recency::Recency;
use super::segment::{self, FileInfo, Listing, Segment, SegmentClass};
use super::stamps::{self, EntryId};
use super::view::{Slot, View};
use crate::error::Error;
use crate::trust::{Admission, Provenance};

/// A cache directory of kiln images shared by processes; see the
/// [module documentation](super) for the layout and the guarantees.
///
/// `Send + Sync`: share one per process.
pub struct DiskCache {
    config: DiskConfig,
    /// [`DiskConfig::images_dir`]: where every file of this cache lies,
    /// held (opened once; every file is opened relative to it).
    images: Arc<Dir>,
    view: RwLock<View>,
    /// Uses noted for recency stamps, and whether writing still works.
    pub(super) recency: Arc<Recency>,
    /// Set when a segment failed to open or an entry failed its checksum:
    /// the next compaction should clean up.
    needs_cleanup: AtomicBool,
    pub(super) hits: AtomicU64,
    pub(super) misses: AtomicU64,
    pub(super) stored: AtomicU64,
    pub(super) store_failures: AtomicU64,
    /// Whether the one warning about an entry refused for trust was given.
    warned_untrusted: AtomicBool,
}

/// A directory's modification time can be this coarse (some file systems
/// keep seconds): listings this close to it are repeated on the next miss.
const MTIME_GRANULARITY_MS: u64 = 2000;

impl DiskCache {
    /// Opens the cache directory of `config`, creating it and its
    /// subdirectory for this image format version
    /// ([`DiskConfig::images_dir`]) when missing, with mode 700. Both must
    /// be owned by this process's user and writable by nobody else, unless
    /// [`DiskConfig::trust_dir`] says otherwise (one `stat` each). The
    /// directory is not listed: the base segment's file is opened (its
    /// name is known), to be mapped by the first lookup, and the first miss
    /// lists the directory.
    ///
    /// A directory that exists but cannot be written is opened read-only
    /// (with one warning when a write is first attempted).
    ///
    /// # Errors
    /// [`Error::DiskIo`] when a directory neither exists nor can be
    /// created, or is not a directory; [`Error::DiskDirUntrusted`] when
    /// another user owns one, or other users may write to it.
    pub fn open(config: DiskConfig) -> Result<DiskCache, Error> {
        let root = open_checked(&config.dir, config.trust_dir)?;
        let images = Arc::new(root.subdir(&super::config::images_subdir(), config.trust_dir)?);
        let base = segment::open_image(&images, segment::BASE_SEGMENT).ok();
        Ok(DiskCache {
            recency: Recency::new(Arc::clone(&images), segment::now_ms()),
            images,
            config,
            view: RwLock::new(View::new(base)),
            needs_cleanup: AtomicBool::new(false),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            stored: AtomicU64::new(0),
            store_failures: AtomicU64::new(0),
            warned_untrusted: AtomicBool::new(false),
        })
    }

    /// Opens the cache `settings` configure (`KILN_CACHE*`, see
    /// [`super::config`], with the trust policy's trusted keys): `None`
    /// when it is turned off, or (after one warning) when it cannot be
    /// used; the caller then simply compiles.
    pub fn from_settings(settings: &crate::settings::Settings) -> Option<DiskCache> {
        super::config::or_warn(settings.disk()).and_then(DiskCache::open_or_warn)
    }

    /// Opens the cache of `config`, or logs one warning and returns `None`
    /// when it cannot be used.
    pub fn open_or_warn(config: DiskConfig) -> Option<DiskCache> {
        DiskCache::open(config)
            .map_err(|error| warn_unavailable(&error))
            .ok()
    }

    /// The configuration in force.
    pub fn config(&self) -> &DiskConfig {
        &self.config
    }

    /// The cache directory: the root that users name
    /// ([`DiskConfig::dir`]).
    pub fn dir(&self) -> &Path {
        &self.config.dir
    }

    /// The subdirectory of [`DiskCache::dir`] holding this cache's files,
    /// those of the image format version this build reads
    /// ([`DiskConfig::images_dir`]). Everything this cache lists, compacts,
    /// evicts or clears lies in it; other versions' subdirectories are
    /// never touched.
    pub fn images_dir(&self) -> &Path {
        self.images.path()
    }

    /// [`DiskCache::images_dir`], held: every file is opened through it.
    pub(super) fn held(&self) -> &Dir {
        &self.images
    }

    /// Looks up `(owner, key)`: a hit whose payloads passed their checksums,
    /// or `None` (also for damaged entries, which compaction removes).
    pub fn get(&self, owner: &Digest, key: &Digest) -> Option<DiskHit> {
        self.get_checked(owner, key, Payloads::Now)
    }

    /// Looks up `(owner, key)` as [`DiskCache::get`] does, with the payload
    /// checks `payloads` asks for.
    pub(crate) fn get_checked(
        &self,
        owner: &Digest,
        key: &Digest,
        payloads: Payloads,
    ) -> Option<DiskHit> {
        self.get_trusted(owner, key, payloads).ok().flatten()
    }

    /// Looks up `(owner, key)` as [`DiskCache::get_checked`] does; when the
    /// only copy found was refused for trust ([`DiskConfig::trusted_keys`]),
    /// the error that says why (the first refusal of the process also gives
    /// one warning, which names the entry's provenance).
    pub(crate) fn get_trusted(
        &self,
        owner: &Digest,
        key: &Digest,
        payloads: Payloads,
    ) -> Result<Option<DiskHit>, SignatureError> {
        let (mut hit, mut refused) = self.search(owner, key, payloads);
        if hit.is_none() && self.refresh() {
            (hit, refused) = self.search(owner, key, payloads);
        }
        match hit {
            Some(hit) => {
                self.hits.fetch_add(1, Ordering::Relaxed);
                self.touch((*owner, *key));
                Ok(Some(hit))
            }
            None => {
                self.misses.fetch_add(1, Ordering::Relaxed);
                match refused {
                    None => Ok(None),
                    Some(refusal) => {
                        self.warn_refused(&refusal);
                        Err(refusal.error)
                    }
                }
            }
        }
    }

    /// Whether a tool may sign over `hit`'s entry (`kiln bake` with a
    /// signing key) under `trusted` keys: its provenance says this user's
    /// processes compiled it, in a directory no other user may write, or a
    /// key of `trusted` signed it. Unlike a lookup, which without trusted
    /// keys serves everything, this never answers
    /// [`Admission::Unchecked`]: without trusted keys only this user's own
    /// compiles are vouched for. (Open the cache without
    /// [`DiskConfig::trusted_keys`] to find every copy, then ask this.)
    ///
    /// # Errors
    /// The refusal: [`SignatureError::Unsigned`] for an entry received
    /// unsigned (or of unknown provenance), [`SignatureError::UntrustedSigner`]
    /// or [`SignatureError::BadSignature`] for a signed one.
    pub fn vouch(
        &self,
        hit: &DiskHit,
        trusted: Option<&kiln_image::TrustedKeys>,
    ) -> Result<Admission, SignatureError> {
        let none = kiln_image::TrustedKeys::default();
        let segment = hit.segment();
        let origin = segment.provenance().origin(!self.config.trust_dir);
        crate::trust::admit(Some(trusted.unwrap_or(&none)), &segment.image, origin)
    }

    /// Stores `image`, a one-entry image of `entry` that carries
    /// signatures (a remote entry, as the remote tier verified it), byte for
    /// byte as a signed segment of its own, so that the signature can be
    /// checked again by every process that reads it. Compaction never
    /// merges signed segments (a merge would drop the signature); eviction
    /// removes them whole. Returns whether a segment was published; never
    /// fails, as [`DiskCache::put`].
    pub fn put_signed(&self, entry: &EntryData, image: &[u8]) -> bool {
        if !self.is_writable() {
            return false;
        }
        let holds_entry =
            kiln_image::Image::from_bytes(image, kiln_image::Verification::Structural).is_ok_and(
                |opened| {
                    opened.is_signed()
                        && opened.len() == 1
                        && opened
                            .find(&entry.owner, &entry.key)
                            .is_ok_and(|found| found.is_some())
                },
            );
        if !holds_entry {
            tracing::debug!(name = %entry.name, "not a signed image of the entry: stored as received unsigned");
            return self.put_unsigned(entry, "another");
        }
        if image.len() as u64 > self.config.max_bytes {
            return false;
        }
        if self.find(&entry.owner, &entry.key, Payloads::Now).is_some() {
            return false;
        }
        let published = DirLock::open(self.held()).and_then(|lock| {
            let _shared = lock.shared()?;
            segment::publish_signed(self.held(), image, &entry.owner, &entry.key)
        });
        let file = match published {
            Ok(file) => file,
            Err(source) => {
                self.store_failures.fetch_add(1, Ordering::Relaxed);
                self.stop_writing("publish a segment in", source);
                return false;
            }
        };
        self.stored.fetch_add(1, Ordering::Relaxed);
        self.add_segment(&file);
        self.compact_if_needed();
        true
    }

    /// Stores `entry`, compiled by this process, in a new segment (its
    /// provenance [`Provenance::Compiled`]), unless it is already on disk,
    /// larger than the cap, or the directory cannot be written (then one
    /// warning, and no further attempts). Returns whether a segment was
    /// published. Never fails: the disk cache is best-effort.
    pub fn put(&self, entry: &EntryData) -> bool {
        self.put_entry(entry, &Provenance::Compiled)
            .unwrap_or(false)
    }

    /// Stores `entry`, received unsigned from the tier named `from` (the
    /// remote tier's write-through in a process without trusted keys), in
    /// a segment for such entries (its provenance
    /// [`Provenance::Unsigned`]): compaction never merges it with compiled
    /// entries, and a process with trusted keys never serves it. Returns
    /// whether a segment was published; never fails, as [`DiskCache::put`].
    pub fn put_unsigned(&self, entry: &EntryData, from: &str) -> bool {
        let provenance = Provenance::Unsigned {
            from: from.to_owned(),
        };
        self.put_entry(entry, &provenance).unwrap_or(false)
    }

    /// [`DiskCache::put`] (or [`DiskCache::put_unsigned`], by
    /// `provenance`), telling a failed write (the one that stops writing:
    /// an `Err`, whose warning is logged once) from an entry not stored on
    /// purpose (`Ok(false)`: already there, too large, not writable since
    /// an earlier failure).
    pub(crate) fn put_entry(
        &self,
        entry: &EntryData,
        provenance: &Provenance,
    ) -> Result<bool, Error> {
        if !self.is_writable() {
            return Ok(false);
        }
        if entry_cost(entry) > self.config.max_bytes {
            tracing::debug!(name = %entry.name, "entry larger than KILN_CACHE_MAX_BYTES: not stored on disk");
            return Ok(false);
        }
        if self.find(&entry.owner, &entry.key, Payloads::Now).is_some() {
            return Ok(false);
        }
        let mut writer = ImageWriter::new(segment_meta(provenance));
        writer.push(entry.clone());
        let bytes = match writer.to_bytes() {
            Ok(bytes) => bytes,
            Err(error) => {
                tracing::debug!(name = %entry.name, %error, "entry cannot be written as an image: not stored on disk");
                return Ok(false);
            }
        };
        let published = DirLock::open(self.held()).and_then(|lock| {
            let _shared = lock.shared()?;
            segment::publish(self.held(), &bytes, 1, SegmentClass::of(provenance))
        });
        let file = match published {
            Ok(file) => file,
            Err(source) => {
                self.store_failures.fetch_add(1, Ordering::Relaxed);
                let error = self.io_error(
                    "publish a segment in",
                    std::io::Error::new(source.kind(), source.to_string()),
                );
                self.stop_writing("publish a segment in", source);
                return Err(error);
            }
        };
        self.stored.fetch_add(1, Ordering::Relaxed);
        self.add_segment(&file);
        self.compact_if_needed();
        Ok(true)
    }

    /// Writes pending recency stamps now (also done on drop, at exit, and
    /// by use at most once per stamp interval), then rewrites the stamps
    /// file if it has grown much larger than one record per entry.
    pub fn flush_stamps(&self) {
        let Some(stamps_bytes) = self.append_stamps() else {
            return;
        };
        if self.needs_cleanup.load(Ordering::Relaxed) {
            self.compact_if_needed();
        } else {
            // The cheap count of the lookup path: no listing.
            self.recency.set_entries(self.known_entries());
            if let Err(source) = self.recency.compact_if_bloated(stamps_bytes) {
                self.stop_writing("rewrite the recency stamps in", source);
            }
        }
    }

    /// The entries of the segments this process knows of (from their
    /// names, which anyone can write, so the sum saturates; the base's from
    /// the base, once open).
    fn known_entries(&self) -> u64 {
        self.view()
            .slots
            .iter()
            .fold(0, |sum, s| sum.saturating_add(s.entry_count()))
    }

    /// Appends pending stamps; returns the stamps file's new size if
    /// anything was written.
    pub(super) fn append_stamps(&self) -> Option<u64> {
        match self.recency.write_pending(segment::now_ms()) {
            Ok(len) => len,
            Err(source) => {
                self.stop_writing("append recency stamps in", source);
                None
            }
        }
    }

    /// Whether this process still writes to the directory.
    pub fn is_writable(&self) -> bool {
        self.recency.writable.load(Ordering::Relaxed)
    }

    // ----- internals -----

    /// Searches the listed segments, fullest first, mapping each on first use.
    fn find(&self, owner: &Digest, key: &Digest, payloads: Payloads) -> Option<DiskHit> {
        self.search(owner, key, payloads).0
    }

    /// Whether an entry of `segment` may be served under
    /// [`DiskConfig::trusted_keys`] ([`crate::trust::admit`]): any, without
    /// trusted keys; with them, one its provenance says this user's
    /// processes compiled, in a private directory (not one trusted with
    /// [`DiskConfig::trust_dir`], which others may write to), or one a
    /// trusted key signed. Decided once per segment (the keys are fixed at
    /// open).
    fn admitted(&self, segment: &Segment) -> Result<(), SignatureError> {
        let Some(keys) = &self.config.trusted_keys else {
            return Ok(());
        };
        let origin = segment.provenance().origin(!self.config.trust_dir);
        let admit = || crate::trust::admit(Some(keys), &segment.image, origin);
        if *segment.admitted.get_or_init(|| admit().is_ok()) {
            return Ok(());
        }
        // The reason, for the caller (rare: a refused entry is compiled).
        Err(admit().err().unwrap_or(SignatureError::Unsigned))
    }

    /// The one warning of the process's disk caches about an entry refused
    /// for trust; later refusals are counted by the cache
    /// ([`Stats::tier_untrusted`](crate::Stats::tier_untrusted)).
    fn warn_refused(&self, refusal: &Refusal) {
        if !self.warned_untrusted.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                segment = %refusal.segment,
                error = %refusal.error,
                "kiln disk cache: an entry {} is not signed by a trusted key (KILN_TRUSTED_KEYS is \
                 set): refused and compiled here (further refusals are counted, not logged)",
                refusal.provenance
            );
        }
    }

    /// [`DiskCache::find`], and why the last copy of the entry found was
    /// refused for trust (if one was, and none was served).
    fn search(
        &self,
        owner: &Digest,
        key: &Digest,
        payloads: Payloads,
    ) -> (Option<DiskHit>, Option<Refusal>) {
        let mut damaged = Vec::new();
        let mut hit = None;
        let mut refused = None;
        {
            let view = self.view();
            for slot in &view.slots {
                if segment::is_signed_name(&slot.name)
                    && !segment::signed_name_matches(&slot.name, owner, key)
                {
                    continue; // holds another entry: not even opened
                }
                let Some(s) = slot.segment(self.held()) else {
                    // An assumed base that does not exist is no damage.
                    if slot.seen && !view.damaged.contains(&slot.name) {
                        damaged.push(slot.name.clone());
                    }
                    continue;
                };
                match s.image.find(owner, key) {
                    Ok(None) => continue,
                    Ok(Some(entry)) => {
                        if let Err(why) = self.admitted(s) {
                            tracing::debug!(segment = %slot.name, error = %why, provenance = %s.provenance(), "disk-cache entry not admitted under the trusted keys: not served");
                            refused = Some(Refusal {
                                error: why,
                                provenance: s.provenance().clone(),
                                segment: slot.name.clone(),
                            });
                            continue;
                        }
                        match DiskHit::checked(Arc::clone(s), entry.index(), payloads) {
                            Some(found) => {
                                hit = Some(found);
                                break;
                            }
                            None => damaged.push(slot.name.clone()),
                        }
                    }
                    Err(_) => damaged.push(slot.name.clone()),
                }
            }
        }
        if !damaged.is_empty() {
            tracing::debug!(segments = ?damaged, "damaged disk-cache segment: its entries are misses");
            self.view_mut().damaged.extend(damaged);
            self.needs_cleanup.store(true, Ordering::Relaxed);
        }
        (hit, refused)
    }

    /// Lists the directory again if it changed since the last listing.
    /// Returns whether segments were added or removed.
    fn refresh(&self) -> bool {
        let Ok(modified) = self.held().modified() else {
            return false;
        };
        {
            let view = self.view();
            let settled = match (view.dir_modified, view.listed_at) {
                (Some(seen), Some(listed)) => {
                    seen == modified
                        && listed
                            .duration_since(modified)
                            .is_ok_and(|d| d.as_millis() > u128::from(MTIME_GRANULARITY_MS))
                }
                _ => false,
            };
            if settled {
                return false;
            }
        }
        self.relist_at(Some(modified)).unwrap_or(false)
    }

    /// Lists the directory: new segments are added (mapped on first use),
    /// segments deleted by compaction dropped. Returns whether anything
    /// changed.
    pub(super) fn relist(&self) -> std::io::Result<bool> {
        let modified = self.held().modified()?;
        self.relist_at(Some(modified))
    }

    /// [`DiskCache::relist`] with the directory's modification time known
    /// (`None`: unknown, so the next miss lists again).
    fn relist_at(&self, modified: Option<SystemTime>) -> std::io::Result<bool> {
        let listed_at = SystemTime::now();
        let names = segment::segment_names(self.held())?;
        let mut view = self.view_mut();
        let changed = view.relisted(names);
        view.dir_modified = modified;
        view.listed_at = Some(listed_at);
        Ok(changed)
    }

    /// Maps a segment this process just published.
    fn add_segment(&self, file: &FileInfo) {
        match Segment::open(self.held(), &file.name) {
            Ok(s) => self.view_mut().add(Slot::mapped(s)),
            Err(error) => {
                tracing::debug!(segment = %file.name, %error, "just-published disk-cache segment does not open");
            }
        }
    }

    /// Compacts (too many segments), evicts (over the cap), rewrites the
    /// stamps (grown large) or cleans up (damage seen) when needed and
    /// nobody else is at it. Lists the directory with file sizes: called
    /// after stores, not on the lookup path.
    fn compact_if_needed(&self) {
        if !self.is_writable() {
            return;
        }
        let Ok(listing) = Listing::read(self.held()) else {
            return;
        };
        let base_entries = self
            .view()
            .slots
            .iter()
            .find(|slot| slot.is_base())
            .map_or(0, |slot| slot.entry_count());
        let entries = listing.segments.iter().fold(base_entries, |sum, f| {
            sum.saturating_add(segment::entries_in_name(&f.name))
        });
        let stamps_bytes = stamps::file_len(self.held());
        // Signed segments are never merged: they do not count here.
        // Compiled and received entries are merged apart: each kind counts
        // on its own.
        let count = |class| {
            listing
                .segments
                .iter()
                .filter(|f| SegmentClass::of_name(&f.name) == class)
                .count()
        };
        let needed = count(SegmentClass::Compiled) > self.config.compact_after
            || count(SegmentClass::Received) > self.config.compact_after
            || listing.segment_bytes() + stamps_bytes > self.config.max_bytes
            || stamps::bloated(stamps_bytes, usize::try_from(entries).unwrap_or(usize::MAX))
            || self.needs_cleanup.load(Ordering::Relaxed);
        if !needed {
            return;
        }
        self.append_stamps();
        let compacted = DirLock::open(self.held())
            .map_err(|source| self.io_error("open the lock of", source))
            .and_then(|mut lock| {
                let Some(_exclusive) = lock
                    .try_exclusive()
                    .map_err(|source| self.io_error("lock", source))?
                else {
                    return Ok(None); // another process is compacting
                };
                let damaged = self.view().damaged.clone();
                compact::compact(self.held(), &self.config, Scope::Needed, &damaged).map(Some)
            });
        match compacted {
            Ok(Some(report)) => {
                tracing::debug!(?report, "disk cache compacted");
                self.after_compaction();
            }
            Ok(None) => {}
            Err(Error::DiskIo { action, source, .. }) => self.stop_writing(action, source),
            Err(error) => tracing::debug!(%error, "disk-cache compaction failed"),
        }
    }

    /// Forgets damage (compaction handled it) and lists the directory again.
    pub(super) fn after_compaction(&self) {
        self.needs_cleanup.store(false, Ordering::Relaxed);
        self.view_mut().damaged.clear();
        let _ = self.relist();
    }

    /// Notes a use of `id`; writes pending stamps if the last write is
    /// older than the stamp interval.
    fn touch(&self, id: EntryId) {
        let interval = u64::try_from(self.config.stamp_interval.as_millis()).unwrap_or(u64::MAX);
        // For the exit hook's check of the stamps file's size.
        self.recency.set_entries(self.known_entries());
        if self.recency.note(id, segment::now_ms(), interval) {
            self.flush_stamps();
        }
    }

    /// Stops writing after a failed write, with the one warning.
    fn stop_writing(&self, action: &'static str, source: std::io::Error) {
        if self.recency.writable.swap(false, Ordering::Relaxed) {
            let error = Error::DiskIo {
                action,
                path: self.images_dir().to_path_buf(),
                source,
            };
            tracing::warn!(error = %crate::ErrorChain(&error), "kiln disk cache is not writable: compiling without storing results on disk");
        }
    }

    pub(super) fn listing(&self) -> Result<Listing, Error> {
        Listing::read(self.held()).map_err(|source| self.io_error("list", source))
    }

    pub(super) fn io_error(&self, action: &'static str, source: std::io::Error) -> Error {
        Error::DiskIo {
            action,
            path: self.images_dir().to_path_buf(),
            source,
        }
    }

    pub(super) fn view(&self) -> std::sync::RwLockReadGuard<'_, View> {
        self.view.read().unwrap_or_else(PoisonError::into_inner)
    }

    pub(super) fn view_mut(&self) -> std::sync::RwLockWriteGuard<'_, View> {
        self.view.write().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Drop for DiskCache {
    fn drop(&mut self) {
        self.flush_stamps();
    }
}

impl std::fmt::Debug for DiskCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DiskCache")
            .field("dir", &self.config.dir)
            .field("images_dir", &self.images.path())
            .field("writable", &self.is_writable())
            .finish_non_exhaustive()
    }
}

/// An entry refused for trust: why, its provenance, and where it was.
struct Refusal {
    error: SignatureError,
    provenance: Provenance,
    segment: String,
}
