//! Precompiles the library's common specializations into
//! `$OUT_DIR/kiln-kernels-demo.kimg`, which `src/lib.rs` embeds.

#[path = "src/catalogue.rs"]
mod catalogue;

use kiln::build::Precompile;
use kiln::cuda::{Arch, Compiler};

fn main() -> Result<(), kiln::cuda::Error> {
    let arch_name = std::env::var(catalogue::ARCH_VARIABLE)
        .unwrap_or_else(|_| catalogue::DEFAULT_ARCH.to_owned());
    // The library reads back which arch its image holds.
    println!("cargo:rustc-env=KILN_KERNELS_DEMO_ARCH={arch_name}");
    Precompile::new("kiln-kernels-demo").run(|session| {
        session.uses_source("src/catalogue.rs");
        session.uses_env(catalogue::ARCH_VARIABLE);
        // Where NVRTC and the CUB headers are looked for first.
        session.uses_env("KILN_NVRTC");
        session.uses_env("KILN_CCCL_INCLUDE");
        let arch: Arch = arch_name.parse()?;
        let compiler = Compiler::new()?;
        // A new NVRTC or new CUB headers change the owner or the keys:
        // precompile again then.
        let nvrtc = &compiler.nvrtc()?.location().path;
        if nvrtc.is_absolute() {
            session.uses_source(nvrtc);
        }
        session.uses_source(kiln_kernel_set::cccl_include_dir()?.path());
        for spec in catalogue::common() {
            session.specialize(&spec.name(), |cache| {
                let request = spec.request(arch)?;
                catalogue::fetch(&compiler, cache, &spec, &request).map(|_| ())
            });
        }
        Ok(())
    })?;
    Ok(())
}
