"""Small vision models written the way torchvision and timm write theirs, for parity tests on CPU.

torchvision and timm may not import here (a CUDA build of torchvision does not load against a CPU
torch), so their patterns are reproduced: ResNet basic and bottleneck blocks with BatchNorm and
in-place ReLUs; MobileNetV3 inverted residuals with depthwise convolutions, hardswish and
squeeze-excitation; EfficientNet MBConv blocks with SiLU, stochastic depth and an in-place dropout
on the flattened pooled features; a ViT with a patch embedding, a class token and attention (through
``nn.MultiheadAttention`` as torchvision, or a fused qkv projection as timm); ConvNeXt blocks with a
7x7 depthwise convolution, channels-last LayerNorm by permutes and layer scale.
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

# ---------------------------------------------------------------------------------------------
# Shared pieces
# ---------------------------------------------------------------------------------------------


class ConvNormActivation(nn.Sequential):
    """Conv2d + BatchNorm2d + activation, padding keeping the size (torchvision's Conv2dNormActivation)."""

    def __init__(self, cin, cout, kernel=3, stride=1, groups=1, activation=nn.ReLU):
        layers = [nn.Conv2d(cin, cout, kernel, stride, (kernel - 1) // 2, groups=groups, bias=False),
                  nn.BatchNorm2d(cout)]
        if activation is not None:
            layers.append(activation(inplace=True))
        super().__init__(*layers)


class SqueezeExcitation(nn.Module):
    def __init__(self, channels, squeeze, activation=nn.ReLU, scale_activation=nn.Sigmoid):
        super().__init__()
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc1 = nn.Conv2d(channels, squeeze, 1)
        self.fc2 = nn.Conv2d(squeeze, channels, 1)
        self.activation = activation()
        self.scale_activation = scale_activation()

    def forward(self, x):
        scale = self.scale_activation(self.fc2(self.activation(self.fc1(self.avgpool(x)))))
        return scale * x


def stochastic_depth(x, p: float, training: bool):
    """Drops whole samples of a residual branch ("row" mode), as torchvision.ops.stochastic_depth."""
    if not training or p == 0.0:
        return x
    survival = 1.0 - p
    noise = torch.empty([x.shape[0]] + [1] * (x.ndim - 1), dtype=x.dtype, device=x.device)
    noise = noise.bernoulli_(survival)
    if survival > 0.0:
        noise.div_(survival)
    return x * noise


# ---------------------------------------------------------------------------------------------
# ResNet
# ---------------------------------------------------------------------------------------------


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, cin, planes, stride=1):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = _downsample(cin, planes * self.expansion, stride)

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        out += identity
        return self.relu(out)


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, cin, planes, stride=1):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, planes * self.expansion, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(planes * self.expansion)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = _downsample(cin, planes * self.expansion, stride)

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        out += identity
        return self.relu(out)


def _downsample(cin, cout, stride):
    if stride == 1 and cin == cout:
        return None
    return nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))


