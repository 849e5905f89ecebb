"""The options are stated once (the binding's table, from the C++ defaults): the classes' signatures
and help() list every option with its values and default, and an unknown one is refused by name."""
import inspect
import pydoc

import pytest

import sluice


EXPECTED_DEFAULTS = {"chunk_items": 0, "first_chunk_items": 0, "ramp": True, "adapt_chunks": True, "depth": 4,
                     "kernel_order": "in_chunk_order", "compute_streams": 0, "staging_threads": 0,
                     "host_memory": "automatic", "priority": 0, "record": False, "report_bound": False, "device": None}


def test_the_signature_holds_every_option_with_its_default():
    params = inspect.signature(sluice.Pipeline).parameters
    assert {k: p.default for k, p in params.items()} == EXPECTED_DEFAULTS
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in params.values())
    multi = inspect.signature(sluice.MultiPipeline).parameters
    assert list(multi)[0] == "devices" and "device" not in multi
    assert {k: p.default for k, p in list(multi.items())[1:]} == {k: v for k, v in EXPECTED_DEFAULTS.items()
                                                                  if k != "device"}


def test_help_names_every_option_its_values_and_default():
    text = pydoc.render_doc(sluice.Pipeline, renderer=pydoc.plaintext)
    for name, default in EXPECTED_DEFAULTS.items():
        assert f"{name}={default!r}" in text, name
    for value in ("'in_chunk_order'", "'independent'", "'automatic'", "'stage'", "'register'"):
        assert value in text, value
    assert "'register'" in pydoc.render_doc(sluice.MultiPipeline, renderer=pydoc.plaintext)


def test_an_unknown_option_is_refused_by_name():
    with pytest.raises(TypeError, match="unknown option 'chunk_size': the options are chunk_items, "):
        sluice.Pipeline(chunk_size=10)
    with pytest.raises(TypeError, match="unknown option 'device'"):
        sluice.MultiPipeline([0], device=0)


def test_a_value_of_the_wrong_type_names_the_option():
    with pytest.raises(TypeError, match="depth takes a number, not 'four'"):
        sluice.Pipeline(depth="four")


def _defaults(rows):
    return {name: default for name, default, *_ in rows}


def test_the_loaders_and_prefetchers_signatures_are_their_tables():
    loader = _defaults(sluice._sluice.loader_options())
    params = inspect.signature(sluice.TokenLoader).parameters
    assert list(params)[:3] == ["files", "batch", "seq"] and params["batch"].default is inspect.Parameter.empty
    for name in ("shuffle", "seed", "drop_last", "ahead", "threads"):
        assert params[name].default == loader[name], name
    # Where the job places the loader, None: from torch.distributed or the environment.
    assert [params[name].default for name in ("rank", "world", "device")] == [None, None, None]
    prefetcher = _defaults(sluice._sluice.prefetcher_options())
    params = inspect.signature(sluice.Prefetcher).parameters
    assert {name: params[name].default for name in prefetcher} == prefetcher
    assert "ahead=" in pydoc.render_doc(sluice.TokenLoader, renderer=pydoc.plaintext)


def test_the_defaults_are_the_cpp_structs():
    # Written in sluice/loader/prefetcher.hpp and batch_prefetch_options.hpp; read, not restated.
    assert _defaults(sluice._sluice.loader_options())["ahead"] == 3
    assert _defaults(sluice._sluice.prefetcher_options())["ahead"] == 2
    assert _defaults(sluice._sluice.streamed_weights_options())["ahead"] == 1
    assert sluice._sluice.most_ahead == 30


def test_the_most_ahead_is_refused_past_and_any_integer_is_taken():
    np = pytest.importorskip("numpy")
    pytest.importorskip("torch")  # the Prefetcher makes torch tensors
    most = sluice._sluice.most_ahead
    with pytest.raises(ValueError, match=f"ahead must be 1 to {most} batches, not {most + 1}"):
        sluice.Prefetcher([], ahead=most + 1)
    with pytest.raises(TypeError, match="ahead takes a whole number of batches, not 2.5"):
        sluice.Prefetcher([], ahead=2.5)
    assert sluice.Prefetcher([], ahead=np.int64(3), _host_executor={})._ahead == 3


def test_an_unknown_loader_or_prefetcher_option_is_refused_by_name():
    with pytest.raises(TypeError, match="unknown option 'ahed': the options are shuffle, seed, "):
        sluice.TokenLoader(["never-opened.bin"], batch=1, seq=8, ahed=2)
    with pytest.raises(TypeError, match="unknown option 'depth': the options are ahead, threads, device"):
        sluice.Prefetcher([], depth=2)
