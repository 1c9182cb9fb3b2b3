//! A whole library in hand: every kernel of the real-size library
//! (`kiln-large-library`: 608 kernels in 11 programs, embedded with
//! `include_image!` for 7 archs plus PTX) asked for through its
//! `KernelLibrary` from `kiln::global()`, for [`REAL_ARCH`], as an application
//! asks for each kernel it launches. Measured in the children of the embedded
//! modes, after their own measurement:
//!
//! - **program first calls**: the first `get_kernel` of each program (its
//!   requests, owners and keys derived from the build record, its entry found);
//! - **kernel first calls**: the first `get_kernel` of every other kernel,
//!   once its program's entry has been found;
//! - **repeated calls**: [`ROUNDS`] more rounds of every kernel, the mean per
//!   round;
//! - **baseline, derived again**: every kernel asked once more, each of a
//!   library that remembers nothing yet (a fresh `KernelLibrary` on the same
//!   record per kernel, its record parsed before the clock starts): the
//!   request, owner and key derived and the entry's entry points read for
//!   every kernel, as each first call did before the program memo.
//!
//! Every call is checked to serve the kernel's program from the exact-arch
//! CUBIN of the embedded image, with the kernel an entry point of it.

use std::hint::black_box;
use std::time::Instant;

use kiln::ArtifactKind;
use kiln::cache::{Cache, Source};
use kiln::cuda::select::Selection;
use kiln::cuda::{Device, KernelLibrary, Served};
use kiln_large_library::{LIBRARY, Program, kernels};
use serde::{Deserialize, Serialize};

use crate::child::nanos;
use crate::error::BenchError;
use crate::kernel_set::REAL_ARCH;

/// Rounds of repeated calls (every kernel once a round).
pub const ROUNDS: u32 = 200;

/// What one child measured of the real-size library.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct LargeLibrary {
    /// Programs (the library's specializations).
    pub programs: usize,
    /// Kernels.
    pub kernels: usize,
    /// The first `get_kernel` of each program, together, ns.
    pub program_first_ns: u64,
    /// The first `get_kernel` of every other kernel, together, ns.
    pub kernel_first_ns: u64,
    /// One round of repeated calls (every kernel), the mean of [`ROUNDS`], ns.
    pub repeat_ns: u64,
    /// The baseline: every kernel from a library that remembers nothing, ns.
    pub derived_ns: u64,
}

impl LargeLibrary {
    /// Every kernel's first call: the whole library in hand, ns.
    pub fn all_first_ns(&self) -> u64 {
        self.program_first_ns + self.kernel_first_ns
    }
}

/// Measures the library in `cache` (the global cache, its images merged).
///
/// # Errors
/// When a kernel is not served, or not as expected.
pub fn measure(cache: &'static Cache) -> Result<LargeLibrary, BenchError> {
    let device = Device::new(REAL_ARCH.parse().map_err(kiln::cuda::Error::from)?);
    let all = kernels();
    // Each program's first kernel, then the others, in the library's order.
    let mut firsts: Vec<&(Program, String)> = Vec::new();
    let mut others: Vec<&(Program, String)> = Vec::new();
    for pair in all {
        if firsts.iter().any(|(p, _)| *p == pair.0) {
            others.push(pair);
        } else {
            firsts.push(pair);
        }
    }
    let call = |library: &KernelLibrary<Program>, (program, kernel): &(Program, String)| {
        let served = library.get_kernel(cache, &device, program, kernel)?;
        Ok::<_, BenchError>(black_box(served.hit().artifact(&ArtifactKind::Cubin)).is_some())
    };

    let clock = Instant::now();
    for pair in &firsts {
        call(&LIBRARY, pair)?;
    }
    let program_first = clock.elapsed();
    let clock = Instant::now();
    for pair in &others {
        call(&LIBRARY, pair)?;
    }
    let kernel_first = clock.elapsed();

    let clock = Instant::now();
    for _ in 0..ROUNDS {
        for pair in all {
            call(&LIBRARY, pair)?;
        }
    }
    let repeat = clock.elapsed() / ROUNDS;

    let record = LIBRARY.record()?;
    let fresh: Vec<KernelLibrary<Program>> = all
        .iter()
        .map(|_| KernelLibrary::with_record(record.clone(), kiln_large_library::request))
        .collect();
    for library in &fresh {
        library.record()?;
    }
    let clock = Instant::now();
    for (library, pair) in fresh.iter().zip(all) {
        call(library, pair)?;
    }
    let derived = clock.elapsed();

    for (library, pair) in fresh.iter().zip(all) {
        check(&LIBRARY.get_kernel(cache, &device, &pair.0, &pair.1)?, pair)?;
        check(&library.get_kernel(cache, &device, &pair.0, &pair.1)?, pair)?;
    }
    Ok(LargeLibrary {
        programs: firsts.len(),
        kernels: all.len(),
        program_first_ns: nanos(program_first),
        kernel_first_ns: nanos(kernel_first),
        repeat_ns: nanos(repeat),
        derived_ns: nanos(derived),
    })
}

/// That `served` is the program's exact-arch CUBIN from the embedded image,
/// with the kernel an entry point of it.
fn check(served: &Served<'_>, (program, kernel): &(Program, String)) -> Result<(), BenchError> {
    let hit = served.hit();
    let listed = hit
        .artifacts()
        .iter()
        .any(|a| a.kind == ArtifactKind::Cubin && a.entry_points.contains(&kernel.as_str()));
    let expected = served.selection() == Selection::ExactCubin
        && served.target().to_string() == REAL_ARCH
        && hit.source() == Source::Image
        && hit.name() == program.name()
        && listed;
    if expected {
        Ok(())
    } else {
        Err(BenchError::Library {
            mode: "kiln-large-library".to_owned(),
            kernel: format!("{kernel} of {program:?}"),
            served: format!("{served:?}"),
        })
    }
}
