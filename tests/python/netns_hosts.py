"""Separate hosts for the cluster tests: network namespaces on one bridge (iproute2, as root), each
with its own address on a /24 of its own, the test's process (the root namespace) on the bridge as
well. A host's link can be cut and healed (its veth pair's root side set down and up): a network
partition, not a stopped process. Everything made is removed at the end, also after a failure.

Where namespaces cannot be made (not root, no iproute2, a kernel or container that refuses), a
test fails with the reason: it must not pass by skipping. CHORUS_TEST_WITHOUT_NETNS=1 is the one
way to skip it, for such a machine (README, Tests)."""
import os
import random
import subprocess
import sys


class NetnsUnavailable(Exception):
    pass


def _ip(*args, check=True):
    p = subprocess.run(["ip", *args], capture_output=True, text=True)
    if check and p.returncode != 0:
        raise NetnsUnavailable("`ip %s` failed (exit %d): %s" % (" ".join(args), p.returncode, p.stderr.strip()))
    return p


class Hosts:
    def __init__(self, names):
        self.tag = "%04x" % random.randrange(1 << 16)  # keeps the names of concurrent runs apart
        self.subnet = "10.231.%d" % random.randrange(1, 255)
        self.bridge = "chb" + self.tag
        self.bridge_address = self.subnet + ".254"  # the test's own process, on the bridge
        self.names = list(names)
        self.address = {}
        self._made_ns, self._made_links = [], []
        try:
            _ip("link", "add", self.bridge, "type", "bridge")
            self._made_links.append(self.bridge)
            _ip("addr", "add", self.bridge_address + "/24", "dev", self.bridge)
            _ip("link", "set", self.bridge, "up")
            for i, name in enumerate(self.names):
                self._add(i + 1, name)
        except NetnsUnavailable:
            self.remove()
            raise

    def ns(self, name):
        return "ch%s-%s" % (self.tag, name)

    def veth(self, name):
        return "chv%s%d" % (self.tag, self.names.index(name))

    def _add(self, index, name):
        ns, veth = self.ns(name), self.veth(name)
        _ip("netns", "add", ns)
        self._made_ns.append(ns)
        _ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
        self._made_links.append(veth)
        _ip("link", "set", veth, "master", self.bridge)
        _ip("link", "set", veth, "up")
        addr = "%s.%d" % (self.subnet, index)
        for args in (("addr", "add", addr + "/24", "dev", "eth0"), ("link", "set", "eth0", "up"),
                     ("link", "set", "lo", "up")):
            _ip("-n", ns, *args)
        self.address[name] = addr

    def run_args(self, name, argv):
        """argv run on host `name`: in its network namespace, and nothing else of it apart (nsenter;
        `ip netns exec` would also mount a sysfs of its own over /sys, hiding the cgroups that tool
        sandboxes use). The process is the command itself."""
        return ["nsenter", "--net=/run/netns/" + self.ns(name), *argv]

    def etcd_args(self, name, data_dir, log):
        """etcd serving clients on host `name`'s address (port 2379; its peer port on loopback)."""
        url = "http://%s:2379" % self.address[name]
        return self.run_args(name, ["etcd", "--name=t", "--data-dir=" + data_dir, "--listen-client-urls=" + url,
                                    "--advertise-client-urls=" + url, "--listen-peer-urls=http://127.0.0.1:2380",
                                    "--initial-advertise-peer-urls=http://127.0.0.1:2380",
                                    "--initial-cluster=t=http://127.0.0.1:2380", "--logger=zap",
                                    "--log-outputs=" + log])

    def cut(self, name):
        """Host `name` loses the network: its link is down (its processes keep running)."""
        _ip("link", "set", self.veth(name), "down")

    def heal(self, name):
        _ip("link", "set", self.veth(name), "up")

    def remove(self):
        for link in reversed(self._made_links):
            _ip("link", "del", link, check=False)
        for ns in reversed(self._made_ns):
            _ip("netns", "del", ns, check=False)
        self._made_links, self._made_ns = [], []


def require_hosts(names):
    """Hosts, or the test ends here: it fails with the reason, or skips where
    CHORUS_TEST_WITHOUT_NETNS=1."""
    hosts, why = hosts_or_reason(names)
    if hosts is not None:
        return hosts
    if os.environ.get("CHORUS_TEST_WITHOUT_NETNS") == "1":
        print("skipped (CHORUS_TEST_WITHOUT_NETNS=1): no separate hosts here: " + why)
        sys.exit(0)
    print("FAIL separate hosts cannot be made here: %s (CHORUS_TEST_WITHOUT_NETNS=1 skips this test)" % why)
    sys.exit(1)


def hosts_or_reason(names):
    """(Hosts, None), or (None, why they cannot be made here)."""
    if os.geteuid() != 0:
        return None, "making network namespaces needs root (this test runs as uid %d)" % os.geteuid()
    try:
        return Hosts(names), None
    except FileNotFoundError:
        return None, "iproute2's `ip` is not installed (Debian: apt-get install iproute2)"
    except NetnsUnavailable as e:
        return None, str(e)
