"""`steadytune bench`: the plain transformers + peft recipe and steadytune's default path, side by side, on the
same model shape and the same example lengths, in one invocation.

plain      = HF `Trainer` + peft LoRA (r 16, every linear layer), bf16 on a GPU, SDPA, dynamic padding,
             batch 8, logits over the whole vocabulary at every position (the recipe of seed 003 / DEVICE.md).
steadytune = the same LoRA, frozen base in bf16 with fp32 adapters, packed rows under a token budget with
             attention kept inside each example (packing.py), the head only at labelled positions, chunked
             fused cross-entropy (loss.py), fused AdamW, no host syncs in the step.

Reported per arm: real tokens/s (non-pad tokens), MFU with 4*N + 6*N_lora FLOPs per token against the device's
dense bf16 peak, peak memory; and the ratios steadytune / plain.
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import re
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from steadytune.errors import UserError

# The default length distribution ships with the package (bench_lengths.json: the lengths of LLaMA-Factory's alpaca
# demo sets, estimated as load_lengths does), so `bench` runs anywhere without those files.
DEFAULT_LENGTHS = Path(__file__).with_name("bench_lengths.json")
TEMPLATE_PROMPT_TOKENS, TEMPLATE_ANSWER_TOKENS = 16, 4  # chat template tokens around a turn (Qwen-like)
LORA_RANK = 16


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--shape", default="qwen2.5-0.5b",
                        help="model shape built with random weights (steadytune.shapes: qwen2.5-0.5b, qwen2.5-1.5b, "
                             "gemma3-270m, tiny, ...)")
    parser.add_argument("--dataset", default=None,
                        help="alpaca-format JSON file(s), comma-separated, whose prompt/answer lengths are used "
                             "(default: the alpaca demo sets of LLaMA-Factory)")
    parser.add_argument("--examples", type=int, default=1600, help="examples drawn from the dataset's lengths")
    parser.add_argument("--steps", type=int, default=20, help="timed optimizer steps per arm")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps first (allocation, autotuning, compile)")
    parser.add_argument("--device", default="auto", help="auto, cuda or cpu")
    parser.add_argument("--plain-batch", type=int, default=8, help="examples per step of the plain recipe")
    parser.add_argument("--max-tokens", type=int, default=None,
                        help="real tokens per step for steadytune (default: 16384 on a GPU, 1024 on CPU)")
    parser.add_argument("--cutoff-len", type=int, default=2048, help="packed row length (sdpa/flex packing)")
    parser.add_argument("--packing-attention", default="auto", choices=("auto", "varlen", "sdpa", "flex"))
    parser.add_argument("--gradient-checkpointing", default="auto", choices=("auto", "on", "off"))
    parser.add_argument("--compile", action="store_true", help="torch.compile the decoder layers (steadytune arm)")
    parser.add_argument("--lora-input-cast", default="skip", choices=("skip", "keep"),
                        help="skip (default, as train does under bf16): LoRA inputs stay bf16 under autocast; keep: "
                             "peft's cast of each LoRA input to fp32 (for measuring what skipping it saves)")
    parser.add_argument("--arms", default="plain,steadytune", help="comma list of: plain, steadytune")
    parser.add_argument("--check-loss", type=int, default=0, metavar="STEPS",
                        help="also train STEPS steps packed and unpacked on the same groups; report the largest "
                             "relative difference of per-token loss")
    parser.add_argument("--output", default="bench.json", help="where the JSON result is written")


@dataclass
class ArmResult:
    name: str
    steps: int
    real_tokens: int
    seconds: float
    tokens_per_s: float
    mfu: float | None
    peak_memory_gib: float | None
    settings: dict = field(default_factory=dict)


# --- data: real lengths, random tokens ---------------------------------------------------------------------

def estimate_tokens(text: str) -> float:
    """Token count of a BPE like Qwen's without the tokenizer: ~0.75 per CJK character, ~4 bytes per token
    otherwise. On the alpaca demo sets this gives mean 189 / p90 381 / max 750 with the template (the real
    tokenizer: 187 / 383 / 752, DEVICE.md)."""
    cjk = len(re.findall(r"[\u3000-\u9fff\uff00-\uffef]", text))
    rest = re.sub(r"[\u3000-\u9fff\uff00-\uffef]", "", text)
    return cjk * 0.75 + len(rest.encode()) / 4.0


def dataset_lengths(spec: str | None) -> list[tuple[int, int]]:
    """(prompt tokens, answer tokens) per record: of the --dataset files, or the packaged default distribution."""
    if spec:
        return load_lengths([Path(p) for p in spec.split(",")])
    return [tuple(pair) for pair in json.loads(DEFAULT_LENGTHS.read_text(encoding="utf-8"))["lengths"]]


def load_lengths(paths: list[Path]) -> list[tuple[int, int]]:
    """(prompt tokens, answer tokens) for each alpaca-format record."""
    lengths = []
    for path in paths:
        if not path.is_file():
            raise UserError(f"bench: dataset file not found: {path} (pass --dataset FILE.json)")
        try:
            records = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as e:
            raise UserError(f"bench: {path}: not valid JSON (line {e.lineno}): {e.msg}") from None
        if not isinstance(records, list):
            raise UserError(f"bench: {path}: expected a JSON list of alpaca records")
        for i, r in enumerate(records):
            if not isinstance(r, dict) or "output" not in r:
                raise UserError(f"bench: {path}: record {i} has no 'output' (alpaca format: instruction/input/output)")
            prompt = f"{r.get('instruction', '')}\n{r.get('input', '')}"
            lengths.append((int(estimate_tokens(prompt)) + TEMPLATE_PROMPT_TOKENS,
                            max(1, int(estimate_tokens(str(r["output"])))) + TEMPLATE_ANSWER_TOKENS))
    if not lengths:
        raise UserError("bench: the dataset has no records")
    return lengths


def synthetic_examples(lengths: list[tuple[int, int]], count: int, vocab: int, cutoff: int, seed: int = 0) -> list[dict]:
    """`count` examples with the given prompt/answer lengths (cycled, shuffled) and random token ids."""
    rng = random.Random(seed)
    gen = torch.Generator().manual_seed(seed)
    pool = list(lengths)
    rng.shuffle(pool)  # a random draw of the dataset, not its first records
    order = [pool[i % len(pool)] for i in range(count)]
    examples = []
    for prompt, answer in order:
        n = min(prompt + answer, cutoff)
        ids = torch.randint(min(100, vocab // 4), vocab - 1, (n,), generator=gen).tolist()
        labels = [-100] * min(prompt, n - 1) + ids[min(prompt, n - 1):]
        examples.append({"input_ids": ids, "labels": labels})
    return examples


# --- FLOPs and memory --------------------------------------------------------------------------------------

def peak_flops(device: torch.device) -> float | None:
    if device.type != "cuda":
        return None
    from steadytune.hardware import peak_bf16_tflops
    tflops = peak_bf16_tflops(torch.cuda.get_device_name(device))  # the product table doctor and train use
    return tflops * 1e12 if tflops else None


def flops_per_token(n_params: int, n_lora: int) -> float:
    """Frozen base: forward 2N + backward to activations 2N; adapters also get weight gradients: 6*N_lora."""
    return 4.0 * n_params + 6.0 * n_lora


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def reset_memory(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)


def peak_memory_gib(device: torch.device) -> float | None:
    return torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None


def lora_model(shape: str, device: torch.device, attn_implementation: str = "sdpa"):
    from peft import LoraConfig, get_peft_model
    from steadytune.shapes import build_shape
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    base = build_shape(shape, dtype=dtype, device=device, attn_implementation=attn_implementation)
    config = LoraConfig(r=LORA_RANK, lora_alpha=2 * LORA_RANK, lora_dropout=0.0, target_modules="all-linear",
                        task_type="CAUSAL_LM")
    # peft keeps the adapters in fp32 over a bf16 base (autocast_adapter_dtype): exact updates, cheap memory.
    return get_peft_model(base, config)


def param_counts(model) -> tuple[int, int]:
    """-> (frozen, trainable) parameters: N and N_lora of the MFU formula (tied weights count once)."""
    from steadytune.model import count_parameters
    trainable, total = count_parameters(model)
    return total - trainable, trainable


def summarise(name: str, steps: int, tokens: int, seconds: float, n_params: int, n_lora: int,
              device: torch.device, settings: dict) -> ArmResult:
    rate = tokens / seconds
    peak = peak_flops(device)
    mfu = rate * flops_per_token(n_params, n_lora) / peak if peak else None
    return ArmResult(name, steps, tokens, seconds, rate, mfu, peak_memory_gib(device), settings)


# --- the plain recipe --------------------------------------------------------------------------------------

def run_plain(args, examples: list[dict], device: torch.device) -> ArmResult:
    from transformers import Trainer, TrainerCallback, TrainingArguments
    from steadytune.packing import PaddedCollator

    reset_memory(device)
    model = lora_model(args.shape, device)
    n_params, n_lora = param_counts(model)
    collate = PaddedCollator(pad_token_id=0)
    batch_tokens: list[int] = []

    def counting_collator(batch):
        batch_tokens.append(sum(len(e["input_ids"]) for e in batch))
        out = collate(batch)
        return out

    marks: dict[str, float] = {}

    class StepTimer(TrainerCallback):
        def on_step_begin(self, targs, state, control, **kw):
            if state.global_step == args.warmup:
                synchronize(device)
                marks["start"] = time.perf_counter()

        def on_step_end(self, targs, state, control, **kw):
            if state.global_step == args.warmup + args.steps:
                synchronize(device)
                marks["end"] = time.perf_counter()

    with tempfile.TemporaryDirectory() as out:
        targs = TrainingArguments(
            output_dir=out, per_device_train_batch_size=args.plain_batch, max_steps=args.warmup + args.steps,
            learning_rate=1e-4, bf16=device.type == "cuda", use_cpu=device.type == "cpu", logging_steps=10**6,
            save_strategy="no", report_to=[], dataloader_num_workers=0, remove_unused_columns=False,
            disable_tqdm=True, seed=0, max_grad_norm=1.0)
        trainer = Trainer(model=model, args=targs, train_dataset=examples, data_collator=counting_collator,
                          callbacks=[StepTimer()])
        trainer.train()
    # Batches are collated in step order (the loader may run one ahead): step k consumed batch k.
    tokens = sum(batch_tokens[args.warmup:args.warmup + args.steps])
    result = summarise("plain", args.steps, tokens, marks["end"] - marks["start"], n_params, n_lora, device,
                       {"batch": args.plain_batch, "padding": "dynamic", "attention": "sdpa",
                        "loss": "HF full logits", "trainer": "transformers.Trainer"})
    del trainer, model
    return result


# --- steadytune's default path ------------------------------------------------------------------------------

def steadytune_setup(args, device: torch.device, packing: bool = True):
    """Model + collator + settings of steadytune's default path on this device."""
    from steadytune.hardware import choose_packing_attention, detect
    from steadytune.kernels import apply_liger_kernels, choose_gradient_checkpointing, compile_layers
    from steadytune.packing import PackedCollator, PaddedCollator, attn_implementation_for, varlen_kernels

    settings: dict = {}
    attention, kernel, why = ("sdpa", None, "unpacked reference")
    if packing:
        attention, kernel, why = choose_packing_attention(detect() if device.type == "cuda" else _cpu_info(),
                                                         args.packing_attention)
    settings["packing_attention"] = {"value": attention, "kernel": kernel, "reason": why}
    impl = attn_implementation_for(attention, varlen_kernels()[kernel] if kernel else None)
    model = lora_model(args.shape, device, attn_implementation=impl)
    budget = torch.cuda.get_device_properties(device).total_memory / 2**30 if device.type == "cuda" else None
    requested = {"auto": None, "on": True, "off": False}[args.gradient_checkpointing]
    use_gc, gc_why = choose_gradient_checkpointing(model.get_base_model().config, args.max_tokens, budget, requested)
    if use_gc:
        model.get_base_model().gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    settings["gradient_checkpointing"] = {"value": use_gc, "reason": gc_why}
    if device.type == "cuda" and args.lora_input_cast == "skip":
        from steadytune.kernels import skip_lora_input_cast
        settings["lora_input_cast"] = {"value": "off", "reason": skip_lora_input_cast(model)[1]}
    liger, liger_why = apply_liger_kernels(model)
    settings["liger_kernel"] = {"value": liger, "reason": liger_why}
    if args.compile:
        compiled, compile_why = compile_layers(model)
        settings["torch_compile"] = {"value": compiled, "reason": compile_why}
    collate = (PackedCollator(pad_token_id=0, row_len=args.cutoff_len, attention=attention) if packing
               else PaddedCollator(pad_token_id=0))
    settings.update(max_tokens_per_step=args.max_tokens, packing=packing, loss="head at labelled positions, "
                    "chunked fused cross-entropy", adapters="fp32", base="bf16" if device.type == "cuda" else "fp32")
    return model, collate, settings


