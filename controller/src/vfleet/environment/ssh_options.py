"""SSH settings that run something on the controller, refused wherever an environment sets
them (vfleet.environment.envcheck calls this module for `vfleet validate` and the deploy).

Ansible hands ssh, scp and sftp the words of five variables (ansible_ssh_args,
ansible_ssh_common_args, ansible_ssh_extra_args, ansible_scp_extra_args,
ansible_sftp_extra_args) and of the same settings in ansible.cfg's [ssh_connection]. A few
of those options make the operator's machine run a command or load a library at each
connection: ProxyCommand, LocalCommand, PermitLocalCommand yes, KnownHostsCommand,
PKCS11Provider (ssh -I), SecurityKeyProvider, `Match exec` in an ssh config named with -F,
and the program scp and sftp start in place of ssh (-S, -D). An inventory is enough to set
one, so each is refused unless the operator sets `vfleet_allow_ssh_commands: true`; then
each is one warning line. paramiko's own ProxyCommand (ansible_paramiko_proxy_command,
[paramiko_connection] proxy_command) is a command whatever it holds. A jump host (-J,
ProxyJump) starts only ssh itself and is fine.

Words are split as Ansible splits them (shlex) and each program's options are read as its
getopt reads them (`-vo ProxyCommand=x` is -v, then -o with a value). A Jinja value is
checked with its plain `{{ variable }}` references filled in; any other expression, or a
vaulted value, hides its options, so it is refused too unless allowed.
"""

from __future__ import annotations

import configparser
import glob
import re
import shlex
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from vfleet.environment.ssh_findings import (
    _KEYWORDS,
    _LETTERS,
    _MATCH_EXEC,
    _PERMIT_LOCAL,
    ALLOW,
    Finding,
)
from vfleet.errors import UserError
from vfleet.inputs.files import Vaulted, read_text

# Each variable and the programs Ansible passes its words to.
SSH_VARS: Mapping[str, tuple[str, ...]] = {
    "ansible_ssh_args": ("ssh", "scp", "sftp"),
    "ansible_ssh_common_args": ("ssh", "scp", "sftp"),
    "ansible_ssh_extra_args": ("ssh",),
    "ansible_scp_extra_args": ("scp",),
    "ansible_sftp_extra_args": ("sftp",),
}
# The command paramiko's connection runs to reach a host (its ProxyCommand), and every
# variable checked here.
PROXY_VAR = "ansible_paramiko_proxy_command"
# The programs Ansible runs here in place of ssh, scp and sftp: any other name runs that.
EXECUTABLE_VARS = {
    "ansible_ssh_executable": "ssh",
    "ansible_scp_executable": "scp",
    "ansible_sftp_executable": "sftp",
}
# A GPU host reached with the local connection runs every task on this machine instead.
CONNECTION_VAR = "ansible_connection"
VARIABLES = (*SSH_VARS, PROXY_VAR, *EXECUTABLE_VARS, CONNECTION_VAR)
# The same settings in ansible.cfg, by their [ssh_connection] key.
CFG_KEYS = {name.removeprefix("ansible_"): programs for name, programs in SSH_VARS.items()}
# The option letters of each program that take a value (the letters before ':' in its getopt
# string, OpenSSH 9).
TAKES_VALUE = {
    "ssh": frozenset("BDEFIJLOPQRSWbceilmopw"),
    "scp": frozenset("DFJMPSXcilo"),
    "sftp": frozenset("BDFJPRSXbcilos"),
}
MAX_INCLUDES = 16  # ssh's own limit on nested Include


