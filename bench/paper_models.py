"""The published image networks of issue 26, written from their papers as PyTorch modules (no
torchvision, no downloads, random weights from a fixed seed): AlexNet, GoogLeNet, VGG-16, ResNet-50,
DenseNet-121, ShuffleNet v1, SqueezeNet 1.1 and EfficientNet-B0.

Each is registered in bench/onnx_models.py's MODELS: "full" is the paper's network (224x224, batch 1,
1000 classes; `make bench`), "tiny" keeps every kind of layer (block types, strides, groups, pads,
concat branches, pooling kinds, LRN) on a 32x32 image with few channels and one block per stage
(tests/test_onnx_models.py). nn.LocalResponseNorm is exported by torch.onnx (opsets 17-20) as
primitive ops, not an LRN node: Mul, Pad, a 3-D AveragePool over the channels, Pow, Div, and an If
on the input's rank (known when the model is compiled).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from onnx_models import Model, _image, _random
from torch import nn

IMAGE = ("image",), ("logits",)
AXES = {"image": {0: "batch"}, "logits": {0: "batch"}}


def _classifier(name: str, seed: int, size: str, make: Callable[[], nn.Module]) -> Model:
    """Model ``name``: what ``make`` builds, weights from ``seed``, on one 224x224 (full) or 32x32 (tiny) image."""
    net = _random(seed, make)
    return Model(name, net, (_image(1, 224 if size == "full" else 32, seed),), *IMAGE, AXES)


def _conv_relu(cin: int, cout: int, kernel: int, stride: int = 1, pad: int = 0, groups: int = 1) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, kernel, stride, pad, groups=groups), nn.ReLU())


def _conv_bn(cin: int, cout: int, kernel: int, stride: int = 1, groups: int = 1) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(cin, cout, kernel, stride, kernel // 2, groups=groups, bias=False), nn.BatchNorm2d(cout)
    )


def _mlp(widths: tuple[int, ...]) -> nn.Sequential:
    """Dropout, Linear and ReLU between each pair of widths, no ReLU after the last (AlexNet's, VGG's head)."""
    layers: list[nn.Module] = [nn.Flatten()]
    for i, (cin, cout) in enumerate(zip(widths, widths[1:])):
        last = i == len(widths) - 2
        layers += [nn.Linear(cin, cout)] if last else [nn.Dropout(), nn.Linear(cin, cout), nn.ReLU()]
    return nn.Sequential(*layers)


# ------------------------------------------------------------------------------------ AlexNet


def alexnet_net(c: tuple[int, int, int, int, int], stem: tuple[int, int, int], side: int, fc: int, classes: int):
    """Krizhevsky et al. 2012: five convolutions (the 2nd, 4th and 5th in two groups, one per GPU),
    LRN (k=2, n=5, alpha=1e-4 of the paper's sum, beta=0.75) after the first two, 3x3/2 max pools,
    three fully connected layers with dropout. ``stem``: the first convolution's kernel, stride, pad."""
    lrn = nn.LocalResponseNorm(5, alpha=5e-4, beta=0.75, k=2.0)  # torch divides alpha by n
    return nn.Sequential(
        _conv_relu(3, c[0], *stem),
        lrn,
        nn.MaxPool2d(3, 2),
        _conv_relu(c[0], c[1], 5, 1, 2, groups=2),
        lrn,
        nn.MaxPool2d(3, 2),
        _conv_relu(c[1], c[2], 3, 1, 1),
        _conv_relu(c[2], c[3], 3, 1, 1, groups=2),
        _conv_relu(c[3], c[4], 3, 1, 1, groups=2),
        nn.MaxPool2d(3, 2),
        _mlp((c[4] * side * side, fc, fc, classes)),
    )


def alexnet(size: str) -> Model:
    """AlexNet on 224x224 (11x11/4 stem padded by 2: 55x55, as the paper's figure); tiny: 11x11/2 padded
    by 5 (32x32 is too small for a /4 stem and three unpadded 3x3/2 pools), 8-16 channels."""
    if size == "full":
        return _classifier("alexnet", 5, size, lambda: alexnet_net((96, 256, 384, 384, 256), (11, 4, 2), 6, 4096, 1000))
    return _classifier("alexnet", 5, size, lambda: alexnet_net((8, 16, 16, 16, 16), (11, 2, 5), 1, 32, 10))


# ---------------------------------------------------------------------------------- GoogLeNet


class Inception(nn.Module):
    """Four branches concatenated: 1x1; 1x1 -> 3x3; 1x1 -> 5x5; 3x3/1 max pool -> 1x1 (ReLU after each conv)."""

    def __init__(self, cin: int, c1: int, r3: int, c3: int, r5: int, c5: int, proj: int) -> None:
        super().__init__()
        self.b1 = _conv_relu(cin, c1, 1)
        self.b3 = nn.Sequential(_conv_relu(cin, r3, 1), _conv_relu(r3, c3, 3, 1, 1))
        self.b5 = nn.Sequential(_conv_relu(cin, r5, 1), _conv_relu(r5, c5, 5, 1, 2))
        self.bp = nn.Sequential(nn.MaxPool2d(3, 1, 1), _conv_relu(cin, proj, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.b1(x), self.b3(x), self.b5(x), self.bp(x)], 1)


# Table 1 of Szegedy et al. 2014: (#1x1, #3x3 reduce, #3x3, #5x5 reduce, #5x5, pool proj) per module
GOOGLENET_STAGES = (
    ((64, 96, 128, 16, 32, 32), (128, 128, 192, 32, 96, 64)),
    ((192, 96, 208, 16, 48, 64), (160, 112, 224, 24, 64, 64), (128, 128, 256, 24, 64, 64))
    + ((112, 144, 288, 32, 64, 64), (256, 160, 320, 32, 128, 128)),
    ((256, 160, 320, 32, 128, 128), (384, 192, 384, 48, 128, 128)),
)
GOOGLENET_TINY = (((4, 4, 8, 2, 4, 4),), ((8, 4, 8, 2, 4, 4),), ((8, 8, 8, 2, 4, 4),))


class GoogLeNet(nn.Module):
    """GoogLeNet (Inception v1) at inference (no auxiliary classifiers): 7x7/2 conv, 3x3/2 max pool,
    LRN, 1x1 and 3x3 convs, LRN, max pool, inception stages 3, 4 and 5 with 3x3/2 max pools between
    (ceil mode, as Caffe), average pool over the last map, dropout, Linear. LRN as Caffe's (k=1)."""

    def __init__(self, stem: tuple[int, int], stages, last_side: int, classes: int) -> None:
        super().__init__()
        layers: list[nn.Module] = [
            _conv_relu(3, stem[0], 7, 2, 3),
            nn.MaxPool2d(3, 2, ceil_mode=True),
            nn.LocalResponseNorm(5, alpha=1e-4, beta=0.75, k=1.0),
            _conv_relu(stem[0], stem[0], 1),
            _conv_relu(stem[0], stem[1], 3, 1, 1),
            nn.LocalResponseNorm(5, alpha=1e-4, beta=0.75, k=1.0),
            nn.MaxPool2d(3, 2, ceil_mode=True),
        ]
        cin = stem[1]
        for s, stage in enumerate(stages):
            if s:
                layers.append(nn.MaxPool2d(3, 2, ceil_mode=True))
            for widths in stage:
                layers.append(Inception(cin, *widths))
                cin = widths[0] + widths[2] + widths[4] + widths[5]
        layers += [nn.AvgPool2d(last_side, 1), nn.Flatten(), nn.Dropout(0.4), nn.Linear(cin, classes)]
        self.layers = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)


