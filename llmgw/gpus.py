"""Which GPUs placement leaves out, per GPU: one rule for the planner and every view of it.

The planner (llmgw.planner.fleet) takes a host's GPUs but these; `llmgw nodes` and the
router's dashboard list them with the same sentence. Here, not in the planner, because the
router process never imports the planner (tests/maintenance/test_router_closure.py).
"""

from __future__ import annotations

from llmgw.facts import Gpu
from llmgw.inventory import Host


def gpu_left_out(gpu: Gpu, host: Host, fabric_manager: str | None = None) -> str | None:
    """Why placement leaves this GPU out, or None: cordoned by hand, a problem, or health not
    known (unless the host allows unknown). Per GPU: the host's other GPUs stay placeable,
    except for a host-wide cause: `fabric_manager` (HostFacts.fabric_manager) not active on an
    NVSwitch system, where no GPU can join the fabric CUDA needs."""
    if fabric_manager is not None and fabric_manager != "active":
        return (f"GPU {gpu.index} unusable: nvidia-fabricmanager is {fabric_manager} on this NVSwitch system "
                f"(start it: `systemctl start nvidia-fabricmanager` on {host.name}, then `llmgw facts`)")
    if gpu.index in host.cordoned_gpus:
        return f"GPU {gpu.index} cordoned (llmgw_cordoned_gpus; `llmgw uncordon {host.name} --gpu {gpu.index}`)"
    if gpu.problems:
        return f"GPU {gpu.index} unhealthy: {gpu.problems[0]}"
    if gpu.unknown and host.gpu_health_unknown != "allow":
        return (f"GPU {gpu.index} health unknown: {gpu.unknown[0]} (set llmgw_gpu_health_unknown: allow "
                f"for {host.name} to place on it anyway)")
    return None
