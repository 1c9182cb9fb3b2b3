//! The toolchain a kernel's owner and key are derived for: the one a library's build
//! recorded ([`BuildRecord`]), or this machine's ([`Toolchain::local`]).
//!
//! An owner names NVRTC's exact release, and the key of a CUB kernel hashes the
//! content of the CCCL include tree. A process that had to learn both from its own
//! machine before its first lookup would need NVRTC (to read its release) and the
//! headers (to hash them), which a production machine with only a GPU driver does not
//! have. So the build records them: the kernel library's build script runs its
//! precompile block through [`ShipPlan`](super::ShipPlan), which leaves a
//! [`BuildRecord`] (NVRTC release, the digest of each named header set, the targets
//! shipped) in a `cargo::rustc-env` variable ([`BUILD_RECORD_VAR`]); the library reads
//! it back with `env!` and derives the owners and keys of its shipped entries from
//! [`Toolchain::recorded`], without reading a file.
//!
//! The local toolchain is needed only to compile, that is on a miss, and is located
//! then ([`KernelLibrary`](super::KernelLibrary) does this).
//!
//! # Policy
//!
//! [`ToolchainPolicy::Shipped`] (the default): a shipped entry is valid code for its
//! arch, and is served whatever toolchain is, or is not, installed here. With
//! `KILN_STRICT_TOOLCHAIN=1` ([`ToolchainPolicy::Strict`]) a process whose local
//! NVRTC release, or the digest of a header set a kernel uses, differs from the
//! recorded one compiles the kernel with its own toolchain instead; a toolchain (or
//! header set) that is absent differs from nothing, so shipped entries are then still
//! served. Entries compiled at run time always name the local compiler and headers.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;
use std::sync::{Arc, OnceLock};

use kiln_core::{Cache, Digest};

use crate::request::{HEADERS_DEP_PREFIX, NVRTC_DEP, nvrtc_fingerprint};
use crate::{Arch, IncludeDir, KernelRequest};

pub mod c_headers;
mod compiler;
pub(crate) mod error;
mod identity;
pub(crate) mod include_tree;
pub(crate) mod locate;
pub(crate) mod memo;
pub(crate) mod nvrtc;

pub use compiler::{CompiledKernel, Compiler};
pub use error::{CompileError, SearchLog, Searched, ToolchainError};
pub use identity::{IdentityOrigin, NvrtcIdentity};
pub use locate::{
    CCCL_INCLUDE, CUDA_RUNTIME_INCLUDE, Located, NVRTC, SearchConfig, locate_cccl,
    locate_cuda_runtime, locate_nvrtc, per_major,
};
pub use memo::{DEFAULT_SETTLE, MAX_MEMO_BYTES, MemoDir};
pub use nvrtc::{InvalidNvrtcVersion, Nvrtc, NvrtcVersion};

/// The `cargo::rustc-env` variable a kernel library's build script sets to its
/// [`BuildRecord`]: the library reads it with `env!("KILN_CUDA_BUILD")`.
pub const BUILD_RECORD_VAR: &str = "KILN_CUDA_BUILD";

/// `KILN_STRICT_TOOLCHAIN`: serve shipped kernels only when the local NVRTC and
/// headers are the ones they were built with ([`ToolchainPolicy::Strict`]). A
/// run-time switch: declared to kiln-core as one
/// ([`Switch`](kiln_core::settings::Switch)), so that setting it never reruns
/// a build script.
pub const STRICT_TOOLCHAIN: &str = "KILN_STRICT_TOOLCHAIN";

/// The header set of the CCCL headers (CUB, Thrust, libcu++).
pub const CCCL: &str = "cccl";

/// The header set of the CUDA runtime headers (`cuda_fp16.h`, `cuda_bf16.h`,
/// `cuda_fp8.h`, `cuda_runtime.h`...): the toolkit's `include/` or the
/// `nvidia-cuda-runtime` wheel's. Their licence does not allow redistributing
/// them: only their digest travels with shipped kernels. The digest covers
/// every file of that folder, as every file is reachable through it: CCCL's
/// too where the wheels share `nvidia/cu13/include/` (a new CCCL then also
/// misses the runtime set's entries, never the reverse).
pub const CUDA_RUNTIME: &str = "cuda-runtime";

/// Finds a header set's folder.
type Locate = fn(&SearchConfig) -> Result<std::path::PathBuf, ToolchainError>;

/// The header sets a local toolchain locates by itself, with the function that
/// finds each one's folder.
const STANDARD_SETS: [(&str, Locate); 2] =
    [(CCCL, locate_cccl), (CUDA_RUNTIME, locate_cuda_runtime)];

