"""A GPU that hangs, faults or resets mid-job (the driver's watchdog, SDMA copies, evicted queues,
firmware), a /dev/kfd stuck so it refuses to open, and the usual remedy for a hang no reading settled."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.error_lines import ErrorLine
from steadytune.doctor.rules.base import (_catalogue, Context, Diagnosis, _first, _lines_matching, _make, _restate,
                                          rule, _vendor)
from steadytune.doctor.rules.runtime.shared import _ILLEGAL_MEMORY, _text_of


@rule("gpu-hang")
def gpu_hang(ctx: Context) -> Optional[Diagnosis]:
    errors = ctx.of("gpu-hang")
    if not errors:
        return None
    text = " ".join(e.line for e in errors)
    joined = "\n".join(ctx.sheet.lines)
    kernel = re.search(r"(?i)\bkernel (?:version )?(\d+)\.(\d+)", joined)
    if re.search(r"(?i)\bring \w+(?:\.\d+)* timeout", text) and (
            re.search(r"(?i)lockup_timeout|(?:was |works? )?fine (?:on|with) (?:the )?kernel", joined)
            or kernel and int(kernel.group(1)) >= 7):
        return _make("gpu-hang", "long GPU jobs trip the driver's lockup watchdog",
                     "kernel 7.x lowered amdgpu's lockup_timeout from 10 s to 2 s: a long compute job (a VAE decode, "
                     "a big matmul) on the GPU that also drives the display is reset as hung",
                     "add amdgpu.lockup_timeout=10000 to the kernel command line (GRUB_CMDLINE_LINUX_DEFAULT, "
                     "update-grub, reboot), or run the job on a GPU without a display", [ctx.line_fact(errors[0])], errors)
    frozen = _whole_machine_frozen(ctx, text, joined)
    if frozen is not None:
        return frozen
    if re.search(r"(?i)hipMemcpy\w*.{0,40}\bhangs?\b|\bhangs?\b.{0,40}\bhipMemcpy", text):
        return _make("gpu-hang", "host-device copies hang in the SDMA engine",
                     "hipMemcpy goes through the SDMA copy engine, which hangs on this GPU/APU with this ROCm",
                     "export HSA_ENABLE_SDMA=0 (copies go through shader blits instead); ROCm 6.1 fixed it for the "
                     "APUs that reported it", [ctx.line_fact(errors[0])], errors)
    evicted = [e for e in errors if re.search(r"(?i)queue vital buffer|queues? (?:was |were )?evicted|eviction", e.line)]
    if evicted:
        arch, fact = ctx.arch(evicted)
        return _make("gpu-hang", "the driver keeps evicting the compute queues until the GPU hangs",
                     "amdgpu's KFD evicts a process's compute queues (saving their waves: compute wave save/restore, "
                     "CWSR) when it needs the GPU back; with several GPU processes at once the evictions pile up on "
                     f"this {'GPU (' + arch + ')' if arch else 'GPU'}, and a failed save/restore leaves it hung",
                     "boot with amdgpu.cwsr_enable=0 (GRUB_CMDLINE_LINUX_DEFAULT, update-grub, reboot; or options "
                     "amdgpu cwsr_enable=0 in /etc/modprobe.d/amdgpu.conf), and move to a newer ROCm and kernel; fewer "
                     "concurrent GPU processes until then", [f for f in (ctx.line_fact(evicted[0]), fact) if f], errors)
    # compute wave save/restore named as the hang's trigger: the amdgpu parameter that turns it off (the kernel's
    # amdgpu module parameters: "cwsr_enable (int): CWSR(compute wave store and resume) enable (0 = Off, 1 = On)")
    cwsr = re.search(r"(?i)\bCWSR\b|compute wave (?:save|store)\w*(?: and | ?/ ?)(?:restore|resume)", joined)
    if cwsr:
        return _make("gpu-hang", "the GPU hangs in compute wave save/restore",
                     f"the paste puts the hang down to {cwsr.group(0)}: the driver saving and restoring the compute "
                     "waves when it preempts a queue, which this GPU's MES firmware does not survive under sustained "
                     "compute",
                     "turn CWSR off: add amdgpu.cwsr_enable=0 to GRUB_CMDLINE_LINUX_DEFAULT in /etc/default/grub, sudo "
                     "update-grub and reboot (or options amdgpu cwsr_enable=0 in /etc/modprobe.d/amdgpu.conf, then "
                     "update-initramfs -u); cat /sys/module/amdgpu/parameters/cwsr_enable must print 0; keep it until "
                     "a firmware or driver release fixes the hang", [ctx.line_fact(errors[0])], errors)
    firmware = re.search(r"(?i)\bMES\b[: ]*(?:0x[0-9a-f]+)?|firmware", joined)
    if firmware:
        return _make("gpu-hang", "the GPU hangs under a firmware regression",
                     "the paste ties the hangs to the GPU firmware (the MES scheduler's version, a linux-firmware "
                     "update)", "roll linux-firmware back to the release before the hangs began (check the MES "
                     "version: sudo cat /sys/kernel/debug/dri/*/amdgpu_firmware_info | grep MES), or update to the "
                     "firmware release that fixes it; the kernel and ROCm stay as they are", [ctx.line_fact(errors[0])],
                     errors)
    strix_halo = _strix_halo_cwsr(ctx, errors, text, joined)
    if strix_halo is not None:
        return strix_halo
    if re.search(r"(?i)kernel NULL pointer dereference", text):
        return _make("gpu-hang", "the kernel driver crashes opening the GPU",
                     "a NULL pointer dereference in the kernel: a driver regression, often in runtime power management",
                     "add amdgpu.runpm=0 to the kernel command line (GRUB_CMDLINE_LINUX_DEFAULT, update-grub, reboot), "
                     "and move to a kernel without the regression", [ctx.line_fact(errors[0])], errors)
    hit = _catalogue(errors)
    if hit is not None:
        return _restate("gpu-hang", hit, errors)
    return _hang_otherwise(ctx, errors)


# the whole machine gone with the GPU: frozen desktop, no input, only the reset button brings it back
_MACHINE_FROZEN = re.compile(r"(?i)(?:whole|entire) (?:computer|system|machine|pc|desktop) (?:will |would )?"
                             r"(?:freez\w*|hangs?|locks? up)|(?:system|computer|machine|pc) (?:becomes |is )?"
                             r"(?:non-?responsive|unresponsive)|\breset button\b|hard (?:reset|reboot|lock\w*)|"
                             r"整个(?:系统|电脑)(?:卡死|死机)")


def _whole_machine_frozen(ctx: Context, text: str, joined: str) -> Optional[Diagnosis]:
    """amdgpu's ring timeout that takes the whole machine down while a compute job (Stable Diffusion, training) runs
    on a Radeon card, with nothing else to blame (round 18, r18b). Sustained compute load at the card's default power
    profile and limit trips it; ROCm/legacy-rocm-build#3166 (7900 XTX, A1111 / ComfyUI): setting the GPU's power plan
    (power profile) to COMPUTE and adjusting the power limit ended the freezes (300 images without one). rocm-smi's
    options: --showprofile, --setprofile SETPROFILE, --setpoweroverdrive WATTS, --resetpoweroverdrive (ROC-smi's
    README)."""
    if not re.search(r"(?i)\bring \w+(?:\.\d+)* timeout", text) or not _MACHINE_FROZEN.search(joined):
        return None
    if re.search(r"(?i)lockup_timeout|\bCWSR\b|page fault|queue evict|\bMES\b|firmware|\bnvidia\b", joined):
        return None   # a reading of its own (the watchdog, CWSR, a fault, firmware)
    return _make("gpu-hang", "the GPU times out under sustained compute load and takes the machine with it",
                 "amdgpu's ring timeout under a long compute job at the card's default power profile and power limit: "
                 "the GPU stops answering and the whole system (display, input) freezes until a reset",
                 "set the GPU's power plan (power profile) to COMPUTE: sudo rocm-smi --showprofile, then sudo "
                 "rocm-smi --setprofile <the COMPUTE profile's number>, and lower the power limit: sudo rocm-smi --setpoweroverdrive "
                 "<watts below the card's default> (undo with --resetpoweroverdrive); both are lost at reboot, so put "
                 "them in a boot script once they hold; keep VRAM use below the card's size (an OOM spike still "
                 "freezes it)", [ctx.line_fact(e) for e in ctx.of("gpu-hang")[:1]], ctx.of("gpu-hang"),
                 confirmed=False)


# the fault or hang in the runtime's or the kernel's words, or a user's "hangs"
_FAULT_OR_HANG = re.compile(r"(?i)page fault|Memory access fault|GPU Hang|\bhangs?\b|\bhung\b|\bfreez\w+|"
                            r"ring \w+(?:\.\d+)* timeout|HW Exception|MES failed")


def _kernel_release(ctx: Context) -> Optional[tuple[int, int]]:
    for fact in ctx.sheet.of("kernel"):
        m = re.match(r"(\d+)\.(\d+)", fact.value)
        if m:
            return int(m.group(1)), int(m.group(2))
    return None


def _strix_halo_cwsr(ctx: Context, errors: list[ErrorLine], text: str, joined: str) -> Optional[Diagnosis]:
    """Strix Halo (gfx1151) faulting or hanging on compute under a kernel before 6.18: the kernel's compute wave
    save/restore (CWSR) area was sized for the older VGPR file, not gfx1151's 1.5x one, so a preempted queue's waves
    overrun it (TheRock#2151; fixed by the kernel's "drm/amdkfd: bump minimum vgpr size for gfx1151" and ROCr using the
    kernel's cwsr_size, ROCm 7.2.1+). AMD's answer in ROCm/legacy-rocm-build#5991: keep amdgpu.cwsr_enable=0 "until a
    new kernel is used (6.18-rc6+)". A MES 0x83 firmware is another cause (the firmware branch reads it first)."""
    arch, fact = ctx.arch(errors)
    if arch != "gfx1151" and not re.search(r"(?i)\bgfx1151\b|Radeon 8060S|Radeon 8050S|Strix Halo|Ryzen AI MAX", joined):
        return None
    kernel = _kernel_release(ctx)
    if kernel is not None and kernel >= (6, 18):
        return None
    if not _FAULT_OR_HANG.search(text):
        return None
    where = f"kernel {kernel[0]}.{kernel[1]}" if kernel else "a kernel before 6.18"
    return _make("gpu-hang", "Strix Halo's compute wave save/restore overruns its area on this kernel",
                 f"on gfx1151 (Strix Halo) under {where}, the driver's compute wave save/restore (CWSR) area is sized "
                 "for the older register file, not gfx1151's larger one: when a queue is preempted its saved waves "
                 "overrun it, and the GPU faults or hangs as soon as real compute runs",
                 "boot with amdgpu.cwsr_enable=0: add it to GRUB_CMDLINE_LINUX_DEFAULT in /etc/default/grub, sudo "
                 "update-grub, reboot (cat /sys/module/amdgpu/parameters/cwsr_enable prints 0); keep it until a kernel "
                 "6.18 or newer with ROCm 7.2.1 or newer; check the MES firmware too (sudo cat "
                 "/sys/kernel/debug/dri/*/amdgpu_firmware_info | grep MES: 0x83 is broken, dpkg -S "
                 "/lib/firmware/amdgpu/gc_11_5_1_mes1.bin.zst shows the package that left it)",
                 [f for f in (ctx.line_fact(errors[0]), fact) if f], errors)


_KFD_EINVAL = r"(?i)/dev/kfd\b.{0,30}:\s*Invalid argument"


@rule("gpu-hang")
def kfd_refuses(ctx: Context) -> Optional[Diagnosis]:
    """/dev/kfd exists and may be opened (the listing or the groups say so), yet opening it fails with EINVAL, not a
    permission or a missing file: the driver has the device node but no working GPU behind it, a GPU left stuck by a
    reset that did not complete (passed through to a VM and handed back, a crashed job). Only a host reboot (a power
    cycle) resets it; a container's flags do not."""
    said = _lines_matching(ctx, _KFD_EINVAL)
    if not said:
        return None
    text = _text_of(ctx)
    allowed = re.search(r"crw-rw-rw-(?:.{0,40}/dev/kfd)?|\b(?:member of|in) (?:the )?render group|^\S*\s*(?:\w+ )*render\b",
                        text, re.M) or re.search(r"(?m)^(?:\S+ )*(?:video|render)(?: \S+)*$", text)
    passthrough = re.search(r"(?i)passthrough|passed through|vfio|\bVM\b|virtual machine|proxmox|\bPVE\b|直通|虚拟机",
                            text)
    if not allowed and not passthrough:
        return None
    return _first(_make("gpu-hang", "the GPU behind /dev/kfd is in a stuck state",
                        "opening /dev/kfd fails with 'Invalid argument' although the device node is there and this "
                        "user may open it: the driver has no working GPU behind it, which a reset that did not complete "
                        "leaves" + (" (a GPU passed through to a VM and handed back to the host; the RX 7000 / 9000 "
                                    "series do not reset cleanly)" if passthrough else ""),
                        "reboot the host (a full power cycle if a warm reboot is not enough) to reset the GPU, then "
                        "check sudo dmesg | grep -i amdgpu for init errors; avoid passing the GPU to a VM and back "
                        "without a reboot", [ctx.line_fact(said[0])], said))


# the ROCm releases pytorch.org has built torch for (its --index-url .../whl/rocmX.Y), oldest first
ROCM_TORCH_INDEXES = ("5.6", "5.7", "6.0", "6.1", "6.2", "6.2.4", "6.3", "6.4", "7.0", "7.1", "7.2")


def _rocm_torch(ctx: Context) -> Optional[str]:
    """The ROCm release the paste's torch was built for: its version label (2.3.0+rocm6.0) or 'torch ... rocm 6.0'."""
    labels = [f.value.split("+rocm", 1)[1] for f in ctx.sheet.of("torch") if "+rocm" in f.value]
    if labels:
        return labels[-1]
    # whole version numbers only: a nightly's "rocm7.11.0a2026..." is ROCm 7.11, not 7.1
    said = re.search(r"(?i)\b(?:torch|pytorch)\b.{0,30}\brocm[ -]?(\d\.\d+(?:\.\d+)?)(?!\d)|\brocm[ -]?(\d\.\d+(?:\.\d+)?)\b"
                     r".{0,30}\b(?:torch|pytorch)\b|whl/rocm(\d\.\d+(?:\.\d+)?)(?!\d)", _text_of(ctx))
    return next((g for g in said.groups() if g), None) if said else None


def _hang_otherwise(ctx: Context, errors: list[ErrorLine]) -> Diagnosis:
    """A hang, fault or illegal access that no specific reading settled: the family's usual remedy for the stack in
    the paste, as a likely reading. A ROCm torch: the torch built for the next ROCm release (each wheel brings its
    own runtime, and hangs are often one release's); an NVIDIA illegal access: the kernel that faulted, named with
    CUDA_LAUNCH_BLOCKING=1, and the library that owns it updated; else the kernel, firmware and dmesg."""
    evidence = [ctx.line_fact(errors[0])]
    # the runtime's or the kernel's own words for the fault (not a user's "it hangs"): the hang itself is settled
    proper = any(re.search(r"(?i)\bring\b.{0,30}time ?out|page fault|Memory access fault|HW Exception|HSA_STATUS_ERROR|"
                           r"hipError|GPU reset|PROTECTION_FAULT", e.line) for e in errors)
    built = _rocm_torch(ctx)
    tool = ctx.tool(errors)
    if built and built in ROCM_TORCH_INDEXES[:-1] and tool in (None, "torch", "comfyui", "a1111", "torchaudio"):
        newer = ROCM_TORCH_INDEXES[ROCM_TORCH_INDEXES.index(built) + 1]
        return _make("gpu-hang", f"the GPU hangs under the torch built for ROCm {built}",
                     f"the torch wheel brings its own ROCm {built} runtime and kernels; a hang or fault in a run that "
                     "worked before (or works elsewhere) is most often that release's",
                     f"install the torch built for the next ROCm: pip install torch torchvision --index-url "
                     f"https://download.pytorch.org/whl/rocm{newer} (or the newest, rocm{ROCM_TORCH_INDEXES[-1]}, "
                     "if the GPU is in its list); if it still hangs: sudo dmesg | grep -i amdgpu, and a newer kernel "
                     "and linux-firmware", evidence, errors, confirmed=proper)
    if _vendor(ctx) != "amd" and any(_ILLEGAL_MEMORY.search(e.line) for e in errors):
        owner = f"update {tool} (pip install -U {tool}); " if tool and tool != "torch" else ""
        return _make("gpu-hang", "a GPU kernel read or wrote outside its memory",
                     "an illegal memory access is a kernel fault: a bug in the library whose kernel ran, inputs it "
                     "does not handle (an index out of range, a batch past its 32-bit offsets), or a driver fault",
                     f"{owner}rerun with CUDA_LAUNCH_BLOCKING=1 so the traceback names the op that faulted; in training, "
                     "try a smaller batch size; update the NVIDIA driver and torch", evidence, errors, confirmed=False)
    if re.search(r"NVRM|\bXid\b", _text_of(ctx)) or (_vendor(ctx) == "nvidia"):
        return _make("gpu-hang", "the GPU faulted or hung",
                     "the NVIDIA driver reported a fault (an Xid) while the job ran: Xid 13 / 31 are a kernel's own "
                     "fault (a library bug, bad input), 43 / 45 the driver stopping the process, 79 the card off the bus",
                     "sudo dmesg | grep -i xid names the kind; for 13 / 31 rerun with CUDA_LAUNCH_BLOCKING=1 to name the "
                     "op and update the library that owns it and the NVIDIA driver; for 79 look at power and the PCIe "
                     "link", evidence, errors, confirmed=False)
    return _make("gpu-hang", "the GPU faulted or hung",
                 "the GPU reset or faulted while running; the paste does not name the kernel or driver at fault",
                 "read sudo dmesg | grep -i -e amdgpu -e 'page fault' -e timeout; update the kernel and linux-firmware; "
                 "on a ROCm torch, the torch built for a newer ROCm (pip install torch --index-url "
                 f"https://download.pytorch.org/whl/rocm{ROCM_TORCH_INDEXES[-1]}); if the GPU also drives the display, "
                 "amdgpu.lockup_timeout=10000 on the kernel command line", evidence, errors, confirmed=False)
