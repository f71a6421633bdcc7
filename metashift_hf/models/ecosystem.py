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
import re
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Mapping

from ..core import options as opt
from ..core.errors import ChecksumError, InputFormatError, MetashiftError, UnknownNameError, short_repr
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


def _json_file(path: Path, who: str, fix: str = "save the model again with save_pretrained") -> dict | None:
    """A model folder's JSON config as a dict (None when absent); bounded, regular files only (a FIFO is never
    opened). ``who``: the model as the user wrote it (``hf:REF``, ``timm:local-dir:F``)."""
    if not path.exists() and not path.is_symlink():
        return None
    if not path.is_file() or path.stat().st_size > _MAX_CONFIG_BYTES:
        raise InputFormatError(
            f"{who}: {path} is not a regular JSON file of at most {_MAX_CONFIG_BYTES >> 20} MiB (never opened)", fix
        )
    try:
        data = json.loads(path.read_bytes())
    except (ValueError, UnicodeDecodeError) as exc:
        raise InputFormatError(f"{who}: {path} is not valid JSON ({exc})", fix) from exc
    if not isinstance(data, dict):
        raise InputFormatError(f"{who}: {path} holds a {type(data).__name__}, not a JSON object", fix)
    return data


def _check_safetensors(path: Path, who: str, fix: str) -> None:
    """The file is whole: its header parses and its tensors end exactly at the end of the file (a truncated
    download or copy is caught here, with a fix, instead of deep inside the loader)."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(8)
        n = int.from_bytes(head, "little") if len(head) == 8 else -1
        if not 2 <= n <= min(_MAX_SAFETENSORS_HEADER, size - 8):
            raise InputFormatError(f"{who}: {path} is truncated or not a safetensors file ({size:,} bytes)", fix)
        try:
            header = json.loads(f.read(n))
            ends = [int(t["data_offsets"][1]) for k, t in header.items() if k != "__metadata__"]
        except (ValueError, TypeError, KeyError, IndexError, AttributeError) as exc:
            raise InputFormatError(
                f"{who}: {path} has a damaged safetensors header ({type(exc).__name__})", fix
            ) from exc
    expected = 8 + n + max(ends, default=0)
    if expected != size:
        raise InputFormatError(
            f"{who}: {path} is truncated or damaged: {size:,} bytes, its header describes {expected:,}", fix
        )


def _check_hf_folder(folder: Path, ref: str) -> list[Path]:
    """Refuse, before transformers reads anything, a model folder that would run code (``auto_map``, an
    unknown ``model_type``: transformers would prompt and import the folder's Python), holds pickle
    weights only, truncated weights or head labels that are not 0..n-1. Returns the safetensors files."""
    config = _json_file(folder / "config.json", f"hf:{ref}")
    if config is None:
        raise InputFormatError(f"hf:{ref}: {folder} has no config.json", "give a folder written by save_pretrained")
    for name in ("config.json", "preprocessor_config.json"):
        data = config if name == "config.json" else (_json_file(folder / name, f"hf:{ref}") or {})
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
        raise _no_safetensors(
            folder,
            f"hf:{ref}: {folder} holds no safetensors weights",
            "only safetensors weights are loaded: ask the publisher for model.safetensors, or convert the weights once "
            "where you trust them (save_pretrained(FOLDER, safe_serialization=True))",
        )
    # a Hub cache snapshot keeps a damaged blob through a plain `hf download`; a local folder is the user's own copy
    fix = (
        "copy or save the model folder again (save_pretrained(FOLDER, safe_serialization=True))"
        if Path(ref).expanduser().is_dir()
        else f"download the model again: hf download {ref} --force-download (or save_pretrained to a folder and use hf:FOLDER)"
    )
    for path in weights:
        _check_safetensors(path, f"hf:{ref}", fix)
    if config.get("id2label") is not None:
        try:
            map_labels(config["id2label"])
        except InputFormatError as exc:
            raise InputFormatError(f"hf:{ref}: {folder / 'config.json'}: {exc.what}", exc.fix) from exc
    return weights


def _no_safetensors(folder: Path, what: str, fix: str) -> InputFormatError:
    """A folder without safetensors weights, naming its pickle files (never loaded: unpickling can run code)."""
    pickles = sorted(p.name for p in folder.iterdir() if p.suffix in _PICKLE_WEIGHTS)
    named = f", only pickle files ({', '.join(pickles)}), which are never loaded (unpickling can run code)"
    return InputFormatError(what + (named if pickles else ""), fix)


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


_TV_HASH = re.compile(r"-([a-f0-9]*)\.")  # torch.hub's rule: the weights file name carries a sha256 prefix


def verify_checkpoint(path: Path, ref: str) -> str:
    """The file's sha256, checked against the prefix in its name as ``torch.hub.load_state_dict_from_url(...,
    check_hash=True)`` checks it (``resnet18-f37072fd.pth``): a random or another file under the name is refused."""
    digest = sha256_file(path)
    found = _TV_HASH.search(path.name)
    if found is not None and found.group(1) and not digest.startswith(found.group(1)):
        raise ChecksumError(
            f"{ref}: the cached weights {path} have sha256 {digest[:16]}…, but the file name says {found.group(1)}… "
            "(torchvision's own check): not the file torchvision published",
            f"delete {path} and download it again where the internet is reachable",
        )
    return digest


def _tv_members(family: Any) -> str:
    """A weights enum's members, each once (``DEFAULT`` is an alias in ``__members__``), DEFAULT saying which it is."""
    members = getattr(family, "__members__", {})
    default = getattr(members.get("DEFAULT"), "name", None)
    names = [m for m in members if m != "DEFAULT"]
    return ", ".join([f"DEFAULT (= {default})" if default else "DEFAULT", *names])


