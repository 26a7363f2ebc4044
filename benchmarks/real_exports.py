"""Models as exporters other than ours write them, each tuned a little and checked.

    python benchmarks/real_exports.py export --out benchmarks/work/exports [--only NAME,...]
    python benchmarks/real_exports.py run --models benchmarks/work/exports
                                          [--budget 40trials] [--label vm-2core]

`export` runs in a Python that has torch (CPU), timm, ultralytics, transformers and
optimum-onnx, none of them this package's dependencies (a separate virtual environment):
it writes timm image models through torch's default (dynamo) exporter, Ultralytics YOLO
models through their own export (opset 17 and onnxslim), and optimum's decoder step of a
tiny Llama and GPT-2 with past key values, every model with random weights (nothing is
downloaded: YOLO's weights are drawn afresh, as its untrained head outputs constants, and so
are weights timm initializes to zeros). A model that needs input shapes gets a NAME.shapes
file of --input-shape options.

`run` tunes each model of the folder cold (`--no-library`) in a fresh `orchestrate`, one
after another, and reads its report: the exit code, tasks, trials, untuned and tuned latency,
and the shipped build's output check against onnxruntime. A model whose run directory under
benchmarks/work/exports-runs/ holds a finished run of the same command is read, not run again.
Raw figures go to benchmarks/results/real_exports-<label>-<date>.json.
"""

from __future__ import annotations

import argparse
import json
import platform
import shlex
import subprocess
import sys
import time
import types
from pathlib import Path

from _common import ROOT, head_rev, write_result

TIMM = {  # timm model -> input size (a ViT's img_size is set to it)
    "convnext_atto": 128,
    "deit_tiny_patch16_224": 112,
    "dla34": 128,
    "edgenext_xx_small": 128,
    "efficientvit_b0": 128,
    "eva02_tiny_patch14_224": 112,
    "fastvit_t8": 128,
    "gcvit_xxtiny": 128,
    "ghostnet_100": 128,
    "hrnet_w18_small": 128,
    "levit_128s": 128,
    "mixer_s16_224": 112,
    "mobilenetv4_conv_small": 128,
    "mobilevit_xxs": 128,
    "pit_ti_224": 112,
    "poolformer_s12": 128,
    "repvit_m0_9": 128,
    "sequencer2d_s": 112,
    "xcit_nano_12_p16_224": 112,
}
YOLO = {  # file name -> (Ultralytics model, export options)
    "yolov8n": ("yolov8n.yaml", {"imgsz": 320, "opset": 17}),
    "yolov8n-dynamic": ("yolov8n.yaml", {"imgsz": 320, "dynamic": True}),
    "yolo11n": ("yolo11n.yaml", {"imgsz": 320}),
    "yolov8n-seg": ("yolov8n-seg.yaml", {"imgsz": 320}),
    "yolov8n-pose": ("yolov8n-pose.yaml", {"imgsz": 320}),
    "yolov8n-obb": ("yolov8n-obb.yaml", {"imgsz": 320}),
    "yolov8n-cls": ("yolov8n-cls.yaml", {"imgsz": 224}),
}
SHAPES = {  # models whose inputs have dynamic dimensions: one decoding step after 32 tokens
    "yolov8n-dynamic": ["images:2x3x256x320"],
    "llama-step": ["input_ids:1x1", "past_key_values.0.key:1x2x32x32"],
    "gpt2-step": ["input_ids:1x1", "past_key_values.0.key:1x4x32x32"],
}


def export(out: Path, only: set[str] | None) -> None:
    # torchvision's fake-op registrations fail against a CPU torch of another build; timm and
    # ultralytics only import torchvision, they do not need them.
    sys.modules.setdefault("torchvision._meta_registrations", types.ModuleType("stub"))
    out.mkdir(parents=True, exist_ok=True)
    names = only or {*TIMM, *YOLO, "llama-step", "gpt2-step"}
    for name in sorted(names & set(TIMM)):
        _export_timm(name, TIMM[name], out / f"{name}.onnx")
    for name in sorted(names & set(YOLO)):
        _export_yolo(*YOLO[name], out / f"{name}.onnx")
    for name in sorted(names & {"llama-step", "gpt2-step"}):
        _export_decoder(name, out)
    for name, shapes in SHAPES.items():
        if (out / f"{name}.onnx").is_file():
            (out / f"{name}.shapes").write_text(" ".join(f"--input-shape {s}" for s in shapes))


def _export_timm(name: str, size: int, path: Path) -> None:
    import timm
    import torch

    torch.manual_seed(0)
    try:
        model = timm.create_model(name, pretrained=False, img_size=size)
    except TypeError:  # a CNN: any size
        model = timm.create_model(name, pretrained=False)
    for layer in model.modules():  # timm zeroes some heads: a model that outputs only zeros
        weight = getattr(layer, "weight", None)
        if isinstance(weight, torch.nn.Parameter) and weight.dim() > 1 and not weight.any():
            torch.nn.init.normal_(weight, std=0.02)
    with torch.no_grad():
        torch.onnx.export(model.eval(), (torch.randn(1, 3, size, size),), str(path))
    print(f"exported {path}", flush=True)


