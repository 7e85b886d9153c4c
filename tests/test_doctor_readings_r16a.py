"""doctor, round 16 (r16a): readings for missed training cases of PaddlePaddle's builds (a CPU package, a PyPI wheel
for a newer CUDA than the driver, a build without the GPU's architecture), packages whose CPU twin is pulled in
(onnxruntime-genai, optimum's extras), extensions built without this GPU's code or ops (tiny-cuda-nn, mmcv, COLMAP
without CUDA, PyG's CUDA 11 wheels), a pip torch shadowing conda's, pip's isolated build, DGL's conda pair, cuDNN 8's
zlibwapi.dll and VRAM said to be filled up. Each paste is written for its reading (another GPU, tool, version or
wording than the mined case that asked for it); the negatives keep each reading out of pastes it does not fit."""

from __future__ import annotations

from test_doctor_paraphrases import reading_tests

# (paste, family, phrases the fix must say)
READINGS = [
    # Paddle's arch check on a Blackwell data-centre card: the cu129 index
    ("paddlex on a B200 node\nE1003 gpu_resources.cc:98] Mismatched GPU Architecture: The installed PaddlePaddle "
     "package was compiled for 75 80 86 89 90, but your current GPU is 100", "arch-missing", ["cu129", "paddlepaddle-gpu"]),
    # a plain Paddle 2.1 pin under an old driver (its own Cuda error 35 wording): the post101 build
    ("pip install paddlepaddle-gpu==2.1.2\npaddle.utils.run_check()\nExternalError: Cuda error(35), CUDA driver version "
     "is insufficient for CUDA runtime version.", "driver", ["paddlepaddle-gpu==2.1.2.post101"]),
    # the CPU paddlepaddle alone beside an RTX card, PaddleX, said in other words
    ("pip list | grep paddle\npaddlepaddle        3.0.0\npaddlex             3.0.1\nGPU: GeForce RTX 4070\nthe pipeline "
     "runs on the CPU only, not using the GPU", "torch-build", ["pip uninstall -y paddlepaddle", "paddlepaddle-gpu==3.0.0"]),
    # genai asking for the CUDA provider: its CUDA package alone
    ("import onnxruntime_genai as og\nmodel = og.Model('phi-3.5-mini-cuda')\nRuntimeError: Unknown provider type: cuda",
     "torch-build", ["pip uninstall onnxruntime-genai onnxruntime-genai-cuda", "pip install onnxruntime-genai-cuda"]),
    # optimum's onnxruntime extra installed after the GPU one
    ("pip install optimum[onnxruntime-gpu]\npip install optimum[onnxruntime]\nnow CUDAExecutionProvider is not "
     "available, only CPUExecutionProvider", "torch-build", ["optimum[onnxruntime-gpu]", "pip uninstall -y onnxruntime"]),
    # tiny-cuda-nn built in a docker build without a GPU, run on an A100
    ("docker image built on CI, run on an A100\nOSError: Could not find compatible tinycudann extension for compute "
     "capability 80.", "arch-missing", ["TCNN_CUDA_ARCHITECTURES=80", "recompile"]),
    # COLMAP's feature extraction through SiftGPU's shaders on a headless server
    ("$ colmap feature_extractor --database_path db.db --image_path images\nERROR: SiftGPU not fully supported\n",
     "torch-build", ["compiled with CUDA", "--SiftExtraction.use_gpu 0"]),
    # pytorch3d-like symbol error from a user-site torch while conda's was installed
    ("installed torch with conda (conda install pytorch==1.13.1 pytorch-cuda=11.7)\nImportError: /home/li/.local/lib/"
     "python3.9/site-packages/torch_scatter/_scatter_cuda.so: undefined symbol: _ZN3c104cuda20getCurrentCUDAStreamEa",
     "abi-mismatch", ["pip uninstall torch", "PYTHONNOUSERSITE=1"]),
    # pip's isolated build of another extension, Linux, CUDA_HOME said to be exported
    ("pip install -e . for GroundingDINO\nOSError: CUDA_HOME environment variable is not set. Please set it to your "
     "CUDA install root.\nbut my CUDA_HOME is already set to /usr/local/cuda-12.1", "torch-build",
     ["--no-build-isolation"]),
    # mmcv 2.x's lite package
    ("mmcv-lite 2.1.0\nmmdet 3.3.0\nModuleNotFoundError: No module named 'mmcv._ext'", "torch-build",
     ["mim install \"mmcv>=2.0.0\""]),
    # DGL's sparse library for torch 2.2 missing: the conda pair too
    ("import dgl\nFileNotFoundError: Cannot find DGL C++ sparse library at .../libdgl_sparse_pytorch_2.2.1.so\ntorch "
     "2.2.1", "abi-mismatch", ["dglteam/label/th22_cu118", "pytorch-cuda=11.8"]),
    # cuDNN 8.9 said to crash inside its DLL on Windows
    ("Windows 10, RTX 3070, cuDNN 8.9.7\nthe program crashes with an exception in cudnn_ops_infer64_8.dll",
     "rocm-libs-missing", ["zlibwapi.dll"]),
    # PyG's CUDA 11.3 wheels under torch 1.10
    ("torch 1.10.1+cu113, torch-sparse 0.6.12\nOSError: libcusolver.so.11: cannot open shared object file: No such file "
     "or directory", "rocm-libs-missing", ["torch==1.10.1+cu102", "data.pyg.org/whl/torch-1.10.1+cu102.html"]),
    # Wan said to fill the VRAM, in English
    ("Wan2.2 TI2V-5B generate.py on an RTX 3090: it uses all of the GPU memory and then stalls", "out-of-memory",
     ["--offload_model True", "--t5_cpu"]),
    # fish-speech named: its installer's torch pin
    ("fish-speech 1.4 on Windows 11\nAssertionError: Torch not compiled with CUDA enabled", "torch-build",
     ["torch==2.3.1", "cu121"]),
]

