"""`render_files`: a render's typed engines in, every file `vfleet render` writes out.

The one module that composes the engines' files with firewall.json: the engine render
(vfleet.render.engines) and the firewall (vfleet.render.firewall) each know only the types
in vfleet.render.types, never each other. Pure: contents out, vfleet.render.write writes them.
"""

from __future__ import annotations

import json

from vfleet.catalog.flag_registry import FlagSet
from vfleet.documents.plan import Plan
from vfleet.render.firewall import exposure
from vfleet.render.formats import environments
from vfleet.render.types import EngineOnHost, HostRender, Rendered, RenderOptions, Router

# Home directories that ProtectHome=yes would hide from the unit: when the service home, the
# model, vLLM or the key file lives under one of them, the unit gets ProtectHome=read-only
# (and ReadWritePaths= keeps the service home writable).
HOME_ROOTS = ("/home/", "/root/", "/run/user/")


def _hardening(opts: RenderOptions) -> dict[str, str]:
    used = (opts.service_home, opts.model_path, opts.vllm_bin, opts.api_key_file or "")
    under_home = any(path.rstrip("/").startswith(HOME_ROOTS) for path in used)
    return {
        "service_home": opts.service_home,
        "protect_home": "read-only" if under_home else "yes",
    }


def _ray_head(rendered: Rendered, engine: EngineOnHost) -> HostRender:
    return next(
        h
        for h in rendered.hosts
        if any(e.replica == engine.replica and e.role == "ray-head" for e in h.engines)
    )


def _engine_files(
    rendered: Rendered, host: HostRender, engine: EngineOnHost, opts: RenderOptions, flags: FlagSet
) -> dict[str, str]:
    envs = environments()
    hardening = _hardening(opts)
    base = f"{host.name}/{engine.id}"
    ctx = {
        "host": host,
        "engine": engine,
        "plan_name": opts.plan_name,
        "flags_version": flags.version,
        "flag_source": flags.summary,
        "vllm_bin": opts.vllm_bin,
        "model_path": opts.model_path,
        "api_key_file": opts.api_key_file,
        "install_dir": opts.install_dir,
        "service_user": opts.service_user,
        "ray": engine.mode == "ray",
        "ray_unit": f"vfleet-ray-{engine.id}.service",
        **hardening,
    }
    files = {f"{base}/vllm.env": envs[".env.j2"].get_template("vllm.env.j2").render(ctx)}
    if engine.mode == "ray":
        files[f"{base}/vfleet-ray-{engine.id}.service"] = (
            envs[".service.j2"]
            .get_template("ray.service.j2")
            .render(
                host=host,
                role="head" if engine.role == "ray-head" else "worker",
                engine_id=engine.id,
                service_user=opts.service_user,
                install_dir=opts.install_dir,
                ray_bin=opts.ray_bin,
                ray_port=opts.ray_port,
                ray_ports=opts.ray_ports,
                head_address=_ray_head(rendered, engine).address,
                **hardening,
            )
        )
    if engine.runs_vllm:
        files[f"{base}/launch.sh"] = envs[".sh.j2"].get_template("launch.sh.j2").render(ctx)
        files[f"{base}/vfleet-vllm-{engine.id}.service"] = (
            envs[".service.j2"].get_template("vllm.service.j2").render(ctx)
        )
        files[f"{base}/command.json"] = json.dumps(engine.argv(opts), indent=2) + "\n"
    return files


def _router_files(router: Router, opts: RenderOptions) -> dict[str, str]:
    """The router's launch script and unit, on its host (vfleet.render.disaggregated)."""
    envs = environments()
    ctx = {
        "host": router.host,
        "plan_name": opts.plan_name,
        "router_bin": opts.router_bin,
        "args": router.argv[1:],
        "service_user": opts.service_user,
        "install_dir": opts.install_dir,
        **_hardening(opts),
    }
    base = f"{router.host}/router"
    return {
        f"{base}/router.sh": envs[".sh.j2"].get_template("router.sh.j2").render(ctx),
        f"{base}/vfleet-router.service": envs[".service.j2"]
        .get_template("router.service.j2")
        .render(ctx),
        f"{base}/command.json": json.dumps(router.argv, indent=2) + "\n",
    }


def render_files(
    rendered: Rendered, opts: RenderOptions, flags: FlagSet, plan: Plan
) -> dict[str, str]:
    """Relative path -> file content for everything `vfleet render` writes."""
    files: dict[str, str] = {}
    for host in rendered.hosts:
        for engine in host.engines:
            files.update(_engine_files(rendered, host, engine, opts, flags))
    front: dict[str, object] = {"model": plan.model, "endpoints": rendered.endpoints}
    if rendered.router is not None:
        files.update(_router_files(rendered.router, opts))
        r = rendered.router
        front["router"] = {
            "host": r.host,
            "url": f"http://{r.address}:{r.port}/v1",
            "health": f"http://{r.address}:{r.port}/health",
        }
    files["endpoints.json"] = json.dumps(front, indent=2) + "\n"
    files["firewall.json"] = json.dumps(exposure(rendered, opts), indent=2) + "\n"
    return files
