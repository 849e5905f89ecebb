"""The bench's Python peers count and summarise runs as the C++ bench does (bench/noise.hpp)."""
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "bench"))

import python_bench  # noqa: E402
import torch_peer  # noqa: E402

MiB = 1 << 20


def test_torch_peer_gives_small_sizes_the_rounds_the_bench_gives():
    # rounds_for in bench/noise.hpp: repeats at 256 MiB and above, up to 8x below.
    assert torch_peer.rounds_for(4 * MiB, 5) == 40
    assert torch_peer.rounds_for(64 * MiB, 5) == 20
    assert torch_peer.rounds_for(256 * MiB, 5) == 5
    assert torch_peer.rounds_for(4096 * MiB, 5) == 5


def test_median_of_runs_in_the_order_they_ran():
    assert torch_peer.median([3.0, 1.0, 2.0]) == 2.0
    assert torch_peer.median([4.0, 1.0, 3.0, 2.0]) == 2.5


def test_python_bench_spread_is_the_interquartile_range_over_the_median():
    runs = sorted([10.0, 12.0, 11.0, 13.0, 9.0])
    assert python_bench.quantile(runs, 0.5) == 11.0
    assert abs(python_bench.spread(runs) - 2.0 / 11.0) < 1e-12
    assert python_bench.spread([1.0, 2.0]) == 0.0  # too few runs to tell


def test_activations_bench_runs_its_help_and_says_why_it_skips_without_a_gpu():
    import subprocess
    script = pathlib.Path(__file__).resolve().parents[2] / "bench" / "activations_bench.py"
    help_text = subprocess.run([sys.executable, str(script), "--help"], capture_output=True, text=True, check=True)
    assert "--quick" in help_text.stdout and "--out" in help_text.stdout
    import peer_common
    if peer_common.cuda_torch()[0] is None:
        run = subprocess.run([sys.executable, str(script), "--quick"], capture_output=True, text=True, check=True)
        assert run.stdout.startswith("skipped: ")
