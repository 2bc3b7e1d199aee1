"""agl on one machine: LightningRL and SFT with PyTorch, and a policy server with token ids.

Nothing heavy loads on ``import agl_torch``; torch and transformers load with the module that
needs them.
"""