def _export_yolo(spec: str, options: dict, path: Path) -> None:
    import torch
    from ultralytics import YOLO as Ultralytics

    torch.manual_seed(0)
    model = Ultralytics(spec)
    for layer in model.model.modules():  # an untrained head outputs constants: draw afresh
        if isinstance(layer, torch.nn.Conv2d):
            torch.nn.init.kaiming_normal_(layer.weight, nonlinearity="relu")
            if layer.bias is not None:
                torch.nn.init.normal_(layer.bias, 0, 0.5)
        if isinstance(layer, torch.nn.BatchNorm2d):
            layer.running_mean.normal_(0, 0.1)
            layer.running_var.uniform_(0.5, 1.5)
            layer.weight.data.uniform_(0.5, 1.5)
            layer.bias.data.normal_(0, 0.1)
    written = model.export(format="onnx", **options)
    Path(written).replace(path)
    print(f"exported {path}", flush=True)


def _export_decoder(name: str, out: Path) -> None:
    import tempfile

    import torch
    from optimum.exporters.onnx import main_export
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    if name == "llama-step":
        config = LlamaConfig(
            vocab_size=1000,
            hidden_size=128,
            intermediate_size=256,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
        )
        model = LlamaForCausalLM(config)
    else:
        model = GPT2LMHeadModel(GPT2Config(vocab_size=1000, n_embd=128, n_layer=2, n_head=4))
    with tempfile.TemporaryDirectory() as folder:
        model.save_pretrained(f"{folder}/model")
        main_export(f"{folder}/model", output=f"{folder}/onnx", task="text-generation-with-past")
        Path(f"{folder}/onnx/model.onnx").replace(out / f"{name}.onnx")
    print(f"exported {out / f'{name}.onnx'}", flush=True)


def run(models: Path, budget: str, label: str) -> None:
    runs = ROOT / "benchmarks" / "work" / "exports-runs"
    rows = [_run_one(path, runs / path.stem, budget) for path in sorted(models.glob("*.onnx"))]
    for row in rows:
        print(
            f"{row['model']:<26} exit {row['exit_code']}  {row.get('tasks', '-'):>3} tasks  "
            f"{_ms(row.get('untuned_s'))} -> {_ms(row.get('tuned_s'))}  "
            f"{row.get('check_status')} ({row.get('max_rel_error')})"
        )
    ok = sum(r["exit_code"] == 0 and r.get("check_status") == "matched" for r in rows)
    print(f"{ok} of {len(rows)} tuned and matched onnxruntime")
    write_result(
        "real_exports",
        label,
        {
            "machine": platform.node(),
            "commit": head_rev(),
            "budget": budget,
            "runs": rows,
        },
    )


def _run_one(path: Path, out: Path, budget: str) -> dict:
    shapes = path.with_suffix(".shapes")
    options = shlex.split(shapes.read_text()) if shapes.is_file() else []
    command = ["orchestrate", "--budget", budget, "--no-library", "--out", str(out), *options]
    start = time.monotonic()
    done = subprocess.run([*command, str(path)], capture_output=True, text=True)
    row = {"model": path.stem, "exit_code": done.returncode, "options": options}
    row["process_s"] = round(time.monotonic() - start, 1)
    report = out / "report.json"
    if done.returncode == 2 or not report.is_file():
        row["error"] = done.stderr.strip().splitlines()[-1:] or None
        return row
    summary = (data := json.loads(report.read_text()))["summary"]
    check = (data.get(summary["shipped"]) or {}).get("check") or {}
    return row | {
        "tasks": len(data["tasks"]),
        "trials": summary["trials"],
        "untuned_s": summary["untuned_latency_s"],
        "tuned_s": summary["tuned_latency_s"],
        "shipped": summary["shipped"],
        "check_status": summary["check_status"],
        "max_rel_error": check.get("max_rel_error"),
        "check_note": check.get("reason"),  # e.g. outputs that barely change with the inputs
        "wall_s": summary["wall_s"],
    }


def _ms(seconds: float | None) -> str:
    return f"{seconds * 1e3:9.2f} ms" if seconds else "        - ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    made = sub.add_parser("export")
    made.add_argument("--out", type=Path, required=True)
    made.add_argument("--only", help="comma-separated model names")
    ran = sub.add_parser("run")
    ran.add_argument("--models", type=Path, required=True)
    ran.add_argument("--budget", default="40trials")
    ran.add_argument("--label", default="vm-2core")
    args = parser.parse_args()
    if args.command == "export":
        export(args.out, set(args.only.split(",")) if args.only else None)
    else:
        run(args.models, args.budget, args.label)


if __name__ == "__main__":
    sys.exit(main())
