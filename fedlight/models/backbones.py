"""Encoders that map images (B, C, H, W) to features (B, D); each exposes ``feature_dim``."""

from __future__ import annotations

import torch
from torch import nn
from torchvision.models import resnet18


class SmallCNN(nn.Sequential):
    """Three conv-BN-ReLU blocks (32-64-128 channels) and global average pooling; fast on CPU.

    Args:
        in_channels: image channels (1 for Fashion-MNIST, 3 for CIFAR).
        widths: channels of the three blocks.
    """

    def __init__(self, in_channels: int = 3, widths: tuple[int, int, int] = (32, 64, 128)) -> None:
        layers: list[nn.Module] = []
        c = in_channels
        for i, w in enumerate(widths):
            layers += [nn.Conv2d(c, w, 3, padding=1, bias=False), nn.BatchNorm2d(w), nn.ReLU(inplace=True)]
            if i < len(widths) - 1:
                layers.append(nn.MaxPool2d(2))
            c = w
        layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten()]
        super().__init__(*layers)
        self.feature_dim = widths[-1]


class ResNet18Cifar(nn.Module):
    """ResNet-18 with the CIFAR stem (3x3 conv, stride 1, no max-pool) used by SimCLR/FLESD/SOFed.

    Args:
        in_channels: image channels.

    Shapes: (B, C, H, W) -> (B, 512).
    """

    def __init__(self, in_channels: int = 3) -> None:
        super().__init__()
        net = resnet18(num_classes=10)
        net.conv1 = nn.Conv2d(in_channels, 64, 3, 1, 1, bias=False)
        net.maxpool = nn.Identity()
        net.fc = nn.Identity()
        self.net = net
        self.feature_dim = 512

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class MoonCNN(nn.Sequential):
    """The CNN of MOON's CIFAR-10 experiments (Li et al., CVPR 2021), with any channel count.

    conv(C, 6, 5) - ReLU - pool - conv(6, 16, 5) - ReLU - pool - fc(., 120) - ReLU - fc(120, 84) - ReLU.

    Args:
        in_channels: 3 for CIFAR, 1 for Fashion-MNIST.
        image_size: side of the square input (32 -> fc(400, 120); 28 -> fc(256, 120)).

    Shapes: (B, C, H, W) -> (B, 84).
    """

    def __init__(self, in_channels: int = 3, image_size: int = 32) -> None:
        side = ((image_size - 4) // 2 - 4) // 2
        super().__init__(
            nn.Conv2d(in_channels, 6, 5), nn.ReLU(inplace=True), nn.MaxPool2d(2),
            nn.Conv2d(6, 16, 5), nn.ReLU(inplace=True), nn.MaxPool2d(2), nn.Flatten(),
            nn.Linear(16 * side * side, 120), nn.ReLU(inplace=True), nn.Linear(120, 84), nn.ReLU(inplace=True),
        )
        self.feature_dim = 84


class CFCLCNN(nn.Sequential):
    """The CNN of CF-CL's experiments (Wagle et al. 2022, Sec. IV): two 3x3 conv layers with 5 and 8
    kernels, then linear layers of 128 and 64 units.

    The paper names only these sizes; ReLU and 2x2 max-pooling after each conv layer are our
    choice (34,402 parameters on 28x28 inputs; the paper counts 45,433).

    Args:
        in_channels: 1 for Fashion-MNIST.
        image_size: side of the square input (28 -> 8 x 5 x 5 features into the first linear layer).

    Shapes: (B, C, H, W) -> (B, 64), the embedding the triplet loss acts on.
    """

    def __init__(self, in_channels: int = 1, image_size: int = 28) -> None:
        side = ((image_size - 2) // 2 - 2) // 2
        super().__init__(
            nn.Conv2d(in_channels, 5, 3), nn.ReLU(inplace=True), nn.MaxPool2d(2),
            nn.Conv2d(5, 8, 3), nn.ReLU(inplace=True), nn.MaxPool2d(2), nn.Flatten(),
            nn.Linear(8 * side * side, 128), nn.ReLU(inplace=True), nn.Linear(128, 64),
        )
        self.feature_dim = 64


class LeNet5(nn.Module):
    """LeNet-5 of the LG-FedAvg authors' code (CNNCifar), without its last layer.

    conv1(C, 6, 5) - ReLU - pool - conv2(6, 16, 5) - ReLU - pool - fc1(., 120) - ReLU - fc2(120, 100) - ReLU;
    the objective's classifier plays fc3(100, 10). Layers are named so that ``method.global_layers``
    can pick them (``backbone.conv1`` ... ``backbone.fc2``).

    Args:
        in_channels: 3 for CIFAR, 1 for (Fashion-)MNIST.
        image_size: side of the square input (32 -> fc1(400, 120); 28 -> fc1(256, 120)).

    Shapes: (B, C, H, W) -> (B, 100).
    """

    def __init__(self, in_channels: int = 3, image_size: int = 32) -> None:
        super().__init__()
        side = ((image_size - 4) // 2 - 4) // 2
        self.conv1 = nn.Conv2d(in_channels, 6, 5)
        self.conv2 = nn.Conv2d(6, 16, 5)
        self.fc1 = nn.Linear(16 * side * side, 120)
        self.fc2 = nn.Linear(120, 100)
        self.feature_dim = 100

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = nn.functional.max_pool2d(nn.functional.relu(self.conv1(x)), 2)
        x = nn.functional.max_pool2d(nn.functional.relu(self.conv2(x)), 2)
        return nn.functional.relu(self.fc2(nn.functional.relu(self.fc1(x.flatten(1)))))


class MLP(nn.Module):
    """Fully connected encoder over flattened inputs, layers named ``fc1``, ``fc2``, ...

    ``mlp`` is LG-FedAvg's MNIST MLP (Table 5: hidden layers [512, 256, 256, 128], ReLU, as in
    the authors' code; the objective's classifier is its 128 -> 10 output layer); ``mlp_small``
    (64-32) is for tabular data.

    Args:
        in_features: C * H * W.
        hidden: widths of the hidden layers; the last is ``feature_dim``.

    Shapes: (B, C, H, W) -> (B, hidden[-1]).
    """

    def __init__(self, in_features: int, hidden: tuple[int, ...] = (512, 256, 256, 128)) -> None:
        super().__init__()
        widths = (in_features, *hidden)
        for i in range(len(hidden)):
            self.add_module(f"fc{i + 1}", nn.Linear(widths[i], widths[i + 1]))
        self.feature_dim = hidden[-1]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.flatten(1)
        for layer in self.children():
            x = nn.functional.relu(layer(x))
        return x


# The ``model.backbone`` names whose network takes other arguments than (channels, image size):
# each is the factory ``fedlight.catalog`` names, ``(channels, image_size) -> nn.Module``.

def small_cnn(channels: int, image_size: int) -> SmallCNN:
    """Three conv-BN-ReLU blocks (32-64-128 channels) and global average pooling; fast on CPU."""
    return SmallCNN(channels)


def tiny_cnn(channels: int, image_size: int) -> SmallCNN:
    """small_cnn at 16-32-64 channels (the CPU-scale streaming twins)."""
    return SmallCNN(channels, widths=(16, 32, 64))


def resnet18_cifar(channels: int, image_size: int) -> ResNet18Cifar:
    """ResNet-18 with the CIFAR stem (SimCLR / FLESD / SOFed)."""
    return ResNet18Cifar(channels)


def mlp(channels: int, image_size: int) -> MLP:
    """LG-FedAvg's MNIST MLP over flattened inputs."""
    return MLP(channels * image_size * image_size)


def mlp_small(channels: int, image_size: int) -> MLP:
    """A 64-32 MLP over flattened inputs (tabular data: fair LG-FedAvg)."""
    return MLP(channels * image_size * image_size, (64, 32))
