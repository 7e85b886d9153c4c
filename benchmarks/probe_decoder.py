"""Does the batched decoder (model/decode/complete.Decoder) generate what transformers' generate does, on this
device, in the settings stage grpo uses it in (bf16, LoRA applied, the training attention implementation, CUDA
graphs)? Greedy completions of tiny random models (qwen2; gemma3 with a sliding window shorter than the prompts),
prompt by prompt, and the keyed sampler's first-token frequencies against the softmax.

    python benchmarks/probe_decoder.py
"""
from __future__ import annotations

import tempfile

import torch

from steadytune.model.decode.complete import Decoder
from steadytune.model.decode.sampling import SamplingParams
from steadytune.model.tiny import save_tiny_model


def main() -> None:
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(3, 200, (n,), generator=g).tolist() for n in (5, 9, 17, 23, 31, 12, 3, 40)]
    for kind in ("qwen2", "gemma3"):
        extra = {"sliding_window": 8} if kind == "gemma3" else {}
        folder = save_tiny_model(tempfile.mkdtemp() + "/m", kind, initializer_range=0.2, **extra)
        for attn in ("sdpa", "varlen"):
            for lora in (False, True):
                model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype).to(device).eval()
                if attn == "varlen":
                    from steadytune.hardware.attention_kernels import varlen_kernel_status, varlen_kernels
                    from steadytune.model.attention import attn_implementation_for
                    name, why = varlen_kernel_status() if device.type == "cuda" else (None, "cpu")
                    if name is None:
                        print(f"{kind} varlen: skipped ({why})")
                        continue
                    model.set_attn_implementation(attn_implementation_for("varlen", varlen_kernels()[name]))
                if lora:
                    model = get_peft_model(model, LoraConfig(r=4, target_modules="all-linear", init_lora_weights=False))
                    model.eval()
                pad = 0
                with torch.no_grad():
                    ref = []
                    for p in prompts:
                        out = model.generate(torch.tensor([p], device=device), max_new_tokens=12, do_sample=False,
                                             pad_token_id=pad, eos_token_id=None)
                        ref.append(out[0, len(p):].tolist())
                    dec = Decoder(model, pad)
                    done = dec.generate(prompts, 12, SamplingParams(max_tokens=12, temperature=0.0), [10**6 - 1],
                                        list(range(len(prompts))))
                    again = dec.generate(prompts * 2, 12, SamplingParams(max_tokens=12, temperature=0.0), [10**6 - 1],
                                         list(range(2 * len(prompts))))
                same = sum(a == b for a, b in zip(ref, done.ids))
                same2 = sum(a == b for a, b in zip(ref * 2, again.ids))
                first = sum(a[:1] == b[:1] for a, b in zip(ref, done.ids))
                print(f"{kind:7} {attn:6} lora={lora!s:5} greedy equal to generate: {same}/{len(prompts)} "
                      f"(first token {first}/{len(prompts)}; batch of {2 * len(prompts)}: {same2}/{2 * len(prompts)})",
                      flush=True)
                if same < len(prompts):
                    for a, b in list(zip(ref, done.ids))[:3]:
                        print("   generate", a, "\n   decoder ", b)
                # sampling: first-token frequencies of one prompt vs its softmax
                with torch.no_grad():
                    logits = model(torch.tensor([prompts[2]], device=device)).logits[0, -1].float()
                    probs = torch.softmax(logits, -1).cpu()
                    n = 2000
                    s = dec.generate([prompts[2]] * n, 1, SamplingParams(max_tokens=1, temperature=1.0, top_p=1.0,
                                                                          top_k=0), [10**6 - 1], list(range(n)))
                counts = torch.bincount(torch.tensor([x[0] for x in s.ids]), minlength=probs.numel()).float() / n
                tv = 0.5 * (counts - probs).abs().sum().item()
                print(f"        sampled first token: total variation from softmax {tv:.3f} (2000 draws; ~0.1-0.2 is "
                      f"noise for this vocabulary)", flush=True)


if __name__ == "__main__":
    main()