def _tv_download(name: str, weights: Any) -> str:
    """The command that downloads ``weights`` (the resolved enum member, e.g. ``ResNet50_Weights.IMAGENET1K_V1``) of
    torchvision model ``name`` into the torch hub cache."""
    return f"python -c \"import torchvision; torchvision.models.get_model('{name}', weights='{weights}')\""


def _tv_weights(tv, name: str, enum: str):
    """The weights enum of ``torchvision:NAME[:WEIGHTS]`` (``DEFAULT``, ``IMAGENET1K_V2`` or ``ResNet50_Weights.IMAGENET1K_V2``)."""
    try:
        family = tv.models.get_model_weights(name)
    except (ValueError, KeyError) as exc:
        raise UnknownNameError(
            f"torchvision has no model {name!r}", "see torchvision.models.list_models() for names"
        ) from exc
    family_name = getattr(family, "__name__", "weights")
    member = enum.rpartition(".")[2] if enum.startswith(f"{family_name}.") else enum
    found = getattr(family, member, None) if member == "DEFAULT" else getattr(family, "__members__", {}).get(member)
    if found is None:
        raise UnknownNameError(
            f"torchvision:{name}: {family_name} has no weights {enum!r}", f"use one of: {_tv_members(family)}"
        )
    return found


def torchvision_model(ref: str, device: str = "cpu", dtype: Dtype = "float32") -> Classifier:
    """A torchvision classifier ``NAME`` or ``NAME:WEIGHTS`` (its weights enum; default ``DEFAULT``), only from weights
    already in the torch hub cache, the file's sha256 checked against the prefix in its name (as torch.hub does)."""
    torch = require_torch()
    name, _, enum = ref.partition(":")
    tv = _import_vision("torchvision", f"--model torchvision:{ref}", "torchvision")
    device = check_device(torch, device)
    weights = _tv_weights(tv, name, enum or "DEFAULT")
    label = f"torchvision:{ref}"
    cached = Path(torch.hub.get_dir()) / "checkpoints" / os.path.basename(weights.url)
    download = _tv_download(name, weights)
    if not cached.is_file():
        raise MetashiftError(
            f"weights {weights} for {label} are not cached at {cached} (evaluation never downloads)",
            f"download them once where the internet is reachable: {download}",
        )
    fix = f"delete {cached} and download it again where the internet is reachable: {download}"
    try:
        digest = verify_checkpoint(cached, label)
    except ChecksumError as exc:  # the fix names the weights asked for (not DEFAULT when another member was)
        raise ChecksumError(exc.what, fix) from None
    model = tv.models.get_model(name)
    try:
        # weights_only: plain tensors, never code; a pickle payload is an UnpicklingError here
        state = torch.load(cached, map_location="cpu", weights_only=True)
    except Exception as exc:  # UnpicklingError, RuntimeError (not a zip/pickle), EOFError, ...
        raise InputFormatError(
            f"{label}: the checkpoint {cached} cannot be read as plain tensors ({type(exc).__name__}: "
            f"{str(exc).splitlines()[0] if str(exc) else ''})",
            fix,
        ) from None
    if not isinstance(state, Mapping):
        raise InputFormatError(
            f"{label}: the checkpoint {cached} holds a {type(state).__name__}, not a state dict", fix
        )
    try:
        model.load_state_dict(state)
    except RuntimeError as exc:  # missing / unexpected keys, another shape
        raise InputFormatError(
            f"{label}: the checkpoint {cached} does not fit {name} ({str(exc).splitlines()[0]}; "
            f"{str(exc).splitlines()[1].strip() if len(str(exc).splitlines()) > 1 else ''})",
            fix,
        ) from None
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
        label,
        "torchvision",
        model,
        prep,
        digest,
        device,
        {"weights": str(weights), "weights_file": cached.name},
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


