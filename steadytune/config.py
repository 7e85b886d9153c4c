"""Run configuration: typed dataclasses grouped by concern, loaded from YAML plus `key=value` overrides.

The keys are LLaMA-Factory's flat keys (a user's `qwen3_lora_sft.yaml` loads as it is), so a YAML file is
one flat mapping; nested sections (`guard:`, `fault_injection:`) hold our own feature groups. Every key
lives in exactly one dataclass below, with its default and help text in the field's metadata. Unknown
keys fail with a did-you-mean; keys for features we do not have fail with "not supported: KEY".
LLaMA-Factory's v1 schema is translated into these keys by config_lf_v1.py, before they are checked here.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib.util
import math
import os
import re
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Union, get_args, get_origin

import yaml

from steadytune.config_lf_v1 import is_v1_config, translate_v1
from steadytune.errors import MAX_SHOWN_VALUE, ConfigError, show_value


# What one YAML file may hold. A config is a few KB of keys; these bounds stop a hostile or broken file (aliases
# that expand a 10 KB file into billions of values, 10,000-deep nesting, a 100 MB value) in milliseconds, with one line.
MAX_YAML_BYTES = 1 << 20       # the file (PyYAML reads ~2 MB/s: 1 MiB is half a second)
MAX_YAML_NODES = 100_000       # values (scalars, lists, mappings) once aliases are expanded
MAX_YAML_CHARS = 4 << 20       # characters of text once aliases are expanded
MAX_YAML_DEPTH = 100           # lists and mappings inside one another, aliases followed
MAX_TEXT_VALUE = 100_000       # characters in one text value (a system prompt of ~25k tokens)
MAX_FLOAT_VALUE = 3.4028234663852886e38   # float32's largest: a number key beyond it overflows in torch
MAX_INT_VALUE = 2 ** 53        # a whole-number key beyond this is no count any run has (and int64 steps overflow)


def _opt(default: Any, help: str, choices: tuple | None = None, minimum: float | None = None,
         maximum: float | None = None, exclusive_min: bool = False) -> Any:
    """A dataclass field carrying its help text and validation bounds."""
    metadata = {"help": help, "choices": choices, "min": minimum, "max": maximum, "exclusive_min": exclusive_min}
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda d=default: type(d)(d), metadata=metadata)
    return field(default=default, metadata=metadata)


# ---------------------------------------------------------------------------------------------------------
# The sections. Field names are the YAML keys.
# ---------------------------------------------------------------------------------------------------------

@dataclass
class ModelArguments:
    model_name_or_path: str = _opt("gemma-3-270m", "Hugging Face folder, .gguf file, hub id, or a built-in alias (gemma-3-270m).")
    adapter_name_or_path: Optional[str] = _opt(None, "A trained LoRA adapter folder to load on top of the base model (eval, export, chat).")
    trust_remote_code: bool = _opt(False, "Run Python code shipped with the model (config.json auto_map); off unless set, for every command that loads a model.")
    allow_pickle_weights: bool = _opt(False, "Also load weights from pickle files (pytorch_model.bin, adapter_model.bin), which can run code when read; default: safetensors only.")
    flash_attn: str = _opt("auto", "Attention kernel: auto (= SDPA), sdpa, eager, fa2 (flash-attn, only if it imports and runs).",
                           choices=("auto", "sdpa", "eager", "fa2", "disabled"))
    cache_dir: Optional[str] = _opt(None, "Where converted GGUF models and tokenised data are cached (default ~/.cache/steadytune).")
    use_reentrant_gc: bool = _opt(False, "Use re-entrant gradient checkpointing (LLaMA-Factory key; non-reentrant is the safe default).")
    # vLLM engine settings (LLaMA-Factory keys and defaults; they matter only with infer_backend: vllm).
    vllm_maxlen: int = _opt(4096, "vLLM: maximum sequence length (prompt + answer).", minimum=1)
    vllm_gpu_util: float = _opt(0.7, "vLLM: share of GPU memory it may take.", minimum=0.0, maximum=1.0, exclusive_min=True)
    vllm_enforce_eager: bool = _opt(False, "vLLM: no CUDA graphs.")
    vllm_max_lora_rank: int = _opt(32, "vLLM: the largest LoRA rank it can serve.", minimum=1)
    vllm_config: Optional[dict] = _opt(None, "vLLM: further engine arguments, e.g. {max_num_batched_tokens: 8192}.")
    # QLoRA (LLaMA-Factory's keys and defaults, hparams/model_args.py QuantizationArguments): the frozen base's
    # linear layers quantised on load by bitsandbytes; see model/quantize.py and docs/training.md#qlora.
    quantization_bit: Optional[int] = _opt(None, "QLoRA: quantise the frozen base's linear layers to 4 or 8 bits on load "
                                           "(bitsandbytes); LoRA trains on top. Unset: no quantisation.", choices=(4, 8))
    quantization_method: str = _opt("bnb", "QLoRA: the on-the-fly quantisation library; bnb (bitsandbytes) only.",
                                    choices=("bnb",))
    quantization_type: str = _opt("nf4", "QLoRA 4-bit: the data type, nf4 (normal float, QLoRA's) or fp4.",
                                  choices=("nf4", "fp4"))
    double_quantization: bool = _opt(True, "QLoRA 4-bit: quantise the quantisation constants too (~0.4 bits a "
                                     "parameter less, QLoRA's double quantisation).")
    # Mixtures of experts (LLaMA-Factory's key; see model/moe/ and docs/training.md#mixtures-of-experts).
    moe_aux_loss_coef: Optional[float] = _opt(None, "Mixture of experts: add the routers' load-balancing loss (Switch "
                                              "Transformer's, as transformers computes it) times this to the loss, for "
                                              "the model types LLaMA-Factory sets it for (qwen2_moe, qwen3_moe, mixtral, "
                                              "olmoe, ...). Unset: only if the model's config asks for it "
                                              "(output_router_logits); it is logged as moe_aux_loss either way.",
                                              minimum=0.0)


@dataclass
class MethodArguments:
    stage: str = _opt("sft", "Training stage: sft (supervised fine-tuning), pt (continued pre-training on plain text: texts "
                      "concatenated and cut into cutoff_len blocks, loss on every token), dpo (preference pairs: DPO, IPO, "
                      "ORPO, SimPO, hinge), kto (desirable/undesirable answers), rm (reward model on preference pairs), grpo "
                      "(online RL: completions generated from prompts, scored by reward_funcs; TRL's GRPO).",
                      choices=("sft", "pt", "dpo", "kto", "rm", "grpo"))
    do_train: Optional[bool] = _opt(None, "Train (LLaMA-Factory key). Unset: train when `dataset` is set; false with "
                                    "do_predict/do_eval only evaluates adapter_name_or_path on eval_dataset.")
    finetuning_type: str = _opt("lora", "lora: train low-rank adapters (peft); full: train every weight; freeze: train "
                                "some decoder layers in full (freeze_trainable_*), the rest frozen; oft: orthogonal "
                                "fine-tuning adapters (peft's OFT; oft_*).", choices=("lora", "full", "freeze", "oft"))
    # Freeze tuning and LLaMA Pro (LLaMA-Factory's FreezeArguments; model/freeze.py computes the trainable set as it does)
    freeze_trainable_layers: int = _opt(2, "freeze: how many decoder layers train: the last n (n > 0) or the first -n "
                                        "(n < 0); with use_llama_pro, the n expanded blocks (every num_layers/n-th).")
    freeze_trainable_modules: str = _opt("all", "freeze: the modules of those layers that train (comma list of names "
                                         "inside a layer: self_attn, mlp, ...; all: the whole layer).")
    freeze_extra_modules: Optional[str] = _opt(None, "freeze: modules outside the decoder layers that train too (comma "
                                               "list, e.g. embed_tokens,norm).")
    use_llama_pro: bool = _opt(False, "LLaMA Pro: train only the expanded blocks of a block-expanded model (every "
                               "num_layers/freeze_trainable_layers-th layer); with lora, LoRA on those blocks only.")
    # Vision-language models (LLaMA-Factory's keys and defaults; model/vision.py applies them as it does)
    freeze_vision_tower: bool = _opt(True, "Vision-language model: keep the vision tower (image encoder) frozen; false: "
                                     "it trains too (full/freeze tuning), or gets LoRA (lora_target: all).")
    freeze_multi_modal_projector: bool = _opt(True, "Vision-language model: keep the projector (image features -> the "
                                              "language model's width) frozen; false: it trains in full (with LoRA: "
                                              "saved with the adapter).")
    freeze_language_model: bool = _opt(False, "Vision-language model: keep the language model frozen (only an unfrozen "
                                       "vision tower or projector trains).")
    # LoRA+ and PiSSA (LLaMA-Factory's LoraArguments)
    loraplus_lr_ratio: Optional[float] = _opt(None, "LoRA+: lora_B (and 1-D trainable weights) learn at learning_rate "
                                              "x this ratio, lora_A at learning_rate (LLaMA-Factory's param groups).",
                                              minimum=0.0, exclusive_min=True)
    loraplus_lr_embedding: float = _opt(1e-6, "LoRA+: learning rate of LoRA's embedding B matrices.", minimum=0.0)
    pissa_init: bool = _opt(False, "PiSSA: initialise LoRA from the principal singular vectors of each adapted weight "
                            "(peft's init_lora_weights: pissa); the base keeps the residual.")
    pissa_iter: int = _opt(16, "PiSSA: fast-SVD iterations (peft's pissa_niter_N); -1: the exact SVD.", minimum=-1)
    pissa_convert: bool = _opt(False, "PiSSA: also save the trained adapter converted to a plain LoRA adapter of the "
                               "original base (rank 2r) in output_dir/pissa_converted (peft's "
                               "path_initial_model_for_weight_conversion).")
    # OFT (LLaMA-Factory's OFTArguments; peft's OFTConfig)
    oft_rank: int = _opt(0, "OFT: number of orthogonal blocks per layer (0: set by oft_block_size).", minimum=0)
    oft_block_size: int = _opt(32, "OFT: size of each orthogonal block (0: set by oft_rank).", minimum=0)
    oft_target: str = _opt("all", "OFT: modules to adapt, as lora_target (all: every linear layer but the output head).")
    module_dropout: float = _opt(0.0, "OFT: probability of dropping a whole OFT module in a training forward.",
                                 minimum=0.0, maximum=1.0)
    # SFT losses other than cross-entropy (LLaMA-Factory's keys; stages/sft_losses.py computes them as its code does)
    use_dft_loss: bool = _opt(False, "sft: DFT loss (dynamic fine-tuning): each token's cross-entropy weighted by its "
                              "probability under the model (no gradient through the weight).")
    use_eaft_loss: bool = _opt(False, "sft: EAFT loss: each token's cross-entropy weighted by (entropy of the model's "
                               "top-20 distribution / 3) ** eaft_alpha (no gradient through the weight).")
    eaft_alpha: float = _opt(1.0, "EAFT: the power of the entropy weight.", minimum=0.0)
    use_asft_loss: bool = _opt(False, "sft: ASFT loss: the DFT loss plus asft_alpha x KL(reference || model) per "
                               "labelled token; the reference is the starting model (as ref_model for dpo).")
    asft_alpha: float = _opt(0.1, "ASFT: weight of the KL term.", minimum=0.0)
    lora_rank: int = _opt(8, "LoRA rank r.", minimum=1)
    lora_alpha: Optional[float] = _opt(None, "LoRA scaling alpha (default: 2 x lora_rank).", minimum=0, exclusive_min=True)
    lora_dropout: float = _opt(0.0, "Dropout on the LoRA input.", minimum=0.0, maximum=1.0)
    lora_target: str = _opt("all", "Modules to adapt: all (every linear layer but the output head and the routers, and "
                            "a mixture of experts' routed experts) or a comma list (q_proj,v_proj; experts, gate_up_proj "
                            "or down_proj for the routed experts).")
    train_router: bool = _opt(False, "Mixture of experts: train each layer's router (the weights that pick a token's "
                              "experts) in full, saved with the adapter. Default: frozen, as LLaMA-Factory's lora_target "
                              "and Unsloth leave it.")
    additional_target: Optional[str] = _opt(None, "Extra modules trained in full and saved with the adapter (comma list, e.g. embed_tokens).")
    use_rslora: bool = _opt(False, "Rank-stabilised LoRA scaling (alpha / sqrt(r)).")
    use_dora: bool = _opt(False, "Weight-decomposed LoRA (DoRA).")
    deepspeed: Optional[str] = _opt(None, "A DeepSpeed JSON config (ZeRO-0/2/3) handed to Accelerate.")
    # Preference stages (LLaMA-Factory's RLHFArguments: same names, defaults and meaning; see steadytune/stages/).
    pref_beta: float = _opt(0.1, "dpo/kto: beta, how far the policy may move from the reference (IPO: its tau; ORPO: the odds-ratio weight lambda).", minimum=0.0, exclusive_min=True)
    pref_loss: str = _opt("sigmoid", "dpo loss: sigmoid (DPO), hinge (SLiC), ipo, orpo, simpo.", choices=("sigmoid", "hinge", "ipo", "orpo", "simpo"))
    pref_ftx: float = _opt(0.0, "dpo/kto: weight of an SFT term (mean negative log-likelihood per token of the chosen answer) added to the preference loss.", minimum=0.0)
    simpo_gamma: float = _opt(0.5, "simpo: target reward margin gamma.", minimum=0.0)
    dpo_label_smoothing: float = _opt(0.0, "sigmoid DPO: probability that a preference label is flipped (cDPO / robust DPO), 0 to 0.5.", minimum=0.0, maximum=0.5)
    kto_chosen_weight: float = _opt(1.0, "kto: weight of the desirable examples' loss.", minimum=0.0)
    kto_rejected_weight: float = _opt(1.0, "kto: weight of the undesirable examples' loss.", minimum=0.0)
    ref_model: Optional[str] = _opt(None, "dpo/kto: reference model (folder, .gguf or alias); default: with LoRA the trained model with its adapter switched off (no second copy), with full fine-tuning a frozen copy of model_name_or_path.")
    ref_model_adapters: Optional[str] = _opt(None, "dpo/kto: a LoRA adapter folder loaded onto ref_model.")
    # stage grpo (TRL's GRPOConfig names, defaults and meaning; see steadytune/stages/grpo.py). Sampling takes
    # temperature / top_p / top_k, unset: TRL's 1.0 / 1.0 / off.
    num_generations: int = _opt(8, "grpo: completions sampled per prompt (the group whose rewards are compared); per_device_train_batch_size counts prompts.", minimum=2)
    max_completion_length: int = _opt(512, "grpo: most tokens generated per completion.", minimum=1)
    beta: float = _opt(0.0, "grpo: weight of the KL term to the reference (the base with the adapter switched off); 0: no reference forward.", minimum=0.0)
    epsilon: float = _opt(0.2, "grpo: clip range of the importance ratio, 1 - epsilon.", minimum=0.0)
    epsilon_high: Optional[float] = _opt(None, "grpo: upper clip range 1 + epsilon_high (DAPO's clip-higher); default epsilon. With loss_type cispo: the importance weight's upper bound itself (default 5.0, ScaleRL's).", minimum=0.0)
    loss_type: str = _opt("dapo", "grpo: the loss (TRL's names): grpo (clipped surrogate, mean per completion, then over completions), dr_grpo (sum / (completions x max_completion_length)), dapo (mean over every completion token of the step), cispo (clipped, detached importance weight times the log-prob: every token keeps its gradient; token mean), sapo (a smooth sigmoid gate instead of the clip; mean per completion), luspo (GSPO scaled by each completion's length).",
                          choices=("grpo", "dr_grpo", "dapo", "cispo", "sapo", "luspo"))
    importance_sampling_level: str = _opt("token", "grpo: the importance ratio per token (token) or one per completion, the exp of its tokens' mean log-ratio (sequence: GSPO).", choices=("token", "sequence"))
    delta: Optional[float] = _opt(None, "grpo: caps the unclipped importance ratio at delta too (two-sided clipping, INTELLECT-2; > 1 + epsilon_high); default none.", minimum=1.0)
    sapo_temperature_pos: float = _opt(1.0, "grpo, loss_type sapo: the gate's temperature for positive advantages.", minimum=0.0, exclusive_min=True)
    sapo_temperature_neg: float = _opt(1.05, "grpo, loss_type sapo: the gate's temperature for other advantages.", minimum=0.0, exclusive_min=True)
    scale_rewards: str = _opt("group", "grpo: advantages divided by the std of the group's rewards (group), of the step's (batch), or not (none).", choices=("group", "batch", "none"))
    reward_funcs: Union[None, str, list] = _opt(None, "grpo: reward functions, a list or comma list: accuracy (the answer equals the solution/answer column), format (reward_format matches), label (classification: the gold label), length, soft_overlong_punishment (DAPO's overlong shaping), or your own module:function / path/file.py:function taking (prompts, completions, **columns).")
    reward_weights: Optional[list] = _opt(None, "grpo: one weight per reward function (default 1 each); the reward is their weighted sum.")
    reward_timeout: float = _opt(300.0, "grpo: seconds one call of a reward function may take (each function, each roll-out and evaluation); past it the run stops with one line naming the function and the step, its last checkpoint kept (0: no limit).", minimum=0.0)
    reward_format: str = _opt(r"^<think>(?!.*<think>)(.*?)</think>.*$", "grpo: the regular expression the format reward matches at the start of a completion (default: TRL's think format).")
    length_target: Optional[int] = _opt(None, "grpo: the length reward's best length in tokens (default max_completion_length).", minimum=1)
    soft_punish_cache: Optional[int] = _opt(None, "grpo: the soft_overlong_punishment reward's L_cache: completions within this many tokens of max_completion_length lose up to 1 (DAPO); default a fifth of max_completion_length.", minimum=1)
    mask_truncated_completions: bool = _opt(False, "grpo: leave completions that hit max_completion_length out of the loss (DAPO).")
    use_bias_correction_kl: bool = _opt(True, "grpo: multiply the KL term by the importance ratio (TRL's default; changes its gradient, not its value).")
    log_completions: bool = _opt(False, "grpo: write the completions of each logged step and of each evaluation, with their rewards, to completions.jsonl in output_dir (TRL's key; TRL sends them to its trackers).")
    async_staleness: int = _opt(1, "grpo: how many optimizer steps the weights that generate a step's completions may be behind the weights it trains (asynchronous roll-outs: step n+1 is generated while step n trains, importance-corrected; on a GPU by default, the start line says which path a run takes); 0: every step generates from its own weights (synchronous).", minimum=0)
    dynamic_sampling: bool = _opt(False, "grpo: replace each group whose completions all got the same reward (no signal) by another prompt's group, drawn from the training data (DAPO's dynamic sampling), up to max_num_gen_batches generation rounds a step.")
    max_num_gen_batches: int = _opt(4, "grpo, dynamic_sampling: the most generation rounds a step takes, the first included (verl's key); groups still without spread after them train with advantage 0.", minimum=1)
    tools: Union[None, str, list] = _opt(None, "grpo: tools the policy may call in multi-turn episodes (TRL's GRPOTrainer tools): a list of module, path/file.py (every public function it defines) or module:function; the prompts' tool definitions come from the dataset's tools column (LLaMA-Factory's format), the results are inserted with the template's tool-role tokens and left out of the loss.")
    max_tool_calling_iterations: Optional[int] = _opt(None, "grpo, tools: the most tool-calling turns of an episode (TRL's key); default no limit but max_completion_length.", minimum=0)
    tool_timeout: float = _opt(60.0, "grpo, tools: seconds one tool call may take; past it the call is interrupted and the model reads an error as its result (0: no limit).", minimum=0.0)


@dataclass
class DataArguments:
    dataset: Optional[str] = _opt(None, "Comma list of dataset names from dataset_dir/dataset_info.json, built-in names, or file paths.")
    dataset_dir: str = _opt("data", "Folder holding dataset_info.json and the files it names.")
    eval_dataset: Optional[str] = _opt(None, "Comma list of datasets used for evaluation (instead of a split of the training data).")
    template: str = _opt("auto", "Chat template, by LLaMA-Factory's name (qwen, qwen3, qwen3_nothink, llama3, gemma, mistral, glm4, "
                         "...; see the README), or auto (LLaMA-Factory's unset: read off the tokenizer's chat template, else empty).")
    tool_format: Optional[str] = _opt(None, "Write tool definitions and calls in this format instead of the template's (LLaMA-Factory key: default, qwen, qwen3_5, llama3, mistral, glm4).")
    default_system: Optional[str] = _opt(None, "System prompt for conversations that have none (replaces the template's default).")
    enable_thinking: Optional[bool] = _opt(True, "Reasoning templates (qwen3, qwen3_5, ...): answers without a think block get an empty one, trained (true) or on the prompt side (false); false also drops think blocks from answers.")
    preserve_thinking: bool = _opt(False, "Reasoning templates with mask_history: keep the think blocks of earlier turns.")
    cutoff_len: int = _opt(2048, "Maximum tokens per example (prompt + response).", minimum=1)
    max_samples: Optional[int] = _opt(None, "Use at most this many examples from each dataset.", minimum=1)
    max_eval_samples: Optional[int] = _opt(None, "Use at most this many evaluation examples (default: max_samples).", minimum=1)
    val_size: float = _opt(0.0, "Held-out share (0-1) or count (>= 1) of the training data for evaluation; stratified for classification.", minimum=0.0)
    tune_val_size: float = _opt(0.0, "Held out of the training rows (share 0-1 or count >= 1; stratified for classification) as the eval split, in place of eval_dataset / val_size's test split, which is then not read: `steadytune tune` scores its trials there.", minimum=0.0)
    train_on_prompt: bool = _opt(False, "Also compute the loss on prompt tokens.")
    mask_history: bool = _opt(False, "Multi-turn: train only on the last assistant turn.")
    preprocessing_num_workers: Optional[int] = _opt(None, "Processes for tokenisation (LLaMA-Factory key). Tokenisation runs in one "
                                                    "process; stage pt cuts its blocks per shard as LLaMA-Factory's workers do.", minimum=1)
    preprocessing_batch_size: int = _opt(1000, "Rows per tokenisation batch (LLaMA-Factory key); stage pt concatenates and cuts "
                                         "texts within each batch, as LLaMA-Factory does.", minimum=1)
    mix_strategy: str = _opt("concat", "How several datasets are combined: concat (LLaMA-Factory's default; its interleave_* "
                             "strategies are not supported).", choices=("concat",))
    streaming: bool = _opt(False, "LLaMA-Factory key; streaming datasets are not supported (data is read and tokenised before "
                           "training), so only false is accepted.")
    overwrite_cache: bool = _opt(False, "LLaMA-Factory key (re-tokenise instead of reading datasets' cache); steadytune "
                                 "keeps no hidden cache: data is tokenised every run unless tokenized_path is set.")
    packing: Optional[bool] = _opt(None, "Pack several examples per row up to cutoff_len, attention kept inside each example.")
    neat_packing: bool = _opt(False, "LLaMA-Factory's name for packing without cross-attention between examples; implies packing.")
    packing_attention: str = _opt("auto", "Attention over packed rows: auto (varlen flash kernel where it runs and matches SDPA, else SDPA with a block-diagonal mask), varlen, sdpa, flex.",
                                  choices=("auto", "varlen", "sdpa", "flex"))
    tokenized_path: Optional[str] = _opt(None, "Folder caching the tokenised dataset: written on the first run, reused while the data settings and tokenizer match.")
    # Generative classification (seed 003): the target is a label word followed by end-of-sequence.
    label_names: Optional[list] = _opt(None, "Ordered label words for classification datasets, e.g. [消极, 积极].")
    prompt_template: Optional[str] = _opt(None, "Prompt for classification rows; must contain {text}.")
    # Vision-language rows (data/multimodal/): LLaMA-Factory's keys and defaults (its ModelArguments / DataArguments).
    media_dir: Optional[str] = _opt(None, "Folder that image and video paths in the rows are relative to (default: dataset_dir); a path not found there is read as written.")
    image_max_pixels: int = _opt(768 * 768, "Images with more pixels (width x height) are shrunk to about this many before the image processor (LLaMA-Factory's rule).", minimum=1)
    image_min_pixels: int = _opt(32 * 32, "Images with fewer pixels are enlarged to about this many.", minimum=1)
    image_do_pan_and_scan: bool = _opt(False, "Gemma 3: also feed crops of wide or tall images (pan and scan), as LLaMA-Factory.")
    video_max_pixels: int = _opt(256 * 256, "Video frames with more pixels are shrunk to about this many.", minimum=1)
    video_min_pixels: int = _opt(16 * 16, "Video frames with fewer pixels are enlarged to about this many.", minimum=1)
    video_fps: float = _opt(2.0, "Frames kept per second of video (at least one, at most video_maxlen).", minimum=0.0, exclusive_min=True)
    video_maxlen: int = _opt(128, "Most frames kept of one video.", minimum=1)
    media_truncation: str = _opt("shorten_text", "When cutoff_len cannot hold a row with its image/video tokens: shorten_text (cut its text, never a media token; refuse the row when the media alone do not fit) or refuse (refuse the row, naming it).",
                                 choices=("shorten_text", "refuse"))
    class_balance: str = _opt("none", "Class balance for classification: none, sampler (inverse-frequency sampling), loss (class-weighted loss), both.",
                              choices=("none", "sampler", "loss", "both"))


@dataclass
class TrainArguments:
    output_dir: str = _opt("saves/run", "Where the adapter, checkpoints, metrics and config are written.")
    overwrite_output_dir: bool = _opt(False, "Allow writing into a non-empty output_dir (a resume needs no permission).")
    per_device_train_batch_size: int = _opt(8, "Examples per device per micro-batch.", minimum=1)
    max_tokens_per_batch: Optional[int] = _opt(None, "Token-budget batching: real tokens per device per micro-batch instead of a fixed number of examples (default with packing: per_device_train_batch_size x mean example length).", minimum=1)
    per_device_eval_batch_size: int = _opt(8, "Examples per device per evaluation batch.", minimum=1)
    gradient_accumulation_steps: int = _opt(1, "Micro-batches per optimizer step.", minimum=1)
    learning_rate: float = _opt(5e-5, "Peak learning rate of AdamW (LLaMA-Factory's / transformers' default 5e-5); at most 10 (beyond 1, AdamW's steps already erase the model).", minimum=0.0, maximum=10.0, exclusive_min=True)
    weight_decay: float = _opt(0.0, "AdamW weight decay.", minimum=0.0)
    adam_beta1: float = _opt(0.9, "AdamW beta1.", minimum=0.0, maximum=1.0)
    adam_beta2: float = _opt(0.999, "AdamW beta2.", minimum=0.0, maximum=1.0)
    adam_epsilon: float = _opt(1e-8, "AdamW epsilon.", minimum=0.0, exclusive_min=True)
    max_grad_norm: float = _opt(1.0, "Clip the global gradient norm to this (0 disables clipping).", minimum=0.0)
    num_train_epochs: float = _opt(3.0, "Epochs over the training data (ignored when max_steps > 0).", minimum=0.0, exclusive_min=True)
    max_steps: int = _opt(-1, "Total optimizer steps; overrides num_train_epochs when > 0.")
    lr_scheduler_type: str = _opt("linear", "Learning-rate schedule (transformers' get_scheduler; default linear, as LLaMA-Factory).",
                                  choices=("linear", "cosine", "constant", "constant_with_warmup", "cosine_with_restarts",
                                           "polynomial", "inverse_sqrt"))
    optim: str = _opt("adamw_torch_fused", "Optimizer: AdamW (adamw_torch, or adamw_torch_fused: one fused kernel where the device "
                      "has it; the same update).", choices=("adamw_torch", "adamw_torch_fused"))
    # Other optimizers, with LLaMA-Factory's keys and defaults (its create_custom_optimizer; training/optimizers.py).
    # Each comes from its own library (pip install 'steadytune[optimizers]'); Muon is torch's.
    use_galore: bool = _opt(False, "GaLore (galore-torch): AdamW whose moments live in a low-rank projection of each "
                            "galore_target weight's gradient; full or freeze fine-tuning.")
    galore_target: str = _opt("all", "GaLore: the linear layers projected (comma list of name parts; all: every "
                              "linear layer but the output head).")
    galore_rank: int = _opt(16, "GaLore: rank of the gradient projection.", minimum=1)
    galore_update_interval: int = _opt(200, "GaLore: steps between recomputations of the projection.", minimum=1)
    galore_scale: float = _opt(2.0, "GaLore: scale of the projected update.", minimum=0.0, exclusive_min=True)
    galore_proj_type: str = _opt("std", "GaLore: projection type.", choices=("std", "reverse_std", "right", "left",
                                                                              "full"))
    galore_layerwise: bool = _opt(False, "GaLore: step each weight's optimizer as soon as its gradient is complete "
                                  "(less memory; needs gradient_accumulation_steps: 1; no gradient clipping).")
    use_apollo: bool = _opt(False, "APOLLO (apollo-torch): AdamW with low-rank, channel- or tensor-wise scaled "
                            "updates of each apollo_target weight; full or freeze fine-tuning.")
    apollo_target: str = _opt("all", "APOLLO: the linear layers it applies to (comma list; all: every linear layer "
                              "but the output head).")
    apollo_rank: int = _opt(16, "APOLLO: rank of the projection.", minimum=1)
    apollo_update_interval: int = _opt(200, "APOLLO: steps between new projections.", minimum=1)
    apollo_scale: float = _opt(32.0, "APOLLO: scaling coefficient.", minimum=0.0, exclusive_min=True)
    apollo_proj: str = _opt("random", "APOLLO: low-rank projection: svd or random.", choices=("svd", "random"))
    apollo_proj_type: str = _opt("std", "APOLLO: projection type.", choices=("std", "right", "left"))
    apollo_scale_type: str = _opt("channel", "APOLLO: scaling per channel or per tensor.", choices=("channel", "tensor"))
    apollo_layerwise: bool = _opt(False, "APOLLO: step each weight's optimizer as soon as its gradient is complete "
                                  "(needs gradient_accumulation_steps: 1; no gradient clipping).")
    apollo_scale_front: bool = _opt(False, "APOLLO: apply the norm-growth limiter before the gradient scaling.")
    use_badam: bool = _opt(False, "BAdam (badam): block coordinate descent, Adam on one block of layers at a time; "
                           "full or freeze fine-tuning.")
    badam_mode: str = _opt("layer", "BAdam: layer (one block of layers at a time) or ratio (a share of each weight).",
                           choices=("layer", "ratio"))
    badam_start_block: Optional[int] = _opt(None, "BAdam layer mode: the block trained first.", minimum=0)
    badam_switch_mode: str = _opt("ascending", "BAdam layer mode: the order blocks take turns in.",
                                  choices=("ascending", "descending", "random", "fixed"))
    badam_switch_interval: int = _opt(50, "BAdam layer mode: optimizer steps per block (-1: never switch).",
                                      minimum=-1)
    badam_update_ratio: float = _opt(0.05, "BAdam ratio mode: the share of each weight updated.", minimum=0.0,
                                     maximum=1.0, exclusive_min=True)
    badam_mask_mode: str = _opt("adjacent", "BAdam ratio mode: the updated entries adjacent or scattered.",
                                choices=("adjacent", "scatter"))
    badam_verbose: int = _opt(0, "BAdam: 0 quiet, 1 print the block trained, 2 also its parameters.", minimum=0,
                              maximum=2)
    use_adam_mini: bool = _opt(False, "Adam-mini (adam-mini): one second moment per block (attention head, "
                               "neuron) instead of per weight; about half AdamW's optimizer memory.")
    use_muon: bool = _opt(False, "Muon: orthogonalised momentum (Newton-Schulz) for the 2-D weights of the hidden "
                          "layers, AdamW for the others (embeddings, head, norms, biases), as LLaMA-Factory's Muon.")
    warmup_ratio: float = _opt(0.0, "Share of the steps spent warming up the learning rate.", minimum=0.0, maximum=1.0)
    warmup_steps: int = _opt(0, "Warm-up steps; overrides warmup_ratio when > 0.", minimum=0)
    bf16: Union[bool, str] = _opt("auto", "bfloat16 mixed precision: true, false, or auto (only where the GPU architecture supports it).")
    lora_base_dtype: str = _opt("auto", "LoRA under bf16 mixed precision: the frozen base weights' dtype. bf16 halves their "
                                "memory, and the residual stream and norms then run in bf16; float32 keeps an fp32 copy "
                                "(matmuls still bf16 under autocast), as a transformers + peft script that calls "
                                "prepare_model_for_kbit_training does. auto: bf16.", choices=("auto", "bf16", "float32"))
    pure_bf16: bool = _opt(False, "Every weight in bf16, the trained ones too (no fp32 copy, no autocast): half the "
                           "memory of weights, gradients and optimizer state, at bf16's rounding of small updates "
                           "(LLaMA-Factory key; its GaLore, APOLLO and mixture-of-depths examples set it). Not with fp16.")
    fp16: Union[bool, str] = _opt(False, "float16 mixed precision with dynamic loss scaling: true, false, or auto.")
    seed: int = _opt(42, "Seed for data order, splits, LoRA init and dropout.", minimum=0, maximum=2**32 - 1)
    logging_steps: int = _opt(10, "Log loss, grad norm, lr and throughput every N optimizer steps.", minimum=1)
    save_steps: int = _opt(500, "Save a resumable checkpoint every N optimizer steps.", minimum=1)
    save_total_limit: Optional[int] = _opt(None, "Keep at most this many checkpoints (oldest deleted first).", minimum=1)
    save_only_model: bool = _opt(False, "LLaMA-Factory key; checkpoints here always hold what a resume needs.")
    eval_strategy: str = _opt("no", "When to evaluate: no, steps, epoch.", choices=("no", "steps", "epoch"))
    eval_on_start: bool = _opt(False, "Evaluate once before the first step (transformers' key): the starting point of the evaluation curves (grpo: the zero-shot reward).")
    eval_steps: Optional[float] = _opt(None, "Evaluate every N optimizer steps (eval_strategy: steps; default logging_steps); below 1, a share of the run's steps (0.25: four evaluations), as transformers reads it.", minimum=0.0, exclusive_min=True)
    metric_for_best_model: Optional[str] = _opt(None, "Keep the checkpoint with the best value of this eval metric (eval_loss, accuracy, macro_f1).")
    resume_from_checkpoint: Union[None, bool, str] = _opt(None, "true: resume from the latest checkpoint in output_dir; or a checkpoint folder.")
    plot_loss: bool = _opt(False, "Write training_loss.png at the end.")
    report_to: Union[str, list] = _opt("none", "Experiment trackers through Accelerate: none, all (every installed one), tensorboard, wandb, mlflow, swanlab, trackio, or a list; metrics.jsonl is always written.")
    logging_dir: Optional[str] = _opt(None, "TensorBoard log folder (default output_dir/runs/<date>_<host>, as transformers).")
    ddp_timeout: int = _opt(1800, "Seconds a collective may wait before failing (huge values hide RCCL/NCCL hangs).", minimum=1)
    hang_timeout: Optional[float] = _opt(None, "Hang watchdog: seconds a training step may stall before every rank dumps its stacks to output_dir/hang-rank-K.txt and the run stops (default: 300 s or 10x the slowest step, whichever is longer; 0 turns it off).", minimum=0)
    fsdp: Union[None, bool, str, list] = _opt(None, "FSDP through Accelerate (HF/LLaMA-Factory key): full_shard, shard_grad_op, offload, auto_wrap (a list or a space-separated string), or true (= full_shard auto_wrap). Always FSDP2.")
    fsdp_config: Union[None, dict, str] = _opt(None, "FSDP settings (a mapping, or a JSON/YAML file): fsdp_version, reshard_after_forward, cpu_ram_efficient_loading, offload_params, state_dict_type, transformer_layer_cls_to_wrap, activation_checkpointing (with or without the fsdp_ prefix).")
    fsdp_version: Optional[int] = _opt(None, "FSDP version (Axolotl key); steadytune always runs FSDP2.", choices=(1, 2))
    fsdp_transformer_layer_cls_to_wrap: Union[None, str, list] = _opt(None, "transformers' older key (LLaMA-Factory's "
                                                                      "fp8 FSDP example sets it): fsdp_config's "
                                                                      "transformer_layer_cls_to_wrap, where that is "
                                                                      "not set.")
    dataloader_num_workers: int = _opt(0, "Worker processes for the data loader.", minimum=0)
    gradient_checkpointing: Optional[bool] = _opt(None, "Recompute activations in backward to save memory (default: off for LoRA on small models).")
    gradient_checkpointing_kwargs: Optional[dict] = _opt(None, "Passed to gradient_checkpointing_enable, e.g. {use_reentrant: false}.")
    activation_offloading: Optional[bool] = _opt(None, "Keep what gradient checkpointing saves (each decoder layer's input) in pinned host memory until backward, copied out and back on a second CUDA stream beside the compute: about 2 bytes x hidden size x layers less GPU memory a token (QLoRA 7B at 10,240-token micro-batches: 9.3 GiB instead of ~10.8 on an H200, 0.97x the tokens/s of checkpointing alone). Turns gradient checkpointing on (CUDA graphs record its copies); CUDA/ROCm GPUs, one process or DDP (default: on only where checkpointing alone would not fit in 85% of the GPU's memory; off elsewhere, with the reason in decisions).")
    # Long context (model/tiling.py, hardware/long_context.py; docs/training.md#long-context)
    sequence_tiling: Optional[bool] = _opt(None, "Run each decoder layer, the final norm and the loss a tile of tokens at a time (Arctic Long Sequence Training's tiled MLP, for the whole layer): a micro-batch then keeps each layer's input and one tile's working set, so its memory grows with its length by ~2 bytes x hidden size x layers a token. Replaces gradient checkpointing for those layers (it recomputes the forward once, as checkpointing does). Llama, Qwen2, Qwen3 and Mistral layers, LoRA without dropout (default: on where checkpointing alone would not fit the micro-batch in the GPU's memory, for micro-batches of at least sequence_tile_tokens tokens; off elsewhere, with the reason in decisions).")
    sequence_tile_tokens: int = _opt(8192, "Tokens in one tile of sequence_tiling (its working set: ~24 x hidden + 12 x intermediate bytes a token).", minimum=128)
    # Parallelism beyond data (LLaMA-Factory v1's keys cp_size / cp_mode, and its fsdpturbo ep_size)
    cp_size: int = _opt(1, "Sequence (context) parallelism: split each sequence over this many processes of a node (LLaMA-Factory v1's key); the other processes' groups are data parallel. Attention exchanges heads (Ulysses) or keys and values (ring) within a group; positions, labels and the loss stay per shard.", minimum=1)
    cp_mode: str = _opt("ulysses", "Sequence parallelism's attention: ulysses (all-to-all over heads: query heads must divide by cp_size; key/value heads are repeated where they are fewer) or allgather (ring attention's all-gather form: every slice's keys and values gathered on each process, small under grouped-query attention; any head count). LLaMA-Factory v1's key and default; a model whose heads do not split by cp_size gets allgather, with the reason in decisions.", choices=("ulysses", "allgather"))
    ep_size: int = _opt(1, "Expert parallelism for a mixture of experts: split each layer's routed experts over this many processes (LLaMA-Factory v1's fsdpturbo ep_size), tokens sent to their experts' process and back with all-to-all; each process's experts run as its own grouped matmuls, the rest of the model is data parallel.", minimum=1)
    use_unsloth_gc: bool = _opt(False, "LLaMA-Factory key: Unsloth's gradient checkpointing, which keeps the checkpointed layer inputs in host memory; here it means activation_offloading: true (nothing changes when disable_gradient_checkpointing is true, as there).")
    do_eval: bool = _opt(False, "Evaluate after training (LLaMA-Factory key).")
    do_predict: bool = _opt(False, "Predict on eval_dataset after training (LLaMA-Factory key).")
    predict_with_generate: bool = _opt(False, "Generate text for do_predict (LLaMA-Factory key).")
    max_new_tokens: int = _opt(1024, "Most tokens generated per answer for do_predict and chat (LLaMA-Factory's default).", minimum=1)
    run_name: Optional[str] = _opt(None, "The run's name in experiment trackers (report_to); default: output_dir's folder name.")
    disable_gradient_checkpointing: bool = _opt(False, "LLaMA-Factory key: true turns gradient checkpointing off "
                                                "(= gradient_checkpointing: false).")
    use_liger_kernel: Optional[bool] = _opt(None, "liger-kernel's fused RMSNorm/RoPE/SwiGLU (default: on where installed, on a GPU, when the layers are not compiled).")
    torch_compile: Optional[bool] = _opt(None, "Compile each decoder layer with torch.compile (default: on for CUDA runs of 400+ micro-batches with static shapes).")
    kernel_tuning: Optional[bool] = _opt(None, "Tune the compiled layers' Triton kernels (Inductor's coordinate-descent tuning): 1.02x the tokens/s at the 1.5B shape on an H200 for about a minute more compiling, less on a rerun (default: on for compiled CUDA runs of 20,000+ micro-batches, where it pays).")
    recompute_pointwise: Optional[bool] = _opt(None, "Let the compiled decoder layers recompute elementwise results (SwiGLU's product, the normed inputs) in backward instead of keeping them: about half their activation memory, no matmul or attention recomputed (default: on where the layers are compiled on CUDA, measured 0.99x the speed at 0.7x the memory on an H200; needs torch_compile).")
    shared_input_projections: Optional[bool] = _opt(None, "LoRA layers that read the same input (q/k/v, gate/up) multiply it once, as a group: their lora_A's side by side, and their bases side by side where one is narrow (k/v under grouped-query attention); the same parameters and adapter files (default: on where the layers are compiled on CUDA, measured 1.02-1.04x the tokens/s on an H200; plain LoRA only: not with DoRA or lora_dropout).")
    fused_swiglu: Optional[bool] = _opt(None, "A SwiGLU MLP with LoRA on gate/up/down over the fp8 base runs between its matmuls as Triton kernels (gate's and up's LoRA products, silu(gate) * up, down's lora_A product and the fp8 quantisation of down's input in one pass, and one pass back) instead of writing the LoRA products full width and reading everything twice; the same values within rounding (default: on where fp8_base is on and the layers are compiled on CUDA; plain LoRA only; not Gemma's GELU).")
    cuda_graphs: Optional[bool] = _opt(None, "Replay each micro-batch's forward and backward from a CUDA graph (default: on for one CUDA process with varlen packing).")
    moe_grouped_mm: str = _opt("auto", "Mixture of experts: what the experts' grouped matmuls run on: torch (its grouped "
                               "matmul: NVIDIA sm_80+ in bf16, and CPUs), triton (our kernel: the default on ROCm, where "
                               "torch's is slow), loop (one matmul per expert, the reference), or auto.",
                               choices=("auto", "torch", "triton", "loop"))
    fp8_base: Optional[bool] = _opt(None, "Multiply the frozen base of a LoRA model in fp8 (e4m3, a scale per row; forward and input gradient). Default: on for sft/pt runs on CUDA GPUs of sm_89 and up (Ada, Hopper) under bf16 with compiled layers, for models of hidden size 896 and up (H200: 1.05x the tokens/s at the 0.5B shape, 1.13x at 1.5B, 1.33x at 7B), unless its copies (2 bytes a base weight) would turn gradient checkpointing on; off elsewhere, with the reason in decisions. The adapter is scored and saved over the bf16 base (model/fp8_base.py, docs/speed.md).")
    # LLaMA-Factory's Ray launch (USE_RAY=1; distributed/ray_launch.py): its 0.9.5 keys, and the Ray Train keys of its
    # earlier releases (resources_per_worker, placement_strategy, ray_run_name, ray_storage_path).
    ray_num_workers: int = _opt(1, "With USE_RAY=1: training processes started on the Ray cluster, one per bundle "
                                "of resources_per_worker (LLaMA-Factory key).", minimum=1)
    ray_init_kwargs: Union[None, dict, str] = _opt(None, "With USE_RAY=1: arguments of ray.init (address, num_cpus, "
                                                   "runtime_env, ...; a mapping or a JSON string).")
    resources_per_worker: Union[None, dict, str] = _opt(None, "With USE_RAY=1: Ray resources of one training process "
                                                        "(default {GPU: 1} on a cluster with GPUs, else {CPU: 1}).")
    placement_strategy: str = _opt("PACK", "With USE_RAY=1: how Ray places the workers' bundles on its nodes.",
                                   choices=("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"))
    ray_run_name: Optional[str] = _opt(None, "With USE_RAY=1: the run's folder under ray_storage_path, which then "
                                       "becomes output_dir (where LLaMA-Factory's Ray Train kept the results).")
    ray_storage_path: str = _opt("./saves", "With USE_RAY=1 and ray_run_name: the folder the run's folder goes in.")
    master_addr: Optional[str] = _opt(None, "With USE_RAY=1: the address rank 0 listens on (default: the address of "
                                      "the node Ray placed rank 0 on).")
    master_port: Optional[int] = _opt(None, "With USE_RAY=1: rank 0's port (default: a free one on its node).",
                                      minimum=1, maximum=65535)
    # LLaMA-Factory's fp8 training (training/fp8_training.py): every linear layer through torchao's float8 matmuls
    fp8: bool = _opt(False, "Train in fp8: every linear layer's matmuls (forward and backward) in float8 through "
                     "torchao (LLaMA-Factory key); CUDA GPUs of compute capability 8.9 and up (Ada, Hopper, Blackwell) "
                     "and AMD MI300; refused elsewhere with the reason.")
    fp8_backend: str = _opt("auto", "fp8: torchao (auto) or te (NVIDIA Transformer Engine, not supported here).",
                            choices=("auto", "torchao", "te", "msamp"))
    fp8_enable_fsdp_float8_all_gather: bool = _opt(False, "fp8 with FSDP2: all-gather the weights in float8 (half "
                                                   "the traffic of bf16).")


@dataclass
class InferArguments:
    """Generation (chat, predict) and export keys, with LLaMA-Factory's names, meanings and defaults."""
    infer_backend: str = _opt("huggingface", "Engine for chat, predict and serve: huggingface (transformers + peft), vllm (where installed); sglang/ktransformers are not driven here.",
                              choices=("huggingface", "vllm", "sglang", "ktransformers"))
    infer_dtype: str = _opt("auto", "Weights dtype for chat, predict and export: auto (the hardware policy; export keeps the model's own dtype), float16, bfloat16, float32.",
                            choices=("auto", "float16", "bfloat16", "float32"))
    do_sample: Optional[bool] = _opt(None, "Sample instead of greedy decoding (default: chat samples as LLaMA-Factory does, predict is greedy).")
    temperature: float = _opt(0.95, "Sampling temperature.", minimum=0.0, exclusive_min=True)
    top_p: float = _opt(0.7, "Nucleus sampling: keep the smallest set of tokens whose probability sums to top_p.", minimum=0.0, maximum=1.0, exclusive_min=True)
    top_k: int = _opt(50, "Sample among the k most likely tokens.", minimum=0)
    num_beams: int = _opt(1, "Beam search width (1: no beam search).", minimum=1)
    repetition_penalty: float = _opt(1.0, "Penalty above 1.0 discourages repeating tokens.", minimum=0.0, exclusive_min=True)
    length_penalty: float = _opt(1.0, "Beam search length penalty.")
    skip_special_tokens: bool = _opt(True, "Drop special tokens from generated text.")
    export_dir: Optional[str] = _opt(None, "Where export writes the merged model (LLaMA-Factory key).")
    export_size: float = _opt(5, "Largest shard of the exported safetensors, in GB (LLaMA-Factory key; fractions allowed).", minimum=0.0, exclusive_min=True)
    export_device: str = _opt("cpu", "Where the merge runs: cpu, or auto (the GPU when there is one).", choices=("cpu", "auto"))
    export_legacy_format: bool = _opt(False, "LLaMA-Factory key for pickle .bin weights; only false is supported (safetensors).")
    export_hub_model_id: Optional[str] = _opt(None, "Upload the export to this Hugging Face repo (needs a token and network).")
    export_format: str = _opt("hf", "hf: a Hugging Face folder; gguf: also one .gguf file for llama.cpp / Ollama.", choices=("hf", "gguf"))
    export_gguf_type: str = _opt("f16", "GGUF tensor type: f32, f16, bf16, q8_0.", choices=("f32", "f16", "bf16", "q8_0"))
    # GPTQ export (infer/gptq_export.py), LLaMA-Factory's keys and defaults
    export_quantization_bit: Optional[int] = _opt(None, "Quantise the merged model with GPTQ (GPTQModel) to this "
                                                  "many bits: 2, 3, 4 or 8.", choices=(2, 3, 4, 8))
    export_quantization_dataset: Optional[str] = _opt(None, "GPTQ's calibration data: a file or hub dataset with a "
                                                      "`text` column.")
    export_quantization_nsamples: int = _opt(128, "GPTQ: calibration samples drawn.", minimum=1)
    export_quantization_maxlen: int = _opt(1024, "GPTQ: tokens per calibration sample.", minimum=1)


