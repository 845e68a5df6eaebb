"""The normalised facts model (vfleet.documents.facts): real captures pass it, malformed facts are
refused in one line naming the file and the field, the generated JSON Schema is committed,
and no mutation of a valid facts file gets past load_facts_file as anything but a UserError
line or a file the cluster build accepts."""

from __future__ import annotations

import copy
import json
import math
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from support.facts import GB200, H100, H200, L40S, raw_probe, with_bandwidth
from vfleet.documents import schemas
from vfleet.documents.facts import FactsModel
from vfleet.errors import UserError
from vfleet.probe import host, normalize, to_cluster

FIXTURES = (H200, H100, L40S, GB200)


def _normalised(fixture: str) -> dict[str, Any]:
    return normalize.normalize(with_bandwidth(raw_probe(fixture), intra=21.5, inter=12.0))


def _load(tmp_path: Path, data: Any, name: str = "gpu-01.json") -> dict[str, Any]:
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return normalize.load_facts_file(path)


def _refused(tmp_path: Path, data: Any) -> str:
    with pytest.raises(UserError) as err:
        _load(tmp_path, data)
    message = str(err.value)
    assert "\n" not in message and "gpu-01.json" in message
    return message


# ------------------------------------------------------------- what passes


@pytest.mark.parametrize("fixture", FIXTURES)
def test_real_and_built_captures_validate(fixture, tmp_path):
    f = _normalised(fixture)
    checked = FactsModel.model_validate(f)
    assert checked.host == f["host"] and checked.gpu_count == f["gpu_count"] > 0
    # Every key normalize writes is a field of the model: nothing is left to defaults.
    assert checked.model_fields_set == set(FactsModel.model_fields)
    # Written out, it reads back through load_facts_file as it was (a hand-written file).
    assert _load(tmp_path, f, f"{f['host']}.json") == f


def test_the_model_does_not_change_what_normalize_returns():
    f = _normalised(H100)
    # Strict: nothing coerced, so the checked model dumps back to the same document.
    dumped = FactsModel.model_validate(f).model_dump(by_alias=True, exclude_unset=True)
    assert json.loads(json.dumps(dumped)) == json.loads(json.dumps(f))


def test_a_minimal_hand_written_file(tmp_path):
    doc = {"schema": "vfleet.facts/1", "gpu_name": "NVIDIA H200", "gpu_count": 1}
    loaded = _load(tmp_path, doc, "gpu-07.json")
    assert loaded["host"] == "gpu-07"  # from the file name
    spec = to_cluster.cluster_from_facts([loaded])
    assert spec.nodes[0].name == "gpu-07" and spec.gpu.name == "H200-SXM-141GB"


def test_parser_keeps_only_flags_the_model_accepts():
    text = "  --max-model-len MAX\n  --Weird.Flag X\n  --ok_not Y\n  --kv-cache-dtype Z\n"
    assert host.parse_vllm_flags(text) == ["--kv-cache-dtype", "--max-model-len"]


# ------------------------------------------------------------- what is refused


def _set(path: tuple[Any, ...], value: Any):
    def apply(doc: dict[str, Any]) -> None:
        node = doc
        for step in path[:-1]:
            node = node[step]
        node[path[-1]] = value

    return apply


MALFORMED = [
    (_set(("bandwidth", "intra_allreduce_busbw_GBps"), math.nan), "NaN is not a number"),
    (_set(("bandwidth", "inter_allreduce_busbw_GBps"), -1.0), "inter_allreduce_busbw_GBps"),
    (_set(("gpu_count",), "8"), "gpu_count: Input should be a valid integer, got '8'"),
    (_set(("gpu_count",), 73), "gpu_count: Input should be less than or equal to 72"),
    (_set(("gpu_count",), True), "gpu_count: Input should be a valid integer"),
    (_set(("host",), "a/b"), "host: must be an RFC 1123 label"),
    (_set(("address",), "x y"), "address: must be an IP address or a DNS name"),
    (_set(("gpu_cuont",), 8), "gpu_cuont: unknown key: did you mean 'gpu_count'?"),
    (_set(("gpu_memory_used_mib",), -1), "gpu_memory_used_mib: Input should be greater than"),
    (_set(("host_memory_mib",), 10**8 + 1), "host_memory_mib: Input should be less than"),
    (_set(("gpu_name",), None), "gpu_name: is null for 8 GPUs"),
    (_set(("bootstrap_interface",), "eth0; reboot"), "bootstrap_interface: must be a Linux"),
    (_set(("vllm", "flags"), ["--Tensor"]), "vllm.flags[0]: must be a long option"),
    (_set(("hcas", 0, "name"), "mlx5 0"), "hcas[0].name: must be a device name"),
    (_set(("nics", 0, "ipv4"), ["10.0.0.300"]), "nics[0].ipv4[0]: must be an IPv4 address"),
    (_set(("topology", "intra_link"), "nvswich"), "topology.intra_link: Input should be"),
    (_set(("topology", "matrix", "GPU99"), {}), "topology.matrix.GPU99: must be a GPU column"),
    (_set(("bandwidth", "iperf3_Gbps"), {"a b": 1.0}), "bandwidth.iperf3_Gbps.a b: must be an IP"),
    (_set(("schema",), "vfleet.facts/2"), "schema is 'vfleet.facts/2'"),
]


