//! Reading a switch's value, for the switches here and for every module
//! that reads one of its own (the trust policy's `KILN_REMOTE_WRITE`).

/// Whether a boolean switch's value turns it on: off when empty, `0`, `false`, `no`
/// or `off` (any case, surrounding spaces ignored), on for anything else.
pub fn is_on(value: &std::ffi::OsStr) -> bool {
    let value = value.to_string_lossy();
    let value = value.trim();
    !(value.is_empty()
        || value == "0"
        || ["false", "no", "off"]
            .iter()
            .any(|off| value.eq_ignore_ascii_case(off)))
}
