//! What a CUBIN's ELF header says: the GPU arch it was built for. Reads a few
//! fixed header fields of any bytes, never more: a check that a shipped CUBIN is
//! what its entry claims.
//!
//! NVIDIA's CUBINs are ELF64 files (`e_machine` 190, `EM_CUDA`) whose `e_flags`
//! carry the SM number: in its low byte for the older layout (ELF ABI version 7,
//! what NVRTC 12 writes for sm_50 to sm_90), in its second byte for the newer one
//! (ABI version 8: NVRTC 13, and NVRTC 12.9 from sm_100 on). The `a`/`f` suffix is
//! not reliably recorded there, so only the number is read.
//!
//! ```
//! // The first 64 bytes of an NVRTC 13 CUBIN for sm_90 (its ELF header).
//! let mut header = [0u8; 64];
//! header[..4].copy_from_slice(b"\x7fELF");
//! header[4] = 2; // 64-bit
//! header[8] = 8; // ABI version 8
//! header[0x12] = 190; // EM_CUDA
//! header[0x30..0x34].copy_from_slice(&0x0600_5a04u32.to_le_bytes());
//! assert_eq!(kiln_cuda::cubin::sm(&header), Some(90));
//! assert_eq!(kiln_cuda::cubin::sm(b"not a cubin"), None);
//! ```

/// `EM_CUDA`.
const EM_CUDA: u16 = 190;

/// The SM number (compute capability × 10: `90` for sm_90) a CUBIN's ELF header
/// names; `None` for bytes that are not a 64-bit little-endian CUDA ELF file of a
/// known layout.
pub fn sm(bytes: &[u8]) -> Option<u32> {
    if bytes.len() < 64 || &bytes[..4] != b"\x7fELF" || bytes[4] != 2 || bytes[5] > 1 {
        return None;
    }
    let machine = u16::from_le_bytes([bytes[0x12], bytes[0x13]]);
    if machine != EM_CUDA {
        return None;
    }
    let flags = u32::from_le_bytes([bytes[0x30], bytes[0x31], bytes[0x32], bytes[0x33]]);
    match bytes[8] {
        7 => Some(flags & 0xff),
        8 => Some((flags >> 8) & 0xff),
        _ => None,
    }
}
