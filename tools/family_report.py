"""The coverage table of ``docs/coverage.md``: for each ONNX fixture of a model family,
the ops it uses, the dispatches wavefuse forms (aggressive / conservative), and whether
``import``, ``verify``, ``tune``, ``export`` and ``check`` pass, with verify's wall time.
Commands run in-process through ``compiler.cli.main`` (``--json``); a stage that is not
asked for is shown as "-", never as a pass. Times are wall seconds on the machine that
runs it (the table says which)::

    python tools/family_report.py                       # import, fuse, verify
    python tools/family_report.py --stages all -k yolo  # + tune, export, check
    python tools/family_report.py --markdown            # the table only
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

#: family -> fixture, for the fixtures of tools/export_models.py (one per architecture)
BASE = {"GPT-2 decoder block": "gpt2_block.onnx", "BERT encoder layer": "bert_layer.onnx",
        "Llama decoder block (RoPE, RMSNorm)": "llama_block.onnx",
        "ViT encoder block": "vit_block.onnx", "ResNet basic block": "resnet_basic.onnx",
        "ResNet bottleneck": "resnet_bottleneck.onnx"}


#: the short family name of each block of tests/data/families
LABELS = {"unet_resblock": "diffusion UNet ResBlock + upsample", "vae_decoder_block":
          "diffusion VAE mid-block attention", "gqa_rope_decoder":
          "GQA decoder (Llama/Mistral, RoPE)", "swin_window": "Swin windowed attention",
          "clip_encoder_layer": "CLIP encoder layer", "whisper_encoder_front":
          "Whisper encoder (conv front end)", "whisper_decoder_layer":
          "Whisper decoder (cross-attention)", "mobilenet_v3_block": "MobileNetV3 block",
          "efficientnet_mbconv": "EfficientNet MBConv", "convnext_block": "ConvNeXt block",
          "segmentation_head": "FPN/DeepLab segmentation head", "yolo_neck":
          "YOLO neck (detection)", "unet_down_up": "UNet (InstanceNorm, segmentation)",
          "t5_layer": "T5 encoder layer", "densenet_block": "DenseNet dense block (concat)",
          "shufflenet_v2_unit": "ShuffleNetV2 unit (channel shuffle)", "segformer_block":
          "SegFormer block (spatial-reduction attention, Mix-FFN)", "gemma_mlp":
          "Gemma decoder MLP (GeGLU)", "mlp_mixer_block": "MLP-Mixer block",
          "phi_decoder_layer": "Phi-2 decoder layer (parallel, partial rotary)", "bart_decoder_layer":
          "BART decoder layer (post-LN, cross-attention)", "regnet_y_block":
          "RegNetY block (grouped conv, SE)", "inception_block": "Inception-v3 block (InceptionA)"}


def fixtures() -> list[tuple[str, str]]:
    data = os.path.join(ROOT, "tests", "data")
    rows = [(fam, os.path.join(data, f)) for fam, f in BASE.items()]
    man = json.load(open(os.path.join(data, "families", "MANIFEST.json")))
    for name, info in man["fixtures"].items():
        rows.append((LABELS.get(name, name), os.path.join(data, "families", info["file"])))
    return rows


def _cli(args) -> tuple[int, dict | None, float]:
    from compiler import cli
    out, err = io.StringIO(), io.StringIO()
    t0 = time.perf_counter()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = cli.main(args)
    dt = time.perf_counter() - t0
    try:
        return rc, json.loads(out.getvalue()), dt
    except ValueError:
        return rc, {"stderr": err.getvalue().strip()[-300:]}, dt


def report(path: str, stages: set, keep: str | None = None) -> dict:
    import onnx
    from compiler.frontends.onnx import load_onnx
    row = {"file": os.path.relpath(path, ROOT)}
    row["ops"] = sorted({n.op_type for n in onnx.load(path, load_external_data=False).graph.node})
    try:
        load_onnx(path)
        row["import"] = True
    except Exception as exc:  # noqa: BLE001 - the table records it
        row["import"] = False
        row["why"] = str(exc)[:200]
        return row
    for flag, key in (([], "aggressive"), (["--no-aggressive"], "conservative")):
        rc, d, _ = _cli(["fuse", path, "--json", *flag])
        row[key] = d.get("num_dispatches") if rc == 0 else None
    if "verify" in stages:
        rc, d, dt = _cli(["verify", path, "--json"])
        row["verify"], row["verify_s"] = rc == 0 and bool(d.get("ok")), round(dt, 1)
    if stages & {"tune", "export", "check"}:
        with tempfile.TemporaryDirectory(prefix="wf-family-") as tmp:
            rc, d, dt = _cli(["tune", path, "--budget", "1", "--json"])
            row["tune"], row["tune_s"] = rc == 0, round(dt, 1)
            # the same budget: tune's database is reused; --keep DIR keeps the export
            out = os.path.join(keep, os.path.basename(path)[:-5]) if keep else \
                os.path.join(tmp, "out")
            rc, d, dt = _cli(["export", path, "--budget", "1", "-o", out, "--json"])
            row["export"] = rc == 0
            if rc == 0:
                rc, d, dt = _cli(["check", out, "--json"])
                row["check"] = rc == 0
                if rc != 0 and d:
                    row["check_disagreements"] = len(d.get("disagreements", []))
                    # which kernels and what, for docs/check.md's before/after
                    row["check_what"] = sorted({f"{x['kernel']}: {x['what']}"
                                                for x in d.get("disagreements", [])})
    return row


def markdown(rows: list[dict]) -> str:
    mark = lambda v: "-" if v is None else ("yes" if v else "**no**")
    out = ["| family | fixture | ops | dispatches (aggr. / cons.) | import | verify (s) | "
           "tune | export | check |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        v = mark(r.get("verify"))
        if r.get("verify_s") is not None:
            v += f" ({r['verify_s']})"
        chk = mark(r.get("check"))
        if r.get("check_disagreements"):
            chk += f" ({r['check_disagreements']} disagreements)"
        out.append(f"| {r['family']} | `{os.path.basename(r['file'])}` | {', '.join(r['ops'])} | "
                   f"{r.get('aggressive')} / {r.get('conservative')} | {mark(r.get('import'))} | "
                   f"{v} | {mark(r.get('tune'))} | {mark(r.get('export'))} | {chk} |")
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--stages", default="verify",
                    help="'verify' (default), 'none', or 'all' (+ tune, export, check)")
    ap.add_argument("-k", default="", help="only fixtures whose file name contains this")
    ap.add_argument("--json", metavar="PATH", help="also write the rows as JSON")
    ap.add_argument("--markdown", action="store_true", help="print the table only")
    ap.add_argument("--keep", metavar="DIR", help="keep each fixture's export in DIR/NAME "
                    "(to set a disagreeing kernel's schedule beside hipcc's ISA)")
    args = ap.parse_args(argv)
    if args.keep:
        os.makedirs(args.keep, exist_ok=True)
    stages = {"none": set(), "verify": {"verify"},
              "all": {"verify", "tune", "export", "check"}}[args.stages]
    rows = []
    for fam, path in fixtures():
        if args.k not in os.path.basename(path):
            continue
        r = {"family": fam, **report(path, stages, args.keep)}
        rows.append(r)
        if not args.markdown:
            print(json.dumps(r), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    print(markdown(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
