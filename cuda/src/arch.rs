//! GPU architectures: `sm_XX`, `sm_XXa` (arch-specific) and `sm_XXf` (family).
//!
//! The arch is part of the [`Owner`](kiln_core::Owner): a CUBIN built for `sm_90a` is not
//! the same artifact as one built for `sm_90`, so the suffix is never dropped.

use std::fmt;
use std::str::FromStr;

/// A GPU architecture name or capability that Kiln cannot compile for: what
/// [`Arch`]'s constructors and parser return
/// ([`Error::InvalidArch`](crate::Error::InvalidArch) in the crate's error).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid GPU architecture {given:?}: {why}")]
pub struct InvalidArch {
    /// What was given.
    pub given: String,
    /// What is wrong with it.
    pub why: &'static str,
}

/// The feature-set suffix of an architecture name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ArchSuffix {
    /// `sm_90`: portable within the major version (a newer minor runs it).
    None,
    /// `sm_90a`: arch-specific features; runs only on exactly this arch.
    Specific,
    /// `sm_100f`: family-specific features; runs on the family (same major).
    Family,
}

/// An exact GPU architecture such as `sm_90a`, the target of one CUBIN.
///
/// ```
/// use kiln_cuda::Arch;
/// let arch: Arch = "sm_90a".parse()?;
/// assert_eq!((arch.major(), arch.minor()), (9, 0));
/// assert_eq!(arch.to_string(), "sm_90a");
/// assert_eq!(arch.virtual_name(), "compute_90a");
/// # Ok::<(), kiln_cuda::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Arch {
    major: u32,
    minor: u32,
    suffix: ArchSuffix,
}

impl Arch {
    /// An architecture from its compute capability and suffix.
    ///
    /// Fails for capabilities below 5.0 (not supported by current NVRTC) or a minor
    /// version above 9.
    ///
    /// # Errors
    /// [`InvalidArch`] for a capability below 5.0 or a minor version
    /// above 9.
    pub fn new(major: u32, minor: u32, suffix: ArchSuffix) -> Result<Self, InvalidArch> {
        let given = || format!("{major}.{minor}");
        if !(5..=99).contains(&major) {
            return Err(InvalidArch {
                given: given(),
                why: "the major compute capability must be between 5 and 99",
            });
        }
        if minor > 9 {
            return Err(InvalidArch {
                given: given(),
                why: "the minor compute capability is a single digit",
            });
        }
        Ok(Self {
            major,
            minor,
            suffix,
        })
    }

    /// The plain (portable) arch of a device's compute capability, e.g. `(8, 6)` gives
    /// `sm_86`.
    ///
    /// # Errors
    /// [`InvalidArch`] when the capability is negative or not an arch
    /// (see [`Arch::new`]).
    pub fn from_capability(major: i32, minor: i32) -> Result<Self, InvalidArch> {
        let convert = |v: i32| {
            u32::try_from(v).map_err(|_| InvalidArch {
                given: format!("{major}.{minor}"),
                why: "a compute capability is never negative",
            })
        };
        Self::new(convert(major)?, convert(minor)?, ArchSuffix::None)
    }

    /// The plain arch of a capability of Kiln's own tables (`select::KNOWN_GPUS`,
    /// whose unit test checks each against [`Arch::new`]).
    pub(crate) const fn known(major: u32, minor: u32) -> Self {
        Self {
            major,
            minor,
            suffix: ArchSuffix::None,
        }
    }

    /// The same capability with another suffix: `sm_90` → `sm_90a`.
    pub fn with_suffix(self, suffix: ArchSuffix) -> Self {
        Self { suffix, ..self }
    }

    /// Major compute capability (9 for `sm_90a`).
    pub fn major(&self) -> u32 {
        self.major
    }

    /// Minor compute capability (0 for `sm_90a`).
    pub fn minor(&self) -> u32 {
        self.minor
    }

    /// The suffix (`a`, `f` or none).
    pub fn suffix(&self) -> ArchSuffix {
        self.suffix
    }

    /// The virtual architecture whose PTX this arch compiles from: `compute_90a`.
    pub fn virtual_name(&self) -> String {
        format!("compute_{}{}{}", self.major, self.minor, self.suffix_str())
    }

    /// Whether a CUBIN built for `self` runs on a device of compute capability
    /// `(major, minor)`.
    ///
    /// CUDA's rules: a plain CUBIN (`sm_86`) runs on the same major with an equal or
    /// newer minor (8.6, 8.7, 8.8, 8.9), never on another major; a family CUBIN
    /// (`sm_100f`) runs on the members of its family, the same major with an equal or
    /// newer minor (10.0 and 10.3); an arch-specific one (`sm_90a`) only on exactly
    /// its compute capability.
    pub fn cubin_runs_on(&self, major: u32, minor: u32) -> bool {
        match self.suffix {
            ArchSuffix::Specific => (self.major, self.minor) == (major, minor),
            ArchSuffix::None | ArchSuffix::Family => self.major == major && self.minor <= minor,
        }
    }

    /// Whether PTX built for `self` can be JIT-compiled by the driver for a device of
    /// compute capability `(major, minor)`.
    ///
    /// Plain PTX runs on every equal or newer arch; `a` and `f` PTX only where their
    /// CUBIN would.
    pub fn ptx_runs_on(&self, major: u32, minor: u32) -> bool {
        match self.suffix {
            ArchSuffix::None => (self.major, self.minor) <= (major, minor),
            ArchSuffix::Specific | ArchSuffix::Family => self.cubin_runs_on(major, minor),
        }
    }

