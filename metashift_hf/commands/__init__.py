"""Subcommands of ``metashift-hf``; each module exposes ``register(subparsers)``."""
