"""doctor, round 16 (issue 63): the newest AMD stack's own messages (p16d) - TheRock's rocm_sdk wheels, amd-smi,
rocminfo and rocm_agent_enumerator, HIP's error strings, AMD's package installs (amdgpu-install, amdgpu-dkms, apt and
dnf), HIP on Windows and the kernel's SMU notice - each in a paste of our own, worded or placed otherwise than the
probe that found it; the negatives keep each reading out of pastes it does not fit."""

from __future__ import annotations

from test_doctor_paraphrases import reading_tests

# (paste, family, phrases the fix must say)
READINGS = [
    # a ComfyUI venv where torch came from TheRock's index with --no-deps
    ("pip install --no-deps --index-url https://rocm.nightlies.amd.com/v2/gfx120X-all/ torch\npython main.py\n"
     "  File \"/home/me/ComfyUI/venv/lib/python3.12/site-packages/torch/_rocm_init.py\", line 12, in <module>\n"
     "ModuleNotFoundError: Missing required rocm libraries. Please refer to Python setup instructions, reinstall your "
     "virtual environment, or attempt to install manually via `pip install rocm[libraries]`", "rocm-libs-missing",
     ["rocm[libraries]", "without --no-deps"]),
    # a half-upgraded set of rocm-sdk wheels (hipblaslt this time, from rocm_sdk.find_libraries)
    (">>> import rocm_sdk; rocm_sdk.find_libraries('hipblaslt')\nFileNotFoundError: Could not find rocm library "
     "'hipblaslt' at path '/opt/venv/lib/python3.11/site-packages/_rocm_sdk_libraries_gfx1151/lib,' no match for "
     "pattern 'libhipblaslt.so*'", "rocm-libs-missing", ["--force-reinstall", "same version"]),
    # a preload list left in a profile
    ("~/.bashrc: export ROCM_SDK_PRELOAD_LIBRARIES=\"amdhip64;rocsolverx\"\nRuntimeError: Could not preload "
     "libraries from environment variable ROCM_SDK_PRELOAD_LIBRARIES='amdhip64;rocsolverx'. Check this environment "
     "variable and unset it if not correct/needed.", "env-not-applied", ["unset ROCM_SDK_PRELOAD_LIBRARIES"]),
    # torch of one nightly on rocm wheels of another, raised as an error
    ("RuntimeError: The program was compiled against a ROCm version matching '7\\.9\\.0rc20251008' but the installed "
     "ROCm version in this Python environment is 7.10.0a20251115.", "abi-mismatch", ["one index", "never pip install -U rocm"]),
    # the sdist picking a family the index lacks
    ("export ROCM_SDK_TARGET_FAMILY=gfx950-dcgpu\npip install --index-url https://rocm.nightlies.amd.com/v2/"
     "gfx94X-dcgpu/ rocm\n  ValueError: Requested ROCM_SDK_TARGET_FAMILY=gfx950-dcgpu is not available in the "
     "distribution (available: gfx94X-dcgpu)", "wheel-platform", ["index of the GPU's own family", "device-gfx"]),
    # rocm[devel] in the system Python of a container
    ("RUN pip install --break-system-packages --index-url https://rocm.nightlies.amd.com/v2/gfx110X-all/ "
     "'rocm[libraries,devel]'\n$ rocm-sdk path --root\nCannot expand the `rocm[devel]` package because it was not "
     "installed by a user-mode package manager and is managed by the system.", "rocm-libs-missing", ["venv"]),
    # amd-smi with the driver not initialised, three lines
    ("$ amd-smi list\nERROR:root:Unable to get devices, driver not initialized (amdgpu not found in modules)\n"
     "ERROR:root:Unable to detect any GPU devices, check amdgpu version and module status (sudo modprobe amdgpu)",
     "driver", ["sudo modprobe amdgpu", "lsmod | grep amdgpu"]),
    # the library's own status from a Python script
    ("import amdsmi; amdsmi.amdsmi_init()\namdsmi.amdsmi_exception.AmdSmiLibraryException: Error code:\n\t34 | "
     "AMDSMI_STATUS_DRIVER_NOT_LOADED - Driver not loaded", "driver", ["lsmod | grep amdgpu"]),
    # a power cap that needs root
    ("$ amd-smi set --power-cap 250 -g 0\nAMDSMI has returned error '-10' - 'AMDSMI_STATUS_NO_PERM - Permission "
     "Denied'", "device-access", ["sudo amd-smi"]),
    # amdsmi in a venv with the PyPI package and no library
    ("(venv) $ python monitor.py\n  File \"/home/u/venv/lib/python3.12/site-packages/amdsmi/amdsmi_wrapper.py\", line "
     "183\nUnable to find amdsmi library try installing amd-smi-lib from your package manager", "rocm-libs-missing",
     ["amd-smi-lib", "/opt/rocm/share/amd_smi"]),
    # rocminfo on a kernel that could not start an RX 9070
    ("$ lspci | grep VGA\n03:00.0 VGA compatible controller: Advanced Micro Devices, Inc. [AMD/ATI] Navi 48 "
     "[Radeon RX 9070 XT]\n$ rocminfo\nROCk module is NOT live, possibly no GPU devices", "driver",
     ["dmesg", "linux-firmware"]),
    # a 192-thread build of a HIP project
    ("cmake --build build --parallel 384\n[ 12%] Building HIP object ...\nTimeout querying rocminfo.  Are you "
     "compiling with more than 254 threads?\nclang: error: cannot determine amdgcn architecture", "device-access",
     ["--offload-arch=", "-DAMDGPU_TARGETS="]),
    # the override value too large for rocm_agent_enumerator
    ("HSA_OVERRIDE_GFX_VERSION=110.0.0 rocm_agent_enumerator\nInvalid HSA_OVERRIDE_GFX_VERSION value\ngfx000",
     "override-wrong", ["unset HSA_OVERRIDE_GFX_VERSION"]),
    # torch's hipified wording of hipErrorNoDevice
    ("torch 2.8.0+rocm6.4\n>>> torch.randn(2, device='cuda')\nRuntimeError: HIP error: no ROCm-capable device is "
     "detected", "visibility", ["ls -l /dev/kfd"]),
    # the error name from a C++ HIP program
    ("./saxpy\nerror: 'hipErrorInsufficientDriver'(35) at saxpy.cpp:42", "driver", ["amdgpu-install --usecase=dkms",
                                                                                  "Adrenalin"]),
    # ECC on an MI250X
    ("AMD Instinct MI250X\n  File \"train.py\", line 210, in step\nRuntimeError: HIP error: uncorrectable ECC error "
     "encountered\nCompile with `TORCH_USE_HIP_DSA` to enable device-side assertions.", "gpu-hang",
     ["amd-smi bad-pages", "dmesg"]),
    # a Triton config too big for an RX 7900
    ("GPU: Radeon RX 7900 XTX (gfx1100)\nhipErrorLaunchOutOfResources while launching _attn_fwd", "gpu-unsupported",
     ["num_warps"]),
    # HIP torn down after the job (next step only)
    ("Traceback (most recent call last):\nKeyboardInterrupt\nException ignored in: <function _Stream.__del__>\n"
     "RuntimeError: HIP error: driver shutting down", "gpu-hang", ["above"]),
    # amdgpu-install on KDE neon
    ("$ sudo amdgpu-install -y --usecase=graphics,rocm\nUnsupported OS: /etc/os-release ID 'neon'",
     "wheel-platform", ["UBUNTU_CODENAME"]),
    # the DKMS module of ROCm 6.4 on a 6.17 kernel
    ("Setting up amdgpu-dkms (1:6.12.12.60400-2147987.24.04) ...\nError! The /var/lib/dkms/amdgpu/6.12.12-2147987."
     "24.04/source/dkms.conf for module amdgpu includes a BUILD_EXCLUSIVE directive which does not match this "
     "kernel/arch/config.\nThis indicates that it should not be built.", "driver", ["--no-dkms", "uname -r"]),
    # a package name without AMD's repository
    ("$ sudo apt install hip-runtime-amd rocminfo\nReading package lists... Done\nE: Unable to locate package "
     "hip-runtime-amd", "rocm-libs-missing", ["lsb_release -cs", "apt update"]),
    # the jammy installer on noble
    ("$ lsb_release -cs\nnoble\nThe following packages have unmet dependencies:\n amdgpu-install : Depends: "
     "python3.10 but it is not installable\nE: Unable to correct problems, you have held broken packages.",
     "wheel-platform", ["lsb_release -cs", "apt purge amdgpu-install"]),
    # Rocky 9 without EPEL/CRB
    ("$ sudo dnf install rocm\nError:\n Problem: package rocm-developer-tools-7.1.0 requires hipcc, but none of the "
     "providers can be installed\n  - nothing provides perl-URI-Encode needed by hipcc-1.1.1.70100-20.el9.x86_64",
     "rocm-libs-missing", ["crb", "epel-release"]),
    # two ROCm releases in apt's sources
    ("$ sudo apt install rocm\n rocm-developer-tools : Depends: rocprofiler (= 2.0.70100.70100-20~24.04) but "
     "2.0.60400.60400-47~24.04 is to be installed", "wheel-platform", ["keep one release", "7.1"]),
    # hipInfo on Windows
    ("C:\\> \"C:\\Program Files\\AMD\\ROCm\\6.4\\bin\\hipInfo.exe\"\nhipGetDeviceCount: hipErrorNoDevice",
     "driver", ["Adrenalin", "hipInfo.exe"]),
    # the SMU notice pasted alone from a journal
    ("Jan 12 09:14:02 box kernel: amdgpu 0000:0c:00.0: amdgpu: SMU driver if version not matched\nJan 12 09:14:02 "
     "box kernel: amdgpu 0000:0c:00.0: amdgpu: SMU is initialized successfully!", "driver", ["nothing to fix"]),
]

