"""What every arm of `bench` trains on and how it is scored: real example lengths with random token ids, one
example order shared by all arms, the model shape with LoRA, and FLOPs / memory bookkeeping."""

from __future__ import annotations

import gc
import json
import random
import re
import shutil
from pathlib import Path

import torch

from steadytune.errors import UserError
from steadytune.hardware.policy import peak_bf16_tflops
from steadytune.model.anatomy import base_model_of
from steadytune.model.lora import resolve_lora_targets
from steadytune.model.moe.anatomy import (
    KINDS,
    ROUTED_EXPERTS,
    experts_per_layer,
    experts_per_token,
    is_moe,
    parameter_kind,
)
from steadytune.model.moe.targets import plan_expert_targets, targets_as_written
from steadytune.model.quantize import logical_numel
from steadytune.model.shapes import SHAPES, build_shape

# The default length distribution ships with the package (lengths.json: the lengths of LLaMA-Factory's alpaca
# demo sets, estimated as load_lengths does), so `bench` runs anywhere without those files.
DEFAULT_LENGTHS = Path(__file__).with_name("lengths.json")
TEMPLATE_PROMPT_TOKENS, TEMPLATE_ANSWER_TOKENS = 16, 4  # chat template tokens around a turn (Qwen-like)
LORA_RANK = 16
PEER_BATCHES = (32, 16, 8)  # what a tuned user tries, largest first: the peer arm takes the largest that fits


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


def examples_for(args) -> list[dict]:
    """The examples of a bench call (its --dataset lengths, --examples, --shape's vocabulary, --cutoff-len)."""
    return synthetic_examples(dataset_lengths(args.dataset), args.examples, SHAPES[args.shape]["vocab_size"],
                              args.cutoff_len)


def steady_rule(args) -> dict:
    """SteadyRate's settings from the bench arguments: the one rule every arm, in any process, is timed by."""
    return {"window": args.window, "min_steps": args.min_steps, "min_tokens": args.min_tokens,
            "tolerance": args.tolerance, "max_seconds": args.max_seconds, "max_steps": args.max_steps,
            "fixed_steps": args.steps}


def example_order(n_examples: int, count: int, seed: int = 0) -> list[int]:
    """The first `count` example indices of the stream every arm trains on: a seeded shuffle of all examples,
    reshuffled for each further pass. Arms take consecutive examples from it (batches of 8 or 32, or token
    budgets), so they see the same examples in the same order."""
    order: list[int] = []
    epoch = 0
    while len(order) < count:
        indices = list(range(n_examples))
        random.Random(seed + epoch).shuffle(indices)
        order += indices
        epoch += 1
    return order[:count]


# --- the same examples for another framework: a model folder and text that tokenizes back to the same ids --------

PAD_ID, EOS_ID = 0, 1  # below every id synthetic_examples draws (those start at min(100, vocab // 4))


def word_of(token_id: int) -> str:
    return f"w{token_id}"


def word_tokenizer(vocab_size: int):
    """A tokenizer with one whitespace-separated word per id ("w123" is id 123), so that a framework which reads text
    (LLaMA-Factory) gets exactly bench's token ids back from `words_of(ids)`, prompt and answer alike."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {word_of(i): i for i in range(vocab_size)}
    vocab.update({"<pad>": PAD_ID, "<eos>": EOS_ID})
    del vocab[word_of(PAD_ID)], vocab[word_of(EOS_ID)]
    core = Tokenizer(models.WordLevel(vocab, unk_token="<pad>"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", eos_token="<eos>", unk_token="<pad>")


def words_of(ids: list[int]) -> str:
    return " ".join(word_of(i) for i in ids)


class NoRoom(UserError):
    """The shape's model folder would not fit on the disk it was to be written to (said before writing)."""


def folder_bytes(shape: str, dtype: torch.dtype, num_layers: int | None = None) -> int:
    """The bytes of the shape's weights as save_pretrained writes them (built on the meta device: no memory)."""
    model = build_shape(shape, dtype=dtype, device="meta", num_layers=num_layers)
    return sum(p.numel() for p in model.parameters()) * torch.empty((), dtype=dtype).element_size()