@dataclass
class GuardArguments:
    """Numerical guard (see training/guard.py). Section `guard:` in YAML, or flat `guard_policy`."""
    guard_policy: str = _opt("rollback", "What to do on a non-finite value or loss spike.", choices=("off", "warn", "skip", "rollback", "abort"))
    window: int = _opt(50, "Rolling window of recent steps for spike statistics.", minimum=2)
    min_history: int = _opt(10, "Steps of history needed before spikes are judged.", minimum=1)
    spike_sigmas: float = _opt(6.0, "A loss or grad norm this many standard deviations above the recent mean is a spike.", minimum=0.0, exclusive_min=True)
    spike_ratio: float = _opt(2.5, "...and at least this many times the recent median (seed 000: 1.2 -> 3.5 is 2.9x).", minimum=1.0)
    loss_spikes: Optional[bool] = _opt(None, "Judge loss spikes (default: on for sft and pt, whose step loss is a mean over many tokens; off for dpo, kto and rm, whose step loss over a few pairs is heavy-tailed: non-finite values and gradient-norm spikes are still caught).")
    grad_spike_ratio: float = _opt(8.0, "A gradient norm is a spike only at this many times the recent median (and spike_sigmas): healthy small batches reach 3-6x, and clipping already bounds their update.", minimum=1.0)
    max_rollbacks: int = _opt(5, "Give up (save the last good state, exit 3) after this many rollbacks.", minimum=0)
    max_consecutive_skips: int = _opt(20, "Give up after this many skipped steps in a row.", minimum=1)
    lr_backoff: float = _opt(0.5, "Multiply the learning rate by this after a rollback.", minimum=0.0, maximum=1.0, exclusive_min=True)
    grad_norm_schedule: list = _opt([1.0, 0.5, 0.3], "Each rollback tightens max_grad_norm to the next lower value here (seed 000: 1.0 -> 0.5 -> 0.3).")
    snapshot_steps: int = _opt(10, "Keep an in-memory good state every N optimizer steps.", minimum=1)
    max_fp16_overflows: int = _opt(20, "Switch fp16 to bf16/fp32 after this many loss-scale overflows in a window.", minimum=1)


