//! The application of the proof: asks the library for every kernel it states,
//! for one device arch, and prints one tab-separated line per kernel:
//!
//! ```text
//! served  <program>  <kernel>  <selection>  <target>  <source>
//! absent  <program>  <kernel>  <error>
//! ```
//!
//! `absent` is a kernel that does not exist for the arch
//! ([`kiln::cuda::ServeError::NoSuchKernel`]); any other error ends the run with
//! status 1. Usage: `kiln-nvcc-style [--arch sm_XX | --gpu]` (default `sm_90`;
//! no GPU is needed to be served). With `--gpu` the arch is GPU 0's, and each
//! served line ends with what the GPU did: `loaded` (module loaded, function
//! bound by name) or `ran` (launched and checked).

mod gpu;

use std::process::ExitCode;

use kiln::cuda::ServeError;
use kiln::cuda::{Arch, Device};
use kiln_nvcc_style::catalogue::Program;

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let mut arch = "sm_90".to_owned();
    let mut use_gpu = false;
    while let Some(arg) = args.next() {
        let value = if arg == "--arch" { args.next() } else { None };
        match (arg.as_str(), value) {
            ("--gpu", _) => use_gpu = true,
            ("--arch", Some(value)) => arch = value,
            _ => {
                eprintln!("usage: kiln-nvcc-style [--arch sm_XX | --gpu]");
                return ExitCode::from(2);
            }
        }
    }
    let gpu = if use_gpu {
        match gpu::Gpu::open() {
            Ok(gpu) => Some(gpu),
            Err(e) => {
                eprintln!("{e}");
                return ExitCode::FAILURE;
            }
        }
    } else {
        None
    };
    let device = match (&gpu, arch.parse::<Arch>()) {
        (Some(gpu), _) => gpu.device(),
        (None, Ok(arch)) => Device::new(arch),
        (None, Err(e)) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let cache = kiln::global();
    let mut failed = false;
    for program in Program::ALL {
        for kernel in program.kernels() {
            match kiln_nvcc_style::get(cache, &device, program, kernel.name) {
                Ok(served) => {
                    let mut line = format!(
                        "served\t{}\t{}\t{}\t{}\t{}",
                        program.name(),
                        kernel.name,
                        served.selection(),
                        served.target(),
                        served.hit().source().name()
                    );
                    if let Some(gpu) = &gpu {
                        match gpu.check(kernel.name, &served) {
                            Ok(done) => line.push_str(&format!("\t{done}")),
                            Err(why) => {
                                line.push_str(&format!("\tgpu failed: {why}"));
                                failed = true;
                            }
                        }
                    }
                    println!("{line}");
                }
                Err(error @ ServeError::NoSuchKernel { .. }) => {
                    println!("absent\t{}\t{}\t{error}", program.name(), kernel.name)
                }
                Err(error) => {
                    println!("failed\t{}\t{}\t{error}", program.name(), kernel.name);
                    failed = true;
                }
            }
        }
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
