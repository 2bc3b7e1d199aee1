"""A verl platform for CPU tensors and the gloo backend, registered as ``"cpu"`` on import.

verl 0.9 knows only accelerator platforms. Its own hook for other hardware is an importable
module named in ``VERL_USE_EXTERNAL_MODULES`` that registers a platform; with
``VERL_PLATFORM=cpu`` verl then runs its FSDP2 engines on CPU over gloo. The tests use it to
run verl's real workers and trainers (PPO actor update, SFT trainer) without a GPU; nothing in
agl-verl depends on it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from verl.plugin.platform import PlatformBase, PlatformRegistry

__all__ = ["CPUPlatform"]


@PlatformRegistry.register(platform="cpu")
class CPUPlatform(PlatformBase):  # type: ignore[misc]
    device_name = "cpu"
    vendor_name = "cpu"
    device_module = torch.cpu

    def is_available(self) -> bool:
        return True

    def current_device(self) -> str:
        return "cpu"

    def device_count(self) -> int:
        return 1

    def set_device(self, device_index: Any) -> None:
        pass

    def synchronize(self, device_index: Any = None) -> None:
        pass

    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    manual_seed_all = manual_seed

    def set_allocator_settings(self, settings: Any) -> None:
        pass

    def empty_cache(self) -> None:
        pass

    def get_device_capability(self, device_index: int = 0) -> tuple[None, None]:
        return None, None

    def communication_backend_name(self) -> str:
        return "gloo"

    def visible_devices_envvar(self) -> str:
        return "CUDA_VISIBLE_DEVICES"

    @contextmanager
    def nvtx_range(self, msg: str) -> Iterator[None]:
        yield

    def profiler_start(self) -> None:
        pass

    def profiler_stop(self) -> None:
        pass

    def ray_resource_name(self) -> str:
        return "CPU"

    def ray_resource_options(self, num_gpus: float) -> dict[str, Any]:
        # Ray takes CPUs as num_cpus, never as a custom resource.
        return {"num_cpus": num_gpus}

    def ray_noset_envvars(self) -> list[str]:
        return []

    def is_ipc_supported(self) -> bool:
        return False

    def cudart(self) -> None:
        return None


# verl reads memory figures and empties caches through the device module unguarded.
for _name in ("memory_allocated", "memory_reserved", "max_memory_allocated", "max_memory_reserved"):
    if not hasattr(torch.cpu, _name):
        setattr(torch.cpu, _name, lambda *args, **kwargs: 0)
if not hasattr(torch.cpu, "empty_cache"):
    torch.cpu.empty_cache = lambda: None  # type: ignore[attr-defined]

# verl's process-group set-up names gloo for CPU tensors and the platform's backend for device
# tensors ("cpu:gloo,cpu:gloo" here), which torch refuses as a duplicate: fold it to "gloo".
_init_process_group = torch.distributed.init_process_group


def _init_cpu_process_group(*args: Any, **kwargs: Any) -> Any:
    if kwargs.get("backend") == "cpu:gloo,cpu:gloo":
        kwargs["backend"] = "gloo"
    return _init_process_group(*args, **kwargs)


torch.distributed.init_process_group = _init_cpu_process_group
