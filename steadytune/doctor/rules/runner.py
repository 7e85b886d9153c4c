"""Every rule, run over one paste: the family modules register themselves on import; the diagnoses come back
best first."""

from __future__ import annotations

from steadytune.doctor.error_lines import ErrorLine
from steadytune.doctor.facts import FactSheet
from steadytune.doctor.rules.base import Context, Diagnosis, RULES, _restate

# the family modules register their rules when imported, in this order (the order breaks ties between diagnoses)
import steadytune.doctor.rules.variables  # noqa: E402,F401
# round 20 (r20a): a hosted notebook's CPU runtime comes before any reading of the user's own machine
import steadytune.doctor.rules.machine.notebook_runtimes  # noqa: E402,F401
import steadytune.doctor.rules.arch.overrides  # noqa: E402,F401
import steadytune.doctor.rules.arch.own_cuda_builds  # noqa: E402,F401
import steadytune.doctor.rules.arch.arch_missing  # noqa: E402,F401
import steadytune.doctor.rules.arch.crash_unnamed  # noqa: E402,F401
import steadytune.doctor.rules.arch.nccl  # noqa: E402,F401
import steadytune.doctor.rules.arch.gpu_unsupported  # noqa: E402,F401
import steadytune.doctor.rules.arch.tool_floor  # noqa: E402,F401
import steadytune.doctor.rules.arch.target_lists  # noqa: E402,F401
import steadytune.doctor.rules.arch.prebuilt_floor  # noqa: E402,F401
import steadytune.doctor.rules.arch.card_floors  # noqa: E402,F401
import steadytune.doctor.rules.arch.tool_floors  # noqa: E402,F401
import steadytune.doctor.rules.arch.kernel_errors  # noqa: E402,F401
import steadytune.doctor.rules.arch.vendor_only  # noqa: E402,F401
import steadytune.doctor.rules.arch.contrib_extensions  # noqa: E402,F401
import steadytune.doctor.rules.arch.no_compiler_target  # noqa: E402,F401
import steadytune.doctor.rules.arch.release_added  # noqa: E402,F401
import steadytune.doctor.rules.arch.tensorrt_archs  # noqa: E402,F401
import steadytune.doctor.rules.arch.triton_mma  # noqa: E402,F401
import steadytune.doctor.rules.arch.release_dropped  # noqa: E402,F401
import steadytune.doctor.rules.arch.kfd_process_vm  # noqa: E402,F401
import steadytune.doctor.rules.arch.kpack_archives  # noqa: E402,F401
import steadytune.doctor.rules.arch.therock_native  # noqa: E402,F401
import steadytune.doctor.rules.arch.ggml_prebuilt  # noqa: E402,F401
import steadytune.doctor.rules.arch.ollama_rocm_drops  # noqa: E402,F401
import steadytune.doctor.rules.access.container_runtimes  # noqa: E402,F401
import steadytune.doctor.rules.access.kubernetes_gpus  # noqa: E402,F401
import steadytune.doctor.rules.access.slurm_devices  # noqa: E402,F401
import steadytune.doctor.rules.access.container_ldconfig  # noqa: E402,F401
import steadytune.doctor.rules.access.enroot_hooks  # noqa: E402,F401
import steadytune.doctor.rules.access.enroot_devices  # noqa: E402,F401
import steadytune.doctor.rules.arch.source_builds  # noqa: E402,F401
import steadytune.doctor.rules.arch.release_regressions  # noqa: E402,F401
import steadytune.doctor.rules.arch.build_asks  # noqa: E402,F401
import steadytune.doctor.rules.arch.capability_range  # noqa: E402,F401
import steadytune.doctor.rules.arch.arch_guards  # noqa: E402,F401
import steadytune.doctor.rules.arch.ollama_windows  # noqa: E402,F401
import steadytune.doctor.rules.arch.windows_rocblas  # noqa: E402,F401
import steadytune.doctor.rules.arch.cpu_floor  # noqa: E402,F401
import steadytune.doctor.rules.arch.framework_cuda  # noqa: E402,F401
import steadytune.doctor.rules.arch.hashcat_backends  # noqa: E402,F401
import steadytune.doctor.rules.arch.nvrtc_targets  # noqa: E402,F401
import steadytune.doctor.rules.arch.tinygrad_backends  # noqa: E402,F401
import steadytune.doctor.rules.arch.op_floors  # noqa: E402,F401
import steadytune.doctor.rules.arch.capability_extensions  # noqa: E402,F401
import steadytune.doctor.rules.arch.kokkos_arch  # noqa: E402,F401
import steadytune.doctor.rules.arch.jetson_boards  # noqa: E402,F401
import steadytune.doctor.rules.arch.fp8_hardware  # noqa: E402,F401
import steadytune.doctor.rules.arch.app_images  # noqa: E402,F401
# round 19 (r19c): a floor the library's message states, ChatGLM's quantize kernels, pre-Turing GPUs and CUDA 13 builds
import steadytune.doctor.rules.arch.stated_floors  # noqa: E402,F401
import steadytune.doctor.rules.arch.quantize_kernels  # noqa: E402,F401
import steadytune.doctor.rules.arch.legacy_cuda_build  # noqa: E402,F401
# Paddle's builds: its own messages name the build to take
import steadytune.doctor.rules.install.paddle_builds  # noqa: E402,F401
import steadytune.doctor.rules.access.device_files  # noqa: E402,F401
import steadytune.doctor.rules.access.runtime_package  # noqa: E402,F401
import steadytune.doctor.rules.access.wsl_limits  # noqa: E402,F401
import steadytune.doctor.rules.access.rocdxg_symbols  # noqa: E402,F401
import steadytune.doctor.rules.access.amd_install_pages  # noqa: E402,F401
import steadytune.doctor.rules.access.amdgpu_repos  # noqa: E402,F401
import steadytune.doctor.rules.access.ollama_cuda_runners  # noqa: E402,F401
import steadytune.doctor.rules.access.hip_entry_points  # noqa: E402,F401
import steadytune.doctor.rules.access.uvm_module  # noqa: E402,F401
import steadytune.doctor.rules.access.nixos_kernel  # noqa: E402,F401
import steadytune.doctor.rules.access.udocker_gpus  # noqa: E402,F401
import steadytune.doctor.rules.access.toolkit_checks  # noqa: E402,F401
import steadytune.doctor.rules.access.wsl  # noqa: E402,F401
import steadytune.doctor.rules.access.wsl_tools  # noqa: E402,F401
import steadytune.doctor.rules.access.wsl_container_init  # noqa: E402,F401
import steadytune.doctor.rules.access.wsl_image_libs  # noqa: E402,F401
import steadytune.doctor.rules.access.cuda_python  # noqa: E402,F401
import steadytune.doctor.rules.access.driver_features  # noqa: E402,F401
import steadytune.doctor.rules.access.app_drivers  # noqa: E402,F401
import steadytune.doctor.rules.access.validated_drivers  # noqa: E402,F401
import steadytune.doctor.rules.access.toolkit_driver_floor  # noqa: E402,F401
import steadytune.doctor.rules.access.driver  # noqa: E402,F401
import steadytune.doctor.rules.access.driver_packages  # noqa: E402,F401
import steadytune.doctor.rules.access.driver_mismatches  # noqa: E402,F401
import steadytune.doctor.rules.access.ptx_toolchain  # noqa: E402,F401
import steadytune.doctor.rules.access.driver_regressions  # noqa: E402,F401
import steadytune.doctor.rules.access.adrenalin_regressions  # noqa: E402,F401
import steadytune.doctor.rules.access.rocr_regressions  # noqa: E402,F401
import steadytune.doctor.rules.access.apu_copy_faults  # noqa: E402,F401
import steadytune.doctor.rules.access.open_modules  # noqa: E402,F401
import steadytune.doctor.rules.access.podman_cdi_dirs  # noqa: E402,F401
import steadytune.doctor.rules.access.cdi_specs  # noqa: E402,F401
import steadytune.doctor.rules.access.driver_state  # noqa: E402,F401
import steadytune.doctor.rules.access.driver_checks  # noqa: E402,F401
import steadytune.doctor.rules.access.inbox_driver  # noqa: E402,F401