@dataclass
class FaultInjectionArguments:
    """Testing aid: break a run on purpose to prove the guard works. Section `fault_injection:`."""
    nan_loss_step: Optional[int] = _opt(None, "Turn the loss at this optimizer step into NaN.", minimum=1)
    inf_loss_step: Optional[int] = _opt(None, "Turn the loss at this optimizer step into +inf.", minimum=1)
    spike_loss_step: Optional[int] = _opt(None, "Multiply the loss at this optimizer step by spike_factor.", minimum=1)
    spike_factor: float = _opt(1000.0, "Factor for spike_loss_step.")
    fp16_overflow_step: Optional[int] = _opt(None, "Inject an fp16 overflow (inf gradients) at this step.", minimum=1)
    lr_spike_start: Optional[int] = _opt(None, "First optimizer step with a 100x learning rate.", minimum=1)
    lr_spike_steps: int = _opt(0, "How many steps the 100x learning rate lasts.", minimum=0)
    lr_spike_factor: float = _opt(100.0, "Learning-rate multiplier during the LR spike.")
    hang_step: Optional[int] = _opt(None, "Make one rank hang (sleep forever) at the start of this optimizer step, to prove the hang watchdog.", minimum=1)
    hang_rank: int = _opt(0, "The rank that hangs at hang_step.", minimum=0)
    kill_step: Optional[int] = _opt(None, "Kill one rank's process (SIGKILL) at the start of this optimizer step, on the job's first attempt only, to prove an elastic restart resumes from the last checkpoint.", minimum=1)
    kill_rank: int = _opt(0, "The rank whose process is killed at kill_step.", minimum=0)
    oom_step: Optional[int] = _opt(None, "Raise an out-of-memory error (torch.OutOfMemoryError) at the start of this optimizer step, as a GPU that runs out of memory does, to prove that `steadytune tune` records such a trial and goes on.", minimum=1)