NEGATIVES = [
    # Paddle's .post build already chosen: not another .post pin
    ("paddlepaddle-gpu==2.0.0.post110\nOSError: Cuda error(35), CUDA driver version is insufficient for CUDA runtime "
     "version.", "2.0.0.post101"),
    # paddlepaddle-gpu listed: not the CPU-package reading
    ("paddlepaddle-gpu 2.6.1\npaddleocr runs on cpu only, RTX 3060", "paddlepaddle is Paddle's CPU build"),
    # optimum with GPU extras only: not the twin reading
    ("pip install optimum[onnxruntime-gpu,exporters-gpu]\nCUDAExecutionProvider is not available", "exporters-gpu"),
    # a tiny-cuda-nn build error (not the import's capability check): no capability rebuild from this reading
    ("pip install git+https://github.com/NVlabs/tiny-cuda-nn/#subdirectory=bindings/torch\nerror: command "
     "'/usr/local/cuda/bin/nvcc' failed with exit code 1", "TCNN_CUDA_ARCHITECTURES="),
    # COLMAP with CUDA shown: not "built without CUDA"
    ("COLMAP 3.9 (Commit abc on 2024-01-01 with CUDA)\nERROR: SiftGPU not fully supported", "compiled with CUDA"),
    # undefined symbol inside a conda env path: not the pip-shadow reading
    ("conda install pytorch\nImportError: /home/u/miniconda3/envs/a/lib/python3.9/site-packages/pytorch3d/_C.so: "
     "undefined symbol: _ZNK2at6Tensor7is_cudaEv", "shadows"),
    # CUDA_HOME not set, the user not saying it is: the toolkit reading, not isolation
    ("pip install -e .\nOSError: CUDA_HOME environment variable is not set. Please set it to your CUDA install root.",
     "pip's isolated build"),
    # mmcv._ext missing after a source build: the toolkit reading, not mmcv-full
    ("MMCV_WITH_OPS=1 pip install -e .\nModuleNotFoundError: No module named 'mmcv._ext'", "mmcv-full"),
    # cuDNN before 8.3 crashing: not zlib
    ("cuDNN 8.1.0, Windows\nexception in cudnn64_8.dll", "zlibwapi"),
    # a CUDA 11 library missing under torch 2.x: not the cu102 pair
    ("torch 2.0.1+cu118, torch-sparse\nOSError: libcusparse.so.11: cannot open shared object file", "+cu102"),
    # "VRAM full" of a GPU monitor without a complaint about a run is not read as... the card's memory size said alone
    ("my RTX 4090 has 24 GB of VRAM", "out of GPU memory"),
]

test_reads, test_pastings, test_negatives = reading_tests(READINGS, NEGATIVES)
