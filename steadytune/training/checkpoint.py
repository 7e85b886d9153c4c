"""Resumable checkpoints: `output_dir/checkpoint-N/`.

A checkpoint holds everything that decides the rest of the run, so a resumed run reproduces the loss curve
of an uninterrupted one: trainable weights (the adapter, in PEFT's own format, so a checkpoint is also a
loadable adapter), optimizer state, scheduler state, every RNG (python, numpy, torch, cuda), the data
position, and the state of other parts (the numerical guard) under `extra`.

It is written into `checkpoint-N.tmp/` and renamed when complete, so a run killed mid-save never leaves a
half checkpoint that looks whole; `trainer_state.json` is written last and names the files it expects, with
their sizes and SHA-256s. A resume checks both: a file cut short, or changed by a single bit (a bad disk, a bad
copy), is refused naming it, and the resume falls back to the checkpoint before.

A checkpoint may come from someone else, so nothing in it may run code: weights are safetensors, and the optimizer,
scheduler, scaler and RNG files are read with `torch.load(weights_only=True)` (tensors and plain Python values only;
numpy's RNG state, which older checkpoints pickled, is the one allow-listed type). A file carrying anything else is
refused, naming it, before a single byte of it is executed. Nor may it reach outside the run folder: a checkpoint
folder, or a file in it, that is a symbolic link out of the run folder is refused on resume, naming the link; save
rotation removes such a link and never what it points to.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import random
import re
import shutil
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import SafetensorError

from steadytune.errors import CheckpointError, UserError, describe_os_error, size_text
from steadytune.model.archive import sha256_file
from steadytune.model.lora import save_pissa_converted
from steadytune.model.saved_weights import check_checkpoint_matches
from steadytune.training.optimizer_state import by_index, is_by_name, trainable_names

STATE_FILE = "trainer_state.json"
OPTIMIZER_FILE = "optimizer.pt"
SCHEDULER_FILE = "scheduler.pt"
SCALER_FILE = "scaler.pt"
RNG_FILE = "rng_state.pt"
_CHECKPOINT_RE = re.compile(r"^checkpoint-(\d+)$")


class CheckpointLinkError(UserError):
    """A checkpoint, or a file in it, is a symbolic link out of the run folder. Not a CheckpointError: a resume does
    not quietly fall back past it to an older checkpoint."""


@dataclass
class TrainerState:
    global_step: int = 0
    epoch: int = 0                 # epoch of the next micro-batch
    batch_in_epoch: int = 0        # index of the next micro-batch within that epoch
    tokens_seen: int = 0
    best_metric: float | None = None
    best_checkpoint: str | None = None
    model_name_or_path: str = ""
    finetuning_type: str = "lora"
    files: list[str] = field(default_factory=list)
    sizes: dict[str, int] = field(default_factory=dict)      # bytes of each file, to catch truncation
    sha256: dict[str, str] = field(default_factory=dict)     # of each file, to catch any other change
    extra: dict[str, Any] = field(default_factory=dict)


def data_position(state: TrainerState) -> dict:
    """What a guard snapshot records about the data stream, to rewind it on rollback."""
    return {"epoch": state.epoch, "batch_in_epoch": state.batch_in_epoch, "tokens_seen": state.tokens_seen}


def set_data_position(state: TrainerState, position: dict) -> None:
    state.epoch, state.batch_in_epoch, state.tokens_seen = (position["epoch"], position["batch_in_epoch"],
                                                            position["tokens_seen"])


def list_checkpoints(output_dir: str | Path) -> list[Path]:
    """Complete checkpoints (no .tmp), oldest first."""
    root = Path(output_dir)
    if not root.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in root.iterdir() if p.is_dir() and (m := _CHECKPOINT_RE.match(p.name))]
    return [p for _, p in sorted(found)]


def latest_checkpoint(output_dir: str | Path) -> Path | None:
    checkpoints = list_checkpoints(output_dir)
    return checkpoints[-1] if checkpoints else None


def capture_rng() -> dict:
    """Every RNG's state as tensors and plain values (so it loads with weights_only=True)."""
    name, keys, pos, has_gauss, cached = np.random.get_state()
    state = {"python": random.getstate(), "numpy": (name, torch.from_numpy(keys.astype(np.int64)), int(pos),
                                                    int(has_gauss), float(cached)),
             "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng(state: dict) -> None:
    python = state["python"]
    random.setstate((python[0], tuple(python[1]), python[2]))
    name, keys, pos, has_gauss, cached = state["numpy"]
    keys = keys.numpy() if isinstance(keys, torch.Tensor) else np.asarray(keys)
    np.random.set_state((name, keys.astype(np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def load_torch_state(path: Path) -> Any:
    """torch.load without running code: tensors and plain values only (plus numpy's RNG state, for checkpoints
    written before RNG state was stored as tensors). Anything else -> CheckpointError naming the file."""
    import pickle

    from numpy._core.multiarray import _reconstruct

    allowed = [np.ndarray, np.dtype, _reconstruct, type(np.dtype(np.uint32))]
    try:
        with torch.serialization.safe_globals(allowed):
            return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        found = _unsafe_globals(path)
        raise CheckpointError(f"{path}: refused to load: it holds Python objects that would run code when read "
                              f"({', '.join(found) if found else str(e).splitlines()[0][:120]}), not plain tensors; "
                              "a steadytune checkpoint never does") from None
    except (RuntimeError, EOFError, ValueError, OSError, KeyError) as e:
        raise CheckpointError(f"{path}: unreadable ({str(e).splitlines()[0][:200]}); the file is damaged or "
                              "truncated") from None


def _unsafe_globals(path: Path) -> list[str]:
    try:
        return list(torch.serialization.get_unsafe_globals_in_checkpoint(path))[:3]
    except Exception:  # the file may be unreadable in other ways too; the caller's message covers it
        return []


def save_checkpoint(output_dir: str | Path, model, optimizer, scheduler, state: TrainerState,
                    save_total_limit: int | None = None, keep: set[str] | None = None, scaler=None) -> Path:
    """Write checkpoint-{global_step}/ atomically; then drop the oldest beyond save_total_limit
    (never the ones named in `keep`, e.g. the best checkpoint). A failed write (disk full) removes its partial
    folder and raises CheckpointError in one line naming the folder, the file, the free space and what the
    checkpoint needs; the complete checkpoints already there stay."""
    root = Path(output_dir)
    final = root / f"checkpoint-{state.global_step}"
    tmp = root / f"checkpoint-{state.global_step}.tmp"
    writing = "the folder"
    try:
        if tmp.exists() or tmp.is_symlink():
            _remove_entry(tmp)
        tmp.mkdir(parents=True)
        writing = "adapter_model.safetensors" if hasattr(model, "peft_config") else "model.safetensors"
        model.save_pretrained(tmp, safe_serialization=True)
        digests = {}  # the torch files are hashed as they stream out; the weights are read back once
        for name, obj in ((OPTIMIZER_FILE, optimizer), (SCHEDULER_FILE, scheduler), (SCALER_FILE, scaler)):
            if obj is not None:
                writing = name
                digests[name] = _save_torch(obj.state_dict(), tmp / name)
        writing = RNG_FILE
        digests[RNG_FILE] = _save_torch(capture_rng(), tmp / RNG_FILE)
        writing = STATE_FILE
        state.files = sorted(p.name for p in tmp.iterdir())
        state.sizes = {p.name: p.stat().st_size for p in tmp.iterdir() if p.is_file()}
        state.sha256 = {name: digests.get(name) or sha256_file(tmp / name) for name in state.sizes}
        with open(tmp / STATE_FILE, "w", encoding="utf-8") as f:
            f.write(json.dumps(asdict(state), indent=2, default=str))
        _fsync_dir(tmp)
        writing = "the folder"
        if final.exists() or final.is_symlink():
            _remove_entry(final)
        os.replace(tmp, final)
    except (OSError, RuntimeError, SafetensorError) as e:
        # torch's writer reports a failed write as RuntimeError (_save_torch recovers the OSError beneath it);
        # safetensors as SafetensorError ("No space left on device (os error 28)"); Python files as OSError.
        shutil.rmtree(tmp, ignore_errors=True)
        previous = latest_checkpoint(root)
        kept = f"; the last complete checkpoint, {previous.name}, is kept" if previous else ""
        needed = folder_bytes(previous) if previous else state_bytes(model, optimizer)
        raise CheckpointError(describe_save_failure(e, f"saving {final.name} in {root}", writing, root, needed)
                              + kept) from None
    if save_total_limit:
        rotate_checkpoints(root, save_total_limit, keep or set())
    return final


def describe_save_failure(e: BaseException, what: str, writing: str, folder: Path, needed: int | None,
                          thing: str = "the checkpoint") -> str:
    """One line for a failed save: on a full disk, the free space there and what the save needs (about)."""
    free = _free_bytes(folder)
    text = str(e).splitlines()[0] if str(e) else type(e).__name__
    errno_ = getattr(e, "errno", None)
    if errno_ in (errno.ENOSPC, errno.EDQUOT) or "No space left" in text or "os error 28" in text or \
            (free is not None and needed is not None and free < needed):
        space = f"{size_text(free)} free there" if free is not None else "free space unknown"
        need = f", {thing} needs about {size_text(needed)}" if needed else ""
        quota = " (disk quota exceeded)" if errno_ == errno.EDQUOT else ""
        return f"disk full{quota} while {what} (writing {writing}): {space}{need}; free space there or lower " \
               "save_total_limit"
    if isinstance(e, OSError):
        return describe_os_error(e, f"{what} (writing {writing})")
    space = f"; {size_text(free)} free there" if free is not None else ""
    return f"could not finish {what} (writing {writing}: {text}{space})"


def _free_bytes(folder: Path) -> int | None:
    try:
        return shutil.disk_usage(folder).free
    except OSError:
        return None


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def state_bytes(model, optimizer) -> int | None:
    """About what a checkpoint of this state takes: the trainable weights and the optimizer's tensors (None where
    the objects do not say: a message must not fail while it is being written)."""
    try:
        weights = sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)
        moments = sum(t.numel() * t.element_size() for per_param in getattr(optimizer, "state", {}).values()
                      for t in per_param.values() if isinstance(t, torch.Tensor))
    except (AttributeError, TypeError, RuntimeError):
        return None
    return weights + moments


class _RecordedWrites:
    """A file for torch.save that keeps the OSError of a failed write: torch turns it into a RuntimeError
    ("unexpected pos ...") that no longer says the disk is full."""

    def __init__(self, f):
        self.f, self.error, self.digest = f, None, hashlib.sha256()

    def write(self, data):
        try:
            written = self.f.write(data)
        except OSError as e:
            self.error = e
            raise
        self.digest.update(data)
        return written

    def flush(self):
        return self.f.flush()


def _save_torch(obj: Any, path: Path) -> str:
    """torch.save through a Python file, so a full disk raises OSError(ENOSPC) naming the file; -> its SHA-256."""
    try:
        with open(path, "wb") as f:
            out = _RecordedWrites(f)
            try:
                torch.save(obj, out)
            except RuntimeError:
                if out.error is None:
                    raise
                raise out.error from None
        return out.digest.hexdigest()
    except OSError as e:
        if e.filename is None:
            raise OSError(e.errno, e.strerror or str(e), str(path)) from None
        raise


def rotate_checkpoints(output_dir: Path, limit: int, keep: set[str]) -> None:
    checkpoints = list_checkpoints(output_dir)
    removable = [p for p in checkpoints if p.name not in keep]
    while len(checkpoints) > limit and removable:
        victim = removable.pop(0)
        try:
            if victim.is_symlink():
                # A checkpoint moved elsewhere and linked back: the link leaves the run folder, its target stays.
                target = os.readlink(victim)
                victim.unlink()
                print(f"{victim} is a symbolic link (to {target}): beyond save_total_limit, removed the link only; "
                      "what it points to is left as it was", file=sys.stderr, flush=True)
            else:
                shutil.rmtree(victim)
        except OSError as e:
            raise CheckpointError(describe_os_error(e, f"removing {victim.name} (beyond save_total_limit) from "
                                                       f"{output_dir}")) from None
        checkpoints.remove(victim)


def _remove_entry(path: Path) -> None:
    """A folder of ours, or a link where one was: the link goes, never what it points to."""
    if path.is_symlink() or not path.is_dir():
        path.unlink()
    else:
        shutil.rmtree(path)


def refuse_links_out(checkpoint: Path) -> None:
    """A checkpoint folder, or an entry in it, that is a symbolic link leading out of the run folder (the
    checkpoint's parent) -> CheckpointLinkError naming the link."""
    root = checkpoint.parent.resolve()
    entries = [checkpoint] + (sorted(checkpoint.iterdir()) if checkpoint.is_dir() else [])
    for entry in entries:
        if not entry.is_symlink():
            continue
        target = entry.resolve()
        if target == root or root in target.parents:
            continue
        raise CheckpointLinkError(f"{entry} is a symbolic link to {os.readlink(entry)}, outside the run folder "
                                  f"{checkpoint.parent}; a resume reads only the run folder's own files: put the "
                                  "real file or folder in place of the link, or remove the link")


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
        os.fsync(fd)
        os.close(fd)
    except OSError:
        pass


def read_state(checkpoint: str | Path) -> TrainerState:
    """Read and validate a checkpoint folder; CheckpointError names the folder and what is wrong."""
    checkpoint = Path(checkpoint)
    refuse_links_out(checkpoint)
    if not checkpoint.is_dir():
        raise CheckpointError(f"{checkpoint}: checkpoint folder not found")
    state_path = checkpoint / STATE_FILE
    if not state_path.is_file():
        raise CheckpointError(f"{checkpoint}: truncated checkpoint ({STATE_FILE} is missing; "
                              "the run was probably killed while saving it)")
    try:
        raw = json.loads(state_path.read_text(encoding="utf-8"))
        state = TrainerState(**raw)
    except (json.JSONDecodeError, TypeError, UnicodeDecodeError, RecursionError) as e:
        raise CheckpointError(f"{state_path}: unreadable trainer state ({e})") from None
    for name in state.files:
        path = checkpoint / name
        if not path.is_file() or path.stat().st_size == 0:
            raise CheckpointError(f"{checkpoint}: truncated checkpoint ({name} is missing or empty)")
        expected = state.sizes.get(name)
        if expected is not None and path.stat().st_size != expected:
            raise CheckpointError(f"{checkpoint}: damaged checkpoint ({name} has {path.stat().st_size} bytes, "
                                  f"{expected} were written)")
    return state


def check_hashes(checkpoint: Path, state: TrainerState) -> None:
    """Every file has the SHA-256 written with it (checkpoints from before hashes were recorded have none)."""
    for name, expected in state.sha256.items():
        if sha256_file(checkpoint / name) != expected:
            raise CheckpointError(f"{checkpoint}: damaged checkpoint ({name} does not match its SHA-256 in "
                                  f"{STATE_FILE}: the file changed after it was written)")


def load_checkpoint(checkpoint: str | Path, model, optimizer, scheduler, model_name_or_path: str,
                    scaler=None, restore_sharded=None, check_shapes: bool = True) -> TrainerState:
    """Restore weights, optimizer, scheduler, loss scaler and RNG from a checkpoint written by save_checkpoint.
    `restore_sharded(checkpoint, optimizer_state)` loads weights and optimizer state into a sharded model instead
    (distributed/sharding.py); `check_shapes` is off where the live model's shapes are partitions (ZeRO-3)."""
    checkpoint = Path(checkpoint)
    state = read_state(checkpoint)
    check_hashes(checkpoint, state)
    if state.model_name_or_path and model_name_or_path and state.model_name_or_path != model_name_or_path:
        raise CheckpointError(f"{checkpoint}: saved from model {state.model_name_or_path!r}, "
                              f"but this run uses {model_name_or_path!r}")
    # One set of checks for saved work (model/saved_weights.py): truncated or unparsable files, keys and shapes of another model.
    if check_shapes:
        check_checkpoint_matches(checkpoint, model, required_files=(OPTIMIZER_FILE, SCHEDULER_FILE, RNG_FILE))
    # Read (and vet) every state file before changing anything: a refused file leaves the model as it was.
    optimizer_state = load_torch_state(checkpoint / OPTIMIZER_FILE)
    scheduler_state = load_torch_state(checkpoint / SCHEDULER_FILE)
    rng_state = load_torch_state(checkpoint / RNG_FILE)
    scaler_state = load_torch_state(checkpoint / SCALER_FILE) if (checkpoint / SCALER_FILE).is_file() else None
    if restore_sharded is None:
        load_trainable_weights(checkpoint, model)
    try:
        if restore_sharded is not None:
            restore_sharded(checkpoint, optimizer_state)
        else:
            # A checkpoint of a sharded run keys the optimizer state by parameter name (distributed/state.py).
            if is_by_name(optimizer_state):
                optimizer_state = by_index(optimizer_state, trainable_names(model))
            optimizer.load_state_dict(optimizer_state)
        scheduler.load_state_dict(scheduler_state)
        if scaler is not None and scaler_state is not None:
            scaler.load_state_dict(scaler_state)
        restore_rng(rng_state)
    except (RuntimeError, ValueError, KeyError, EOFError, OSError, TypeError, IndexError) as e:
        raise CheckpointError(f"{checkpoint}: cannot restore optimizer/scheduler/RNG state ({e}); "
                              "the checkpoint is truncated or from a different model or config") from None
    return state


def load_trainable_weights(checkpoint: Path, model) -> None:
    """Load the adapter (or full) weights of a checkpoint that check_checkpoint_matches has accepted."""
    from safetensors.torch import load_file

    adapter_file = checkpoint / "adapter_model.safetensors"
    files = [adapter_file] if adapter_file.is_file() else sorted(checkpoint.glob("model*.safetensors"))
    weights = {}
    for f in files:
        weights.update(load_file(f))
    refuse_non_finite(weights, checkpoint)
    if adapter_file.is_file():
        from peft import set_peft_model_state_dict
        set_peft_model_state_dict(model, weights)
        return
    model.load_state_dict(weights, strict=False)  # tied weights are saved once


def refuse_non_finite(weights: dict[str, torch.Tensor], where: Path) -> None:
    """Saved weights holding NaN/inf would train on (or be served) silently: refuse them, naming a tensor."""
    bad = [name for name, w in weights.items() if w.is_floating_point() and not torch.isfinite(w).all()]
    if bad:
        raise CheckpointError(f"{where}: {len(bad)} saved tensor(s) hold NaN or inf (e.g. {bad[0]}); this state came "
                              "from a diverged run: resume from an earlier checkpoint")


def save_final_outputs(out: Path, model, tokenizer, pissa_converted: bool = False) -> None:
    """The adapter (or full model) and tokenizer, written into a temporary folder and moved into place, so a disk
    that fills up mid-save leaves no half-written adapter behind (the checkpoints stay). pissa_converted: also the
    PiSSA adapter converted to plain LoRA, in out/pissa_converted (pissa_convert)."""
    tmp = out / ".final.tmp"
    writing = "the folder"
    try:
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        writing = "adapter_model.safetensors" if hasattr(model, "peft_config") else "model.safetensors"
        model.save_pretrained(tmp, safe_serialization=True)
        if pissa_converted:
            writing = "pissa_converted"
            save_pissa_converted(model, out)
        writing = "the tokenizer"
        tokenizer.save_pretrained(tmp)
        writing = "the folder"
        for item in tmp.iterdir():
            target = out / item.name
            if target.is_dir():
                shutil.rmtree(target)
            item.replace(target)
    except (OSError, SafetensorError) as e:
        latest = latest_checkpoint(out)
        kept = f"; {latest.name} is complete and can be resumed" if latest else ""
        lora = hasattr(model, "peft_config")
        needed = sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad or not lora)
        what = "the final adapter" if lora else "the final model"
        raise UserError(describe_save_failure(e, f"saving {what} in {out}", writing, out, needed, thing=what)
                        + kept) from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