_KEYWORD = re.compile(r'\s*"?([A-Za-z0-9]+)"?(?:\s*=\s*|\s+|$)(.*)', re.DOTALL)
_JINJA = re.compile(r"{{(.*?)}}|{%(.*?)%}|{#.*?#}", re.DOTALL)
_REFERENCE = re.compile(r"\s*([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)\s*")
# Variables Ansible sets for each host: without hosts yet (group_vars alone) they read as a
# plain word; any other reference vfleet cannot resolve (a fact from the host) hides options.
MAGIC = frozenset(
    {
        "inventory_hostname",
        "inventory_hostname_short",
        "inventory_dir",
        "inventory_file",
        "group_names",
        "playbook_dir",
        "ansible_host",
        "ansible_port",
        "ansible_user",
    }
)

Lookup = Callable[[str], Any]


# ---- reading options ----------------------------------------------------------------------


def _words(text: str) -> list[str]:
    try:
        return shlex.split(text)
    except ValueError:
        return text.split()


def config_line(line: str) -> Finding | None:
    """What one ssh_config line (or one -o value) runs here, if anything."""
    found = _KEYWORD.match(line)
    if found is None:
        return None
    keyword, rest = found.group(1).lower(), found.group(2)
    values = [w.lower() for w in _words(rest)]
    first = values[0] if values else ""
    if keyword in _KEYWORDS and first != "none":
        return _KEYWORDS[keyword]
    if keyword == "permitlocalcommand" and first in ("yes", "true"):
        return _PERMIT_LOCAL
    if keyword == "match" and any(v.lstrip("!") == "exec" for v in values):
        return _MATCH_EXEC
    return None


def _options(words: list[str], program: str) -> Iterator[tuple[str, str]]:
    """(letter, value) of each option in `words` as `program`'s getopt reads them: letters
    bundle (-vo X), a value follows its letter in the same word or is the next word."""
    takes = TAKES_VALUE[program]
    at = 0
    while at < len(words):
        word = words[at]
        at += 1
        if not word.startswith("-") or word == "-":
            continue
        letters = word[1:]
        for index, letter in enumerate(letters):
            if letter not in takes:
                yield letter, ""
                continue
            value = letters[index + 1 :]
            if not value and at < len(words):
                value, at = words[at], at + 1
            yield letter, value
            break


def args_findings(text: str, programs: tuple[str, ...], config_dir: Path) -> list[Finding]:
    """What the words of one variable run here, for each program they reach, including
    what an ssh config they name with -F runs (relative paths: from `config_dir`)."""
    words = shlex.split(text)  # ValueError: the caller names the variable
    found: list[Finding] = []
    for program in programs:
        for letter, value in _options(words, program):
            finding = _LETTERS.get(program, {}).get(letter)
            if letter == "o":
                finding = config_line(value)
            elif letter == "F":
                found += config_file_findings(value, config_dir)
            if finding is not None:
                found.append(finding)
    return list(dict.fromkeys(found))


# ---- ssh config files ---------------------------------------------------------------------


def config_file_findings(name: str, config_dir: Path) -> list[Finding]:
    """What an ssh config file (and the files it includes) runs here. A missing file runs
    nothing: ssh refuses to start without it."""
    if "\0" in name:
        return []  # no program can be handed this path: ssh never starts
    path = Path(name).expanduser()
    path = path if path.is_absolute() else config_dir / path
    if not path.exists():
        return []
    top = f" names the ssh config {_path(path)}"
    return [
        replace(finding, via=top + _included(path, file) + f", whose line {line}")
        for file, line, finding in _config_lines(path, 0)
    ]


def _included(top: Path, file: Path) -> str:
    return "" if file == top else f", which includes {_path(file)}"


def _config_lines(path: Path, depth: int) -> Iterator[tuple[Path, int, Finding]]:
    if depth > MAX_INCLUDES:
        raise UserError(f"{path}: ssh config includes nest past {MAX_INCLUDES}: flatten them")
    text = read_text(path, "ssh config")
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        keyword = _KEYWORD.match(line)
        if keyword and keyword.group(1).lower() == "include":
            for included in _includes(keyword.group(2)):
                yield from _config_lines(included, depth + 1)
            continue
        finding = config_line(line)
        if finding is not None:
            yield path, number, finding