_TIMM_SAVE_FIX = "save the model again: timm.models.save_for_hf(model, FOLDER, safe_serialization=True)"


def _timm_local_dir(name: str, timm: Any) -> tuple[Path, dict]:
    """Check a ``timm:local-dir:FOLDER`` before timm reads it: the folder, its config.json (a regular JSON
    object naming an architecture timm knows), whole safetensors weights (pickle-only folders refused: never
    unpickled). Returns (folder, config)."""
    who = f"timm:{name}"
    folder = Path(name[len("local-dir:") :]).expanduser()
    if not folder.is_dir():
        raise InputFormatError(
            f"{who}: {folder} is not a folder",
            "give timm:local-dir:FOLDER a folder with timm's config.json and model.safetensors "
            "(timm.models.save_for_hf(model, FOLDER, safe_serialization=True))",
        )
    config = _json_file(folder / "config.json", who, _TIMM_SAVE_FIX)
    if config is None:
        raise InputFormatError(f"{who}: {folder} has no config.json", _TIMM_SAVE_FIX)
    arch = config.get("architecture")
    if not isinstance(arch, str) or not timm.is_model(arch):
        raise UnknownNameError(
            f"{who}: {folder / 'config.json'} names the architecture {short_repr(arch)}, which timm "
            f"{timm.__version__} does not know",
            "upgrade timm if the architecture is new, or fix the config.json field architecture "
            "(timm.list_models() lists the names)",
        )
    weights = folder / "model.safetensors"
    if not weights.is_file():
        raise _no_safetensors(
            folder,
            f"{who}: {folder} holds no model.safetensors",
            "convert the weights once where you trust them: " + _TIMM_SAVE_FIX,
        )
    _check_safetensors(weights, who, _TIMM_SAVE_FIX)
    return folder, config


def _timm_cfg_error(who: str, where: str, field_: str, value: Any, want: str) -> InputFormatError:
    return InputFormatError(
        f"{who}: pretrained_cfg {field_}={short_repr(value)} ({where}) is not {want}",
        f"fix {field_} in {where}"
        if where.endswith("config.json")
        else "use another timm model, or wrap it with metashift_hf.models.from_module and its own Preprocessing",
    )


def _timm_preprocessing(cfg: Mapping[str, Any], pretrained: Mapping[str, Any], who: str, where: str) -> Preprocessing:
    """timm's eval transform (transforms_imagenet_eval) from its resolved data config, every number checked
    first and named with the file and field it came from: shortest edge to floor(size / crop_pct), centre crop."""
    # resolve_data_config(use_test_size=True) took the test_* fields where the pretrained config has them
    size_key = "test_input_size" if pretrained.get("test_input_size") is not None else "input_size"
    crop_key = "test_crop_pct" if pretrained.get("test_crop_pct") is not None else "crop_pct"
    size_ = cfg.get("input_size")
    if not (isinstance(size_, (tuple, list)) and len(size_) == 3 and all(isinstance(v, int) for v in size_)):
        raise _timm_cfg_error(who, where, size_key, size_, "three integers (channels, height, width)")
    if size_[0] != 3:
        raise _timm_cfg_error(
            who,
            where,
            size_key,
            size_,
            f"an RGB input (3 channels; the model takes in_chans {size_[0]}, metashift-hf feeds RGB images)",
        )
    crop_pct = cfg.get("crop_pct", 0.875)
    if isinstance(crop_pct, bool) or not isinstance(crop_pct, (int, float)) or not 0 < crop_pct <= 1:
        raise _timm_cfg_error(
            who, where, crop_key, crop_pct, "a number in (0, 1] (the centre crop's share of the resized side)"
        )
    for key in ("mean", "std"):
        v = cfg.get(key)
        if not (
            isinstance(v, (tuple, list))
            and len(v) == 3
            and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in v)
        ):
            raise _timm_cfg_error(who, where, key, v, "three numbers (one per RGB channel)")
    size = int(size_[-1])
    if int(size_[-2]) != size or cfg.get("crop_mode", "center") != "center":
        # Preprocessing is a shortest-edge resize and a square centre crop: another eval transform would be
        # reproduced wrongly, and every logit would be of a differently prepared image
        raise UnknownNameError(
            f"{who} is evaluated at input size {tuple(size_[-2:])} with crop mode "
            f"{cfg.get('crop_mode')!r}; this evaluator reproduces square inputs with a centre crop only",
            "use a timm model whose pretrained_cfg has a square input_size and crop_mode 'center', "
            "or wrap the model with metashift_hf.models.from_module and its own Preprocessing",
        )
    try:
        return Preprocessing(
            resize=math.floor(size / crop_pct),
            crop=size,
            crop_pct=float(crop_pct),  # --image-size N: floor(N / crop_pct), as timm's create_transform
            interpolation=str(cfg.get("interpolation", "bicubic")),
            mean=tuple(cfg["mean"]),
            std=tuple(cfg["std"]),
            source=f"timm resolve_data_config(use_test_size=True) for {who[len('timm:') :]}",
        )
    except MetashiftError as exc:
        raise InputFormatError(f"{who}: pretrained_cfg ({where}): {exc.what}", exc.fix) from None