NEGATIVES = [
    # CUDA's driver/runtime mismatch is no Adrenalin update
    ("RuntimeError: CUDA error: CUDA driver version is insufficient for CUDA runtime version", "Adrenalin"),
    # CUDA's ECC error is no amd-smi reading
    ("RuntimeError: CUDA error: uncorrectable ECC error encountered", "amd-smi bad-pages"),
    # the distribution's own ROCm packages are not two AMD releases
    (" rocm-hip-runtime : Depends: rocminfo (= 1.0.0.50400-72~22.04) but 5.0.0-1 is to be installed",
     "keep one release"),
    # MIOpen's renamed kernel package is not a missing repository
    ("E: Unable to locate package miopenkernels-gfx1030-36kdb", "amdgpu-install_7.1"),
    # another module's DKMS exclusion is no amdgpu advice
    ("Error! The /var/lib/dkms/bbswitch/0.8/6.1.0-3-amd64/x86_64/dkms.conf for module bbswitch includes a "
     "BUILD_EXCLUSIVE directive which does not match this kernel/arch/config.", "--no-dkms"),
    # another project's Perl dependencies are no ROCm repository advice
    ("  - nothing provides perl(Crypt::CBC) needed by xCAT-server-4:2.17.0-snap202408280000.noarch",
     "codeready-builder"),
    # HIP finding no device on Linux is no Windows driver reading
    ("$ ./hipInfo\nhipGetDeviceCount failed: hipErrorNoDevice", "Adrenalin"),
    # rocminfo's NOT loaded is the driver rule's, not amd-smi's
    ("$ rocminfo\nROCk module is NOT loaded, possibly no GPU devices", "update amd-smi"),
    # a page fault beside the SMU notice is the page fault, not "nothing to fix"
    ("amdgpu 0000:03:00.0: amdgpu: SMU driver if version not matched\namdgpu 0000:03:00.0: amdgpu: [gfxhub] page "
     "fault (src_id:0 ring:24 vmid:3 pasid:32769, for process python pid 4242)", "nothing to fix"),
]

test_reads, test_pastings, test_negatives = reading_tests(READINGS, NEGATIVES)
