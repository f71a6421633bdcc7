"""Models from the ecosystem: transformers (``hf:``), timm, torchvision, and any torch module from Python.

Weights are never downloaded here: ``hf:`` reads a local folder or the Hub cache, ``timm:`` the
Hugging Face cache, ``torchvision:`` the torch hub cache; each error says how to fetch them once.
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import json
import math
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Mapping

from ..core import options as opt
from ..core.errors import InputFormatError, MetashiftError, UnknownNameError, short_repr
from ..core.fsutil import sha256_file
from .base import (
    MAX_INPUT_SIDE,
    Classifier,
    Dtype,
    Preprocessing,
    check_device,
    hash_state_dict,
    input_side,
    place,
    require_module,
    require_torch,
)
from .labels import LabelMap, imagenet_1k_labels, map_labels


_HF_CONFIG_FILES = ("config.json", "preprocessor_config.json", "model.safetensors.index.json")
# Weight files read with pickle (torch.load), which can run code: never loaded, only named in the error.
_PICKLE_WEIGHTS = (".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle")
_MAX_CONFIG_BYTES = 16 << 20  # a config.json is a few kB; ImageNet-21k's id2label makes it ~1 MB
_MAX_SAFETENSORS_HEADER = 100 << 20  # the safetensors library's own bound on the JSON header
_NO_CODE_FIX = (
    "metashift-hf never runs Python code from a model folder or repo: use a model whose model_type "
    "transformers knows, or review the code, load the model yourself and pass it to "
    "metashift_hf.models.from_module"
)


def _hf_folder(ref: str) -> Path:
    """A local model folder, or the Hub cache's snapshot of a repo id (never downloaded)."""
    path = Path(ref).expanduser()
    if path.is_dir():
        return path
    if path.exists() or ref.startswith((".", "/", "~")):
        raise InputFormatError(
            f"hf:{ref} is not a model folder", "give a folder written by save_pretrained, or a Hub repo id"
        )
    from huggingface_hub import snapshot_download  # loads only for hf: models
    from huggingface_hub.errors import HFValidationError, LocalEntryNotFoundError

    try:
        return Path(snapshot_download(ref, local_files_only=True))
    except (LocalEntryNotFoundError, HFValidationError, OSError) as exc:
        raise MetashiftError(
            f"hf:{ref} is neither a local folder nor a model in the Hugging Face cache (evaluation never downloads)",
            f"download it once where the Hub is reachable: hf download {ref}  (or save_pretrained to a folder and use hf:FOLDER)",
        ) from exc


def _json_file(path: Path, ref: str) -> dict | None:
    """A model folder's JSON config as a dict (None when absent); bounded, regular files only."""
    if not path.exists():
        return None
    if not path.is_file() or path.stat().st_size > _MAX_CONFIG_BYTES:
        raise InputFormatError(
            f"hf:{ref}: {path} is not a regular JSON file of at most {_MAX_CONFIG_BYTES >> 20} MiB",
            "save the model again with save_pretrained",
        )
    try:
        data = json.loads(path.read_bytes())
    except (ValueError, UnicodeDecodeError) as exc:
        raise InputFormatError(
            f"hf:{ref}: {path} is not valid JSON ({exc})", "save the model again with save_pretrained"
        ) from exc
    if not isinstance(data, dict):
        raise InputFormatError(
            f"hf:{ref}: {path} holds a {type(data).__name__}, not a JSON object",
            "save the model again with save_pretrained",
        )
    return data