def _cpu_info():
    from steadytune.hardware import HardwareInfo
    return HardwareInfo(backend="cpu", torch_version=torch.__version__)


def train_steps(model, collate, examples: list[dict], groups: list[list[int]], device: torch.device,
                warmup: int) -> tuple[list[torch.Tensor], float]:
    """Run one optimizer step per group; -> (per-token loss of each step as device tensors, timed seconds).

    The loss is not read back during the loop: reading it (.item()) would make the CPU wait for the GPU every
    step and leave the GPU idle while the next step is launched."""
    from steadytune.loss import causal_lm_loss_sum

    loader = torch.utils.data.DataLoader(examples, batch_sampler=groups, collate_fn=collate,
                                         num_workers=2 if device.type == "cuda" else 0,
                                         pin_memory=device.type == "cuda")
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=1e-4, fused=device.type == "cuda")
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda")
    model.train()
    losses, start = [], None
    for step, batch in enumerate(loader):
        if step == warmup:
            synchronize(device)
            start = time.perf_counter()
        batch = {k: v.to(device, non_blocking=True) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}
        with autocast:
            loss_sum, n_tokens = causal_lm_loss_sum(model, batch)
        loss = loss_sum / max(n_tokens, 1)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(trainable, 1.0, foreach=True)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.detach())
    synchronize(device)
    return losses, time.perf_counter() - (start or time.perf_counter())


