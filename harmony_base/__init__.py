"""The base layer: errors, units, the registry, the parameter space and other shared types.

Everything above imports from here; nothing here imports anything of ours outside ``harmony_base``.
"""
