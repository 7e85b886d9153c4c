"""tokenized_path: the tokenised dataset is written once, reused while settings match, refused when not."""

import json
from pathlib import Path

import pytest
from sample_data import ALPACA, sample_dir

from steadytune.config import load_config
from steadytune.data.prepare import prepare_datasets
from steadytune.errors import DataError
from steadytune.model.tiny import build_tokenizer


def config(cache: Path, *extra: str):
    return load_config(None, [f"dataset={ALPACA}", f"dataset_dir={sample_dir()}", "template=qwen", "cutoff_len=64",
                              "max_samples=20", "val_size=0.2", f"tokenized_path={cache}", *extra])


def test_cache_is_written_then_reused_identically(tmp_path):
    import shutil
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    for name in ("dataset_info.json", f"{ALPACA}.json"):
        shutil.copy(sample_dir() / name, data_dir / name)
    tokenizer = build_tokenizer()
    first = prepare_datasets(config(tmp_path / "tok", f"dataset_dir={data_dir}"), tokenizer)
    assert (tmp_path / "tok" / "prepared.json").is_file()
    # The second run reads nothing but the cache: remove the source file.
    (data_dir / f"{ALPACA}.json").unlink()
    cfg = config(tmp_path / "tok", f"dataset_dir={data_dir}")
    again = prepare_datasets(cfg, tokenizer)
    assert again.train == first.train and again.eval == first.eval and again.stats == first.stats
    assert "read from the cache" in cfg.decisions["tokenized_path"]["reason"]


def test_cache_from_other_settings_is_refused_not_overwritten(tmp_path):
    tokenizer = build_tokenizer()
    prepare_datasets(config(tmp_path / "tok"), tokenizer)
    before = (tmp_path / "tok" / "prepared.json").read_bytes()
    with pytest.raises(DataError, match="other data settings or another tokenizer"):
        prepare_datasets(config(tmp_path / "tok", "cutoff_len=32"), tokenizer)
    assert (tmp_path / "tok" / "prepared.json").read_bytes() == before


def test_classification_cache_restores_labels_and_prompt(tmp_path):
    rows = [{"text": f"很好 {i}" if i % 2 else f"太差 {i}", "label": "积极" if i % 2 else "消极"} for i in range(20)]
    data = tmp_path / "r.jsonl"
    data.write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in rows), encoding="utf-8")
    args = [f"dataset={data}", "label_names=[消极, 积极]", "prompt_template=评论：{text}\n情感：", "template=empty",
            "val_size=0.25", f"tokenized_path={tmp_path / 'tok'}"]
    tokenizer = build_tokenizer()
    first = prepare_datasets(load_config(None, args), tokenizer)
    cfg = load_config(None, args)
    again = prepare_datasets(cfg, tokenizer)
    assert again.label_targets == first.label_targets and again.class_counts == first.class_counts
    assert again.train == first.train and cfg.data.label_names == ["消极", "积极"]
