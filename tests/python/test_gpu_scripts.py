"""What scripts/gpu-python asks of the GPU machine's tools, read from the script (it runs only there)."""
import re

from conftest import ROOT


def _sanitize_stage():
    text = (ROOT / "scripts" / "gpu-python").read_text()
    body = re.search(r"^sanitize\(\) \{\n(.*?)^\}", text, re.S | re.M)
    assert body, "scripts/gpu-python has no sanitize() stage"
    return body.group(1)


def test_the_python_tests_run_under_the_sanitizers_with_device_backtraces_only():
    # compute-sanitizer's host backtrace, taken at each CUDA call, holds that call's Python frames
    # alive with their tensors: every step's activations stayed on the GPU, and the activations
    # peak test failed under memcheck alone (docs/measurements.md).
    commands = re.sub(r"\\\n\s*", " ", _sanitize_stage()).splitlines()  # continued lines joined
    runs = [c for c in commands
            if re.search(r"\$\{?sanitizer\b|compute-sanitizer\s+-", c) and not re.search(r"\bsanitizer=", c)]
    assert runs, "the sanitize stage runs no compute-sanitizer"
    for run in runs:
        # The last --show-backtrace given is the one the tool takes.
        assert re.findall(r"--show-backtrace[= ](\S+)", run)[-1:] == ["device"], run
