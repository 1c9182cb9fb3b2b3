//! Precompiles every activation kernel for every target arch into
//! `$OUT_DIR/kiln-activations-demo.kimg`, which `src/lib.rs` embeds, and
//! records the toolchain in `KILN_CUDA_BUILD`.

#[path = "src/generate.rs"]
mod generate;

use kiln::build::Precompile;
use kiln::cuda::ShipPlan;

fn main() -> Result<(), kiln::cuda::Error> {
    let targets =
        std::env::var(generate::TARGETS_VARIABLE).unwrap_or_else(|_| generate::TARGETS.to_owned());
    let mut plan = ShipPlan::parse(&targets)?;
    Precompile::new("kiln-activations-demo").run(|session| {
        session.uses_source("src/generate.rs");
        session.uses_env(generate::TARGETS_VARIABLE);
        Ok(plan.precompile(session, &generate::Kernel::all(), generate::request)?)
    })?;
    println!("{}", plan.record().cargo_directive());
    Ok(())
}
