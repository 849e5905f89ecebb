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
