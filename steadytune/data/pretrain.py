"""`stage: pt`: continued pre-training on plain text, LLaMA-Factory's way.

Each text gets the end-of-text token appended. With `packing` (the default for pt) the texts are tokenised,
concatenated and cut into blocks of `cutoff_len` tokens (a shorter tail is dropped); the first token of every
block becomes bos where the tokenizer adds bos itself. Without packing each text is truncated to `cutoff_len`
on its own (bos in front where the tokenizer adds it). The loss is taken on every token (no prompt mask).

The concatenation happens within each preprocessing batch, as LLaMA-Factory runs it through `datasets.map`:
the rows are split into `preprocessing_num_workers` contiguous shards and each shard into batches of
`preprocessing_batch_size` rows, and each batch drops its own tail. So the same keys give the same blocks
(tests/golden/pretrain.json holds blocks LLaMA-Factory made).
"""

from __future__ import annotations

from typing import Any


def end_of_text(template_name: str, template_eos: str | None) -> str:
    """The token appended to every text: Llama 3 ends documents with <|end_of_text|>, not its turn end."""
    return "<|end_of_text|>" if template_name == "llama3" else (template_eos or "")


def contiguous_shards(n_rows: int, num_shards: int) -> list[range]:
    """`datasets`' contiguous sharding (Dataset.shard(contiguous=True)): the first n_rows % num_shards shards get
    one row more."""
    num_shards = max(1, min(num_shards, n_rows))
    size, extra = divmod(n_rows, num_shards)
    shards, start = [], 0
    for index in range(num_shards):
        end = start + size + (1 if index < extra else 0)
        shards.append(range(start, end))
        start = end
    return shards


def pretrain_blocks(tokenizer: Any, texts: list[str], eos_text: str, cutoff_len: int, packing: bool,
                    batch_size: int = 1000, num_workers: int | None = None) -> list[list[int]]:
    """Token blocks for pre-training; see the module docstring."""
    adds_bos = bool(getattr(tokenizer, "add_bos_token", False))
    blocks: list[list[int]] = []
    for shard in contiguous_shards(len(texts), num_workers or 1):
        for start in range(shard.start, shard.stop, batch_size):
            batch = [text + eos_text for text in texts[start:min(start + batch_size, shard.stop)]]
            blocks += _batch_blocks(tokenizer, batch, cutoff_len, packing, adds_bos)
    return blocks


def _batch_blocks(tokenizer: Any, batch: list[str], cutoff_len: int, packing: bool, adds_bos: bool) -> list[list[int]]:
    if not packing:
        if adds_bos:
            batch = [tokenizer.bos_token + text for text in batch]
        encoded = tokenizer(batch, add_special_tokens=False, truncation=True, max_length=cutoff_len)
        return [list(ids) for ids in encoded["input_ids"]]
    stream = [token for ids in tokenizer(batch, add_special_tokens=False)["input_ids"] for token in ids]
    usable = (len(stream) // cutoff_len) * cutoff_len
    blocks = [stream[i:i + cutoff_len] for i in range(0, usable, cutoff_len)]
    if adds_bos:
        for block in blocks:
            block[0] = tokenizer.bos_token_id
    return blocks
