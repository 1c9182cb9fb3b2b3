//! Owned data written into an image: [`EntryData`], its [`Dep`]s and
//! [`Artifact`]s, and the image-wide [`ImageMeta`].

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use crate::Digest;

/// What an artifact's bytes are.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ArtifactKind {
    /// PTX assembly text.
    Ptx,
    /// A CUBIN for one exact GPU architecture.
    Cubin,
    /// A fat binary bundling several CUBINs and/or PTX.
    Fatbin,
    /// NVVM LTO intermediate representation.
    LtoIr,
    /// A host object file.
    Object,
    /// Plain bytes of any compiler (a serialized automaton, a shader, a
    /// query plan): the kind for a library that needs no other. Built in,
    /// so that asking for it allocates nothing, as every built-in kind.
    Bytes,
    /// A user tag. It must be non-empty and must not spell a built-in kind
    /// (`ptx`, `cubin`, ...), so that [`Display`](fmt::Display) and
    /// [`FromStr`] round-trip.
    Custom(String),
}

impl ArtifactKind {
    /// The built-in kinds with their names, in tag order.
    pub const BUILT_IN: [(ArtifactKind, &'static str); 6] = [
        (ArtifactKind::Ptx, "ptx"),
        (ArtifactKind::Cubin, "cubin"),
        (ArtifactKind::Fatbin, "fatbin"),
        (ArtifactKind::LtoIr, "lto-ir"),
        (ArtifactKind::Object, "object"),
        (ArtifactKind::Bytes, "bytes"),
    ];

    /// The short lowercase name (`ptx`, `cubin`, `fatbin`, `lto-ir`,
    /// `object`, `bytes`) or the custom tag.
    pub fn name(&self) -> &str {
        match self {
            ArtifactKind::Ptx => "ptx",
            ArtifactKind::Cubin => "cubin",
            ArtifactKind::Fatbin => "fatbin",
            ArtifactKind::LtoIr => "lto-ir",
            ArtifactKind::Object => "object",
            ArtifactKind::Bytes => "bytes",
            ArtifactKind::Custom(tag) => tag,
        }
    }

    /// Whether `tag` is the name of a built-in kind.
    pub fn is_built_in_name(tag: &str) -> bool {
        Self::BUILT_IN.iter().any(|(_, name)| *name == tag)
    }
}

impl fmt::Display for ArtifactKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for ArtifactKind {
    type Err = std::convert::Infallible;

    /// Parses a built-in name; anything else is a [`ArtifactKind::Custom`] tag.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(Self::BUILT_IN
            .iter()
            .find(|(_, name)| *name == s)
            .map(|(kind, _)| kind.clone())
            .unwrap_or_else(|| ArtifactKind::Custom(s.to_owned())))
    }
}

/// Owned artifact: compiled bytes, their kind and entry-point names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Artifact {
    /// What the bytes are.
    pub kind: ArtifactKind,
    /// Names of the functions a loader looks up in the artifact.
    pub entry_points: Vec<String>,
    /// The compiled code.
    pub bytes: Vec<u8>,
}

/// A backedge: a definition the entry was built from, and its fingerprint then.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Dep {
    /// Name of the definition.
    pub name: String,
    /// Fingerprint of the definition when the entry was built.
    pub fingerprint: Digest,
}

/// One code-instance entry as written into an image.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EntryData {
    /// Digest of the compiler configuration that owns the entry.
    pub owner: Digest,
    /// Human-readable description of the owner.
    pub owner_label: String,
    /// Identity of the method instance.
    pub key: Digest,
    /// Human-readable name of the entry.
    pub name: String,
    /// First world the entry is valid in.
    pub min_world: u64,
    /// Last world the entry is valid in (`u64::MAX`: unbounded).
    pub max_world: u64,
    /// Definitions the entry was built from, in the order given.
    pub deps: Vec<Dep>,
    /// Compiled code, in the order given.
    pub artifacts: Vec<Artifact>,
}

/// Image-wide metadata.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ImageMeta {
    /// Name of the program that wrote the image.
    pub producer_name: String,
    /// Version of the program that wrote the image.
    pub producer_version: String,
    /// Free-form labels, written sorted by key.
    pub labels: BTreeMap<String, String>,
}

impl ImageMeta {
    /// Metadata with a producer and no labels.
    pub fn new(producer_name: impl Into<String>, producer_version: impl Into<String>) -> Self {
        ImageMeta {
            producer_name: producer_name.into(),
            producer_version: producer_version.into(),
            labels: BTreeMap::new(),
        }
    }

    /// The producer as written into the header: `"name version"`.
    pub fn producer(&self) -> String {
        match (
            self.producer_name.is_empty(),
            self.producer_version.is_empty(),
        ) {
            (_, true) => self.producer_name.clone(),
            (true, false) => self.producer_version.clone(),
            (false, false) => format!("{} {}", self.producer_name, self.producer_version),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kind_names_round_trip() {
        for (kind, name) in ArtifactKind::BUILT_IN {
            assert_eq!(kind.name(), name);
            assert_eq!(name.parse::<ArtifactKind>().unwrap(), kind);
        }
        let custom: ArtifactKind = "spirv".parse().unwrap();
        assert_eq!(custom, ArtifactKind::Custom("spirv".into()));
        assert_eq!(custom.to_string(), "spirv");
    }
}
