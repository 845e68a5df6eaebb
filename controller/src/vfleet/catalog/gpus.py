"""GPU catalog: memory as the driver reports it (what vLLM budgets), plus the specs the
planner needs. Data and sources live in data/gpus.json."""

from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass
from functools import cache

from vfleet.data import DATA_DIR
from vfleet.errors import UserError

GPUS_FILE = DATA_DIR / "gpus.json"
GIB = 1 << 30


@dataclass(frozen=True)
class Gpu:
    name: str
    aliases: tuple[str, ...]
    memory_bytes: int
    arch: str
    form_factor: str
    fp8: bool
    nvlink_gb_s: float
    bf16_dense_tflops: float
    fp8_dense_tflops: float
    hbm_tb_s: float
    fp4_dense_tflops: float = 0.0
    marketing_memory_gb: float = 0.0  # the size people write ("80GB"), not the driver total

    @property
    def memory_gib(self) -> float:
        return self.memory_bytes / GIB

    @property
    def nvswitch_class(self) -> bool:
        """SXM/superchip parts sit on NVSwitch baseboards where NCCL uses NVLink SHARP."""
        return self.form_factor in ("sxm", "superchip") and self.nvlink_gb_s > 0

    def with_memory_gib(self, gib: float) -> Gpu:
        return Gpu(**{**self.__dict__, "memory_bytes": int(gib * GIB)})


@cache
def catalog() -> tuple[Gpu, ...]:
    raw = json.loads(GPUS_FILE.read_text())["gpus"]
    return tuple(
        Gpu(
            name=g["name"],
            aliases=tuple(g.get("aliases") or ()),
            memory_bytes=int(g["memory_bytes"]),
            arch=str(g.get("arch") or "unknown"),
            form_factor=str(g.get("form_factor") or "pcie"),
            fp8=bool(g.get("fp8")),
            nvlink_gb_s=float(g.get("nvlink_gb_s") or 0),
            bf16_dense_tflops=float(g.get("bf16_dense_tflops") or 0),
            fp8_dense_tflops=float(g.get("fp8_dense_tflops") or 0),
            hbm_tb_s=float(g.get("hbm_tb_s") or 0),
            fp4_dense_tflops=float(g.get("fp4_dense_tflops") or 0),
            marketing_memory_gb=float(g.get("marketing_memory_gb") or 0),
        )
        for g in raw
    )


# Words that name the maker or the product line, never the part.
VENDOR_WORDS = frozenset({"nvidia", "geforce", "tesla", "amd", "instinct"})
# Words that say nothing about which part it is.
NOISE_WORDS = frozenset({"gpu", "graphics", "card"})
_MEMORY_RE = re.compile(r"^(\d+(?:\.\d+)?)(gb|g|gib)$")
_MEMORY_UNITS = ("gb", "g", "gib")
_NOISE_RE = re.compile(r"^(hbm\d*e?|gddr\d*x?)$")  # memory technology: the size decides
_FORMS = {"sxm": "sxm", "pcie": "pcie", "pci": "pcie", "nvl": "nvl", "oam": "oam"}
# A memory written within this fraction of the catalog's marketing size still matches it
# (B200 is sold as 180 GB and 192 GB).
MEMORY_TOLERANCE = 0.1


@dataclass(frozen=True)
class GpuName:
    """A GPU name split into what identifies a part: family words, memory, form factor."""

    family: tuple[str, ...]
    memory_gb: float | None
    form: str | None

    @property
    def key(self) -> str:
        return "".join(self.family)


def _tokens(text: str) -> list[str]:
    return [t for t in re.split(r"[^a-z0-9.]+", text.lower()) if t]


def parse_name(text: str) -> GpuName:
    """'NVIDIA A100-SXM4-80GB' -> (('a100',), 80.0, 'sxm'); vendor and noise words dropped."""
    words = [t.strip(".") for t in _tokens(text)]
    family: list[str] = []
    memory: float | None = None
    form: str | None = None
    i = 0
    while i < len(words):
        word = words[i]
        nxt = words[i + 1] if i + 1 < len(words) else ""
        match = _MEMORY_RE.match(word)
        if match:
            memory = float(match.group(1))
        elif word.replace(".", "").isdigit() and nxt in _MEMORY_UNITS:
            memory, i = float(word), i + 1  # "80 GB"
        elif re.sub(r"\d+$", "", word) in _FORMS:
            form = _FORMS[re.sub(r"\d+$", "", word)]  # sxm4, sxm5, sxm6 are all SXM
        elif word not in VENDOR_WORDS | NOISE_WORDS and word and not _NOISE_RE.match(word):
            family.append(word)
        i += 1
    return GpuName(tuple(family), memory, form)


