"""GPU names as people write them: one part or a refusal that lists the candidates."""

import pytest

from vfleet.catalog.gpus import catalog, parse_name, resolve_gpu
from vfleet.errors import UserError
from vfleet_devtools.kvcases import match_gpu


@pytest.mark.parametrize(
    ("written", "part"),
    [
        # "H100 80GB" is the SXM part: nvidia-smi prints "NVIDIA H100 80GB HBM3" there and
        # "NVIDIA H100 PCIe" on the PCIe card of the same size.
        ("NVIDIA H100 80GB", "H100-SXM-80GB"),
        ("H100 80GB", "H100-SXM-80GB"),
        ("H100 80 GB", "H100-SXM-80GB"),
        ("H100 80G", "H100-SXM-80GB"),
        ("h100-80gb", "H100-SXM-80GB"),
        ("H100 SXM5 80GB HBM3", "H100-SXM-80GB"),
        ("H100 PCIe 80GB", "H100-PCIe-80GB"),
        ("NVIDIA H100 94GB", "H100-NVL-94GB"),
        ("H200 NVL 141GB", "H200-NVL-141GB"),
        ("H200 141GB", "H200-SXM-141GB"),
        ("RTX 3090 24GB", "RTX-3090"),
        ("NVIDIA GeForce RTX 3090 24GB", "RTX-3090"),
        ("NVIDIA GeForce RTX 4090", "RTX-4090"),
        ("RTX3090", "RTX-3090"),
        ("A100 80GB", "A100-SXM-80GB"),
        ("A100 80GB PCIe", "A100-PCIe-80GB"),
        ("a100-sxm4-40gb", "A100-SXM-40GB"),
        ("Tesla A100 40GB", "A100-SXM-40GB"),
        ("NVIDIA GH200 96GB", "GH200-96GB"),
        ("AMD Instinct MI300X 192GB", "MI300X"),
        ("B200 192GB", "B200"),  # sold as 180 GB and 192 GB: within the 10% tolerance
        ("RTX PRO 6000", "RTX-PRO-6000-Blackwell-96GB"),
        ("B300 SXM6 AC", "B300"),
        ("L40", "L40"),
        ("A10", "A10"),
    ],
)
def test_written_names_resolve_to_one_part(written, part):
    assert resolve_gpu(written).name == part


def test_every_catalog_name_and_nvidia_smi_alias_resolves_to_itself():
    for gpu in catalog():
        for name in (gpu.name, *gpu.aliases):
            assert resolve_gpu(name) is gpu, name
            assert resolve_gpu(name.lower()) is gpu, name


@pytest.mark.parametrize(
    ("written", "parts"),
    [
        ("H100", {"H100-SXM-80GB", "H100-PCIe-80GB", "H100-NVL-94GB"}),
        ("NVIDIA H100", {"H100-SXM-80GB", "H100-PCIe-80GB", "H100-NVL-94GB"}),
        ("A100", {"A100-SXM-80GB", "A100-SXM-40GB", "A100-PCIe-80GB"}),
        ("A100 SXM", {"A100-SXM-80GB", "A100-SXM-40GB"}),
        ("GH200", {"GH200-96GB", "GH200-144GB"}),
        ("RTX 6000", {"RTX-6000-Ada", "RTX-PRO-6000-Blackwell-96GB"}),
    ],
)
def test_a_name_that_fits_several_parts_is_refused_with_the_list(written, parts):
    with pytest.raises(UserError) as err:
        resolve_gpu(written)
    message = str(err.value)
    assert "\n" not in message and "could be any of" in message
    listed = message.split("could be any of ", 1)[1].split(": name one", 1)[0]
    # Exactly these: the old difflib hint offered A10, B300 and B200 for "H100".
    assert set(listed.split(", ")) == parts


def test_unknown_names_get_hints_from_their_parts():
    with pytest.raises(UserError) as err:
        resolve_gpu("Tesla V100 32GB")
    message = str(err.value)
    assert message.startswith("unknown GPU 'Tesla V100 32GB' (close: A100")
    assert "\n" not in message
    with pytest.raises(UserError, match=r"^unknown GPU 'foo': use a catalog name"):
        resolve_gpu("foo")


def test_names_split_into_family_memory_and_form():
    assert parse_name("NVIDIA A100-SXM4-80GB") == parse_name("a100 sxm 80 gb")
    parsed = parse_name("NVIDIA GeForce RTX 4090 24GB GDDR6X")
    assert (parsed.family, parsed.memory_gb, parsed.form) == (("rtx", "4090"), 24.0, None)
    assert parse_name("H200 NVL").form == "nvl"


def test_kv_case_descriptions_still_match():
    assert match_gpu("NVIDIA GeForce RTX 4080 16GB (WSL2)").name == "RTX-4080"
    assert match_gpu("NVIDIA L40S 48GB (PCIe, no NVLink)").name == "L40S"
    assert match_gpu("NVIDIA H100 80GB").name == "H100-SXM-80GB"
    assert match_gpu("NVIDIA H20 96GB").name == "H20-96GB"
