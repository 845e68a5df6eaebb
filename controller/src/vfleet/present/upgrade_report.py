"""`vfleet upgrade-check`'s report as text: the three parts, each finding once with every
place it comes from (a flag rendered into eight engines is one line, not eight)."""

from __future__ import annotations

from vfleet.upgrade.outcome import Finding, Part, UpgradeReport

HEADINGS: dict[Part, str] = {
    "breaks": "Breaks: refused or ignored by the target as rendered today",
    "changes": "Changes silently: same deployment, other numbers",
    "observability": "Observability: metric names that move",
}
MAX_PLACES = 4  # places listed per finding before "and N more"


def _grouped(found: list[Finding]) -> list[tuple[Finding, list[str]]]:
    groups: dict[tuple[str, str, str, str], tuple[Finding, list[str]]] = {}
    for f in found:
        key = (f.kind, f.item, f.detail, f.instead)
        groups.setdefault(key, (f, []))[1].append(f.where)
    return list(groups.values())


def _places(where: list[str]) -> str:
    shown = ", ".join(where[:MAX_PLACES])
    more = len(where) - MAX_PLACES
    return shown + (f" and {more} more" if more > 0 else "")


def report_text(report: UpgradeReport, subject: str) -> str:
    lines = [f"vfleet upgrade-check: vLLM {report.from_version} -> {report.to_version} ({subject})"]
    for part in ("breaks", "changes", "observability"):
        found = _grouped(report.part(part))
        lines += ["", f"{HEADINGS[part]} ({len(found)})"]
        if not found:
            lines.append("  none")
        for n, (f, where) in enumerate(found, start=1):
            lines.append(f"  {n}. {f.item}  [{_places(where)}]")
            lines.append(f"     {f.detail}")
            if f.instead:
                lines.append(f"     -> {f.instead}")
    for note in report.notes:
        lines += ["", f"Not checked: {note}"]
    lines.append("")
    if report.breaks:
        count = len(_grouped(report.part("breaks")))
        lines.append(
            f"Result: {count} break(s) (exit 1): today's files would not run as they are on "
            f"vLLM {report.to_version}. Re-rendered for it (the new pin in group_vars, then "
            "make deploy), the deployment gets what each -> line says."
        )
    else:
        lines.append("Result: nothing breaks (exit 0); read the silent changes before rolling.")
    return "\n".join(lines)
