//! Whose code the cache accepts, and the key it signs with: the policy set
//! by `KILN_TRUSTED_KEYS`, `KILN_SIGNING_KEY` and `KILN_REMOTE_WRITE`.
//!
//! Each switch's default and meaning are in its declaration
//! (`settings/switches.rs`), from which docs/switches.md's table and `kiln
//! settings` are generated.
//!
//! The policy is read once per process, with the other settings
//! ([`Settings::process`](crate::settings::Settings::process)), and
//! handed to every tier: the global cache's images, the disk tier and the
//! remote tier share one [`TrustedKeys`](kiln_image::TrustedKeys), and with it one memo of verified
//! batch roots. Whether an image or an entry is admitted, and why, is
//! decided in one place: [`admit`], by where it comes from ([`Origin`]).
//!
//! Checking fails closed: a `KILN_TRUSTED_KEYS` file that cannot be used
//! (missing, unreadable, a line that is not a key, writable by another
//! user: [`read_trusted_keys_file`]) gives one warning and trusts the keys
//! of the other files, never none at all: with no usable file, or a
//! variable set but empty, nothing signed is accepted, and nothing
//! unsigned from elsewhere either. A `KILN_SIGNING_KEY` that cannot be read gives one warning and
//! the process signs nothing (so it writes nothing to the remote tier).
//!
//! What each tier does with the policy:
//!
//! - **a precompile block** (`crate::build`): its image is embedded, and an
//!   embedded image is trusted as the program itself, so the block takes
//!   from its disk and remote tiers only what it can vouch for, keys or
//!   not: this user's own compiles in a private directory, and what a
//!   trusted key signed (a signed build also trusts its own key); the rest
//!   is compiled. With `KILN_BUILD_UNVERIFIED=1` it takes the rest too and
//!   records those entries in the image ([`Provenance::UNVERIFIED_LABEL`]):
//!   a process with trusted keys then refuses them at init
//!   ([`Cache::merge_image_except`](crate::Cache::merge_image_except)), as
//!   it would from the tier.
//! - **images** (`KILN_IMAGE_PATH`): with trusted keys, an image file is
//!   merged only if a trusted key signed it; otherwise it is skipped with
//!   one warning and reported in the [`InitReport`](crate::InitReport)
//!   ([`InitReport::untrusted`](crate::InitReport::untrusted)). Embedded
//!   images are part of the program ([`Origin::Program`]): an unsigned one
//!   is merged as before; one that carries signatures is merged only if
//!   one of them is a trusted key's.
//! - **remote tier** (`kiln-redis`): with trusted keys, an entry is used
//!   only if a trusted key signed it (its one-entry image, whose index
//!   names the `(owner, key)`, so a signed entry cannot be replayed under
//!   another key; entries a writer stored together share one batch
//!   signature, verified once per process: see [`kiln_image::signature`]);
//!   otherwise it is refused (counted in
//!   [`Stats::tier_untrusted`](crate::Stats::tier_untrusted), one warning
//!   per process) and compiled. Without trusted keys a well-formed value
//!   is served as it is, whatever code it holds (GPU code the driver
//!   JIT-compiled from a process on another machine included: `kiln-cuda`
//!   stores those as entries like any other). It writes only entries it can sign
//!   (`KILN_SIGNING_KEY`), or with `KILN_REMOTE_WRITE=1` and no trusted
//!   keys, unsigned ones: a reader is read-only by default.
//! - **disk tier**: every entry is stored with its [`Provenance`]: compiled
//!   by this user's processes, received from another tier with its
//!   signatures kept (a segment of its own, byte for byte), or received
//!   unsigned (segments of their own, which compaction never merges with
//!   compiled ones). With trusted keys it serves only entries this user's
//!   processes compiled, in a private directory ([`Origin::OwnCompile`]),
//!   and entries a trusted key signed; a remote entry that a process
//!   without trusted keys received unsigned stays refused however it is
//!   copied, compacted or baked (one warning per process when refused).

mod admission;
mod key_files;
mod policy;
mod provenance;

use std::collections::HashSet;
use std::sync::{Mutex, PoisonError};

pub use admission::{Admission, Origin, admit, is_refusal};
pub use key_files::{
    read_signing_key, read_trusted_keys, read_trusted_keys_file, sign_if_configured,
    signing_key_from_lookup, signing_key_or_warn, signing_key_path, trusted_keys_from_lookup,
    write_signing_key,
};
pub use policy::TrustPolicy;
pub use provenance::{Provenance, unverified_entries, unverified_label};

/// `KILN_TRUSTED_KEYS`: files of trusted public keys, separated like `PATH`.
pub const TRUSTED_KEYS: &str = "KILN_TRUSTED_KEYS";
/// `KILN_SIGNING_KEY`: the path of the secret key file to sign with.
pub const SIGNING_KEY: &str = "KILN_SIGNING_KEY";
/// `KILN_REMOTE_WRITE`: store unsigned entries in the remote tier (only
/// without trusted keys).
pub const REMOTE_WRITE: &str = "KILN_REMOTE_WRITE";

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
