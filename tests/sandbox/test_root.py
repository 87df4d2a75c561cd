"""The escape battery for a sandbox's own root (E2B's user "root"): commands
run as uid 0 of the sandbox's user namespace, which is an unprivileged host
uid, with file-ownership capabilities only. Each probe runs through a real
gateway in a real sandbox, as E2B's SDKs start commands (envd's
process.Process/Start with "Authorization: Basic base64('root:')"), and
asserts the denial and a positive control."""
import base64
import os
import time
import urllib.parse
import urllib.request

import pytest

from gbclient import e2b_create, e2b_kill, envd_headers, envd_sh, start_gateway

ROOT = "Basic " + base64.b64encode(b"root:").decode()
USER = "Basic " + base64.b64encode(b"user:").decode()
# CAP_CHOWN, CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER
ROOT_CAPS = "000000000000000f"


@pytest.fixture(scope="module")
def box(gateway):
    sb = e2b_create(gateway)
    yield sb
    e2b_kill(gateway, sb)


def sh(gateway, sb, script, auth=ROOT, timeout=60):
    """Runs script as a command, as root unless auth says otherwise."""
    return envd_sh(gateway, sb, script, auth, timeout)


def py(gateway, sb, code, auth=ROOT):
    """Runs Python code as a command; returns what it printed, parsed."""
    rc, out, err = sh(gateway, sb, "exec python3 -c " + shell_quote(code), auth)
    assert rc == 0, (rc, out, err)
    return eval(out)


def shell_quote(s):
    return "'" + s.replace("'", "'\"'\"'") + "'"


SYSCALL = """
import ctypes, errno, os
libc = ctypes.CDLL(None, use_errno=True)
def call(nr, *args):
    ctypes.set_errno(0)
    r = libc.syscall(nr, *args)
    return 'ok' if r >= 0 else errno.errorcode[ctypes.get_errno()]
def mount(src, target, fstype, flags, data=None):
    ctypes.set_errno(0)
    r = libc.mount(src, target, fstype, ctypes.c_ulong(flags), data)
    return 'ok' if r == 0 else errno.errorcode[ctypes.get_errno()]
"""


def test_root_is_uid_0_inside_with_file_capabilities_only(gateway, box):
    status = py(gateway, box, "print(repr(open('/proc/self/status').read()))")
    fields = dict(line.split(":\t", 1) for line in status.splitlines() if ":\t" in line)
    assert fields["Uid"].split() == ["0", "0", "0", "0"]
    assert fields["CapEff"].strip() == ROOT_CAPS
    assert fields["CapPrm"].strip() == ROOT_CAPS
    assert fields["CapBnd"].strip() == ROOT_CAPS
    assert fields["CapInh"].strip() == "0000000000000000"
    assert fields["CapAmb"].strip() == "0000000000000000"
    assert fields["NoNewPrivs"].strip() == "1"
    assert fields["Seccomp"].strip() == "2"
    # Positive control: the default user is still "user", with nothing.
    rc, out, _ = sh(gateway, box, "id -u; grep CapEff /proc/self/status", auth=None)
    assert rc == 0 and out.split()[0] == "1000" and out.split()[-1] == "0" * 16, out
    rc, out, _ = sh(gateway, box, "id -u", auth=USER)
    assert out == "1000\n"


def test_root_maps_to_an_unprivileged_host_uid(gateway, box):
    rc, out, _ = sh(gateway, box, "cat /proc/self/uid_map /proc/self/gid_map")
    lines = [line.split() for line in out.splitlines()]
    assert rc == 0 and len(lines) == 4, out
    inside_root = [host for inside, host, count in lines if inside == "0"]
    assert len(inside_root) == 2 and all(int(h) != 0 for h in inside_root), out
    assert all(count == "1" for _, _, count in lines), out
    # Seen from the host, root's process runs as that uid, not as 0.
    marker = f"sleep {4000 + os.getpid() % 1000}.5"
    rc, _, _ = sh(gateway, box, f"{marker} >/dev/null 2>&1 & echo started")
    host_uid = None
    deadline = time.time() + 10
    while host_uid is None and time.time() < deadline:
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if f.read().replace(b"\0", b" ").strip() != marker.encode():
                        continue
                with open(f"/proc/{pid}/status") as f:
                    status = f.read()
            except OSError:
                continue
            host_uid = int(status.split("\nUid:\t", 1)[1].split()[0])
        time.sleep(0.1)
    assert host_uid is not None, "the command was not found on the host"
    assert host_uid != 0 and str(host_uid) == inside_root[0], (host_uid, inside_root)


