"""Writes the ONNX fixtures in ``tests/data/``: small, random-weight, static-shape exports of
real architectures, as ``torch.onnx.export`` gives them to a new user.

Needs torch and transformers, which are NOT dependencies of wavefuse or of its test extra
(the tests only read the committed ``.onnx`` files). To regenerate::

    python3 -m venv /work/venv-export
    /work/venv-export/bin/pip install torch==2.13.0 transformers onnx onnxscript numpy
    /work/venv-export/bin/python tools/export_models.py            # all fixtures
    /work/venv-export/bin/python tools/export_models.py gpt2_block  # some of them
    /work/venv-export/bin/python tools/export_models.py --full /tmp/models  # full size

``--full DIR`` writes the full-size models instead (issue 12's BERT-base at sequence
128, GPT-2 small at 128 tokens, ViT-B/16 and ResNet-50 at 224x224, and issue 27's
MobileNetV2 and ConvNeXt-T at 224x224; the transformers default configurations, random
weights): hundreds of MB, so never into ``tests/data``;
their manifest goes to ``DIR/MANIFEST.json``. ``tools/model_report.py`` reads them.

Every module is built from a small configuration with a fixed seed, in eval mode, and
exported with fixed input shapes. The exporter used for each fixture is written into
``tests/data/MANIFEST.json`` together with the torch, transformers and onnx versions;
``tests/data/README.md`` explains the choice (the legacy TorchScript exporter,
``dynamo=False``, unless noted: it needs no onnxscript rewriter passes and gives the
Split/Slice/Concat/Gather patterns issue 12 names).
"""
from __future__ import annotations

import json
import os
import sys
import warnings

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(os.path.dirname(HERE), "tests", "data")
OPSET = 18
SEED = 0


def _torch():
    import torch
    torch.manual_seed(SEED)
    return torch


