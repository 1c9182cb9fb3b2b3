//! Writes the small synthetic image that `src/kernel_set.rs` embeds with
//! `include_image!`, so that `--quick` runs every Kiln mode without NVRTC; and
//! the CUBIN `cudarc-alone` embeds (`CUDARC_ALONE_CUBIN`, its entry point in
//! `CUDARC_ALONE_ENTRY`), empty when they are not set. (Not `KILN_*` names:
//! every precompile block reruns when a `KILN_*` variable changes.)

#[path = "src/synthetic.rs"]
mod synthetic;

use std::path::PathBuf;

use kiln::image::{ImageMeta, ImageWriter};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=src/synthetic.rs");
    let out_dir = PathBuf::from(std::env::var("OUT_DIR")?);
    let owner = synthetic::owner()?;
    let mut writer = ImageWriter::new(ImageMeta::new("kiln-bench", env!("CARGO_PKG_VERSION")));
    for index in 0..synthetic::EMBEDDED_ENTRIES as u64 {
        writer.push(synthetic::entry(
            &owner,
            index,
            synthetic::EMBEDDED_PAYLOAD,
        )?);
    }
    writer.write_atomic(&out_dir.join(synthetic::EMBEDDED_IMAGE))?;

    println!("cargo:rerun-if-env-changed=CUDARC_ALONE_CUBIN");
    println!("cargo:rerun-if-env-changed=CUDARC_ALONE_ENTRY");
    let cubin = match std::env::var_os("CUDARC_ALONE_CUBIN") {
        Some(path) => {
            println!("cargo:rerun-if-changed={}", PathBuf::from(&path).display());
            std::fs::read(&path)?
        }
        None => Vec::new(),
    };
    std::fs::write(out_dir.join("axpy.cubin"), cubin)?;
    let entry = std::env::var("CUDARC_ALONE_ENTRY").unwrap_or_default();
    std::fs::write(out_dir.join("axpy.entry"), entry)?;
    Ok(())
}