def _check_safetensors(path: Path, ref: str) -> None:
    """The file is whole: its header parses and its tensors end exactly at the end of the file (a truncated
    download or copy is caught here, with a fix, instead of deep inside the loader)."""
    size = path.stat().st_size
    # a Hub cache snapshot keeps a damaged blob through a plain `hf download`; a local folder is the user's own copy
    fix = (
        "copy or save the model folder again (save_pretrained(FOLDER, safe_serialization=True))"
        if Path(ref).expanduser().is_dir()
        else f"download the model again: hf download {ref} --force-download (or save_pretrained to a folder and use hf:FOLDER)"
    )
    with open(path, "rb") as f:
        head = f.read(8)
        n = int.from_bytes(head, "little") if len(head) == 8 else -1
        if not 2 <= n <= min(_MAX_SAFETENSORS_HEADER, size - 8):
            raise InputFormatError(f"hf:{ref}: {path} is truncated or not a safetensors file ({size:,} bytes)", fix)
        try:
            header = json.loads(f.read(n))
            ends = [int(t["data_offsets"][1]) for k, t in header.items() if k != "__metadata__"]
        except (ValueError, TypeError, KeyError, IndexError, AttributeError) as exc:
            raise InputFormatError(
                f"hf:{ref}: {path} has a damaged safetensors header ({type(exc).__name__})", fix
            ) from exc
    expected = 8 + n + max(ends, default=0)
    if expected != size:
        raise InputFormatError(
            f"hf:{ref}: {path} is truncated or damaged: {size:,} bytes, its header describes {expected:,}", fix
        )


def _check_hf_folder(folder: Path, ref: str) -> list[Path]:
    """Refuse, before transformers reads anything, a model folder that would run code (``auto_map``, an
    unknown ``model_type``: transformers would prompt and import the folder's Python), holds pickle
    weights only, truncated weights or head labels that are not 0..n-1. Returns the safetensors files."""
    config = _json_file(folder / "config.json", ref)
    if config is None:
        raise InputFormatError(f"hf:{ref}: {folder} has no config.json", "give a folder written by save_pretrained")
    for name in ("config.json", "preprocessor_config.json"):
        data = config if name == "config.json" else (_json_file(folder / name, ref) or {})
        if "auto_map" in data:
            raise InputFormatError(
                f"hf:{ref}: {folder / name} asks to run the folder's own code (auto_map: "
                f"{short_repr(data['auto_map'])})",
                _NO_CODE_FIX,
            )
    known = importlib.import_module("transformers.models.auto.configuration_auto").CONFIG_MAPPING_NAMES
    model_type = config.get("model_type")
    if not isinstance(model_type, str) or model_type not in known:
        raise InputFormatError(
            f"hf:{ref}: {folder / 'config.json'} has the model_type {short_repr(model_type)}, which "
            f"transformers {importlib.import_module('transformers').__version__} does not know",
            f"upgrade transformers if the architecture is new; {_NO_CODE_FIX}",
        )
    weights = sorted(p for p in folder.iterdir() if p.suffix == ".safetensors" and p.is_file())
    if not weights:
        pickles = sorted(p.name for p in folder.iterdir() if p.suffix in _PICKLE_WEIGHTS)
        raise InputFormatError(
            f"hf:{ref}: {folder} holds no safetensors weights"
            + (
                f", only pickle files ({', '.join(pickles)}), which are never loaded (unpickling can run code)"
                if pickles
                else ""
            ),
            "only safetensors weights are loaded: ask the publisher for model.safetensors, or convert the weights once "
            "where you trust them (save_pretrained(FOLDER, safe_serialization=True))",
        )
    for path in weights:
        _check_safetensors(path, ref)
    if config.get("id2label") is not None:
        try:
            map_labels(config["id2label"])
        except InputFormatError as exc:
            raise InputFormatError(f"hf:{ref}: {folder / 'config.json'}: {exc.what}", exc.fix) from exc
    return weights


def _folder_digest(folder: Path, weights: list[Path]) -> str:
    """sha256 over the weight and config files of a model folder (names and contents, sorted)."""
    h = hashlib.sha256()
    for p in sorted({*weights, *(folder / n for n in _HF_CONFIG_FILES if (folder / n).is_file())}):
        h.update(p.name.encode())
        h.update(sha256_file(p).encode())
    return h.hexdigest()


