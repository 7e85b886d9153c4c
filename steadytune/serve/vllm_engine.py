"""`infer_backend: vllm`: vLLM's engine (continuous batching, paged KV cache, LoRA through `enable_lora`) behind the
same routes. Prompts are rendered and tokenised by steadytune (the run's template) and handed to vLLM as token ids;
each served adapter is a `LoRARequest`. /v1/classify needs the transformers engine.

vLLM is not a dependency: it installs only on CUDA/ROCm machines, and its absence is a one-line error.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import Optional

from steadytune.errors import UserError
from steadytune.infer.backends import refuse_expert_adapters_on_vllm
from steadytune.model.load import resolve_model_path
from steadytune.serve.engine import Delta, EngineStats, Failed, Finished, Generation, QueueFull, Request
from steadytune.serve.served import Loaded, describe_all, describe_lines, served_entries

logger = logging.getLogger("steadytune.serve")


def load_vllm(main, extra: list, served_name: Optional[str]):

    # LoRA on a mixture of experts' fused experts is refused before vLLM starts (it cannot load it).
    refuse_expert_adapters_on_vllm([run.folder for run in [main, *(run for _, run in extra)] if run.kind == "lora"])
    try:
        import vllm
        from vllm.lora.request import LoRARequest
    except ImportError:
        raise UserError("infer_backend: vllm, but vllm is not installed here (pip install vllm, on a CUDA or ROCm "
                        "machine); or set infer_backend: huggingface") from None
    from transformers import AutoTokenizer

    m = main.cfg.model
    model_path = str(main.folder) if main.kind == "full" else resolve_model_path(m)
    adapter_runs = ([main] if main.kind == "lora" else []) + [run for _, run in extra]
    lora_names = [f"adapter{i}" for i in range(len(adapter_runs))]
    args = vllm.AsyncEngineArgs(model=model_path, trust_remote_code=m.trust_remote_code, max_model_len=m.vllm_maxlen,
                                gpu_memory_utilization=m.vllm_gpu_util, enforce_eager=m.vllm_enforce_eager,
                                enable_lora=bool(adapter_runs), max_loras=max(1, len(adapter_runs)),
                                max_lora_rank=m.vllm_max_lora_rank, **(m.vllm_config or {}))
    engine = vllm.AsyncLLMEngine.from_engine_args(args)
    tokenizer = AutoTokenizer.from_pretrained(model_path, trust_remote_code=m.trust_remote_code)
    entries = served_entries(main, extra, served_name, lora_names)
    served = describe_all(entries, tokenizer)
    requests = {name: LoRARequest(name, i + 1, str(run.folder))
                for i, (name, run) in enumerate(zip(lora_names, adapter_runs))}
    return Loaded(engine, tokenizer, served, m.vllm_maxlen,
                  describe_lines(f"vLLM {vllm.__version__}", m.vllm_maxlen, entries, served), "vllm", main.cfg,
                  lora_requests=requests)


class VllmEngine:
    """The BatchingEngine interface (submit, stats, queue_depth, running) over vLLM's AsyncLLMEngine."""

    def __init__(self, loaded, max_batch: int, max_queue: int):
        self.engine = loaded.model
        self.lora_requests = loaded.lora_requests
        self.vocab = len(loaded.tokenizer)
        self.max_batch, self.max_queue = max_batch, max_queue
        self.stats = EngineStats()
        self.in_flight = 0
        self.on_first_token = lambda seconds: None
        self._stopped = False

    def start(self) -> None:
        pass

    def stop(self) -> None:
        self._stopped = True
        shutdown = getattr(self.engine, "shutdown", None)
        if callable(shutdown):
            shutdown()

    @property
    def healthy(self) -> bool:
        return not self._stopped

    @property
    def queue_depth(self) -> int:
        return max(0, self.in_flight - self.max_batch)

    @property
    def running(self) -> int:
        return min(self.in_flight, self.max_batch)

    def submit(self, generations: list[Generation], loop: asyncio.AbstractEventLoop) -> Request:
        if self.in_flight + len(generations) > self.max_batch + self.max_queue:
            self.stats.rejected += len(generations)
            raise QueueFull()
        request = Request(loop, len(generations))
        for g in generations:
            self.in_flight += 1
            self.stats.prompt_tokens += len(g.prompt_ids)
            loop.create_task(self._generate(g, request))
        return request

    async def _generate(self, g: Generation, request: Request) -> None:
        import time

        import vllm

        p = g.params
        # below GREEDY_BELOW our engine is greedy (vLLM would raise such a temperature to 0.01 and sample); a top_k
        # past the vocabulary keeps it all, as ours does (vLLM's kernels index with it)
        params = vllm.SamplingParams(n=1, temperature=0.0 if p.greedy else p.temperature, top_p=p.top_p,
                                     top_k=p.top_k if 0 < p.top_k < self.vocab else -1, min_p=p.min_p,
                                     repetition_penalty=p.repetition_penalty, seed=p.seed,
                                     max_tokens=p.max_tokens, stop=list(p.stop), ignore_eos=p.ignore_eos,
                                     stop_token_ids=[] if p.ignore_eos else sorted(p.stop_token_ids))
        request_id, sent, produced, started = uuid.uuid4().hex, 0, 0, time.perf_counter()
        try:
            async for out in self.engine.generate({"prompt_token_ids": list(g.prompt_ids)}, params, request_id,
                                                  lora_request=self.lora_requests.get(g.adapter)):
                if request.cancelled:
                    await self.engine.abort(request_id)
                    self.stats.cancelled += 1
                    return
                choice = out.outputs[0]
                if produced == 0 and choice.token_ids:
                    self.on_first_token(time.perf_counter() - started)
                self.stats.record(len(choice.token_ids) - produced, 1)
                produced = len(choice.token_ids)
                events = []
                if len(choice.text) > sent:
                    events.append(Delta(g.index, choice.text[sent:]))
                    sent = len(choice.text)
                if choice.finish_reason is not None:
                    events.append(Finished(g.index, "length" if choice.finish_reason == "length" else "stop", produced))
                request.put(events)
        except Exception:
            logger.exception("serve: vLLM generation failed")
            self.stats.failed += 1
            request.put([Failed("internal error while generating (the server log has the details)")])
        finally:
            self.in_flight -= 1
