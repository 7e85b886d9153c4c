"""doctor, round 15 (issue 63): readings for 3D, graphics and scientific CUDA software (DGL's per-torch and per-CUDA
builds, pytorch3d's pre-compiled packages, gsplat's wheels, nvdiffrast's EGL context, Vulkan's GPU floor, Kokkos' arch
knob, OpenMM's plugins, COLMAP's CUDA runtime, instant-ngp's scene memory, a shell variable that never reaches a
build). Each paste is written for its reading (another GPU, program, version or wording than the mined case that asked
for it); the negatives keep each reading out of pastes it does not fit."""

from __future__ import annotations

from test_doctor_paraphrases import reading_tests

# (paste, family, phrases the fix must say)
READINGS = [
    # a build switch assigned with && before the build (a shell, not a Dockerfile): the switch given to the command
    ("$ CMAKE_ARGS=\"-DGGML_CUDA=on\" && pip install --no-cache-dir llama-cpp-python\nthe model still loads on the CPU, "
     "no layers offloaded", "env-not-applied", ["CMAKE_ARGS=\"-DGGML_CUDA=on\" pip install", "export CMAKE_ARGS"]),
    # a Dockerfile RUN line with another package's switch
    ("FROM pytorch/pytorch:2.1.2-cuda12.1-cudnn8-devel\nRUN TORCH_CUDA_ARCH_LIST=\"8.0;8.6\" && pip install -e "
     "./detectron2\nat run time the ops are not built for the GPU", "env-not-applied",
     ["RUN TORCH_CUDA_ARCH_LIST=\"8.0;8.6\" pip install", "ENV TORCH_CUDA_ARCH_LIST"]),
    # OpenMM 8 from conda-forge with nothing but Reference: the plugin folder of another install
    ("conda env with openmm 8.1.1 from conda-forge, RTX 4070\n>>> [mm.Platform.getPlatform(i).getName() for i in "
     "range(mm.Platform.getNumPlatforms())]\n['Reference']\nopenmm.OpenMMException: There is no registered Platform "
     "called \"OpenCL\"", "env-not-applied", ["unset OPENMM_PLUGIN_DIR", "$CONDA_PREFIX/lib/plugins"]),
    # OpenMM 6.3's CUDA plugin alone missing (CPU and OpenCL load): its load failures, the CUDA it was built with
    ("installed simtk.openmm 6.3 binaries on CentOS 7 with a Tesla K40\npython -m simtk.testInstallation\nThere are 3 "
     "Platforms available:\n1 Reference - Successfully computed forces\n2 CPU - Successfully computed forces\n3 OpenCL "
     "- Successfully computed forces\nwhy is CUDA not listed?", "rocm-libs-missing",
     ["getPluginLoadFailures", "CUDA 7.0"]),
    # Kokkos built for Volta running on an Ampere card (the newer wording of its check)
    ("./md.cuda\nKokkos::Cuda::initialize ERROR: running kernels compiled for compute capability 7.0 on device with "
     "compute capability 8.6 is not supported by CUDA!\nRTX 3090", "arch-missing",
     ["KOKKOS_ARCH = Ampere86", "Kokkos_ARCH_AMPERE86"]),
    # a Fermi GeForce under vulkan-hpp: no Vulkan driver exists for it
    ("GeForce GTX 580 on Windows 7, driver 391.35\nterminate called after throwing an instance of "
     "'vk::IncompatibleDriverError'\n  what():  vk::createInstance: ErrorIncompatibleDriver", "gpu-unsupported",
     ["Fermi", "Kepler"]),
    # a TeraScale Radeon with ncnn's words
    ("realesrgan-ncnn-vulkan.exe -i in.png -o out.png\nvkCreateInstance failed -9\nGPU: AMD Radeon HD 6870",
     "gpu-unsupported", ["TeraScale", "GCN"]),
    # nvdiffrast's EGL display on a workstation, no program switch: the driver's OpenGL part
    ("python samples/torch/earth.py --outdir out\n[F glutil.cpp:307] eglGetDisplay() failed\nUbuntu 22.04, RTX A5000, "
     "driver installed with --no-opengl-files", "driver", ["reinstall", "OpenGL", "RasterizeCudaContext"]),
    # threestudio's rasterizer with the other EGL failure (another fork, another config): its CUDA switch
    ("python launch.py --config configs/magic3d-coarse-if.yaml --train --gpu 0 system.prompt_processor.prompt=\"a fox\"\n"
     "threestudio/models/renderers/nvdiff_rasterizer.py\n[F glutil.cpp:338] eglInitialize() failed", "device-access",
     ["system.renderer.context_type=cuda", "system.exporter.context_type=cuda"]),
    # pytorch3d's _C from pip under a newer torch (another symbol): the pre-compiled package in a new environment
    ("torch 2.4.1, python 3.11\nfrom pytorch3d.renderer import MeshRenderer\nImportError: /opt/venv/lib/python3.11/"
     "site-packages/pytorch3d/_C.cpython-311-x86_64-linux-gnu.so: undefined symbol: _ZN2at4_ops5zeros4callEN3c108"
     "ArrayRefINS2_6SymIntEEE", "abi-mismatch", ["pre-compiled pytorch3d", "new conda environment", "torch 2.4.1"]),
    # DGL's graphbolt under a torch patch release past its builds: the patch release it was built for
    ("import dgl\nFileNotFoundError: Cannot find DGL C++ graphbolt library at /home/u/miniconda3/lib/python3.10/"
     "site-packages/dgl/graphbolt/libgraphbolt_pytorch_2.3.1.so\ntorch 2.3.1+cu121", "abi-mismatch",
     ["torch==2.3.0", "torch-2.3/cu121"]),
    # DGL's sparse library for torch 2.4.0 with an older DGL: the DGL built for it
    ("dgl 2.2.1, torch 2.4.0+cu124\nFileNotFoundError: Cannot find DGL C++ sparse library at /usr/lib/python3/"
     "site-packages/dgl/dgl_sparse/libdgl_sparse_pytorch_2.4.0.so", "abi-mismatch",
     ["DGL 2.4.0 or newer", "data.dgl.ai/wheels/torch-2.4/cu124"]),
    # a conda DGL named for CUDA 10.1 asking for 10.0's runtime: DGL's pip build for 10.1
    ("conda install -c dglteam dgl-cuda10.1\n>>> import dgl\nOSError: libcudart.so.10.0: cannot open shared object "
     "file: No such file or directory", "rocm-libs-missing", ["pip install dgl -f https://data.dgl.ai/wheels/cu101"]),
    # gsplat without kernels for an H100 (its own name, not splatfacto)
    ("pip install git+https://github.com/nerfstudio-project/gsplat.git on the build machine, then on an H100:\n"
     "  File \"gsplat/cuda/_wrapper.py\", line 88, in rasterize_to_pixels\nRuntimeError: CUDA error: no kernel image is "
     "available for execution on the device", "arch-missing", ["docs.gsplat.studio/whl", "TORCH_CUDA_ARCH_LIST=\"9.0\""]),
    # instant-ngp's scene on a small card (Linux build, the driver API's words)
    ("./instant-ngp data/nerf/my_scene --no-gui\nRTX 3060 Laptop 6GB\nUncaught exception: /home/me/instant-ngp/"
     "dependencies/tiny-cuda-nn/include/tiny-cuda-nn/gpu_memory.h:584 cuMemCreate(&m_handles.back(), n_bytes_to_allocate, "
     "&prop, 0) failed with error CUDA_ERROR_OUT_OF_MEMORY", "out-of-memory", ["aabb_scale", "lower-resolution images"]),
    # Taichi 0.5.12's wheel without its libdevice, read on Linux in other words
    ("pip install taichi==0.5.12\nti.init(arch=ti.cuda)\n[E] Bitcode file (/usr/lib/python3.8/site-packages/taichi/lib/"
     "slim_libdevice.10.bc) not found.", "rocm-libs-missing", ["taichi>=0.5.14"]),
    # COLMAP's dense stereo with the toolkit it was built with off the paths
    ("built colmap 3.8 from source with CUDA 11.3 on Ubuntu 20.04\ncolmap patch_match_stereo --workspace_path dense\n"
     "F0312 10:02:11.123456  9981 patch_match.cc:52] Check failed: num_cuda_devices > 0 (0 vs. 0)", "rocm-libs-missing",
     ["LD_LIBRARY_PATH=/usr/local/cuda-11.3/lib64", "PATH=/usr/local/cuda-11.3/bin"]),
]