/// The first word of a build record of one toolchain (and the default oldest
/// driver): what every Kiln release reads.
const RECORD_MAGIC: &str = "kiln-cuda-build/1";
/// The first word of a build record of several toolchains, or one that states
/// its oldest driver.
const RECORD_MAGIC_2: &str = "kiln-cuda-build/2";

/// What one toolchain of a build compiled: NVRTC's exact release, the digest of
/// each named header set, the CUBIN targets and the targets whose entries also
/// carry PTX.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolchainRecord {
    nvrtc: NvrtcVersion,
    cubins: Vec<Arch>,
    ptx: Vec<Arch>,
    headers: BTreeMap<String, Digest>,
}

impl ToolchainRecord {
    /// A toolchain of NVRTC `nvrtc` (no target yet).
    pub fn new(nvrtc: NvrtcVersion) -> ToolchainRecord {
        ToolchainRecord {
            nvrtc,
            cubins: Vec::new(),
            ptx: Vec::new(),
            headers: BTreeMap::new(),
        }
    }

    /// The same toolchain with these CUBIN targets (sorted, duplicates dropped).
    pub fn with_cubin_targets(mut self, targets: impl IntoIterator<Item = Arch>) -> Self {
        self.cubins = sorted(targets);
        self
    }

    /// The same toolchain with the entries of `targets` carrying PTX (sorted,
    /// duplicates dropped).
    pub fn with_ptx_targets(mut self, targets: impl IntoIterator<Item = Arch>) -> Self {
        self.ptx = sorted(targets);
        self
    }

    /// The same toolchain with header set `set` at `digest`.
    pub fn with_header_set(mut self, set: impl Into<String>, digest: Digest) -> Self {
        self.headers.insert(set.into(), digest);
        self
    }

    /// The NVRTC release its entries were compiled by.
    pub fn nvrtc(&self) -> &NvrtcVersion {
        &self.nvrtc
    }

    /// The archs shipped as CUBINs, sorted.
    pub fn cubin_targets(&self) -> &[Arch] {
        &self.cubins
    }

    /// Every target whose entries also carry PTX, sorted.
    pub fn ptx_targets(&self) -> &[Arch] {
        &self.ptx
    }

    /// The digest of header set `set` the entries were compiled with.
    pub fn header_set(&self, set: &str) -> Option<Digest> {
        self.headers.get(set).copied()
    }

    /// Every recorded header set and its digest, by name.
    pub fn header_sets(&self) -> impl Iterator<Item = (&str, Digest)> {
        self.headers.iter().map(|(name, d)| (name.as_str(), *d))
    }

    /// The oldest driver (CUDA version, `cuDriverGetVersion` form) that loads
    /// this toolchain's CUBINs: the first of its major (`12000` for NVRTC 12.x,
    /// an R525 driver; `13000` for 13.x, R580).
    pub fn cubin_driver(&self) -> i32 {
        crate::select::driver_needed_for_cubin(&self.nvrtc)
    }

    /// The oldest driver that JIT-compiles this toolchain's PTX: the one of its
    /// exact CUDA release (`12090` for NVRTC 12.9).
    pub fn ptx_driver(&self) -> i32 {
        crate::select::driver_needed_for_ptx(&self.nvrtc)
    }

    fn write(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, " nvrtc={}", self.nvrtc)?;
        if !self.cubins.is_empty() {
            let list: Vec<String> = self.cubins.iter().map(Arch::to_string).collect();
            write!(f, " cubin={}", list.join(","))?;
        }
        if !self.ptx.is_empty() {
            let list: Vec<String> = self.ptx.iter().map(Arch::to_string).collect();
            write!(f, " ptx={}", list.join(","))?;
        }
        for (set, digest) in &self.headers {
            write!(f, " headers.{set}={}", digest.to_hex())?;
        }
        Ok(())
    }
}

fn sorted(targets: impl IntoIterator<Item = Arch>) -> Vec<Arch> {
    let mut targets: Vec<Arch> = targets.into_iter().collect();
    targets.sort();
    targets.dedup();
    targets
}

