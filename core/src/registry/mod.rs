//! Where images come from: those embedded by `include_image!` and registered
//! with [`inventory`], and `*.kimg` files in the directories of
//! `KILN_IMAGE_PATH`; and the extra tiers that other crates offer the
//! global cache ([`TierFactory`], also registered with [`inventory`]).
//! (Other crates' switches are declared with
//! [`settings::Switch`](crate::settings::Switch).)
//!
//! Registration happens before `main` and does nothing but link a `&'static`
//! [`EmbeddedImage`] into a list: no I/O, no allocation, nothing that can
//! panic. Everything else (opening, verifying, merging) waits for the first
//! use of [`crate::global()`].
//!
//! A registration lives in the crate that invoked `include_image!`. The
//! linker keeps it only if that crate is linked into the program, which is
//! the case as soon as the program uses any of its items; a crate that is a
//! dependency and nothing else may need `use that_crate as _;`.
//!
//! One module per subject: `images` (embedded images, `KILN_IMAGE_PATH`'s
//! files, [`ImageSource`]) and `tiers` ([`TierFactory`], [`TierSetup`]).
//! The switches other crates declare are [`crate::settings`]'s.

mod images;
mod tiers;

#[doc(hidden)]
pub use images::macro_support;
pub use images::{EmbeddedImage, IMAGE_EXTENSION, ImageSource, embedded_images, image_files};
pub(crate) use images::{newest_registration, registered_since};
pub use tiers::{TierFactory, TierSetup, tier_factories};