def check_room(shape: str, folder: Path, dtype: torch.dtype, num_layers: int | None = None) -> None:
    """Raise NoRoom, in one line that says what would fit, when the folder's disk has not the room for the shape's
    weights (and 1 GiB besides); a 30B-A3B shape is 61 GB in bf16 and the GPU machine's disk 64 GiB."""
    need = folder_bytes(shape, dtype, num_layers)
    existing = next(p for p in (folder, *folder.parents) if p.exists())
    free = shutil.disk_usage(existing).free
    if need + 2**30 > free:
        depth = SHAPES[shape]["num_hidden_layers"] if num_layers is None else num_layers
        raise NoRoom(f"bench: the {shape} shape's model folder ({depth} layers) needs {need / 1e9:.1f} GB and "
                     f"{existing} has {free / 1e9:.1f} GB free: pass --num-layers (the same widths, fewer layers) or "
                     "--models-dir DIR on a larger disk")


def make_model_folder(shape: str, folder: Path, device: torch.device, num_layers: int | None = None) -> Path:
    """The shape with random weights (bf16 on a GPU, fp32 on a CPU) and the word tokenizer, saved as a Hugging Face
    model folder: what the peer arms, which load a model by path, train. Its disk's free space is checked first."""
    dtype = compute_dtype(device)
    try:
        check_room(shape, folder, dtype, num_layers)
    except NoRoom as e:
        print(str(e), flush=True)
        raise
    model = build_shape(shape, dtype=dtype, device=device, num_layers=num_layers)
    model.config.pad_token_id, model.config.eos_token_id = PAD_ID, EOS_ID
    model.generation_config.pad_token_id, model.generation_config.eos_token_id = PAD_ID, EOS_ID
    model.save_pretrained(folder)
    word_tokenizer(SHAPES[shape]["vocab_size"]).save_pretrained(folder)
    del model
    reset_memory(device)
    return folder


# --- model, FLOPs and memory ---------------------------------------------------------------------------------

def lora_model(shape: str, device: torch.device, attn_implementation: str = "sdpa", num_layers: int | None = None):
    dtype = compute_dtype(device)
    return with_lora(build_shape(shape, dtype=dtype, device=device, attn_implementation=attn_implementation,
                                 num_layers=num_layers))


def with_lora(base):
    """Every arm's adapters: r 16, alpha 32, on every linear layer but the head (peft's all-linear); on a mixture of
    experts also on the routed experts (moe_lora_config)."""
    from peft import LoraConfig, get_peft_model
    if is_moe(base):
        config = moe_lora_config(base)
        with targets_as_written():  # the names mean this model's own layers (moe_lora_config says why)
            return get_peft_model(base, config)
    config = LoraConfig(r=LORA_RANK, lora_alpha=2 * LORA_RANK, lora_dropout=0.0, target_modules="all-linear",
                        task_type="CAUSAL_LM")
    # peft keeps the adapters in fp32 over a bf16 base (autocast_adapter_dtype): exact updates, cheap memory.
    return get_peft_model(base, config)


def moe_lora_config(base):
    """The plain transformers 5 + peft recipe for a mixture of experts, as a careful user writes it: LoRA on every
    linear layer but the head and the routers (attention, a dense first layer, shared experts: peft's all-linear,
    named one by one) and, through peft's `target_parameters`, on each layer's fused routed experts
    (`experts.gate_up_proj`, `experts.down_proj`), which `all-linear` alone leaves frozen. peft then runs its own
    parametrized forward (W + scaling B A for every expert, every step) under transformers' default experts
    implementation. The names are held as written (targets_as_written): peft 0.18+ would otherwise read gate_proj /
    up_proj / down_proj as transformers 4's per-expert linears and move a dense MLP's and the shared experts' LoRA
    onto the experts (DeepSeek-V2), and resolve `all-linear` to include the router (Qwen3-MoE, Mixtral): every arm
    must train the same parameters."""
    from peft import LoraConfig
    linear = resolve_lora_targets(base, "all")
    experts = plan_expert_targets(base, None, set(linear), train_router=False)
    return LoraConfig(r=LORA_RANK, lora_alpha=2 * LORA_RANK, lora_dropout=0.0, target_modules=linear,
                      target_parameters=experts.parameters, task_type="CAUSAL_LM")