/// What a kernel library's build compiled its shipped entries with, and for which
/// targets: one [`ToolchainRecord`] per toolchain (an NVRTC 13 one for CUDA 13
/// drivers and an NVRTC 12 one for CUDA 12 drivers and older GPUs, say), newest
/// first, and the oldest driver the build states it serves.
///
/// Its text form is one line (a `cargo::rustc-env` value); each `nvrtc=` starts a
/// toolchain, `ptx=` lists one target or several, comma-separated. A record of one
/// toolchain at the default oldest driver reads as it always has
/// (`kiln-cuda-build/1`); several toolchains, or a stated oldest driver
/// (`driver=12.8`), make a `kiln-cuda-build/2` record:
///
/// ```
/// use kiln_cuda::toolchain::BuildRecord;
/// let record: BuildRecord = "kiln-cuda-build/1 nvrtc=13.0.88 cubin=sm_80,sm_90 ptx=sm_80".parse()?;
/// assert_eq!(record.nvrtc().map(|v| v.release.as_str()), Some("13.0.88"));
/// assert_eq!(record.cubin_targets().len(), 2);
/// assert_eq!(record.to_string().parse::<BuildRecord>()?, record);
/// let two: BuildRecord = "kiln-cuda-build/1 nvrtc=13.0.88 cubin=sm_80,sm_90 ptx=sm_80,sm_90".parse()?;
/// assert_eq!(two.ptx_targets().len(), 2);
/// // Two toolchains: CUDA 13 for Turing and newer, CUDA 12 down to Maxwell.
/// let both: BuildRecord = "kiln-cuda-build/2 nvrtc=13.0.88 cubin=sm_75,sm_90 ptx=sm_75 \
///     nvrtc=12.9.86 cubin=sm_50,sm_70,sm_90 ptx=sm_50".parse()?;
/// assert_eq!(both.toolchains().len(), 2);
/// assert_eq!(both.oldest_driver(), 12000); // what NVRTC 12's CUBINs reach (R525)
/// // A build that found no NVRTC shipped nothing:
/// assert!("kiln-cuda-build/1".parse::<BuildRecord>()?.nvrtc().is_none());
/// # Ok::<(), kiln_cuda::Error>(())
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BuildRecord {
    toolchains: Vec<ToolchainRecord>,
    oldest_driver: Option<i32>,
}

impl BuildRecord {
    /// A record of a build that compiled with NVRTC `nvrtc` (no target yet).
    pub fn new(nvrtc: NvrtcVersion) -> BuildRecord {
        BuildRecord::from_toolchains([ToolchainRecord::new(nvrtc)])
    }

    /// A record of these toolchains (ordered newest NVRTC first; one per release).
    pub fn from_toolchains(toolchains: impl IntoIterator<Item = ToolchainRecord>) -> BuildRecord {
        let mut record = BuildRecord::default();
        for toolchain in toolchains {
            record = record.with_toolchain(toolchain);
        }
        record
    }

    /// The record with `toolchain` too (it replaces one of the same NVRTC release).
    pub fn with_toolchain(mut self, toolchain: ToolchainRecord) -> BuildRecord {
        self.toolchains.retain(|t| t.nvrtc != toolchain.nvrtc);
        self.toolchains.push(toolchain);
        self.toolchains
            .sort_by(|a, b| newest_first(&a.nvrtc, &b.nvrtc));
        self
    }

    /// The record stating that its build serves drivers from CUDA `version`
    /// (`cuDriverGetVersion` form: 12080 for 12.8) on; `None`: the default, the
    /// oldest driver its toolchains' CUBINs reach.
    pub fn with_oldest_driver(mut self, version: Option<i32>) -> BuildRecord {
        self.oldest_driver = version;
        self
    }

    /// The toolchain the single-toolchain builders change: the newest.
    fn first_mut(&mut self) -> Option<&mut ToolchainRecord> {
        self.toolchains.first_mut()
    }

    /// The record with these CUBIN targets for its newest toolchain (sorted,
    /// duplicates dropped).
    pub fn with_cubin_targets(mut self, targets: impl IntoIterator<Item = Arch>) -> Self {
        if let Some(first) = self.first_mut() {
            first.cubins = sorted(targets);
        }
        self
    }

    /// The record with the entries of `target` (alone) carrying PTX, or none, for
    /// its newest toolchain.
    pub fn with_ptx_target(self, target: Option<Arch>) -> Self {
        self.with_ptx_targets(target)
    }

    /// The record with the entries of `targets` carrying PTX (sorted, duplicates
    /// dropped), for its newest toolchain.
    pub fn with_ptx_targets(mut self, targets: impl IntoIterator<Item = Arch>) -> Self {
        if let Some(first) = self.first_mut() {
            first.ptx = sorted(targets);
        }
        self
    }

    /// The record with header set `set` at `digest`, for its newest toolchain.
    pub fn with_header_set(mut self, set: impl Into<String>, digest: Digest) -> Self {
        if let Some(first) = self.first_mut() {
            first.headers.insert(set.into(), digest);
        }
        self
    }

    /// Every toolchain, newest NVRTC first.
    pub fn toolchains(&self) -> &[ToolchainRecord] {
        &self.toolchains
    }

    /// The NVRTC release of the newest toolchain; `None` when the build had no
    /// NVRTC (nothing was shipped).
    pub fn nvrtc(&self) -> Option<&NvrtcVersion> {
        self.toolchains.first().map(|t| &t.nvrtc)
    }

