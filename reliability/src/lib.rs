//! Kiln's reliability suites and their shared parts.
//!
//! The suites live in `tests/`: the staleness matrix (every input that
//! changes code changes the lookup, through compile, image, merge and
//! lookup), the corruption matrix (corrupted images and disk-cache segments
//! never panic a reader and never serve garbage), the crash suite (writers
//! killed with SIGKILL leave only whole images and lose no committed entry),
//! multi-process load, and the soak test (`kiln-soak`: a service's load on
//! the global cache under small memory and disk caps, every answer checked). Each prints its figures as a Markdown table;
//! `RELIABILITY.md` at the repository root quotes them with the command
//! that reproduces each.
//!
//! This library holds what the suites and their helper process
//! (`kiln-reliability-child`) share: a deterministic [`Rng`] (re-exported
//! from `kiln-test-support`), reference images whose every payload is known
//! ([`Fixture`]), the corruption [`mutation`] families, the [`audit`] oracle
//! that compares whatever a reader returns with the original, and the
//! staleness [`kernels`].
//!
//! ```
//! use kiln_reliability::audit::{Access, audit};
//! use kiln_reliability::mutation::{Counts, cases};
//! use kiln_reliability::{Fixture, fixture};
//!
//! # fn main() -> Result<(), kiln_reliability::Error> {
//! let fixture = Fixture::new(1, 6, 100)?;
//! let owners = fixture::owners()?;
//! let counts = Counts { truncations: 4, bit_flips: 4, multi_flips: 2, swaps: 4 };
//! for case in cases(&fixture.bytes, 1, counts).iter().take(20) {
//!     let tally = audit(&fixture, &owners, case, Access::Bytes);
//!     assert_eq!((tally.panics, tally.garbage), (0, 0), "{:?}", tally.failures);
//! }
//! # Ok(()) }
//! ```

pub mod audit;
mod error;
pub mod fixture;
pub mod kernels;
pub mod mutation;
pub mod soak;
pub mod table;

pub use error::Error;
pub use fixture::Fixture;
pub use kiln_test_support::Rng;
pub use table::Table;
