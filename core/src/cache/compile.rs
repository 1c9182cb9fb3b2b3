//! `get_or_compile`: memory, images, tiers, then one compile per key.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Instant;

use super::Cache;
use super::background::{Job, JobEntry};
use super::hit::Hit;
use super::instance::{Artifacts, Compiled, Instance, Origin};
use super::lookup::Parts;
use super::observer::Acquired;
use super::single_flight::{Join, Outcome};
use super::stats::bump;
use super::store::SlotKey;
use super::tier::TierEntry;
use crate::error::{BoxError, CompileFailure};
use crate::{Digest, Error, Key, Owner};

impl Cache {
    /// The entry of `(owner, key)` valid now, compiling it with `compile` if
    /// no tier has it.
    ///
    /// Order: memory, merged images, extra tiers (in the order added), then
    /// `compile`. Concurrent callers for the same `(owner, key)` run `compile`
    /// once (single flight) and all get its result; if it fails, every one of
    /// them gets the error and nothing is cached, so a later call compiles
    /// again. A successful result is recorded (see [`Cache::insert`]) and
    /// returned at once; unless it is session-dependent it is then stored
    /// into every tier by the cache's background writer (see
    /// [`Cache::flush`]), not on the caller's thread.
    ///
    /// With [`CacheConfig::always_compile`](crate::CacheConfig::always_compile)
    /// the lookups are skipped and `compile` always runs (still once for
    /// concurrent callers); the result is still recorded.
    ///
    /// If a definition the result depends on changed while it compiled, the
    /// returned hit is already closed (`hit.is_valid_in(cache.world())` is
    /// false) and the next call compiles against the new definition.
    ///
    /// An image-backed hit is returned after its entry record is checked;
    /// each payload is checked when the caller accesses it (see [`Hit`]). If
    /// one turns out corrupt then, that access returns `None` (never the bad
    /// bytes) and the entry is excluded, so calling `get_or_compile` again
    /// compiles (or loads from a tier) a fresh entry.
    ///
    /// `compile` returns [`BoxError`]: `?` converts any error into it, so the
    /// closure needs no type annotation; a function that returns its own
    /// error type is called as `|| Ok(my_compile()?)`.
    ///
    /// ```
    /// use kiln_core::{Artifact, ArtifactKind, Cache, Compiled, KeyBuilder, Owner};
    ///
    /// fn my_compiler(source: &str) -> Result<Vec<u8>, std::io::Error> {
    ///     Ok(source.as_bytes().to_vec()) // a real compiler runs here
    /// }
    ///
    /// # fn main() -> Result<(), kiln_core::Error> {
    /// let cache = Cache::new();
    /// let owner = Owner::new("my-compiler", "1.0", "x86_64", ["-O2"])?;
    /// let key = KeyBuilder::new("doc", 1).str("function", "f").finish();
    /// let hit = cache.get_or_compile(&owner, &key, || {
    ///     let code = my_compiler("f")?; // any std::error::Error
    ///     Ok(Compiled::new("f").artifact(Artifact {
    ///         kind: ArtifactKind::Object,
    ///         entry_points: vec!["f".into()],
    ///         bytes: code,
    ///     }))
    /// })?;
    /// assert_eq!(hit.artifact(&ArtifactKind::Object), Some(&b"f"[..]));
    /// # Ok(()) }
    /// ```
    ///
    /// With an observer set ([`Cache::observe`]; the `KILN_RECORD` recorder
    /// for the global cache), it is told of the entry returned, with where
    /// it came from (see [`Observer`](super::Observer)).
    ///
    /// # Errors
    /// [`Error::Compile`] with `compile`'s error, or
    /// [`Error::CompilePanicked`] if the compile this call waited for panicked
    /// in another thread.
    pub fn get_or_compile(
        &self,
        owner: &Owner,
        key: &Key,
        compile: impl FnOnce() -> Result<Compiled, BoxError>,
    ) -> Result<Hit<'_>, Error> {
        let digest = owner.digest();
        let cached = !self.config.always_compile;
        let leader = loop {
            if cached && let Some(hit) = self.lookup(&digest, key) {
                return Ok(hit); // noted by `lookup`
            }
            match self.flights.join(SlotKey::new(&digest, key)) {
                Join::Leader(leader) => break leader,
                Join::Follower(flight) => {
                    bump(&self.counters.compile_waits);
                    match flight.wait() {
                        // The leader's result (unless a redefinition closed
                        // it meanwhile: then go again).
                        Outcome::Succeeded(served) => {
                            if let Some(hit) = self.handed_over(served, &digest, key) {
                                return Ok(hit);
                            }
                        }
                        // A lookup without compile found nothing: look again,
                        // and lead a compile if nobody else does.
                        Outcome::Missed => {}
                        Outcome::Failed(source) => {
                            return Err(compile_error(owner, key, source));
                        }
                        Outcome::Panicked => {
                            return Err(Error::CompilePanicked {
                                owner: owner.label().to_owned(),
                                key: *key,
                            });
                        }
                    }
                }
            }
        };
        // A flight that ended just before this one started may have cached it.
        if cached && let Some(hit) = self.find(self.world().0, &digest, key) {
            leader.end(Outcome::Succeeded(served(&hit)));
            return Ok(self.note_found(hit));
        }
        if cached && let Some(hit) = self.load_from_tiers(owner, key) {
            leader.end(Outcome::Succeeded(served(&hit)));
            return Ok(hit);
        }
        let started = Instant::now();
        let result = compile();
        let took = started.elapsed();
        self.counters.record_compile(took, result.is_ok());
        match result {
            Ok(compiled) => {
                self.note_acquired(owner, key, &compiled.name, Acquired::Compiled(took));
                let store = !compiled.session_dependent && self.tiers.count() > 0;
                let hit = self.record(owner, key, compiled, Origin::Compiled, cached);
                leader.end(Outcome::Succeeded(served(&hit)));
                if store {
                    self.store_in_background(owner, &hit);
                }
                Ok(hit)
            }
            Err(error) => {
                let source: CompileFailure = Arc::from(error);
                leader.end(Outcome::Failed(Arc::clone(&source)));
                Err(compile_error(owner, key, source))
            }
        }
    }

    /// The entry of `(owner, key)` valid now from memory, the merged images
    /// or the extra tiers (in that order, as [`Cache::get_or_compile`]
    /// looks), or `None`; never compiles. For a caller that cannot compile
    /// here (no compiler on this machine) but may find what another
    /// machine compiled in the disk or remote tier.
    ///
    /// A tier's entry is loaded once for concurrent callers (the same
    /// single flight as compiles): a caller that finds a compile of the
    /// same key running waits for it. `None` with
    /// [`CacheConfig::always_compile`](crate::CacheConfig::always_compile).
    ///
    /// ```
    /// use kiln_core::{Cache, KeyBuilder, Owner};
    ///
    /// let cache = Cache::new();
    /// let owner = Owner::new("my-compiler", "1.0", "x86_64", ["-O2"])?;
    /// let key = KeyBuilder::new("doc", 1).str("function", "f").finish();
    /// assert!(cache.get_cached(&owner, &key).is_none(), "nothing compiled it");
    /// # Ok::<(), kiln_core::Error>(())
    /// ```
    pub fn get_cached(&self, owner: &Owner, key: &Key) -> Option<Hit<'_>> {
        if self.config.always_compile {
            return None;
        }
        let digest = owner.digest();
        loop {
            if let Some(hit) = self.lookup(&digest, key) {
                return Some(hit); // noted by `lookup`
            }
            match self.flights.join(SlotKey::new(&digest, key)) {
                Join::Leader(leader) => {
                    if let Some(hit) = self.find(self.world().0, &digest, key) {
                        leader.end(Outcome::Succeeded(served(&hit)));
                        return Some(self.note_found(hit));
                    }
                    let hit = self.load_from_tiers(owner, key);
                    leader.end(match &hit {
                        Some(hit) => Outcome::Succeeded(served(hit)),
                        // Followers that compile look again and compile;
                        // those that do not have their answer.
                        None => Outcome::Missed,
                    });
                    return hit;
                }
                Join::Follower(flight) => {
                    bump(&self.counters.compile_waits);
                    match flight.wait() {
                        // The tiers were asked for it just now.
                        Outcome::Missed => return None,
                        Outcome::Succeeded(served) => {
                            if let Some(hit) = self.handed_over(served, &digest, key) {
                                return Some(hit);
                            }
                        }
                        // Look again: after a failed compile the tiers are
                        // asked.
                        Outcome::Failed(_) | Outcome::Panicked => {}
                    }
                }
            }
        }
    }

    /// What a flight that succeeded handed its followers: its in-memory
    /// entry, from the payloads it handed over (the entry may have been
    /// evicted since), while it is valid now; else the entry found again
    /// (an image-backed one); `None` when a redefinition closed it.
    fn handed_over(
        &self,
        served: Option<Arc<Instance>>,
        digest: &Digest,
        key: &Key,
    ) -> Option<Hit<'_>> {
        let world = self.world().0;
        if let Some(instance) = served
            && instance.is_valid_in(world)
        {
            instance.touch(self.memory.now());
            return Some(self.note_found(Hit::memory(instance)));
        }
        self.find(world, digest, key)
            .map(|hit| self.note_found(hit))
    }

    /// The first usable entry an extra tier has for `(owner, key)`, recorded
    /// in memory (borrowed from the tier's image when it hands one over).
    fn load_from_tiers(&self, owner: &Owner, key: &Key) -> Option<Hit<'_>> {
        for (index, tier) in self.tiers.iter() {
            let found = tier.load_entry(owner, key).and_then(|found| {
                found
                    .map(|found| {
                        parts_of(
                            found,
                            &self.counters.corrupt,
                            self.config.check_tier_payloads,
                        )
                    })
                    .transpose()
            });
            let (entry_owner, entry_key, parts) = match found {
                Ok(Some(found)) => found,
                Ok(None) => continue,
                Err(error @ Error::TierUntrusted { .. }) => {
                    // The tier gives the one warning; this is counted.
                    bump(&self.counters.tier_untrusted);
                    tracing::debug!(tier = tier.name(), %key, %error, "cache tier entry not signed by a trusted key; ignored");
                    continue;
                }
                Err(error) => {
                    tracing::warn!(tier = tier.name(), %key, %error, "cache tier failed to load; ignored");
                    continue;
                }
            };
            if entry_owner != owner.digest() || entry_key != *key.digest() {
                tracing::warn!(tier = tier.name(), %key, "cache tier returned another entry; ignored");
                continue;
            }
            if !self.deps_current(&parts.deps) {
                tracing::debug!(tier = tier.name(), %key, "cache tier entry is stale; ignored");
                continue;
            }
            bump(&self.counters.hits_tier);
            if let Some(hits) = self.tier_hits.get(index) {
                hits.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            let name = tier.name();
            self.note_acquired(owner, key, &parts.name, Acquired::Tier { index, name });
            return Some(self.record_parts(owner, key, parts, Origin::Tier, true));
        }
        None
    }

    /// Queues the store of a freshly recorded entry into every tier (an
    /// image-backed hit, already in an image, is not stored).
    fn store_in_background(&self, owner: &Owner, hit: &Hit<'_>) {
        let Some(instance) = hit.instance() else {
            return;
        };
        self.queue.push(Job {
            owner: owner.clone(),
            entry: JobEntry::Instance(Arc::clone(instance)),
            tiers: self
                .tiers
                .iter()
                .map(|(_, tier)| Arc::clone(tier))
                .collect(),
        });
    }

    fn deps_current(&self, deps: &[crate::Dep]) -> bool {
        super::definitions::deps_match(&self.writer().definitions, deps)
    }
}