def test_root_cannot_remount_or_mount(gateway, box):
    code = SYSCALL + """
MS_RDONLY, MS_REMOUNT, MS_BIND = 1, 32, 4096
out = [mount(None, b'/', None, MS_REMOUNT),
       mount(None, b'/usr', None, MS_REMOUNT | MS_BIND),
       mount(None, b'/etc', None, MS_REMOUNT | MS_BIND),
       mount(b'none', b'/tmp', b'tmpfs', 0),
       mount(b'/usr', b'/tmp', None, MS_BIND),
       call(430, b'tmpfs', 0),              # fsopen
       call(428, -100, b'/usr', 1),         # open_tree
       call(442, -100, b'/usr', 0, 0, 0),   # mount_setattr
       call(272, 0x20000),                  # unshare(CLONE_NEWNS)
       call(272, 0x10000000)]               # unshare(CLONE_NEWUSER)
print(repr(out))
"""
    assert py(gateway, box, code) == ["EPERM"] * 10
    # And the mount table says what it said: the host's entries read-only,
    # the overlays nosuid and nodev.
    rc, out, _ = sh(gateway, box, "mount -o remount,rw /etc/ssl; mount -o remount,suid,dev /usr; "
                                  "grep -E ' /(usr|etc/ssl) ' /proc/mounts")
    ssl, usr = sorted(out.splitlines(), key=lambda line: " /usr " in line)
    assert " ro," in ssl, out
    assert "overlay" in usr and "nosuid" in usr and "nodev" in usr, out


def test_root_writes_land_in_its_own_layer(gateway, box):
    """The root is writable as E2B's is: the sandbox's root writes anywhere
    in it (/usr/local, /opt, a new /etc file, /root, even a copy of a host
    program), and each write lands in the sandbox's own upper layer: the
    host's files stay as they were and another sandbox sees none of it.
    What is the host's stays read-only: the curated /etc entries and
    /proc/sys."""
    before = os.stat("/usr/bin/true")
    code = """
import errno
out = []
for path in ('/usr/local/lib/evil', '/usr/evil', '/opt/evil', '/etc/evil', '/evil',
             '/root/evil', '/etc/passwd', '/usr/bin/true', '/etc/ssl/evil',
             '/proc/sys/kernel/hostname'):
    try:
        open(path, 'a').write('x'); out.append('written')
    except OSError as e:
        out.append(errno.errorcode[e.errno])
print(repr(out))
"""
    assert py(gateway, box, code) == ["written"] * 8 + ["EROFS", "EACCES"]
    assert py(gateway, box, "print(repr(open('/usr/bin/true', 'rb').read()[-1:]))") == b"x"
    for path in ("/usr/local/lib/evil", "/usr/evil", "/opt/evil", "/etc/evil", "/evil",
                 "/root/evil", "/etc/ssl/evil"):
        assert not os.path.exists(path), path
    after = os.stat("/usr/bin/true")
    assert (after.st_size, after.st_mtime_ns) == (before.st_size, before.st_mtime_ns)
    # The user cannot write what root owns; root's files are root's.
    rc, out, _ = sh(gateway, box, "stat -c %u:%g /usr/evil /opt /usr/local/lib; "
                                  "touch /usr/local/lib/mine", auth=USER)
    assert out.split() == ["0:0"] * 3 and rc != 0, out
    other = e2b_create(gateway)
    try:
        rc, out, _ = sh(gateway, other, "for p in /usr/evil /opt/evil /etc/evil /evil; do "
                                        "test -e $p && echo found $p; done; "
                                        "tail -c 1 /usr/bin/true | od -An -c")
        assert out.split() == ["\\0"], out
    finally:
        e2b_kill(gateway, other)
    # Positive control: root writes where the sandbox may.
    assert py(gateway, box, "print([open(p, 'w').write('ok') for p in "
                            "('/home/user/root-f', '/tmp/root-f')])") == [2, 2]


def test_root_cannot_reach_the_host(gateway, box):
    code = """
import errno, os
out = []
for probe in (lambda: os.listdir('/proc/1/root/'), lambda: os.readlink('/proc/1/root'),
              lambda: open('/proc/1/environ').read(), lambda: open('/etc/shadow').read()):
    try:
        probe(); out.append('read')
    except OSError as e:
        out.append(errno.errorcode[e.errno])
print(repr([out, open('/proc/1/cmdline').read()]))
"""
    out, init = py(gateway, box, code)
    assert out == ["EACCES", "EACCES", "EACCES", "ENOENT"], out
    # /proc/1 is the sandbox's own init, not the host's.
    assert init.startswith("glovebox-init"), init


