//! [`Target`]: the platform cargo builds the library for, as a build script
//! sees it through cargo's variables.

/// The platform a build script builds for, from cargo's variables: the
/// triple (`TARGET`) and every `CARGO_CFG_*` value (`target_arch`,
/// `target_os`, `target_feature`, `target_pointer_width`, `unix`, ...).
///
/// In a build script `cfg!(target_arch = ..)` describes the host the script
/// runs on; this describes the target, which is what the library's
/// `cfg!(target_arch = ..)` sees. A compiler whose code depends on the CPU
/// it runs on (a JIT to machine code, a DFA laid out for the pointer width)
/// builds its owner or key from this; one whose target is a device (a GPU
/// arch, a shader model) names that device instead.
///
/// ```
/// use kiln_core::build::Target;
///
/// let vars = [
///     ("TARGET", "aarch64-unknown-linux-gnu"),
///     ("CARGO_CFG_TARGET_ARCH", "aarch64"),
///     ("CARGO_CFG_TARGET_OS", "linux"),
///     ("CARGO_CFG_TARGET_FEATURE", "neon,sve"),
///     ("CARGO_CFG_UNIX", ""),
///     ("PATH", "/usr/bin"),
/// ];
/// let target = Target::from_vars(vars.map(|(k, v)| (k.to_owned(), v.to_owned()))).unwrap();
/// assert_eq!(target.triple(), "aarch64-unknown-linux-gnu");
/// assert_eq!((target.arch(), target.os()), ("aarch64", "linux"));
/// assert!(target.has_feature("sve") && !target.has_feature("avx2"));
/// assert_eq!(target.cfg("unix"), Some(&[][..]));
/// assert_eq!(target.cfg("windows"), None);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    triple: String,
    /// `CARGO_CFG_<NAME>` as `name` (lowercase) → its comma-separated values.
    cfg: std::collections::BTreeMap<String, Vec<String>>,
}

impl Target {
    /// The target described by `vars` (name, value pairs as in a build
    /// script's environment): `TARGET` and the `CARGO_CFG_*` variables;
    /// `None` without `TARGET`.
    pub fn from_vars(vars: impl IntoIterator<Item = (String, String)>) -> Option<Target> {
        let mut triple = None;
        let mut cfg = std::collections::BTreeMap::new();
        for (name, value) in vars {
            if name == "TARGET" {
                triple = Some(value);
            } else if let Some(key) = name.strip_prefix("CARGO_CFG_") {
                let values = value
                    .split(',')
                    .filter(|v| !v.is_empty())
                    .map(str::to_owned)
                    .collect();
                cfg.insert(key.to_ascii_lowercase(), values);
            }
        }
        Some(Target {
            triple: triple?,
            cfg,
        })
    }

    /// The target triple, e.g. `x86_64-unknown-linux-gnu`.
    pub fn triple(&self) -> &str {
        &self.triple
    }

    /// The values of the `cfg` `name` (`"target_arch"`, `"target_feature"`,
    /// `"unix"`, ...): `None` when it is not set, an empty slice for a `cfg`
    /// without values (`unix`).
    pub fn cfg(&self, name: &str) -> Option<&[String]> {
        self.cfg.get(name).map(Vec::as_slice)
    }

    /// `target_arch` (`x86_64`, `aarch64`, `nvptx64`, ...), empty if unknown.
    pub fn arch(&self) -> &str {
        self.first("target_arch")
    }

    /// `target_os` (`linux`, `macos`, `windows`, `none`, ...), empty if unknown.
    pub fn os(&self) -> &str {
        self.first("target_os")
    }

    /// Whether `target_feature` includes `feature` (`avx2`, `neon`, ...), as
    /// enabled for this build (`-C target-cpu`, `-C target-feature`).
    pub fn has_feature(&self, feature: &str) -> bool {
        self.cfg("target_feature")
            .is_some_and(|features| features.iter().any(|f| f == feature))
    }

    fn first(&self, name: &str) -> &str {
        self.cfg(name)
            .and_then(|values| values.first())
            .map_or("", String::as_str)
    }
}
