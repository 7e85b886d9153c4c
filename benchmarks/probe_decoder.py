"""Does the batched decoder (model/decode/complete.Decoder) generate what transformers' generate does, on this
device, in the settings stage grpo uses it in (bf16, LoRA applied, the training attention implementation, CUDA
graphs)? Greedy completions of tiny random models (qwen2; gemma3 with a sliding window shorter than the prompts),
prompt by prompt, and the keyed sampler's first-token frequencies against the softmax.

    python benchmarks/probe_decoder.py                 # tiny random models
    python benchmarks/probe_decoder.py gemma-3-270m    # a real model, as stage grpo runs it
    python benchmarks/probe_decoder.py gemma-3-270m label [COUNT]   # zero-shot label accuracy: generate vs decoder
"""
from __future__ import annotations

import sys
import tempfile

import torch

from steadytune.model.decode.complete import Decoder
from steadytune.model.decode.sampling import SamplingParams
from steadytune.model.tiny import save_tiny_model


def real_model(name: str) -> None:
    """The same comparison on a real model (e.g. gemma-3-270m: sliding and full attention layers mixed), bf16 on a
    GPU with fp32 LoRA under autocast as stage grpo runs it: greedy completions of a few review prompts, the decoder
    against `generate`, and how many rows met non-finite logits."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from steadytune.config import ModelArguments
    from steadytune.eval.scoring import inference
    from steadytune.model.load import resolve_model_path

    path = resolve_model_path(ModelArguments(model_name_or_path=name))
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    tok = AutoTokenizer.from_pretrained(path)
    texts = ["判断下面这条评论的情感倾向，回答“消极”或“积极”。\n评论：质量很好，物流也快。\n情感：",
             "判断下面这条评论的情感倾向，回答“消极”或“积极”。\n评论：用了两天就坏了，很失望。\n情感：",
             "Question: What is 37 plus 58?\nAnswer:", "The capital of France is"] * 4
    prompts = [tok(t)["input_ids"] for t in texts]
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16 if device.type == "cuda" else torch.float32)
    model = get_peft_model(model.to(device), LoraConfig(r=8, target_modules="all-linear"))   # B = 0: the base
    with inference(model):
        ref = [model.generate(torch.tensor([p], device=device), max_new_tokens=8, do_sample=False,
                              pad_token_id=tok.pad_token_id)[0, len(p):].tolist() for p in prompts]
        dec = Decoder(model, tok.pad_token_id)
        for attempt in (1, 2, 3):   # graphs are recorded on the first call and replayed on the next ones
            done = dec.generate(prompts, 8, SamplingParams(max_tokens=8, temperature=0.0), [10**9],
                                list(range(len(prompts))))
            same = sum(a[:len(b)] == b for a, b in zip(ref, done.ids))
            print(f"{name} call {attempt}: greedy equal to generate {same}/{len(prompts)}; rows with non-finite "
                  f"logits {sum(done.nonfinite)}", flush=True)
        for a, b in list(zip(ref, done.ids))[:2]:
            print("   generate", repr(tok.decode(a)), "\n   decoder ", repr(tok.decode(b)))


def label_zero_shot(name: str, count: int = 100, draws: int = 8) -> None:
    """Zero-shot label accuracy of sampled completions (temperature 1, 4 tokens) on the demo recipe's first `count`
    test prompts, tokenised by the data pipeline as stage grpo tokenises them: transformers' `generate` (plain
    multinomial sampling) against the decoder (keyed sampling, CUDA graphs as STEADYTUNE_CUDA_GRAPHS says), with
    SDPA and with the varlen attention a GPU grpo run loads the model with. The shares should agree within noise
    (~1-2 % on a CPU for gemma-3-270m); a path that scores 0 is the broken one. Prints a few completions of each."""
    from pathlib import Path

    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from steadytune.config import load_config
    from steadytune.data.prepare import prepare_datasets
    from steadytune.data.prompts import PROMPTS
    from steadytune.eval.scoring import inference, match_label
    from steadytune.model.load import resolve_model_path
    from steadytune.stages.grpo import make_collator

    recipe = Path(__file__).resolve().parents[1] / "steadytune" / "recipes" / "gemma3_270m_sentiment.yaml"
    cfg = load_config(str(recipe), [f"model_name_or_path={name}", "stage=grpo", "reward_funcs=[label]",
                                    f"max_eval_samples={count}", "max_samples=8"])
    path = resolve_model_path(cfg.model)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    tok = AutoTokenizer.from_pretrained(path)
    data = prepare_datasets(cfg, tok, kind=PROMPTS)
    stops = make_collator(cfg, tok, None).stop_ids   # the stop tokens stage grpo generates with
    examples = data.eval[:count]
    names = list(cfg.data.label_names)
    gold = [names.index(str(e["columns"]["label"])) for e in examples]
    print(f"{name}: {len(examples)} test prompts, e.g. {tok.decode(examples[0]['input_ids'])!r} -> {names[gold[0]]}")
    attentions = ["sdpa"]
    if device.type == "cuda":
        from steadytune.hardware.attention_kernels import varlen_kernel_status, varlen_kernels
        from steadytune.model.attention import attn_implementation_for
        kernel, why = varlen_kernel_status()
        attentions.append(attn_implementation_for("varlen", varlen_kernels()[kernel]) if kernel else None)
        if kernel is None:
            print(f"  varlen: none ({why})")
    for attention in [a for a in attentions if a]:
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16 if device.type == "cuda" else
                                                     torch.float32, attn_implementation=attention).to(device)
        model = get_peft_model(model, LoraConfig(r=16, target_modules="all-linear"))   # B = 0: the base
        pad = tok.pad_token_id
        with inference(model):
            texts = []
            for start in range(0, len(examples), 25):   # generate: left-padded batches, multinomial sampling
                chunk = [e["input_ids"] for e in examples[start:start + 25] for _ in range(draws)]
                width = max(map(len, chunk))
                ids = torch.tensor([[pad] * (width - len(c)) + c for c in chunk], device=device)
                mask = torch.tensor([[0] * (width - len(c)) + [1] * len(c) for c in chunk], device=device)
                out = model.generate(input_ids=ids, attention_mask=mask, do_sample=True, temperature=1.0, top_k=0,
                                     top_p=1.0, max_new_tokens=4, pad_token_id=pad)
                texts += tok.batch_decode(out[:, width:], skip_special_tokens=True)
            right = [match_label(t, names) == gold[i // draws] for i, t in enumerate(texts)]
            print(f"  {attention:18} generate: {sum(right) / len(right):.3f} of {len(right)} right; e.g. "
                  f"{texts[:4]}", flush=True)
            prompts = [e["input_ids"] for e in examples for _ in range(draws)]
            for attempt in (1, 2):
                done = Decoder(model, pad).generate(prompts, 4, SamplingParams(max_tokens=4, temperature=1.0, top_p=1.0,
                                                                                top_k=0), stops,
                                                    list(range(attempt * 10**6, attempt * 10**6 + len(prompts))))
                texts = tok.batch_decode(done.ids, skip_special_tokens=True)
                right = [match_label(t, names) == gold[i // draws] for i, t in enumerate(texts)]
                print(f"  {attention:18} decoder call {attempt}: {sum(right) / len(right):.3f} right, non-finite rows "
                      f"{sum(done.nonfinite)}; e.g. {texts[:4]}", flush=True)


def main() -> None:
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    if len(sys.argv) > 2 and sys.argv[2] == "label":   # zero-shot label accuracy, generate vs decoder
        return label_zero_shot(sys.argv[1], *(int(a) for a in sys.argv[3:4]))
    if len(sys.argv) > 1:   # a real model by name or path
        return real_model(sys.argv[1])

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
