"""LoRA layers that read the same input, multiplied as one (`shared_input_projections`; bench
`--shared-input auto|on|off`).

In a decoder layer, q_proj, k_proj and v_proj all multiply the same normed hidden state, and so do gate_proj and
up_proj. Run one by one, each LoRA layer reads that input for its base matmul and again for lora_A, and in the
backward each writes a full-width input gradient that autograd then adds up: five full-width gradients and four adds
a layer where two would do. Run as one group, the group multiplies the input once by the members' bases side by side
(one matmul of width q + k + v) and once by their lora_A's side by side (width 3r or 2r), then splits
the results. The backward is then one matmul for the bases' input gradient and one for the adapters', the sum over
members taken inside the matmul. The bases are put side by side only where a member is narrow (fewer outputs than
inputs: k and v under grouped-query attention, 256 columns at the 1.5B shape), which the tensor cores fill poorly
alone; gate and up, each already wide, measured faster apart (merge_bases).

What does not change: the parameters (each member keeps its own weight, lora_A and lora_B), the adapter files, the
values (the same products; in fp8 the incoming gradient of the merged base is quantised with one scale per row across
the members instead of one per member). The group serves only the plain case: one active adapter on every member,
no dropout, no variant (DoRA ...), not merged, no mixed-batch routing. Anything else runs each member alone, as
before. The leader (q_proj, gate_proj) computes the group when it is called; the others, called next on the same
input tensor as transformers' attention and MLP blocks do, take their part. A member called on another input runs
alone.

The fp8 base (model/fp8_base.py) is merged too, where the bases are: one fp8 copy of the concatenated weights, and
each member's own copies dropped (a member called alone multiplies by the group's copies and keeps its
columns). restore_base drops the group's copies with the fp8 bases; the group then concatenates the bf16 weights.
"""

from __future__ import annotations

import types

import torch
import torch.nn.functional as F

from steadytune.model.anatomy import speed_scope
from steadytune.model.fp8_matmul import Fp8FrozenLinear
from steadytune.model.lora_scaling import PEFT_ROUTING_KWARGS, one_plain_adapter, scaled_first_forward

# Sibling projections of one block that read the same input, in the order the block calls them (transformers'
# Llama / Qwen2 / Qwen3 / Mistral / Gemma 1-3 attention and MLP).
SIBLINGS = (("q_proj", "k_proj", "v_proj"), ("gate_proj", "up_proj"))
GROUP_ATTR = "_steadytune_shared_input"


class SharedInputGroup:
    """The members of one group, in call order, and the results computed for members not yet called."""

    def __init__(self, members: list):
        self.members = members
        self.pending: dict[int, torch.Tensor] = {}   # member index -> its output for `pending_input`
        self.pending_input: torch.Tensor | None = None

    @property
    def fp8(self) -> Fp8FrozenLinear | None:
        """The concatenated fp8 base, while the members' bases are fp8 (restore_base drops it with them)."""
        return getattr(self.members[0].base_layer, "shared", None)

    def serves(self, member, x: torch.Tensor, kwargs: dict) -> bool:
        """Whether the grouped product gives this call peft's result (the plain case)."""
        if member.merged or any(kwargs.get(k) is not None for k in PEFT_ROUTING_KWARGS):
            return False
        for m in self.members:
            if m.disable_adapters != member.disable_adapters or list(m.active_adapters) != list(member.active_adapters):
                return False
        return member.disable_adapters or one_plain_adapter(self.members)

    def base_products(self, x: torch.Tensor) -> list[torch.Tensor]:
        """Each member's base output for x, from one matmul where the bases allow it and merge_bases says so."""
        bases = [m.base_layer for m in self.members]
        widths = [b.out_features for b in bases]
        if self.fp8 is not None and all(isinstance(b, Fp8FrozenLinear) for b in bases):
            return list(self.fp8(x).split(widths, dim=-1))
        if side_by_side(self.members, lambda b: type(b) is torch.nn.Linear):
            weight = torch.cat([b.weight for b in bases])
            bias = torch.cat([b.bias for b in bases]) if bases[0].bias is not None else None
            return list(F.linear(x, weight, bias).split(widths, dim=-1))
        return [b(x) for b in bases]

    def compute(self, x: torch.Tensor) -> list[torch.Tensor]:
        """Every member's output for x: peft's `base(x) + lora_B(lora_A(x) * scaling)`, with the input read once by
        the bases together and once by the lora_A's together."""
        bases = self.base_products(x)
        leader = self.members[0]
        if leader.disable_adapters:
            return bases
        name = leader.active_adapters[0]
        a_weights = [m.lora_A[name].weight for m in self.members]
        lora_input = leader._cast_input_dtype(x, a_weights[0].dtype)
        low_rank = F.linear(lora_input, torch.cat(a_weights)).split([w.shape[0] for w in a_weights], dim=-1)
        outputs = []
        for m, base, low in zip(self.members, bases, low_rank):
            outputs.append((base + m.lora_B[name](low * m.scaling[name])).to(base.dtype))
        return outputs