    /// The archs the newest toolchain shipped as CUBINs, sorted
    /// ([`BuildRecord::toolchains`] has each toolchain's).
    pub fn cubin_targets(&self) -> &[Arch] {
        self.toolchains.first().map_or(&[], |t| &t.cubins)
    }

    /// The lowest target of the newest toolchain whose entries also carry PTX.
    pub fn ptx_target(&self) -> Option<Arch> {
        self.ptx_targets().first().copied()
    }

    /// Every target of the newest toolchain whose entries also carry PTX, sorted.
    pub fn ptx_targets(&self) -> &[Arch] {
        self.toolchains.first().map_or(&[], |t| &t.ptx)
    }

    /// The digest of header set `set` the newest toolchain compiled with.
    pub fn header_set(&self, set: &str) -> Option<Digest> {
        self.toolchains.first()?.header_set(set)
    }

    /// Every header set of the newest toolchain and its digest, by name.
    pub fn header_sets(&self) -> impl Iterator<Item = (&str, Digest)> {
        self.toolchains.iter().take(1).flat_map(|t| t.header_sets())
    }

    /// The oldest driver (CUDA version, `cuDriverGetVersion` form) the build
    /// states it serves: as stated, else the oldest its toolchains' CUBINs reach
    /// ([`ToolchainRecord::cubin_driver`]); `i32::MAX` when nothing was shipped.
    pub fn oldest_driver(&self) -> i32 {
        self.oldest_driver.unwrap_or_else(|| {
            self.toolchains
                .iter()
                .map(ToolchainRecord::cubin_driver)
                .min()
                .unwrap_or(i32::MAX)
        })
    }

    /// The oldest driver as stated, `None` when it is the default.
    pub fn stated_oldest_driver(&self) -> Option<i32> {
        self.oldest_driver
    }

    /// The `cargo::rustc-env` line a build script prints for this record.
    pub fn cargo_directive(&self) -> String {
        format!("cargo::rustc-env={BUILD_RECORD_VAR}={self}")
    }
}

/// Orders NVRTC releases newest first.
fn newest_first(a: &NvrtcVersion, b: &NvrtcVersion) -> std::cmp::Ordering {
    (b.major, b.minor, patch(b)).cmp(&(a.major, a.minor, patch(a)))
}

fn patch(version: &NvrtcVersion) -> u32 {
    version
        .release
        .rsplit('.')
        .next()
        .and_then(|p| p.parse().ok())
        .unwrap_or(0)
}

impl fmt::Display for BuildRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let second = self.toolchains.len() > 1 || self.oldest_driver.is_some();
        f.write_str(if second { RECORD_MAGIC_2 } else { RECORD_MAGIC })?;
        if let Some(driver) = self.oldest_driver {
            write!(f, " driver={}", crate::select::cuda_version_text(driver))?;
        }
        for toolchain in &self.toolchains {
            toolchain.write(f)?;
        }
        Ok(())
    }
}

impl FromStr for BuildRecord {
    type Err = ToolchainError;

    /// Parses the text form ([`BuildRecord`]'s `Display`).
    fn from_str(text: &str) -> Result<Self, ToolchainError> {
        let bad = |why: String| ToolchainError::BadBuildRecord {
            given: text.to_owned(),
            why,
        };
        let mut words = text.split_whitespace();
        let second = match words.next() {
            Some(RECORD_MAGIC) => false,
            Some(RECORD_MAGIC_2) => true,
            _ => {
                return Err(bad(format!(
                    "it does not start with {RECORD_MAGIC} or {RECORD_MAGIC_2}"
                )));
            }
        };
        let mut toolchains: Vec<ToolchainRecord> = Vec::new();
        let mut oldest_driver = None;
        for word in words {
            let (field, value) = word
                .split_once('=')
                .ok_or_else(|| bad(format!("{word:?} is not field=value")))?;
            let arch = |s: &str| s.parse::<Arch>().map_err(|e| bad(e.to_string()));
            if field == "nvrtc" {
                let nvrtc = value
                    .parse::<NvrtcVersion>()
                    .map_err(|e| bad(e.to_string()))?;
                if toolchains.iter().any(|t| t.nvrtc == nvrtc) {
                    return Err(bad(format!("NVRTC {nvrtc} is recorded twice")));
                }
                toolchains.push(ToolchainRecord::new(nvrtc));
                continue;
            }
            if field == "driver" && second {
                let version = crate::select::parse_cuda_version(value)
                    .ok_or_else(|| bad(format!("driver={value} is not a CUDA version")))?;
                oldest_driver = Some(version);
                continue;
            }
            let Some(toolchain) = toolchains.last_mut() else {
                return Err(bad(format!(
                    "{field} without the NVRTC release it was built by"
                )));
            };
            match field {
                "cubin" => {
                    let targets = value.split(',').map(arch).collect::<Result<Vec<_>, _>>()?;
                    toolchain.cubins = sorted(targets);
                }
                "ptx" => {
                    let targets = value.split(',').map(arch).collect::<Result<Vec<_>, _>>()?;
                    toolchain.ptx = sorted(targets);
                }
                _ => {
                    let Some(set) = field.strip_prefix("headers.").filter(|s| !s.is_empty()) else {
                        return Err(bad(format!("unknown field {field:?}")));
                    };
                    let digest = Digest::from_hex(value)
                        .map_err(|_| bad(format!("the digest of {set} is not 64 hex digits")))?;
                    toolchain.headers.insert(set.to_owned(), digest);
                }
            }
        }
        if !second && toolchains.len() > 1 {
            return Err(bad(format!(
                "several toolchains need a {RECORD_MAGIC_2} record"
            )));
        }
        Ok(BuildRecord::from_toolchains(toolchains).with_oldest_driver(oldest_driver))
    }
}

