//! Signed images: who produced an image, checked with public keys.
//!
//! Checksums catch corruption, not origin: anyone can write a well-formed
//! image with valid checksums. A signature by an ed25519 key says that the
//! holder of the secret key produced the image; a reader that trusts a set
//! of public keys ([`TrustedKeys`]) accepts an image only if one of them
//! signed it ([`Image::verify_signature`](crate::Image::verify_signature)). Readers need no secret, so a
//! reader cannot forge what it accepts (unlike a shared HMAC key).
//!
//! # What a signature covers
//!
//! Each signature is ed25519 over the 32-byte *signed digest*: BLAKE3 in
//! derive-key mode ([`SIGNED_DIGEST_CONTEXT`]) over
//!
//! 1. the header's first 224 bytes (every field but the header's own
//!    checksum) with the signature trailer length (bytes 100..104) read as
//!    zero, that is the header of the image as it was before it was signed;
//! 2. the index bytes (`index offset .. index offset + index length`).
//!
//! The header holds the index checksum, the region table and the BLAKE3 of
//! the whole body (index, padding and payloads); the index holds every
//! entry record, and each artifact record holds the BLAKE3 of its payload.
//! So a valid signature authenticates every field of the header, every
//! entry (owner, key, name, worlds, deps, artifacts) and, through the
//! digests in the index, every payload: a reader checks a payload's BLAKE3
//! before returning its bytes (on first access at
//! [`Verification::Structural`](crate::Verification::Structural), at open
//! at [`Verification::Full`](crate::Verification::Full), which also checks
//! the body checksum). Checking a signature costs hashing the header and
//! the index, not the payloads, plus one ed25519 verification per
//! signature tried.
//!
//! The signed digest does not cover the trailer itself, so signatures can
//! be added one at a time ([`sign_image`]); they are kept sorted by public
//! key, and ed25519 signatures are deterministic, so signing the same image
//! with the same keys gives the same bytes whatever the order.
//!
//! # Batch signatures
//!
//! One ed25519 verification costs about as much as a whole remote-tier hit
//! on loopback, so a writer that stores many entries at once can sign them
//! together: [`sign_images_batch`] builds a Merkle tree over the images'
//! signed digests and signs its root once; each image carries, in its own
//! trailer, its place in the batch and the sibling digests on the way to
//! the root (its *path*). A reader recomputes the root from the image's
//! signed digest and its path (a few BLAKE3 hashes) and checks the one
//! signature of the root; [`TrustedKeys`] remembers the roots it verified
//! (see *The memo of verified roots* below), so the other members of a
//! batch cost the hashes alone.
//!
//! Hashes, each BLAKE3 in derive-key mode, every context distinct from the
//! others and from [`SIGNED_DIGEST_CONTEXT`] (a leaf, an inner node, a
//! root message and a direct signed digest can never stand for one
//! another):
//!
//! - leaf `i` = derive-key([`BATCH_LEAF_CONTEXT`], signed digest of image `i`);
//! - node = derive-key([`BATCH_NODE_CONTEXT`], left ‖ right);
//! - a level of `w` nodes gives the level above it `ceil(w / 2)` nodes:
//!   node `j` above is the node of `2j` and `2j + 1`, and when `w` is odd
//!   its last node is **promoted unchanged** (no hash); the root is the one
//!   node left after `depth = ceil(log2(size))` levels;
//! - each record signs the *root message* =
//!   derive-key([`BATCH_ROOT_CONTEXT`], root ‖ size as u32 LE), so the
//!   batch size is signed too.
//!
//! A member's path holds one 32-byte digest per level, leaf level first:
//! its sibling at that level, or 32 zero bytes where the node on its way
//! is promoted (then any other value refuses the trailer, so each member
//! has exactly one valid trailer per signer, unless the same image appears
//! twice in one batch). A batch of one image is a
//! direct signature ([`sign_image`]'s bytes).
//!
//! # The memo of verified roots
//!
//! [`TrustedKeys`] (and every clone of it: one memo per process when the
//! set is cloned from one place) remembers the pairs (root message, public
//! key) whose batch signature verified, at most [`MEMO_CAPACITY`] of them
//! (when full it is emptied, so memory stays bounded whatever the
//! input; a root forgotten is verified again). A batch member whose
//! recomputed root message and trusted signer are in the memo is accepted
//! without an ed25519 verification. This is sound because what a verified
//! signature proves depends only on the message and the key: "the holder
//! of this key signed this root message". The root message is a hash of
//! the root and the batch size, and the root a hash of every leaf, so the
//! pair names exactly the set of signed digests the key's holder vouched
//! for; a member whose own signed digest and path lead to that root
//! message is one of them, whatever signature bytes its own trailer
//! carries (they are not needed to prove what is already proven). Only
//! successful verifications are remembered, only batch roots (a direct
//! signature signs one image, which nothing else could share), and whether
//! a signer is trusted is asked of the set at every check, never of the
//! memo: a clone that does not trust a key does not accept what the memo
//! says that key signed. [`TrustedKeys::verifications`] counts the ed25519
//! verifications performed through a set and its clones.
//!
//! # The signature trailer
//!
//! After the body, when header bytes 100..104 (little-endian) are not zero:
//!
//! | offset | size | field |
//! | --: | --: | --- |
//! | 0 | 8 | magic `KILNSIG\0` |
//! | 8 | 4 | signature count `n`, 1 ≤ n ≤ [`MAX_SIGNATURES`] (u32 LE) |
//! | 12 | 4 | kind (u32 LE): 0 = direct ([`KIND_DIRECT`]), 1 = batch ([`KIND_BATCH`]) |
//!
//! A direct trailer (kind 0) continues with the records:
//!
//! | offset | size | field |
//! | --: | --: | --- |
//! | 16 + 96 i | 32 | public key of signature `i` (strictly ascending) |
//! | 48 + 96 i | 64 | ed25519 signature `i` of the signed digest |
//!
//! A batch trailer (kind 1), with `depth = ceil(log2(size))`:
//!
//! | offset | size | field |
//! | --: | --: | --- |
//! | 16 | 4 | leaf index (u32 LE), less than the size |
//! | 20 | 4 | batch size (u32 LE), 2 ≤ size ≤ [`MAX_BATCH`] |
//! | 24 + 32 l | 32 | the path's digest at level `l`, for `l` < depth |
//! | 24 + 32 depth + 96 i | 32 | public key of signature `i` (strictly ascending) |
//! | 56 + 32 depth + 96 i | 64 | ed25519 signature `i` of the root message |
//!
//! The header's length field must be `16 + 96 n` (direct) or
//! `24 + 32 depth + 96 n` with `1 ≤ depth ≤ 16` (batch: the two forms
//! never meet, being 16 and 24 modulo 32), and at most
//! [`MAX_TRAILER_LEN`]; it is checked with the rest of the header, before
//! any byte of the trailer is read, and the file must end right after the
//! trailer. Reading the trailer then checks that its length is exactly the
//! one its kind, count and size give. A trailer that breaks any rule
//! refuses the image ([`ReadError::SignatureTrailer`](crate::ReadError::SignatureTrailer)), whether or not
//! the reader checks signatures.
//!
//! # Modules
//!
//! [`keys`] (public keys, secret keys and the set of trusted keys with its
//! memo), the trailer's codec (`trailer`), batch trees (`batch`), signing
//! (`sign`) and checking signatures (`verification`). Reading and writing
//! key *files* is not this crate's: the crate that owns the trust policy
//! does it (`kiln_core::trust`).

pub mod keys;

mod batch;
mod sign;
mod trailer;
mod verification;

#[cfg(test)]
mod tests;

pub use batch::{BATCH_LEAF_CONTEXT, BATCH_NODE_CONTEXT, BATCH_ROOT_CONTEXT, sign_images_batch};
pub use keys::{MEMO_CAPACITY, PublicKey, SigningKey, TrustedKeys};
pub use sign::{sign_image, strip_signatures};
pub use trailer::{
    BATCH_FIELDS_LEN, BatchPosition, KIND_BATCH, KIND_DIRECT, MAX_BATCH, MAX_BATCH_DEPTH,
    MAX_DIRECT_TRAILER_LEN, MAX_SIGNATURES, MAX_TRAILER_LEN, PATH_DIGEST_LEN, RECORD_LEN,
    TRAILER_HEAD_LEN, TRAILER_MAGIC, batch_depth,
};
pub use verification::{SIGNED_DIGEST_CONTEXT, SignatureCheck};

pub(crate) use trailer::{BatchPath, Record, Trailer, check_trailer_len, parse_trailer};