import steadytune.doctor.rules.access.vulkan_loader  # noqa: E402,F401
import steadytune.doctor.rules.access.egl_contexts  # noqa: E402,F401
import steadytune.doctor.rules.install.amdsmi_releases  # noqa: E402,F401
import steadytune.doctor.rules.libraries  # noqa: E402,F401
import steadytune.doctor.rules.install.cudnn8_crash  # noqa: E402,F401
import steadytune.doctor.rules.install.bnb_binaries  # noqa: E402,F401
import steadytune.doctor.rules.releases  # noqa: E402,F401
import steadytune.doctor.rules.install.onnxruntime_source_builds  # noqa: E402,F401
import steadytune.doctor.rules.install.torch_build  # noqa: E402,F401
import steadytune.doctor.rules.install.cuda_index_on_amd  # noqa: E402,F401
import steadytune.doctor.rules.install.aarch64_torch  # noqa: E402,F401
import steadytune.doctor.rules.install.jetson_builds  # noqa: E402,F401
import steadytune.doctor.rules.install.torch_cuda  # noqa: E402,F401
import steadytune.doctor.rules.install.cpu_torch_index  # noqa: E402,F401
import steadytune.doctor.rules.install.cargo_features  # noqa: E402,F401
import steadytune.doctor.rules.install.cuda_said_missing  # noqa: E402,F401
import steadytune.doctor.rules.install.resolver_swap  # noqa: E402,F401
import steadytune.doctor.rules.install.nightlies  # noqa: E402,F401
import steadytune.doctor.rules.install.successors  # noqa: E402,F401
import steadytune.doctor.rules.install.no_deps  # noqa: E402,F401
import steadytune.doctor.rules.install.overlapping_packages  # noqa: E402,F401
import steadytune.doctor.rules.install.option_values  # noqa: E402,F401
import steadytune.doctor.rules.install.broken_releases  # noqa: E402,F401
import steadytune.doctor.rules.install.library_name_errors  # noqa: E402,F401
import steadytune.doctor.rules.install.rocm_dll_releases  # noqa: E402,F401
import steadytune.doctor.rules.install.zluda_hip_release  # noqa: E402,F401
import steadytune.doctor.rules.install.compile_backend  # noqa: E402,F401
import steadytune.doctor.rules.install.companion_index  # noqa: E402,F401
import steadytune.doctor.rules.install.requirements_torch  # noqa: E402,F401
import steadytune.doctor.rules.install.program_torch  # noqa: E402,F401
import steadytune.doctor.rules.install.app_torch  # noqa: E402,F401
import steadytune.doctor.rules.install.app_rocm_pins  # noqa: E402,F401
import steadytune.doctor.rules.install.rocm_runtime_mismatch  # noqa: E402,F401
import steadytune.doctor.rules.install.nixos_channels  # noqa: E402,F401
import steadytune.doctor.rules.install.webui_backend_flags  # noqa: E402,F401
import steadytune.doctor.rules.install.directml_releases  # noqa: E402,F401
import steadytune.doctor.rules.install.hidden_imports  # noqa: E402,F401
import steadytune.doctor.rules.install.wheels  # noqa: E402,F401
import steadytune.doctor.rules.install.platform_requests  # noqa: E402,F401
import steadytune.doctor.rules.install.jetson_wheels  # noqa: E402,F401
import steadytune.doctor.rules.install.pacman_sync  # noqa: E402,F401
import steadytune.doctor.rules.install.conda_virtual_packages  # noqa: E402,F401
import steadytune.doctor.rules.install.installer_index  # noqa: E402,F401
import steadytune.doctor.rules.install.strix_wheels  # noqa: E402,F401
import steadytune.doctor.rules.install.deepspeed_probes  # noqa: E402,F401
# the fine-tuning libraries' own pages (round 17's library_pages.py, one module each since round 18)
import steadytune.doctor.rules.install.bnb_cpu_torch  # noqa: E402,F401
import steadytune.doctor.rules.install.ninja_builds  # noqa: E402,F401
import steadytune.doctor.rules.install.flash_attn_rocm  # noqa: E402,F401
import steadytune.doctor.rules.install.extension_lock  # noqa: E402,F401
import steadytune.doctor.rules.install.unsloth_amd  # noqa: E402,F401
import steadytune.doctor.rules.install.xformers_torch_pin  # noqa: E402,F401
import steadytune.doctor.rules.machine.consumer_p2p  # noqa: E402,F401
import steadytune.doctor.rules.install.engine_releases  # noqa: E402,F401
import steadytune.doctor.rules.install.tensorrt_engines  # noqa: E402,F401
import steadytune.doctor.rules.arch.engine_devices  # noqa: E402,F401
import steadytune.doctor.rules.install.ctranslate2_builds  # noqa: E402,F401
import steadytune.doctor.rules.install.twin_packages  # noqa: E402,F401
import steadytune.doctor.rules.install.companion_pins  # noqa: E402,F401
import steadytune.doctor.rules.install.cuda_libraries  # noqa: E402,F401
import steadytune.doctor.rules.install.stale_install  # noqa: E402,F401
import steadytune.doctor.rules.install.ptxas  # noqa: E402,F401
import steadytune.doctor.rules.install.nvcc_mix  # noqa: E402,F401
import steadytune.doctor.rules.install.os_release  # noqa: E402,F401
import steadytune.doctor.rules.install.nightly_regression  # noqa: E402,F401
import steadytune.doctor.rules.install.build_isolation  # noqa: E402,F401
import steadytune.doctor.rules.install.shadowed_torch  # noqa: E402,F401
import steadytune.doctor.rules.install.abi  # noqa: E402,F401
import steadytune.doctor.rules.install.tensile_path  # noqa: E402,F401
import steadytune.doctor.rules.install.hip_sdk_found  # noqa: E402,F401
import steadytune.doctor.rules.install.zluda_sdk_release  # noqa: E402,F401
import steadytune.doctor.rules.install.hip_sdk_installer  # noqa: E402,F401
import steadytune.doctor.rules.install.driver_mounts  # noqa: E402,F401
import steadytune.doctor.rules.install.nvrtc_builtins  # noqa: E402,F401
import steadytune.doctor.rules.install.tensorflow_libraries  # noqa: E402,F401
import steadytune.doctor.rules.install.framework_cuda_builds  # noqa: E402,F401
import steadytune.doctor.rules.install.cudnn_headers  # noqa: E402,F401
import steadytune.doctor.rules.install.cudnn_windows  # noqa: E402,F401
import steadytune.doctor.rules.install.onnxruntime_cuda  # noqa: E402,F401
import steadytune.doctor.rules.install.dgl_builds  # noqa: E402,F401
import steadytune.doctor.rules.install.pyg_wheels  # noqa: E402,F401
import steadytune.doctor.rules.install.cuda_stubs  # noqa: E402,F401
import steadytune.doctor.rules.install.rocm_package_renames  # noqa: E402,F401
import steadytune.doctor.rules.install.jax_local_cuda  # noqa: E402,F401
# round 20 (r20a): ahead of the missing-library readings, which would install the CUDA runtime on an AMD machine
import steadytune.doctor.rules.install.cuda_tools_on_amd  # noqa: E402,F401
import steadytune.doctor.rules.install.libraries_missing  # noqa: E402,F401
# round 19 (r19b): the linker's cache after a source install, a container's links to the host driver
import steadytune.doctor.rules.install.linker_cache  # noqa: E402,F401
import steadytune.doctor.rules.install.container_driver_links  # noqa: E402,F401
# round 18 (r18a): apt and ROCm's layout, rocminfo's kmod, source builds' headers and paths, DLLs and runtimes
import steadytune.doctor.rules.install.stale_hip_path  # noqa: E402,F401
import steadytune.doctor.rules.install.rocm_apt_sources  # noqa: E402,F401
import steadytune.doctor.rules.install.rocminfo_kmod  # noqa: E402,F401
import steadytune.doctor.rules.install.te_source_builds  # noqa: E402,F401
import steadytune.doctor.rules.install.rocblas_headers  # noqa: E402,F401
import steadytune.doctor.rules.install.directml_dll  # noqa: E402,F401
import steadytune.doctor.rules.install.opencl_runtime  # noqa: E402,F401
import steadytune.doctor.rules.install.zluda_releases  # noqa: E402,F401
import steadytune.doctor.rules.install.therock_packaging  # noqa: E402,F401
import steadytune.doctor.rules.install.extension_builds  # noqa: E402,F401
import steadytune.doctor.rules.install.jit_kernels  # noqa: E402,F401
import steadytune.doctor.rules.install.bundle_releases  # noqa: E402,F401
import steadytune.doctor.rules.install.openmm_platforms  # noqa: E402,F401
import steadytune.doctor.rules.install.colmap_builds  # noqa: E402,F401
import steadytune.doctor.rules.install.spconv_builds  # noqa: E402,F401
import steadytune.doctor.rules.install.gpu_names  # noqa: E402,F401
import steadytune.doctor.rules.install.bundled_libraries  # noqa: E402,F401
import steadytune.doctor.rules.install.program_runtimes  # noqa: E402,F401
import steadytune.doctor.rules.install.nccl_library  # noqa: E402,F401
import steadytune.doctor.rules.install.nccl_headers  # noqa: E402,F401
import steadytune.doctor.rules.install.lmstudio_backends  # noqa: E402,F401
import steadytune.doctor.rules.install.programs  # noqa: E402,F401
import steadytune.doctor.rules.install.vulkan_headers  # noqa: E402,F401
import steadytune.doctor.rules.install.vulkan_images  # noqa: E402,F401
import steadytune.doctor.rules.install.vc_runtime  # noqa: E402,F401
import steadytune.doctor.rules.install.cxx_headers  # noqa: E402,F401
import steadytune.doctor.rules.install.ggml_cpu_builds  # noqa: E402,F401
# round 19 (r19d): desktop image / video apps' packaging on Windows and the Python a package went into
import steadytune.doctor.rules.install.triton_windows_dlls  # noqa: E402,F401
import steadytune.doctor.rules.install.pinokio_bin  # noqa: E402,F401
import steadytune.doctor.rules.install.other_python  # noqa: E402,F401
# round 19 (r19c): TensorFlow 1.x's cuDNN builds, CuPy installed twice, CUDA extensions left out, a system cuDNN first
import steadytune.doctor.rules.install.tensorflow_cudnn_builds  # noqa: E402,F401
import steadytune.doctor.rules.install.cupy_packages  # noqa: E402,F401
import steadytune.doctor.rules.install.skipped_extensions  # noqa: E402,F401
import steadytune.doctor.rules.install.system_cudnn  # noqa: E402,F401
import steadytune.doctor.rules.install.extra_index_torch  # noqa: E402,F401
import steadytune.doctor.rules.machine.visibility  # noqa: E402,F401
import steadytune.doctor.rules.machine.late_visibility  # noqa: E402,F401
import steadytune.doctor.rules.machine.visibility_uuids  # noqa: E402,F401
import steadytune.doctor.rules.machine.rocm_build_enumeration  # noqa: E402,F401
import steadytune.doctor.rules.machine.gpu_selection  # noqa: E402,F401
import steadytune.doctor.rules.machine.apu_memory  # noqa: E402,F401
import steadytune.doctor.rules.machine.mps_memory  # noqa: E402,F401
import steadytune.doctor.rules.machine.platform  # noqa: E402,F401
import steadytune.doctor.rules.machine.xgmi_bridge  # noqa: E402,F401
import steadytune.doctor.rules.machine.rccl_releases  # noqa: E402,F401
import steadytune.doctor.rules.machine.rccl_host_driver  # noqa: E402,F401
import steadytune.doctor.rules.machine.peer_access  # noqa: E402,F401
import steadytune.doctor.rules.machine.numa_balancing  # noqa: E402,F401
import steadytune.doctor.rules.machine.multi_gpu  # noqa: E402,F401
import steadytune.doctor.rules.machine.ray_nccl  # noqa: E402,F401
import steadytune.doctor.rules.machine.nccl_watchdog_faults  # noqa: E402,F401
import steadytune.doctor.rules.machine.model_split  # noqa: E402,F401
import steadytune.doctor.rules.machine.hybrid_graphics  # noqa: E402,F401
import steadytune.doctor.rules.machine.vulkan_device_select  # noqa: E402,F401
import steadytune.doctor.rules.machine.windows_nccl  # noqa: E402,F401
import steadytune.doctor.rules.machine.launchers  # noqa: E402,F401
import steadytune.doctor.rules.machine.deepspeed_devices  # noqa: E402,F401
import steadytune.doctor.rules.machine.schedulers  # noqa: E402,F401
import steadytune.doctor.rules.machine.rendezvous  # noqa: E402,F401
# the local apps' and servers' own pages (round 17's app_pages.py, one module each since round 18)
import steadytune.doctor.rules.machine.suspend_resume  # noqa: E402,F401
import steadytune.doctor.rules.machine.selinux_devices  # noqa: E402,F401
import steadytune.doctor.rules.machine.lmstudio_runtimes  # noqa: E402,F401
import steadytune.doctor.rules.machine.ggml_avx2  # noqa: E402,F401
import steadytune.doctor.rules.machine.ollama_cpu_only  # noqa: E402,F401
import steadytune.doctor.rules.machine.vllm_rocm_wheels  # noqa: E402,F401
import steadytune.doctor.rules.machine.sglang_prefill  # noqa: E402,F401
import steadytune.doctor.rules.machine.vllm_kernels  # noqa: E402,F401
import steadytune.doctor.rules.machine.ollama_gpu_subset  # noqa: E402,F401
import steadytune.doctor.rules.gpu_choice  # noqa: E402,F401
# round 19 (r19b): GPU numbering under a visibility list
import steadytune.doctor.rules.machine.gpu_numbering  # noqa: E402,F401
import steadytune.doctor.rules.runtime.out_of_memory  # noqa: E402,F401
import steadytune.doctor.rules.runtime.served_memory  # noqa: E402,F401
import steadytune.doctor.rules.runtime.reserved_memory  # noqa: E402,F401
import steadytune.doctor.rules.runtime.model_memory  # noqa: E402,F401
import steadytune.doctor.rules.runtime.miopen_solvers  # noqa: E402,F401
import steadytune.doctor.rules.runtime.miopen  # noqa: E402,F401
import steadytune.doctor.rules.runtime.gpu_hang  # noqa: E402,F401
import steadytune.doctor.rules.runtime.precision  # noqa: E402,F401
import steadytune.doctor.rules.runtime.own_precision  # noqa: E402,F401
import steadytune.doctor.rules.runtime.precision_modes  # noqa: E402,F401
import steadytune.doctor.rules.runtime.compute_types  # noqa: E402,F401
import steadytune.doctor.rules.runtime.quantized_output  # noqa: E402,F401
import steadytune.doctor.rules.runtime.gtx16_half  # noqa: E402,F401
import steadytune.doctor.rules.runtime.attention  # noqa: E402,F401
import steadytune.doctor.rules.runtime.sdpa_kernels  # noqa: E402,F401
import steadytune.doctor.rules.runtime.app_attention  # noqa: E402,F401
import steadytune.doctor.rules.runtime.sage_attention  # noqa: E402,F401
import steadytune.doctor.rules.runtime.trtllm_fmha  # noqa: E402,F401
# round 19 (r19d): desktop image / video apps' attention packages and precision
import steadytune.doctor.rules.runtime.xformers_fallback  # noqa: E402,F401
import steadytune.doctor.rules.runtime.sage_attention_kernels  # noqa: E402,F401
import steadytune.doctor.rules.runtime.sage_attention_imports  # noqa: E402,F401
import steadytune.doctor.rules.runtime.flash_attention_windows  # noqa: E402,F401
import steadytune.doctor.rules.runtime.bf16_models  # noqa: E402,F401
# round 19 (r19c): JAX's up-front memory, Windows' sysmem fallback, vLLM's prefix-prefill kernel before Ampere
import steadytune.doctor.rules.runtime.jax_memory  # noqa: E402,F401
import steadytune.doctor.rules.runtime.sysmem_fallback  # noqa: E402,F401
import steadytune.doctor.rules.runtime.prefix_prefill  # noqa: E402,F401
import steadytune.doctor.rules.runtime.cuda_notes  # noqa: E402,F401
# round 20 (r20c): Python packages, wheels and extension builds
import steadytune.doctor.rules.install.rosetta_python  # noqa: E402,F401
import steadytune.doctor.rules.install.conda_cpu_builds  # noqa: E402,F401
import steadytune.doctor.rules.install.ort_cudnn_pair  # noqa: E402,F401
import steadytune.doctor.rules.arch.arch_list_beyond_nvcc  # noqa: E402,F401
import steadytune.doctor.rules.machine.metal_wired_limit  # noqa: E402,F401
import steadytune.doctor.rules.install.jax_cublas_pin  # noqa: E402,F401
import steadytune.doctor.rules.install.openmmlab_versions  # noqa: E402,F401
import steadytune.doctor.rules.arch.extension_source_builds  # noqa: E402,F401
import steadytune.doctor.rules.install.msvc_range  # noqa: E402,F401
# round 20 (r20a): ZLUDA under torch 2.4+, and (below) the other readings of round 20's AMD / Ollama / GPUStack cases
import steadytune.doctor.rules.install.zluda_cublaslt  # noqa: E402,F401
import steadytune.doctor.rules.install.library_dirs  # noqa: E402,F401
import steadytune.doctor.rules.install.zluda_installer  # noqa: E402,F401
import steadytune.doctor.rules.machine.unified_page_cache  # noqa: E402,F401
import steadytune.doctor.rules.machine.ollama_vulkan_igpu  # noqa: E402,F401
import steadytune.doctor.rules.machine.gpustack_indices  # noqa: E402,F401
import steadytune.doctor.rules.arch.distro_rocblas  # noqa: E402,F401
import steadytune.doctor.rules.install.ollama_source_builds  # noqa: E402,F401
import steadytune.doctor.rules.arch.prebuilt_blackwell  # noqa: E402,F401
import steadytune.doctor.rules.prose  # noqa: E402,F401


