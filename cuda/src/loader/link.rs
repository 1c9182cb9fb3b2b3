//! The driver calls that turn bytes into code: `cuModuleLoadData` of a CUBIN or
//! PTX, and the driver's linker (`cuLinkCreate`, `cuLinkAddData`,
//! `cuLinkComplete`), which JIT-compiles PTX into a CUBIN that can be kept. PTX
//! reaches the driver only once checked ([`checked_ptx`]): no NUL inside, and a
//! driver new enough for the compiler named in its banner.

use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaModule};
use cudarc::nvrtc::Ptx;

use super::driver::{driver, driver_version};
use crate::jit::JitTarget;
use crate::loader::error::LoadError;
use crate::select::cuda_version_text;

/// `cuModuleLoadData` of a CUBIN or NUL-terminated PTX.
pub(super) fn load_image(
    ctx: &Arc<CudaContext>,
    image: Vec<u8>,
    what: &str,
    name: &str,
) -> Result<Arc<CudaModule>, LoadError> {
    ctx.load_module(Ptx::from_binary(image))
        .map_err(driver(format!("loading the {what} of {name}")))
}

/// The PTX, NUL-terminated, once checked: no NUL inside, and a driver new
/// enough for the compiler named in its banner.
pub(super) fn checked_ptx(name: &str, bytes: &[u8]) -> Result<Vec<u8>, LoadError> {
    if bytes.contains(&0) {
        return Err(LoadError::InteriorNul {
            what: format!("the PTX of {name}"),
        });
    }
    if let Some((major, minor)) = ptx_compiler_release(bytes) {
        let needed = i32::try_from(major * 1000 + minor * 10).unwrap_or(i32::MAX);
        let found = driver_version()?;
        if found < needed {
            return Err(LoadError::DriverTooOldForPtx {
                name: name.to_owned(),
                ptx_release: cuda_version_text(needed),
                driver: found,
            });
        }
    }
    // The driver reads PTX up to its NUL terminator.
    let mut text = Vec::with_capacity(bytes.len() + 1);
    text.extend_from_slice(bytes);
    text.push(0);
    Ok(text)
}

/// The bytes of the driver's error log.
const JIT_LOG_BYTES: usize = 16 * 1024;

/// The CUBIN the driver's JIT makes of NUL-terminated `ptx` for the current
/// device of `ctx` (`cuLinkCreate`, `cuLinkAddData`, `cuLinkComplete`).
pub(super) fn link_ptx(
    ctx: &Arc<CudaContext>,
    ptx: &[u8],
    name: &str,
    target: &JitTarget,
) -> Result<Vec<u8>, LoadError> {
    use cudarc::driver::sys;
    use std::ffi::c_void;

    ctx.bind_to_thread().map_err(driver(
        "making the context current to JIT-compile".to_owned(),
    ))?;
    let refused = |status: sys::CUresult, log: &[u8]| {
        let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
        let text = String::from_utf8_lossy(&log[..end]).trim().to_owned();
        LoadError::Jit {
            name: name.to_owned(),
            target: target.to_string(),
            status,
            log: if text.is_empty() {
                "(empty)".to_owned()
            } else {
                text
            },
        }
    };
    // Declared before the link state, so it outlives it (the driver writes the
    // log until the state is destroyed).
    let mut log = vec![0u8; JIT_LOG_BYTES];
    let mut options = [
        sys::CUjit_option::CU_JIT_ERROR_LOG_BUFFER,
        sys::CUjit_option::CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
    ];
    // The size is passed in the pointer's bits, as the driver API specifies.
    let mut values: [*mut c_void; 2] = [log.as_mut_ptr().cast(), JIT_LOG_BYTES as *mut c_void];
    let mut state: sys::CUlinkState = std::ptr::null_mut();
    // SAFETY: two options with their values (a writable buffer of
    // JIT_LOG_BYTES bytes that outlives the state, and its size), arrays of
    // that length; `state` is written once on success.
    let status = unsafe {
        sys::cuLinkCreate_v2(
            options.len() as u32,
            options.as_mut_ptr(),
            values.as_mut_ptr(),
            &mut state,
        )
    };
    if status != sys::CUresult::CUDA_SUCCESS {
        return Err(refused(status, &log));
    }
    let state = LinkState(state);
    // SAFETY: `ptx` is NUL-terminated PTX (checked_ptx or an extract with its
    // NUL) that the driver only reads during the call; the name is a
    // NUL-terminated literal; no options.
    let status = unsafe {
        sys::cuLinkAddData_v2(
            state.0,
            sys::CUjitInputType::CU_JIT_INPUT_PTX,
            ptx.as_ptr().cast_mut().cast(),
            ptx.len(),
            c"kiln.ptx".as_ptr(),
            0,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
        )
    };
    if status != sys::CUresult::CUDA_SUCCESS {
        return Err(refused(status, &log));
    }
    let mut cubin: *mut c_void = std::ptr::null_mut();
    let mut size = 0usize;
    // SAFETY: both out-pointers are valid for one write each.
    let status = unsafe { sys::cuLinkComplete(state.0, &mut cubin, &mut size) };
    if status != sys::CUresult::CUDA_SUCCESS || cubin.is_null() {
        return Err(refused(status, &log));
    }
    // SAFETY: on success the driver owns `size` readable bytes at `cubin`
    // until the state is destroyed (below, after the copy).
    let bytes = unsafe { std::slice::from_raw_parts(cubin.cast::<u8>(), size) }.to_vec();
    drop(state);
    Ok(bytes)
}

/// A link state, destroyed on drop.
struct LinkState(cudarc::driver::sys::CUlinkState);

impl Drop for LinkState {
    fn drop(&mut self) {
        // SAFETY: the state came from a successful cuLinkCreate and is destroyed
        // once; the status is ignored (nothing to do about a failed cleanup).
        let _ = unsafe { cudarc::driver::sys::cuLinkDestroy(self.0) };
    }
}

/// The compiler release in the banner of PTX (`// Cuda compilation tools, release
/// 13.0, V13.0.88`): `(13, 0)`.
fn ptx_compiler_release(ptx: &[u8]) -> Option<(u32, u32)> {
    let head = String::from_utf8_lossy(&ptx[..ptx.len().min(1024)]);
    let at = head.find(", release ")? + ", release ".len();
    let (major, rest) = head[at..].split_once('.')?;
    let minor: String = rest.chars().take_while(char::is_ascii_digit).collect();
    Some((major.trim().parse().ok()?, minor.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ptx_banner_names_its_compiler_release() {
        let ptx = b"//\n// Generated by NVIDIA NVVM Compiler\n//\n// Compiler Build ID: CL-36424714\n\
                    // Cuda compilation tools, release 13.0, V13.0.88\n// Based on NVVM 7.0.1\n//\n\n\
                    .version 9.0\n.target sm_75\n";
        assert_eq!(ptx_compiler_release(ptx), Some((13, 0)));
        assert_eq!(ptx_compiler_release(b".version 9.0\n"), None);
        assert_eq!(
            ptx_compiler_release(b"// Cuda compilation tools, release 12.10, V12.10.1"),
            Some((12, 10))
        );
    }
}
