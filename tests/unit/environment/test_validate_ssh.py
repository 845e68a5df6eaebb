"""SSH options that run commands on the controller (ProxyCommand and its kin) are refused by
`vfleet validate` and the deploy wherever an environment sets them, in every spelling ssh
accepts, unless vfleet_allow_ssh_commands says the operator means it; and validate refuses
the deploy variables `vfleet render` would refuse (vfleet.documents.deploy.check_render_values)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import yaml

from support.cli_run import Result, vfleet
from support.paths import REPO
from vfleet.deploy import pipeline
from vfleet.environment import context, ssh_findings, ssh_options
from vfleet.errors import UserError

HOSTS = {
    "gpu-01": {"ansible_host": "10.0.0.1", "vfleet_gpus": 8},
    "gpu-02": {"ansible_host": "10.0.0.2", "vfleet_gpus": 8},
}


def _bundle(tmp_path: Path, hosts: bool = True) -> Path:
    """A bundle with a copy of the prod environment, two hosts in gpu_hosts unless told."""
    root = tmp_path / "repo"
    shutil.copytree(REPO / "inventories" / "prod", root / "inventories" / "prod")
    (root / "ansible").mkdir(parents=True)
    (root / "ansible" / "roles").symlink_to(REPO / "ansible" / "roles")
    (root / "ansible" / "ansible.cfg").symlink_to(REPO / "ansible" / "ansible.cfg")
    (root / "terraform").mkdir()
    (root / "terraform" / "envs").symlink_to(REPO / "terraform" / "envs")
    shutil.copy2(REPO / "pins.env", root / "pins.env")
    if hosts:
        _edit(_hosts_file(root), lambda d: d["all"]["children"].update(gpu_hosts={"hosts": HOSTS}))
    return root


def _hosts_file(root: Path) -> Path:
    return root / "inventories/prod/hosts.yml"


def _group_vars(root: Path) -> Path:
    return root / "inventories/prod/group_vars/all.yml"


def _edit(path: Path, change) -> None:
    doc = yaml.safe_load(path.read_text()) if path.exists() else {}
    change(doc)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(doc, sort_keys=False))


def _host_var(root: Path, name: str, value: object, host: str = "gpu-01") -> None:
    _edit(
        _hosts_file(root),
        lambda d: d["all"]["children"]["gpu_hosts"]["hosts"][host].update({name: value}),
    )


def _validate(root: Path, **env_vars: str) -> Result:
    environ = {
        k: v
        for k, v in os.environ.items()
        if k not in ("ANSIBLE_VAULT_PASSWORD_FILE", "ANSIBLE_CONFIG")
    }
    environ.update(env_vars)
    return vfleet("validate", "--env", "prod", "--root", str(root), env=environ)


def _refused(out: Result, *needles: str) -> str:
    assert out.returncode == 2, out.stdout + out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith("vfleet: error: "), lines[0]
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def _valid(out: Result) -> list[str]:
    """The run passed; its stderr lines (warnings) are returned."""
    assert out.returncode == 0, out.stdout + out.stderr
    assert "valid" in out.stdout
    return out.stderr.strip().splitlines()


# ---- every spelling, every variable, every place -------------------------------------------

# (the variable's value, the option the error names)
SPELLINGS = [
    ("-oProxyCommand=touch /tmp/x", "ProxyCommand"),
    ("-o ProxyCommand=touch", "ProxyCommand"),
    ("-o 'ProxyCommand touch /tmp/x'", "ProxyCommand"),
    ('-o"ProxyCommand=touch /tmp/x"', "ProxyCommand"),
    ("-o 'ProxyCommand = nc %h %p'", "ProxyCommand"),
    ("-o proxycommand=touch", "ProxyCommand"),
    ("-o PROXYCOMMAND=touch", "ProxyCommand"),
    ("-o '\"ProxyCommand\" touch'", "ProxyCommand"),
    ("-vo ProxyCommand=touch", "ProxyCommand"),
    ("-4voProxyCommand=touch", "ProxyCommand"),
    ("-C -o ServerAliveInterval=5 -o ProxyCommand=x", "ProxyCommand"),
    ("-o LocalCommand=id", "LocalCommand"),
    ("-o PermitLocalCommand=yes", "PermitLocalCommand yes"),
    ("-o permitlocalcommand=True", "PermitLocalCommand yes"),
    ("-o KnownHostsCommand=/bin/echo", "KnownHostsCommand"),
    ("-o 'Match exec true'", "Match exec"),
    ("-o PKCS11Provider=/tmp/lib.so", "PKCS11Provider"),
    ("-o SecurityKeyProvider=/tmp/lib.so", "SecurityKeyProvider"),
    ("-I /tmp/lib.so", "-I"),
]


@pytest.mark.parametrize(("value", "option"), SPELLINGS)
def test_every_spelling_is_refused_with_the_host_variable_and_option(tmp_path, value, option):
    root = _bundle(tmp_path)
    _host_var(root, "ansible_ssh_common_args", value)
    line = _refused(_validate(root), f"host gpu-01: ansible_ssh_common_args sets {option}, which")
    assert line.endswith(f"or set {ssh_findings.ALLOW}: true if you mean it")


@pytest.mark.parametrize("variable", [*ssh_options.SSH_VARS, ssh_options.PROXY_VAR])
def test_every_variable_is_checked(tmp_path, variable):
    root = _bundle(tmp_path)
    _host_var(root, variable, "-o ProxyCommand=touch")
    _refused(_validate(root), f"host gpu-01: {variable} sets ProxyCommand")


@pytest.mark.parametrize(
    ("variable", "value", "option"),
    [
        ("ansible_ssh_executable", "/tmp/evil", "ssh executable '/tmp/evil'"),
        ("ansible_scp_executable", "sh -c id", "scp executable 'sh -c id'"),
        ("ansible_sftp_executable", "/usr/bin/python3", "sftp executable"),
        ("ansible_connection", "local", "connection local"),
        ("ansible_connection", "ansible.builtin.local", "connection ansible.builtin.local"),
    ],
)
def test_a_program_run_in_place_of_ssh_or_the_host_is_refused(tmp_path, variable, value, option):
    root = _bundle(tmp_path)
    _host_var(root, variable, value)
    _refused(_validate(root), f"host gpu-01: {variable} sets {option}")


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("ansible_ssh_executable", "/usr/bin/ssh"),
        ("ansible_scp_executable", "scp"),
        ("ansible_connection", "ssh"),
        ("ansible_connection", "ansible.builtin.ssh"),
    ],
)
def test_the_usual_programs_and_connections_pass(tmp_path, variable, value):
    root = _bundle(tmp_path)
    _host_var(root, variable, value)
    assert _valid(_validate(root)) == []


@pytest.mark.parametrize(
    ("variable", "value", "option"),
    [
        ("ansible_scp_extra_args", "-S /tmp/evil", "-S"),
        ("ansible_sftp_extra_args", "-D /tmp/evil", "-D"),
        ("ansible_sftp_extra_args", "-qS/tmp/evil", "-S"),
        # Common args reach scp and sftp too, which read -S as their ssh program.
        ("ansible_ssh_common_args", "-S /tmp/ctl", "-S"),
    ],
)
def test_the_program_scp_and_sftp_start_is_refused(tmp_path, variable, value, option):
    root = _bundle(tmp_path)
    _host_var(root, variable, value)
    _refused(_validate(root), f"host gpu-01: {variable} sets {option}, which names")


def _in_inventory_group(root: Path) -> None:
    _edit(
        _hosts_file(root), lambda d: d["all"].update(vars={"ansible_ssh_args": "-oProxyCommand=x"})
    )


def _in_group_vars(root: Path) -> None:
    _edit(_group_vars(root), lambda d: d.update(ansible_ssh_extra_args="-o ProxyCommand=x"))


def _in_other_group_vars(root: Path) -> None:
    # Not read by vfleet's own group_vars reader; ansible-playbook loads it for gpu_hosts.
    path = root / "inventories/prod/group_vars/gpu_hosts.yml"
    _edit(path, lambda d: d.update(ansible_ssh_extra_args="-o ProxyCommand=x"))


def _in_host_vars(root: Path) -> None:
    path = root / "inventories/prod/host_vars/gpu-02.yml"
    _edit(path, lambda d: d.update(ansible_scp_extra_args="-o ProxyCommand=x"))


def _in_terraform_inventory(root: Path, args: str = "-o ProxyCommand=x") -> None:
    # A host var: group_vars/all.yml's ansible_ssh_common_args wins over `all: vars` here.
    host = {"ansible_host": "10.0.0.3", "ansible_ssh_common_args": args}
    doc = {"all": {"children": {"gpu_hosts": {"hosts": {"gpu-03": host}}}}}
    path = root / "artifacts/prod/hosts.yml"
    path.parent.mkdir(parents=True)
    path.write_text(yaml.safe_dump(doc))


def _in_an_ssh_config(root: Path) -> None:
    config = root / "ssh_config"
    config.write_text("Host *\n    User ubuntu\n    ProxyCommand nc %h %p\n")
    _host_var(root, "ansible_ssh_common_args", f"-F {config}")


@pytest.mark.parametrize(
    ("place", "needle"),
    [
        (_in_inventory_group, "host gpu-01: ansible_ssh_args sets ProxyCommand"),
        (_in_group_vars, "host gpu-01: ansible_ssh_extra_args sets ProxyCommand"),
        (_in_other_group_vars, "host gpu-01: ansible_ssh_extra_args sets ProxyCommand"),
        (_in_host_vars, "host gpu-02: ansible_scp_extra_args sets ProxyCommand"),
        (_in_terraform_inventory, "host gpu-03: ansible_ssh_common_args sets ProxyCommand"),
        (_in_an_ssh_config, "ansible_ssh_common_args names the ssh config "),
    ],
)
def test_every_place_that_sets_them_is_checked(tmp_path, place, needle):
    root = _bundle(tmp_path)
    place(root)
    _refused(_validate(root), needle, "ProxyCommand, which runs a command on this machine")


def test_group_vars_are_checked_before_any_host_exists(tmp_path):
    root = _bundle(tmp_path, hosts=False)
    _edit(_group_vars(root), lambda d: d.update(ansible_ssh_common_args="-o'ProxyCommand x'"))
    _refused(_validate(root), f"{_group_vars(root)}: ansible_ssh_common_args sets ProxyCommand")


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("Host *\n  ProxyCommand nc %h %p\n", "whose line 2 sets ProxyCommand"),
        ('# jump\nMatch host gpu-* exec "test -e /tmp/x"\n  User a\n', "line 2 sets Match exec"),
        ("Match !EXEC true\n", "line 1 sets Match exec"),
        ("Host *\n  KnownHostsCommand=/bin/cat\n", "sets KnownHostsCommand"),
        ("Host *\n  LocalCommand id\n", "sets LocalCommand"),
        ("Host *\n  PermitLocalCommand yes\n", "sets PermitLocalCommand yes"),
    ],
)
def test_an_ssh_config_named_with_dash_f_is_read(tmp_path, text, needle):
    root = _bundle(tmp_path)
    (root / "ansible" / "bastion.conf").write_text(text)
    # Relative: from ansible/, where ansible-playbook runs.
    _host_var(root, "ansible_ssh_common_args", "-o ConnectTimeout=5 -Fbastion.conf")
    _refused(_validate(root), f"names the ssh config {root}/ansible/bastion.conf", needle)


def test_an_ssh_config_include_is_followed(tmp_path):
    root = _bundle(tmp_path)
    (tmp_path / "inner.conf").write_text("Host *\n\n  ProxyCommand nc %h %p\n")
    (tmp_path / "outer.conf").write_text(f"Include {tmp_path}/inner*.conf\nHost *\n  User a\n")
    _host_var(root, "ansible_ssh_common_args", f"-F {tmp_path}/outer.conf")
    _refused(
        _validate(root), f"which includes {tmp_path}/inner.conf, whose line 3 sets ProxyCommand"
    )


def test_an_ssh_config_that_is_not_a_file_is_refused(tmp_path):
    root = _bundle(tmp_path)
    os.mkfifo(tmp_path / "fifo")
    _host_var(root, "ansible_ssh_common_args", f"-F {tmp_path}/fifo")
    _refused(_validate(root), f"ssh config {tmp_path}/fifo is a named pipe")


def test_ansible_cfg_ssh_settings_are_checked(tmp_path):
    root = _bundle(tmp_path)
    config = tmp_path / "ansible.cfg"
    config.write_text(
        "[defaults]\nforks = 4\n[ssh_connection]\n"
        "ssh_args = -C -o ControlMaster=auto ; a comment\n"
        "scp_extra_args = -oKnownHostsCommand=/bin/cat\n"
    )
    _refused(
        _validate(root, ANSIBLE_CONFIG=str(config)),
        f"{config}: [ssh_connection] scp_extra_args sets KnownHostsCommand, which runs",
    )
    config.write_text("[paramiko_connection]\nproxy_command = nc %h %p\n")
    _refused(
        _validate(root, ANSIBLE_CONFIG=str(config)),
        f"{config}: [paramiko_connection] proxy_command sets ProxyCommand",
    )
    config.write_text("[ssh_connection]\nssh_args = -C -o ControlMaster=auto\n")
    assert _valid(_validate(root, ANSIBLE_CONFIG=str(config))) == []


# ---- Jinja and vaulted values ------------------------------------------------------------------


def test_plain_references_are_filled_in_before_the_check(tmp_path):
    root = _bundle(tmp_path)
    _edit(_group_vars(root), lambda d: d.update(bastion_opts="ProxyCommand=nc %h %p"))
    _host_var(root, "ansible_ssh_common_args", "-o {{ bastion_opts }}")
    _refused(_validate(root), "host gpu-01: ansible_ssh_common_args sets ProxyCommand")


@pytest.mark.parametrize(
    ("value", "needle"),
    [
        ("{{ lookup('pipe', 'cat /tmp/opts') }}", "holds the Jinja expression {{ lookup("),
        ("{% if true %}-oProxyCommand=x{% endif %}", "holds the Jinja {% if true %}"),
        ("-o {{ nowhere_set }}", "holds {{ nowhere_set }}, a variable no inventory"),
        ("{{ '-oProxy' ~ 'Command=x' }}", "holds the Jinja expression"),
    ],
)
def test_expressions_that_hide_options_are_refused(tmp_path, value, needle):
    root = _bundle(tmp_path)
    _host_var(root, "ansible_ssh_common_args", value)
    _refused(
        _validate(root), f"host gpu-01: ansible_ssh_common_args {needle}", "write the options out"
    )


def test_a_vaulted_ssh_variable_is_refused(tmp_path):
    root = _bundle(tmp_path, hosts=False)
    gv = _group_vars(root)
    gv.write_text(
        gv.read_text()
        + "ansible_ssh_extra_args: !vault |\n  $ANSIBLE_VAULT;1.1;AES256\n  6162636465666768\n"
    )
    password = tmp_path / "vault-pass"
    password.write_text("pw\n")
    password.chmod(0o600)
    out = _validate(root, ANSIBLE_VAULT_PASSWORD_FILE=str(password))
    _refused(out, "ansible_ssh_extra_args holds a vaulted value, so vfleet cannot see")


def test_a_quote_left_open_is_refused(tmp_path):
    root = _bundle(tmp_path)
    _host_var(root, "ansible_ssh_common_args", "-o 'ProxyCommand=x")
    _refused(_validate(root), "cannot be split into words as Ansible splits it")


# ---- what stays allowed -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [
        "-J admin@bastion.example.com",
        "-o ProxyJump=bastion -o ProxyUseFdpass=yes",
        "-o ProxyCommand=none -o PermitLocalCommand=no -o KnownHostsCommand=none",
        "-o UserKnownHostsFile=/etc/vfleet/proxycommand-hosts -o StrictHostKeyChecking=yes",
        "-o ControlPath=/tmp/%C -D 1080",  # ssh's -D: a SOCKS port (only ssh gets extra args)
        "-F /nonexistent/ssh_config",  # ssh refuses to start: nothing runs
        "-o UserKnownHostsFile={{ vfleet_root }}/{{ vfleet_known_hosts_file }}",
        "-o HostKeyAlias={{ inventory_hostname }} -o User={{ ansible_user }}",
    ],
)
def test_options_that_run_nothing_here_pass(tmp_path, value):
    root = _bundle(tmp_path)
    _host_var(root, "ansible_ssh_extra_args", value)
    assert _valid(_validate(root)) == []


def test_the_allow_flag_turns_each_refusal_into_one_warning_per_host(tmp_path):
    root = _bundle(tmp_path)
    _edit(_group_vars(root), lambda d: d.update(ansible_ssh_common_args="-o ProxyCommand=nc %h %p"))
    _refused(_validate(root), "host gpu-01: ansible_ssh_common_args sets ProxyCommand")
    _edit(_group_vars(root), lambda d: d.update(vfleet_allow_ssh_commands=True))
    warnings = _valid(_validate(root))
    assert warnings == [
        f"vfleet: warning: host {host}: ansible_ssh_common_args sets ProxyCommand, which runs a "
        f"command on this machine at every connection (allowed by {ssh_findings.ALLOW}: true)"
        for host in ("gpu-01", "gpu-02")
    ]


def test_allowed_options_are_announced_by_validate_and_deploy_only(tmp_path, capsys):
    """Commands that only read the environment (plan-env, doctor, calibrate) stay quiet;
    validate and the deploy say it once, before anything connects."""
    from vfleet.environment.context import load_context

    root = _bundle(tmp_path)
    _edit(_group_vars(root), lambda d: d.update(ansible_ssh_common_args="-o ProxyCommand=nc %h %p"))
    _edit(_group_vars(root), lambda d: d.update(vfleet_allow_ssh_commands=True))
    environ = {"ANSIBLE_VAULT_PASSWORD_FILE": "", "ANSIBLE_CONFIG": ""}
    with pytest.MonkeyPatch.context() as patch:
        for name in environ:
            patch.delenv(name, raising=False)
        load_context("prod", root)
        assert capsys.readouterr().err == ""
        load_context("prod", root, announce=True)
        said = capsys.readouterr().err.splitlines()
    assert len(said) == 2 and all("allowed by" in line for line in said), said


def test_the_allow_flag_warns_of_values_it_cannot_see_and_of_ansible_cfg(tmp_path):
    root = _bundle(tmp_path, hosts=False)
    _edit(_group_vars(root), lambda d: d.update(vfleet_allow_ssh_commands=True))
    _edit(_group_vars(root), lambda d: d.update(ansible_ssh_extra_args="{{ lookup('env', 'X') }}"))
    config = tmp_path / "ansible.cfg"
    config.write_text("[ssh_connection]\nssh_args = -o ProxyCommand=x\n")
    warnings = _valid(_validate(root, ANSIBLE_CONFIG=str(config)))
    assert len(warnings) == 2, warnings
    assert warnings[0].startswith(f"vfleet: warning: {config}: [ssh_connection] ssh_args sets")
    assert "ansible_ssh_extra_args holds the Jinja expression" in warnings[1]


def test_the_allow_flag_can_be_one_hosts_own(tmp_path):
    root = _bundle(tmp_path)
    for host in HOSTS:
        _host_var(root, "ansible_ssh_common_args", "-o ProxyCommand=x", host)
    _host_var(root, ssh_findings.ALLOW, True, "gpu-01")
    _refused(_validate(root), "host gpu-02: ansible_ssh_common_args sets ProxyCommand")
    _host_var(root, ssh_findings.ALLOW, True, "gpu-02")
    assert len(_valid(_validate(root))) == 2


@pytest.mark.parametrize(
    ("place", "needle"),
    [
        (
            lambda r: _edit(_group_vars(r), lambda d: d.update(vfleet_allow_ssh_commands="true")),
            "vfleet_allow_ssh_commands: Input should be a valid boolean",
        ),
        (
            lambda r: _host_var(r, ssh_findings.ALLOW, 1),
            "vfleet_allow_ssh_commands: Input should be a valid boolean",
        ),
        (
            lambda r: _edit(
                r / "inventories/prod/host_vars/gpu-01.yml",
                lambda d: d.update(vfleet_allow_ssh_commands="yes please"),
            ),
            "host gpu-01: vfleet_allow_ssh_commands must be true or false",
        ),
    ],
)
def test_the_allow_flag_must_be_a_real_boolean(tmp_path, place, needle):
    root = _bundle(tmp_path)
    place(root)
    _refused(_validate(root), needle)


# ---- the deploy runs the same checks -----------------------------------------------------------


def test_deploy_refuses_before_running_anything(tmp_path, no_commands):
    root = _bundle(tmp_path)
    _host_var(root, "ansible_ssh_common_args", "-oProxyCommand=touch /tmp/x")
    with pytest.raises(UserError, match="host gpu-01: ansible_ssh_common_args sets ProxyCommand"):
        pipeline.deploy("prod", root=root)


def test_deploy_checks_terraforms_inventory_again_after_it_is_written(tmp_path):
    root = _bundle(tmp_path, hosts=False)
    ctx = context.load_context("prod", root=root)
    config = tmp_path / "ssh_config"
    config.write_text("Host *\n  ProxyCommand nc %h %p\n")
    _in_terraform_inventory(root, f"-F {config}")
    needle = f"host gpu-03: ansible_ssh_common_args names the ssh config {config}, whose line 2"
    with pytest.raises(UserError, match=needle):
        context.check_hosts(ctx)


# ---- validate refuses what render refuses ------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        (
            {"vfleet_render_extra_args": ["--host=0.0.0.0"]},
            "vfleet_render_extra_args: --extra-arg '--host=0.0.0.0': vfleet sets --host",
        ),
        (
            {"vfleet_render_extra_args": ["--enforce-eager", "--port=9000"]},
            "--extra-arg '--port=9000': vfleet sets --port for every engine",
        ),
        (
            {"vfleet_render_extra_args": ["--max-model-len=4096"]},
            "the plan sets --max-model-len",
        ),
        (
            {"vfleet_render_extra_args": ["--no-such-flag"]},
            "vLLM 0.11.1 has no --no-such-flag",
        ),
        (
            {"vfleet_served_model_name": "deepseek\ninjected=1"},
            "vfleet_served_model_name: must not contain control characters",
        ),
        (
            {"vfleet_served_model_name": "m" * 300},
            "vfleet_served_model_name: String should have at most 256 characters",
        ),
        ({"vllm_venv": "opt/vllm"}, "vllm_venv: must be an absolute path"),
    ],
)
def test_validate_refuses_what_render_refuses(tmp_path, change, needle):
    root = _bundle(tmp_path, hosts=False)
    _edit(_group_vars(root), lambda d: d.update(change))
    line = _refused(_validate(root), needle)
    assert line.startswith(f"vfleet: error: {_group_vars(root)}: ")


def test_render_flags_that_vfleet_leaves_to_the_operator_pass(tmp_path):
    root = _bundle(tmp_path, hosts=False)
    extra = ["--enforce-eager", "--dtype=bfloat16", "--max-logprobs=5"]
    _edit(_group_vars(root), lambda d: d.update(vfleet_render_extra_args=extra))
    assert _valid(_validate(root)) == []


# ---- the grammar itself --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("words", "program", "options"),
    [
        ("-vo ProxyCommand=x", "ssh", ["ProxyCommand"]),
        ("-v -o ProxyCommand=x", "scp", ["ProxyCommand"]),
        ("-p 22 -o ProxyCommand=x", "ssh", ["ProxyCommand"]),  # -p's value is not an option
        ("-l -oProxyCommand=x", "ssh", []),  # the user name "-oProxyCommand=x"
        ("-S /tmp/ctl", "ssh", []),  # ssh's control socket
        ("-S /tmp/ctl", "sftp", ["-S"]),
        ("-D 1080", "ssh", []),
        ("-D 1080", "scp", ["-D"]),
        ("-i key -I lib", "ssh", ["-I"]),
    ],
)
def test_options_are_read_as_each_programs_getopt_reads_them(tmp_path, words, program, options):
    found = ssh_options.args_findings(words, (program,), tmp_path)
    assert [f.option for f in found] == options


# ---- the files Ansible reads beyond vfleet's own --------------------------------------------


@pytest.mark.parametrize(
    "where", ["inventories/prod/group_vars/gpu_hosts.yml", "inventories/prod/more-hosts"]
)
def test_a_pipe_where_ansible_reads_is_refused_without_hanging(tmp_path, where):
    root = _bundle(tmp_path)
    os.mkfifo(root / where)
    _refused(_validate(root), f"{root / where} is not a regular file", "remove it")


def test_a_broken_group_vars_file_only_ansible_reads_is_one_line(tmp_path):
    root = _bundle(tmp_path)
    (root / "inventories/prod/group_vars/gpu_hosts.yml").write_text("a: [\n")
    _refused(_validate(root), "host gpu-01: Ansible cannot read its variables (", "--host gpu-01")
