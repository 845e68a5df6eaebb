"""What each SSH setting that runs something on the controller does, and what to do
instead (vfleet.environment.ssh_options finds them in an environment)."""

from __future__ import annotations

from dataclasses import dataclass

ALLOW = "vfleet_allow_ssh_commands"


@dataclass(frozen=True)
class Finding:
    """One setting that runs something here: what it is, what it does, what to do instead;
    `via`: how the variable reaches it (an ssh config file and its line)."""

    option: str
    why: str
    fix: str
    via: str = ""

    def error(self, place: str, variable: str) -> str:
        return (
            f"{place}: {variable}{self.via} sets {self.option}, which {self.why}: {self.fix}, "
            f"or set {ALLOW}: true if you mean it"
        )

    def warning(self, place: str, variable: str) -> str:
        return (
            f"{place}: {variable}{self.via} sets {self.option}, which {self.why} "
            f"(allowed by {ALLOW}: true)"
        )


_REMOVE = "remove it"
_LIBRARY = "loads a library into ssh on this machine"
# ssh_config keywords that run or load something, unless their value is `none`.
_KEYWORDS = {
    "proxycommand": Finding(
        "ProxyCommand",
        "runs a command on this machine at every connection",
        "use a jump host with -J",
    ),
    "localcommand": Finding(
        "LocalCommand", "runs a command on this machine after every connection", _REMOVE
    ),
    "knownhostscommand": Finding(
        "KnownHostsCommand",
        "runs a command on this machine to find host keys",
        "list the keys in a UserKnownHostsFile",
    ),
    "pkcs11provider": Finding("PKCS11Provider", _LIBRARY, _REMOVE),
    "securitykeyprovider": Finding("SecurityKeyProvider", _LIBRARY, _REMOVE),
}
_PERMIT_LOCAL = Finding(
    "PermitLocalCommand yes", "lets LocalCommand run commands on this machine", _REMOVE
)
_MATCH_EXEC = Finding(
    "Match exec", "runs a command on this machine to match hosts", "match on names (Match host)"
)
# Option letters that run or load something, by program.
_LETTERS = {
    "ssh": {"I": Finding("-I", "loads a PKCS#11 library into ssh on this machine", _REMOVE)},
    **{
        program: {
            "S": Finding(
                "-S",
                f"names the program {program} runs on this machine in place of ssh",
                "set ssh's control socket with -o ControlPath=PATH",
            ),
            "D": Finding(
                "-D",
                f"names an sftp server {program} runs on this machine in place of ssh",
                "forward ports with -o DynamicForward=PORT",
            ),
        }
        for program in ("scp", "sftp")
    },
}
