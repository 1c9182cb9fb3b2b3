//! Owners: the compiler configuration an entry belongs to.
//!
//! Two owners never share entries: a lookup always names the owner, and an
//! image entry of an owner this process does not accept is never served.

use std::fmt;

use crate::key::update_prefixed;
use crate::{Digest, Error};

/// BLAKE3 key-derivation context of [`Owner::digest`]. Part of the encoding.
pub const OWNER_CONTEXT: &str = "kiln 2026-11 owner v1";

/// A compiler configuration: compiler id, its exact version, the exact target
/// and the canonical options. Any compiler: a regex-to-DFA compiler for a
/// CPU (`regex-dfa`, `0.4.1`, `x86_64`), a shader compiler for a shader
/// model, NVRTC for a GPU arch (`sm_90a`, the exact one). Whatever changes
/// the code a compiler generates and is not in the key belongs here.
///
/// # Canonical options
///
/// Options are kept **in the order given**, each trimmed of surrounding
/// whitespace, empty ones dropped. They are neither sorted nor deduplicated:
/// for real compilers order matters (`-DX=1 -DX=2` differs from
/// `-DX=2 -DX=1`, include paths are searched in order), so reordering could
/// make two configurations that generate different code share entries.
/// Spellings that a particular compiler treats as equal (`-arch=sm_90a` and
/// `--gpu-architecture sm_90a`) are the backend's to unify before building the
/// owner.
///
/// ```
/// use kiln_core::Owner;
///
/// let owner = Owner::new("regex-dfa", "0.4.1", "x86_64", [" --dense ", "", "--unicode"]).unwrap();
/// assert_eq!(owner.options(), ["--dense", "--unicode"]);
/// assert_eq!(owner.label(), "regex-dfa-0.4.1/x86_64");
/// let gpu = Owner::new("nvrtc", "13.0", "sm_90a", ["-O3"]).unwrap();
/// assert_eq!(gpu.label(), "nvrtc-13.0/sm_90a");
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct Owner {
    compiler: String,
    version: String,
    target: String,
    options: Vec<String>,
    digest: Digest,
    label: String,
}

impl Owner {
    /// An owner for `compiler` at `version`, generating code for `target`
    /// with `options` (canonicalised as described on [`Owner`]).
    ///
    /// # Errors
    /// [`Error::OwnerField`] if `compiler`, `version` or `target` is empty
    /// (after trimming): an owner must identify the compiler exactly.
    pub fn new<O>(
        compiler: impl Into<String>,
        version: impl Into<String>,
        target: impl Into<String>,
        options: O,
    ) -> Result<Owner, Error>
    where
        O: IntoIterator,
        O::Item: AsRef<str>,
    {
        let compiler = required("compiler", compiler.into())?;
        let version = required("version", version.into())?;
        let target = required("target", target.into())?;
        let options: Vec<String> = options
            .into_iter()
            .map(|o| o.as_ref().trim().to_owned())
            .filter(|o| !o.is_empty())
            .collect();
        let label = format!("{compiler}-{version}/{target}");
        let mut owner = Owner {
            compiler,
            version,
            target,
            options,
            digest: Digest([0; 32]),
            label,
        };
        owner.digest = owner.compute_digest();
        Ok(owner)
    }

    /// The compiler id (e.g. `nvrtc`).
    pub fn compiler(&self) -> &str {
        &self.compiler
    }

    /// The compiler's exact version.
    pub fn version(&self) -> &str {
        &self.version
    }

    /// The exact target (e.g. `sm_90a`).
    pub fn target(&self) -> &str {
        &self.target
    }

    /// The canonical options.
    pub fn options(&self) -> &[String] {
        &self.options
    }

    /// The owner's identity: BLAKE3 over every field (see [`OWNER_CONTEXT`]).
    pub fn digest(&self) -> Digest {
        self.digest
    }

    /// A short human label, `compiler-version/target` (e.g.
    /// `nvrtc-13.0/sm_90a`). Not an identity: two owners that differ only in
    /// options share a label.
    pub fn label(&self) -> &str {
        &self.label
    }

    fn compute_digest(&self) -> Digest {
        // Exhaustive on purpose: a new field fails to compile here until it is
        // hashed (or explicitly said to be derived).
        let Owner {
            compiler,
            version,
            target,
            options,
            digest: _, // derived from the fields above
            label: _,  // derived from the fields above
        } = self;
        let mut hasher = blake3::Hasher::new_derive_key(OWNER_CONTEXT);
        update_prefixed(&mut hasher, compiler.as_bytes());
        update_prefixed(&mut hasher, version.as_bytes());
        update_prefixed(&mut hasher, target.as_bytes());
        hasher.update(&(options.len() as u64).to_le_bytes());
        for option in options {
            update_prefixed(&mut hasher, option.as_bytes());
        }
        Digest(*hasher.finalize().as_bytes())
    }
}

fn required(field: &'static str, value: String) -> Result<String, Error> {
    let trimmed = value.trim();
    if trimmed.is_empty() {
        return Err(Error::OwnerField { field });
    }
    Ok(if trimmed.len() == value.len() {
        value
    } else {
        trimmed.to_owned()
    })
}

impl fmt::Debug for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Owner")
            .field("compiler", &self.compiler)
            .field("version", &self.version)
            .field("target", &self.target)
            .field("options", &self.options)
            .field("digest", &self.digest.to_hex())
            .finish()
    }
}

impl fmt::Display for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.label)?;
        for option in &self.options {
            write!(f, " {option}")?;
        }
        Ok(())
    }
}
