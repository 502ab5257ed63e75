"""FSDP2 (`torch.distributed.fsdp.fully_shard`) for a base model too big for one device:
with `training.fsdp: true` each decoder layer's weights, base and LoRA alike, are
sharded across the processes (each holds 1/N of them and gathers a layer just for its
pass); the embeddings, the final norm and the output head stay whole on every process
(the head is read chunk by chunk by engine/model/token_logits.py, and is often tied to the
embeddings). FSDP2 reduce-scatters the LoRA gradients of the sharded layers; what is
trained outside them (PPO's value head) stays DDP's (world.py).

The adapter off (the reference pass) is peft's switch inside each LoRA layer, so it
works unchanged under sharding. Checkpoints hold whole tensors (gathered here), so
they are ordinary peft adapters whatever the process count.
"""

from __future__ import annotations

import torch
from torch.distributed.tensor import DTensor, distribute_tensor

from engine.distributed.world import World

__all__ = ["decoder_layers", "shard_layers", "set_layers_sync", "full_tensor", "clip_grad_norm",
           "full_adapter_state", "load_adapter_state", "full_optimizer_state", "load_optimizer_state",
           "is_sharded"]


def decoder_layers(model) -> torch.nn.ModuleList:
    """The decoder's stack of layers (Llama/Qwen `model.layers`, GPT-2 `transformer.h`):
    the ModuleList whose length is the config's layer count."""
    count = getattr(model.config, "num_hidden_layers", None) or getattr(model.config, "n_layer", None)
    for module in model.modules():
        if isinstance(module, torch.nn.ModuleList) and len(module) == count and count:
            return module
    raise ValueError("training.fsdp: the model's decoder layers were not found (no list of "
                     f"{count} layers); set training.fsdp: false")


def shard_layers(model, world: World) -> list[torch.nn.Module]:
    """fully_shard each decoder layer over all the processes; returns the layers.

    The decoder itself (what engine/model/forward.py calls) is FSDP2's root, holding none of
    its own weights (ignored_params: the embeddings and the final norm stay whole, as
    the head tied to the embeddings must). With the layers roots of their own instead,
    they would keep their gathered weights after a pass, and a peft adapter switch in
    between (the reference pass) left the next pass without gradients."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    from engine.model.forward import backbone

    mesh = init_device_mesh(world.device.type, (world.size,))
    layers = list(decoder_layers(model))
    for layer in layers:
        fully_shard(layer, mesh=mesh)
    body = backbone(model)
    in_layers = {id(p) for layer in layers for p in layer.parameters()}
    fully_shard(body, mesh=mesh, ignored_params={p for p in body.parameters() if id(p) not in in_layers})
    return layers


def set_layers_sync(layers: list[torch.nn.Module], sync: bool) -> None:
    """Gradient accumulation: the layers reduce-scatter their gradients on the last
    micro-batch of an optimizer step only."""
    for layer in layers:
        layer.set_requires_gradient_sync(sync, recurse=False)


def is_sharded(tensor) -> bool:
    return isinstance(tensor, DTensor)


def full_tensor(tensor: torch.Tensor) -> torch.Tensor:
    """The whole tensor (gathered from every process when it is a shard): a collective."""
    return tensor.full_tensor() if isinstance(tensor, DTensor) else tensor


def clip_grad_norm(parameters: list[torch.nn.Parameter], max_norm: float) -> float:
    """torch.nn.utils.clip_grad_norm_ for a mix of sharded (DTensor) and whole gradients:
    the total norm over every process's shards, the same clip coefficient everywhere."""
    grads = [p.grad for p in parameters if p.grad is not None]
    squares = [full_tensor(g.detach().float().pow(2).sum()) for g in grads]
    total = torch.stack([s.to(squares[0].device) for s in squares]).sum().sqrt() if squares else torch.tensor(0.0)
    coef = torch.clamp(max_norm / (total + 1e-6), max=1.0)
    for g in grads:
        g.detach().mul_(coef.to(g.device) if not isinstance(g, DTensor) else float(coef))
    return float(total)


def full_adapter_state(model) -> dict[str, torch.Tensor]:
    """The model's LoRA tensors, whole, keyed as in model.state_dict() (peft's
    save_pretrained takes them as `state_dict`). Every process calls it (gathers)."""
    return {name: full_tensor(value).detach().cpu() for name, value in model.state_dict().items() if "lora_" in name}


def load_adapter_state(model, weights: dict[str, torch.Tensor], adapter: str = "default") -> None:
    """Load a saved adapter (peft's keys, without the adapter name) into a model whose
    LoRA tensors may be shards: each process takes its part of each whole tensor."""
    missing = []
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_" not in name:
                continue
            key = name.replace(f".{adapter}.", ".")
            if key not in weights:
                missing.append(key)
                continue
            value = weights[key].to(dtype=param.dtype)
            if isinstance(param, DTensor):
                param.copy_(distribute_tensor(value.to(param.device), param.device_mesh, param.placements))
            else:
                param.copy_(value.to(param.device))
    if missing:
        raise ValueError(f"the checkpoint's adapter lacks {len(missing)} LoRA tensors, e.g. {missing[0]}")


def _options(**kw):
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    return StateDictOptions(full_state_dict=True, **kw)


def full_optimizer_state(holder: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict:
    """The optimizer's state with whole tensors, on rank 0 (empty elsewhere); `holder`
    holds every module the optimizer trains. Every process calls it."""
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

    return get_optimizer_state_dict(holder, optimizer, options=_options(cpu_offload=True))


def load_optimizer_state(holder: torch.nn.Module, optimizer: torch.optim.Optimizer, state: dict) -> None:
    """Inverse of full_optimizer_state: every process reads the whole state and keeps its shards."""
    from torch.distributed.checkpoint.state_dict import set_optimizer_state_dict

    set_optimizer_state_dict(holder, optimizer, optim_state_dict=state, options=_options())
