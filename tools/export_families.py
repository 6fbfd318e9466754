"""Writes ``tests/data/families/``: one small, random-weight block per model family of
issue 28 that the fixtures of ``tools/export_models.py`` do not cover, exported as a new
user would (``torch.onnx.export(dynamo=True)``, opset 18, static shapes, eval mode).

The blocks are written here in plain torch, after the reference implementations they
name (diffusers' ResnetBlock2D/Upsample2D, Llama/Mistral's grouped-query attention with
rotary embeddings, Swin's windowed attention, CLIP's quick-GELU encoder layer, Whisper's
conv front end and cross-attention decoder layer, MobileNetV3, EfficientNet, ConvNeXt,
an FPN/DeepLab-style segmentation head, a YOLO-style neck, UNet/VAE blocks, T5's
RMS-norm layer), so that torch alone regenerates them (transformers, diffusers and timm
are not needed). Sizes are small so the files stay under ~200 kB.

Needs torch and onnxscript (NOT dependencies of wavefuse)::

    python3 -m venv --system-site-packages /tmp/venv && /tmp/venv/bin/pip install torch onnxscript
    /tmp/venv/bin/python tools/export_families.py            # every family
    /tmp/venv/bin/python tools/export_families.py swin_window  # some of them
"""
from __future__ import annotations

import json
import math
import os
import sys
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(os.path.dirname(HERE), "tests", "data", "families")
OPSET = 18
SEED = 0


def _nn():
    import torch
    torch.manual_seed(SEED)
    return torch, torch.nn, torch.nn.functional


# ------------------------------------------------------------------ the blocks
def unet_resblock():
    """diffusers ResnetBlock2D + Upsample2D: GroupNorm, SiLU, conv, time embedding,
    nearest 2x upsampling (GroupNorm exports as InstanceNormalization between reshapes,
    or GroupNormalization; upsampling as Resize nearest)."""
    torch, nn, F = _nn()

    class Block(nn.Module):
        def __init__(self, c=32, t=16):
            super().__init__()
            self.n1, self.c1 = nn.GroupNorm(8, c), nn.Conv2d(c, c, 3, padding=1)
            self.temb = nn.Linear(t, c)
            self.n2, self.c2 = nn.GroupNorm(8, c), nn.Conv2d(c, c, 3, padding=1)
            self.up = nn.Conv2d(c, c, 3, padding=1)

        def forward(self, x, temb):
            h = self.c1(F.silu(self.n1(x)))
            h = h + self.temb(F.silu(temb))[:, :, None, None]
            h = self.c2(F.silu(self.n2(h)))
            y = x + h
            return self.up(F.interpolate(y, scale_factor=2.0, mode="nearest"))
    return Block(), (torch.randn(1, 32, 8, 8), torch.randn(1, 16)), ["x", "temb"]


def vae_decoder_block():
    """diffusers' VAE mid-block attention: GroupNorm, single-head spatial self-attention
    over the H*W positions, residual, then a bilinear upsample."""
    torch, nn, F = _nn()

    class Block(nn.Module):
        def __init__(self, c=32):
            super().__init__()
            self.norm = nn.GroupNorm(8, c)
            self.q, self.k, self.v, self.o = (nn.Linear(c, c) for _ in range(4))

        def forward(self, x):
            b, c, h, w = x.shape
            t = self.norm(x).reshape(b, c, h * w).transpose(1, 2)
            a = torch.softmax(self.q(t) @ self.k(t).transpose(1, 2) / math.sqrt(c), -1)
            y = x + self.o(a @ self.v(t)).transpose(1, 2).reshape(b, c, h, w)
            return F.interpolate(y, scale_factor=2.0, mode="bilinear", align_corners=False)
    return Block(), (torch.randn(1, 32, 8, 8),), ["x"]


def _rope(x, cos, sin):
    import torch
    h = x.shape[-1] // 2
    return x * cos + torch.cat([-x[..., h:], x[..., :h]], -1) * sin


