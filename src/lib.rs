//! Kiln facade (being written).
#![deny(unsafe_op_in_unsafe_fn)]

// Minimal re-exports so that the examples build (packaging developer); the
// lead's facade replaces them.
pub use kiln_core::*;
pub use kiln_macros::include_image;
