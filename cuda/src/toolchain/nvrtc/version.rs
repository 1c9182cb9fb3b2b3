//! The exact NVRTC version, and reading one back from its text.

/// A string that is not an NVRTC release (`13.0.88`): what parsing an
/// [`NvrtcVersion`] returns ([`ToolchainError::InvalidNvrtcVersion`](crate::ToolchainError::InvalidNvrtcVersion)
/// in the crate's error).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{given:?} is not an NVRTC release; give major.minor.patch, e.g. \"13.0.88\"")]
pub struct InvalidNvrtcVersion {
    /// What was given.
    pub given: String,
}

/// The exact NVRTC version: `nvrtcVersion`'s major.minor plus the build number from
/// the compiler's own banner (`V13.0.88`), so that a patch release changes the owner.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct NvrtcVersion {
    /// Major version (13).
    pub major: u32,
    /// Minor version (0).
    pub minor: u32,
    /// The full release as the compiler prints it (`13.0.88`); `major.minor` when the
    /// banner cannot be read.
    pub release: String,
}

impl std::str::FromStr for NvrtcVersion {
    type Err = InvalidNvrtcVersion;

    /// Parses a release as [`NvrtcVersion::release`] spells it (`13.0.88`), e.g. one
    /// recorded when images were built.
    ///
    /// ```
    /// use kiln_cuda::toolchain::NvrtcVersion;
    /// let v: NvrtcVersion = "13.0.88".parse()?;
    /// assert_eq!((v.major, v.minor, v.release.as_str()), (13, 0, "13.0.88"));
    /// assert!("13".parse::<NvrtcVersion>().is_err());
    /// # Ok::<(), kiln_cuda::Error>(())
    /// ```
    fn from_str(release: &str) -> Result<Self, InvalidNvrtcVersion> {
        let invalid = || InvalidNvrtcVersion {
            given: release.to_owned(),
        };
        let mut parts = release.split('.');
        let mut number = || -> Result<u32, InvalidNvrtcVersion> {
            let part = parts.next().ok_or_else(invalid)?;
            if part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit()) {
                return Err(invalid());
            }
            part.parse().map_err(|_| invalid())
        };
        let (major, minor, _patch) = (number()?, number()?, number()?);
        if parts.next().is_some() {
            return Err(invalid());
        }
        Ok(NvrtcVersion {
            major,
            minor,
            release: release.to_owned(),
        })
    }
}

impl std::fmt::Display for NvrtcVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.release)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_crate_error_shows_the_same_message() {
        let invalid = "13.0".parse::<NvrtcVersion>().unwrap_err();
        let message = invalid.to_string();
        assert_eq!(
            message,
            "\"13.0\" is not an NVRTC release; give major.minor.patch, e.g. \"13.0.88\""
        );
        assert_eq!(crate::Error::from(invalid).to_string(), message);
    }
}