@dataclass
class RunConfig:
    model: ModelArguments = field(default_factory=ModelArguments)
    method: MethodArguments = field(default_factory=MethodArguments)
    data: DataArguments = field(default_factory=DataArguments)
    train: TrainArguments = field(default_factory=TrainArguments)
    infer: InferArguments = field(default_factory=InferArguments)
    guard: GuardArguments = field(default_factory=GuardArguments)
    fault_injection: FaultInjectionArguments = field(default_factory=FaultInjectionArguments)
    # Defaults chosen by us (hardware profile, derived values), each with its reason; filled by the recipe.
    decisions: dict = field(default_factory=dict)
    # Keys the user set explicitly (YAML or command line); hardware profiles only fill the others.
    user_keys: set = field(default_factory=set)
    source: Optional[str] = None

    def to_dict(self) -> dict:
        """Flat, YAML-friendly view: every key with its resolved value, plus the recorded decisions."""
        out: dict[str, Any] = {}
        for name in FLAT_SECTIONS:
            out.update(dataclasses.asdict(getattr(self, name)))
        for name in NESTED_SECTIONS:
            out[name] = dataclasses.asdict(getattr(self, name))
        out["decisions"] = dict(self.decisions)
        return out

    def decide(self, key: str, value: Any, reason: str) -> None:
        """Record a default or derived choice made for the user, with why."""
        self.decisions[key] = {"value": value, "reason": reason}


