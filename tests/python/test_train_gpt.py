"""examples/train_gpt.py: the loss falls; a job saved on 2 ranks and resumed on 3 (and on 1) trains on
exactly the samples the uninterrupted job does, with the same losses. The ranks are processes on the
CPU talking over gloo, started with the environment torchrun gives them (RANK, WORLD_SIZE, LOCAL_RANK,
MASTER_ADDR, MASTER_PORT, and the store this process holds for them, as torchrun's agent does). The
sluice loader's run needs a GPU."""
import contextlib
import datetime
import json
import os
import pathlib
import resource
import signal
import subprocess
import sys
import tempfile
import time

import pytest

from conftest import ROOT, gpu

torch = pytest.importorskip("torch", reason="PyTorch is not installed: the training example needs it")
if not torch.distributed.is_available() or not torch.distributed.is_gloo_available():
    pytest.skip("this torch has no torch.distributed with gloo", allow_module_level=True)

SCRIPT = ROOT / "examples" / "train_gpt.py"
LOADERS_BENCH = ROOT / "bench" / "gpt_loaders_bench.py"
TORCHRUN_KEYS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                 "TORCHELASTIC_USE_AGENT_STORE", "TORCHELASTIC_RESTART_COUNT")
TINY_MODEL = ["--vocab", "64", "--seq", "32", "--layers", "2", "--heads", "2", "--width", "32"]  # the loaders bench's too
TINY = [*TINY_MODEL, "--lr", "3e-3", "--log-every", "0", "--warmup", "0"]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    directory = tmp_path_factory.mktemp("shards")
    subprocess.run([sys.executable, str(SCRIPT), "--write-shards", str(directory), "--tokens", "200000",
                    "--vocab", "64"], check=True, capture_output=True)
    return f"--data={directory}/train_*.bin"


def train(ranks, *args, timeout=180, script=SCRIPT):
    """Runs the script on `ranks` processes as torchrun starts them; fails with their output if one fails.

    As torchrun does, this process holds the rendezvous store and the ranks connect to it: the port is
    never let go between being chosen and being listened on. A rank that fails stops the others; ranks
    still running at the deadline print their stacks (faulthandler, on SIGABRT) before they are killed,
    and a rank left waiting for the others gives up after --dist-timeout."""
    env = {key: value for key, value in os.environ.items() if key not in TORCHRUN_KEYS}
    env.update(OMP_NUM_THREADS="1", PYTHONFAULTHANDLER="1")
    store = None
    if ranks > 1:
        store = torch.distributed.TCPStore("127.0.0.1", 0, ranks, True, datetime.timedelta(seconds=60),
                                           wait_for_workers=False)
        env.update(WORLD_SIZE=str(ranks), LOCAL_WORLD_SIZE=str(ranks), MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(store.port), TORCHELASTIC_USE_AGENT_STORE="True", TORCHELASTIC_RESTART_COUNT="0")
        args = (*args, "--dist-timeout", "60")
    procs, outputs = [], []
    with contextlib.ExitStack() as cleanup:
        cleanup.callback(stop, procs)  # whatever happens here, no rank outlives the test
        with no_core_files():
            for rank in range(ranks):
                outputs.append(cleanup.enter_context(tempfile.TemporaryFile("w+")))
                rank_env = dict(env, RANK=str(rank), LOCAL_RANK=str(rank)) if ranks > 1 else env
                procs.append(subprocess.Popen([sys.executable, str(script), *args], env=rank_env,
                                              stdout=outputs[-1], stderr=subprocess.STDOUT, text=True))
        failure = wait_for(procs, timeout)
        texts = []
        for out in outputs:
            out.seek(0)
            texts.append(out.read())
    del store  # every rank has exited
    if failure:
        pytest.fail(failure + "".join(f"\n--- rank {r} (exit {p.returncode}):\n{text}"
                                      for r, (p, text) in enumerate(zip(procs, texts))), pytrace=False)
    return texts[0]


def wait_for(procs, timeout):
    """None once every rank has exited with 0; else why not, after the ranks left are stopped."""
    deadline = time.monotonic() + timeout
    while any(p.poll() is None for p in procs):
        failed = [r for r, p in enumerate(procs) if p.returncode not in (None, 0)]
        if failed or time.monotonic() > deadline:
            stuck = stop(procs)
            why = f"rank(s) {failed} failed" if failed else f"rank(s) {stuck} still running after {timeout} s"
            return f"{why}; rank(s) {stuck} stopped, with their stacks printed"
        time.sleep(0.05)
    failed = [r for r, p in enumerate(procs) if p.returncode != 0]
    return f"rank(s) {failed} failed" if failed else None


