"""Test hosts for the Ansible roles: systemd-nspawn machines in private network namespaces.

`testbed up N --profile P` boots N Debian 12 hosts from one cached debootstrap image
(`base.py`), each with real systemd and sshd, each in its own network namespace, all joined
by a bridge in a hub namespace (`network.py`). A controller namespace on the same bridge is
the only way in: SSH goes through an `ip netns exec <ctl> nc` ProxyCommand. No namespace has
a default route, so nothing a test host does can leave the machine, and the test subnet
(10.213.0.0/24) never appears in the root namespace.

Each host gets an `nvidia-smi` stand-in that replays the profile's recorded GPU outputs
(`tests/data/gpu-hosts/`), and the links into each host are shaped with `tc tbf` so that
Ethernet and InfiniBand profiles differ in measured bandwidth the way the real fabrics do,
scaled down (`profiles.py`). `testbed up` writes an Ansible inventory and an ssh config into
the testbed's state directory (`/run/vfleet-testbed/<name>/`); `testbed down` stops the hosts
and removes every namespace, mount and process the testbed made (`machines.py`).
"""