FLAT_SECTIONS = ("model", "method", "data", "train", "infer")
NESTED_SECTIONS = ("guard", "fault_injection")
SECTION_TYPES = {
    "model": ModelArguments, "method": MethodArguments, "data": DataArguments, "train": TrainArguments,
    "infer": InferArguments, "guard": GuardArguments, "fault_injection": FaultInjectionArguments,
}

# Flat key -> section name.
KEY_TO_SECTION: dict[str, str] = {}
for _section in FLAT_SECTIONS:
    for _f in dataclasses.fields(SECTION_TYPES[_section]):
        KEY_TO_SECTION[_f.name] = _section
# `guard_policy` is also accepted at the top level, as a shortcut.
KEY_TO_SECTION["guard_policy"] = "guard"


# Keys of LLaMA-Factory (and HF TrainingArguments) for features steadytune does not have. They fail loudly:
# silently ignoring e.g. `quantization_bit` would train something other than what the user asked for.
UNSUPPORTED_KEYS = {
    "quantization_device_map": "device_map: auto (layers spread over GPUs and the CPU) is not supported; a quantised "
                               "base loads whole onto this process's device",
    "reward_model": "stage: ppo is not supported (train a reward model with stage: rm)",
    "reward_model_adapters": "stage: ppo is not supported",
    "reward_model_type": "stage: ppo is not supported",
    "pref_bco_weight": "the BCO term of DPO is not supported (pref_loss: sigmoid, hinge, ipo, orpo or simpo)",
    "ld_alpha": "length-desensitised DPO (LD-DPO) is not supported",
    "ref_model_quantization_bit": "quantised reference models are not supported",
    "ppo_epochs": "PPO is not supported",
    "use_audio_in_video": "audio inputs are not supported (images and video are: data/multimodal)",
    "audio_sampling_rate": "audio inputs are not supported (images and video are: data/multimodal)",
    "crop_to_patches": "InternVL's image tiling is not supported (vision templates: qwen2_vl, qwen3_vl, gemma3, llava)",
    "use_unsloth": "Unsloth is not used; steadytune has its own fast paths",
    "rope_scaling": "RoPE scaling is not supported",
    "shift_attn": "shift short attention is not supported",
    "mixture_of_depths": "mixture of depths is not supported: LLaMA-Factory converts the model with the MoD package "
                         "(mixture-of-depth 1.2.0, its last release, 2024), which does not import with transformers "
                         "5 (it imports TRANSFORMERS_CACHE, gone in transformers 5; checked 2026-12)",
    "use_kt": "KTransformers (CPU/GPU hybrid MoE) is not supported",
    "kt_config": "KTransformers is not supported", "kt_cpu_activation": "KTransformers is not supported",
    "kt_weight_path": "KTransformers is not supported", "kt_non_expert_weight_path": "KTransformers is not supported",
    "use_v1_kernels": "LLaMA-Factory's v1 (Ascend NPU) kernels are not supported",
}
# Keys of LLaMA-Factory's other config schemas, which steadytune does not read: a pointer instead of a guess.
_MCA = " (a LLaMA-Factory Megatron config, run there with USE_MCA=1; Megatron-Core parallelism is not supported)"
_OTHER_SCHEMAS = {**{k: _MCA for k in ("tensor_model_parallel_size", "pipeline_model_parallel_size",
                                       "expert_model_parallel_size", "sequence_parallel", "use_distributed_optimizer",
                                       "overlap_param_gather", "overlap_grad_reduce", "bias_activation_fusion",
                                       "apply_rope_fusion")}}

UNSUPPORTED_VALUES = {
    ("stage", "ppo"): "stage: ppo (online RL with a reward model) is not supported; stage: dpo or kto learn from "
                      "preference data offline, and stage: rm trains a reward model",
    ("pref_loss", "kto_pair"): "pref_loss: kto_pair is not supported; use stage: kto with a kto_tag dataset",
    ("infer_backend", "sglang"): "infer_backend: sglang is not supported; use huggingface or vllm",
    ("infer_backend", "ktransformers"): "infer_backend: ktransformers is not supported; use huggingface or vllm",
    # LLaMA-Factory's other on-the-fly methods (hqq, eetq) and the pre-quantised checkpoint kinds: bitsandbytes only
    # here (a pre-quantised checkpoint is refused at load, naming its quant_method: model/load.py).
    **{("quantization_method", m): f"quantization_method: {m} is not supported; quantization_method: bnb "
                                   "(bitsandbytes, 4 or 8 bits) quantises on load" for m in
       ("hqq", "eetq", "gptq", "awq", "aqlm", "quanto", "mxfp4", "fp8")},
}


# ---------------------------------------------------------------------------------------------------------
# Loading
# ---------------------------------------------------------------------------------------------------------

def parse_overrides(pairs: list[str]) -> dict:
    """`key=value` strings -> dict; values are parsed as YAML scalars (5e-5, true, null, [a, b])."""
    out = {}
    for pair in pairs:
        if "=" not in pair:
            raise ConfigError(f"command-line override {show_value(pair)} is not key=value")
        key, _, raw = pair.partition("=")
        key = key.strip().lstrip("-")
        try:
            value = parse_yaml(raw, f"command-line override {key}") if raw.strip() else None
        except ConfigError:
            value = raw
        # `guard.window=20` addresses a nested section.
        if "." in key:
            section, _, sub = key.partition(".")
            if not isinstance(out.setdefault(section, {}), dict):
                raise ConfigError(f"command-line override {show_value(key)}: {section} was given as "
                                  f"{show_value(out[section])} before, not as settings; give one or the other")
            out[section][sub] = value
        else:
            out[key] = value
    return out


class _BoundedLoader(yaml.SafeLoader):
    """yaml.safe_load within MAX_YAML_*: nesting is counted while composing (PyYAML's composer recurses, so
    10,000 levels would end in a RecursionError), and the composed document is measured with its aliases expanded
    before a single value is built. Errors are ConfigError naming `name`."""

    def __init__(self, text: str, name: str):
        super().__init__(text)
        self.name = name
        self._depth = 0

    def compose_node(self, parent, index):
        self._depth += 1
        try:
            if self._depth > MAX_YAML_DEPTH:
                line = self.peek_event().start_mark.line + 1
                raise ConfigError(f"{self.name}: nested deeper than {MAX_YAML_DEPTH} levels (line {line})")
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def compose_document(self):
        node = super().compose_document()
        if node is not None:
            _measure_expanded(node, self.name)
        return node


