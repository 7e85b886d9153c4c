"""Training stages: what sft, pt, dpo, kto and rm each do differently, as one `Stage` record per stage (base.py)
looked up by `stage:` in the STAGES table (table.py). The loop in train.py is the same for all of them.

Modules: base (the Stage record), table (STAGES), sft (sft and pt: causal-LM loss on labelled positions),
preference (dpo, kto, rm), batches (one forward for every sequence of a micro-batch, padded or packed), logprobs
(answer log-probabilities with the head only at answer positions), losses (each loss from its paper's definition),
reference (the reference model: by default the LoRA model with its adapter switched off), objectives (the
preference objectives and their metrics), evaluation (their eval loss and metrics during training), guard_rules
(which of the guard's spike rules suit each stage, and the run's guard built with them).
"""