def compute_dtype(device: torch.device) -> torch.dtype:
    """Every arm's base dtype: bf16 on a GPU, fp32 on a CPU."""
    return torch.bfloat16 if device.type == "cuda" else torch.float32



def param_counts(model) -> tuple[int, int]:
    """-> (N, N_lora) of the MFU formula: frozen parameters that take part in a matmul (tied weights count once;
    an input embedding with its own output head is a lookup, not a matmul, and is left out), and trainable ones;
    each counted at the share of tokens that pass through it (parameter_counts)."""
    counts = parameter_counts(model)
    return counts["mfu_parameters"], counts["mfu_lora_parameters"]


def _adapter_name(name: str) -> bool:
    return "lora_" in name or "modules_to_save" in name


def parameter_counts(model) -> dict:
    """Parameters as MFU and the arm's JSON count them. A routed expert's weights, and its LoRA factors, count at
    top_k / num_experts (a token passes through top_k of each layer's experts): MFU then means the FLOPs a step really
    spends. -> mfu_parameters (N: frozen, in a matmul, active share), mfu_lora_parameters (N_lora: trainable, active
    share), trainable_parameters (all trainable), total_parameters and active_parameters (the model's own weights,
    adapters left out), and on a mixture of experts trainable_by_kind. Tied weights count once; 4-bit weights for
    what they stand for."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    config = base_model_of(model).config
    config = config.get_text_config() if hasattr(config, "get_text_config") else config
    experts, top_k = experts_per_layer(config), experts_per_token(config)
    share = top_k / experts if experts and top_k else 1.0
    embedding, head = base.get_input_embeddings(), base.get_output_embeddings()
    lookup = embedding.weight if embedding is not None and head is not None and embedding.weight is not head.weight \
        else None
    frozen = lora = 0.0
    trainable = total = active = 0
    by_kind = dict.fromkeys(KINDS, 0)
    for name, param in model.named_parameters():  # a tied weight once
        n = getattr(param, "ds_numel", None) or logical_numel(param)
        kind = parameter_kind(name)
        used = n * share if kind == ROUTED_EXPERTS else n
        if param.requires_grad:
            trainable += n
            lora += used
            by_kind[kind] += n
        elif param is not lookup:
            frozen += used
        if not _adapter_name(name):
            total += n
            active += round(used)
    counts = {"mfu_parameters": round(frozen), "mfu_lora_parameters": round(lora), "trainable_parameters": trainable,
              "total_parameters": total, "active_parameters": active}
    if experts:
        counts["trainable_by_kind"] = {kind: n for kind, n in by_kind.items() if n}
    return counts


def flops_per_token(n_params: int, n_lora: int) -> float:
    """Frozen base: forward 2N + backward to activations 2N; adapters also get weight gradients: 6*N_lora."""
    return 4.0 * n_params + 6.0 * n_lora


def peak_flops(device: torch.device) -> float | None:
    if device.type != "cuda":
        return None
    tflops = peak_bf16_tflops(torch.cuda.get_device_name(device))  # the product table doctor and train use
    return tflops * 1e12 if tflops else None


def score(name: str, summary: dict, n_params: int, n_lora: int, device: torch.device, settings: dict, startup: float,
          peak_memory: float | None, counts: dict | None = None) -> dict:
    """An arm's result from its SteadyRate summary: rate, MFU against the device's peak, memory, start-up; `counts`
    (parameter_counts less the MFU pair): trainable, total and active parameters, by kind on a mixture of experts."""
    peak = peak_flops(device)
    rate = summary["tokens_per_s"]
    extra = {k: v for k, v in (counts or {}).items() if k not in ("mfu_parameters", "mfu_lora_parameters")}
    return {"name": name, "steps": summary.get("timed_steps", 0), "real_tokens": summary.get("timed_tokens", 0),
            "seconds": summary.get("span_seconds", 0.0), **summary,
            "mfu": rate * flops_per_token(n_params, n_lora) / peak if peak else None,
            "peak_memory_gib": peak_memory, "startup_seconds": round(startup, 1),
            "flops_per_token": flops_per_token(n_params, n_lora), "parameters": n_params, "lora_parameters": n_lora,
            **extra, "settings": settings}


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


def memory_budget_gib(device: torch.device) -> float | None:
    return torch.cuda.get_device_properties(device).total_memory / 2**30 if device.type == "cuda" else None