/// Whether shipped entries built by another toolchain are served.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum ToolchainPolicy {
    /// Serve every shipped entry that runs on the device, whatever toolchain is (or
    /// is not) installed here: it is valid code for its arch. The default.
    #[default]
    Shipped,
    /// Serve a shipped entry only when the local NVRTC release and the digests of
    /// the header sets it uses are those it was built with (or are not installed);
    /// otherwise compile it here. `KILN_STRICT_TOOLCHAIN=1`.
    Strict,
}

impl ToolchainPolicy {
    /// The policy `KILN_STRICT_TOOLCHAIN` names in this process's settings
    /// ([`Settings::process`](kiln_core::settings::Settings::process)), read once.
    pub fn process() -> ToolchainPolicy {
        static PROCESS: OnceLock<ToolchainPolicy> = OnceLock::new();
        *PROCESS.get_or_init(|| {
            let settings = kiln_core::settings::Settings::process();
            Self::from_value(settings.vars().get(STRICT_TOOLCHAIN))
        })
    }

    /// The policy a value of `KILN_STRICT_TOOLCHAIN` names: strict for `1`, `true`,
    /// `yes`, `on`; otherwise the default (a value that is no boolean gives one
    /// warning: [`kiln_core::env::switch`]).
    pub fn from_value(value: Option<&std::ffi::OsStr>) -> ToolchainPolicy {
        if kiln_core::env::switch(STRICT_TOOLCHAIN, value, false) {
            ToolchainPolicy::Strict
        } else {
            ToolchainPolicy::Shipped
        }
    }
}

/// The header sets of a toolchain.
#[derive(Debug)]
enum Headers {
    /// Digests only, as a build recorded them.
    Recorded(BTreeMap<String, Digest>),
    /// This machine's: given directories, and CCCL located on first use.
    Local(Box<LocalHeaders>),
}

/// The header sets of a local toolchain.
#[derive(Debug)]
struct LocalHeaders {
    given: BTreeMap<String, IncludeDir>,
    search: SearchConfig,
    /// The standard sets ([`STANDARD_SETS`], in its order), each located and
    /// fingerprinted on first use.
    standard: [OnceLock<Result<IncludeDir, Arc<ToolchainError>>>; 2],
}

/// The NVRTC release and header sets that kernel requests are built for.
///
/// A *recorded* toolchain ([`Toolchain::recorded`]) stands for the one a library's
/// build used: its header sets are digests ([`IncludeDir::recorded`]) and it cannot
/// compile; deriving owners and keys with it touches no file. A *local* one
/// ([`Toolchain::local`]) is this machine's: its [`Compiler`] and header directories,
/// located and fingerprinted when first asked for.
#[derive(Debug)]
pub struct Toolchain {
    nvrtc: NvrtcVersion,
    compiler: Option<Compiler>,
    headers: Headers,
}

impl Toolchain {
    /// The newest toolchain `record` names; `None` when its build had no NVRTC.
    pub fn recorded(record: &BuildRecord) -> Option<Toolchain> {
        record.toolchains().first().map(Toolchain::from_record)
    }

    /// The toolchain `record` names: its NVRTC release and header digests.
    pub fn from_record(record: &ToolchainRecord) -> Toolchain {
        Toolchain {
            nvrtc: record.nvrtc.clone(),
            compiler: None,
            headers: Headers::Recorded(record.headers.clone()),
        }
    }

    /// A toolchain that only names requests: no compiler and no header set, so a
    /// request that needs headers cannot be built with it. For saying which
    /// kernels a build could not key.
    pub(crate) fn names_only() -> Toolchain {
        Toolchain {
            nvrtc: NvrtcVersion {
                major: 0,
                minor: 0,
                release: "0.0.0".into(),
            },
            compiler: None,
            headers: Headers::Recorded(BTreeMap::new()),
        }
    }

