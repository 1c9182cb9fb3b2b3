//! Precompiles the library's common specializations for every target arch into
//! `$OUT_DIR/kiln-kernels-demo.kimg`, which `src/lib.rs` embeds, and records the
//! toolchain it used in `KILN_CUDA_BUILD`, which `src/lib.rs` reads back.

#[path = "src/catalogue.rs"]
mod catalogue;

use kiln::build::Precompile;
use kiln::cuda::ShipPlan;

fn main() -> Result<(), kiln::cuda::Error> {
    let targets = std::env::var(catalogue::TARGETS_VARIABLE).ok();
    let oldest = std::env::var(catalogue::OLDEST_DRIVER_VARIABLE).ok();
    // NVRTC 13 and NVRTC 12 (CUDA 12 drivers, Maxwell to Volta), one image.
    let mut plan: ShipPlan = catalogue::plan(targets.as_deref(), oldest.as_deref())?;
    Precompile::new("kiln-kernels-demo").run(|session| {
        session.uses_source("src/catalogue.rs");
        session.uses_env(catalogue::TARGETS_VARIABLE);
        session.uses_env(catalogue::OLDEST_DRIVER_VARIABLE);
        // Every (kernel, toolchain, target) on NUM_JOBS threads; declares NVRTC's
        // files and the CCCL folders, so a new NVRTC or new headers precompile
        // again.
        Ok(plan.precompile(session, &catalogue::common(), catalogue::request)?)
    })?;
    // Printed even when no NVRTC was found (then the library ships nothing and
    // compiles at run time): the library reads it with env!.
    println!("{}", plan.record().cargo_directive());
    Ok(())
}