def _check_processor(processor: Any, ref: str) -> None:
    """The sizes an image processor resizes and crops to are 1..MAX_INPUT_SIDE px (pixel counts up to its
    square), checked before any image (a size of 20,000 would allocate gigabytes per image; 0 fails deep
    inside the processor), and its normalisation std is > 0 (a std of 0 makes every input NaN)."""
    config = processor.to_dict()
    for key in ("size", "crop_size"):
        value = config.get(key)
        for name, side in value.items() if isinstance(value, Mapping) else [("", value)]:
            label = f"hf:{ref} image processor {key}{'.' + name if name else ''}"
            if side is None:
                continue
            if name.endswith("pixels"):  # min_pixels / max_pixels: an area
                if opt.positive_int(side, label) > MAX_INPUT_SIDE**2:
                    raise opt.OptionError(
                        f"{label}={side} is larger than {MAX_INPUT_SIDE}x{MAX_INPUT_SIDE} pixels",
                        f"use a preprocessing size of at most {MAX_INPUT_SIDE} px a side",
                    )
            else:
                input_side(side, label)
    if config.get("do_normalize"):
        for v in config.get("image_std") or ():
            opt.positive_float(v, f"hf:{ref} image processor image_std")


def hf_model(ref: str, device: str = "cpu", dtype: Dtype = "float32") -> Classifier:
    """A transformers image classifier (AutoModelForImageClassification + AutoImageProcessor).

    The head's ``id2label`` is mapped to WordNet ids (labels.map_labels): ImageNet-1k heads are scored
    as usual, other heads (ImageNet-21k wnids) through WordNet; unmapped labels are in the card.
    """
    torch = require_torch()
    transformers = require_module("transformers", f"--model hf:{ref}", "hf")
    device = check_device(torch, device)
    folder = _hf_folder(ref)
    weights = _check_hf_folder(folder, ref)
    digest = _folder_digest(folder, weights)
    # never code from the folder (trust_remote_code=False: no prompt either) and never a pickle (use_safetensors)
    safe = {"local_files_only": True, "trust_remote_code": False}
    try:
        processor = transformers.AutoImageProcessor.from_pretrained(str(folder), **safe)
        _check_processor(processor, ref)
        model = transformers.AutoModelForImageClassification.from_pretrained(str(folder), use_safetensors=True, **safe)
    except (OSError, ValueError, KeyError, RuntimeError) as exc:
        raise MetashiftError(
            f"hf:{ref}: transformers cannot load an image classifier from {folder} ({exc})",
            "give a model saved with save_pretrained together with its image processor",
        ) from exc
    place(torch, model, device, dtype)
    labels = map_labels(model.config.id2label)

    # a ViT-like model fed another input size than its position embeddings were made for interpolates them,
    # as its image processor would be asked to (evaluate --image-size); convnets take any size as they are
    interpolate = "interpolate_pos_encoding" in inspect.signature(model.forward).parameters
    native = getattr(model.config, "image_size", None)

    def forward(batch):
        other = interpolate and tuple(batch.shape[-2:]) != (native, native)  # at its own size: called as before
        return model(pixel_values=batch, **({"interpolate_pos_encoding": True} if other else {})).logits

    return Classifier(
        f"hf:{ref}",
        "hf",
        forward,
        HFProcessing(processor, ref),
        digest,
        device,
        {"folder": str(folder), "architecture": type(model).__name__},
        labels=labels,
        dtype=dtype,
        module=model,
    )


_PROCESSOR_KEYS = {
    "size",
    "crop_size",
    "crop_pct",
    "resample",
    "do_resize",
    "do_center_crop",
    "do_rescale",
    "rescale_factor",
    "do_normalize",
    "image_mean",
    "image_std",
}
_SIDE_KEYS = ("shortest_edge", "height", "width")  # the size keys that set the output side (longest_edge bounds it)


