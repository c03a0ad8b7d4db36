//! Every kernel file compiles with NVRTC: CI has no GPU, but it installs the
//! NVRTC library from PyPI (`nvidia-cuda-nvrtc-cu12`) and sets
//! `ONYX_REQUIRE_NVRTC=1`, so a kernel that does not compile fails CI.

use onyx_cuda::compile::{Target, compile, nvrtc_present, nvrtc_version};
use onyx_kernels::Kernel;

#[test]
fn every_kernel_file_compiles_to_ptx_for_hopper_and_ampere() {
    if !nvrtc_present() {
        assert!(
            std::env::var_os("ONYX_REQUIRE_NVRTC").is_none(),
            "ONYX_REQUIRE_NVRTC is set but libnvrtc was not found on LD_LIBRARY_PATH"
        );
        eprintln!(
            "skipping: libnvrtc was not found (set LD_LIBRARY_PATH to a CUDA or PyPI NVRTC lib dir)"
        );
        return;
    }
    eprintln!("NVRTC {:?}", nvrtc_version());
    let mut failures = Vec::new();
    for &k in Kernel::ALL {
        for target in [Target::Ptx(9, 0), Target::Ptx(8, 0)] {
            match compile(k, target) {
                Ok(ptx) => {
                    let text = String::from_utf8_lossy(&ptx);
                    assert!(text.contains(".entry"), "{} produced no entry points", k.file());
                }
                Err(e) => failures.push(e.to_string()),
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}
