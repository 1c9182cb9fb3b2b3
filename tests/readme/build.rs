//! The build script of the README's library, as written there: it writes
//! `$OUT_DIR/my-kernels.kimg`, which the README's examples embed.

#[path = "src/catalogue.rs"]
mod catalogue;

fn main() -> Result<(), kiln::Error> {
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