    /// This machine's toolchain: the process's NVRTC ([`Compiler::new`]: located,
    /// its release from the identity memo when possible), and header sets located
    /// from the environment when first asked for.
    ///
    /// # Errors
    /// [`ToolchainError::NvrtcNotFound`] (listing every place searched) and the errors of
    /// loading NVRTC to read its release.
    pub fn local() -> Result<Toolchain, ToolchainError> {
        let compiler = Compiler::new()?;
        let major = compiler.version().major;
        let vars = kiln_core::settings::Settings::process().vars();
        let headers = SearchConfig::from_env().of_cuda(major, true, &vars.lookup());
        Ok(Self::with_compiler(compiler, headers))
    }

    /// This machine's toolchain of CUDA major `major` ([`SearchConfig::for_cuda`]:
    /// NVRTC `major`.x and that major's header sets; with `main`, the unsuffixed
    /// header variables name its headers).
    ///
    /// # Errors
    /// As [`Toolchain::located`].
    pub fn local_of_major(major: u32, main: bool) -> Result<Toolchain, ToolchainError> {
        Self::located(SearchConfig::for_cuda(major, main))
    }

    /// The toolchain `config` finds: its NVRTC ([`Compiler::with_config`]) and,
    /// when first asked for, its header sets, searched for the NVRTC's CUDA major
    /// when `config` names none.
    ///
    /// # Errors
    /// [`ToolchainError::NvrtcNotFound`] (listing every place searched) and the errors of
    /// loading NVRTC to read its release.
    pub fn located(config: SearchConfig) -> Result<Toolchain, ToolchainError> {
        let compiler = Compiler::with_config(&config)?;
        let mut headers = config;
        headers.cuda_major = headers.cuda_major.or(Some(compiler.version().major));
        Ok(Self::with_compiler(compiler, headers))
    }

    /// A local toolchain on `compiler`, finding header sets through `search`.
    pub fn with_compiler(compiler: Compiler, search: SearchConfig) -> Toolchain {
        Toolchain {
            nvrtc: compiler.version().clone(),
            compiler: Some(compiler),
            headers: Headers::Local(Box::new(LocalHeaders {
                given: BTreeMap::new(),
                search,
                standard: Default::default(),
            })),
        }
    }

    /// The same local toolchain with header set `set` at `dir` (instead of locating
    /// it). On a recorded toolchain this changes nothing.
    pub fn with_header_set(mut self, set: impl Into<String>, dir: IncludeDir) -> Toolchain {
        if let Headers::Local(local) = &mut self.headers {
            let set = set.into();
            local.given.insert(set.clone(), dir.named(set));
        }
        self
    }

    /// The NVRTC release owners name.
    pub fn nvrtc(&self) -> &NvrtcVersion {
        &self.nvrtc
    }

    /// The compiler; `None` for a recorded toolchain.
    pub fn compiler(&self) -> Option<&Compiler> {
        self.compiler.as_ref()
    }

    /// Whether this is a recorded toolchain.
    pub fn is_recorded(&self) -> bool {
        matches!(self.headers, Headers::Recorded(_))
    }

    /// Header set `set` as an include directory, named `set`: the recorded digest, or
    /// the local directory (a standard set, [`CCCL`] or [`CUDA_RUNTIME`], located
    /// and fingerprinted once, on first use).
    ///
    /// # Errors
    /// [`ToolchainError::UnknownHeaderSet`] for a set neither recorded nor known here;
    /// [`ToolchainError::CcclNotFound`] or [`ToolchainError::CudaRuntimeNotFound`] (or an I/O error)
    /// when a standard set cannot be located or read.
    pub fn header_set(&self, set: &str) -> Result<IncludeDir, ToolchainError> {
        match &self.headers {
            Headers::Recorded(digests) => digests
                .get(set)
                .map(|digest| IncludeDir::recorded(set, *digest))
                .ok_or_else(|| ToolchainError::UnknownHeaderSet {
                    set: set.to_owned(),
                    why: "recorded by this library's build",
                }),
            Headers::Local(local) => {
                let LocalHeaders {
                    given,
                    search,
                    standard,
                } = &**local;
                if let Some(dir) = given.get(set) {
                    return Ok(dir.clone());
                }
                let Some(((name, locate), found)) = STANDARD_SETS
                    .iter()
                    .zip(standard)
                    .find(|((name, _), _)| *name == set)
                else {
                    return Err(ToolchainError::UnknownHeaderSet {
                        set: set.to_owned(),
                        why: "known on this machine",
                    });
                };
                let found = found.get_or_init(|| {
                    locate(search)
                        .and_then(IncludeDir::new)
                        .map(|dir| dir.named(*name))
                        .map_err(Arc::new)
                });
                found.clone().map_err(ToolchainError::Shared)
            }
        }
    }

