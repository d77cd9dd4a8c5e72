"""Bridges from other libraries' models to tkc kernels.

`tkc.integrations.peft`: PEFT's MiSS adapters (`MissLinear`) run their adapter branch on a tkc
kernel for inference (`enable(model)`, `disable(model)`). Each integration imports its library
lazily, so `import tkc` never needs it.
"""
