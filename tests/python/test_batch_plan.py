"""The order of a job's samples, host-only: the same on any number of ranks, equal batch counts,
a state that resumes elsewhere. And where a process's rank and world come from."""
import pytest

import sluice


def job(items, batch, world, **options):
    return [sluice.BatchPlan(items, batch=batch, shuffle=True, seed=5, rank=r, world=world, **options)
            for r in range(world)]


def global_batch(plans, state):
    return [item for plan in plans for item in plan.batch_items(state)]


def run(plans, state, steps):
    """`steps` global batches from `state`: [(state, items)]."""
    out = []
    for _ in range(steps):
        out.append((state, global_batch(plans, state)))
        state = plans[0].next(state)
    return out, state


def test_a_state_saved_on_four_ranks_resumes_on_two_and_three_sample_for_sample():
    # 1000 items, a global batch of 24 (4 x 6, 2 x 12, 3 x 8): 42 global batches an epoch, the last padded.
    straight, _ = run(job(1000, 6, 4), {"epoch": 0, "sample": 0}, 120)
    saved = straight[50][0]
    assert saved["epoch"] == 1
    for world, batch in [(2, 12), (3, 8)]:
        plans = job(1000, batch, world)
        resumed, _ = run(plans, plans[0].start(saved), 70)
        for k, (state, items) in enumerate(resumed):
            assert items == straight[50 + k][1], f"{world} ranks, global batch {50 + k}"


def test_another_global_batch_serves_what_the_epoch_has_left_once():
    four = job(1000, 6, 4, drop_last=True)
    served, saved = run(four, {"epoch": 0, "sample": 0}, 20)
    two = job(1000, 10, 2, drop_last=True)
    rest = []
    for state, _ in two[0].epoch(saved):
        rest += global_batch(two, state)
    before = [item for _, items in served for item in items]
    assert sorted(before + rest) == list(range(1000))  # 480 served, then 520 (26 x 20)


def test_ten_items_over_three_ranks_are_four_batches_each():
    # Served short they would be 4, 3 and 3 batches, and a job's collectives would wait for ever.
    assert [len(p) for p in job(10, 1, 3)] == [4, 4, 4]
    assert [len(p) for p in job(10, 1, 3, drop_last=True)] == [3, 3, 3]


def test_a_batch_larger_than_the_data_is_refused():
    with pytest.raises(ValueError, match="a global batch of 4 rows x 3 ranks is larger than the 10 items"):
        sluice.BatchPlan(10, batch=4, rank=0, world=3)


def test_rank_and_world_come_from_the_environment_unless_given(monkeypatch):
    monkeypatch.setenv("RANK", "2")
    monkeypatch.setenv("WORLD_SIZE", "3")
    plan = sluice.BatchPlan(100, batch=4)
    assert (plan.rank, plan.world) == (2, 3)
    assert sluice.BatchPlan(100, batch=4, rank=0, world=1).world == 1
    assert sluice.job_place().source == "RANK and WORLD_SIZE"
    monkeypatch.setenv("RANK", "3")
    with pytest.raises(ValueError, match="rank 3 is outside a world of 3"):
        sluice.BatchPlan(100, batch=4)
    monkeypatch.delenv("WORLD_SIZE")
    with pytest.raises(ValueError, match="sets RANK without WORLD_SIZE"):
        sluice.job_place()
    monkeypatch.delenv("RANK")
    assert sluice.job_place() == sluice.JobPlace(0, 1, None, "a job of one process")


def test_rank_and_world_come_from_an_initialized_process_group(tmp_path, monkeypatch):
    torch = pytest.importorskip("torch", reason="PyTorch is not installed")
    dist = torch.distributed
    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("this torch has no torch.distributed with gloo")
    monkeypatch.setenv("RANK", "5")  # the process group wins over the environment
    monkeypatch.setenv("WORLD_SIZE", "9")
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'rendezvous'}", rank=0, world_size=1)
    try:
        place = sluice.job_place()
        assert (place.rank, place.world, place.source) == (0, 1, "torch.distributed")
    finally:
        dist.destroy_process_group()


def test_local_rank_picks_the_device_when_there_is_one(monkeypatch):
    # The GPUs the process sees are set here, not read from the machine: two
    # visible, LOCAL_RANK 1 is the second; one (a launcher that shows each
    # process only its own), the current one is kept.
    import sluice._sluice
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setattr(sluice._sluice, "device_count", lambda: 2)
    assert sluice.job_place().device == 1
    monkeypatch.setattr(sluice._sluice, "device_count", lambda: 1)
    assert sluice.job_place().device is None
    assert sluice.job_place(device=3).device == 3


def test_a_torch_dataloader_takes_it_as_its_batch_sampler_epoch_after_epoch():
    torch = pytest.importorskip("torch", reason="PyTorch is not installed")
    plan = sluice.BatchPlan(10, batch=4, shuffle=True, seed=3)
    dataset = torch.arange(100, 110)  # item i is 100 + i, so every batch shows which items it holds
    loader = torch.utils.data.DataLoader(dataset, batch_sampler=plan)
    for epoch in range(2):
        batches = [b.tolist() for b in loader]
        # batch_items is the plan's own order, read state by state; the loader must serve exactly that.
        expected, at = [], {"epoch": epoch, "sample": 0}
        while at["epoch"] == epoch:
            expected.append([100 + i for i in plan.batch_items(at)])
            at = plan.next(at)
        assert batches == expected
        assert sorted(v for b in batches for v in b) == list(range(100, 110))  # each item once (batch of 2 last)
    assert len(loader) == 3


def test_iteration_resumes_where_a_saved_state_left_off():
    plan = sluice.BatchPlan(12, batch=3, shuffle=True, seed=1)
    first = iter(plan)
    next(first)
    saved = plan.state_dict()
    rest = list(first)
    other = sluice.BatchPlan(12, batch=3, shuffle=True, seed=1)
    other.load_state_dict(saved)
    assert list(other) == rest
