"""tests/golden/lf_v1_pair.json: LLaMA-Factory 0.9.5's v1 `pair` converter (plugins/data_plugins/converter.py) on three
rows: a system prompt, and a multi-turn conversation. Run with LLaMA-Factory's source importable:

    PYTHONPATH=/path/to/unzipped/llamafactory-0.9.5-wheel python tools/make_lf_v1_pair_golden.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def rows() -> list[dict]:
    def pair(prompt, good, bad):
        return {"chosen": prompt + [{"role": "assistant", "content": good}],
                "rejected": prompt + [{"role": "assistant", "content": bad}]}
    system = [{"role": "system", "content": "Be brief."}]
    return [pair(system + [{"role": "user", "content": "What colour is the sky?"}], "Blue.", "I cannot say."),
            pair(system + [{"role": "user", "content": "Name a fruit."}], "An apple.", "A chair."),
            pair([{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello."},
                  {"role": "user", "content": "Two plus two?"}], "Four.", "Five.")]


def main() -> int:
    from llamafactory.v1.plugins.data_plugins.converter import DataConverterPlugin

    given = rows()
    golden = {"llamafactory": "0.9.5", "rows": given, "converted": [DataConverterPlugin("pair")(r) for r in given]}
    out = ROOT / "tests" / "golden" / "lf_v1_pair.json"
    out.write_text(json.dumps(golden, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
