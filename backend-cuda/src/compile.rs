//! Run-time compilation of the kernel files with NVRTC.
//!
//! A kernel file is compiled once per context for the device's own
//! architecture (`sm_90` on an H200: machine code, not generic PTX), and the
//! resulting cubin is cached on disk keyed by the source hash, the
//! architecture and the NVRTC version, so later processes skip NVRTC.

use std::ffi::{CString, c_char, c_int};
use std::path::PathBuf;

use cudarc::nvrtc::{result as nvrtc, sys as nvrtc_sys};
use onyx_kernels::{HEADERS, Kernel};
use sha2::{Digest, Sha256};

/// What NVRTC should produce.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// Machine code for a real architecture, e.g. `(9, 0)` → `sm_90`.
    Cubin(i32, i32),
    /// Virtual-architecture PTX, e.g. `(9, 0)` → `compute_90` (used to check sources without a GPU).
    Ptx(i32, i32),
}

impl Target {
    fn arch(self) -> String {
        match self {
            Target::Cubin(a, b) => format!("sm_{a}{b}"),
            Target::Ptx(a, b) => format!("compute_{a}{b}"),
        }
    }
}

/// A failed compilation, with NVRTC's log.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct CompileError(pub String);

/// Whether the NVRTC library can be loaded.
pub fn nvrtc_present() -> bool {
    // SAFETY: only tries to dlopen the library under its candidate names.
    unsafe { nvrtc_sys::is_culib_present() }
}

/// NVRTC's version, `(major, minor)`.
pub fn nvrtc_version() -> Option<(i32, i32)> {
    if !nvrtc_present() {
        return None;
    }
    let (mut major, mut minor) = (0 as c_int, 0 as c_int);
    // SAFETY: two valid out-pointers; the library is present (checked above).
    let r = unsafe { nvrtc_sys::nvrtcVersion(&mut major, &mut minor) };
    (r == nvrtc_sys::nvrtcResult::NVRTC_SUCCESS).then_some((major, minor))
}

/// Compiles one kernel file with NVRTC and returns the cubin or PTX bytes.
///
/// # Errors
/// The NVRTC log when the source does not compile, or a message when NVRTC is missing.
pub fn compile(kernel: Kernel, target: Target) -> Result<Vec<u8>, CompileError> {
    if !nvrtc_present() {
        return Err(CompileError("the NVRTC library (libnvrtc) was not found".into()));
    }
    let err =
        |what: &str, e: nvrtc::NvrtcError| CompileError(format!("{what} {}: {e:?}", kernel.file()));
    let src = CString::new(kernel.source()).expect("kernel sources hold no NUL");
    let name = CString::new(kernel.file()).expect("file names hold no NUL");
    let sources: Vec<CString> =
        HEADERS.iter().map(|h| CString::new(h.1).expect("headers hold no NUL")).collect();
    let names: Vec<CString> =
        HEADERS.iter().map(|h| CString::new(h.0).expect("header names hold no NUL")).collect();
    let headers: Vec<*const c_char> = sources.iter().map(|c| c.as_ptr()).collect();
    let include_names: Vec<*const c_char> = names.iter().map(|c| c.as_ptr()).collect();
    let mut prog = std::mem::MaybeUninit::uninit();
    // SAFETY: every pointer is a live NUL-terminated string for the whole call
    // (`sources` and `names` outlive it), and both arrays hold `HEADERS.len()`
    // entries, as passed.
    let r = unsafe {
        nvrtc_sys::nvrtcCreateProgram(
            prog.as_mut_ptr(),
            src.as_ptr(),
            name.as_ptr(),
            HEADERS.len() as i32,
            headers.as_ptr(),
            include_names.as_ptr(),
        )
    };
    r.result().map_err(|e| err("creating the NVRTC program for", e))?;
    // SAFETY: nvrtcCreateProgram succeeded, so the handle is initialized.
    let prog = unsafe { prog.assume_init() };
    let options = [
        format!("--gpu-architecture={}", target.arch()),
        "--std=c++17".to_string(),
        "-default-device".to_string(),
    ];
    // SAFETY: `prog` is a live program created above and destroyed below.
    let compiled = unsafe { nvrtc::compile_program(prog, &options) };
    let out = match compiled {
        Ok(()) => match target {
            // SAFETY: `prog` compiled successfully for a real architecture.
            Target::Cubin(..) => unsafe { cubin(prog) }.map_err(|e| err("reading the cubin of", e)),
            // SAFETY: `prog` compiled successfully.
            Target::Ptx(..) => unsafe { nvrtc::get_ptx(prog) }
                .map(|p| p.into_iter().map(|c| c as u8).collect())
                .map_err(|e| err("reading the PTX of", e)),
        },
        Err(e) => {
            // SAFETY: `prog` is live; the log is valid after a failed compile.
            let log = unsafe { nvrtc::get_program_log(prog) }
                .map(|l| l.into_iter().map(|c| c as u8 as char).collect::<String>())
                .unwrap_or_default();
            Err(CompileError(format!(
                "NVRTC could not compile {} for {} ({e:?}):\n{}",
                kernel.file(),
                target.arch(),
                log.trim_end_matches('\0').trim()
            )))
        }
    };
    // SAFETY: `prog` is live and not used after this.
    let _ = unsafe { nvrtc::destroy_program(prog) };
    out
}