def googlenet(size: str) -> Model:
    """GoogLeNet on 224x224 (7x7 average pool), or one inception module per stage with 2-8 channels a
    branch on 32x32 (the last map, and so its average pool, is 1x1)."""
    if size == "full":
        return _classifier("googlenet", 6, size, lambda: GoogLeNet((64, 192), GOOGLENET_STAGES, 7, 1000))
    return _classifier("googlenet", 6, size, lambda: GoogLeNet((8, 16), GOOGLENET_TINY, 1, 10))


# -------------------------------------------------------------------------------------- VGG-16


def vgg_net(stages: tuple[tuple[int, ...], ...], fc: int, classes: int) -> nn.Sequential:
    """Simonyan and Zisserman 2015: stages of 3x3/1 convs padded by 1 (ReLU), each ending in a 2x2/2
    max pool, then three fully connected layers with dropout (7x7 maps at 224x224)."""
    layers: list[nn.Module] = []
    cin = 3
    for stage in stages:
        for cout in stage:
            layers.append(_conv_relu(cin, cout, 3, 1, 1))
            cin = cout
        layers.append(nn.MaxPool2d(2, 2))
    side = 7 if fc > 1000 else 1
    return nn.Sequential(*layers, _mlp((cin * side * side, fc, fc, classes)))


