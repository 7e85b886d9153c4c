"""Fold a trained adapter into its base and save a Hugging Face folder that any tool loads as a plain model.

peft's `merge_and_unload` does the merge for every variant we train (LoRA, rsLoRA's scaling, DoRA's magnitude
vector, and `additional_target` modules, whose trained copies replace the originals). The merge runs in fp32
(the adapter's and the base's precision do not round each other away); the weights are cast to the export dtype
only when saved.

The saved folder carries what makes it behave like the run: the tokenizer with the run's chat template (so
`apply_chat_template` gives the training prompt), `generation_config.json` whose stop tokens include the
template's end-of-turn token, `run_config.yaml`, `base_model.json` and a model card.

Stop tokens (tests/golden/lf_fidelity.json: LLaMA-Factory 0.9.5's export of a Qwen-style run). Each consumer reads
them from another place:
- the tokenizer's eos_token: vLLM stops there always (generation_config.json only adds to it, and only where vLLM
  reads it), llama.cpp's converter makes it the GGUF's eos, Ollama and TGI read it. Where the template replaces eos
  (Qwen's <|im_end|>, Llama 3's <|eot_id|>, Gemma's <end_of_turn>: LLaMA-Factory's replace_eos) the exported tokenizer
  says the template's stop word, as LLaMA-Factory's does;
- generation_config.json's eos_token_id: what transformers' `generate` stops at (it does not read the tokenizer).
  LLaMA-Factory leaves the base model's value there (the tiny Qwen's <eos>; a base Qwen's <|endoftext|>), so a plain
  `generate` on its export runs past <|im_end|>: here it lists the template's stop words first, then the base's own
  eos ids, which keeps LLaMA-Factory's value and adds what the chat format needs.
"""

from __future__ import annotations

import contextlib
import json
import shutil
from pathlib import Path
from typing import Any

import torch

from steadytune.errors import UserError
from steadytune.infer.generate import chat_template_of
from steadytune.infer.loading import DTYPES
from steadytune.model.vision import is_vision_model

WEIGHT_PATTERNS = ("model*.safetensors", "model.safetensors.index.json")


def merge_adapter(model: torch.nn.Module) -> torch.nn.Module:
    """The plain transformers model with the adapter folded in (a model without adapter is returned as is)."""
    from peft import PeftModel

    if not isinstance(model, PeftModel):
        return model
    merged = model.merge_and_unload(progressbar=False)
    # A trained copy of tied embeddings (additional_target: embed_tokens) must drive the output head as well.
    text_config = merged.config.get_text_config() if hasattr(merged.config, "get_text_config") else merged.config
    if getattr(text_config, "tie_word_embeddings", False):
        merged.tie_weights()
    return merged


def saved_dtype(folder: Path) -> torch.dtype | None:
    """The dtype a model folder's config.json states (`dtype`, or transformers 4's `torch_dtype`)."""
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(config, dict):
        return None
    name = config.get("dtype") or config.get("torch_dtype")
    return getattr(torch, name, None) if isinstance(name, str) else None


def choose_export_dtype(infer_dtype: str, stored: torch.dtype | None, hardware_precision: str) -> tuple[torch.dtype, str]:
    """LLaMA-Factory's rule: `infer_dtype` when set; under auto the model's own dtype, except that an fp32 model
    is saved in bf16 where this machine computes in bf16."""

    if infer_dtype != "auto":
        return DTYPES[infer_dtype], f"infer_dtype: {infer_dtype}"
    if stored in (torch.bfloat16, torch.float16):
        return stored, f"the base model's own dtype ({str(stored).replace('torch.', '')})"
    if hardware_precision == "bf16":
        return torch.bfloat16, "the base model is fp32; this machine computes in bf16 (LLaMA-Factory's rule)"
    return torch.float32, "the base model's own dtype (float32); infer_dtype=bfloat16 halves the files"


def check_export_dir(folder: Path, overwrite: bool) -> None:
    """Nothing a user made is overwritten: a non-empty export_dir needs --force, and then only our files go."""
    if not folder.exists() or not any(folder.iterdir()):
        return
    if not overwrite:
        raise UserError(f"export_dir: {folder} is not empty; choose another folder or pass --force to replace the "
                        "exported files in it")
    for pattern in WEIGHT_PATTERNS:  # stale shards of an earlier, larger export would shadow the new index
        for stale in folder.glob(pattern):
            stale.unlink()


