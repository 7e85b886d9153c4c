"""Data: dataset registry and formats, chat templates, tokenisation with loss masks, splits, batching."""

from steadytune.data.collator import PadCollator
from steadytune.data.encode import IGNORE, encode_classification_prompt, encode_label_targets
from steadytune.data.prepare import PreparedData, prepare_datasets
from steadytune.data.templates import TEMPLATE_NAMES, Template, get_template

__all__ = ["prepare_datasets", "PreparedData", "PadCollator", "get_template", "Template", "TEMPLATE_NAMES",
           "encode_classification_prompt", "encode_label_targets", "IGNORE"]