def vgg16(size: str) -> Model:
    """VGG-16 (configuration D), or one conv of 4-16 channels per stage on 32x32 (tiny)."""
    if size == "full":
        stages = ((64, 64), (128, 128), (256, 256, 256), (512, 512, 512), (512, 512, 512))
        return _classifier("vgg16", 7, size, lambda: vgg_net(stages, 4096, 1000))
    return _classifier("vgg16", 7, size, lambda: vgg_net(((4,), (8,), (8,), (16,), (16,)), 32, 10))


# ----------------------------------------------------------------------------------- ResNet-50


class Bottleneck(nn.Module):
    """1x1 reduce (carrying the stride, as the paper's conv3_1 ...), 3x3, 1x1 expand by 4, each with
    BatchNorm; a projection (1x1, strided, BatchNorm) where the shape changes, ReLU after the sum."""

    def __init__(self, cin: int, width: int, stride: int) -> None:
        super().__init__()
        cout = 4 * width
        self.body = nn.Sequential(
            _conv_bn(cin, width, 1, stride),
            nn.ReLU(),
            _conv_bn(width, width, 3),
            nn.ReLU(),
            _conv_bn(width, cout, 1),
        )
        self.down = _conv_bn(cin, cout, 1, stride) if stride != 1 or cin != cout else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.body(x) + (x if self.down is None else self.down(x)))


def resnet50_net(widths: tuple[int, ...], blocks: tuple[int, ...], classes: int) -> nn.Sequential:
    """He et al. 2016, Table 1 (50-layer): 7x7/2 stem, 3x3/2 max pool, four stages of bottlenecks,
    global average pool, Linear."""
    layers: list[nn.Module] = [_conv_bn(3, widths[0], 7, 2), nn.ReLU(), nn.MaxPool2d(3, 2, 1)]
    cin = widths[0]
    for i, (width, count) in enumerate(zip(widths, blocks)):
        for b in range(count):
            layers.append(Bottleneck(cin, width, 2 if i and not b else 1))
            cin = 4 * width
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, classes))


def resnet50(size: str) -> Model:
    """ResNet-50, or one bottleneck per stage of widths 4-16 on 32x32 (tiny)."""
    if size == "full":
        return _classifier("resnet50", 8, size, lambda: resnet50_net((64, 128, 256, 512), (3, 4, 6, 3), 1000))
    return _classifier("resnet50", 8, size, lambda: resnet50_net((4, 8, 8, 16), (1, 1, 1, 1), 10))


# -------------------------------------------------------------------------------- DenseNet-121