class _UniqueKeyLoader(_BoundedLoader):
    """yaml.safe_load, except that a key given twice in one mapping is an error naming both lines: PyYAML would
    silently keep the last one, so `learning_rate: 1e-4` ... `learning_rate: 1e-3` trains at whichever came last."""

    def construct_mapping(self, node, deep=False):
        seen: dict = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            try:
                first = seen.get(key)
            except TypeError:  # an unhashable key: let PyYAML report it
                continue
            if first is not None:
                raise ConfigError(f"{self.name}: duplicate key {show_value(key)} at line {key_node.start_mark.line + 1} "
                                  f"(first at line {first + 1}); keep one")
            seen[key] = key_node.start_mark.line
        return super().construct_mapping(node, deep=deep)


def _measure_expanded(root: yaml.Node, name: str) -> None:
    """Refuse a composed YAML document whose values, with every alias expanded, exceed MAX_YAML_NODES values,
    MAX_YAML_CHARS characters or MAX_YAML_DEPTH levels, or which contains itself. Each distinct node is measured
    once (an alias reuses its anchor's numbers), so this costs the size of the file, not of the expansion."""
    sizes: dict[int, tuple[int, int, int]] = {}   # id(node) -> (values, characters, depth), expanded
    open_nodes: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        if isinstance(node, yaml.ScalarNode):
            sizes[id(node)] = (1, len(node.value), 0)
            continue
        children = [n for pair in node.value for n in pair] if isinstance(node, yaml.MappingNode) else node.value
        if not children_done:
            if id(node) in sizes:
                continue
            if id(node) in open_nodes:
                raise ConfigError(f"{name}: an alias at line {node.start_mark.line + 1} refers to itself "
                                  "(a value that contains itself has no end)")
            open_nodes.add(id(node))
            stack.append((node, True))
            stack.extend((child, False) for child in children if id(child) not in sizes)
            continue
        open_nodes.discard(id(node))
        values, chars, depth = 1, 0, 0
        for child in children:
            v, c, d = sizes[id(child)]
            values, chars, depth = values + v, chars + c, max(depth, d)
        sizes[id(node)] = (values, chars, depth + 1)
        for amount, limit, unit in ((values, MAX_YAML_NODES, "values"), (chars, MAX_YAML_CHARS, "characters"),
                                    (depth + 1, MAX_YAML_DEPTH, "levels of nesting")):
            if amount > limit:
                raise ConfigError(f"{name}: the value at line {node.start_mark.line + 1} expands through aliases to "
                                  f"{amount:,} {unit} or more (at most {limit:,}); write it out without aliases")


def parse_yaml(text: str, name: str, unique_keys: bool = True) -> Any:
    """yaml.safe_load within the MAX_YAML_* bounds; every problem is a ConfigError naming `name` (a file, or a
    command-line override). With `unique_keys`, a key given twice in one mapping is an error."""
    try:
        loader = (_UniqueKeyLoader if unique_keys else _BoundedLoader)(text, name)  # it reads (and checks) the text
        try:
            return loader.get_single_data()
        finally:
            loader.dispose()
    except ConfigError:
        raise
    except yaml.YAMLError as e:
        raise ConfigError(f"{name}: invalid YAML: {_cut(str(e))}") from None
    except (ValueError, TypeError, IndexError, KeyError, AttributeError, OverflowError) as e:
        # PyYAML's constructors fail on some explicit tags with odd values (`!!float` alone: IndexError)
        raise ConfigError(f"{name}: invalid YAML: a tagged value cannot be built ({type(e).__name__}: "
                          f"{_cut(str(e), MAX_SHOWN_VALUE)})") from None


def load_yaml_file(path: str | os.PathLike, unique_keys: bool = True) -> Any:
    """A YAML file's content (any top-level type) within the MAX_YAML_* bounds, or a ConfigError naming the file:
    for every YAML file steadytune reads (configs, run_config.yaml of a run folder, label files, FSDP configs)."""
    path = Path(path)
    if path.is_dir():
        raise ConfigError(f"{path}: is a folder, not a config file")
    if not path.is_file():
        raise ConfigError(f"{path}: config file not found")
    try:
        size = path.stat().st_size
        if size > MAX_YAML_BYTES:
            raise ConfigError(f"{path}: {size / 1e6:.1f} MB is larger than a config file may be "
                              f"({MAX_YAML_BYTES >> 20} MiB)")
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(f"{path}: not UTF-8 (byte {e.start})") from None
    except OSError as e:
        raise ConfigError(f"{path}: cannot read ({e.strerror})") from None
    return parse_yaml(text, str(path), unique_keys)