class HFProcessing:
    """An ``hf:`` model's image processor as a Classifier preprocessing (RGB PIL image -> (3, H, W) array).

    ``sizes``: the ``size``/``crop_size`` the processor is called with (``at_crop``: evaluate --image-size);
    None: its own."""

    def __init__(self, processor: Any, ref: str, sizes: Mapping[str, Any] | None = None):
        self.processor, self.ref, self.sizes = processor, ref, dict(sizes or {})

    def __call__(self, image: Any) -> Any:
        return self.processor(images=image, return_tensors="np", **self.sizes)["pixel_values"][0]

    def card(self) -> dict[str, Any]:
        proc = {**self.processor.to_dict(), **self.sizes}
        return {
            "image_processor": type(self.processor).__name__,
            **{k: proc[k] for k in sorted(proc) if k in _PROCESSOR_KEYS},
        }

    def at_crop(self, side: int) -> "HFProcessing":
        """The processor's ``size`` and ``crop_size`` scaled so that its output is ``side`` px a side (the resize
        keeps its ratio to the crop, as for :meth:`Preprocessing.at_crop`)."""
        proc = self.processor.to_dict()
        size, crop = proc.get("size"), proc.get("crop_size") if proc.get("do_center_crop") else None
        final = _side(crop) or _side(size)
        if final is None or not isinstance(size, Mapping):
            raise opt.OptionError(
                f"hf:{self.ref}: its image processor's size {short_repr(size)} does not set an output "
                "side that --image-size can scale",
                "drop --image-size for this model",
            )
        scaled = {"size": {k: (max(side, round(v * side / final)) if k in _SIDE_KEYS else v) for k, v in size.items()}}
        if crop is not None:
            scaled["crop_size"] = {"height": side, "width": side}
        return HFProcessing(self.processor, self.ref, scaled)


def _side(value: Any) -> int | None:
    """The output side a processor's size dict sets (its height/width or shortest edge), else None."""
    if not isinstance(value, Mapping):
        return None
    sides = [v for k, v in value.items() if k in _SIDE_KEYS and isinstance(v, int) and v > 0]
    return min(sides) if sides else None


def torchvision_model(name: str, device: str = "cpu", dtype: Dtype = "float32") -> Classifier:
    """A torchvision classifier by name, only from weights already in the torch hub cache."""
    torch = require_torch()
    tv = _import_vision("torchvision", f"--model torchvision:{name}", "torchvision")
    device = check_device(torch, device)
    try:
        weights = tv.models.get_model_weights(name).DEFAULT
    except (ValueError, KeyError) as exc:
        raise UnknownNameError(
            f"torchvision has no model {name!r}", "see torchvision.models.list_models() for names"
        ) from exc
    cached = Path(torch.hub.get_dir()) / "checkpoints" / os.path.basename(weights.url)
    if not cached.is_file():
        raise MetashiftError(
            f"weights for torchvision:{name} are not cached at {cached} (evaluation never downloads)",
            f"download them once where the internet is reachable: python -c \"import torchvision; torchvision.models.get_model('{name}', weights='DEFAULT')\"",
        )
    model = tv.models.get_model(name)
    model.load_state_dict(torch.load(cached, map_location="cpu", weights_only=True))
    place(torch, model, device, dtype)
    t = weights.transforms()
    prep = Preprocessing(
        resize=int(t.resize_size[0]),
        crop=int(t.crop_size[0]),
        interpolation=str(getattr(t.interpolation, "value", t.interpolation)),
        mean=tuple(t.mean),
        std=tuple(t.std),
        source=f"torchvision {weights} transforms()",
    )
    return Classifier(
        f"torchvision:{name}",
        "torchvision",
        model,
        prep,
        sha256_file(cached),
        device,
        {"weights": str(weights)},
        labels=_head_labels(weights.meta.get("categories"), name),
        dtype=dtype,
        module=model,
    )


