"""The flags every command that runs a model shares (evaluate, train, the experiments): one declaration each,
so a flag reads and defaults the same everywhere (``--no-progress`` is the CLI's, beside ``-q``)."""

from __future__ import annotations

import argparse

from ..research.train import EPOCHS_MAX, epoch_count


def add_device_argument(p: argparse.ArgumentParser, default: str | None = "cpu") -> None:
    """``--device`` (``default`` None: a config file may set it; cpu otherwise)."""
    p.add_argument("--device", default=default, help="cpu | cuda | cuda:N (default cpu)")


def add_cache_dir_argument(p: argparse.ArgumentParser) -> None:
    """``--cache-dir``: the one cache root of model outputs (models/outputs.py)."""
    p.add_argument(
        "--cache-dir",
        default=None,
        metavar="DIR",
        help="cache root of model outputs, logits and features (default $METASHIFT_HF_CACHE or the user cache); "
        "outputs are keyed by the model's fingerprint and each image's sha256",
    )


def add_epochs_argument(p: argparse.ArgumentParser, default: str = "50 linear, 10 finetune") -> None:
    """``--epochs`` (``default`` says what an unset value means for this command)."""
    p.add_argument(
        "--epochs", type=epoch_count, default=None, help=f"epochs, at most {EPOCHS_MAX} (default {default})"
    )