def _cut(text: str, limit: int = 4 * MAX_SHOWN_VALUE) -> str:
    """A message from another library (PyYAML quotes the offending line) on one line, cut to `limit`."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def read_yaml(path: str | os.PathLike) -> dict:
    data = load_yaml_file(path)
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of key: value at the top level")
    return data


def load_config(path: str | os.PathLike | None = None, overrides: list[str] | dict | None = None) -> RunConfig:
    """YAML file (optional) + overrides -> validated RunConfig. Raises ConfigError naming the key."""
    raw: dict = read_yaml(path) if path is not None else {}
    where = str(path) if path is not None else "command line"
    extra = parse_overrides(overrides) if isinstance(overrides, list) else dict(overrides or {})
    for key, value in extra.items():
        if key in NESTED_SECTIONS and isinstance(value, dict) and isinstance(raw.get(key), dict):
            raw[key] = {**raw[key], **value}
        else:
            raw[key] = value
    raw, notes = as_our_keys(raw, where)
    cfg = build_config(raw, where, given_on_command_line=set(extra) if path is not None else set())
    for key, value, why in notes:
        cfg.decide(key, value, why)
    cfg.source = str(path) if path is not None else None
    return cfg


def as_our_keys(raw: dict, where: str) -> tuple[dict, list[tuple[str, Any, str]]]:
    """A config mapping in our keys, and the decisions that say how it was read: a LLaMA-Factory v1 file translated
    (config_lf_v1.py; its plugin settings given as text are read by this module's bounded YAML parser), any other
    mapping as it is."""
    if not is_v1_config(raw):
        return raw, []
    return translate_v1(raw, where, parse_text=parse_yaml)


def build_config(raw: dict, where: str = "config", given_on_command_line: set[str] = frozenset()) -> RunConfig:
    """`where` names the file in messages; a key in `given_on_command_line` is named as the command line's (its value
    replaced the file's, so the file is not where to look)."""
    file_where = where

    def where_of(key: str) -> str:
        return "command line" if key in given_on_command_line else file_where

    sections: dict[str, dict] = {name: {} for name in SECTION_TYPES}
    user_keys: set[str] = set()
    for key, value in raw.items():
        key = str(key)
        where = where_of(key)
        if key in UNSUPPORTED_KEYS:
            raise ConfigError(f"{where}: not supported: {key} ({UNSUPPORTED_KEYS[key]})")
        if key in NESTED_SECTIONS:
            if value is None:
                continue
            if not isinstance(value, dict):
                raise ConfigError(f"{where}: {key} must be a mapping of settings")
            for sub, sub_value in value.items():
                _check_known(str(sub), SECTION_TYPES[key], f"{where}: {key}.")
                sections[key][str(sub)] = sub_value
                user_keys.add(f"{key}.{sub}")
            continue
        if key == "decisions":  # a run_config.yaml fed back in: its decisions are re-made, not trusted
            continue
        if key not in KEY_TO_SECTION:
            raise ConfigError(f"{where}: unknown key {show_value(key)}"
                              f"{_OTHER_SCHEMAS.get(key) or _did_you_mean(key, list(KEY_TO_SECTION) + list(NESTED_SECTIONS))}")
        if isinstance(value, str) and (key, value) in UNSUPPORTED_VALUES:
            raise ConfigError(f"{where}: not supported: {key}: {value} ({UNSUPPORTED_VALUES[(key, value)]})")
        sections[KEY_TO_SECTION[key]][key] = value
        user_keys.add(key)

    built = {}
    for name, cls in SECTION_TYPES.items():
        values = {}
        for f in dataclasses.fields(cls):
            if f.name in sections[name]:
                label = f"{name}.{f.name}" if name in NESTED_SECTIONS else f.name
                values[f.name] = _coerce(f, sections[name][f.name],
                                         where_of(name if name in NESTED_SECTIONS else f.name), label)
        built[name] = cls(**values)
    cfg = RunConfig(**built, user_keys=user_keys)
    _check_cross_field(cfg, file_where)
    record_lf_decisions(cfg)
    return cfg


def _check_known(key: str, cls: type, prefix: str) -> None:
    names = [f.name for f in dataclasses.fields(cls)]
    if key not in names:
        raise ConfigError(f"{prefix}{_cut(key, MAX_SHOWN_VALUE)}: unknown key{_did_you_mean(key, names)}")


def _did_you_mean(key: str, candidates: list[str]) -> str:
    if len(key) > 100:  # no key is this long; difflib would take quadratic time over it
        return ""
    close = difflib.get_close_matches(key, candidates, n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _type_options(tp: Any) -> tuple:
    """Optional[int] -> (int, NoneType); Union[bool, str] -> (bool, str)."""
    if get_origin(tp) in (Union, types.UnionType):
        return get_args(tp)
    return (tp,)


def _coerce(f: dataclasses.Field, value: Any, where: str, label: str | None = None) -> Any:
    """Check `value` against the field's type and bounds; convert the harmless cases (1 -> 1.0, "5e-5" -> 5e-5).
    `label` is the key as the user wrote it (guard.window), used in messages."""
    hints = typing.get_type_hints(_owner_of(f.name, f))
    options = _type_options(hints[f.name])
    key = label or f.name
    def bad() -> ConfigError:  # built only when raised: the value may be huge
        return ConfigError(f"{where}: {key}: invalid value {show_value(value)} (expected {_describe(options)})")

    if value is None:
        if type(None) in options:
            return None
        raise bad()
    # bf16/fp16 accept true/false/auto; resume_from_checkpoint accepts true/false/path.
    if bool in options and isinstance(value, bool):
        converted = value
    elif bool in options and isinstance(value, str) and value.lower() in ("true", "false"):
        converted = value.lower() == "true"
    elif str in options and isinstance(value, bool) and _yaml_word(value, f.metadata.get("choices")):
        # YAML 1.1 reads `off`/`no` as false and `on`/`yes` as true; for a key whose choices are words
        # (guard_policy: off, eval_strategy: no), the user meant the word.
        converted = _yaml_word(value, f.metadata.get("choices"))
    elif str in options and isinstance(value, (str, int, float)) and not isinstance(value, bool):
        converted = str(value)
        if f.name in ("bf16", "fp16") and converted != "auto":
            raise bad()
    elif int in options and isinstance(value, int) and not isinstance(value, bool):
        converted = value
    elif int in options and isinstance(value, float) and value.is_integer():
        converted = int(value)
    elif float in options and isinstance(value, (int, float)) and not isinstance(value, bool):
        converted = float(value)
    elif float in options and isinstance(value, str):
        try:
            converted = float(value)
        except ValueError:
            raise bad() from None
    elif int in options and isinstance(value, str):
        try:
            converted = int(value)
        except ValueError:
            raise bad() from None
    elif list in options and isinstance(value, (list, tuple)):
        converted = list(value)
    elif list in options and isinstance(value, str) and f.name == "label_names":
        converted = [part.strip() for part in value.split(",") if part.strip()]
    elif dict in options and isinstance(value, dict):
        converted = dict(value)
    else:
        raise bad()

    if isinstance(converted, str) and len(converted) > MAX_TEXT_VALUE:
        raise ConfigError(f"{where}: {key}: {len(converted):,} characters is longer than a value may be "
                          f"({MAX_TEXT_VALUE:,})")
    if isinstance(converted, float) and not math.isfinite(converted):
        raise ConfigError(f"{where}: {key}: {show_value(converted)} is not a finite number")
    # Numbers reach torch as float32 scalars and int64 counts: past these they overflow there, mid-run, as a traceback.
    if isinstance(converted, float) and abs(converted) > MAX_FLOAT_VALUE:
        raise ConfigError(f"{where}: {key}: {show_value(converted)} is out of range (beyond float32's "
                          f"{MAX_FLOAT_VALUE:.3g}, which the training arithmetic uses)")
    if isinstance(converted, int) and not isinstance(converted, bool) and abs(converted) > MAX_INT_VALUE:
        raise ConfigError(f"{where}: {key}: {show_value(converted)} is out of range (at most 2**53)")
    meta = f.metadata
    if meta.get("choices") and converted not in meta["choices"]:
        raise ConfigError(f"{where}: {key}: invalid value {show_value(converted)} (choose one of {', '.join(map(str, meta['choices']))})"
                          f"{_did_you_mean(str(converted), [str(c) for c in meta['choices']])}")
    if isinstance(converted, (int, float)) and not isinstance(converted, bool):
        low, high = meta.get("min"), meta.get("max")
        if low is not None and (converted < low or (meta.get("exclusive_min") and converted == low)):
            relation = ">" if meta.get("exclusive_min") else ">="
            raise ConfigError(f"{where}: {key}: {show_value(converted)} is out of range (must be {relation} {low})")
        if high is not None and converted > high:
            raise ConfigError(f"{where}: {key}: {show_value(converted)} is out of range (must be <= {high})")
    return converted


def _yaml_word(value: bool, choices: tuple | None) -> str | None:
    """The choice a YAML boolean stood for: false -> off/no/none, true -> on/yes (the first one offered)."""
    words = ("off", "no", "none") if value is False else ("on", "yes")
    return next((w for w in words if choices and w in choices), None)


def _owner_of(name: str, f: dataclasses.Field) -> type:
    for cls in SECTION_TYPES.values():
        if any(g is f for g in dataclasses.fields(cls)):
            return cls
    raise KeyError(name)


def _describe(options: tuple) -> str:
    names = {bool: "true/false", int: "an integer", float: "a number", str: "text", list: "a list", dict: "a mapping",
             type(None): "null"}
    return " or ".join(names.get(o, str(o)) for o in options)


def _check_cross_field(cfg: RunConfig, where: str) -> None:
    d, t = cfg.data, cfg.train
    if d.prompt_template is not None and "{text}" not in d.prompt_template:
        raise ConfigError(f"{where}: prompt_template must contain {{text}} (got {show_value(d.prompt_template)})")
    if d.label_names is not None:
        if len(d.label_names) < 2:
            raise ConfigError(f"{where}: label_names needs at least two labels (got {show_value(d.label_names)})")
        names = [str(x) for x in d.label_names]
        if len(set(names)) != len(names):
            raise ConfigError(f"{where}: label_names has duplicates: {show_value(names)}")
        d.label_names = names
    for kind in ("image", "video"):   # LLaMA-Factory's rule shrinks to the one, then enlarges to the other
        low, high = getattr(d, f"{kind}_min_pixels"), getattr(d, f"{kind}_max_pixels")
        if low > high:
            raise ConfigError(f"{where}: {kind}_min_pixels ({low:,}) is larger than {kind}_max_pixels ({high:,}): every "
                              f"{kind} would be shrunk below the one and enlarged past the other; set "
                              f"{kind}_min_pixels <= {kind}_max_pixels")
    _check_stage(cfg, where)
    if d.streaming:
        raise ConfigError(f"{where}: not supported: streaming: true (data is read and tokenised before training)")
    m = cfg.method
    if m.stage == "pt" and d.neat_packing:
        raise ConfigError(f"{where}: neat_packing is for stage sft (stage pt concatenates texts on purpose)")
    if m.stage == "pt" and (d.label_names or d.class_balance != "none"):
        raise ConfigError(f"{where}: stage: pt trains on plain text; label_names/class_balance are for classification "
                          "(stage: sft)")
    if t.disable_gradient_checkpointing:
        if t.gradient_checkpointing:
            raise ConfigError(f"{where}: gradient_checkpointing: true and disable_gradient_checkpointing: true disagree")
        t.gradient_checkpointing = False
    _check_offloading(t, where)
    if t.bf16 is True and t.fp16 is True:
        raise ConfigError(f"{where}: bf16 and fp16 are both true; choose one")
    if cfg.model.quantization_bit is not None and m.finetuning_type not in ("lora", "oft"):
        # As in LLaMA-Factory: quantised weights are frozen by construction; only adapters on top can train.
        raise ConfigError(f"{where}: quantization_bit: {cfg.model.quantization_bit} needs finetuning_type: lora or oft "
                          f"(got {m.finetuning_type}: a quantised base cannot be trained in full)")
    _check_methods(cfg, where)
    if t.eval_strategy == "steps" and t.eval_steps is None:
        t.eval_steps = t.logging_steps
    if t.eval_steps is not None and t.eval_steps >= 1:
        if not float(t.eval_steps).is_integer():
            raise ConfigError(f"{where}: eval_steps: {show_value(t.eval_steps)} is neither a whole number of steps nor a "
                              "share of the run below 1 (e.g. 0.25)")
        t.eval_steps = int(t.eval_steps)
    if d.neat_packing and d.packing is False:
        raise ConfigError(f"{where}: neat_packing: true needs packing (got packing: false)")
    g = cfg.guard
    if not g.grad_norm_schedule or not all(isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0
                                           for v in g.grad_norm_schedule):
        raise ConfigError(f"{where}: guard.grad_norm_schedule: invalid value {show_value(g.grad_norm_schedule)} "
                          "(expected a list of positive numbers, e.g. [1.0, 0.5, 0.3])")
    if g.min_history > g.window:
        raise ConfigError(f"{where}: guard.min_history ({g.min_history}) is larger than guard.window ({g.window}): "
                          "spikes would never be judged")
    try:
        parse_report_to(t.report_to)
    except ValueError as e:
        raise ConfigError(f"{where}: report_to: {e}") from None


def _check_stage(cfg: RunConfig, where: str) -> None:
    """LLaMA-Factory's rules for the stages other than sft (hparams/parser.py there), with the key named."""
    m, d, t = cfg.method, cfg.data, cfg.train
    if m.stage == "sft":
        return
    for key, value in (("train_on_prompt", d.train_on_prompt), ("mask_history", d.mask_history),
                       ("predict_with_generate", t.predict_with_generate)):
        if value:
            raise ConfigError(f"{where}: {key}: true is for stage: sft only (stage: {m.stage} scores whole answers "
                              "after their prompt)")
    if m.dpo_label_smoothing > 0 and m.pref_loss != "sigmoid":
        raise ConfigError(f"{where}: dpo_label_smoothing applies to pref_loss: sigmoid only (got pref_loss: {m.pref_loss})")
    if m.ref_model_adapters and not m.ref_model:
        raise ConfigError(f"{where}: ref_model_adapters needs ref_model (the base model the adapters belong to)")
    if m.stage == "grpo":
        _check_grpo(cfg, where)


OPTIMIZER_KEYS = ("use_galore", "use_apollo", "use_badam", "use_adam_mini", "use_muon", "loraplus_lr_ratio")
SFT_LOSS_KEYS = ("use_dft_loss", "use_eaft_loss", "use_asft_loss")


def _check_methods(cfg: RunConfig, where: str) -> None:
    """LLaMA-Factory's rules for its training methods (FinetuningArguments.__post_init__ and hparams/parser.py there),
    each refused with the keys named, where LLaMA-Factory would refuse or silently pick one."""
    m, t = cfg.method, cfg.train
    optimizers = [k for k in OPTIMIZER_KEYS if getattr(m if k == "loraplus_lr_ratio" else t, k) not in (False, None)]
    if len(optimizers) > 1:
        raise ConfigError(f"{where}: {' and '.join(optimizers)} each choose the optimizer; set one")
    if m.use_llama_pro and m.finetuning_type not in ("freeze", "lora"):
        raise ConfigError(f"{where}: use_llama_pro is for finetuning_type freeze or lora (got {m.finetuning_type})")
    # Adam-mini too: it cuts each weight into attention heads and neurons by its name (q_proj, ...), and a LoRA
    # matrix under that name ended in a shape RuntimeError inside adam_mini after the model loaded
    for key in ("use_galore", "use_apollo", "use_badam", "use_adam_mini"):
        if getattr(t, key) and m.finetuning_type not in ("full", "freeze"):
            raise ConfigError(f"{where}: {key}: true trains whole weights: finetuning_type full or freeze (got "
                              f"{m.finetuning_type})")
    if t.use_badam and t.badam_mode == "layer":
        if t.badam_switch_interval == 0:
            raise ConfigError(f"{where}: badam_switch_interval: 0: BAdam moves to the next block every N optimizer "
                              "steps; give N of 1 or more, or -1 to stay on one block")
        if t.badam_switch_mode == "fixed" and t.badam_start_block is None:
            raise ConfigError(f"{where}: badam_switch_mode: fixed trains one block only: name it with "
                              "badam_start_block (0 is the first)")
    if m.finetuning_type != "lora":
        for key in ("loraplus_lr_ratio", "use_rslora", "use_dora", "pissa_init"):
            if getattr(m, key) not in (False, None):
                raise ConfigError(f"{where}: {key} is for finetuning_type: lora (got {m.finetuning_type})")
    if m.pissa_init and (m.stage in ("kto", "grpo") or (m.stage == "dpo" and m.pref_loss not in ("orpo", "simpo"))
                         or m.use_asft_loss):
        raise ConfigError(f"{where}: pissa_init with stage {m.stage}: the reference (the base with the adapter "
                          "switched off) would not be the starting model, since PiSSA moves part of each weight into "
                          "the adapter")
    if m.pissa_init and cfg.model.quantization_bit is not None:
        raise ConfigError(f"{where}: pissa_init with quantization_bit: PiSSA needs the unquantised weights (LLaMA-Factory's "
                          "scripts/pissa_init.py makes a PiSSA base to quantise)")
    losses = [k for k in SFT_LOSS_KEYS if getattr(m, k)]
    if len(losses) > 1:
        raise ConfigError(f"{where}: {' and '.join(losses)}: choose one loss")
    if losses and m.stage != "sft":
        raise ConfigError(f"{where}: {losses[0]} is a loss of stage sft (got stage: {m.stage})")
    for key in ("galore", "apollo"):
        if getattr(t, f"use_{key}") and getattr(t, f"{key}_layerwise") and t.gradient_accumulation_steps != 1:
            raise ConfigError(f"{where}: {key}_layerwise: true steps each weight as its gradient completes, so "
                              f"gradient_accumulation_steps must be 1 (got {t.gradient_accumulation_steps})")
        if getattr(t, f"use_{key}") and m.deepspeed:
            raise ConfigError(f"{where}: use_{key}: true with deepspeed: not supported (as in LLaMA-Factory); use "
                              "one process, DDP or fsdp")


def _check_grpo(cfg: RunConfig, where: str) -> None:
    m, d, t = cfg.method, cfg.data, cfg.train
    if isinstance(m.reward_funcs, str):
        m.reward_funcs = [x.strip() for x in m.reward_funcs.split(",") if x.strip()]
    if not m.reward_funcs or not all(isinstance(x, str) and x.strip() for x in m.reward_funcs):
        raise ConfigError(f"{where}: reward_funcs: stage grpo needs a list of reward functions (accuracy, format, "
                          f"label, length, soft_overlong_punishment, or module:function), got {show_value(m.reward_funcs)}")
    if m.reward_weights is not None and (len(m.reward_weights) != len(m.reward_funcs) or not all(
            isinstance(w, (int, float)) and not isinstance(w, bool) and math.isfinite(w) for w in m.reward_weights)):
        # (a nan or inf weight made every reward and advantage nan: the run trained on nothing, loss 0, unsaid)
        raise ConfigError(f"{where}: reward_weights: one finite number per reward function ({len(m.reward_funcs)}), "
                          f"got {show_value(m.reward_weights)}")
    if "format" in m.reward_funcs:
        try:
            re.compile(m.reward_format)
        except (re.error, TypeError) as e:   # was a re.error traceback at the first roll-out, after the model loaded
            raise ConfigError(f"{where}: reward_format: {show_value(m.reward_format)} is not a regular expression "
                              f"({e})") from None
    for key, value, why in (("deepspeed", m.deepspeed, "DeepSpeed"), ("fsdp", t.fsdp, "FSDP"),
                            ("max_tokens_per_batch", t.max_tokens_per_batch, "token-budget batching (micro-batches "
                             "hold per_device_train_batch_size prompts)")):
        if value:
            raise ConfigError(f"{where}: {key}: stage grpo does not support {why}; one process or DDP (--nproc)")
    if d.class_balance in ("loss", "both"):
        raise ConfigError(f"{where}: class_balance: {d.class_balance}: stage grpo weighs completions by their "
                          "advantages, not by class (class_balance: sampler draws the prompts balanced)")
    if m.async_staleness > 1:
        raise ConfigError(f"{where}: async_staleness: {m.async_staleness}: one GPU generates one step ahead at most "
                          "(generation on ranks of its own, which a larger bound would serve, is not built); use 0 or 1")
    if isinstance(m.tools, str):
        m.tools = [x.strip() for x in m.tools.split(",") if x.strip()]
    if m.tools is not None and (not isinstance(m.tools, list) or not all(isinstance(x, str) and x.strip()
                                                                         for x in m.tools)):
        raise ConfigError(f"{where}: tools: a list of module, path/file.py or module:function, got "
                          f"{show_value(m.tools)}")
    if m.soft_punish_cache is not None and m.soft_punish_cache > m.max_completion_length:
        raise ConfigError(f"{where}: soft_punish_cache: {m.soft_punish_cache} is longer than max_completion_length "
                          f"({m.max_completion_length}): the punishment would start before the first token")
    if "soft_overlong_punishment" in m.reward_funcs and m.soft_punish_cache is None:
        cfg.decide("soft_punish_cache", max(1, m.max_completion_length // 5), "soft_overlong_punishment's L_cache "
                   "unset: a fifth of max_completion_length, as DAPO's 4,096 of 20,480")
    _check_grpo_loss(cfg, where)


def _check_grpo_loss(cfg: RunConfig, where: str) -> None:
    """The loss keys together (stages/grpo_losses.py): cispo's own epsilon_high default, and TRL's warnings about
    combinations that do not reproduce their paper, as decisions printed at start."""
    m = cfg.method
    if m.loss_type == "cispo" and m.epsilon_high is None:
        m.epsilon_high = 5.0
        cfg.decide("epsilon_high", 5.0, "loss_type cispo: the importance weight's upper bound, ScaleRL's epsilon_max "
                   "(TRL would take epsilon, 0.2, and cap every weight at 0.2)")
    if m.delta is not None and m.delta <= 1 + (m.epsilon_high if m.epsilon_high is not None else m.epsilon):
        raise ConfigError(f"{where}: delta: {m.delta} caps the importance ratio below the clip range's top "
                          f"(1 + epsilon_high); two-sided clipping wants delta > 1 + epsilon_high")
    if m.loss_type == "luspo" and m.importance_sampling_level != "sequence":
        cfg.decide("importance_sampling_level", m.importance_sampling_level, "loss_type luspo is GSPO's loss scaled "
                   "by length: its paper uses importance_sampling_level: sequence (TRL warns the same)")
    if m.importance_sampling_level == "sequence" and m.loss_type in ("dr_grpo", "dapo", "cispo"):
        cfg.decide("importance_sampling_level", "sequence", f"loss_type {m.loss_type} sums token losses, so each "
                   "completion weighs by its length: GSPO's paper pairs the sequence level with loss_type grpo "
                   "(TRL warns the same)")


# ---------------------------------------------------------------------------------------------------------
# LLaMA-Factory keys: defaults that differ from LLaMA-Factory's, and keys that change nothing here
# ---------------------------------------------------------------------------------------------------------

# Keys whose default here is not LLaMA-Factory's (its own or transformers'): key -> (LLaMA-Factory's default, why
# ours). A run that leaves one unset gets ours, recorded in `decisions` (run_config.yaml) and printed at start.
# tests/test_lf_defaults.py checks every other key's default against LLaMA-Factory's.
LF_DEFAULT_DIFFERENCES: dict[str, tuple[Any, str]] = {
    "bf16": (False, "auto: bf16 only where the GPU has native bf16 math, else fp32 (LLaMA-Factory trains fp32 "
                    "unless told); trainable weights stay fp32 either way"),
    "logging_steps": (500, "a metrics line every 10 steps (logging changes no number)"),
    "output_dir": (None, "results go to saves/run (transformers would write to trainer_output/)"),
    "do_train": (False, "unset trains when `dataset` is set (LLaMA-Factory trains only with do_train: true)"),
    "template": (None, "auto is LLaMA-Factory's unset: the tokenizer's chat template, else empty"),
    "gradient_checkpointing": (False, "unset: on only when weights and activations would not fit in 85% of the GPU's "
                                      "memory (LLaMA-Factory turns it on unless disable_gradient_checkpointing; "
                                      "the difference is printed at start: lf_checkpointing_note)"),
    "use_reentrant_gc": (True, "non-reentrant checkpointing (PyTorch's recommendation; works with frozen inputs)"),
    "packing": (None, "unset: LLaMA-Factory packs for pt only; steadytune also packs SFT where it measured faster "
                      "(CPU, CUDA), keeping examples apart (see decisions.packing)"),
    "model_name_or_path": (None, "gemma-3-270m, the demo's model"),
    "use_liger_kernel": (False, "unset: on where liger-kernel is installed, on a GPU, when the layers are not compiled"),
    "torch_compile": (False, "unset: on for CUDA runs of 400+ micro-batches with static shapes"),
    "do_sample": (True, "unset: `chat` samples as LLaMA-Factory's does; `predict` and do_predict decode greedily, so "
                        "their results repeat (do_sample: true samples there too)"),
}
# Keys recorded only, with what they mean here, when set to something that would change behaviour there.
NOOP_KEYS: dict[str, str] = {
    "dataloader_num_workers": "examples are tokenised before training and collated in the training process "
                              "(microseconds a batch), so no loader workers are started",
    "preprocessing_num_workers": "tokenisation runs in one process (seconds at these sizes; tokenized_path caches "
                                 "it); stage pt still cuts its blocks per worker shard, as LLaMA-Factory does",
    "save_only_model": "checkpoints always keep optimizer, scheduler and RNG state, so every checkpoint resumes exactly",
    "overwrite_cache": "steadytune keeps no datasets cache: data is tokenised every run unless tokenized_path is set",
    "ddp_timeout": "kept as asked; a huge timeout turns an RCCL/NCCL hang into a silent multi-day stall "
                   "(the default is 1800 s)",
}
# Keys shown in decisions elsewhere (the recipe records the choice it makes for them).
_DECIDED_ELSEWHERE = {"packing", "gradient_checkpointing", "do_train", "use_liger_kernel", "torch_compile"}


def record_lf_decisions(cfg: RunConfig) -> None:
    """Record in `decisions` each unset key whose default differs from LLaMA-Factory's, and each LLaMA-Factory
    key that was set but changes nothing here, with why."""
    for key, (lf_default, why) in LF_DEFAULT_DIFFERENCES.items():
        if key in cfg.user_keys or key in _DECIDED_ELSEWHERE:
            continue
        if key == "use_reentrant_gc" and not cfg.train.gradient_checkpointing:
            continue  # it only matters with checkpointing on
        if key == "do_sample" and not (cfg.train.do_predict and cfg.train.predict_with_generate):
            continue  # it only matters when the run generates
        value = getattr(getattr(cfg, KEY_TO_SECTION[key]), key)
        cfg.decide(key, value, f"LLaMA-Factory's default is {lf_default!r}; {why}")
    for key, why in NOOP_KEYS.items():
        if key not in cfg.user_keys:
            continue
        f = next(f for f in dataclasses.fields(SECTION_TYPES[KEY_TO_SECTION[key]]) if f.name == key)
        value = getattr(getattr(cfg, KEY_TO_SECTION[key]), key)
        if value != f.default and not (key == "ddp_timeout" and value <= 3 * 3600):
            cfg.decide(key, value, why)


def _check_offloading(t: TrainArguments, where: str) -> None:
    """activation_offloading and LLaMA-Factory's use_unsloth_gc: offloading moves what checkpointing keeps, so it
    needs checkpointing; use_unsloth_gc asks for it, and (as in LLaMA-Factory) does nothing without checkpointing."""
    if t.use_unsloth_gc and t.gradient_checkpointing is not False:
        if t.activation_offloading is False:
            raise ConfigError(f"{where}: use_unsloth_gc: true (checkpointed inputs in host memory) and "
                              "activation_offloading: false disagree")
        t.activation_offloading = True
    if t.activation_offloading and t.gradient_checkpointing is False:
        raise ConfigError(f"{where}: activation_offloading: true moves what gradient checkpointing keeps to host "
                          "memory, but gradient checkpointing is off (gradient_checkpointing: false or "
                          "disable_gradient_checkpointing: true)")


def lf_checkpointing_note(t: TrainArguments, use: bool) -> str:
    """What LLaMA-Factory would do about gradient checkpointing next to our choice `use` (`t`: the train section): it
    checkpoints unless disable_gradient_checkpointing (its use_reentrant_gc default: re-entrant), whatever the memory."""
    lf = not t.disable_gradient_checkpointing
    if use == lf:
        return "; as LLaMA-Factory"
    return ("; differs from LLaMA-Factory, which turns it on unless disable_gradient_checkpointing: true (recomputing "
            "the activations in backward costs about a third more compute, which steadytune spends only when memory "
            "needs it; gradient_checkpointing: true matches LLaMA-Factory)")


def resolve_do_train(cfg: RunConfig) -> bool:
    """Whether `steadytune train` trains: do_train as set; unset, when `dataset` is set (LLaMA-Factory trains only
    with do_train: true, and its predict files, such as extras/nlg_eval, leave it out and name no dataset)."""
    m, t, d = cfg.method, cfg.train, cfg.data
    if m.do_train is None:
        m.do_train = bool(d.dataset)
        cfg.decide("do_train", m.do_train, "unset: train because `dataset` is set" if m.do_train else
                   "unset and no `dataset`: nothing to train (LLaMA-Factory's default do_train is false)")
    if not m.do_train and not (t.do_eval or t.do_predict):
        raise ConfigError("do_train is false and neither do_eval nor do_predict is set: nothing to do "
                          "(set dataset to train, or do_predict: true with eval_dataset to evaluate an adapter)")
    if m.do_train and not d.dataset:
        raise ConfigError("do_train: true needs dataset (names from dataset_info.json, a built-in one, or a file path)")
    return m.do_train


def lora_alpha_of(cfg: RunConfig) -> float:
    return cfg.method.lora_alpha if cfg.method.lora_alpha is not None else 2.0 * cfg.method.lora_rank


def save_resolved_config(cfg: RunConfig, path: str | os.PathLike) -> None:
    Path(path).write_text(yaml.safe_dump(cfg.to_dict(), sort_keys=False, allow_unicode=True), encoding="utf-8")


def describe_keys() -> str:
    """Every key with its default and help text, for `steadytune train --list-keys`."""
    lines = []
    for name, cls in SECTION_TYPES.items():
        prefix = f"{name}." if name in NESTED_SECTIONS else ""
        lines.append(f"## {name}")
        for f in dataclasses.fields(cls):
            default = f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[misc]
            lines.append(f"  {prefix}{f.name} = {default!r}\n      {f.metadata.get('help', '')}")
    return "\n".join(lines)


# report_to name -> the module that must import (its pip package has the same name).
TRACKER_PACKAGES = {"tensorboard": "tensorboard", "wandb": "wandb", "mlflow": "mlflow", "swanlab": "swanlab",
                    "trackio": "trackio"}


def parse_report_to(value: Any) -> list[str]:
    """report_to as a list of tracker names ("all" expanded to the installed ones); raises ValueError naming an
    unknown tracker."""
    if value is None:
        return []
    items = value if isinstance(value, (list, tuple)) else str(value).split(",")
    names = [str(item).strip().lower() for item in items if str(item).strip()]
    if "all" in names:
        return [name for name in TRACKER_PACKAGES if tracker_installed(name)]
    names = [name for name in names if name != "none"]
    unknown = [name for name in names if name not in TRACKER_PACKAGES]
    if unknown:
        raise ValueError(f"unknown tracker {show_value(unknown[0])}; choose from none, all, {', '.join(TRACKER_PACKAGES)}")
    return list(dict.fromkeys(names))


def tracker_installed(name: str) -> bool:
    return importlib.util.find_spec(TRACKER_PACKAGES[name]) is not None