def merge_bases(members: list) -> bool:
    """Whether the members' base matmuls run as one: where one of them is narrow (fewer outputs than inputs: k_proj
    and v_proj under grouped-query attention), which the tensor cores fill poorly alone. Wide bases are left apart:
    gate and up side by side measured slower than one after the other on an H200 (0.66 against 0.63 ms at the 1.5B
    widths, 3.66 against 3.21 at 7B: benchmarks/fp8_scaling_speed.py, docs/speed.md)."""
    return any(m.out_features < m.in_features for m in members)


def side_by_side(members: list, kind) -> bool:
    """Whether the members' bases, each of the `kind` given (a test on the base layer), go into one matmul:
    merge_bases says so and they all have a bias or none has."""
    bases = [m.base_layer for m in members]
    return merge_bases(members) and all(kind(b) for b in bases) and len({b.bias is None for b in bases}) == 1


def _grouped_forward(self, x: torch.Tensor, *args, **kwargs) -> torch.Tensor:
    group: SharedInputGroup = getattr(self, GROUP_ATTR)
    index = group.members.index(self)
    if args or not group.serves(self, x, kwargs):
        return scaled_first_forward(self, x, *args, **kwargs)
    if index > 0:   # a follower: its output was computed with the leader's, for this same input; else it runs alone
        if group.pending_input is x and index in group.pending:
            out = group.pending.pop(index)
            if not group.pending:
                group.pending_input = None
            return out
        return scaled_first_forward(self, x, *args, **kwargs)
    outputs = group.compute(x)
    # The followers, called next on this same input, take theirs; the stash empties as they do, so nothing stays.
    group.pending = dict(enumerate(outputs[1:], start=1))
    group.pending_input = x
    return outputs[0]


def shared_input_blocker(finetuning_type: str, use_dora: bool, lora_dropout: float,
                         shard_kind: str | None = None) -> str | None:
    """What in a run's set-up rules the groups out, or None."""
    if finetuning_type != "lora":
        return f"finetuning_type {finetuning_type}: only LoRA layers are grouped"
    if use_dora:
        return "DoRA runs peft's own forward for each layer"
    if lora_dropout > 0:
        return f"lora_dropout {lora_dropout}: each layer draws its own dropout mask on the input"
    if shard_kind in ("deepspeed", "fsdp"):
        # ZeRO-3 gathers a layer's weights only as that layer is called: a group would read its followers' shards
        return f"{shard_kind} gathers each layer's weights as it is called; not tried with groups"
    return None


def sibling_groups(model: torch.nn.Module) -> list[list]:
    """The peft LoRA Linear layers of `model` that share an input: per block, q/k/v and gate/up where all are LoRA
    layers of one input width."""
    from peft.tuners.lora import Linear as LoraLinear   # lazy: peft is imported where adapters are used

    groups = []
    for parent in speed_scope(model).modules():
        for names in SIBLINGS:
            members = [getattr(parent, n, None) for n in names]
            if all(type(m) is LoraLinear for m in members) and len({m.in_features for m in members}) == 1:
                groups.append(members)
    return groups


def share_inputs(model: torch.nn.Module) -> tuple[int, str]:
    """Give each group of sibling LoRA layers the grouped forward (after scale_before_lora_b and the fp8 base, before
    the first forward); -> (groups made, reason)."""
    groups = sibling_groups(model)
    merged_fp8 = 0
    for members in groups:
        group = SharedInputGroup(members)
        bases = [m.base_layer for m in members]
        if side_by_side(members, lambda b: isinstance(b, Fp8FrozenLinear)):
            shared, offset = Fp8FrozenLinear.concatenated(bases), 0
            for b in bases:
                b.share_copies(shared, offset)
                offset += b.out_features
            merged_fp8 += 1
        for m in members:
            setattr(m, GROUP_ATTR, group)
            m.forward = types.MethodType(_grouped_forward, m)
    merged = sum(merge_bases(members) for members in groups)
    why = (f"{len(groups)} groups of LoRA layers that read the same input (q/k/v, gate/up) multiply it once: their "
           f"lora_A's side by side, and in {merged} groups with a narrow member their bases too")
    if merged_fp8:
        why += f" ({merged_fp8} over one fp8 copy of their concatenated bases)"
    return len(groups), why


def decide_shared_input(model: torch.nn.Module, planned: bool, reason: str,
                        ruled_out: str | None = None) -> tuple[bool, str]:
    """The plan's shared_input_projections applied to `model`, for train and bench alike; -> (on, reason).
    planned, reason: the plan's decision; ruled_out: what in the run's set-up rules the groups out
    (shared_input_blocker). Off also where no LoRA layers share an input."""
    if not planned:
        return False, reason
    if ruled_out is None:
        groups, how = share_inputs(model)
        if groups:
            return True, f"{reason} ({how})"
        ruled_out = "no LoRA layers here share an input (q/k/v or gate/up all adapted)"
    return False, f"off: {ruled_out}"
