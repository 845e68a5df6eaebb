"""How bad each NVIDIA Xid in a host's kernel log is for serving (the events themselves:
`vfleet.probe.kernel_log`).

Severity follows NVIDIA's Xid catalog (docs.nvidia.com/deploy/xid-errors): hardware and
memory faults that need a reset or a replacement fail the host; the ones applications
cause (page faults, exceptions) warn. An Xid the table lacks warns.
"""

from __future__ import annotations

XID_SEVERITY: dict[int, tuple[str, str]] = {
    13: ("warn", "graphics engine exception, often the application"),
    31: ("warn", "GPU memory page fault, often the application"),
    43: ("warn", "GPU stopped processing"),
    45: ("warn", "preemptive cleanup after an earlier error"),
    48: ("fail", "double-bit ECC error"),
    61: ("fail", "internal micro-controller breakpoint"),
    62: ("fail", "internal micro-controller halt"),
    63: ("warn", "ECC page retirement or row remap recorded: reset to apply"),
    64: ("fail", "ECC page retirement or row remap failed"),
    74: ("fail", "NVLink error"),
    79: ("fail", "GPU has fallen off the bus"),
    92: ("warn", "high single-bit ECC error rate"),
    94: ("warn", "contained ECC error"),
    95: ("fail", "uncontained ECC error"),
    119: ("fail", "GSP RPC timeout"),
    120: ("fail", "GSP error"),
    140: ("fail", "unrecovered ECC error"),
}