/// The owner digest, key digest and parts of what a tier found; an
/// image-backed entry counts a payload that fails into `corrupt`, and with
/// `check_payloads` has every payload checked now.
fn parts_of(
    found: TierEntry,
    corrupt: &Arc<AtomicU64>,
    check_payloads: bool,
) -> Result<(Digest, Digest, Parts), Error> {
    Ok(match found {
        TierEntry::Owned(data) => (
            data.owner,
            data.key,
            Parts {
                name: data.name,
                deps: data.deps,
                artifacts: Artifacts::owned(data.artifacts),
                session_dependent: false,
            },
        ),
        TierEntry::Image { image, index } => {
            // The record is checked here, each payload when it is first used
            // (an entry with a CUBIN and a PTX fallback reads only the one
            // used); an entry with a payload already known bad is refused.
            // The entry's borrow of the image ends in this block, before the
            // image moves into the parts.
            let (owner, key, name, deps) = {
                let entry = image.entry(index)?;
                if check_payloads {
                    for artifact in entry.artifacts() {
                        if artifact.bytes().is_err() {
                            corrupt.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        }
                    }
                }
                if let Some(artifact) = entry.failed_payload() {
                    return Err(kiln_image::ReadError::PayloadChecksum {
                        entry: index,
                        artifact,
                    }
                    .into());
                }
                (
                    entry.owner(),
                    entry.key(),
                    entry.name().to_owned(),
                    entry.deps(),
                )
            };
            let parts = Parts {
                name,
                deps,
                artifacts: Artifacts::Image {
                    image,
                    index,
                    corrupt: Arc::clone(corrupt),
                },
                session_dependent: false,
            };
            (owner, key, parts)
        }
    })
}

/// What a flight hands its followers: a memory hit's instance.
fn served(hit: &Hit<'_>) -> Option<Arc<Instance>> {
    hit.instance().cloned()
}

fn compile_error(owner: &Owner, key: &Key, source: CompileFailure) -> Error {
    Error::Compile {
        owner: owner.label().to_owned(),
        key: *key,
        source,
    }
}
