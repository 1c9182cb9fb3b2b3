//! Code instances compiled or loaded in this process, and what a compile returns.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use kiln_image::{EntryData, EntryRef, Image};
use rkyv::util::AlignedVec;

use crate::{Artifact, ArtifactKind, Dep, Digest, Key, World};

/// The alignment of every artifact's bytes a [`Hit`](crate::Hit) returns,
/// whatever tier it came from: image payloads start at multiples of 64 in
/// images and disk segments, which are mapped or copied at 64-byte-aligned
/// addresses, and artifacts held in memory (compiled in this process, or
/// copied from the remote tier) are copied into 64-byte-aligned buffers.
pub const PAYLOAD_ALIGN: usize = 64;

// One alignment for every tier: the image format's.
const _: () = assert!(PAYLOAD_ALIGN == kiln_image::header::REGION_ALIGN);

/// The result of one compile: what [`Cache::insert`](crate::Cache::insert)
/// records and the closure of
/// [`Cache::get_or_compile`](crate::Cache::get_or_compile) returns.
///
/// ```
/// use kiln_core::{Artifact, ArtifactKind, Compiled, Digest};
///
/// let compiled = Compiled::new("add_f32")
///     .dep("add.cu", Digest::of(b"source of add.cu"))
///     .artifact(Artifact {
///         kind: ArtifactKind::Ptx,
///         entry_points: vec!["add".into()],
///         bytes: b".version 8.0".to_vec(),
///     });
/// assert_eq!(compiled.deps.len(), 1);
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Compiled {
    /// A human name (the function and its specialisation), for reports.
    pub name: String,
    /// The definitions the code was built from, with their fingerprints then:
    /// a later [`Cache::redefine`](crate::Cache::redefine) of any of them
    /// invalidates the entry.
    pub deps: Vec<Dep>,
    /// The compiled code: plain data that means the same in every process.
    pub artifacts: Vec<Artifact>,
    /// Whether the artifacts depend on this process (addresses, handles):
    /// such an entry is cached in memory but never exported into an image.
    pub session_dependent: bool,
}

impl Compiled {
    /// An entry called `name`, with no deps and no artifacts yet.
    pub fn new(name: impl Into<String>) -> Compiled {
        Compiled {
            name: name.into(),
            ..Compiled::default()
        }
    }

    /// Adds a dependency on definition `name` at `fingerprint`.
    pub fn dep(mut self, name: impl Into<String>, fingerprint: Digest) -> Compiled {
        self.deps.push(Dep {
            name: name.into(),
            fingerprint,
        });
        self
    }

    /// Adds an artifact.
    pub fn artifact(mut self, artifact: Artifact) -> Compiled {
        self.artifacts.push(artifact);
        self
    }

    /// Marks the entry as session-dependent (never exported).
    pub fn session_dependent(mut self) -> Compiled {
        self.session_dependent = true;
        self
    }
}

/// Where an in-memory instance came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Origin {
    /// Compiled (or inserted) in this process.
    Compiled,
    /// Loaded from an extra tier (e.g. the disk cache): a memo of an earlier
    /// local compile, so it is exported like a compiled entry.
    Tier,
}

/// An artifact owned by an in-memory instance: its bytes at a
/// [`PAYLOAD_ALIGN`]-aligned address, as in an image, whatever alignment the
/// compiler's buffer had.
pub(crate) struct OwnedArtifact {
    pub(crate) kind: ArtifactKind,
    pub(crate) entry_points: Vec<String>,
    pub(crate) bytes: AlignedVec<PAYLOAD_ALIGN>,
}

impl From<Artifact> for OwnedArtifact {
    fn from(artifact: Artifact) -> OwnedArtifact {
        let mut bytes = AlignedVec::<PAYLOAD_ALIGN>::with_capacity(artifact.bytes.len());
        bytes.extend_from_slice(&artifact.bytes);
        OwnedArtifact {
            kind: artifact.kind,
            entry_points: artifact.entry_points,
            bytes,
        }
    }
}

impl OwnedArtifact {
    fn to_artifact(&self) -> Artifact {
        Artifact {
            kind: self.kind.clone(),
            entry_points: self.entry_points.clone(),
            bytes: self.bytes.to_vec(),
        }
    }
}

