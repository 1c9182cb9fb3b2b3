//! [`Hit`]: an entry found in the cache, borrowed from it.

use std::borrow::Cow;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use kiln_image::{ArtifactRef, EntryData, EntryRef};

use super::instance::{Artifacts, Instance, Origin};
use super::layers::Layer;
use crate::{ArtifactKind, Dep, Digest, Key, World};

/// Where a hit's entry came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Source {
    /// Compiled or inserted in this process.
    Memory,
    /// A merged image (bytes borrowed from the mapped or embedded image).
    Image,
    /// An extra tier (e.g. the disk cache), then held in memory.
    Tier,
}

impl Source {
    /// `memory`, `image` or `tier`: a stable name, for reports.
    pub fn name(&self) -> &'static str {
        match self {
            Source::Memory => "memory",
            Source::Image => "image",
            Source::Tier => "tier",
        }
    }
}

/// A valid entry found in (or just added to) a [`Cache`](crate::Cache).
///
/// A hit copies no payload: artifact bytes are borrowed from memory
/// (entries compiled in this process own their bytes) or from the image
/// (image-backed entries: no copy), whatever compiler made them. The bytes
/// of an image-backed entry can also be had for the cache's lifetime
/// ([`Hit::image_artifact`]: `&'static [u8]` from the global cache).
///
/// # Alignment
///
/// Every artifact's bytes start at a multiple of
/// [`PAYLOAD_ALIGN`](crate::cache::PAYLOAD_ALIGN) (64) bytes, whatever tier
/// the entry came from: images (embedded, or mapped from `KILN_IMAGE_PATH`)
/// and disk segments place payloads at multiples of 64 and are held at
/// 64-byte-aligned addresses; entries compiled in this process or copied
/// from the remote tier are stored in 64-byte-aligned buffers. A loader may
/// read the bytes as any type of alignment 64 or less without copying.
///
/// # A hit keeps its entry alive
///
/// The cache may evict an in-memory entry to stay under its memory caps
/// ([`CacheConfig::memory_max_bytes`](crate::CacheConfig::memory_max_bytes)),
/// and then frees it, payloads and metadata. A hit on such an entry holds a
/// reference-counted handle on the entry (cloned when the hit is made: one
/// atomic increment), so everything it lends (bytes, name, deps, the
/// owner's label) stays valid for as long as the hit lives, whatever the
/// cache evicts meanwhile. That is why they are borrowed from the hit
/// ([`Hit::artifact`], [`Hit::name`]) rather than from the cache: keep the
/// hit while using them.
///
/// # Image payloads are checked lazily, per artifact
///
/// An image-backed hit is served once its entry record matched its checksum;
/// its payloads are not read then (invariant 7 of ARCHITECTURE.md: an entry
/// with several artifacts, such as a CUBIN and a PTX fallback, pages in
/// only the one that is used; of a compressed image, the group holding it
/// is decompressed once, on the first such access). Each
/// payload is checked against its BLAKE3 checksum the first time it is
/// accessed through [`Hit::artifact`] or [`ArtifactView::bytes`] (the image
/// remembers a success). A payload that fails is never returned (invariant 9
/// of ARCHITECTURE.md): the
/// accessor gives `None`, the failure is counted in
/// [`Stats::corrupt`](crate::Stats::corrupt), and the entry is excluded from
/// its layer, so the next lookup misses and the next
/// [`Cache::get_or_compile`](crate::Cache::get_or_compile) recompiles.
///
/// The same holds for an entry a tier handed over from an image it keeps
/// mapped ([`TierEntry::Image`](crate::TierEntry), the disk tier's hits): its
/// payloads are checked on first access, and one that fails closes the entry
/// for good (the tier then refuses it too).
#[derive(Clone)]
pub struct Hit<'c> {
    inner: Inner<'c>,
}

#[derive(Clone)]
enum Inner<'c> {
    Memory {
        instance: Arc<Instance>,
    },
    Image {
        layer: &'c Layer,
        entry: EntryRef<'c>,
    },
}

/// One artifact of a [`Hit`], borrowed from the hit; its bytes are read
/// (and, for an image-backed entry, checked) only when
/// [`ArtifactView::bytes`] is called. They start at a 64-byte-aligned
/// address, whatever the tier (see [`Hit`]).
#[derive(Clone)]
pub struct ArtifactView<'h> {
    /// What the bytes are.
    pub kind: ArtifactKind,
    /// Entry-point names.
    pub entry_points: Vec<&'h str>,
    payload: Payload<'h>,
}

