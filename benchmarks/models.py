"""Whole-model benchmark: ResNet-18, MobileNet-V2 (batch 1, 224x224), a BERT-base
encoder layer (sequence 128), a small U-Net (64x64: group norm, SiLU, a transposed
convolution, upsampling) and a ViT-S block (197 tokens, ``nn.MultiheadAttention``), and
blocks of further families (``model_blocks.py``: EfficientNet's SE block, ConvNeXt,
Inception, MLP-Mixer, DenseNet, a wav2vec feature encoder, an LSTM), compiled by
tensortune after a stated trial budget, against PyTorch eager CPU and onnxruntime (when
installed), measured in the same run.

Run: python benchmarks/models.py
         [--models resnet18,mobilenet_v2,bert_layer,unet_small,vit_block,mbconv_se,...]
         [--trials 2000] [--scheduler gradient] [--db DIR_OR_FILE] [--out benchmarks/out]

Each model's end-to-end latency is the median of repeated calls after a warm-up (the
compiled model copies its input in and its output out, as a user's call does). The
compiled model's output is checked against PyTorch's first.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

import tensortune as tt  # noqa: E402
from benchmarks.baselines import median_time, setup_torch  # noqa: E402
from benchmarks.model_blocks import (  # noqa: E402
    conv_features,
    convnext_block,
    dense_block,
    inception_block,
    lstm,
    mbconv_se,
    mixer_block,
)
from benchmarks.model_zoo import (  # noqa: E402
    bert_layer,
    mobilenet_v2,
    resnet18,
    unet_small,
    vit_block,
)
from tensortune.graph.executor import Executor  # noqa: E402

MODELS = {
    "resnet18": (resnet18, (1, 3, 224, 224)),
    "mobilenet_v2": (mobilenet_v2, (1, 3, 224, 224)),
    "bert_layer": (bert_layer, (1, 128, 768)),
    "unet_small": (unet_small, (1, 3, 64, 64)),
    "vit_block": (vit_block, (1, 197, 384)),
    "mbconv_se": (mbconv_se, (1, 32, 28, 28)),
    "convnext_block": (convnext_block, (1, 64, 28, 28)),
    "inception_block": (inception_block, (1, 64, 28, 28)),
    "mixer_block": (mixer_block, (1, 64, 128)),
    "dense_block": (dense_block, (1, 32, 28, 28)),
    "conv_features": (conv_features, (1, 1, 4000)),
    "lstm": (lstm, (32, 8, 128)),
}


def onnxruntime_time(model: Any, x: torch.Tensor, out: Path) -> float | None:
    """Latency under onnxruntime, or None when it (or the ONNX exporter) is missing."""
    try:
        import onnxruntime as ort
    except ImportError:
        return None
    path = out / f"{type(model).__name__}.onnx"
    torch.onnx.export(model, (x,), str(path), dynamo=False)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = torch.get_num_threads()
    sess = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    feed = {sess.get_inputs()[0].name: x.numpy()}
    return median_time(lambda: sess.run(None, feed))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].replace("\n", " "))
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--trials", type=int, default=2000, help="trial budget per model")
    ap.add_argument("--scheduler", default="gradient")
    ap.add_argument("--db", default=None, help="database file (default: one per run)")
    ap.add_argument("--out", default="benchmarks/out")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    target = tt.Target.host()
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    db = args.db or str(out / f"models-{stamp}.db")
    print(f"{datetime.date.today()} | {target} | {setup_torch(target.cores)} | "
          f"{args.trials} trials per model, {args.scheduler} scheduler | db {db}", flush=True)
    rows = []
    for name in args.models.split(","):
        build, shape = MODELS[name]
        torch.manual_seed(0)
        model, x = build(), torch.randn(*shape)
        with torch.no_grad():
            want = model(x)
            t_torch = median_time(lambda: model(x))  # noqa: B023
        t_ort = onnxruntime_time(model, x, out)
        t0 = time.perf_counter()
        last = [0.0]

        def progress(st: Any, ev: dict[str, Any]) -> None:
            if time.perf_counter() - last[0] > 30 or ev["spent"] == ev["total"]:
                last[0] = time.perf_counter()
                print(f"  {name}: {ev['spent']}/{ev['total']} trials, "
                      f"{ev['elapsed']:.0f} s, estimate {ev['objective'] * 1e3:.2f} ms",
                      flush=True)
        compiled = tt.compile_model(model, x, trials=args.trials, database=db,
                                    scheduler=args.scheduler, progress=progress)
        total = time.perf_counter() - t0
        got = compiled(x)
        err = float((got - want).abs().max() / want.abs().max())
        t_tt = median_time(lambda: compiled(x))  # noqa: B023
        # the same kernels with every weight-only stage run at each call, as tuned
        plain = Executor(compiled.graph, compiled.groups, compiled.kernels, prepack=False)
        t_plain = median_time(lambda: plain(x))  # noqa: B023
        row = {"model": name, "trials": args.trials, "tasks": len(compiled.tasks),
               "kernels": len(compiled.groups), "tensortune_ms": t_tt * 1e3,
               "unpacked_ms": t_plain * 1e3,
               "torch_ms": t_torch * 1e3, "ort_ms": t_ort * 1e3 if t_ort else None,
               "vs_torch": t_torch / t_tt, "tuning_s": compiled.tune_seconds,
               "compile_s": total, "rel_error": err}
        rows.append(row)
        print(compiled.summary())
        print(compiled.profile(x))
        ort = f"{row['ort_ms']:.2f} ms" if t_ort else "not installed"
        print(f"{name}: tensortune {row['tensortune_ms']:.2f} ms (weight stages at each "
              f"call: {row['unpacked_ms']:.2f} ms) | PyTorch "
              f"{row['torch_ms']:.2f} ms | onnxruntime {ort} | {row['vs_torch']:.2f}x PyTorch"
              f" | tuning {total / 60:.1f} min | rel. error {err:.1e}", flush=True)
    (out / f"models-{stamp}.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
