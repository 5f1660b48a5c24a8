"""A small CIFAR-style ResNet for small images (28 x 28 Fashion-MNIST, 32 x 32 CIFAR).

Unlike the ImageNet ResNets, the stem is a single 3 x 3 convolution at full
resolution (no 7 x 7 stride-2 convolution, no max pooling): a 28 x 28 image
keeps its resolution through the first stage and is halved at the start of
every later stage (28, 14, 7 for three stages).

A network whose stages are all at least :data:`CHANNELS_LAST_MIN_WIDTH` wide
keeps its weights and activations channels_last (NHWC): a training step of the
default two-view run costs 1.3 to 1.4 times less CPU time so, in float32 and
under bf16 autocast alike (``benchmarks/two_view_recipe.py``,
``benchmarks/memory_format.py``). A narrower one stays in the contiguous
format, on every device: see :data:`CHANNELS_LAST_MIN_WIDTH`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..model_defaults import RESNET_BLOCKS as DEFAULT_BLOCKS
from ..model_defaults import RESNET_POOL as DEFAULT_POOL
from ..model_defaults import RESNET_POOLINGS as POOLINGS
from ..model_defaults import RESNET_WIDTHS as DEFAULT_WIDTHS
from ..validation import check_choice, check_integer, check_sizes

#: The narrowest stage kept channels_last. With PyTorch 2.13 on a CPU without AVX-512 (oneDNN's AVX2 kernels), the
#: backward pass of a stride-2 1 x 1 convolution in channels_last with 2 to 7 input channels corrupts the heap (a
#: crash, or silently wrong memory); 1 and 8 or more input channels run and agree with the contiguous format
#: (``benchmarks/memory_format.py``). A ResNet's strided 1 x 1 convolutions are its shortcuts, whose inputs are
#: stage widths, so a network with a stage narrower than this keeps the contiguous format.
CHANNELS_LAST_MIN_WIDTH = 8


def _conv3x3(in_channels: int, out_channels: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(in_channels, out_channels, kernel_size=3, stride=stride, padding=1, bias=False)


class BasicBlock(nn.Module):
    """Two 3 x 3 convolutions with batch norm and a residual connection.

    ``relu(bn(conv(relu(bn(conv(x))))) + shortcut(x))``, where the shortcut is
    the identity, or a 1 x 1 convolution and batch norm when the stride or the
    number of channels changes.

    Args:
        in_channels: channels of the input, >= 1.
        out_channels: channels of the output, >= 1.
        stride: stride of the first convolution (and of the shortcut), >= 1.
    """

    def __init__(self, in_channels: int, out_channels: int, stride: int = 1) -> None:
        super().__init__()
        in_channels = check_integer("in_channels", in_channels, 1)
        out_channels = check_integer("out_channels", out_channels, 1)
        stride = check_integer("stride", stride, 1)
        self.conv1 = _conv3x3(in_channels, out_channels, stride)
        self.bn1 = nn.BatchNorm2d(out_channels)
        self.conv2 = _conv3x3(out_channels, out_channels)
        self.bn2 = nn.BatchNorm2d(out_channels)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or in_channels != out_channels:
            self.shortcut = nn.Sequential(
                nn.Conv2d(in_channels, out_channels, kernel_size=1, stride=stride, bias=False),
                nn.BatchNorm2d(out_channels),
            )

    def forward(self, x: Tensor) -> Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class ResNet(nn.Module):
    """A 3 x 3 stem and stages of :class:`BasicBlock`, pooled to one feature vector per image.

    The stem maps the input to ``widths[0]`` channels at full resolution; stage
    ``k`` has ``blocks[k]`` blocks of ``widths[k]`` channels, and every stage
    after the first starts with a stride-2 block.

    Pooling of the last feature map:

    * ``"avg"``: global average pooling, ``feature_dim = widths[-1]``;
    * ``"grid"``: adaptive average pooling to a ``grid_size`` x ``grid_size``
      grid, flattened channel-major, ``feature_dim = widths[-1] * grid_size**2``.
      It keeps the coarse spatial layout (top against bottom of a garment),
      which on centred, aligned images such as Fashion-MNIST carries much of
      the class.

    Args:
        in_channels: channels of the input images (1 for grayscale, 3 for RGB), >= 1.
        widths: channels of each stage, integers >= 1, e.g. ``(32, 64, 128)``.
        blocks: blocks in each stage, integers >= 1, as many as ``widths``.
        pool: ``"avg"`` (default) or ``"grid"``.
        grid_size: the side of the grid of ``pool="grid"``, >= 1 (default 2).

    Attributes:
        feature_dim: size of :meth:`forward`'s output.
        stage_dims: size of each stage's pooled features (:meth:`forward_stages`).
        memory_format: ``torch.channels_last`` when every stage is at least
            :data:`CHANNELS_LAST_MIN_WIDTH` wide, else ``torch.contiguous_format``.

    Call with images (B, in_channels, H, W); returns (B, feature_dim).
    """

    def __init__(
        self,
        in_channels: int = 1,
        widths: tuple[int, ...] = DEFAULT_WIDTHS,
        blocks: tuple[int, ...] = DEFAULT_BLOCKS,
        *,
        pool: str = DEFAULT_POOL,
        grid_size: int = 2,
    ) -> None:
        super().__init__()
        self.in_channels = check_integer("in_channels", in_channels, 1)
        widths = check_sizes("widths", widths)
        blocks = check_sizes("blocks", blocks)
        if len(blocks) != len(widths):
            raise ValueError(
                f"blocks must give one count per stage, as many as widths ({len(widths)}), got {len(blocks)}"
            )
        self.pool = check_choice("pool", pool, POOLINGS)
        self.grid_size = check_integer("grid_size", grid_size, 1)
        self.stem = nn.Sequential(
            _conv3x3(self.in_channels, widths[0]), nn.BatchNorm2d(widths[0]), nn.ReLU(inplace=True)
        )
        stages = []
        channels = widths[0]
        for index, (width, count) in enumerate(zip(widths, blocks, strict=True)):
            stride = 1 if index == 0 else 2
            layers = [BasicBlock(channels, width, stride)] + [BasicBlock(width, width) for _ in range(count - 1)]
            stages.append(nn.Sequential(*layers))
            channels = width
        self.stages = nn.ModuleList(stages)
        cells = self.grid_size**2 if self.pool == "grid" else 1
        self.stage_dims = tuple(width * cells for width in widths)
        self.feature_dim = self.stage_dims[-1]
        self._init_weights()
        channels_last = min(widths) >= CHANNELS_LAST_MIN_WIDTH
        self.memory_format = torch.channels_last if channels_last else torch.contiguous_format
        self.to(memory_format=self.memory_format)  # type: ignore[call-overload]  # supported; torch's stub lacks it

    def _init_weights(self) -> None:
        for module in self.modules():
            if isinstance(module, nn.Conv2d):
                nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(module, nn.BatchNorm2d):
                nn.init.ones_(module.weight)
                nn.init.zeros_(module.bias)

    def _pool(self, feature_map: Tensor) -> Tensor:
        if self.pool == "avg":
            return feature_map.mean(dim=(2, 3))
        return F.adaptive_avg_pool2d(feature_map, self.grid_size).flatten(1)

    def _stem(self, x: Tensor) -> Tensor:
        """The stem's output for images ``x`` (checked), in the weights' memory format."""
        if x.ndim != 4 or x.shape[1] != self.in_channels:
            raise ValueError(f"images must have shape (batch, {self.in_channels}, height, width), got {tuple(x.shape)}")
        return self.stem(x.contiguous(memory_format=self.memory_format))

    def forward(self, x: Tensor) -> Tensor:
        return self.features(x)

    def features(self, x: Tensor, layer: int = -1) -> Tensor:
        """The pooled output of stage ``layer`` (an index into the stages, negative from the end).

        Only the stages up to ``layer`` run. Returns (B, stage_dims[layer]).
        """
        count = len(self.stages)
        if isinstance(layer, bool) or not isinstance(layer, int) or not -count <= layer < count:
            raise ValueError(f"layer must be an integer in [{-count}, {count - 1}], got {layer!r}")
        last = layer % count
        x = self._stem(x)
        for stage in self.stages[: last + 1]:
            x = stage(x)
        return self._pool(x)

    def tokens(self, x: Tensor) -> Tensor:
        """The last stage's feature map as a sequence of tokens (B, H * W, widths[-1]), for point-set heads."""
        x = self._stem(x)
        for stage in self.stages:
            x = stage(x)
        return x.flatten(2).transpose(1, 2)

    def forward_stages(self, x: Tensor) -> list[Tensor]:
        """The pooled output of every stage, in order, from one pass: a list of (B, stage_dims[k]).

        The last entry equals :meth:`forward`'s output. A linear probe can read
        any of them (earlier stages keep more local, less invariant detail).
        """
        x = self._stem(x)
        pooled = []
        for stage in self.stages:
            x = stage(x)
            pooled.append(self._pool(x))
        return pooled
