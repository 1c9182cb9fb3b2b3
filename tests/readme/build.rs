//! The build scripts of the README's library and of the library author's
//! guide's CUDA library (`docs/library-author.md`), as written there, in one:
//! it writes `$OUT_DIR/my-cuda-kernels.kimg` (with the toolchain it used in
//! `KILN_CUDA_BUILD`) and `$OUT_DIR/my-kernels.kimg`, which their
//! examples embed.

#[path = "src/catalogue.rs"]
mod catalogue;
#[path = "src/cuda_catalogue.rs"]
mod cuda_catalogue;

fn main() -> Result<(), kiln::cuda::Error> {
    cuda_library()?;
    Ok(toy_library()?)
}

/// The CUDA library's build script. Without NVRTC it ships nothing and
/// records no compiler (the library then compiles at run time).
fn cuda_library() -> Result<(), kiln::cuda::Error> {
    // A CUBIN per target (in parallel, on cargo's NUM_JOBS), PTX for the lowest.
    let mut plan = kiln::cuda::ShipPlan::parse("sm_75,sm_80,sm_86,sm_89,sm_90,sm_100,sm_120")?;
    kiln::build::Precompile::new("my-cuda-kernels").run(|session| {
        session.uses_source("src/cuda_catalogue.rs");
        Ok(plan.precompile(session, &cuda_catalogue::common(), cuda_catalogue::request)?)
    })?;
    // The NVRTC release and header digests used: the library reads them back.
    println!("{}", plan.record().cargo_directive());
    Ok(())
}

/// The other compiler's library's build script.
fn toy_library() -> Result<(), kiln::Error> {
    kiln::build::Precompile::new("my-kernels").run(|session| {
        session.uses_source("src/catalogue.rs");
        // The target cargo builds for: `cfg!(target_arch)` and
        // `std::env::consts::ARCH` would be the host's in a build script.
        let arch = session
            .target()
            .map_or(std::env::consts::ARCH, |t| t.arch())
            .to_owned();
        for spec in catalogue::common_specializations() {
            session.specialize(&spec.label(), |cache| {
                catalogue::compile(cache, &arch, &spec)
            });
        }
        Ok(())
    })?;
    Ok(())
}
