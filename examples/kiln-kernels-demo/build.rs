//! Precompiles the library's common specializations for every target arch into
//! `$OUT_DIR/kiln-kernels-demo.kimg`, which `src/lib.rs` embeds, and records the
//! toolchain it used in `KILN_CUDA_BUILD`, which `src/lib.rs` reads back.

#[path = "src/catalogue.rs"]
mod catalogue;

use kiln::build::Precompile;
use kiln::cuda::ShipPlan;

fn main() -> Result<(), kiln::cuda::Error> {
    let targets = std::env::var(catalogue::TARGETS_VARIABLE)
        .unwrap_or_else(|_| catalogue::TARGETS.to_owned());
    let mut plan = ShipPlan::parse(&targets)?;
    Precompile::new("kiln-kernels-demo").run(|session| {
        session.uses_source("src/catalogue.rs");
        session.uses_env(catalogue::TARGETS_VARIABLE);
        // Every (kernel, target) on NUM_JOBS threads; declares NVRTC's file and
        // the CCCL folder, so a new NVRTC or new headers precompile again.
        Ok(plan.precompile(session, &catalogue::common(), catalogue::request)?)
    })?;
    // Printed even when no NVRTC was found (then the library ships nothing and
    // compiles at run time): the library reads it with env!.
    println!("{}", plan.record().cargo_directive());
    Ok(())
}