/// Where an in-memory instance's artifacts are.
pub(crate) enum Artifacts {
    /// Owned by the instance: compiled here, or copied from a tier, each
    /// copied into an aligned buffer ([`Artifacts::owned`]).
    Owned(Vec<OwnedArtifact>),
    /// Borrowed from entry `index` of an image a tier keeps mapped (a disk
    /// segment): no copy. Each payload is checked against its checksum on
    /// first access, as for image layers; `corrupt` counts an entry closed
    /// because one failed (the cache's `Stats::corrupt`).
    Image {
        image: Arc<Image>,
        index: usize,
        corrupt: Arc<AtomicU64>,
    },
}

impl Artifacts {
    /// Artifacts held in memory, copied into aligned buffers.
    pub(crate) fn owned(artifacts: Vec<Artifact>) -> Artifacts {
        Artifacts::Owned(artifacts.into_iter().map(OwnedArtifact::from).collect())
    }

    /// The image entry, for image-backed artifacts (`None` if its record
    /// no longer reads, which a checked entry of an immutable image never does).
    pub(crate) fn image_entry(&self) -> Option<EntryRef<'_>> {
        match self {
            Artifacts::Owned(_) => None,
            Artifacts::Image { image, index, .. } => image.entry(*index).ok(),
        }
    }

    /// The payload bytes the artifacts hold (owned) or keep mapped (borrowed
    /// from a tier's image): what the memory cap counts.
    pub(crate) fn payload_bytes(&self) -> u64 {
        match self {
            Artifacts::Owned(list) => list.iter().map(|a| a.bytes.len() as u64).sum(),
            Artifacts::Image { .. } => self.image_entry().map_or(0, |entry| {
                (0..entry.artifact_count())
                    .filter_map(|n| entry.artifact(n).ok())
                    .map(|a| a.len() as u64)
                    .sum()
            }),
        }
    }
}

/// An entry's payloads: its artifacts and where they came from.
pub(crate) struct Body {
    pub(crate) artifacts: Artifacts,
    pub(crate) origin: Origin,
    /// [`Artifacts::payload_bytes`], counted once when recorded.
    pub(crate) bytes: u64,
}

impl Body {
    pub(crate) fn new(artifacts: Artifacts, origin: Origin) -> Body {
        Body {
            bytes: artifacts.payload_bytes(),
            artifacts,
            origin,
        }
    }
}

/// Position of an instance that is in no list.
pub(crate) const NOT_RESIDENT: usize = usize::MAX;

/// One in-memory code instance: identity, metadata and payloads, shared by
/// `Arc`. The cache holds one reference while the entry is resident (in the
/// index and the resident lists); every [`Hit`](crate::Hit) on it, a store
/// queued for the background writer, a [`Delta`](crate::Delta) and the
/// insertion log of a live [`Snapshot`](crate::Snapshot) hold others. An
/// evicted entry is taken out of the index and the lists, and its memory
/// (metadata and payloads) is freed when the last of those references
/// drops: nothing the cache has let go of stays allocated.
pub(crate) struct Instance {
    pub(crate) owner: Digest,
    pub(crate) owner_label: Arc<str>,
    pub(crate) key: Key,
    pub(crate) name: String,
    /// The insertion sequence number: the cache's record count when it was
    /// recorded (what a [`Snapshot`](crate::Snapshot) marks).
    pub(crate) seq: usize,
    pub(crate) min_world: u64,
    /// `u64::MAX` while unbounded; closed by invalidation (only ever lowered once).
    pub(crate) max_world: AtomicU64,
    pub(crate) deps: Vec<Dep>,
    pub(crate) session_dependent: bool,
    pub(crate) body: Body,
    /// The cache's clock when the entry was last recorded or hit (for LRU);
    /// written by a hit only when it changes.
    pub(crate) last_used: AtomicU64,
    /// Position in the cache's resident list, or [`NOT_RESIDENT`]. Writer lock only.
    pub(crate) resident_at: AtomicUsize,
    /// Position in its owner's resident list, or [`NOT_RESIDENT`]. Writer lock only.
    pub(crate) owner_at: AtomicUsize,
    /// The cache's count of allocated instances, decremented on drop.
    alive: Arc<AtomicU64>,
}

/// What an [`Instance`] is made of, besides what the cache sets.
pub(crate) struct InstanceParts {
    pub(crate) owner: Digest,
    pub(crate) owner_label: Arc<str>,
    pub(crate) key: Key,
    pub(crate) name: String,
    pub(crate) seq: usize,
    pub(crate) min_world: u64,
    pub(crate) max_world: u64,
    pub(crate) deps: Vec<Dep>,
    pub(crate) session_dependent: bool,
    pub(crate) body: Body,
}

