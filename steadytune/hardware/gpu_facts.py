"""GPU facts as data, in one place: product name -> architecture, what each AMD architecture can do, and which
torch wheels carry code for it. `hardware/policy.py` (the policy `train` obeys) and `doctor` both read these tables;
nothing here decides anything, and nothing imports torch.

Every row names its source. Facts change with releases (a new wheel index, a new AOTriton), so a row says what
was true for the versions it names; doctor's live checks (torch.cuda.get_arch_list(), a real SDPA call) have
the last word on a real machine.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

from steadytune.hardware.gpu_ids import AMD, lookup_id

# --- sources cited by several rows ------------------------------------------------------------------------
GPU_SPECS = "ROCm 'AMD GPU specifications' table (rocm.docs.amd.com/en/latest/reference/gpu-specs.html)"
LLVM_TABLE = "LLVM AMDGPUUsage processor table (llvm.org/docs/AMDGPUUsage.html; RDNA3/4 names: llvm-project PRs #170469, #155577)"
PCI_IDS = "PCI ID database names (pci-ids.ucw.cz), as rocm-smi and lspci print them"
NVIDIA_CC = "NVIDIA compute capability table (developer.nvidia.com/cuda-gpus)"
DATASHEET = "vendor datasheet (dense bf16 peak)"
GPU_IDS = "PCI id table (hardware/gpu_ids.tsv: pci.ids names, LLVM AMDGPUUsage targets)"


# ---------------------------------------------------------------------------------------------------------
# Products: name -> architecture
# ---------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Product:
    pattern: str                        # regex, searched case-insensitively in the product name
    arch: str                           # gfx target (AMD) or sm_XY (NVIDIA)
    integrated: bool = False            # APU / iGPU
    peak_bf16_tflops: Optional[float] = None  # dense, per device as torch sees it (one MI250X GCD)
    source: str = GPU_SPECS


# Order matters: the first match wins, so specific names come before family names. A generic name such as
# "AMD Radeon Graphics" (what amd-smi and rocminfo print for many APUs) matches no row on purpose.
PRODUCTS: tuple[Product, ...] = (
    # AMD Instinct (CDNA)
    Product(r"MI355X?", "gfx950", peak_bf16_tflops=2516.6),
    Product(r"MI350", "gfx950", peak_bf16_tflops=2306.9),
    Product(r"MI325X", "gfx942", peak_bf16_tflops=1307.4),
    Product(r"MI308X", "gfx942", source="amd-smi static --asic of an MI308X (ROCm/amdsmi CHANGELOG)"),
    Product(r"MI300A", "gfx942", peak_bf16_tflops=980.6),
    Product(r"MI300X|MI300\b", "gfx942", peak_bf16_tflops=1307.4),
    Product(r"MI250X", "gfx90a", peak_bf16_tflops=191.5),   # per GCD; one card = 2 devices
    Product(r"MI250|MI200", "gfx90a", peak_bf16_tflops=181.0),
    Product(r"MI210", "gfx90a", peak_bf16_tflops=181.0),
    Product(r"MI100|Arcturus", "gfx908", peak_bf16_tflops=92.3),
    Product(r"MI50|MI60|Radeon (Pro )?VII|Vega 20", "gfx906"),
    # Polaris 22 (Radeon RX Vega M, in Intel's Kaby Lake-G) is a GFX8 chip (pci.ids: Polaris 22 [Radeon RX Vega M GH/GL])
    Product(r"Polaris 22|\bVega M(?: ?G[HL])?\b", "gfx803", source=PCI_IDS),
    Product(r"MI25|Vega ?10|Vega ?(56|64)\b|Radeon RX Vega", "gfx900"),
    Product(r"MI[68]\b|Fiji|FURY|R9 Nano|Polaris|RX [45][4-9]0\b", "gfx803"),
    Product(r"Tonga|Antigua|R9 (?:285|380)X?\b", "gfx802", source=LLVM_TABLE),
    Product(r"Hawaii|Grenada|R9 (?:290|390)X?\b", "gfx702", source=LLVM_TABLE),
    Product(r"FirePro (?:W[89]100|S91[57]0)\b", "gfx702", source=PCI_IDS + " (Hawaii XT GL [FirePro W8100/W9100/S9150/S9170])"),
    # GCN 1 (Southern Islands, GFX6): the KFD compute driver never supported these chips (LLVM names: gfx600 Tahiti,
    # gfx601 Pitcairn / Cape Verde, gfx602 Oland / Hainan; the HD 8500M-8700M "Mars" / "Sun" mobile chips are Oland
    # and Hainan, pci.ids)
    Product(r"Tahiti|HD 79[5-9]0\b|R9 280X?\b", "gfx600", source=LLVM_TABLE),
    Product(r"Pitcairn|Curacao|Cape Verde|HD 7[78][5-9]0\b|R7 370\b|R9 270X?\b", "gfx601", source=LLVM_TABLE),
    Product(r"\bOland\b|\bHainan\b|\bSun (?:XT|PRO|LE)\b|HD 8[5-7]\d0[AM]\b|R7 240\b|R5 M2[34]0\b|R5 M330\b", "gfx602", source=LLVM_TABLE + "; " + PCI_IDS),
    # AMD Radeon PRO / Radeon AI PRO (RDNA)
    Product(r"AI PRO R9[67]00|\bR9[67]00 AI PRO|Radeon R9[67]00\b", "gfx1201"),
    Product(r"PRO V710", "gfx1101"),
    Product(r"W7900|W7800", "gfx1100"),
    Product(r"W7700", "gfx1101"),
    Product(r"W7[56]00", "gfx1102", source=PCI_IDS + " (Navi 33 [Radeon Pro W7600/W7500])"),
    Product(r"W6800|\bV620\b", "gfx1030", source=LLVM_TABLE),
    Product(r"W6600", "gfx1032", source=PCI_IDS + " (Navi 23)"),
    Product(r"W5700", "gfx1010", source=PCI_IDS + " (Navi 10 [Radeon Pro W5700])"),
    Product(r"W5500", "gfx1012", source=PCI_IDS + " (Navi 14 [Radeon Pro W5500])"),
    # AMD Radeon RX (RDNA) and the chip names rocm-smi prints (Navi NN [...])
    Product(r"Navi 48|RX 9070", "gfx1201"),
    Product(r"Navi 44|RX 90[56]0", "gfx1200"),
    Product(r"Navi 31|RX 7900", "gfx1100"),
    Product(r"Navi 32|RX 7[78]00", "gfx1101"),
    Product(r"Navi 33|RX 76[05]0", "gfx1102"),
    Product(r"Navi 24|RX 6[45]00", "gfx1034", source=LLVM_TABLE),
    Product(r"Navi 23|RX 66[05]0", "gfx1032", source=LLVM_TABLE),
    Product(r"Navi 22|RX 67[05]0", "gfx1031", source=LLVM_TABLE),
    Product(r"Navi 21|RX 6[89][05]0", "gfx1030", source=LLVM_TABLE),
    Product(r"Navi 14|RX 5500|RX 5300", "gfx1012", source=LLVM_TABLE),
    Product(r"Navi 10|RX 5[67]00", "gfx1010", source=LLVM_TABLE),
    # AMD integrated (APU) graphics, by graphics model, then by code name
    Product(r"Radeon 80[4-6][05]S|Ryzen AI Max|Strix Halo", "gfx1151", integrated=True),
    Product(r"Radeon 8[89]0M", "gfx1150", integrated=True),
    Product(r"Radeon 8[246]0M|Krackan", "gfx1152", integrated=True),
    Product(r"Strix", "gfx1150", integrated=True, source=PCI_IDS + " (Strix = Ryzen AI 300, Radeon 890M/880M)"),
    Product(r"Radeon 7[468]0M|Phoenix|Hawk Point", "gfx1103", integrated=True),
    Product(r"Van Gogh|Steam Deck", "gfx1033", integrated=True, source=LLVM_TABLE),
    Product(r"Raphael|Granite Ridge|Dragon Range|Radeon 610M", "gfx1036", integrated=True, source=LLVM_TABLE),
    Product(r"Rembrandt|Radeon 6[68]0M", "gfx1035", integrated=True, source=LLVM_TABLE),
    Product(r"Renoir|Cezanne|Lucienne|Barcelo", "gfx90c", integrated=True, source=LLVM_TABLE),
    # NVIDIA
    Product(r"B300|GB300", "sm_103", source=NVIDIA_CC),
    Product(r"B200|B100|GB200", "sm_100", peak_bf16_tflops=2250.0, source=NVIDIA_CC),
    Product(r"GB10\b|DGX Spark", "sm_121", source=NVIDIA_CC),
    # Jetson Thor (T5000/T4000): compute capability 11.0 since CUDA 13 (CUDA 12.8/12.9 called it sm_101)
    Product(r"Jetson (?:AGX )?Thor|Jetson T[45]000|\bAGX Thor\b", "sm_110", source=NVIDIA_CC),
    # checked v20 against developer.nvidia.com/cuda-gpus: RTX PRO 6000 (Server, Workstation, Max-Q), 5000, 4500, 4000
    # (and SFF) and 2000 Blackwell and GeForce RTX 5050-5090 are 12.0 (RTX PRO 4500 added: the row missed it)
    Product(r"RTX 50[5-9]0|RTX PRO (?:[2-6]000|4500)|RTX 6000 PRO", "sm_120", source=NVIDIA_CC),
    Product(r"H200|GH200", "sm_90", peak_bf16_tflops=989.4, source=NVIDIA_CC),
    Product(r"H100.*PCIe", "sm_90", peak_bf16_tflops=756.5, source=NVIDIA_CC),
    Product(r"H100|H800", "sm_90", peak_bf16_tflops=989.4, source=NVIDIA_CC),
    Product(r"L40S", "sm_89", peak_bf16_tflops=362.1, source=NVIDIA_CC),
    Product(r"RTX 4090", "sm_89", peak_bf16_tflops=165.2, source=NVIDIA_CC),
    # checked v20 against developer.nvidia.com/cuda-gpus: RTX 6000, 5000, 4500, 4000, 4000 SFF and 2000 Ada are 8.9 (RTX
    # 4500 Ada added: the row missed it unless "Ada Generation" followed). The RTX 5880 Ada is not on that page: not
    # checked against a source (an Ada card, so 8.9 by its architecture)
    Product(r"L40|L4\b|(?<!Quadro )RTX 40\d0|RTX (?:[2-6]000|4500) Ada|RTX 5880 Ada|Ada Generation", "sm_89", source=NVIDIA_CC),
    Product(r"A100|A800", "sm_80", peak_bf16_tflops=312.0, source=NVIDIA_CC),
    Product(r"A30\b", "sm_80", peak_bf16_tflops=165.0, source=NVIDIA_CC),
    Product(r"A10G?\b|A40\b|RTX 30\d0|RTX A\d000", "sm_86", source=NVIDIA_CC),
    Product(r"Jetson (?:AGX )?Xavier|Xavier NX|\bAGX Xavier\b", "sm_72", source=NVIDIA_CC),
    # (not the "int4" of a quantized model's name, "moss-moon-003-sft-int4": round 20, r20d)
    Product(r"(?<!in)T4\b|RTX 20\d0|Quadro RTX|TITAN RTX|GTX 16\d0|MX ?[45]50\b", "sm_75", source=NVIDIA_CC),
    Product(r"V100|TITAN V", "sm_70", source=NVIDIA_CC),
    Product(r"P100\b", "sm_60", source=NVIDIA_CC),
    # (a bare "P40" is the Tesla P40, 6.1 in NVIDIA's legacy table, developer.nvidia.com/cuda-legacy-gpus; checked v20)
    Product(r"GTX 10[5-8]0|TITAN Xp|TITAN X \(Pascal\)|Tesla P(?:40|4)\b|(?<![\w-])P40\b|Quadro P\d{3,4}|MX ?[1-3]50\b|GT 1030", "sm_61",
            source=NVIDIA_CC),
    # the mobile Maxwell Quadros on GM107/GM108 are first-generation Maxwell, 5.0, not the desktop M-series' 5.2
    Product(r"Quadro M(?:500|600|1000|2000)M\b|Quadro M(?:520|620|1200)\b", "sm_50", source=NVIDIA_CC),
    # (a bare "TITAN X" is the Maxwell GeForce GTX TITAN X: nvidia-smi names the Pascal card "TITAN X (Pascal)")
    Product(r"GTX 9[5-8]0(?!M)|GTX 9[6-8]5M|GTX 9[78]0M|(?:GTX )?TITAN X\b(?! ?\(Pascal\))|Tesla M(?:40|60)\b|"
            r"Quadro M\d{3,4}", "sm_52", source=NVIDIA_CC),
    Product(r"Jetson Nano|Tegra X1", "sm_53", source=NVIDIA_CC),
    Product(r"GTX 7[45]0|GTX 9[456]0M|Quadro K[12]200|MX ?1[13]0\b", "sm_50", source=NVIDIA_CC),
    Product(r"Tesla K80|\bK80\b", "sm_37", source=NVIDIA_CC),
    Product(r"Tesla K(?:40|20)|Quadro K(?:5200|6000)\b|GTX 780|GTX TITAN\b(?! X)|GT 730", "sm_35", source=NVIDIA_CC),
    Product(r"GTX 6[5-9]0|GTX 7[67]0|Quadro K(?:4[02]00|5000|2000D?|600|420)\b|Tesla K10\b|GRID K520|GT 7[34]0M\b", "sm_30", source=NVIDIA_CC),
    # Tesla-generation GeForce (NVIDIA's legacy CUDA GPU table: GeForce 210, GT 220, GT 240 are 1.2)
    # Fermi (the same legacy table: Tesla C2050 / C2070 / C2075, M2050-M2090 and GTX 470-580 are 2.0). Checked v20 against
    # copies of NVIDIA's older cuda-gpus table (2.0: GTX 590, 580, 570, 480, 470, 465, Tesla C2075, C2050/C2070,
    # M2050/M2070/M2075/M2090; 2.1: GTX 560 Ti, 550 Ti, 460, so those stay out); today's legacy page, as stored here,
    # was not read down to its 2.x rows
    Product(r"Tesla [CM]20[5-9][05]\b|GTX [45][78]0\b", "sm_20", source=NVIDIA_CC + " (legacy GPUs)"),
    Product(r"GeForce 210\b|GT 2[24]0\b", "sm_12", source=NVIDIA_CC + " (legacy GPUs)"),
)

# Names that say "an AMD GPU" and nothing more: amd-smi's default view and rocminfo's Marketing Name print
# them for most APUs (Strix Halo among them), so the architecture must come from another command.
GENERIC_AMD_NAMES = re.compile(r"^\s*(AMD )?Radeon(\(TM\))? Graphics\s*$", re.IGNORECASE)
ARCH_COMMANDS = "rocminfo | grep -m1 -o 'gfx[0-9a-f]*'   (or: amd-smi static --asic | grep TARGET_GRAPHICS_VERSION)"


def lookup_product(name: str = "", device_id: Optional[int] = None) -> Optional[Product]:
    """The table row for a product name, or else for an AMD PCI device id (gpu_ids.tsv: the PCI ID database's name,
    matched against this table for its peak, else the id row's own arch); None if unknown."""
    candidates = [name] if name and not GENERIC_AMD_NAMES.match(name) else []
    row = lookup_id(device_id, AMD) if device_id is not None else None
    if row is not None:
        candidates.append(row.name)
    for text in candidates:
        for product in PRODUCTS:
            if re.search(product.pattern, text, re.IGNORECASE):
                if row is not None and text == row.name and product.arch != row.arch:
                    break   # the id table's own arch is the authority for the id
                return product
    if row is not None:
        return Product(re.escape(row.name), row.arch, integrated=row.integrated, source=GPU_IDS)
    return None


# ---------------------------------------------------------------------------------------------------------
# Architectures: what each AMD target can do
# ---------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Override:
    """HSA_OVERRIDE_GFX_VERSION for this arch: a value, and whether it is a safe stand-in."""
    value: Optional[str]                # e.g. "10.3.0"
    verdict: str                        # not-needed | works | trap | none | unverified
    why: str
    source: str


@dataclass(frozen=True)
class Arch:
    gfx: str
    family: str                         # CDNA3, RDNA4, RDNA3.5 ...
    kind: str                           # instinct | dgpu | apu
    bf16: bool                          # native bf16 matrix math
    fp8: Optional[str]                  # None, "fnuz" (MI300 formats) or "ocp" (OCP e4m3/e5m2)
    sdpa: str                           # PyTorch's fused SDPA (AOTriton): native | experimental | none | unknown
    override: Override
    flash_attn_ck: bool = False         # flash-attn's CK backend builds for it in release v2.8.3
    apu_trains: bool = False            # an APU worth training on when it is the only GPU (ROCm-supported, big)
    max_rocm: Optional[tuple[int, int]] = None   # newest ROCm whose wheels really run it (libraries dropped it later)
    note: str = ""
    source: str = ""
    bnb_4bit: Optional[str] = None      # first bitsandbytes release whose ROCm wheels run 4-bit (QLoRA) on it (BNB_4BIT)


NOT_NEEDED = "pytorch.org wheels carry code for it: the override would only run another chip's code"
_NO_OVERRIDE = Override(None, "none", "no other target's code runs on this chip", "research/rocm.md section 3")
_RDNA3_DGPU_OVERRIDE = Override("11.0.0", "works", "RDNA3 discrete chips run gfx1100 code; the usual stand-in before "
                                "the wheels had this target (torch < 2.6 for gfx1101, < 2.7 for gfx1102)",
                                "research/rocm.md row 3; pytorch #164346")
_AOTRITON_010 = "AOTriton 0.10b in torch 2.8+ (pytorch PR #156499): official gfx950/gfx1201; experimental gfx1101/gfx1150/gfx1151/gfx1200"
_FP8_FNUZ = "HIP FP8 docs: gfx940/941/942 support FNUZ FP8, not OCP (rocm.docs.amd.com/projects/HIP .../fp8_numbers)"
_FP8_OCP = "LLVM PR #106160: gfx12 and newer gfx9 use the OCP FP8 formats; ROCm precision-support page"
# bitsandbytes 4-bit per family (the arch's bnb_4bit field): RDNA from 0.49.0 (bitsandbytes PR #1748), CDNA from
# 0.49.2 (4-bit blocksize 64/32 on wave64, bitsandbytes PR #1887); both per unsloth PR #4161. The 0.50.0 wheels add
# the rest of gfx110x/115x/120x, and their ROCm 7.14 wheel gfx908 and gfx103x (bitsandbytes installation.mdx @0.50.0).
_BNB_RDNA = "0.49.0"
_BNB_CDNA = "0.49.2"
_BNB_050 = "0.50.0"


ARCHS: tuple[Arch, ...] = (
    Arch("gfx803", "GCN4", "dgpu", False, None, "none", _NO_OVERRIDE,
         note="not supported by ROCm 6 or 7; no current torch wheel", source=GPU_SPECS),
    Arch("gfx900", "GCN5 (Vega)", "dgpu", False, None, "none", _NO_OVERRIDE,
         note="last in the ROCm 7.2 wheels (OS-package builds); the TheRock-based 7.14 wheels drop it",
         source="pytorch .ci/docker/manywheel/build.sh (legacy builds add gfx900;gfx906)"),
    Arch("gfx902", "GCN5 (Vega APU: Raven Ridge, Picasso)", "apu", False, None, "none",
         Override("9.0.0", "unverified", "the Vega APUs are GCN5 like gfx900, whose code the ROCm 5/6 wheels carried; "
                  "reported for gfx90c, not confirmed here", "ROCm/rocBLAS #1398 (gfx90c)"),
         note="Radeon Vega graphics of Ryzen 2000G/3000G; no current wheel", source=LLVM_TABLE),
    Arch("gfx90c", "GCN5 (Vega APU: Renoir, Cezanne, Lucienne)", "apu", False, None, "none",
         Override("9.0.0", "works", "the Vega APUs run gfx900 code (rocBLAS has no gfx90c library)",
                  "ROCm/rocBLAS #1398"),
         note="Radeon Vega graphics of Ryzen 4000/5000 APUs; gfx900 code needs a wheel that still carries gfx900",
         source=LLVM_TABLE),
    Arch("gfx906", "GCN5.1 (Vega 20)", "instinct", False, None, "none", _NO_OVERRIDE, max_rocm=(6, 3),
         note="bf16 is emulated by rocBLAS (slow); fp16 with loss scaling is the fast path. Newer wheels still list "
              "gfx906 but their rocBLAS has no gfx906 kernels ('TensileLibrary.dat ... not read'): rocm6.3 is the last",
         source="research/rocm.md section 5; TensorFlow-upstream PR #1395; unsloth PR #7354; ROCm/TheRock #1844"),
    Arch("gfx908", "CDNA", "instinct", True, None, "none", _NO_OVERRIDE, bnb_4bit=_BNB_050,
         note="no hipBLASLt: torch falls back to hipBLAS", source="ROCm precision-support; rocm-libraries #780"),
    Arch("gfx90a", "CDNA2", "instinct", True, None, "native", _NO_OVERRIDE, flash_attn_ck=True, bnb_4bit=_BNB_CDNA,
         note="matrix cores flush fp16 denormals: train in bf16 (pytorch #182952)",
         source="ROCm precision-support; pytorch PR #121561 (AOTriton flash on MI200/MI300)"),
    Arch("gfx942", "CDNA3", "instinct", True, "fnuz", "native", _NO_OVERRIDE, flash_attn_ck=True, bnb_4bit=_BNB_CDNA,
         note="MI300A/X, MI308X, MI325X; tf32 on matrix cores", source=f"{GPU_SPECS}; {_FP8_FNUZ}"),
    Arch("gfx950", "CDNA4", "instinct", True, "ocp", "native", _NO_OVERRIDE, flash_attn_ck=True, bnb_4bit=_BNB_050,
         note="MI350X/MI355X; also fp6/fp4. AOTriton 0.13b (ROCm 10.0 on) picks a slower flash-attention backward "
              "here: 9-25% lower training throughput (ROCm/TheRock #7696)",
         source=f"{GPU_SPECS}; {_FP8_OCP}; {_AOTRITON_010}; ROCm/TheRock #7696"),
    *(Arch(gfx, "RDNA1", "dgpu", False, None, "none",
           Override(None, "unverified", "RDNA2 code (10.3.0) is a different ISA; no report of it working for training",
                    "research/rocm.md section 3"),
           note="no pytorch.org wheel has RDNA1 code (a rocm6.3 wheel on an RX 5700 XT: pytorch #145670); AMD's "
                "multi-arch nightlies have a device-gfx1010 extra",
           source=f"{LLVM_TABLE}; unsloth PR #9138 (torch[device-gfx1010] from rocm.nightlies.amd.com/whl-multi-arch)")
      for gfx in ("gfx1010", "gfx1012")),
    Arch("gfx1030", "RDNA2", "dgpu", False, None, "none", _NO_OVERRIDE, bnb_4bit=_BNB_050,
         note="no bf16 arithmetic (Triton bf16 kernels abort); fp16 with loss scaling",
         source="unsloth PR #7682; research/rocm.md section 5"),
    *(Arch(gfx, "RDNA2", "apu" if gfx in ("gfx1033", "gfx1035", "gfx1036") else "dgpu", False, None, "none",
           Override("10.3.0", "works", "same RDNA2 ISA as gfx1030, whose code the wheels carry",
                    "ROCm legacy-rocm-build #1797; pytorch #132570; research/rocm.md row 3"),
           note="no bf16 arithmetic; fp16 with loss scaling", source=LLVM_TABLE, bnb_4bit=_BNB_050)
      for gfx in ("gfx1031", "gfx1032", "gfx1034", "gfx1035", "gfx1036")),
    Arch("gfx1033", "RDNA2", "apu", False, None, "none",
         Override("10.3.0", "trap", "Steam Deck (Van Gogh): training on gfx103X wheels returns wrong numbers "
                  "(negative MSE, NaN) with identical seeds where the CPU converges", "unsloth PR #8412"),
         note="Van Gogh (Steam Deck)", source=LLVM_TABLE),
    Arch("gfx1100", "RDNA3", "dgpu", True, None, "native", _NO_OVERRIDE, bnb_4bit=_BNB_RDNA,
         note="flash-attn CK for RDNA3 only on main after PR #2400 (not v2.8.3); SDPA is the safe path",
         source="AOTriton 0.8b (pytorch PR #140172): gfx1100 no longer experimental; llama.cpp b11847 (WMMA bf16)"),
    Arch("gfx1101", "RDNA3", "dgpu", True, None, "experimental", _RDNA3_DGPU_OVERRIDE, bnb_4bit=_BNB_RDNA,
         source=f"{GPU_SPECS}; {_AOTRITON_010}"),
    Arch("gfx1102", "RDNA3", "dgpu", True, None, "unknown", _RDNA3_DGPU_OVERRIDE, bnb_4bit=_BNB_050,
         source=f"{GPU_SPECS}; pytorch PR #147761 (gfx1102 in the wheels)"),
    Arch("gfx1103", "RDNA3", "apu", True, None, "experimental",
         Override("11.0.0", "trap", "gfx1100 code on gfx1103 gives GPU page faults and hard hangs (ISA differences)",
                  "pytorch #179653; llama.cpp #20839"), bnb_4bit=_BNB_050,
         note="Radeon 780M/760M/740M", source=f"{GPU_SPECS}; pytorch PR #168351 (AOTriton 0.11.1b enables gfx1103)"),
    Arch("gfx1150", "RDNA3.5", "apu", True, None, "experimental",
         Override("11.0.0", "trap", "gfx1100 code on gfx1150 fails with HSA_STATUS_ERROR_INVALID_ISA",
                  "likelovewant/ROCmLibs-for-gfx1103-AMD780M-APU #37"), bnb_4bit=_BNB_RDNA,
         apu_trains=True, note="Strix Point: Radeon 890M/880M", source=f"{GPU_SPECS}; {_AOTRITON_010}"),
    Arch("gfx1151", "RDNA3.5", "apu", True, None, "experimental",
         Override("11.0.0", "works", "reported working before the wheels had gfx1151; slower than native kernels, "
                  "and unneeded with a ROCm 7 wheel", "pytorch #164346; research/rocm.md row 3"), bnb_4bit=_BNB_RDNA,
         apu_trains=True, note="Strix Halo: Radeon 8060S/8050S/8040S, up to 128 GB shared memory",
         source=f"{GPU_SPECS}; {_AOTRITON_010}"),
    Arch("gfx1152", "RDNA3.5", "apu", True, None, "unknown",
         Override("11.5.0", "unverified", "gfx1150 code (the Strix Point sibling, same RDNA3.5 generation) was reported "
                  "loading and running models in llama.cpp's HIP build; not confirmed for training",
                  "ggml-org/llama.cpp #19949; yanwk/ComfyUI-Docker discussion #167 (no wheel of its own)"),
         bnb_4bit=_BNB_050,
         note="Krackan Point: Radeon 860M/840M/820M", source=GPU_SPECS),
    Arch("gfx1200", "RDNA4", "dgpu", True, "ocp", "experimental", _NO_OVERRIDE, bnb_4bit=_BNB_RDNA,
         note="Radeon RX 9060 XT / 9060 / 9050", source=f"{GPU_SPECS}; {_FP8_OCP}; {_AOTRITON_010}"),
    Arch("gfx1201", "RDNA4", "dgpu", True, "ocp", "native", _NO_OVERRIDE, bnb_4bit=_BNB_RDNA,
         note="Radeon RX 9070 / 9070 XT / 9070 GRE, Radeon AI PRO R9700",
         source=f"{GPU_SPECS}; {_FP8_OCP}; {_AOTRITON_010}; ROCm/TransformerEngine #359 (fp8 in PyTorch on R9700)"),
)

_ARCH_BY_GFX = {a.gfx: a for a in ARCHS}


def normalise_gfx(arch: str) -> str:
    """'gfx90a:sramecc+:xnack-' -> 'gfx90a' (rocminfo and gcnArchName append target features)."""
    return arch.split(":")[0].strip().lower()


def arch_info(arch: Optional[str]) -> Optional[Arch]:
    return _ARCH_BY_GFX.get(normalise_gfx(arch)) if arch else None


# ---------------------------------------------------------------------------------------------------------
# Wheels: which torch builds carry code for which architectures
# ---------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class WheelIndex:
    name: str
    channel: str                        # stable | nightly | amd-nightly
    torch: str                          # torch versions published there
    archs: frozenset[str]
    install: str                        # the pip line; {arch} is filled in for per-arch extras
    source: str
    note: str = ""
    rocm: Optional[tuple[int, int]] = None   # ROCm version of the index, for ordering

    def install_line(self, arch: str) -> str:
        return self.install.format(arch=normalise_gfx(arch))


_CDNA_RDNA2_3 = {"gfx900", "gfx906", "gfx908", "gfx90a", "gfx942", "gfx1030", "gfx1100"}
_RDNA3_4 = {"gfx1101", "gfx1102", "gfx1200", "gfx1201"}
_NEW_ROCM7 = {"gfx950", "gfx1150", "gfx1151"}


def _pytorch(rocm: str, torch: str, archs: set[str], source: str, note: str = "") -> WheelIndex:
    major, minor = (int(x) for x in rocm.split(".")[:2])
    return WheelIndex(f"pytorch.org rocm{rocm}", "stable", torch, frozenset(archs),
                      f"pip install torch --index-url https://download.pytorch.org/whl/rocm{rocm}", source, note,
                      (major, minor))


WHEELS: tuple[WheelIndex, ...] = (
    _pytorch("6.0", "2.3-2.4", _CDNA_RDNA2_3, "torch.cuda.get_arch_list() of 2.4.1+rocm6.0 (astral-sh/uv #14086)"),
    _pytorch("6.1", "2.4-2.6", _CDNA_RDNA2_3, "pytorch #132570 (arch list of the 2024 wheels); previous-versions page",
             note="2.6 adds gfx1101 (pytorch PR #141667)"),
    _pytorch("6.2", "2.5", _CDNA_RDNA2_3, "torch.cuda.get_arch_list() of 2.5.1+rocm6.2 (astral-sh/uv #14086)"),
    _pytorch("6.2.4", "2.7", _CDNA_RDNA2_3 | _RDNA3_4,
             "torch.cuda.get_arch_list() of 2.7.1+rocm6.2.4 (astral-sh/uv #14086)",
             note="2.6 on this index lacks gfx1102 and gfx1200/gfx1201 (added by pytorch PRs #147761, #148562)"),
    _pytorch("6.3", "2.7-2.8", _CDNA_RDNA2_3 | _RDNA3_4, "torch.cuda.get_arch_list() of 2.7.1+rocm6.3 (astral-sh/uv #14086)"),
    _pytorch("6.4", "2.8-2.9", _CDNA_RDNA2_3 | _RDNA3_4,
             "pytorch.org previous-versions (2.9.x: ROCm 6.4 only); gfx950/gfx115x were added only to ROCm >= 7.0 "
             "builds until pytorch PR #167299"),
    _pytorch("7.1", "2.10", _CDNA_RDNA2_3 | _RDNA3_4 | _NEW_ROCM7,
             "pytorch PR #167299 (gfx950, gfx1150, gfx1151 in every ROCm 7 build); unsloth PR #8412 (rocm7.1/torch 2.10)"),
    _pytorch("7.2", "2.11+", _CDNA_RDNA2_3 | _RDNA3_4 | _NEW_ROCM7,
             "torch.cuda.get_arch_list() of the rocm7.2 wheel (astral-sh/uv PR #18730); ROCm/pytorch PR #3111"),
    WheelIndex("pytorch.org nightly rocm7.2", "nightly", "nightly",
               frozenset(_CDNA_RDNA2_3 | _RDNA3_4 | _NEW_ROCM7 | {"gfx1103"}),
               "pip install --pre torch --index-url https://download.pytorch.org/whl/nightly/rocm7.2",
               "pytorch .ci/docker/manywheel/build.sh @027375b (2026-07): gfx1103 added", rocm=(7, 2)),
    WheelIndex("AMD multi-arch nightlies (TheRock)", "amd-nightly", "nightly",
               frozenset({"gfx90a", "gfx942", "gfx950", "gfx1010", "gfx1030", "gfx1100", "gfx1101", "gfx1102",
                          "gfx1103", "gfx1150", "gfx1151", "gfx1200", "gfx1201"}),
               'pip install --index-url https://rocm.nightlies.amd.com/whl-multi-arch/ "torch[device-{arch}]"',
               "ROCm/TheRock #5954 (per-family v2/<family> indexes replaced by whl-multi-arch, torch[device-gfxNNNN]); "
               "unsloth PR #9138 (device-gfx1010)", note="brings its own ROCm runtime into the venv"),
    WheelIndex("AMD per-arch staging nightlies (TheRock v2-staging)", "amd-nightly", "nightly (2026-01)",
               frozenset({"gfx1152"}),
               "pip install --pre torch --index-url https://rocm.nightlies.amd.com/v2-staging/{arch}/",
               "vladmandic/sdnext PR #4605 (gfx1152 on v2-staging); yanwk/ComfyUI-Docker discussion #167",
               note="per-family indexes stopped updating with ROCm/TheRock PR #5790"),
)


def wheels_for(arch: str) -> list[WheelIndex]:
    """The indexes whose torch runs on this arch (listed in the wheel, and not past the arch's last ROCm)."""
    base = normalise_gfx(arch)
    row = arch_info(base)
    limit = row.max_rocm if row else None
    return [w for w in WHEELS if base in w.archs and not (limit and (w.rocm is None or w.rocm > limit))]


def current_stable_wheel() -> WheelIndex:
    return max((w for w in WHEELS if w.channel == "stable"), key=lambda w: w.rocm or (0, 0))


def first_stable_wheel(arch: str) -> Optional[WheelIndex]:
    stable = [w for w in wheels_for(arch) if w.channel == "stable"]
    return min(stable, key=lambda w: w.rocm or (0, 0)) if stable else None


def install_lines(arch: str) -> list[tuple[str, str]]:
    """(where, pip line) to get a torch with code for this arch, best first: the newest pytorch.org stable index
    that has it, else the pytorch nightly, and AMD's own nightlies. Empty when nothing ships it."""
    base = normalise_gfx(arch)
    found = wheels_for(base)
    lines: list[tuple[str, str]] = []
    stable = [w for w in found if w.channel == "stable"]
    if stable:
        best = max(stable, key=lambda w: w.rocm or (0, 0))
        lines.append((best.name, best.install_line(base)))
    else:
        lines += [(w.name, w.install_line(base)) for w in found if w.channel == "nightly"]
    lines += [(w.name, w.install_line(base)) for w in found if w.channel == "amd-nightly"]
    return lines


def override_for_arch(arch: str) -> Optional[str]:
    """The HSA_OVERRIDE_GFX_VERSION value that runs this arch on code built for a sibling, where one is known to
    work; None where none exists or the known value is a trap."""
    row = arch_info(arch)
    return row.override.value if row and row.override.verdict == "works" else None


# The archs the current pytorch.org ROCm wheels run on.
OFFICIAL_WHEEL_ARCHS = frozenset(a for a in current_stable_wheel().archs if current_stable_wheel() in wheels_for(a))


# ---------------------------------------------------------------------------------------------------------
# Known problems of particular releases, per architecture (what the 2026 issue trackers record)
# ---------------------------------------------------------------------------------------------------------

# bitsandbytes on ROCm. The per-arch 4-bit floor is the Arch table's bnb_4bit; below it 4-bit kernels fail ("Error
# invalid device function ... ops.hip", or torch._check(blocksize in [...]) on wave64 CDNA). Every release before
# 0.50.0 decodes 4-bit weights to NaN on AMD GPUs: QLoRA trains NaN from the first step.
BNB_NAN_FREE = "0.50.0"
BNB_NAN_SOURCE = ("unsloth PR #7535 (bitsandbytes PRs #1887, #1979, #2012 land in 0.50.0); unsloth/notebooks PR #300 "
                  "(MI300X: 0.49.2 trains NaN every step, the 0.50 wheel trains clean)")
# Which native library bitsandbytes loads: libbitsandbytes_rocm<NN>.so, NN from torch.version.hip. Releases through
# 0.49.2 compute NN as major*10 + minor, so HIP 7.10/7.12/7.14 (TheRock wheels) look for rocm80/rocm82/rocm84, which no
# wheel ships: "Configured ROCm binary not found at .../libbitsandbytes_rocm84.so". BNB_ROCM_VERSION picks the library.
BNB_LIBRARY_SOURCE = ("bitsandbytes #1890 (7.12 read as 82), #2014 (ROCm 7.14 -> rocm84, bnb 0.49.2), #1799 (7.10 -> "
                      "rocm80); BNB_ROCM_VERSION and -DROCM_VERSION: bitsandbytes PR #1878")


def bnb_library_names(hip_version: str) -> tuple[str, ...]:
    """The libbitsandbytes_rocm<NN>.so names bitsandbytes may look for with this torch.version.hip ('7.14.60850'):
    major*10+minor (releases through 0.49.2) and major followed by minor (the fix proposed in bitsandbytes #1890)."""
    parts = re.findall(r"\d+", hip_version or "")
    if len(parts) < 2:
        return ()
    major, minor = int(parts[0]), int(parts[1])
    return tuple(dict.fromkeys((f"libbitsandbytes_rocm{major * 10 + minor}.so", f"libbitsandbytes_rocm{major}{minor}.so")))


@dataclass(frozen=True)
class RcclIssue:
    """A collective problem of one RCCL generation on some architectures, and the settings that avoid it."""
    archs: frozenset[str]
    symptom: str
    settings: dict[str, str]            # environment variables that avoid it
    fixed_in: str
    source: str
    rccl: Optional[tuple[tuple[int, int, int], tuple[int, int, int]]] = None   # affected RCCL versions [first, last]
    rocm_from: Optional[tuple[int, int]] = None                                # affected ROCm releases [from, to]
    rocm_to: Optional[tuple[int, int]] = None
    hang: bool = True                   # a hang (the watchdog names it); else a slowdown


RCCL_ISSUES: tuple[RcclIssue, ...] = (
    RcclIssue(frozenset({"gfx1200", "gfx1201"}),
              "RCCL 2.27 (ROCm 7.2.x) has no RDNA4 tuning entry and falls back to gfx906 PCIe tuning: the first "
              "all-reduce across 2+ RDNA4 GPUs deadlocks, both GPUs at 100%, no error",
              {"NCCL_PROTO": "Simple"},
              "ROCm/rocm-systems PRs #6966, #7183 (TheRock RCCL >= 2.28.3); RCCL of ROCm 7.1.1 works",
              "vllm-project/vllm #40980; ROCm/rocm-systems #5480 (2.27.3 worked, 2.27.7 deadlocks); "
              "PrismML-Eng/llama.cpp #144", rccl=((2, 27, 4), (2, 28, 2)), rocm_from=(7, 2), rocm_to=(7, 2)),
    RcclIssue(frozenset({"gfx90a"}),
              "with ROCm 7.13 or later the runtime reclaims scratch memory at every launch, which slows RCCL down",
              {"HSA_NO_SCRATCH_RECLAIM": "1"}, "not yet",
              "ROCm/rocm-systems PR #11472 (RCCL changelog, known issues)", rocm_from=(7, 13), hang=False),
)

# Consumer RDNA boards: two cards on different PCIe root complexes often have no working peer-to-peer path
# (hipDeviceCanAccessPeer is 0), and RCCL's P2P transport then hangs or fails where one GPU works: LLaMA-Factory #6271
# (2x RX 7900 XTX, ROCm 6.2.3), ROCm/legacy-rocm-build #6074 (2x RX 7900 XTX, RCCL 2.27.7), PrismML-Eng/llama.cpp #144.
RDNA_P2P_SETTINGS = {"NCCL_P2P_DISABLE": "1"}
RDNA_P2P_SOURCE = "LLaMA-Factory #6271; ROCm/legacy-rocm-build #6074; PrismML-Eng/llama.cpp #144; ROCm/vllm #390"


def is_rdna(arch: str) -> bool:
    return bool(re.match(r"gfx1[0-2]\d", normalise_gfx(arch or "")))


def rccl_issues_for(archs: list[str], rccl_version: Optional[tuple[int, ...]] = None,
                    rocm_version: Optional[tuple[int, int]] = None) -> list[RcclIssue]:
    """The known RCCL problems of these GPUs with this RCCL / ROCm (an unknown version does not rule one out)."""
    bases = {normalise_gfx(a) for a in archs}
    found = []
    for issue in RCCL_ISSUES:
        if not bases & issue.archs:
            continue
        if issue.rccl and rccl_version is not None and not issue.rccl[0] <= tuple(rccl_version[:3]) <= issue.rccl[1]:
            continue
        if rccl_version is None and rocm_version is not None and not (
                (issue.rocm_from is None or tuple(rocm_version[:2]) >= issue.rocm_from)
                and (issue.rocm_to is None or tuple(rocm_version[:2]) <= issue.rocm_to)):
            continue
        found.append(issue)
    return found


def rccl_settings(archs: list[str], rccl_version: Optional[tuple[int, ...]] = None,
                  rocm_version: Optional[tuple[int, int]] = None, hangs_only: bool = False) -> dict[str, str]:
    """The environment a multi-GPU run on these GPUs should start with: the known issues' settings, and on 2+ consumer
    RDNA cards peer-to-peer off (a board with working P2P loses only speed; `doctor --allreduce` tells)."""
    settings: dict[str, str] = {}
    for issue in rccl_issues_for(archs, rccl_version, rocm_version):
        if issue.hang or not hangs_only:
            settings.update(issue.settings)
    if sum(is_rdna(a) for a in archs) >= 2:
        settings.update(RDNA_P2P_SETTINGS)
    return settings


@dataclass(frozen=True)
class KernelBug:
    """A torch kernel that crashes or is missing on some architectures in some wheels."""
    op: str
    archs: frozenset[str]
    wheels: re.Pattern                  # matched against torch.__version__
    symptom: str
    fix: str
    source: str


KERNEL_BUGS: tuple[KernelBug, ...] = (
    KernelBug("torch._grouped_mm", frozenset({"gfx1200", "gfx1201"}), re.compile(r"\+rocm7\.12(\.|$)"),
              "a batched (3-D) weight makes torch._grouped_mm run a null HIP kernel: the process dies (0xC0000005, "
              "no exception); MoE layers and their autograd decompositions call it",
              "torch==2.11.0+rocm7.13.0 or newer (the fixed wheel)", "ROCm/TheRock #5284"),
)


def kernel_bugs_for(arch: str, torch_version: str) -> list[KernelBug]:
    base = normalise_gfx(arch or "")
    return [b for b in KERNEL_BUGS if base in b.archs and b.wheels.search(torch_version or "")]


# AOTriton regressions: a version whose kernels are slower than the one before on some architecture.
@dataclass(frozen=True)
class AotritonRegression:
    archs: frozenset[str]
    rocm_from: tuple[int, int]          # first ROCm release that ships it
    aotriton: str
    what: str
    workaround: str
    source: str


AOTRITON_REGRESSIONS: tuple[AotritonRegression, ...] = (
    AotritonRegression(frozenset({"gfx950"}), (10, 0), "0.13b",
                       "AOTriton 0.13b picks a slower flash-attention backward than 0.11.2b's 3-kernel split: 9-25% "
                       "lower training throughput (BART, GPT-2, BERT, RoBERTa, Llama 2 70B)",
                       "measure (`steadytune doctor --attention-bench`); the vendor's workaround is a torch rebuilt "
                       "with AOTriton 0.11.2b", "ROCm/TheRock #7696"),
)


def aotriton_regressions_for(arch: str, rocm: Optional[tuple[int, int]]) -> list[AotritonRegression]:
    """Regressions for this arch; with the ROCm version unknown, every one of the arch's (doctor says 'may')."""
    base = normalise_gfx(arch or "")
    return [r for r in AOTRITON_REGRESSIONS if base in r.archs and (rocm is None or rocm >= r.rocm_from)]