    /// The CCCL headers ([`Toolchain::header_set`] of [`CCCL`]).
    ///
    /// # Errors
    /// As [`Toolchain::header_set`].
    pub fn cccl(&self) -> Result<IncludeDir, ToolchainError> {
        self.header_set(CCCL)
    }

    /// The CUDA runtime headers ([`Toolchain::header_set`] of [`CUDA_RUNTIME`]):
    /// `cuda_fp16.h`, `cuda_bf16.h`, `cuda_fp8.h`...
    ///
    /// # Errors
    /// As [`Toolchain::header_set`].
    pub fn cuda_runtime(&self) -> Result<IncludeDir, ToolchainError> {
        self.header_set(CUDA_RUNTIME)
    }

    /// Defines, in `cache`, `cuda.nvrtc` and `cuda.headers.<set>` at this toolchain's
    /// fingerprints (header sets that cannot be found here are left undefined): entries
    /// recorded with other values become stale (at merge) or are closed (already
    /// merged), so that only this toolchain's entries are served. What
    /// `KILN_STRICT_TOOLCHAIN=1` does; an application can also call it in
    /// `kiln::cache::init_with` to see such entries counted as stale in the init report.
    pub fn define_in(&self, cache: &Cache) {
        cache.define(NVRTC_DEP, nvrtc_fingerprint(&self.nvrtc));
        let sets: Vec<String> = match &self.headers {
            Headers::Recorded(digests) => digests.keys().cloned().collect(),
            Headers::Local(local) => local
                .given
                .keys()
                .cloned()
                .chain(STANDARD_SETS.iter().map(|(name, _)| (*name).to_owned()))
                .collect(),
        };
        for set in sets {
            if let Ok(dir) = self.header_set(&set) {
                cache.define(&format!("{HEADERS_DEP_PREFIX}{set}"), dir.digest());
            }
        }
    }
}

