"""Data: dataset registry and formats (alpaca, sharegpt, openai, LLaMA-Factory's dataset_info.json), readers, chat
templates, tokenisation with loss masks, classification and preference examples, pre-training blocks, splits, the
prepared-data cache, class balance, the padding collator and packing (token-budget groups, packed rows, static
shapes). Nothing here loads a model; `prepare_datasets` (prepare.py) is the entry.
"""
