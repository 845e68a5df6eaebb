"""`vfleet doctor`: diagnose overload, tail latency, OOM and preemption from an engine's
metrics, its logs and its plan."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from vfleet.errors import UserError
from vfleet.spec import flags

LOG_TAIL_BYTES = 32 << 20  # the start-up lines doctor looks for sit in the last restart


def add_args(doc: argparse.ArgumentParser) -> None:
    doc.add_argument(
        "--endpoint",
        action="append",
        default=[],
        type=flags.endpoint,
        help="vLLM API base URL, e.g. http://10.0.0.11:8000 (repeat)",
    )
    doc.add_argument(
        "--endpoints",
        type=flags.path,
        metavar="FILE",
        help="every engine in this endpoints.json from `vfleet render`",
    )
    doc.add_argument(
        "--log",
        action="append",
        default=[],
        type=flags.path,
        help="a vLLM service log to read (repeat)",
    )
    doc.add_argument(
        "--journal",
        action="append",
        default=[],
        type=flags.unit,
        help="a local systemd unit whose journal to read (repeat)",
    )
    doc.add_argument("--plan", type=flags.path, help="the deployed plan JSON")
    doc.add_argument(
        "--served-model-name",
        help="read only this model's series (default: the model --endpoints names)",
    )
    doc.add_argument(
        "--max-num-seqs",
        type=flags.count(1, flags.MAX_SEQS),
        help="the engine's max-num-seqs, if known",
    )
    doc.add_argument(
        "--watch",
        type=flags.number(0, flags.MAX_WATCH_S, lo_open=False, example="30"),
        default=0.0,
        metavar="SECONDS",
        help="sample over this many seconds and report rates",
    )
    doc.add_argument("--json", action="store_true")


def _fetch_metrics(endpoint: str) -> str:
    import urllib.error
    import urllib.request

    url = endpoint.rstrip("/")
    if not url.startswith(("http://", "https://")):
        raise UserError(f"--endpoint {endpoint!r} is not a URL: write it like http://HOST:8000")
    try:
        with urllib.request.urlopen(f"{url}/metrics", timeout=10) as reply:
            # A vLLM server's /metrics is tens of KiB; cap what a wrong server can send.
            raw: bytes = reply.read(64 << 20)
    except urllib.error.HTTPError as exc:
        raise UserError(
            f"{url}/metrics answered HTTP {exc.code}: is this a vLLM API "
            "server? point --endpoint at its base URL"
        ) from None
    except (urllib.error.URLError, OSError, ValueError) as exc:  # ValueError: a bad URL
        reason = getattr(exc, "reason", exc)
        raise UserError(
            f"cannot reach {url}/metrics ({reason}): check the address, the port "
            "and that the vLLM service is running"
        ) from None
    text = raw.decode("utf-8", "replace")
    if not text.strip():
        raise UserError(
            f"{url}/metrics is empty: the server is not exporting metrics yet; "
            "retry once it has started"
        )
    return text


def _read_logs(args: argparse.Namespace) -> str:
    import subprocess

    parts = []
    for path in args.log:
        try:
            with path.open("rb") as f:
                size = f.seek(0, 2)
                f.seek(max(0, size - LOG_TAIL_BYTES))
                parts.append(f.read().decode("utf-8", "replace"))
        except OSError as exc:
            raise UserError(f"cannot read log {path}: {exc.strerror or exc}") from None
    for unit in args.journal:
        try:
            out = subprocess.run(
                ["journalctl", "-u", unit, "--no-pager", "-o", "cat", "-n", "20000"],
                capture_output=True,
                text=True,
                errors="replace",
                check=False,
                timeout=60,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise UserError(
                f"cannot read the journal of {unit} ({exc}): run doctor on the host itself, "
                "or pass the log with --log"
            ) from None
        if out.returncode != 0:
            raise UserError(f"journalctl -u {unit} failed: {out.stderr.strip()[:200]}")
        parts.append(out.stdout)
    return "\n".join(parts)


def _served_model(models: list[str], path: Path) -> str:
    """The one served model an endpoints.json names: with several, the user chooses."""
    models = list(dict.fromkeys(models))
    if len(models) > 1:
        raise UserError(
            f"{path} serves {len(models)} models ({', '.join(map(repr, models[:5]))}): pass "
            "the one to diagnose with --served-model-name"
        )
    return models[0]


def run(args: argparse.Namespace) -> int:
    import time

    from vfleet.observe import doctor, findings, metrics, startup
    from vfleet.spec.endpoints import load_endpoints

    endpoints = list(args.endpoint)
    served = args.served_model_name
    if served is not None and not served.strip():
        raise UserError("--served-model-name is empty: give the name the engine serves")
    if args.endpoints:
        listed = load_endpoints(args.endpoints).endpoints
        endpoints += [e.base_url for e in listed]
        served = served or _served_model([e.model for e in listed], args.endpoints)
    endpoints = list(dict.fromkeys(endpoints))  # the same server once, however it was named
    if not endpoints and not args.log and not args.journal:
        raise UserError("give at least one --endpoint (or --log/--journal) to diagnose")
    log = _read_logs(args)
    cfg = findings.config_from_log(log)
    if args.plan:
        from vfleet.spec.plan import load_plan

        cfg = findings.merge(cfg, findings.config_from_plan(load_plan(args.plan), str(args.plan)))
    if args.max_num_seqs:
        cfg.max_num_seqs, cfg.source = args.max_num_seqs, "--max-num-seqs"
    obs = None
    if endpoints:

        def scrape() -> tuple[float, metrics.Snapshot]:
            texts = [_fetch_metrics(e) for e in endpoints]
            sources = [e.rstrip("/") for e in endpoints]
            return time.monotonic(), metrics.parse(texts, sources, served)

        samples = [scrape()]
        if args.watch > 0:
            step = max(0.5, args.watch / 10)
            deadline = samples[0][0] + args.watch
            while time.monotonic() < deadline:
                time.sleep(min(step, max(0.0, deadline - time.monotonic())))
                samples.append(scrape())
        obs = doctor.observe(samples)
    found = startup.log_diagnoses(log, cfg) + (doctor.metric_diagnoses(obs, cfg) if obs else [])
    if args.json:
        print(json.dumps(doctor.report_json(obs, cfg, found), indent=2))
    else:
        print(doctor.report_text(obs, cfg, found, endpoints))
    return 0