def _includes(patterns: str) -> Iterator[Path]:
    """The files an Include names: globs, relative to ~/.ssh as ssh reads a user config."""
    for pattern in _words(patterns):
        path = Path(pattern).expanduser()
        if not path.is_absolute():
            path = Path("~/.ssh").expanduser() / path
        yield from (Path(p) for p in sorted(glob.glob(str(path))) if Path(p).is_file())


# ---- values as Ansible templates them -----------------------------------------------------


class _Hidden(Exception):
    """A value whose options vfleet cannot see: vaulted, or a Jinja expression."""


def _expand(value: Any, lookup: Lookup, depth: int = 0) -> str:
    """`value` with its plain `{{ variable }}` references filled in; _Hidden for anything
    else Ansible would compute, and for a reference to a variable vfleet does not know."""
    if isinstance(value, Vaulted):
        raise _Hidden("a vaulted value")
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise _Hidden(f"a {type(value).__name__}, not a string of options")
    text = str(value)

    def fill(match: re.Match[str]) -> str:
        if match.group(2) is not None or depth > 8:
            raise _Hidden(f"the Jinja {_shown(match.group(0))}")
        if match.group(1) is None:
            return ""  # a {# comment #}
        reference = _REFERENCE.fullmatch(match.group(1))
        if reference is None:
            raise _Hidden(f"the Jinja expression {_shown(match.group(0))}")
        name = reference.group(1)
        found = lookup(name)
        if found is None and name in MAGIC:
            return name  # a host's own name or folder: no option in it
        if found is None:
            raise _Hidden(f"{{{{ {_shown(name)} }}}}, a variable no inventory or group_vars sets")
        return _expand(found, lookup, depth + 1)

    return _JINJA.sub(fill, text)


def _lookup_in(variables: Mapping[str, Any], extra: Mapping[str, Any]) -> Lookup:
    """A reference's value: the extra vars the deploy passes win, as in Ansible."""

    def lookup(dotted: str) -> Any:
        head = dotted.split(".")[0]
        node: Any = extra if head in extra else variables
        for part in dotted.split("."):
            if not isinstance(node, Mapping) or part not in node:
                return None
            node = node[part]
        return node

    return lookup


def _shown(text: str, limit: int = 80) -> str:
    """User text inside a one-line message: cut short, control characters escaped."""
    text = text if len(text) <= limit else text[: limit - 3] + "..."
    return text if text.isprintable() else repr(text)


def _path(path: Path) -> str:
    return _shown(str(path), 1000)


# ---- the checks -----------------------------------------------------------------------------


def _settle(place: str, variable: str, findings: list[Finding], allowed: bool) -> list[str]:
    """The first finding as the error when not allowed, else each as a warning line."""
    if findings and not allowed:
        raise UserError(findings[0].error(place, variable))
    return [f"vfleet: warning: {finding.warning(place, variable)}" for finding in findings]


def print_warnings(warnings: list[str]) -> None:
    """Printed once every check has passed: a refused run prints its one line only."""
    for line in warnings:
        print(line, file=sys.stderr)


@dataclass(frozen=True)
class Site:
    """Where ansible-playbook runs: `config_dir` its working folder (relative -F paths start
    there), `extra` the extra vars the deploy passes (vfleet_root, ...)."""

    config_dir: Path
    extra: Mapping[str, Any]