def gqa_rope_decoder():
    """Llama/Mistral decoder attention with grouped-query attention (8 query heads, 2
    key/value heads repeated with repeat_interleave), rotary embeddings, causal mask,
    RMSNorm and a SwiGLU MLP."""
    torch, nn, F = _nn()

    class Block(nn.Module):
        def __init__(self, d=64, hq=8, hkv=2, s=16):
            super().__init__()
            self.hq, self.hkv, self.hd = hq, hkv, d // hq
            self.q = nn.Linear(d, d, bias=False)
            self.k = nn.Linear(d, hkv * self.hd, bias=False)
            self.v = nn.Linear(d, hkv * self.hd, bias=False)
            self.o = nn.Linear(d, d, bias=False)
            self.g, self.u, self.dn = (nn.Linear(d, 128, bias=False),
                                       nn.Linear(d, 128, bias=False),
                                       nn.Linear(128, d, bias=False))
            self.w1, self.w2 = nn.Parameter(torch.rand(d) + 0.5), nn.Parameter(torch.rand(d) + 0.5)
            inv = 1.0 / (10000 ** (torch.arange(0, self.hd, 2).float() / self.hd))
            ang = torch.outer(torch.arange(s).float(), inv)
            self.register_buffer("cos", torch.cat([ang, ang], -1).cos())
            self.register_buffer("sin", torch.cat([ang, ang], -1).sin())
            self.register_buffer("mask", torch.full((s, s), float("-inf")).triu(1))

        def rms(self, x, w):
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w

        def forward(self, x):
            b, s, d = x.shape
            h = self.rms(x, self.w1)
            q = self.q(h).view(b, s, self.hq, self.hd).transpose(1, 2)
            k = self.k(h).view(b, s, self.hkv, self.hd).transpose(1, 2)
            v = self.v(h).view(b, s, self.hkv, self.hd).transpose(1, 2)
            q, k = _rope(q, self.cos, self.sin), _rope(k, self.cos, self.sin)
            k = k.repeat_interleave(self.hq // self.hkv, 1)
            v = v.repeat_interleave(self.hq // self.hkv, 1)
            a = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(self.hd) + self.mask, -1)
            x = x + self.o((a @ v).transpose(1, 2).reshape(b, s, d))
            h = self.rms(x, self.w2)
            return x + self.dn(F.silu(self.g(h)) * self.u(h))
    return Block(), (torch.randn(1, 16, 64),), ["x"]


def swin_window():
    """Swin's shifted-window attention block: LayerNorm, cyclic shift (roll), window
    partition, attention with a relative-position bias, window reverse, MLP."""
    torch, nn, F = _nn()

    class Block(nn.Module):
        def __init__(self, c=32, heads=2, win=4, hw=8):
            super().__init__()
            self.c, self.h, self.win, self.hw = c, heads, win, hw
            self.n1, self.n2 = nn.LayerNorm(c), nn.LayerNorm(c)
            self.qkv, self.proj = nn.Linear(c, 3 * c), nn.Linear(c, c)
            self.fc1, self.fc2 = nn.Linear(c, 4 * c), nn.Linear(4 * c, c)
            self.bias = nn.Parameter(torch.randn(heads, win * win, win * win) * 0.1)

        def forward(self, x):
            b, l, c = x.shape
            w, hw = self.win, self.hw
            h = self.n1(x).view(b, hw, hw, c)
            h = torch.roll(h, shifts=(-w // 2, -w // 2), dims=(1, 2))
            h = h.view(b, hw // w, w, hw // w, w, c).permute(0, 1, 3, 2, 4, 5).reshape(-1, w * w, c)
            n = h.shape[0]
            qkv = self.qkv(h).reshape(n, w * w, 3, self.h, c // self.h).permute(2, 0, 3, 1, 4)
            q, k, v = qkv[0], qkv[1], qkv[2]
            a = torch.softmax(q @ k.transpose(-2, -1) * (c // self.h) ** -0.5 + self.bias, -1)
            h = self.proj((a @ v).transpose(1, 2).reshape(n, w * w, c))
            h = h.view(b, hw // w, hw // w, w, w, c).permute(0, 1, 3, 2, 4, 5).reshape(b, hw, hw, c)
            h = torch.roll(h, shifts=(w // 2, w // 2), dims=(1, 2)).reshape(b, l, c)
            x = x + h
            return x + self.fc2(F.gelu(self.fc1(self.n2(x))))
    return Block(), (torch.randn(1, 64, 32),), ["x"]


def clip_encoder_layer():
    """CLIP's encoder layer: pre-LayerNorm attention and quick-GELU (x * sigmoid(1.702 x))
    MLP, with the text tower's causal mask."""
    torch, nn, F = _nn()

    class Block(nn.Module):
        def __init__(self, d=64, heads=4, s=16):
            super().__init__()
            self.h = heads
            self.n1, self.n2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.qkv, self.o = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
            self.register_buffer("mask", torch.full((s, s), float("-inf")).triu(1))

        def forward(self, x):
            b, s, d = x.shape
            q, k, v = self.qkv(self.n1(x)).view(b, s, 3, self.h, d // self.h).permute(2, 0, 3, 1, 4)
            a = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(d // self.h) + self.mask, -1)
            x = x + self.o((a @ v).transpose(1, 2).reshape(b, s, d))
            h = self.fc1(self.n2(x))
            return x + self.fc2(h * torch.sigmoid(1.702 * h))
    return Block(), (torch.randn(1, 16, 64),), ["x"]


def whisper_encoder_front():
    """Whisper's encoder front end: two Conv1d + GELU over the mel frames (the second
    with stride 2), the sinusoidal positions added, one pre-LN attention layer."""
    torch, nn, F = _nn()

    class Block(nn.Module):
        def __init__(self, mels=16, d=64, frames=32):
            super().__init__()
            self.c1 = nn.Conv1d(mels, d, 3, padding=1)
            self.c2 = nn.Conv1d(d, d, 3, stride=2, padding=1)
            self.register_buffer("pos", torch.randn(frames // 2, d))
            self.att = nn.MultiheadAttention(d, 4, batch_first=True)
            self.n = nn.LayerNorm(d)

        def forward(self, x):
            h = F.gelu(self.c2(F.gelu(self.c1(x)))).permute(0, 2, 1) + self.pos
            n = self.n(h)
            return h + self.att(n, n, n, need_weights=False)[0]
    return Block(), (torch.randn(1, 16, 32),), ["mel"]


def whisper_decoder_layer():
    """An encoder-decoder speech model's decoder layer: causal self-attention, then
    cross-attention over the encoder states, then a GELU MLP, each pre-LayerNorm."""
    torch, nn, F = _nn()

    class Block(nn.Module):
        def __init__(self, d=64, s=8):
            super().__init__()
            self.sa = nn.MultiheadAttention(d, 4, batch_first=True)
            self.ca = nn.MultiheadAttention(d, 4, batch_first=True)
            self.n1, self.n2, self.n3 = nn.LayerNorm(d), nn.LayerNorm(d), nn.LayerNorm(d)
            self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
            self.register_buffer("mask", torch.full((s, s), float("-inf")).triu(1))

        def forward(self, x, enc):
            n = self.n1(x)
            x = x + self.sa(n, n, n, attn_mask=self.mask, need_weights=False)[0]
            x = x + self.ca(self.n2(x), enc, enc, need_weights=False)[0]
            return x + self.fc2(F.gelu(self.fc1(self.n3(x))))
    return Block(), (torch.randn(1, 8, 64), torch.randn(1, 16, 64)), ["tokens", "encoder"]


def mobilenet_v3_block():
    """MobileNetV3's inverted residual: 1x1 expand, hard-swish, depthwise 3x3,
    squeeze-and-excite (hard-sigmoid gate), 1x1 project, residual."""
    torch, nn, F = _nn()

    class Block(nn.Module):
        def __init__(self, c=16, e=48):
            super().__init__()
            self.ex, self.bn1 = nn.Conv2d(c, e, 1, bias=False), nn.BatchNorm2d(e)
            self.dw, self.bn2 = nn.Conv2d(e, e, 3, padding=1, groups=e, bias=False), nn.BatchNorm2d(e)
            self.se1, self.se2 = nn.Conv2d(e, 12, 1), nn.Conv2d(12, e, 1)
            self.pr, self.bn3 = nn.Conv2d(e, c, 1, bias=False), nn.BatchNorm2d(c)

        def forward(self, x):
            h = F.hardswish(self.bn1(self.ex(x)))
            h = F.hardswish(self.bn2(self.dw(h)))
            s = F.hardsigmoid(self.se2(F.relu(self.se1(F.adaptive_avg_pool2d(h, 1)))))
            return x + self.bn3(self.pr(h * s))
    return Block(), (torch.randn(1, 16, 16, 16),), ["x"]


def efficientnet_mbconv():
    """EfficientNet's MBConv: SiLU, depthwise 5x5 with stride 2, sigmoid SE gate."""
    torch, nn, F = _nn()

    class Block(nn.Module):
        def __init__(self, c=16, e=64, o=24):
            super().__init__()
            self.ex, self.bn1 = nn.Conv2d(c, e, 1, bias=False), nn.BatchNorm2d(e)
            self.dw, self.bn2 = nn.Conv2d(e, e, 5, 2, 2, groups=e, bias=False), nn.BatchNorm2d(e)
            self.se1, self.se2 = nn.Conv2d(e, 4, 1), nn.Conv2d(4, e, 1)
            self.pr, self.bn3 = nn.Conv2d(e, o, 1, bias=False), nn.BatchNorm2d(o)

        def forward(self, x):
            h = F.silu(self.bn1(self.ex(x)))
            h = F.silu(self.bn2(self.dw(h)))
            s = torch.sigmoid(self.se2(F.silu(self.se1(h.mean((2, 3), keepdim=True)))))
            return self.bn3(self.pr(h * s))
    return Block(), (torch.randn(1, 16, 16, 16),), ["x"]


def convnext_block():
    """ConvNeXt's block: depthwise 7x7, channels-last LayerNorm (permute), 4x MLP with
    GELU, layer scale, residual."""
    torch, nn, F = _nn()

    class Block(nn.Module):
        def __init__(self, c=32):
            super().__init__()
            self.dw = nn.Conv2d(c, c, 7, padding=3, groups=c)
            self.n = nn.LayerNorm(c, eps=1e-6)
            self.fc1, self.fc2 = nn.Linear(c, 4 * c), nn.Linear(4 * c, c)
            self.gamma = nn.Parameter(torch.rand(c))

        def forward(self, x):
            h = self.dw(x).permute(0, 2, 3, 1)
            h = self.gamma * self.fc2(F.gelu(self.fc1(self.n(h))))
            return x + h.permute(0, 3, 1, 2)
    return Block(), (torch.randn(1, 32, 14, 14),), ["x"]


def segmentation_head():
    """An FPN / DeepLab-style segmentation head: a lateral 1x1 conv on the fine feature,
    the coarse feature upsampled bilinearly and added, a 3x3 conv, class logits
    upsampled to the input size (align_corners=False)."""
    torch, nn, F = _nn()

    class Block(nn.Module):
        def __init__(self, c=16, k=5):
            super().__init__()
            self.lat, self.top = nn.Conv2d(c, c, 1), nn.Conv2d(2 * c, c, 1)
            self.smooth, self.cls = nn.Conv2d(c, c, 3, padding=1), nn.Conv2d(c, k, 1)

        def forward(self, fine, coarse):
            h = self.lat(fine) + F.interpolate(self.top(coarse), size=fine.shape[-2:],
                                               mode="bilinear", align_corners=False)
            y = self.cls(F.relu(self.smooth(h)))
            return F.interpolate(y, scale_factor=4.0, mode="bilinear", align_corners=False)
    return Block(), (torch.randn(1, 16, 8, 8), torch.randn(1, 32, 4, 4)), ["fine", "coarse"]


def yolo_neck():
    """A YOLO-style (v5/v8) neck step: conv + BN + SiLU, nearest 2x upsample, concat
    with the skip feature, a C2f-like split / bottleneck / concat, and a detection conv."""
    torch, nn, F = _nn()

    def cbs(i, o, k=1):
        return nn.Sequential(nn.Conv2d(i, o, k, padding=k // 2, bias=False),
                             nn.BatchNorm2d(o), nn.SiLU())

    class Block(nn.Module):
        def __init__(self, c=16):
            super().__init__()
            self.reduce, self.c1 = cbs(2 * c, c), cbs(2 * c, 2 * c)
            self.b1, self.b2 = cbs(c, c, 3), cbs(c, c, 3)
            self.c2, self.det = cbs(3 * c, c), nn.Conv2d(c, 3 * 8, 1)

        def forward(self, deep, skip):
            u = F.interpolate(self.reduce(deep), scale_factor=2.0, mode="nearest")
            a, b = self.c1(torch.cat([u, skip], 1)).chunk(2, 1)
            b2 = b + self.b2(self.b1(b))
            return self.det(self.c2(torch.cat([a, b, b2], 1)))
    return Block(), (torch.randn(1, 32, 4, 4), torch.randn(1, 16, 8, 8)), ["deep", "skip"]


def unet_down_up():
    """A small UNet: conv + InstanceNorm + LeakyReLU down path with max pooling, a
    transposed-conv-free up path (bilinear upsample + conv), skip concatenation."""
    torch, nn, F = _nn()

    def blk(i, o):
        return nn.Sequential(nn.Conv2d(i, o, 3, padding=1), nn.InstanceNorm2d(o, affine=True),
                             nn.LeakyReLU(0.01))

    class Net(nn.Module):
        def __init__(self, c=8):
            super().__init__()
            self.d1, self.d2 = blk(3, c), blk(c, 2 * c)
            self.u1, self.out = blk(3 * c, c), nn.Conv2d(c, 2, 1)

        def forward(self, x):
            a = self.d1(x)
            b = self.d2(F.max_pool2d(a, 2))
            u = F.interpolate(b, scale_factor=2.0, mode="bilinear", align_corners=True)
            return self.out(self.u1(torch.cat([u, a], 1)))
    return Net(), (torch.randn(1, 3, 16, 16),), ["x"]


def t5_layer():
    """T5's encoder layer: RMS norm without mean subtraction, attention with a learned
    relative-position bias added to the scores and no scaling, ReLU feed-forward."""
    torch, nn, F = _nn()

    class Block(nn.Module):
        def __init__(self, d=64, heads=4, s=16):
            super().__init__()
            self.h = heads
            self.q, self.k, self.v, self.o = (nn.Linear(d, d, bias=False) for _ in range(4))
            self.wi, self.wo = nn.Linear(d, 128, bias=False), nn.Linear(128, d, bias=False)
            self.w1, self.w2 = nn.Parameter(torch.rand(d) + 0.5), nn.Parameter(torch.rand(d) + 0.5)
            self.bias = nn.Parameter(torch.randn(1, heads, s, s) * 0.1)

        def rms(self, x, w):
            return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6))

        def forward(self, x):
            b, s, d = x.shape
            h = self.rms(x, self.w1)
            sp = lambda t: t.view(b, s, self.h, d // self.h).transpose(1, 2)
            a = torch.softmax(sp(self.q(h)) @ sp(self.k(h)).transpose(-1, -2) + self.bias, -1)
            x = x + self.o((a @ sp(self.v(h))).transpose(1, 2).reshape(b, s, d))
            return x + self.wo(F.relu(self.wi(self.rms(x, self.w2))))
    return Block(), (torch.randn(1, 16, 64),), ["x"]


def densenet_block():
    """DenseNet's dense block (torchvision's _DenseLayer x 2): BN + ReLU + 1x1 bottleneck
    conv, BN + ReLU + 3x3 conv to the growth rate, each layer's output concatenated to
    its input features."""
    torch, nn, F = _nn()

    class Layer(nn.Module):
        def __init__(self, c, growth=8, bn_size=4):
            super().__init__()
            self.n1, self.c1 = nn.BatchNorm2d(c), nn.Conv2d(c, bn_size * growth, 1, bias=False)
            self.n2 = nn.BatchNorm2d(bn_size * growth)
            self.c2 = nn.Conv2d(bn_size * growth, growth, 3, padding=1, bias=False)

        def forward(self, feats):
            h = self.c1(F.relu(self.n1(torch.cat(feats, 1))))
            return self.c2(F.relu(self.n2(h)))

    class Block(nn.Module):
        def __init__(self, c=16, growth=8):
            super().__init__()
            self.l1, self.l2 = Layer(c, growth), Layer(c + growth, growth)

        def forward(self, x):
            feats = [x]
            feats.append(self.l1(feats))
            feats.append(self.l2(feats))
            return torch.cat(feats, 1)
    return Block(), (torch.randn(1, 16, 8, 8),), ["x"]


def shufflenet_v2_unit():
    """ShuffleNetV2's stride-1 unit (torchvision's InvertedResidual): channel split, 1x1
    conv + BN + ReLU, depthwise 3x3 + BN, 1x1 conv + BN + ReLU on one half, concat, and
    the channel shuffle (reshape, transpose, reshape)."""
    torch, nn, F = _nn()

    class Block(nn.Module):
        def __init__(self, c=32):
            super().__init__()
            b = c // 2
            self.branch = nn.Sequential(
                nn.Conv2d(b, b, 1, bias=False), nn.BatchNorm2d(b), nn.ReLU(),
                nn.Conv2d(b, b, 3, padding=1, groups=b, bias=False), nn.BatchNorm2d(b),
                nn.Conv2d(b, b, 1, bias=False), nn.BatchNorm2d(b), nn.ReLU())

        def forward(self, x):
            x1, x2 = x.chunk(2, dim=1)
            out = torch.cat((x1, self.branch(x2)), dim=1)
            n, c, h, w = out.shape
            return out.view(n, 2, c // 2, h, w).transpose(1, 2).reshape(n, c, h, w)
    return Block(), (torch.randn(1, 32, 8, 8),), ["x"]


def segformer_block():
    """SegFormer's (MiT) encoder block: efficient self-attention whose keys and values
    come from a strided conv (spatial reduction) + LayerNorm, then the Mix-FFN (linear,
    depthwise 3x3 conv over the token grid, GELU, linear), each pre-LayerNorm."""
    torch, nn, F = _nn()

    class Block(nn.Module):
        def __init__(self, c=32, heads=2, sr=2, hw=8):
            super().__init__()
            self.c, self.h, self.hw = c, heads, hw
            self.n1, self.n2, self.nsr = nn.LayerNorm(c), nn.LayerNorm(c), nn.LayerNorm(c)
            self.q, self.kv, self.o = nn.Linear(c, c), nn.Linear(c, 2 * c), nn.Linear(c, c)
            self.sr = nn.Conv2d(c, c, sr, stride=sr)
            self.fc1, self.fc2 = nn.Linear(c, 4 * c), nn.Linear(4 * c, c)
            self.dw = nn.Conv2d(4 * c, 4 * c, 3, padding=1, groups=4 * c)

        def forward(self, x):
            b, n, c = x.shape
            hd = c // self.h
            t = self.n1(x)
            q = self.q(t).reshape(b, n, self.h, hd).permute(0, 2, 1, 3)
            g = t.permute(0, 2, 1).reshape(b, c, self.hw, self.hw)
            r = self.nsr(self.sr(g).reshape(b, c, -1).permute(0, 2, 1))
            k, v = self.kv(r).reshape(b, -1, 2, self.h, hd).permute(2, 0, 3, 1, 4)
            a = torch.softmax(q @ k.transpose(-2, -1) * hd ** -0.5, -1)
            x = x + self.o((a @ v).transpose(1, 2).reshape(b, n, c))
            h = self.fc1(self.n2(x))
            h = h.transpose(1, 2).reshape(b, 4 * c, self.hw, self.hw)
            h = self.dw(h).flatten(2).transpose(1, 2)
            return x + self.fc2(F.gelu(h))
    return Block(), (torch.randn(1, 64, 32),), ["x"]


def gemma_mlp():
    """Gemma's decoder MLP: RMSNorm with a (1 + weight) scale, GeGLU (tanh-approximated
    GELU gate times the up projection), down projection, residual."""
    torch, nn, F = _nn()

    class Block(nn.Module):
        def __init__(self, d=64, ff=128):
            super().__init__()
            self.g, self.u = nn.Linear(d, ff, bias=False), nn.Linear(d, ff, bias=False)
            self.dn = nn.Linear(ff, d, bias=False)
            self.w = nn.Parameter(torch.randn(d) * 0.1)

        def forward(self, x):
            h = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * (1.0 + self.w)
            return x + self.dn(F.gelu(self.g(h), approximate="tanh") * self.u(h))
    return Block(), (torch.randn(1, 16, 64),), ["x"]


def mlp_mixer_block():
    """MLP-Mixer's block: LayerNorm, token-mixing MLP across the patches (transpose,
    GELU), residual, LayerNorm, channel-mixing MLP, residual."""
    torch, nn, F = _nn()

    class Block(nn.Module):
        def __init__(self, tokens=16, c=32, tok_h=32, ch_h=128):
            super().__init__()
            self.n1, self.n2 = nn.LayerNorm(c), nn.LayerNorm(c)
            self.t1, self.t2 = nn.Linear(tokens, tok_h), nn.Linear(tok_h, tokens)
            self.c1, self.c2 = nn.Linear(c, ch_h), nn.Linear(ch_h, c)

        def forward(self, x):
            h = self.n1(x).transpose(1, 2)
            x = x + self.t2(F.gelu(self.t1(h))).transpose(1, 2)
            return x + self.c2(F.gelu(self.c1(self.n2(x))))
    return Block(), (torch.randn(1, 16, 32),), ["x"]


def phi_decoder_layer():
    """Phi-2's decoder layer: one LayerNorm feeding attention and the MLP in parallel,
    partial rotary embeddings (the first half of each head's dims rotated, the rest
    passed through), causal mask, tanh-GELU MLP, both added to the residual."""
    torch, nn, F = _nn()

    class Block(nn.Module):
        def __init__(self, d=64, heads=4, s=16, rot=8):
            super().__init__()
            self.h, self.hd, self.rot = heads, d // heads, rot
            self.n = nn.LayerNorm(d)
            self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))
            self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
            inv = 1.0 / (10000 ** (torch.arange(0, rot, 2).float() / rot))
            ang = torch.outer(torch.arange(s).float(), inv)
            self.register_buffer("cos", torch.cat([ang, ang], -1).cos())
            self.register_buffer("sin", torch.cat([ang, ang], -1).sin())
            self.register_buffer("mask", torch.full((s, s), float("-inf")).triu(1))

        def partial_rope(self, x):
            r, p = x[..., :self.rot], x[..., self.rot:]
            return torch.cat([_rope(r, self.cos, self.sin), p], -1)

        def forward(self, x):
            b, s, d = x.shape
            h = self.n(x)
            sp = lambda t: t.view(b, s, self.h, self.hd).transpose(1, 2)
            q, k = self.partial_rope(sp(self.q(h))), self.partial_rope(sp(self.k(h)))
            a = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(self.hd) + self.mask, -1)
            att = self.o((a @ sp(self.v(h))).transpose(1, 2).reshape(b, s, d))
            return x + att + self.fc2(F.gelu(self.fc1(h), approximate="tanh"))
    return Block(), (torch.randn(1, 16, 64),), ["x"]


def bart_decoder_layer():
    """BART/mBART's decoder layer (post-LayerNorm as BART, GELU): causal self-attention
    with the 1/sqrt(d) scale on the queries, residual + LayerNorm, cross-attention over
    the encoder states, residual + LayerNorm, GELU feed-forward, residual + LayerNorm."""
    torch, nn, F = _nn()

    class Attn(nn.Module):
        def __init__(self, d, heads):
            super().__init__()
            self.h, self.hd = heads, d // heads
            self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))

        def forward(self, x, kv, mask=None):
            b, s, d = x.shape
            sp = lambda t: t.view(b, -1, self.h, self.hd).transpose(1, 2)
            q = sp(self.q(x) * self.hd ** -0.5)
            w = q @ sp(self.k(kv)).transpose(-1, -2)
            if mask is not None:
                w = w + mask
            return self.o((torch.softmax(w, -1) @ sp(self.v(kv))).transpose(1, 2).reshape(b, s, d))

    class Block(nn.Module):
        def __init__(self, d=64, heads=4, s=8):
            super().__init__()
            self.sa, self.ca = Attn(d, heads), Attn(d, heads)
            self.n1, self.n2, self.n3 = nn.LayerNorm(d), nn.LayerNorm(d), nn.LayerNorm(d)
            self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
            self.register_buffer("mask", torch.full((s, s), float("-inf")).triu(1))

        def forward(self, x, enc):
            x = self.n1(x + self.sa(x, x, self.mask))
            x = self.n2(x + self.ca(x, enc))
            return self.n3(x + self.fc2(F.gelu(self.fc1(x))))
    return Block(), (torch.randn(1, 8, 64), torch.randn(1, 16, 64)), ["tokens", "encoder"]


def regnet_y_block():
    """RegNetY's bottleneck (torchvision's ResBottleneckBlock): 1x1 conv + BN + ReLU,
    grouped 3x3 conv (group width 8) + BN + ReLU, squeeze-and-excite (sigmoid gate),
    1x1 conv + BN, residual, ReLU."""
    torch, nn, F = _nn()

    class Block(nn.Module):
        def __init__(self, c=32, gw=8, se=8):
            super().__init__()
            self.a, self.na = nn.Conv2d(c, c, 1, bias=False), nn.BatchNorm2d(c)
            self.b = nn.Conv2d(c, c, 3, padding=1, groups=c // gw, bias=False)
            self.nb = nn.BatchNorm2d(c)
            self.se1, self.se2 = nn.Conv2d(c, se, 1), nn.Conv2d(se, c, 1)
            self.c, self.nc = nn.Conv2d(c, c, 1, bias=False), nn.BatchNorm2d(c)

        def forward(self, x):
            h = F.relu(self.na(self.a(x)))
            h = F.relu(self.nb(self.b(h)))
            h = h * torch.sigmoid(self.se2(F.relu(self.se1(F.adaptive_avg_pool2d(h, 1)))))
            return F.relu(x + self.nc(self.c(h)))
    return Block(), (torch.randn(1, 32, 8, 8),), ["x"]


def inception_block():
    """Inception-v3's InceptionA (torchvision): four branches, 1x1; 1x1 then 5x5; 1x1
    then two 3x3; 3x3 average pooling then 1x1, each conv + BN + ReLU, concatenated."""
    torch, nn, F = _nn()

    def cbr(i, o, k):
        return nn.Sequential(nn.Conv2d(i, o, k, padding=k // 2, bias=False),
                             nn.BatchNorm2d(o, eps=0.001), nn.ReLU())

    class Block(nn.Module):
        def __init__(self, c=16):
            super().__init__()
            self.b1 = cbr(c, 8, 1)
            self.b5 = nn.Sequential(cbr(c, 6, 1), cbr(6, 8, 5))
            self.b3 = nn.Sequential(cbr(c, 8, 1), cbr(8, 12, 3), cbr(12, 12, 3))
            self.bp = cbr(c, 4, 1)

        def forward(self, x):
            p = F.avg_pool2d(x, 3, stride=1, padding=1)
            return torch.cat([self.b1(x), self.b5(x), self.b3(x), self.bp(p)], 1)
    return Block(), (torch.randn(1, 16, 8, 8),), ["x"]


FAMILIES = {f.__name__: f for f in (
    unet_resblock, vae_decoder_block, gqa_rope_decoder, swin_window, clip_encoder_layer,
    whisper_encoder_front, whisper_decoder_layer, mobilenet_v3_block, efficientnet_mbconv,
    convnext_block, segmentation_head, yolo_neck, unet_down_up, t5_layer, densenet_block,
    shufflenet_v2_unit, segformer_block, gemma_mlp, mlp_mixer_block, phi_decoder_layer,
    bart_decoder_layer, regnet_y_block, inception_block)}


#: blocks also exported in float16 (``NAME_f16.onnx``: the module and its inputs
#: ``.half()``), for the float16 path of import, reference and simulation
HALF = ("clip_encoder_layer", "convnext_block", "unet_resblock")


def export(name: str, dest: str = DATA) -> dict:
    import onnx
    import torch
    half = name.endswith("_f16")
    base = name[:-4] if half else name
    module, args, names = FAMILIES[base]()
    module.eval()
    for m in module.modules():  # fresh BatchNorm statistics would hide a wrong folding
        if isinstance(m, torch.nn.BatchNorm2d):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 1.5)
    if half:
        module, args = module.half(), tuple(a.half() for a in args)
    path = os.path.join(dest, f"{name}.onnx")
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, args, path, input_names=names, opset_version=OPSET,
                          dynamo=True, external_data=False)
    model = onnx.load(path)
    return {"file": f"{name}.onnx", "doc": (FAMILIES[base].__doc__ or "").split("\n")[0],
            "dtype": "float16" if half else "float32",
            "exporter": "torch.onnx.export(dynamo=True)", "opset": OPSET,
            "torch": torch.__version__, "ops": sorted({n.op_type for n in model.graph.node}),
            "bytes": os.path.getsize(path)}


def main(argv: list[str]) -> int:
    import onnx
    import torch
    os.makedirs(DATA, exist_ok=True)
    names = argv or list(FAMILIES) + [f"{n}_f16" for n in HALF]
    manifest_path = os.path.join(DATA, "MANIFEST.json")
    manifest = json.load(open(manifest_path)) if os.path.exists(manifest_path) else {}
    fixtures = manifest.get("fixtures", {})
    for n in names:
        fixtures[n] = export(n)
        print(f"{n}: {fixtures[n]['bytes']} bytes, ops {', '.join(fixtures[n]['ops'])}")
    # ``versions`` is the run that wrote every block; a partial run records its torch
    # on each block it wrote (``torch``) and leaves the versions of the others as they were
    versions = manifest.get("versions") if argv and manifest else None
    manifest = {"script": "tools/export_families.py", "opset_requested": OPSET,
                "versions": versions or {"torch": torch.__version__, "onnx": onnx.__version__},
                "fixtures": dict(sorted(fixtures.items()))}
    with open(manifest_path, "w") as f:
        json.dump(manifest, f, indent=1)
        f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
