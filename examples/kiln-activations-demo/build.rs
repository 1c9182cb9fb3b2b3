//! Precompiles every activation kernel into
//! `$OUT_DIR/kiln-activations-demo.kimg`, which `src/lib.rs` embeds.

#[path = "src/generate.rs"]
mod generate;

use kiln::build::Precompile;
use kiln::cuda::{Arch, Compiler};

/// Same variable and default as `kiln-kernels-demo`: one arch for the demo.
const ARCH_VARIABLE: &str = "KILN_DEMO_ARCH";

fn main() -> Result<(), kiln::cuda::Error> {
    let arch_name = std::env::var(ARCH_VARIABLE).unwrap_or_else(|_| "sm_90".to_owned());
    println!("cargo:rustc-env=KILN_ACTIVATIONS_DEMO_ARCH={arch_name}");
    Precompile::new("kiln-activations-demo").run(|session| {
        session.uses_source("src/generate.rs");
        session.uses_env(ARCH_VARIABLE);
        // Where NVRTC is looked for first.
        session.uses_env("KILN_NVRTC");
        let arch: Arch = arch_name.parse()?;
        let compiler = Compiler::new()?;
        // A new NVRTC changes the owner: precompile again then.
        let nvrtc = &compiler.nvrtc()?.location().path;
        if nvrtc.is_absolute() {
            session.uses_source(nvrtc);
        }
        for kernel in generate::Kernel::all() {
            session.specialize(&kernel.name(), |cache| {
                generate::fetch(&compiler, cache, &kernel, &kernel.request(arch)).map(|_| ())
            });
        }
        Ok(())
    })?;
    Ok(())
}