@dataclass(frozen=True)
class _Entry:
    gpu: Gpu
    keys: frozenset[str]  # the catalog name and every alias, vendor words dropped
    families: tuple[tuple[str, ...], ...]  # family words of the name and of each alias


@cache
def _index() -> tuple[_Entry, ...]:
    entries = []
    for gpu in catalog():
        names = [gpu.name, *gpu.aliases]
        parsed = [parse_name(n) for n in names]
        keys = {_exact_key(n) for n in names}
        entries.append(_Entry(gpu, frozenset(keys), tuple(dict.fromkeys(p.family for p in parsed))))
    return tuple(entries)


def _exact_key(text: str) -> str:
    return "".join(t for t in _tokens(text) if t not in VENDOR_WORDS).replace(".", "")


def _family_matches(wanted: tuple[str, ...], entry: _Entry) -> bool:
    """The written family words all belong to one of the part's names ('RTX PRO 6000' is
    RTX-PRO-6000-Blackwell), or run together spell it ('RTX3090')."""
    if not wanted:
        return False
    joined = "".join(wanted)
    return any(set(wanted) <= set(fam) or joined == "".join(fam) for fam in entry.families)


def _memory_close(gpu: Gpu, memory_gb: float) -> float | None:
    if not gpu.marketing_memory_gb:
        return None
    off = abs(gpu.marketing_memory_gb - memory_gb) / memory_gb
    return off if off <= MEMORY_TOLERANCE else None


def matching_gpus(name: str) -> list[Gpu]:
    """Every catalog GPU the name can mean: one when it is unambiguous."""
    wanted = _exact_key(name)
    # A name nvidia-smi prints, vendor words aside, is exact: "H200" is what an H200 SXM
    # prints ("NVIDIA H200"; the NVL card prints "NVIDIA H200 NVL").
    exact = [e.gpu for e in _index() if wanted in e.keys]
    if exact:
        return exact
    parsed = parse_name(name)
    found = [e.gpu for e in _index() if _family_matches(parsed.family, e)]
    if parsed.memory_gb is not None:
        scored = [
            (off, g) for g in found if (off := _memory_close(g, parsed.memory_gb)) is not None
        ]
        best = min((off for off, _ in scored), default=None)
        found = [g for off, g in scored if off == best]
    if parsed.form is not None:
        found = [g for g in found if g.form_factor == parsed.form]
    elif parsed.memory_gb is not None and len(found) > 1:
        # Memory given, form factor not: the SXM part. nvidia-smi names the others by form
        # ("NVIDIA H100 PCIe", "NVIDIA A100 80GB PCIe", "NVIDIA H200 NVL") and the SXM part
        # by its memory ("NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB"), so "H100 80GB"
        # is what an SXM host prints, not the PCIe card of the same size.
        sxm = [g for g in found if g.form_factor == "sxm"]
        found = sxm if len(sxm) == 1 else found
    return found


def _closest(parsed: GpuName, n: int = 3) -> list[str]:
    """Catalog names nearest a written name by its parts: family words first, then memory,
    then form factor."""
    if not parsed.family:
        return []
    scored = []
    for entry in _index():
        family = max(
            difflib.SequenceMatcher(None, parsed.key, "".join(f)).ratio() for f in entry.families
        )
        if family < 0.5:
            continue
        score = family
        if parsed.memory_gb is not None and _memory_close(entry.gpu, parsed.memory_gb) is not None:
            score += 0.3
        if parsed.form is not None and entry.gpu.form_factor == parsed.form:
            score += 0.1
        scored.append((-score, entry.gpu.name))
    return [name for _, name in sorted(scored)[:n]]


def resolve_gpu(name: str) -> Gpu:
    """A catalog name, the name nvidia-smi prints, or what people write ("H100 80GB",
    "RTX 3090 24GB", "a100-sxm4-40gb"), when it names one part. Several: refused."""
    found = matching_gpus(name)
    if len(found) == 1:
        return found[0]
    if found:
        raise UserError(
            f"GPU {name!r} could be any of {', '.join(g.name for g in found)}: name one "
            "(add the memory, e.g. 80GB, or the form factor SXM, PCIe or NVL)"
        )
    close = _closest(parse_name(name))
    hint = f" (close: {', '.join(close)})" if close else ""
    raise UserError(
        f"unknown GPU {name!r}{hint}: use a catalog name from `vfleet gpus` or the exact name "
        "nvidia-smi prints, or pass --gpu-memory-gib with the closest one"
    )