def _head_labels(categories, name: str) -> LabelMap:
    if categories is None or len(categories) == 1000:
        return imagenet_1k_labels()  # torchvision's ImageNet heads list the 1,000 classes in index order
    raise UnknownNameError(
        f"torchvision:{name} has a {len(categories)}-class head, not ImageNet-1k",
        "use an ImageNet-1k classifier (torchvision.models.list_models(module=torchvision.models))",
    )


def timm_model(name: str, device: str = "cpu", dtype: Dtype = "float32") -> Classifier:
    """A timm classifier by name (Hugging Face cache only) or ``local-dir:FOLDER`` (timm's config.json + safetensors)."""
    torch = require_torch()
    timm = _import_vision("timm", f"--model timm:{name}", "timm")
    device = check_device(torch, device)
    try:
        with _hub_offline():
            model = timm.create_model(name, pretrained=True)
    except Exception as exc:  # timm raises RuntimeError/OSError/LocalEntryNotFoundError variants
        raise MetashiftError(
            f"could not load timm:{name} from the local cache ({type(exc).__name__}: {exc})",
            f"download once where the internet is reachable: python -c \"import timm; timm.create_model('{name}', pretrained=True)\", "
            "or give timm:local-dir:FOLDER (a folder with timm's config.json and model.safetensors)",
        ) from exc
    place(torch, model, device, dtype)
    cfg = importlib.import_module("timm.data").resolve_data_config({}, model=model)
    size = int(cfg["input_size"][-1])
    if int(cfg["input_size"][-2]) != size or cfg.get("crop_mode", "center") != "center":
        # Preprocessing is a shortest-edge resize and a square centre crop: another eval transform would be
        # reproduced wrongly, and every logit would be of a differently prepared image
        raise UnknownNameError(
            f"timm:{name} is evaluated at input size {tuple(cfg['input_size'][-2:])} with crop mode "
            f"{cfg.get('crop_mode')!r}; this evaluator reproduces square inputs with a centre crop only",
            "use a timm model whose pretrained_cfg has a square input_size and crop_mode 'center', "
            "or wrap the model with metashift_hf.models.from_module and its own Preprocessing",
        )
    prep = Preprocessing(
        # timm's eval transform (transforms_imagenet_eval): shortest edge to floor(size / crop_pct), centre crop
        resize=math.floor(size / cfg.get("crop_pct", 0.875)),
        crop=size,
        interpolation=str(cfg.get("interpolation", "bicubic")),
        mean=tuple(cfg["mean"]),
        std=tuple(cfg["std"]),
        source=f"timm resolve_data_config for {name}",
    )
    n_out = int(getattr(model, "num_classes", 1000))
    if n_out != 1000:
        raise UnknownNameError(
            f"timm:{name} has a {n_out}-class head, not ImageNet-1k",
            "use an ImageNet-1k timm model, or an hf: model whose id2label names its classes",
        )
    return Classifier(
        f"timm:{name}",
        "timm",
        model,
        prep,
        hash_state_dict(model),
        device,
        {"weights_sha256_of": "state_dict tensors"},
        dtype=dtype,
        module=model,
        config_files=_timm_config_files(name),
    )


def _timm_config_files(name: str) -> dict[str, str]:
    """``timm:local-dir:FOLDER``: the sha256 of the folder's config.json, which builds the model (its architecture,
    ``model_args`` such as ``global_pool``, its pretrained_cfg), so a changed config never shares cached outputs."""
    if not name.startswith("local-dir:"):
        return {}
    config = Path(name[len("local-dir:") :]).expanduser() / "config.json"
    return {"config.json": sha256_file(config)} if config.is_file() else {}


# The torch/torchvision pair scripts/install.sh installs; another pair fails when torchvision loads its operators.
_VISION_PAIR = "torch==2.14.1 torchvision==0.29.1"