#[derive(Clone, Copy)]
enum Payload<'h> {
    Memory(&'h [u8]),
    /// A payload of an in-memory entry borrowed from a tier's image.
    Tier {
        instance: &'h Instance,
        artifact: ArtifactRef<'h>,
    },
    Image {
        layer: &'h Layer,
        entry: EntryRef<'h>,
        artifact: ArtifactRef<'h>,
    },
}

impl<'h> ArtifactView<'h> {
    /// The compiled code, borrowed from the hit, at a 64-byte-aligned
    /// address ([`PAYLOAD_ALIGN`](crate::cache::PAYLOAD_ALIGN)); `None` if it is an image
    /// payload that fails its checksum (the entry is then excluded and counted
    /// as corrupt; see [`Hit`]). An image payload is checked on its first
    /// access only.
    pub fn bytes(&self) -> Option<&'h [u8]> {
        match self.payload {
            Payload::Memory(bytes) => Some(bytes),
            Payload::Tier { instance, artifact } => tier_payload(instance, &artifact),
            Payload::Image {
                layer,
                entry,
                artifact,
            } => layer.payload(&entry, &artifact),
        }
    }
}

/// The payload of `artifact`, borrowed from the tier image of `instance`,
/// checked against its checksum on first access. A payload that fails is never
/// returned: the instance is closed for good, so the next lookup misses and
/// `get_or_compile` asks the tiers again (which refuse the entry now known bad)
/// and then compiles.
fn tier_payload<'h>(instance: &Instance, artifact: &ArtifactRef<'h>) -> Option<&'h [u8]> {
    match artifact.bytes() {
        Ok(bytes) => Some(bytes),
        Err(error) => {
            if instance.close(instance.min_world.saturating_sub(1)) {
                if let Artifacts::Image { corrupt, .. } = &instance.body.artifacts {
                    corrupt.fetch_add(1, Ordering::Relaxed);
                }
                tracing::warn!(
                    name = instance.name,
                    key = %instance.key,
                    %error,
                    "cached payload failed its checksum; the entry is never served again, recompile instead"
                );
            }
            None
        }
    }
}

impl std::fmt::Debug for ArtifactView<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The length only: formatting must not read (or check) a payload.
        let len = match self.payload {
            Payload::Memory(bytes) => bytes.len(),
            Payload::Tier { artifact, .. } | Payload::Image { artifact, .. } => artifact.len(),
        };
        f.debug_struct("ArtifactView")
            .field("kind", &self.kind)
            .field("entry_points", &self.entry_points)
            .field("len", &len)
            .finish()
    }
}