class _First:
    """Wraps a module whose forward returns a tuple/ModelOutput: the first tensor only."""

    @staticmethod
    def wrap(module, call=None):
        import torch

        class Wrapped(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.inner = module

            def forward(self, *args):
                out = call(self.inner, *args) if call else self.inner(*args)
                while isinstance(out, (tuple, list)):
                    out = out[0]
                if hasattr(out, "last_hidden_state"):
                    out = out.last_hidden_state
                return out
        return Wrapped().eval()


# ------------------------------------------------------------------ fixture builders
# Each returns (module, example inputs, input names, exporter options).

def gpt2_config(layers=1):
    from transformers import GPT2Config
    return GPT2Config(n_embd=64, n_head=4, n_layer=layers, n_positions=32, vocab_size=128,
                      attn_implementation="eager", resid_pdrop=0.0, embd_pdrop=0.0,
                      attn_pdrop=0.0)


def bert_config(layers=1):
    from transformers import BertConfig
    return BertConfig(hidden_size=64, num_attention_heads=4, num_hidden_layers=layers,
                      intermediate_size=256, vocab_size=128, max_position_embeddings=32,
                      attn_implementation="eager", hidden_dropout_prob=0.0,
                      attention_probs_dropout_prob=0.0)


def vit_config(layers=1):
    from transformers import ViTConfig
    return ViTConfig(hidden_size=64, num_attention_heads=4, num_hidden_layers=layers,
                     intermediate_size=256, image_size=32, patch_size=8, num_channels=3,
                     attn_implementation="eager", hidden_dropout_prob=0.0,
                     attention_probs_dropout_prob=0.0)


def resnet_config(layer_type="basic", depths=(1, 1), hidden=(16, 32)):
    from transformers import ResNetConfig
    return ResNetConfig(num_channels=3, embedding_size=16, hidden_sizes=list(hidden),
                        depths=list(depths), layer_type=layer_type)


def b_gpt2_block():
    torch = _torch()
    from transformers.models.gpt2.modeling_gpt2 import GPT2Block
    m = _First.wrap(GPT2Block(gpt2_config()).eval())
    return m, (torch.randn(1, 16, 64),), ["hidden_states"]


def b_bert_layer():
    torch = _torch()
    from transformers.models.bert.modeling_bert import BertLayer
    m = _First.wrap(BertLayer(bert_config()).eval())
    return m, (torch.randn(1, 16, 64),), ["hidden_states"]


def b_llama_block():
    """A Llama decoder layer; the rotary cos/sin for positions 0..15 are computed inside the
    wrapper (constant-folded by the exporter), so rotate_half's Slice/Neg/Concat on q and k
    is what remains."""
    torch = _torch()
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRotaryEmbedding
    cfg = LlamaConfig(hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                      intermediate_size=128, num_hidden_layers=1, vocab_size=128,
                      max_position_embeddings=32, attn_implementation="eager")
    layer = LlamaDecoderLayer(cfg, layer_idx=0).eval()
    rope = LlamaRotaryEmbedding(cfg)

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layer, self.rope = layer, rope

        def forward(self, x):
            pos = torch.arange(x.shape[1]).unsqueeze(0)
            cos, sin = self.rope(x, pos)
            out = self.layer(x, position_embeddings=(cos, sin), attention_mask=None,
                             position_ids=pos)
            while isinstance(out, (tuple, list)):
                out = out[0]
            return out
    return Block().eval(), (torch.randn(1, 16, 64),), ["hidden_states"]


def b_vit_block():
    torch = _torch()
    from transformers.models.vit.modeling_vit import ViTLayer
    m = _First.wrap(ViTLayer(vit_config()).eval())
    return m, (torch.randn(1, 17, 64),), ["hidden_states"]


def b_resnet_basic():
    torch = _torch()
    from transformers.models.resnet.modeling_resnet import ResNetBasicLayer
    m = _First.wrap(ResNetBasicLayer(32, 32, stride=1).eval())
    _randomise_bn(m)
    return m, (torch.randn(1, 32, 14, 14),), ["x"]


def b_resnet_bottleneck():
    torch = _torch()
    from transformers.models.resnet.modeling_resnet import ResNetBottleNeckLayer
    m = _First.wrap(ResNetBottleNeckLayer(32, 64, stride=2, reduction=4).eval())
    _randomise_bn(m)
    return m, (torch.randn(1, 32, 14, 14),), ["x"]


def b_conv_bn_relu():
    torch = _torch()
    m = torch.nn.Sequential(torch.nn.Conv2d(16, 32, 3, padding=1, bias=False),
                            torch.nn.BatchNorm2d(32), torch.nn.ReLU()).eval()
    _randomise_bn(m)
    return m, (torch.randn(1, 16, 14, 14),), ["x"]


def b_bn_relu_pool():
    """BatchNormalization kept as a node (no conv before it to fold into), then pools."""
    torch = _torch()

    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.bn = torch.nn.BatchNorm2d(8)

        def forward(self, x):
            y = torch.relu(self.bn(x))
            return (torch.nn.functional.max_pool2d(y, 3, 2, 1)
                    + torch.nn.functional.avg_pool2d(y, 3, 2, 1))
    m = M().eval()
    _randomise_bn(m)
    return m, (torch.randn(1, 8, 12, 12),), ["x"]


def b_softmax():
    torch = _torch()

    class M(torch.nn.Module):
        def forward(self, x):
            return torch.softmax(x, dim=-1)
    return M().eval(), (torch.randn(4, 32, 64),), ["x"]


def b_layernorm():
    torch = _torch()
    m = torch.nn.LayerNorm(64).eval()
    with torch.no_grad():
        m.weight.uniform_(0.5, 1.5)
        m.bias.uniform_(-0.5, 0.5)
    return m, (torch.randn(2, 16, 64),), ["x"]


def b_nhwc_conv():
    """The seed's graph as ONNX gives it: NHWC input -> Transpose -> 1x1 Conv (NCHW only in
    ONNX) -> Transpose -> Add residual -> Relu."""
    torch = _torch()

    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(64, 32, 1, bias=False)

        def forward(self, x, residual):
            y = self.conv(x.permute(0, 3, 1, 2)).permute(0, 2, 3, 1)
            return torch.relu(y + residual)
    return M().eval(), (torch.randn(1, 7, 7, 64), torch.randn(1, 7, 7, 32)), ["x", "residual"]


def b_bert_2layer():
    torch = _torch()
    from transformers import BertModel
    m = _First.wrap(BertModel(bert_config(2), add_pooling_layer=False).eval())
    ids = torch.randint(0, 128, (1, 16))
    return m, (ids,), ["input_ids"]


def b_bert_sdpa():
    """BERT (2 layers) with torch's scaled_dot_product_attention: the exporter multiplies
    q and k by sqrt(scale) after the head split and transpose (issue 12, item 3: that
    multiply joins the projection's epilogue through the split reshape)."""
    torch = _torch()
    from transformers import BertModel
    cfg = bert_config(2)
    cfg._attn_implementation = "sdpa"
    m = _First.wrap(BertModel(cfg, add_pooling_layer=False).eval())
    ids = torch.randint(0, 128, (1, 16))
    return m, (ids,), ["input_ids"]


def b_gpt2_2block():
    torch = _torch()
    from transformers import GPT2Model
    m = _First.wrap(GPT2Model(gpt2_config(2)).eval(),
                    call=lambda inner, ids: inner(input_ids=ids, use_cache=False))
    ids = torch.randint(0, 128, (1, 16))
    return m, (ids,), ["input_ids"]


def b_resnet_tiny():
    torch = _torch()
    from transformers import ResNetModel
    m = _First.wrap(ResNetModel(resnet_config()).eval())
    _randomise_bn(m)
    return m, (torch.randn(1, 3, 32, 32),), ["pixel_values"]


def b_vit_tiny():
    torch = _torch()
    from transformers import ViTModel
    m = _First.wrap(ViTModel(vit_config(2), add_pooling_layer=False).eval())
    return m, (torch.randn(1, 3, 32, 32),), ["pixel_values"]


def _randomise_bn(module):
    """Fresh BatchNorm layers have mean 0 / var 1, which would hide a wrong folding."""
    import torch
    g = torch.Generator().manual_seed(SEED)
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                n = m.num_features
                m.running_mean.copy_(torch.rand(n, generator=g) - 0.5)
                m.running_var.copy_(torch.rand(n, generator=g) + 0.5)
                m.weight.copy_(torch.rand(n, generator=g) + 0.5)
                m.bias.copy_(torch.rand(n, generator=g) - 0.5)


FIXTURES = {
    "gpt2_block": b_gpt2_block, "bert_layer": b_bert_layer, "llama_block": b_llama_block,
    "vit_block": b_vit_block, "resnet_basic": b_resnet_basic,
    "resnet_bottleneck": b_resnet_bottleneck, "conv_bn_relu": b_conv_bn_relu,
    "bn_relu_pool": b_bn_relu_pool, "softmax": b_softmax, "layernorm": b_layernorm,
    "conv_bn_relu_keep": b_conv_bn_relu, "nhwc_conv": b_nhwc_conv, "bert_2layer": b_bert_2layer, "gpt2_2block": b_gpt2_2block,
    "resnet_tiny": b_resnet_tiny, "vit_tiny": b_vit_tiny, "bert_sdpa": b_bert_sdpa,
}


def b_bert_base():
    torch = _torch()
    from transformers import BertConfig, BertModel
    m = _First.wrap(BertModel(BertConfig(attn_implementation="eager"),
                              add_pooling_layer=False).eval())
    return m, (torch.randint(0, 30000, (1, 128)),), ["input_ids"]


def b_gpt2_small():
    torch = _torch()
    from transformers import GPT2Config, GPT2Model
    m = _First.wrap(GPT2Model(GPT2Config(attn_implementation="eager")).eval(),
                    call=lambda inner, ids: inner(input_ids=ids, use_cache=False))
    return m, (torch.randint(0, 50000, (1, 128)),), ["input_ids"]


def b_vit_b16():
    torch = _torch()
    from transformers import ViTConfig, ViTModel
    m = _First.wrap(ViTModel(ViTConfig(attn_implementation="eager"),
                             add_pooling_layer=False).eval())
    return m, (torch.randn(1, 3, 224, 224),), ["pixel_values"]


def b_resnet50():
    torch = _torch()
    from transformers import ResNetConfig, ResNetModel
    m = _First.wrap(ResNetModel(ResNetConfig()).eval())   # the default is ResNet-50
    _randomise_bn(m)
    return m, (torch.randn(1, 3, 224, 224),), ["pixel_values"]


def b_mobilenet_v2():
    """The depthwise CNN of issue 27's per-model table: MobileNetV2 1.0 at 224x224
    (depthwise 3x3 convs between 1x1 expansions, ReLU6 as Clip)."""
    torch = _torch()
    from transformers import MobileNetV2Config, MobileNetV2Model
    m = _First.wrap(MobileNetV2Model(MobileNetV2Config(), add_pooling_layer=False).eval())
    _randomise_bn(m)
    return m, (torch.randn(1, 3, 224, 224),), ["pixel_values"]


def b_convnext_tiny():
    """The ConvNeXt-style net of issue 27's per-model table: ConvNeXt-T at 224x224
    (7x7 depthwise convs, LayerNorm over the channels, inverted-bottleneck MLPs)."""
    torch = _torch()
    from transformers import ConvNextConfig, ConvNextModel
    m = _First.wrap(ConvNextModel(ConvNextConfig()).eval())   # last_hidden_state: no pooling
    return m, (torch.randn(1, 3, 224, 224),), ["pixel_values"]


#: issue 12's whole models at full size (``--full DIR``; not committed), and issue 27's
#: depthwise CNN and ConvNeXt-style net
FULL = {"bert_base": b_bert_base, "gpt2_small": b_gpt2_small, "vit_b16": b_vit_b16,
        "resnet50": b_resnet50, "mobilenet_v2": b_mobilenet_v2,
        "convnext_tiny": b_convnext_tiny}


#: Extra legacy-exporter options per fixture. Both exporters fold an eval-mode
#: BatchNormalization into the convolution before it (conv_bn_relu shows that output);
#: TrainingMode.PRESERVE on the eval-mode module skips that peephole, so conv_bn_relu_keep
#: holds the Conv -> BatchNormalization -> Relu chain an importer must fold itself.
LEGACY_OPTIONS = {"conv_bn_relu_keep": {"training": "PRESERVE"}}


def export(name: str, dest: str = DATA) -> dict:
    """Exports one fixture (or full-size model) into ``dest``; tries the legacy exporter,
    then dynamo; checks the file with onnx and against torch."""
    import onnx
    import torch
    module, args, names = {**FIXTURES, **FULL}[name]()
    path = os.path.join(dest, f"{name}.onnx")
    errors = []
    for dynamo in (False, True):
        try:
            with warnings.catch_warnings(), torch.no_grad():
                warnings.simplefilter("ignore")
                kw = dict(input_names=names, output_names=["output"], opset_version=OPSET,
                          dynamo=dynamo)
                if not dynamo:
                    kw["do_constant_folding"] = True
                    for k, v in LEGACY_OPTIONS.get(name, {}).items():
                        kw[k] = getattr(torch.onnx.TrainingMode, v) if k == "training" else v
                else:
                    kw["external_data"] = False
                torch.onnx.export(module, args, path, **kw)
            model = onnx.load(path)
            onnx.checker.check_model(model)
            break
        except Exception as exc:  # the exporter's own errors are many and version-specific
            errors.append(f"{'dynamo' if dynamo else 'legacy'}: {type(exc).__name__}: "
                          f"{str(exc).splitlines()[0][:200] if str(exc) else ''}")
            if os.path.exists(path):
                os.remove(path)
    else:
        raise RuntimeError(f"{name}: both exporters failed: {errors}")
    with torch.no_grad():
        ref = module(*args)
    from onnx.reference import ReferenceEvaluator
    feeds = {n: a.numpy() for n, a in zip(names, args)}
    try:
        got = ReferenceEvaluator(model).run(None, feeds)[0]
        err, ref_error = float(np.max(np.abs(got - ref.numpy()))), None
    except Exception as exc:  # onnx's evaluator has limits (BERT-base: GatherElements <= 64)
        err, ref_error = None, f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
    ops = sorted({n.op_type for n in model.graph.node})
    opset = next(i.version for i in model.opset_import if i.domain in ("", "ai.onnx"))
    return {"file": f"{name}.onnx", "exporter": "dynamo" if dynamo else "legacy",
            "exporter_errors": errors,
            "legacy_options": LEGACY_OPTIONS.get(name, {}), "opset": opset,
            "nodes": len(model.graph.node),
            "op_types": ops, "bytes": os.path.getsize(path),
            "max_abs_error_vs_torch": err, "reference_error": ref_error}


def main(argv: list[str]) -> int:
    import argparse
    ap = argparse.ArgumentParser(description="Writes the ONNX fixtures of tests/data or, "
                                 "with --full, the full-size models.")
    ap.add_argument("names", nargs="*", metavar="NAME",
                    help=f"fixtures (default: all): {', '.join(FIXTURES)}; with --full: "
                         f"{', '.join(FULL)}")
    ap.add_argument("--full", metavar="DIR",
                    help="write the full-size models into DIR (not tests/data)")
    args = ap.parse_args(argv)
    known = FULL if args.full else FIXTURES
    names = args.names or list(known)
    unknown = [n for n in names if n not in known]
    if unknown:
        print(f"unknown {'model' if args.full else 'fixture'}(s): {', '.join(unknown)} "
              f"(known: {', '.join(known)})", file=sys.stderr)
        return 2
    dest = args.full or DATA
    if args.full and os.path.realpath(dest) == os.path.realpath(DATA):
        print("--full DIR: the full-size models are hundreds of MB; pick a directory "
              "outside tests/data", file=sys.stderr)
        return 2
    import onnx
    import torch
    import transformers
    os.makedirs(dest, exist_ok=True)
    manifest_path = os.path.join(dest, "MANIFEST.json")
    manifest = {}
    if os.path.exists(manifest_path):
        with open(manifest_path) as f:
            manifest = json.load(f)
    manifest.setdefault("fixtures", {})
    manifest["versions"] = {"torch": torch.__version__, "transformers": transformers.__version__,
                            "onnx": onnx.__version__, "numpy": np.__version__,
                            "python": sys.version.split()[0]}
    manifest["script"] = "tools/export_models.py"
    manifest["opset_requested"] = OPSET
    for n in names:
        info = export(n, dest)
        manifest["fixtures"][n] = info
        print(f"{n:18s} {info['exporter']:6s} opset {info['opset']} {info['nodes']:4d} nodes "
              f"{info['bytes'] / 1024:7.1f} KiB  "
              + (f"max |onnx - torch| {info['max_abs_error_vs_torch']:.2e}"
                 if info["reference_error"] is None
                 else f"onnx's evaluator failed: {info['reference_error']}"))
    with open(manifest_path, "w") as f:
        json.dump(manifest, f, indent=1, sort_keys=True)
        f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
