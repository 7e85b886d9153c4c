"""doctor, round 15 (issue 63): readings for batch 14's missed training cases of the AMD web UIs and ZLUDA, the nix
and ggml builds, containers and Kubernetes, and the apps that bundle faster-whisper or their own packages. Each paste
is written for its reading (another GPU, tool, version or wording than the mined case that asked for it); the
negatives keep each reading out of pastes it does not fit."""

from __future__ import annotations

from test_doctor_paraphrases import reading_tests

# (paste, family, phrases the fix must say)
READINGS = [
    # whisper.cpp configured with its own retired CUDA option: ggml's GGML_CUDA and its backend module
    ("cmake -B build -DWHISPER_CUBLAS=ON && cmake --build build -j\n./build/bin/whisper-cli -m ggml-large-v3.bin "
     "talk.wav\nwhisper.cpp never touches my RTX 3060, the log says no GPU found and it is slow as the CPU",
     "torch-build", ["GGML_CUDA=ON", "libggml-cuda"]),
    # a nix overlay of llama-cpp with the old Vulkan name
    ("my overlay for llama-cpp:\n  cmakeFlags = [ (lib.cmakeBool \"LLAMA_VULKAN\" true) ];\nllama-server only shows "
     "the CPU backend on my Arc A770, no vulkan device is listed", "torch-build",
     ["GGML_VULKAN=ON", "libggml-vulkan", "cmakeBool \"GGML_VULKAN\""]),
    # docker's daemon refusing a runtime daemon.json already has (a compose file, a plain Ubuntu host)
    ("$ docker compose up -d\nError response from daemon: unknown or invalid runtime name: nvidia\n$ cat "
     "/etc/docker/daemon.json\n{ \"runtimes\": { \"nvidia\": { \"path\": \"/usr/bin/nvidia-container-runtime\", "
     "\"args\": [] } } }\n$ docker info | grep -i runtimes\n Runtimes: runc io.containerd.runc.v2",
     "env-not-applied", ["systemctl restart docker", "docker info"]),
    # the same after the toolkit's own configure step, in WSL 2
    ("ran sudo nvidia-ctk runtime configure --runtime=docker inside WSL2 Debian, still:\ndocker: Error response from "
     "daemon: unknown or invalid runtime name: nvidia.", "env-not-applied",
     ["systemctl restart docker", "service docker restart"]),
    # libnvidia-container misreading a Tesla's name as a path
    ("docker run --runtime=nvidia --rm nvidia/cuda:10.0-base nvidia-smi\ndocker: Error response from daemon: OCI "
     "runtime create failed: container_linux.go:345: starting container process caused \"process_linux.go:424: "
     "container init caused \\\"nvidia-container-cli: mount error: stat failed: /Tesla: no such file or "
     "directory\\\"\": unknown.", "device-access", ["libnvidia-container1", "1.0.2"]),
    # a k3s node whose scheduler finds no GPU resource
    ("k3s v1.28 on a box with an RTX A4000, nvidia-device-plugin installed via helm\nkubectl describe pod cuda-test\n"
     "  Warning  FailedScheduling  default-scheduler  0/1 nodes are available: 1 Insufficient nvidia.com/gpu.",
     "device-access", ["default-runtime", "runtimeClassName: nvidia"]),
    # a kubeadm node on containerd: the node lists the resource as 0
    ("kubeadm cluster, containerd 1.7, device plugin pod running\nkubectl describe node gpu01 | grep -A8 Allocatable\n"
     "  nvidia.com/gpu:     0", "device-access", ["--set-as-default", "default-runtime"]),
    # the GPU operator's driver pod crashing on a node with a host driver (plain helm install)
    ("helm install gpu-operator nvidia/gpu-operator -n gpu-operator\nkubectl get pods -n gpu-operator\n"
     "nvidia-driver-daemonset-k8x2p      0/1     CrashLoopBackOff   9 (2m ago)   31m\nhost has nvidia-550 from apt, "
     "nvidia-smi works on the node", "driver", ["driver.enabled=false", "535.183.08"]),
    # SD.Next given the fork's old form for ZLUDA
    ("webui.bat --backend zluda --debug\nerror: argument --backend: invalid choice: 'zluda' (choose from 'original', "
     "'diffusers')\nWindows 11, RX 7800 XT", "env-not-applied", ["--use-zluda", "remove --backend zluda"]),
    # the fork's old --backend=directml on an RX 6600 (another spelling, the fork's CUDA check)
    ("set COMMANDLINE_ARGS=--backend=directml --medvram\nRuntimeError: Torch is not able to use GPU; add "
     "--skip-torch-cuda-test to COMMANDLINE_ARGS variable to disable this check\nRX 6600, windows 10",
     "env-not-applied", ["--use-directml"]),
    # an old torch-directml under an updated DirectML web UI (pip list, another release)
    ("after git pull today the webui crashes as soon as I press Generate\n(venv) C:\\sd-directml> pip list | findstr "
     "directml\ntorch-directml     0.1.13.1.dev230413", "abi-mismatch", ["pip install torch-directml --upgrade"]),
    # a HIP SDK 6.1 runtime-compiler DLL missing
    ("zluda.exe -- python main.py\nThe code execution cannot proceed because hiprtc0601.dll was not found. "
     "Reinstalling the program may fix this problem.", "rocm-libs-missing", ["HIP SDK 6.1.2", "%HIP_PATH%bin"]),
    # ROCm 6's HIP runtime missing on a card the SDK runs, HIP SDK 5.7 installed
    ("RX 7900 GRE, HIP SDK 5.7 installed\nollama runner: amdhip64_6.dll is missing from your computer",
     "rocm-libs-missing", ["HIP SDK 6.x", "5.7"]),
    # the web UI's ZLUDA test failing with two SDKs named
    ("ComfyUI-Zluda / SD.Next, RX 7900 XTX\nHIP SDK 6.1 and HIP SDK 6.2 both show in Apps\nERROR ZLUDA device failed "
     "to pass basic operation test: index=0, device_name=AMD Radeon RX 7900 XTX [ZLUDA]", "rocm-libs-missing",
     ["uninstall HIP SDK 6.1", ".zluda"]),
    # the HIP SDK installer failing in a component (another release, the user's words)
    ("Trying to install AMD HIP SDK 6.2.4 for zluda, the installer stops at 80% with Error 215 every time. I left "
     "everything ticked.", "rocm-libs-missing", ["Visual Studio", "Pro driver"]),
    # an app bundling faster-whisper, another Blackwell card, no error, empty text
    ("Buzz 1.2 with the faster-whisper backend on my new RTX 5080: the transcription is empty, no error at all. Same "
     "file works on my old GTX 1080.", "precision", ["--compute_type float16", "Blackwell"]),
    # a ROCm torch counting two of four Instinct cards, another index next
    ("torch 2.1.0+rocm5.6 on a node with four MI210 GPUs\n>>> torch.cuda.device_count()\n2\nHIP_VISIBLE_DEVICES is "
     "unset", "visibility", ["whl/rocm5.7", "torch==2.2.*"]),
    # a Windows-only package on Ubuntu with an NVIDIA card
    ("Ubuntu 22.04, RTX 3060\npip install onnxruntime-directml\nERROR: Could not find a version that satisfies the "
     "requirement onnxruntime-directml (from versions: none)\nERROR: No matching distribution found for "
     "onnxruntime-directml", "wheel-platform", ["onnxruntime-gpu", "Windows"]),
]