// A request's headers taken from a toolchain: here, so that `request.rs`
// needs no toolchain.
impl KernelRequest {
    /// What a `.cu` file written for nvcc expects on its include path: Kiln's C
    /// headers ([`KernelRequest::c_headers`]) and the CUDA runtime headers of
    /// `toolchain` (`cuda_fp16.h`, `cuda_bf16.h`, `cuda_fp8.h`:
    /// [`Toolchain::cuda_runtime`], the recorded
    /// digest or the local folder).
    ///
    /// # Errors
    /// As [`Toolchain::cuda_runtime`]: the runtime
    /// headers are neither recorded nor found here.
    pub fn nvcc_headers(self, toolchain: &Toolchain) -> Result<Self, ToolchainError> {
        Ok(self.c_headers().include_dir(toolchain.cuda_runtime()?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_refuse_what_they_cannot_mean() {
        let digest = Digest::of(b"headers");
        let record = BuildRecord::new("13.0.88".parse().unwrap())
            .with_cubin_targets(["sm_90", "sm_75", "sm_80", "sm_90"].map(|a| a.parse().unwrap()))
            .with_ptx_target(Some("sm_75".parse().unwrap()))
            .with_header_set(CCCL, digest);
        let text = record.to_string();
        assert_eq!(
            text,
            format!(
                "kiln-cuda-build/1 nvrtc=13.0.88 cubin=sm_75,sm_80,sm_90 ptx=sm_75 headers.cccl={}",
                digest.to_hex()
            )
        );
        assert_eq!(text.parse::<BuildRecord>().unwrap(), record);
        assert_eq!(
            record.cargo_directive(),
            format!("cargo::rustc-env=KILN_CUDA_BUILD={text}")
        );
        let multi: BuildRecord =
            "kiln-cuda-build/1 nvrtc=13.0.88 cubin=sm_75,sm_120 ptx=sm_120,sm_75"
                .parse()
                .unwrap();
        assert_eq!(
            multi.to_string(),
            "kiln-cuda-build/1 nvrtc=13.0.88 cubin=sm_75,sm_120 ptx=sm_75,sm_120"
        );
        assert_eq!(
            multi.ptx_target().map(|a| a.to_string()).as_deref(),
            Some("sm_75")
        );
        for bad in [
            "",
            "kiln-cuda-build/1 nvrtc=13.0.88 ptx=sm_75,",
            "kiln-cuda-build/3 nvrtc=13.0.88",
            "kiln-cuda-build/1 nvrtc=13.0.88 nvrtc=12.9.86",
            "kiln-cuda-build/1 driver=12.0 nvrtc=13.0.88",
            "kiln-cuda-build/2 driver=twelve nvrtc=13.0.88",
            "kiln-cuda-build/2 nvrtc=13.0.88 nvrtc=13.0.88",
            "kiln-cuda-build/1 nvrtc=13",
            "kiln-cuda-build/1 nvrtc=13.0.88 cubin=sm_75,compute_80",
            "kiln-cuda-build/1 nvrtc=13.0.88 arch=sm_75",
            "kiln-cuda-build/1 nvrtc=13.0.88 headers.cccl=abc",
            "kiln-cuda-build/1 nvrtc=13.0.88 headers.=00",
            "kiln-cuda-build/1 cubin=sm_75",
            "kiln-cuda-build/1 nvrtc",
        ] {
            assert!(
                matches!(
                    bad.parse::<BuildRecord>(),
                    Err(ToolchainError::BadBuildRecord { .. })
                ),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn records_of_two_toolchains_keep_each_one_newest_first() {
        let digest = Digest::of(b"cccl 12");
        let text = format!(
            "kiln-cuda-build/2 driver=12.2 nvrtc=12.9.86 cubin=sm_70,sm_50 ptx=sm_50 \
             headers.cccl={} nvrtc=13.0.88 cubin=sm_75 ptx=sm_75",
            digest.to_hex()
        );
        let record: BuildRecord = text.parse().unwrap();
        let releases: Vec<&str> = record
            .toolchains()
            .iter()
            .map(|t| t.nvrtc().release.as_str())
            .collect();
        assert_eq!(releases, ["13.0.88", "12.9.86"]);
        assert_eq!(record.toolchains()[1].header_set(CCCL), Some(digest));
        assert_eq!(record.toolchains()[0].header_set(CCCL), None);
        assert_eq!(record.oldest_driver(), 12020);
        assert_eq!(record.nvrtc().map(|v| v.release.as_str()), Some("13.0.88"));
        let again: BuildRecord = record.to_string().parse().unwrap();
        assert_eq!(again, record);
        assert!(
            record
                .to_string()
                .starts_with("kiln-cuda-build/2 driver=12.2 nvrtc=13.0.88 ")
        );
        // The default oldest driver: what the oldest toolchain's CUBINs load on.
        let default = record.clone().with_oldest_driver(None);
        assert_eq!(default.oldest_driver(), 12000);
        let one = BuildRecord::from_toolchains([record.toolchains()[0].clone()]);
        assert_eq!(one.oldest_driver(), 13000);
        assert!(one.to_string().starts_with("kiln-cuda-build/1 "));
        // Every toolchain keys with its own recorded header sets.
        let twelve = Toolchain::from_record(&record.toolchains()[1]);
        assert_eq!(twelve.cccl().unwrap().digest(), digest);
        assert!(
            Toolchain::from_record(&record.toolchains()[0])
                .cccl()
                .is_err()
        );
    }

    #[test]
    fn a_recorded_toolchain_knows_only_recorded_header_sets_and_cannot_compile() {
        let digest = Digest::of(b"cccl tree");
        let record = BuildRecord::new("13.0.88".parse().unwrap()).with_header_set(CCCL, digest);
        let toolchain = Toolchain::recorded(&record).unwrap();
        assert!(toolchain.is_recorded() && toolchain.compiler().is_none());
        let cccl = toolchain.cccl().unwrap();
        assert_eq!(
            (cccl.digest(), cccl.path(), cccl.set()),
            (digest, None, Some(CCCL))
        );
        assert!(matches!(
            toolchain.header_set("other"),
            Err(ToolchainError::UnknownHeaderSet { .. })
        ));
        assert!(Toolchain::recorded(&BuildRecord::default()).is_none());
    }

    #[test]
    fn the_policy_switch_is_a_run_time_switch_for_build_scripts() {
        assert!(
            kiln_core::settings::switches()
                .iter()
                .any(|s| s.name() == STRICT_TOOLCHAIN)
        );
        assert!(kiln_core::settings::is_run_time(STRICT_TOOLCHAIN));
        assert!(!kiln_core::settings::is_run_time("KILN_NVRTC"));
    }

    #[test]
    fn the_policy_switch_reads_like_every_kiln_switch() {
        use std::ffi::OsStr;
        assert_eq!(ToolchainPolicy::from_value(None), ToolchainPolicy::Shipped);
        for off in ["", "0", "false", "No", "off", "strict"] {
            assert_eq!(
                ToolchainPolicy::from_value(Some(OsStr::new(off))),
                ToolchainPolicy::Shipped
            );
        }
        for on in ["1", "true", "yes", "ON"] {
            assert_eq!(
                ToolchainPolicy::from_value(Some(OsStr::new(on))),
                ToolchainPolicy::Strict
            );
        }
    }
}