def stop(procs):
    """Stops the ranks still running, each printing its stack first; returns them."""
    running = [r for r, p in enumerate(procs) if p.poll() is None]
    for r in running:
        procs[r].send_signal(signal.SIGABRT)  # faulthandler prints every thread's stack, then the rank ends
    for r in running:
        try:
            procs[r].wait(timeout=10)
        except subprocess.TimeoutExpired:
            procs[r].kill()
            procs[r].wait()
    return running


@contextlib.contextmanager
def no_core_files():
    """The ranks started meanwhile inherit a core size limit of 0: one stopped with SIGABRT leaves no core file."""
    limits = resource.getrlimit(resource.RLIMIT_CORE)
    resource.setrlimit(resource.RLIMIT_CORE, (0, limits[1]))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_CORE, limits)


def samples(directory, ranks):
    """Per step, the windows of every rank in rank order."""
    per_rank = []
    for rank in range(ranks):
        with open(directory / f"rank{rank}.jsonl") as f:
            per_rank.append([json.loads(line) for line in f])
    steps = [line["step"] for line in per_rank[0]]
    assert all([line["step"] for line in lines] == steps for lines in per_rank)
    return {step: [item for lines in per_rank for item in lines[k]["items"]] for k, step in enumerate(steps)}


def test_the_loss_falls(data, tmp_path):
    out = train(1, data, *TINY, "--loader", "torch", "--workers", "0", "--device", "cpu", "--global-batch", "8",
                "--steps", "40", "--json", str(tmp_path / "run.json"))
    run = json.loads((tmp_path / "run.json").read_text())
    losses = run["losses"]
    assert len(losses) == 40
    assert sum(losses[-5:]) / 5 < 0.85 * losses[0], out
    # The host's side of the loop: the share of it spent in next(), and what each thread used.
    assert 0 < run["host_waited"] < 1, run["host_waited"]
    if pathlib.Path("/proc/self/task").exists():
        assert run["threads"] and all(share > 0 for share in run["threads"].values()), run["threads"]
        assert "threads busy (cores): " in out


def test_a_thread_whose_share_rounds_to_nothing_is_left_out():
    # One clock tick over a long loop rounds to 0.000 of a core: listed, it reads as a thread that
    # was busy at 0.00 (and the loss test's "every listed share > 0" would fail on a slow machine).
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        from train_gpt import busy_threads
    finally:
        sys.path.remove(str(SCRIPT.parent))
    before = {("1", "python"): 2.0, ("2", "sluice-stage"): 0.0}
    after = {("1", "python"): 7.0, ("2", "sluice-stage"): 0.01}
    assert busy_threads(before, after, 100.0) == {"python": 0.05}


def test_a_job_saved_on_two_ranks_resumes_on_three_and_on_one_with_the_same_samples(data, tmp_path):
    common = [data, *TINY, "--loader", "torch", "--workers", "0", "--device", "cpu", "--global-batch", "6"]
    train(1, *common, "--steps", "12", "--log-samples", str(tmp_path / "straight"), "--json", str(tmp_path / "s.json"))
    train(2, *common, "--steps", "6", "--checkpoint", str(tmp_path / "ck.pt"), "--log-samples", str(tmp_path / "two"),
          "--json", str(tmp_path / "two.json"))
    (tmp_path / "ck1.pt").write_bytes((tmp_path / "ck.pt").read_bytes())
    out = train(3, *common, "--steps", "12", "--checkpoint", str(tmp_path / "ck.pt"), "--resume",
                "--log-samples", str(tmp_path / "three"), "--json", str(tmp_path / "three.json"))
    assert "resumed at step 6" in out
    train(1, *common, "--steps", "12", "--checkpoint", str(tmp_path / "ck1.pt"), "--resume",
          "--log-samples", str(tmp_path / "one"), "--json", str(tmp_path / "one.json"))
    straight = samples(tmp_path / "straight", 1)
    assert sorted(straight) == list(range(12))
    assert samples(tmp_path / "two", 2) == {s: straight[s] for s in range(6)}
    assert samples(tmp_path / "three", 3) == {s: straight[s] for s in range(6, 12)}
    assert samples(tmp_path / "one", 1) == {s: straight[s] for s in range(6, 12)}
    # The same samples, the same updates (DDP averages equal slices): the same losses, to rounding.
    expected = json.loads((tmp_path / "s.json").read_text())["losses"]
    for name, first in (("two", 0), ("three", 6), ("one", 6)):
        got = json.loads((tmp_path / f"{name}.json").read_text())["losses"]
        assert got == pytest.approx(expected[first:first + len(got)], rel=1e-4), name


