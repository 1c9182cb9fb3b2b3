//! Precompiles the library's programs for every target arch into
//! `$OUT_DIR/kiln-nvcc-style.kimg`, which `src/lib.rs` embeds, and records the
//! toolchain (NVRTC, the CUDA runtime headers' digest) in `KILN_CUDA_BUILD`.

// The kernel lists and `Kernel::exists_on` are the library's and its tests'.
#[allow(dead_code)]
#[path = "src/catalogue.rs"]
mod catalogue;

use kiln::build::Precompile;
use kiln::cuda::ShipPlan;

fn main() -> Result<(), kiln::cuda::Error> {
    // PTX for the lowest target (every GPU from Turing) and the newest (its
    // kernel set has the bf16 and fp8 kernels); NVRTC 13 for CUDA 13 drivers,
    // NVRTC 12 for CUDA 12 drivers and Pascal and Volta.
    let mut plan = ShipPlan::parse(catalogue::TARGETS)?
        .for_cuda(13)
        .and(ShipPlan::parse(catalogue::TARGETS_CUDA_12)?.for_cuda(12))
        .with_lowest_and_newest_ptx();
    Precompile::new("kiln-nvcc-style").run(|session| {
        session.uses_source("src/catalogue.rs");
        for program in catalogue::Program::ALL {
            session.uses_source(program.path());
        }
        Ok(plan.precompile(session, &catalogue::Program::ALL, catalogue::request)?)
    })?;
    println!("{}", plan.record().cargo_directive());
    Ok(())
}
