import subprocess
import sys
from pathlib import Path

from tune_orchestrator.model.loading import load_model

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def test_the_bundled_model_is_what_its_script_makes(tmp_path):
    out = tmp_path / "smallcnn.onnx"
    subprocess.run(
        [sys.executable, str(EXAMPLES / "make_example.py"), "--out", str(out)],
        check=True,
        capture_output=True,
    )
    assert out.read_bytes() == (EXAMPLES / "smallcnn.onnx").read_bytes()


def test_the_bundled_model_loads_with_static_shapes():
    model = load_model(EXAMPLES / "smallcnn.onnx")
    assert [(i.name, i.shape) for i in model.inputs] == [("image", (1, 3, 64, 64))]