@gpu
def test_the_loss_falls_with_each_loader_on_the_gpu(data, tmp_path):
    runs = {}
    for loader in ("sluice", "torch", "resident"):
        train(1, data, *TINY, "--loader", loader, "--workers", "2", "--global-batch", "8", "--steps", "40",
              "--json", str(tmp_path / f"{loader}.json"))
        runs[loader] = json.loads((tmp_path / f"{loader}.json").read_text())
        losses = runs[loader]["losses"]
        assert sum(losses[-5:]) / 5 < 0.85 * losses[0], loader
        assert 0 <= runs[loader]["gpu_idle"] <= 1
    # The same batches in the same order: the first step's loss is the same.
    assert runs["sluice"]["losses"][0] == pytest.approx(runs["torch"]["losses"][0], rel=1e-3)
    assert runs["resident"]["losses"][0] == pytest.approx(runs["torch"]["losses"][0], rel=1e-3)


@pytest.fixture
def loaders_bench(monkeypatch):
    """bench/gpt_loaders_bench.py as a module (it imports the example's modules beside it)."""
    monkeypatch.syspath_prepend(str(LOADERS_BENCH.parent))
    monkeypatch.syspath_prepend(str(SCRIPT.parent))
    import gpt_loaders_bench
    return gpt_loaders_bench


def _interleaved(ranks, data, tmp_path, *extra):
    out = tmp_path / f"interleaved-{ranks}.json"
    text = train(ranks, data, *TINY_MODEL, "--device", "cpu", "--global-batch", "8", "--loaders", "resident,torch",
                 "--workers", "0", "--rounds", "3", "--block", "3", "--lead", "2", "--json", str(out), *extra,
                 script=LOADERS_BENCH)
    return json.loads(out.read_text()), text


@pytest.mark.parametrize("ranks", [1, 2])
def test_the_loaders_bench_runs_every_loader_in_one_process_in_rotated_blocks(data, tmp_path, ranks):
    run, text = _interleaved(ranks, data, tmp_path)
    assert run["world"] == ranks
    order = [(b["round"], b["loader"]) for b in run["blocks"]]
    assert order == [(0, "resident"), (0, "torch"), (1, "torch"), (1, "resident"), (2, "resident"), (2, "torch")]
    assert run["mismatched_blocks"] == 0
    assert all(b["step_ms"] > 0 and 0 < b["host_waited"] < 1 for b in run["blocks"]), run["blocks"]
    assert "paired vs resident" in text and "95 % interval" in text, text
    assert f"0 of {6 * ranks} blocks (every rank's) began with another batch" in text, text


def test_the_loaders_bench_bounds_the_paired_median_by_an_interval_that_holds_it(loaders_bench):
    assert loaders_bench.median_interval([0.02] * 9) == (0.02, 0.02)
    # Pairs 1-3 % slower, one outlier: the interval holds the median and leaves out 0 and the outlier.
    pairs = [0.01, 0.015, 0.02, 0.025, 0.03, 0.012, 0.028, 0.018, 0.022, 0.5]
    low, high = loaders_bench.median_interval(pairs)
    assert 0 < low <= 0.021 <= high < 0.5  # the median: 0.021
    assert loaders_bench.median_interval(pairs) == (low, high)  # a fixed seed: the same interval


def test_the_loaders_bench_fails_a_loader_whose_batches_are_not_the_resident_ones(data, loaders_bench, monkeypatch,
                                                                                    capsys):
    # A loader one batch ahead of the order: every block's first batch is another than the resident one.
    class OneAhead(loaders_bench.TorchBatches):
        def __iter__(self):
            batches = super().__iter__()
            next(batches)
            yield from batches

    monkeypatch.setattr(loaders_bench, "TorchBatches", OneAhead)
    for key in TORCHRUN_KEYS:
        monkeypatch.delenv(key, raising=False)
    with pytest.raises(SystemExit, match="2 block"):
        loaders_bench.main([data, *TINY_MODEL, "--device", "cpu", "--global-batch", "4", "--loaders", "resident,torch",
                            "--workers", "0", "--rounds", "2", "--block", "1", "--lead", "1"])
    assert "2 of 4 blocks (every rank's) began with another batch" in capsys.readouterr().out


@gpu
def test_the_loaders_bench_finds_sluices_batches_the_resident_ones_on_the_gpu(data, tmp_path):
    out = tmp_path / "interleaved.json"
    train(1, data, *TINY_MODEL, "--global-batch", "8", "--loaders", "resident,sluice,torch", "--workers", "2",
          "--rounds", "2", "--block", "3", "--lead", "2", "--json", str(out), script=LOADERS_BENCH)
    run = json.loads(out.read_text())
    assert run["mismatched_blocks"] == 0
    assert sorted({b["loader"] for b in run["blocks"]}) == ["resident", "sluice", "torch"]