/// # Safety
/// `prog` must be a live program compiled for a real architecture.
unsafe fn cubin(prog: nvrtc_sys::nvrtcProgram) -> Result<Vec<u8>, nvrtc::NvrtcError> {
    let mut size = 0usize;
    // SAFETY: guaranteed by the caller; `size` is a valid out-pointer.
    unsafe { nvrtc_sys::nvrtcGetCUBINSize(prog, &mut size) }.result()?;
    let mut bytes = vec![0u8; size];
    // SAFETY: `bytes` holds exactly the size NVRTC reported.
    unsafe { nvrtc_sys::nvrtcGetCUBIN(prog, bytes.as_mut_ptr().cast()) }.result()?;
    Ok(bytes)
}

/// The on-disk cache folder: `$ONYX_CUDA_CACHE`, else `$XDG_CACHE_HOME/onyx/cuda`,
/// else `~/.cache/onyx/cuda`. `ONYX_CUDA_CACHE=off` disables it.
fn cache_dir() -> Option<PathBuf> {
    match std::env::var_os("ONYX_CUDA_CACHE") {
        Some(v) if v == "off" => None,
        Some(v) => Some(PathBuf::from(v)),
        None => std::env::var_os("XDG_CACHE_HOME")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
            .map(|d| d.join("onyx").join("cuda")),
    }
}

/// The cache key of a kernel: its source and headers, the target and the NVRTC version.
fn cache_key(kernel: Kernel, target: Target, version: (i32, i32)) -> String {
    let mut h = Sha256::new();
    h.update(kernel.source());
    for (_, source) in HEADERS {
        h.update(source);
    }
    h.update(format!("{}|nvrtc {}.{}", target.arch(), version.0, version.1));
    let digest = h.finalize();
    let hex: String = digest.iter().take(16).map(|b| format!("{b:02x}")).collect();
    format!("{}-{}-{hex}.cubin", kernel.file().trim_end_matches(".cu"), target.arch())
}

/// Compiles a kernel file for a real architecture, through the disk cache.
///
/// # Errors
/// As [`compile`].
pub fn cubin_cached(kernel: Kernel, major: i32, minor: i32) -> Result<Vec<u8>, CompileError> {
    let target = Target::Cubin(major, minor);
    let version = nvrtc_version()
        .ok_or_else(|| CompileError("the NVRTC library (libnvrtc) was not found".into()))?;
    let path = cache_dir().map(|d| d.join(cache_key(kernel, target, version)));
    if let Some(bytes) = path.as_ref().and_then(|p| std::fs::read(p).ok()) {
        return Ok(bytes);
    }
    let bytes = compile(kernel, target)?;
    if let Some(p) = path {
        // A cache that cannot be written only costs a recompilation next time.
        let tmp = p.with_extension(format!("tmp{}", std::process::id()));
        let written = p.parent().map(std::fs::create_dir_all).transpose().is_ok()
            && std::fs::write(&tmp, &bytes).is_ok()
            && std::fs::rename(&tmp, &p).is_ok();
        if !written {
            log::debug!("could not write the kernel cache at {}", p.display());
        }
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_keys_change_with_the_architecture_and_the_nvrtc_version() {
        let a = cache_key(Kernel::Elementwise, Target::Cubin(9, 0), (13, 0));
        let b = cache_key(Kernel::Elementwise, Target::Cubin(8, 0), (13, 0));
        let c = cache_key(Kernel::Elementwise, Target::Cubin(9, 0), (12, 9));
        assert!(a.starts_with("elementwise-sm_90-"));
        assert_ne!(a, b);
        assert_ne!(a, c);
    }
}