NEGATIVES = [
    # the current option name: nothing retired
    ("cmake -B build -DGGML_HIP=ON -DAMDGPU_TARGETS=gfx1100\nwhisper.cpp still says no GPU found", "is retired"),
    # the runtime never registered: installing the toolkit is the answer, not a restart alone
    ("docker run --runtime=nvidia ubuntu nvidia-smi\ndocker: Error response from daemon: unknown or invalid runtime "
     "name: nvidia", "must list nvidia"),
    # a real driver file missing in the mount: not the name misread
    ("nvidia-container-cli: mount error: stat failed: /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.535.54.03: no such "
     "file or directory", "1.0.2"),
    # podman's CDI names a device it cannot resolve: no Kubernetes, no default runtime
    ("podman run --device nvidia.com/gpu=all ubuntu nvidia-smi\nError: setting up CDI devices: unresolvable CDI "
     "devices nvidia.com/gpu=all", "default-runtime"),
    # the device plugin's own pod crashing: not the operator's driver container
    ("kubectl get pods -n kube-system\nnvidia-device-plugin-daemonset-2xk9f   0/1   CrashLoopBackOff   5",
     "driver.enabled=false"),
    # SD.Next's own pipeline choice: not a device flag
    ("webui.sh --backend diffusers --use-rocm\nerror: torch not able to load the model", "remove --backend"),
    # a current torch-directml: nothing to upgrade
    ("after the newest update the webui throws an error\nName: torch-directml\nVersion: 0.2.4.dev240815",
     "pip install torch-directml --upgrade"),
    # the Linux HIP runtime missing: no Windows SDK DLL
    ("ImportError: libhiprtc.so.6: cannot open shared object file: No such file or directory", "%HIP_PATH%bin"),
    # Error 215 from the Adrenalin driver installer, no HIP SDK
    ("AMD Software Adrenalin 24.5.1 setup fails with Error 215 on my RX 6700 XT", "Visual Studio plug-in"),
    # the SDK installed, the program's own install failing: not the SDK's installer
    ("HIP SDK 6.2 installed fine. Then the ZLUDA install failed: zluda_installer.py could not download the archive",
     "Visual Studio plug-in"),
    # empty transcripts on an Ada card: not the Blackwell reading
    ("faster-whisper on RTX 4090 gives an empty transcript for this mp3", "supports Blackwell"),
    # the ROCm torch counts every GPU the machine has
    ("torch 2.1.0+rocm5.6 on a node with four MI210 GPUs\n>>> torch.cuda.device_count()\n4", "next ROCm index"),
    # on Windows the Windows-only package is the Python's matter, not the OS's
    ("Windows 11, Python 3.14\npip install onnxruntime-directml\nERROR: No matching distribution found for "
     "onnxruntime-directml", "published for Windows only"),
]

test_reads, test_pastings, test_negatives = reading_tests(READINGS, NEGATIVES)