impl<'c> Hit<'c> {
    /// A hit on an in-memory instance, holding it.
    pub(crate) fn memory(instance: Arc<Instance>) -> Hit<'c> {
        Hit {
            inner: Inner::Memory { instance },
        }
    }

    /// The instance of a memory hit.
    pub(crate) fn instance(&self) -> Option<&Arc<Instance>> {
        match &self.inner {
            Inner::Memory { instance } => Some(instance),
            Inner::Image { .. } => None,
        }
    }

    pub(crate) fn image(layer: &'c Layer, entry: EntryRef<'c>) -> Hit<'c> {
        Hit {
            inner: Inner::Image { layer, entry },
        }
    }

    /// The entry's human name.
    pub fn name(&self) -> &str {
        match &self.inner {
            Inner::Memory { instance: i } => &i.name,
            Inner::Image { entry, .. } => entry.name(),
        }
    }

    /// The owner's digest.
    pub fn owner(&self) -> Digest {
        match &self.inner {
            Inner::Memory { instance: i } => i.owner,
            Inner::Image { entry, .. } => entry.owner(),
        }
    }

    /// The owner's label (compiler, version and target, e.g.
    /// `regex-dfa-0.4.1/x86_64` or `nvrtc-13.0/sm_90a`).
    pub fn owner_label(&self) -> &str {
        match &self.inner {
            Inner::Memory { instance: i } => &i.owner_label,
            Inner::Image { layer, entry } => {
                layer.owner(&entry.owner()).map_or("", |o| o.label.as_str())
            }
        }
    }

    /// The key.
    pub fn key(&self) -> Key {
        match &self.inner {
            Inner::Memory { instance: i } => i.key,
            Inner::Image { entry, .. } => Key::from_digest(entry.key()),
        }
    }

    /// The producer of the image an image-backed hit's entry comes from
    /// (its header's producer string); `None` for other hits. What an
    /// [`Observer`](crate::cache::Observer) records of an image hit.
    pub fn image_producer(&self) -> Option<&'c str> {
        match &self.inner {
            Inner::Image { layer, .. } => Some(layer.image.producer()),
            Inner::Memory { .. } => None,
        }
    }

    /// Where the entry came from.
    pub fn source(&self) -> Source {
        match &self.inner {
            Inner::Memory { instance } if instance.body.origin == Origin::Tier => Source::Tier,
            Inner::Memory { .. } => Source::Memory,
            Inner::Image { .. } => Source::Image,
        }
    }

    /// The first world the entry is valid in (for an image-backed entry: the
    /// world its image was merged in).
    pub fn min_world(&self) -> World {
        match &self.inner {
            Inner::Memory { instance: i } => World(i.min_world),
            Inner::Image { layer, .. } => World(layer.min_world),
        }
    }

    /// The last world the entry is valid in, as of now ([`World::MAX`] while
    /// unbounded). An excluded image entry reports its layer's world minus one.
    pub fn max_world(&self) -> World {
        match &self.inner {
            Inner::Memory { instance: i } => World(i.max_world()),
            Inner::Image { layer, entry } => World(
                layer
                    .max_world(entry.index())
                    .unwrap_or(layer.min_world.saturating_sub(1)),
            ),
        }
    }

    /// Whether the entry is valid in `world`.
    pub fn is_valid_in(&self, world: World) -> bool {
        self.min_world() <= world && world <= self.max_world()
    }

    /// The definitions the entry was built from.
    pub fn deps(&self) -> Cow<'_, [Dep]> {
        match &self.inner {
            Inner::Memory { instance: i } => Cow::Borrowed(&i.deps),
            Inner::Image { entry, .. } => Cow::Owned(entry.deps()),
        }
    }

    /// All artifacts, in the order they were compiled, borrowed from the
    /// hit. No payload is read until [`ArtifactView::bytes`] is called on
    /// its view.
    pub fn artifacts(&self) -> Vec<ArtifactView<'_>> {
        match &self.inner {
            Inner::Memory { instance } => match &instance.body.artifacts {
                Artifacts::Owned(list) => list
                    .iter()
                    .map(|a| ArtifactView {
                        kind: a.kind.clone(),
                        entry_points: a.entry_points.iter().map(String::as_str).collect(),
                        payload: Payload::Memory(a.bytes.as_slice()),
                    })
                    .collect(),
                // Borrowed from a tier's mapped image, each payload checked on
                // its first access (see `tier_payload`).
                Artifacts::Image { .. } => {
                    instance
                        .body
                        .artifacts
                        .image_entry()
                        .map_or_else(Vec::new, |entry| {
                            (0..entry.artifact_count())
                                .filter_map(|n| entry.artifact(n).ok())
                                .map(|artifact| ArtifactView {
                                    kind: artifact.kind(),
                                    entry_points: artifact.entry_points(),
                                    payload: Payload::Tier { instance, artifact },
                                })
                                .collect()
                        })
                }
            },
            Inner::Image { layer, entry } => (0..entry.artifact_count())
                // The descriptors were checked with the entry record.
                .filter_map(|n| entry.artifact(n).ok())
                .map(|artifact| ArtifactView {
                    kind: artifact.kind(),
                    entry_points: artifact.entry_points(),
                    payload: Payload::Image {
                        layer,
                        entry: *entry,
                        artifact,
                    },
                })
                .collect(),
        }
    }

    /// The bytes of the first artifact of `kind`, borrowed from the hit
    /// (valid as long as the hit lives, even if the cache evicts the entry
    /// meanwhile), at a 64-byte-aligned address
    /// ([`PAYLOAD_ALIGN`](crate::cache::PAYLOAD_ALIGN)).
    ///
    /// `None` if the entry has no artifact of `kind`, or if it is an image
    /// payload that fails its checksum (checked on first access only); in
    /// that case the entry is excluded and counted as corrupt, and the next
    /// lookup misses (see [`Hit`]).
    pub fn artifact(&self, kind: &ArtifactKind) -> Option<&[u8]> {
        match &self.inner {
            Inner::Memory { instance } => match &instance.body.artifacts {
                Artifacts::Owned(list) => list
                    .iter()
                    .find(|a| a.kind.name() == kind.name())
                    .map(|a| a.bytes.as_slice()),
                Artifacts::Image { .. } => {
                    let entry = instance.body.artifacts.image_entry()?;
                    let artifact = entry.artifact_of_kind(kind)?;
                    tier_payload(instance, &artifact)
                }
            },
            Inner::Image { .. } => self.image_artifact(kind),
        }
    }

    /// The bytes of the first artifact of `kind` of an entry served from an
    /// image, borrowed from the cache rather than from the hit: they live
    /// as long as the cache, whatever happens to the hit. Images are never
    /// unmerged, and their bytes (embedded in the binary, mapped from a
    /// file, or a compressed group decompressed once) stay where they are
    /// for as long as the cache lives. So from [`global()`](crate::global()),
    /// a `&'static Cache`, an image-backed entry's code is a
    /// `&'static [u8]`: a library can keep a zero-copy view of it (a
    /// deserialized automaton, a shader) in a `static` without keeping the
    /// hit.
    ///
    /// `None` when the entry is not image-backed ([`Hit::source`] is not
    /// [`Source::Image`]: entries compiled in this process or loaded from a
    /// tier may be evicted, and are lent by [`Hit::artifact`] only), has no
    /// artifact of `kind`, or its payload fails its checksum (see [`Hit`]).
    /// Like [`Hit::artifact`], it allocates nothing.
    ///
    /// ```
    /// use kiln_core::{Artifact, ArtifactKind, Cache, Compiled, KeyBuilder, Owner, Source};
    /// use kiln_image::{Image, ImageMeta, Verification};
    ///
    /// let owner = Owner::new("regex-dfa", "1.0", "x86_64", ["--dense"])?;
    /// let key = KeyBuilder::new("my-regexes", 1).str("pattern", "[a-z]+@[a-z]+").finish();
    /// // An image holding one entry (a build script writes it; here, a cache).
    /// let build = Cache::new();
    /// let snapshot = build.snapshot();
    /// build.insert(&owner, &key, Compiled::new("email").artifact(Artifact {
    ///     kind: ArtifactKind::Bytes,
    ///     entry_points: vec![],
    ///     bytes: vec![1, 2, 3],
    /// }));
    /// let image = build.delta(&snapshot).to_bytes(ImageMeta::new("my-regexes", "1"))?;
    ///
    /// // A cache that lives as long as the program, as `kiln::global()`'s.
    /// let cache: &'static Cache = Box::leak(Box::new(Cache::new()));
    /// cache.merge_image(Image::from_bytes(&image, Verification::Full)?);
    /// let hit = cache.lookup(&owner.digest(), &key).expect("in the merged image");
    /// assert_eq!(hit.source(), Source::Image);
    /// let dfa: &'static [u8] = hit.image_artifact(&ArtifactKind::Bytes).expect("its bytes");
    /// drop(hit);
    /// assert_eq!(dfa, [1, 2, 3]); // still borrowed, from the image
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn image_artifact(&self, kind: &ArtifactKind) -> Option<&'c [u8]> {
        match &self.inner {
            Inner::Image { layer, entry } => {
                let artifact = entry.artifact_of_kind(kind)?;
                layer.payload(entry, &artifact)
            }
            Inner::Memory { .. } => None,
        }
    }

    /// An owned copy of the entry, as an image or a tier stores it (worlds
    /// normalised to `[World::FIRST, World::MAX]`).
    ///
    /// Reads every payload: `None` if one of an image-backed entry's payloads
    /// fails its checksum (the entry is then excluded; see [`Hit`]).
    pub fn to_entry_data(&self) -> Option<EntryData> {
        match &self.inner {
            Inner::Memory { instance } => instance.to_entry_data(),
            Inner::Image { .. } => Some(EntryData {
                owner: self.owner(),
                owner_label: self.owner_label().to_owned(),
                key: *self.key().digest(),
                name: self.name().to_owned(),
                min_world: World::FIRST.0,
                max_world: World::MAX.0,
                deps: self.deps().into_owned(),
                artifacts: self
                    .artifacts()
                    .into_iter()
                    .map(|a| {
                        Some(crate::Artifact {
                            bytes: a.bytes()?.to_vec(),
                            kind: a.kind,
                            entry_points: a.entry_points.into_iter().map(str::to_owned).collect(),
                        })
                    })
                    .collect::<Option<_>>()?,
            }),
        }
    }
}

impl std::fmt::Debug for Hit<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hit")
            .field("name", &self.name())
            .field("owner", &self.owner_label())
            .field("key", &self.key())
            .field("source", &self.source())
            .field("min_world", &self.min_world())
            .field("max_world", &self.max_world())
            .finish()
    }
}