def step_groups(examples: list[dict], max_tokens: int, count: int, seed: int = 0) -> list[list[int]]:
    """`count` steps of at most `max_tokens` real tokens, reshuffling for another epoch when one runs out."""
    from steadytune.packing import group_by_token_budget
    lengths = [len(e["input_ids"]) for e in examples]
    groups: list[list[int]] = []
    epoch = 0
    while len(groups) < count:
        order = list(range(len(examples)))
        random.Random(seed + epoch).shuffle(order)
        groups += group_by_token_budget(lengths, order, max_tokens)
        epoch += 1
    return groups[:count]


def run_steadytune(args, examples: list[dict], device: torch.device) -> ArmResult:
    reset_memory(device)
    model, collate, settings = steadytune_setup(args, device)
    n_params, n_lora = param_counts(model)
    groups = step_groups(examples, args.max_tokens, args.warmup + args.steps)
    _, seconds = train_steps(model, collate, examples, groups, device, args.warmup)
    tokens = sum(len(examples[i]["input_ids"]) for g in groups[args.warmup:] for i in g)
    result = summarise("steadytune", args.steps, tokens, seconds, n_params, n_lora, device, settings)
    del model
    return result


def check_packed_loss(args, examples: list[dict], device: torch.device) -> dict:
    """Same examples, same order, same steps: packed and padded training must give the same per-token loss."""
    groups = step_groups(examples, args.max_tokens, args.check_loss, seed=1)
    curves = {}
    # The padded arm pads every example of a step to the longest one (several times the real tokens): both arms
    # recompute activations in backward, which changes no value and keeps the padded arm inside memory.
    check_args = argparse.Namespace(**{**vars(args), "gradient_checkpointing": "on"})
    for packing in (True, False):
        reset_memory(device)
        model, collate, _ = steadytune_setup(check_args, device, packing=packing)
        losses, _ = train_steps(model, collate, examples, groups, device, warmup=0)
        curves["packed" if packing else "unpacked"] = [float(x) for x in torch.stack(losses).cpu()]
        del model
    rel = [abs(a - b) / abs(b) for a, b in zip(curves["packed"], curves["unpacked"])]
    return {"steps": args.check_loss, "max_relative_difference": max(rel), **curves}


