"""`vfleet destroy` keeps an environment's history (the ledger calibration fits on and the
reports) and removes everything else it made; `--purge` removes the history too. The hosts'
side of destroy is the e2e tier's (tests/e2e/test_destroy.py); this is the bundle's side."""

from __future__ import annotations

from pathlib import Path

from support.bundles import deploy_context
from vfleet.deploy.pipeline import Run, _forget


def _filled(tmp_path: Path):
    ctx = deploy_context(tmp_path, {})
    (ctx.artifacts / "ledger.jsonl").write_text('{"engine": "0"}\n')
    (ctx.artifacts / "report").mkdir(exist_ok=True)
    (ctx.artifacts / "report" / "index.html").write_text("<html></html>")
    (ctx.artifacts / "launch").mkdir(exist_ok=True)
    (ctx.artifacts / "plan.json").write_text("{}")
    return ctx


def test_destroy_keeps_the_ledger_and_reports(tmp_path, capsys):
    ctx = _filled(tmp_path)
    _forget(Run(ctx, "destroy"))
    assert sorted(p.name for p in ctx.artifacts.iterdir()) == ["ledger.jsonl", "report"]
    assert (ctx.artifacts / "ledger.jsonl").read_text() == '{"engine": "0"}\n'
    assert "PURGE=1" in capsys.readouterr().out


def test_purge_removes_the_history_too(tmp_path: Path) -> None:
    ctx = _filled(tmp_path)
    _forget(Run(ctx, "destroy", purge=True))
    assert not ctx.artifacts.exists()


def test_without_history_the_artifacts_go_whole(tmp_path: Path) -> None:
    ctx = deploy_context(tmp_path, {})
    _forget(Run(ctx, "destroy"))
    assert not ctx.artifacts.exists()