def _bn_relu_conv(cin: int, cout: int, kernel: int) -> nn.Sequential:
    return nn.Sequential(nn.BatchNorm2d(cin), nn.ReLU(), nn.Conv2d(cin, cout, kernel, 1, kernel // 2, bias=False))


class DenseLayer(nn.Module):
    """BN-ReLU-1x1 conv to 4k channels, BN-ReLU-3x3 conv to k, concatenated after its input (DenseNet-B)."""

    def __init__(self, cin: int, growth: int) -> None:
        super().__init__()
        self.body = nn.Sequential(_bn_relu_conv(cin, 4 * growth, 1), _bn_relu_conv(4 * growth, growth, 3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([x, self.body(x)], 1)


def densenet_net(stem: int, growth: int, blocks: tuple[int, ...], classes: int) -> nn.Sequential:
    """Huang et al. 2017, DenseNet-BC: 7x7/2 conv, 3x3/2 max pool, dense blocks joined by transitions
    (BN-ReLU-1x1 conv halving the channels, 2x2/2 average pool), BN-ReLU, global average pool, Linear."""
    layers: list[nn.Module] = [_conv_bn(3, stem, 7, 2), nn.ReLU(), nn.MaxPool2d(3, 2, 1)]
    cin = stem
    for i, count in enumerate(blocks):
        for _ in range(count):
            layers.append(DenseLayer(cin, growth))
            cin += growth
        if i < len(blocks) - 1:
            layers += [_bn_relu_conv(cin, cin // 2, 1), nn.AvgPool2d(2, 2)]
            cin //= 2
    layers += [nn.BatchNorm2d(cin), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, classes)]
    return nn.Sequential(*layers)


def densenet121(size: str) -> Model:
    """DenseNet-121 (k=32, blocks of 6, 12, 24, 16), or k=4 with two layers a block on 32x32 (tiny)."""
    if size == "full":
        return _classifier("densenet121", 9, size, lambda: densenet_net(64, 32, (6, 12, 24, 16), 1000))
    return _classifier("densenet121", 9, size, lambda: densenet_net(8, 4, (2, 2, 2, 2), 10))


# ------------------------------------------------------------------------------- ShuffleNet v1


def _shuffle(x: torch.Tensor, groups: int) -> torch.Tensor:
    n, c, h, w = x.shape
    return x.view(n, groups, c // groups, h, w).transpose(1, 2).reshape(n, c, h, w)


class ShuffleUnit(nn.Module):
    """Zhang et al. 2018, Fig. 2: grouped 1x1 conv (BN, ReLU), channel shuffle, 3x3 depthwise conv (BN),
    grouped 1x1 conv (BN); added to the input, or at stride 2 concatenated with a 3x3/2 average pool of
    it; ReLU. The first unit of stage 2 does not group its first 1x1 (24 input channels)."""

    def __init__(self, cin: int, cout: int, groups: int, stride: int, first_grouped: bool) -> None:
        super().__init__()
        self.groups = groups
        self.stride = stride
        mid = cout // 4
        branch = cout - cin if stride == 2 else cout
        self.reduce = nn.Sequential(_conv_bn(cin, mid, 1, groups=groups if first_grouped else 1), nn.ReLU())
        self.depthwise = _conv_bn(mid, mid, 3, stride, groups=mid)
        self.expand = _conv_bn(mid, branch, 1, groups=groups)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.expand(self.depthwise(_shuffle(self.reduce(x), self.groups)))
        if self.stride == 2:
            return F.relu(torch.cat([F.avg_pool2d(x, 3, 2, 1), y], 1))
        return F.relu(x + y)


def shufflenet_net(stem: int, widths: tuple[int, ...], repeats: tuple[int, ...], groups: int, classes: int):
    """ShuffleNet 1x (Table 1): 3x3/2 conv, 3x3/2 max pool, three stages of shuffle units (the first
    of each at stride 2), global average pool, Linear."""
    layers: list[nn.Module] = [_conv_bn(3, stem, 3, 2), nn.ReLU(), nn.MaxPool2d(3, 2, 1)]
    cin = stem
    for s, (width, count) in enumerate(zip(widths, repeats)):
        for r in range(count):
            layers.append(ShuffleUnit(cin, width, groups, 1 if r else 2, bool(s or r)))
            cin = width
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, classes))


def shufflenet(size: str) -> Model:
    """ShuffleNet v1 1x with 3 groups (240, 480, 960 channels; 4, 8, 4 units), or 24-96 channels with
    a stride-2 and a stride-1 unit in stage 2 and one unit in the others on 32x32 (tiny)."""
    if size == "full":
        return _classifier("shufflenet", 10, size, lambda: shufflenet_net(24, (240, 480, 960), (4, 8, 4), 3, 1000))
    return _classifier("shufflenet", 10, size, lambda: shufflenet_net(12, (24, 48, 96), (2, 1, 1), 3, 10))


# ------------------------------------------------------------------------------ SqueezeNet 1.1


class Fire(nn.Module):
    """Iandola et al. 2016: a 1x1 squeeze (ReLU), then 1x1 and 3x3 expands (ReLU) concatenated."""

    def __init__(self, cin: int, squeeze: int, expand: int) -> None:
        super().__init__()
        self.squeeze = _conv_relu(cin, squeeze, 1)
        self.e1 = _conv_relu(squeeze, expand, 1)
        self.e3 = _conv_relu(squeeze, expand, 3, 1, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = self.squeeze(x)
        return torch.cat([self.e1(s), self.e3(s)], 1)


def squeezenet_net(stem: int, stages, classes: int) -> nn.Sequential:
    """SqueezeNet 1.1: 3x3/2 conv, fire modules in three stages after 3x3/2 max pools (ceil mode),
    dropout, 1x1 conv to the classes (ReLU), global average pool."""
    layers: list[nn.Module] = [_conv_relu(3, stem, 3, 2)]
    cin = stem
    for stage in stages:
        layers.append(nn.MaxPool2d(3, 2, ceil_mode=True))
        for squeeze, expand in stage:
            layers.append(Fire(cin, squeeze, expand))
            cin = 2 * expand
    layers += [nn.Dropout(), _conv_relu(cin, classes, 1), nn.AdaptiveAvgPool2d(1), nn.Flatten()]
    return nn.Sequential(*layers)


def squeezenet(size: str) -> Model:
    """SqueezeNet 1.1, or one fire module of 4-16 channels per stage on 32x32 (tiny)."""
    if size == "full":
        stages = (((16, 64), (16, 64)), ((32, 128), (32, 128)), ((48, 192), (48, 192), (64, 256), (64, 256)))
        return _classifier("squeezenet", 11, size, lambda: squeezenet_net(64, stages, 1000))
    return _classifier("squeezenet", 11, size, lambda: squeezenet_net(8, (((4, 8),), ((4, 8),), ((8, 16),)), 10))


# ----------------------------------------------------------------------------- EfficientNet-B0


class SqueezeExcite(nn.Module):
    """Global average pool, 1x1 conv to a quarter of the block's input channels (SiLU), 1x1 conv back
    (sigmoid), the input scaled by it per channel."""

    def __init__(self, channels: int, reduced: int) -> None:
        super().__init__()
        self.reduce = nn.Conv2d(channels, reduced, 1)
        self.expand = nn.Conv2d(reduced, channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(self.expand(F.silu(self.reduce(x.mean((2, 3), keepdim=True)))))


class MBConv(nn.Module):
    """Tan and Le 2019: 1x1 expansion (BN, SiLU; none at expansion 1), kxk depthwise (BN, SiLU),
    squeeze-excitation, 1x1 linear projection (BN); a residual where the shape is kept."""

    def __init__(self, cin: int, cout: int, expand: int, kernel: int, stride: int) -> None:
        super().__init__()
        hidden = cin * expand
        layers: list[nn.Module] = [_conv_bn(cin, hidden, 1), nn.SiLU()] if expand != 1 else []
        layers += [
            _conv_bn(hidden, hidden, kernel, stride, groups=hidden),
            nn.SiLU(),
            SqueezeExcite(hidden, max(1, cin // 4)),
            _conv_bn(hidden, cout, 1),
        ]
        self.body = nn.Sequential(*layers)
        self.residual = stride == 1 and cin == cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.body(x) if self.residual else self.body(x)


# (expansion, kernel, stride, channels, repeats) of the paper's Table 1
EFFICIENTNET_B0 = ((1, 3, 1, 16, 1), (6, 3, 2, 24, 2), (6, 5, 2, 40, 2), (6, 3, 2, 80, 3), (6, 5, 1, 112, 3))
EFFICIENTNET_B0 += ((6, 5, 2, 192, 4), (6, 3, 1, 320, 1))
EFFICIENTNET_TINY = ((1, 3, 1, 8, 1), (6, 3, 2, 8, 2), (6, 5, 2, 16, 1), (6, 5, 1, 16, 1))


def efficientnet_net(stem: int, stages, head: int, classes: int) -> nn.Sequential:
    """EfficientNet: 3x3/2 conv (BN, SiLU), MBConv stages, 1x1 head conv (BN, SiLU), global average
    pool, dropout, Linear."""
    layers: list[nn.Module] = [_conv_bn(3, stem, 3, 2), nn.SiLU()]
    cin = stem
    for expand, kernel, stride, cout, repeats in stages:
        for r in range(repeats):
            layers.append(MBConv(cin, cout, expand, kernel, stride if r == 0 else 1))
            cin = cout
    layers += [_conv_bn(cin, head, 1), nn.SiLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Dropout(0.2)]
    return nn.Sequential(*layers, nn.Linear(head, classes))


def efficientnet_b0(size: str) -> Model:
    """EfficientNet-B0, or 8-16 channels with expansion 1 and 6, 3x3 and 5x5, stride 1 and 2 and a
    residual block on 32x32 (tiny)."""
    if size == "full":
        return _classifier("efficientnet_b0", 12, size, lambda: efficientnet_net(32, EFFICIENTNET_B0, 1280, 1000))
    return _classifier("efficientnet_b0", 12, size, lambda: efficientnet_net(8, EFFICIENTNET_TINY, 32, 10))


MODELS: dict[str, Callable[[str], Model]] = {
    "alexnet": alexnet,
    "googlenet": googlenet,
    "vgg16": vgg16,
    "resnet50": resnet50,
    "densenet121": densenet121,
    "shufflenet": shufflenet,
    "squeezenet": squeezenet,
    "efficientnet_b0": efficientnet_b0,
}
