"""The README's export commands on freshly trained demo models, one per seed.

A trained model's detections overlap across classes, which an untrained or calibrated one
seldom shows, and an export check that compares two different NMS algorithms fails only then.
So each seed trains the demo (`make demo`'s command with a seed, on the small network, whose
trained detections overlap as D0's do, in less time) and runs the README's on-device command
as written, then the ONNX and OpenVINO exports its next paragraph names, each with its parity
check, which must compare detections, not pass on none: a demo trained for fewer epochs scores
no detection above the `.tflite` check's 0.3 on its check images. The seeds run as separate
classes, so that the two workers take one each.
"""

import os
import re
import subprocess

import pytest

from doc_blocks import README_PATH, page_blocks
from helpers import SMALL_NETWORK_HPARAMS, command_environment

# Models trained for minutes, beyond make test: make test-all (the README's export commands
# run in make test on test_docs' one-step demo).
pytestmark = pytest.mark.slow
SEEDS = (1, 2)
SECTION = "On devices and other runtimes"
# The README's paragraph names these formats as flags of the same command.
OTHER_FORMATS = ("onnx", "openvino")


def readme_export_commands():
    """The README's export commands of the on-device section (they name runs/demo)."""
    commands = [c for b in page_blocks(README_PATH) if b.section == SECTION and b.language == "sh"
                for c in b.commands() if c.startswith("efficientdet-export")]
    assert commands and all("--model_dir=runs/demo" in c for c in commands), commands
    return commands


def run(command, cwd):
    result = subprocess.run(["bash", "-c", command], cwd=cwd, env=command_environment(),
                            capture_output=True, text=True, timeout=1200)
    assert result.returncode == 0, "%s\nexited %d:\n%s\n%s" % (
        command, result.returncode, result.stdout[-3000:], result.stderr[-3000:])
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    return result


def parity_lines(output):
    lines = [line for line in output.splitlines() if line.startswith("Parity: ")]
    assert lines and all(line.endswith(": ok") for line in lines), output[-3000:]
    return lines


def seed_test_class(seed):
    @pytest.fixture(scope="class")
    def trained(self, tmp_path_factory):
        """A project folder whose runs/demo is a freshly trained demo of this seed."""
        root = str(tmp_path_factory.mktemp("trained-demo-%d" % seed))
        result = run("efficientdet-train --demo --model_dir=runs/demo --tf_random_seed=%d "
                     "--hparams=%s" % (seed, SMALL_NETWORK_HPARAMS), root)
        best = re.search(r"Best checkpoint: .* AP ([0-9.]+)\)", result.stdout)
        assert best and float(best.group(1)) > 0.3, result.stdout[-2000:]  # It trained.
        return root

    def test_the_readme_on_device_command_passes_its_check(self, trained):
        for command in readme_export_commands():
            lines = parity_lines(run(command, trained).stdout)
            # Detections of a trained model, compared in the op's own NMS mode.
            compared = re.search(r"(\d+) of (\d+) detections", lines[-1])
            assert compared and int(compared.group(2)) >= 5, lines

    def test_onnx_and_openvino_exports_pass_their_checks(self, trained):
        command = readme_export_commands()[0]
        for name in OTHER_FORMATS:
            variant = command.replace("--format=tflite", "--format=" + name).replace(
                "demo-tflite", "demo-" + name)
            output = run(variant, trained).stdout
            parity_lines(output)
            assert os.listdir(os.path.join(trained, "exported", "demo-" + name))

    name = "TestSeed%d" % seed
    return name, type(name, (), {
        "trained": trained,
        "test_the_readme_on_device_command_passes_its_check":
            test_the_readme_on_device_command_passes_its_check,
        "test_onnx_and_openvino_exports_pass_their_checks":
            test_onnx_and_openvino_exports_pass_their_checks})


for _seed in SEEDS:
    _name, _cls = seed_test_class(_seed)
    globals()[_name] = _cls