def test_root_cannot_load_modules_or_gain_capabilities(gateway, box):
    code = SYSCALL + """
import os
fd = os.open('/usr/bin/true', os.O_RDONLY)
out = [call(313, fd, b'', 0),          # finit_module
       call(175, 0, 0, b''),           # init_module
       call(176, b'loop', 0),          # delete_module
       call(246, 0, 0, 0, 0),          # kexec_load
       call(169, 0xfee1dead, 672274793, 0x4321fedc, 0),  # reboot
       call(101, 16, 1, 0, 0)]         # ptrace(PTRACE_ATTACH, 1)
# Without CAP_SETUID/CAP_SETGID root keeps its ids: not user's 1000
# (EPERM), nor an id the namespace does not map (EINVAL).
for uid in (1000, 5000):
    ctypes.set_errno(0)
    out.append('ok' if libc.setresuid(uid, uid, uid) == 0 else errno.errorcode[ctypes.get_errno()])
    ctypes.set_errno(0)
    out.append('ok' if libc.setresgid(uid, uid, uid) == 0 else errno.errorcode[ctypes.get_errno()])
print(repr(out))
"""
    assert py(gateway, box, code) == ["EPERM"] * 8 + ["EINVAL"] * 2


def test_root_cannot_signal_or_read_the_users_processes(gateway, box):
    rc, out, _ = sh(gateway, box, "sleep 600 >/dev/null 2>&1 & echo $!", auth=None)
    pid = int(out)
    rc, out, err = sh(gateway, box, f"kill {pid}; echo rc=$?; cat /proc/{pid}/environ; echo rc=$?")
    assert "rc=1\nrc=1\n" == out, (out, err)
    # Positive control: its own user may.
    rc, out, _ = sh(gateway, box, f"kill {pid}; echo rc=$?", auth=None)
    assert out == "rc=0\n"


def test_root_cannot_chown_its_way_out(gateway, box):
    code = """
import errno, os, shutil, stat
out = []
open('/home/user/owned', 'w').write('x')
for uid in (12345, 65534, 2 ** 31):
    try:
        os.chown('/home/user/owned', uid, uid); out.append('chowned')
    except OSError as e:
        out.append(errno.errorcode[e.errno])
os.chown('/home/user/owned', 1000, 1000)   # positive control: a mapped id
out.append(os.stat('/home/user/owned').st_uid)
# A setuid-root copy of a shell: root may make it, but it gives nothing.
shutil.copy('/usr/bin/id', '/home/user/suid-id')
os.chown('/home/user/suid-id', 0, 0)
os.chmod('/home/user/suid-id', 0o4755)
out.append(oct(os.stat('/home/user/suid-id').st_mode & 0o7777))
print(repr(out))
"""
    assert py(gateway, box, code) == ["EINVAL", "EINVAL", "EINVAL", 1000, "0o4755"]
    rc, out, _ = sh(gateway, box, "/home/user/suid-id -u", auth=None)
    assert rc == 0 and out == "1000\n", out


def test_root_reaches_the_users_files(gateway, box):
    rc, _, _ = sh(gateway, box, "mkdir -p /home/user/private && echo secret > "
                                "/home/user/private/f && chmod 600 /home/user/private/f && "
                                "chmod 700 /home/user/private", auth=None)
    assert rc == 0
    rc, out, _ = sh(gateway, box, "cat /home/user/private/f && echo more >> /home/user/private/f "
                                  "&& ls -ln /home/user/private")
    assert rc == 0 and out.startswith("secret\n") and " 1000 1000 " in out, out
    # Through the files API too, and what root writes there is root's.
    q = urllib.parse.urlencode({"path": "/home/user/private/f", "username": "root"})
    req = urllib.request.Request(gateway.base + "/e2b/files?" + q)
    for k, v in envd_headers(box).items():
        req.add_header(k, v)
    with urllib.request.urlopen(req, timeout=30) as resp:
        assert resp.read() == b"secret\nmore\n"
    status, body, _ = gateway.request(
        "POST", "/e2b/files?" + urllib.parse.urlencode({"path": "/home/user/private/g",
                                                        "username": "root"}),
        raw=b"from root", token="",
        headers=dict(envd_headers(box), **{"Content-Type": "application/octet-stream"}))
    assert status == 200, body
    rc, out, _ = sh(gateway, box, "stat -c %u:%g:%a /home/user/private/g")
    assert out == "0:0:644\n", out
    # And root's private file is root's: the user cannot read it.
    rc, _, _ = sh(gateway, box, "chmod 600 /home/user/private/g")
    rc, _, err = sh(gateway, box, "cat /home/user/private/g", auth=None)
    assert rc != 0 and "Permission denied" in err


