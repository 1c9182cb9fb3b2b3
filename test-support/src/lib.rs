//! Helpers shared by Kiln's integration tests, benches and reliability
//! suites, so that each exists once.
//!
//! - [`rng`]: [`Rng`], a tiny deterministic generator (SplitMix64), so a
//!   seed draws the same cases on every machine and with every dependency
//!   version.
//! - [`aligned`]: [`leak_aligned`], bytes copied into leaked 64-byte-aligned
//!   memory, standing in for an image embedded in a binary.
//! - [`child`]: re-running the current test binary as a child process that
//!   runs its ignored test `child` in a role named by an environment
//!   variable, and collecting what it printed.
//! - [`ci`]: tests that need something this machine may lack skip with a
//!   message locally and fail in CI ([`ci::required`]).
//! - [`errors`]: [`errors::assert_cause_not_repeated`], that an error's
//!   message does not repeat the cause it returns from `source()`.
//! - [`redis_server`]: a private `redis-server` on a free loopback port.
//! - [`library`]: a kernel library copied into a crate of its own, for
//!   builds with `cargo` as its author or a downstream machine runs them.
//!
//! The crate uses only `std` and depends on no Kiln crate, so `kiln-image`
//! and `kiln-core` can take it as a dev-dependency without building a
//! second copy of themselves.
//!
//! ```
//! use kiln_test_support::{Rng, leak_aligned};
//!
//! let mut rng = Rng::new(7);
//! let bytes = rng.bytes(100);
//! assert_eq!(Rng::new(7).bytes(100), bytes, "same seed, same bytes");
//! assert!(rng.below(10) < 10);
//!
//! let embedded: &'static [u8] = leak_aligned(&bytes);
//! assert_eq!(embedded, &bytes[..]);
//! assert_eq!(embedded.as_ptr() as usize % 64, 0);
//! ```
#![forbid(unsafe_code)]

pub mod aligned;
pub mod child;
pub mod ci;
pub mod errors;
pub mod library;
pub mod redis_server;
pub mod rng;

pub use aligned::leak_aligned;
pub use rng::Rng;
