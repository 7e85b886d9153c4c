"""Data: dataset registry and formats, chat templates, tokenisation with loss masks, splits, batching.
"""