def test_root_files_stay_inside(gateway, box):
    """As root the files API still resolves every path inside the sandbox,
    read-only mounts stay read-only, and what it writes is the sandbox's."""
    sh(gateway, box, "ln -sf /etc/shadow /home/user/shadow-link; "
                     "ln -sfn /proc/1/root /home/user/root-link")
    for path in ("/etc/shadow", "/home/user/shadow-link", "/home/user/root-link/etc/hostname",
                 "../../../../etc/shadow"):
        q = urllib.parse.urlencode({"path": path, "username": "root"})
        status, _, _ = gateway.request("GET", "/e2b/files?" + q, token="",
                                       headers=envd_headers(box))
        assert status in (400, 403, 404), (path, status)
    for path, expect in (("/etc/ssl/evil", 403), ("/proc/sys/kernel/hostname", 403),
                         ("/usr/evil-by-files", 200), ("/etc/passwd", 200)):
        q = urllib.parse.urlencode({"path": path, "username": "root"})
        status, _, _ = gateway.request(
            "POST", "/e2b/files?" + q, raw=b"x", token="",
            headers=dict(envd_headers(box), **{"Content-Type": "application/octet-stream"}))
        assert status == expect, (path, status)
    # What root may write lands in the sandbox's own layer only.
    assert not os.path.exists("/usr/evil-by-files") and not os.path.exists("/etc/ssl/evil")
    assert sh(gateway, box, "cat /usr/evil-by-files /etc/passwd")[1] == "xx"


def test_files_api_gets_no_more_than_its_user_has(gateway, box):
    """The files API acts with the ids of whom it acts for and none of the
    gateway's own privileges (with euid 0 it would own every sandbox's user
    namespace, and with it CAP_SYS_PTRACE over its processes): no process's
    private /proc files open through it, not init's, not the user's."""
    rc, out, _ = sh(gateway, box, "sleep 600 >/dev/null 2>&1 & echo $!", auth=None)
    pid = int(out)

    def get(path, user):
        q = urllib.parse.urlencode({"path": path, "username": user})
        return gateway.request("GET", "/e2b/files?" + q, token="", headers=envd_headers(box))

    try:
        for path in (f"/proc/{pid}/environ", "/proc/1/environ", "/proc/1/mem",
                     f"/proc/{pid}/mem"):
            for user in ("user", "root"):
                status, body, _ = get(path, user)
                assert status in (403, 404), (path, user, status, body)
        status, body, _ = gateway.request(
            "POST", "/e2b/files?" + urllib.parse.urlencode({"path": "/proc/1/mem",
                                                            "username": "root"}),
            raw=b"\x90" * 16, token="",
            headers=dict(envd_headers(box), **{"Content-Type": "application/octet-stream"}))
        assert status in (403, 404), (status, body)
        # Positive control: what every process may read opens and reads
        # (to its end: a /proc file's size says 0).
        for user in ("user", "root"):
            q = urllib.parse.urlencode({"path": f"/proc/{pid}/cmdline", "username": user})
            req = urllib.request.Request(gateway.base + "/e2b/files?" + q,
                                         headers=envd_headers(box))
            with urllib.request.urlopen(req, timeout=60) as resp:
                assert (resp.status, resp.read()) == (200, b"sleep\x00600\x00")
    finally:
        sh(gateway, box, f"kill {pid}", auth=None)


def test_other_user_names_are_refused(gateway, box):
    for name in (b"admin", b"nobody", b"0", b""):
        auth = "Basic " + base64.b64encode(name + b":").decode()
        if name:
            with pytest.raises(RuntimeError, match="use 'user' or 'root'"):
                sh(gateway, box, "id -u", auth=auth)
        else:
            assert sh(gateway, box, "id -u", auth=auth)[1] == "1000\n"
    q = urllib.parse.urlencode({"path": "/home/user/x", "username": "admin"})
    status, body, _ = gateway.request("GET", "/e2b/files?" + q, token="",
                                      headers=envd_headers(box))
    assert status == 400 and "use 'user' or 'root'" in body["message"], body
    status, body, _ = gateway.request("POST", "/e2b/filesystem.Filesystem/Stat",
                                      {"path": "/home/user"}, token="",
                                      headers=envd_headers(box, "Basic !!!"))
    assert status == 400 and body["code"] == "invalid_argument", body


