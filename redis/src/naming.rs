//! Redis key names: `<namespace>:v3:<owner hex>:<key hex>`.
//!
//! The owner digest comes first so that one owner's entries share a prefix
//! (`SCAN MATCH kiln:v3:<owner>:*` lists them, `UNLINK` clears them after a
//! compiler upgrade). `v3` is the layout of the value (a one-entry kiln
//! image of format 5, whose signature may be a batch signature; `v2` held
//! format 4, `v1` format 3); a change of layout changes it, so old and new clients sharing
//! a server never read, refuse and overwrite each other's values.

use kiln_image::Digest;

/// The version of the value layout, part of every key name.
const LAYOUT: &str = "v3";

/// The Redis key of the entry `(owner, key)`.
pub(super) fn entry_key(namespace: &str, owner: &Digest, key: &Digest) -> String {
    format!("{namespace}:{LAYOUT}:{owner}:{key}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owner_then_key_in_hex() {
        let owner = Digest([0xab; 32]);
        let key = Digest([0x01; 32]);
        assert_eq!(
            entry_key("kiln", &owner, &key),
            format!("kiln:v3:{}:{}", "ab".repeat(32), "01".repeat(32))
        );
    }

    #[test]
    fn owner_and_key_are_not_interchangeable() {
        let (a, b) = (Digest::of(b"a"), Digest::of(b"b"));
        assert_ne!(entry_key("kiln", &a, &b), entry_key("kiln", &b, &a));
        assert_ne!(entry_key("kiln", &a, &b), entry_key("other", &a, &b));
    }
}