class ResNet(nn.Module):
    def __init__(self, block, layers=(1, 1), width=8, num_classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(3, width, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        blocks, cin = [], width
        for i, n in enumerate(layers):
            planes = width * 2 ** i
            for j in range(n):
                blocks.append(block(cin, planes, 2 if i > 0 and j == 0 else 1))
                cin = planes * block.expansion
        self.layers = nn.Sequential(*blocks)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(cin, num_classes)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.avgpool(self.layers(x))
        return self.fc(torch.flatten(x, 1))


# ---------------------------------------------------------------------------------------------
# MobileNetV3
# ---------------------------------------------------------------------------------------------


class InvertedResidual(nn.Module):
    """Expand (1x1), depthwise (kxk), squeeze-excitation, project (1x1); residual when shapes allow."""

    def __init__(self, cin, expanded, cout, kernel, stride, use_se, activation):
        super().__init__()
        self.use_res_connect = stride == 1 and cin == cout
        layers = []
        if expanded != cin:
            layers.append(ConvNormActivation(cin, expanded, 1, activation=activation))
        layers.append(ConvNormActivation(expanded, expanded, kernel, stride, groups=expanded, activation=activation))
        if use_se:
            layers.append(SqueezeExcitation(expanded, _make_divisible(expanded // 4), scale_activation=nn.Hardsigmoid))
        layers.append(ConvNormActivation(expanded, cout, 1, activation=None))
        self.block = nn.Sequential(*layers)

    def forward(self, x):
        out = self.block(x)
        return out + x if self.use_res_connect else out


def _make_divisible(v, divisor=8):
    return max(divisor, int(v + divisor / 2) // divisor * divisor)


class MobileNetV3(nn.Module):
    def __init__(self, num_classes=10, dropout=0.2):
        super().__init__()
        settings = [(16, 16, 16, 3, 2, True, nn.ReLU), (16, 72, 24, 3, 2, False, nn.ReLU),
                    (24, 88, 24, 3, 1, False, nn.ReLU), (24, 96, 40, 5, 2, True, nn.Hardswish),
                    (40, 240, 40, 5, 1, True, nn.Hardswish)]
        layers = [ConvNormActivation(3, 16, 3, 2, activation=nn.Hardswish)]
        layers += [InvertedResidual(*s) for s in settings]
        layers.append(ConvNormActivation(40, 96, 1, activation=nn.Hardswish))
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(nn.Linear(96, 128), nn.Hardswish(inplace=True),
                                        nn.Dropout(dropout, inplace=True), nn.Linear(128, num_classes))

    def forward(self, x):
        x = self.avgpool(self.features(x))
        return self.classifier(torch.flatten(x, 1))


# ---------------------------------------------------------------------------------------------
# EfficientNet
# ---------------------------------------------------------------------------------------------


class MBConv(nn.Module):
    def __init__(self, cin, cout, expand_ratio, kernel, stride, stochastic_depth_prob):
        super().__init__()
        self.use_res_connect = stride == 1 and cin == cout
        expanded = cin * expand_ratio
        layers = []
        if expanded != cin:
            layers.append(ConvNormActivation(cin, expanded, 1, activation=nn.SiLU))
        layers.append(ConvNormActivation(expanded, expanded, kernel, stride, groups=expanded, activation=nn.SiLU))
        layers.append(SqueezeExcitation(expanded, max(1, cin // 4), activation=nn.SiLU))
        layers.append(ConvNormActivation(expanded, cout, 1, activation=None))
        self.block = nn.Sequential(*layers)
        self.stochastic_depth_prob = stochastic_depth_prob

    def forward(self, x):
        out = self.block(x)
        if self.use_res_connect:
            out = stochastic_depth(out, self.stochastic_depth_prob, self.training) + x
        return out


class EfficientNet(nn.Module):
    """``inplace_dropout=False`` gives the classifier an out-of-place dropout (see tests/test_vision_models.py)."""

    def __init__(self, num_classes=10, dropout=0.2, stochastic_depth_prob=0.2, inplace_dropout=True):
        super().__init__()
        settings = [(16, 8, 1, 3, 1), (8, 8, 1, 3, 1), (8, 16, 6, 3, 2), (16, 16, 6, 5, 1)]
        layers = [ConvNormActivation(3, 16, 3, 2, activation=nn.SiLU)]
        for i, s in enumerate(settings):
            layers.append(MBConv(*s, stochastic_depth_prob * i / len(settings)))
        layers.append(ConvNormActivation(16, 64, 1, activation=nn.SiLU))
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(nn.Dropout(p=dropout, inplace=inplace_dropout), nn.Linear(64, num_classes))

    def forward(self, x):
        x = self.avgpool(self.features(x))
        return self.classifier(torch.flatten(x, 1))  # the in-place dropout updates a view of the pooled features


# ---------------------------------------------------------------------------------------------
# Vision transformer
# ---------------------------------------------------------------------------------------------


class TimmAttention(nn.Module):
    """One qkv projection, heads split by reshape/permute/unbind, scaled_dot_product_attention."""

    def __init__(self, dim, num_heads, attn_drop=0.0, proj_drop=0.0):
        super().__init__()
        self.num_heads, self.head_dim = num_heads, dim // num_heads
        self.qkv = nn.Linear(dim, dim * 3)
        self.attn_drop = attn_drop
        self.proj = nn.Linear(dim, dim)
        self.proj_drop = nn.Dropout(proj_drop)

    def forward(self, x):
        B, N, C = x.shape
        q, k, v = self.qkv(x).reshape(B, N, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4).unbind(0)
        x = F.scaled_dot_product_attention(q, k, v, dropout_p=self.attn_drop if self.training else 0.0)
        return self.proj_drop(self.proj(x.transpose(1, 2).reshape(B, N, C)))


class ViTBlock(nn.Module):
    def __init__(self, dim, num_heads, mlp_dim, dropout, timm_style: bool):
        super().__init__()
        self.timm_style = timm_style
        self.ln_1 = nn.LayerNorm(dim, eps=1e-6)
        if timm_style:
            self.attn = TimmAttention(dim, num_heads, dropout, dropout)
        else:
            self.attn = nn.MultiheadAttention(dim, num_heads, dropout=dropout, batch_first=True)
        self.dropout = nn.Dropout(dropout)
        self.ln_2 = nn.LayerNorm(dim, eps=1e-6)
        self.mlp = nn.Sequential(nn.Linear(dim, mlp_dim), nn.GELU(), nn.Dropout(dropout), nn.Linear(mlp_dim, dim),
                                 nn.Dropout(dropout))

    def forward(self, x):
        y = self.ln_1(x)
        y = self.attn(y) if self.timm_style else self.attn(y, y, y, need_weights=False)[0]
        x = x + self.dropout(y)
        return x + self.mlp(self.ln_2(x))


class VisionTransformer(nn.Module):
    def __init__(self, image_size=32, patch_size=8, dim=32, depth=2, num_heads=4, num_classes=10, dropout=0.1,
                 timm_style=False):
        super().__init__()
        self.patch_size, self.dim = patch_size, dim
        self.conv_proj = nn.Conv2d(3, dim, patch_size, patch_size)
        seq_length = (image_size // patch_size) ** 2 + 1
        self.class_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos_embedding = nn.Parameter(torch.empty(1, seq_length, dim).normal_(std=0.02))
        self.dropout = nn.Dropout(dropout)
        self.layers = nn.Sequential(*[ViTBlock(dim, num_heads, 2 * dim, dropout, timm_style) for _ in range(depth)])
        self.ln = nn.LayerNorm(dim, eps=1e-6)
        self.head = nn.Linear(dim, num_classes)

    def forward(self, x):
        n, _, h, w = x.shape
        x = self.conv_proj(x).reshape(n, self.dim, (h // self.patch_size) * (w // self.patch_size)).permute(0, 2, 1)
        x = torch.cat([self.class_token.expand(n, -1, -1), x], dim=1)
        x = self.ln(self.layers(self.dropout(x + self.pos_embedding)))
        return self.head(x[:, 0])


# ---------------------------------------------------------------------------------------------
# ConvNeXt
# ---------------------------------------------------------------------------------------------


class LayerNorm2d(nn.LayerNorm):
    """LayerNorm over the channels of an NCHW tensor, by permuting to channels-last and back (timm)."""

    def forward(self, x):
        x = x.permute(0, 2, 3, 1)
        x = F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)
        return x.permute(0, 3, 1, 2)


class CNBlock(nn.Module):
    def __init__(self, dim, layer_scale, stochastic_depth_prob):
        super().__init__()
        self.dwconv = nn.Conv2d(dim, dim, 7, padding=3, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.pwconv1 = nn.Linear(dim, 4 * dim)
        self.act = nn.GELU()
        self.pwconv2 = nn.Linear(4 * dim, dim)
        self.layer_scale = nn.Parameter(torch.ones(dim, 1, 1) * layer_scale)
        self.stochastic_depth_prob = stochastic_depth_prob

    def forward(self, x):
        y = self.dwconv(x).permute(0, 2, 3, 1)
        y = self.pwconv2(self.act(self.pwconv1(self.norm(y)))).permute(0, 3, 1, 2)
        return x + stochastic_depth(self.layer_scale * y, self.stochastic_depth_prob, self.training)


class ConvNeXt(nn.Module):
    """Libraries initialize the layer scale to 1e-6; 0.5 here keeps the blocks' gradients significant."""

    def __init__(self, dims=(16, 32), num_classes=10, layer_scale=0.5, stochastic_depth_prob=0.1):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, dims[0], 4, 4), LayerNorm2d(dims[0], eps=1e-6))
        stages = []
        for i, dim in enumerate(dims):
            if i > 0:
                stages.append(nn.Sequential(LayerNorm2d(dims[i - 1], eps=1e-6), nn.Conv2d(dims[i - 1], dim, 2, 2)))
            stages.append(CNBlock(dim, layer_scale, stochastic_depth_prob * i / len(dims)))
        self.stages = nn.Sequential(*stages)
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), LayerNorm2d(dims[-1], eps=1e-6), nn.Flatten(1),
                                  nn.Linear(dims[-1], num_classes))

    def forward(self, x):
        return self.head(self.stages(self.stem(x)))