def run_rules(sheet: FactSheet, errors: list[ErrorLine]) -> list[Diagnosis]:
    """Every rule's diagnosis, best first: errors before warnings, confirmed before likely, then the family's rank,
    then the earliest line."""
    ctx = Context(sheet, errors)
    found = []
    for _name, function in RULES:
        diagnosis = function(ctx)
        if diagnosis is not None:
            found.append(diagnosis)
    # a line the catalogue knows is never left unexplained: its entry speaks where no rule settled its family
    covered = {n for d in found for n in d.covers}
    said = {d.entry for d in found}
    for error in errors:
        if error.catalogue is not None and error.line_no not in covered and error.catalogue.entry.id not in said:
            found.append(_restate(error.catalogue.entry.family, error,
                                  [e for e in errors if e.catalogue is not None
                                   and e.catalogue.entry.id == error.catalogue.entry.id]))
            said.add(error.catalogue.entry.id)
    # an error before a warning even when the warning is confirmed and the error only likely: a confirmed harmless line
    # (amdgpu.ids missing, xformers falling back to torch's attention) is never why the run stopped (round 17)
    found.sort(key=lambda d: (d.severity != "error", not d.confirmed, d.rank,
                              min(d.covers or [f.line_no for f in d.evidence] or [0])))
    return found
