//! Precompiles every activation kernel for every target arch into
//! `$OUT_DIR/kiln-activations-demo.kimg`, which `src/lib.rs` embeds, and
//! records the toolchain in `KILN_CUDA_BUILD`.

#[path = "src/generate.rs"]
mod generate;

use kiln::build::Precompile;
use kiln::cuda::ShipPlan;

fn main() -> Result<(), kiln::cuda::Error> {
    let mut plan = match std::env::var(generate::TARGETS_VARIABLE) {
        Ok(targets) => ShipPlan::parse(&targets)?,
        // NVRTC 13 and NVRTC 12 (CUDA 12 drivers, Maxwell to Volta), one image.
        Err(_) => ShipPlan::parse(generate::TARGETS)?
            .for_cuda(13)
            .and(ShipPlan::parse(generate::TARGETS_CUDA_12)?.for_cuda(12)),
    };
    if let Ok(oldest) = std::env::var(generate::OLDEST_DRIVER_VARIABLE) {
        let version = kiln::cuda::select::parse_cuda_version(&oldest).ok_or_else(|| {
            kiln::cuda::Error::InvalidDriverList {
                given: oldest.clone(),
                item: oldest.clone(),
            }
        })?;
        plan = plan.with_oldest_driver(version);
    }
    Precompile::new("kiln-activations-demo").run(|session| {
        session.uses_source("src/generate.rs");
        session.uses_env(generate::TARGETS_VARIABLE);
        session.uses_env(generate::OLDEST_DRIVER_VARIABLE);
        Ok(plan.precompile(session, &generate::Kernel::all(), generate::request)?)
    })?;
    println!("{}", plan.record().cargo_directive());
    Ok(())
}
