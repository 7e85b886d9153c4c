"""`steadytune bench`: steadytune's default training path against the plain transformers + peft recipe and against
the best setting a tuned peer user runs, on the same model shape, the same example lengths and the same examples in
the same order, each measured until its throughput is steady.

Arms (arms.py): plain (HF Trainer + peft, batch 8), peer (the same with liger-kernel and the largest batch that
fits: LLaMA-Factory's `use_liger_kernel: true` + batch 32), steadytune (what `train` does by default); and the peer
frameworks themselves (peers.py): llamafactory (LLaMA-Factory's run_exp) and unsloth (Unsloth + TRL), each in a child
process under a Python of its own (lf_child.py, unsloth_child.py, timed by peer_timing.py), skipped with the reason and
the fix where they cannot run. Extras:
--check-loss (packed == unpacked), --find-max-len (the longest cutoff_len one step takes at the token budget).

Reported per arm: real (non-pad) tokens/s pooled over the steady windows with their spread, MFU with
4*N + 6*N_lora FLOPs per token against the device's dense bf16 peak, peak memory, start-up time; and
steadytune's ratios against each baseline. Each arm runs in a process of its own (--isolate none: in this one).

Mixtures of experts (the shapes with routed experts): every arm trains the routed experts where it can (plain: peft's
target_parameters; steadytune: train's own path, grouped experts), MFU counts a routed expert at top_k / experts,
each arm reports its trainable parameters by kind, and --num-layers makes every arm's model shallower with the same
widths (the peers load a saved folder).
"""
