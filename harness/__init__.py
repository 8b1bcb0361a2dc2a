"""Kernel evidence pipeline: the logic behind the Snakemake workflow.

Modules are small and named for what they do; workflow scripts only call into them.
"""

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
"""Repository root (the folder holding Snakefile, config.yaml, kernels/)."""

__all__ = ["ROOT"]
