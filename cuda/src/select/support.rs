//! What drivers load and which drivers support which GPUs: the facts selection and
//! coverage are computed from.
//!
//! - A CUBIN built by NVRTC `X.Y` loads on every driver for CUDA `X.0` or newer
//!   (minor-version compatibility: 12.x CUBINs on R525+, 13.x on R580+; an older
//!   major's CUBIN on a newer driver too). A newer major's CUBIN on an older
//!   driver needs NVIDIA's forward-compatibility package, on some GPUs only: Kiln
//!   treats it as not loading.
//! - PTX carries the ISA version of the NVRTC that wrote it, and a driver JITs
//!   only the ISA versions it knows: PTX from NVRTC `X.Y` needs a driver for CUDA
//!   `X.Y` or newer.
//! - Each GPU arch is supported from one CUDA release on ([`KNOWN_GPUS`]); R580
//!   (CUDA 13.0) is the last driver branch for Maxwell, Pascal and Volta (sm_50 to
//!   sm_72), and Thor, sm_101 under CUDA 12.8 and 12.9, is sm_110 from 13.0.
//!
//! Versions are in `cuDriverGetVersion`'s form: `12080` for CUDA 12.8.

use crate::Arch;
use crate::toolchain::NvrtcVersion;

/// A GPU arch Kiln knows, and the drivers (CUDA versions) that support it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KnownGpu {
    /// Major compute capability.
    pub major: u32,
    /// Minor compute capability.
    pub minor: u32,
    /// The first CUDA release whose driver supports it.
    pub first_driver: i32,
    /// The last CUDA release whose driver supports it, when support ended.
    pub last_driver: Option<i32>,
    /// Its generation, for people (`Hopper`).
    pub generation: &'static str,
}

impl KnownGpu {
    /// Its plain arch (`sm_90`).
    pub fn arch(&self) -> Arch {
        Arch::known(self.major, self.minor)
    }

    /// Whether a driver for CUDA `driver` supports it.
    pub fn supported_by(&self, driver: i32) -> bool {
        driver >= self.first_driver && self.last_driver.is_none_or(|last| driver <= last)
    }
}

const fn gpu(
    major: u32,
    minor: u32,
    first_driver: i32,
    last_driver: Option<i32>,
    generation: &'static str,
) -> KnownGpu {
    KnownGpu {
        major,
        minor,
        first_driver,
        last_driver,
        generation,
    }
}

/// R580 (CUDA 13.0): the last driver branch for sm_50 to sm_72.
const LAST_FOR_MAXWELL_TO_VOLTA: Option<i32> = Some(13000);

/// Every GPU arch Kiln knows, oldest first, with the CUDA releases whose drivers
/// support it.
pub const KNOWN_GPUS: &[KnownGpu] = &[
    gpu(5, 0, 6000, LAST_FOR_MAXWELL_TO_VOLTA, "Maxwell"),
    gpu(5, 2, 6050, LAST_FOR_MAXWELL_TO_VOLTA, "Maxwell"),
    gpu(5, 3, 6050, LAST_FOR_MAXWELL_TO_VOLTA, "Maxwell (Jetson)"),
    gpu(6, 0, 8000, LAST_FOR_MAXWELL_TO_VOLTA, "Pascal"),
    gpu(6, 1, 8000, LAST_FOR_MAXWELL_TO_VOLTA, "Pascal"),
    gpu(6, 2, 8000, LAST_FOR_MAXWELL_TO_VOLTA, "Pascal (Jetson)"),
    gpu(7, 0, 9000, LAST_FOR_MAXWELL_TO_VOLTA, "Volta"),
    gpu(7, 2, 10000, LAST_FOR_MAXWELL_TO_VOLTA, "Volta (Jetson)"),
    gpu(7, 5, 10000, None, "Turing"),
    gpu(8, 0, 11000, None, "Ampere"),
    gpu(8, 6, 11010, None, "Ampere"),
    gpu(8, 7, 11040, None, "Ampere (Jetson)"),
    gpu(8, 8, 13000, None, "Ampere"),
    gpu(8, 9, 11080, None, "Ada"),
    gpu(9, 0, 11080, None, "Hopper"),
    gpu(10, 0, 12080, None, "Blackwell"),
    gpu(10, 1, 12080, Some(12090), "Blackwell (Thor, CUDA 12)"),
    gpu(10, 3, 12090, None, "Blackwell"),
    gpu(11, 0, 13000, None, "Blackwell (Thor)"),
    gpu(12, 0, 12080, None, "Blackwell"),
    gpu(12, 1, 12090, None, "Blackwell"),
];

/// The driver releases Kiln reasons about (CUDA 12.0 to 13.5): a driver of any of
/// them loads exactly what the rules say; between two of them nothing changes.
pub const KNOWN_DRIVERS: &[i32] = &[
    12000, 12010, 12020, 12030, 12040, 12050, 12060, 12080, 12090, 13000, 13010, 13020, 13030,
    13040, 13050,
];

