"""Entry point of verl's SFT trainer on a config agl wrote: ``python -m agl_verl.sft_main CONFIG``.

:func:`agl_verl.sft_trainer.run_verl_sft` launches it with the config it built and validated:
under ``torchrun`` for verl's SPMD trainer (one process per GPU), or once with ``--ray`` for
verl's Ray trainer (on the cluster ``RAY_ADDRESS`` names, else a local one). The config goes
to verl's own ``run_sft`` unchanged, as ``python -m verl.trainer.sft_trainer`` would pass it
after Hydra composed it.
"""

from __future__ import annotations

import argparse


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m agl_verl.sft_main")
    parser.add_argument("config", help="the verl SFT config (YAML) agl-verl wrote")
    parser.add_argument("--ray", action="store_true", help="run verl's Ray SFT trainer")
    args = parser.parse_args(argv)

    from omegaconf import OmegaConf

    config = OmegaConf.load(args.config)
    if args.ray:
        from verl.trainer import sft_trainer_ray

        sft_trainer_ray.run_sft(config)
    else:
        from verl.trainer import sft_trainer

        sft_trainer.run_sft(config)


if __name__ == "__main__":
    main()