impl Instance {
    /// A new instance, counted in `alive` until it is dropped.
    pub(crate) fn new(parts: InstanceParts, alive: &Arc<AtomicU64>) -> Instance {
        let InstanceParts {
            owner,
            owner_label,
            key,
            name,
            seq,
            min_world,
            max_world,
            deps,
            session_dependent,
            body,
        } = parts;
        alive.fetch_add(1, Ordering::Relaxed);
        Instance {
            owner,
            owner_label,
            key,
            name,
            seq,
            min_world,
            max_world: AtomicU64::new(max_world),
            deps,
            session_dependent,
            body,
            last_used: AtomicU64::new(0),
            resident_at: AtomicUsize::new(NOT_RESIDENT),
            owner_at: AtomicUsize::new(NOT_RESIDENT),
            alive: Arc::clone(alive),
        }
    }

    pub(crate) fn max_world(&self) -> u64 {
        self.max_world.load(Ordering::Acquire)
    }

    pub(crate) fn is_valid_in(&self, world: u64) -> bool {
        self.min_world <= world && world <= self.max_world()
    }

    pub(crate) fn is_unbounded(&self) -> bool {
        self.max_world() == u64::MAX
    }

    /// Whether the entry is in the cache's resident list (writer lock only).
    pub(crate) fn is_resident(&self) -> bool {
        self.resident_at.load(Ordering::Relaxed) != NOT_RESIDENT
    }

    /// Whether this is the entry of `(owner, key)`.
    pub(crate) fn is(&self, owner: &Digest, key: &Key) -> bool {
        self.key == *key && self.owner == *owner
    }

    /// Notes a use at `tick` (a store only when it changes, so that a hot
    /// entry's line is not written by every hit).
    pub(crate) fn touch(&self, tick: u64) {
        if self.last_used.load(Ordering::Relaxed) != tick {
            self.last_used.store(tick, Ordering::Relaxed);
        }
    }

    /// Closes the entry so that it is valid up to `last_valid` only. Returns
    /// whether this call closed it (false if it was closed already).
    pub(crate) fn close(&self, last_valid: u64) -> bool {
        self.max_world
            .compare_exchange(u64::MAX, last_valid, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// The fingerprint this instance recorded for definition `name`.
    pub(crate) fn dep_fingerprint(&self, name: &str) -> Option<Digest> {
        self.deps
            .iter()
            .find(|d| d.name == name)
            .map(|d| d.fingerprint)
    }

    /// What a store needs to rebuild the entry away from the cache.
    pub(crate) fn meta(&self) -> EntryMeta {
        let mut deps = self.deps.clone();
        deps.sort();
        deps.dedup();
        EntryMeta {
            owner: self.owner,
            owner_label: self.owner_label.to_string(),
            key: *self.key.digest(),
            name: self.name.clone(),
            deps,
        }
    }

    /// The entry as it goes into an image or a tier (see
    /// [`EntryMeta::to_entry_data`]).
    pub(crate) fn to_entry_data(&self) -> Option<EntryData> {
        self.meta().to_entry_data(&self.body)
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        self.alive.fetch_sub(1, Ordering::Relaxed);
    }
}

/// An entry's identity and metadata, owned: with its [`Body`], all that is
/// needed to write it into an image or a tier.
pub(crate) struct EntryMeta {
    pub(crate) owner: Digest,
    pub(crate) owner_label: String,
    pub(crate) key: Digest,
    pub(crate) name: String,
    /// Sorted, deduplicated.
    pub(crate) deps: Vec<Dep>,
}

impl EntryMeta {
    /// The entry as it goes into an image or a tier: worlds normalised to
    /// `[World::FIRST, World::MAX]` (world ages are process-specific; a loaded
    /// entry starts at the loading process's current world), deps sorted.
    /// `None` if an image-backed payload fails its checksum.
    pub(crate) fn to_entry_data(&self, body: &Body) -> Option<EntryData> {
        let artifacts = match &body.artifacts {
            Artifacts::Owned(list) => list.iter().map(OwnedArtifact::to_artifact).collect(),
            Artifacts::Image { .. } => body.artifacts.image_entry()?.to_data().ok()?.artifacts,
        };
        Some(EntryData {
            owner: self.owner,
            owner_label: self.owner_label.clone(),
            key: self.key,
            name: self.name.clone(),
            min_world: World::FIRST.0,
            max_world: World::MAX.0,
            deps: self.deps.clone(),
            artifacts,
        })
    }
}