NEGATIVES = [
    # the variable exported: it arrives
    ("RUN export FORCE_CUDA=1 && pip install 'git+https://github.com/facebookresearch/pytorch3d.git'\n"
     "RuntimeError: Not compiled with GPU support", "(no && between them)"),
    # the variable on the command itself: it arrives
    ("RUN FORCE_CUDA=1 pip install 'git+https://github.com/facebookresearch/pytorch3d.git'\nRuntimeError: Not "
     "compiled with GPU support", "(no && between them)"),
    # expanded by the shell itself: it arrives
    ("MODEL=llama3 && ollama run $MODEL\nError: model not found", "(no && between them)"),
    # every plugin listed: not the plugin folder
    ("openmm 8.0\n['Reference', 'CPU', 'CUDA', 'OpenCL']\nsimulation runs slowly on the CUDA platform",
     "OPENMM_PLUGIN_DIR"),
    # a Kepler GeForce (it has Vulkan): the driver reading, not the floor
    ("GeForce GTX 680, driver 470.82\nvkCreateInstance failed -9", "cannot run Vulkan"),
    # a Pascal card: not the floor
    ("Could not create Vulkan instance : ERROR_INCOMPATIBLE_DRIVER\nGPU: GTX 1060 6GB, Windows 10", "Fermi"),
    # an EGL failure on an AMD machine with no nvdiffrast: not NVIDIA's driver
    ("MUJOCO_GL=egl python render.py\nRuntimeError: eglInitialize() failed\nRadeon RX 6700 XT, Mesa 23.2",
     "libnvidia-gl"),
    # DGL's graphbolt under a torch it is built for, with the library not the missing part: no torch move
    ("dgl 2.1.0, torch 2.2.1+cu121\nImportError: Cannot load Graphbolt C++ library\nOSError: libnvrtc.so.12: cannot "
     "open shared object file", "torch==2.2.1"),
    # a CUDA 11 package asking for CUDA 11's runtime (its soname is 11.0 for every 11.x): no mislabelled build
    ("pip install cupy-cuda118\nImportError: libcudart.so.11.0: cannot open shared object file: No such file or "
     "directory", "mislabelled"),
    # Taichi past the broken release: not the upgrade to it
    ("[Taichi] version 0.5.14, supported archs: [cpu, cuda]\nBitcode file (slim_libdevice.10.bc) not found",
     "taichi>=0.5.14"),
    # COLMAP in a container started without the GPU: not the loader path
    ("docker run -it colmap/colmap colmap feature_extractor --database_path db.db --image_path images\n"
     "Check failed: num_cuda_devices > 0 (0 vs. 0)", "LD_LIBRARY_PATH=/usr/local/cuda"),
    # a Kokkos program's unrelated abort: no arch knob
    ("Kokkos::View ERROR: out of memory allocating 12 GB\nAborted (core dumped)", "KOKKOS_ARCH"),
    # an out-of-memory without instant-ngp: not its knob
    ("python train.py --batch_size 64\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
     "aabb_scale"),
]

test_reads, test_pastings, test_negatives = reading_tests(READINGS, NEGATIVES)
