"""Entry point of one verl SFT process: ``python -m agl_verl.sft_main CONFIG.yaml [--ray]``.

:func:`agl_verl.sft.run_verl_sft` launches it (under ``torchrun`` for verl's SPMD trainer, or
once for verl's Ray trainer) with the config it built and validated; it hands the config to
verl's own trainer unchanged.
"""

from __future__ import annotations

import argparse
import os
from datetime import timedelta


def _init_process_group() -> None:
    """The process group verl's ``initialize_global_process_group`` makes (gloo for CPU
    tensors, the device's collective backend for device tensors), unless one exists."""
    import torch.distributed as dist
    from verl.utils.device import get_device_name, get_nccl_backend, get_torch_device

    if dist.is_initialized():
        return
    device = get_device_name()
    backend = "gloo" if device == "cpu" else f"cpu:gloo,{device}:{get_nccl_backend()}"
    dist.init_process_group(backend=backend, timeout=timedelta(hours=10))
    if device != "cpu":
        get_torch_device().set_device(int(os.environ["LOCAL_RANK"]))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m agl_verl.sft_main")
    parser.add_argument("config", help="the verl SFT config (YAML) agl-verl wrote")
    parser.add_argument("--ray", action="store_true", help="verl's Ray SFT trainer")
    args = parser.parse_args(argv)

    from omegaconf import OmegaConf

    config = OmegaConf.load(args.config)
    if args.ray:
        import ray
        from verl.trainer import sft_trainer_ray

        if not ray.is_initialized():
            ray.init(address=os.environ.get("RAY_ADDRESS"))
        sft_trainer_ray.SFTTrainer(config=config).fit()
        return
    from verl.trainer import sft_trainer
    from verl.utils.distributed import destroy_global_process_group

    _init_process_group()
    try:
        sft_trainer.SFTTrainer(config=config).fit()
    finally:
        destroy_global_process_group()


if __name__ == "__main__":
    main()
