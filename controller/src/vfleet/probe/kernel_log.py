"""The kernel log's NVIDIA Xid lines (`journalctl -k -b -g 'NVRM: Xid'`), as the driver
writes them: `NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus.`"""

from __future__ import annotations

import re
from typing import Any

XID_LINE = re.compile(r"NVRM: Xid \((?P<device>[^)]{0,64})\): (?P<code>\d{1,5})(?:, (?P<rest>.*))?")


def parse_xids(text: str) -> list[dict[str, Any]]:
    """Every Xid line of a kernel log, as facts' xid_events entries."""
    out = []
    for line in text.splitlines():
        match = XID_LINE.search(line)
        if match:
            rest = (match["rest"] or "").strip()[:500]
            out.append({"device": match["device"], "code": int(match["code"]), "text": rest})
    return out


def xid_events(entry: Any) -> list[dict[str, Any]] | None:
    """The probe's `kernel_xid` command: its events, [] when it matched nothing, None when
    the log could not be read (no journalctl, no permission): a check then says so."""
    if not isinstance(entry, dict):
        return None
    stdout = entry.get("stdout")
    out = stdout if isinstance(stdout, str) else ""
    if entry.get("rc") == 0:
        return parse_xids(out)
    if entry.get("rc") == 1 and not out.strip() and not (entry.get("stderr") or "").strip():
        return []  # journalctl --grep exits 1 when nothing matched
    return None
