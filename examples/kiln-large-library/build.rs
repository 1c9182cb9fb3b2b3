//! Precompiles the library's programs for every target arch into
//! `$OUT_DIR/kiln-large-library.kimg`, which `src/lib.rs` embeds, and records
//! the toolchain (NVRTC, the CUDA runtime headers' digest) in
//! `KILN_CUDA_BUILD`. With the shipped image (`kiln-shipped/`) current, this
//! compiles nothing: every entry is taken from it.

// The kernel lists are the library's and its tests'.
#[allow(dead_code)]
#[path = "src/generate.rs"]
mod generate;

use kiln::build::Precompile;
use kiln::cuda::ShipPlan;

fn main() -> Result<(), kiln::cuda::Error> {
    let mut plan = ShipPlan::parse(generate::TARGETS)?;
    Precompile::new("kiln-large-library").run(|session| {
        session.uses_source("src/generate.rs");
        session.uses_source("src/kiln_large.cuh");
        Ok(plan.precompile(session, &generate::Program::ALL, generate::request)?)
    })?;
    println!("{}", plan.record().cargo_directive());
    Ok(())
}
