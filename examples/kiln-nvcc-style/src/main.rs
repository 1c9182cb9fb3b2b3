//! The application of the proof: asks the library for every kernel it states,
//! for one device arch, and prints one tab-separated line per kernel:
//!
//! ```text
//! served  <program>  <kernel>  <selection>  <target>  <source>
//! absent  <program>  <kernel>  <error>
//! ```
//!
//! `absent` is a kernel that does not exist for the arch
//! ([`kiln::cuda::Error::NoSuchKernel`]); any other error ends the run with
//! status 1. Usage: `kiln-nvcc-style [--arch sm_XX]` (default `sm_90`; no GPU
//! is needed to be served).

use std::process::ExitCode;

use kiln::cuda::{Arch, Device, Error};
use kiln_nvcc_style::catalogue::Program;

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let mut arch = "sm_90".to_owned();
    while let Some(arg) = args.next() {
        match (arg.as_str(), args.next()) {
            ("--arch", Some(value)) => arch = value,
            _ => {
                eprintln!("usage: kiln-nvcc-style [--arch sm_XX]");
                return ExitCode::from(2);
            }
        }
    }
    let arch: Arch = match arch.parse() {
        Ok(arch) => arch,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let device = Device::new(arch);
    let cache = kiln::global();
    let mut failed = false;
    for program in Program::ALL {
        for kernel in program.kernels() {
            match kiln_nvcc_style::get(cache, &device, program, kernel.name) {
                Ok(served) => println!(
                    "served\t{}\t{}\t{}\t{}\t{}",
                    program.name(),
                    kernel.name,
                    served.selection(),
                    served.target(),
                    served.hit().source().name()
                ),
                Err(error @ Error::NoSuchKernel { .. }) => {
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