def test_an_unprivileged_gateway_has_no_root_to_give():
    """Unprivileged, a sandbox's user namespace maps "user" alone: "root" is
    refused with the reason, never run as anyone else; "user" and the
    watchers work as ever."""
    from gbclient import envd_rpc, start_gateway
    gw = start_gateway(runner=["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"])
    try:
        sb = e2b_create(gw)
        with pytest.raises(RuntimeError, match="needs a sandbox with a root of its own"):
            envd_sh(gw, sb, "id -u", auth=ROOT)
        assert envd_sh(gw, sb, "id -u")[1] == "1000\n"
        q = urllib.parse.urlencode({"path": "/home/user/x", "username": "root"})
        status, body, _ = gw.request("GET", "/e2b/files?" + q, token="", headers=envd_headers(sb))
        assert status == 400 and "root of its own" in body["message"], body
        status, reply = envd_rpc(gw, sb, "filesystem.Filesystem/CreateWatcher",
                                 {"path": "/home/user"})
        assert status == 200, reply
        envd_sh(gw, sb, "touch /home/user/new")
        deadline = time.time() + 10
        seen = []
        while {"name": "new", "type": "EVENT_TYPE_CREATE"} not in seen:
            assert time.time() < deadline, seen
            status, got = envd_rpc(gw, sb, "filesystem.Filesystem/GetWatcherEvents",
                                   {"watcherId": reply["watcherId"]})
            seen += got.get("events", [])
            time.sleep(0.1)
        e2b_kill(gw, sb)
    finally:
        gw.stop()


def test_root_layer_is_within_the_disk_limit():
    """What root writes into the root (here /opt) counts against the
    sandbox's disk limit, with its /tmp and home: one tmpfs of --disk-mb.
    Past it, ENOSPC inside; removing the file gives the room back."""
    gw = start_gateway("--disk-mb", "64")
    sb = e2b_create(gw)
    try:
        code = """
import errno, os
def fill(path):
    n = 0
    try:
        with open(path, 'wb') as f:
            while n < 256:
                f.write(b'x' * 1048576); f.flush(); n += 1
    except OSError as e:
        return n, errno.errorcode[e.errno]
    return n, None
opt = fill('/opt/big')
tmp = fill('/tmp/big')
os.unlink('/opt/big')
print(repr([opt, tmp, fill('/tmp/big')]))
"""
        (opt_mb, opt_err), (tmp_mb, tmp_err), (again_mb, again_err) = py(gw, sb, code)
        assert opt_err == "ENOSPC" and 56 <= opt_mb <= 64, (opt_mb, opt_err)
        assert tmp_err == "ENOSPC" and tmp_mb <= 4, (tmp_mb, tmp_err)
        assert again_err == "ENOSPC" and 56 <= again_mb <= 64, (again_mb, again_err)
    finally:
        e2b_kill(gw, sb)
        gw.stop()


def test_every_process_is_a_child_of_init(gateway, box):
    """The kernel-host orphans each process it starts into the sandbox, so
    init is its parent (a sandbox is one tree under its init, as a
    checkpoint takes it), and init's reports carry each end: an exit code,
    a signal, and a background process that outlives its command is
    neither (it ends in init's care, unreported)."""
    for auth in (USER, ROOT):
        rc, out, err = sh(gateway, box, "cut -d' ' -f4 /proc/$$/stat", auth=auth)
        assert (rc, out.strip()) == (0, "1"), (auth, rc, out, err)
    rc, out, _ = sh(gateway, box, "sleep 30 >/dev/null 2>&1 & echo $!", auth=USER)
    orphan = int(out)
    rc, out, _ = sh(gateway, box, f"cut -d' ' -f4 /proc/{orphan}/stat", auth=USER)
    assert (rc, out.strip()) == (0, "1"), out
    assert sh(gateway, box, "exit 7", auth=USER)[0] == 7
    # A signal comes through as envd says it (exit code -1).
    assert sh(gateway, box, "kill -9 $$", auth=USER)[0] == -1
    # The orphan's end, reported by init for no process the kernel-host
    # started, changes nothing: the sandbox still runs commands.
    assert sh(gateway, box, f"kill {orphan}; echo done", auth=USER)[:2] == (0, "done\n")
    assert sh(gateway, box, "echo alive", auth=USER)[:2] == (0, "alive\n")