    fn suffix_str(&self) -> &'static str {
        match self.suffix {
            ArchSuffix::None => "",
            ArchSuffix::Specific => "a",
            ArchSuffix::Family => "f",
        }
    }
}

impl fmt::Display for Arch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sm_{}{}{}", self.major, self.minor, self.suffix_str())
    }
}

impl FromStr for Arch {
    type Err = InvalidArch;

    /// Parses `sm_XY`, `sm_XYa`, `sm_XYf` (X one or more digits, Y one digit).
    fn from_str(s: &str) -> Result<Self, InvalidArch> {
        let invalid = |why| InvalidArch {
            given: s.to_owned(),
            why,
        };
        let Some(rest) = s.strip_prefix("sm_") else {
            return Err(invalid(
                "expected sm_XY, sm_XYa or sm_XYf (a real arch: a CUBIN needs one)",
            ));
        };
        let (digits, suffix) = match rest.as_bytes().last() {
            Some(b'a') => (&rest[..rest.len() - 1], ArchSuffix::Specific),
            Some(b'f') => (&rest[..rest.len() - 1], ArchSuffix::Family),
            _ => (rest, ArchSuffix::None),
        };
        if digits.len() < 2 || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return Err(invalid("expected at least two digits after sm_"));
        }
        let (major, minor) = digits.split_at(digits.len() - 1);
        let major = major
            .parse()
            .map_err(|_| invalid("major compute capability out of range"))?;
        let minor = minor
            .parse()
            .map_err(|_| invalid("minor compute capability out of range"))?;
        Self::new(major, minor, suffix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_prints_every_suffix() {
        for s in ["sm_80", "sm_86", "sm_90a", "sm_100f", "sm_120a"] {
            let arch: Arch = s.parse().unwrap();
            assert_eq!(arch.to_string(), s);
        }
        let a: Arch = "sm_100f".parse().unwrap();
        assert_eq!(
            (a.major(), a.minor(), a.suffix()),
            (10, 0, ArchSuffix::Family)
        );
    }

    #[test]
    fn rejects_virtual_and_malformed_names() {
        for s in [
            "compute_90",
            "sm_9",
            "sm_",
            "sm_90b",
            "sm_x0",
            "sm_30",
            "90",
        ] {
            assert!(matches!(s.parse::<Arch>(), Err(InvalidArch { .. })), "{s}");
        }
    }

    #[test]
    fn the_crate_error_shows_the_same_message() {
        let invalid = "sm_9".parse::<Arch>().unwrap_err();
        let message = invalid.to_string();
        assert_eq!(
            message,
            "invalid GPU architecture \"sm_9\": expected at least two digits after sm_"
        );
        assert_eq!(crate::Error::from(invalid).to_string(), message);
    }

    #[test]
    fn compatibility_follows_the_suffix() {
        let plain: Arch = "sm_80".parse().unwrap();
        assert!(plain.cubin_runs_on(8, 6));
        assert!(!plain.cubin_runs_on(9, 0));
        assert!(plain.ptx_runs_on(9, 0));
        let specific: Arch = "sm_90a".parse().unwrap();
        assert!(specific.cubin_runs_on(9, 0));
        assert!(!specific.ptx_runs_on(10, 0));
    }

    #[test]
    fn cubins_run_where_cuda_says_and_nowhere_else() {
        let devices = [
            (7, 5),
            (8, 0),
            (8, 6),
            (8, 7),
            (8, 9),
            (9, 0),
            (10, 0),
            (10, 3),
            (11, 0),
            (12, 0),
            (12, 1),
        ];
        // Each CUBIN and the devices it runs on.
        let table: [(&str, &[(u32, u32)]); 10] = [
            ("sm_75", &[(7, 5)]),
            ("sm_80", &[(8, 0), (8, 6), (8, 7), (8, 9)]),
            ("sm_86", &[(8, 6), (8, 7), (8, 9)]),
            ("sm_90", &[(9, 0)]),
            ("sm_90a", &[(9, 0)]),
            ("sm_100", &[(10, 0), (10, 3)]),
            ("sm_100a", &[(10, 0)]),
            ("sm_100f", &[(10, 0), (10, 3)]),
            ("sm_103f", &[(10, 3)]),
            ("sm_120f", &[(12, 0), (12, 1)]),
        ];
        for (cubin, runs_on) in table {
            let arch: Arch = cubin.parse().unwrap();
            for device in devices {
                assert_eq!(
                    arch.cubin_runs_on(device.0, device.1),
                    runs_on.contains(&device),
                    "{cubin} on {}.{}",
                    device.0,
                    device.1
                );
            }
        }
        // PTX of a plain arch JITs for every newer arch, of any major.
        let ptx: Arch = "sm_75".parse().unwrap();
        assert!(
            devices
                .iter()
                .all(|&(major, minor)| ptx.ptx_runs_on(major, minor))
        );
        assert!(!ptx.ptx_runs_on(7, 2));
        let family: Arch = "sm_100f".parse().unwrap();
        assert!(family.ptx_runs_on(10, 3) && !family.ptx_runs_on(12, 0));
    }
}