def check_place(
    place: str,
    variables: Mapping[str, Any],
    site: Site,
    allowed: bool | None = None,
    only: tuple[str, ...] = VARIABLES,
) -> list[str]:
    """The SSH variables (`only` these) one host or one group_vars set has, and the warnings
    to print; `allowed`: the flag, when the caller has read it (else read from `variables`)."""
    if allowed is None:
        allowed = allow_flag(place, variables)
    lookup = _lookup_in(variables, site.extra)
    warnings: list[str] = []
    for variable in only:
        value = variables.get(variable)
        if value is None or value == "":
            continue
        try:
            findings = _variable_findings(variable, value, lookup, site)
        except _Hidden as hidden:
            what = f"{place}: {variable} holds {hidden}, so vfleet cannot see which SSH options"
            if allowed:
                warnings.append(f"vfleet: warning: {what} it sets (allowed by {ALLOW}: true)")
                continue
            raise UserError(
                f"{what} it sets: write the options out (plain {{{{ variable }}}} references "
                f"are fine), or set {ALLOW}: true if you mean it"
            ) from None
        except ValueError:
            raise UserError(
                f"{place}: {variable} {_shown(str(value))} cannot be split into words as "
                "Ansible splits it (an unclosed quote?): fix the quoting"
            ) from None
        warnings += _settle(place, variable, findings, allowed)
    return warnings


def _variable_findings(variable: str, value: Any, lookup: Lookup, site: Site) -> list[Finding]:
    if variable == PROXY_VAR:
        return [_KEYWORDS["proxycommand"]]  # the whole value is the command
    if variable in EXECUTABLE_VARS:
        return _executable_findings(EXECUTABLE_VARS[variable], _expand(value, lookup))
    if variable == CONNECTION_VAR:
        connection = _expand(value, lookup).strip()
        if connection in ("local", "ansible.builtin.local"):
            return [
                Finding(
                    f"connection {connection}",
                    "runs every task on this machine instead of the host",
                    "reach the host over ssh (the default)",
                )
            ]
        return []
    return args_findings(_expand(value, lookup), SSH_VARS[variable], site.config_dir)


def _executable_findings(program: str, path: str) -> list[Finding]:
    if Path(path.strip()).name == program:
        return []
    return [
        Finding(
            f"{program} executable {_shown(path.strip(), 60)!r}",
            f"runs that program on this machine in place of {program}",
            f"leave it unset or name the {program} binary itself",
        )
    ]


def allow_flag(place: str, variables: Mapping[str, Any]) -> bool:
    flag = variables.get(ALLOW)
    if flag is None or isinstance(flag, bool):
        return flag is True
    raise UserError(
        f"{place}: {ALLOW} must be true or false (a YAML boolean, unquoted), got "
        f"{_shown(repr(flag))}: write true or false"
    )


def check_hosts(hosts: Iterator[tuple[str, Mapping[str, Any]]], site: Site) -> list[str]:
    """Each host's SSH variables as ansible-playbook resolves them (inventory.playbook_vars)."""
    return [line for name, found in hosts for line in check_place(f"host {name}", found, site)]


def check_ansible_cfg(path: Path, site: Site, allowed: bool) -> list[str]:
    """ansible.cfg's [ssh_connection] settings, read as Ansible reads them (raw, `;` starts
    an inline comment). A missing file sets nothing."""
    if not path.exists():
        return []
    parser = configparser.ConfigParser(inline_comment_prefixes=(";",), interpolation=None)
    try:
        parser.read_string(read_text(path, "Ansible config"), str(path))
    except configparser.Error as exc:
        first = str(exc).strip().splitlines()[0]
        raise UserError(f"{path}: Ansible cannot read it ({_shown(first)}): fix it") from None
    proxy = parser.get("paramiko_connection", "proxy_command", fallback="")
    found = [_KEYWORDS["proxycommand"]] if proxy.strip() else []
    warnings = _settle(_path(path), "[paramiko_connection] proxy_command", found, allowed)
    for key, programs in CFG_KEYS.items():
        value = parser.get("ssh_connection", key, fallback="")
        try:
            findings = args_findings(value, programs, site.config_dir)
        except ValueError:
            raise UserError(
                f"{path}: [ssh_connection] {key} cannot be split into words (an unclosed "
                "quote?): fix the quoting"
            ) from None
        warnings += _settle(_path(path), f"[ssh_connection] {key}", findings, allowed)
    return warnings
