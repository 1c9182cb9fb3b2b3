//! Static bytes aligned as Kiln images require, for tests and benches of
//! `Image::from_static` and embedded images.

/// The alignment of an embedded image (`include_image!` embeds at 64 bytes).
pub const ALIGN: usize = 64;

/// `bytes` copied into leaked memory aligned to [`ALIGN`] (64) bytes: a
/// `&'static` slice standing in for an image embedded in the binary.
///
/// Each call leaks `bytes.len() + 64` bytes; meant for tests and benches.
pub fn leak_aligned(bytes: &[u8]) -> &'static [u8] {
    let buffer: &'static mut [u8] = Vec::leak(vec![0u8; bytes.len() + ALIGN]);
    let offset = buffer.as_ptr().addr().wrapping_neg() % ALIGN;
    let slot = &mut buffer[offset..offset + bytes.len()];
    slot.copy_from_slice(bytes);
    slot
}

#[cfg(test)]
mod tests {
    use super::{ALIGN, leak_aligned};

    #[test]
    fn the_copy_is_equal_and_aligned_whatever_its_length() {
        for len in [0, 1, 63, 64, 65, 1000] {
            let bytes: Vec<u8> = (0..len).map(|i| i as u8).collect();
            let leaked = leak_aligned(&bytes);
            assert_eq!(leaked, &bytes[..]);
            assert_eq!(leaked.as_ptr().addr() % ALIGN, 0, "length {len}");
        }
    }
}
