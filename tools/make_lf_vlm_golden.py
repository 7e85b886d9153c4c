"""Make tests/golden/lf_vlm_trainable.json with LLaMA-Factory itself (not run in CI): for each tiny vision-language
model of steadytune/model/tiny_vlm.py and each freezing case, the names of the parameters LLaMA-Factory 0.9.5 trains
(its own load_model -> init_adapter: full, freeze and LoRA tuning with the freeze_* keys), so that
tests/test_vlm_freeze.py checks ours against them without LLaMA-Factory.

    python3 -m venv /tmp/lfvenv
    /tmp/lfvenv/bin/pip install torch==2.13.0 && /tmp/lfvenv/bin/pip install llamafactory==0.9.5 pillow
    PYTHONPATH=. /tmp/lfvenv/bin/python tools/make_lf_vlm_golden.py

The tiny models are built here with LLaMA-Factory's transformers (5.6.0) from the same configs the tests build them
from (module names are the same in both versions; the test fails if they are not). A LoRA run's trainable names are
the LoRA matrices (and modules_to_save copies); recorded without peft's `base_model.model.` prefix.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
GOLDEN = ROOT / "tests" / "golden" / "lf_vlm_trainable.json"
DATA = ROOT.parent / "shared" / "fixtures" / "llamafactory" / "data"

# Each case: the keys that differ from the defaults (lora, lora_target all, LLaMA-Factory's freeze_* defaults).
CASES = {
    "lora": {},
    "lora_vision": {"freeze_vision_tower": False},
    "lora_projector": {"freeze_multi_modal_projector": False},
    "lora_qv": {"lora_target": "q_proj,v_proj"},
    "full": {"finetuning_type": "full"},
    "full_all": {"finetuning_type": "full", "freeze_vision_tower": False, "freeze_multi_modal_projector": False},
    "full_frozen_language": {"finetuning_type": "full", "freeze_vision_tower": False, "freeze_language_model": True},
    "freeze_projector": {"finetuning_type": "freeze", "freeze_trainable_layers": 1,
                         "freeze_multi_modal_projector": False},
}


def trainable_names(folder: Path, template: str, case: dict, work: Path) -> list[str]:
    from llamafactory.hparams import get_train_args
    from llamafactory.model import load_model, load_tokenizer

    args = {"model_name_or_path": str(folder), "stage": "sft", "do_train": True, "finetuning_type": "lora",
            "lora_target": "all", "dataset": "identity", "dataset_dir": str(DATA), "template": template,
            "output_dir": str(work), "overwrite_output_dir": True, "report_to": "none", **case}
    model_args, _, training_args, finetuning_args, _ = get_train_args(args)
    tokenizer_module = load_tokenizer(model_args)
    model = load_model(tokenizer_module["tokenizer"], model_args, finetuning_args, is_trainable=True)
    return sorted(name.removeprefix("base_model.model.") for name, p in model.named_parameters() if p.requires_grad)


def main() -> int:
    import transformers
    import llamafactory

    from steadytune.model.tiny_vlm import TINY_VLM_KINDS, TINY_VLM_TEMPLATES, save_tiny_vlm

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=GOLDEN)
    args = parser.parse_args()
    golden = {"llamafactory": llamafactory.__version__, "transformers": transformers.__version__, "cases": CASES,
              "trainable": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for kind in TINY_VLM_KINDS:
            folder = save_tiny_vlm(Path(tmp) / kind, kind)
            golden["trainable"][kind] = {name: trainable_names(folder, TINY_VLM_TEMPLATES[kind], case,
                                                               Path(tmp) / f"out-{kind}-{name}")
                                         for name, case in CASES.items()}
            print(kind, {name: len(v) for name, v in golden["trainable"][kind].items()}, flush=True)
    args.output.write_text(json.dumps(golden, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