/// The driver branch that first shipped CUDA `version`, for people (`R580`).
pub fn driver_branch(version: i32) -> Option<&'static str> {
    const BRANCHES: &[(i32, &str)] = &[
        (12000, "R525"),
        (12010, "R530"),
        (12020, "R535"),
        (12030, "R545"),
        (12040, "R550"),
        (12050, "R555"),
        (12060, "R560"),
        (12080, "R570"),
        (12090, "R575"),
        (13000, "R580"),
        (13010, "R590"),
        (13020, "R595"),
    ];
    BRANCHES
        .iter()
        .rev()
        .find(|(v, _)| *v <= version && version / 1000 == v / 1000)
        .map(|(_, branch)| *branch)
}

/// The known GPU of `arch`'s capability, if Kiln knows it.
pub fn known_gpu(arch: Arch) -> Option<&'static KnownGpu> {
    KNOWN_GPUS
        .iter()
        .find(|g| (g.major, g.minor) == (arch.major(), arch.minor()))
}

/// The newest CUDA major whose NVRTC compiles for `arch`: 12 for sm_50 to sm_72
/// (CUDA 13 dropped them), none known otherwise.
pub fn newest_major_for(arch: Arch) -> Option<u32> {
    ((arch.major(), arch.minor()) <= (7, 2)).then_some(12)
}

/// The CUDA version (`cuDriverGetVersion` form) a driver needs to load a CUBIN
/// built by NVRTC `compiler`: the first of its major (`12000` for any 12.x).
pub fn driver_needed_for_cubin(compiler: &NvrtcVersion) -> i32 {
    i32::try_from(compiler.major.saturating_mul(1000)).unwrap_or(i32::MAX)
}

/// The CUDA version (`cuDriverGetVersion` form: 13000 for 13.0) a driver needs to JIT
/// PTX produced by NVRTC `compiler`.
pub fn driver_needed_for_ptx(compiler: &NvrtcVersion) -> i32 {
    let version = compiler.major.saturating_mul(1000) + compiler.minor.saturating_mul(10);
    i32::try_from(version).unwrap_or(i32::MAX)
}

/// `13000` as `13.0`.
pub fn cuda_version_text(version: i32) -> String {
    format!("{}.{}", version / 1000, (version % 1000) / 10)
}

/// A CUDA version as people write it (`12.8`, `13`) in `cuDriverGetVersion` form
/// (`12080`, `13000`); `None` for anything else.
///
/// ```
/// use kiln_cuda::select::parse_cuda_version;
/// assert_eq!(parse_cuda_version("12.8"), Some(12080));
/// assert_eq!(parse_cuda_version("13"), Some(13000));
/// assert_eq!(parse_cuda_version("12.10"), None);
/// ```
pub fn parse_cuda_version(text: &str) -> Option<i32> {
    let text = text.trim();
    let (major, minor) = text.split_once('.').unwrap_or((text, "0"));
    let digits = |s: &str| !s.is_empty() && s.len() <= 3 && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(major) || !digits(minor) || minor.len() > 1 {
        return None;
    }
    let (major, minor): (i32, i32) = (major.parse().ok()?, minor.parse().ok()?);
    (major >= 1).then(|| major * 1000 + minor * 10)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_known_gpu_is_an_arch_and_they_are_in_order() {
        for pair in KNOWN_GPUS.windows(2) {
            assert!((pair[0].major, pair[0].minor) < (pair[1].major, pair[1].minor));
        }
        for gpu in KNOWN_GPUS {
            let checked = Arch::new(gpu.major, gpu.minor, crate::ArchSuffix::None);
            assert_eq!(checked, Ok(gpu.arch()));
        }
        let volta = known_gpu("sm_70".parse().unwrap()).unwrap();
        assert!(volta.supported_by(13000) && !volta.supported_by(13010));
        let thor12 = known_gpu("sm_101".parse().unwrap()).unwrap();
        assert!(thor12.supported_by(12090) && !thor12.supported_by(13000));
        assert_eq!(driver_branch(13000), Some("R580"));
        assert_eq!(driver_branch(12080), Some("R570"));
        assert_eq!(driver_branch(13050), Some("R595"));
    }

    #[test]
    fn versions_read_as_people_write_them() {
        assert_eq!(parse_cuda_version("12.0"), Some(12000));
        assert_eq!(parse_cuda_version(" 13.5 "), Some(13050));
        for bad in ["", "x", "12.", ".8", "12.8.1", "-1", "12.-1", "0"] {
            assert_eq!(parse_cuda_version(bad), None, "{bad}");
        }
        assert_eq!(cuda_version_text(12090), "12.9");
        let nvrtc: NvrtcVersion = "12.9.86".parse().unwrap();
        assert_eq!(driver_needed_for_cubin(&nvrtc), 12000);
        assert_eq!(driver_needed_for_ptx(&nvrtc), 12090);
    }
}