@pytest.mark.parametrize(("mutate", "needle"), MALFORMED)
def test_malformed_facts_are_one_line_naming_file_and_field(tmp_path, mutate, needle):
    doc = _normalised(H100)
    mutate(doc)
    assert needle in _refused(tmp_path, doc)


def test_gpus_must_match_the_count(tmp_path):
    doc = _normalised(H100)
    doc["gpus"].pop()
    assert "gpus: lists 7 GPUs but gpu_count is 8" in _refused(tmp_path, doc)


def test_not_an_object_and_no_schema(tmp_path):
    assert "one JSON object per host, not an array" in _refused(tmp_path, [1, 2])
    assert "schema is None" in _refused(tmp_path, {"host": "a", "gpu_count": 1})


def test_infinity_from_the_probe_is_refused_in_normalize():
    raw = with_bandwidth(raw_probe(H100), intra=math.inf)
    with pytest.raises(UserError) as err:
        normalize.normalize(raw, source="h100.json")
    assert str(err.value).startswith("h100.json (from the probe output): bandwidth.intra_")
    assert "finite" in str(err.value)


def test_a_probe_host_name_that_is_not_a_label_is_refused():
    with pytest.raises(UserError, match=r"x\.json \(from the probe output\): host: must be"):
        normalize.normalize(raw_probe(H200, host="../etc"), source="x.json")


# ------------------------------------------------------------- the generated JSON Schema


def test_the_generated_json_schema_is_closed_and_names_the_required_keys():
    # tests/unit/documents/test_spec_schemas.py checks that the committed file is the generated one.
    schema = schemas.generate("facts")
    assert schema["additionalProperties"] is False
    assert {"schema", "host", "gpu_count", "gpu_name"} <= set(schema["required"])


# ------------------------------------------------------------- mutations


HOSTILE = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([1e308, -0.0, 10**30, "a/b", "../../x", "x y", "$(reboot)", "\n", "", "é"]),
    st.text(max_size=40),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=8), st.integers(), max_size=3),
)
BASES = {name: _normalised(name) for name in FIXTURES}


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix] if prefix else []
    if isinstance(node, dict):
        for key, value in node.items():
            out += _paths(value, (*prefix, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            out += _paths(value, (*prefix, index))
    return out


@st.composite
def mutated(draw: st.DrawFn) -> dict[str, Any]:
    doc = copy.deepcopy(BASES[draw(st.sampled_from(FIXTURES))])
    for _ in range(draw(st.integers(1, 4))):
        paths = _paths(doc)
        if not paths:
            break
        path = draw(st.sampled_from(paths))
        parent = doc
        for step in path[:-1]:
            parent = parent[step]
        action = draw(st.sampled_from(["delete", "replace", "add"]))
        if action == "delete":
            del parent[path[-1]]
        elif action == "replace":
            parent[path[-1]] = draw(HOSTILE)
        elif isinstance(parent, dict):
            parent[draw(st.text(min_size=1, max_size=12))] = draw(HOSTILE)
        else:
            parent.append(draw(HOSTILE))
    return doc


@settings(
    max_examples=150,
    deadline=timedelta(seconds=2),
    suppress_health_check=[HealthCheck.too_slow],
)
@given(doc=mutated())
def test_mutated_facts_are_a_user_error_line_or_usable(tmp_path_factory, doc):
    path = tmp_path_factory.getbasetemp() / "mutated-host.json"
    path.write_text(json.dumps(doc))  # NaN and Infinity go out as JSON's non-standard words
    try:
        loaded = normalize.load_facts_file(path)
        # Accepted facts must be usable: the cluster build refuses in a line, never crashes.
        to_cluster.cluster_from_facts([loaded], allow_partial=True)
    except UserError as exc:
        assert "\n" not in str(exc) and str(exc).strip()


@pytest.mark.parametrize(
    "raw",
    [
        {"sysfs": "x"},
        {"bandwidth": [1]},
        {"files": 3, "errors": 7},
    ],
)
def test_a_probe_capture_of_the_wrong_shape_is_one_line(tmp_path, raw):
    path = tmp_path / "h1.json"
    path.write_text(json.dumps({"schema": "vfleet.probe/1", **raw}))
    with pytest.raises(UserError) as err:
        normalize.load_facts_file(path)
    message = str(err.value)
    assert "\n" not in message and message.startswith(str(path)), message