# --- command -----------------------------------------------------------------------------------------------

def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise UserError("bench: --device cuda, but torch sees no GPU here (steadytune doctor says why)")
    if name not in ("cuda", "cpu"):
        raise UserError(f"bench: --device must be auto, cuda or cpu, got {name!r}")
    return torch.device(name)


def run(args) -> int:
    from steadytune.shapes import SHAPES
    if args.shape not in SHAPES:
        raise UserError(f"bench: unknown --shape {args.shape!r}; known: {', '.join(SHAPES)}")
    arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    unknown = set(arms) - {"plain", "steadytune"}
    if unknown or not arms:
        raise UserError(f"bench: --arms takes plain and/or steadytune, got {args.arms!r}")
    device = resolve_device(args.device)
    if args.max_tokens is None:
        args.max_tokens = 16384 if device.type == "cuda" else 1024
    vocab = SHAPES[args.shape]["vocab_size"]
    examples = synthetic_examples(dataset_lengths(args.dataset), args.examples, vocab, args.cutoff_len)
    lengths = sorted(len(e["input_ids"]) for e in examples)
    report = {
        "shape": args.shape, "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch": torch.__version__, "examples": len(examples),
        "lengths": {"mean": sum(lengths) / len(lengths), "p90": lengths[int(0.9 * len(lengths))], "max": lengths[-1]},
        "arms": {},
    }
    runners = {"plain": run_plain, "steadytune": run_steadytune}
    for arm in arms:
        result = runners[arm](args, examples, device)
        report["arms"][arm] = asdict(result)
        print(format_arm(result), flush=True)
    if {"plain", "steadytune"} <= set(arms):
        plain, ours = report["arms"]["plain"], report["arms"]["steadytune"]
        report["ratios"] = {"tokens_per_s": ours["tokens_per_s"] / plain["tokens_per_s"]}
        if plain["peak_memory_gib"]:
            report["ratios"]["peak_memory"] = ours["peak_memory_gib"] / plain["peak_memory_gib"]
        print("steadytune / plain: " + ", ".join(f"{k} {v:.2f}x" for k, v in report["ratios"].items()))
    if args.check_loss:
        report["loss_check"] = check_packed_loss(args, examples, device)
        print(f"packed vs unpacked per-token loss over {args.check_loss} steps: largest relative difference "
              f"{report['loss_check']['max_relative_difference']:.2e}")
    Path(args.output).write_text(json.dumps(report, indent=2), encoding="utf-8")
    print(f"wrote {args.output}")
    return 0


def format_arm(r: ArmResult) -> str:
    mfu = f"{100 * r.mfu:.1f}%" if r.mfu is not None else "n/a"
    mem = f"{r.peak_memory_gib:.1f} GiB" if r.peak_memory_gib is not None else "n/a"
    return (f"{r.name:>10}: {r.tokens_per_s:>10,.0f} real tokens/s  MFU {mfu:>6}  peak memory {mem:>9}  "
            f"({r.steps} steps, {r.real_tokens:,} tokens, {r.seconds:.2f} s)")
