"""Reference models for the demo, tests and benchmarks, built with random weights.

Nothing is downloaded: transformers models come from their default configs, ResNet-50 is
written out in plain ``torch.nn`` (torchvision is not a dependency).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, inplanes: int, planes: int, stride: int = 1, downsample: nn.Module | None = None):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, planes * 4, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(planes * 4)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + identity)


class ResNet(nn.Module):
    """ResNet-50 (v1.5: stride on the 3x3 conv), the torchvision layout in plain torch.nn."""

    def __init__(self, layers: tuple[int, ...] = (3, 4, 6, 3), num_classes: int = 1000):
        super().__init__()
        self.inplanes = 64
        self.conv1 = nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
        self.layer1 = self._layer(64, layers[0])
        self.layer2 = self._layer(128, layers[1], stride=2)
        self.layer3 = self._layer(256, layers[2], stride=2)
        self.layer4 = self._layer(512, layers[3], stride=2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(512 * 4, num_classes)

    def _layer(self, planes: int, blocks: int, stride: int = 1) -> nn.Sequential:
        downsample = None
        if stride != 1 or self.inplanes != planes * 4:
            downsample = nn.Sequential(
                nn.Conv2d(self.inplanes, planes * 4, 1, stride=stride, bias=False), nn.BatchNorm2d(planes * 4)
            )
        layers = [Bottleneck(self.inplanes, planes, stride, downsample)]
        self.inplanes = planes * 4
        layers += [Bottleneck(self.inplanes, planes) for _ in range(1, blocks)]
        return nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def resnet50() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    model = ResNet()
    # Non-trivial running statistics, so batch norm is really exercised.
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.1, 0.1)
            m.running_var.uniform_(0.5, 1.5)
            nn.init.uniform_(m.weight, 0.5, 1.5)
    return model.eval(), (torch.randn(1, 3, 224, 224),)


def mlp() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    model = nn.Sequential(nn.Linear(512, 2048), nn.ReLU(), nn.Linear(2048, 2048), nn.ReLU(), nn.Linear(2048, 512))
    return model.eval(), (torch.randn(32, 512),)


def bert(seq: int = 128, **config: object) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    from transformers import BertConfig, BertModel

    cfg = BertConfig(**config)
    return BertModel(cfg).eval(), (torch.randint(0, cfg.vocab_size, (1, seq)),)


def gpt2(seq: int = 128, **config: object) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    from transformers import GPT2Config, GPT2Model

    cfg = GPT2Config(**config)
    return GPT2Model(cfg).eval(), (torch.randint(0, cfg.vocab_size, (1, seq)),)


MODELS: dict[str, Callable[[], tuple[nn.Module, tuple[torch.Tensor, ...]]]] = {
    "bert": bert,
    "gpt2": gpt2,
    "resnet50": resnet50,
    "mlp": mlp,
}


def build(name: str, seed: int = 0, **kwargs: object) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """Build a reference model and an example input, deterministically.

    ``kwargs`` go to the builder (for transformers models: ``seq`` and config fields, e.g.
    ``num_hidden_layers=2`` for a fast test-sized BERT).
    """
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; valid: {', '.join(MODELS)}")
    torch.manual_seed(seed)
    return MODELS[name](**kwargs)


class LastHiddenState(nn.Module):
    """A transformers model seen as ``ids -> last_hidden_state``, with an explicit all-ones
    attention mask and no KV cache: the form ``ov.convert_model`` can trace, so fxvino and
    native conversion are compared on the same computation."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        kwargs: dict[str, object] = {"attention_mask": torch.ones_like(ids)}
        if getattr(self.model.config, "use_cache", None) is not None:
            kwargs["use_cache"] = False
        return self.model(input_ids=ids, **kwargs).last_hidden_state


def comparable(name: str, seed: int = 0, **kwargs: object) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """:func:`build`, with transformers models wrapped in :class:`LastHiddenState`."""
    model, inputs = build(name, seed, **kwargs)
    if name in ("bert", "gpt2"):
        model = LastHiddenState(model).eval()
    return model, inputs
