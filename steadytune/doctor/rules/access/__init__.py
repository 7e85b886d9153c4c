"""Rules about reaching the GPU, one module per reading:

  container_runtimes a container engine's own device rules: its cgroup driver, no-cgroups, CDI, SELinux, the
                     image's group file, a toolbox recreated without the devices, --gpus without a GPU
  device_files       /dev/kfd and /dev/dri, their groups, a KFD older than the GPU
  wsl                WSL 2 and the Windows under it
  wsl_tools          WSL 2 against ROCm's tools: amd-smi / rocm-smi there, the thunk meeting a non-AMD adapter
  driver_features    a CUDA call the NVIDIA driver does not provide (cudaMallocAsync): the app's allocator switch
  app_drivers        a desktop app's GPU option greyed out (its bundled CUDA torch finds no device): the driver on
                     NVIDIA, the app's other build on AMD / Intel (a table)
  driver             the driver itself: amdgpu DKMS and kernels, the Windows AMD driver
  driver_packages    the driver's packages: two stacks colliding, rock-dkms renamed, no graphics use case,
                     rock-dkms on a kernel its release did not list
  driver_mismatches  the driver against what it runs (CUDA, kernels, containers, firmware)
  open_modules       NVIDIA's open kernel modules: the opt-in for GeForce cards, the GSP they always run on
  cdi_specs          a container's CDI spec generated for devices the host no longer has
  driver_state       a driver left broken or not ready: nvidia_uvm after suspend, a service started before the GPU,
                     CUDA after a background driver update
  driver_checks      a tool's own driver check fooled: amdgpu built into the kernel, not a module
  inbox_driver       the distribution's own driver still loaded: under a GPU operator, or blacklisted without
                     rebuilding the initramfs

  vulkan_loader      a Vulkan program refused its instance (vkCreateInstance -9 / -3): the GPU driver's Vulkan part

runner.py imports them in this order, which is the order their rules register in.
"""
