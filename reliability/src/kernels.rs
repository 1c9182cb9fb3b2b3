//! The tiny CUDA kernel the staleness matrix compiles, and each input it
//! changes. Shared by the test and its helper process, so that both build
//! exactly the same requests.

use kiln_cuda::{Arch, KernelRequest};

use crate::Error;

/// The header the kernel includes, by content.
pub const HEADER_NAME: &str = "kiln_scale.h";
/// The header's baseline content.
pub const HEADER: &str = "#pragma once\n#define KILN_SCALE(a) (a)\n";
/// The baseline source: an axpy template that uses the header.
pub const SOURCE: &str = r#"#include "kiln_scale.h"
template <typename T>
__global__ void kiln_axpy(int n, T a, const T* x, T* y) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = KILN_SCALE(a) * x[i] + y[i];
}
"#;
/// The baseline name expression.
pub const NAME_EXPRESSION: &str = "kiln_axpy<float>";
/// The baseline options.
pub const OPTIONS: [&str; 1] = ["--std=c++17"];
/// The baseline arch.
pub const ARCH: &str = "sm_90";

/// One input of a kernel compile, changed from the baseline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    /// Nothing changed.
    None,
    /// The kernel's source text.
    Source,
    /// The content of an included header.
    Header,
    /// The name expression (the template instantiation).
    NameExpression,
    /// An NVRTC option.
    Option,
    /// The arch (`sm_90` to `sm_80`).
    Arch,
    /// The arch suffix (`sm_90` to `sm_90a`).
    ArchSuffix,
}

impl Change {
    /// Every change that alters the request itself.
    pub const REQUEST_CHANGES: [Change; 6] = [
        Change::Source,
        Change::Header,
        Change::NameExpression,
        Change::Option,
        Change::Arch,
        Change::ArchSuffix,
    ];

    /// What it changes, for the matrix.
    pub fn describe(self) -> &'static str {
        match self {
            Change::None => "nothing (control)",
            Change::Source => "source: `+ y[i]` -> `- y[i]`",
            Change::Header => "header content: `KILN_SCALE(a) (a)` -> `(2 * (a))`",
            Change::NameExpression => "name expression: `kiln_axpy<float>` -> `<double>`",
            Change::Option => "option: `--fmad=false` added",
            Change::Arch => "arch: `sm_90` -> `sm_80`",
            Change::ArchSuffix => "arch suffix: `sm_90` -> `sm_90a`",
        }
    }

    /// The name the helper process accepts.
    pub fn name(self) -> &'static str {
        match self {
            Change::None => "none",
            Change::Source => "source",
            Change::Header => "header",
            Change::NameExpression => "name-expression",
            Change::Option => "option",
            Change::Arch => "arch",
            Change::ArchSuffix => "arch-suffix",
        }
    }

    /// The change called `name`.
    pub fn from_name(name: &str) -> Option<Change> {
        std::iter::once(Change::None)
            .chain(Change::REQUEST_CHANGES)
            .find(|c| c.name() == name)
    }
}

/// The baseline request with `change` applied.
///
/// # Errors
/// When the CCCL headers cannot be found or read.
pub fn request(change: Change) -> Result<KernelRequest, Error> {
    let source = match change {
        Change::Source => SOURCE.replace("+ y[i]", "- y[i]"),
        _ => SOURCE.to_owned(),
    };
    let header = match change {
        Change::Header => HEADER.replace("(a)\n", "(2 * (a))\n"),
        _ => HEADER.to_owned(),
    };
    let name_expression = match change {
        Change::NameExpression => "kiln_axpy<double>",
        _ => NAME_EXPRESSION,
    };
    let arch = match change {
        Change::Arch => "sm_80",
        Change::ArchSuffix => "sm_90a",
        _ => ARCH,
    };
    let arch: Arch = arch.parse().map_err(kiln_cuda::Error::from)?;
    let mut options: Vec<&str> = OPTIONS.to_vec();
    if change == Change::Option {
        options.push("--fmad=false");
    }
    Ok(KernelRequest::new("kiln_axpy", source, arch)
        .header(HEADER_NAME, header)
        .name_expression(name_expression)
        .param("T", "float")
        .options(options)?)
}