def export_stop_ids(template, tokenizer, base_eos: Any) -> list[int]:
    """generation_config.json's eos_token_id: the template's eos and stop words, then the base's own eos ids
    (`base_eos`: the base generation_config's int or list) and the tokenizer's own eos."""
    ids = [template.eos_token_id, *template.stop_token_ids()]
    ids += list(base_eos) if isinstance(base_eos, (list, tuple)) else [base_eos]
    ids.append(tokenizer.eos_token_id)
    return list(dict.fromkeys(i for i in ids if isinstance(i, int)))


@contextlib.contextmanager
def template_eos(tokenizer, template):
    """The tokenizer with the template's eos while the export writes it (LLaMA-Factory's replace_eos: Qwen's
    <|im_end|>, ...), its own eos again afterwards (the run's tokenizer object may be used on)."""
    own = tokenizer.eos_token
    wanted = template.eos_token
    if wanted and wanted != own:
        tokenizer.eos_token = wanted
    try:
        yield tokenizer
    finally:
        if tokenizer.eos_token != own:
            tokenizer.eos_token = own


def save_merged(model: torch.nn.Module, tokenizer: Any, template, out_dir: Path, dtype: torch.dtype,
                shard_gb: float, generation: dict) -> list[Path]:
    """Save the merged model (sharded safetensors), tokenizer + chat template and generation_config.json."""
    model = model.to(dtype)
    model.config.dtype = dtype
    # LLaMA-Factory's unit is GB (its "5" is save_pretrained's "5GB"); transformers takes bytes as an int.
    model.save_pretrained(out_dir, max_shard_size=max(1, int(shard_gb * 1000**3)))
    for weights in out_dir.glob("model*.safetensors"):  # transformers leaves them owner-only; an export is shared
        weights.chmod(0o644)

    # The tokenizer as the run used it, with its template as chat_template, padding on the left for batched
    # generation (as LLaMA-Factory exports it).
    tokenizer.chat_template = chat_template_of(template)
    tokenizer.padding_side = "left"
    own_padding = tokenizer.init_kwargs.get("padding_side")
    tokenizer.init_kwargs["padding_side"] = "left"   # what save_pretrained writes (LLaMA-Factory sets it the same way)
    with template_eos(tokenizer, template):
        tokenizer.save_pretrained(out_dir)
    tokenizer.padding_side = "right"
    if own_padding is None:
        tokenizer.init_kwargs.pop("padding_side", None)
    else:
        tokenizer.init_kwargs["padding_side"] = own_padding

    from transformers import GenerationConfig

    config = model.generation_config if getattr(model, "generation_config", None) is not None else GenerationConfig()
    config = GenerationConfig.from_dict({**config.to_dict(), **generation})
    stops = export_stop_ids(template, tokenizer, config.eos_token_id)
    config.eos_token_id = stops if len(stops) > 1 else (stops[0] if stops else None)
    config.pad_token_id = tokenizer.pad_token_id
    config.bos_token_id = tokenizer.bos_token_id
    config.save_pretrained(out_dir)
    return sorted(p for p in out_dir.iterdir() if p.is_file())


# A vision-language model's processor settings: its image processor (preprocessor_config.json, or nested in
# processor_config.json with Gemma 3's image_seq_length / LLaVA's patch size) and video processor.
PROCESSOR_FILES = ("preprocessor_config.json", "processor_config.json", "video_preprocessor_config.json")


def save_processor_files(model: torch.nn.Module, base: str, out_dir: Path, image_processor=None) -> list[str]:
    """A merged vision-language model reloads with its image processor: the base folder's processor files copied
    beside the weights (or, for a hub base, `image_processor` saved there). -> the files written; [] for a text
    model."""
    if not is_vision_model(model):
        return []
    written = []
    if Path(base).is_dir():
        for name in PROCESSOR_FILES:
            if (Path(base) / name).is_file():
                shutil.copy2(Path(base) / name, out_dir / name)
                written.append(name)
    if not written and image_processor is not None:
        image_processor.save_pretrained(out_dir)
        written = [p.name for p in out_dir.iterdir() if p.name in PROCESSOR_FILES]
    if not written:
        raise UserError(f"{base}: a vision-language model without an image processor (preprocessor_config.json); "
                        "the merged model would not read images")
    return written


def copy_run_records(run_folder: Path | None, out_dir: Path) -> None:
    """run_config.yaml and the results files next to the merged model, so predict/chat/eval know the task."""
    if run_folder is None:
        return
    for name in ("run_config.yaml", "eval_results.json", "train_results.json", "demo_results.json", "base_model.json"):
        if (run_folder / name).is_file():
            shutil.copy2(run_folder / name, out_dir / name)
