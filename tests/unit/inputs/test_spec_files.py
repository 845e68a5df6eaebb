"""The reading foundation (vfleet.inputs.files and validate) and the model config reader built
on it: every refusal is one UserError line naming the file."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from vfleet.catalog.model_shape import load_config_file, spec_from_config
from vfleet.catalog.models import catalog_entry, catalog_ids, load_model
from vfleet.errors import UserError
from vfleet.inputs.files import MAX_BYTES, load_json, load_yaml, parse_json, parse_yaml, read_text
from vfleet.inputs.strict import StrictModel
from vfleet.inputs.validate import validate


def _one_line(exc: pytest.ExceptionInfo[UserError]) -> str:
    message = str(exc.value)
    assert message and "\n" not in message, message
    return message


# ---- read_text ------------------------------------------------------------------------


def _write(tmp_path: Path, data: bytes) -> Path:
    path = tmp_path / "spec.yaml"
    path.write_bytes(data)
    return path


@pytest.mark.parametrize(
    ("make", "says"),
    [
        (lambda t: t, "is a directory: pass the file itself"),
        (lambda t: t / "missing.yaml", "does not exist: check the path"),
        (lambda t: _write(t, b"nodes: 1\x00\x01"), "is a binary file, not text"),
        (lambda t: _write(t, b"gpu: H100\xff\n"), "is not UTF-8 text (byte 9 is 0xff): save it"),
        # A path through a regular file cannot be read, even by root (tests run as root).
        (lambda t: _write(t, b"x: 1\n") / "child.yaml", "cannot read cluster spec"),
    ],
)
def test_read_text_refuses_in_one_line(tmp_path, make, says):
    path = make(tmp_path)
    with pytest.raises(UserError) as caught:
        read_text(path, "cluster spec")
    message = _one_line(caught)
    assert str(path) in message and says in message, message


def test_read_text_refuses_oversized_files(tmp_path):
    path = _write(tmp_path, b"#" * (MAX_BYTES + 1))
    with pytest.raises(UserError) as caught:
        read_text(path, "workload file")
    assert "MiB, more than the 8 MiB vfleet reads" in _one_line(caught)


def test_read_text_drops_a_utf8_bom(tmp_path):
    assert read_text(_write(tmp_path, b"\xef\xbb\xbfa: 1\n"), "x") == "a: 1\n"


# ---- YAML -----------------------------------------------------------------------------


def test_duplicate_keys_are_refused_with_both_lines():
    with pytest.raises(UserError) as caught:
        parse_yaml("a: 1\nb:\n  c: 1\n  c: 2\n", "f.yaml")
    assert _one_line(caught).startswith("f.yaml line 4: 'c' appears twice (lines 3 and 4)")


def test_an_alias_bomb_is_refused_fast():
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 9)]
    start = time.monotonic()
    with pytest.raises(UserError) as caught:
        parse_yaml("\n".join(lines) + "\n", "bomb.yaml")
    assert time.monotonic() - start < 5
    assert "expands to more than 200,000 values" in _one_line(caught)


def test_deep_nesting_is_refused():
    with pytest.raises(UserError) as caught:
        parse_yaml("a: " + "[" * 100 + "]" * 100 + "\n", "deep.yaml")
    assert "nests deeper than 64 levels" in _one_line(caught)


def test_a_recursive_alias_is_refused():
    with pytest.raises(UserError) as caught:
        parse_yaml("a: &x [*x]\n", "loop.yaml")
    assert _one_line(caught).startswith("loop.yaml")


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("a: [1, 2\n", "f.yaml line 2"),
        ("a: !!python/object:os.system x\n", "could not determine a constructor"),
        ("a: " + "7" * 5000 + "\n", "cannot read a value (Exceeds the limit (4300 digits)"),
        ("a: 2001-13-01\n", "cannot read a value (month must be in 1..12): fix it or quote it"),
    ],
)
def test_bad_yaml_is_one_line(text, says):
    with pytest.raises(UserError) as caught:
        parse_yaml(text, "f.yaml")
    message = _one_line(caught)
    assert message.startswith("f.yaml") and says in message, message


def test_lines_are_kept_for_keys_and_items(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("# comment\nnodes:\n  - name: a\n  - name: b\n    gpus: 8\n")
    doc = load_yaml(path, "cluster spec")
    assert doc.source == str(path)
    assert doc.line_of(("nodes",)) == 2
    assert doc.line_of(("nodes", 1)) == 4 and doc.line_of(("nodes", 1, "gpus")) == 5
    assert doc.line_of(("nodes", 1, "missing")) == 4  # the deepest part that has a line


# ---- JSON -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ('{"a": NaN}', "NaN is not a number JSON allows"),
        ('{"a": Infinity}', "Infinity is not a number JSON allows"),
        ('{"a": -Infinity}', "-Infinity is not a number JSON allows"),
        ('{"a": 1, "a": 2}', "'a' appears twice"),
        ('{"a": 1,}', "f.json line 1: not JSON"),
        ("[" * 100_000 + "]" * 100_000, "nests too deep"),
    ],
)
def test_bad_json_is_one_line(text, says):
    with pytest.raises(UserError) as caught:
        parse_json(text, "f.json")
    message = _one_line(caught)
    assert message.startswith("f.json") and says in message, message


def test_load_json_reads_through_read_text(tmp_path):
    path = tmp_path / "p.json"
    path.write_bytes(b'{"a": "\xff"}')
    with pytest.raises(UserError, match="is not UTF-8 text"):
        load_json(path, "plan")


# ---- validate -------------------------------------------------------------------------


class Inner(StrictModel):
    """A section."""

    port: int
    """the port (e.g. 8000)"""


class Outer(StrictModel):
    """A document."""

    inner: Inner
    """the section (e.g. {port: 8000})"""
    name: str = "x"
    """a name (e.g. gpu-a)"""


def test_validate_names_file_line_field_value_and_hint():
    doc = parse_yaml("name: a\ninner:\n  port: '80'\n", "d.yaml")
    with pytest.raises(UserError) as caught:
        validate(Outer, doc)
    assert _one_line(caught) == (
        "d.yaml line 3: inner.port: Input should be a valid integer, got '80'; expected the port "
        "(e.g. 8000)"
    )


def test_validate_suggests_the_nearest_key():
    doc = parse_yaml("inner:\n  port: 1\n  prot: 2\n", "d.yaml")
    with pytest.raises(UserError) as caught:
        validate(Outer, doc)
    assert _one_line(caught) == "d.yaml line 3: inner.prot: unknown key: did you mean 'port'?"


def test_validate_keeps_odd_keys_on_one_line():
    doc = parse_yaml('inner: {port: 1}\n"a\\nb": 2\n', "d.yaml")
    with pytest.raises(UserError) as caught:
        validate(Outer, doc)
    assert "'a\\nb': unknown key" in _one_line(caught)


# ---- model config.json (vfleet.catalog.model_shape reads it through spec.files) -----------------

LLAMA = "meta-llama/Llama-3.1-8B-Instruct"


def _config_dir(tmp_path: Path, **changes) -> Path:
    cfg = {**catalog_entry(LLAMA)["config"], **changes}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    return tmp_path


@pytest.mark.parametrize(
    ("changes", "says"),
    [
        ({"num_hidden_layers": 10**7}, "num_hidden_layers: must be a whole number from 1 to 1,024"),
        ({"num_hidden_layers": 0}, "num_hidden_layers: must be a whole number from 1 to 1,024"),
        ({"num_hidden_layers": 32.5}, "num_hidden_layers: must be a whole number"),
        ({"hidden_size": "4096"}, "hidden_size: must be a whole number from 1 to 1,000,000"),
        ({"hidden_size": True}, "hidden_size: must be a whole number"),
        ({"num_attention_heads": 0}, "num_attention_heads: must be a whole number from 1 to 4,096"),
        ({"num_key_value_heads": 5000}, "num_key_value_heads: must be a whole number from 1"),
        ({"vocab_size": 10**8}, "vocab_size: must be a whole number from 1 to 10,000,000"),
        ({"num_local_experts": 5000}, "num_local_experts: must be a whole number from 0 to 4,096"),
        ({"max_position_embeddings": 1e20}, "max_position_embeddings: must be a whole number"),
        ({"intermediate_size": -1}, "intermediate_size: must be a whole number from 0"),
        ({"architectures": "Llama"}, "architectures: must be a list of names, got 'Llama'"),
        ({"quantization_config": [1]}, "quantization_config: must be a JSON object"),
        ({"mlp_only_layers": [[1]]}, "mlp_only_layers: must be a list of whole numbers"),
        ({"layer_types": [1]}, "layer_types: must be a list of names"),
        ({"compress_rates": {"a": "x"}}, "compress_rates: must map layer types to whole numbers"),
        ({"text_config": {"hidden_size": 10**9}}, "text_config.hidden_size: must be a whole"),
        (
            {"vision_config": {"hidden_size": 1024, "num_hidden_layers": 10**6}},
            "vision_config.num_hidden_layers: must be a whole number from 0 to 1,024",
        ),
    ],
)
def test_config_numbers_are_checked_before_use(tmp_path, changes, says):
    folder = _config_dir(tmp_path, **changes)
    start = time.monotonic()
    with pytest.raises(UserError) as caught:
        load_model(str(folder))
    assert time.monotonic() - start < 2
    message = _one_line(caught)
    assert message.startswith(f"model config {folder / 'config.json'}: "), message
    assert says in message and message.endswith(": fix config.json"), message


def test_config_file_is_read_through_spec_files(tmp_path):
    (tmp_path / "config.json").write_text('{"hidden_size": 1, "hidden_size": 2}')
    with pytest.raises(UserError, match="'hidden_size' appears twice"):
        load_config_file(tmp_path)
    (tmp_path / "config.json").write_bytes(b"\x00\x01")
    with pytest.raises(UserError, match="is a binary file"):
        load_config_file(tmp_path)
    (tmp_path / "config.json").write_text('{"vocab_size": NaN}')
    with pytest.raises(UserError, match="NaN is not a number JSON allows"):
        load_config_file(tmp_path / "config.json")
    (tmp_path / "config.json").write_text("[1]")
    with pytest.raises(UserError, match="is not a JSON object"):
        load_config_file(tmp_path)
    with pytest.raises(UserError, match=r"no config\.json at"):
        load_config_file(tmp_path / "nope")


def test_every_catalog_model_is_within_the_bounds():
    for model in catalog_ids():
        entry = catalog_entry(model)
        assert spec_from_config(entry["config"], name=entry["id"]).num_layers >= 1


def test_a_good_config_folder_still_loads(tmp_path):
    assert load_model(str(_config_dir(tmp_path))) == spec_from_config(
        catalog_entry(LLAMA)["config"], name=str(tmp_path)
    )
