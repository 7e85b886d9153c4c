"""`infer_backend`: which engine generates for chat and predict.

huggingface (default): transformers' `generate` on the model our loader builds. vllm: vLLM's offline `LLM`
engine with the run's adapter as a `LoRARequest` (or a full fine-tune's folder as the model), where vLLM is
installed; it is not installed on the machines this was built on, so that path is exercised only where vLLM is.
sglang and ktransformers are LLaMA-Factory values that steadytune does not drive: a clear error either way.
"""

from __future__ import annotations

import importlib.util
from typing import Sequence

from steadytune.errors import UserError

HUGGINGFACE, VLLM = "huggingface", "vllm"


def check_backend(name: str) -> str:
    if name == HUGGINGFACE:
        return name
    installed = importlib.util.find_spec(name) is not None
    if name == VLLM:
        if not installed:
            raise UserError("infer_backend: vllm is not installed here (pip install vllm, on a CUDA or ROCm machine); "
                            "or use infer_backend: huggingface")
        return name
    state = "is installed, but" if installed else "is not installed, and"
    raise UserError(f"infer_backend: {name} {state} steadytune does not drive it; use infer_backend: huggingface "
                    "(or vllm where it is installed)")


def refuse_expert_adapters_on_vllm(folders: Sequence) -> None:
    """vLLM loads no LoRA on a mixture of experts' fused expert weights (peft's target_parameters: open issues
    vllm-project/vllm#41384 and #52198); said before vLLM starts, with the two ways that work."""
    import json
    from pathlib import Path

    for folder in folders:
        try:
            config = json.loads((Path(folder) / "adapter_config.json").read_text(encoding="utf-8"))
        except (OSError, TypeError, ValueError):
            continue
        if isinstance(config, dict) and config.get("target_parameters"):
            raise UserError(f"infer_backend: vllm: {folder} adapts a mixture of experts' routed experts (peft "
                            "target_parameters), which vLLM cannot load as a LoRA adapter (vllm-project/vllm#41384, "
                            "#52198); export the merged model (steadytune export RUN export_dir=DIR) and give vLLM that "
                            "folder, or use infer_backend: huggingface (steadytune's engine serves the adapter)")


class VllmGenerator:
    """Batch generation with vLLM: prompts as token ids, the adapter as a LoRA request."""

    def __init__(self, run, sampling, stop_ids: Sequence[int], dtype: str = "auto"):
        from vllm import LLM
        from vllm.lora.request import LoRARequest

        # lazy: infer.loading loads torch; `--help` answers without loading it
        from steadytune.infer.loading import LORA

        # lazy: model.load loads torch; `--help` answers without loading it
        from steadytune.model.load import resolve_model_path

        cfg = run.cfg
        self.lora = None
        kwargs = {}
        if run.kind == LORA:
            import json
            rank = json.loads((run.folder / "adapter_config.json").read_text(encoding="utf-8")).get("r", 16)
            kwargs.update(enable_lora=True, max_lora_rank=max(8, int(rank)))
            self.lora = LoRARequest("adapter", 1, str(run.folder))
        self.llm = LLM(model=resolve_model_path(cfg.model), dtype=dtype, seed=cfg.train.seed,
                       trust_remote_code=cfg.model.trust_remote_code, **kwargs)
        self.sampling = sampling
        self.stop_ids = list(stop_ids)

    def generate(self, prompts: Sequence[Sequence[int]]) -> tuple[list[str], list[int]]:
        from vllm import SamplingParams

        s = self.sampling
        params = SamplingParams(max_tokens=s.max_new_tokens, temperature=s.temperature if s.do_sample else 0.0,
                                top_p=s.top_p if s.do_sample else 1.0, top_k=s.top_k if s.do_sample else -1,
                                repetition_penalty=s.repetition_penalty, stop_token_ids=self.stop_ids,
                                skip_special_tokens=True)
        outputs = self.llm.generate([{"prompt_token_ids": list(p)} for p in prompts], params, lora_request=self.lora)
        return [o.outputs[0].text for o in outputs], [len(o.outputs[0].token_ids) for o in outputs]
