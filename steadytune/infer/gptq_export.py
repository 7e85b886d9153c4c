"""GPTQ export (LLaMA-Factory's `export_quantization_bit`, `export_quantization_dataset`, `_nsamples`, `_maxlen`):
the merged model quantised to 2, 3, 4 or 8 bits by GPTQModel, the maintained GPTQ quantiser, in export_dir.

LLaMA-Factory (model/model_utils/quantization.py) hands transformers a GPTQConfig, whose quantiser (optimum over
GPTQModel) quantises while the model loads; here GPTQModel quantises the merged folder that the export has just
written, with GPTQConfig's defaults (group size 128, no activation order, damping 0.1, symmetric), then the folder's
weights are replaced by the quantised ones and loaded back to check them. The calibration samples are drawn as
LLaMA-Factory draws them: `nsamples` times a random row of the dataset's `text` column longer than `maxlen` tokens
(100 tries each), and a random window of `maxlen` tokens of it.

Installing: GPTQModel 5.8 is pure Python once built without its CUDA kernels, and quantises on the CPU too
(`BUILD_CUDA_EXT=0 pip install --no-build-isolation 'gptqmodel==5.8.0'`, with pip install 'steadytune[gptq]'
for its other dependencies); on a CUDA machine plain `pip install gptqmodel` builds its kernels. Its 7.x releases
import torchvision at start, whose PyPI wheels are CUDA builds that do not load beside a CPU-only torch.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import random
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from steadytune.data.readers import read_rows
from steadytune.errors import UserError

GPTQ_BITS = (2, 3, 4, 8)
# transformers' GPTQConfig defaults, which LLaMA-Factory's export leaves as they are
GPTQ_DEFAULTS = {"group_size": 128, "desc_act": False, "damp_percent": 0.1, "sym": True}
INSTALL = ("pip install 'steadytune[gptq]' (GPTQModel; on a machine without CUDA: BUILD_CUDA_EXT=0 pip install "
           "--no-build-isolation 'gptqmodel==5.8.0', since its 7.x releases import torchvision, whose PyPI wheels "
           "do not load beside a CPU-only torch)")


def check_gptq_request(bits: int, dataset: str | None) -> None:
    """Before anything loads: the bits, the calibration data and the quantiser (LLaMA-Factory's checks, plus the
    install line)."""
    if bits not in GPTQ_BITS:
        raise UserError(f"export_quantization_bit: {bits}; GPTQ quantises to 2, 3, 4 or 8 bits")
    if not dataset:
        raise UserError("export_quantization_bit needs export_quantization_dataset (a file or hub dataset with a "
                        "`text` column: the calibration samples), as in LLaMA-Factory")
    if importlib.util.find_spec("gptqmodel") is None:
        raise UserError(f"export_quantization_bit: {bits} needs GPTQModel, which is not installed: {INSTALL}")


def read_texts(dataset: str) -> list[str]:
    """The `text` column of a local file (json, jsonl, csv, parquet, txt) or of a hub dataset's train split."""
    path = Path(dataset)
    if path.is_file():
        rows = [row.data for row in read_rows(path)]
    else:
        try:
            import datasets
            rows = list(datasets.load_dataset(dataset, split="train"))
        except Exception as e:   # not installed, no hub, no such dataset: one line either way
            raise UserError(f"export_quantization_dataset: {dataset} is no file here and could not be loaded from "
                            f"the hub ({type(e).__name__}: {str(e).splitlines()[0][:200]})") from None
    texts = [r["text"] for r in rows if isinstance(r, dict) and isinstance(r.get("text"), str)]
    if not texts:
        raise UserError(f"export_quantization_dataset: {dataset} has no rows with a `text` column")
    return texts


def calibration_samples(tokenizer, texts: list[str], nsamples: int, maxlen: int, seed: int = 42) -> list[dict]:
    """LLaMA-Factory's _get_quantization_dataset: nsamples windows of maxlen tokens from rows longer than maxlen."""
    rng = random.Random(seed)
    samples = []
    for _ in range(nsamples):
        for _ in range(100):
            ids = tokenizer(texts[rng.randint(0, len(texts) - 1)])["input_ids"]
            if len(ids) > maxlen:
                break
        else:
            raise UserError(f"export_quantization_maxlen: {maxlen}: no row of the calibration data found longer than "
                            "that in 100 tries; lower export_quantization_maxlen")
        start = rng.randint(0, len(ids) - maxlen - 1)
        window = ids[start:start + maxlen]
        samples.append({"input_ids": window, "attention_mask": [1] * len(window)})
    return samples


def quantize_folder(folder: Path, bits: int, samples: list[dict], device: str = "cpu", reference=None,
                    prompt_ids=None) -> dict:
    """Quantise the merged model in `folder` with GPTQModel and put the quantised weights (and config.json with its
    quantization_config) in place of the full-precision ones; -> a report. With `reference` (the merged model) and
    `prompt_ids`, the quantised model is loaded back and its next-token choices compared with the reference's."""
    from gptqmodel import GPTQModel, QuantizeConfig   # optional dependency: the gptq extra

    started = time.perf_counter()
    folder = folder.resolve()
    staging = folder / ".gptq"
    if staging.exists():
        shutil.rmtree(staging)
    # GPTQModel writes its quantisation log and offloaded layers into the working folder: a scratch one instead
    with tempfile.TemporaryDirectory(prefix="gptq-") as scratch, contextlib.chdir(scratch):
        config = QuantizeConfig(bits=bits, **GPTQ_DEFAULTS, offload_to_disk_path=str(Path(scratch) / "offload"))
        model = GPTQModel.load(str(folder), config, device=device)
        model.quantize(samples, batch_size=1)
        model.save(str(staging))
        del model
    for old in list(folder.glob("model*.safetensors")) + list(folder.glob("model.safetensors.index.json")):
        old.unlink()
    for new in staging.iterdir():
        if new.name.startswith("model") or new.name in ("config.json", "quantize_config.json"):
            new.replace(folder / new.name)
    shutil.rmtree(staging)
    report: dict[str, Any] = {"bits": bits, "samples": len(samples), "quantize_seconds": time.perf_counter() - started,
                              "weights_bytes": sum(f.stat().st_size for f in folder.glob("model*.safetensors"))}
    if reference is not None and prompt_ids is not None:
        with tempfile.TemporaryDirectory(prefix="gptq-") as scratch, contextlib.chdir(scratch):
            report["agreement"] = next_token_agreement(folder, reference, prompt_ids)
    return report


@torch.no_grad()
def next_token_agreement(folder: Path, reference, prompt_ids: torch.Tensor) -> float:
    """Share of positions where the quantised model (loaded back by GPTQModel) predicts the reference's token."""
    from gptqmodel import GPTQModel

    loaded = GPTQModel.load(str(folder), device="cpu")
    quantized = loaded.model.eval()
    want = reference(prompt_ids).logits.argmax(-1)
    got = quantized(prompt_ids).logits.argmax(-1)
    return float((want == got).float().mean())


def describe(report: dict) -> str:
    agreement = (f"; loaded back: the same next token as the merged model at {report['agreement']:.0%} of "
                 "positions" if "agreement" in report else "")
    return (f"GPTQ {report['bits']}-bit (GPTQModel; group size {GPTQ_DEFAULTS['group_size']}, "
            f"{report['samples']} calibration samples) in {report['quantize_seconds']:.1f} s, "
            f"{report['weights_bytes'] / 1e6:.2f} MB of weights{agreement}")


def quantization_config_of(folder: Path) -> dict | None:
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    return config.get("quantization_config")
