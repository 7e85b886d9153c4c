"""tests/golden/lf_fp8.json: which linear layers LLaMA-Factory 0.9.5's fp8 training converts (the module filter its
create_fp8_kwargs hands Accelerate) on three tiny models, and its torchao recipe's scaling. Run with LLaMA-Factory's
source importable and torchao installed (no GPU needed; nothing is trained):

    PYTHONPATH=/path/to/unzipped/llamafactory-0.9.5-wheel:/path/to/torchao python tools/make_lf_fp8_golden.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace

from torch import nn

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
# The tiny models of tests/test_fp8_training.py: qwen2 (tied head), llama (untied head), and widths not multiples of 16.
MODELS = {"qwen2": ("qwen2", {}), "llama": ("llama", {}),
          "qwen2_unaligned": ("qwen2", {"hidden_size": 40, "intermediate_size": 72, "num_attention_heads": 5,
                                        "num_key_value_heads": 5})}


def main() -> int:
    from llamafactory.train.fp8_utils import create_fp8_kwargs

    from steadytune.model.tiny import build_model

    (recipe,) = create_fp8_kwargs(SimpleNamespace(fp8=True, fp8_backend="torchao",
                                                  fp8_enable_fsdp_float8_all_gather=False))
    config = recipe.config
    golden = {"llamafactory": "0.9.5", "scaling": config.cast_config_input.scaling_granularity.value,
              "layers": {}}
    for name, (kind, overrides) in MODELS.items():
        model = build_model(kind, **overrides)
        golden["layers"][name] = [n for n, m in model.named_modules()
                                  if isinstance(m, nn.Linear) and recipe.module_filter_func(m, n)]
    out = ROOT / "tests" / "golden" / "lf_fp8.json"
    out.write_text(json.dumps(golden, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