def _import_vision(name: str, what: str, extra: str):
    """Import torchvision or timm (which imports torchvision); a torch/torchvision mismatch is an error/fix line."""
    try:
        return require_module(name, what, extra)
    except (RuntimeError, ImportError, AttributeError) as exc:
        if isinstance(exc, ModuleNotFoundError) and "torchvision" not in str(exc):
            raise
        raise MetashiftError(
            f"{what}: importing {name} failed, most likely torchvision does not match the installed torch "
            f"({type(exc).__name__}: {exc})",
            f"install a matching pair, e.g. pip install {_VISION_PAIR} (CPU-only: add --index-url "
            "https://download.pytorch.org/whl/cpu), see README 'Set up'",
        ) from exc


@contextmanager
def _hub_offline():
    """Cache-only Hub access for the duration of a load.

    huggingface_hub reads HF_HUB_OFFLINE into ``constants`` once, when it is first imported, so setting the
    environment variable later has no effect: the constant that ``is_offline_mode()`` returns is set too.
    """
    constants = importlib.import_module("huggingface_hub.constants")
    before_env, before_const = os.environ.get("HF_HUB_OFFLINE"), constants.HF_HUB_OFFLINE
    os.environ["HF_HUB_OFFLINE"] = "1"
    constants.HF_HUB_OFFLINE = True
    try:
        yield
    finally:
        constants.HF_HUB_OFFLINE = before_const
        if before_env is None:
            os.environ.pop("HF_HUB_OFFLINE", None)
        else:
            os.environ["HF_HUB_OFFLINE"] = before_env


def from_module(
    module: Any,
    preprocessing: Preprocessing | Callable[[Any], Any],
    *,
    name: str | None = None,
    labels: Mapping[int, str] | LabelMap | None = None,
    device: str = "cpu",
    dtype: Dtype = "float32",
) -> Classifier:
    """Any ``torch.nn.Module`` mapping a float batch (n, 3, H, W) to logits, with its preprocessing.

    ``preprocessing``: a :class:`Preprocessing` or a callable RGB PIL image -> (3, H, W) array/tensor.
    ``labels``: the head's id2label (mapped like ``hf:`` heads) or a LabelMap; None = ImageNet-1k order.
    The weights checksum is taken over the state dict, so cached logits follow the weights.
    """
    torch = require_torch()
    if not isinstance(module, torch.nn.Module):
        raise InputFormatError(
            f"from_module needs a torch.nn.Module, got {type(module).__name__}",
            "pass the model itself; plain callables go through from_callable",
        )
    if not callable(preprocessing):
        raise InputFormatError(
            "from_module needs a preprocessing callable (RGB PIL image -> array) or a Preprocessing",
            "e.g. Preprocessing(resize=256, crop=224, interpolation='bilinear', mean=..., std=...)",
        )
    device = check_device(torch, device)
    place(torch, module, device, dtype)
    label_map = (
        labels if isinstance(labels, LabelMap) else map_labels(labels) if labels is not None else imagenet_1k_labels()
    )
    label = name or type(module).__name__
    return Classifier(
        f"module:{label}",
        "module",
        module,
        preprocessing,
        hash_state_dict(module),
        device,
        {"module_class": f"{type(module).__module__}.{type(module).__qualname__}"},
        labels=label_map,
        dtype=dtype,
        module=module,
    )


def from_callable(fn: Callable[[list], Any], name: str | None = None) -> Classifier:
    """Wrap any callable mapping a list of RGB PIL images to (n, 1000) ImageNet logits."""
    if not callable(fn):
        raise InputFormatError(
            f"model {fn!r} is not callable",
            "pass a model name string or a callable(list[PIL.Image]) -> (n, 1000) logits",
        )
    label = name or getattr(fn, "__name__", type(fn).__name__)
    return Classifier(f"callable:{label}", "callable", fn, None, None, "cpu")