def timm_model(name: str, device: str = "cpu", dtype: Dtype = "float32") -> Classifier:
    """A timm classifier by name or ``hf-hub:REPO`` (Hugging Face cache only) or ``local-dir:FOLDER`` (timm's
    config.json + model.safetensors, checked first).

    Evaluated as timm's own validation does by default (``validate.py``: ``use_test_size``): at the pretrained
    config's ``test_input_size`` / ``test_crop_pct`` when it has them, else its ``input_size`` / ``crop_pct``;
    ``--image-size`` chooses another size (the train size, for one)."""
    torch = require_torch()
    timm = _import_vision("timm", f"--model timm:{name}", "timm")
    device = check_device(torch, device)
    who = f"timm:{name}"
    local = _timm_local_dir(name, timm) if name.startswith("local-dir:") else None
    try:
        with _hub_offline():
            model = timm.create_model(name, pretrained=True)
    except Exception as exc:  # timm raises RuntimeError/OSError/LocalEntryNotFoundError variants
        first = str(exc).splitlines()[0] if str(exc) else ""
        if local is not None:  # nothing to download: the folder's config and weights do not make a model
            raise InputFormatError(
                f"{who}: timm cannot build the model from {local[0]} ({type(exc).__name__}: {first})",
                "check that config.json (architecture, num_classes, model_args) describes the weights in "
                "model.safetensors; " + _TIMM_SAVE_FIX,
            ) from None
        raise MetashiftError(
            f"could not load {who} from the local cache ({type(exc).__name__}: {first})",
            f"download once where the internet is reachable: python -c \"import timm; timm.create_model('{name}', pretrained=True)\", "
            "or give timm:local-dir:FOLDER (a folder with timm's config.json and model.safetensors)",
        ) from exc
    place(torch, model, device, dtype)
    where = f"{local[0] / 'config.json'}" if local is not None else "timm's pretrained_cfg"
    # timm's validate.py default: the pretrained config's test size when it has one
    cfg = importlib.import_module("timm.data").resolve_data_config({}, model=model, use_test_size=True)
    pretrained = dict(getattr(model, "pretrained_cfg", None) or {})
    prep = _timm_preprocessing(cfg, pretrained, who, where)
    n_out = int(getattr(model, "num_classes", 1000))
    names = pretrained.get("label_names")
    if names is not None:  # the head's own labels (another 1000-class dataset is not ImageNet-1k)
        if not isinstance(names, (list, tuple)) or len(names) != n_out:
            raise _timm_cfg_error(who, where, "label_names", names, f"a list of the head's {n_out} labels")
        labels = map_labels(dict(enumerate(str(n) for n in names)))
    elif n_out != 1000:
        raise UnknownNameError(
            f"{who} has a {n_out}-class head, not ImageNet-1k",
            "use an ImageNet-1k timm model, or give its label_names in the pretrained config "
            "(or an hf: model whose id2label names its classes)",
        )
    else:
        labels = imagenet_1k_labels()
    test_size = pretrained.get("test_input_size")
    return Classifier(
        who,
        "timm",
        model,
        prep,
        hash_state_dict(model),
        device,
        {
            "weights_sha256_of": "state_dict tensors",
            "input_size_rule": "test_input_size (timm validate.py's default)" if test_size else "input_size",
        },
        labels=labels,
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
