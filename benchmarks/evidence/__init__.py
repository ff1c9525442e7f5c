"""Evidence benchmarks: the tuner against the default, PGTune's rules and other optimizers.

``python -m benchmarks.evidence <name> [--quick]`` with name one of ``optimizers``,
``endtoend``, ``shift``, ``tight``, ``overheads`` (or ``all``).
"""
