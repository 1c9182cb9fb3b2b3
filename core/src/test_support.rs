//! Helpers shared by the crate's unit tests.

/// `bytes` copied into leaked storage aligned to 64 bytes, as `include_image!`
/// embeds an image: a `&'static` slice the image reader accepts.
pub(crate) fn leak_aligned(bytes: &[u8]) -> &'static [u8] {
    #[derive(Clone, Copy)]
    #[repr(C, align(64))]
    struct Block([u8; 64]);
    let blocks: &'static mut [Block] = Vec::leak(vec![Block([0; 64]); bytes.len().div_ceil(64)]);
    let len = blocks.len() * 64;
    // SAFETY: `Block` is 64 plain bytes without padding, so the leaked
    // blocks are `len` initialized bytes; nothing else refers to them.
    let all: &'static mut [u8] =
        unsafe { std::slice::from_raw_parts_mut(blocks.as_mut_ptr().cast(), len) };
    all[..bytes.len()].copy_from_slice(bytes);
    &all[..bytes.len()]
}
