"""Stage sft, and stage pt (sft's recipe on pre-training blocks, where every token carries a label): summed next-token
cross-entropy over the labelled positions, the head applied only there (training/loss.py). Batches are the
trainer's own (padded or packed); the eval loss is token-weighted, and classification runs also report accuracy and
macro-F1 by label scoring."""

from __future__ import annotations

import dataclasses

import torch

from steadytune.config import RunConfig
from steadytune.data.collators import PadCollator
from steadytune.data.prepare import prepare_datasets
from steadytune.eval.scoring import evaluate_classification
from steadytune.model.anatomy import CAUSAL_LM, layer_classes
from steadytune.model.kernels import eager_layers
from steadytune.stages.base import Stage
from steadytune.stages.sft_losses import make_sft_objective
from steadytune.training.batches import to_device
from steadytune.training.loss import causal_lm_loss_sum, count_target_tokens
from steadytune.training.vision_data import eval_collator, pixels_of


class CausalLMObjective(torch.nn.Module):
    """The model plus its loss, as one module: Accelerate wraps *this* for DDP/FSDP, so the forward that
    computes the loss goes through the wrapper and gradients are synchronised."""

    def __init__(self, model: torch.nn.Module, weigher=None):
        super().__init__()
        self.model = model
        self.weigher = weigher   # a weight per labelled token (the DFT and EAFT losses: stages/sft_losses.py)
        # a VLM's image-free batches still run the vision tower where ranks must agree (training/vision_keepalive.py)
        self.keep_vision = None

    def forward(self, batch: dict) -> tuple[torch.Tensor, int]:
        loss, n = causal_lm_loss_sum(self.model, batch, batch.get("token_weights"), weigher=self.weigher)
        if self.keep_vision is not None:
            loss = loss + self.keep_vision(batch, loss)
        return loss, n

    # What Accelerate's FSDP2 preparation asks of a transformers model (embedding and head units, tied weights, the
    # layer classes it shards as units), answered by the model inside.
    def get_input_embeddings(self):
        return self.model.get_input_embeddings()

    def get_output_embeddings(self):
        return self.model.get_output_embeddings()

    def tie_weights(self):
        if hasattr(self.model, "tie_weights"):
            self.model.tie_weights()

    @property
    def _no_split_modules(self):
        return layer_classes(self.model) or None


@torch.no_grad()
def evaluate_during_training(cfg: RunConfig, accelerator, objective, data, tokenizer, device) -> dict:
    """Eval loss over the eval split (token-weighted), plus accuracy and macro-F1 for classification."""
    objective.eval()
    model = accelerator.unwrap_model(objective).model
    # a vision-language run's batches carry their pixels (training/vision_data.py)
    collate = eval_collator(data, tokenizer, model) or PadCollator(tokenizer.pad_token_id, padding_side="right")
    size = cfg.train.per_device_eval_batch_size
    loss_total, tokens = 0.0, 0
    with eager_layers():  # padded eval batches change shape: compiled layers would compile again for each
        for start in range(0, len(data.eval), size):
            batch = to_device(collate(data.eval[start:start + size]), device)
            with accelerator.autocast():
                loss_sum, n = objective(batch)
            loss_total += float(loss_sum)
            tokens += n
        results = {"eval_loss": loss_total / max(tokens, 1)}
        if data.label_names:
            report = evaluate_classification(model, tokenizer, data.eval, data.label_names, data.template,
                                             cfg.data.prompt_template, size, cutoff_len=cfg.data.cutoff_len,
                                             progress=False, label_targets=data.label_targets,
                                             media=pixels_of(data))
            results.update(eval_accuracy=report["accuracy"], eval_macro_f1=report["macro_f1"])
    objective.train()
    return results


SFT = Stage(name="sft", model_task=CAUSAL_LM, prepare_data=prepare_datasets,
            make_collator=lambda cfg, tokenizer, packing_attention: None,  # the trainer's own (padded or packed)
            count_units=count_target_tokens,
            make_objective=lambda model, cfg: make_sft_objective(model, cfg, CausalLMObjective),
            evaluate=evaluate_during_training)
# prepare_datasets cuts pre-training texts into cutoff_len blocks when the stage is pt.
PT = dataclasses.replace(SFT, name="pt", make_objective=lambda model, cfg: CausalLMObjective(model))
